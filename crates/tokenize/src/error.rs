//! The one error type of this crate; each variant names the file or field at fault.

use std::path::PathBuf;
use thiserror::Error;

/// Why a tokenizer could not be loaded, or text could not be encoded or decoded.
#[derive(Debug, Error)]
pub enum TokenizeError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file is not a regular file (a FIFO, device, socket or directory): refused unread.
    #[error(transparent)]
    File(#[from] tf_core::safe_file::SafeFileError),
    /// A file is not a valid tokenizer or tokenizer config.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// A token of the tokenizer has an id past the embedding table.
    #[error("{source_name}: token {token:?} has id {id}, but the embedding table has {rows} rows")]
    TokenPastRows {
        /// The file (or "tokenizer" for one built in code).
        source_name: String,
        /// The token's text.
        token: String,
        /// Its id.
        id: u32,
        /// The embedding table's row count.
        rows: usize,
    },
    /// A special token (bos, eos, pad) resolves to an id past the embedding table.
    #[error("{source_name}: {field} {token:?} has id {id}, but the embedding table has {rows} rows")]
    SpecialPastRows {
        /// The file the special token was named in.
        source_name: String,
        /// The field, e.g. `eos_token`.
        field: &'static str,
        /// The token's text (empty when given as a bare id).
        token: String,
        /// Its id.
        id: u32,
        /// The embedding table's row count.
        rows: usize,
    },
    /// A special token named in the config is not in the tokenizer's vocabulary.
    #[error("{source_name}: {field} {token:?} is not in the tokenizer's vocabulary")]
    UnknownSpecial {
        /// The file the special token was named in.
        source_name: String,
        /// The field, e.g. `bos_token`.
        field: &'static str,
        /// The token's text.
        token: String,
    },
    /// The tokenizer failed to encode text.
    #[error("encode failed: {0}")]
    Encode(String),
    /// The tokenizer failed to decode ids.
    #[error("decode failed: {0}")]
    Decode(String),
}
