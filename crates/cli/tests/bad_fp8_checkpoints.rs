//! Bad FP8 checkpoints derived from the FP8 fixtures (SECURITY case 33): scales of the wrong
//! shape or dtype, non-finite or non-positive; an unknown `quant_method` or `fmt`; a block size
//! that does not tile the weights; activation quantization that cannot be honoured. Each is
//! refused by `tensorfold check` with exit code 2 and one line naming it, never a panic.

use safetensors::tensor::{Dtype, TensorView};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

const Q: &str = "model.layers.0.self_attn.q_proj.weight";

/// A copy of a fixture's checkpoint files in a temp dir.
fn copy(family: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family);
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    tmp
}

/// Rewrites `model.safetensors` after `edit` changes its tensors.
fn rewrite(dir: &Path, edit: &dyn Fn(&mut Tensors)) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut t: Tensors =
        st.tensors().into_iter().map(|(n, v)| (n, (v.dtype(), v.shape().to_vec(), v.data().to_vec()))).collect();
    edit(&mut t);
    let views: Vec<(String, TensorView)> =
        t.iter().map(|(n, (d, s, b))| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize_to_file(views, None, &path).unwrap();
}

/// Edits `config.json`'s `quantization_config`.
fn edit_quant(dir: &Path, edit: &dyn Fn(&mut Value)) {
    let path = dir.join("config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v["quantization_config"]);
    std::fs::write(&path, v.to_string()).unwrap();
}

/// Sets the first f32 scale of `name`.
fn first_scale(t: &mut Tensors, name: &str, v: f32) {
    t.get_mut(name).unwrap().2[..4].copy_from_slice(&v.to_le_bytes());
}

enum Edit {
    Tensors(&'static dyn Fn(&mut Tensors)),
    Quant(&'static dyn Fn(&mut Value)),
}

/// (fixture, edit, what the one-line refusal must name).
fn cases() -> Vec<(&'static str, Edit, Vec<&'static str>)> {
    let inv = "model.layers.0.self_attn.q_proj.weight_scale_inv";
    vec![
        (
            "qwen3_fp8",
            Edit::Tensors(&|t| {
                let s = t.get_mut("model.layers.0.self_attn.q_proj.weight_scale_inv").unwrap();
                (s.1, s.2) = (vec![2, 2], s.2[..16].to_vec());
            }),
            vec![inv, "shape [2, 2] does not tile the [128, 64] weight", "weight_block_size [48, 48]", "[3, 2]"],
        ),
        (
            "qwen3_fp8",
            Edit::Tensors(&|t| {
                let s = t.get_mut("model.layers.0.self_attn.q_proj.weight_scale_inv").unwrap();
                (s.0, s.2) = (Dtype::I64, [s.2.clone(), s.2.clone()].concat());
            }),
            vec![inv, "dtype i64 is not a float type"],
        ),
        (
            "qwen3_fp8",
            Edit::Tensors(&|t| first_scale(t, "model.layers.0.self_attn.q_proj.weight_scale_inv", f32::NAN)),
            vec![inv, "scale [0, 0] is NaN", "finite and above zero"],
        ),
        (
            "qwen3_fp8",
            Edit::Tensors(&|t| first_scale(t, "model.layers.0.self_attn.q_proj.weight_scale_inv", 0.0)),
            vec![inv, "scale [0, 0] is 0;"],
        ),
        (
            "qwen3_fp8",
            Edit::Tensors(&|t| first_scale(t, "model.layers.0.self_attn.q_proj.weight_scale_inv", -0.5)),
            vec![inv, "scale [0, 0] is -0.5;"],
        ),
        (
            "qwen3_fp8",
            Edit::Tensors(&|t| first_scale(t, "model.layers.0.self_attn.q_proj.weight_scale_inv", f32::INFINITY)),
            vec![inv, "is inf;"],
        ),
        (
            "qwen3_fp8",
            Edit::Tensors(&|t| drop(t.remove("model.layers.0.self_attn.q_proj.weight_scale_inv"))),
            vec![inv, "is missing"],
        ),
        (
            "qwen3_fp8",
            Edit::Quant(&|q| q["quant_method"] = json!("awq")),
            vec!["config.json", "quant_method 'awq' is not supported"],
        ),
        ("qwen3_fp8", Edit::Quant(&|q| q["quant_method"] = json!("gptq")), vec!["quant_method 'gptq'"]),
        ("qwen3_fp8", Edit::Quant(&|q| q["fmt"] = json!("e5m2")), vec!["config.json", "fmt 'e5m2' is not supported"]),
        ("qwen3_fp8", Edit::Quant(&|q| q["activation_scheme"] = json!("static")), vec!["activation_scheme 'static'"]),
        (
            "qwen3_fp8",
            Edit::Quant(&|q| q["weight_block_size"] = json!([32, 32])),
            vec![inv, "does not tile", "weight_block_size [32, 32]"],
        ),
        (
            "qwen3_fp8",
            Edit::Quant(&|q| q["weight_block_size"] = json!([48, 0])),
            vec!["config.json", "'weight_block_size' must be two positive integers"],
        ),
        ("qwen3_fp8", Edit::Quant(&|q| *q = Value::Null), vec![Q, "f8_e4m3 needs a quantization_config"]),
        (
            "qwen3_moe_fp8",
            Edit::Tensors(&|t| first_scale(t, "model.layers.1.mlp.experts.3.down_proj.weight_scale_inv", f32::NAN)),
            vec!["model.layers.1.mlp.experts.3.down_proj.weight_scale_inv", "is NaN"],
        ),
        (
            // MLA's absorbed kv_b_proj is dequantized on the host: its scales are checked first.
            "deepseek_v3_fp8",
            Edit::Tensors(&|t| {
                let s = t.get_mut("model.layers.0.self_attn.kv_b_proj.weight_scale_inv").unwrap();
                (s.1, s.2) = (vec![5, 2], [s.2.clone(), s.2.clone()].concat()[..40].to_vec());
            }),
            vec![
                "model.layers.0.self_attn.kv_b_proj.weight_scale_inv",
                "shape [5, 2] does not tile the [176, 32] weight",
                "[6, 1]",
            ],
        ),
        (
            // q_b_proj is split by rows at load (per-head nope / rope parts): a bad scale still names it.
            "deepseek_v3_fp8",
            Edit::Tensors(&|t| first_scale(t, "model.layers.1.self_attn.q_b_proj.weight_scale_inv", f32::NAN)),
            vec!["model.layers.1.self_attn.q_b_proj.weight_scale_inv", "is NaN"],
        ),
        (
            "minimax_m2_fp8",
            Edit::Tensors(&|t| drop(t.remove("model.layers.2.block_sparse_moe.experts.5.w2.weight_scale_inv"))),
            vec!["model.layers.2.block_sparse_moe.experts.5.w2.weight_scale_inv", "is missing"],
        ),
        (
            "qwen3_ct_fp8",
            Edit::Tensors(&|t| {
                let s = t.get_mut("model.layers.0.self_attn.q_proj.weight_scale").unwrap();
                s.1 = vec![128];
            }),
            vec!["q_proj.weight_scale", "shape [128] does not tile", "one scale per row", "[128, 1]"],
        ),
        (
            "qwen3_ct_fp8",
            Edit::Quant(&|q| {
                q["config_groups"]["group_0"]["input_activations"] =
                    json!({"num_bits": 8, "type": "float", "dynamic": false})
            }),
            vec!["config.json", "input_activations with stored (static) scales is not supported"],
        ),
    ]
}

#[test]
fn bad_fp8_checkpoints_are_refused_by_name() {
    for (i, (family, edit, needles)) in cases().into_iter().enumerate() {
        let dir = copy(family);
        match edit {
            Edit::Tensors(f) => rewrite(dir.path(), f),
            Edit::Quant(f) => edit_quant(dir.path(), f),
        }
        let out =
            Command::new(env!("CARGO_BIN_EXE_tensorfold")).args(["check", "--model"]).arg(dir.path()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "case {i}: panic: {err}");
        assert_eq!(out.status.code(), Some(2), "case {i}: expected exit 2, stderr: {err}");
        assert_eq!(err.trim().lines().count(), 1, "case {i}: not one line: {err}");
        for n in needles {
            assert!(err.contains(n), "case {i}: '{n}' not in: {err}");
        }
    }
}

#[test]
fn good_fp8_fixtures_pass_check() {
    for (family, _) in tf_testkit::FP8_FIXTURES {
        let dir = copy(family);
        let out =
            Command::new(env!("CARGO_BIN_EXE_tensorfold")).args(["check", "--model"]).arg(dir.path()).output().unwrap();
        assert!(out.status.success(), "{family}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
