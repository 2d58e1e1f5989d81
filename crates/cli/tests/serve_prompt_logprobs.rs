//! Prompt logprobs on `/v1/completions`: `echo` with `logprobs` (OpenAI's legacy shape) and vLLM's
//! `prompt_logprobs`, checked against the log-softmax of `tensorfold logits` at every position,
//! and equal on a cold server, a warm one (the prompt in the prefix cache) and a chunked prefill.

mod serve_util;

use serde_json::{Value, json};
use serve_util::{Server, model_dir};
use std::process::Command;
use tf_formats::SafetensorsFile;

/// A prompt of three blocks and a bit (the prefix cache holds whole blocks of 16).
fn prompt() -> Vec<u32> {
    (0..53).map(|i| 10 + (i * 37) % 480).collect()
}

/// The log-softmax of `tensorfold logits` at every position of `ids`, in f64.
fn reference(ids: &[u32]) -> Vec<Vec<f64>> {
    let dir = model_dir();
    let out = dir.path().join("logits.safetensors");
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    let status = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["logits", "--model", dir.path().to_str().unwrap(), "--ids", &list.join(",")])
        .args(["--out", out.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    let f = SafetensorsFile::open(&out).unwrap();
    let t = f.tensor("logits").unwrap().unwrap().to_f32();
    let width = t.len() / ids.len();
    t.chunks(width)
        .map(|row| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
            row.iter().map(|&x| x as f64 - lse).collect()
        })
        .collect()
}

fn echo_request(ids: &[u32], max_tokens: usize) -> Value {
    json!({"model": "tiny", "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "echo": true,
           "logprobs": 2, "prompt_logprobs": 3, "return_tokens_as_token_ids": true, "ignore_eos": true})
}

#[test]
fn prompt_logprobs_match_the_logits_and_do_not_depend_on_the_cache_or_the_chunks() {
    let ids = prompt();
    let want = reference(&ids);
    let s = Server::start(&[]);
    let cold = s.post("/v1/completions", &echo_request(&ids, 2));
    assert_eq!(cold.status, 200, "{}", cold.text());
    let cold = cold.json();
    let c = &cold["choices"][0];
    let lp = &c["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), ids.len() + 2, "{lp}");
    assert_eq!(lp["token_logprobs"][0], Value::Null);
    assert_eq!(lp["top_logprobs"][0], Value::Null);
    assert_eq!(lp["text_offset"][0], 0);
    let pl = c["prompt_logprobs"].as_array().unwrap();
    assert_eq!(pl.len(), ids.len());
    assert_eq!(pl[0], Value::Null);
    for p in 1..ids.len() {
        assert_eq!(tokens[p], format!("token_id:{}", ids[p]));
        let row = &want[p - 1];
        let got = lp["token_logprobs"][p].as_f64().unwrap();
        assert!((got - row[ids[p] as usize]).abs() < 1e-4, "position {p}: {got} vs {}", row[ids[p] as usize]);
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let mut top: Vec<String> = lp["top_logprobs"][p].as_object().unwrap().keys().cloned().collect();
        top.sort();
        let mut want_top: Vec<String> = order[..2].iter().map(|i| format!("token_id:{i}")).collect();
        want_top.sort();
        assert_eq!(top, want_top, "position {p}");
        let entry = &pl[p][ids[p].to_string()];
        let rank = order.iter().position(|&i| i == ids[p] as usize).unwrap() + 1;
        assert_eq!(entry["rank"], rank, "position {p}: {entry}");
        assert_eq!(entry["decoded_token"], format!("token_id:{}", ids[p]));
        assert!(pl[p].as_object().unwrap().len() >= 3);
        for (r, i) in order[..3].iter().enumerate() {
            assert_eq!(pl[p][i.to_string()]["rank"], r + 1, "position {p}");
        }
    }
    // Warm: the prompt's blocks are in the prefix cache, and a plain request is served from it.
    let plain = json!({"model": "tiny", "prompt": ids, "max_tokens": 2, "temperature": 0});
    assert_eq!(s.post("/v1/completions", &plain).status, 200);
    let hits = s.metric("tensorfold_prefix_cache_hit_tokens_total");
    assert_eq!(s.post("/v1/completions", &plain).status, 200);
    assert!(s.metric("tensorfold_prefix_cache_hit_tokens_total") > hits, "the prompt is cached");
    let warm = s.post("/v1/completions", &echo_request(&ids, 2)).json();
    assert_eq!(warm["choices"], cold["choices"], "warm differs from cold");
    let chunked = Server::start(&["--prefill-chunk", "8", "--max-round-tokens", "8"]);
    let r = chunked.post("/v1/completions", &echo_request(&ids, 2)).json();
    assert_eq!(r["choices"], cold["choices"], "a chunked prefill differs from a whole one");
}

#[test]
fn max_tokens_zero_scores_the_prompt_only_and_bad_asks_are_refused() {
    let s = Server::start(&["--max-logprobs", "5"]);
    let r = s.post("/v1/completions", &json!({"prompt": "hello world", "max_tokens": 0, "echo": true, "logprobs": 1}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = r.json();
    assert_eq!(r["choices"][0]["text"], "hello world");
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    assert_eq!(r["usage"]["completion_tokens"], 0);
    let n = r["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert_eq!(r["choices"][0]["logprobs"]["tokens"].as_array().unwrap().len(), n, "{r}");
    let bad = [
        (json!({"prompt": "hi", "max_tokens": 0}), "max_tokens"),
        (json!({"prompt": "hi", "max_tokens": 0, "echo": true}), "max_tokens"),
        (json!({"prompt": "hi", "prompt_logprobs": 6}), "prompt_logprobs"),
        (json!({"prompt": "hi", "prompt_logprobs": -1}), "prompt_logprobs"),
        (json!({"prompt": "hi", "prompt_logprobs": 1, "stream": true}), "prompt_logprobs"),
        (json!({"prompt": "hi", "echo": true, "logprobs": 1, "stream": true}), "echo"),
    ];
    for (body, field) in bad {
        s.post("/v1/completions", &body).assert_error(400, Some(field));
    }
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "prompt_logprobs": 0});
    let r = s.post("/v1/chat/completions", &chat);
    assert_eq!(r.status, 200, "{}", r.text());
    let pl = r.json()["prompt_logprobs"].as_array().unwrap().clone();
    assert_eq!(pl.len(), r.json()["usage"]["prompt_tokens"].as_u64().unwrap() as usize);
}
