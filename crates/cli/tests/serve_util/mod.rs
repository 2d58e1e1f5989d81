//! Test helpers for `tensorfold serve`: start the real binary on a loopback port (reading the
//! address it prints), and a small blocking HTTP/1.1 client over `TcpStream` that can send any
//! bytes (bad UTF-8, wrong content types, oversized bodies) and read chunked SSE responses.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// ChatML, as Qwen models use it.
pub const CHATML: &str = "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/// A copy of the qwen3 fixture with a ChatML chat template.
pub fn model_dir() -> tempfile::TempDir {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen3");
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("golden") {
            std::fs::copy(entry.path(), dir.path().join(name)).unwrap();
        }
    }
    std::fs::write(dir.path().join("chat_template.jinja"), CHATML).unwrap();
    dir
}

/// A running `tensorfold serve`; killed on drop.
pub struct Server {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The process.
    pub child: Child,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts the server on the fixture with `extra` switches and waits for its address.
    pub fn start(extra: &[&str]) -> Server {
        let dir = model_dir();
        Server::start_in(dir, extra)
    }

    /// Starts the server on `dir` (kept alive as long as the server).
    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Server {
        Server::start_wrapped(dir, &[], extra, Stdio::inherit())
    }

    /// Starts the server on `dir` through `wrapper` (a command that runs the binary, e.g.
    /// `prlimit --nofile=256`; none when empty), its stderr going to `stderr`.
    pub fn start_wrapped(dir: tempfile::TempDir, wrapper: &[&str], extra: &[&str], stderr: Stdio) -> Server {
        let model: PathBuf = dir.path().to_path_buf();
        let mut args = vec!["serve", "--model", model.to_str().unwrap(), "--port", "0", "--threads", "1"];
        if !extra.contains(&"--kv-memory") {
            args.extend_from_slice(&["--kv-memory", "4MiB"]);
        }
        args.extend_from_slice(&["--served-model-name", "tiny"]);
        args.extend_from_slice(extra);
        let bin = env!("CARGO_BIN_EXE_tensorfold");
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd.args(&args).stdout(Stdio::piped()).stderr(stderr).spawn().unwrap();
        let addr = address_of(&mut child);
        Server { addr, child, _dir: dir }
    }

    /// Starts the binary with exactly `args` (a `serve` command line with `--port 0`) and waits
    /// for its address; `dir` is kept alive as long as the server.
    pub fn start_exact(dir: tempfile::TempDir, args: &[&str]) -> Server {
        let bin = env!("CARGO_BIN_EXE_tensorfold");
        let mut child = Command::new(bin).args(args).stdout(Stdio::piped()).spawn().unwrap();
        let addr = address_of(&mut child);
        Server { addr, child, _dir: dir }
    }

    /// A server already started at `addr` (killed on drop).
    pub fn at(addr: String, child: Child, dir: tempfile::TempDir) -> Server {
        Server { addr, child, _dir: dir }
    }

    /// Sends a request with a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> Resp {
        self.raw("POST", path, &[("Content-Type", "application/json")], body.to_string().as_bytes())
    }

    /// Sends a GET.
    pub fn get(&self, path: &str) -> Resp {
        self.raw("GET", path, &[], b"")
    }

    /// Sends any request; the body is sent as given.
    pub fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        let mut s = self.connect();
        let _ = s.write_all(&head(&self.addr, method, path, headers, body.len()));
        let _ = s.write_all(body);
        read_response(&mut s)
    }

    /// Opens a connection (60 s read timeout).
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    }

    /// A metric's value from `/metrics` (the first series of that name).
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.get("/metrics").text();
        let line = text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '));
        line.and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {text}"))
    }

    /// Waits until `metric` equals `want` (10 s at most); returns the last value seen.
    pub fn wait_metric(&self, name: &str, want: f64) -> f64 {
        let t = Instant::now();
        loop {
            let v = self.metric(name);
            if v == want || t.elapsed() > Duration::from_secs(10) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A greedy completion of fixed ids; the server must answer it the same way every time.
    pub fn normal(&self) -> Vec<Value> {
        let r = self.post("/v1/completions", &normal_request());
        assert_eq!(r.status, 200, "a normal request failed: {}", r.text());
        assert_eq!(self.get("/health").status, 200);
        token_ids(&r.json()["choices"][0]["logprobs"])
    }
}

/// The address a starting server prints on stdout (waited for up to 60 s).
pub fn address_of(child: &mut Child) -> String {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("listening on http://") {
                let _ = tx.send(addr.to_string());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the server printed no address")
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The request of [`Server::normal`].
pub fn normal_request() -> Value {
    json!({"model": "tiny", "prompt": [10, 20, 30, 40], "max_tokens": 6, "temperature": 0,
           "ignore_eos": true, "logprobs": 1, "return_tokens_as_token_ids": true})
}

/// The ids of a completions `logprobs` object (`return_tokens_as_token_ids`).
pub fn token_ids(logprobs: &Value) -> Vec<Value> {
    logprobs["tokens"].as_array().cloned().unwrap_or_default()
}

/// The request head.
pub fn head(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], len: usize) -> Vec<u8> {
    let mut h = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {len}\r\n");
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// A response.
#[derive(Debug)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body (de-chunked).
    pub body: Vec<u8>,
}

impl Resp {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The `data:` payloads of an SSE body, `[DONE]` included as a string.
    pub fn events(&self) -> Vec<Value> {
        self.text()
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(|d| if d == "[DONE]" { json!("[DONE]") } else { serde_json::from_str(d).unwrap() })
            .collect()
    }

    /// Asserts an OpenAI-shaped error with `status` naming `param`.
    pub fn assert_error(&self, status: u16, param: Option<&str>) {
        assert_eq!(self.status, status, "{}", self.text());
        let e = self.json();
        assert!(e["error"]["message"].is_string(), "{e}");
        assert!(e["error"]["type"].is_string(), "{e}");
        if let Some(p) = param {
            assert_eq!(e["error"]["param"], p, "{e}");
        }
    }
}

/// Reads a whole response from a connection the server closes.
pub fn read_response(s: &mut TcpStream) -> Resp {
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no response: {raw:?}"));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
        body = dechunk(&body);
    }
    Resp { status, headers, body }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 || b.len() < eol + 2 + size {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[(eol + 4 + size).min(b.len())..];
    }
    out
}
