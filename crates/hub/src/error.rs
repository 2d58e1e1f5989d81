//! What a pull, a cache look-up or a removal can fail with: one line each, naming the repo or
//! file, never the token (it is kept out of every URL and message).

use std::path::PathBuf;

/// A hub or cache failure.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// A repo id that the hub would not accept (`ORG/NAME`).
    #[error("'{0}' is not a Hugging Face repo id (ORG/NAME: letters, digits, '-', '_', '.')")]
    BadRepoId(String),
    /// A revision name that is not a safe relative path.
    #[error("revision {0:?}: {1}")]
    BadRevision(String, &'static str),
    /// The listing names a file that could escape the cache or is not a plain relative path.
    #[error("{repo}: the hub's listing names an unsafe file {name:?} ({why}); nothing was fetched")]
    UnsafeName {
        /// The repo.
        repo: String,
        /// The name as listed (printed escaped).
        name: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// The listing (or another hub answer) is malformed or out of bounds.
    #[error("{repo}: {what}")]
    BadListing {
        /// The repo.
        repo: String,
        /// What is wrong with it.
        what: String,
    },
    /// The hub says the repo (or revision) does not exist or is not visible.
    #[error("{repo}: not found on {endpoint} (HTTP 404){hint}")]
    NotFound {
        /// The repo (and revision).
        repo: String,
        /// The endpoint asked.
        endpoint: String,
        /// A hint for the user.
        hint: &'static str,
    },
    /// The hub refused access (gated or private).
    #[error(
        "{repo}: access refused by {endpoint} (HTTP {status}): no such repo, or a gated or private one (set HF_TOKEN to a token that may read it)"
    )]
    Denied {
        /// The repo.
        repo: String,
        /// The endpoint asked.
        endpoint: String,
        /// The status.
        status: u16,
    },
    /// An HTTP status the pull cannot go on with.
    #[error("{what}: HTTP {status} from {host}")]
    Status {
        /// What was asked for.
        what: String,
        /// The host that answered.
        host: String,
        /// The status.
        status: u16,
    },
    /// A connection or protocol failure.
    #[error("{what}: {why}")]
    Network {
        /// What was asked for.
        what: String,
        /// The transport's reason.
        why: String,
    },
    /// A redirect that is refused (loop, too many, not http or https, no location).
    #[error("{what}: {why}")]
    Redirect {
        /// What was asked for.
        what: String,
        /// Why it was refused.
        why: String,
    },
    /// A file's bytes do not hash to the listing's hash.
    #[error("{file}: {algo} mismatch: expected {expected}, found {found}; the download was deleted")]
    HashMismatch {
        /// The file's path in the repo.
        file: String,
        /// `sha256` or `git blob sha1`.
        algo: &'static str,
        /// The listed hash.
        expected: String,
        /// The hash of what arrived.
        found: String,
    },
    /// A body longer or shorter than the listing says.
    #[error("{file}: {why}; the download was deleted")]
    Length {
        /// The file's path in the repo.
        file: String,
        /// What arrived against what was listed.
        why: String,
    },
    /// Not enough free space for what the listing says will be fetched.
    #[error("{dir}: {needed} bytes to fetch but only {free} free")]
    NoSpace {
        /// The cache directory.
        dir: PathBuf,
        /// Bytes the pull needs.
        needed: u64,
        /// Bytes free.
        free: u64,
    },
    /// The hub's listing lacks a file the engine needs, or a choice is missing or ambiguous.
    #[error("{repo}: {what}")]
    Choice {
        /// The repo.
        repo: String,
        /// What is missing or ambiguous, with the choices.
        what: String,
    },
    /// Offline, and the cache does not hold what is asked for.
    #[error("{repo}: not in the cache {dir} and offline (HF_HUB_OFFLINE=1)")]
    NotCached {
        /// The repo.
        repo: String,
        /// The cache directory.
        dir: PathBuf,
    },
    /// A file-system operation in the cache failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl HubError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> HubError {
        HubError::Io { path: path.into(), source }
    }
}

/// A short alias for results of this crate.
pub type Result<T> = std::result::Result<T, HubError>;
