//! vLLM's and llama.cpp's command-line habits: `serve MODEL`, `-m`, `--max-model-len` (`-c`),
//! `--version` with the commit, `completions`, a model without a tokenizer refused unless
//! `--skip-tokenizer-init`, and `/health` answering 503 while the model loads.

mod serve_util;

use serde_json::json;
use serve_util::Server;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tensorfold"))
}

/// A `serve` command line on `dir` (given positionally or with `model_switch`).
fn serve_args<'a>(model_switch: Option<&'a str>, dir: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["serve"];
    args.extend(model_switch);
    args.extend([dir, "--port", "0", "--threads", "1", "--kv-memory", "4MiB", "--served-model-name", "tiny"]);
    args.extend_from_slice(extra);
    args
}

#[test]
fn serve_takes_the_model_positionally_or_as_m() {
    for switch in [None, Some("-m")] {
        let dir = serve_util::model_dir();
        let path = dir.path().to_str().unwrap().to_string();
        let server = Server::start_exact(dir, &serve_args(switch, &path, &[]));
        let r = server.get("/v1/models");
        assert_eq!((r.status, r.json()["data"][0]["id"].as_str()), (200, Some("tiny")), "{switch:?}");
    }
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/qwen3");
    let out = bin().args(["generate", "-m", fixture, "--ids", "1,2", "--max-tokens", "2"]).output();
    assert!(out.unwrap().status.success(), "generate takes -m");
}

#[test]
fn max_model_len_caps_prompt_plus_output_and_cannot_pass_the_models_context() {
    let dir = serve_util::model_dir();
    let path = dir.path().to_str().unwrap().to_string();
    let server = Server::start_exact(dir, &serve_args(None, &path, &["--max-model-len", "32"]));
    assert_eq!(server.get("/v1/models").json()["data"][0]["max_model_len"], 32);
    let prompt: Vec<u32> = (1..=20).collect();
    let past = server.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 20, "temperature": 0}));
    assert_eq!(past.status, 400, "{}", past.text());
    let within = server.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 12, "temperature": 0}));
    assert_eq!(within.status, 200, "{}", within.text());
    drop(server);

    let dir = serve_util::model_dir();
    let path = dir.path().to_str().unwrap().to_string();
    let out = bin().args(serve_args(None, &path, &["-c", "100000"])).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-model-len 100000 is above the model's context of 256 tokens"), "{err}");

    let generate = ["generate", "--model", &path, "--ids", "1,2,3", "--max-tokens", "50", "--ignore-eos", "--json"];
    let out = bin().args(generate).args(["--ctx-size", "10"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ids"].as_array().map(Vec::len), Some(7), "generate stops at the context of 10");
}

#[test]
fn version_names_the_commit_and_the_backends() {
    let out = bin().arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(&format!("tensorfold {}\ncommit: ", env!("CARGO_PKG_VERSION"))), "{text}");
    assert!(text.contains("\nbackends: cpu, ref"), "{text}");
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output();
    if let Some(head) = head.ok().filter(|h| h.status.success()) {
        let commit = String::from_utf8_lossy(&head.stdout).trim().to_string();
        assert!(text.contains(&format!("commit: {commit}\n")), "{text} lacks {commit}");
    }
    let short = bin().arg("-V").output().unwrap();
    assert!(String::from_utf8_lossy(&short.stdout).starts_with("tensorfold 0."));
}

#[test]
fn completions_print_a_script_for_the_shell() {
    let out = bin().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.contains("_tensorfold()") && script.contains("complete -F _tensorfold"), "{script}");
    assert!(script.contains("--max-model-len") && script.contains("run"));
    let out = bin().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown shell is a usage error");
}

#[test]
fn a_model_without_a_tokenizer_is_refused_unless_skip_tokenizer_init() {
    let dir = serve_util::model_dir();
    for f in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"] {
        std::fs::remove_file(dir.path().join(f)).unwrap();
    }
    let path = dir.path().to_str().unwrap().to_string();
    for args in [serve_args(None, &path, &[]), vec!["run", path.as_str(), "hello"]] {
        let out = bin().args(&args).stdin(Stdio::null()).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let refusal: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(refusal.len(), 1, "{err}");
        assert!(refusal[0].contains("has no tokenizer.json") && refusal[0].contains("--skip-tokenizer-init"));
    }
    let server = Server::start_exact(dir, &serve_args(None, &path, &["--skip-tokenizer-init"]));
    let ids = server.post("/v1/completions", &json!({"prompt": [1, 2, 3], "max_tokens": 2}));
    assert_eq!(ids.status, 200, "{}", ids.text());
    server.post("/v1/completions", &json!({"prompt": "hello", "max_tokens": 2})).assert_error(400, Some("prompt"));
}

#[test]
fn health_answers_503_with_progress_while_the_model_loads_then_200() {
    let dir = serve_util::model_dir();
    let path = dir.path().to_str().unwrap().to_string();
    let gate = dir.path().join("go");
    let gate_arg = gate.to_str().unwrap().to_string();
    let args = serve_args(None, &path, &["--load-when-exists", &gate_arg]);
    let mut child = bin().args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let addr = line.split("http://").nth(1).and_then(|rest| rest.split_once("/health"));
            if let Some((addr, _)) = addr {
                let _ = tx.send(addr.to_string());
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(60)).expect("no loading line on stderr");
    let server = Server::at(addr, child, dir);
    let health = server.get("/health");
    assert_eq!(health.status, 503, "{}", health.text());
    assert_eq!(health.json()["status"], "loading");
    assert!(health.json()["bytes_total"].is_u64() && health.json()["tensors_loaded"].is_u64());
    let models = server.get("/v1/models");
    models.assert_error(503, None);
    assert_eq!(models.json()["error"]["code"], "model_loading");

    std::fs::write(&gate, b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.get("/health").status != 200 {
        assert!(Instant::now() < deadline, "/health never answered 200");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.get("/health").json(), json!({"status": "ok"}));
    assert_eq!(server.get("/v1/models").status, 200);
}
