//! Cumulative Prometheus histograms of durations, with vLLM's bucket bounds for each series.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bounds (seconds) of time to first token (vLLM's).
pub const TTFT: &[f64] = &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
/// Bounds (seconds) of whole-request latencies: end to end, queue time (vLLM's).
pub const REQUEST: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
/// Bounds (seconds) of per-token times: time per output token, inter-token latency (vLLM's).
pub const PER_TOKEN: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];

/// A cumulative histogram of durations.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations at or below each bound.
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// An empty histogram over `bounds` (seconds, increasing).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        let buckets = bounds.iter().map(|_| AtomicU64::new(0)).collect();
        Histogram { bounds, buckets, count: AtomicU64::new(0), sum_micros: AtomicU64::new(0) }
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (b, &le) in self.buckets.iter().zip(self.bounds) {
            if s <= le {
                b.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Appends the series `name` to `out`.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, le) in self.buckets.iter().zip(self.bounds) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {}", b.load(Ordering::Relaxed));
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::new(TTFT);
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
}
