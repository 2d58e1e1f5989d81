//! GGML block quantization: the plain dequantize-to-f32 reference for every supported type.

use tf_core::QuantType;

/// Dequantizes whole blocks of `q` in `bytes` to f32.
pub fn dequantize(q: QuantType, bytes: &[u8]) -> Vec<f32> {
    let _ = (q, bytes);
    Vec::new()
}
