//! Checkpoint file formats: hardened safetensors reading (single file or sharded HF directory).
//!
//! Every length and offset read from a file is bounded before use; errors name the file and
//! the tensor. GGUF arrives here too.

pub mod bytes;
pub mod checkpoint;
pub mod error;
pub mod fp8;
pub mod gguf;
pub mod mxfp4;
pub mod printable;
pub mod quant;
pub mod quantize;
pub mod safetensors_file;
pub mod safetensors_header;

pub use bytes::TensorBytes;
pub use checkpoint::Checkpoint;
pub use error::FormatError;
pub use printable::{SHOW_MAX, inert, printable, show};
pub use safetensors_file::{SafetensorsFile, TensorView};
