//! One sequence over a model: feeds checked ids in chunks of any size into a private KV block
//! table and returns the logits asked for. The lane-round scheduler generalises this to many
//! sequences sharing a pool.

use tf_backend::{AttnMeta, Backend};
use tf_core::TokenIds;
use tf_models::{Batch, Cache, Model, ModelError};

/// Tokens per KV block.
pub const BLOCK_SIZE: usize = 16;

/// A single sequence's cache and position.
pub struct Runner<'a, B: Backend> {
    model: &'a Model<B>,
    backend: &'a B,
    cache: Cache<B>,
    block_table: Vec<u32>,
    len: usize,
    capacity: usize,
}

impl<'a, B: Backend> Runner<'a, B> {
    /// A runner with room for `capacity` tokens (bounded by the model's context length).
    pub fn new(model: &'a Model<B>, backend: &'a B, capacity: usize) -> Result<Runner<'a, B>, ModelError> {
        let capacity = capacity.min(model.decoder.spec.max_position_embeddings).max(1);
        let num_blocks = capacity.div_ceil(BLOCK_SIZE);
        let cache = model.decoder.alloc_cache(backend, num_blocks, BLOCK_SIZE, 1)?;
        Ok(Runner { model, backend, cache, block_table: (0..num_blocks as u32).collect(), len: 0, capacity })
    }

    /// Tokens in the cache.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Tokens that still fit.
    pub fn room(&self) -> usize {
        self.capacity - self.len
    }

    /// Appends `ids` (at most [`Runner::room`]) in one round; returns logits for every fed row
    /// when `all_rows`, else for the last one. `(rows, vocab)` row-major.
    pub fn feed(&mut self, ids: &[u32], all_rows: bool) -> Vec<f32> {
        assert!(ids.len() <= self.room() && !ids.is_empty(), "feed past the runner's capacity");
        let meta = AttnMeta::single(self.len, ids.len(), self.block_table.clone(), BLOCK_SIZE);
        let rows: Vec<usize> = if all_rows { (0..ids.len()).collect() } else { vec![ids.len() - 1] };
        let batch = Batch { ids, meta: &meta, logits_rows: &rows, held: None };
        let logits = self.model.decoder.forward(self.backend, &batch, &mut self.cache);
        self.len += ids.len();
        self.backend.download(&logits)
    }

    /// Feeds a checked prompt in chunks of `chunk` tokens; logits of every row or the last.
    pub fn prefill(&mut self, prompt: &TokenIds, chunk: usize, all_rows: bool) -> Vec<f32> {
        let mut out = Vec::new();
        for piece in prompt.as_slice().chunks(chunk.max(1)) {
            let logits = self.feed(piece, all_rows);
            if all_rows {
                out.extend(logits);
            } else {
                out = logits;
            }
        }
        out
    }
}
