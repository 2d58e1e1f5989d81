//! The real model: Gemma 3 270M (Q4_K_M GGUF) against Hugging Face transformers on the same
//! file (`scripts/gguf_reference.py`, which dequantizes to f32). Tokenization must equal HF's;
//! the top-10 next-token logits at each prompt's end must agree; greedy continuations must
//! equal HF's up to the first step where HF's own top-2 margin is below what our numerics can
//! resolve. Needs the file: `TF_GEMMA3_GGUF` (scripts/test.sh sets it, fetching the file with
//! scripts/fetch_gemma3_gguf.sh when missing); skipped with a message when absent.

use std::path::{Path, PathBuf};
use tf_cpu::{CpuBackend, CpuOptions, QuantActs};
use tf_engine::Runner;
use tf_models::Model;
use tf_testkit::argmax;

/// Largest |ours - HF| on a top-10 logit at the prompt's end (f32 dequantized weights on both
/// sides; the difference is summation order and f32 rounding over 18 layers).
const LOGIT_TOL: f32 = 0.05;
/// Greedy steps are compared while HF's top-2 margin stays above this.
const MARGIN: f64 = 2.0 * LOGIT_TOL as f64;

fn model_path() -> Option<PathBuf> {
    let p = PathBuf::from(std::env::var_os("TF_GEMMA3_GGUF")?);
    p.is_file().then_some(p)
}

fn reference() -> serde_json::Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma3_270m_gguf/reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ints(v: &serde_json::Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

#[test]
fn gemma3_270m_gguf_matches_transformers() {
    let Some(path) = model_path() else {
        eprintln!("skipped: set TF_GEMMA3_GGUF to gemma-3-270m-q4_k_m.gguf (scripts/fetch_gemma3_gguf.sh)");
        return;
    };
    let b = CpuBackend::with_options(CpuOptions { quant_acts: QuantActs::F32, ..CpuOptions::new(2) }).unwrap();
    let m = Model::open(&path, &b).unwrap();
    let tok = m.tokenizer.as_ref().unwrap();
    let r = reference();
    for case in r["encode"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let ids: Vec<i64> = tok.encode(text, true).unwrap().as_slice().iter().map(|&i| i64::from(i)).collect();
        assert_eq!(ids, ints(&case["ids"]), "tokenization of {text:?}");
    }
    let rows = m.vocab.rows();
    for p in r["prompts"].as_array().unwrap() {
        let text = p["text"].as_str().unwrap();
        let prompt = tok.encode(text, true).unwrap();
        assert_eq!(prompt.as_slice().iter().map(|&i| i64::from(i)).collect::<Vec<_>>(), ints(&p["ids"]));
        let want = ints(&p["greedy_ids"]);
        let margins: Vec<f64> =
            p["greedy_top2_margin"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let steps = margins.iter().position(|&m| m < MARGIN).unwrap_or(want.len());
        let mut r = Runner::new(&m, &b, prompt.len() + steps + 1).unwrap();
        let mut logits = r.prefill(&prompt, 512, false);
        for pair in p["top_logits"].as_array().unwrap() {
            let (id, hf) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap() as f32);
            assert!((logits[id] - hf).abs() <= LOGIT_TOL, "{text:?}: logit of {id}: ours {} HF {hf}", logits[id]);
        }
        let mut ours = Vec::new();
        for _ in 0..steps {
            let id = m.vocab.sampled(argmax(&logits[..rows]));
            ours.push(i64::from(id));
            logits = r.feed(&[id], false);
        }
        assert_eq!(ours, want[..steps], "{text:?}: greedy continuation ({steps} steps with HF margin >= {MARGIN})");
        eprintln!("{text:?}: {steps}/{} greedy steps compared and equal", want.len());
    }
}

/// `--quant-acts f32` on the command line gives exactly the in-process f32 backend's logits;
/// the default (`int8`, llama.cpp's numerics) gives different ones.
#[test]
fn quant_acts_switch_selects_the_numerics() {
    let Some(path) = model_path() else {
        eprintln!("skipped: set TF_GEMMA3_GGUF to gemma-3-270m-q4_k_m.gguf (scripts/fetch_gemma3_gguf.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = |acts: &str| {
        let out = dir.path().join(format!("{acts}.safetensors"));
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_tensorfold"))
            .args(["logits", "--model", path.to_str().unwrap(), "--ids", "2,818,5279,529,7001,563", "--threads", "2"])
            .args(["--quant-acts", acts, "--out", out.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success(), "--quant-acts {acts}");
        let file = tf_formats::SafetensorsFile::open(&out).unwrap();
        file.tensor("logits").unwrap().unwrap().to_f32()
    };
    let (f32_cli, int8_cli) = (run("f32"), run("int8"));
    let b = CpuBackend::with_options(CpuOptions { quant_acts: QuantActs::F32, ..CpuOptions::new(2) }).unwrap();
    let m = Model::open(&path, &b).unwrap();
    let ids = m.vocab.check(&[2, 818, 5279, 529, 7001, 563]).unwrap();
    let mut r = Runner::new(&m, &b, 8).unwrap();
    let last = r.prefill(&ids, 512, false);
    let rows = m.vocab.rows();
    assert_eq!(f32_cli.len() % rows, 0);
    let cli_last = &f32_cli[f32_cli.len() - rows..];
    assert!(cli_last.iter().zip(&last[..rows]).all(|(a, b)| a.to_bits() == b.to_bits()), "f32 CLI != in-process f32");
    assert_ne!(f32_cli, int8_cli, "int8 activations should move the logits");
}
