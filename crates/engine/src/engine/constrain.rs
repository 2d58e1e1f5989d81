//! Structured output in the rounds: before a round's rows are sampled, each constrained
//! sequence's allowed-token masks are computed on the host (in parallel across sequences, after
//! the round's forward is queued, so on a device they overlap its work), one per row it samples:
//! row `i` of a verify entry gets the mask after the draft's first `i` tokens, tried on the
//! constraint and undone, so a drafted row is sampled under exactly the mask plain decoding
//! would use (drafted == undrafted). A draft token its row's mask refuses ends the draft there
//! (no sampled token can equal it); later rows reuse the last mask and are never delivered.
//! Masks depend only on the tokens a sequence took, never on its batch (concurrent == solo).

use super::Core;
use crate::constraint::Constraint;
use crate::scheduler::{RoundEntry, SeqId};
use rayon::prelude::*;
use std::collections::HashMap;
use tf_backend::{Backend, TokenMask};

impl<B: Backend> Core<B> {
    /// Sets every constrained sequence wanting logits in `plan` to the masks of its rows.
    pub(super) fn compute_masks(&mut self, plan: &[RoundEntry]) {
        if !self.active.values().any(|a| a.req.constraint.is_some()) {
            return;
        }
        let want: HashMap<SeqId, &[u32]> =
            plan.iter().filter(|e| e.wants_logits).map(|e| (e.seq, e.draft.as_slice())).collect();
        let active = &mut self.active;
        self.backend.install(|| {
            active.par_iter_mut().for_each(|(id, a)| {
                if let (Some(draft), Some(c)) = (want.get(id), a.req.constraint.as_mut()) {
                    a.masks = row_masks(c.as_mut(), draft).into();
                }
            })
        });
    }
}

/// The masks of a row and its draft's rows (module docs), leaving `c` where it was.
pub(super) fn row_masks(c: &mut dyn Constraint, draft: &[u32]) -> Vec<TokenMask> {
    let mut masks = vec![c.mask()];
    let mut taken = 0;
    for &t in draft {
        let allowed = masks.last().is_some_and(|m| m.allows(t));
        if !allowed || !c.accept(t) {
            break;
        }
        taken += 1;
        masks.push(c.mask());
    }
    c.rollback(taken);
    while masks.len() < draft.len() + 1 {
        let last = masks[masks.len() - 1].clone();
        masks.push(last);
    }
    masks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allows only the next id of a fixed sequence (then only 9).
    struct Script {
        ids: Vec<u32>,
        at: usize,
    }

    impl Constraint for Script {
        fn mask(&mut self) -> TokenMask {
            TokenMask::from_ids(10, [self.ids.get(self.at).copied().unwrap_or(9)])
        }
        fn accept(&mut self, token: u32) -> bool {
            let ok = self.ids.get(self.at) == Some(&token);
            self.at += ok as usize;
            ok
        }
        fn rollback(&mut self, n: usize) {
            self.at -= n;
        }
        fn is_finished(&self) -> bool {
            self.at >= self.ids.len()
        }
    }

    #[test]
    fn a_drafts_rows_get_the_masks_after_its_prefix_and_the_constraint_is_left_as_it_was() {
        let mut c = Script { ids: vec![1, 2, 3, 4], at: 1 };
        let allowed = |m: &TokenMask| (0..10).filter(|&i| m.allows(i)).collect::<Vec<u32>>();
        let m = row_masks(&mut c, &[2, 3]);
        assert_eq!(m.iter().map(allowed).collect::<Vec<_>>(), [vec![2], vec![3], vec![4]]);
        assert_eq!(c.at, 1);
        // A refused draft token ends the tries; later rows repeat the last mask.
        let m = row_masks(&mut c, &[2, 7, 4]);
        assert_eq!(m.iter().map(allowed).collect::<Vec<_>>(), [vec![2], vec![3], vec![3], vec![3]]);
        assert_eq!(c.at, 1);
    }
}
