//! Batch-invariant `x @ w^T` over FP8 block-scaled weights (and MXFP4 ones): each cache block
//! of weight rows is dequantized into f32 (code times its block's scale) and handed to the f32
//! kernels of matmul.rs, so every output equals the f32 matmul over the dequantized weight bit
//! for bit.

use crate::matmul::{BLOCK_BYTES, GRAIN, par_columns, run_f32_rows};
use crate::simd::Simd;
use rayon::ThreadPool;
use tf_backend::{HostMat, HostTensor};
use tf_core::DType;

/// `x[rows, in] @ w[out, in]^T` for an FP8 or MXFP4 `w`, parallel over chunks of output features.
pub(crate) fn matmul(pool: &ThreadPool, simd: Simd, x: &HostTensor, w: &HostMat) -> HostTensor {
    assert_eq!(x.cols, w.cols, "matmul: x has {} columns, the weight {} inputs", x.cols, w.cols);
    assert_eq!(x.data.len(), x.rows * x.cols, "matmul: x holds {} values for {}x{}", x.data.len(), x.rows, x.cols);
    assert!(matches!(w.dtype, DType::F8E4M3 | DType::Mxfp4), "fp8 matmul: weight dtype {}", w.dtype);
    assert_eq!(w.data.as_bytes().len(), w.rows * w.row_bytes(), "fp8 matmul: weight bytes");
    let chunk = (BLOCK_BYTES / (w.cols * 4).max(1) / GRAIN * GRAIN).max(GRAIN);
    par_columns(pool, x.rows, w.rows, |outs, dst| {
        let mut buf = vec![0.0f32; chunk.min(outs.len()) * w.cols];
        let mut o0 = outs.start;
        while o0 < outs.end {
            let part = o0..(o0 + chunk).min(outs.end);
            let rows = &mut buf[..part.len() * w.cols];
            for (o, row) in part.clone().zip(rows.chunks_exact_mut(w.cols.max(1))) {
                match w.dtype {
                    DType::Mxfp4 => {
                        let rb = w.row_bytes();
                        crate::mxfp4::dequantize(simd, &w.data.as_bytes()[o * rb..(o + 1) * rb], row);
                    }
                    _ => w.row_f32(o, row),
                }
            }
            // SAFETY: this task owns columns `outs` of the output, which outlives the call;
            // `rows` holds `part.len()` dequantized rows of `x.cols`.
            unsafe { run_f32_rows(simd, x, rows, w.rows, part.clone(), dst.get()) };
            o0 = part.end;
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::testutil::{Rng, bits, cpu, mat, simds, sub};
    use std::sync::Arc;
    use tf_backend::{Backend, Fp8Scales, HostMat, RefBackend};
    use tf_core::DType;
    use tf_formats::TensorBytes;

    /// A random FP8 weight in `block` blocks (NaN codes avoided) and its dequantized f32 twin.
    fn pair(rng: &mut Rng, rows: usize, cols: usize, block: [usize; 2]) -> (HostMat, HostMat) {
        let code = |c: u8| if c & 0x7F == 0x7F { c ^ 1 } else { c };
        let codes: Vec<u8> = (0..rows * cols).map(|_| code(rng.next_u64() as u8)).collect();
        let g = [rows.div_ceil(block[0]), cols.div_ceil(block[1])];
        let values = (0..g[0] * g[1]).map(|_| (rng.uniform() + 1.5) / 64.0).collect();
        let scales = Arc::new(Fp8Scales { block, values });
        let data = TensorBytes::from_vec(&codes);
        let w = HostMat { dtype: DType::F8E4M3, rows, cols, data, scales: Some(scales) };
        let mut deq = vec![0.0; rows * cols];
        for (r, row) in deq.chunks_exact_mut(cols).enumerate() {
            w.row_f32(r, row);
        }
        let f = mat(DType::F32, rows, cols, &deq);
        (w, f)
    }

    #[test]
    fn equals_the_f32_matmul_over_the_dequantized_weight() {
        let mut rng = Rng::new(40);
        for simd in simds() {
            for threads in [1, 2, 3] {
                let b = cpu(threads, simd);
                for (rows, cols, block) in
                    [(37, 67, [16, 16]), (301, 1000, [128, 128]), (5, 8, [1, 8]), (50, 259, [50, 259])]
                {
                    let (w, f) = pair(&mut rng, rows, cols, block);
                    let x = rng.tensor(9, cols);
                    let want = b.matmul(&x, &f);
                    assert_eq!(bits(&b.matmul(&x, &w)), bits(&want), "{simd:?} t{threads} {rows}x{cols}");
                    assert_eq!(bits(&RefBackend.matmul(&x, &w)), bits(&RefBackend.matmul(&x, &f)), "ref {rows}x{cols}");
                    for r in [0, 4, 8] {
                        assert_eq!(bits(&b.matmul(&sub(&x, r, 1), &w)), bits(&sub(&want, r, 1)), "row {r} alone");
                    }
                }
            }
        }
    }

    /// A random MXFP4 weight (scales around 1) and its dequantized f32 twin.
    fn mxfp4_pair(rng: &mut Rng, rows: usize, cols: usize) -> (HostMat, HostMat) {
        let blocks: Vec<u8> = (0..rows * cols / 32)
            .flat_map(|_| {
                let codes: [u8; 32] = std::array::from_fn(|_| (rng.next_u64() & 0x0f) as u8);
                tf_formats::mxfp4::pack(&codes, 120 + (rng.next_u64() % 12) as u8)
            })
            .collect();
        let w = HostMat { dtype: DType::Mxfp4, rows, cols, data: TensorBytes::from_vec(&blocks), scales: None };
        let mut deq = vec![0.0; rows * cols];
        for (r, row) in deq.chunks_exact_mut(cols).enumerate() {
            w.row_f32(r, row);
        }
        (w, mat(DType::F32, rows, cols, &deq))
    }

    #[test]
    fn mxfp4_equals_the_f32_matmul_over_the_dequantized_weight_and_holds_17_bytes_a_block() {
        let mut rng = Rng::new(42);
        for simd in simds() {
            let b = cpu(2, simd);
            for (rows, cols) in [(37, 64), (300, 1024), (5, 32)] {
                let (w, f) = mxfp4_pair(&mut rng, rows, cols);
                let x = rng.tensor(9, cols);
                let want = b.matmul(&x, &f);
                assert_eq!(bits(&b.matmul(&x, &w)), bits(&want), "{simd:?} {rows}x{cols}");
                assert_eq!(bits(&RefBackend.matmul(&x, &w)), bits(&RefBackend.matmul(&x, &f)), "ref {rows}x{cols}");
                assert_eq!(w.held_bytes(), rows * cols / 32 * 17);
            }
        }
    }

    #[test]
    fn holds_one_byte_per_weight() {
        let (w, f) = pair(&mut Rng::new(41), 256, 512, [128, 128]);
        assert_eq!(w.held_bytes(), 256 * 512 + 2 * 4 * 4);
        assert_eq!(f.held_bytes(), 4 * 256 * 512);
    }
}
