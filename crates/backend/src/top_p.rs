//! Top-p's cut over a row's candidates when a backend sent only the top of the row's window (the
//! ids a top-p draw can reach) with its own sum of the window's weights. The host's rule sums
//! exp(x - max) over the whole window in id order; a device's sum (its own exponential, its own
//! order) lies within [`MASS_TOLERANCE`] of it, so the cut is settled when the prefix mass steps
//! over the whole band of targets at one token: then it is the host's cut, bit for bit.

use crate::logprobs::rank_value;
use std::cmp::Ordering;

/// Relative band around a backend's window mass that holds the host's exact sum: 2^-30, far
/// above the two sums' difference (each weight within an ulp or two, each sum of positive terms
/// within its length times 2^-53: under 1e-10 for the widest rows).
pub const MASS_TOLERANCE: f64 = 1.0 / 1_073_741_824.0;

/// Most likely first (NaN lowest, -0 below +0), ties to the lower position.
#[inline]
pub fn by_ranked(a: &(f32, u32), b: &(f32, u32)) -> Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// Positions (increasing) of the top-p prefix of candidates `x` (scaled values, in id order, the
/// top of a window whose weights sum to about `window_mass`): the shortest prefix by rank whose
/// mass, summed in rank order, reaches `top_p` times the sum for every sum within the tolerance;
/// `None` when no prefix does (the band splits a token, or the candidates stop short of it).
pub fn band_prefix(x: &[f32], top_p: f32, window_mass: f64) -> Option<Vec<u32>> {
    let mut ranked: Vec<(f32, u32)> = x.iter().zip(0..).map(|(&v, i)| (rank_value(v), i)).collect();
    ranked.sort_unstable_by(by_ranked);
    let max = ranked.first()?.0;
    if !max.is_finite() || !window_mass.is_finite() {
        return None;
    }
    let target = f64::from(top_p) * window_mass;
    let (lo, hi) = (target * (1.0 - MASS_TOLERANCE), target * (1.0 + MASS_TOLERANCE));
    let mut mass = 0.0;
    for (n, p) in ranked.iter().enumerate() {
        mass += f64::from(p.0 - max).exp();
        if mass >= lo {
            if mass < hi {
                return None;
            }
            let mut kept: Vec<u32> = ranked[..=n].iter().map(|p| p.1).collect();
            kept.sort_unstable();
            return Some(kept);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cut_is_where_the_mass_passes_the_band_and_open_inside_it() {
        // Weights e^0, e^-1, e^-2, e^-3 (ranks 1, 0, 3, 2): prefix masses 1, 1.368, 1.503, 1.553.
        let x = [-1.0f32, 0.0, -3.0, -2.0];
        let total: f64 = [0.0f64, -1.0, -2.0, -3.0].iter().map(|v| v.exp()).sum();
        assert_eq!(band_prefix(&x, 0.5, total), Some(vec![1]));
        assert_eq!(band_prefix(&x, 0.8, total), Some(vec![0, 1]));
        assert_eq!(band_prefix(&x, 0.95, total), Some(vec![0, 1, 3]));
        // A target at a prefix mass exactly: the band splits that token.
        let at = 1.0 + (-1.0f64).exp();
        assert_eq!(band_prefix(&x, (at / total) as f32, at / f64::from((at / total) as f32)), None);
        // The candidates stop short: the window held more mass than they do.
        assert_eq!(band_prefix(&x, 0.99, total * 2.0), None);
        assert_eq!(band_prefix(&[f32::NAN, f32::NEG_INFINITY], 0.9, 1.0), None);
    }
}
