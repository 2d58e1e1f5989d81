//! The prefix cache over HTTP: two prompts sharing three blocks hit the cache by default and
//! never with `--no-prefix-cache`, the second prompt's tokens are the same either way, and usage
//! reports the prompt tokens the cache served (`prompt_tokens_details.cached_tokens`, the
//! Responses API's `input_tokens_details.cached_tokens`).

mod serve_util;

use serde_json::{Value, json};
use serve_util::Server;

const HITS: &str = "tensorfold_prefix_cache_hit_tokens_total";

/// The second of two completions over a shared 48-token prefix (greedy, logprobs), the hits, and
/// each completion's cached prompt tokens as usage reports them.
fn shared_prefix_run(extra: &[&str]) -> (Value, f64, Vec<Value>) {
    let s = Server::start(extra);
    let prefix: Vec<i64> = (0..48).map(|i| (i * 17 % 470) as i64).collect();
    let mut out = Value::Null;
    let mut cached = Vec::new();
    for tail in [[1, 2, 3], [4, 5, 6]] {
        let prompt: Vec<i64> = prefix.iter().copied().chain(tail).collect();
        let body = json!({"model": "tiny", "prompt": prompt, "max_tokens": 6, "temperature": 0,
            "logprobs": 1, "ignore_eos": true});
        let r = s.post("/v1/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        out = r.json()["choices"][0]["logprobs"].clone();
        cached.push(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"].clone());
    }
    (out, s.metric(HITS), cached)
}

#[test]
fn no_prefix_cache_switch_turns_the_cache_off() {
    let (cached, hits, usage) = shared_prefix_run(&[]);
    assert!(hits >= 48.0, "the default serves the shared prefix from the cache ({hits} hit tokens)");
    assert_eq!(usage, [json!(0), json!(48)], "usage counts the three shared blocks the second prompt reused");
    let (uncached, hits, usage) = shared_prefix_run(&["--no-prefix-cache"]);
    assert_eq!(hits, 0.0, "--no-prefix-cache leaves no hits");
    assert_eq!(usage, [json!(0), json!(0)]);
    assert_eq!(cached, uncached);
    let (_, hits, _) = shared_prefix_run(&["--no-prefix-cache", "--prefix-cache", "true"]);
    assert!(hits >= 48.0, "the later switch wins");
}

/// Chat and the Responses API report the cached part of a repeated prompt; with `n`, each prompt
/// counts once, as its prompt tokens do.
#[test]
fn usage_reports_cached_prompt_tokens_on_every_route() {
    let s = Server::start(&[]);
    let content = "the same long question, asked twice so that the second asking hits the cache ".repeat(3);
    let chat = json!({"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": 2, "n": 2});
    let first = s.post("/v1/chat/completions", &chat).json()["usage"].clone();
    let second = s.post("/v1/chat/completions", &chat).json()["usage"].clone();
    let (prompt, cached) =
        (second["prompt_tokens"].as_u64().unwrap(), &second["prompt_tokens_details"]["cached_tokens"]);
    assert!(prompt >= 48, "{second}");
    let cached = cached.as_u64().unwrap();
    assert!(cached > 0 && cached % 16 == 0 && cached < prompt, "whole blocks, the last token computed: {second}");
    assert_eq!(first["prompt_tokens"], second["prompt_tokens"], "n = 2 counts the prompt once: {first}");
    let responses = json!({"model": "tiny", "input": content, "max_output_tokens": 2});
    let r = s.post("/v1/responses", &responses);
    assert_eq!(r.status, 200, "{}", r.text());
    let usage = r.json()["usage"].clone();
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], cached, "{usage}");
}
