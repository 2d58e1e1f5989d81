//! The gated MLP's activations on the CPU, vectorized: one polynomial `exp` with a fixed sequence
//! of f32 operations, run 8 lanes at a time on AVX2 and one value at a time in plain Rust, both
//! giving the same bits per element (so a value never depends on where a chunk or a row begins).
//!
//! SiLU is `g / (1 + exp(-g))` as in the reference; GELU (tanh form) is rewritten through
//! `0.5 (1 + tanh(y)) = 1 / (1 + exp(-2 y))`, so it too is one `exp` and one division; SwiGLU-OAI
//! is the reference's formula on the same `exp`. The results lie within a few ulp of the
//! reference backend's libm ones (`tests` bounds them); squared ReLU is exact and stays scalar.

use tf_backend::reference::glu_one;
use tf_backend::{Activation, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT};

/// Below this `exp` is taken as 0 (its true value is under 2^-124, nothing beside 1 in a sum).
const EXP_LO: f32 = -86.0;
/// Above this `exp` is infinite (`ln(f32::MAX)`).
const EXP_HI: f32 = 88.722_84;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split in two so that `n * LN2_HI` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Cephes' `expf` polynomial: `exp(r) = 1 + r + r^2 P(r)` on `|r| <= ln 2 / 2`.
const P: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];
/// `2 sqrt(2 / pi)`: GELU's tanh argument, doubled.
const GELU_2C: f32 = 1.595_769;
const GELU_A: f32 = 0.044_715;

/// `exp(x)` in the fixed operation order (plain Rust; [`avx2`] has the same steps on 8 lanes).
#[inline(always)]
fn exp(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let c = x.clamp(EXP_LO, EXP_HI);
    let n = (c * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_HI, c);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = P[0];
    for &k in &P[1..] {
        p = p.mul_add(r, k);
    }
    let y = p.mul_add(r * r, r + 1.0);
    // `2^n` as `2^(n - 1) * 2`, so that `n = 128` (just below `EXP_HI`) stays finite.
    let half = f32::from_bits(((n as i32 + 126) as u32) << 23);
    let e = y * half * 2.0;
    if x > EXP_HI {
        f32::INFINITY
    } else if x < EXP_LO {
        0.0
    } else {
        e
    }
}

/// `act(g) * u` (SwiGLU-OAI: `act(g) * (clamp(u) + 1)`), in the fixed order.
#[inline(always)]
pub(crate) fn glu_one_fast(g: f32, u: f32, act: Activation) -> f32 {
    match act {
        Activation::Silu => g / (1.0 + exp(-g)) * u,
        Activation::GeluTanh => {
            let inner = (g * g * GELU_A).mul_add(g, g);
            g / (1.0 + exp(-(inner * GELU_2C))) * u
        }
        Activation::SwigluOai => {
            let g = g.min(SWIGLU_OAI_LIMIT);
            let a = g * (1.0 / (1.0 + exp(-(g * SWIGLU_OAI_ALPHA))));
            a * (u.clamp(-SWIGLU_OAI_LIMIT, SWIGLU_OAI_LIMIT) + 1.0)
        }
        Activation::Relu2 => glu_one(g, u, act),
    }
}

/// `out[i] = act(gate[i]) * up[i]` over the shortest of the three, on AVX2 where `avx2`.
pub(crate) fn glu_slice(avx2: bool, act: Activation, gate: &[f32], up: &[f32], out: &mut [f32]) {
    let n = out.len().min(gate.len()).min(up.len());
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if avx2 && act != Activation::Relu2 {
        // SAFETY: the backend sets `avx2` only where the CPU has AVX2 and FMA.
        done = unsafe { avx2::glu(act, &gate[..n], &up[..n], &mut out[..n]) };
    }
    let _ = avx2;
    for i in done..n {
        out[i] = glu_one_fast(gate[i], up[i], act);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// [`super::exp`] on 8 lanes, the same operations in the same order.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp8(x: __m256) -> __m256 {
        let c = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            c,
            _mm256_set1_ps(LOG2E),
        ));
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), c);
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
        let mut p = _mm256_set1_ps(P[0]);
        for &k in &P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k));
        }
        let y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0)));
        let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)));
        let e = _mm256_mul_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(bits)), _mm256_set1_ps(2.0));
        let e =
            _mm256_blendv_ps(e, _mm256_set1_ps(f32::INFINITY), _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(EXP_HI)));
        let e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_LO)));
        // NaN in, NaN out (the clamps would have replaced it).
        _mm256_blendv_ps(e, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x))
    }

    /// `g / (1 + exp(-z)) * u` on 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn gated(g: __m256, z: __m256, u: __m256) -> __m256 {
        let one = _mm256_set1_ps(1.0);
        // SAFETY: the caller's CPU has AVX2 and FMA.
        let e = unsafe { exp8(_mm256_xor_ps(z, _mm256_set1_ps(-0.0))) };
        _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u)
    }

    /// The whole 8-lane groups of `out`; returns how many values it wrote.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; the three slices have one length; `act` is not squared ReLU.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn glu(act: Activation, gate: &[f32], up: &[f32], out: &mut [f32]) -> usize {
        let n = out.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: `i + 8 <= n` and all three slices hold at least `n` values.
            unsafe {
                let g = _mm256_loadu_ps(gate.as_ptr().add(i));
                let u = _mm256_loadu_ps(up.as_ptr().add(i));
                let v = match act {
                    Activation::Silu => gated(g, g, u),
                    Activation::GeluTanh => {
                        let t = _mm256_mul_ps(_mm256_mul_ps(g, g), _mm256_set1_ps(GELU_A));
                        let inner = _mm256_fmadd_ps(t, g, g);
                        gated(g, _mm256_mul_ps(inner, _mm256_set1_ps(GELU_2C)), u)
                    }
                    Activation::SwigluOai => {
                        let lim = _mm256_set1_ps(SWIGLU_OAI_LIMIT);
                        let g = _mm256_min_ps(g, lim);
                        let e = exp8(_mm256_xor_ps(
                            _mm256_mul_ps(g, _mm256_set1_ps(SWIGLU_OAI_ALPHA)),
                            _mm256_set1_ps(-0.0),
                        ));
                        let s = _mm256_div_ps(_mm256_set1_ps(1.0), _mm256_add_ps(_mm256_set1_ps(1.0), e));
                        let a = _mm256_mul_ps(g, s);
                        let uc = _mm256_min_ps(_mm256_max_ps(u, _mm256_set1_ps(-SWIGLU_OAI_LIMIT)), lim);
                        _mm256_mul_ps(a, _mm256_add_ps(uc, _mm256_set1_ps(1.0)))
                    }
                    Activation::Relu2 => unreachable!("squared ReLU stays scalar"),
                };
                _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values across every range the activations meet, the clamps' edges included.
    fn samples() -> Vec<f32> {
        let mut v: Vec<f32> = (-4000..=4000).map(|i| i as f32 * 0.01).collect();
        v.extend([
            -200.0, -104.0, -88.0, -86.01, -85.99, -50.0, 50.0, 88.3, 88.4, 88.72, 88.73, 89.0, 200.0, 0.0, -0.0,
        ]);
        v.extend([1e-30, -1e-30, 1e-7, -1e-7, f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE]);
        v
    }

    /// Distance in ulp between two finite f32 of one sign (or both zero).
    fn ulps(a: f32, b: f32) -> u32 {
        if a == b {
            return 0;
        }
        let key = |x: f32| {
            let i = x.to_bits() as i32;
            if i < 0 { i32::MIN - i } else { i }
        };
        key(a).abs_diff(key(b))
    }

    #[test]
    fn exp_is_within_two_ulp_of_libm_and_handles_the_ends() {
        let mut worst = 0;
        for x in samples() {
            let (got, want) = (exp(x), x.exp());
            if want.is_infinite() || x < EXP_LO {
                assert!(got == want || (x < EXP_LO && got == 0.0 && want < 1e-37), "exp({x}) = {got}, libm {want}");
                continue;
            }
            worst = worst.max(ulps(got, want));
            assert!(ulps(got, want) <= 2, "exp({x}) = {got}, libm {want}");
        }
        assert!(worst >= 1, "the polynomial is not libm: some value should differ");
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn activations_stay_close_to_the_reference() {
        let us = [1.0f32, -0.37, 3.5];
        for act in [Activation::Silu, Activation::GeluTanh, Activation::SwigluOai, Activation::Relu2] {
            for x in samples().into_iter().filter(|x| x.is_finite()) {
                for &u in &us {
                    let (got, want) = (glu_one_fast(x, u, act), glu_one(x, u, act));
                    // The reference's `1 + tanh(y)` cancels for negative `y`: its own error is up
                    // to an ulp of `g u`.
                    let tol = 8.0 * f32::EPSILON * want.abs() + 2.0 * f32::EPSILON * (x * u).abs();
                    assert!((got - want).abs() <= tol, "{act:?}({x}) * {u}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn the_avx2_lanes_give_the_portable_bits() {
        let xs = samples();
        let up: Vec<f32> = (0..xs.len()).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.13).collect();
        for act in [Activation::Silu, Activation::GeluTanh, Activation::SwigluOai, Activation::Relu2] {
            let (mut a, mut b) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
            glu_slice(false, act, &xs, &up, &mut a);
            glu_slice(crate::Simd::Avx2.available(), act, &xs, &up, &mut b);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "{act:?}");
        }
    }
}
