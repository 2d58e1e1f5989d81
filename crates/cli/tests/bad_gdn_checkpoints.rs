//! Qwen3.5 / Qwen3-Next checkpoints whose Gated DeltaNet tensors disagree with their config
//! (conv kernel, key or value heads, head widths) are refused by `tensorfold check` with exit
//! code 2 and one line naming the file, the tensor, the shape expected and the shape found.

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
    for f in ["qwen3_5", "qwen3_next"] {
        let (code, err) = check(&fixture(f));
        assert_eq!(code, Some(0), "{f}: {err}");
    }
}

#[test]
fn a_conv_kernel_the_weights_do_not_have() {
    let d = with_config("qwen3_5", "linear_conv_kernel_dim", 3.into());
    refused(d.path(), &["model.safetensors", "model.layers.0.linear_attn.conv1d.weight", "[128, 1, 3]", "[128, 1, 4]"]);
}

#[test]
fn head_counts_and_widths_the_weights_do_not_have() {
    // Eight value heads: the conv covers 2 * 2 * 16 + 8 * 16 channels.
    let d = with_config("qwen3_5", "linear_num_value_heads", 8.into());
    refused(d.path(), &["model.layers.0.linear_attn.in_proj_qkv.weight", "[192, 64]", "[128, 64]"]);
    let d = with_config("qwen3_5", "linear_value_head_dim", 8.into());
    refused(d.path(), &["model.layers.0.linear_attn.in_proj_qkv.weight", "[96, 64]", "[128, 64]"]);
    // Qwen3-Next's fused projection: per key head q, k (16 each), v and z (2 heads of 16 each).
    let d = with_config("qwen3_next", "linear_key_head_dim", 8.into());
    refused(d.path(), &["model.layers.0.linear_attn.in_proj_qkvz.weight", "[160, 64]", "[192, 64]"]);
}

#[test]
fn value_heads_the_key_heads_do_not_divide() {
    let d = with_config("qwen3_5", "linear_num_key_heads", 3.into());
    refused(d.path(), &["config.json", "linear_num_key_heads 3 does not divide linear_num_value_heads 4"]);
}
