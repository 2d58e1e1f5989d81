//! `bench-prefix` through the binary on the fixtures: later turns are served from the prefix
//! cache, the answers are identical without it, and the JSON carries every figure printed.

use std::path::Path;
use std::process::Command;

#[test]
fn bench_prefix_reports_hits_and_identical_answers() {
    let out_dir = tempfile::tempdir().unwrap();
    for family in ["qwen3", "gemma3"] {
        let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family);
        let json = out_dir.path().join(format!("{family}.json"));
        let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
            .args(["bench-prefix", "--model", model.to_str().unwrap(), "--system-len", "100", "--turns", "3"])
            .args(["--turn-len", "20", "--gen-len", "6", "--threads", "2", "--json", json.to_str().unwrap()])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{family}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("answers identical with and without the cache: true"), "{stdout}");
        assert!(stdout.contains("mean TTFT: off"), "{stdout}");
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let turns = doc["per_turn"].as_array().unwrap();
        assert_eq!(turns.len(), 3);
        assert_eq!(turns[0]["cached_tokens"], 0, "{family}: the first turn has nothing cached");
        // Turn 2 resends turn 1's 120 prompt and 6 answer tokens, of which 7 whole blocks are cached.
        assert_eq!(turns[1]["prompt_tokens"], 146);
        assert_eq!(turns[1]["cached_tokens"], 112, "{family}");
        assert!(turns[2]["cached_tokens"].as_u64().unwrap() >= 128, "{family}");
        let hit_rate = doc["hit_rate"].as_f64().unwrap();
        assert!(hit_rate > 0.5 && hit_rate < 1.0, "{family}: {hit_rate}");
        assert_eq!(doc["identical"], true);
        assert!(doc["mean_on_ttft_ms"].as_f64().unwrap() > 0.0);
    }
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen3");
    let too_long = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["bench-prefix", "--model", model.to_str().unwrap(), "--threads", "1"])
        .output()
        .unwrap();
    assert_eq!(too_long.status.code(), Some(2), "the default 2000-token system prompt exceeds the fixture's context");
    assert!(String::from_utf8_lossy(&too_long.stderr).contains("must be non-empty and fit the context"));
}
