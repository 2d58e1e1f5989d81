//! One `bench-serve` request: a streamed `/v1/completions` call timed chunk by chunk, and the
//! small calls made before the run (the model's name and context, the vocabulary, detokenizing).

use crate::bench_serve_http::{Events, send};
use crate::bench_serve_stats::Outcome;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Streams `body` to `/v1/completions` and times it, cut after `timeout` or at `run_end`, whichever
/// comes first; every failure is an outcome, not an error.
pub async fn complete(
    addr: SocketAddr,
    body: Vec<u8>,
    (asked, sent): (usize, usize),
    timeout: Duration,
    run_end: Option<Instant>,
) -> Outcome {
    let mut o = Outcome { asked, prompt_tokens: sent, ..Outcome::default() };
    let start = Instant::now();
    let own_end = start + timeout;
    let end = run_end.map_or(own_end, |r| r.min(own_end));
    match tokio::time::timeout_at(end.into(), stream(addr, &body, start, &mut o)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => o.error = e,
        Err(_) if end < own_end => o.error = "cut at --time-limit".into(),
        Err(_) => o.error = format!("no end within {} s", timeout.as_secs()),
    }
    o.ok = o.error.is_empty();
    o
}

async fn stream(addr: SocketAddr, body: &[u8], start: Instant, o: &mut Outcome) -> Result<(), String> {
    let mut resp = send(addr, "POST", "/v1/completions", body).await?;
    if resp.status != 200 {
        let text = resp.body().await.unwrap_or_default();
        return Err(format!("HTTP {}: {}", resp.status, String::from_utf8_lossy(&text[..text.len().min(300)])));
    }
    let (mut events, mut chunks, mut usage, mut done) = (Events::default(), 0, None, false);
    let mut last: Option<Instant> = None;
    while let Some(piece) = resp.next_piece().await? {
        for (data, at) in events.feed(&piece, Instant::now())? {
            if data == b"[DONE]" {
                done = true;
                continue;
            }
            let v: Value = serde_json::from_slice(&data).map_err(|e| format!("an event that is not JSON: {e}"))?;
            if let Some(err) = v.get("error") {
                return Err(format!("error event: {}", err.get("message").unwrap_or(err)));
            }
            for c in v["choices"].as_array().into_iter().flatten() {
                if c["text"].as_str().is_some_and(|t| !t.is_empty()) {
                    match last {
                        None => o.ttft = (at - start).as_secs_f64(),
                        Some(prev) => o.itl.push((at - prev).as_secs_f64()),
                    }
                    last = Some(at);
                    chunks += 1;
                }
                if let Some(f) = c["finish_reason"].as_str() {
                    o.finish = f.to_string();
                }
            }
            if v["usage"].is_object() {
                usage = Some(v["usage"].clone());
            }
        }
    }
    o.latency = start.elapsed().as_secs_f64();
    if !done || o.finish.is_empty() {
        return Err("the stream ended before its finish reason and [DONE]".into());
    }
    o.output_tokens = chunks;
    if let Some(u) = usage {
        o.prompt_tokens = u["prompt_tokens"].as_u64().map_or(o.prompt_tokens, |n| n as usize);
        o.output_tokens = u["completion_tokens"].as_u64().map_or(chunks, |n| n as usize);
    }
    Ok(())
}

/// The JSON answer of a small call, or why there is none.
pub async fn call(addr: SocketAddr, method: &str, path: &str, body: &Value) -> Result<(u16, Value), String> {
    let bytes = if method == "GET" { Vec::new() } else { body.to_string().into_bytes() };
    let mut resp = send(addr, method, path, &bytes).await?;
    let text = resp.body().await?;
    let v = serde_json::from_slice(&text).unwrap_or(Value::Null);
    Ok((resp.status, v))
}

/// The served model's name and `max_model_len`, from `/v1/models`.
pub async fn model(addr: SocketAddr) -> Result<(String, usize), String> {
    let (status, v) = call(addr, "GET", "/v1/models", &Value::Null).await?;
    let m = &v["data"][0];
    match (status, m["id"].as_str()) {
        (200, Some(id)) => Ok((id.to_string(), m["max_model_len"].as_u64().map_or(usize::MAX, |n| n as usize))),
        _ => Err(format!("GET /v1/models answered {status} without a model")),
    }
}

/// The vocabulary's size: the smallest id `/detokenize` refuses (found by bisection).
pub async fn vocab(addr: SocketAddr) -> Result<usize, String> {
    let accepts = |id: u64| async move {
        call(addr, "POST", "/detokenize", &json!({"tokens": [id]})).await.map(|(status, _)| status == 200)
    };
    if !accepts(0).await? {
        return Err("POST /detokenize refuses token 0; give --vocab-size".into());
    }
    let (mut lo, mut hi) = (0u64, 1u64 << 24); // lo is accepted, hi refused
    if accepts(hi).await? {
        return Err("POST /detokenize accepts every id; give --vocab-size".into());
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if accepts(mid).await? { lo = mid } else { hi = mid }
    }
    Ok(hi as usize)
}

/// `ids` as the server's text, adjusted (a few round trips through `/tokenize`, cut to length)
/// so that the text tokenizes to about as many tokens: random ids seldom survive a round trip.
pub async fn text_prompt(addr: SocketAddr, ids: &[u32]) -> Result<String, String> {
    let mut ids = ids.to_vec();
    let target = ids.len();
    let mut text = detokenize(addr, &ids).await?;
    for _ in 0..4 {
        let again = match call(addr, "POST", "/tokenize", &json!({"prompt": text, "add_special_tokens": false})).await?
        {
            (200, v) => v["tokens"].as_array().map(|t| t.iter().filter_map(|x| x.as_u64()).map(|x| x as u32).collect()),
            (status, v) => return Err(format!("/tokenize answered {status}: {v}")),
        };
        let again: Vec<u32> = again.ok_or_else(|| "/tokenize gave no tokens".to_string())?;
        if again.len() == target {
            break;
        }
        ids = again.into_iter().cycle().take(target).collect();
        text = detokenize(addr, &ids).await?;
    }
    Ok(text)
}

async fn detokenize(addr: SocketAddr, ids: &[u32]) -> Result<String, String> {
    match call(addr, "POST", "/detokenize", &json!({"tokens": ids})).await? {
        (200, v) => v["prompt"].as_str().map(str::to_string).ok_or_else(|| "/detokenize gave no prompt".to_string()),
        (status, v) => Err(format!("/detokenize answered {status}: {v}")),
    }
}
