//! `--no-prefix-cache` over HTTP: two prompts sharing three blocks hit the cache by default and
//! never with the switch, and the second prompt's tokens are the same either way.

mod serve_util;

use serde_json::{Value, json};
use serve_util::Server;

const HITS: &str = "tensorfold_prefix_cache_hit_tokens_total";

/// The second of two completions over a shared 48-token prefix (greedy, logprobs), and the hits.
fn shared_prefix_run(extra: &[&str]) -> (Value, f64) {
    let s = Server::start(extra);
    let prefix: Vec<i64> = (0..48).map(|i| (i * 17 % 470) as i64).collect();
    let mut out = Value::Null;
    for tail in [[1, 2, 3], [4, 5, 6]] {
        let prompt: Vec<i64> = prefix.iter().copied().chain(tail).collect();
        let body = json!({"model": "tiny", "prompt": prompt, "max_tokens": 6, "temperature": 0,
            "logprobs": 1, "ignore_eos": true});
        let r = s.post("/v1/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        out = r.json()["choices"][0]["logprobs"].clone();
    }
    (out, s.metric(HITS))
}

#[test]
fn no_prefix_cache_switch_turns_the_cache_off() {
    let (cached, hits) = shared_prefix_run(&[]);
    assert!(hits >= 48.0, "the default serves the shared prefix from the cache ({hits} hit tokens)");
    let (uncached, hits) = shared_prefix_run(&["--no-prefix-cache"]);
    assert_eq!(hits, 0.0, "--no-prefix-cache leaves no hits");
    assert_eq!(cached, uncached);
    let (_, hits) = shared_prefix_run(&["--no-prefix-cache", "--prefix-cache", "true"]);
    assert!(hits >= 48.0, "the later switch wins");
}
