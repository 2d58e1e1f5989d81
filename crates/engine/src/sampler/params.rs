//! Sampling parameters and their ranges (OpenAI's where it sets one, vLLM's otherwise).

use thiserror::Error;

/// How one request turns logits into a token; the default is greedy.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 turns it off.
    pub top_k: u32,
    /// Keep the smallest set of most likely tokens whose mass reaches `top_p`; 1 turns it off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one; 0 turns it off.
    pub min_p: f32,
    /// HF / vLLM repetition penalty over prompt and generated ids; 1 turns it off.
    pub repetition_penalty: f32,
    /// OpenAI presence penalty over generated ids.
    pub presence_penalty: f32,
    /// OpenAI frequency penalty over generated ids.
    pub frequency_penalty: f32,
    /// Added to the logits of the given ids (ids already checked by the boundary).
    pub logit_bias: Vec<(u32, f32)>,
    /// Seed of the counter-based RNG; with the position it fixes every draw.
    pub seed: u64,
    /// Tokens generated before `suppress` may be drawn (vLLM's `min_tokens`); 0 turns it off.
    pub min_tokens: usize,
    /// Ids that cannot be drawn before `min_tokens` tokens (EOS unless ignored, and the stop
    /// ids; checked by the boundary): their logits are -inf until then.
    pub suppress: Vec<u32>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
            min_tokens: 0,
            suppress: Vec::new(),
        }
    }
}

/// A sampling parameter outside its range.
#[derive(Clone, Debug, Error, PartialEq)]
#[error("{field} = {value} is out of range: expected {expected}")]
pub struct ParamError {
    /// The field, as named in the request.
    pub field: &'static str,
    /// The value received.
    pub value: String,
    /// The accepted range.
    pub expected: &'static str,
}

impl SamplingParams {
    /// Refuses out-of-range values (NaN and infinities included), naming the field.
    pub fn validate(&self) -> Result<(), ParamError> {
        check("temperature", self.temperature, (0.0..=100.0).contains(&self.temperature), "0 <= x <= 100")?;
        check("top_p", self.top_p, self.top_p > 0.0 && self.top_p <= 1.0, "0 < x <= 1")?;
        check("min_p", self.min_p, (0.0..=1.0).contains(&self.min_p), "0 <= x <= 1")?;
        let r = self.repetition_penalty;
        check("repetition_penalty", r, r > 0.0 && r.is_finite(), "finite x > 0")?;
        let (p, f) = (self.presence_penalty, self.frequency_penalty);
        check("presence_penalty", p, (-2.0..=2.0).contains(&p), "-2 <= x <= 2")?;
        check("frequency_penalty", f, (-2.0..=2.0).contains(&f), "-2 <= x <= 2")?;
        for &(id, bias) in &self.logit_bias {
            if !(-100.0..=100.0).contains(&bias) {
                return Err(ParamError {
                    field: "logit_bias",
                    value: format!("{bias} for token {id}"),
                    expected: "-100 <= x <= 100",
                });
            }
        }
        Ok(())
    }

    /// Whether this request samples greedily (vLLM treats temperatures below 1e-5 as 0).
    pub fn is_greedy(&self) -> bool {
        self.temperature < GREEDY_BELOW
    }

    /// Whether the token is the argmax of the raw logits: greedy with no bias or penalty to
    /// apply first (a backend may then pick it where the logits are).
    pub fn is_plain_greedy(&self) -> bool {
        self.is_greedy() && self.logit_bias.is_empty() && !self.is_penalised()
    }

    /// The ids to suppress for the token after `generated` generated ones (none once
    /// `min_tokens` are out).
    pub fn suppressed(&self, generated: usize) -> &[u32] {
        if generated < self.min_tokens { &self.suppress } else { &[] }
    }

    /// Whether a penalty reads the sequence's history.
    pub fn is_penalised(&self) -> bool {
        self.repetition_penalty != 1.0 || self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
    }
}

/// Temperatures below this are greedy: dividing by them would overflow the logits.
pub const GREEDY_BELOW: f32 = 1e-5;

fn check(field: &'static str, value: f32, ok: bool, expected: &'static str) -> Result<(), ParamError> {
    // Range checks written as `contains` or `>` are false for NaN, so NaN is refused too.
    if ok { Ok(()) } else { Err(ParamError { field, value: value.to_string(), expected }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_greedy_and_valid() {
        let p = SamplingParams::default();
        assert!(p.is_greedy());
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn edges_of_ranges_are_accepted() {
        let p = SamplingParams {
            temperature: 100.0,
            top_k: u32::MAX,
            top_p: f32::MIN_POSITIVE,
            min_p: 1.0,
            repetition_penalty: 10.0,
            presence_penalty: -2.0,
            frequency_penalty: 2.0,
            logit_bias: vec![(0, -100.0), (1, 100.0)],
            seed: u64::MAX,
            min_tokens: usize::MAX,
            suppress: vec![0, 1],
        };
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn out_of_range_values_are_refused_by_name() {
        type Setter = fn(&mut SamplingParams, f32);
        let cases: [(&str, Setter, &[f32]); 7] = [
            ("temperature", |p, x| p.temperature = x, &[-0.1, 100.5, f32::NAN, f32::INFINITY]),
            ("top_p", |p, x| p.top_p = x, &[0.0, -1.0, 1.01, f32::NAN]),
            ("min_p", |p, x| p.min_p = x, &[-0.01, 1.5, f32::NAN]),
            ("repetition_penalty", |p, x| p.repetition_penalty = x, &[0.0, -1.0, f32::INFINITY, f32::NAN]),
            ("presence_penalty", |p, x| p.presence_penalty = x, &[-2.01, 2.5, f32::NAN]),
            ("frequency_penalty", |p, x| p.frequency_penalty = x, &[-3.0, 2.01, f32::NEG_INFINITY]),
            ("logit_bias", |p, x| p.logit_bias = vec![(3, 1.0), (7, x)], &[100.5, -101.0, f32::NAN]),
        ];
        for (field, set, bad) in cases {
            for &x in bad {
                let mut p = SamplingParams::default();
                set(&mut p, x);
                let err = p.validate().unwrap_err();
                assert_eq!(err.field, field, "{x}");
                assert!(err.to_string().starts_with(field), "{err}");
            }
        }
    }
}
