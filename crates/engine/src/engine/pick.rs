//! Sampling a round's plain decode rows from candidates the backend selects where the logits
//! are (tf_backend::candidates): only a few values a row cross to the host, and the token is
//! the one the whole row would give (sampler.rs `sample_from`).

use super::{Chosen, Core};
use crate::sampler::{query, sample_from};
use crate::scheduler::RoundEntry;
use rayon::prelude::*;
use std::sync::atomic::Ordering;
use tf_backend::Backend;

impl<B: Backend> Core<B> {
    /// The token of every entry wanting logits, in plan order (`None` for sequences no longer
    /// active), when each is a plain decode row (no draft, no save) whose request asks for no
    /// logprobs and has a candidate query; otherwise `None` and the caller downloads the rows.
    pub(super) fn choose_from_candidates(
        &self,
        plan: &[RoundEntry],
        first_row: &[usize],
        logits: &mut B::Act,
    ) -> Option<Vec<Chosen>> {
        let (mut rows, mut queries, mut jobs, mut slots) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (e, &row) in plan.iter().filter(|e| e.wants_logits).zip(first_row) {
            if !e.draft.is_empty() || self.saves.contains_key(&e.seq) {
                return None;
            }
            let Some(a) = self.active.get(&e.seq) else {
                slots.push(None);
                continue;
            };
            if a.req.top_logprobs.is_some() {
                return None;
            }
            queries.push(query(&a.req.params, &a.history)?);
            slots.push(Some(jobs.len()));
            rows.push(row);
            jobs.push((&a.req.params, (a.req.prompt.len() + a.generated) as u64));
        }
        let candidates =
            if rows.is_empty() { Vec::new() } else { self.backend.sample_candidates(logits, &rows, &queries) };
        self.stats.candidate_rows.fetch_add(rows.len() as u64, Ordering::Relaxed);
        let width = self.model.vocab.rows();
        let v = &self.model.vocab;
        let pick = |(c, &(params, position))| v.sampled(sample_from(c, width, params, position) as usize);
        let tokens: Vec<u32> = if jobs.len() > 1 {
            candidates.par_iter().zip(&jobs).map(pick).collect()
        } else {
            candidates.iter().zip(&jobs).map(pick).collect()
        };
        Some(slots.into_iter().map(|s| s.map(|k| (tokens[k], None))).collect())
    }
}
