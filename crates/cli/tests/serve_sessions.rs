//! Saved sessions over HTTP: save on one server, restart, restore on a fresh one, and the
//! same completion equals a server that never saw the session; bad names and files are refused
//! while the server keeps serving.

mod serve_util;

use serde_json::{Value, json};
use serve_util::{Server, model_dir};

fn completion(s: &Server, prompt: &[i64]) -> Value {
    let body = json!({"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0.7, "seed": 11,
        "logprobs": 1, "ignore_eos": true});
    let r = s.post("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["choices"][0]["logprobs"].clone()
}

#[test]
fn session_survives_a_restart_and_equals_a_fresh_server() {
    let sessions = tempfile::tempdir().unwrap();
    let dir_arg = sessions.path().to_str().unwrap().to_string();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 13 % 470) as i64).collect();
    let mut longer = prompt.clone();
    longer.extend([5, 6, 7]);

    let first = Server::start(&["--session-dir", &dir_arg]);
    let r = first.post("/v1/sessions/chat-1", &json!({"prompt": prompt}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["tokens"], 32);
    drop(first);

    let restarted = Server::start(&["--session-dir", &dir_arg]);
    let r = restarted.post("/v1/sessions/chat-1/restore", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["tokens"], 32);
    let cold = Server::start(&["--prefix-cache", "false"]);
    assert_eq!(completion(&restarted, &longer), completion(&cold, &longer));
    assert!(restarted.metric("tensorfold_prefix_cache_hit_tokens_total") >= 32.0);

    // Bad names, missing files, corrupted files: refused; the server keeps serving.
    restarted.post("/v1/sessions/..%2Fx/restore", &json!({})).assert_error(400, Some("name"));
    restarted.post("/v1/sessions/a.b", &json!({"prompt": prompt})).assert_error(400, Some("name"));
    assert_eq!(restarted.post("/v1/sessions/nope/restore", &json!({})).status, 404);
    let file = sessions.path().join("chat-1.tfsession");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    assert_eq!(restarted.post("/v1/sessions/chat-1/restore", &json!({})).status, 422);
    restarted.post("/v1/sessions/big", &json!({"prompt": [1, 512]})).assert_error(400, Some("prompt[1]"));
    assert_eq!(completion(&restarted, &longer), completion(&cold, &longer));
    // Without --session-dir the routes are off.
    assert_eq!(cold.post("/v1/sessions/x", &json!({"prompt": prompt})).status, 404);
    let _ = model_dir;
}
