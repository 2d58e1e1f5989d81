//! Top-p's narrowing of a whole edited row (candidates.rs `select` for a top-p row without
//! top-k) in three passes over the row, without listing its window first: the weights' sum and
//! histogram ([`crate::top_p::Weighed`]'s, over the window's values in id order), the one bucket
//! holding the cut (top_p.rs `locate_in`), then the kept ids. The candidates are those of the
//! window narrowed by top_p.rs `band_prefix_of`, bit for bit; a row whose cut the histogram does
//! not settle gives `None`, and the caller takes that general path.

use crate::candidates::{Candidates, RowQuery, rank_key};
use crate::logprobs::rank_value;
use crate::top_p::{BUCKETS, Located, MASS_TOLERANCE, bucket, locate_in};

/// The candidates of edited `row` whose window starts at scaled value `t` and whose largest
/// value is `max` (unscaled, finite once scaled), narrowed to top-p's prefix with the window's
/// mass; `None` where the histogram leaves the cut open.
pub fn narrow_row(row: &[f32], q: &RowQuery, t: f32, max: f32) -> Option<Candidates> {
    let top = rank_value(q.scaled(max));
    let in_window = |x: f32| {
        let s = q.scaled(x);
        (s >= t).then(|| rank_value(s))
    };
    // The weights in id order: their sum (window_mass) and histogram.
    let (mut count, mut mass) = (vec![0usize; BUCKETS], vec![0.0f64; BUCKETS]);
    let (mut total, mut window) = (0.0f64, 0usize);
    for &x in row {
        if let Some(v) = in_window(x) {
            let w = f64::from(v - top).exp();
            let b = bucket(top, v);
            count[b] += 1;
            mass[b] += w;
            total += w;
            window += 1;
        }
    }
    if !total.is_finite() {
        return None;
    }
    let target = f64::from(q.top_p) * total;
    let (lo, hi) = (target * (1.0 - MASS_TOLERANCE), target * (1.0 + MASS_TOLERANCE));
    let region = |b: usize| {
        row.iter()
            .zip(0u32..)
            .filter_map(|(&x, id)| in_window(x).filter(|&v| bucket(top, v) == b).map(|v| (v, id)))
            .map(|(v, id)| ((v, id), f64::from(v - top).exp()))
            .collect()
    };
    let Some(Located::At((bv, bid), n)) = locate_in(&count, &mass, window, lo, hi, region) else { return None };
    // The prefix: every window id ranking at or before the boundary (a larger value, or the
    // same value at a lower id), written whether kept or not with the count moving on only for
    // the kept.
    let bk = rank_key(bv);
    let (mut ids, mut values) = (vec![0u32; n + 1], vec![0.0f32; n + 1]);
    let mut kept = 0;
    for (&x, id) in row.iter().zip(0u32..) {
        let keep = in_window(x).is_some_and(|v| {
            let k = rank_key(v);
            k > bk || (k == bk && id <= bid)
        });
        ids[kept] = id;
        values[kept] = x;
        kept += usize::from(keep);
        if kept > n {
            return None;
        }
    }
    if kept != n {
        return None;
    }
    ids.truncate(n);
    values.truncate(n);
    Some(Candidates { ids, values, window_mass: Some(total), settled: false })
}
