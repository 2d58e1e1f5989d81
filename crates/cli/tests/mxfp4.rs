//! gpt-oss's MXFP4 experts (the release's layout, scripts/fixture_mxfp4.py) on the host
//! backends: logits and greedy continuations within the golden tolerance of transformers run on
//! the weights as its own `convert_moe_packed_tensors` dequantizes them; the engine's promises
//! hold over them; a scale that is not finite, a block of the wrong shape, and `mxfp4` on
//! another family are refused at load by name.

use std::path::{Path, PathBuf};
use tf_backend::RefBackend;
use tf_cpu::CpuBackend;
use tf_models::Model;
use tf_testkit::{check_concurrent_equals_solo, check_golden, fixture};

/// As golden.rs: f32 rounding moves the fixtures' O(1) logits by up to ~2e-5.
const TOL: f32 = 1e-4;

#[test]
fn golden_against_transformers_on_its_own_dequantization() {
    let cpu = CpuBackend::new(2).unwrap();
    check_golden(&RefBackend, "gpt_oss_mxfp4", &|_| TOL);
    check_golden(&cpu, "gpt_oss_mxfp4", &|_| TOL);
}

#[test]
fn concurrent_equals_solo_over_mxfp4_experts() {
    let cpu = || CpuBackend::new(2).unwrap();
    for seeded in [false, true] {
        check_concurrent_equals_solo(&cpu, "gpt_oss_mxfp4", seeded);
    }
}

/// A copy of the fixture in a temporary directory with `edit` applied to its tensors (raw bytes
/// by name) or config.
fn copy_with(
    edit_bytes: impl FnOnce(&mut Vec<u8>, &serde_json::Value),
    config: Option<(&str, &str)>,
) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let src = fixture("gpt_oss_mxfp4");
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"] {
        std::fs::copy(src.join(f), d.path().join(f)).unwrap();
    }
    let mut bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit_bytes(&mut bytes, &header);
    std::fs::write(d.path().join("model.safetensors"), bytes).unwrap();
    if let Some((key, value)) = config {
        let p = d.path().join("config.json");
        let mut c: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        c[key] = serde_json::from_str(value).unwrap();
        std::fs::write(p, c.to_string()).unwrap();
    }
    d
}

fn refusal(dir: &Path) -> String {
    match Model::open(dir, &RefBackend) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_scales_and_mxfp4_elsewhere_are_refused_by_name() {
    // The first scale byte of layer 0's down projection set to E8M0's NaN.
    let name = "model.layers.0.mlp.experts.down_proj_scales";
    let nan = copy_with(
        |bytes, header| {
            let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            let at = 8 + n + header[name]["data_offsets"][0].as_u64().unwrap() as usize;
            bytes[at] = 255;
        },
        None,
    );
    let e = refusal(nan.path());
    assert!(e.contains("down_proj_blocks") && e.contains("scale byte 255"), "{e}");
    // Another family saying mxfp4: refused by name.
    let other = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen3");
    let d = tempfile::tempdir().unwrap();
    for f in ["model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(other.join(f), d.path().join(f)).unwrap();
    }
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(other.join("config.json")).unwrap()).unwrap();
    c["quantization_config"] = serde_json::json!({"quant_method": "mxfp4"});
    std::fs::write(d.path().join("config.json"), c.to_string()).unwrap();
    assert!(refusal(d.path()).contains("quant_method 'mxfp4' is read only for gpt-oss"));
    // Blocks of the wrong shape (the config's hidden size against the stored blocks).
    let wide = copy_with(|_, _| {}, Some(("intermediate_size", "64")));
    assert!(refusal(wide.path()).contains("expected"), "{}", refusal(wide.path()));
}
