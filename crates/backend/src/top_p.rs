//! Top-p's cut over a row's candidates when a backend sent only the top of the row's window (the
//! ids a top-p draw can reach) with its own sum of the window's weights. The host's rule sums
//! exp(x - max) over the whole window in id order; a device's sum (its own exponential, its own
//! order) lies within [`MASS_TOLERANCE`] of it, so the cut is settled when the prefix mass steps
//! over the whole band of targets at one token: then it is the host's cut, bit for bit.
//!
//! The cut itself ([`cut`]) is the first prefix, most likely first, whose mass summed in that
//! order reaches a target. It is found without sorting the pool: the pass that makes the
//! weights ([`Weighed`]) also sums them into a histogram over the distance below the maximum
//! ([`BUCKETS`] buckets of [`BUCKET_WIDTH`]), which locates the bucket where the mass crosses;
//! only that bucket is sorted and summed one weight at a time. Sums taken in another order lie
//! within [`slack`] of the rank-order sum (both are sums of the same non-negative terms), so a
//! crossing that clears the target by more than that is the rank-order sum's crossing; one
//! within it (about one row in ten thousand on flat rows) is settled by sorting the pool as it
//! grows ([`cut_sorted`]), which sums in rank order.

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
/// Buckets of the histogram that locates the cut; the last also holds everything further down.
pub(crate) const BUCKETS: usize = 4096;
/// Distance below the maximum that one bucket spans: 1/128, so the buckets cover 32 (a cut
/// further down, where weights are under e^-32, sorts the last bucket).
const BUCKET_WIDTH: f32 = 1.0 / 128.0;

/// Where the prefix mass of a pool, summed in rank order, first reaches a target known to lie in
/// `[lo, hi]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// At this many of the most likely (the pool's first this many): settled for every target.
    At(usize),
    /// The prefix mass reached `lo` short of `hi` at one token: the band splits it.
    Open,
    /// The whole pool stays under `lo` (rounding, or candidates short of the cut).
    Short,
}

/// A pool's weights (`(rank_value, position)` pairs, `max` their largest value): exp(v - max)
/// in f64, the filter's own, their sum in pool order, and their histogram by distance below the
/// maximum.
pub struct Weighed {
    /// The weights, in pool order.
    pub w: Vec<f64>,
    /// Their sum, one addition at a time in pool order (what `w.iter().sum()` gives).
    pub total: f64,
    /// The pool's largest value.
    max: f32,
    /// Entries per bucket.
    count: Vec<usize>,
    /// Weights per bucket, each summed in pool order.
    mass: Vec<f64>,
}

/// Bucket of value `v` of a pool whose largest is `max`: never smaller for a smaller value, as
/// every step rounds monotonically (-inf goes to the last).
#[inline]
pub(crate) fn bucket(max: f32, v: f32) -> usize {
    (((max - v) * (1.0 / BUCKET_WIDTH)) as usize).min(BUCKETS - 1)
}

impl Weighed {
    /// The weights of `pool`, whose largest value is `max`, made in one pass.
    pub fn new(pool: &[(f32, u32)], max: f32) -> Weighed {
        let (mut count, mut mass) = (vec![0usize; BUCKETS], vec![0.0f64; BUCKETS]);
        let mut w = Vec::with_capacity(pool.len());
        let mut total = 0.0f64;
        for p in pool {
            let wi = f64::from(p.0 - max).exp();
            let b = bucket(max, p.0);
            count[b] += 1;
            mass[b] += wi;
            total += wi;
            w.push(wi);
        }
        Weighed { w, total, max, count, mass }
    }
}

/// The top-p cut of `pool` (`(rank_value, position)` pairs) weighed by `weighed`. On
/// [`Cut::At`]`(n)` the pool's first `n` are the cut's (in their earlier order where the
/// histogram found it), and the pool is reordered; `weighed` then no longer lines up with it.
pub fn cut(pool: &mut [(f32, u32)], weighed: &Weighed, lo: f64, hi: f64) -> Cut {
    let max = weighed.max;
    match locate(pool, weighed, lo, hi) {
        Some(Located::At(boundary, n)) => {
            // The prefix is every entry ranking at or before the boundary entry (by_ranked on
            // total-order keys: a larger value, or the same value at a lower position).
            let (bk, bp) = (crate::candidates::rank_key(boundary.0), boundary.1);
            let mut kept = 0;
            for i in 0..pool.len() {
                let p = pool[i];
                let k = crate::candidates::rank_key(p.0);
                if k > bk || (k == bk && p.1 <= bp) {
                    pool[i] = pool[kept];
                    pool[kept] = p;
                    kept += 1;
                }
            }
            if kept == n { Cut::At(n) } else { cut_sorted(pool, max, lo, hi) }
        }
        Some(Located::Open) => Cut::Open,
        Some(Located::Short) => Cut::Short,
        None => cut_sorted(pool, max, lo, hi),
    }
}

/// [`cut`] by sorting a growing most-likely part of the pool (`max` its largest value),
/// summing in rank order as it goes; on [`Cut::At`]`(n)` the pool's first `n` are in rank order.
pub fn cut_sorted(pool: &mut [(f32, u32)], max: f32, lo: f64, hi: f64) -> Cut {
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

/// The cut as [`locate`] finds it.
pub(crate) enum Located {
    /// At the entry given, the `n`-th most likely.
    At((f32, u32), usize),
    /// As [`Cut::Open`].
    Open,
    /// As [`Cut::Short`].
    Short,
}

/// How far, relative to itself, a sum of `n` non-negative weights in any order of additions
/// may lie from the same weights summed in rank order: each lies within (n - 1) 2^-53 of the
/// exact sum (Higham, Accuracy and Stability of Numerical Algorithms, 4.2), so twice that and
/// the rounding of the comparisons are within (n + 2) 2^-50, with the bucket sums' additions
/// counted in `n`.
fn slack(n: usize) -> f64 {
    (n + 2) as f64 / (1u64 << 50) as f64
}

/// The cut of [`cut`] from the histogram of `weighed` and a sort of the one bucket holding it
/// (module docs); `None` when a sum lies within [`slack`] of `lo` or `hi`, or the cut leaves
/// that bucket.
fn locate(pool: &[(f32, u32)], weighed: &Weighed, lo: f64, hi: f64) -> Option<Located> {
    let Weighed { w, max, count, mass, .. } = weighed;
    locate_in(count, mass, pool.len(), lo, hi, 0.0, |b| {
        pool.iter().zip(w).filter(|(p, _)| bucket(*max, p.0) == b).map(|(&p, &wi)| (p, wi)).collect()
    })
}

/// [`locate`] over a histogram (`count`, `mass` by bucket) of `n` entries, `region(b)` listing
/// bucket `b`'s entries with their weights, whose sums may lie a further `extra` (relative)
/// from the exact weights' (fast_exp.rs).
pub(crate) fn locate_in(
    count: &[usize],
    mass: &[f64],
    n: usize,
    lo: f64,
    hi: f64,
    extra: f64,
    region: impl FnOnce(usize) -> Vec<((f32, u32), f64)>,
) -> Option<Located> {
    let slack = slack(n + BUCKETS) + extra;
    // Skip the buckets whose end stays under `lo` by more than the slack.
    let (mut above, mut first, mut b) = (0.0f64, 0usize, 0usize);
    while b < BUCKETS {
        let end = above + mass[b];
        if end + end * slack >= lo {
            break;
        }
        (above, first, b) = (end, first + count[b], b + 1);
    }
    if b == BUCKETS {
        return Some(Located::Short);
    }
    let mut region = region(b);
    region.sort_unstable_by(|x, y| by_ranked(&x.0, &y.0));
    let mut sum = above;
    for (k, &(p, wi)) in region.iter().enumerate() {
        sum += wi;
        let e = sum * slack;
        if sum + e < lo {
            continue;
        }
        if sum - e < lo {
            return None;
        }
        return if sum - e >= hi {
            Some(Located::At(p, first + k + 1))
        } else if sum + e < hi {
            Some(Located::Open)
        } else {
            None
        };
    }
    None
}

/// Positions (increasing) of the top-p prefix of candidates `x` (scaled values, in id order, the
/// top of a window whose weights sum to about `window_mass`): the shortest prefix by rank whose
/// mass, summed in rank order, reaches `top_p` times the sum for every sum within the tolerance;
/// `None` when no prefix does (the band splits a token, or the candidates stop short of it).
pub fn band_prefix(x: &[f32], top_p: f32, window_mass: f64) -> Option<Vec<u32>> {
    let pool: Vec<(f32, u32)> = x.iter().zip(0..).map(|(&v, i)| (rank_value(v), i)).collect();
    let max = pool.iter().map(|p| p.0).fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return None;
    }
    let weighed = Weighed::new(&pool, max);
    band_prefix_of(pool, &weighed, top_p, window_mass)
}

/// [`band_prefix`] of a pool made from `x` (`(rank_value, position)` pairs with a finite
/// largest value) weighed by `weighed`.
pub fn band_prefix_of(mut pool: Vec<(f32, u32)>, weighed: &Weighed, top_p: f32, window_mass: f64) -> Option<Vec<u32>> {
    if !window_mass.is_finite() {
        return None;
    }
    let target = f64::from(top_p) * window_mass;
    match cut(&mut pool, weighed, target * (1.0 - MASS_TOLERANCE), target * (1.0 + MASS_TOLERANCE)) {
        Cut::At(n) => {
            // In increasing order already unless the sort settled the cut.
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

    /// `n` pool entries of shape `kind` (flat, spread, tied, with -inf) from Philox uniforms.
    fn pool(kind: u32, n: u32) -> Vec<(f32, u32)> {
        let u = |i: u32| crate::rng::uniform(u64::from(kind), 9, i);
        let v = |i: u32| match kind {
            0 => 0.3 * u(i),
            1 => 30.0 * u(i) - 30.0,
            2 => (u(i) * 6.0).floor() * 0.5,
            _ if i % 11 == 4 => f32::NEG_INFINITY,
            _ => u(i) - 1.0,
        };
        (0..n).map(|i| (v(i), i)).collect()
    }

    /// The cut's set (positions, increasing) or its outcome.
    fn outcome(pool: &[(f32, u32)], got: Cut) -> (Cut, Vec<u32>) {
        let mut kept: Vec<u32> = match got {
            Cut::At(n) => pool[..n].iter().map(|p| p.1).collect(),
            Cut::Open | Cut::Short => Vec::new(),
        };
        kept.sort_unstable();
        (got, kept)
    }

    #[test]
    fn the_histogram_cut_equals_the_sorted_cut_and_leaves_few_rows_to_the_sort() {
        let (mut located, mut tries) = (0, 0);
        for kind in 0..4 {
            let base = pool(kind, 30_000);
            let max = base.iter().map(|p| p.0).fold(f32::NEG_INFINITY, f32::max);
            let weighed = Weighed::new(&base, max);
            let total = weighed.total;
            assert_eq!(total.to_bits(), weighed.w.iter().sum::<f64>().to_bits(), "the pass sums as sum() does");
            for top_p in [1e-6, 0.01, 0.3, 0.5, 0.9, 0.95, 0.999, 1.0, 1.5] {
                let target = top_p * total;
                for (lo, hi) in [(target, target), (target * (1.0 - MASS_TOLERANCE), target * (1.0 + MASS_TOLERANCE))] {
                    let (mut a, mut b) = (base.clone(), base.clone());
                    let got = cut(&mut a, &weighed, lo, hi);
                    let want = cut_sorted(&mut b, max, lo, hi);
                    assert_eq!(outcome(&a, got), outcome(&b, want), "kind {kind} top_p {top_p}");
                    located += usize::from(locate(&base, &weighed, lo, hi).is_some());
                    tries += 1;
                }
            }
        }
        assert!(located * 10 >= tries * 8, "{located} of {tries} found by the histogram");
    }

    #[test]
    fn a_target_on_a_rank_order_prefix_mass_goes_to_the_sort() {
        let base = pool(0, 5000);
        let max = base.iter().map(|p| p.0).fold(f32::NEG_INFINITY, f32::max);
        let weighed = Weighed::new(&base, max);
        let mut ranked = base.clone();
        ranked.sort_by(by_ranked);
        let mut prefix = Vec::new();
        let mut mass = 0.0f64;
        for p in &ranked {
            mass += f64::from(p.0 - max).exp();
            prefix.push(mass);
        }
        for at in [0, 3, 256, 1023, 2048, 4998] {
            for step in [-1i64, 0, 1] {
                let lo = f64::from_bits(prefix[at].to_bits().wrapping_add_signed(step));
                assert!(locate(&base, &weighed, lo, lo).is_none(), "prefix {at} step {step} is within the slack");
                let (mut a, mut b) = (base.clone(), base.clone());
                let got = cut(&mut a, &weighed, lo, lo);
                let want = cut_sorted(&mut b, max, lo, lo);
                assert_eq!(got, Cut::At(at + usize::from(step > 0) + 1));
                assert_eq!(outcome(&a, got), outcome(&b, want), "prefix {at} step {step}");
            }
        }
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
