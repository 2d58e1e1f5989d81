//! A decoder's tie to its tensor-parallel group: the all-reduce after each row-parallel
//! projection, the gather of the vocabulary-parallel head's logits onto rank 0, and the first
//! failure the group reported (after which no collective is tried: the engine reads the fault
//! after the round and ends).

use super::blocks::RankPools;
use std::sync::{Arc, Mutex, OnceLock};
use tf_backend::{Backend, Collective};

/// One rank's place in a tensor-parallel load: which part of each split weight it holds.
#[derive(Clone)]
pub struct Shard {
    /// The group, as this rank sees it.
    pub link: Arc<TpLink>,
    /// Expert parallelism: each rank holds its part of the routed experts whole, instead of
    /// every expert's part of its intermediate rows.
    pub expert_parallel: bool,
}

impl Shard {
    /// Rank `link`'s shard, experts split by their intermediate rows.
    pub fn new(link: Arc<TpLink>) -> Shard {
        Shard { link, expert_parallel: false }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.link.group.rank()
    }

    /// Ranks in the group.
    pub fn size(&self) -> usize {
        self.link.group.size()
    }

    /// This rank's part of `n` items cut into `size` contiguous parts (even where `size`
    /// divides `n`).
    pub fn part(&self, n: usize) -> std::ops::Range<usize> {
        let (r, s) = (self.rank(), self.size());
        n * r / s..n * (r + 1) / s
    }
}

/// The group and its first failure.
pub struct TpLink {
    group: Box<dyn Collective>,
    fault: Mutex<Option<String>>,
    /// On rank 0, the followers' pools in rank order (reported when the group loaded).
    peers: OnceLock<Vec<RankPools>>,
}

impl TpLink {
    /// A link over `group`.
    pub fn new(group: Box<dyn Collective>) -> Arc<TpLink> {
        Arc::new(TpLink { group, fault: Mutex::new(None), peers: OnceLock::new() })
    }

    /// On rank 0, records the followers' pools (rank order; the first record stays).
    pub(crate) fn set_peer_pools(&self, pools: Vec<RankPools>) {
        let _ = self.peers.set(pools);
    }

    /// The followers' pools, where recorded.
    pub(crate) fn peer_pools(&self) -> Option<&[RankPools]> {
        self.peers.get().map(Vec::as_slice)
    }

    /// On rank 0, every rank's `x` in rank order; elsewhere empty; `None` once the group failed.
    pub(crate) fn gather(&self, x: &[f32]) -> Option<Vec<Vec<f32>>> {
        self.run(|g| g.gather(x))
    }

    /// The group.
    pub fn group(&self) -> &dyn Collective {
        &*self.group
    }

    /// Whether this rank plans the rounds.
    pub fn is_leader(&self) -> bool {
        self.group.rank() == 0
    }

    /// The first failure the group reported, if any.
    pub fn fault(&self) -> Option<String> {
        self.fault.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records `why` as the group's failure (the first one stays).
    pub fn fail(&self, why: String) {
        self.fault.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(why);
    }

    /// Runs `f` on the group unless it already failed, recording its failure.
    fn run<T>(&self, f: impl FnOnce(&dyn Collective) -> Result<T, tf_backend::GroupError>) -> Option<T> {
        if self.fault().is_some() {
            return None;
        }
        f(&*self.group).map_err(|e| self.fail(e.to_string())).ok()
    }

    /// `x` summed over the ranks in rank order, on the devices where the backends joined an
    /// exchange, else through the host (after a failure: left as it is).
    pub fn all_reduce<B: Backend>(&self, b: &B, x: &mut B::Act) {
        if self.fault().is_some() {
            return;
        }
        // A barrier: a one-value sum, with the group's timeouts and failures.
        let mut barrier = || self.run(|g| g.all_reduce(&mut [0.0])).is_some();
        match b.all_reduce_on_device(x, &mut barrier) {
            Some(Ok(())) => return,
            Some(Err(why)) => return self.fail(why),
            None => {}
        }
        let (rows, cols) = b.shape(x);
        let mut host = b.download(x);
        if self.run(|g| g.all_reduce(&mut host)).is_some() {
            *x = b.upload(&host, rows, cols);
        }
    }

    /// On rank 0, each row of every rank's `x` side by side in rank order (the whole
    /// vocabulary's `total` logits; zeros after a failure, which the engine reads before
    /// using them); elsewhere `x` itself.
    pub fn gather_cols<B: Backend>(&self, b: &B, x: B::Act, total: usize) -> B::Act {
        let rows = b.shape(&x).0;
        let zeros = || b.upload(&vec![0.0; rows * total], rows, total);
        // No row wanted (a prompt chunk before its last): every rank skips the gather alike.
        if rows == 0 {
            return zeros();
        }
        if self.fault().is_some() {
            return if self.is_leader() { zeros() } else { x };
        }
        // Between the devices where the backends joined an exchange (a barrier as in `all_reduce`).
        let mut barrier = || self.run(|g| g.all_reduce(&mut [0.0])).is_some();
        match b.gather_cols_on_device(&x, total, &mut barrier) {
            Some(Ok(Some(all))) => return all,
            Some(Ok(None)) => return x,
            Some(Err(why)) => {
                self.fail(why);
                return if self.is_leader() { zeros() } else { x };
            }
            None => {}
        }
        let host = b.download(&x);
        let Some(parts) = self.run(|g| g.gather(&host)) else {
            return if self.is_leader() { zeros() } else { x };
        };
        if parts.is_empty() {
            return x;
        }
        let widths: Vec<usize> = parts.iter().map(|p| p.len() / rows.max(1)).collect();
        if parts.iter().zip(&widths).any(|(p, w)| p.len() != w * rows) || widths.iter().sum::<usize>() != total {
            self.fail(format!("the ranks' logits are not {rows} whole rows of {total} columns"));
            return zeros();
        }
        let total: usize = widths.iter().sum();
        let mut out = Vec::with_capacity(rows * total);
        for r in 0..rows {
            for (p, w) in parts.iter().zip(&widths) {
                out.extend_from_slice(&p[r * w..(r + 1) * w]);
            }
        }
        b.upload(&out, rows, total)
    }

    /// The RMS norm of each row of `x` over every rank's columns (a norm over all heads, of
    /// which this rank holds `cols`), scaled by this rank's weights `w` (`1 + w` where
    /// `one_plus`): each row's sum of squares is summed over the ranks first. A rank holding a
    /// head several ranks hold (KV heads fewer than the ranks) counts it as each of them does,
    /// so the mean divides by `size * cols` either way. After a failure, `x` as it is.
    pub fn rms_norm_across<B: Backend>(&self, b: &B, x: &B::Act, w: &B::Vec, eps: f32, one_plus: bool) -> B::Act {
        let (rows, cols) = b.shape(x);
        let mut host = b.download(x);
        let mut sums: Vec<f32> = host.chunks_exact(cols.max(1)).map(|r| r.iter().map(|v| v * v).sum()).collect();
        if self.run(|g| g.all_reduce(&mut sums)).is_none() {
            return b.upload(&host, rows, cols);
        }
        let n = (self.group.size() * cols) as f32;
        let w = b.vec_values(w);
        for (row, ss) in host.chunks_exact_mut(cols.max(1)).zip(&sums) {
            let inv = 1.0 / (ss / n + eps).sqrt();
            for (v, &s) in row.iter_mut().zip(&w) {
                *v = *v * inv * if one_plus { 1.0 + s } else { s };
            }
        }
        b.upload(&host, rows, cols)
    }

    /// Sends `plan` to the followers (rank 0).
    pub fn send_plan(&self, plan: &[u8]) {
        self.run(|g| g.send_plan(plan));
    }
}
