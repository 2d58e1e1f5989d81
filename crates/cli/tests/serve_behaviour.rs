//! The real server over plain HTTP: response shapes of every route, 32 concurrent streaming
//! clients equal to their solo runs (greedy and seeded), client disconnects freeing KV blocks
//! (SECURITY-CASES.md section 10), 429 when the queue is full, profiles, SIGTERM -> exit 0.

mod serve_util;

use serde_json::{Value, json};
use serve_util::{Server, model_dir};
use std::io::{Read, Write};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// A completions request streamed over one connection; returns its SSE events.
fn stream(s: &Server, body: &Value) -> Vec<Value> {
    let r = s.post("/v1/completions", body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    r.events()
}

/// `(token id, logprob)` of every token in a stream, and the text.
fn tokens_of(events: &[Value]) -> (Vec<(String, String)>, String) {
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let mut tokens = Vec::new();
    let mut text = String::new();
    for e in &events[..events.len() - 1] {
        let c = &e["choices"][0];
        text.push_str(c["text"].as_str().unwrap_or_default());
        let lp = &c["logprobs"];
        for (t, l) in
            lp["tokens"].as_array().into_iter().flatten().zip(lp["token_logprobs"].as_array().into_iter().flatten())
        {
            tokens.push((t.to_string(), l.to_string()));
        }
    }
    (tokens, text)
}

fn prompt(i: usize) -> Vec<u32> {
    (0..(3 + i * 7 % 40)).map(|j| ((i * 131 + j * 17) % 470 + 6) as u32).collect()
}

fn request(i: usize, seeded: bool) -> Value {
    let mut r = json!({"model": "tiny", "prompt": prompt(i), "max_tokens": 8 + i % 13, "stream": true,
                       "logprobs": 2, "return_tokens_as_token_ids": true, "ignore_eos": true});
    if seeded {
        r["temperature"] = json!(0.9);
        r["top_p"] = json!(0.95);
        r["seed"] = json!(1000 + i);
    } else {
        r["temperature"] = json!(0);
    }
    r
}

#[test]
fn thirty_two_concurrent_streams_equal_their_solo_runs() {
    let s = Arc::new(Server::start(&["--max-num-seqs", "64"]));
    for seeded in [false, true] {
        let solo: Vec<_> = (0..32).map(|i| tokens_of(&stream(&s, &request(i, seeded)))).collect();
        let (rounds0, tokens0) = (s.metric("tensorfold_rounds_total"), s.metric("tensorfold_generation_tokens_total"));
        let barrier = Arc::new(Barrier::new(32));
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let (s, barrier) = (s.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    tokens_of(&stream(&s, &request(i, seeded)))
                })
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            let together = h.join().unwrap();
            assert_eq!(together.0.len(), 8 + i % 13, "request {i}");
            assert_eq!(together, solo[i], "seeded={seeded}: request {i} among 31 others differs from its solo run");
        }
        let rounds = s.metric("tensorfold_rounds_total") - rounds0;
        let tokens = s.metric("tensorfold_generation_tokens_total") - tokens0;
        assert!(rounds < tokens / 2.0, "requests were not batched: {rounds} rounds for {tokens} tokens");
    }
}

#[test]
fn clients_that_disconnect_mid_stream_are_cancelled_and_free_their_blocks() {
    let s = Server::start(&["--device", "ref", "--max-num-seqs", "16"]);
    let before = s.metric("tensorfold_generation_tokens_total");
    let (num_clients, max_tokens) = (8, 200);
    let mut conns = Vec::new();
    for i in 0..num_clients {
        let body = json!({"model": "tiny", "prompt": &prompt(i)[..3], "max_tokens": max_tokens, "stream": true,
                          "ignore_eos": true, "temperature": 0.7, "seed": i});
        let body = body.to_string();
        let mut c = s.connect();
        c.write_all(&serve_util::head(
            &s.addr,
            "POST",
            "/v1/completions",
            &[("Content-Type", "application/json")],
            body.len(),
        ))
        .unwrap();
        c.write_all(body.as_bytes()).unwrap();
        conns.push(c);
    }
    for c in &mut conns {
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        while seen.windows(5).filter(|w| w == b"data:").count() < 2 {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "stream ended early");
            seen.extend_from_slice(&buf[..n]);
        }
    }
    assert!(s.metric("tensorfold_kv_blocks_used") > 0.0, "sequences hold blocks while streaming");
    drop(conns);
    assert_eq!(s.wait_metric("tensorfold_kv_blocks_used", 0.0), 0.0, "blocks came back");
    assert_eq!(s.wait_metric("tensorfold_running", 0.0), 0.0);
    assert_eq!(s.wait_metric("tensorfold_in_flight", 0.0), 0.0);
    let generated = s.metric("tensorfold_generation_tokens_total") - before;
    let full = (num_clients * max_tokens) as f64;
    assert!(generated < full / 2.0, "disconnected sequences ran on: {generated} of {full} tokens");
    assert_eq!(s.normal().len(), 6);

    // Non-streaming requests whose clients go away are cancelled too.
    let before = s.metric("tensorfold_generation_tokens_total");
    let started = s.metric("tensorfold_requests_total");
    let conns: Vec<_> = (0..num_clients)
        .map(|i| {
            let body = json!({"prompt": &prompt(i)[..3], "max_tokens": max_tokens, "ignore_eos": true}).to_string();
            let mut c = s.connect();
            c.write_all(&serve_util::head(
                &s.addr,
                "POST",
                "/v1/completions",
                &[("Content-Type", "application/json")],
                body.len(),
            ))
            .unwrap();
            c.write_all(body.as_bytes()).unwrap();
            c
        })
        .collect();
    let t = Instant::now();
    while s.metric("tensorfold_requests_total") < started + num_clients as f64 && t.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(conns);
    assert_eq!(s.wait_metric("tensorfold_kv_blocks_used", 0.0), 0.0, "blocks came back");
    assert_eq!(s.wait_metric("tensorfold_in_flight", 0.0), 0.0);
    let generated = s.metric("tensorfold_generation_tokens_total") - before;
    assert!(generated < full / 2.0, "abandoned requests ran on: {generated} of {full} tokens");
}

#[test]
fn full_queue_gets_429_and_the_server_recovers() {
    let s = Server::start(&["--max-num-seqs", "1", "--max-queue", "0"]);
    // More sequences than the engine ever runs is the request's fault (400), not a wait.
    let body = json!({"model": "tiny", "prompt": "hi", "n": 2, "max_tokens": 2});
    s.post("/v1/completions", &body).assert_error(400, Some("n"));
    let s = Arc::new(s);
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                let body = json!({"prompt": [5, 6, 7], "max_tokens": 200, "ignore_eos": true, "stream": true});
                s.post("/v1/completions", &body).status
            })
        })
        .collect();
    for h in handles {
        let status = h.join().unwrap();
        assert!(status == 200 || status == 429, "{status}");
    }
    assert!(s.metric("tensorfold_rejected_queue_full_total") >= 1.0);
    assert_eq!(s.normal().len(), 6);
}

#[test]
fn sigterm_cancels_in_flight_work_and_exits_zero() {
    let mut s = Server::start(&["--device", "ref"]);
    let body = json!({"prompt": [5, 6, 7], "max_tokens": 240, "ignore_eos": true, "stream": true}).to_string();
    let mut c = s.connect();
    c.write_all(&serve_util::head(
        &s.addr,
        "POST",
        "/v1/completions",
        &[("Content-Type", "application/json")],
        body.len(),
    ))
    .unwrap();
    c.write_all(body.as_bytes()).unwrap();
    let mut first = [0u8; 64];
    assert!(c.read(&mut first).unwrap() > 0);
    let pid = s.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let t = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(15), "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    let all = String::from_utf8_lossy(&rest);
    assert!(all.contains("data: [DONE]"), "the stream ended cleanly: {all}");
}

#[test]
fn profile_sets_switches_and_the_command_line_wins() {
    let dir = model_dir();
    let profile = dir.path().join("serve.toml");
    std::fs::write(&profile, "served-model-name = \"from-profile\"\nmax-n = 2\nmax_stop_strings = 1\n").unwrap();
    let s = Server::start_in(dir, &["--profile", profile.to_str().unwrap(), "--max-n", "3"]);
    // The fixed `--served-model-name tiny` of the helper comes before, so the profile's loses too.
    assert_eq!(s.get("/v1/models").json()["data"][0]["id"], "tiny");
    let ok = s.post("/v1/completions", &json!({"prompt": "a", "n": 3, "max_tokens": 1, "stop": ["x"]}));
    assert_eq!(ok.status, 200, "{}", ok.text());
    let r = s.post("/v1/completions", &json!({"prompt": "a", "n": 4, "max_tokens": 1}));
    r.assert_error(400, Some("n"));
    let r = s.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 1, "stop": ["x", "y"]}));
    r.assert_error(400, Some("stop"));
}

#[test]
fn routes_answer_in_openai_shapes() {
    let s = Server::start(&[]);
    let models = s.get("/v1/models").json();
    assert_eq!(models["data"][0]["id"], "tiny");
    assert_eq!(models["data"][0]["max_model_len"], 256);
    assert_eq!(s.get("/health").status, 200);
    let t = s.post("/tokenize", &json!({"prompt": "hello world"})).json();
    let ids = t["tokens"].clone();
    assert_eq!(t["count"], ids.as_array().unwrap().len());
    assert_eq!(s.post("/detokenize", &json!({ "tokens": ids })).json()["prompt"], "hello world");
    let chat_ids = s.post("/tokenize", &json!({"messages": [{"role": "user", "content": "hi"}]})).json();
    let text = s.post("/detokenize", &json!({"tokens": chat_ids["tokens"]})).json();
    assert_eq!(text["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

    let c = s
        .post("/v1/completions", &json!({"prompt": ["ab", "cd"], "n": 2, "max_tokens": 3, "echo": true, "seed": 1}))
        .json();
    let choices = c["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    assert!(choices[0]["text"].as_str().unwrap().starts_with("ab"));
    assert!(choices[3]["text"].as_str().unwrap().starts_with("cd"));
    assert_ne!(choices[0]["text"], choices[1]["text"], "n > 1 samples differ");
    assert_eq!(c["object"], "text_completion");
    assert_eq!(
        c["usage"]["total_tokens"],
        c["usage"]["prompt_tokens"].as_u64().unwrap() + c["usage"]["completion_tokens"].as_u64().unwrap()
    );

    let events = stream(
        &s,
        &json!({"prompt": "ab", "max_tokens": 4, "stream": true, "ignore_eos": true,
                                    "stream_options": {"include_usage": true}}),
    );
    assert_eq!(events[events.len() - 2]["usage"]["completion_tokens"], 4);
    assert_eq!(events[events.len() - 3]["choices"][0]["finish_reason"], "length");

    let chat = s
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_completion_tokens": 3, "logprobs": true, "top_logprobs": 2}),
        )
        .json();
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["choices"][0]["message"]["role"], "assistant");
    let content = &chat["choices"][0]["logprobs"]["content"];
    assert_eq!(content[0]["top_logprobs"].as_array().map(Vec::len), Some(2), "{chat}");
    let metrics = s.get("/metrics").text();
    for series in
        ["tensorfold_time_to_first_token_seconds_count", "tensorfold_kv_blocks_total 256", "tensorfold_queue_depth"]
    {
        assert!(metrics.contains(series), "{series}");
    }
    assert!(s.metric("tensorfold_time_to_first_token_seconds_count") >= 6.0);
}

#[test]
fn stop_strings_end_the_text_before_the_stop_and_cancel_the_sequence() {
    let s = Server::start(&[]);
    let base = json!({"prompt": [10, 20, 30], "max_tokens": 40, "temperature": 0, "ignore_eos": true});
    let full = s.post("/v1/completions", &base).json()["choices"][0]["text"].as_str().unwrap().to_string();
    let chars: Vec<char> = full.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let cut = &full[..full.find(&stop).unwrap()];
    for streamed in [false, true] {
        let mut req = base.clone();
        req["stop"] = json!([stop.clone()]);
        req["stream"] = json!(streamed);
        let text = if streamed {
            tokens_of(&stream(&s, &req)).1
        } else {
            let r = s.post("/v1/completions", &req).json();
            assert_eq!(r["choices"][0]["finish_reason"], "stop");
            assert!(r["usage"]["completion_tokens"].as_u64().unwrap() < 40);
            r["choices"][0]["text"].as_str().unwrap().to_string()
        };
        assert_eq!(text, cut, "stop {stop:?} in {full:?}");
    }
    assert_eq!(s.wait_metric("tensorfold_kv_blocks_used", 0.0), 0.0);
}
