//! The KV block pool: fixed-size blocks handed to sequences and reference counted, plus the
//! automatic prefix cache: a full block is keyed by a hash chained over (parent hash, its
//! token ids), and stays findable after its last user leaves until it is evicted (LRU among
//! unreferenced blocks only). Pure bookkeeping; the device memory lives in the backend.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher, RandomState};

/// Index of a block in every layer's KV pool.
pub type BlockId = u32;

/// Allocation and cache state of the pool's blocks.
#[derive(Debug)]
pub struct BlockPool {
    block_size: usize,
    ref_counts: Vec<u32>,
    /// Unreferenced blocks by the time they were freed (oldest first = next evicted).
    free: BTreeMap<u64, BlockId>,
    free_stamp: Vec<Option<u64>>,
    clock: u64,
    /// Content hash of each cached full block.
    hash_of: Vec<Option<u64>>,
    cached: HashMap<u64, BlockId>,
    /// Keyed per pool so nobody outside can aim a hash collision at another request's blocks.
    hasher: RandomState,
    /// Hashes whose blocks were evicted since the last [`BlockPool::take_evicted`], when tracked.
    evicted: Option<Vec<u64>>,
}

impl BlockPool {
    /// A pool of `num_blocks` blocks of `block_size` tokens, all free and uncached.
    pub fn new(num_blocks: usize, block_size: usize) -> BlockPool {
        let free = (0..num_blocks as u64).map(|i| (i, i as BlockId)).collect();
        BlockPool {
            block_size,
            ref_counts: vec![0; num_blocks],
            free,
            free_stamp: (0..num_blocks as u64).map(Some).collect(),
            clock: num_blocks as u64,
            hash_of: vec![None; num_blocks],
            cached: HashMap::new(),
            hasher: RandomState::new(),
            evicted: None,
        }
    }

    /// Records the hashes of evicted blocks from now on (for state snapshots keyed by them).
    pub fn track_evictions(&mut self) {
        self.evicted.get_or_insert_with(Vec::new);
    }

    /// The hashes evicted since the last call (none when not tracked).
    pub fn take_evicted(&mut self) -> Vec<u64> {
        self.evicted.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks not held by any sequence (cached or not).
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Blocks held by at least one sequence.
    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free()
    }

    /// Blocks whose contents are findable by hash.
    pub fn num_cached(&self) -> usize {
        self.cached.len()
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// The hash of a full block of `tokens` following a block hashed `parent` (0 for the first).
    pub fn chain_hash(&self, parent: u64, tokens: &[u32]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write_u64(parent);
        for &t in tokens {
            h.write_u32(t);
        }
        h.finish()
    }

    /// Takes `n` free blocks (evicting the least recently freed cached ones), or none at all.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.free.len() {
            return None;
        }
        let mut blocks = Vec::with_capacity(n);
        for _ in 0..n {
            let (_, b) = self.free.pop_first()?;
            self.free_stamp[b as usize] = None;
            if let Some(h) = self.hash_of[b as usize].take() {
                self.cached.remove(&h);
                if let Some(e) = self.evicted.as_mut() {
                    e.push(h);
                }
            }
            self.ref_counts[b as usize] = 1;
            blocks.push(b);
        }
        Some(blocks)
    }

    /// Takes a reference to the cached block holding `hash`, if any.
    pub fn acquire_cached(&mut self, hash: u64) -> Option<BlockId> {
        let b = *self.cached.get(&hash)?;
        if let Some(stamp) = self.free_stamp[b as usize].take() {
            self.free.remove(&stamp);
        }
        self.ref_counts[b as usize] += 1;
        Some(b)
    }

    /// Takes references to the cached blocks of the longest chain of `windows` (each block's
    /// tokens in order, the first one's parent 0): their ids and hashes.
    pub fn acquire_chain<'a>(&mut self, windows: impl IntoIterator<Item = &'a [u32]>) -> (Vec<BlockId>, Vec<u64>) {
        let (mut blocks, mut hashes) = (Vec::new(), Vec::new());
        for w in windows {
            let hash = self.chain_hash(hashes.last().copied().unwrap_or(0), w);
            let Some(b) = self.acquire_cached(hash) else { break };
            blocks.push(b);
            hashes.push(hash);
        }
        (blocks, hashes)
    }

    /// Makes a full block findable by `hash` (unless another block already holds that content).
    pub fn register(&mut self, block: BlockId, hash: u64) {
        if self.hash_of[block as usize].is_none() && !self.cached.contains_key(&hash) {
            self.hash_of[block as usize] = Some(hash);
            self.cached.insert(hash, block);
        }
    }

    /// Drops one reference to each block; blocks reaching zero become free, the tail of a
    /// sequence before its head so that shared prefixes are evicted last.
    pub fn release(&mut self, blocks: &[BlockId]) {
        for &b in blocks.iter().rev() {
            let rc = &mut self.ref_counts[b as usize];
            debug_assert!(*rc > 0, "block {b} released twice");
            *rc = rc.saturating_sub(1);
            if *rc == 0 {
                self.free.insert(self.clock, b);
                self.free_stamp[b as usize] = Some(self.clock);
                self.clock += 1;
            }
        }
    }

    /// Forgets every cached hash (the blocks stay allocated or free as they are).
    pub fn clear_cache(&mut self) {
        if let Some(e) = self.evicted.as_mut() {
            e.extend(self.cached.keys());
        }
        self.cached.clear();
        self.hash_of.iter_mut().for_each(|h| *h = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_and_release_round_trip() {
        let mut p = BlockPool::new(4, 16);
        let a = p.allocate(3).unwrap();
        assert_eq!(p.num_free(), 1);
        assert!(p.allocate(2).is_none(), "over-allocation must fail whole");
        assert_eq!(p.num_free(), 1);
        p.release(&a);
        assert_eq!(p.num_free(), 4);
        assert_eq!(p.blocks_for(17), 2);
    }

    #[test]
    fn cached_blocks_survive_release_until_evicted() {
        let mut p = BlockPool::new(3, 2);
        let a = p.allocate(2).unwrap();
        let h0 = p.chain_hash(0, &[1, 2]);
        let h1 = p.chain_hash(h0, &[3, 4]);
        p.register(a[0], h0);
        p.register(a[1], h1);
        p.release(&a);
        assert_eq!(p.num_cached(), 2);
        assert_eq!(p.acquire_cached(h0), Some(a[0]));
        assert_eq!(p.num_free(), 2);
        // Two allocations evict the never-cached block first, then the oldest cached one (h1).
        let b = p.allocate(2).unwrap();
        assert!(!b.contains(&a[0]));
        assert_eq!(p.acquire_cached(h1), None, "evicted");
        assert_eq!(p.num_cached(), 1);
        assert!(p.take_evicted().is_empty(), "evictions are recorded only when tracked");
    }

    #[test]
    fn tracked_evictions_name_the_evicted_hashes_once() {
        let mut p = BlockPool::new(2, 2);
        p.track_evictions();
        let a = p.allocate(2).unwrap();
        let h = p.chain_hash(0, &[1, 2]);
        p.register(a[0], h);
        p.release(&a);
        assert!(p.take_evicted().is_empty());
        let _ = p.allocate(2).unwrap();
        assert_eq!(p.take_evicted(), vec![h]);
        assert!(p.take_evicted().is_empty());
    }

    #[test]
    fn a_chain_is_taken_up_to_its_first_missing_block() {
        let mut p = BlockPool::new(4, 2);
        let a = p.allocate(3).unwrap();
        let h0 = p.chain_hash(0, &[1, 2]);
        let h1 = p.chain_hash(h0, &[3, 4]);
        p.register(a[0], h0);
        p.register(a[1], h1);
        p.register(a[2], p.chain_hash(0, &[5, 6])); // right tokens, wrong parent for block 2
        p.release(&a);
        let windows: [&[u32]; 3] = [&[1, 2], &[3, 4], &[5, 6]];
        assert_eq!(p.acquire_chain(windows), (vec![a[0], a[1]], vec![h0, h1]));
        assert_eq!(p.num_free(), 2, "the two taken blocks are referenced");
        assert_eq!(p.acquire_chain([&[9u32, 9][..]]), (vec![], vec![]));
    }

    #[test]
    fn hashes_chain_over_the_parent() {
        let p = BlockPool::new(1, 2);
        assert_ne!(p.chain_hash(0, &[1, 2]), p.chain_hash(5, &[1, 2]));
        assert_eq!(p.chain_hash(5, &[1, 2]), p.chain_hash(5, &[1, 2]));
    }
}
