//! What the engine asks of a request's output constraint (structured output): the ids allowed
//! next, and following the tokens taken. The server implements it over a grammar; the engine
//! sees only this.

use tf_backend::TokenMask;

/// A sequence's output constraint.
pub trait Constraint: Send {
    /// The ids allowed next (a constraint that fails allows only the end of sequence).
    fn mask(&mut self) -> TokenMask;
    /// Takes `token`; false when it is refused (then nothing changes).
    fn accept(&mut self, token: u32) -> bool;
    /// Undoes the last `n` tokens taken.
    fn rollback(&mut self, n: usize);
    /// Whether the output is complete: nothing may follow.
    fn is_finished(&self) -> bool;
}

/// The mask type (tf_backend's), for implementors outside the backend's dependents.
pub use tf_backend::TokenMask as Mask;
