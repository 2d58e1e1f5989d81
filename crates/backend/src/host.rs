//! Host-memory tensors shared by the CPU backends: f32 activations, weights in storage type,
//! and an f32 paged KV pool.

use crate::BackendError;
use crate::attn::KvShape;
use tf_core::DType;
use tf_formats::{TensorBytes, TensorView};

/// A row-major f32 matrix `[rows, cols]`.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Row-major values.
    pub data: Vec<f32>,
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
}

impl HostTensor {
    /// A zero matrix.
    pub fn zeros(rows: usize, cols: usize) -> HostTensor {
        HostTensor { data: vec![0.0; rows * cols], rows, cols }
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }
}

/// A weight matrix `[rows, cols]` kept in its storage type (memory-mapped when aligned).
#[derive(Clone, Debug)]
pub struct HostMat {
    /// Storage type.
    pub dtype: DType,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// The elements, aligned for `dtype`.
    pub data: TensorBytes,
}

impl HostMat {
    /// Takes a 2-D float tensor.
    pub fn from_view(t: &TensorView) -> Result<HostMat, BackendError> {
        let [rows, cols] = t.shape[..] else {
            return Err(BackendError::Unsupported(format!("{}: expected a 2-D weight, found {:?}", t.name, t.shape)));
        };
        if !t.dtype.is_float() {
            return Err(BackendError::Unsupported(format!("{}: dtype {} is not a float type", t.name, t.dtype)));
        }
        let want = rows.checked_mul(cols).and_then(|n| t.dtype.bytes_for(n));
        if want != Some(t.data.as_bytes().len()) {
            let msg = format!("{}: {} bytes do not hold {rows}x{cols} {}", t.name, t.data.as_bytes().len(), t.dtype);
            return Err(BackendError::Unsupported(msg));
        }
        Ok(HostMat { dtype: t.dtype, rows, cols, data: t.data.clone().aligned(t.dtype.size()) })
    }

    /// Row `r` converted to f32 into `out` (`out.len() == cols`).
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        let b = self.data.as_bytes();
        let sz = self.dtype.size();
        let bytes = &b[r * self.cols * sz..(r + 1) * self.cols * sz];
        match self.dtype {
            DType::F32 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            DType::F16 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
            DType::BF16 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = half::bf16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
            DType::I64 | DType::Quant(_) => unreachable!("HostMat::from_view takes float weights only"),
        }
    }
}

/// One layer's KV pool in f32: `[num_blocks, block_size, num_kv_heads, head_dim]` for K and V.
#[derive(Clone, Debug)]
pub struct HostKv {
    /// The pool's shape.
    pub shape: KvShape,
    /// Keys.
    pub k: Vec<f32>,
    /// Values.
    pub v: Vec<f32>,
}

impl HostKv {
    /// A zeroed pool.
    pub fn new(shape: KvShape) -> Result<HostKv, BackendError> {
        let n = shape
            .num_blocks
            .checked_mul(shape.block_size)
            .and_then(|n| n.checked_mul(shape.num_kv_heads * shape.head_dim))
            .ok_or_else(|| BackendError::Unsupported(format!("KV pool {shape:?} is too large")))?;
        Ok(HostKv { shape, k: vec![0.0; n], v: vec![0.0; n] })
    }

    /// Width of one slot (all KV heads).
    pub fn slot_width(&self) -> usize {
        self.shape.num_kv_heads * self.shape.head_dim
    }

    /// f32 values in one block of K (or V).
    fn block_len(&self) -> usize {
        self.shape.block_size * self.slot_width()
    }

    /// K then V of `blocks`, as little-endian f32 bytes.
    pub fn read_blocks(&self, blocks: &[u32]) -> Vec<u8> {
        let n = self.block_len();
        let mut out = Vec::with_capacity(2 * blocks.len() * n * 4);
        for pool in [&self.k, &self.v] {
            for &b in blocks {
                out.extend(pool[b as usize * n..(b as usize + 1) * n].iter().flat_map(|x| x.to_le_bytes()));
            }
        }
        out
    }

    /// Writes bytes laid out as [`HostKv::read_blocks`] gives them (length checked by the caller).
    pub fn write_blocks(&mut self, blocks: &[u32], bytes: &[u8]) {
        let n = self.block_len();
        let mut words = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        for pool in [&mut self.k, &mut self.v] {
            for &b in blocks {
                for (dst, src) in pool[b as usize * n..(b as usize + 1) * n].iter_mut().zip(&mut words) {
                    *dst = src;
                }
            }
        }
    }
}
