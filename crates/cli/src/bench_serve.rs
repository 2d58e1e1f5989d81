//! `tensorfold bench-serve`: a serving benchmark with `vllm bench serve`'s conventions. Against a
//! loopback server (`--url`) or one it starts (`--model`), it sends `--num-prompts` streamed
//! completions, at most `--max-concurrency` at once and arriving at `--request-rate`, then prints
//! output tok/s, request/s, TTFT, TPOT and ITL and writes them as JSON.

use crate::bench_serve_args::BenchServeArgs;
use crate::bench_serve_request::{complete, model, text_prompt, vocab};
use crate::bench_serve_stats::{Outcome, summarize, table};
use crate::bench_serve_workload::{Lengths, Planned, plan};
use crate::exit::{Failure, failed, refused};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `bench-serve`.
pub fn run(a: &BenchServeArgs) -> Result<(), Failure> {
    let checked = a.url.as_deref().map(crate::bench_serve_http::loopback).transpose();
    let checked = checked.map_err(|e| refused(format!("bench-serve: {e}")))?;
    crate::bench_serve_spawn::check_extra(&a.serve_args).map_err(|e| refused(format!("bench-serve: {e}")))?;
    let server = match &a.model {
        Some(m) => Some(
            crate::bench_serve_spawn::start(m, &a.serve_args, Duration::from_secs(a.server_timeout as u64))
                .map_err(|e| failed(format!("bench-serve: {e}")))?,
        ),
        None => None,
    };
    let addr = match (&server, checked) {
        (_, Some(addr)) => addr,
        (Some(s), None) => crate::bench_serve_http::loopback(&s.url).map_err(failed)?,
        (None, None) => return Err(refused("bench-serve: give --url or --model")),
    };
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(|e| failed(format!("bench-serve: cannot start the runtime: {e}")))?;
    let summary = rt.block_on(bench(a, addr))?;
    drop(server);
    println!("{}", table(&summary));
    if let Some(path) = &a.result_json {
        let text = serde_json::to_string_pretty(&summary).map_err(|e| failed(e.to_string()))?;
        std::fs::write(path, text + "\n").map_err(|e| failed(format!("cannot write {}: {e}", path.display())))?;
    }
    match summary["completed"].as_u64() {
        Some(0) => Err(failed(format!("bench-serve: every request failed; the first: {}", summary["errors"][0]))),
        _ => Ok(()),
    }
}

async fn bench(a: &BenchServeArgs, addr: SocketAddr) -> Result<Value, Failure> {
    let (model_id, max_model_len) = model(addr).await.map_err(|e| failed(format!("bench-serve: {e}")))?;
    let vocab = match a.vocab_size.or_else(|| a.model.as_deref().and_then(config_vocab)) {
        Some(v) => v,
        None => vocab(addr).await.map_err(|e| refused(format!("bench-serve: {e}")))?,
    };
    let lengths = match a.dataset.as_str() {
        "sharegpt" => Lengths::ShareGpt { output: a.sharegpt_output_len },
        _ => {
            let r = a.random_range_ratio;
            let most = |len: usize| ((len as f64) * (1.0 + r)).ceil() as usize;
            let total = most(a.random_input_len) + most(a.random_output_len);
            if total > max_model_len {
                let msg = format!(
                    "bench-serve: prompts and outputs of up to {total} tokens exceed the server's max_model_len {max_model_len}"
                );
                return Err(refused(msg));
            }
            Lengths::Random { input: a.random_input_len, output: a.random_output_len, ratio: r }
        }
    };
    let planned = plan(a.num_prompts, lengths, vocab, max_model_len, a.request_rate, a.seed);
    let mut bodies = Vec::with_capacity(planned.len());
    for (i, p) in planned.iter().enumerate() {
        let prompt = match a.prompt_kind.as_str() {
            "text" => json!(text_prompt(addr, &p.prompt).await.map_err(|e| failed(format!("bench-serve: {e}")))?),
            _ => json!(p.prompt),
        };
        bodies.push(body(a, &model_id, prompt, p, i));
    }
    let concurrency = a.max_concurrency.unwrap_or(a.num_prompts);
    let gate = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let timeout = Duration::from_secs(a.request_timeout as u64);
    let start = Instant::now();
    let run_end = a.time_limit.map(|s| start + Duration::from_secs(s as u64));
    let mut tasks = Vec::with_capacity(planned.len());
    for (p, b) in planned.iter().zip(bodies) {
        let at = start + Duration::from_secs_f64(p.arrival);
        if run_end.is_some_and(|end| at >= end) {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let acquired = Arc::clone(&gate).acquire_owned();
        let permit = match run_end {
            Some(end) => match tokio::time::timeout_at(end.into(), acquired).await {
                Ok(p) => p,
                Err(_) => break,
            },
            None => acquired.await,
        };
        let permit = permit.map_err(|e| failed(e.to_string()))?;
        let lens = (p.output_len, p.prompt.len());
        tasks.push(tokio::spawn(async move {
            let o = complete(addr, b, lens, timeout, run_end).await;
            drop(permit);
            o
        }));
    }
    let not_sent = planned.len() - tasks.len();
    let mut outcomes = Vec::with_capacity(tasks.len());
    for t in tasks {
        outcomes.push(t.await.unwrap_or_else(|e| Outcome { error: format!("task: {e}"), ..Outcome::default() }));
    }
    let duration = start.elapsed().as_secs_f64();
    let config = json!({
        "backend": "tensorfold", "url": format!("http://{addr}"), "model_id": model_id, "max_model_len": max_model_len, "vocab_size": vocab,
        "num_prompts": a.num_prompts, "max_concurrency": concurrency,
        "request_rate": if a.request_rate.is_finite() { json!(a.request_rate) } else { json!("inf") },
        "dataset": a.dataset, "random_input_len": a.random_input_len, "random_output_len": a.random_output_len,
        "random_range_ratio": a.random_range_ratio, "prompt_kind": a.prompt_kind, "temperature": a.temperature,
        "top_p": a.top_p, "top_k": a.top_k, "seed": a.seed, "ignore_eos": a.ignore_eos,
        "time_limit": a.time_limit, "not_sent": not_sent,
    });
    Ok(summarize(config, &outcomes, duration))
}

/// Request `i`'s body: streamed, with the usage chunk, sampling seeded by `--seed + i`.
fn body(a: &BenchServeArgs, model_id: &str, prompt: Value, p: &Planned, i: usize) -> Vec<u8> {
    let mut b = json!({
        "model": model_id, "prompt": prompt, "max_tokens": p.output_len, "stream": true,
        "stream_options": {"include_usage": true}, "ignore_eos": a.ignore_eos,
        "temperature": a.temperature, "seed": a.seed.wrapping_add(i as u64) & (i64::MAX as u64),
    });
    if let Some(top_p) = a.top_p {
        b["top_p"] = json!(top_p);
    }
    if let Some(top_k) = a.top_k {
        b["top_k"] = json!(top_k);
    }
    b.to_string().into_bytes()
}

/// `vocab_size` of a checkpoint directory's config.json (or its `text_config`'s).
fn config_vocab(dir: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    let n = v["vocab_size"].as_u64().or_else(|| v["text_config"]["vocab_size"].as_u64())?;
    usize::try_from(n).ok().filter(|&n| n > 0)
}
