//! `/metrics` after known requests: the latency histograms (end to end, time per output token,
//! inter-token latency, queue time) count what was served, and the cache and pool gauges say
//! what the engine holds.

mod serve_util;

use serde_json::json;
use serve_util::Server;

#[test]
fn latency_histograms_and_pool_gauges_count_the_requests() {
    let s = Server::start(&[]);
    let body = json!({"prompt": [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170],
                      "max_tokens": 5, "temperature": 0, "ignore_eos": true, "n": 2});
    for _ in 0..3 {
        assert_eq!(s.post("/v1/completions", &body).status, 200);
    }
    let one = json!({"prompt": [5], "max_tokens": 1, "ignore_eos": true});
    assert_eq!(s.post("/v1/completions", &one).status, 200);
    // 7 sequences: 6 of 5 tokens (4 gaps each), 1 of 1 token.
    assert_eq!(s.metric("tensorfold_e2e_request_latency_seconds_count"), 7.0);
    assert_eq!(s.metric("tensorfold_request_queue_time_seconds_count"), 7.0);
    assert_eq!(s.metric("tensorfold_time_to_first_token_seconds_count"), 7.0);
    assert_eq!(s.metric("tensorfold_time_per_output_token_seconds_count"), 6.0);
    assert_eq!(s.metric("tensorfold_inter_token_latency_seconds_count"), 24.0);
    let text = s.get("/metrics").text();
    for series in [
        "tensorfold_e2e_request_latency_seconds_bucket{le=\"+Inf\"} 7",
        "tensorfold_inter_token_latency_seconds_bucket{le=\"0.01\"}",
        "tensorfold_request_queue_time_seconds_sum",
        "# TYPE tensorfold_kv_cache_usage_perc gauge",
        "tensorfold_state_slots_total 0",
        "tensorfold_running 0",
        "tensorfold_queue_depth 0",
    ] {
        assert!(text.contains(series), "{series} in {text}");
    }
    // The second and third requests found the first's whole block in the prefix cache.
    assert!(s.metric("tensorfold_prefix_cache_hit_tokens_total") >= 32.0, "{text}");
    assert!(s.metric("tensorfold_prefix_cache_query_tokens_total") >= 6.0 * 17.0 + 1.0);
    // Finished sequences' blocks stay cached (in use by none, findable).
    let perc = s.metric("tensorfold_kv_cache_usage_perc");
    assert!((0.0..=1.0).contains(&perc), "{perc}");
}
