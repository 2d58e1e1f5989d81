//! The integer form of every GGML block type and the integer-activation dot product written
//! plainly: the portable path runs this, and the AVX2 kernels compute the same integers and the
//! same f32 operations, so both give the same bits.
//!
//! A block's weights are small integers `w` with per-16 scales `sc`, and either an offset
//! (`value = d * sc * (w - off)`: Q4_0, Q5_0, Q3_K, Q6_K) or a min (`d * sc * w - dmin * m`: the
//! k-quants Q2_K, Q4_K, Q5_K; `d * w + m`: Q4_1, Q5_1).
//!
//! Against an 8-bit activation block, a k-quant's integer products go into 8 lanes: lane `l` sums
//! the elements `32 c + 4 l .. 32 c + 4 l + 4` of every 32-element chunk `c` (the lanes of
//! `_mm256_madd_epi16`), each times its group's scale; offsets and mins come in through the
//! activation's per-16 sums, lane `l` taking groups `2 l` and `2 l + 1`. Each block then adds
//! `fma(d_w * d_x, lane, acc)` per lane (mins first, as `fma(-(dmin_w * d_x), mins, acc)`).
//!
//! The 32-weight types go by pairs of blocks `a`, `b` (an odd last block pairs with an all-zero
//! block and zero activations): lanes 0..4 take `a`, lanes 4..8 take `b`, lane `l` of a block
//! summing `(w - off) x` over its elements `e` with `e % 16 / 4 == l`; then each lane adds
//! `fma(d_w * d_x, lane, acc)` with its own block's scales.
//!
//! A row's result is the fixed lane sum [`hsum8`]; Q4_1 / Q5_1 add their min terms
//! `fma(m_w, s_x, accm)`, block after block, in a scalar after it.

use super::act::{Q8K, Q8x2};
use crate::simd::hsum8;
use half::f16;
use tf_core::QuantType;

/// How a block type's integers turn into values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Format {
    /// 256-weight blocks (k-quants, met by [`Q8K`]) rather than 32 (met by [`Q8`]).
    pub k: bool,
    /// Subtracted from every `w` (0 for min types and Q8_0).
    pub off: i32,
    /// Carries a min.
    pub min: bool,
}

/// The format of `q`.
pub(crate) fn format(q: QuantType) -> Format {
    let (k, off, min) = match q {
        QuantType::Q4_0 => (false, 8, false),
        QuantType::Q4_1 | QuantType::Q5_1 => (false, 0, true),
        QuantType::Q5_0 => (false, 16, false),
        QuantType::Q8_0 => (false, 0, false),
        QuantType::Q2K | QuantType::Q4K | QuantType::Q5K => (true, 0, true),
        QuantType::Q3K => (true, 4, false),
        QuantType::Q6K => (true, 32, false),
    };
    Format { k, off, min }
}

/// One weight block in integer form.
#[derive(Clone, Debug)]
pub(crate) struct IntBlock {
    /// Integer weights: unsigned codes, signed values for Q8_0 (first 32 for 32-weight types).
    pub w: [i16; 256],
    /// Scale of each 16-weight group (k-quants only).
    pub sc: [i16; 16],
    /// Min of each 16-weight group (Q2_K, Q4_K, Q5_K).
    pub m: [i16; 16],
    /// Block scale.
    pub d: f32,
    /// k-quant `dmin`; the additive min of Q4_1 / Q5_1.
    pub dmin: f32,
}

fn half(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Scale and min `j` (0..8) of the packed 6-bit pairs of Q4_K / Q5_K.
fn scale_min_k4(q: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Unpacks one block `b` (`q.block_bytes()` bytes).
pub(crate) fn unpack(q: QuantType, b: &[u8]) -> IntBlock {
    let mut u = IntBlock { w: [0; 256], sc: [0; 16], m: [0; 16], d: half(b, 0), dmin: 0.0 };
    let nibbles = |qs: &[u8], w: &mut [i16]| {
        for (j, &v) in qs.iter().enumerate() {
            (w[j], w[j + 16]) = ((v & 0x0F) as i16, (v >> 4) as i16);
        }
    };
    let fifth = |qh: &[u8], w: &mut [i16]| {
        let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
        w.iter_mut().enumerate().for_each(|(i, v)| *v |= (((qh >> i) & 1) << 4) as i16);
    };
    match q {
        QuantType::Q4_0 => nibbles(&b[2..18], &mut u.w),
        QuantType::Q4_1 => (u.dmin, ()) = (half(b, 2), nibbles(&b[4..20], &mut u.w)),
        QuantType::Q5_0 => {
            nibbles(&b[6..22], &mut u.w);
            fifth(&b[2..6], &mut u.w[..32]);
        }
        QuantType::Q5_1 => {
            u.dmin = half(b, 2);
            nibbles(&b[8..24], &mut u.w);
            fifth(&b[4..8], &mut u.w[..32]);
        }
        QuantType::Q8_0 => b[2..34].iter().zip(&mut u.w).for_each(|(&v, w)| *w = v as i8 as i16),
        QuantType::Q2K => {
            (u.d, u.dmin) = (half(b, 80), half(b, 82));
            for (j, &s) in b[..16].iter().enumerate() {
                (u.sc[j], u.m[j]) = ((s & 0x0F) as i16, (s >> 4) as i16);
            }
            for (e, w) in u.w.iter_mut().enumerate() {
                let (h, k, l) = (e / 128, e % 128 / 32, e % 32);
                *w = ((b[16 + 32 * h + l] >> (2 * k)) & 3) as i16;
            }
        }
        QuantType::Q3K => {
            u.d = half(b, 108);
            let sc = &b[96..108];
            for (s, v) in u.sc.iter_mut().enumerate() {
                let low = if s < 8 { sc[s] & 0x0F } else { sc[s - 8] >> 4 };
                let high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
                *v = (low | (high << 4)) as i16 - 32;
            }
            for (e, w) in u.w.iter_mut().enumerate() {
                let (h, k, l) = (e / 128, e % 128 / 32, e % 32);
                let hbit = (b[l] >> (4 * h + k)) & 1;
                *w = (((b[32 + 32 * h + l] >> (2 * k)) & 3) | (hbit << 2)) as i16;
            }
        }
        QuantType::Q4K | QuantType::Q5K => {
            u.dmin = half(b, 2);
            for j in 0..8 {
                let (s, m) = scale_min_k4(&b[4..16], j);
                (u.sc[2 * j], u.sc[2 * j + 1], u.m[2 * j], u.m[2 * j + 1]) = (s as i16, s as i16, m as i16, m as i16);
            }
            let (qh, qs) = if q == QuantType::Q5K { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            for (e, w) in u.w.iter_mut().enumerate() {
                let (c, l) = (e / 32, e % 32);
                let byte = qs[32 * (c / 2) + l];
                let hi = qh.map_or(0, |qh| ((qh[l] >> c) & 1) << 4);
                *w = ((if c % 2 == 0 { byte & 0x0F } else { byte >> 4 }) | hi) as i16;
            }
        }
        QuantType::Q6K => {
            u.d = half(b, 208);
            b[192..208].iter().zip(&mut u.sc).for_each(|(&s, v)| *v = s as i8 as i16);
            for (e, w) in u.w.iter_mut().enumerate() {
                let (h, k, l) = (e / 128, e % 128 / 32, e % 32);
                let byte = b[64 * h + 32 * (k % 2) + l];
                let low = if k < 2 { byte & 0x0F } else { byte >> 4 };
                *w = (low | (((b[128 + 32 * h + l] >> (2 * k)) & 3) << 4)) as i16;
            }
        }
    }
    u
}

/// One k-quant block against `x`: the lanes and f32 steps of the module doc.
pub(crate) fn dot_block_k(f: Format, u: &IntBlock, x: &Q8K, acc: &mut [f32; 8]) {
    let mut lanes = [0i32; 8];
    for (e, (&w, &xq)) in u.w.iter().zip(&x.qs).enumerate() {
        lanes[e % 32 / 4] += u.sc[e / 16] as i32 * w as i32 * xq as i32;
    }
    let group = |l: usize, c: &[i16; 16]| -> i32 { (2 * l..2 * l + 2).map(|j| c[j] as i32 * x.bsums[j] as i32).sum() };
    for (l, a) in acc.iter_mut().enumerate() {
        if f.min {
            *a = (-(u.dmin * x.d)).mul_add(group(l, &u.m) as f32, *a);
        }
        let off = if f.off != 0 { f.off * group(l, &u.sc) } else { 0 };
        *a = (u.d * x.d).mul_add((lanes[l] - off) as f32, *a);
    }
}

/// A pair of 32-weight blocks against `x`: the lanes and f32 steps of the module doc.
pub(crate) fn dot_pair_32(f: Format, pair: [&IntBlock; 2], x: &Q8x2, acc: &mut [f32; 8], accm: &mut f32) {
    let mut lanes = [0i32; 8];
    for (h, u) in pair.iter().enumerate() {
        for (e, &w) in u.w[..32].iter().enumerate() {
            let xq = x.qs[32 * (e / 16) + 16 * h + e % 16];
            lanes[4 * h + e % 16 / 4] += (w as i32 - f.off) * xq as i32;
        }
    }
    for (l, a) in acc.iter_mut().enumerate() {
        *a = (pair[l / 4].d * x.d[l]).mul_add(lanes[l] as f32, *a);
    }
    if f.min {
        for (u, &s) in pair.iter().zip(&x.s) {
            *accm = u.dmin.mul_add(s, *accm);
        }
    }
}

/// The row result from the lane accumulators (and the Q4_1 / Q5_1 min sum).
pub(crate) fn finish(f: Format, acc: [f32; 8], accm: f32) -> f32 {
    if f.min && !f.k { hsum8(acc) + accm } else { hsum8(acc) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::tests::{QUANTS, rand_blocks};
    use crate::testutil::Rng;

    /// The value of element `e` from the integer form, with the f32 operations of ggml.
    fn value(q: QuantType, u: &IntBlock, e: usize) -> f32 {
        let f = format(q);
        let w = u.w[e] as i32;
        if !f.k {
            return if f.min { w as f32 * u.d + u.dmin } else { (w - f.off) as f32 * u.d };
        }
        let a = u.d * u.sc[e / 16] as f32;
        if f.min { a * w as f32 - u.dmin * u.m[e / 16] as f32 } else { a * (w - f.off) as f32 }
    }

    #[test]
    fn integer_form_gives_ggml_values_bit_for_bit() {
        let mut rng = Rng::new(31);
        for q in QUANTS {
            let bytes = rand_blocks(&mut rng, q, 40);
            let want = tf_formats::quant::dequantize(q, &bytes);
            for (i, b) in bytes.chunks_exact(q.block_bytes()).enumerate() {
                let u = unpack(q, b);
                for e in 0..q.block_len() {
                    let (got, want) = (value(q, &u, e), want[i * q.block_len() + e]);
                    assert_eq!(got.to_bits(), want.to_bits(), "{q:?} block {i} element {e}: {got} vs {want}");
                }
            }
        }
    }
}
