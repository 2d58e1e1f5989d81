//! The KV block pool: fixed-size blocks handed to sequences, reference counted, with free
//! blocks kept in LRU order. Pure bookkeeping; the device memory lives in the backend.

use std::collections::VecDeque;

/// Index of a block in every layer's KV pool.
pub type BlockId = u32;

/// Allocation state of the pool's blocks.
#[derive(Debug)]
pub struct BlockPool {
    block_size: usize,
    ref_counts: Vec<u32>,
    free: VecDeque<BlockId>,
}

impl BlockPool {
    /// A pool of `num_blocks` blocks of `block_size` tokens, all free.
    pub fn new(num_blocks: usize, block_size: usize) -> BlockPool {
        BlockPool { block_size, ref_counts: vec![0; num_blocks], free: (0..num_blocks as BlockId).collect() }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks not held by any sequence.
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Blocks held by at least one sequence.
    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free()
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// Takes `n` free blocks (oldest-freed first), or none if fewer are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.free.len() {
            return None;
        }
        let blocks: Vec<BlockId> = self.free.drain(..n).collect();
        for &b in &blocks {
            self.ref_counts[b as usize] = 1;
        }
        Some(blocks)
    }

    /// Drops one reference to each block; blocks reaching zero become free (most recent last).
    pub fn release(&mut self, blocks: &[BlockId]) {
        for &b in blocks.iter().rev() {
            let rc = &mut self.ref_counts[b as usize];
            debug_assert!(*rc > 0, "block {b} released twice");
            *rc = rc.saturating_sub(1);
            if *rc == 0 {
                self.free.push_back(b);
            }
        }
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
}
