//! Log-probabilities of raw logits rows for the API: what a row's log-softmax needs (its
//! log-sum-exp, its most likely ids, raw values at a few more ids), so a device can compute it
//! where the logits are and send a few numbers instead of a whole row. The log-sum-exp is summed
//! in f64 over fixed slices of [`LSE_SLICE`] columns, each shifted by its own maximum, then the
//! slices are combined in order: the same order on every backend and for every batch, so a
//! row's logprobs do not depend on what else is in the round.

use std::cmp::Ordering;

/// Columns of one slice of the log-sum-exp (kernels/logprob.cu `LP_SLICE`).
pub const LSE_SLICE: usize = 2048;

/// A logit as a sort key: NaN ranks below every number.
#[inline]
pub fn rank_value(x: f32) -> f32 {
    if x.is_nan() { f32::NEG_INFINITY } else { x }
}

/// Most likely first; equal logits rank the lower id first.
#[inline]
pub fn by_rank(x: &[f32], a: u32, b: u32) -> Ordering {
    let (xa, xb) = (rank_value(x[a as usize]), rank_value(x[b as usize]));
    xb.total_cmp(&xa).then(a.cmp(&b))
}

/// One row's log-probability request: its index in the round, how many of its most likely ids
/// to report, and the ids whose raw logits are wanted too.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogprobQuery {
    /// Row of the logits.
    pub row: usize,
    /// Most likely ids wanted.
    pub top_n: usize,
    /// Ids whose raw values are wanted (ids past the row read as -inf).
    pub ids: Vec<u32>,
}

/// What one row's log-probabilities need.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowLogprobs {
    /// `ln(sum(exp(x)))` over the row ([`log_sum_exp`]).
    pub lse: f64,
    /// The `top_n` most likely ids (ties: lower id) and their raw logits, most likely first.
    pub top: Vec<(u32, f32)>,
    /// Raw logits at the query's `ids`, in its order.
    pub values: Vec<f32>,
}

impl RowLogprobs {
    /// The log-probability of a raw logit of this row.
    #[inline]
    pub fn logprob(&self, raw: f32) -> f32 {
        (f64::from(raw) - self.lse) as f32
    }

    /// The raw logit of `id` when this answer holds it (among the top ids or the asked ones).
    pub fn raw(&self, id: u32, asked: &[u32]) -> Option<f32> {
        let top = self.top.iter().find(|t| t.0 == id).map(|t| t.1);
        top.or_else(|| asked.iter().position(|&a| a == id).and_then(|i| self.values.get(i).copied()))
    }
}

/// The answer to `q` for its row `row` (the host rule every backend gives).
pub fn row_logprobs(row: &[f32], q: &LogprobQuery) -> RowLogprobs {
    let at = |i: u32| row.get(i as usize).copied().unwrap_or(f32::NEG_INFINITY);
    RowLogprobs {
        lse: log_sum_exp(row),
        top: top_ranked(row, q.top_n).into_iter().map(|i| (i, at(i))).collect(),
        values: q.ids.iter().map(|&i| at(i)).collect(),
    }
}

/// The `n` most likely ids of `row` (ties: lower id), most likely first, in O(len).
pub fn top_ranked(row: &[f32], n: usize) -> Vec<u32> {
    let n = n.min(row.len());
    if n == 0 {
        return Vec::new();
    }
    let mut top: Vec<u32> = (0..row.len() as u32).collect();
    if n < top.len() {
        top.select_nth_unstable_by(n - 1, |&a, &b| by_rank(row, a, b));
        top.truncate(n);
    }
    top.sort_unstable_by(|&a, &b| by_rank(row, a, b));
    top
}

/// `ln(sum(exp(x)))` in f64, NaN left out: the largest value when it is not finite; otherwise
/// per [`LSE_SLICE`] columns their maximum `m` and `sum(exp(x - m))` in column order, combined
/// in slice order as `sum(s * exp(m - max))`.
pub fn log_sum_exp(row: &[f32]) -> f64 {
    let max = row.iter().copied().filter(|x| !x.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return f64::from(max);
    }
    let mut sum = 0.0f64;
    for slice in row.chunks(LSE_SLICE) {
        let (m, s) = slice_sum(slice);
        if m != f32::NEG_INFINITY {
            sum += s * (f64::from(m) - f64::from(max)).exp();
        }
    }
    f64::from(max) + sum.ln()
}

/// A slice's maximum (NaN left out) and `sum(exp(x - m))` in column order (0 when the maximum
/// is -inf).
pub fn slice_sum(slice: &[f32]) -> (f32, f64) {
    let m = slice.iter().copied().filter(|x| !x.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        return (m, 0.0);
    }
    let m64 = f64::from(m);
    (m, slice.iter().filter(|x| !x.is_nan()).map(|&x| (f64::from(x) - m64).exp()).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(row: usize, top_n: usize, ids: &[u32]) -> LogprobQuery {
        LogprobQuery { row, top_n, ids: ids.to_vec() }
    }

    #[test]
    fn matches_softmax_and_ranks_ties_by_id() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let z: f64 = logits.iter().map(|&x| f64::from(x).exp()).sum();
        let want = |i: usize| (f64::from(logits[i]).exp() / z).ln() as f32;
        let r = row_logprobs(&logits, &q(0, 3, &[4, 9]));
        let ids: Vec<u32> = r.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 3, 2]);
        for &(id, v) in &r.top {
            assert!((r.logprob(v) - want(id as usize)).abs() < 1e-6);
        }
        assert_eq!(r.values, [-1.0, f32::NEG_INFINITY]);
        assert_eq!((r.raw(2, &[4, 9]), r.raw(4, &[4, 9]), r.raw(0, &[4, 9])), (Some(2.0), Some(-1.0), None));
        let probs: f64 = logits.iter().map(|&x| f64::from(r.logprob(x)).exp()).sum();
        assert!((probs - 1.0).abs() < 1e-6);
    }

    #[test]
    fn large_logits_do_not_overflow_and_top_n_is_clipped() {
        let logits = [1000.0f32, 1000.0, f32::NEG_INFINITY];
        let r = row_logprobs(&logits, &q(0, 10, &[]));
        assert!((r.logprob(1000.0) - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(r.top.len(), 3);
        assert_eq!(r.top[2], (2, f32::NEG_INFINITY));
        assert_eq!(r.logprob(f32::NEG_INFINITY), f32::NEG_INFINITY);
    }

    #[test]
    fn slices_sum_in_order_and_nan_ranks_last() {
        // Three slices, the middle one all -inf, NaN in the last: the sum skips both.
        let mut row = vec![0.5f32; 3 * LSE_SLICE];
        row[LSE_SLICE..2 * LSE_SLICE].fill(f32::NEG_INFINITY);
        row[2 * LSE_SLICE + 7] = f32::NAN;
        row[2 * LSE_SLICE + 9] = 2.0;
        let (a, b) = (slice_sum(&row[..LSE_SLICE]), slice_sum(&row[2 * LSE_SLICE..]));
        assert_eq!(a, (0.5, LSE_SLICE as f64));
        assert_eq!(slice_sum(&row[LSE_SLICE..2 * LSE_SLICE]), (f32::NEG_INFINITY, 0.0));
        let want = 2.0 + (a.1 * (-1.5f64).exp() + b.1).ln();
        assert_eq!(log_sum_exp(&row), want);
        let exact = (row.iter().filter(|x| !x.is_nan()).map(|&x| f64::from(x).exp()).sum::<f64>()).ln();
        assert!((log_sum_exp(&row) - exact).abs() < 1e-12);
        let all = top_ranked(&row, row.len());
        assert_eq!(all[0], (2 * LSE_SLICE + 9) as u32);
        assert_eq!(all.last(), Some(&((2 * LSE_SLICE + 7) as u32)), "NaN ranks below -inf's lower ids");
    }

    #[test]
    fn rows_without_a_finite_max_give_it_as_the_sum() {
        assert_eq!(log_sum_exp(&[f32::NAN, f32::NEG_INFINITY]), f64::NEG_INFINITY);
        assert_eq!(log_sum_exp(&[1.0, f32::INFINITY]), f64::INFINITY);
        assert_eq!(log_sum_exp(&[]), f64::NEG_INFINITY);
        assert!(row_logprobs(&[0.0, -0.0], &q(0, 2, &[])).top == [(0, 0.0), (1, -0.0)], "+0 ranks above -0");
    }
}
