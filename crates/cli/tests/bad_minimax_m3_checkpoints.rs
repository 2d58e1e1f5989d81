//! MiniMax M3 checkpoints whose lightning indexer tensors disagree with their config (head
//! count, head width, norms, sparse layers) or whose config asks for what is not run are
//! refused by `tensorfold check` with exit code 2 and one line naming the tensor (expected and
//! found) or the field; the fixtures' vision tower is left unread.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family)
}

/// A copy of the minimax_m3 fixture whose `text_config` has `key` set to `value`.
fn with_config(key: &str, value: serde_json::Value) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture("minimax_m3")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    let path = tmp.path().join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v["text_config"][key] = value;
    std::fs::write(&path, v.to_string()).unwrap();
    tmp
}

/// A copy of the minimax_m3 fixture whose checkpoint has `name` as a zero bf16 tensor of
/// `shape`, replacing the one of that name.
fn with_tensor(name: &str, shape: &[usize]) -> tempfile::TempDir {
    let d = with_config("index_n_heads", 2.into());
    let path = d.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let zeros = vec![0u8; shape.iter().product::<usize>() * 2];
    let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> =
        st.tensors().into_iter().filter(|(n, _)| n != name).map(|(n, v)| (n.to_string(), v)).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, shape.to_vec(), &zeros).unwrap();
    views.push((name.into(), view));
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    std::fs::write(&path, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
    d
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

const ATTN: &str = "language_model.model.layers.1.self_attn.";

#[test]
fn the_fixtures_pass() {
    for family in ["minimax_m3", "minimax_m3_cover"] {
        let (code, err) = check(&fixture(family));
        assert_eq!(code, Some(0), "{family}: {err}");
    }
}

#[test]
fn indexer_heads_and_widths_the_projections_do_not_have() {
    let d = with_config("index_n_heads", 4.into());
    refused(d.path(), &[&format!("{ATTN}index_q_proj.weight"), "expected [64, 64]", "[32, 64]"]);
    let d = with_config("index_head_dim", 32.into());
    refused(d.path(), &[&format!("{ATTN}index_q_proj.weight"), "expected [64, 64]", "[32, 64]"]);
    let name = format!("{ATTN}index_k_proj.weight");
    refused(with_tensor(&name, &[32, 64]).path(), &[&name, "expected [16, 64]", "[32, 64]"]);
    let name = format!("{ATTN}index_k_norm.weight");
    refused(with_tensor(&name, &[8]).path(), &[&name, "expected [16]", "[8]"]);
    let name = format!("{ATTN}index_q_norm.weight");
    refused(with_tensor(&name, &[32]).path(), &[&name, "expected [16]", "[32]"]);
}

#[test]
fn sparse_layers_the_checkpoint_does_not_have() {
    // Layer 0 made sparse: its indexer is missing.
    let d = with_config("layer_types", serde_json::json!(["minimax_m3_sparse", "minimax_m3_sparse", "full_attention"]));
    refused(d.path(), &["language_model.model.layers.0.self_attn.index_q_proj.weight", "missing"]);
    // Layer 2 made full: its indexer is left over.
    let d = with_config("layer_types", serde_json::json!(["full_attention", "minimax_m3_sparse", "full_attention"]));
    refused(d.path(), &["does not use", "language_model.model.layers.2.self_attn.index_k_norm.weight"]);
}

#[test]
fn options_not_run_are_refused_by_name() {
    for (key, value, needle) in [
        ("index_local_blocks", serde_json::json!(4), "index_local_blocks 4"),
        ("index_n_heads", serde_json::json!(3), "index_n_heads 3"),
        ("index_head_dim", serde_json::json!(8), "index_head_dim 8"),
        ("swiglu_alpha", serde_json::json!(1.5), "swiglu_alpha"),
        ("rotary_dim", serde_json::json!(32), "rotary_dim 32"),
        (
            "layer_types",
            serde_json::json!(["full_attention", "sliding_attention", "full_attention"]),
            "sliding_attention",
        ),
    ] {
        refused(with_config(key, value).path(), &[needle]);
    }
}
