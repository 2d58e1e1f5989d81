//! MXFP4 blocks in ggml's layout ([`tf_core::DType::Mxfp4`]): an E8M0 scale byte then 16 bytes
//! of FP4 E2M1 codes, weight `j` in byte `j`'s low nibble and weight `j + 16` in its high one.
//! Every value is a code's magnitude times a power of two, which f32 holds exactly.

/// FP4 E2M1 values by code (bit 3 the sign).
pub const FP4: [f32; 16] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];
/// Bytes of one block of 32 weights.
pub const BLOCK_BYTES: usize = 17;
/// Largest scale byte whose block stays finite (6 x 2^125 < f32::MAX < 6 x 2^126).
pub const MAX_SCALE: u8 = 252;

/// The value of scale byte `e`: `2^(e - 127)`.
pub fn scale(e: u8) -> f32 {
    f32::powi(2.0, i32::from(e) - 127)
}

/// The 32 values of each whole block of `bytes`, appended to `out`.
pub fn dequantize(bytes: &[u8], out: &mut Vec<f32>) {
    let at = out.len();
    out.resize(at + bytes.len() / BLOCK_BYTES * 32, 0.0);
    dequantize_into(bytes, &mut out[at..]);
}

/// The 32 values of each whole block of `bytes` into `out` (32 a block).
pub fn dequantize_into(bytes: &[u8], out: &mut [f32]) {
    for (b, vals) in bytes.chunks_exact(BLOCK_BYTES).zip(out.chunks_exact_mut(32)) {
        let s = scale(b[0]);
        let (lo, hi) = vals.split_at_mut(16);
        for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&b[1..]) {
            *l = FP4[usize::from(q & 0x0f)] * s;
            *h = FP4[usize::from(q >> 4)] * s;
        }
    }
}

/// One block from 32 codes (each `0..16`) and its scale byte.
pub fn pack(codes: &[u8; 32], e: u8) -> [u8; BLOCK_BYTES] {
    let mut b = [0u8; BLOCK_BYTES];
    b[0] = e;
    for j in 0..16 {
        b[1 + j] = (codes[j] & 0x0f) | (codes[j + 16] << 4);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_its_scale_then_low_nibbles_then_high_ones() {
        let mut codes = [0u8; 32];
        codes[0] = 7; // 6
        codes[16] = 0xf; // -6
        codes[31] = 1; // 0.5
        let b = pack(&codes, 127 + 2);
        assert_eq!((b[0], b[1], b[16]), (129, 0xf7, 0x10));
        let mut out = Vec::new();
        dequantize(&b, &mut out);
        assert_eq!((out[0], out[16], out[31], out.len()), (24.0, -24.0, 2.0, 32));
        assert_eq!(out.iter().filter(|v| **v != 0.0).count(), 3);
        assert_eq!((scale(0), scale(MAX_SCALE) * 6.0 < f32::MAX), (f32::powi(2.0, -127), true));
    }
}
