//! Sampling a round's rows from candidates the backend selects where the logits are
//! (tf_backend::candidates): only a few values a row cross to the host, and each token is the
//! one the whole row would give (sampler.rs `sample_from`). A verify entry's row `i` is sampled
//! with the history holding the draft's first `i` tokens: the only history it is read with, as
//! verification stops at the first token that differs from the draft.
//!
//! A row whose request asks for logprobs also gets them from the backend where the logits are
//! (tf_backend::logprobs), before its row is edited: the log-sum-exp, the top ids, and the raw
//! values of the ids its edits touch (any other candidate's value is its raw logit). Rounds that
//! download their rows take the same numbers from the backend ([`Core::row_logprobs`]), so a
//! row's logprobs do not depend on the path its round took.
//!
//! A plain race's row (no top-k, top-p or min-p) carries its race key, so a device keeps only
//! the ids that can win it (a handful at any temperature); top-k rows keep about k ids, top-p
//! rows the prefix their cut keeps. A row with more candidates than the
//! backend keeps (a wide top-p window over flat logits) is downloaded whole anyway, and costs more
//! that way than a round that downloads every row; so a sequence whose row did is sampled from
//! whole rows for the next [`WHOLE_ROUNDS`] tokens, then tried again. Either way gives the same
//! tokens: this only picks the cheaper transfer.

use super::Core;
use crate::sampler::{History, Logprobs, SamplingParams, query, race_key, sample_from};
use crate::scheduler::RoundEntry;
use rayon::prelude::*;
use std::sync::atomic::Ordering;
use tf_backend::{Backend, LogprobQuery, RowLogprobs, RowQuery};

/// Tokens a sequence is sampled from whole rows after its row had too many candidates.
const WHOLE_ROUNDS: usize = 16;

/// A row's sampled token and, when asked for, its logprobs.
pub(super) type Sampled = (u32, Option<Logprobs>);

/// One row to sample: its params and position.
type Job<'a> = (&'a SamplingParams, u64);

impl<B: Backend> Core<B> {
    /// Per entry wanting logits, in plan order, the tokens its rows sample (one for a plain
    /// decode entry, `1 + k` for a verify entry; none for a sequence no longer active) with their
    /// logprobs when asked for, when no entry saves and no sequence is in its whole-row tokens;
    /// otherwise `None` and the caller downloads.
    pub(super) fn tokens_from_candidates(
        &mut self,
        plan: &[RoundEntry],
        first_row: &[usize],
        logits: &mut B::Act,
    ) -> Option<Vec<Vec<Sampled>>> {
        let (mut rows, mut queries, mut jobs, mut spans) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut seqs, mut lp_queries, mut lp_of) = (Vec::new(), Vec::new(), Vec::new());
        for (e, &row) in plan.iter().filter(|e| e.wants_logits).zip(first_row) {
            if self.saves.contains_key(&e.seq) {
                return None;
            }
            let start = jobs.len();
            if let Some(a) = self.active.get(&e.seq) {
                if a.generated < a.whole_until {
                    return None;
                }
                let position = (a.req.prompt.len() + a.generated) as u64;
                for (i, mut q) in row_queries(&a.req.params, &a.history, &e.draft, position)?.into_iter().enumerate() {
                    q.mask = a.masks.get(i).cloned();
                    lp_of.push(a.req.top_logprobs.map(|top_n| {
                        let ids = q.edits.iter().map(|e| e.id).collect();
                        lp_queries.push(LogprobQuery { row: row + i, top_n, ids });
                        lp_queries.len() - 1
                    }));
                    rows.push(row + i);
                    queries.push(q);
                    jobs.push((&a.req.params, position + i as u64));
                    seqs.push(e.seq);
                }
            }
            spans.push(start..jobs.len());
        }
        // Before the candidates' edits change the rows.
        let stats = if lp_queries.is_empty() { Vec::new() } else { self.backend.logprobs(logits, &lp_queries) };
        let candidates =
            if rows.is_empty() { Vec::new() } else { self.backend.sample_candidates(logits, &rows, &queries) };
        self.stats.candidate_rows.fetch_add(rows.len() as u64, Ordering::Relaxed);
        let (width, v) = (self.model.vocab.rows(), &self.model.vocab);
        let pick =
            |(c, &(params, position)): (_, &Job<'_>)| v.sampled(sample_from(c, width, params, position) as usize);
        let tokens: Vec<u32> = if jobs.len() > 1 {
            self.backend.install(|| candidates.par_iter().zip(&jobs).map(pick).collect())
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
        let with_logprobs = |j: usize| {
            let t = tokens[j];
            let lp = lp_of[j].and_then(|q| {
                let (r, asked) = (stats.get(q)?, &lp_queries[q].ids);
                let c = &candidates[j];
                let candidate = c.ids.binary_search(&t).ok().map(|k| c.values[k]); // ids increase
                Some(Logprobs::of(r, r.raw(t, asked).or(candidate)?))
            });
            (t, lp)
        };
        Some(spans.into_iter().map(|s| s.map(with_logprobs).collect()).collect())
    }

    /// Per logits row of the round (`rows` of them), the logprob statistics of the rows whose
    /// request asks for logprobs, computed by the backend (for rounds that download their rows).
    pub(super) fn row_logprobs(
        &self,
        plan: &[RoundEntry],
        first_row: &[usize],
        logits: &B::Act,
        rows: usize,
    ) -> Vec<Option<RowLogprobs>> {
        let mut queries = Vec::new();
        for (e, &row) in plan.iter().filter(|e| e.wants_logits).zip(first_row) {
            let asked = self.active.get(&e.seq).and_then(|a| a.req.top_logprobs);
            if let (Some(top_n), false) = (asked, self.saves.contains_key(&e.seq)) {
                queries.extend((0..=e.draft.len()).map(|i| LogprobQuery { row: row + i, top_n, ids: Vec::new() }));
            }
        }
        let mut out = vec![None; rows];
        if !queries.is_empty() {
            for (q, r) in queries.iter().zip(self.backend.logprobs(logits, &queries)) {
                out[q.row] = Some(r);
            }
        }
        out
    }
}

/// The queries of an entry's `1 + draft.len()` rows (row `i` after the draft's first `i`
/// tokens, at `position + i`), or `None` when the params have no query.
fn row_queries(params: &SamplingParams, history: &History, draft: &[u32], position: u64) -> Option<Vec<RowQuery>> {
    let first = query(params, history, position)?;
    if draft.is_empty() || !params.is_penalised() {
        let at = |i: u64| RowQuery { race: race_key(params, position + i), ..first.clone() };
        return Some((0..=draft.len() as u64).map(at).collect());
    }
    let mut h = history.clone();
    let mut all = vec![first];
    for (i, &t) in (1..).zip(draft) {
        h.push(t);
        all.push(query(params, &h, position + i)?);
    }
    Some(all)
}
