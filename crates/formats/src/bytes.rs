//! Tensor bytes that live in a memory-mapped file (zero copy) or in an owned buffer.

use half::{bf16, f16};
use memmap2::Mmap;
use std::ops::Range;
use std::sync::Arc;
use tf_core::DType;

/// A tensor's raw little-endian bytes.
#[derive(Clone)]
pub enum TensorBytes {
    /// A range of a shared memory map.
    Mapped(Arc<Mmap>, Range<usize>),
    /// An owned buffer (aligned to 8 bytes through `u64` storage).
    Owned(Arc<Vec<u64>>, usize),
}

impl TensorBytes {
    /// Owned bytes copied from `data`.
    pub fn from_vec(data: &[u8]) -> TensorBytes {
        let mut words = vec![0u64; data.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..data.len()].copy_from_slice(data);
        TensorBytes::Owned(Arc::new(words), data.len())
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            TensorBytes::Mapped(map, range) => &map[range.clone()],
            TensorBytes::Owned(words, len) => &bytemuck::cast_slice::<u64, u8>(words)[..*len],
        }
    }

    /// The bytes, copied into an owned aligned buffer if the mapped range is misaligned for `align`.
    pub fn aligned(self, align: usize) -> TensorBytes {
        if (self.as_bytes().as_ptr() as usize).is_multiple_of(align) {
            self
        } else {
            TensorBytes::from_vec(self.as_bytes())
        }
    }

    /// Decodes elements of `dtype` into f32 (any alignment; quantized blocks are dequantized, FP8
    /// codes decoded without their scales).
    pub fn to_f32(&self, dtype: DType) -> Vec<f32> {
        let b = self.as_bytes();
        match dtype {
            DType::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            DType::F16 => b.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            DType::BF16 => b.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            DType::I64 => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
                .collect(),
            DType::Quant(q) => crate::quant::dequantize(q, b),
            DType::F8E4M3 => b.iter().map(|&c| crate::fp8::e4m3(c)).collect(),
            DType::U8 => b.iter().map(|&c| f32::from(c)).collect(),
            DType::Mxfp4 => {
                let mut out = Vec::with_capacity(b.len() / crate::mxfp4::BLOCK_BYTES * 32);
                crate::mxfp4::dequantize(b, &mut out);
                out
            }
        }
    }
}

impl std::fmt::Debug for TensorBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorBytes({} bytes)", self.as_bytes().len())
    }
}
