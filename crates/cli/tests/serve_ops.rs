//! What a server operator sees: one log line per request on stderr (status and tokens), the
//! startup banner and the shutdown line, `--api-key` (401 without it, `/health` open),
//! `GET /v1/models/{id}`, and a busy port refused with exit 2 before the model loads.

mod serve_util;

use serde_json::{Value, json};
use serve_util::{Resp, head, model_dir, read_response};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// A `tensorfold serve` whose stderr is kept.
struct Logged {
    addr: String,
    child: Child,
    stderr: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Logged {
    /// Starts on the fixture with `extra` switches and `env` variables; waits for the address.
    fn start(extra: &[&str], env: &[(&str, &str)]) -> Logged {
        let dir = model_dir();
        let model = dir.path().to_str().unwrap().to_string();
        let mut args = vec!["serve", "--model", &model, "--port", "0", "--threads", "1"];
        args.extend_from_slice(&["--kv-memory", "4MiB", "--served-model-name", "tiny"]);
        if !extra.contains(&"--device") {
            args.extend_from_slice(&["--device", "cpu"]);
        }
        args.extend_from_slice(extra);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorfold"));
        cmd.args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).env_remove("TENSORFOLD_API_KEY");
        cmd.env_remove("RUST_LOG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (err, log) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                log.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening on http://") {
                    let _ = tx.send(addr.to_string());
                }
            }
        });
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(100));
            panic!("the server printed no address; stderr:\n{}", stderr.lock().unwrap());
        };
        Logged { addr, child, stderr, _dir: dir }
    }

    /// Sends a request (a JSON body when `body` is not null) with `headers`.
    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Resp {
        let body = if body.is_null() { String::new() } else { body.to_string() };
        let mut all = headers.to_vec();
        if !body.is_empty() {
            all.push(("Content-Type", "application/json"));
        }
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(&head(&self.addr, method, path, &all, body.len())).unwrap();
        s.write_all(body.as_bytes()).unwrap();
        read_response(&mut s)
    }

    fn get(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        self.send("GET", path, headers, &Value::Null)
    }

    /// Waits (10 s at most) until stderr holds a line with every one of `parts`; returns it.
    fn wait_line(&self, parts: &[&str]) -> String {
        let t = Instant::now();
        loop {
            let text = self.stderr.lock().unwrap().clone();
            if let Some(l) = text.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
                return l.to_string();
            }
            assert!(t.elapsed() < Duration::from_secs(10), "no stderr line with {parts:?} in:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for exit 0.
    fn terminate(&mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let t = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(t.elapsed() < Duration::from_secs(15), "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0));
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn completion(stream: bool) -> Value {
    json!({"model": "tiny", "prompt": [10, 20, 30, 40], "max_tokens": 6, "temperature": 0,
           "ignore_eos": true, "stream": stream})
}

#[test]
fn every_request_logs_one_line_with_status_tokens_and_latency() {
    let s = Logged::start(&[], &[]);
    assert_eq!(s.send("POST", "/v1/completions", &[], &completion(false)).status, 200);
    let line =
        s.wait_line(&["method=POST", "path=/v1/completions", "status=200", "prompt_tokens=4", "completion_tokens=6"]);
    let latency = line.split("latency_ms=").nth(1).and_then(|v| v.split_whitespace().next()).unwrap_or_default();
    assert!(latency.parse::<f64>().is_ok_and(|ms| ms >= 0.0), "latency in {line}");
    let r = s.send(
        "POST",
        "/v1/chat/completions",
        &[],
        &json!({"model": "tiny", "max_tokens": 3, "stream": true,
        "ignore_eos": true, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    s.wait_line(&["path=/v1/chat/completions", "status=200", "completion_tokens=3"]);
    assert_eq!(s.get("/no/such/route", &[]).status, 404);
    s.wait_line(&["method=GET", "path=/no/such/route", "status=404", "prompt_tokens=0", "completion_tokens=0"]);
    let text = s.stderr.lock().unwrap().clone();
    assert_eq!(text.matches("path=/v1/completions ").count(), 1, "one line per request:\n{text}");
}

#[test]
fn banner_names_model_device_memory_and_kv_capacity_and_shutdown_is_logged() {
    let mut s = Logged::start(&[], &[]);
    s.wait_line(&["model tiny (", "layers) from "]);
    s.wait_line(&["device cpu", "weights ", "MiB"]);
    // 4 MiB over the fixture's KV bytes per block: the count is whatever the fixture gives, but
    // the line names blocks, tokens, and where the size came from.
    let kv = s.wait_line(&["kv cache: ", " blocks of 16 tokens (", "--kv-memory"]);
    assert!(kv.contains(" tokens of f32, "), "{kv}");
    s.wait_line(&[&format!("listening on http://{}", s.addr)]);
    s.terminate();
    s.wait_line(&["shutting down: 0 requests in flight cancelled"]);
    s.wait_line(&["stopped"]);
    // A bf16 cache holds twice the blocks in the same memory.
    let blocks = |line: &str| -> usize {
        let n = line.split("kv cache: ").nth(1).and_then(|r| r.split(' ').next());
        n.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("a block count in {line}"))
    };
    let mut half = Logged::start(&["--kv-cache-dtype", "bf16"], &[]);
    let half_kv = half.wait_line(&["kv cache: ", " tokens of bf16, ", "--kv-memory"]);
    assert_eq!(blocks(&half_kv), 2 * blocks(&kv), "{half_kv} against {kv}");
    half.terminate();
}

#[test]
fn shutdown_line_counts_the_requests_it_cancels() {
    let mut s = Logged::start(&["--device", "ref"], &[]);
    let body = json!({"prompt": [5, 6, 7], "max_tokens": 240, "ignore_eos": true, "stream": true}).to_string();
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.write_all(&head(&s.addr, "POST", "/v1/completions", &[("Content-Type", "application/json")], body.len()))
        .unwrap();
    c.write_all(body.as_bytes()).unwrap();
    let mut first = [0u8; 64];
    assert!(c.read(&mut first).unwrap() > 0);
    s.terminate();
    s.wait_line(&["shutting down: 1 requests in flight cancelled"]);
}

#[test]
fn api_key_guards_every_route_but_health() {
    let s = Logged::start(&["--api-key", "sk-test"], &[]);
    assert_eq!(s.get("/health", &[]).status, 200);
    for path in ["/v1/models", "/v1/models/tiny", "/metrics", "/version"] {
        s.get(path, &[]).assert_error(401, None);
        s.get(path, &[("Authorization", "Bearer sk-wrong")]).assert_error(401, None);
        s.get(path, &[("Authorization", "Bearer sk-tes")]).assert_error(401, None);
        assert_eq!(s.get(path, &[("Authorization", "Bearer sk-test")]).status, 200, "{path}");
    }
    let version = s.get("/version", &[("Authorization", "Bearer sk-test")]).json();
    assert_eq!(version, serde_json::json!({"version": env!("CARGO_PKG_VERSION")}), "vLLM's /version");
    let r = s.send("POST", "/v1/completions", &[], &completion(false));
    r.assert_error(401, None);
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let ok = s.send("POST", "/v1/completions", &[("Authorization", "Bearer sk-test")], &completion(false));
    assert_eq!(ok.status, 200, "{}", ok.text());
    s.wait_line(&["path=/v1/completions", "status=401"]);
    assert!(!s.stderr.lock().unwrap().contains("sk-test"), "the key is not logged");
}

#[test]
fn api_key_comes_from_the_environment_when_no_switch_gives_one() {
    let s = Logged::start(&[], &[("TENSORFOLD_API_KEY", "from-env")]);
    s.get("/v1/models", &[]).assert_error(401, None);
    assert_eq!(s.get("/v1/models", &[("Authorization", "Bearer from-env")]).status, 200);
    assert_eq!(s.get("/health", &[]).status, 200);
    let s = Logged::start(&["--api-key", "from-switch"], &[("TENSORFOLD_API_KEY", "from-env")]);
    s.get("/v1/models", &[("Authorization", "Bearer from-env")]).assert_error(401, None);
    assert_eq!(s.get("/v1/models", &[("Authorization", "Bearer from-switch")]).status, 200);
}

#[test]
fn models_retrieve_answers_the_served_model_and_404_for_others() {
    let s = Logged::start(&[], &[]);
    let m = s.get("/v1/models/tiny", &[]);
    assert_eq!(m.status, 200, "{}", m.text());
    let m = m.json();
    assert_eq!((m["id"].as_str(), m["object"].as_str()), (Some("tiny"), Some("model")));
    assert_eq!(m, s.get("/v1/models", &[]).json()["data"][0]);
    for other in ["/v1/models/other", "/v1/models/org/tiny"] {
        let r = s.get(other, &[]);
        r.assert_error(404, Some("model"));
        assert_eq!(r.json()["error"]["code"], "model_not_found");
    }
}

#[test]
fn a_busy_port_exits_2_at_once_before_the_model_loads() {
    let held = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let dir = model_dir();
    // With a bad model as well, the port is what is refused: it is bound first.
    for model in [dir.path().to_str().unwrap(), "/no/such/model"] {
        let t = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
            .args(["serve", "--model", model, "--port", &port, "--device", "cpu"])
            .output()
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("serve: 127.0.0.1:{port} is in use")), "{err}");
        assert!(out.stdout.is_empty());
    }
}
