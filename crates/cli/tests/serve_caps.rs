//! Requests that would cost the server far more than their size, each refused quickly with 400
//! naming the field while `/health` keeps answering within a second: stop strings past
//! `--max-stop-bytes`, text prompts too long in bytes to fit the context (refused before they
//! are tokenized), chat templates that loop or grow without end (fuel and a byte cap), and
//! unknown keys inside `stream_options` or a session-save body, or `prompt` with
//! `prompt_token_ids`.

mod serve_util;

use serde_json::{Value, json};
use serve_util::{Resp, Server, model_dir};
use std::time::{Duration, Instant};

/// `body` sent to `path` from `clients` threads at once while `/health` is asked for every
/// 200 ms; each answer, how long the slowest took, and the slowest `/health`.
fn attack(s: &Server, path: &str, body: &Value, clients: usize) -> (Vec<Resp>, Duration, Duration) {
    let t = Instant::now();
    let (resps, health) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients).map(|_| scope.spawn(|| s.post(path, body))).collect();
        let mut slowest = Duration::ZERO;
        while !workers.iter().all(|w| w.is_finished()) && t.elapsed() < Duration::from_secs(60) {
            let h = Instant::now();
            assert_eq!(s.get("/health").status, 200);
            slowest = slowest.max(h.elapsed());
            std::thread::sleep(Duration::from_millis(200));
        }
        (workers.into_iter().map(|w| w.join().unwrap()).collect::<Vec<_>>(), slowest)
    });
    (resps, t.elapsed(), health)
}

/// The server's peak resident memory so far, in MiB (`VmHWM`).
fn peak_rss_mib(s: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).unwrap() / 1024
}

/// Asserts every answer is 400 naming `param` with `needle` in its message.
fn all_refused(resps: &[Resp], param: &str, needle: &str) {
    for r in resps {
        r.assert_error(400, Some(param));
        let msg = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(msg.contains(needle), "{msg}");
    }
}

#[test]
fn stop_strings_are_bounded_by_their_bytes() {
    let s = Server::start(&["--max-stop-bytes", "1KiB"]);
    let huge = vec!["ab".repeat(125_000); 16];
    let body = json!({"prompt": "hi", "max_tokens": 2, "stop": huge});
    let (resps, took, health) = attack(&s, "/v1/completions", &body, 4);
    all_refused(&resps, "stop", "--max-stop-bytes");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(health < Duration::from_secs(1), "/health took {health:?}");
    let r = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 2, "stop": ["x".repeat(1025)]}));
    r.assert_error(400, Some("stop"));
    let r = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 2, "stop": vec!["x".repeat(256); 4]}));
    assert_eq!(r.status, 200, "exactly the cap is fine: {}", r.text());
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stop": "y".repeat(2000)});
    s.post("/v1/chat/completions", &chat).assert_error(400, Some("stop"));
}

#[test]
fn text_prompts_too_long_in_bytes_are_refused_before_tokenizing() {
    let s = Server::start(&[]);
    // Within the 4 MiB body cap, far past what a 256-token context could hold.
    let text = "hello world ".repeat(330_000);
    let (resps, took, health) = attack(&s, "/v1/completions", &json!({"prompt": text, "max_tokens": 2}), 6);
    all_refused(&resps, "prompt", "--prompt-bytes-per-token");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(health < Duration::from_secs(1), "/health took {health:?}");
    // Six 4 MB texts tokenized whole held gigabytes; refused untokenized they stay near the body.
    let peak = peak_rss_mib(&s);
    assert!(peak < 512, "peak resident memory {peak} MiB");
    let chat = json!({"messages": [{"role": "user", "content": text}], "max_tokens": 2});
    let (resps, _, health) = attack(&s, "/v1/chat/completions", &chat, 2);
    all_refused(&resps, "messages", "bytes");
    assert!(health < Duration::from_secs(1), "/health took {health:?}");
    let batch = json!({"prompt": ["hi", "x".repeat(100_000)], "max_tokens": 2});
    s.post("/v1/completions", &batch).assert_error(400, Some("prompt[1]"));
    s.post("/tokenize", &json!({"prompt": "x".repeat(100_000)})).assert_error(400, Some("prompt"));
    // A prompt within the bound is tokenized and judged by its tokens, as before.
    let r = s.post("/v1/completions", &json!({"prompt": "hello ".repeat(400), "max_tokens": 2}));
    r.assert_error(400, Some("prompt"));
    assert!(r.text().contains("tokens"), "{}", r.text());
    assert_eq!(s.post("/v1/completions", &json!({"prompt": "hello", "max_tokens": 2})).status, 200);
}

#[test]
fn chat_templates_that_loop_or_grow_are_refused_within_their_budget() {
    let dir = model_dir();
    let template = dir.path().join("endless.jinja");
    let src = "{% if messages[0]['content'] == 'loop' %}\
        {% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}\
        {% elif messages[0]['content'] == 'big' %}{{ 'x' * 100000000 }}\
        {% else %}<|im_start|>user\n{{ messages[0]['content'] }}<|im_end|>\n<|im_start|>assistant\n{% endif %}";
    std::fs::write(&template, src).unwrap();
    let s = Server::start_in(dir, &["--chat-template", template.to_str().unwrap()]);
    let chat = |content: &str| json!({"messages": [{"role": "user", "content": content}], "max_tokens": 2});
    let (resps, took, health) = attack(&s, "/v1/chat/completions", &chat("loop"), 3);
    all_refused(&resps, "messages", "--chat-template-fuel");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(health < Duration::from_secs(1), "/health took {health:?}");
    let (resps, _, health) = attack(&s, "/v1/chat/completions", &chat("big"), 2);
    all_refused(&resps, "messages", "bytes");
    assert!(health < Duration::from_secs(1), "/health took {health:?}");
    s.post("/tokenize", &json!({"messages": [{"role": "user", "content": "loop"}]}))
        .assert_error(400, Some("messages"));
    // The threads are free again: an ordinary chat is served.
    let r = s.post("/v1/chat/completions", &chat("hi"));
    assert_eq!(r.status, 200, "{}", r.text());
    // A smaller budget refuses even an ordinary render.
    let tight = Server::start(&["--chat-template-fuel", "5"]);
    tight.post("/v1/chat/completions", &chat("hi")).assert_error(400, Some("messages"));
}

#[test]
fn unknown_nested_keys_and_both_prompt_forms_are_refused_by_name() {
    let sessions = tempfile::tempdir().unwrap();
    let s = Server::start(&["--session-dir", sessions.path().to_str().unwrap()]);
    let base = json!({"prompt": "hi", "max_tokens": 2, "stream": true});
    let with = |so: Value| {
        let mut b = base.clone();
        b["stream_options"] = so;
        b
    };
    s.post("/v1/completions", &with(json!({"include_usage": true, "bogus": 1})))
        .assert_error(400, Some("stream_options.bogus"));
    s.post("/v1/completions", &with(json!({"continuous_usage_stats": true})))
        .assert_error(400, Some("stream_options.continuous_usage_stats"));
    s.post("/v1/completions", &with(json!({"include_usage": "yes"})))
        .assert_error(400, Some("stream_options.include_usage"));
    let r = s.post("/v1/completions", &with(json!({"include_usage": true, "continuous_usage_stats": false})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.events().iter().any(|e| e["usage"]["completion_tokens"] == 2), "{}", r.text());
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true,
                      "stream_options": {"include_usage": true, "extra": null}});
    s.post("/v1/chat/completions", &chat).assert_error(400, Some("stream_options.extra"));

    let r = s.post("/v1/completions", &json!({"prompt": "hi", "prompt_token_ids": [5, 6], "max_tokens": 2}));
    r.assert_error(400, Some("prompt"));
    assert!(r.text().contains("prompt_token_ids"), "{}", r.text());
    let r = s.post("/v1/completions", &json!({"prompt_token_ids": [5, 6], "max_tokens": 2}));
    assert_eq!(r.status, 200, "{}", r.text());

    s.post("/v1/sessions/a", &json!({"prompt": "hi", "bogus": true})).assert_error(400, Some("bogus"));
    let r = s.post("/v1/sessions/a", &json!({"prompt": "hi", "prompt_token_ids": [5, 6]}));
    r.assert_error(400, Some("prompt"));
    assert!(r.text().contains("prompt_token_ids"), "{}", r.text());
    s.post("/v1/sessions/a", &json!({"prompt": "x".repeat(100_000)})).assert_error(400, Some("prompt"));
    let r = s.post("/v1/sessions/a", &json!({"model": "tiny", "prompt_token_ids": (0..40).collect::<Vec<u32>>()}));
    assert_eq!(r.status, 200, "{}", r.text());
}
