//! Batch-invariant `x @ w^T` over weights kept in their storage type (bf16, f16, f32).
//!
//! Every output element is one dot product in the fixed order of [`crate::simd`], whatever the
//! number of rows, the tile a row falls in, or the thread count: each tile holds one 8-lane
//! accumulator per (row, output) and walks the whole reduction itself. Work is split over output
//! features only. Tiles of 4 rows x 3 outputs reuse each converted weight vector across rows in
//! prefill; a single row runs 8 outputs at a time so decode streams the weights.

use crate::simd::{Portable, Simd};
use rayon::ThreadPool;
use rayon::prelude::*;
use std::ops::Range;
use tf_backend::{HostMat, HostTensor};
use tf_core::DType;

/// Output features per task granule and cache block: a multiple of every tile width (3 and 8).
pub(crate) const GRAIN: usize = 24;
/// Bytes of weight rows kept in L2 while all row tiles pass over them.
pub(crate) const BLOCK_BYTES: usize = 128 << 10;
/// Tasks per thread, for balance; it moves work between threads, never changes a sum.
const TASKS_PER_THREAD: usize = 4;

/// The output buffer, shared by tasks that write disjoint columns.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint elements through it while the owning buffer outlives them.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The first element of the `[rows, n]` output.
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}

/// A `[rows, n]` output filled by `f(outs, dst)` over chunks of output columns in parallel.
///
/// Each call must write only columns `outs` of `dst`. Chunk edges are multiples of [`GRAIN`]
/// where the width allows; they move work between threads and never change a value.
pub(crate) fn par_columns(
    pool: &ThreadPool,
    rows: usize,
    n: usize,
    f: impl Fn(Range<usize>, OutPtr) + Send + Sync,
) -> HostTensor {
    let mut out = HostTensor::zeros(rows, n);
    if rows == 0 || n == 0 {
        return out;
    }
    let tasks = (pool.current_num_threads() * TASKS_PER_THREAD).min(n.div_ceil(GRAIN));
    let edge = |t: usize| if t == tasks { n } else { (t * n / tasks).next_multiple_of(GRAIN).min(n) };
    let dst = OutPtr(out.data.as_mut_ptr());
    pool.install(|| {
        (0..tasks).into_par_iter().for_each(|t| {
            let outs = edge(t)..edge(t + 1);
            if !outs.is_empty() {
                f(outs, dst)
            }
        })
    });
    out
}

/// One `[rows, ns[i]]` output per `i`, filled by `f(i, outs, dst)` over chunks of each output's
/// columns, all in one parallel pass (one wake-up of the pool for several matmuls).
///
/// Each call must write only columns `outs` of output `i`. Chunk edges are those of
/// [`par_columns`]; they move work between threads and never change a value.
pub(crate) fn par_columns_many(
    pool: &ThreadPool,
    rows: usize,
    ns: &[usize],
    f: impl Fn(usize, Range<usize>, OutPtr) + Send + Sync,
) -> Vec<HostTensor> {
    let mut outs: Vec<HostTensor> = ns.iter().map(|&n| HostTensor::zeros(rows, n)).collect();
    if rows == 0 {
        return outs;
    }
    let threads = pool.current_num_threads();
    let mut tasks: Vec<(usize, Range<usize>)> = Vec::new();
    for (i, &n) in ns.iter().enumerate() {
        let count = (threads * TASKS_PER_THREAD).min(n.div_ceil(GRAIN));
        let edge = |t: usize| if t == count { n } else { (t * n / count).next_multiple_of(GRAIN).min(n) };
        tasks.extend((0..count).map(|t| (i, edge(t)..edge(t + 1))).filter(|(_, r)| !r.is_empty()));
    }
    let dsts: Vec<OutPtr> = outs.iter_mut().map(|o| OutPtr(o.data.as_mut_ptr())).collect();
    pool.install(|| tasks.into_par_iter().for_each(|(i, cols)| f(i, cols, dsts[i])));
    outs
}

/// `x[rows, in] @ w[out, in]^T`, parallel over chunks of output features.
pub(crate) fn matmul(pool: &ThreadPool, simd: Simd, x: &HostTensor, w: &HostMat) -> HostTensor {
    assert_eq!(x.cols, w.cols, "matmul: x has {} columns, the weight {} inputs", x.cols, w.cols);
    assert_eq!(x.data.len(), x.rows * x.cols, "matmul: x holds {} values for {}x{}", x.data.len(), x.rows, x.cols);
    assert!(w.dtype.is_float(), "matmul: weight dtype {} is not a float type", w.dtype);
    let need = w.rows * w.cols * w.dtype.size();
    assert!(w.data.as_bytes().len() >= need, "matmul: weight holds {} bytes, needs {need}", w.data.as_bytes().len());
    // SAFETY: each call writes only columns `outs` of the output, which outlives the scope;
    // shapes and byte lengths were checked above.
    par_columns(pool, x.rows, w.rows, |outs, dst| unsafe { run(simd, x, w, outs, dst.get()) })
}

/// Computes output columns `outs` of every row into `dst` (`[x.rows, w.rows]`).
///
/// # Safety
/// `dst` points at `x.rows * w.rows` writable values no one else touches in columns `outs`;
/// `w` holds `w.rows * w.cols` elements; `simd` is available.
unsafe fn run(simd: Simd, x: &HostTensor, w: &HostMat, outs: Range<usize>, dst: *mut f32) {
    #[cfg(target_arch = "x86_64")]
    if simd == Simd::Avx2 {
        let a = avx2::Args { x: x.data.as_ptr(), w: w.data.as_bytes().as_ptr(), w0: 0, k: w.cols, n: w.rows, dst };
        // SAFETY: forwarded from the caller.
        unsafe {
            match w.dtype {
                DType::BF16 => avx2::run::<avx2::Bf16>(&a, x.rows, outs),
                DType::F16 => avx2::run::<avx2::F16>(&a, x.rows, outs),
                DType::F32 => avx2::run::<avx2::F32>(&a, x.rows, outs),
                other => unreachable!("matmul refuses {other} weights"),
            }
        }
        return;
    }
    let _ = simd;
    let mut wrow = vec![0.0; w.cols];
    for o in outs {
        w.row_f32(o, &mut wrow);
        for r in 0..x.rows {
            // SAFETY: `r * w.rows + o` is inside `dst` and in this task's columns.
            unsafe { *dst.add(r * w.rows + o) = Portable::dot(x.row(r), &wrow) };
        }
    }
}

/// Computes output columns `outs` of every row into `dst` (`[x.rows, n]`) from f32 weight rows
/// `w` (`outs.len()` rows of `x.cols`, the first for output `outs.start`): the values `run` gives
/// for an f32 weight holding those rows.
///
/// # Safety
/// As for `run`, with `w` holding `outs.len() * x.cols` values.
pub(crate) unsafe fn run_f32_rows(simd: Simd, x: &HostTensor, w: &[f32], n: usize, outs: Range<usize>, dst: *mut f32) {
    let k = x.cols;
    #[cfg(target_arch = "x86_64")]
    if simd == Simd::Avx2 {
        let a = avx2::Args { x: x.data.as_ptr(), w: w.as_ptr().cast(), w0: outs.start, k, n, dst };
        // SAFETY: forwarded from the caller.
        unsafe { avx2::run::<avx2::F32>(&a, x.rows, outs) };
        return;
    }
    let _ = simd;
    for (o, wrow) in outs.zip(w.chunks_exact(k.max(1))) {
        for r in 0..x.rows {
            // SAFETY: `r * n + o` is inside `dst` and in this task's columns.
            unsafe { *dst.add(r * n + o) = Portable::dot(x.row(r), wrow) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{BLOCK_BYTES, GRAIN};
    use crate::simd::hsum;
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Raw operands of one call: `x[rows, k]`, `w[n, k]` in storage type from row `w0` on,
    /// `dst[rows, n]`.
    pub(super) struct Args {
        pub x: *const f32,
        pub w: *const u8,
        pub w0: usize,
        pub k: usize,
        pub n: usize,
        pub dst: *mut f32,
    }

    /// A weight storage type: 8 elements to f32 lanes.
    pub(super) trait Load8 {
        /// Bytes per element.
        const SIZE: usize;
        /// Eight elements at `p` (unaligned) as f32.
        ///
        /// # Safety
        /// `p` points at `8 * SIZE` readable bytes; the CPU has AVX2 and F16C.
        unsafe fn load8(p: *const u8) -> __m256;
    }

    /// bfloat16: the upper half of an f32.
    pub(super) struct Bf16;
    /// IEEE half, widened by F16C.
    pub(super) struct F16;
    /// IEEE single.
    pub(super) struct F32;

    impl Load8 for Bf16 {
        const SIZE: usize = 2;
        #[inline(always)]
        unsafe fn load8(p: *const u8) -> __m256 {
            unsafe {
                let h = _mm_loadu_si128(p.cast());
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
            }
        }
    }

    impl Load8 for F16 {
        const SIZE: usize = 2;
        #[inline(always)]
        unsafe fn load8(p: *const u8) -> __m256 {
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
        }
    }

    impl Load8 for F32 {
        const SIZE: usize = 4;
        #[inline(always)]
        unsafe fn load8(p: *const u8) -> __m256 {
            unsafe { _mm256_loadu_ps(p.cast()) }
        }
    }

    /// All rows times output columns `outs`, in cache blocks of weight rows.
    ///
    /// # Safety
    /// As for `super::run`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn run<W: Load8>(a: &Args, rows: usize, outs: Range<usize>) {
        let block = (BLOCK_BYTES / (a.k * W::SIZE).max(1) / GRAIN * GRAIN).max(GRAIN);
        let tiled = rows / 4 * 4;
        let mut b0 = outs.start;
        while b0 < outs.end {
            let b = b0..(b0 + block).min(outs.end);
            unsafe {
                for r0 in (0..tiled).step_by(4) {
                    panel::<4, 3, W>(a, r0, b.clone());
                }
                match rows - tiled {
                    1 => panel::<1, 8, W>(a, tiled, b.clone()),
                    2 => panel::<2, 4, W>(a, tiled, b.clone()),
                    3 => panel::<3, 3, W>(a, tiled, b.clone()),
                    _ => {}
                }
            }
            b0 = b.end;
        }
    }

    /// Rows `r0..r0 + R` times columns `outs`, `C` columns per tile then one at a time.
    #[inline(always)]
    unsafe fn panel<const R: usize, const C: usize, W: Load8>(a: &Args, r0: usize, outs: Range<usize>) {
        let mut o = outs.start;
        while o + C <= outs.end {
            unsafe { tile::<R, C, W>(a, r0, o) };
            o += C;
        }
        while o < outs.end {
            unsafe { tile::<R, 1, W>(a, r0, o) };
            o += 1;
        }
    }

    /// One `R x C` block of outputs, each with its own accumulator over the whole reduction.
    #[inline(always)]
    unsafe fn tile<const R: usize, const C: usize, W: Load8>(a: &Args, r0: usize, o0: usize) {
        let (k, full) = (a.k, a.k & !7);
        unsafe {
            let xs = a.x.add(r0 * k);
            let ws = a.w.add((o0 - a.w0) * k * W::SIZE);
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            let mut wv = [_mm256_setzero_ps(); C];
            let mut i = 0;
            while i < full {
                for (c, v) in wv.iter_mut().enumerate() {
                    *v = W::load8(ws.add((c * k + i) * W::SIZE));
                }
                for (r, accr) in acc.iter_mut().enumerate() {
                    let xv = _mm256_loadu_ps(xs.add(r * k + i));
                    for (s, v) in accr.iter_mut().zip(&wv) {
                        *s = _mm256_fmadd_ps(xv, *v, *s);
                    }
                }
                i += 8;
            }
            if full < k {
                let t = k - full;
                for (c, v) in wv.iter_mut().enumerate() {
                    let mut buf = [0u8; 32];
                    std::ptr::copy_nonoverlapping(ws.add((c * k + full) * W::SIZE), buf.as_mut_ptr(), t * W::SIZE);
                    *v = W::load8(buf.as_ptr());
                }
                for (r, accr) in acc.iter_mut().enumerate() {
                    let mut buf = [0.0f32; 8];
                    std::ptr::copy_nonoverlapping(xs.add(r * k + full), buf.as_mut_ptr(), t);
                    let xv = _mm256_loadu_ps(buf.as_ptr());
                    for (s, v) in accr.iter_mut().zip(&wv) {
                        *s = _mm256_fmadd_ps(xv, *v, *s);
                    }
                }
            }
            for (r, accr) in acc.iter().enumerate() {
                for (c, s) in accr.iter().enumerate() {
                    *a.dst.add((r0 + r) * a.n + o0 + c) = hsum(*s);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{DTYPES, Rng, bits, cpu, rand_mat, rel_err, simds, sub};
    use tf_backend::{Backend, RefBackend};

    const SIZES: [usize; 4] = [3, 67, 256, 4096 + 8 + 3];

    #[test]
    fn every_row_count_gives_each_row_the_single_row_result() {
        let mut rng = Rng::new(10);
        for simd in simds() {
            let b = cpu(2, simd);
            for dtype in DTYPES {
                for k in SIZES {
                    let w = rand_mat(&mut rng, dtype, 37, k);
                    let x = rng.tensor(37, k);
                    let singles: Vec<HostTensor> = (0..37).map(|r| b.matmul(&sub(&x, r, 1), &w)).collect();
                    for m in 1..=37 {
                        let y = b.matmul(&sub(&x, 0, m), &w);
                        for (r, single) in singles.iter().enumerate().take(m) {
                            assert_eq!(bits(&sub(&y, r, 1)), bits(single), "{simd:?} {dtype} k={k} m={m} r={r}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn rows_in_any_position_of_a_batch_match() {
        // A row computed in a 4-row tile at an offset equals the same row alone.
        let mut rng = Rng::new(11);
        let b = cpu(2, Simd::detect());
        let w = rand_mat(&mut rng, DType::BF16, 50, 4107);
        let x = rng.tensor(37, 4107);
        let whole = b.matmul(&x, &w);
        for start in [1, 2, 3, 5, 30] {
            let part = b.matmul(&sub(&x, start, 37 - start), &w);
            assert_eq!(bits(&part), bits(&sub(&whole, start, 37 - start)), "start {start}");
        }
    }

    #[test]
    fn thread_count_does_not_change_bits() {
        let mut rng = Rng::new(12);
        for simd in simds() {
            for dtype in DTYPES {
                let w = rand_mat(&mut rng, dtype, 301, 1035);
                let x = rng.tensor(13, 1035);
                let one = cpu(1, simd).matmul(&x, &w);
                let two = cpu(2, simd).matmul(&x, &w);
                let three = cpu(3, simd).matmul(&x, &w);
                assert_eq!(bits(&one), bits(&two), "{simd:?} {dtype}");
                assert_eq!(bits(&one), bits(&three), "{simd:?} {dtype}");
            }
        }
    }

    #[test]
    fn avx2_and_portable_agree_bit_for_bit() {
        if !Simd::Avx2.available() {
            return;
        }
        let mut rng = Rng::new(13);
        for dtype in DTYPES {
            for k in SIZES {
                let w = rand_mat(&mut rng, dtype, 29, k);
                let x = rng.tensor(9, k);
                let a = cpu(2, Simd::Avx2).matmul(&x, &w);
                let p = cpu(2, Simd::Portable).matmul(&x, &w);
                assert_eq!(bits(&a), bits(&p), "{dtype} k={k}");
            }
        }
    }

    #[test]
    fn matches_the_reference() {
        // f32 sums of a few thousand terms in another order: within 1e-5 of the output's scale.
        let mut rng = Rng::new(14);
        for simd in simds() {
            let b = cpu(2, simd);
            for dtype in DTYPES {
                for k in SIZES {
                    let w = rand_mat(&mut rng, dtype, 53, k);
                    let x = rng.tensor(6, k);
                    let e = rel_err(&b.matmul(&x, &w).data, &RefBackend.matmul(&x, &w).data);
                    assert!(e < 1e-5, "{simd:?} {dtype} k={k}: {e}");
                }
            }
        }
    }

    #[test]
    fn empty_shapes_give_empty_results() {
        let mut rng = Rng::new(15);
        let b = cpu(2, Simd::detect());
        let w = rand_mat(&mut rng, DType::F32, 5, 8);
        assert_eq!(b.matmul(&rng.tensor(0, 8), &w).data.len(), 0);
        let w0 = rand_mat(&mut rng, DType::F32, 0, 8);
        assert_eq!(b.shape(&b.matmul(&rng.tensor(3, 8), &w0)), (3, 0));
    }
}
