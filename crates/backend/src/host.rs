//! Host-memory tensors shared by the CPU backends: f32 activations, weights in storage type,
//! and an f32 paged KV pool.

use crate::BackendError;
use crate::attn::KvShape;
use crate::fp8::Fp8Scales;
use std::sync::Arc;
use tf_core::DType;
use tf_formats::{TensorBytes, TensorView};

/// The index of the first largest value of `row` (0 for an empty row).
pub fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold(0, |best, (i, &x)| if x > row[best] { i } else { best })
}

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
    /// The block scales of an FP8 weight (`None` for every other type).
    pub scales: Option<Arc<Fp8Scales>>,
}

impl HostMat {
    /// Takes a 2-D float or block-quantized tensor (each row a whole number of quant blocks).
    pub fn from_view(t: &TensorView) -> Result<HostMat, BackendError> {
        let [rows, cols] = t.shape[..] else {
            return Err(BackendError::Unsupported(format!("{}: expected a 2-D weight, found {:?}", t.name, t.shape)));
        };
        if !t.dtype.is_weight() {
            return Err(BackendError::Unsupported(format!("{}: dtype {} is not a weight type", t.name, t.dtype)));
        }
        if t.dtype == DType::F8E4M3 {
            return Err(BackendError::Unsupported(format!("{}: an FP8 weight needs its scales", t.name)));
        }
        if t.dtype == DType::Mxfp4 && !cols.is_multiple_of(32) {
            return Err(BackendError::Unsupported(format!(
                "{}: rows of {cols} do not split into mxfp4 blocks of 32",
                t.name
            )));
        }
        if let DType::Quant(q) = t.dtype
            && !cols.is_multiple_of(q.block_len())
        {
            let msg = format!("{}: rows of {cols} do not split into {} blocks of {}", t.name, q.name(), q.block_len());
            return Err(BackendError::Unsupported(msg));
        }
        let want = rows.checked_mul(cols).and_then(|n| t.dtype.bytes_for(n));
        if want != Some(t.data.as_bytes().len()) {
            let msg = format!("{}: {} bytes do not hold {rows}x{cols} {}", t.name, t.data.as_bytes().len(), t.dtype);
            return Err(BackendError::Unsupported(msg));
        }
        // Quant blocks are read byte-wise, so a mapped tensor is never copied for them.
        let align = if t.dtype.is_float() { t.dtype.size() } else { 1 };
        Ok(HostMat { dtype: t.dtype, rows, cols, data: t.data.clone().aligned(align), scales: None })
    }

    /// Takes a 2-D FP8 E4M3 tensor with its block scales, kept one byte per weight.
    pub fn from_fp8(t: &TensorView, scales: &Fp8Scales) -> Result<HostMat, BackendError> {
        let (DType::F8E4M3, [rows, cols]) = (t.dtype, &t.shape[..]) else {
            let msg = format!("{}: expected a 2-D f8_e4m3 weight, found {} {:?}", t.name, t.dtype, t.shape);
            return Err(BackendError::Unsupported(msg));
        };
        let (rows, cols) = (*rows, *cols);
        if rows.checked_mul(cols) != Some(t.data.as_bytes().len()) {
            let msg = format!("{}: {} bytes do not hold {rows}x{cols} f8_e4m3", t.name, t.data.as_bytes().len());
            return Err(BackendError::Unsupported(msg));
        }
        scales.check(&t.name, rows, cols)?;
        let scales = Some(Arc::new(scales.clone()));
        Ok(HostMat { dtype: DType::F8E4M3, rows, cols, data: t.data.clone(), scales })
    }

    /// Bytes the weight holds in memory: its elements and any scales.
    pub fn held_bytes(&self) -> usize {
        self.data.as_bytes().len() + self.scales.as_ref().map_or(0, |s| s.values.len() * 4)
    }

    /// Bytes of one row in storage type.
    pub fn row_bytes(&self) -> usize {
        match self.dtype {
            DType::Quant(q) => self.cols / q.block_len() * q.block_bytes(),
            DType::Mxfp4 => self.cols / 32 * tf_formats::mxfp4::BLOCK_BYTES,
            d => self.cols * d.size(),
        }
    }

    /// Row `r` converted (or dequantized, as ggml does) to f32 into `out` (`out.len() == cols`).
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        let rb = self.row_bytes();
        let bytes = &self.data.as_bytes()[r * rb..(r + 1) * rb];
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
            DType::Quant(q) => {
                for (o, v) in out.iter_mut().zip(tf_formats::quant::dequantize(q, bytes)) {
                    *o = v;
                }
            }
            DType::F8E4M3 => match &self.scales {
                Some(s) => s.dequantize_row(bytes, r, out),
                None => unreachable!("HostMat::from_fp8 gives every FP8 weight its scales"),
            },
            DType::Mxfp4 => tf_formats::mxfp4::dequantize_into(bytes, out),
            DType::I64 | DType::U8 => unreachable!("HostMat::from_view takes weight dtypes only"),
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
    /// Values (empty in a latent pool, whose values are its keys: [`HostKv::values`]).
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
        let v = if shape.latent { Vec::new() } else { vec![0.0; n] };
        Ok(HostKv { shape, k: vec![0.0; n], v })
    }

    /// The values attention reads: V, or in a latent pool K itself.
    pub fn values(&self) -> &[f32] {
        if self.shape.latent { &self.k } else { &self.v }
    }

    /// Width of one slot (all KV heads).
    pub fn slot_width(&self) -> usize {
        self.shape.num_kv_heads * self.shape.head_dim
    }

    /// f32 values in one block of K (or V).
    fn block_len(&self) -> usize {
        self.shape.block_size * self.slot_width()
    }

    /// K then V of `blocks`, as little-endian f32 bytes (a latent pool gives K twice, so every
    /// pool reads and writes in one layout).
    pub fn read_blocks(&self, blocks: &[u32]) -> Vec<u8> {
        let n = self.block_len();
        let mut out = Vec::with_capacity(2 * blocks.len() * n * 4);
        for pool in [&self.k, self.values()] {
            for &b in blocks {
                out.extend(pool[b as usize * n..(b as usize + 1) * n].iter().flat_map(|x| x.to_le_bytes()));
            }
        }
        out
    }

    /// Writes bytes laid out as [`HostKv::read_blocks`] gives them (length checked by the caller;
    /// a latent pool takes the K half and leaves the repeat).
    pub fn write_blocks(&mut self, blocks: &[u32], bytes: &[u8]) {
        let n = self.block_len();
        let mut words = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        for pool in [&mut self.k, &mut self.v] {
            if pool.is_empty() {
                continue;
            }
            for &b in blocks {
                for (dst, src) in pool[b as usize * n..(b as usize + 1) * n].iter_mut().zip(&mut words) {
                    *dst = src;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_core::QuantType;

    fn view(dtype: DType, shape: Vec<usize>, bytes: &[u8]) -> TensorView {
        TensorView { name: "w".into(), dtype, shape, data: TensorBytes::from_vec(bytes), file: "t.gguf".into() }
    }

    /// Deterministic bytes; any pattern is a valid block (scales are f16 bits).
    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 37 % 251) as u8 ^ 0x15).map(|b| if b & 0x7C == 0x7C { b & 0x3F } else { b }).collect()
    }

    #[test]
    fn quantized_rows_dequantize_like_ggml() {
        let q = QuantType::Q4K;
        let (rows, cols) = (3, 512);
        let bytes = pattern(rows * cols / 256 * q.block_bytes());
        let m = HostMat::from_view(&view(DType::Quant(q), vec![rows, cols], &bytes)).expect("q4_k weight");
        assert_eq!(m.row_bytes(), 2 * 144);
        let all = tf_formats::quant::dequantize(q, &bytes);
        let mut row = vec![0.0; cols];
        for r in 0..rows {
            m.row_f32(r, &mut row);
            assert_eq!(row, all[r * cols..(r + 1) * cols], "row {r}");
        }
    }

    #[test]
    fn quantized_weights_are_checked() {
        let q = DType::Quant(QuantType::Q8_0);
        // 48 columns is not a whole number of 32-blocks, even though 2 x 48 is.
        assert!(HostMat::from_view(&view(q, vec![2, 48], &pattern(3 * 34))).is_err());
        assert!(HostMat::from_view(&view(q, vec![2, 64], &pattern(4 * 34 - 1))).is_err());
        assert!(HostMat::from_view(&view(q, vec![2, 64], &pattern(4 * 34))).is_ok());
        assert!(HostMat::from_view(&view(DType::I64, vec![2, 4], &[0; 64])).is_err());
    }
}
