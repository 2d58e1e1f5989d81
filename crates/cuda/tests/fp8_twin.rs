//! Each FP8 fixture on the GPU equals, bit for bit, its bf16 twin: the same checkpoint with every
//! FP8 weight replaced by its bf16 weight (fp8_host.rs: code times block scale, rounded once)
//! and no quantization_config. Every prompt's logits at every position and 16 greedy tokens'
//! logits: the FP8 paths (FP8 GEMV, the scratch, the grouped FP8 GEMV of MoE experts, gate and
//! up apart) against the bf16 ones (packed gate/up, TMA GEMVs, wgmma). Without a GPU it prints
//! "skipped" and passes.

mod common;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tf_backend::Backend;
use tf_core::DType;
use tf_engine::Runner;
use tf_formats::{Checkpoint, TensorView};
use tf_models::Model;
use tf_models::config::RawConfig;
use tf_testkit::{argmax, fixture, golden};

/// The FP8 fixtures (scripts/fixture_fp8.py) whose family runs on CUDA, but not the MLA ones:
/// their absorbed `kv_b_proj` is dequantized on the host to code x scale in f32, where the twin
/// holds its bf16 rounding, so the two differ there by design.
fn fp8() -> impl Iterator<Item = &'static str> {
    (tf_testkit::FP8_FIXTURES.iter())
        .filter(|&&(_, source)| tf_testkit::on_cuda(source) && !source.starts_with("deepseek_v3"))
        .map(|&(f, _)| f)
}

/// The safetensors name of a dtype the fixtures hold (besides FP8).
fn st_dtype(d: DType) -> &'static str {
    match d {
        DType::BF16 => "BF16",
        DType::F16 => "F16",
        DType::F32 => "F32",
        other => panic!("a fixture tensor of dtype {other}"),
    }
}

/// Writes `tensors` (name, safetensors dtype, shape, bytes) as one safetensors file.
fn write_safetensors(path: &Path, tensors: &[(String, &str, Vec<usize>, Vec<u8>)]) {
    let (mut header, mut data) = (BTreeMap::new(), Vec::new());
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [data.len(), data.len() + bytes.len()]}),
        );
        data.extend_from_slice(bytes);
    }
    let mut text = serde_json::to_string(&header).unwrap().into_bytes();
    while text.len() % 8 != 0 {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(data);
    std::fs::write(path, out).unwrap();
}

/// The bf16 twin of FP8 fixture `dir`, written under `out`.
fn twin(dir: &Path, out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"] {
        if dir.join(f).exists() {
            std::fs::copy(dir.join(f), out.join(f)).unwrap();
        }
    }
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let raw = RawConfig::parse(&dir.join("config.json"), &text).unwrap();
    let q = tf_models::quant_config::fp8_config(&raw).unwrap().expect("an FP8 fixture");
    let mut config: Value = serde_json::from_str(&text).unwrap();
    config.as_object_mut().unwrap().remove("quantization_config");
    std::fs::write(out.join("config.json"), config.to_string()).unwrap();
    let ckpt = Checkpoint::open(dir).unwrap();
    let mut names: Vec<&str> = ckpt.names().collect();
    names.sort();
    let get = |n: &str| -> TensorView { ckpt.get(n).unwrap().unwrap() };
    let scale_names: Vec<String> = names
        .iter()
        .filter(|n| get(n).dtype == DType::F8E4M3)
        .map(|n| tf_models::fp8_weights::scale_name(&q, n))
        .collect();
    let mut tensors = Vec::new();
    for &n in names.iter().filter(|n| !scale_names.iter().any(|s| s == *n)) {
        let t = get(n);
        if t.dtype == DType::F8E4M3 {
            let s = tf_models::fp8_weights::scales(&q, &t, &get(&tf_models::fp8_weights::scale_name(&q, n))).unwrap();
            let (rows, cols) = (t.shape[0], t.shape[1]);
            let bits = tf_cuda::fp8_dequantize_bf16(t.data.as_bytes(), rows, cols, &s);
            tensors.push((n.to_string(), "BF16", t.shape.clone(), bits.iter().flat_map(|b| b.to_le_bytes()).collect()));
        } else {
            tensors.push((n.to_string(), st_dtype(t.dtype), t.shape.clone(), t.data.as_bytes().to_vec()));
        }
    }
    write_safetensors(&out.join("model.safetensors"), &tensors);
}

/// Every prompt's logits at every position, then 16 greedy tokens and their logits, as bits.
fn run<B: Backend>(b: &B, dir: &Path, prompts: &[Vec<i64>]) -> Vec<u32> {
    let m = Model::open(dir, b).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut out = Vec::new();
    for p in prompts {
        let ids = m.vocab.check(p).unwrap();
        let mut r = Runner::new(&m, b, ids.len() + 16).unwrap();
        let logits = r.prefill(&ids, 5, true);
        out.extend(logits.iter().map(|v| v.to_bits()));
        let mut last = logits[logits.len() - m.vocab.rows()..].to_vec();
        for _ in 0..16 {
            let id = m.vocab.sampled(argmax(&last));
            out.push(id);
            last = r.feed(&[id], false);
            out.extend(last.iter().map(|v| v.to_bits()));
        }
    }
    out
}

#[test]
fn fp8_fixtures_equal_their_bf16_twins_bit_for_bit() {
    let Some(b) = common::backend() else { return };
    let root: PathBuf = std::env::temp_dir().join(format!("tf-fp8-twin-{}", std::process::id()));
    for family in fp8() {
        let dir = fixture(family);
        let out = root.join(family);
        twin(&dir, &out);
        let prompts = golden(&dir).prompts;
        assert!(run(&b, &dir, &prompts) == run(&b, &out, &prompts), "{family}: FP8 differs from its bf16 twin");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_twin_of_a_fixture_holds_its_bf16_weights() {
    // Runs without a GPU: the twin loads on the CPU, and its weights are the FP8 ones rounded.
    let dir = fixture("qwen3_fp8");
    let out = std::env::temp_dir().join(format!("tf-fp8-twin-cpu-{}", std::process::id()));
    twin(&dir, &out);
    let ckpt = Checkpoint::open(&out).unwrap();
    let w = ckpt.get("model.layers.0.mlp.down_proj.weight").unwrap().unwrap();
    assert_eq!((w.dtype, w.shape.clone()), (DType::BF16, vec![64, 128]));
    assert!(ckpt.get("model.layers.0.mlp.down_proj.weight_scale_inv").unwrap().is_none());
    let cpu = tf_cpu::CpuBackend::new(1).unwrap();
    let m = Model::open(&out, &cpu).unwrap();
    assert_eq!(m.vocab.rows(), 512);
    let _ = std::fs::remove_dir_all(&out);
}
