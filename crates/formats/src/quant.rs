//! GGML block quantization: the plain dequantize-to-f32 reference for every supported type,
//! following ggml's `dequantize_row_*` (ggml-quants.c) operation for operation, so results
//! are bit-identical to ggml's and to the `gguf` Python package's.

use half::f16;
use tf_core::QuantType;

/// Dequantizes whole blocks of `q` in `bytes` to f32 (a trailing partial block is ignored).
pub fn dequantize(q: QuantType, bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / q.block_bytes() * q.block_len());
    match q {
        QuantType::Q4_0 | QuantType::Q8_0 => {
            out.resize(bytes.len() / q.block_bytes() * q.block_len(), 0.0);
            dequantize_into(q, bytes, &mut out);
        }
        QuantType::Q4_1 => blocks(bytes).for_each(|b| q4_1(b, &mut out)),
        QuantType::Q5_0 => blocks(bytes).for_each(|b| q5_0(b, &mut out)),
        QuantType::Q5_1 => blocks(bytes).for_each(|b| q5_1(b, &mut out)),
        QuantType::Q2K => blocks(bytes).for_each(|b| q2_k(b, &mut out)),
        QuantType::Q3K => blocks(bytes).for_each(|b| q3_k(b, &mut out)),
        QuantType::Q4K => blocks(bytes).for_each(|b| q4_k(b, &mut out)),
        QuantType::Q5K => blocks(bytes).for_each(|b| q5_k(b, &mut out)),
        QuantType::Q6K => blocks(bytes).for_each(|b| q6_k(b, &mut out)),
    }
    out
}

/// Dequantizes the whole blocks of `bytes` into `out`, as many values as it holds (`out` no
/// longer than the blocks' values): q8_0 and q4_0 (a KV cache's types) without allocating,
/// the others through [`dequantize`].
pub fn dequantize_into(q: QuantType, bytes: &[u8], out: &mut [f32]) {
    match q {
        QuantType::Q4_0 => blocks(bytes).zip(out.chunks_exact_mut(32)).for_each(|(b, o)| q4_0(b, o)),
        QuantType::Q8_0 => blocks(bytes).zip(out.chunks_exact_mut(32)).for_each(|(b, o)| q8_0(b, o)),
        _ => {
            let all = dequantize(q, bytes);
            out.copy_from_slice(&all[..out.len()]);
        }
    }
}

/// The whole `N`-byte blocks of `bytes`.
fn blocks<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = &[u8; N]> {
    bytes.chunks_exact(N).filter_map(|c| c.try_into().ok())
}

fn half(lo: u8, hi: u8) -> f32 {
    f16::from_le_bytes([lo, hi]).to_f32()
}

/// 32 weights: f16 d, 16 bytes of nibbles (low nibbles are weights 0..16). w = d * (q - 8).
fn q4_0(b: &[u8; 18], out: &mut [f32]) {
    let d = half(b[0], b[1]);
    let (lo, hi) = out.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[2..]) {
        *l = ((q & 0x0F) as i32 - 8) as f32 * d;
        *h = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// 32 weights: f16 d, f16 m, 16 bytes of nibbles. w = d * q + m.
fn q4_1(b: &[u8; 20], out: &mut Vec<f32>) {
    let (d, m) = (half(b[0], b[1]), half(b[2], b[3]));
    let qs = &b[4..];
    out.extend(qs.iter().map(|&q| (q & 0x0F) as f32 * d + m));
    out.extend(qs.iter().map(|&q| (q >> 4) as f32 * d + m));
}

/// The 5-bit values of a Q5 block: low nibbles from `qs`, bit i of `qh` as bit 4 of weight i.
fn q5_values(qh: u32, qs: &[u8]) -> impl Iterator<Item = i32> + '_ {
    let lo = qs.iter().map(|&q| q & 0x0F);
    let hi = qs.iter().map(|&q| q >> 4);
    lo.chain(hi).enumerate().map(move |(i, q)| (q as i32) | ((((qh >> i) & 1) as i32) << 4))
}

/// 32 weights: f16 d, 32 high bits, 16 bytes of low nibbles. w = d * (q - 16).
fn q5_0(b: &[u8; 22], out: &mut Vec<f32>) {
    let d = half(b[0], b[1]);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    out.extend(q5_values(qh, &b[6..]).map(|q| (q - 16) as f32 * d));
}

/// 32 weights: f16 d, f16 m, 32 high bits, 16 bytes of low nibbles. w = d * q + m.
fn q5_1(b: &[u8; 24], out: &mut Vec<f32>) {
    let (d, m) = (half(b[0], b[1]), half(b[2], b[3]));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    out.extend(q5_values(qh, &b[8..]).map(|q| q as f32 * d + m));
}

/// 32 weights: f16 d, 32 signed bytes. w = d * q.
fn q8_0(b: &[u8; 34], out: &mut [f32]) {
    let d = half(b[0], b[1]);
    for (o, &q) in out.iter_mut().zip(&b[2..]) {
        *o = (q as i8) as f32 * d;
    }
}

/// 256 weights: 16 scale bytes (low nibble scale, high nibble min), 64 bytes of 2-bit values,
/// f16 d, f16 dmin. Weight e has scale byte e / 16 and sits in byte 32 * (e / 128) + e % 32 at
/// bit 2 * ((e % 128) / 32). w = (d * sc) * q - (dmin * m).
fn q2_k(b: &[u8; 84], out: &mut Vec<f32>) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (half(b[80], b[81]), half(b[82], b[83]));
    for (s, &sc) in scales.iter().enumerate() {
        let dl = d * (sc & 0x0F) as f32;
        let ml = dmin * (sc >> 4) as f32;
        let (half_idx, j, part) = (s / 8, (s % 8) / 2, s % 2);
        let shift = 2 * j;
        for l in 0..16 {
            let q = (qs[half_idx * 32 + part * 16 + l] >> shift) & 3;
            out.push(dl * q as f32 - ml);
        }
    }
}

/// The 6-bit scale `s` of a Q3_K block: low 4 bits from bytes 0..8, high 2 bits from 8..12.
fn q3_k_scale(sc: &[u8], s: usize) -> i32 {
    let low = if s < 8 { sc[s] & 0x0F } else { sc[s - 8] >> 4 };
    let high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    ((low | (high << 4)) as i8) as i32 - 32
}

/// 256 weights: 32 bytes of high-bit masks, 64 bytes of 2-bit values, 12 bytes of 6-bit scales,
/// f16 d. A clear high bit subtracts 4. w = (d * (scale - 32)) * q.
fn q3_k(b: &[u8; 110], out: &mut Vec<f32>) {
    let (hmask, qs, scales) = (&b[0..32], &b[32..96], &b[96..108]);
    let d = half(b[108], b[109]);
    for s in 0..16 {
        let dl = d * q3_k_scale(scales, s) as f32;
        let (half_idx, j, part) = (s / 8, (s % 8) / 2, s % 2);
        let mask = 1u8 << (half_idx * 4 + j);
        for l in part * 16..part * 16 + 16 {
            let q = ((qs[half_idx * 32 + l] >> (2 * j)) & 3) as i32;
            let q = if hmask[l] & mask != 0 { q } else { q - 4 };
            out.push(dl * q as f32);
        }
    }
}

/// Scale and min `j` (0..8) of the 12 packed 6-bit pairs of a Q4_K / Q5_K block.
fn scale_min_k4(q: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// 256 weights: f16 d, f16 dmin, 12 bytes of scales/mins, 128 bytes of nibbles; each 64-weight
/// chunk uses the low then the high nibbles of 32 bytes. w = (d * sc) * q - (dmin * m).
fn q4_k(b: &[u8; 144], out: &mut Vec<f32>) {
    let (d, dmin) = (half(b[0], b[1]), half(b[2], b[3]));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for (c, q) in qs.chunks_exact(32).enumerate() {
        let (sc1, m1) = scale_min_k4(scales, 2 * c);
        let (sc2, m2) = scale_min_k4(scales, 2 * c + 1);
        let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
        out.extend(q.iter().map(|&v| d1 * (v & 0x0F) as f32 - m1));
        out.extend(q.iter().map(|&v| d2 * (v >> 4) as f32 - m2));
    }
}

/// 256 weights: as Q4_K plus 32 bytes of fifth bits (bit 2c of byte l for the low nibbles of
/// chunk c, bit 2c + 1 for the high ones).
fn q5_k(b: &[u8; 176], out: &mut Vec<f32>) {
    let (d, dmin) = (half(b[0], b[1]), half(b[2], b[3]));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for (c, q) in qs.chunks_exact(32).enumerate() {
        let (sc1, m1) = scale_min_k4(scales, 2 * c);
        let (sc2, m2) = scale_min_k4(scales, 2 * c + 1);
        let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
        let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
        let bit = |h: u8, u: u8| if h & u != 0 { 16 } else { 0 };
        out.extend(q.iter().zip(qh).map(|(&v, &h)| d1 * ((v & 0x0F) + bit(h, u1)) as f32 - m1));
        out.extend(q.iter().zip(qh).map(|(&v, &h)| d2 * ((v >> 4) + bit(h, u2)) as f32 - m2));
    }
}

/// 256 weights: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 signed scales, f16 d.
/// w = (d * scale) * (q - 32).
fn q6_k(b: &[u8; 210], out: &mut Vec<f32>) {
    let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = half(b[208], b[209]);
    let mut y = [0f32; 256];
    for h in 0..2 {
        let (ql, qh, sc, y) = (&ql[h * 64..], &qh[h * 32..], &sc[h * 8..], &mut y[h * 128..]);
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            let s = |k: usize| d * (sc[is + k] as i8) as f32;
            y[l] = s(0) * q1 as f32;
            y[l + 32] = s(2) * q2 as f32;
            y[l + 64] = s(4) * q3 as f32;
            y[l + 96] = s(6) * q4 as f32;
        }
    }
    out.extend_from_slice(&y);
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [QuantType; 10] = [
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

    #[test]
    fn output_length_is_whole_blocks() {
        for q in ALL {
            let bytes = vec![0x11u8; 3 * q.block_bytes() + 5];
            assert_eq!(dequantize(q, &bytes).len(), 3 * q.block_len(), "{q:?}");
            assert!(dequantize(q, &bytes[..q.block_bytes() - 1]).is_empty(), "{q:?}");
        }
    }

    #[test]
    fn q8_0_by_hand() {
        let mut b = vec![0u8; 34];
        b[..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        b[2] = 4;
        b[3] = (-6i8) as u8;
        let y = dequantize(QuantType::Q8_0, &b);
        assert_eq!(&y[..3], &[2.0, -3.0, 0.0]);
    }

    #[test]
    fn q4_0_nibble_order() {
        // Byte j's low nibble is weight j, its high nibble weight j + 16.
        let mut b = vec![0x88u8; 18];
        b[..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
        b[2] = 0x9A; // weight 0 = 10 - 8, weight 16 = 9 - 8
        let y = dequantize(QuantType::Q4_0, &b);
        assert_eq!((y[0], y[16], y[1]), (2.0, 1.0, 0.0));
    }
}
