//! Drafting with a Gemma 4 assistant (`DraftNet::Assistant`, models' `assistant.rs`): a drafting
//! sequence whose last token sits at `p` (the target's K/V reach `p - 1`) gets its first draft
//! token from one assistant step fed that token and the target's final hidden row at `p - 1`
//! (every round's forward hands the drafting sequences' rows over, as for the MTP head), and
//! each further one from a step fed the previous draft token and the assistant's own output
//! row, all at position `p`. Every step reads the target's KV pools through the sequence's block
//! table and writes nothing, so the assistant has no pool and nothing to roll back. A sequence
//! whose row at `p - 1` this engine never computed is fed a zero row: weaker drafts, the same
//! output.

use super::Core;
use super::mtp::HiddenRows;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tf_backend::Backend;
use tf_models::{Gemma4Assistant, Model};

/// The assistant and the target's rows it has not read.
pub(super) struct AssistantDrafter<B: Backend> {
    net: Gemma4Assistant<B>,
    /// Each drafting sequence's target rows from the last fed entry's first position on.
    rows: HashMap<u64, HiddenRows>,
    /// The target's hidden width.
    width: usize,
}

impl<B: Backend> AssistantDrafter<B> {
    /// The drafter of `net`, loaded beside `target`.
    pub(super) fn new(target: &Model<B>, net: Gemma4Assistant<B>) -> AssistantDrafter<B> {
        AssistantDrafter { net, rows: HashMap::new(), width: target.decoder.spec.hidden_size }
    }

    /// Drops a finished sequence.
    pub(super) fn forget(&mut self, id: u64) {
        self.rows.remove(&id);
    }

    /// Keeps the target's hidden rows `rows` of sequence `id` at positions from `start` on,
    /// dropping those it kept before `start` (a draft reads the row before the last token,
    /// which the latest entry fed).
    pub(super) fn record(&mut self, id: u64, start: usize, rows: &[f32]) {
        let kept = self.rows.entry(id).or_default();
        kept.take(self.width, start, start);
        kept.record(self.width, start, rows);
    }
}

/// One sequence's drafting this round.
struct Job {
    id: u64,
    /// The last token's position, at which every step runs.
    pos: usize,
    /// Draft tokens wanted.
    k: usize,
    /// The last token.
    last: u32,
    block_table: Vec<u32>,
}

impl<B: Backend> Core<B> {
    /// Drafts with the assistant for every eligible sequence, all sequences in each step.
    pub(super) fn assistant_drafts(&mut self) {
        let t = Instant::now();
        let want = self.draft_candidates();
        let Some(ad) = self.assistant.as_mut() else { return };
        let w = ad.width;
        let (mut jobs, mut hidden) = (Vec::new(), Vec::new());
        for &(id, pos, k, last) in &want {
            let Some(seq) = self.sched.seq(id).filter(|_| pos > 0) else { continue };
            hidden.extend(ad.rows.entry(id).or_default().take(w, pos - 1, pos));
            jobs.push(Job { id, pos, k, last, block_table: seq.block_table.clone() });
        }
        let (b, bs, vocab) = (&self.backend, self.sched.pool().block_size(), self.model.vocab);
        let mut h = b.upload(&hidden, jobs.len(), w);
        let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); jobs.len()];
        let mut live: Vec<usize> = (0..jobs.len()).collect();
        for step in 0.. {
            let next: Vec<usize> = (0..live.len()).filter(|&r| jobs[live[r]].k > step).collect();
            if next.is_empty() {
                break;
            }
            if next.len() < live.len() {
                h = b.select_rows(&h, &next);
                live = next.iter().map(|&r| live[r]).collect();
            }
            let ids: Vec<u32> = live.iter().map(|&i| drafts[i].last().copied().unwrap_or(jobs[i].last)).collect();
            let positions: Vec<u32> = live.iter().map(|&i| jobs[i].pos as u32).collect();
            let seqs = live.iter().map(|&i| (jobs[i].pos, jobs[i].block_table.clone())).collect();
            let meta = Gemma4Assistant::<B>::step_meta(seqs, bs);
            let (best, out) = ad.net.step_ids(b, &self.model.decoder, &ids, &positions, &h, &meta, &mut self.cache.kv);
            for (&id, &i) in best.iter().zip(&live) {
                drafts[i].push(vocab.sampled(id as usize));
            }
            h = out;
        }
        for (job, draft) in jobs.into_iter().zip(drafts) {
            self.sched.set_draft(job.id, draft);
        }
        self.stats.draft_micros.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}
