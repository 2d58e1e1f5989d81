//! Logprobs are the raw rows': a token's logprob and its alternatives come from the model's
//! logits before logit bias, penalties and temperature, however its token was sampled (greedy
//! or seeded, from the backend's candidates after their edits), alone or batched.
//!
//! The reference asks for the first token's 20 alternatives. Then requests over the same
//! prompt push one of those alternatives up with a large logit bias (and penalise the prompt's
//! ids, that one among them when it is in the prompt), so it is sampled: its logprob and the
//! alternatives must be the reference's, bit for bit.

use crate::{Req, config, engine, run_events, sampling};
use tf_backend::Backend;
use tf_engine::engine::TokenEvent;

/// Alternatives the reference asks for.
const TOP: usize = 20;

/// Biased, penalised, greedy and seeded requests report the raw rows' logprobs.
pub fn check_logprobs_are_the_raw_rows<B: Backend + 'static>(new_backend: &dyn Fn() -> B, family: &str) {
    let h = engine(new_backend, family, config(256, 256, 512, false));
    let prompt: Vec<i64> = (0..150).map(|j| (j * 37 + 5) % 400).collect();
    let reference = Req {
        prompt: prompt.clone(),
        params: sampling(None, 1.0, 0, 1.0),
        max_tokens: 1,
        top_logprobs: Some(TOP),
        draft: false,
    };
    let want = first(&run_events(&h, std::slice::from_ref(&reference)));
    assert_eq!(want.top.len(), TOP, "{family}: the reference's alternatives");
    // An alternative below the top, in the prompt when one is (so penalised too), pushed up.
    let in_prompt = |id: u32| prompt.contains(&i64::from(id));
    let pick = want.top[1..].iter().find(|t| in_prompt(t.0)).unwrap_or(&want.top[5]);
    let (pushed, pushed_lp) = *pick;
    let biased = |seed: Option<u64>, top: usize| {
        let mut params = sampling(seed, 0.7, 0, 0.9);
        params.logit_bias = vec![(pushed, 60.0)];
        (params.repetition_penalty, params.frequency_penalty) = (1.3, 0.4);
        Req { prompt: prompt.clone(), params, max_tokens: 1, top_logprobs: Some(top), draft: false }
    };
    let reqs = [biased(None, 3), biased(Some(7), 0), biased(Some(8), TOP), reference.clone()];
    let alone: Vec<TokenEvent> = reqs.iter().map(|r| first(&run_events(&h, std::slice::from_ref(r)))).collect();
    let together: Vec<TokenEvent> = run_events(&h, &reqs).iter().map(|o| first(std::slice::from_ref(o))).collect();
    for (what, got) in [("alone", &alone), ("together", &together)] {
        for (i, t) in got.iter().take(3).enumerate() {
            let ctx = format!("{family} {what}: request {i}");
            assert_eq!(t.id, pushed, "{ctx}: the bias wins");
            assert_eq!(t.logprob.map(f32::to_bits), Some(pushed_lp.to_bits()), "{ctx}: the pushed id's raw logprob");
            let n = reqs[i].top_logprobs.unwrap_or(0);
            assert_eq!(bits(&t.top), bits(&want.top[..n]), "{ctx}: the raw alternatives");
        }
        assert_eq!(bits(&got[3].top), bits(&want.top), "{family} {what}: the reference");
    }
}

/// The first token of the first output.
fn first(outs: &[Vec<TokenEvent>]) -> TokenEvent {
    outs.first().and_then(|o| o.first()).cloned().expect("one token at least")
}

/// Alternatives with their logprobs as bits.
fn bits(top: &[(u32, f32)]) -> Vec<(u32, u32)> {
    top.iter().map(|&(id, lp)| (id, lp.to_bits())).collect()
}
