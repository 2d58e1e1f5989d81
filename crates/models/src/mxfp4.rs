//! MXFP4 weights as the gpt-oss release stores its experts: per row, blocks of 32 FP4 E2M1
//! codes (two a byte, the even value in the low nibble) and one E8M0 scale a block (`2^(s -
//! 127)`). Decoded exactly: every value is a code's magnitude times a power of two, which f32
//! and bf16 hold exactly.

/// FP4 E2M1 values by code (bit 3 the sign).
const FP4: [f32; 16] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];
/// Largest scale byte whose block stays finite (6 x 2^125 < f32::MAX < 6 x 2^126).
const MAX_SCALE: u8 = 252;

/// One row's values from its `blocks` (16 bytes a block of 32) and `scales` (one a block)
/// into `out` (32 a block); a scale byte past [`MAX_SCALE`] (255: E8M0's NaN) is refused.
pub fn decode_row(blocks: &[u8], scales: &[u8], out: &mut [f32]) -> Result<(), String> {
    if blocks.len() != 16 * scales.len() || out.len() != 32 * scales.len() {
        return Err(format!("{} bytes and {} scales for {} values", blocks.len(), scales.len(), out.len()));
    }
    for ((bytes, &s), vals) in blocks.chunks_exact(16).zip(scales).zip(out.chunks_exact_mut(32)) {
        if s > MAX_SCALE {
            return Err(format!("scale byte {s} (2^{}) is not a finite scale", i32::from(s) - 127));
        }
        let scale = f32::powi(2.0, i32::from(s) - 127);
        for (pair, &b) in vals.chunks_exact_mut(2).zip(bytes) {
            pair[0] = FP4[usize::from(b & 0x0f)] * scale;
            pair[1] = FP4[usize::from(b >> 4)] * scale;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_nibble_first_each_block_its_scale_and_bad_scales_refused() {
        let mut blocks = vec![0u8; 32];
        blocks[0] = 0x7f; // low nibble 0xf (-6), high nibble 0x7 (6)
        blocks[16] = 0x91; // 0.5 then -0.5
        let mut out = vec![0.0; 64];
        decode_row(&blocks, &[127 + 1, 127 - 3], &mut out).expect("finite");
        assert_eq!(&out[..2], &[-12.0, 12.0]);
        assert_eq!(&out[32..34], &[0.0625, -0.0625]);
        assert!(out[2..32].iter().chain(&out[34..]).all(|&v| v == 0.0));
        assert!(decode_row(&blocks, &[255, 127], &mut out).unwrap_err().contains("scale byte 255"));
        assert!(decode_row(&blocks, &[252, 0], &mut out).is_ok(), "6 x 2^125 and 2^-127 are finite");
        assert!(decode_row(&blocks[..16], &[127, 127], &mut out).is_err(), "lengths disagree");
    }
}
