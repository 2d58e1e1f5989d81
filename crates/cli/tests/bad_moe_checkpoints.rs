//! GLM-4.5 MoE and MiniMax-M2 checkpoints whose experts, router, shared experts or attention
//! biases disagree with their config are refused by `tensorfold check` with exit code 2 and one line naming the
//! tensor and, for a shape, the shape expected and the shape found.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family)
}

/// A copy of the glm4_moe fixture whose config.json has `key` set to `value`.
fn with_config(key: &str, value: serde_json::Value) -> tempfile::TempDir {
    family_with_config("glm4_moe", key, value)
}

/// A copy of `family`'s fixture whose config.json has `key` set to `value`.
fn family_with_config(family: &str, key: &str, value: serde_json::Value) -> tempfile::TempDir {
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
    for family in ["glm4_moe", "minimax_m2"] {
        let (code, err) = check(&fixture(family));
        assert_eq!(code, Some(0), "{family}: {err}");
    }
}

#[test]
fn minimax_experts_and_norms_the_weights_do_not_have() {
    let d = family_with_config("minimax_m2", "num_local_experts", 16.into());
    refused(d.path(), &["model.layers.0.block_sparse_moe.gate.weight", "expected [16, 64]", "[8, 64]"]);
    let d = family_with_config("minimax_m2", "intermediate_size", 16.into());
    refused(d.path(), &["model.layers.0.block_sparse_moe.experts.0.w1.weight", "expected [16, 64]", "[32, 64]"]);
    let d = family_with_config("minimax_m2", "qk_norm_type", "per_head".into());
    refused(d.path(), &["config.json", "qk_norm_type per_head"]);
}

#[test]
fn an_expert_count_the_router_does_not_have() {
    let d = with_config("n_routed_experts", 16.into());
    refused(d.path(), &["model.layers.1.mlp.gate.weight", "expected [16, 64]", "[8, 64]"]);
}

#[test]
fn expert_and_shared_expert_widths_the_weights_do_not_have() {
    let d = with_config("moe_intermediate_size", 16.into());
    refused(d.path(), &["model.layers.1.mlp.experts.0.gate_proj.weight", "expected [16, 64]", "[32, 64]"]);
    // Two shared experts make one MLP of twice the width.
    let d = with_config("n_shared_experts", 2.into());
    refused(d.path(), &["model.layers.1.mlp.shared_experts.gate_proj.weight", "expected [64, 64]", "[32, 64]"]);
}

#[test]
fn dense_layers_and_biases_the_config_does_not_say() {
    let d = with_config("first_k_dense_replace", 2.into());
    refused(d.path(), &["model.layers.1.mlp.gate_proj.weight", "missing"]);
    let d = with_config("attention_bias", false.into());
    refused(d.path(), &["does not use", "model.layers.0.self_attn.k_proj.bias"]);
}

#[test]
fn groups_the_router_cannot_form() {
    let d = with_config("n_group", 3.into());
    refused(d.path(), &["config.json", "n_group 3 does not divide 8 experts"]);
    let d = with_config("topk_group", 3.into());
    refused(d.path(), &["config.json", "topk_group 3 of 2 groups"]);
}

/// A copy of the fixture with an MTP layer's tensor (`model.layers.3.eh_proj.weight`) added to
/// its checkpoint and `num_nextn_predict_layers` set to `mtp`.
fn with_mtp_tensor(mtp: u64) -> tempfile::TempDir {
    let d = with_config("num_nextn_predict_layers", mtp.into());
    let path = d.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let extra = vec![0u8; 64 * 128 * 2];
    let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> =
        st.tensors().into_iter().map(|(n, v)| (n.to_string(), v)).collect();
    let mtp_view = safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, vec![64, 128], &extra).unwrap();
    views.push(("model.layers.3.eh_proj.weight".into(), mtp_view));
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    let out = safetensors::serialize(views, Some(meta)).unwrap();
    std::fs::write(&path, out).unwrap();
    d
}

#[test]
fn mtp_layers_the_config_names_are_left_unread_and_others_refused() {
    let d = with_mtp_tensor(1);
    let (code, err) = check(d.path());
    assert_eq!(code, Some(0), "{err}");
    let d = with_mtp_tensor(0);
    refused(d.path(), &["does not use", "model.layers.3.eh_proj.weight"]);
}
