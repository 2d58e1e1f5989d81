//! Saved sessions over HTTP: save on one server, restart, restore on a fresh one, and the
//! same completion equals a server that never saw the session; bad names and files are refused
//! while the server keeps serving.

mod serve_util;

use serde_json::{Value, json};
use serve_util::{Server, model_dir};
use std::io::Write;

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

/// Saves `prompt` as `name` under `dir` on a server of its own and returns the file's bytes.
fn save_on_a_server(dir: &std::path::Path, name: &str, prompt: &[i64]) -> Vec<u8> {
    let server = Server::start(&["--session-dir", dir.to_str().unwrap()]);
    let r = server.post(&format!("/v1/sessions/{name}"), &json!({"prompt": prompt}));
    assert_eq!(r.status, 200, "{}", r.text());
    std::fs::read(dir.join(format!("{name}.tfsession"))).unwrap()
}

/// The restore's error message, asserting a 422 in OpenAI's error shape.
fn refused_restore(s: &Server, name: &str) -> String {
    let r = s.post(&format!("/v1/sessions/{name}/restore"), &json!({}));
    r.assert_error(422, None);
    r.json()["error"]["message"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_corrupted_payload_is_refused_with_422_and_the_cache_is_untouched() {
    let sessions = tempfile::tempdir().unwrap();
    let dir_arg = sessions.path().to_str().unwrap().to_string();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 13 % 470) as i64).collect();
    let mut longer = prompt.clone();
    longer.extend([5, 6, 7]);
    let bytes = save_on_a_server(sessions.path(), "c", &prompt);
    let cold = Server::start(&["--prefix-cache", "false"]);
    let want = completion(&cold, &longer);

    let len = bytes.len();
    let mut flipped = bytes.clone();
    flipped[len / 2 - 32..len / 2 + 32].iter_mut().for_each(|b| *b ^= 0xa5);
    let mut nan = bytes.clone();
    nan[len - 64..len - 60].copy_from_slice(&f32::NAN.to_le_bytes());
    let mut resealed = nan.clone();
    tf_engine::session::reseal(&mut resealed);
    let mut appended = bytes.clone();
    appended.push(0);
    let cases = [
        ("64 bytes flipped", flipped, "digest mismatch"),
        ("NaN written", nan, "digest mismatch"),
        ("NaN written, digest resealed", resealed, "non-finite K/V value"),
        ("truncated", bytes[..len - 1].to_vec(), "truncated or padded"),
        ("a byte appended", appended, "truncated or padded"),
    ];
    let file = sessions.path().join("c.tfsession");
    for (kind, data, needle) in cases {
        std::fs::write(&file, &data).unwrap();
        // A fresh server each time: nothing cached but what a restore puts there.
        let s = Server::start(&["--session-dir", &dir_arg]);
        let msg = refused_restore(&s, "c");
        assert!(msg.contains(needle), "{kind}: {msg}");
        assert_eq!(completion(&s, &longer), want, "{kind}: the cache was touched");
        assert_eq!(s.metric("tensorfold_prefix_cache_hit_tokens_total"), 0.0, "{kind}");
    }
    // The intact file still restores and serves as a fresh server does.
    std::fs::write(&file, &bytes).unwrap();
    let s = Server::start(&["--session-dir", &dir_arg]);
    assert_eq!(s.post("/v1/sessions/c/restore", &json!({})).status, 200);
    assert_eq!(completion(&s, &longer), want);
}

#[test]
fn fifos_links_and_planted_temporaries_are_refused_without_blocking_or_escaping() {
    use std::os::unix::fs::symlink;
    let root = tempfile::tempdir().unwrap();
    let sess = root.path().join("sess");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&sess).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 7 % 470) as i64).collect();
    let good = save_on_a_server(&outside, "good", &prompt);
    let victim = outside.join("victim.txt");
    std::fs::write(&victim, b"keep me").unwrap();

    let made = std::process::Command::new("mkfifo").arg(sess.join("fifo.tfsession")).status().unwrap();
    assert!(made.success());
    symlink(outside.join("good.tfsession"), sess.join("link.tfsession")).unwrap();
    symlink(&victim, sess.join("planted.tfsession.tmp")).unwrap();
    let s = Server::start(&["--session-dir", sess.to_str().unwrap()]);

    // A FIFO: answered at once, and the server keeps serving.
    let addr = s.addr.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        let headers = [("Content-Type", "application/json")];
        let _ = c.write_all(&serve_util::head(&addr, "POST", "/v1/sessions/fifo/restore", &headers, 2));
        let _ = c.write_all(b"{}");
        let _ = tx.send(serve_util::read_response(&mut c));
    });
    let r = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("restoring a FIFO blocked");
    r.assert_error(422, None);
    assert!(r.text().contains("not a regular file"), "{}", r.text());
    assert_eq!(s.normal().len(), 6);

    // A symlinked session file.
    assert!(refused_restore(&s, "link").contains("symbolic link"));
    // A planted temporary: saving `planted` leaves the outside file alone.
    let r = s.post("/v1/sessions/planted", &json!({"prompt": prompt}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(std::fs::symlink_metadata(sess.join("planted.tfsession")).unwrap().file_type().is_file());
    assert_eq!(std::fs::read(sess.join("planted.tfsession")).unwrap(), good);
    assert_eq!(s.post("/v1/sessions/planted/restore", &json!({})).status, 200);
    drop(s);

    // A symlinked session folder: refused for restore and save, nothing written outside.
    let linked = root.path().join("linked");
    symlink(&outside, &linked).unwrap();
    let s = Server::start(&["--session-dir", linked.to_str().unwrap()]);
    assert!(refused_restore(&s, "good").contains("symbolic link"));
    assert_ne!(s.post("/v1/sessions/new", &json!({"prompt": prompt})).status, 200);
    assert!(!outside.join("new.tfsession").exists());
}

/// Flips the lowest bit of the byte in the middle of the largest tensor of `dir`'s weights,
/// more than 4 KiB from both of its ends.
fn flip_one_byte_mid_tensor(dir: &std::path::Path) {
    let path = dir.join("model.safetensors");
    let range = {
        let f = tf_formats::SafetensorsFile::open(&path).unwrap();
        let views = f.tensors().keys().map(|n| f.tensor(n).unwrap().unwrap());
        let largest = views.max_by_key(|v| v.data.as_bytes().len()).unwrap();
        match largest.data {
            tf_formats::TensorBytes::Mapped(_, r) => r,
            tf_formats::TensorBytes::Owned(..) => panic!("a file's tensor is mapped"),
        }
    };
    assert!(range.len() > 16 * 1024, "the largest tensor is {} bytes", range.len());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(range.start + range.end) / 2] ^= 1;
    std::fs::write(&path, bytes).unwrap();
}

#[test]
fn a_session_from_weights_one_byte_apart_is_refused_with_422() {
    let sessions = tempfile::tempdir().unwrap();
    let dir_arg = sessions.path().to_str().unwrap().to_string();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 11 % 470) as i64).collect();
    save_on_a_server(sessions.path(), "a", &prompt);
    let other = model_dir();
    flip_one_byte_mid_tensor(other.path());
    let b = Server::start_in(other, &["--session-dir", &dir_arg]);
    let msg = refused_restore(&b, "a");
    assert!(msg.contains("saved from another model (fingerprint differs)"), "{msg}");
    assert_eq!(b.metric("tensorfold_prefix_cache_hit_tokens_total"), 0.0);
    // The same weights restore it.
    let a = Server::start(&["--session-dir", &dir_arg]);
    assert_eq!(a.post("/v1/sessions/a/restore", &json!({})).status, 200);
}
