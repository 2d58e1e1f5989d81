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

/// How many of the most likely candidates are sorted first; the sorted part grows by
/// [`GROWTH`] until it holds the cut, so a peaked row sorts few.
const FIRST: usize = 256;
/// Factor by which the sorted part grows.
const GROWTH: usize = 4;

/// Where the prefix mass of a pool, summed in rank order, first reaches a target known to lie in
/// `[lo, hi]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// At this many of the most likely (the pool is sorted that far): settled for every target.
    At(usize),
    /// The prefix mass reached `lo` short of `hi` at one token: the band splits it.
    Open,
    /// The whole pool stays under `lo` (rounding, or candidates short of the cut).
    Short,
}

/// The top-p cut of `pool` (`(rank_value, position)` pairs, `max` its largest value; weights
/// exp(v - max) in f64, the filter's own). Sorts a growing most-likely part as it goes.
pub fn cut(pool: &mut [(f32, u32)], max: f32, lo: f64, hi: f64) -> Cut {
    // pool[..sorted] is in rank order and ranks above everything after it.
    let (mut sorted, mut mass) = (0, 0.0);
    let mut window = FIRST.min(pool.len());
    loop {
        let rest = &mut pool[sorted..];
        let take = window - sorted;
        if take < rest.len() {
            rest.select_nth_unstable_by(take - 1, by_ranked);
        }
        rest[..take].sort_unstable_by(by_ranked);
        for (n, p) in pool.iter().enumerate().take(window).skip(sorted) {
            mass += f64::from(p.0 - max).exp();
            if mass >= lo {
                return if mass >= hi { Cut::At(n + 1) } else { Cut::Open };
            }
        }
        if window == pool.len() {
            return Cut::Short;
        }
        sorted = window;
        window = (window * GROWTH).min(pool.len());
    }
}

/// Positions (increasing) of the top-p prefix of candidates `x` (scaled values, in id order, the
/// top of a window whose weights sum to about `window_mass`): the shortest prefix by rank whose
/// mass, summed in rank order, reaches `top_p` times the sum for every sum within the tolerance;
/// `None` when no prefix does (the band splits a token, or the candidates stop short of it).
pub fn band_prefix(x: &[f32], top_p: f32, window_mass: f64) -> Option<Vec<u32>> {
    let mut pool: Vec<(f32, u32)> = x.iter().zip(0..).map(|(&v, i)| (rank_value(v), i)).collect();
    let max = pool.iter().map(|p| p.0).fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() || !window_mass.is_finite() {
        return None;
    }
    let target = f64::from(top_p) * window_mass;
    match cut(&mut pool, max, target * (1.0 - MASS_TOLERANCE), target * (1.0 + MASS_TOLERANCE)) {
        Cut::At(n) => {
            let mut kept: Vec<u32> = pool[..n].iter().map(|p| p.1).collect();
            kept.sort_unstable();
            Some(kept)
        }
        Cut::Open | Cut::Short => None,
    }
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

    #[test]
    fn a_long_prefix_grows_its_sorted_part_and_keeps_ties_by_position() {
        // 3000 values in 300 tied groups: the cut lies past the first sorted part.
        let x: Vec<f32> = (0..3000).map(|i| -((i * 7919 % 3000) / 10) as f32 * 0.01).collect();
        let max = 0.0f32;
        let total: f64 = x.iter().map(|&v| f64::from(v - max).exp()).sum();
        let got = band_prefix(&x, 0.7, total).unwrap_or_default();
        let mut ranked: Vec<(f32, u32)> = x.iter().zip(0..).map(|(&v, i)| (v, i)).collect();
        ranked.sort_by(by_ranked);
        let (mut mass, mut n) = (0.0, 0);
        while mass < 0.7f64 * total {
            mass += f64::from(ranked[n].0 - max).exp();
            n += 1;
        }
        let mut want: Vec<u32> = ranked[..n].iter().map(|p| p.1).collect();
        want.sort_unstable();
        assert!(n > FIRST && got == want, "{} against {n}", got.len());
    }
}
