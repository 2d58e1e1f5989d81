//! GGML's reference quantizers (`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref` in
//! ggml-quants.c, operation for operation) for the block types a KV cache keeps: values
//! quantized here read back through [`crate::quant::dequantize`] as llama.cpp's cache does.

use half::f16;
use tf_core::QuantType;

/// The quantized types [`quantize`] writes.
pub const WRITABLE: [QuantType; 2] = [QuantType::Q8_0, QuantType::Q4_0];

/// `values` as whole blocks of `q` (one of [`WRITABLE`]); `None` for another type or a length
/// that is not a whole number of blocks.
pub fn quantize(q: QuantType, values: &[f32]) -> Option<Vec<u8>> {
    if !WRITABLE.contains(&q) || !values.len().is_multiple_of(q.block_len()) {
        return None;
    }
    let mut out = vec![0u8; values.len() / q.block_len() * q.block_bytes()];
    quantize_into(q, values, &mut out);
    Some(out)
}

/// [`quantize`] into `out` (exactly as long as the blocks of `values`; a type outside
/// [`WRITABLE`] writes nothing). Panics on lengths that disagree (a caller's bug).
pub fn quantize_into(q: QuantType, values: &[f32], out: &mut [u8]) {
    assert_eq!(values.len() / q.block_len() * q.block_bytes(), out.len(), "quantize: output length");
    let blocks = values.chunks_exact(32).zip(out.chunks_exact_mut(q.block_bytes()));
    match q {
        QuantType::Q8_0 => blocks.for_each(|(x, b)| q8_0(x, b)),
        QuantType::Q4_0 => blocks.for_each(|(x, b)| q4_0(x, b)),
        _ => {}
    }
}

/// 32 values: `d = max|x| / 127` as f16, then each `round(x / d)` (half away from zero) as a
/// signed byte, computed with `1 / d` in f32 as ggml does.
fn q8_0(x: &[f32], b: &mut [u8]) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    b[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (q, &v) in b[2..].iter_mut().zip(x) {
        // `as` saturates (NaN gives 0), where C's conversion would be undefined.
        *q = ((v * id).round() as i8) as u8;
    }
}

/// 32 values: `d = -m / 8` for the value `m` of largest magnitude (its sign kept) as f16, then
/// each `min(15, trunc(x / d + 8.5))` as a nibble: values 0..16 in the low nibbles of the 16
/// bytes, 16..32 in the high ones.
fn q4_0(x: &[f32], b: &mut [u8]) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    b[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    let nibble = |v: f32| ((v * id + 8.5) as i8).clamp(0, 15) as u8;
    for (j, q) in b[2..18].iter_mut().enumerate() {
        *q = nibble(x[j]) | (nibble(x[j + 16]) << 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::dequantize;

    fn values() -> Vec<f32> {
        (0..32 * 9).map(|i| (i as f32 * 0.37).sin() * 3f32.powi(i % 7 - 3)).collect()
    }

    #[test]
    fn q8_0_round_trips_within_half_a_step() {
        let x = values();
        let bytes = quantize(QuantType::Q8_0, &x).expect("whole blocks");
        assert_eq!(bytes.len(), 9 * 34);
        let y = dequantize(QuantType::Q8_0, &bytes);
        for (xb, yb) in x.chunks(32).zip(y.chunks(32)) {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= amax / 127.0 * 0.5 * 1.01, "{a} -> {b} (amax {amax})");
            }
        }
        // Quantizing the dequantized values again is the identity: a pool's rows read back and
        // written again (a restored session's) keep their bytes.
        assert_eq!(quantize(QuantType::Q8_0, &y), Some(bytes));
    }

    #[test]
    fn q4_0_matches_ggml_by_hand() {
        let mut x = [0.0f32; 32];
        x[0] = -4.0; // the largest magnitude: d = 0.5
        x[1] = 1.0;
        x[16] = 3.9;
        x[17] = -0.2;
        let b = quantize(QuantType::Q4_0, &x).expect("one block");
        assert_eq!(f16::from_le_bytes([b[0], b[1]]).to_f32(), 0.5);
        // x / d + 8.5 truncated: -4 -> 0, 1 -> 10, 3.9 -> 16 (clamped to 15), -0.2 -> 8, 0 -> 8.
        assert_eq!(b[2], 15 << 4);
        assert_eq!(b[3], 10 | (8 << 4));
        assert_eq!(b[4], 8 | (8 << 4));
        let y = dequantize(QuantType::Q4_0, &b);
        assert_eq!(&y[..2], &[-4.0, 1.0]);
        assert_eq!((y[16], y[17]), (3.5, 0.0));
    }

    #[test]
    fn zeros_and_non_finite_values_quantize_without_panicking() {
        let zeros = quantize(QuantType::Q8_0, &[0.0; 32]).expect("one block");
        assert!(dequantize(QuantType::Q8_0, &zeros).iter().all(|v| *v == 0.0));
        let mut x = [1.0f32; 32];
        x[3] = f32::NAN;
        x[4] = f32::INFINITY;
        for q in WRITABLE {
            assert!(quantize(q, &x).is_some());
        }
    }

    #[test]
    fn partial_blocks_and_other_types_are_refused() {
        assert_eq!(quantize(QuantType::Q8_0, &[1.0; 48]), None);
        assert_eq!(quantize(QuantType::Q4K, &[1.0; 256]), None);
    }
}
