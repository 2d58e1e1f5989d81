//! The engine: sequences over a model, sampling, the KV block pool and the lane-round scheduler.

pub mod block_pool;
pub mod draft;
pub mod engine;
pub mod rng;
pub mod runner;
pub mod sampler;
pub mod scheduler;
pub mod session;

pub use runner::Runner;
