//! AVX2 kernels of the quantized matmul: tiles of rows x output features, each output element
//! with its own accumulator walking all blocks in order, so tiling never changes a sum.
//!
//! Integer path (after llama.cpp's `ggml_vec_dot_*_q8_*`): per 32-weight chunk one
//! `maddubs` (unsigned codes times signed activations) and one `madd` (by the group scales, or by
//! ones), accumulated in i32 lanes over the block, then scaled in f32 once per block; offsets and
//! k-quant mins go through the activations' per-16 sums. The integers and f32 steps are those of
//! [`super::spec`]. A weight block is unpacked once per tile and met by all its rows. The integer
//! steps come from [`super::dots`] (AVX2, AVX-VNNI or AVX-512 VNNI, one entry point each), the
//! unpacking and f32 steps from here, so every instruction set gives the same bits.

use super::act::{Q8K, Q8x2};
use super::avx2_blocks::{self as blk, KType, QType};
use super::dots::{Dots, Madd, Vnni256, Vnni512};
use super::{IntDot, Operands, ZERO_BLOCK};
use crate::matmul::{BLOCK_BYTES, GRAIN};
use crate::simd::hsum;
use std::arch::x86_64::*;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ops::Range;
use tf_core::QuantType;

/// A kernel over one weight block per output of a tile.
trait Kernel {
    /// Activation operand per block.
    type X;
    /// Block `b` of outputs `o0..o0 + C` against rows `r0..r0 + R` into the accumulators.
    unsafe fn block<const R: usize, const C: usize>(
        a: &Args<Self::X>,
        r0: usize,
        o0: usize,
        b: usize,
        t: &mut Acc<R, C>,
    );
    /// The output value of one accumulator.
    fn finish(acc: __m256, accm: f32) -> f32;
    /// Rows of the integer path's widest tile (a weight block unpacked once for them).
    const ROWS: usize = INT_ROWS;
}

/// One tile's accumulators: 8 f32 lanes per element, and a scalar for Q4_1 / Q5_1 mins.
struct Acc<const R: usize, const C: usize> {
    v: [[__m256; C]; R],
    m: [[f32; C]; R],
}

/// A call's operands as raw parts: activations (quantized blocks or f32 values), weights, output.
pub(super) struct Args<X> {
    /// Activations: row `r` of `X` units starts at `x + r * x_stride`.
    x: *const X,
    x_stride: usize,
    /// [`super::Operands::xu`] (same indexing as `x`), or null where the kernel does not use it.
    xu: *const [u8; 64],
    /// Weight rows of `row_bytes`.
    w: *const u8,
    row_bytes: usize,
    /// Activation units per row (blocks, or pairs of 32-weight blocks).
    nb: usize,
    /// Weight blocks per row.
    wb: usize,
    /// Output features; `dst` is `[rows, n]`.
    n: usize,
    dst: *mut f32,
}

impl<X> Args<X> {
    /// Block `b` of weight row `o`.
    #[inline(always)]
    unsafe fn wblock(&self, o: usize, b: usize, bytes: usize) -> *const u8 {
        unsafe { self.w.add(o * self.row_bytes + b * bytes) }
    }
}

/// The integer path of k-quant `T` against [`Q8K`] rows, integer steps by `D`.
struct IntK<T, D = Madd>(PhantomData<(T, D)>);
/// The integer path of 32-weight type `T` against [`Q8x2`] rows (pairs of blocks), steps by `D`.
struct Int32<T, D = Madd>(PhantomData<(T, D)>);

/// `_mm256_shuffle_epi8` control giving 16-bit element `2 k` in the low lane, `2 k + 1` in the high.
#[inline(always)]
unsafe fn scale_pick(k: usize) -> __m256i {
    let lo = (((4 * k + 1) << 8) | (4 * k)) as i16;
    let hi = (((4 * k + 3) << 8) | (4 * k + 2)) as i16;
    unsafe { _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo)) }
}

impl<T: KType, D: Dots> Kernel for IntK<T, D> {
    type X = Q8K;

    /// One output at a time (its unpacked block then stays in registers), met by each row.
    #[inline(always)]
    unsafe fn block<const R: usize, const C: usize>(a: &Args<Q8K>, r0: usize, o0: usize, b: usize, t: &mut Acc<R, C>) {
        unsafe {
            let x: [&Q8K; R] = std::array::from_fn(|r| &*a.x.add((r0 + r) * a.x_stride + b));
            for c in 0..C {
                let w = a.wblock(o0 + c, b, T::BYTES);
                for line in (0..T::BYTES).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(PREFETCH + line).cast());
                }
                let (d, dmin, sc, m) = T::head(w);
                let lo = _mm256_permute2x128_si256::<0x00>(sc, sc);
                let hi = _mm256_permute2x128_si256::<0x11>(sc, sc);
                let corr = if T::MIN { m } else { _mm256_mullo_epi16(sc, _mm256_set1_epi16(T::OFF)) };
                let mut isum = [D::k_zero(); R];
                for p in 0..4 {
                    let (w0, w1) = T::pair(w, p);
                    let src = if p < 2 { lo } else { hi };
                    let s0 = _mm256_shuffle_epi8(src, scale_pick(2 * p % 4));
                    let s1 = _mm256_shuffle_epi8(src, scale_pick(2 * p % 4 + 1));
                    let k = D::k_prep(w0, w1, s0, s1);
                    for (xr, is) in x.iter().zip(isum.iter_mut()) {
                        *is = D::k_step(*is, &k, xr.qs.as_ptr().add(64 * p).cast());
                    }
                }
                for (r, xr) in x.iter().enumerate() {
                    let g = _mm256_madd_epi16(_mm256_loadu_si256(xr.bsums.as_ptr().cast()), corr);
                    let acc = &mut t.v[r][c];
                    if T::MIN {
                        *acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * xr.d), _mm256_cvtepi32_ps(g), *acc);
                    }
                    let i = D::k_lanes(isum[r]);
                    let i = if T::OFF != 0 { _mm256_sub_epi32(i, g) } else { i };
                    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d * xr.d), _mm256_cvtepi32_ps(i), *acc);
                }
            }
        }
    }

    #[inline(always)]
    fn finish(acc: __m256, _: f32) -> f32 {
        unsafe { hsum(acc) }
    }
}

impl<T: QType, D: Dots> Kernel for Int32<T, D> {
    type X = Q8x2;
    /// The VNNI form of signed codes has few steps a row, so more rows share each unpacked
    /// pair (measured: 16 rows about 10% faster than 8 there, slower elsewhere).
    const ROWS: usize = if T::SIGNED && D::OFFSET { 2 * INT_ROWS } else { INT_ROWS };

    /// Unit `j` is the block pair `2 j`, `2 j + 1` (an all-zero block past the row's end). One
    /// output at a time (its unpacked pair then stays in registers), met by each row.
    #[inline(always)]
    unsafe fn block<const R: usize, const C: usize>(a: &Args<Q8x2>, r0: usize, o0: usize, j: usize, t: &mut Acc<R, C>) {
        unsafe {
            let x: [&Q8x2; R] = std::array::from_fn(|r| &*a.x.add((r0 + r) * a.x_stride + j));
            for c in 0..C {
                let wa = a.wblock(o0 + c, 2 * j, T::BYTES);
                let wb = if 2 * j + 1 < a.wb { wa.add(T::BYTES) } else { ZERO_BLOCK.as_ptr() };
                _mm_prefetch::<_MM_HINT_T0>(wa.wrapping_add(PREFETCH).cast());
                let (lo, hi, d, [ma, mb]) = T::pair(wa, wb);
                // Signed weights meet the activations through the sign trick, |w| * (sign(w) x),
                // or on VNNI as (x + 128) w - 128 w.
                let offset = T::SIGNED && D::OFFSET;
                let pw = D::p_prep(lo, hi, T::SIGNED && !offset);
                let sw = if offset { Some(D::s_prep(lo, hi)) } else { None };
                for (r, xr) in x.iter().enumerate() {
                    let i = match &sw {
                        Some(sw) => D::s_lanes(sw, a.xu.add((r0 + r) * a.x_stride + j).cast()),
                        None => D::p_lanes(&pw, T::SIGNED, xr.qs.as_ptr().cast()),
                    };
                    let s = _mm256_mul_ps(d, _mm256_loadu_ps(xr.d.as_ptr()));
                    t.v[r][c] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(i), t.v[r][c]);
                    if T::MIN {
                        t.m[r][c] = mb.mul_add(xr.s[1], ma.mul_add(xr.s[0], t.m[r][c]));
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn finish(acc: __m256, accm: f32) -> f32 {
        let v = unsafe { hsum(acc) };
        if T::MIN { v + accm } else { v }
    }
}

/// The f32 path of block type `D`: dequantize each weight block, then FMA in element order.
struct Deq<D>(PhantomData<D>);

/// Exact dequantization of one block type.
trait Dequant {
    /// Weights per block.
    const QK: usize;
    /// Bytes per block.
    const BYTES: usize;
    /// Block `b` into `out[..QK]`.
    unsafe fn dequant(b: *const u8, out: *mut f32);
}

impl<T: KType> Dequant for IntK<T> {
    const QK: usize = 256;
    const BYTES: usize = T::BYTES;
    #[inline(always)]
    unsafe fn dequant(b: *const u8, out: *mut f32) {
        unsafe { blk::dequant_k::<T>(b, out) }
    }
}

impl<T: QType> Dequant for Int32<T> {
    const QK: usize = 32;
    const BYTES: usize = T::BYTES;
    #[inline(always)]
    unsafe fn dequant(b: *const u8, out: *mut f32) {
        unsafe { blk::dequant_32::<T>(b, out) }
    }
}

impl<D: Dequant> Kernel for Deq<D> {
    type X = f32;

    #[inline(always)]
    unsafe fn block<const R: usize, const C: usize>(a: &Args<f32>, r0: usize, o0: usize, b: usize, t: &mut Acc<R, C>) {
        unsafe {
            // Uninitialised: only the first `QK` values of each row are written, then read.
            let mut buf = [[MaybeUninit::<f32>::uninit(); 256]; C];
            for (c, bc) in buf.iter_mut().enumerate() {
                D::dequant(a.wblock(o0 + c, b, D::BYTES), bc.as_mut_ptr().cast());
            }
            let xs: [*const f32; R] = std::array::from_fn(|r| a.x.add((r0 + r) * a.x_stride + b * D::QK));
            for i in (0..D::QK).step_by(8) {
                let wv: [__m256; C] = std::array::from_fn(|c| _mm256_loadu_ps(buf[c].as_ptr().add(i).cast()));
                for (r, xr) in xs.iter().enumerate() {
                    let xv = _mm256_loadu_ps(xr.add(i));
                    for (s, v) in t.v[r].iter_mut().zip(&wv) {
                        *s = _mm256_fmadd_ps(xv, *v, *s);
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn finish(acc: __m256, _: f32) -> f32 {
        unsafe { hsum(acc) }
    }
}

/// One `R x C` tile of outputs over all blocks.
#[inline(always)]
unsafe fn tile<F: Kernel, const R: usize, const C: usize>(a: &Args<F::X>, r0: usize, o0: usize) {
    unsafe {
        let mut t = Acc { v: [[_mm256_setzero_ps(); C]; R], m: [[0.0; C]; R] };
        for b in 0..a.nb {
            F::block::<R, C>(a, r0, o0, b, &mut t);
        }
        for r in 0..R {
            for c in 0..C {
                *a.dst.add((r0 + r) * a.n + o0 + c) = F::finish(t.v[r][c], t.m[r][c]);
            }
        }
    }
}

/// Rows `r0..r0 + R` times columns `outs`, `C` columns per tile then one at a time.
#[inline(always)]
unsafe fn panel<F: Kernel, const R: usize, const C: usize>(a: &Args<F::X>, r0: usize, outs: Range<usize>) {
    let mut o = outs.start;
    while o + C <= outs.end {
        unsafe { tile::<F, R, C>(a, r0, o) };
        o += C;
    }
    while o < outs.end {
        unsafe { tile::<F, R, 1>(a, r0, o) };
        o += 1;
    }
}

/// Bytes ahead of the weight stream to prefetch: decode reads each weight once, from memory.
const PREFETCH: usize = 2048;

/// Rows per integer tile: a weight block is unpacked once for this many rows.
const INT_ROWS: usize = 8;

/// All rows times output columns `outs`, in cache blocks of weight rows.
#[inline(always)]
unsafe fn run<F: Kernel>(a: &Args<F::X>, rows: usize, outs: Range<usize>, f32_path: bool) {
    let block = (BLOCK_BYTES / a.row_bytes.max(1) / GRAIN * GRAIN).max(GRAIN);
    let mut b0 = outs.start;
    while b0 < outs.end {
        let b = b0..(b0 + block).min(outs.end);
        // SAFETY: forwarded from the caller; tiles stay inside `rows` and `outs`.
        unsafe {
            if f32_path {
                let tiled = rows / 4 * 4;
                for r0 in (0..tiled).step_by(4) {
                    panel::<F, 4, 3>(a, r0, b.clone());
                }
                match rows - tiled {
                    1 => panel::<F, 1, 8>(a, tiled, b.clone()),
                    2 => panel::<F, 2, 4>(a, tiled, b.clone()),
                    3 => panel::<F, 3, 3>(a, tiled, b.clone()),
                    _ => {}
                }
            } else {
                // Row tiles of the kernel's ROWS (16 or 8), then halving: the integer kernels
                // visit one output at a time, so wider tiles only save unpacking and loop overhead.
                let mut r0 = 0;
                if F::ROWS == 2 * INT_ROWS {
                    while rows - r0 >= 2 * INT_ROWS {
                        panel::<F, { 2 * INT_ROWS }, 1>(a, r0, b.clone());
                        r0 += 2 * INT_ROWS;
                    }
                }
                while rows - r0 >= INT_ROWS {
                    panel::<F, INT_ROWS, 1>(a, r0, b.clone());
                    r0 += INT_ROWS;
                }
                if INT_ROWS > 4 && rows - r0 >= 4 {
                    panel::<F, 4, 1>(a, r0, b.clone());
                    r0 += 4;
                }
                if rows - r0 >= 2 {
                    panel::<F, 2, 1>(a, r0, b.clone());
                    r0 += 2;
                }
                if rows > r0 {
                    panel::<F, 1, 1>(a, r0, b.clone());
                }
            }
        }
        b0 = b.end;
    }
}

/// The integer path for a k-quant weight: output columns `outs` of every row into `dst`, with
/// the integer steps of `dot`.
///
/// # Safety
/// As for [`super::IntKernel::run`], with the CPU supporting `dot` (not portable).
pub(super) unsafe fn run_k(
    dot: IntDot,
    q: QuantType,
    o: &Operands<Q8K>,
    rows: usize,
    outs: Range<usize>,
    dst: *mut f32,
) {
    // SAFETY: forwarded from the caller, who checked `dot`'s instructions.
    unsafe {
        match dot {
            IntDot::Avx2 => run_k_avx2(q, o, rows, outs, dst),
            IntDot::AvxVnni => run_k_vnni256(q, o, rows, outs, dst),
            IntDot::Avx512Vnni => run_k_vnni512(q, o, rows, outs, dst),
            IntDot::Portable | IntDot::Mixed => unreachable!("no x86 kernel for {dot:?}: picked per call before"),
        }
    }
}

/// [`run_k`] with AVX2 steps.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_k_avx2(q: QuantType, o: &Operands<Q8K>, rows: usize, outs: Range<usize>, dst: *mut f32) {
    // SAFETY: forwarded from the caller.
    unsafe { run_k_with::<Madd>(q, o, rows, outs, dst) }
}

/// [`run_k`] with AVX-VNNI steps.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn run_k_vnni256(q: QuantType, o: &Operands<Q8K>, rows: usize, outs: Range<usize>, dst: *mut f32) {
    // SAFETY: forwarded from the caller.
    unsafe { run_k_with::<Vnni256>(q, o, rows, outs, dst) }
}

/// [`run_k`] with AVX-512 VNNI steps.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn run_k_vnni512(q: QuantType, o: &Operands<Q8K>, rows: usize, outs: Range<usize>, dst: *mut f32) {
    // SAFETY: forwarded from the caller.
    unsafe { run_k_with::<Vnni512>(q, o, rows, outs, dst) }
}

/// [`run_k`]'s body, inlined into each instruction set's entry.
#[inline(always)]
unsafe fn run_k_with<D: Dots>(q: QuantType, o: &Operands<Q8K>, rows: usize, outs: Range<usize>, dst: *mut f32) {
    let (w, row_bytes, nb, wb, n) = (o.w.as_ptr(), o.row_bytes, o.nb, o.wb, o.n);
    let a = Args { x: o.xq.as_ptr(), x_stride: o.nb, xu: std::ptr::null(), w, row_bytes, nb, wb, n, dst };
    // SAFETY: forwarded from the caller.
    unsafe {
        match q {
            QuantType::Q2K => run::<IntK<blk::Q2K, D>>(&a, rows, outs, false),
            QuantType::Q3K => run::<IntK<blk::Q3K, D>>(&a, rows, outs, false),
            QuantType::Q4K => run::<IntK<blk::Q4K, D>>(&a, rows, outs, false),
            QuantType::Q5K => run::<IntK<blk::Q5K, D>>(&a, rows, outs, false),
            QuantType::Q6K => run::<IntK<blk::Q6K, D>>(&a, rows, outs, false),
            other => unreachable!("{other:?} is not a k-quant"),
        }
    }
}

/// The integer path for a 32-weight type: output columns `outs` of every row into `dst`, with
/// the integer steps of `dot`.
///
/// # Safety
/// As for [`super::IntKernel::run`], with the CPU supporting `dot` (not portable).
pub(super) unsafe fn run_32(
    dot: IntDot,
    q: QuantType,
    o: &Operands<Q8x2>,
    rows: usize,
    outs: Range<usize>,
    dst: *mut f32,
) {
    // SAFETY: forwarded from the caller, who checked `dot`'s instructions.
    unsafe {
        match dot {
            IntDot::Avx2 => run_32_avx2(q, o, rows, outs, dst),
            IntDot::AvxVnni => run_32_vnni256(q, o, rows, outs, dst),
            IntDot::Avx512Vnni => run_32_vnni512(q, o, rows, outs, dst),
            IntDot::Portable | IntDot::Mixed => unreachable!("no x86 kernel for {dot:?}: picked per call before"),
        }
    }
}

/// [`run_32`] with AVX2 steps.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_32_avx2(q: QuantType, o: &Operands<Q8x2>, rows: usize, outs: Range<usize>, dst: *mut f32) {
    // SAFETY: forwarded from the caller.
    unsafe { run_32_with::<Madd>(q, o, rows, outs, dst) }
}

/// [`run_32`] with AVX-VNNI steps.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn run_32_vnni256(q: QuantType, o: &Operands<Q8x2>, rows: usize, outs: Range<usize>, dst: *mut f32) {
    // SAFETY: forwarded from the caller.
    unsafe { run_32_with::<Vnni256>(q, o, rows, outs, dst) }
}

/// [`run_32`] with AVX-512 VNNI steps.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn run_32_vnni512(q: QuantType, o: &Operands<Q8x2>, rows: usize, outs: Range<usize>, dst: *mut f32) {
    // SAFETY: forwarded from the caller.
    unsafe { run_32_with::<Vnni512>(q, o, rows, outs, dst) }
}

/// [`run_32`]'s body, inlined into each instruction set's entry.
#[inline(always)]
unsafe fn run_32_with<D: Dots>(q: QuantType, o: &Operands<Q8x2>, rows: usize, outs: Range<usize>, dst: *mut f32) {
    let (w, row_bytes, nb, wb, n) = (o.w.as_ptr(), o.row_bytes, o.nb, o.wb, o.n);
    // The signed types' VNNI steps read `xu`, made by the caller for them.
    let xu = if o.xu.is_empty() { std::ptr::null() } else { o.xu.as_ptr() };
    assert!(!D::OFFSET || !matches!(q, QuantType::Q4_0 | QuantType::Q5_0 | QuantType::Q8_0) || !xu.is_null());
    let a = Args { x: o.xq.as_ptr(), x_stride: o.nb, xu, w, row_bytes, nb, wb, n, dst };
    // SAFETY: forwarded from the caller.
    unsafe {
        match q {
            QuantType::Q4_0 => run::<Int32<blk::Q4_0, D>>(&a, rows, outs, false),
            QuantType::Q4_1 => run::<Int32<blk::Q4_1, D>>(&a, rows, outs, false),
            QuantType::Q5_0 => run::<Int32<blk::Q5_0, D>>(&a, rows, outs, false),
            QuantType::Q5_1 => run::<Int32<blk::Q5_1, D>>(&a, rows, outs, false),
            QuantType::Q8_0 => run::<Int32<blk::Q8_0, D>>(&a, rows, outs, false),
            other => unreachable!("{other:?} is a k-quant"),
        }
    }
}

/// Operands of the f32 path: `x[rows, k]` f32, weight rows of `row_bytes`, `dst[rows, n]`.
pub(super) struct F32Args<'a> {
    /// Activations, row-major.
    pub x: *const f32,
    /// Weight bytes.
    pub w: &'a [u8],
    /// Bytes per weight row.
    pub row_bytes: usize,
    /// Inputs per row.
    pub k: usize,
    /// Output features.
    pub n: usize,
}

/// The f32 path: output columns `outs` of every row into `dst`, equal to
/// `Portable::dot(x_row, dequantized row)` bit for bit.
///
/// # Safety
/// `dst` holds `rows * f.n` values and no one else writes columns `outs`; `f.x` holds
/// `rows * f.k` values; the weight holds `f.n` rows; AVX2, FMA and F16C are present.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn run_f32(q: QuantType, f: &F32Args, rows: usize, outs: Range<usize>, dst: *mut f32) {
    let nb = f.k / q.block_len();
    let a = Args {
        x: f.x,
        x_stride: f.k,
        xu: std::ptr::null(),
        w: f.w.as_ptr(),
        row_bytes: f.row_bytes,
        nb,
        wb: nb,
        n: f.n,
        dst,
    };
    // SAFETY: forwarded from the caller.
    unsafe {
        match q {
            QuantType::Q4_0 => run::<Deq<Int32<blk::Q4_0>>>(&a, rows, outs, true),
            QuantType::Q4_1 => run::<Deq<Int32<blk::Q4_1>>>(&a, rows, outs, true),
            QuantType::Q5_0 => run::<Deq<Int32<blk::Q5_0>>>(&a, rows, outs, true),
            QuantType::Q5_1 => run::<Deq<Int32<blk::Q5_1>>>(&a, rows, outs, true),
            QuantType::Q8_0 => run::<Deq<Int32<blk::Q8_0>>>(&a, rows, outs, true),
            QuantType::Q2K => run::<Deq<IntK<blk::Q2K>>>(&a, rows, outs, true),
            QuantType::Q3K => run::<Deq<IntK<blk::Q3K>>>(&a, rows, outs, true),
            QuantType::Q4K => run::<Deq<IntK<blk::Q4K>>>(&a, rows, outs, true),
            QuantType::Q5K => run::<Deq<IntK<blk::Q5K>>>(&a, rows, outs, true),
            QuantType::Q6K => run::<Deq<IntK<blk::Q6K>>>(&a, rows, outs, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::spec;
    use crate::quant::tests::{QUANTS, rand_blocks};
    use crate::testutil::Rng;

    /// The AVX2 dequantizer of `q` over one block.
    fn dequant(q: QuantType, b: &[u8]) -> Vec<f32> {
        let mut out = vec![0.0f32; q.block_len()];
        let o = out.as_mut_ptr();
        // SAFETY: `b` is one whole block; the caller checked AVX2.
        unsafe {
            match q {
                QuantType::Q4_0 => blk::dequant_32::<blk::Q4_0>(b.as_ptr(), o),
                QuantType::Q4_1 => blk::dequant_32::<blk::Q4_1>(b.as_ptr(), o),
                QuantType::Q5_0 => blk::dequant_32::<blk::Q5_0>(b.as_ptr(), o),
                QuantType::Q5_1 => blk::dequant_32::<blk::Q5_1>(b.as_ptr(), o),
                QuantType::Q8_0 => blk::dequant_32::<blk::Q8_0>(b.as_ptr(), o),
                QuantType::Q2K => blk::dequant_k::<blk::Q2K>(b.as_ptr(), o),
                QuantType::Q3K => blk::dequant_k::<blk::Q3K>(b.as_ptr(), o),
                QuantType::Q4K => blk::dequant_k::<blk::Q4K>(b.as_ptr(), o),
                QuantType::Q5K => blk::dequant_k::<blk::Q5K>(b.as_ptr(), o),
                QuantType::Q6K => blk::dequant_k::<blk::Q6K>(b.as_ptr(), o),
            }
        }
        out
    }

    #[test]
    fn avx2_dequantization_equals_ggml_bit_for_bit() {
        if !crate::Simd::Avx2.available() {
            return;
        }
        let mut rng = Rng::new(41);
        for q in QUANTS {
            let bytes = rand_blocks(&mut rng, q, 50);
            let want = tf_formats::quant::dequantize(q, &bytes);
            for (i, b) in bytes.chunks_exact(q.block_bytes()).enumerate() {
                let got = dequant(q, b);
                let want = &want[i * q.block_len()..(i + 1) * q.block_len()];
                let (g, w): (Vec<u32>, Vec<u32>) =
                    (got.iter().map(|v| v.to_bits()).collect(), want.iter().map(|v| v.to_bits()).collect());
                assert_eq!(g, w, "{q:?} block {i}");
            }
        }
    }

    /// The codes and scales the AVX2 unpacking of a k-quant gives, in the integer form.
    unsafe fn unpack_k<T: KType>(b: &[u8]) -> (Vec<i16>, [i16; 16], [i16; 16], f32, f32) {
        unsafe {
            let (d, dmin, sc, m) = T::head(b.as_ptr());
            let (mut s, mut mm) = ([0i16; 16], [0i16; 16]);
            _mm256_storeu_si256(s.as_mut_ptr().cast(), sc);
            _mm256_storeu_si256(mm.as_mut_ptr().cast(), m);
            let mut w = Vec::new();
            for p in 0..4 {
                let (w0, w1) = T::pair(b.as_ptr(), p);
                for v in [w0, w1] {
                    let mut bytes = [0u8; 32];
                    _mm256_storeu_si256(bytes.as_mut_ptr().cast(), v);
                    w.extend(bytes.iter().map(|&x| x as i16));
                }
            }
            (w, s, mm, d, dmin)
        }
    }

    #[test]
    fn avx2_unpacking_equals_the_integer_form() {
        if !crate::Simd::Avx2.available() {
            return;
        }
        let mut rng = Rng::new(42);
        for q in [QuantType::Q2K, QuantType::Q3K, QuantType::Q4K, QuantType::Q5K, QuantType::Q6K] {
            for b in rand_blocks(&mut rng, q, 20).chunks_exact(q.block_bytes()) {
                let u = spec::unpack(q, b);
                // SAFETY: AVX2 was detected; `b` is one whole block.
                let got = unsafe {
                    match q {
                        QuantType::Q2K => unpack_k::<blk::Q2K>(b),
                        QuantType::Q3K => unpack_k::<blk::Q3K>(b),
                        QuantType::Q4K => unpack_k::<blk::Q4K>(b),
                        QuantType::Q5K => unpack_k::<blk::Q5K>(b),
                        _ => unpack_k::<blk::Q6K>(b),
                    }
                };
                assert_eq!(got, (u.w.to_vec(), u.sc, u.m, u.d, u.dmin), "{q:?}");
            }
        }
    }
}
