//! Core types shared by every TensorFold layer: dtypes, the checked token-id boundary, errors.

pub mod dtype;
pub mod ids;
pub mod regular_file;
pub mod safe_file;

pub use dtype::{DType, QuantType};
pub use ids::{BadToken, TokenIds, Vocab};
