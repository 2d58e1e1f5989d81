//! Core types shared by every TensorFold layer: dtypes, the checked token-id boundary, errors.

pub mod dtype;
pub mod ids;
pub mod progress;
pub mod regular_file;
pub mod safe_file;

pub use dtype::{DType, QuantType};
pub use ids::{BadToken, TokenIds, Vocab};
pub use progress::{LoadProgress, ProgressSnapshot};
