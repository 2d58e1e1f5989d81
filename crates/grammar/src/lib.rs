//! Structured output: JSON schemas, regexes, choices and Lark grammars compiled by llguidance
//! against a model's vocabulary, with size, nesting, reference depth and compile time capped and compiled grammars
//! cached by content; a per-sequence [`SeqMatcher`] gives the allowed-token bitset of the next
//! token and follows the tokens taken.

mod cache;
mod caps;
mod compile;
mod lark_refs;
mod matcher;
mod productive;
mod refs;
mod spec;
mod vocab;

pub use compile::{Compiled, Grammars, Limits};
pub use matcher::SeqMatcher;
pub use spec::Spec;
pub use vocab::{VocabError, token_bytes};

use thiserror::Error;

/// Why a constraint could not be compiled.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum GrammarError {
    /// The schema, regex or grammar is not valid.
    #[error("{0}")]
    Invalid(String),
    /// Past a size or depth cap.
    #[error("{0}")]
    TooLarge(String),
    /// Compiling took longer than the cap.
    #[error("compiling took longer than {0} ms")]
    Timeout(u64),
}
