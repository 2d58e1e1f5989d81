//! Where the hub is, where the cache is, and the bounds every pull keeps. The CLI fills this from
//! `HF_ENDPOINT`, `HF_TOKEN`, `HF_HOME` / `HF_HUB_CACHE` and `HF_HUB_OFFLINE`; this crate reads no
//! environment.

use std::path::PathBuf;
use std::time::Duration;

/// The default hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A hub access token: sent only as `Authorization: Bearer` to the endpoint's own host, never
/// printed (its `Debug` is redacted and it has no `Display`).
#[derive(Clone)]
pub struct Token(String);

impl Token {
    /// Wraps a token; an empty one is none.
    pub fn new(s: String) -> Option<Token> {
        let s = s.trim().to_string();
        if s.is_empty() { None } else { Some(Token(s)) }
    }

    /// The header value.
    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Bounds on what the hub may make a pull do.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest JSON answer read (model info, one page of the tree listing).
    pub max_listing_bytes: u64,
    /// Most files a listing may hold (all pages together).
    pub max_files: usize,
    /// Most pages of a paginated tree listing.
    pub max_pages: usize,
    /// Most redirects followed for one request.
    pub max_redirects: usize,
    /// Most requests for one file (the first and the `Range` resumes after a cut).
    pub max_attempts: usize,
    /// Longest wait to connect.
    pub connect_timeout: Duration,
    /// Longest wait for any one read (headers or a chunk of a body).
    pub read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_listing_bytes: 64 << 20,
            max_files: 100_000,
            max_pages: 200,
            max_redirects: 10,
            max_attempts: 5,
            connect_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
        }
    }
}

/// Everything a pull or a cache look-up needs to know.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// The hub's base URL (`HF_ENDPOINT`), without a trailing slash.
    pub endpoint: String,
    /// The access token (`HF_TOKEN`).
    pub token: Option<Token>,
    /// The cache root (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`).
    pub cache_dir: PathBuf,
    /// Offline (`HF_HUB_OFFLINE=1`): the cache only, no socket opened.
    pub offline: bool,
    /// An HTTP(S) proxy URL for requests, if any.
    pub proxy: Option<String>,
    /// Bounds.
    pub limits: Limits,
}

impl HubConfig {
    /// A configuration for `cache_dir` against the default hub, online, no token.
    pub fn new(cache_dir: PathBuf) -> HubConfig {
        HubConfig {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            token: None,
            cache_dir,
            offline: false,
            proxy: None,
            limits: Limits::default(),
        }
    }
}
