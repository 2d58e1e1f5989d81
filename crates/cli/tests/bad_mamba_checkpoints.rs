//! Nemotron-H checkpoints whose Mamba2 state tensors disagree with their config (conv kernel,
//! head counts, state size, groups) are refused by `tensorfold check` with exit code 2 and one
//! line naming the file, the tensor, the shape expected and the shape found.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/nemotron_h")
}

/// A copy of the fixture whose config.json has `key` set to `value`.
fn with_config(key: &str, value: serde_json::Value) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
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
fn the_fixture_passes() {
    let (code, err) = check(&fixture());
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_conv_kernel_the_weights_do_not_have() {
    let d = with_config("conv_kernel", 3.into());
    refused(
        d.path(),
        &["model.safetensors", "backbone.layers.0.mixer.conv1d.weight", "expected [128, 1, 3]", "[128, 1, 4]"],
    );
}

#[test]
fn groups_or_state_size_that_change_the_in_projection() {
    // x B C grows by 2 * 16 per extra group: in_proj has 64 + 192 + 8 rows, not 200.
    let d = with_config("n_groups", 4.into());
    refused(d.path(), &["backbone.layers.0.mixer.in_proj.weight", "expected [264, 64]", "[200, 64]"]);
    let d = with_config("ssm_state_size", 32.into());
    refused(d.path(), &["backbone.layers.0.mixer.in_proj.weight", "expected [264, 64]", "[200, 64]"]);
}

#[test]
fn head_counts_the_weights_do_not_have() {
    // 16 heads of 4: z and x keep their width, dt doubles (in_proj 64 + 128 + 16 rows).
    let d = with_config("mamba_num_heads", 16.into());
    let d = {
        let path = d.path().join("config.json");
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        v["mamba_head_dim"] = 4.into();
        std::fs::write(&path, v.to_string()).unwrap();
        d
    };
    refused(d.path(), &["backbone.layers.0.mixer.in_proj.weight", "expected [208, 64]", "[200, 64]"]);
}

#[test]
fn groups_that_do_not_divide_the_heads() {
    let d = with_config("n_groups", 3.into());
    refused(d.path(), &["config.json", "n_groups 3 does not divide mamba_num_heads 8"]);
}
