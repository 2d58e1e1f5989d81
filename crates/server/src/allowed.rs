//! vLLM's `allowed_token_ids` as the engine's [`Constraint`]: the same ids allowed at every step
//! (the reasoning's too), nothing ever finished, nothing to roll back. Its ids were checked
//! against the vocabulary's rows at the request's boundary.

use tf_engine::constraint::{Constraint, Mask};

/// One sequence's allowed set.
pub struct Allowed {
    mask: Mask,
}

impl Allowed {
    /// A sequence held to `mask`'s ids.
    pub fn new(mask: Mask) -> Allowed {
        Allowed { mask }
    }
}

impl Constraint for Allowed {
    fn mask(&mut self) -> Mask {
        self.mask.clone()
    }
    fn accept(&mut self, token: u32) -> bool {
        self.mask.allows(token)
    }
    fn rollback(&mut self, _n: usize) {}
    fn is_finished(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_ids_at_every_step_and_no_other() {
        let mut a = Allowed::new(Mask::from_ids(40, [3, 35]));
        for _ in 0..3 {
            assert_eq!(a.mask().words(), Mask::from_ids(40, [3, 35]).words());
            assert!(a.accept(35) && a.accept(3) && !a.accept(4) && !a.accept(39));
            a.rollback(2);
        }
        assert!(!a.is_finished());
    }
}
