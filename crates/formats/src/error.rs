//! Errors raised while reading checkpoint files; each names the file and, where known, the tensor.

use std::path::PathBuf;
use tf_core::safe_file::SafeFileError;
use thiserror::Error;

/// A file could not be read or is malformed.
#[derive(Debug, Error)]
pub enum FormatError {
    /// The file could not be opened or mapped.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a regular file (a FIFO, device, socket or directory): refused unread.
    #[error("{}: not a regular file (it is a {kind})", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// The file's header is malformed or out of bounds.
    #[error("{}: bad header: {msg}", path.display())]
    Header {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// One tensor's entry is malformed.
    #[error("{}: tensor '{name}': {msg}", path.display())]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor name.
        name: String,
        /// What is wrong.
        msg: String,
    },
}

impl FormatError {
    /// `path` could not be opened as a regular file ([`tf_core::regular_file`]).
    pub fn opening(path: impl Into<PathBuf>, e: SafeFileError) -> FormatError {
        let path = path.into();
        match e {
            SafeFileError::NotRegular { kind, .. } => FormatError::NotRegular { path, kind },
            SafeFileError::Io { source, .. } => FormatError::Io { path, source },
            other => FormatError::Io { path, source: std::io::Error::other(other.to_string()) },
        }
    }

    /// Opens `path` for reading when it is a regular file ([`tf_core::regular_file::open_regular`]).
    pub fn open(path: &std::path::Path) -> Result<std::fs::File, FormatError> {
        tf_core::regular_file::open_regular(path).map_err(|e| FormatError::opening(path, e))
    }

    /// A header error for `path`.
    pub fn header(path: impl Into<PathBuf>, msg: impl Into<String>) -> FormatError {
        FormatError::Header { path: path.into(), msg: msg.into() }
    }

    /// A tensor error for `path` / `name` (the file-controlled name escaped and cut).
    pub fn tensor(path: impl Into<PathBuf>, name: &str, msg: impl Into<String>) -> FormatError {
        FormatError::Tensor { path: path.into(), name: crate::printable::show(name), msg: msg.into() }
    }
}
