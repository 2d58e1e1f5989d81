//! Log-probabilities for the API: the chosen token's and the top-n alternatives'.

use super::filter::by_rank;

/// The log-softmax of a chosen id and the `top_n` most likely ids.
#[derive(Clone, Debug, PartialEq)]
pub struct Logprobs {
    /// Log-probability of the chosen id.
    pub chosen: f32,
    /// The most likely ids with their log-probabilities, most likely first (ties: lower id).
    pub top: Vec<(u32, f32)>,
}

/// Log-softmax of `logits` at `chosen` and at the `top_n` most likely ids, in O(vocab).
pub fn logprobs(logits: &[f32], chosen: u32, top_n: usize) -> Logprobs {
    let lse = log_sum_exp(logits);
    let logprob = |i: u32| logits.get(i as usize).map_or(f32::NEG_INFINITY, |&x| (f64::from(x) - lse) as f32);
    let top_n = top_n.min(logits.len());
    let mut top: Vec<u32> = Vec::new();
    if top_n > 0 {
        top = (0..logits.len() as u32).collect();
        if top_n < top.len() {
            top.select_nth_unstable_by(top_n - 1, |&a, &b| by_rank(logits, a, b));
            top.truncate(top_n);
        }
        top.sort_unstable_by(|&a, &b| by_rank(logits, a, b));
    }
    Logprobs { chosen: logprob(chosen), top: top.into_iter().map(|i| (i, logprob(i))).collect() }
}

/// `ln(sum(exp(x)))` in f64, shifted by the max so it neither overflows nor underflows.
pub fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().filter(|x| !x.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return f64::from(max);
    }
    let max = f64::from(max);
    let sum: f64 = logits.iter().map(|&x| (f64::from(x) - max).exp()).filter(|w| !w.is_nan()).sum();
    max + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_softmax() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let z: f64 = logits.iter().map(|&x| f64::from(x).exp()).sum();
        let want = |i: usize| (f64::from(logits[i]).exp() / z).ln() as f32;
        let lp = logprobs(&logits, 2, 3);
        assert!((lp.chosen - want(2)).abs() < 1e-6);
        let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 3, 2]);
        for (id, v) in lp.top {
            assert!((v - want(id as usize)).abs() < 1e-6);
        }
        let probs: f64 = (0..5).map(|i| f64::from(logprobs(&logits, i, 0).chosen).exp()).sum();
        assert!((probs - 1.0).abs() < 1e-6);
    }

    #[test]
    fn large_logits_do_not_overflow_and_top_n_is_clipped() {
        let logits = [1000.0f32, 1000.0, f32::NEG_INFINITY];
        let lp = logprobs(&logits, 0, 10);
        assert!((lp.chosen - (0.5f32).ln()).abs() < 1e-6);
        assert_eq!(lp.top.len(), 3);
        assert_eq!(lp.top[2], (2, f32::NEG_INFINITY));
    }
}
