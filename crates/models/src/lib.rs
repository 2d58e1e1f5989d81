//! Model families over the `Backend` ops: config parsing, validated loading, the shared decoder.

pub mod assistant;
pub(crate) mod blocks;
pub mod cache;
pub mod config;
pub mod decoder;
pub mod error;
pub mod families;
pub mod fingerprint;
pub mod fp8_weights;
pub mod fused;
pub mod gguf;
pub mod limits;
pub mod loaded;
pub mod locate;
pub mod longrope;
pub mod mtp;
pub mod mxfp4;
pub mod names;
pub mod quant_config;
pub mod registry;
pub mod rope_check;
pub mod spec;
pub mod tp;
pub mod weights;

pub use assistant::Gemma4Assistant;
pub use cache::{Cache, CacheKind};
pub use decoder::{Batch, Decoder};
pub use error::ModelError;
pub use loaded::Model;
pub use locate::{ModelPath, locate};
pub use mtp::MtpHead;
pub use spec::ModelSpec;
