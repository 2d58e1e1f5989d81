//! The integer steps of the x86 int8 kernels, one implementation per [`super::IntDot`]: each
//! gives the i32 lanes of the AVX2 form (see [`super::spec`]), so the f32 steps after them, shared
//! by all, see the same integers and give the same bits.
//!
//! - [`Madd`] (AVX2): `maddubs` (u8 x i8 pairs to i16, never saturating here: at most
//!   2 * 128 * 127) then `madd` (i16 pairs times scales or ones, to i32), then `add`.
//! - [`Vnni256`] (AVX-VNNI): `madd` + `add` fused into `dpwssd` for the k-quants' scaled sums,
//!   `maddubs` + `madd` by ones + `add` fused into `dpbusd` (u8 x i8 quads into i32) for the
//!   32-weight types.
//! - [`Vnni512`] (AVX-512 F/BW/VNNI): the same on 512-bit registers, both 32-weight chunks of a
//!   step in one register; the 16 lanes are folded to the AVX2 form's 8 (lane `l` plus lane
//!   `l + 8`, the two chunks AVX2 adds) before the f32 steps.
//!
//! Signed weights (Q4_0, Q5_0, Q8_0) use the sign trick `|w| * (sign(w) x)` on AVX2; the VNNI
//! forms instead meet them with the activations plus 128 as unsigned bytes (made once per call)
//! and start each lane at `-128 * (sum of its codes)`, made once per output: the same i32 lane
//! with two fewer instructions per row ([`Dots::s_lanes`]).
//!
//! # Safety
//! Every function needs the instructions its type names; callers are `#[target_feature]`
//! functions that checked them. `xp` points to 64 readable bytes.

use super::avx2_blocks::load32;
use std::arch::x86_64::*;

/// The integer steps of one instruction set.
pub(super) trait Dots {
    /// A k-quant chunk pair's codes and scales, prepared once per output.
    type K: Copy;
    /// A k-quant block's integer accumulator for one row.
    type Acc: Copy;
    /// A pair of 32-weight blocks' codes, prepared once per output.
    type P: Copy;
    /// A zero accumulator.
    unsafe fn k_zero() -> Self::Acc;
    /// Chunk codes `w0`, `w1` (32 unsigned bytes each) with their `madd` scales `s0`, `s1`.
    unsafe fn k_prep(w0: __m256i, w1: __m256i, s0: __m256i, s1: __m256i) -> Self::K;
    /// `acc` plus `madd(maddubs(w0, x[0..32]), s0) + madd(maddubs(w1, x[32..64]), s1)`.
    unsafe fn k_step(acc: Self::Acc, k: &Self::K, xp: *const u8) -> Self::Acc;
    /// The 8 lanes of the AVX2 form.
    unsafe fn k_lanes(acc: Self::Acc) -> __m256i;
    /// Codes `lo` (elements 0..16 of both blocks) and `hi` (16..32), signed or unsigned.
    unsafe fn p_prep(lo: __m256i, hi: __m256i, signed: bool) -> Self::P;
    /// `madd(maddubs(lo, x[0..32]), 1) + madd(maddubs(hi, x[32..64]), 1)`, with the sign trick
    /// where `signed`.
    unsafe fn p_lanes(p: &Self::P, signed: bool, xp: *const u8) -> __m256i;
    /// Whether signed codes meet unsigned activations `x + 128` ([`Dots::s_prep`]) in place of
    /// the sign trick: `dpbusd` sums u8 x i8 quads without an i16 step, so `(x + 128) w` cannot
    /// saturate, and `sum (x + 128) w - 128 sum w` is the sign trick's lane exactly.
    const OFFSET: bool;
    /// Signed codes for unsigned activations, with `-128 * (sum of codes)` per lane, prepared once
    /// per output.
    type S: Copy;
    /// Signed codes `lo`, `hi` as [`Dots::p_prep`] takes them.
    unsafe fn s_prep(lo: __m256i, hi: __m256i) -> Self::S;
    /// [`Dots::p_lanes`]' signed lanes from `xup`: 64 bytes of `x + 128` in `x`'s order.
    unsafe fn s_lanes(s: &Self::S, xup: *const u8) -> __m256i;
}

/// AVX2: `maddubs` then `madd`.
pub(super) struct Madd;
/// AVX-VNNI on 256-bit registers.
pub(super) struct Vnni256;
/// AVX-512 VNNI on 512-bit registers.
pub(super) struct Vnni512;

/// `|w|` as unsigned bytes, and `x` with the signs of `w`, where `signed`.
#[inline(always)]
unsafe fn signed_pair(w: __m256i, x: __m256i, signed: bool) -> (__m256i, __m256i) {
    unsafe { if signed { (_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)) } else { (w, x) } }
}

impl Dots for Madd {
    type K = [__m256i; 4];
    type Acc = __m256i;
    type P = [__m256i; 2];

    #[inline(always)]
    unsafe fn k_zero() -> __m256i {
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    unsafe fn k_prep(w0: __m256i, w1: __m256i, s0: __m256i, s1: __m256i) -> [__m256i; 4] {
        [w0, w1, s0, s1]
    }
    #[inline(always)]
    unsafe fn k_step(acc: __m256i, &[w0, w1, s0, s1]: &[__m256i; 4], xp: *const u8) -> __m256i {
        unsafe {
            let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(w0, load32(xp)), s0);
            let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(w1, load32(xp.add(32))), s1);
            _mm256_add_epi32(acc, _mm256_add_epi32(p0, p1))
        }
    }
    #[inline(always)]
    unsafe fn k_lanes(acc: __m256i) -> __m256i {
        acc
    }
    #[inline(always)]
    unsafe fn p_prep(lo: __m256i, hi: __m256i, _: bool) -> [__m256i; 2] {
        [lo, hi]
    }
    #[inline(always)]
    unsafe fn p_lanes(&[lo, hi]: &[__m256i; 2], signed: bool, xp: *const u8) -> __m256i {
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let (a0, x0) = signed_pair(lo, load32(xp), signed);
            let (a1, x1) = signed_pair(hi, load32(xp.add(32)), signed);
            let i0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, x0), ones);
            let i1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, x1), ones);
            _mm256_add_epi32(i0, i1)
        }
    }
    const OFFSET: bool = false;
    type S = ();
    unsafe fn s_prep(_: __m256i, _: __m256i) {
        unreachable!("AVX2's maddubs would saturate on x + 128")
    }
    unsafe fn s_lanes(_: &(), _: *const u8) -> __m256i {
        unreachable!("AVX2's maddubs would saturate on x + 128")
    }
}

impl Dots for Vnni256 {
    type K = [__m256i; 4];
    type Acc = __m256i;
    type P = [__m256i; 2];

    #[inline(always)]
    unsafe fn k_zero() -> __m256i {
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    unsafe fn k_prep(w0: __m256i, w1: __m256i, s0: __m256i, s1: __m256i) -> [__m256i; 4] {
        [w0, w1, s0, s1]
    }
    #[inline(always)]
    unsafe fn k_step(acc: __m256i, &[w0, w1, s0, s1]: &[__m256i; 4], xp: *const u8) -> __m256i {
        unsafe {
            let acc = _mm256_dpwssd_avx_epi32(acc, _mm256_maddubs_epi16(w0, load32(xp)), s0);
            _mm256_dpwssd_avx_epi32(acc, _mm256_maddubs_epi16(w1, load32(xp.add(32))), s1)
        }
    }
    #[inline(always)]
    unsafe fn k_lanes(acc: __m256i) -> __m256i {
        acc
    }
    #[inline(always)]
    unsafe fn p_prep(lo: __m256i, hi: __m256i, _: bool) -> [__m256i; 2] {
        [lo, hi]
    }
    #[inline(always)]
    unsafe fn p_lanes(&[lo, hi]: &[__m256i; 2], signed: bool, xp: *const u8) -> __m256i {
        unsafe {
            let (a0, x0) = signed_pair(lo, load32(xp), signed);
            let (a1, x1) = signed_pair(hi, load32(xp.add(32)), signed);
            _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), a0, x0), a1, x1)
        }
    }
    const OFFSET: bool = true;
    type S = [__m256i; 3];
    #[inline(always)]
    unsafe fn s_prep(lo: __m256i, hi: __m256i) -> [__m256i; 3] {
        unsafe {
            let c = _mm256_set1_epi8(-128);
            let sum = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), c, lo), c, hi);
            [lo, hi, _mm256_sub_epi32(_mm256_setzero_si256(), sum)]
        }
    }
    #[inline(always)]
    unsafe fn s_lanes(&[lo, hi, neg]: &[__m256i; 3], xup: *const u8) -> __m256i {
        unsafe { _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(neg, load32(xup), lo), load32(xup.add(32)), hi) }
    }
}

/// `lo` in the low 256 bits, `hi` in the high.
#[inline(always)]
unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi) }
}

/// Lane `l` plus lane `l + 8`.
#[inline(always)]
unsafe fn fold(v: __m512i) -> __m256i {
    unsafe { _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v)) }
}

impl Dots for Vnni512 {
    type K = [__m512i; 2];
    type Acc = __m512i;
    /// `|w|` (or `w`) and the mask of negative codes.
    type P = (__m512i, __mmask64);

    #[inline(always)]
    unsafe fn k_zero() -> __m512i {
        unsafe { _mm512_setzero_si512() }
    }
    #[inline(always)]
    unsafe fn k_prep(w0: __m256i, w1: __m256i, s0: __m256i, s1: __m256i) -> [__m512i; 2] {
        unsafe { [join(w0, w1), join(s0, s1)] }
    }
    #[inline(always)]
    unsafe fn k_step(acc: __m512i, &[w, s]: &[__m512i; 2], xp: *const u8) -> __m512i {
        unsafe { _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(w, _mm512_loadu_si512(xp.cast())), s) }
    }
    #[inline(always)]
    unsafe fn k_lanes(acc: __m512i) -> __m256i {
        unsafe { fold(acc) }
    }
    #[inline(always)]
    unsafe fn p_prep(lo: __m256i, hi: __m256i, signed: bool) -> (__m512i, __mmask64) {
        unsafe {
            let w = join(lo, hi);
            if signed { (_mm512_abs_epi8(w), _mm512_movepi8_mask(w)) } else { (w, 0) }
        }
    }
    #[inline(always)]
    unsafe fn p_lanes(&(a, neg): &(__m512i, __mmask64), signed: bool, xp: *const u8) -> __m256i {
        unsafe {
            let x = _mm512_loadu_si512(xp.cast());
            let x = if signed { _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x) } else { x };
            fold(_mm512_dpbusd_epi32(_mm512_setzero_si512(), a, x))
        }
    }
    const OFFSET: bool = true;
    type S = [__m512i; 2];
    #[inline(always)]
    unsafe fn s_prep(lo: __m256i, hi: __m256i) -> [__m512i; 2] {
        unsafe {
            let w = join(lo, hi);
            let sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), w);
            [w, _mm512_sub_epi32(_mm512_setzero_si512(), sum)]
        }
    }
    #[inline(always)]
    unsafe fn s_lanes(&[w, neg]: &[__m512i; 2], xup: *const u8) -> __m256i {
        unsafe { fold(_mm512_dpbusd_epi32(neg, _mm512_loadu_si512(xup.cast()), w)) }
    }
}
