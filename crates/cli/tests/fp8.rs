//! FP8 checkpoints on the host backends: each FP8 fixture's logits and greedy continuations
//! equal its dequantized f32 checkpoint's bit for bit and transformers' (run on the dequantized
//! weights) within the golden tolerance; the engine's promises hold over them; every E4M3 code
//! decodes as torch decodes it; FP8 weights are held at one byte each.

use std::path::Path;
use tf_backend::{Backend, HostMat, RefBackend};
use tf_cpu::CpuBackend;
use tf_engine::Runner;
use tf_formats::{Checkpoint, SafetensorsFile};
use tf_models::Model;
use tf_models::weights::Loader;
use tf_testkit::{FP8_FIXTURES, argmax, check_concurrent_equals_solo, check_golden, fixture, golden};

/// The FP8 fixtures (scripts/fixture_fp8.py).
fn fp8() -> impl Iterator<Item = &'static str> {
    FP8_FIXTURES.iter().map(|&(f, _)| f)
}

/// As golden.rs: f32 rounding moves the fixtures' O(1) logits by up to ~2e-5.
const TOL: f32 = 1e-4;

#[test]
fn golden_against_transformers_on_the_dequantized_weights() {
    let cpu = CpuBackend::new(2).unwrap();
    for family in fp8() {
        check_golden(&RefBackend, family, &|_| TOL);
        check_golden(&cpu, family, &|_| TOL);
    }
}

/// Every prompt's logits at every position, then 16 greedy tokens, as one bit pattern list.
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
fn fp8_equals_its_dequantized_f32_checkpoint_bit_for_bit() {
    let cpu = CpuBackend::new(2).unwrap();
    for family in fp8() {
        let dir = fixture(family);
        let prompts = golden(&dir).prompts;
        let want = run(&cpu, &dir.join("dequantized"), &prompts);
        assert!(run(&cpu, &dir, &prompts) == want, "{family}: cpu");
        assert!(
            run(&RefBackend, &dir, &prompts) == run(&RefBackend, &dir.join("dequantized"), &prompts),
            "{family}: ref"
        );
    }
}

#[test]
fn concurrent_equals_solo_over_fp8_experts() {
    for family in ["qwen3_moe_fp8", "glm4_moe_fp8", "deepseek_v3_fp8", "deepseek_v32_fp8"] {
        check_concurrent_equals_solo(&|| CpuBackend::new(2).unwrap(), family, true);
    }
}

#[test]
fn every_e4m3_code_decodes_as_torch_decodes_it() {
    let f = SafetensorsFile::open(&fixture("qwen3_fp8").join("codes.safetensors")).unwrap();
    let codes = f.tensor("codes").unwrap().unwrap();
    assert_eq!(codes.dtype, tf_core::DType::F8E4M3);
    let (ours, torch) = (codes.to_f32(), f.tensor("values").unwrap().unwrap().to_f32());
    assert_eq!(ours.len(), 256);
    for (c, (a, b)) in ours.iter().zip(&torch).enumerate() {
        assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "code {c:#04x}: {a} vs torch {b}");
    }
    assert_eq!(torch.iter().filter(|v| v.is_nan()).count(), 2);
}

#[test]
fn fp8_weights_are_held_at_one_byte_each() {
    let dir = fixture("qwen3_fp8");
    let ckpt = Checkpoint::open(&dir).unwrap();
    let config = tf_models::config::RawConfig::read(&dir.join("config.json")).unwrap();
    let fp8 = tf_models::quant_config::fp8_config(&config).unwrap();
    let cpu = CpuBackend::new(1).unwrap();
    let ld = Loader::new(&ckpt, &dir, &cpu).with_fp8(fp8);
    // q_proj is [4 heads * 32, 64]: a 3 x 2 grid of [48, 48] blocks, the last row and column partial.
    let q: HostMat = ld.mat("model.layers.0.self_attn.q_proj.weight", 128, 64).unwrap();
    assert_eq!(q.dtype, tf_core::DType::F8E4M3);
    assert_eq!(q.held_bytes(), 128 * 64 + 6 * 4);
    let bf16: HostMat = ld.mat("model.embed_tokens.weight", 512, 64).unwrap();
    assert_eq!(bf16.held_bytes(), 2 * 512 * 64);
    // MLA's query rows taken apart at load keep their codes: one byte a weight, a scale row each.
    let dir = fixture("deepseek_v3_fp8");
    let ckpt = Checkpoint::open(&dir).unwrap();
    let config = tf_models::config::RawConfig::read(&dir.join("config.json")).unwrap();
    let ld = Loader::new(&ckpt, &dir, &cpu).with_fp8(tf_models::quant_config::fp8_config(&config).unwrap());
    let rows: Vec<usize> = (0..160).step_by(2).collect();
    let q: HostMat = ld.mat_rows("model.layers.0.self_attn.q_b_proj.weight", 160, 48, &rows).unwrap();
    assert_eq!(q.dtype, tf_core::DType::F8E4M3);
    assert_eq!(q.held_bytes(), 80 * 48 + 80 * 4);
}
