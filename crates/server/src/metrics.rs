//! Prometheus text exposition, rendered from the engine's counters and the server's own ones
//! (held in the server state: no global recorder).

use crate::histogram::{self, Histogram};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tf_engine::engine::EngineStats;

/// Counters the HTTP side keeps.
#[derive(Debug)]
pub struct ServerMetrics {
    /// Time from a request's arrival to each sequence's first token.
    pub ttft: Histogram,
    /// Time from a request's arrival to each sequence's end.
    pub e2e: Histogram,
    /// Per sequence of more than one token: (end - first token) / (tokens - 1).
    pub tpot: Histogram,
    /// Between consecutive tokens of a sequence.
    pub itl: Histogram,
    /// From the engine taking a sequence to its first round.
    pub queue: Histogram,
    /// Requests refused because the queue was full.
    pub rejected_queue_full: AtomicU64,
    /// Responses by HTTP status.
    responses: Mutex<BTreeMap<u16, u64>>,
}

impl Default for ServerMetrics {
    fn default() -> ServerMetrics {
        ServerMetrics {
            ttft: Histogram::new(histogram::TTFT),
            e2e: Histogram::new(histogram::REQUEST),
            tpot: Histogram::new(histogram::PER_TOKEN),
            itl: Histogram::new(histogram::PER_TOKEN),
            queue: Histogram::new(histogram::REQUEST),
            rejected_queue_full: AtomicU64::new(0),
            responses: Mutex::new(BTreeMap::new()),
        }
    }
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
        let (kv_used, kv_total) = (load(&engine.kv_blocks_used) as f64, load(&engine.kv_blocks_total) as f64);
        let kv_perc = if kv_total > 0.0 { kv_used / kv_total } else { 0.0 };
        let series: [(&str, &str, &str, f64); 18] = [
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
            ("tensorfold_kv_blocks_used", "gauge", "KV blocks in use.", kv_used),
            ("tensorfold_kv_blocks_total", "gauge", "KV blocks in the pool.", kv_total),
            ("tensorfold_kv_cache_usage_perc", "gauge", "KV blocks in use, as a fraction of the pool.", kv_perc),
            (
                "tensorfold_state_slots_used",
                "gauge",
                "Live state slots in use (models with recurrent layers).",
                load(&engine.state_slots_used) as f64,
            ),
            ("tensorfold_state_slots_total", "gauge", "Live state slots.", load(&engine.state_slots_total) as f64),
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
                "Rounds queued before the tokens of the round before them were reported.",
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
            ("tensorfold_draft_cached_tokens_total", &engine.draft_cached_tokens),
        ];
        for (name, a) in counters {
            let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", load(a));
        }
        let cached = load(&engine.prefix_cached_blocks);
        let _ = writeln!(out, "# TYPE tensorfold_prefix_cache_blocks gauge\ntensorfold_prefix_cache_blocks {cached}");
        self.ttft.render(&mut out, "tensorfold_time_to_first_token_seconds", "Time to first token.");
        self.e2e.render(&mut out, "tensorfold_e2e_request_latency_seconds", "Arrival to a sequence's end.");
        let tpot = "Per sequence: (end - first token) / (output tokens - 1).";
        self.tpot.render(&mut out, "tensorfold_time_per_output_token_seconds", tpot);
        self.itl.render(&mut out, "tensorfold_inter_token_latency_seconds", "Between consecutive tokens.");
        self.queue.render(&mut out, "tensorfold_request_queue_time_seconds", "Engine queue to first round.");
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
    fn render_has_every_series() {
        let m = ServerMetrics::default();
        m.count_response(429);
        let s = m.render(&EngineStats::default(), 0);
        for name in ["tensorfold_kv_blocks_used 0", "tensorfold_queue_depth", "http_responses_total{code=\"429\"} 1"] {
            assert!(s.contains(name), "{name}");
        }
    }
}
