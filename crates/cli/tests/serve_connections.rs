//! Connections and streams that cannot exhaust the server: the header-read timeout closes a
//! half-sent head, the body-read timeout a dribbled body (and dribbling bodies filling the
//! connection cap leave `/health` answering), the idle timeout a kept-alive connection, a flood of half-header connections
//! up to the open-file limit leaves `/health` answering (and nothing fails for want of file
//! descriptors), a stream whose client stops reading is cancelled and frees its KV blocks, `n`
//! past what the engine can run is 400 and every 429 carries `Retry-After`.

mod serve_util;

use serde_json::json;
use serve_util::{Server, head, model_dir, read_response};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Reads until the server closes `s` (Ok: how long it took) or `limit` passes (Err).
fn closed_within(s: &mut TcpStream, limit: Duration) -> Result<Duration, String> {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut buf = [0u8; 4096];
    while t.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return Ok(t.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Ok(t.elapsed()), // reset: closed too
        }
    }
    Err(format!("still open after {limit:?}"))
}

/// `GET path` on a kept-alive connection; the status, once the whole response is read.
fn keep_alive_get(s: &mut TcpStream, addr: &str, path: &str) -> u16 {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the response: {raw:?}");
        raw.extend_from_slice(&buf[..n]);
        let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let text = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
        let len: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no content-length: {text}"));
        if raw.len() >= end + 4 + len {
            return text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap();
        }
    }
}

#[test]
fn a_half_sent_head_is_closed_after_the_header_read_timeout() {
    let s = Server::start(&["--header-read-timeout", "1", "--idle-timeout", "30"]);
    let mut half = s.connect();
    half.write_all(format!("GET /health HTTP/1.1\r\nHost: {}\r\n", s.addr).as_bytes()).unwrap();
    let took = closed_within(&mut half, Duration::from_secs(5)).unwrap();
    assert!(took >= Duration::from_millis(800), "closed before the timeout: {took:?}");

    // Dripping one byte at a time does not extend it: the whole head is due in time.
    let mut drip = s.connect();
    let t = Instant::now();
    let mut closed = false;
    for b in format!("GET /health HTTP/1.1\r\nHost: {}\r\nX-Slow: {}", s.addr, "a".repeat(100)).bytes() {
        if drip.write_all(&[b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if t.elapsed() > Duration::from_secs(4) {
            break;
        }
    }
    assert!(closed || closed_within(&mut drip, Duration::from_secs(1)).is_ok(), "a dripped head stayed open");

    // A connection that sends nothing at all is closed too, and a prompt client is served.
    let mut silent = s.connect();
    assert!(closed_within(&mut silent, Duration::from_secs(5)).is_ok());
    assert_eq!(s.get("/health").status, 200);
}

/// `GET /health` on a fresh connection: its status if the whole answer came within `limit`.
fn health_within(addr: &str, limit: Duration) -> Option<u16> {
    let t = Instant::now();
    let mut c = TcpStream::connect_timeout(&addr.parse().ok()?, limit).ok()?;
    c.set_read_timeout(Some(limit)).ok()?;
    c.write_all(&head(addr, "GET", "/health", &[], 0)).ok()?;
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let status = String::from_utf8_lossy(&raw).split_whitespace().nth(1)?.parse().ok()?;
    (t.elapsed() < limit).then_some(status)
}

/// A connection that has sent a completions head promising `len` body bytes, and one of them.
fn body_dribbler(addr: &str, len: usize) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(&head(addr, "POST", "/v1/completions", &[("Content-Type", "application/json")], len)).unwrap();
    c.write_all(b"{").unwrap();
    c
}

#[test]
fn dribbled_bodies_are_closed_after_the_body_read_timeout_and_never_lock_out_health() {
    let s = Server::start(&["--max-connections", "4", "--body-read-timeout", "3", "--header-read-timeout", "10"]);
    // As many connections as the cap, each sending one body byte every 300 ms.
    let dribblers: Vec<TcpStream> = (0..4).map(|_| body_dribbler(&s.addr, 1000)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<TcpStream> = dribblers.iter().map(|c| c.try_clone().unwrap()).collect();
    let flag = stop.clone();
    let drip = std::thread::spawn(move || {
        let mut writers = writers;
        while !flag.load(Ordering::Relaxed) {
            for w in &mut writers {
                let _ = w.write_all(b" ");
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..3 {
        let status = health_within(&s.addr, Duration::from_secs(1));
        assert_eq!(status, Some(200), "/health #{i} was not answered within a second under dribbled bodies");
        std::thread::sleep(Duration::from_millis(300));
    }
    // A dribbler the cap did not close is closed by the body-read timeout, however it drips.
    let mut survivors: Vec<TcpStream> = dribblers;
    let t = Instant::now();
    for c in &mut survivors {
        let left = Duration::from_secs(8).saturating_sub(t.elapsed());
        closed_within(c, left).unwrap_or_else(|e| panic!("a dribbled body: {e}"));
    }
    stop.store(true, Ordering::Relaxed);
    drip.join().unwrap();

    // On its own (no cap pressure), a dribbled body lasts about the timeout, not less.
    let mut late = body_dribbler(&s.addr, 1000);
    let t = Instant::now();
    let mut closed = false;
    while t.elapsed() < Duration::from_secs(8) {
        if late.write_all(b" ").is_err() {
            closed = true;
            break;
        }
        if closed_within(&mut late, Duration::from_millis(300)).is_ok() {
            closed = true;
            break;
        }
    }
    assert!(closed, "a dribbled body stayed open past the body-read timeout");
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(2500) && took < Duration::from_secs(6), "closed after {took:?}");
    // A body sent in time is served as before.
    assert_eq!(s.post("/v1/completions", &json!({"prompt": [5, 6], "max_tokens": 2})).status, 200);
    assert_eq!(health_within(&s.addr, Duration::from_secs(1)), Some(200));
}

#[test]
fn the_idle_timeout_closes_a_kept_alive_connection_and_is_not_the_header_timeout() {
    let s = Server::start(&["--header-read-timeout", "1", "--idle-timeout", "3"]);
    let mut c = s.connect();
    assert_eq!(keep_alive_get(&mut c, &s.addr, "/health"), 200);
    // Idle past the header-read timeout but within the idle one: still served.
    std::thread::sleep(Duration::from_millis(1800));
    assert_eq!(keep_alive_get(&mut c, &s.addr, "/health"), 200, "kept alive within the idle timeout");
    let took = closed_within(&mut c, Duration::from_secs(8)).unwrap();
    assert!(took >= Duration::from_millis(2500), "closed before the idle timeout: {took:?}");
}

#[test]
fn a_flood_of_half_headers_up_to_the_open_file_limit_leaves_health_answering() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    // 256 descriptors: the cap is three quarters of them (192 connections).
    let s =
        Server::start_wrapped(model_dir(), &["prlimit", "--nofile=256:256"], &["--device", "ref"], Stdio::from(log));
    // A stream in flight before the flood is busy: the cap never closes it.
    let body = json!({"prompt": [5, 6, 7], "max_tokens": 120, "ignore_eos": true, "stream": true}).to_string();
    let mut busy = s.connect();
    busy.write_all(&head(&s.addr, "POST", "/v1/completions", &[("Content-Type", "application/json")], body.len()))
        .unwrap();
    busy.write_all(body.as_bytes()).unwrap();
    let mut first = [0u8; 64];
    assert!(busy.read(&mut first).unwrap() > 0);

    let mut flood = Vec::new();
    let t = Instant::now();
    for _ in 0..600 {
        if t.elapsed() > Duration::from_secs(20) {
            break;
        }
        let Ok(mut c) = TcpStream::connect_timeout(&s.addr.parse().unwrap(), Duration::from_secs(2)) else { continue };
        let _ = c.write_all(format!("GET /health HTTP/1.1\r\nHost: {}\r\n", s.addr).as_bytes());
        flood.push(c);
    }
    assert!(flood.len() >= 500, "only {} connections opened", flood.len());
    for _ in 0..5 {
        let t = Instant::now();
        let mut c = TcpStream::connect(&s.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        c.write_all(&head(&s.addr, "GET", "/health", &[], 0)).unwrap();
        let r = read_response(&mut c);
        assert_eq!(r.status, 200);
        assert!(t.elapsed() < Duration::from_secs(2), "/health took {:?} during the flood", t.elapsed());
    }
    let mut rest = Vec::new();
    let _ = busy.read_to_end(&mut rest);
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("\"finish_reason\":\"length\"") && rest.contains("data: [DONE]"), "{rest}");
    assert_eq!(s.normal().len(), 6);
    drop(flood);
    drop(s);
    let log = std::fs::read_to_string(&log_path).unwrap();
    for bad in ["Too many open files", "os error 24", "accept failed"] {
        assert!(!log.contains(bad), "the server hit its open-file limit: {log}");
    }
}

#[test]
fn a_stream_whose_client_stops_reading_is_cancelled_and_frees_its_blocks() {
    // A longer context than the fixture's, so that one request's output is far larger than
    // what the sockets can hold.
    let dir = model_dir();
    let config = dir.path().join("config.json");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("\"max_position_embeddings\": 256", "\"max_position_embeddings\": 4096");
    std::fs::write(&config, text).unwrap();
    let s = Server::start_in(dir, &["--kv-memory", "48MiB", "--max-num-seqs", "8"]);
    let (n, max_tokens) = (8, 4000);
    let before = s.metric("tensorfold_generation_tokens_total");
    let body = json!({"prompt": [5, 6, 7], "n": n, "max_tokens": max_tokens, "ignore_eos": true, "stream": true,
                      "temperature": 0.8, "seed": 1, "logprobs": 20, "return_tokens_as_token_ids": true})
    .to_string();
    let mut c = s.connect();
    c.write_all(&head(&s.addr, "POST", "/v1/completions", &[("Content-Type", "application/json")], body.len()))
        .unwrap();
    c.write_all(body.as_bytes()).unwrap();
    // The client reads nothing; the server must stop on its own.
    let t = Instant::now();
    while s.metric("tensorfold_requests_total") < 1.0 || s.metric("tensorfold_running") > 0.0 {
        assert!(t.elapsed() < Duration::from_secs(60), "the sequences still run");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(s.wait_metric("tensorfold_kv_blocks_used", 0.0), 0.0, "blocks came back");
    let generated = s.metric("tensorfold_generation_tokens_total") - before;
    let full = (n * max_tokens) as f64;
    assert!(generated < full * 0.75, "an unread stream ran on: {generated} of {full} tokens");
    // Read now: the stream ends cleanly, its sequences aborted.
    let r = read_response(&mut c);
    let events = r.events();
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let aborted = events.iter().filter(|e| e["choices"][0]["finish_reason"] == "abort").count();
    assert!(aborted >= 1, "no sequence ended as abort");
    assert_eq!(s.get("/health").status, 200);
}

#[test]
fn n_past_what_the_engine_runs_is_400_and_a_429_carries_retry_after() {
    let s = Server::start(&["--device", "ref", "--max-num-seqs", "2", "--max-queue", "0"]);
    let r = s.post("/v1/completions", &json!({"prompt": "hi", "n": 3, "max_tokens": 2}));
    r.assert_error(400, Some("n"));
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("--max-num-seqs"), "{}", r.text());
    let r = s.post("/v1/completions", &json!({"prompt": [[5, 6], [7, 8], [9, 10]], "max_tokens": 2}));
    r.assert_error(400, Some("n"));
    let r = s.post("/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "hi"}], "n": 3}));
    r.assert_error(400, Some("n"));
    assert_eq!(s.post("/v1/completions", &json!({"prompt": "hi", "n": 2, "max_tokens": 2})).status, 200);

    // Two running sequences fill the engine and the queue: the next request waits (429).
    let body = json!({"prompt": [5, 6, 7], "n": 2, "max_tokens": 240, "ignore_eos": true, "stream": true}).to_string();
    let mut hold = s.connect();
    hold.write_all(&head(&s.addr, "POST", "/v1/completions", &[("Content-Type", "application/json")], body.len()))
        .unwrap();
    hold.write_all(body.as_bytes()).unwrap();
    let mut first = [0u8; 64];
    assert!(hold.read(&mut first).unwrap() > 0);
    let r = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 2}));
    r.assert_error(429, None);
    assert_eq!(r.header("retry-after"), Some("1"), "{:?}", r.headers);
}
