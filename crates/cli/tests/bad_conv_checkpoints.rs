//! LFM2 / LFM3 / LFM2-MoE checkpoints whose short conv, MLP, expert or gate tensors disagree
//! with their config (conv kernel, layer pattern, the MLP sizing rule, expert count, the attention
//! gate) are refused by `tensorfold check` with exit code 2 and one line naming the file, the
//! tensor, the shape expected and the shape found (or the setting refused).

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family)
}

/// A copy of `family`'s fixture whose config.json has `key` set to `value`.
fn with_config(family: &str, key: &str, value: serde_json::Value) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(family)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    let path = tmp.path().join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v[key] = value;
    std::fs::write(&path, v.to_string()).unwrap();
    tmp
}

/// `tensorfold check` on `dir`: its exit code and stderr.
fn check(dir: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold")).args(["check", "--model"]).arg(dir).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Asserts a clean one-line refusal holding every needle.
fn refused(dir: &Path, needles: &[&str]) {
    let (code, err) = check(dir);
    assert!(!err.contains("panicked"), "panic: {err}");
    assert_eq!(code, Some(2), "expected exit 2, stderr: {err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "'{n}' not in: {err}");
    }
}

#[test]
fn the_fixtures_pass() {
    for f in ["lfm2", "lfm3", "lfm2_moe"] {
        let (code, err) = check(&fixture(f));
        assert_eq!(code, Some(0), "{f}: {err}");
    }
}

#[test]
fn a_conv_kernel_the_weights_do_not_have() {
    let d = with_config("lfm2", "conv_L_cache", 4.into());
    refused(d.path(), &["model.safetensors", "model.layers.0.conv.conv.weight", "[64, 1, 4]", "[64, 1, 3]"]);
    let d = with_config("lfm3", "conv_L_cache", 3.into());
    refused(d.path(), &["model.layers.0.conv.conv.weight", "[64, 1, 3]", "[64, 1, 4]"]);
}

#[test]
fn a_layer_pattern_the_weights_do_not_have() {
    let d = with_config("lfm2", "layer_types", serde_json::json!(["full_attention", "full_attention", "conv"]));
    refused(d.path(), &["model.layers.0.self_attn.q_proj.weight", "missing"]);
    let d = with_config("lfm2", "layer_types", serde_json::json!(["conv", "mamba", "conv"]));
    refused(d.path(), &["config.json", "mamba"]);
}

#[test]
fn an_mlp_width_the_sizing_rule_does_not_give() {
    // int(2 * 128 / 3) = 85 rounds up to 128, not the checkpoint's 96.
    let d = with_config("lfm2", "block_multiple_of", 64.into());
    refused(d.path(), &["model.layers.0.feed_forward.w1.weight", "[128, 64]", "[96, 64]"]);
}

#[test]
fn expert_counts_and_biases_the_weights_do_not_have() {
    let d = with_config("lfm2_moe", "num_experts", 4.into());
    refused(d.path(), &["model.layers.1.feed_forward.gate.weight", "[4, 64]", "[8, 64]"]);
    let d = with_config("lfm2_moe", "use_expert_bias", false.into());
    refused(d.path(), &["expert_bias"]);
}

#[test]
fn an_attention_gate_the_config_does_not_read() {
    let d = with_config("lfm3", "use_attention_gate", false.into());
    refused(d.path(), &["model.layers.1.self_attn.gate_proj.weight"]);
}

#[test]
fn conv_biases_are_refused_by_name() {
    let d = with_config("lfm2", "conv_bias", true.into());
    refused(d.path(), &["config.json", "conv_bias"]);
}
