//! Sampling a round's rows from candidates the backend selects where the logits are
//! (tf_backend::candidates): only a few values a row cross to the host, and each token is the
//! one the whole row would give (sampler.rs `sample_from`). A verify entry's row `i` is sampled
//! with the history holding the draft's first `i` tokens: the only history it is read with, as
//! verification stops at the first token that differs from the draft.
//!
//! A row with more candidates than the backend keeps is downloaded whole anyway, and costs more
//! that way than a round that downloads every row; so a sequence whose row did is sampled from
//! whole rows for the next [`WHOLE_ROUNDS`] tokens, then tried again. Either way gives the same
//! tokens: this only picks the cheaper transfer.

use super::Core;
use crate::sampler::{History, SamplingParams, query, sample_from};
use crate::scheduler::RoundEntry;
use rayon::prelude::*;
use std::sync::atomic::Ordering;
use tf_backend::{Backend, RowQuery};

/// Tokens a sequence is sampled from whole rows after its row had too many candidates.
const WHOLE_ROUNDS: usize = 16;

/// One row to sample: its params and position.
type Job<'a> = (&'a SamplingParams, u64);

impl<B: Backend> Core<B> {
    /// Per entry wanting logits, in plan order, the tokens its rows sample (one for a plain
    /// decode entry, `1 + k` for a verify entry; none for a sequence no longer active), when no
    /// entry saves, no request asks for logprobs and no sequence is in its whole-row tokens;
    /// otherwise `None` and the caller downloads.
    pub(super) fn tokens_from_candidates(
        &mut self,
        plan: &[RoundEntry],
        first_row: &[usize],
        logits: &mut B::Act,
    ) -> Option<Vec<Vec<u32>>> {
        let (mut rows, mut queries, mut jobs, mut spans) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut seqs = Vec::new();
        for (e, &row) in plan.iter().filter(|e| e.wants_logits).zip(first_row) {
            if self.saves.contains_key(&e.seq) {
                return None;
            }
            let start = jobs.len();
            if let Some(a) = self.active.get(&e.seq) {
                if a.req.top_logprobs.is_some() || a.generated < a.whole_until {
                    return None;
                }
                let position = (a.req.prompt.len() + a.generated) as u64;
                for (i, q) in row_queries(&a.req.params, &a.history, &e.draft)?.into_iter().enumerate() {
                    rows.push(row + i);
                    queries.push(q);
                    jobs.push((&a.req.params, position + i as u64));
                    seqs.push(e.seq);
                }
            }
            spans.push(start..jobs.len());
        }
        let candidates =
            if rows.is_empty() { Vec::new() } else { self.backend.sample_candidates(logits, &rows, &queries) };
        self.stats.candidate_rows.fetch_add(rows.len() as u64, Ordering::Relaxed);
        let (width, v) = (self.model.vocab.rows(), &self.model.vocab);
        let pick =
            |(c, &(params, position)): (_, &Job<'_>)| v.sampled(sample_from(c, width, params, position) as usize);
        let tokens: Vec<u32> = if jobs.len() > 1 {
            candidates.par_iter().zip(&jobs).map(pick).collect()
        } else {
            candidates.iter().zip(&jobs).map(pick).collect()
        };
        let wide: Vec<_> = match self.backend.candidate_capacity() {
            Some(cap) => candidates.iter().zip(&seqs).filter(|(c, _)| c.ids.len() > cap).map(|(_, &id)| id).collect(),
            None => Vec::new(),
        };
        for id in wide {
            if let Some(a) = self.active.get_mut(&id) {
                a.whole_until = a.generated + WHOLE_ROUNDS;
            }
        }
        Some(spans.into_iter().map(|s| tokens[s].to_vec()).collect())
    }
}

/// The queries of an entry's `1 + draft.len()` rows (row `i` after the draft's first `i`
/// tokens), or `None` when the params have no query.
fn row_queries(params: &SamplingParams, history: &History, draft: &[u32]) -> Option<Vec<RowQuery>> {
    let first = query(params, history)?;
    if draft.is_empty() || !params.is_penalised() {
        return Some(vec![first; 1 + draft.len()]);
    }
    let mut h = history.clone();
    let mut all = vec![first];
    for &t in draft {
        h.push(t);
        all.push(query(params, &h)?);
    }
    Some(all)
}
