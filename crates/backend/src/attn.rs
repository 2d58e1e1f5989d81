//! Attention metadata for one round over a paged KV cache (vLLM's block tables and slot mapping).

/// The shape of one layer's KV pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvShape {
    /// Blocks in the pool.
    pub num_blocks: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// KV heads.
    pub num_kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// The pool keeps K alone and attention reads each slot's V from its K (a latent cache:
    /// MLA's compressed `c_kv` and rope key, whose values are the same row).
    pub latent: bool,
}

/// One sequence's part of a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqAttn {
    /// First row of this sequence's queries in the round's flat batch.
    pub q_start: usize,
    /// Number of query rows (tokens advanced this round).
    pub q_len: usize,
    /// Tokens already in the cache before this round; the first query sits at this position.
    pub start_pos: usize,
    /// Physical block of each logical block of the sequence.
    pub block_table: Vec<u32>,
}

/// Everything attention needs for a round.
#[derive(Clone, Debug, Default)]
pub struct AttnMeta {
    /// The sequences of the round, in row order.
    pub seqs: Vec<SeqAttn>,
    /// Pool slot (block * block_size + offset) for each row's new K/V.
    pub slot_mapping: Vec<usize>,
    /// Tokens per block.
    pub block_size: usize,
    /// The state slot (state.rs) of each sequence, in `seqs` order; empty where the model keeps
    /// no per-sequence state.
    pub state_slots: Vec<u32>,
}

/// One layer's attention shape and options.
#[derive(Clone, Copy, Debug)]
pub struct AttnParams {
    /// Query heads.
    pub num_heads: usize,
    /// KV heads (divides `num_heads`).
    pub num_kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// Score scale (usually `head_dim^-0.5`).
    pub scale: f32,
    /// A query at position p sees keys at positions j with `p - j < window`.
    pub window: Option<usize>,
    /// Soft-capping of scores (`cap * tanh(s / cap)`).
    pub softcap: Option<f32>,
}

impl AttnMeta {
    /// Metadata for one sequence advancing `q_len` tokens from `start_pos` through `block_table`
    /// (state slot 0).
    pub fn single(start_pos: usize, q_len: usize, block_table: Vec<u32>, block_size: usize) -> AttnMeta {
        let slot_mapping = (start_pos..start_pos + q_len)
            .map(|p| block_table[p / block_size] as usize * block_size + p % block_size)
            .collect();
        let seqs = vec![SeqAttn { q_start: 0, q_len, start_pos, block_table }];
        AttnMeta { seqs, slot_mapping, block_size, state_slots: vec![0] }
    }

    /// Absolute positions of every row, in row order.
    pub fn positions(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.slot_mapping.len());
        for s in &self.seqs {
            out.extend((s.start_pos..s.start_pos + s.q_len).map(|p| p as u32));
        }
        out
    }
}
