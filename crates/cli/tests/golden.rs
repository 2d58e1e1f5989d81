//! Golden tests: every family's logits and greedy continuations against Hugging Face
//! transformers (float32), on the committed tiny fixtures, for the reference and fast CPU
//! backends; plus chunked prefill == whole prefill, bit for bit; and LongRoPE's long factors
//! past the pretrained context.

use tf_backend::{Backend, RefBackend};
use tf_cpu::CpuBackend;
use tf_engine::Runner;
use tf_models::Model;
use tf_testkit::{all_families, check_chunked_equals_whole, check_golden, config, engine, fixture, run, ten_tokens};

/// Largest |ours - transformers| allowed on a logit. The fixtures' logits are O(1); a wrong
/// norm, rope base, scale or window moves them by 0.2 or more; f32 rounding by up to ~2e-5.
const TOL: f32 = 1e-4;

#[test]
fn golden_reference_backend() {
    for family in all_families() {
        check_golden(&RefBackend, family, &|_| TOL);
    }
}

#[test]
fn golden_cpu_backend() {
    let b = CpuBackend::new(2).unwrap();
    for family in all_families() {
        check_golden(&b, family, &|_| TOL);
    }
}

#[test]
fn chunked_prefill_equals_whole_bit_for_bit() {
    check_chunked_equals_whole(&CpuBackend::new(2).unwrap(), all_families());
}

/// The phi3_longrope fixture's 300-id prompt (past its pretrained context of 256) against
/// transformers, which takes the long factors there: with an engine's context past 256
/// (`Model::fit_context`) the last rows agree; with the short factors the model loaded with
/// (what every shorter golden prompt takes) they do not, and the fingerprint tells the two
/// apart.
fn check_long_prompt<B: Backend>(b: &B) {
    let dir = fixture("phi3_longrope");
    let (ids, want) = long_prompt();
    let worst = |m: &Model<B>| {
        let ids = m.vocab.check(&ids).unwrap();
        let logits = Runner::new(m, b, ids.len()).unwrap().prefill(&ids, 512, true);
        let got = &logits[logits.len() - want.len()..];
        got.iter().zip(&want).map(|(a, w)| (a - w).abs()).fold(0f32, f32::max)
    };
    let mut m = Model::open(&dir, b).unwrap();
    let short_fingerprint = m.fingerprint;
    let short = worst(&m);
    assert!(!m.fit_context(256), "a context of 256 keeps the short factors");
    assert!(m.fit_context(300));
    assert_ne!(m.fingerprint, short_fingerprint, "state saved with the short factors is refused");
    let long = worst(&m);
    assert!(long <= TOL, "long factors: {long}");
    assert!(short > 100.0 * TOL, "the short factors give other logits here: {short}");
}

/// The phi3_longrope fixture's long prompt and transformers' last rows of logits for it.
fn long_prompt() -> (Vec<i64>, Vec<f32>) {
    let text = std::fs::read_to_string(fixture("phi3_longrope").join("golden.json")).unwrap();
    let golden: serde_json::Value = serde_json::from_str(&text).unwrap();
    let long = &golden["long_prompt"];
    let ids = long["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let rows = (long["last_rows"].as_array().unwrap().iter())
        .flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32))
        .collect();
    (ids, rows)
}

#[test]
fn an_engine_serving_past_the_pretrained_context_takes_the_long_factors() {
    // The fixture's context is 512: an engine puts the long factors in place, so its greedy
    // pick after the long prompt is transformers' argmax of the last row, with its log-softmax.
    let (ids, want) = long_prompt();
    let last = &want[want.len() - 512..];
    let argmax = (0..last.len()).max_by(|&a, &b| last[a].total_cmp(&last[b])).unwrap();
    let sum: f64 = last.iter().map(|&v| f64::from(v - last[argmax]).exp()).sum();
    let logprob = -sum.ln() as f32;
    let h = engine(&|| CpuBackend::new(2).unwrap(), "phi3_longrope", config(32, 512, 512, false));
    let mut req = ten_tokens(ids, None);
    req.max_tokens = 1;
    req.params = Default::default();
    let (id, got) = run(&h, &[req])[0][0];
    assert_eq!(id, argmax as u32);
    assert!((f32::from_bits(got) - logprob).abs() <= 1e-4, "logprob {} against {logprob}", f32::from_bits(got));
}

#[test]
fn longrope_long_factors_past_the_pretrained_context() {
    check_long_prompt(&RefBackend);
    check_long_prompt(&CpuBackend::new(2).unwrap());
}
