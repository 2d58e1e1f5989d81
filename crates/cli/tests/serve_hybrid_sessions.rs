//! Saved sessions of a model with recurrent layers over HTTP (the lfm2 fixture): saved on one
//! server, restored after a restart, the completion equals a server that never saw it; a
//! session whose state does not fit (another model's, a non-finite state value) is refused
//! with 422 and the server keeps serving.

mod serve_util;

use serde_json::{Value, json};
use serve_util::Server;
use std::path::Path;

/// A copy of the lfm2 fixture without its golden files.
fn lfm2_dir() -> tempfile::TempDir {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lfm2");
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        if !entry.file_name().to_string_lossy().starts_with("golden") {
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
    }
    dir
}

fn lfm2(extra: &[&str]) -> Server {
    Server::start_in(lfm2_dir(), extra)
}

fn completion(s: &Server, prompt: &[i64]) -> Value {
    let body = json!({"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0.7, "seed": 11,
        "logprobs": 1, "ignore_eos": true});
    let r = s.post("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["choices"][0]["logprobs"].clone()
}

#[test]
fn a_hybrid_session_survives_a_restart_and_one_that_does_not_fit_is_refused() {
    let sessions = tempfile::tempdir().unwrap();
    let dir_arg = sessions.path().to_str().unwrap().to_string();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 13 % 470) as i64).collect();
    let mut longer = prompt.clone();
    longer.extend([5, 6, 7]);

    let first = lfm2(&["--session-dir", &dir_arg]);
    let r = first.post("/v1/sessions/chat", &json!({"prompt": prompt}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["tokens"], 32);
    drop(first);
    // Another model's session under another name (the qwen3 fixture, no state layers).
    let other = Server::start(&["--session-dir", &dir_arg]);
    assert_eq!(other.post("/v1/sessions/qwen", &json!({"prompt": prompt})).status, 200);
    drop(other);

    let cold = lfm2(&["--prefix-cache", "false"]);
    let want = completion(&cold, &longer);
    let file = sessions.path().join("chat.tfsession");
    let mut nan = std::fs::read(&file).unwrap();
    let at = nan.len() - 4;
    nan[at..].copy_from_slice(&f32::NAN.to_le_bytes());
    tf_engine::session::reseal(&mut nan);
    std::fs::write(sessions.path().join("nan.tfsession"), &nan).unwrap();
    for (name, needle) in [("qwen", "another model"), ("nan", "non-finite state value")] {
        // A fresh server each time: nothing cached but what a restore puts there.
        let s = lfm2(&["--session-dir", &dir_arg]);
        let r = s.post(&format!("/v1/sessions/{name}/restore"), &json!({}));
        r.assert_error(422, None);
        assert!(r.text().contains(needle), "{name}: {}", r.text());
        assert_eq!(completion(&s, &longer), want, "{name}: the server keeps serving");
        assert_eq!(s.metric("tensorfold_prefix_cache_hit_tokens_total"), 0.0, "{name}: the cache is untouched");
    }

    let restarted = lfm2(&["--session-dir", &dir_arg]);
    let r = restarted.post("/v1/sessions/chat/restore", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["tokens"], 32);
    assert_eq!(completion(&restarted, &longer), want);
    assert!(restarted.metric("tensorfold_prefix_cache_hit_tokens_total") >= 32.0, "the restored state was used");
}

/// A KV budget that the state slots alone fill is refused at start, saying so.
#[test]
fn a_budget_the_state_slots_fill_is_refused_at_start() {
    let dir = lfm2_dir();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["serve", "--model", dir.path().to_str().unwrap(), "--port", "0", "--kv-memory", "64KiB"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("after the state slots"), "{err}");
}
