//! Top-p's narrowing of a whole edited row (candidates.rs `select` for a top-p row without
//! top-k) in three passes over the row, without listing its window first: the weights' sum and
//! histogram ([`crate::top_p::Weighed`]'s, over the window's values in id order), the one bucket
//! holding the cut (top_p.rs `locate_in`), then the kept ids. The candidates are those of the
//! window narrowed by top_p.rs `band_prefix_of`, bit for bit; a row whose cut the histogram does
//! not settle gives `None`, and the caller takes that general path. A keyed row without min-p
//! is then drawn where it is (race.rs, the host's race and noise), its winner sent settled.

use crate::candidates::{Candidates, RaceKey, RowQuery, rank_key};
use crate::fast_exp;
use crate::logprobs::rank_value;
use crate::race::RowRace;
use crate::top_p::{BUCKETS, Located, MASS_TOLERANCE, bucket, locate_in};

/// The candidates of edited `row` whose window starts at scaled value `t` and whose largest
/// value is `max` (unscaled, finite once scaled), narrowed to top-p's prefix with the window's
/// mass; `None` where the histogram leaves the cut open.
pub fn narrow_row(row: &[f32], q: &RowQuery, t: f32, max: f32) -> Option<Candidates> {
    let top = rank_value(q.scaled(max));
    // The weights (fast_exp.rs) in id order: their sum (window_mass) and histogram.
    let Weights { count, mass, total, window, buckets } = weigh(row, q.temperature, t, top);
    // The fast sum lies within this of the exact one (each sum's rounding, n 2^-53 of the total
    // at most, and the weights' error); the band of targets must hold the exact target.
    let total_error = 2.0 * window as f64 / (1u64 << 53) as f64 + fast_exp::REL_ERROR;
    if total_error >= MASS_TOLERANCE / 4.0 {
        return None;
    }
    if !total.is_finite() {
        return None;
    }
    let target = f64::from(q.top_p) * total;
    let (lo, hi) = (target * (1.0 - MASS_TOLERANCE), target * (1.0 + MASS_TOLERANCE));
    let region = |b: usize| {
        let b = b as u16;
        (0u32..)
            .zip(&buckets)
            .filter(|&(_, &bi)| bi == b)
            .map(|(id, _)| {
                let v = rank_value(q.scaled(row[id as usize]));
                ((v, id), fast_exp::exp(f64::from(v - top)))
            })
            .collect()
    };
    // Prefix sums of fast weights lie within their error (and 2^-60 of a sum at least 1, for
    // the weights under 2^-1000) of libm's.
    let extra = fast_exp::REL_ERROR + 1.0 / (1u64 << 60) as f64;
    let Some(Located::At((bv, bid), n)) = locate_in(&count, &mass, window, lo, hi, extra, region) else {
        return None;
    };
    // The prefix: every window id ranking at or before the boundary (a larger value, or the
    // same value at a lower id).
    let (bk, bb) = (rank_key(bv), bucket(top, bv) as u16);
    let kept_at = |x: f32, b: u16, id: u32| {
        // Buckets before the boundary's hold larger values; within it the ranks decide.
        b < bb
            || (b == bb && {
                let k = rank_key(rank_value(q.scaled(x)));
                k > bk || (k == bk && id <= bid)
            })
    };
    match q.race.filter(|_| q.min_p <= 0.0) {
        Some(key) => draw(row, q, &buckets, kept_at, n, top, key).map(|id| Candidates {
            ids: vec![id],
            values: vec![row[id as usize]],
            window_mass: Some(total),
            settled: true,
        }),
        None => {
            let (ids, values) = prefix(row, &buckets, kept_at, n)?;
            Some(Candidates { ids, values, window_mass: Some(total), settled: false })
        }
    }
}

/// The ids and values of the `n` entries of `row` that `kept_at(value, bucket, id)` keeps,
/// written whether kept or not with the count moving on only for the kept; `None` unless
/// exactly `n` are.
fn prefix(
    row: &[f32],
    buckets: &[u16],
    kept_at: impl Fn(f32, u16, u32) -> bool,
    n: usize,
) -> Option<(Vec<u32>, Vec<f32>)> {
    let (mut ids, mut values) = (vec![0u32; n + 1], vec![0.0f32; n + 1]);
    let mut kept = 0;
    for ((&x, &b), id) in row.iter().zip(buckets).zip(0u32..) {
        ids[kept] = id;
        values[kept] = x;
        kept += usize::from(kept_at(x, b, id));
        if kept > n {
            return None;
        }
    }
    if kept != n {
        return None;
    }
    ids.truncate(n);
    values.truncate(n);
    Some((ids, values))
}

/// The race's winner (race.rs) over the `n` entries of `row` that `kept_at` keeps, entered run
/// by run in id order without listing them; `None` unless exactly `n` are kept. The race starts
/// from the first entry at the largest scaled value `top` (any kept entry would do).
fn draw(
    row: &[f32],
    q: &RowQuery,
    buckets: &[u16],
    kept_at: impl Fn(f32, u16, u32) -> bool,
    n: usize,
    top: f32,
    key: RaceKey,
) -> Option<u32> {
    let first = row.iter().position(|&x| rank_value(q.scaled(x)) == top)?;
    let mut race = RowRace::new(first as u32, top, key.seed, key.position);
    let (mut xs, mut keep) = ([0.0f32; RowRace::RUN], [false; RowRace::RUN]);
    let mut kept = 0;
    for (start, (run, bs)) in
        (0u32..).step_by(RowRace::RUN).zip(row.chunks(RowRace::RUN).zip(buckets.chunks(RowRace::RUN)))
    {
        let len = run.len();
        for (k, (&x, &b)) in run.iter().zip(bs).enumerate() {
            xs[k] = q.scaled(x);
            keep[k] = kept_at(x, b, start + k as u32);
        }
        kept += keep[..len].iter().filter(|&&k| k).count();
        race.enter_run(start, &xs[..len], &keep[..len]);
    }
    (kept == n).then(|| race.winner())
}

/// A row's window weighed (pass one of [`narrow_row`]).
struct Weights {
    /// Window entries per bucket (top_p.rs `bucket`).
    count: Vec<usize>,
    /// Their weights' sum per bucket, in id order.
    mass: Vec<f64>,
    /// Every weight's sum, over lanes.
    total: f64,
    /// Entries in the window.
    window: usize,
    /// Each row entry's bucket, [`OUTSIDE`] for those outside the window.
    buckets: Vec<u16>,
}

/// The bucket mark of a row entry outside the window.
const OUTSIDE: u16 = u16::MAX;

/// Row values weighed together, in vector lanes.
const CHUNK: usize = 256;
/// Lanes of the weights' sum.
const SUM_LANES: usize = 8;

/// The fast weights `exp(v - top)` (fast_exp.rs) of `row`'s window (scaled values, by
/// `temperature` where there is one, at or above `t`), their histogram and sum.
fn weigh(row: &[f32], temperature: Option<f32>, t: f32, top: f32) -> Weights {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F, the only feature the function is compiled for.
            return unsafe { weigh_avx512(row, temperature, t, top) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA, the features the function is compiled for.
            return unsafe { weigh_avx2(row, temperature, t, top) };
        }
    }
    weigh_lanes(row, temperature, t, top)
}

/// [`weigh_lanes`] compiled for AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn weigh_avx512(row: &[f32], temperature: Option<f32>, t: f32, top: f32) -> Weights {
    weigh_lanes(row, temperature, t, top)
}

/// [`weigh_lanes`] compiled for AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn weigh_avx2(row: &[f32], temperature: Option<f32>, t: f32, top: f32) -> Weights {
    weigh_lanes(row, temperature, t, top)
}

/// [`weigh`]: each chunk's values and weights computed in lanes (-inf and 0 outside the
/// window), then entered into the histogram one by one.
#[inline(always)]
fn weigh_lanes(row: &[f32], temperature: Option<f32>, t: f32, top: f32) -> Weights {
    let (mut count, mut mass) = (vec![0usize; BUCKETS], vec![0.0f64; BUCKETS]);
    let mut sums = [0.0f64; SUM_LANES];
    let mut window = 0;
    let mut buckets = vec![OUTSIDE; row.len()];
    let (mut v, mut w) = ([0.0f32; CHUNK], [0.0f64; CHUNK]);
    for (xs, bs) in row.chunks(CHUNK).zip(buckets.chunks_mut(CHUNK)) {
        for ((x, v), w) in xs.iter().zip(&mut v).zip(&mut w) {
            let s = match temperature {
                Some(temp) => x / temp,
                None => *x,
            };
            let inside = s >= t;
            *v = if inside { s } else { f32::NEG_INFINITY };
            *w = if inside { fast_exp::exp(f64::from(s - top)) } else { 0.0 };
        }
        let n = xs.len();
        for ws in w[..n].chunks(SUM_LANES) {
            for (sum, &wi) in sums.iter_mut().zip(ws) {
                *sum += wi;
            }
        }
        for ((&vi, &wi), bi) in v[..n].iter().zip(&w[..n]).zip(bs) {
            if vi != f32::NEG_INFINITY {
                let b = bucket(top, vi);
                count[b] += 1;
                mass[b] += wi;
                window += 1;
                *bi = b as u16;
            }
        }
    }
    Weights { count, mass, total: sums.iter().sum(), window, buckets }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::{row_max, threshold};
    use crate::rng::{gumbel, uniform};

    fn query(top_p: f32, temperature: Option<f32>, race: Option<RaceKey>) -> RowQuery {
        RowQuery { temperature, window: 40.0, race, top_p, ..RowQuery::greedy(None) }
    }

    #[test]
    fn a_drawn_row_sends_the_winner_of_the_race_over_its_prefix() {
        let (mut drawn, mut compared) = (0, 0);
        for (kind, n) in [(0u64, 40_000usize), (1, 5000), (2, 3000)] {
            // Flat, spread, and tied in eight levels.
            let row: Vec<f32> = (0..n as u32)
                .map(|i| {
                    let u = uniform(kind, 3, i);
                    match kind {
                        0 => 0.3 * u,
                        1 => 12.0 * u,
                        _ => (u * 8.0).floor() * 0.5,
                    }
                })
                .collect();
            for (top_p, temperature) in [(0.95f32, Some(0.8f32)), (0.5, None), (0.99, Some(1.7))] {
                for position in 0..6u64 {
                    let key = RaceKey { seed: 11 + kind, position };
                    let (plain, keyed) = (query(top_p, temperature, None), query(top_p, temperature, Some(key)));
                    let Some(t) = threshold(&row, &plain) else { continue };
                    let max = row_max(&row);
                    let (Some(prefix), Some(won)) =
                        (narrow_row(&row, &plain, t, max), narrow_row(&row, &keyed, t, max))
                    else {
                        continue;
                    };
                    compared += 1;
                    assert!(won.settled && !prefix.settled && won.ids.len() == 1);
                    assert_eq!(won.window_mass, prefix.window_mass);
                    // The brute race over the prefix: every id's noise, ties to the lower id.
                    let score = |id: u32| plain.scaled(row[id as usize]) + gumbel(uniform(key.seed, position, id));
                    let best = prefix.ids.iter().copied().fold(None::<(f32, u32)>, |b, id| match b {
                        Some((s, _)) if score(id) <= s => b,
                        _ => Some((score(id), id)),
                    });
                    assert_eq!(Some(won.ids[0]), best.map(|b| b.1), "kind {kind} top_p {top_p} position {position}");
                    assert_eq!(won.values, vec![row[won.ids[0] as usize]]);
                    drawn += usize::from(prefix.ids.len() > 1000);
                }
            }
        }
        assert!(compared >= 40 && drawn >= 10, "{compared} rows compared, {drawn} with wide prefixes");
    }
}
