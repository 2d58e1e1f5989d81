//! `tensorfold bench-serve` against the qwen3 fixture: every request completes with the asked
//! output length (against a running server, and against one it starts and stops itself),
//! failed requests are counted rather than fatal, and only loopback servers are benchmarked.

mod serve_util;

use serde_json::Value;
use serve_util::{Server, model_dir};
use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorfold")).arg("bench-serve").args(args).output().unwrap()
}

/// Runs bench-serve with `args` plus a result file; exit 0 and the JSON it wrote.
fn bench_json(args: &[&str]) -> Value {
    let out_dir = tempfile::tempdir().unwrap();
    let path = out_dir.path().join("result.json");
    let mut all = vec!["--result-json", path.to_str().unwrap()];
    all.extend_from_slice(args); // serve's switches after `--` stay last
    let out = bench(&all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bench-serve failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Output token throughput (tok/s)") && stdout.contains("p99 ITL (ms)"), "{stdout}");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn counts(v: &Value, key: &str) -> Vec<u64> {
    v[key].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

#[test]
fn every_request_against_a_running_server_completes_with_the_asked_length() {
    let server = Server::start(&["--max-num-seqs", "4"]);
    let url = format!("http://{}", server.addr);
    let r = bench_json(&[
        "--url",
        &url,
        "--num-prompts",
        "10",
        "--max-concurrency",
        "3",
        "--random-input-len",
        "12",
        "--random-output-len",
        "6",
    ]);
    assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(10), Some(0)), "{r}");
    assert_eq!(r["length_mismatches"], 0);
    assert_eq!(counts(&r, "output_lens"), vec![6; 10]);
    assert_eq!(counts(&r, "input_lens"), vec![12; 10]);
    assert!(r["finish_reasons"].as_array().unwrap().iter().all(|f| f == "length"), "{r}");
    assert_eq!((r["total_output_tokens"].as_u64(), r["max_concurrency"].as_u64()), (Some(60), Some(3)));
    assert!(r["output_throughput"].as_f64().unwrap() > 0.0 && r["p99_itl_ms"].as_f64().unwrap() > 0.0);
    assert!(r["median_ttft_ms"].as_f64().unwrap() > 0.0 && r["mean_tpot_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(server.metric("tensorfold_requests_total"), 10.0, "one server request per prompt");
}

#[test]
fn a_server_it_starts_serves_sampled_text_prompts_at_a_rate_and_is_stopped_after() {
    let dir = model_dir();
    let r = bench_json(&[
        "--model",
        dir.path().to_str().unwrap(),
        "--num-prompts",
        "8",
        "--request-rate",
        "200",
        "--dataset",
        "sharegpt",
        "--sharegpt-output-len",
        "5",
        "--prompt-kind",
        "text",
        "--temperature",
        "0.8",
        "--top-p",
        "0.9",
        "--top-k",
        "20",
        "--seed",
        "3",
        "--",
        "--kv-memory",
        "4MiB",
        "--threads",
        "1",
    ]);
    assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(8), Some(0)), "{r}");
    assert_eq!(counts(&r, "output_lens"), vec![5; 8]);
    assert_eq!((r["dataset"].as_str(), r["request_rate"].as_f64()), (Some("sharegpt"), Some(200.0)));
    let addr = r["url"].as_str().unwrap().trim_start_matches("http://").to_string();
    assert!(std::net::TcpStream::connect(&addr).is_err(), "the server at {addr} was stopped");
}

#[test]
fn failed_requests_are_counted_and_the_rest_reported() {
    let server = Server::start(&["--max-tokens-limit", "4"]);
    let url = format!("http://{}", server.addr);
    let r = bench_json(&[
        "--url",
        &url,
        "--num-prompts",
        "12",
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--random-range-ratio",
        "0.5",
    ]);
    let (ok, failed) = (r["completed"].as_u64().unwrap(), r["failed"].as_u64().unwrap());
    let asked = counts(&r, "asked_output_lens");
    let over = asked.iter().filter(|&&n| n > 4).count() as u64;
    assert!(over > 0 && over < 12, "the seed draws outputs on both sides of the limit: {asked:?}");
    assert_eq!((ok, failed), (12 - over, over), "{r}");
    let errors = r["errors"].as_array().unwrap();
    for (n, e) in asked.iter().zip(errors) {
        assert_eq!(e.as_str().unwrap().starts_with("HTTP 400"), *n > 4, "{e}");
    }
}

#[test]
fn a_time_limit_stops_sending_and_cuts_what_is_in_flight() {
    let server = Server::start(&[]);
    let url = format!("http://{}", server.addr);
    let t = std::time::Instant::now();
    let r = bench_json(&[
        "--url",
        &url,
        "--num-prompts",
        "100000",
        "--max-concurrency",
        "2",
        "--random-input-len",
        "4",
        "--random-output-len",
        "200",
        "--time-limit",
        "1",
    ]);
    assert!(t.elapsed().as_secs_f64() < 30.0, "the run ended near its limit");
    let (ok, failed, not_sent) =
        (r["completed"].as_u64().unwrap(), r["failed"].as_u64().unwrap(), r["not_sent"].as_u64().unwrap());
    assert!(not_sent > 0 && ok + failed + not_sent == 100000, "{ok} {failed} {not_sent}");
    assert!(r["errors"].as_array().unwrap().iter().all(|e| e == "" || e == "cut at --time-limit"));
    assert_eq!(r["length_mismatches"], 0, "completed requests have their whole length");
}

#[test]
fn only_loopback_servers_are_benchmarked() {
    for url in ["http://10.1.2.3:8000", "http://example.com:80", "http://0.0.0.0:8000"] {
        let out = bench(&["--url", url, "--num-prompts", "1"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url}: {err}");
        assert!(err.contains("only loopback servers are benchmarked"), "{url}: {err}");
    }
    let dir = model_dir();
    let out = bench(&["--model", dir.path().to_str().unwrap(), "--", "--host", "0.0.0.0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("picks the server's loopback address"));
    for bad in [
        &["--url", "http://127.0.0.1:1", "--max-concurrency", "5000"][..],
        &["--url", "http://127.0.0.1:1", "--num-prompts", "0"],
    ] {
        assert_eq!(bench(bad).status.code(), Some(2), "{bad:?} is out of bounds");
    }
}
