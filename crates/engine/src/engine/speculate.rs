//! Speculative decoding inside the lane rounds: before a round, decoding sequences that allow
//! it get a draft; the round feeds last token + draft as one chunk; then each position's token
//! is sampled exactly as plain decoding would (same logits by batch and chunk invariance, same
//! keyed sampler) and drafts are kept while they match. Rejected positions are rolled back by
//! truncating the block table; no K/V is copied. With per-sequence state the round leaves the
//! state after every fed token, so the scheduler saves it in a scratch slot first and, when a
//! draft token is rejected, puts it back and feeds the accepted tokens again (scheduler.rs);
//! early-exit drafting advances the first layers' state, so it is saved and put back around it.

use super::Core;
use crate::draft::{Drafter, NgramDrafter};
use crate::scheduler::RoundEntry;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tf_backend::{AttnMeta, Backend, RowLogprobs, SeqAttn};
use tf_models::Batch;

/// Which drafter the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftKind {
    /// No drafting.
    Off,
    /// Prompt lookup over the sequence's own tokens.
    Ngram,
    /// The target's first N layers plus its head (no extra weights); their K/V go to the
    /// target's own pools and are rewritten by the verify round.
    EarlyExit(usize),
    /// A smaller checkpoint with the same vocabulary, with its own KV pool, or a Gemma 4
    /// assistant reading the target's pools (assistant.rs).
    Model,
    /// The target checkpoint's multi-token-prediction head over the target's hidden rows, with
    /// its own KV pool (mtp.rs).
    Mtp,
}

/// Speculative decoding settings.
#[derive(Debug, Clone, Copy)]
pub struct DraftConfig {
    /// The drafter.
    pub kind: DraftKind,
    /// Most draft tokens per round (k); adapted per sequence between 1 and this.
    pub num_tokens: usize,
}

impl Default for DraftConfig {
    fn default() -> DraftConfig {
        DraftConfig { kind: DraftKind::Off, num_tokens: 4 }
    }
}

impl DraftConfig {
    /// The drafter this config names.
    pub fn drafter(&self) -> Option<Box<dyn Drafter>> {
        match self.kind {
            DraftKind::Off | DraftKind::EarlyExit(_) | DraftKind::Model | DraftKind::Mtp => None,
            DraftKind::Ngram => Some(Box::new(NgramDrafter::default())),
        }
    }
}

impl<B: Backend> Core<B> {
    /// Gives each decoding sequence that allows it a draft for the next round.
    pub(super) fn propose_drafts(&mut self) {
        if let DraftKind::EarlyExit(layers) = self.draft.kind {
            return self.early_exit_drafts(layers);
        }
        if self.draft_model.is_some() {
            return self.model_drafts();
        }
        if self.mtp.is_some() {
            return self.mtp_drafts();
        }
        if self.assistant.is_some() {
            return self.assistant_drafts();
        }
        let Some(drafter) = self.drafter.as_mut() else { return };
        let t = Instant::now();
        let mut proposed = 0;
        for (&id, a) in &self.active {
            let left = a.req.max_tokens - a.generated;
            let k = a.draft_k.min(left.saturating_sub(1));
            let Some(seq) = self.sched.seq(id) else { continue };
            if k == 0 || seq.tokens.len() != seq.num_computed + 1 {
                continue;
            }
            let draft = drafter.propose(&seq.tokens, k);
            proposed += draft.len();
            self.sched.set_draft(id, draft);
        }
        if proposed > 0 {
            self.stats.draft_micros.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
    }

    /// Samples each of a verify round's `1 + k` rows in order, keeping drafts while they equal
    /// the sampled token; the first mismatch (or the row after the last draft) gives one more.
    pub(super) fn verify(&mut self, e: &RoundEntry, rows: &[f32], stats: &[Option<RowLogprobs>]) {
        let vocab = self.model.vocab.rows();
        self.verify_by(e, |core, i| {
            let row = rows.chunks_exact(vocab).nth(i)?;
            core.emit(e.seq, row, stats.get(i).and_then(Option::as_ref))
        });
    }

    /// [`Core::verify`] with each position's token (and logprobs) sampled already (pick.rs:
    /// position `i`'s from the history holding the draft's first `i` tokens, the only case it is
    /// read in).
    pub(super) fn verify_sampled(&mut self, e: &RoundEntry, tokens: Vec<super::pick::Sampled>) {
        let mut tokens = tokens.into_iter();
        self.verify_by(e, |core, _| tokens.next().and_then(|(t, lp)| core.deliver(e.seq, t, lp)));
    }

    /// Delivers position `i`'s token from `next` while the draft matches, then ends the draft.
    fn verify_by(&mut self, e: &RoundEntry, mut next: impl FnMut(&mut Self, usize) -> Option<u32>) {
        let mut accepted = 0;
        for i in 0..=e.draft.len() {
            let Some(token) = next(self, i) else { break };
            if i < e.draft.len() && token == e.draft[i] {
                self.sched.accept(e.seq, token);
                accepted += 1;
            } else {
                self.sched.append(e.seq, token);
                break;
            }
        }
        self.sched.end_draft(e);
        if let Some(a) = self.active.get_mut(&e.seq) {
            a.draft_k = (accepted + 1).clamp(1, self.draft.num_tokens);
        }
        let s = &self.stats;
        s.draft_proposed.fetch_add(e.draft.len() as u64, Ordering::Relaxed);
        s.draft_accepted.fetch_add(accepted as u64, Ordering::Relaxed);
        s.draft_verifies.fetch_add(1, Ordering::Relaxed);
    }

    /// Drafts for every eligible sequence together: k steps of the first `layers` layers, each
    /// one token per sequence, greedy.
    /// `(seq, first uncomputed position, k, its token)` of every sequence to draft for now.
    pub(super) fn draft_candidates(&self) -> Vec<(u64, usize, usize, u32)> {
        let mut want = Vec::new();
        for (&id, a) in &self.active {
            let k = a.draft_k.min((a.req.max_tokens - a.generated).saturating_sub(1));
            let Some(seq) = self.sched.seq(id) else { continue };
            if k > 0 && seq.tokens.len() == seq.num_computed + 1 {
                want.push((id, seq.num_computed, k, seq.tokens[seq.num_computed]));
            }
        }
        want.sort_unstable();
        want
    }

    fn early_exit_drafts(&mut self, layers: usize) {
        let t = Instant::now();
        let mut want = self.draft_candidates();
        want.retain(|&(id, start, k, _)| self.sched.ensure_blocks(id, start + k));
        for &(id, ..) in &want {
            self.sched.save_state_before_verify(id);
        }
        let has_state = self.cache.has_state();
        let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); want.len()];
        let bs = self.sched.pool().block_size();
        for step in 0.. {
            let live: Vec<usize> = (0..want.len()).filter(|&i| want[i].2 > step).collect();
            if live.is_empty() {
                break;
            }
            self.apply_state_copies();
            let (mut ids, mut seqs, mut slots, mut state_slots) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for (row, &i) in live.iter().enumerate() {
                let (id, start, _, last) = want[i];
                let Some(seq) = self.sched.seq(id) else { continue };
                if has_state {
                    state_slots.push(seq.state_slot.unwrap_or(0));
                }
                let pos = start + step;
                ids.push(drafts[i].last().copied().unwrap_or(last));
                slots.push(seq.block_table[pos / bs] as usize * bs + pos % bs);
                let block_table = seq.block_table.clone();
                seqs.push(SeqAttn { q_start: row, q_len: 1, start_pos: pos, block_table });
            }
            let rows: Vec<usize> = (0..ids.len()).collect();
            let meta = AttnMeta { state_slots, seqs, slot_mapping: slots, block_size: bs };
            let batch = Batch { ids: &ids, meta: &meta, logits_rows: &rows, held: None };
            let logits = self.model.decoder.forward_layers(&self.backend, &batch, &mut self.cache, layers);
            // Only the ids cross to the host on a device that picks them in place.
            let best = self.backend.argmax_rows_in_round(&logits);
            for (&id, &i) in best.iter().zip(&live) {
                drafts[i].push(self.model.vocab.sampled(id as usize));
            }
        }
        for ((id, ..), draft) in want.into_iter().zip(drafts) {
            self.sched.restore_state_after_draft(id);
            self.sched.set_draft(id, draft);
        }
        self.stats.draft_micros.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}
