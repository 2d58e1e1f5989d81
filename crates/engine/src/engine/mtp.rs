//! Drafting with the target's multi-token-prediction head (`DraftKind::Mtp`, models' `mtp.rs`).
//! Each target forward also gives its final hidden rows; the drafter keeps those of drafting
//! sequences from the first position its head has not read. Before a round it catches each
//! drafting sequence up in one chunk: position `p` fed the token at `p + 1` and the target's
//! row at `p`, for every `p` up to the one before the last committed token, whose logits give
//! the first draft token. Each further draft token is one step at the next position, fed the
//! previous draft token and the head's own output row. The head keeps its own KV pool; the
//! positions a draft step wrote are written again by the next catch-up.
//!
//! The head's pool has a prefix cache of its own: the K/V at position `p` are a function of the
//! tokens up to `p + 1` (the target's row at `p` and the token fed there), so a full block of the
//! head's is keyed by a hash chained over its tokens and the one after it, and is registered once
//! every position in it was fed the target's own row. A sequence's first catch-up takes the
//! longest such chain of its committed tokens, so after a target prefix-cache hit the head reads
//! the K/V it wrote for the earlier request rather than recomputing them. A position whose target
//! row this engine never computed and whose block the head has not cached (a restored session, a
//! block evicted from the head's pool) is fed a zero row: the drafts there are weaker, the output
//! is the same.

use super::{Core, EngineConfig};
use crate::block_pool::{BlockId, BlockPool};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tf_backend::{AttnMeta, Backend, SeqAttn};
use tf_models::{Batch, Cache, Model, ModelError, MtpHead};

/// One sequence as the head has read it.
#[derive(Default)]
struct MtpSeq {
    block_table: Vec<BlockId>,
    /// Positions whose K/V the head's pool holds from the target's own rows.
    num_valid: usize,
    /// The target's rows the head has not read yet.
    rows: HiddenRows,
    /// The chained keys of the full blocks before `num_valid`, in order (registered where clean).
    keys: Vec<u64>,
    /// Blocks with a position fed a zero row (never registered).
    weak: Vec<bool>,
}

/// A sequence's final hidden rows of the target, kept from one position on.
#[derive(Default)]
pub(super) struct HiddenRows {
    /// The position of `rows`' first row.
    base: usize,
    /// Rows from `base` on, `width` values each.
    rows: Vec<f32>,
}

impl HiddenRows {
    /// The positions whose rows are kept.
    fn kept(&self, width: usize) -> std::ops::Range<usize> {
        self.base..self.base + self.rows.len() / width
    }

    /// Keeps `rows` at positions from `start` on, over any kept there before; rows kept before
    /// `start` stay where they join on, else they are dropped.
    pub(super) fn record(&mut self, width: usize, start: usize, rows: &[f32]) {
        let kept = self.rows.len() / width;
        if start >= self.base && start <= self.base + kept {
            self.rows.truncate((start - self.base) * width);
        } else {
            self.base = start;
            self.rows.clear();
        }
        self.rows.extend_from_slice(rows);
    }

    /// The rows at positions `from..to` (zeros where none is kept), dropping those before `to`.
    pub(super) fn take(&mut self, width: usize, from: usize, to: usize) -> Vec<f32> {
        let kept = self.kept(width);
        let mut out = Vec::with_capacity(to.saturating_sub(from) * width);
        for p in from..to {
            match kept.contains(&p) {
                true => out.extend_from_slice(&self.rows[(p - self.base) * width..(p - self.base + 1) * width]),
                false => out.resize(out.len() + width, 0.0),
            }
        }
        if to > self.base {
            let drop = (to - self.base).min(self.rows.len() / width);
            self.rows.drain(..drop * width);
            self.base = to;
        }
        out
    }
}

/// The head, its KV pool and its sequences.
pub(super) struct MtpDrafter<B: Backend> {
    head: MtpHead<B>,
    cache: Cache<B>,
    pool: BlockPool,
    seqs: HashMap<u64, MtpSeq>,
    /// The target's hidden width.
    width: usize,
}

impl<B: Backend> MtpDrafter<B> {
    /// The drafter of `head`, read from `target`'s checkpoint, with a pool as large as the target's.
    pub(super) fn new(
        target: &Model<B>,
        head: MtpHead<B>,
        backend: &B,
        cfg: &EngineConfig,
    ) -> Result<MtpDrafter<B>, ModelError> {
        let cache = head.alloc_cache(backend, cfg.num_blocks, cfg.block_size)?;
        let pool = BlockPool::new(cfg.num_blocks, cfg.block_size);
        Ok(MtpDrafter { head, cache, pool, seqs: HashMap::new(), width: target.decoder.spec.hidden_size })
    }

    /// Drops a finished sequence.
    pub(super) fn forget(&mut self, id: u64) {
        if let Some(s) = self.seqs.remove(&id) {
            self.pool.release(&s.block_table);
        }
    }

    /// Keeps the target's hidden rows `rows` of sequence `id` at positions from `start` on,
    /// over any it kept there before.
    pub(super) fn record(&mut self, id: u64, start: usize, rows: &[f32]) {
        self.seqs.entry(id).or_default().rows.record(self.width, start, rows);
    }

    /// Gives `id` blocks for `tokens` positions; false (and forgets it) when the pool is short.
    fn reserve(&mut self, id: u64, tokens: usize) -> bool {
        let have = self.seqs.get(&id).map_or(0, |s| s.block_table.len());
        match self.pool.allocate(self.pool.blocks_for(tokens).saturating_sub(have)) {
            Some(blocks) => {
                self.seqs.entry(id).or_default().block_table.extend(blocks);
                true
            }
            None => {
                self.forget(id);
                false
            }
        }
    }

    /// The rows `from..to` of sequence `id` (zeros where none is kept), dropping those before `to`;
    /// the blocks of the positions fed zeros are marked weak.
    fn take_rows(&mut self, id: u64, from: usize, to: usize) -> Vec<f32> {
        let bs = self.pool.block_size();
        let Some(s) = self.seqs.get_mut(&id) else { return vec![0.0; to.saturating_sub(from) * self.width] };
        let kept = s.rows.kept(self.width);
        for p in (from..to).filter(|p| !kept.contains(p)) {
            let b = p / bs;
            if s.weak.len() <= b {
                s.weak.resize(b + 1, false);
            }
            s.weak[b] = true;
        }
        s.rows.take(self.width, from, to)
    }

    /// Points sequence `id`, which the head has not read yet, at the cached blocks of the longest
    /// chain of `tokens` (its committed tokens); returns the positions they hold.
    fn take_cached(&mut self, id: u64, tokens: &[u32]) -> usize {
        let bs = self.pool.block_size();
        let s = self.seqs.entry(id).or_default();
        if s.num_valid > 0 || !s.block_table.is_empty() {
            return 0;
        }
        // Block i's key holds the token after it, and one position is left to feed for the
        // first draft.
        let blocks = tokens.len().saturating_sub(2) / bs;
        (s.block_table, s.keys) = self.pool.acquire_chain((0..blocks).map(|i| &tokens[i * bs..=(i + 1) * bs]));
        s.num_valid = s.keys.len() * bs;
        s.num_valid
    }

    /// Registers sequence `id`'s full blocks before its `num_valid` that no zero row was fed,
    /// keyed by `tokens` (its committed tokens, reaching at least `num_valid`).
    fn register_full(&mut self, id: u64, tokens: &[u32]) {
        let bs = self.pool.block_size();
        let Some(s) = self.seqs.get_mut(&id) else { return };
        while (s.keys.len() + 1) * bs <= s.num_valid && (s.keys.len() + 1) * bs < tokens.len() {
            let i = s.keys.len();
            let key = self.pool.chain_hash(s.keys.last().copied().unwrap_or(0), &tokens[i * bs..=(i + 1) * bs]);
            if !s.weak.get(i).copied().unwrap_or(false) {
                self.pool.register(s.block_table[i], key);
            }
            s.keys.push(key);
        }
    }
}

/// One sequence's drafting this round.
struct Job {
    id: u64,
    /// The tokens the catch-up feeds (each at the position before its own).
    feed: Vec<u32>,
    /// The catch-up's first position.
    first: usize,
    /// The target's rows at the catch-up's positions.
    rows: Vec<f32>,
    /// Draft tokens wanted.
    k: usize,
}

impl<B: Backend> Core<B> {
    /// Drafts with the MTP head for every eligible sequence.
    pub(super) fn mtp_drafts(&mut self) {
        let t = Instant::now();
        let want = self.draft_candidates();
        let Some(mtp) = self.mtp.as_mut() else { return };
        let mut jobs: Vec<Job> = Vec::new();
        for &(id, start, k, _) in &want {
            let Some(seq) = self.sched.seq(id) else { continue };
            let hit = mtp.take_cached(id, &seq.tokens[..=start]);
            self.stats.draft_cached_tokens.fetch_add(hit as u64, Ordering::Relaxed);
            // The last committed token is at `start`; the target's rows reach `start - 1`.
            let first = mtp.seqs.get(&id).map_or(0, |s| s.num_valid).min(start);
            if first == start || !mtp.reserve(id, start + k - 1) {
                continue;
            }
            let rows = mtp.take_rows(id, first, start);
            jobs.push(Job { id, feed: seq.tokens[first + 1..=start].to_vec(), first, rows, k });
        }
        let bs = mtp.pool.block_size();
        let (vocab, w) = (self.model.vocab, mtp.width);
        let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); jobs.len()];
        // Each live job's output row of the last step: the hidden row of its next one.
        let mut carried: Vec<Vec<f32>> = vec![Vec::new(); jobs.len()];
        for step in 0.. {
            let live: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].k > step).collect();
            if live.is_empty() {
                break;
            }
            let (mut ids, mut seqs, mut slots, mut rows, mut hidden) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for &i in &live {
                let job = &jobs[i];
                let Some(ms) = mtp.seqs.get(&job.id) else { continue };
                let (chunk, pos): (Vec<u32>, usize) = match step {
                    0 => (job.feed.clone(), job.first),
                    _ => (vec![drafts[i][step - 1]], job.first + job.feed.len() + step - 1),
                };
                hidden.extend_from_slice(if step == 0 { &job.rows } else { &carried[i] });
                let q_start = ids.len();
                ids.extend(&chunk);
                slots.extend((pos..pos + chunk.len()).map(|p| ms.block_table[p / bs] as usize * bs + p % bs));
                let block_table = ms.block_table.clone();
                seqs.push(SeqAttn { q_start, q_len: chunk.len(), start_pos: pos, block_table });
                rows.push(ids.len() - 1);
            }
            let meta = AttnMeta { state_slots: Vec::new(), seqs, slot_mapping: slots, block_size: bs };
            let batch = Batch { ids: &ids, meta: &meta, logits_rows: &rows, held: None };
            let hidden = self.backend.upload(&hidden, ids.len(), w);
            let (logits, out) = mtp.head.forward(&self.backend, &self.model.decoder, &batch, &hidden, &mut mtp.cache);
            // Only the ids cross to the host on a device that picks them in place.
            let (best, out) = (self.backend.argmax_rows_in_round(&logits), self.backend.download(&out));
            for (row, (&id, &i)) in best.iter().zip(&live).enumerate() {
                drafts[i].push(vocab.sampled(id as usize));
                carried[i] = out[row * w..(row + 1) * w].to_vec();
            }
        }
        for (job, draft) in jobs.into_iter().zip(drafts) {
            if let Some(ms) = mtp.seqs.get_mut(&job.id) {
                ms.num_valid = job.first + job.feed.len();
            }
            if let Some(seq) = self.sched.seq(job.id) {
                mtp.register_full(job.id, &seq.tokens);
            }
            self.sched.set_draft(job.id, draft);
        }
        self.stats.draft_micros.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::HiddenRows;

    /// Rows of width 2 for positions `from..to`, each `[p, p]`.
    fn rows(from: usize, to: usize) -> Vec<f32> {
        (from..to).flat_map(|p| [p as f32, p as f32]).collect()
    }

    #[test]
    fn keeps_rows_by_position_and_overwrites_from_the_start_fed() {
        let mut h = HiddenRows::default();
        h.record(2, 0, &rows(0, 5));
        // A verify round fed from position 3 over two rejected drafts: 3.. rewritten.
        h.record(2, 3, &[9.0, 9.0, 8.0, 8.0]);
        assert_eq!(h.take(2, 0, 4), [rows(0, 3), vec![9.0, 9.0]].concat());
        // Taken rows are dropped; the one at 4 stays.
        assert_eq!(h.take(2, 4, 5), vec![8.0, 8.0]);
        assert!(h.rows.is_empty() && h.base == 5);
    }

    #[test]
    fn positions_without_rows_read_as_zeros() {
        let mut h = HiddenRows::default();
        // A prefix hit: the target's rows start at 32.
        h.record(2, 32, &rows(32, 34));
        assert_eq!(h.take(2, 30, 34), [vec![0.0; 4], rows(32, 34)].concat());
        // A gap past the kept rows restarts them.
        h.record(2, 40, &rows(40, 41));
        assert_eq!(h.take(2, 39, 41), [vec![0.0; 2], rows(40, 41)].concat());
    }
}
