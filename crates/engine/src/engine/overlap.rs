//! Overlapped rounds (vLLM's async scheduling): a round of plain greedy rows leaves its ids on
//! the backend, and before they reach the host the next round of the same sequences is queued on
//! them (each sequence one position further), so the device does not idle while the host reads
//! the ids, reports them and checks stops. A round of plain rows sampled from candidates (any
//! sampling settings, no logprobs or grammar) hands its host-picked ids to the backend the same
//! way ([`Backend::hold_ids`]): the next round is queued before they are reported and before
//! the scheduler runs, and is sampled once they are (its penalties and positions read the
//! history with them). A sequence that stops on the token in flight drops its row of the queued
//! round: that row wrote K/V only past the sequence's end, into blocks the sequence held, before
//! any later round can hold them. The tokens are the ones a round waited for would give: the
//! same ids go to the same positions, and each row is sampled from the same history.

use super::{Core, DraftKind};
use crate::scheduler::RoundEntry;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tf_backend::Backend;

/// A round of plain rows whose ids the backend holds and the host has not reported.
pub(super) struct InFlight<H> {
    /// The round's entries (those wanting logits are its rows, in order).
    plan: Vec<RoundEntry>,
    /// Their ids, on the backend.
    held: H,
    /// Where the round's time starts (metrics): when it was queued, or for a round queued
    /// behind another, when that one landed (so rounds' times add up to the time spent).
    since: Instant,
    /// The ids were picked on the backend (greedy), not sampled on the host.
    on_device: bool,
}

impl<H> InFlight<H> {
    /// A round `plan` queued at `since` whose ids `held` holds, picked on the backend.
    pub(super) fn new(plan: Vec<RoundEntry>, held: H, since: Instant) -> InFlight<H> {
        InFlight { plan, held, since, on_device: true }
    }

    /// The same round with its ids sampled on the host ([`Backend::hold_ids`]).
    pub(super) fn host_picked(self) -> InFlight<H> {
        InFlight { on_device: false, ..self }
    }
}

/// The round queued after one in flight: its ids already picked on the backend, or its logits
/// to sample once the round before is reported.
enum Next<B: Backend> {
    Held(B::Held),
    Logits(B::Act),
}

impl<B: Backend> Core<B> {
    /// Queues the round after `p` on its held ids where that round is plain decoding of the
    /// same sequences, then delivers `p`'s tokens; a greedy next round's ids are picked on the
    /// backend before that, a sampled one's after (`Core::pick`, which may hold them in turn).
    pub(super) fn land_in_flight(&mut self, p: InFlight<B::Held>) {
        let next = self.round_after(&p.plan).map(|(plan, rows)| {
            let logits = self.forward_plan(&plan, Some((&p.held, &rows)));
            let next = match self.all_plain_greedy(&plan) {
                true => Next::<B>::Held(self.backend.argmax_rows_held(&logits)),
                false => Next::Logits(logits),
            };
            (plan, next)
        });
        self.deliver_held(p);
        if let Some((plan, next)) = next {
            // After `p`'s tokens are appended: the blocks this round fills are hashed by them.
            self.sched.commit(&plan);
            self.stats.overlapped_rounds.fetch_add(1, Ordering::Relaxed);
            match next {
                Next::Held(held) => self.in_flight = Some(InFlight::new(plan, held, Instant::now())),
                Next::Logits(logits) => {
                    self.compute_masks(&plan);
                    self.pick(&plan, logits, Instant::now());
                }
            }
        }
    }

    /// The round that follows `plan` (in flight) when the scheduler would plan exactly it: every
    /// running sequence decoding greedily, one token each, none waiting, no drafts or saves; with
    /// the row of `plan`'s held ids each of its entries takes. Sequences whose token in flight is
    /// their last by length, or that ended already, are left out. `None` also when a block for the next position cannot
    /// be had without preempting (the scheduler decides that, after the ids land).
    fn round_after(&mut self, plan: &[RoundEntry]) -> Option<(Vec<RoundEntry>, Vec<u32>)> {
        // (Plain rows only go in flight: greedy, or sampled without logprobs or grammar.)
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
        if p.on_device {
            self.stats.device_sampled_rows.fetch_add(ids.len() as u64, Ordering::Relaxed);
        }
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
