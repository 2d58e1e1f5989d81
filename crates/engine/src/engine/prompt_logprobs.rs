//! Prompt logprobs (vLLM's `prompt_logprobs`, OpenAI's `echo` with `logprobs`): the logits row of
//! every prompt position but the last is taken from the prefill that computes it, and gives the
//! log-softmax of the prompt token that follows. A request asking for them skips the prefix
//! cache at admission (scheduler.rs), so no position is served from the cache and the numbers
//! are those of a cold prefill; chunked prefill equals whole prefill, so they do not depend on the
//! chunking. The log-sum-exp and the top ids come from the backend as for sampled tokens
//! (tf_backend::logprobs); the rank needs the whole row, which is downloaded.

use super::{Core, PromptLogprob};
use crate::scheduler::RoundEntry;
use std::cmp::Ordering;
use std::ops::Range;
use tf_backend::logprobs::by_rank;
use tf_backend::{Backend, LogprobQuery};

impl<B: Backend> Core<B> {
    /// The prompt positions of entry `e` whose logprobs are still wanted (each predicts the
    /// prompt token after it); positions already gathered (a preempted sequence recomputed) are
    /// not asked again.
    pub(super) fn prompt_positions(&self, e: &RoundEntry, prompt_len: usize) -> Range<usize> {
        let gathered = self.active.get(&e.seq).and_then(|a| a.prompt_lp.as_ref().map(Vec::len));
        match gathered {
            Some(n) => e.start.max(n)..(e.start + e.num_tokens).min(prompt_len.saturating_sub(1)),
            None => 0..0,
        }
    }

    /// Adds the logprobs of this round's prompt rows (`prompt_rows`, after the sampled rows of
    /// `logits`) to their sequences.
    pub(super) fn gather_prompt_logprobs(&mut self, logits: &B::Act) {
        let rows = std::mem::take(&mut self.prompt_rows);
        if rows.is_empty() {
            return;
        }
        let mut queries = Vec::with_capacity(rows.len());
        let mut next = Vec::with_capacity(rows.len());
        for &(row, seq, p) in &rows {
            let a = self.active.get(&seq);
            let top_n = a.and_then(|a| a.req.prompt_logprobs).unwrap_or(0);
            let id = a.and_then(|a| a.req.prompt.as_slice().get(p + 1).copied()).unwrap_or(0);
            queries.push(LogprobQuery { row, top_n, ids: vec![id] });
            next.push(id);
        }
        let stats = self.backend.logprobs(logits, &queries);
        let host = self.backend.download(logits);
        let width = self.model.vocab.rows();
        for ((&(row, seq, p), r), id) in rows.iter().zip(&stats).zip(next) {
            let Some(a) = self.active.get_mut(&seq) else { continue };
            let Some(lp) = a.prompt_lp.as_mut() else { continue };
            if lp.len() != p {
                continue;
            }
            let x = &host[row * width..(row + 1) * width];
            let rank = 1 + (0..width as u32).filter(|&j| by_rank(x, j, id) == Ordering::Less).count();
            let raw = r.values.first().copied().unwrap_or(f32::NEG_INFINITY);
            let top = r.top.iter().map(|&(t, v)| (t, r.logprob(v))).collect();
            lp.push(PromptLogprob { id, logprob: r.logprob(raw), rank, top });
        }
    }
}
