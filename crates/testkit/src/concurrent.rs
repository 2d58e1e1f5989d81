//! Concurrent equals solo: a request's tokens and logprobs do not depend on what else is batched,
//! how its prompt is chunked, whether the prefix cache served part of it, or preemption.
//!
//! The reference is each request alone on an engine with whole prefills and no prefix cache. The
//! same requests must match it in groups on that engine; alone and in groups on an engine with
//! the prefix cache (warmed by the same prompts, so it must serve hits) and 7-token chunks; and
//! all at once in a 12-block pool with 5-token chunks, which must preempt.

use crate::{Output, Req, config, engine, mixed_request, run, run_each};
use std::sync::atomic::Ordering;
use tf_backend::Backend;
use tf_engine::engine::{EngineConfig, EngineHandle};

/// Groups of the 17 mixed requests run together: 2, 5 and all 17.
const GROUPS: [&[usize]; 3] = [&[0, 1], &[2, 3, 4, 5, 6], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]];

/// 17 mixed requests equal their solo outputs bit for bit: grouped, cached, chunked, preempted.
pub fn check_concurrent_equals_solo<B: Backend + 'static>(new_backend: &dyn Fn() -> B, family: &str, seeded: bool) {
    check_concurrent_equals_solo_on(&|cfg| engine(new_backend, family, cfg), family, seeded);
}

/// [`check_concurrent_equals_solo`] on the engines `open` starts for `family` (a
/// tensor-parallel group's, say).
pub fn check_concurrent_equals_solo_on(open: &dyn Fn(EngineConfig) -> EngineHandle, family: &str, seeded: bool) {
    let reqs: Vec<Req> = (0..17).map(|i| mixed_request(i, seeded)).collect();
    let plain = open(config(256, 256, 512, false));
    let solo = run_each(&plain, &reqs);
    let cached = open(config(256, 256, 7, true));
    assert_eq!(run_each(&cached, &reqs), solo, "{family} seeded={seeded}: solo, chunked and cached");
    for (name, h) in [("no prefix cache", &plain), ("prefix cache", &cached)] {
        for group in GROUPS {
            let batch: Vec<Req> = group.iter().map(|&i| reqs[i].clone()).collect();
            let together = run(h, &batch);
            for (out, &i) in together.iter().zip(group) {
                assert_same(out, &solo[i], &format!("{family} seeded={seeded} {name}: request {i} of {group:?}"));
            }
        }
    }
    // Unseeded, the requests without logprobs ran alone as plain greedy rounds: the backend
    // picked their tokens, and the mixed groups (candidates, logprobs from the backend) matched.
    let on_device = plain.stats.device_sampled_rows.load(Ordering::Relaxed);
    assert_eq!(on_device > 0, !seeded, "{family} seeded={seeded}: rows picked on the backend ({on_device})");
    // Every other round sampled from candidates the backend selected.
    let from_candidates = plain.stats.candidate_rows.load(Ordering::Relaxed);
    assert!(from_candidates > 0, "{family} seeded={seeded}: rows from candidates ({from_candidates})");
    let hits = cached.stats.prefix_hit_tokens.load(Ordering::Relaxed);
    assert!(hits > 0, "{family}: the prefix cache served the repeated prompts");
    let tight = open(config(12, 256, 5, true));
    let together = run(&tight, &reqs);
    for (i, out) in together.iter().enumerate() {
        assert_same(out, &solo[i], &format!("{family} seeded={seeded}: request {i} under preemption"));
    }
    let preempted = tight.stats.preemptions.load(Ordering::Relaxed);
    assert!(preempted > 0, "{family}: the 12-block pool preempted ({preempted})");
}

/// Asserts two outputs equal bit for bit, naming the first differing token.
pub(crate) fn assert_same(got: &Output, want: &Output, what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
        panic!("{what}: differs at token {at} (lengths {} and {})\n got {got:?}\nwant {want:?}", got.len(), want.len());
    }
}
