//! AVX2 unpacking of each GGML block type into the integer form of [`super::spec`]: codes one per
//! byte, 32 weights (one chunk) to a register, and per-16 scales and mins as 16-bit lanes; and
//! from those, the exact ggml dequantization to f32 for the f32-activation path.
//!
//! # Safety
//! Every function here reads one whole block at `b` and needs AVX2, FMA and F16C; callers are
//! `#[target_feature]` functions that checked both.

use std::arch::x86_64::*;

/// A little-endian f16 at `p` as f32.
#[inline(always)]
pub(super) unsafe fn f16(p: *const u8) -> f32 {
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(p.cast::<u16>().read_unaligned() as i32))) }
}

#[inline(always)]
unsafe fn rd32(p: *const u8) -> u32 {
    unsafe { p.cast::<u32>().read_unaligned() }
}

#[inline(always)]
unsafe fn load16(p: *const u8) -> __m128i {
    unsafe { _mm_loadu_si128(p.cast()) }
}

#[inline(always)]
pub(super) unsafe fn load32(p: *const u8) -> __m256i {
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// Bytes of `v` shifted right by `n` bits within 16-bit lanes, masked to `mask`.
#[inline(always)]
unsafe fn bits(v: __m256i, n: u32, mask: i8) -> __m256i {
    unsafe { _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32)), _mm256_set1_epi8(mask)) }
}

/// The nibbles of 16 bytes at `a` and at `b`: low nibbles (`a`'s, then `b`'s), then high ones.
#[inline(always)]
unsafe fn nibbles2(a: *const u8, b: *const u8) -> (__m256i, __m256i) {
    unsafe {
        let v = _mm256_loadu2_m128i(b.cast(), a.cast());
        let m = _mm256_set1_epi8(0x0F);
        (_mm256_and_si256(v, m), _mm256_and_si256(_mm256_srli_epi16::<4>(v), m))
    }
}

/// The fifth bits (32-bit masks at `a` and `b`) in the byte order of [`nibbles2`], 0xFF where set.
#[inline(always)]
unsafe fn fifth2(a: *const u8, b: *const u8) -> (__m256i, __m256i) {
    unsafe {
        // Both masks in every 64-bit lane; each output byte picks the mask byte holding its bit.
        let v = _mm256_broadcastq_epi64(_mm_insert_epi32::<1>(_mm_cvtsi32_si128(rd32(a) as i32), rd32(b) as i32));
        let pick = |m: [i64; 4]| _mm256_shuffle_epi8(v, _mm256_set_epi64x(m[3], m[2], m[1], m[0]));
        let sel = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = |x: __m256i| _mm256_cmpeq_epi8(_mm256_and_si256(x, sel), sel);
        let byte = |i: i64| i * 0x0101_0101_0101_0101;
        (set(pick([byte(0), byte(1), byte(4), byte(5)])), set(pick([byte(2), byte(3), byte(6), byte(7)])))
    }
}

/// The f16 scales at `a` and `b` as `[a x4, b x4]`.
#[inline(always)]
unsafe fn scales2(a: *const u8, b: *const u8) -> __m256 {
    unsafe {
        let h = _mm_insert_epi16::<1>(
            _mm_cvtsi32_si128(a.cast::<u16>().read_unaligned() as i32),
            b.cast::<u16>().read_unaligned() as i32,
        );
        _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(h)), _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0))
    }
}

/// Eight 6-bit scales and mins of Q4_K / Q5_K, each byte doubled to one per 16 weights.
#[inline(always)]
unsafe fn scales_k4(p: *const u8) -> (__m256i, __m256i) {
    unsafe {
        let (a0, a1, a2) = (rd32(p), rd32(p.add(4)), rd32(p.add(8)));
        let (m6, m4, m2) = (0x3f3f_3f3f, 0x0f0f_0f0f, 0x0303_0303);
        let sc = (a0 & m6) as u64 | (((a2 & m4) | (((a0 >> 6) & m2) << 4)) as u64) << 32;
        let m = (a1 & m6) as u64 | ((((a2 >> 4) & m4) | (((a1 >> 6) & m2) << 4)) as u64) << 32;
        let dup = |v: u64| {
            let v = _mm_cvtsi64_si128(v as i64);
            _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v))
        };
        (dup(sc), dup(m))
    }
}

/// A k-quant block type (256 weights).
pub(super) trait KType {
    /// Bytes per block.
    const BYTES: usize;
    /// Subtracted from every code (Q3_K, Q6_K).
    const OFF: i16;
    /// Carries mins.
    const MIN: bool;
    /// `(d, dmin, scale per 16 weights, min per 16 weights)` (dmin and mins zero without).
    unsafe fn head(b: *const u8) -> (f32, f32, __m256i, __m256i);
    /// Codes of chunks `2 p` and `2 p + 1` (weights `64 p .. 64 p + 64`).
    unsafe fn pair(b: *const u8, p: usize) -> (__m256i, __m256i);
}

/// Marker types, one per block type.
pub(super) struct Q2K;
pub(super) struct Q3K;
pub(super) struct Q4K;
pub(super) struct Q5K;
pub(super) struct Q6K;

impl KType for Q2K {
    const BYTES: usize = 84;
    const OFF: i16 = 0;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn head(b: *const u8) -> (f32, f32, __m256i, __m256i) {
        unsafe {
            let s = load16(b);
            let m4 = _mm_set1_epi8(0x0F);
            let sc = _mm256_cvtepu8_epi16(_mm_and_si128(s, m4));
            let m = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(s), m4));
            (f16(b.add(80)), f16(b.add(82)), sc, m)
        }
    }
    #[inline(always)]
    unsafe fn pair(b: *const u8, p: usize) -> (__m256i, __m256i) {
        unsafe {
            let q = load32(b.add(16 + 32 * (p / 2)));
            let k = 4 * (p as u32 % 2);
            (bits(q, k, 3), bits(q, k + 2, 3))
        }
    }
}

impl KType for Q3K {
    const BYTES: usize = 110;
    const OFF: i16 = 4;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn head(b: *const u8) -> (f32, f32, __m256i, __m256i) {
        unsafe {
            let (a0, a1, a2) = (rd32(b.add(96)), rd32(b.add(100)), rd32(b.add(104)));
            let (m4, m2) = (0x0f0f_0f0f, 0x0303_0303);
            let s = _mm_set_epi32(
                (((a1 >> 4) & m4) | (((a2 >> 6) & m2) << 4)) as i32,
                (((a0 >> 4) & m4) | (((a2 >> 4) & m2) << 4)) as i32,
                ((a1 & m4) | (((a2 >> 2) & m2) << 4)) as i32,
                ((a0 & m4) | ((a2 & m2) << 4)) as i32,
            );
            let sc = _mm256_cvtepi8_epi16(_mm_sub_epi8(s, _mm_set1_epi8(32)));
            (f16(b.add(108)), 0.0, sc, _mm256_setzero_si256())
        }
    }
    #[inline(always)]
    unsafe fn pair(b: *const u8, p: usize) -> (__m256i, __m256i) {
        unsafe {
            let (h, k) = (p as u32 / 2, 2 * (p as u32 % 2));
            let (q, hm) = (load32(b.add(32 + 32 * (p / 2))), load32(b));
            let code = |k: u32| _mm256_or_si256(bits(q, 2 * k, 3), _mm256_slli_epi16::<2>(bits(hm, 4 * h + k, 1)));
            (code(k), code(k + 1))
        }
    }
}

impl KType for Q4K {
    const BYTES: usize = 144;
    const OFF: i16 = 0;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn head(b: *const u8) -> (f32, f32, __m256i, __m256i) {
        unsafe {
            let (sc, m) = scales_k4(b.add(4));
            (f16(b), f16(b.add(2)), sc, m)
        }
    }
    #[inline(always)]
    unsafe fn pair(b: *const u8, p: usize) -> (__m256i, __m256i) {
        unsafe {
            let q = load32(b.add(16 + 32 * p));
            (bits(q, 0, 0x0F), bits(q, 4, 0x0F))
        }
    }
}

impl KType for Q5K {
    const BYTES: usize = 176;
    const OFF: i16 = 0;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn head(b: *const u8) -> (f32, f32, __m256i, __m256i) {
        unsafe { Q4K::head(b) }
    }
    #[inline(always)]
    unsafe fn pair(b: *const u8, p: usize) -> (__m256i, __m256i) {
        unsafe {
            let (q, qh) = (load32(b.add(48 + 32 * p)), load32(b.add(16)));
            let c = 2 * p as u32;
            let hi = |c: u32| _mm256_slli_epi16::<4>(bits(qh, c, 1));
            (_mm256_or_si256(bits(q, 0, 0x0F), hi(c)), _mm256_or_si256(bits(q, 4, 0x0F), hi(c + 1)))
        }
    }
}

impl KType for Q6K {
    const BYTES: usize = 210;
    const OFF: i16 = 32;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn head(b: *const u8) -> (f32, f32, __m256i, __m256i) {
        unsafe { (f16(b.add(208)), 0.0, _mm256_cvtepi8_epi16(load16(b.add(192))), _mm256_setzero_si256()) }
    }
    #[inline(always)]
    unsafe fn pair(b: *const u8, p: usize) -> (__m256i, __m256i) {
        unsafe {
            let h = p / 2;
            let (lo, hi, qh) = (load32(b.add(64 * h)), load32(b.add(64 * h + 32)), load32(b.add(128 + 32 * h)));
            let s = 4 * (p as u32 % 2);
            let top = |n: u32| _mm256_slli_epi16::<4>(bits(qh, n, 3));
            (_mm256_or_si256(bits(lo, s, 0x0F), top(s)), _mm256_or_si256(bits(hi, s, 0x0F), top(s + 2)))
        }
    }
}

/// A 32-weight block type, read two blocks at a time.
pub(super) trait QType {
    /// Bytes per block.
    const BYTES: usize;
    /// Codes are the signed values `w - off` (Q4_0, Q5_0, Q8_0), else unsigned (Q4_1, Q5_1).
    const SIGNED: bool;
    /// Carries an additive min (Q4_1, Q5_1).
    const MIN: bool;
    /// Blocks `a` and `b`: the codes of elements `0..16` (`a`'s in the low half, `b`'s in the
    /// high) and of `16..32`, the scales `[d_a x4, d_b x4]`, and the mins `[m_a, m_b]` (zero without).
    unsafe fn pair(a: *const u8, b: *const u8) -> (__m256i, __m256i, __m256, [f32; 2]);
}

/// Marker types, one per block type.
pub(super) struct Q4_0;
pub(super) struct Q4_1;
pub(super) struct Q5_0;
pub(super) struct Q5_1;
pub(super) struct Q8_0;

impl QType for Q4_0 {
    const BYTES: usize = 18;
    const SIGNED: bool = true;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn pair(a: *const u8, b: *const u8) -> (__m256i, __m256i, __m256, [f32; 2]) {
        unsafe {
            let (lo, hi) = nibbles2(a.add(2), b.add(2));
            let eight = _mm256_set1_epi8(8);
            (_mm256_sub_epi8(lo, eight), _mm256_sub_epi8(hi, eight), scales2(a, b), [0.0; 2])
        }
    }
}

impl QType for Q4_1 {
    const BYTES: usize = 20;
    const SIGNED: bool = false;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn pair(a: *const u8, b: *const u8) -> (__m256i, __m256i, __m256, [f32; 2]) {
        unsafe {
            let (lo, hi) = nibbles2(a.add(4), b.add(4));
            (lo, hi, scales2(a, b), [f16(a.add(2)), f16(b.add(2))])
        }
    }
}

impl QType for Q5_0 {
    const BYTES: usize = 22;
    const SIGNED: bool = true;
    const MIN: bool = false;
    /// `nibble | 0xF0` (that is `nibble - 16`) where the fifth bit is clear, else `nibble`.
    #[inline(always)]
    unsafe fn pair(a: *const u8, b: *const u8) -> (__m256i, __m256i, __m256, [f32; 2]) {
        unsafe {
            let (lo, hi) = nibbles2(a.add(6), b.add(6));
            let (flo, fhi) = fifth2(a.add(2), b.add(2));
            let f0 = _mm256_set1_epi8(0xF0u8 as i8);
            let (lo, hi) =
                (_mm256_or_si256(lo, _mm256_andnot_si256(flo, f0)), _mm256_or_si256(hi, _mm256_andnot_si256(fhi, f0)));
            (lo, hi, scales2(a, b), [0.0; 2])
        }
    }
}

impl QType for Q5_1 {
    const BYTES: usize = 24;
    const SIGNED: bool = false;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn pair(a: *const u8, b: *const u8) -> (__m256i, __m256i, __m256, [f32; 2]) {
        unsafe {
            let (lo, hi) = nibbles2(a.add(8), b.add(8));
            let (flo, fhi) = fifth2(a.add(4), b.add(4));
            let x10 = _mm256_set1_epi8(0x10);
            let (lo, hi) =
                (_mm256_or_si256(lo, _mm256_and_si256(flo, x10)), _mm256_or_si256(hi, _mm256_and_si256(fhi, x10)));
            (lo, hi, scales2(a, b), [f16(a.add(2)), f16(b.add(2))])
        }
    }
}

impl QType for Q8_0 {
    const BYTES: usize = 34;
    const SIGNED: bool = true;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn pair(a: *const u8, b: *const u8) -> (__m256i, __m256i, __m256, [f32; 2]) {
        unsafe {
            let (va, vb) = (load32(a.add(2)), load32(b.add(2)));
            let (lo, hi) = (_mm256_permute2x128_si256::<0x20>(va, vb), _mm256_permute2x128_si256::<0x31>(va, vb));
            (lo, hi, scales2(a, b), [0.0; 2])
        }
    }
}

/// Eight codes (bytes of `v`) minus `off`, as f32.
#[inline(always)]
unsafe fn codes8(v: __m128i, signed: bool, off: i32) -> __m256 {
    unsafe {
        let i = if signed { _mm256_cvtepi8_epi32(v) } else { _mm256_cvtepu8_epi32(v) };
        _mm256_cvtepi32_ps(_mm256_sub_epi32(i, _mm256_set1_epi32(off)))
    }
}

/// The 32 codes of `v` as `a * (code - off) [+ b]` into `out`, in ggml's operation order.
#[inline(always)]
unsafe fn affine32(v: __m256i, signed: bool, off: i32, ab: [(f32, Option<f32>); 2], out: *mut f32) {
    unsafe {
        for (h, &(a, b)) in ab.iter().enumerate() {
            let half = if h == 0 { _mm256_castsi256_si128(v) } else { _mm256_extracti128_si256::<1>(v) };
            for e in 0..2 {
                let q = codes8(if e == 0 { half } else { _mm_unpackhi_epi64(half, half) }, signed, off);
                let y = _mm256_mul_ps(q, _mm256_set1_ps(a));
                let y = b.map_or(y, |b| _mm256_add_ps(y, _mm256_set1_ps(b)));
                _mm256_storeu_ps(out.add(16 * h + 8 * e), y);
            }
        }
    }
}

/// Block `b` of a k-quant dequantized into `out[..256]`, equal to ggml's values bit for bit.
#[inline(always)]
pub(super) unsafe fn dequant_k<K: KType>(b: *const u8, out: *mut f32) {
    unsafe {
        let (d, dmin, sc, m) = K::head(b);
        // Per 16 weights: `a = d * sc` and `-(dmin * m)` (`x - b` as `x + (-b)`: the same rounding).
        let (mut a, mut nb) = ([0.0f32; 16], [0.0f32; 16]);
        let f32s = |v: __m256i, h: usize| {
            _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(if h == 0 {
                _mm256_castsi256_si128(v)
            } else {
                _mm256_extracti128_si256::<1>(v)
            }))
        };
        for h in 0..2 {
            _mm256_storeu_ps(a.as_mut_ptr().add(8 * h), _mm256_mul_ps(_mm256_set1_ps(d), f32s(sc, h)));
            let bm = _mm256_mul_ps(_mm256_set1_ps(dmin), f32s(m, h));
            _mm256_storeu_ps(nb.as_mut_ptr().add(8 * h), _mm256_xor_ps(bm, _mm256_set1_ps(-0.0)));
        }
        let ab = |j: usize| (a[j], K::MIN.then_some(nb[j]));
        for p in 0..4 {
            let (w0, w1) = K::pair(b, p);
            affine32(w0, false, K::OFF as i32, [ab(4 * p), ab(4 * p + 1)], out.add(64 * p));
            affine32(w1, false, K::OFF as i32, [ab(4 * p + 2), ab(4 * p + 3)], out.add(64 * p + 32));
        }
    }
}

/// Block `b` of a 32-weight type dequantized into `out[..32]`, equal to ggml's bit for bit.
#[inline(always)]
pub(super) unsafe fn dequant_32<Q: QType>(b: *const u8, out: *mut f32) {
    unsafe {
        let (lo, hi, _, [m, _]) = Q::pair(b, super::ZERO_BLOCK.as_ptr());
        let ab = (f16(b), Q::MIN.then_some(m));
        // `b`'s codes are the low halves: elements 0..16, then 16..32.
        affine32(_mm256_permute2x128_si256::<0x20>(lo, hi), Q::SIGNED, 0, [ab, ab], out);
    }
}
