//! Speculative decoding inside the lane rounds: before a round, decoding sequences that allow
//! it get a draft; the round feeds last token + draft as one chunk; then each position's token
//! is sampled exactly as plain decoding would (same logits by batch and chunk invariance, same
//! keyed sampler) and drafts are kept while they match. Rejected positions are rolled back by
//! truncating the block table; no K/V is copied.

use super::Core;
use crate::draft::{Drafter, NgramDrafter};
use crate::scheduler::RoundEntry;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tf_backend::Backend;

/// Which drafter the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftKind {
    /// No drafting.
    Off,
    /// Prompt lookup over the sequence's own tokens.
    Ngram,
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
            DraftKind::Off => None,
            DraftKind::Ngram => Some(Box::new(NgramDrafter::default())),
        }
    }
}

impl<B: Backend> Core<B> {
    /// Gives each decoding sequence that allows it a draft for the next round.
    pub(super) fn propose_drafts(&mut self) {
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
    pub(super) fn verify(&mut self, e: &RoundEntry, rows: &[f32]) {
        let vocab = self.model.vocab.rows();
        let mut accepted = 0;
        for (i, row) in rows.chunks_exact(vocab).enumerate() {
            let Some(token) = self.emit(e.seq, &mut row.to_vec()) else { break };
            if i < e.draft.len() && token == e.draft[i] {
                self.sched.accept(e.seq, token);
                accepted += 1;
            } else {
                self.sched.append(e.seq, token);
                break;
            }
        }
        self.sched.end_draft(e.seq);
        if let Some(a) = self.active.get_mut(&e.seq) {
            a.draft_k = (accepted + 1).clamp(1, self.draft.num_tokens);
        }
        let s = &self.stats;
        s.draft_proposed.fetch_add(e.draft.len() as u64, Ordering::Relaxed);
        s.draft_accepted.fetch_add(accepted as u64, Ordering::Relaxed);
        s.draft_verifies.fetch_add(1, Ordering::Relaxed);
    }
}
