//! A sequence's KV blocks and state slot across a tensor-parallel group, for saved sessions:
//! rank 0 has every rank read its part of some blocks (and a state slot) and gathers the parts,
//! or hands every rank its part to write. A rank's part is its own pools' bytes as its
//! backend's `read_kv_blocks` and `read_state` give them: each KV pool's K then V of the blocks,
//! in pool order, then each state pool's slot. Rank 0 learns each follower's pools when the
//! group loads (start.rs) and checks every part's length against them; a follower checks the
//! part it is handed against its own pools before writing a byte.

use crate::cache::Cache;
use crate::decoder::Decoder;
use crate::error::ModelError;
use crate::tp::Plan;
use tf_backend::{Backend, BackendError, StateShape};

/// One rank's pools as a session records them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankPools {
    /// Each KV pool's slot width (`KV heads * head width`), in pool order.
    pub kv_widths: Vec<usize>,
    /// Each state pool's one-slot shape, in layer order.
    pub state: Vec<StateShape>,
    /// The type of the KV values (the backend's `kv_dtype`).
    pub kv_dtype: tf_core::DType,
}

impl RankPools {
    /// Bytes of one pool's K and V over `blocks` blocks of `block_size` tokens.
    pub fn kv_bytes(&self, pool: usize, blocks: usize, block_size: usize) -> usize {
        2 * self.kv_dtype.kv_bytes(blocks * block_size * self.kv_widths.get(pool).copied().unwrap_or(0))
    }

    /// Bytes of a part of `blocks` blocks of `block_size` tokens, with the state slot or not.
    pub fn part_bytes(&self, blocks: usize, block_size: usize, slot: bool) -> usize {
        let kv: usize = (0..self.kv_widths.len()).map(|p| self.kv_bytes(p, blocks, block_size)).sum();
        kv + if slot { self.state.iter().map(StateShape::slot_bytes).sum() } else { 0 }
    }

    /// Whether `other` has as many pools of each kind and the same value type (ranks of one
    /// group differ at most in their widths).
    fn like(&self, other: &RankPools) -> bool {
        self.kv_widths.len() == other.kv_widths.len()
            && self.state.len() == other.state.len()
            && self.kv_dtype == other.kv_dtype
    }
}

/// `bytes` as gather words: the byte count, then the bytes four to a word (the last padded).
fn to_words(bytes: &[u8]) -> Vec<f32> {
    let mut w = Vec::with_capacity(1 + bytes.len().div_ceil(4));
    w.push(f32::from_bits(bytes.len() as u32));
    w.extend(bytes.chunks(4).map(|c| {
        let mut b = [0u8; 4];
        b[..c.len()].copy_from_slice(c);
        f32::from_bits(u32::from_le_bytes(b))
    }));
    w
}

/// The bytes of [`to_words`], or `None` where the count disagrees with the words.
fn from_words(words: &[f32]) -> Option<Vec<u8>> {
    let (n, rest) = words.split_first()?;
    let n = n.to_bits() as usize;
    if rest.len() != n.div_ceil(4) {
        return None;
    }
    let mut out: Vec<u8> = rest.iter().flat_map(|w| w.to_bits().to_le_bytes()).collect();
    out.truncate(n);
    Some(out)
}

fn refused(msg: String) -> ModelError {
    ModelError::Backend(BackendError::Device(msg))
}

impl<B: Backend> Decoder<B> {
    /// This rank's pools.
    pub fn own_pools(&self, b: &B) -> RankPools {
        RankPools { kv_widths: self.kv_widths(), state: self.state_shapes(1), kv_dtype: b.kv_dtype() }
    }

    /// Every rank's pools in rank order (one unsharded); `Err` on a sharded rank 0 that was not
    /// told its followers' pools (a group not started by `open_group`).
    pub fn rank_pools(&self, b: &B) -> Result<Vec<RankPools>, ModelError> {
        let own = self.own_pools(b);
        let Some(link) = self.tp_link() else { return Ok(vec![own]) };
        let peers = link.peer_pools().ok_or_else(|| refused("the follower ranks' pools are not known".into()))?;
        Ok(std::iter::once(own).chain(peers.iter().cloned()).collect())
    }

    /// On rank 0: every rank's part (module docs) of KV `blocks` (`block_size` tokens each) and,
    /// with `slot`, of that state slot, in rank order, each checked against that rank's pools.
    pub fn read_blocks(
        &self,
        b: &B,
        cache: &Cache<B>,
        block_size: usize,
        blocks: &[u32],
        slot: Option<u32>,
    ) -> Result<Vec<Vec<u8>>, ModelError> {
        let pools = self.rank_pools(b)?;
        self.announce(|| Plan::ReadBlocks { blocks: blocks.to_vec(), slot });
        let own = read_part(b, cache, blocks, slot);
        let parts = match self.tp_link() {
            None => vec![own],
            Some(link) => {
                let words = link
                    .gather(&to_words(&own))
                    .ok_or_else(|| refused(format!("tensor-parallel group: {}", link.fault().unwrap_or_default())))?;
                let parts: Option<Vec<Vec<u8>>> = words.iter().map(|w| from_words(w)).collect();
                parts.ok_or_else(|| refused("a rank's part of the blocks is malformed".into()))?
            }
        };
        for (r, (p, pools)) in parts.iter().zip(&pools).enumerate() {
            let want = pools.part_bytes(blocks.len(), block_size, slot.is_some());
            if p.len() != want {
                return Err(refused(format!("rank {r} read {} bytes of blocks, {want} expected", p.len())));
            }
        }
        if parts.len() != pools.len() {
            return Err(refused(format!("{} ranks' parts of {}", parts.len(), pools.len())));
        }
        Ok(parts)
    }

    /// On rank 0: writes `parts[r]` (laid out as [`Decoder::read_blocks`] gives it) on rank `r`,
    /// into KV `blocks` and, with `slot`, that state slot; each part's length is checked first.
    pub fn write_blocks(
        &self,
        b: &B,
        cache: &mut Cache<B>,
        block_size: usize,
        blocks: &[u32],
        slot: Option<u32>,
        parts: &[Vec<u8>],
    ) -> Result<(), ModelError> {
        let pools = self.rank_pools(b)?;
        if parts.len() != pools.len() {
            return Err(refused(format!("{} parts for {} ranks", parts.len(), pools.len())));
        }
        for (r, (p, pools)) in parts.iter().zip(&pools).enumerate() {
            let want = pools.part_bytes(blocks.len(), block_size, slot.is_some());
            if p.len() != want {
                return Err(refused(format!("rank {r}'s part is {} bytes, {want} expected", p.len())));
            }
        }
        self.announce(|| Plan::WriteBlocks { blocks: blocks.to_vec(), slot, parts: parts[1..].to_vec() });
        write_part(b, cache, &pools[0], block_size, blocks, slot, &parts[0]);
        match self.fault() {
            Some(f) => Err(refused(format!("tensor-parallel group: {f}"))),
            None => Ok(()),
        }
    }

    /// A follower's side of [`Plan::ReadBlocks`]: its part into rank 0's gather.
    pub(crate) fn follow_read(&self, b: &B, cache: &Cache<B>, blocks: &[u32], slot: Option<u32>) {
        if let Some(link) = self.tp_link() {
            link.gather(&to_words(&read_part(b, cache, blocks, slot)));
        }
    }

    /// A follower's side of [`Plan::WriteBlocks`]: its own part written, or why it is refused
    /// (no part for this rank, or one whose length disagrees with its pools).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn follow_write(
        &self,
        b: &B,
        cache: &mut Cache<B>,
        block_size: usize,
        blocks: &[u32],
        slot: Option<u32>,
        parts: &[Vec<u8>],
        rank: usize,
    ) -> Result<(), String> {
        let size = self.tp_size();
        if parts.len() + 1 != size {
            return Err(format!("{} parts of blocks for {} followers", parts.len(), size - 1));
        }
        let pools = self.own_pools(b);
        let part = &parts[rank - 1];
        let want = pools.part_bytes(blocks.len(), block_size, slot.is_some());
        if part.len() != want {
            return Err(format!("a part of blocks of {} bytes, this rank's pools take {want}", part.len()));
        }
        write_part(b, cache, &pools, block_size, blocks, slot, part);
        Ok(())
    }
}

/// This rank's part of `blocks` and `slot` (module docs).
fn read_part<B: Backend>(b: &B, cache: &Cache<B>, blocks: &[u32], slot: Option<u32>) -> Vec<u8> {
    let mut out = Vec::new();
    for kv in &cache.kv {
        out.extend(b.read_kv_blocks(kv, blocks));
    }
    if let Some(s) = slot {
        for st in &cache.state {
            out.extend(b.read_state(st, &[s]));
        }
    }
    out
}

/// Writes `part` (of the length `pools` says) into `blocks` and `slot`.
fn write_part<B: Backend>(
    b: &B,
    cache: &mut Cache<B>,
    pools: &RankPools,
    block_size: usize,
    blocks: &[u32],
    slot: Option<u32>,
    part: &[u8],
) {
    let mut at = 0;
    for (i, kv) in cache.kv.iter_mut().enumerate() {
        let n = pools.kv_bytes(i, blocks.len(), block_size);
        if !blocks.is_empty() {
            b.write_kv_blocks(kv, blocks, &part[at..at + n]);
        }
        at += n;
    }
    if let Some(s) = slot {
        for (st, shape) in cache.state.iter_mut().zip(&pools.state) {
            let n = shape.slot_bytes();
            b.write_state(st, &[s], &part[at..at + n]);
            at += n;
        }
    }
}

/// Checks the pools a follower reported at load against rank 0's own.
pub(crate) fn check_peer(rank: usize, own: &RankPools, peer: &RankPools) -> Result<(), String> {
    if own.like(peer) {
        return Ok(());
    }
    Err(format!(
        "rank {rank} has {} KV and {} state pools of {} values, rank 0 {} and {} of {}",
        peer.kv_widths.len(),
        peer.state.len(),
        peer.kv_dtype,
        own.kv_widths.len(),
        own.state.len(),
        own.kv_dtype
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_core::DType;

    #[test]
    fn bytes_go_through_gather_words_unchanged_and_bad_counts_are_refused() {
        for n in [0usize, 1, 3, 4, 5, 8, 1001] {
            // Every byte value, NaN bit patterns among the words included.
            let bytes: Vec<u8> = (0..n).map(|i| (i * 97 % 256) as u8 | 0x7f).collect();
            let words = to_words(&bytes);
            assert_eq!(words.len(), 1 + n.div_ceil(4));
            assert_eq!(from_words(&words.clone()), Some(bytes), "{n} bytes");
        }
        let mut words = to_words(&[1, 2, 3, 4, 5]);
        words[0] = f32::from_bits(9);
        assert_eq!(from_words(&words), None);
        assert_eq!(from_words(&[]), None);
    }

    #[test]
    fn a_part_is_every_pool_then_every_state_slot() {
        let shape = StateShape { num_slots: 1, conv_channels: 2, conv_width: 3, rec_len: 4 };
        let p = RankPools { kv_widths: vec![8, 16], state: vec![shape], kv_dtype: DType::BF16 };
        // 2 blocks of 4 tokens: K and V of 8 and 16 values a token, 2 bytes each; 10 f32 of state.
        assert_eq!(p.kv_bytes(0, 2, 4), 2 * 2 * 4 * 8 * 2);
        assert_eq!(p.part_bytes(2, 4, false), 2 * 2 * 4 * (8 + 16) * 2);
        assert_eq!(p.part_bytes(2, 4, true), 2 * 2 * 4 * (8 + 16) * 2 + 40);
        assert_eq!(p.part_bytes(0, 4, true), 40);
        let narrower = RankPools { kv_widths: vec![4, 8], ..p.clone() };
        assert!(check_peer(1, &p, &narrower).is_ok(), "ranks differ in widths only");
        let other = RankPools { kv_dtype: DType::F32, ..p.clone() };
        assert!(check_peer(1, &p, &other).unwrap_err().contains("rank 1 has 2 KV and 1 state pools of f32"));
        // A q8_0 pool's K and V: 34 bytes a block of 32 values.
        let q8 = RankPools { kv_widths: vec![32], kv_dtype: DType::Quant(tf_core::QuantType::Q8_0), ..p.clone() };
        assert_eq!(q8.kv_bytes(0, 2, 4), 2 * (2 * 4 * 32 / 32) * 34);
    }
}
