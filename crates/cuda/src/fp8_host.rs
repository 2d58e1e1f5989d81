//! The bf16 weight an FP8 weight multiplies as on CUDA, made on the host: each E4M3 code's value
//! times its block's scale (one f32 product), rounded once to bf16, nearest even. The kernels'
//! conversion (kernels/fp8.cuh `fp8x2_bf16x2`) gives the same bits; the device tests compare them.

use tf_backend::Fp8Scales;

/// bf16 bits of a NaN weight (codes 0x7F and 0xFF): the device's f32 product of a NaN is the
/// canonical NaN, whose bf16 rounding this is.
pub const NAN_BF16: u16 = 0x7FFF;

/// f32 to bf16 bits, round to nearest even; every NaN to [`NAN_BF16`].
pub fn bf16_bits(x: f32) -> u16 {
    if x.is_nan() {
        return NAN_BF16;
    }
    let u = x.to_bits();
    (u.wrapping_add(0x7FFF + ((u >> 16) & 1)) >> 16) as u16
}

/// The bf16 bits of code `code` in a block of scale `scale`.
pub fn fp8_bf16(code: u8, scale: f32) -> u16 {
    bf16_bits(tf_formats::fp8::e4m3(code) * scale)
}

/// The `[rows, cols]` bf16 weight (row-major, unpadded) of FP8 `codes` with `scales` (checked
/// by [`Fp8Scales::check`] beforehand).
pub fn dequantize_bf16(codes: &[u8], rows: usize, cols: usize, scales: &Fp8Scales) -> Vec<u16> {
    let [_, gc] = scales.grid(rows, cols);
    let [bh, bw] = scales.block.map(|b| b.max(1));
    let mut out = Vec::with_capacity(rows * cols);
    for (r, row) in codes.chunks_exact(cols.max(1)).take(rows).enumerate() {
        let srow = &scales.values[r / bh * gc..];
        out.extend(row.iter().enumerate().map(|(k, &c)| fp8_bf16(c, srow[k / bw])));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_formats::fp8::e4m3;

    #[test]
    fn rounding_is_nearest_even_once() {
        // 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7: even (1) wins; 1 + 3 * 2^-8 goes up.
        assert_eq!(bf16_bits(1.0 + 2f32.powi(-8)), 0x3F80);
        assert_eq!(bf16_bits(1.0 + 3.0 * 2f32.powi(-8)), 0x3F82);
        assert_eq!(bf16_bits(-0.0), 0x8000);
        assert_eq!(bf16_bits(f32::INFINITY), 0x7F80);
        assert_eq!(bf16_bits(f32::MAX), 0x7F80);
        assert_eq!(bf16_bits(f32::NAN), NAN_BF16);
        // A subnormal product stays subnormal (no flush to zero).
        assert_eq!(bf16_bits(f32::from_bits(0x0001_0000)), 0x0001);
        // The f32 product (exact here: 1.125 * (1 + 2^-8)) is rounded once, to 1.1328125.
        assert_eq!(fp8_bf16(0x39, 1.0 + 2f32.powi(-8)), half::bf16::from_f32(1.1328125).to_bits());
    }

    #[test]
    fn every_code_is_its_value_times_the_scale_rounded() {
        for scale in [1.0, 0.75, 1.0 / 448.0, 3.0e-3, 2f32.powi(-130), 7.0e30] {
            for c in 0..=255u8 {
                let got = fp8_bf16(c, scale);
                let v = e4m3(c) * scale;
                if v.is_nan() {
                    assert_eq!(got, NAN_BF16, "{c:#04x}");
                } else {
                    assert_eq!(got, half::bf16::from_f32(v).to_bits(), "{c:#04x} scale {scale}");
                }
            }
        }
        // Negative zero keeps its sign; subnormal codes decode exactly.
        assert_eq!(fp8_bf16(0x80, 2.0), 0x8000);
        assert_eq!(fp8_bf16(0x01, 1.0), half::bf16::from_f32(2f32.powi(-9)).to_bits());
        assert_eq!(fp8_bf16(0xFF, 1.0), NAN_BF16);
    }

    #[test]
    fn partial_edge_blocks_take_their_own_scale() {
        // A 3x5 weight in 2x2 blocks: the last row and column are partial blocks.
        let s = Fp8Scales { block: [2, 2], values: vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0] };
        let codes = vec![0x38u8; 15]; // 1.0 each
        let w = dequantize_bf16(&codes, 3, 5, &s);
        let want: Vec<u16> = [1.0, 1.0, 2.0, 2.0, 4.0, 1.0, 1.0, 2.0, 2.0, 4.0, 8.0, 8.0, 16.0, 16.0, 32.0]
            .iter()
            .map(|&v: &f32| half::bf16::from_f32(v).to_bits())
            .collect();
        assert_eq!(w, want);
    }

    #[test]
    fn equals_the_host_dequantization_rounded() {
        let (rows, cols) = (37, 101);
        let s = Fp8Scales { block: [16, 48], values: (0..9).map(|i| 0.01 + i as f32 * 0.37).collect() };
        assert!(s.check("w", rows, cols).is_ok());
        let codes: Vec<u8> =
            (0..rows * cols).map(|i| (i * 37 % 251) as u8).map(|c| if c & 0x7F == 0x7F { 0 } else { c }).collect();
        let w = dequantize_bf16(&codes, rows, cols, &s);
        let mut row = vec![0.0; cols];
        for r in 0..rows {
            s.dequantize_row(&codes[r * cols..][..cols], r, &mut row);
            let want: Vec<u16> = row.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect();
            assert_eq!(&w[r * cols..][..cols], &want[..], "row {r}");
        }
    }
}
