//! Overlapped greedy rounds (vLLM's async scheduling): a round of plain greedy rows leaves its
//! ids on the backend, and before they reach the host the next round of the same sequences is
//! queued on them (each sequence one position further), so the device does not idle while the
//! host reads the ids, reports them and checks stops. A sequence that stops on the token in
//! flight drops its row of the queued round: that row wrote K/V only past the sequence's end,
//! into blocks the sequence held, before any later round can hold them. The tokens are the
//! ones a round waited for would give: the same ids go to the same positions.

use super::{Core, DraftKind};
use crate::scheduler::RoundEntry;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tf_backend::Backend;

/// A round of plain greedy rows queued on the backend whose ids have not reached the host.
pub(super) struct InFlight<H> {
    /// The round's entries (those wanting logits are its rows, in order).
    plan: Vec<RoundEntry>,
    /// Their ids, on the backend.
    held: H,
    /// Where the round's time starts (metrics): when it was queued, or for a round queued
    /// behind another, when that one landed (so rounds' times add up to the time spent).
    since: Instant,
}

impl<H> InFlight<H> {
    /// A round `plan` queued at `since` whose ids `held` holds.
    pub(super) fn new(plan: Vec<RoundEntry>, held: H, since: Instant) -> InFlight<H> {
        InFlight { plan, held, since }
    }
}

impl<B: Backend> Core<B> {
    /// Queues the round after `p` on its held ids where that round is plain greedy decoding of
    /// the same sequences, then delivers `p`'s tokens.
    pub(super) fn land_in_flight(&mut self, p: InFlight<B::Held>) {
        let next = self.round_after(&p.plan).map(|(plan, rows)| {
            let logits = self.forward_plan(&plan, Some((&p.held, &rows)));
            let held = self.backend.argmax_rows_held(&logits);
            (plan, held)
        });
        self.deliver_held(p);
        if let Some((plan, held)) = next {
            // After `p`'s tokens are appended: the blocks this round fills are hashed by them.
            self.sched.commit(&plan);
            self.stats.overlapped_rounds.fetch_add(1, Ordering::Relaxed);
            self.in_flight = Some(InFlight { plan, held, since: Instant::now() });
        }
    }

    /// The round that follows `plan` (in flight) when the scheduler would plan exactly it: every
    /// running sequence decoding greedily, one token each, none waiting, no drafts or saves; with
    /// the row of `plan`'s held ids each of its entries takes. Sequences whose token in flight is
    /// their last by length, or that ended already, are left out. `None` also when a block for the next position cannot
    /// be had without preempting (the scheduler decides that, after the ids land).
    fn round_after(&mut self, plan: &[RoundEntry]) -> Option<(Vec<RoundEntry>, Vec<u32>)> {
        let plain = plan.iter().all(|e| e.wants_logits && e.num_tokens == 1 && e.draft.is_empty());
        // Sequences of `plan` that ended since it was queued (a stop in the round before it,
        // a cancel) have no row in the next round.
        let live = plan.iter().filter(|e| self.active.contains_key(&e.seq)).count();
        if !self.overlap
            || !plain
            || !self.saves.is_empty()
            || self.sched.num_waiting() > 0
            || self.sched.num_running() != live
        {
            return None;
        }
        let (mut next, mut rows) = (Vec::new(), Vec::new());
        for (row, e) in plan.iter().enumerate() {
            // (Plain greedy without logprobs by construction: only such rounds go in flight.)
            let Some(a) = self.active.get(&e.seq) else { continue };
            if self.draft.kind != DraftKind::Off && a.draft_k > 0 {
                return None;
            }
            if a.generated + 1 >= a.req.max_tokens {
                continue;
            }
            if !self.sched.ensure_blocks(e.seq, e.start + 2) {
                return None;
            }
            next.push(RoundEntry {
                seq: e.seq,
                start: e.start + 1,
                num_tokens: 1,
                wants_logits: true,
                draft: Vec::new(),
            });
            rows.push(row as u32);
        }
        (!next.is_empty()).then_some((next, rows))
    }

    /// Waits for `p`'s ids and delivers them (each row's sequence reports its token, checks its
    /// end, and goes on with it).
    fn deliver_held(&mut self, p: InFlight<B::Held>) {
        let ids = self.backend.held_ids(&p.held);
        self.stats.device_sampled_rows.fetch_add(ids.len() as u64, Ordering::Relaxed);
        for (e, &id) in p.plan.iter().filter(|e| e.wants_logits).zip(&ids) {
            let token = self.model.vocab.sampled(id as usize);
            if let Some(token) = self.deliver(e.seq, token, None) {
                self.sched.append(e.seq, token);
            }
        }
        self.stats.rounds.fetch_add(1, Ordering::Relaxed);
        self.stats.round_micros.fetch_add(p.since.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}
