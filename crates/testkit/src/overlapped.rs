//! Overlapped equals waited: rounds queued on the ids of the round before them, still on the
//! backend (greedy) or handed back to it (sampled: the engine's overlap), give the tokens of
//! rounds that wait for the host: alone and together, greedy and seeded sampling with penalties
//! side by side, when requests end at different lengths or stop on a stop id while the next round
//! is already queued, with the prefix cache, and in a pool tight enough to preempt.

use crate::{Output, Req, config, engine, ramp, run_events_stopping, sampling};
use std::sync::atomic::Ordering;
use tf_backend::Backend;
use tf_engine::engine::{EngineConfig, EngineHandle};

/// Nine greedy requests and six seeded sampled ones, without logprobs (the rounds the engine
/// overlaps): 5 to 53 prompt ids, 3 to 19 tokens; the sampled ones with top-k or top-p, and
/// repetition, frequency and presence penalties or a `min_tokens` (which read the history the
/// token in flight joins).
fn requests() -> Vec<Req> {
    let greedy = (0..9).map(|i| Req {
        prompt: ramp(5 + i * 6, i),
        params: sampling(None, 1.0, 0, 1.0),
        max_tokens: 3 + i * 5 % 17,
        top_logprobs: None,
        draft: false,
    });
    let sampled = (0..6).map(|i| {
        let mut params = sampling(Some(40 + i as u64), 0.9, if i % 2 == 0 { 20 } else { 0 }, 0.9);
        match i % 3 {
            0 => params.repetition_penalty = 1.3,
            1 => (params.frequency_penalty, params.presence_penalty) = (0.7, 0.4),
            _ => params.min_tokens = 4,
        }
        Req { prompt: ramp(7 + i * 9, 20 + i), params, max_tokens: 5 + i * 3, top_logprobs: None, draft: false }
    });
    greedy.chain(sampled).collect()
}

fn outputs(h: &EngineHandle, reqs: &[Req], stops: &[Vec<i64>], together: bool) -> Vec<Output> {
    let ids = |events: Vec<tf_engine::engine::TokenEvent>| events.iter().map(|t| (t.id, u32::MAX)).collect();
    if together {
        return run_events_stopping(h, reqs, stops).into_iter().map(ids).collect();
    }
    reqs.iter()
        .zip(stops)
        .map(|(r, s)| ids(run_events_stopping(h, std::slice::from_ref(r), std::slice::from_ref(s)).remove(0)))
        .collect()
}

/// The requests' tokens with overlap on equal those of an engine that waits for each round's ids,
/// alone and together, roomy and tight (preempting), with stop ids met mid-way.
pub fn check_overlapped_equals_waited<B: Backend + 'static>(new_backend: &dyn Fn() -> B, family: &str) {
    let reqs = requests();
    let waited = engine(new_backend, family, EngineConfig { overlap: false, ..config(256, 256, 512, true) });
    let none = vec![Vec::new(); reqs.len()];
    let plain = outputs(&waited, &reqs, &none, false);
    // Every third request stops on a token it would make part-way (its first occurrence ends it).
    let stops: Vec<Vec<i64>> = plain
        .iter()
        .enumerate()
        .map(|(i, out)| if i % 3 == 1 { vec![out[out.len() / 2].0 as i64] } else { Vec::new() })
        .collect();
    let want = outputs(&waited, &reqs, &stops, false);
    for (i, (w, p)) in want.iter().zip(&plain).enumerate() {
        if i % 3 == 1 {
            assert!(w.len() <= p.len() / 2 + 1, "{family}: request {i} stopped on its stop id");
        }
    }
    assert_eq!(waited.stats.overlapped_rounds.load(Ordering::Relaxed), 0, "{family}: overlap off");
    for (name, cfg) in [("roomy", config(256, 256, 512, true)), ("tight", config(12, 256, 5, true))] {
        let over = engine(new_backend, family, cfg);
        for together in [false, true] {
            let got = outputs(&over, &reqs, &stops, together);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                crate::concurrent::assert_same(g, w, &format!("{family} {name} together={together}: request {i}"));
            }
        }
        let n = over.stats.overlapped_rounds.load(Ordering::Relaxed);
        assert!(n > 0, "{family} {name}: rounds were overlapped ({n})");
    }
    // Rounds of sampled rows alone are overlapped too.
    let over = engine(new_backend, family, config(256, 256, 512, true));
    let sampled: Vec<Req> = reqs.iter().filter(|r| r.params.seed != 0).cloned().collect();
    let _ = outputs(&over, &sampled, &vec![Vec::new(); sampled.len()], true);
    let n = over.stats.overlapped_rounds.load(Ordering::Relaxed);
    assert!(n > 0, "{family}: sampled rounds were overlapped ({n})");
}
