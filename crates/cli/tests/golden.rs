//! Golden tests: every family's logits and greedy continuations against Hugging Face
//! transformers (float32), on the committed tiny fixtures, for the reference and fast CPU
//! backends; plus chunked prefill == whole prefill, bit for bit.

use std::path::{Path, PathBuf};
use tf_backend::{Backend, RefBackend};
use tf_cpu::CpuBackend;
use tf_engine::Runner;
use tf_formats::SafetensorsFile;
use tf_models::Model;

/// Largest |ours - transformers| allowed on a logit. The fixtures' logits are O(1); a wrong
/// norm, rope base, scale or window moves them by 0.2 or more; f32 rounding by up to ~2e-5.
const TOL: f32 = 1e-4;

const FAMILIES: [&str; 4] = ["llama", "qwen3", "gemma3", "qwen3_moe"];

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family)
}

struct Golden {
    prompts: Vec<Vec<i64>>,
    logits: Vec<Vec<f32>>,
    greedy: Vec<Vec<u32>>,
}

fn golden(dir: &Path) -> Golden {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap();
    let file = SafetensorsFile::open(&dir.join("golden.safetensors")).unwrap();
    let prompts: Vec<Vec<i64>> = meta["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect())
        .collect();
    let logits = (0..prompts.len()).map(|i| file.tensor(&format!("logits_{i}")).unwrap().unwrap().to_f32()).collect();
    let greedy = (0..prompts.len())
        .map(|i| file.tensor(&format!("greedy_{i}")).unwrap().unwrap().to_f32().iter().map(|&v| v as u32).collect())
        .collect();
    Golden { prompts, logits, greedy }
}

fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold(0, |best, (i, &x)| if x > row[best] { i } else { best })
}

fn check_family<B: Backend>(b: &B, family: &str) {
    let dir = fixture(family);
    let m = Model::open(&dir, b).unwrap_or_else(|e| panic!("{family}: {e}"));
    let g = golden(&dir);
    let rows = m.vocab.rows();
    for (i, raw) in g.prompts.iter().enumerate() {
        let ids = m.vocab.check(raw).unwrap();
        let mut r = Runner::new(&m, b, ids.len() + g.greedy[i].len()).unwrap();
        let logits = r.prefill(&ids, 512, true);
        assert_eq!(logits.len(), g.logits[i].len(), "{family} prompt {i}: logits size");
        let err = logits.iter().zip(&g.logits[i]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        eprintln!("{family} [{}] prompt {i} ({} ids): max |logit err| = {err:.2e}", b.name(), ids.len());
        assert!(err <= TOL, "{family} prompt {i}: max logit error {err} > {TOL}");
        let mut last = logits[logits.len() - rows..].to_vec();
        let mut ours = Vec::new();
        for _ in 0..g.greedy[i].len() {
            let id = m.vocab.sampled(argmax(&last));
            ours.push(id);
            last = r.feed(&[id], false);
        }
        assert_eq!(ours, g.greedy[i], "{family} prompt {i}: greedy continuation");
    }
}

#[test]
fn golden_reference_backend() {
    for family in FAMILIES {
        check_family(&RefBackend, family);
    }
}

#[test]
fn golden_cpu_backend() {
    let b = CpuBackend::new(2).unwrap();
    for family in FAMILIES {
        check_family(&b, family);
    }
}

#[test]
fn chunked_prefill_equals_whole_bit_for_bit() {
    let b = CpuBackend::new(2).unwrap();
    for family in FAMILIES {
        let dir = fixture(family);
        let m = Model::open(&dir, &b).unwrap();
        let g = golden(&dir);
        let ids = m.vocab.check(g.prompts.last().unwrap()).unwrap();
        let whole = Runner::new(&m, &b, ids.len()).unwrap().prefill(&ids, ids.len(), true);
        for chunk in [1, 3, 5, 16] {
            let chunked = Runner::new(&m, &b, ids.len()).unwrap().prefill(&ids, chunk, true);
            assert!(whole.iter().zip(&chunked).all(|(a, b)| a.to_bits() == b.to_bits()), "{family} chunk {chunk}");
        }
    }
}
