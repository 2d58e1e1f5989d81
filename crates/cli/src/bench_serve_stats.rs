//! `bench-serve`'s figures: per-request outcomes summed into throughput and TTFT, TPOT, ITL and
//! end-to-end latency (mean, median, p99, as `vllm bench serve` reports them), a short table, JSON.

use serde_json::{Value, json};

/// What one request gave.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// It streamed to its end with no error.
    pub ok: bool,
    /// Why not, when not.
    pub error: String,
    /// Prompt tokens (the server's usage count, else as sent).
    pub prompt_tokens: usize,
    /// Output tokens asked for.
    pub asked: usize,
    /// Output tokens generated (the server's usage count, else the chunks with text).
    pub output_tokens: usize,
    /// Seconds from sending to the first chunk with text.
    pub ttft: f64,
    /// Seconds from sending to the stream's end.
    pub latency: f64,
    /// Seconds between successive chunks with text.
    pub itl: Vec<f64>,
    /// The finish reason of its choice.
    pub finish: String,
}

/// The `p`th percentile of `xs` (linear between closest ranks, as numpy's default); NaN when empty.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = p / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() { f64::NAN } else { xs.iter().sum::<f64>() / xs.len() as f64 }
}

/// Mean, median and p99 of `secs`, in ms, under `name`'s keys (`mean_NAME_ms`, ...).
fn spread(out: &mut serde_json::Map<String, Value>, name: &str, secs: &[f64]) {
    let ms: Vec<f64> = secs.iter().map(|s| s * 1e3).collect();
    for (key, v) in [("mean", mean(&ms)), ("median", percentile(&ms, 50.0)), ("p99", percentile(&ms, 99.0))] {
        out.insert(format!("{key}_{name}_ms"), finite(v));
    }
}

fn finite(v: f64) -> Value {
    if v.is_finite() { json!(v) } else { Value::Null }
}

/// The run's summary as JSON: `config` (what was asked) merged with the figures and the
/// per-request lengths, TTFTs and errors.
pub fn summarize(config: Value, outcomes: &[Outcome], duration: f64) -> Value {
    let ok: Vec<&Outcome> = outcomes.iter().filter(|o| o.ok).collect();
    let input: usize = ok.iter().map(|o| o.prompt_tokens).sum();
    let output: usize = ok.iter().map(|o| o.output_tokens).sum();
    let ttft: Vec<f64> = ok.iter().map(|o| o.ttft).collect();
    let tpot: Vec<f64> = ok
        .iter()
        .filter(|o| o.output_tokens > 1)
        .map(|o| (o.latency - o.ttft) / (o.output_tokens - 1) as f64)
        .collect();
    let itl: Vec<f64> = ok.iter().flat_map(|o| o.itl.iter().copied()).collect();
    let e2el: Vec<f64> = ok.iter().map(|o| o.latency).collect();
    let mut m = match config {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    let per_s = |n: f64| finite(n / duration);
    m.insert("duration".into(), json!(duration));
    m.insert("completed".into(), json!(ok.len()));
    m.insert("failed".into(), json!(outcomes.len() - ok.len()));
    m.insert("length_mismatches".into(), json!(ok.iter().filter(|o| o.output_tokens != o.asked).count()));
    m.insert("total_input_tokens".into(), json!(input));
    m.insert("total_output_tokens".into(), json!(output));
    m.insert("request_throughput".into(), per_s(ok.len() as f64));
    m.insert("output_throughput".into(), per_s(output as f64));
    m.insert("total_token_throughput".into(), per_s((input + output) as f64));
    spread(&mut m, "ttft", &ttft);
    spread(&mut m, "tpot", &tpot);
    spread(&mut m, "itl", &itl);
    spread(&mut m, "e2el", &e2el);
    m.insert("input_lens".into(), json!(outcomes.iter().map(|o| o.prompt_tokens).collect::<Vec<_>>()));
    m.insert("output_lens".into(), json!(outcomes.iter().map(|o| o.output_tokens).collect::<Vec<_>>()));
    m.insert("asked_output_lens".into(), json!(outcomes.iter().map(|o| o.asked).collect::<Vec<_>>()));
    m.insert("finish_reasons".into(), json!(outcomes.iter().map(|o| o.finish.as_str()).collect::<Vec<_>>()));
    m.insert("ttfts".into(), json!(outcomes.iter().map(|o| o.ttft).collect::<Vec<_>>()));
    m.insert("errors".into(), json!(outcomes.iter().map(|o| o.error.as_str()).collect::<Vec<_>>()));
    Value::Object(m)
}

/// The short table printed after a run.
pub fn table(s: &Value) -> String {
    let num = |k: &str| s[k].as_f64().map_or("-".to_string(), |v| format!("{v:.2}"));
    let int = |k: &str| s[k].as_u64().map_or("-".to_string(), |v| v.to_string());
    let mut rows = vec![
        ("Successful requests".to_string(), int("completed")),
        ("Failed requests".to_string(), int("failed")),
        ("Requests not sent (--time-limit)".to_string(), int("not_sent")),
        ("Outputs not of the asked length".to_string(), int("length_mismatches")),
        ("Maximum request concurrency".to_string(), int("max_concurrency")),
        ("Benchmark duration (s)".to_string(), num("duration")),
        ("Total input tokens".to_string(), int("total_input_tokens")),
        ("Total generated tokens".to_string(), int("total_output_tokens")),
        ("Request throughput (req/s)".to_string(), num("request_throughput")),
        ("Output token throughput (tok/s)".to_string(), num("output_throughput")),
        ("Total token throughput (tok/s)".to_string(), num("total_token_throughput")),
    ];
    for (label, key) in [("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl")] {
        for stat in ["mean", "median", "p99"] {
            rows.push((format!("{stat} {label} (ms)"), num(&format!("{stat}_{key}_ms"))));
        }
    }
    let mut out = String::from("============ Serving Benchmark Result ============\n");
    for (label, value) in rows {
        out.push_str(&format!("{label:<40}{value:>10}\n"));
    }
    out.push_str("==================================================");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(ttft: f64, latency: f64, n: usize, itl: Vec<f64>) -> Outcome {
        Outcome { ok: true, prompt_tokens: 4, asked: n, output_tokens: n, ttft, latency, itl, ..Outcome::default() }
    }

    #[test]
    fn percentiles_interpolate_as_numpy_does() {
        assert_eq!(percentile(&[3.0, 1.0, 2.0, 4.0], 50.0), 2.5);
        assert_eq!(percentile(&[1.0], 99.0), 1.0);
        assert!((percentile(&(1..=100).map(f64::from).collect::<Vec<_>>(), 99.0) - 99.01).abs() < 1e-9);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn figures_count_completed_requests_and_failures_apart() {
        let failed = Outcome { error: "HTTP 400".into(), asked: 3, ..Outcome::default() };
        let outs = vec![done(0.1, 0.5, 5, vec![0.1; 4]), done(0.3, 0.7, 5, vec![0.1; 4]), failed];
        let s = summarize(json!({"max_concurrency": 2}), &outs, 2.0);
        assert_eq!((s["completed"].as_u64(), s["failed"].as_u64()), (Some(2), Some(1)));
        assert_eq!(s["total_output_tokens"], 10);
        assert_eq!(s["output_throughput"], 5.0);
        assert_eq!(s["request_throughput"], 1.0);
        assert!((s["mean_ttft_ms"].as_f64().unwrap() - 200.0).abs() < 1e-9);
        assert!((s["median_tpot_ms"].as_f64().unwrap() - 100.0).abs() < 1e-9);
        assert_eq!(s["errors"][2], "HTTP 400");
        assert!(table(&s).contains("Failed requests"));
    }
}
