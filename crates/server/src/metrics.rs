//! Prometheus text exposition, rendered from the engine's counters and the server's own ones
//! (held in the server state: no global recorder).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tf_engine::engine::EngineStats;

/// Upper bounds (seconds) of the time-to-first-token histogram's buckets (vLLM's).
const TTFT_BUCKETS: [f64; 16] =
    [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];

/// A cumulative histogram of durations.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations at or below each bound of `TTFT_BUCKETS`.
    buckets: [AtomicU64; TTFT_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (b, &le) in self.buckets.iter().zip(&TTFT_BUCKETS) {
            if s <= le {
                b.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, le) in self.buckets.iter().zip(&TTFT_BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {}", b.load(Ordering::Relaxed));
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// Counters the HTTP side keeps.
#[derive(Debug, Default)]
pub struct ServerMetrics {
    /// Time from a request's arrival to each sequence's first token.
    pub ttft: Histogram,
    /// Requests refused because the queue was full.
    pub rejected_queue_full: AtomicU64,
    /// Responses by HTTP status.
    responses: Mutex<BTreeMap<u16, u64>>,
}

impl ServerMetrics {
    /// Counts one response.
    pub fn count_response(&self, status: u16) {
        if let Ok(mut m) = self.responses.lock() {
            *m.entry(status).or_default() += 1;
        }
    }

    /// The exposition text.
    pub fn render(&self, engine: &EngineStats, in_flight: usize) -> String {
        let mut out = String::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let series: [(&str, &str, &str, f64); 15] = [
            ("tensorfold_requests_total", "counter", "Sequences the engine accepted.", load(&engine.requests) as f64),
            (
                "tensorfold_prompt_tokens_total",
                "counter",
                "Prompt tokens prefilled.",
                load(&engine.prompt_tokens) as f64,
            ),
            (
                "tensorfold_generation_tokens_total",
                "counter",
                "Tokens generated.",
                load(&engine.generated_tokens) as f64,
            ),
            ("tensorfold_queue_depth", "gauge", "Sequences waiting in the engine.", load(&engine.waiting) as f64),
            ("tensorfold_running", "gauge", "Sequences running in the engine.", load(&engine.running) as f64),
            ("tensorfold_in_flight", "gauge", "Sequences admitted by the HTTP side.", in_flight as f64),
            ("tensorfold_rounds_total", "counter", "Engine rounds run.", load(&engine.rounds) as f64),
            (
                "tensorfold_round_seconds_total",
                "counter",
                "Time spent in engine rounds.",
                load(&engine.round_micros) as f64 / 1e6,
            ),
            ("tensorfold_kv_blocks_used", "gauge", "KV blocks in use.", load(&engine.kv_blocks_used) as f64),
            ("tensorfold_kv_blocks_total", "gauge", "KV blocks in the pool.", load(&engine.kv_blocks_total) as f64),
            ("tensorfold_preemptions_total", "counter", "Sequences preempted.", load(&engine.preemptions) as f64),
            (
                "tensorfold_device_sampled_rows_total",
                "counter",
                "Greedy rows picked on the backend (only their ids left the device).",
                load(&engine.device_sampled_rows) as f64,
            ),
            (
                "tensorfold_overlapped_rounds_total",
                "counter",
                "Greedy rounds queued before the ids of the round before them reached the host.",
                load(&engine.overlapped_rounds) as f64,
            ),
            (
                "tensorfold_candidate_rows_total",
                "counter",
                "Sampled rows drawn from candidates the backend selected (only those left the device).",
                load(&engine.candidate_rows) as f64,
            ),
            (
                "tensorfold_rejected_queue_full_total",
                "counter",
                "Requests refused with 429.",
                load(&self.rejected_queue_full) as f64,
            ),
        ];
        for (name, kind, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
        let counters = [
            ("tensorfold_prefix_cache_hit_tokens_total", &engine.prefix_hit_tokens),
            ("tensorfold_prefix_cache_query_tokens_total", &engine.prefix_query_tokens),
            ("tensorfold_draft_proposed_tokens_total", &engine.draft_proposed),
            ("tensorfold_draft_accepted_tokens_total", &engine.draft_accepted),
            ("tensorfold_draft_verify_rounds_total", &engine.draft_verifies),
            ("tensorfold_draft_time_microseconds_total", &engine.draft_micros),
        ];
        for (name, a) in counters {
            let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", load(a));
        }
        let cached = load(&engine.prefix_cached_blocks);
        let _ = writeln!(out, "# TYPE tensorfold_prefix_cache_blocks gauge\ntensorfold_prefix_cache_blocks {cached}");
        self.ttft.render(&mut out, "tensorfold_time_to_first_token_seconds", "Time to first token.");
        let _ = writeln!(out, "# HELP tensorfold_http_responses_total Responses by status.");
        let _ = writeln!(out, "# TYPE tensorfold_http_responses_total counter");
        if let Ok(m) = self.responses.lock() {
            for (code, n) in m.iter() {
                let _ = writeln!(out, "tensorfold_http_responses_total{{code=\"{code}\"}} {n}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_millis(300));
        let mut s = String::new();
        h.render(&mut s, "t", "x");
        assert!(s.contains("t_bucket{le=\"0.001\"} 0"));
        assert!(s.contains("t_bucket{le=\"0.005\"} 1"));
        assert!(s.contains("t_bucket{le=\"0.5\"} 2"));
        assert!(s.contains("t_bucket{le=\"+Inf\"} 2"));
        assert!(s.contains("t_count 2"));
    }

    #[test]
    fn render_has_every_series() {
        let m = ServerMetrics::default();
        m.count_response(429);
        let s = m.render(&EngineStats::default(), 0);
        for name in ["tensorfold_kv_blocks_used 0", "tensorfold_queue_depth", "http_responses_total{code=\"429\"} 1"] {
            assert!(s.contains(name), "{name}");
        }
    }
}
