//! MXFP4 weights as the gpt-oss release stores its experts: per row, blocks of 32 FP4 E2M1
//! codes (two a byte, the even value in the low nibble) and one E8M0 scale a block (`2^(s -
//! 127)`), repacked into ggml's block layout (held packed: [`tf_core::DType::Mxfp4`]) or decoded
//! exactly (every value is a code's magnitude times a power of two, which f32 and bf16 hold).

use tf_formats::mxfp4::{FP4, MAX_SCALE};

/// A scale byte past [`MAX_SCALE`] (255: E8M0's NaN) refused.
pub fn check_scale(s: u8) -> Result<(), String> {
    match s > MAX_SCALE {
        true => Err(format!("scale byte {s} (2^{}) is not a finite scale", i32::from(s) - 127)),
        false => Ok(()),
    }
}

/// One block of the release's layout (16 bytes, value `2j` in byte `j`'s low nibble) and its
/// scale byte as a block of ggml's ([`tf_core::DType::Mxfp4`]).
pub fn repack(bytes: &[u8], s: u8) -> [u8; tf_formats::mxfp4::BLOCK_BYTES] {
    let mut codes = [0u8; 32];
    for (j, &b) in bytes.iter().take(16).enumerate() {
        codes[2 * j] = b & 0x0f;
        codes[2 * j + 1] = b >> 4;
    }
    tf_formats::mxfp4::pack(&codes, s)
}

/// One row's values from its `blocks` (16 bytes a block of 32) and `scales` (one a block)
/// into `out` (32 a block); a scale byte past [`MAX_SCALE`] (255: E8M0's NaN) is refused.
pub fn decode_row(blocks: &[u8], scales: &[u8], out: &mut [f32]) -> Result<(), String> {
    if blocks.len() != 16 * scales.len() || out.len() != 32 * scales.len() {
        return Err(format!("{} bytes and {} scales for {} values", blocks.len(), scales.len(), out.len()));
    }
    for ((bytes, &s), vals) in blocks.chunks_exact(16).zip(scales).zip(out.chunks_exact_mut(32)) {
        check_scale(s)?;
        let scale = tf_formats::mxfp4::scale(s);
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

    #[test]
    fn a_repacked_block_decodes_to_the_same_values() {
        let bytes: Vec<u8> = (0..16u8).map(|j| j.wrapping_mul(37) ^ 0x5a).collect();
        let mut want = vec![0.0; 32];
        decode_row(&bytes, &[120], &mut want).expect("finite");
        let mut got = Vec::new();
        tf_formats::mxfp4::dequantize(&repack(&bytes, 120), &mut got);
        assert_eq!(got, want);
    }
}
