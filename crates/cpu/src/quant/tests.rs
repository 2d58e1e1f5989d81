//! Quantized matmul against the dequantize-then-f32 reference, and its invariances.

use super::act::{ActBlock, Q8K, Q8x2, quantize_rows};
use super::spec;
use crate::testutil::{Rng, bits, rel_err, simds, sub};
use crate::{CpuBackend, CpuOptions, IntDot, QuantActs, Simd};
use tf_backend::{Backend, HostMat, HostTensor, RefBackend};
use tf_core::{DType, QuantType};
use tf_formats::TensorBytes;

/// Every block type.
pub(crate) const QUANTS: [QuantType; 10] = [
    QuantType::Q4_0,
    QuantType::Q4_1,
    QuantType::Q5_0,
    QuantType::Q5_1,
    QuantType::Q8_0,
    QuantType::Q2K,
    QuantType::Q3K,
    QuantType::Q4K,
    QuantType::Q5K,
    QuantType::Q6K,
];

/// Byte offsets of the f16 fields of a block (scales and mins).
fn half_fields(q: QuantType) -> &'static [usize] {
    match q {
        QuantType::Q4_0 | QuantType::Q5_0 | QuantType::Q8_0 => &[0],
        QuantType::Q4_1 | QuantType::Q5_1 | QuantType::Q4K | QuantType::Q5K => &[0, 2],
        QuantType::Q2K => &[80, 82],
        QuantType::Q3K => &[108],
        QuantType::Q6K => &[208],
    }
}

/// `n` blocks of `q`: random codes and scales, f16 fields finite and of either sign.
pub(crate) fn rand_blocks(rng: &mut Rng, q: QuantType, n: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..n * q.block_bytes()).map(|_| rng.next_u64() as u8).collect();
    for block in bytes.chunks_exact_mut(q.block_bytes()) {
        for &at in half_fields(q) {
            let v = half::f16::from_f32(rng.uniform() / 16.0);
            block[at..at + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    bytes
}

/// A random `[rows, cols]` weight in `q`.
pub(crate) fn rand_qmat(rng: &mut Rng, q: QuantType, rows: usize, cols: usize) -> HostMat {
    let bytes = rand_blocks(rng, q, rows * cols / q.block_len());
    HostMat { dtype: DType::Quant(q), rows, cols, data: TensorBytes::from_vec(&bytes), scales: None }
}

fn backend(threads: usize, simd: Simd, quant_acts: QuantActs) -> CpuBackend {
    let int_dot = if simd == Simd::Portable { IntDot::Portable } else { IntDot::detect() };
    CpuBackend::with_options(CpuOptions { threads, simd, int_dot, quant_acts, kv_dtype: tf_core::DType::F32 })
        .expect("test backend")
}

/// An int8-path backend with the integer dot products of `dot` (AVX2 kernels otherwise).
fn dot_backend(threads: usize, dot: IntDot) -> CpuBackend {
    let simd = if dot == IntDot::Portable { Simd::Portable } else { Simd::Avx2 };
    CpuBackend::with_options(CpuOptions { simd, int_dot: dot, quant_acts: QuantActs::Int8, ..CpuOptions::new(threads) })
        .expect("backend")
}

/// The VNNI choices this CPU has (the per-shape mix among them), each named with a skip message
/// for those it lacks.
fn vnni_dots() -> Vec<IntDot> {
    let (have, lack): (Vec<IntDot>, Vec<IntDot>) = [IntDot::AvxVnni, IntDot::Avx512Vnni, IntDot::Mixed]
        .into_iter()
        .partition(|d| d.available() && Simd::Avx2.available());
    for d in lack {
        eprintln!("skipped: this CPU lacks {}", d.name());
    }
    have
}

#[test]
fn vnni_kernels_equal_the_avx2_kernels_bit_for_bit() {
    // Same integers, same f32 steps: every block type, one to many blocks per row, every row
    // count of the 8-row tiles and their leftovers, odd output counts, one and two threads.
    let mut rng = Rng::new(59);
    let dots = vnni_dots();
    if dots.is_empty() {
        return;
    }
    for threads in [1, 2] {
        let avx2 = dot_backend(threads, IntDot::Avx2);
        let vnni: Vec<CpuBackend> = dots.iter().map(|&d| dot_backend(threads, d)).collect();
        for q in QUANTS {
            for k in widths(q).into_iter().chain([q.block_len() * 2, q.block_len().max(64) * 5]) {
                for (n, m) in [
                    (1, 1),
                    (3, 2),
                    (7, 3),
                    (5, 4),
                    (9, 5),
                    (2, 7),
                    (11, 8),
                    (6, 9),
                    (13, 15),
                    (4, 16),
                    (37, 17),
                    (3, 33),
                ] {
                    let (w, x) = (rand_qmat(&mut rng, q, n, k), rng.tensor(m, k));
                    let want = bits(&avx2.matmul(&x, &w));
                    for (d, b) in dots.iter().zip(&vnni) {
                        assert_eq!(bits(&b.matmul(&x, &w)), want, "{d:?} {q:?} k={k} n={n} m={m} threads={threads}");
                    }
                }
            }
        }
    }
}

#[test]
fn vnni_kernels_keep_extreme_codes_exact() {
    // Codes and activations at their ends (Q8_0's -128, Q6_K's 63, activations of +-127): the
    // sums the AVX2 `maddubs` keeps below i16 saturation are the VNNI sums too.
    let mut rng = Rng::new(60);
    let dots = vnni_dots();
    for q in QUANTS {
        let mut w = rand_qmat(&mut rng, q, 6, 2 * q.block_len().max(64));
        let mut bytes = w.data.as_bytes().to_vec();
        let bb = q.block_bytes();
        for (i, block) in bytes.chunks_exact_mut(bb).enumerate() {
            // Every code byte all ones or all zeros (the f16 fields keep their random values).
            for (j, v) in block.iter_mut().enumerate() {
                if !half_fields(q).iter().any(|&at| j == at || j == at + 1) {
                    *v = if i % 2 == 0 { 0xFF } else { 0x80 };
                }
            }
        }
        w.data = TensorBytes::from_vec(&bytes);
        let mut x = rng.tensor(9, w.cols);
        x.data.iter_mut().enumerate().for_each(|(i, v)| *v = if i % 3 == 0 { -1.0 } else { 1.0 });
        let want = bits(&dot_backend(1, IntDot::Portable).matmul(&x, &w));
        for d in dots.iter().copied().chain([IntDot::Avx2].into_iter().filter(|d| d.available())) {
            assert_eq!(bits(&dot_backend(2, d).matmul(&x, &w)), want, "{d:?} {q:?}");
        }
    }
}

/// Input widths per block length: one block, a few, and a long row.
fn widths(q: QuantType) -> [usize; 3] {
    let b = q.block_len();
    [b, 3 * b, 4096 + b]
}

/// Largest `|got - want| / (|x_r| |w_o|)` over outputs: error against the size of the operands.
fn norm_err(got: &HostTensor, want: &HostTensor, x: &HostTensor, w: &HostMat) -> f32 {
    let mut wrow = vec![0.0; w.cols];
    let wn: Vec<f32> = (0..w.rows)
        .map(|o| {
            w.row_f32(o, &mut wrow);
            wrow.iter().map(|v| v * v).sum::<f32>().sqrt()
        })
        .collect();
    let mut worst = 0.0f32;
    for r in 0..x.rows {
        let xn = x.row(r).iter().map(|v| v * v).sum::<f32>().sqrt();
        for (o, &wno) in wn.iter().enumerate() {
            let i = r * w.rows + o;
            worst = worst.max((got.data[i] - want.data[i]).abs() / (xn * wno).max(f32::MIN_POSITIVE));
        }
    }
    worst
}

/// `x` with each row replaced by its 8-bit blocks' values `d * q`.
fn requantized<A: ActBlock>(x: &HostTensor, value: impl Fn(&A) -> Vec<f32>) -> HostTensor {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("pool");
    let blocks = quantize_rows::<A>(&pool, false, &x.data, x.cols);
    let per_row = x.cols.div_ceil(A::LEN);
    let data = blocks.chunks(per_row).flat_map(|row| row.iter().flat_map(&value).take(x.cols).collect::<Vec<_>>());
    HostTensor { data: data.collect(), rows: x.rows, cols: x.cols }
}

/// The values of a pair of 32-blocks in element order.
fn pair_values(p: &Q8x2) -> Vec<f32> {
    let v = |h: usize, e: usize| p.d[4 * h] * p.qs[32 * (e / 16) + 16 * h + e % 16] as f32;
    (0..64).map(|i| v(i / 32, i % 32)).collect()
}

#[test]
fn int8_path_is_the_reference_on_8_bit_activations() {
    // With the activations rounded to their 8-bit blocks first, the reference computes what the
    // integer path does, up to f32 rounding of the scales and sums.
    let mut rng = Rng::new(50);
    for simd in simds() {
        let b = backend(2, simd, QuantActs::Int8);
        for q in QUANTS {
            // 5 and 19 rows: every row tile (16, 8, 4, 2, 1) against the reference.
            for (k, rows) in widths(q).into_iter().zip([5, 19, 5]) {
                let (w, x) = (rand_qmat(&mut rng, q, 37, k), rng.tensor(rows, k));
                let xq = if spec::format(q).k {
                    requantized::<Q8K>(&x, |b| b.qs.iter().map(|&v| b.d * v as f32).collect())
                } else {
                    requantized::<Q8x2>(&x, pair_values)
                };
                let e = norm_err(&b.matmul(&x, &w), &RefBackend.matmul(&xq, &w), &xq, &w);
                assert!(e < 1e-5, "{simd:?} {q:?} k={k} rows={rows}: {e}");
            }
        }
    }
}

#[test]
fn int8_path_is_near_the_f32_reference() {
    // 8-bit activations: each value within half a step (1/254 of its block's largest). Over
    // uniform data the worst output is off by about 2e-3 of |x| |w| for one block, 2e-4 for 4096
    // inputs; llama.cpp's numerics, which the tolerance allows with a margin.
    let mut rng = Rng::new(51);
    let b = backend(2, Simd::detect(), QuantActs::Int8);
    for q in QUANTS {
        for k in widths(q) {
            let (w, x) = (rand_qmat(&mut rng, q, 37, k), rng.tensor(5, k));
            let e = norm_err(&b.matmul(&x, &w), &RefBackend.matmul(&x, &w), &x, &w);
            assert!(e < 5e-3, "{q:?} k={k}: {e}");
        }
    }
}

#[test]
fn f32_path_matches_the_reference() {
    // The same products summed in another order: within 1e-5 of the output's scale.
    let mut rng = Rng::new(52);
    for simd in simds() {
        let b = backend(2, simd, QuantActs::F32);
        for q in QUANTS {
            for k in widths(q) {
                let (w, x) = (rand_qmat(&mut rng, q, 37, k), rng.tensor(6, k));
                let e = rel_err(&b.matmul(&x, &w).data, &RefBackend.matmul(&x, &w).data);
                assert!(e < 1e-5, "{simd:?} {q:?} k={k}: {e}");
            }
        }
    }
}

#[test]
fn every_row_count_and_thread_count_gives_the_single_row_bits() {
    let mut rng = Rng::new(53);
    for simd in simds() {
        for acts in [QuantActs::Int8, QuantActs::F32] {
            let (one, two) = (backend(1, simd, acts), backend(2, simd, acts));
            for q in QUANTS {
                let k = 2 * q.block_len().max(128);
                let (w, x) = (rand_qmat(&mut rng, q, 53, k), rng.tensor(33, k));
                let singles: Vec<Vec<u32>> = (0..33).map(|r| bits(&one.matmul(&sub(&x, r, 1), &w))).collect();
                for m in 1..=33 {
                    for b in [&one, &two] {
                        let y = b.matmul(&sub(&x, 0, m), &w);
                        for (r, single) in singles.iter().enumerate().take(m) {
                            let t = b.threads();
                            assert_eq!(
                                &bits(&sub(&y, r, 1)),
                                single,
                                "{simd:?} {acts:?} {q:?} m={m} r={r} threads={t}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn rows_at_any_offset_of_a_batch_match() {
    let mut rng = Rng::new(54);
    for acts in [QuantActs::Int8, QuantActs::F32] {
        let b = backend(2, Simd::detect(), acts);
        for q in [QuantType::Q4K, QuantType::Q5_0] {
            let (w, x) = (rand_qmat(&mut rng, q, 29, 512), rng.tensor(37, 512));
            let whole = b.matmul(&x, &w);
            for start in [1, 2, 3, 5, 30] {
                let part = b.matmul(&sub(&x, start, 37 - start), &w);
                assert_eq!(bits(&part), bits(&sub(&whole, start, 37 - start)), "{acts:?} {q:?} start {start}");
            }
        }
    }
}

#[test]
fn avx2_and_portable_agree_bit_for_bit() {
    if !Simd::Avx2.available() {
        return;
    }
    let mut rng = Rng::new(55);
    for acts in [QuantActs::Int8, QuantActs::F32] {
        let (a, p) = (backend(2, Simd::Avx2, acts), backend(2, Simd::Portable, acts));
        for q in QUANTS {
            for k in widths(q) {
                // Odd output counts and every leftover row count of the 4-row tiles.
                for (n, m) in [(1, 1), (7, 2), (37, 3), (45, 9)] {
                    let (w, x) = (rand_qmat(&mut rng, q, n, k), rng.tensor(m, k));
                    assert_eq!(bits(&a.matmul(&x, &w)), bits(&p.matmul(&x, &w)), "{acts:?} {q:?} k={k} n={n} m={m}");
                }
            }
        }
    }
}

#[test]
fn large_activations_and_zero_rows_stay_finite() {
    // Block scales span the range of the data; an all-zero row gives zeros.
    let mut rng = Rng::new(56);
    let b = backend(2, Simd::detect(), QuantActs::Int8);
    for q in QUANTS {
        let w = rand_qmat(&mut rng, q, 9, 512);
        let mut x = rng.tensor(3, 512);
        x.data[..512].iter_mut().for_each(|v| *v *= 1e4);
        x.data[512..1024].fill(0.0);
        let (got, want) = (b.matmul(&x, &w), RefBackend.matmul(&x, &w));
        assert!(got.data.iter().all(|v| v.is_finite()), "{q:?}");
        assert!(got.data[9..18].iter().all(|&v| v == 0.0), "{q:?}");
        assert!(norm_err(&got, &want, &x, &w) < 2e-3, "{q:?}");
    }
}

#[test]
fn empty_shapes_give_empty_results() {
    let mut rng = Rng::new(57);
    for acts in [QuantActs::Int8, QuantActs::F32] {
        let b = backend(2, Simd::detect(), acts);
        let w = rand_qmat(&mut rng, QuantType::Q4K, 5, 256);
        assert_eq!(b.matmul(&rng.tensor(0, 256), &w).data.len(), 0);
        let w0 = rand_qmat(&mut rng, QuantType::Q8_0, 0, 64);
        assert_eq!(b.shape(&b.matmul(&rng.tensor(3, 64), &w0)), (3, 0));
    }
}

#[test]
fn embedding_rows_of_a_quantized_table_are_dequantized() {
    let mut rng = Rng::new(58);
    let table = rand_qmat(&mut rng, QuantType::Q6K, 11, 256);
    let b = backend(2, Simd::detect(), QuantActs::Int8);
    let ids = [3, 0, 10, 3];
    assert_eq!(bits(&b.embed(&table, &ids, 0.5)), bits(&RefBackend.embed(&table, &ids, 0.5)));
}

#[test]
fn matmul_many_equals_one_matmul_per_weight_bit_for_bit() {
    // One quantization of x shared by weights of both activation kinds (k-quants and 32-weight
    // types, signed and not), on every choice of dot products and both numerics.
    let mut rng = Rng::new(61);
    let k = 512;
    let ws: Vec<HostMat> = QUANTS.iter().enumerate().map(|(i, &q)| rand_qmat(&mut rng, q, 5 + i, k)).collect();
    let refs: Vec<&HostMat> = ws.iter().collect();
    let mut dots: Vec<IntDot> = vnni_dots();
    dots.extend([IntDot::Avx2, IntDot::Portable].into_iter().filter(|d| d.available()));
    for rows in [1, 4, 9] {
        let x = rng.tensor(rows, k);
        for &d in &dots {
            for acts in [QuantActs::Int8, QuantActs::F32] {
                let simd = if d == IntDot::Portable { Simd::Portable } else { Simd::Avx2 };
                let b =
                    CpuBackend::with_options(CpuOptions { simd, int_dot: d, quant_acts: acts, ..CpuOptions::new(2) })
                        .expect("backend");
                let many = b.matmul_many(&x, &refs);
                assert_eq!(many.len(), ws.len());
                for (got, w) in many.iter().zip(&ws) {
                    assert_eq!(bits(got), bits(&b.matmul(&x, w)), "{d:?} {acts:?} {:?} rows={rows}", w.dtype);
                }
            }
        }
    }
}
