//! FP8 E4M3 decoding as torch's `float8_e4m3fn` and `ml_dtypes` define it: 4 exponent bits
//! (bias 7), 3 mantissa bits, subnormals, no infinities, and 0x7F / 0xFF the only NaNs.

/// Every code's value; each is exact in f32.
pub const E4M3: [f32; 256] = table();

/// The value of one E4M3 code.
pub fn e4m3(code: u8) -> f32 {
    E4M3[code as usize]
}

const fn table() -> [f32; 256] {
    let mut t = [0.0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = f32::from_bits(bits(i as u32));
        i += 1;
    }
    t
}

/// The f32 bits of code `c`.
const fn bits(c: u32) -> u32 {
    let sign = (c >> 7) << 31;
    let (exp, man) = ((c >> 3) & 0xF, c & 7);
    if exp == 0xF && man == 7 {
        return sign | 0x7FC0_0000;
    }
    if exp != 0 {
        return sign | ((exp + 127 - 7) << 23) | (man << 20);
    }
    if man == 0 {
        return sign;
    }
    // A subnormal, man * 2^-9: its leading bit becomes the implicit one.
    let top = 31 - man.leading_zeros();
    sign | ((top + 127 - 9) << 23) | ((man - (1 << top)) << (23 - top))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, computed the slow way.
    fn slow(c: u8) -> f32 {
        let s = if c & 0x80 != 0 { -1.0 } else { 1.0 };
        let (e, m) = (((c >> 3) & 0xF) as i32, (c & 7) as f32);
        if e == 0xF && m == 7.0 {
            return f32::NAN;
        }
        if e == 0 { s * m / 8.0 * 2f32.powi(-6) } else { s * (1.0 + m / 8.0) * 2f32.powi(e - 7) }
    }

    #[test]
    fn every_code_decodes_to_its_definition() {
        for c in 0..=255u8 {
            let (got, want) = (e4m3(c), slow(c));
            if want.is_nan() {
                assert!(got.is_nan(), "{c:#04x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{c:#04x}");
            }
        }
    }

    #[test]
    fn landmarks() {
        assert_eq!(e4m3(0x38), 1.0);
        assert_eq!(e4m3(0x40), 2.0);
        assert_eq!(e4m3(0x7E), 448.0);
        assert_eq!(e4m3(0xFE), -448.0);
        assert_eq!(e4m3(0x01), 2f32.powi(-9));
        assert_eq!(e4m3(0x80).to_bits(), (-0.0f32).to_bits());
        assert!(e4m3(0x7F).is_nan() && e4m3(0xFF).is_nan());
        assert_eq!((0..=255u8).filter(|&c| e4m3(c).is_nan()).count(), 2);
    }
}
