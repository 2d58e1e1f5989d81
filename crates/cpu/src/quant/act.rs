//! Activation rows quantized to signed 8-bit blocks once per matmul call, as ggml does before its
//! integer dot products: 32-value blocks (ggml's Q8_0, plus the sums Q4_1 / Q5_1 need), stored
//! in interleaved pairs, for the 32-weight types; 256-value blocks with per-16 sums (ggml's Q8_K)
//! for the k-quants.
//!
//! A row's blocks depend on that row alone, and both instruction sets run this same code (the
//! AVX2 build only lets the compiler vectorise it), so the integer path stays batch invariant.

use rayon::ThreadPool;
use rayon::prelude::*;

/// Two consecutive 32-activation blocks `a`, `b` (`x[i] ~ d * q[i]` in each), interleaved by 16 so
/// that one register holds 16 values of `a` in its low half and the same 16 of `b` in its high.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct Q8x2 {
    /// Scales (a block's largest magnitude / 127): `a`'s in lanes 0..4, `b`'s in lanes 4..8.
    pub d: [f32; 8],
    /// `d * (sum of q)` of `a` and `b`: their contributions per unit of a weight block's min.
    pub s: [f32; 2],
    /// Values in [-127, 127]: `a[0..16]`, `b[0..16]`, `a[16..32]`, `b[16..32]`.
    pub qs: [i8; 64],
}

/// 256 activations: `x[i] ~ d * qs[i]`, with the sums of each 16.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct Q8K {
    /// Scale: the block's largest magnitude / 127.
    pub d: f32,
    /// Values in [-127, 127].
    pub qs: [i8; 256],
    /// `bsums[j]` = sum of `qs[16 j..16 j + 16]`.
    pub bsums: [i16; 16],
}

/// A quantized activation block of either kind.
pub(crate) trait ActBlock: Copy + Send + Sync {
    /// Values per block.
    const LEN: usize;
    /// A zero block.
    const ZERO: Self;
    /// Quantizes `x` (`LEN` values; fewer, for a last block padded with zeros).
    fn quantize(x: &[f32]) -> Self;
}

/// Rounds to the nearest integer, ties to even, for `|v| <= 2^22`: exact and vectorisable.
#[inline(always)]
fn round(v: f32) -> f32 {
    (v + MAGIC) - MAGIC
}

/// `1.5 * 2^23`: added to a value of magnitude up to 2^22, it leaves that value rounded to an
/// integer (ties to even) in the sum's low mantissa bits.
const MAGIC: f32 = 12_582_912.0;

/// The largest magnitude in `x` (0 for none; NaN ignored) and whether `x` holds a NaN, over
/// eight independent lanes so that the compiler vectorizes it: a maximum is exact, so any order
/// gives the sequential fold's value.
#[inline(always)]
fn abs_max(x: &[f32]) -> (f32, bool) {
    let (mut lanes, mut nan) = ([0.0f32; 8], [false; 8]);
    let (chunks, tail) = x.as_chunks::<8>();
    for c in chunks {
        for ((m, n), v) in lanes.iter_mut().zip(&mut nan).zip(c) {
            *m = m.max(v.abs());
            *n |= v.is_nan();
        }
    }
    for ((m, n), v) in lanes.iter_mut().zip(&mut nan).zip(tail) {
        *m = m.max(v.abs());
        *n |= v.is_nan();
    }
    (lanes.iter().fold(0.0f32, |m, &v| m.max(v)), nan.iter().any(|&n| n))
}

/// Quantizes `x` into `qs` (same length) with one scale, returned.
#[inline(always)]
fn quantize_into(x: &[f32], qs: &mut [i8]) -> f32 {
    let (amax, nan) = abs_max(x);
    let (d, id) = if amax > 0.0 { (amax / 127.0, 127.0 / amax) } else { (0.0, 0.0) };
    if !nan && amax.is_finite() && id.is_finite() {
        // Every `v * id` lies within 128 of 0, so `round`'s sum holds the integer in its low
        // mantissa bits: the same value as `round(v * id) as i32`, without a saturating cast.
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = ((v * id + MAGIC).to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32) as i8;
        }
    } else {
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = round(v * id) as i32 as i8;
        }
    }
    d
}

impl Q8x2 {
    /// Each block's codes plus 128 as unsigned bytes, in code order.
    pub(crate) fn offset_codes(blocks: &[Q8x2]) -> Vec<[u8; 64]> {
        blocks.iter().map(|b| b.qs.map(|q| (q as u8) ^ 0x80)).collect()
    }
}

impl ActBlock for Q8x2 {
    const LEN: usize = 64;
    const ZERO: Q8x2 = Q8x2 { d: [0.0; 8], s: [0.0; 2], qs: [0; 64] };

    #[inline(always)]
    fn quantize(x: &[f32]) -> Q8x2 {
        let mut p = Q8x2::ZERO;
        for (h, xs) in x.chunks(32).enumerate() {
            let mut q = [0i8; 32];
            let d = quantize_into(xs, &mut q);
            p.d[4 * h..4 * h + 4].fill(d);
            p.s[h] = d * q.iter().map(|&v| v as i32).sum::<i32>() as f32;
            p.qs[16 * h..16 * h + 16].copy_from_slice(&q[..16]);
            p.qs[32 + 16 * h..48 + 16 * h].copy_from_slice(&q[16..]);
        }
        p
    }
}

impl ActBlock for Q8K {
    const LEN: usize = 256;
    const ZERO: Q8K = Q8K { d: 0.0, qs: [0; 256], bsums: [0; 16] };

    #[inline(always)]
    fn quantize(x: &[f32]) -> Q8K {
        let mut b = Q8K::ZERO;
        b.d = quantize_into(x, &mut b.qs);
        for (s, q) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *s = q.iter().map(|&v| v as i16).sum();
        }
        b
    }
}

/// Below this many activations the rows are quantized on the calling thread.
const PAR_MIN: usize = 1 << 15;

/// The rows of `x` (each `cols` long, a multiple of 32) as `cols.div_ceil(A::LEN)` blocks each.
pub(crate) fn quantize_rows<A: ActBlock>(pool: &ThreadPool, avx2: bool, x: &[f32], cols: usize) -> Vec<A> {
    let nb = cols.div_ceil(A::LEN);
    if nb == 0 {
        return Vec::new();
    }
    let mut out = vec![A::ZERO; x.len() / cols * nb];
    let one = |(xs, bs): (&[f32], &mut [A])| {
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: `avx2` is set only where the backend detected AVX2 and FMA.
            return unsafe { quantize_row_avx2(xs, bs) };
        }
        let _ = avx2;
        quantize_row(xs, bs)
    };
    if x.len() < PAR_MIN {
        x.chunks_exact(cols).zip(out.chunks_exact_mut(nb)).for_each(one);
    } else {
        pool.install(|| x.par_chunks_exact(cols).zip(out.par_chunks_exact_mut(nb)).for_each(one));
    }
    out
}

/// One row into its blocks.
#[inline(always)]
fn quantize_row<A: ActBlock>(x: &[f32], out: &mut [A]) {
    for (b, xs) in out.iter_mut().zip(x.chunks(A::LEN)) {
        *b = A::quantize(xs);
    }
}

/// [`quantize_row`] compiled for AVX2: the same operations, vectorised.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_row_avx2<A: ActBlock>(x: &[f32], out: &mut [A]) {
    quantize_row(x, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn blocks_round_trip_within_half_a_step() {
        let mut rng = Rng::new(21);
        let x: Vec<f32> = rng.vec(512).iter().map(|v| v * 3.0).collect();
        let b = Q8K::quantize(&x[..256]);
        for (v, &q) in x.iter().zip(&b.qs) {
            assert!((v - b.d * q as f32).abs() <= 0.5001 * b.d, "{v} vs {q} * {}", b.d);
        }
        assert!(b.qs.iter().any(|&q| q.abs() == 127));
        assert_eq!(b.bsums[3], b.qs[48..64].iter().map(|&q| q as i16).sum::<i16>());
        let z = Q8x2::quantize(&[0.0; 64]);
        assert_eq!((z.d, z.s, z.qs), ([0.0; 8], [0.0; 2], [0; 64]));
        // A lone last block: its partner is all zeros.
        let p = Q8x2::quantize(&x[..32]);
        let a = Q8K::quantize(&[&x[..32], &[0.0; 224][..]].concat());
        assert_eq!((p.d[0], p.d[4], p.s[1]), (a.d, 0.0, 0.0));
        assert_eq!((&p.qs[..16], &p.qs[32..48]), (&a.qs[..16], &a.qs[16..32]));
        assert!(p.qs[16..32].iter().chain(&p.qs[48..]).all(|&q| q == 0));
    }

    #[test]
    fn quantizing_equals_the_rounding_cast_on_any_values() {
        // The bit-extracting path against `round(v * id) as i32 as i8` for every value, and
        // the blocks it leaves to that cast (NaN, infinities, scales past f32's range).
        let old = |x: &[f32]| {
            let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let (d, id) = if amax > 0.0 { (amax / 127.0, 127.0 / amax) } else { (0.0, 0.0) };
            (d, x.iter().map(|&v| round(v * id) as i32 as i8).collect::<Vec<i8>>())
        };
        let mut rng = Rng::new(24);
        let mut cases: Vec<Vec<f32>> =
            (0..200).map(|i| rng.vec(32).iter().map(|v| v * (1.0 + i as f32)).collect()).collect();
        cases.push(vec![0.0; 32]);
        cases.push((0..32).map(|i| (i as f32 - 16.0) * 0.5).collect());
        cases.push((0..32).map(|i| if i == 3 { f32::NAN } else { i as f32 }).collect());
        cases.push((0..32).map(|i| if i == 5 { f32::INFINITY } else { -(i as f32) }).collect());
        cases.push((0..32).map(|i| i as f32 * 1e-39).collect());
        cases.push((0..32).map(|i| (i as f32 - 7.0) * 3e38).collect());
        for x in &cases {
            let mut qs = [0i8; 32];
            let d = quantize_into(x, &mut qs);
            let (dw, qw) = old(x);
            assert_eq!((d.to_bits(), &qs[..]), (dw.to_bits(), &qw[..]), "{x:?}");
        }
    }

    #[test]
    fn ties_round_to_even() {
        assert_eq!([round(2.5), round(-2.5), round(3.5), round(126.5), round(-0.4)], [2.0, -2.0, 4.0, 126.0, 0.0]);
    }

    #[test]
    fn avx2_build_quantizes_identically() {
        if !crate::Simd::Avx2.available() {
            return;
        }
        let mut rng = Rng::new(22);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        let x: Vec<f32> = rng.vec(3 * 512).iter().map(|v| v * 7.0).collect();
        let (a, p) = (quantize_rows::<Q8K>(&pool, true, &x, 512), quantize_rows::<Q8K>(&pool, false, &x, 512));
        for (a, p) in a.iter().zip(&p) {
            assert_eq!((a.d.to_bits(), a.qs, a.bsums), (p.d.to_bits(), p.qs, p.bsums));
        }
        let (a, p) =
            (quantize_rows::<Q8x2>(&pool, true, &x[..1440], 480), quantize_rows::<Q8x2>(&pool, false, &x[..1440], 480));
        for (a, p) in a.iter().zip(&p) {
            assert_eq!(
                (a.d.map(f32::to_bits), a.s.map(f32::to_bits), a.qs),
                (p.d.map(f32::to_bits), p.s.map(f32::to_bits), p.qs)
            );
        }
    }
}
