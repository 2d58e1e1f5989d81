//! Models from the Hugging Face hub: `pull` speaks the hub's HTTP API (the listing, `resolve`
//! downloads, LFS redirects, `Range` resumes) and keeps the Python client's cache layout, so a
//! model that `huggingface_hub` stored is used as it is and ours is readable by it. The listing
//! is untrusted input: names are checked before any byte is fetched and every file is verified
//! against its listed size and hash before it enters the cache.

mod api;
mod cache;
mod config;
mod error;
mod http;
mod lock;
mod names;
mod progress;
mod pull;
mod resolve;
mod select;
mod space;
mod spec;
mod transfer;
mod verify;

pub use cache::{CachedRepo, RepoCache, list, remove};
pub use config::{DEFAULT_ENDPOINT, HubConfig, Limits, Token};
pub use error::{HubError, Result};
pub use names::RepoId;
pub use progress::{Progress, Silent};
pub use pull::{Pulled, pull};
pub use resolve::{Cached, cached, resolve};
pub use spec::{Pick, Spec};
