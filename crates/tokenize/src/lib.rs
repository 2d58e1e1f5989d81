//! Text to checked token ids and back: Hugging Face tokenizers validated against the embedding
//! table at load, streaming detokenization and stop-string matching.

mod error;
mod incremental;
mod stop;
#[cfg(test)]
mod testutil;
mod tokenizer;

pub use error::TokenizeError;
pub use incremental::IncrementalDecoder;
pub use stop::{StopMatcher, StopOutput};
pub use tokenizer::{SpecialIds, Tokenizer};
