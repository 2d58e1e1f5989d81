//! MXFP4 rows dequantized for the f32 kernels ([`tf_core::DType::Mxfp4`], ggml's blocks): on
//! AVX2 eight codes at a time (their magnitudes looked up by a lane permute, the sign bit moved
//! into place, times the block's power-of-two scale), else tf_formats' scalar decode. Every
//! value is exact either way, so both give the same bits.

use crate::simd::Simd;
use tf_formats::mxfp4::BLOCK_BYTES;

/// Dequantizes the whole blocks of `bytes` into `out` (32 values a block).
pub(crate) fn dequantize(simd: Simd, bytes: &[u8], out: &mut [f32]) {
    assert_eq!(bytes.len() / BLOCK_BYTES * 32, out.len(), "mxfp4: {} bytes for {} values", bytes.len(), out.len());
    #[cfg(target_arch = "x86_64")]
    if simd == Simd::Avx2 {
        // SAFETY: a backend holds `Simd::Avx2` only where the CPU has it.
        unsafe { avx2(bytes, out) };
        return;
    }
    let _ = simd;
    tf_formats::mxfp4::dequantize_into(bytes, out);
}

/// The scale `2^(e - 127)` as f32 bits (exact: `e` 0 is the subnormal `2^-127`).
fn scale_bits(e: u8) -> u32 {
    match e {
        0 => 0x0040_0000,
        e => u32::from(e) << 23,
    }
}

/// [`dequantize`] with AVX2.
///
/// # Safety
/// The CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2(bytes: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::*;
    // FP4 E2M1 magnitudes by the code's low three bits.
    let mags = _mm256_setr_ps(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0);
    let seven = _mm256_set1_epi32(7);
    let sign = _mm256_set1_epi32(8);
    for (b, vals) in bytes.chunks_exact(BLOCK_BYTES).zip(out.chunks_exact_mut(32)) {
        let scale = _mm256_castsi256_ps(_mm256_set1_epi32(scale_bits(b[0]) as i32));
        // SAFETY: `b` holds 17 bytes: the scale, then 16 code bytes read 8 at a time.
        let (q0, q1) = unsafe {
            (
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.as_ptr().add(1).cast())),
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.as_ptr().add(9).cast())),
            )
        };
        // Low nibbles are values 0..16, high nibbles 16..32.
        let nibbles = [
            _mm256_and_si256(q0, _mm256_set1_epi32(15)),
            _mm256_and_si256(q1, _mm256_set1_epi32(15)),
            _mm256_srli_epi32(q0, 4),
            _mm256_srli_epi32(q1, 4),
        ];
        for (k, c) in nibbles.into_iter().enumerate() {
            let mag = _mm256_permutevar8x32_ps(mags, _mm256_and_si256(c, seven));
            let neg = _mm256_slli_epi32(_mm256_and_si256(c, sign), 28);
            let v = _mm256_mul_ps(_mm256_xor_ps(mag, _mm256_castsi256_ps(neg)), scale);
            // SAFETY: `vals` holds 32 values; `k * 8 + 8 <= 32`.
            unsafe { _mm256_storeu_ps(vals.as_mut_ptr().add(k * 8), v) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::simds;

    #[test]
    fn every_code_and_scale_decodes_as_the_scalar_decode_bit_for_bit() {
        // Every code at every position, every scale byte up to the largest finite one.
        let mut bytes = Vec::new();
        for e in 0..=tf_formats::mxfp4::MAX_SCALE {
            let codes: [u8; 32] = std::array::from_fn(|j| ((j as u8).wrapping_add(e)) & 0x0f);
            bytes.extend(tf_formats::mxfp4::pack(&codes, e));
        }
        let n = bytes.len() / BLOCK_BYTES * 32;
        let mut want = vec![0.0; n];
        tf_formats::mxfp4::dequantize_into(&bytes, &mut want);
        for simd in simds() {
            let mut got = vec![1.0; n];
            dequantize(simd, &bytes, &mut got);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
            assert_eq!(bits(&got), bits(&want), "{simd:?}");
        }
        assert_eq!(f32::from_bits(scale_bits(0)), f32::powi(2.0, -127));
        assert_eq!(f32::from_bits(scale_bits(130)), 8.0);
    }
}
