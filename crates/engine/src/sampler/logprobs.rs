//! Log-probabilities for the API: the chosen token's and the top-n alternatives', made from what
//! the backend computed where the logits are (tf_backend::logprobs), so a row's numbers are the
//! same whichever way its token was sampled and whatever else shared the round.

use tf_backend::RowLogprobs;

/// The log-softmax of a chosen id and the most likely ids.
#[derive(Clone, Debug, PartialEq)]
pub struct Logprobs {
    /// Log-probability of the chosen id.
    pub chosen: f32,
    /// The most likely ids with their log-probabilities, most likely first (ties: lower id).
    pub top: Vec<(u32, f32)>,
}

impl Logprobs {
    /// The logprobs of a row whose chosen id has raw logit `chosen_raw`.
    pub fn of(r: &RowLogprobs, chosen_raw: f32) -> Logprobs {
        Logprobs { chosen: r.logprob(chosen_raw), top: r.top.iter().map(|&(id, x)| (id, r.logprob(x))).collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::LogprobQuery;
    use tf_backend::logprobs::row_logprobs;

    #[test]
    fn matches_softmax() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let z: f64 = logits.iter().map(|&x| f64::from(x).exp()).sum();
        let want = |i: usize| (f64::from(logits[i]).exp() / z).ln() as f32;
        let lp = Logprobs::of(&row_logprobs(&logits, &LogprobQuery { row: 0, top_n: 3, ids: Vec::new() }), logits[4]);
        assert!((lp.chosen - want(4)).abs() < 1e-6);
        let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 3, 2]);
        for (id, v) in lp.top {
            assert!((v - want(id as usize)).abs() < 1e-6);
        }
    }
}
