//! An `exp` for f64 weights that the compiler can keep in vector registers: 2^k times a
//! polynomial of the remainder, within [`REL_ERROR`] of libm's `exp` (relative, for arguments
//! in [-708, 0]). Its callers never let its bits decide a result: they widen their comparisons
//! by that error and fall back to libm's weights where a comparison is that close
//! (top_p_row.rs).

/// Bound on `|exp(x) - libm exp(x)|` relative to libm's, for `x` in [-708, 0]: the
/// polynomial's truncation (about 2^-51 at |r| = ln 2 / 2) and its roundings are far below it;
/// the tests require 2^-44.
pub const REL_ERROR: f64 = 1.0 / (1u64 << 40) as f64;

/// 1.5 * 2^52: added to a value under 2^51 in magnitude it rounds it to an integer, held in the
/// low bits of the sum's mantissa.
const ROUND: f64 = 6_755_399_441_055_744.0;
/// log2(e).
const LOG2_E: f64 = std::f64::consts::LOG2_E;
/// ln 2 in two parts (fdlibm's): the high one has zero low bits, so `k * LN2_HI` is exact.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
/// The rest of ln 2.
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);

/// `exp(x)` for `x <= 0` (clamped below at -708, where it is under 2^-1021): `x = k ln 2 + r`,
/// `|r| <= 0.35`, exp(r) by its Taylor series to r^12 / 12!, times 2^k from the exponent bits.
#[inline(always)]
pub fn exp(x: f64) -> f64 {
    let x = x.clamp(-708.0, 0.0);
    let t = x * LOG2_E + ROUND;
    let k = t - ROUND;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let mut p = 1.0 / 479_001_600.0;
    for c in [
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * r + c;
    }
    // t's low mantissa bits hold k (two's complement); k + 1023 in the exponent field is 2^k.
    p * f64::from_bits(t.to_bits().wrapping_add(1023) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_the_bound_of_libm_over_the_f32_arguments_a_weight_takes() {
        let bound = 1.0 / (1u64 << 44) as f64;
        let mut worst = 0.0f64;
        // Every 61st f32 from -708 up to -0, then the small ones densely.
        let (lo, hi) = ((-708.0f32).to_bits(), (-0.0f32).to_bits());
        let check = |x: f32, worst: &mut f64| {
            let (got, want) = (exp(f64::from(x)), f64::from(x).exp());
            let rel = (got - want).abs() / want;
            assert!(rel <= bound, "exp({x}): {got:e} against libm {want:e}, relative {rel:e}");
            *worst = worst.max(rel);
        };
        for bits in (hi..=lo).step_by(61) {
            check(f32::from_bits(bits), &mut worst);
        }
        for i in 0..100_000 {
            check(-(i as f32) * 1e-5, &mut worst);
        }
        eprintln!("worst relative difference from libm: {worst:e}");
        assert!(worst < bound, "{worst:e}");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert!(exp(-1000.0) < 1e-300 && exp(-1000.0) >= 0.0);
        assert!(REL_ERROR >= 16.0 * bound);
    }
}
