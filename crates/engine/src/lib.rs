//! The engine: sequences over a model, sampling, the KV block pool and the lane-round scheduler.

pub mod block_pool;
pub mod constraint;
pub mod draft;
pub mod engine;
pub mod runner;
pub mod sampler;
pub mod scheduler;
pub mod session;
pub mod state_pool;

pub use runner::Runner;
/// The sampler's RNG and Gumbel noise (tf_backend's, so backends draw the same noise).
pub use tf_backend::rng;
