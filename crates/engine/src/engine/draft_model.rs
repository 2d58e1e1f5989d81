//! Drafting with a smaller model of the same vocabulary: it keeps its own KV pool and, per
//! sequence, a block table valid for the committed tokens it has seen. Each round it catches up
//! on the newly committed tokens in one chunk, then drafts greedily one token per step for all
//! drafting sequences together. Its proposals only affect speed: verification is exact. A
//! draft model with per-sequence state gives each sequence a live and a scratch slot: the state
//! after the catch-up is saved before the draft tokens advance it and put back after.
//!
//! A draft model without state has a prefix cache of its own, as the target's: a full block
//! below what it has read is keyed by a hash chained over its tokens, and a sequence's first
//! catch-up takes the longest cached chain of its committed tokens instead of computing it again
//! (a long shared system prompt is read by the draft model once).

use super::{Core, EngineConfig};
use crate::block_pool::{BlockId, BlockPool};
use crate::state_pool::{StateLayout, StatePool};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tf_backend::{AttnMeta, Backend, SeqAttn};
use tf_models::{Batch, Cache, Model, ModelError};

/// One sequence's state in the draft model's cache.
#[derive(Default)]
struct DraftSeq {
    block_table: Vec<BlockId>,
    /// Tokens of the committed sequence whose K/V the draft cache holds.
    num_valid: usize,
    /// Its live state slot (a draft model with state).
    slot: Option<u32>,
    /// The chained hashes of its full blocks before `num_valid`, in order (each registered).
    hashes: Vec<u64>,
}

/// The draft model, its KV pool and its sequences.
pub(super) struct DraftModel<B: Backend> {
    model: Model<B>,
    cache: Cache<B>,
    pool: BlockPool,
    seqs: HashMap<u64, DraftSeq>,
    /// The draft model's state slots, when it has state.
    state: Option<StatePool>,
}

impl<B: Backend> DraftModel<B> {
    /// Checks that `draft` shares `target`'s vocabulary and gives it a pool of its own.
    pub(super) fn new(
        target: &Model<B>,
        draft: Model<B>,
        backend: &B,
        cfg: &EngineConfig,
    ) -> Result<DraftModel<B>, ModelError> {
        let (num_blocks, block_size) = (cfg.num_blocks, cfg.block_size);
        let same_tokenizer = match (&target.tokenizer, &draft.tokenizer) {
            (Some(a), Some(b)) => a.len() == b.len(),
            _ => true,
        };
        if draft.vocab != target.vocab || !same_tokenizer {
            let msg = format!(
                "draft model {} has a vocabulary of {} rows, the target {}: they must be the same",
                draft.dir.display(),
                draft.vocab.rows(),
                target.vocab.rows()
            );
            return Err(ModelError::Backend(tf_backend::BackendError::Unsupported(msg)));
        }
        let layout =
            (draft.decoder.state_bytes_per_seq() > 0).then(|| StateLayout::new(cfg.sched.max_num_seqs, true, false));
        let num_slots = layout.map_or(0, |l| l.num_slots());
        let cache = draft.decoder.alloc_cache(backend, num_blocks, block_size, num_slots)?;
        let pool = BlockPool::new(num_blocks, block_size);
        Ok(DraftModel { model: draft, cache, pool, seqs: HashMap::new(), state: layout.map(StatePool::new) })
    }

    /// Copies state slot `from` over `to` in every state layer of the draft model.
    fn copy_state(&mut self, backend: &B, from: u32, to: u32) {
        for st in &mut self.cache.state {
            backend.copy_state(st, from, to);
        }
    }

    /// Drops a finished sequence's draft cache.
    pub(super) fn forget(&mut self, id: u64) {
        if let Some(s) = self.seqs.remove(&id) {
            self.pool.release(&s.block_table);
            if let (Some(st), Some(slot)) = (self.state.as_mut(), s.slot) {
                st.give_live(slot);
            }
        }
    }

    /// Points sequence `id`, which the draft model has not read yet, at the cached blocks of the
    /// longest chain of `tokens` (its committed tokens), leaving at least one to feed; returns
    /// the positions they hold. None for a draft model with state.
    fn take_cached(&mut self, id: u64, tokens: &[u32]) -> usize {
        let bs = self.pool.block_size();
        let s = self.seqs.entry(id).or_default();
        if self.state.is_some() || s.num_valid > 0 || !s.block_table.is_empty() {
            return 0;
        }
        let blocks = tokens.len().saturating_sub(1) / bs;
        (s.block_table, s.hashes) = self.pool.acquire_chain(tokens.chunks_exact(bs).take(blocks));
        s.num_valid = s.hashes.len() * bs;
        s.num_valid
    }

    /// Registers sequence `id`'s full blocks before its `num_valid` (`tokens`: its committed
    /// tokens). None for a draft model with state.
    fn register_full(&mut self, id: u64, tokens: &[u32]) {
        let bs = self.pool.block_size();
        let Some(s) = self.seqs.get_mut(&id) else { return };
        while self.state.is_none() && (s.hashes.len() + 1) * bs <= s.num_valid.min(tokens.len()) {
            let i = s.hashes.len();
            let hash = self.pool.chain_hash(s.hashes.last().copied().unwrap_or(0), &tokens[i * bs..(i + 1) * bs]);
            self.pool.register(s.block_table[i], hash);
            s.hashes.push(hash);
        }
    }

    /// Gives `id` blocks for `tokens` positions; false (and forgets it) when the pool is short.
    fn reserve(&mut self, id: u64, tokens: usize) -> bool {
        let need = self.pool.blocks_for(tokens).saturating_sub(self.seqs.get(&id).map_or(0, |s| s.block_table.len()));
        match self.pool.allocate(need) {
            Some(blocks) => {
                let s = self.seqs.entry(id).or_default();
                s.block_table.extend(blocks);
                if let Some(st) = self.state.as_mut()
                    && s.slot.is_none()
                {
                    s.slot = st.take_live();
                    if s.slot.is_none() {
                        self.forget(id);
                        return false;
                    }
                }
                true
            }
            None => {
                self.forget(id);
                false
            }
        }
    }
}

impl<B: Backend> Core<B> {
    /// Drafts with the draft model for every eligible sequence.
    pub(super) fn model_drafts(&mut self) {
        let t = Instant::now();
        let mut want = self.draft_candidates();
        let Some(dm) = self.draft_model.as_mut() else { return };
        let bs = dm.pool.block_size();
        // (seq, tokens to feed first, their first position, k)
        let mut jobs: Vec<(u64, Vec<u32>, usize, usize)> = Vec::new();
        for &(id, start, k, _) in &want {
            let Some(seq) = self.sched.seq(id) else { continue };
            let hit = dm.take_cached(id, &seq.tokens[..=start]);
            self.stats.draft_cached_tokens.fetch_add(hit as u64, Ordering::Relaxed);
            let (known, cached) = dm.seqs.get(&id).map_or((0, 0), |s| (s.num_valid, s.hashes.len() * bs));
            // A state holds exactly `known` tokens: it cannot go back, only start again. Registered
            // blocks (perhaps shared) are written again only at `start`, whose logits the first
            // draft needs, and then with the same bits.
            let valid = if dm.state.is_some() && known > start { 0 } else { known.min(start).max(cached.min(start)) };
            if !dm.reserve(id, start + k) {
                continue;
            }
            jobs.push((id, seq.tokens[valid..=start].to_vec(), valid, k));
        }
        want.clear();
        let vocab = dm.model.vocab;
        let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); jobs.len()];
        for step in 0.. {
            let live: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].3 > step).collect();
            if live.is_empty() {
                break;
            }
            if step == 1 {
                // The state after the catch-up, kept for after the draft tokens.
                for &i in &live {
                    let slot = dm.seqs.get(&jobs[i].0).and_then(|s| s.slot);
                    let scratch = slot.zip(dm.state.as_ref()).and_then(|(s, st)| st.layout().scratch_of(s));
                    if let (Some(s), Some(scratch)) = (slot, scratch) {
                        dm.copy_state(&self.backend, s, scratch);
                    }
                }
            }
            let (mut ids, mut seqs, mut slots, mut rows) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let mut state_slots = Vec::new();
            for &i in &live {
                let (id, ref feed, first, _) = jobs[i];
                let Some(ds) = dm.seqs.get(&id) else { continue };
                if let Some(slot) = ds.slot {
                    state_slots.push(slot);
                }
                let (chunk, pos): (Vec<u32>, usize) = match step {
                    0 => (feed.clone(), first),
                    _ => (vec![drafts[i][step - 1]], first + feed.len() + step - 1),
                };
                let q_start = ids.len();
                ids.extend(&chunk);
                slots.extend((pos..pos + chunk.len()).map(|p| ds.block_table[p / bs] as usize * bs + p % bs));
                let block_table = ds.block_table.clone();
                seqs.push(SeqAttn { q_start, q_len: chunk.len(), start_pos: pos, block_table });
                rows.push(ids.len() - 1);
            }
            let meta = AttnMeta { state_slots, seqs, slot_mapping: slots, block_size: bs };
            let batch = Batch { ids: &ids, meta: &meta, logits_rows: &rows, held: None };
            let logits = dm.model.decoder.forward(&self.backend, &batch, &mut dm.cache);
            // Only the ids cross to the host on a device that picks them in place.
            let best = self.backend.argmax_rows_in_round(&logits);
            for (&id, &i) in best.iter().zip(&live) {
                drafts[i].push(vocab.sampled(id as usize));
            }
        }
        for ((id, feed, first, k), draft) in jobs.into_iter().zip(drafts) {
            let slot = dm.seqs.get(&id).and_then(|s| s.slot);
            let scratch = slot.zip(dm.state.as_ref()).and_then(|(s, st)| st.layout().scratch_of(s));
            if let (Some(s), Some(scratch), true) = (slot, scratch, k > 1) {
                dm.copy_state(&self.backend, scratch, s);
            }
            if let Some(ds) = dm.seqs.get_mut(&id) {
                ds.num_valid = first + feed.len();
            }
            if let Some(seq) = self.sched.seq(id) {
                dm.register_full(id, &seq.tokens);
            }
            self.sched.set_draft(id, draft);
        }
        self.stats.draft_micros.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}
