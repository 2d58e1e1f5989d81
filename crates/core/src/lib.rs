//! Core types shared by every TensorFold layer: dtypes, the checked token-id boundary, errors.

pub mod dtype;
pub mod ids;

pub use dtype::{DType, QuantType};
pub use ids::{BadToken, TokenIds, Vocab};
