//! Text to checked token ids and back: Hugging Face tokenizers validated against the embedding
//! table at load, streaming detokenization and stop-string matching.

mod error;
mod gguf_vocab;
mod incremental;
mod stop;
#[cfg(test)]
mod testutil;
mod tokenizer;

pub use error::TokenizeError;
pub use gguf_vocab::tokenizer_from_gguf;
pub use incremental::IncrementalDecoder;
pub use stop::{StopMatcher, StopOutput};
pub use tokenizer::{SpecialIds, Tokenizer};
