//! The CLI contract other tools rely on: `check`, `logits`, `generate --json`, `synth`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tf_formats::SafetensorsFile;

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family)
}

fn tf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorfold")).args(args).output().unwrap()
}

fn golden(family: &str) -> (Vec<Vec<i64>>, SafetensorsFile) {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(family).join("golden.json")).unwrap()).unwrap();
    let prompts = meta["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect())
        .collect();
    (prompts, SafetensorsFile::open(&fixture(family).join("golden.safetensors")).unwrap())
}

fn join(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

#[test]
fn generate_json_matches_transformers_greedy() {
    for family in ["llama", "qwen3", "gemma3", "qwen3_moe"] {
        let (prompts, g) = golden(family);
        let dir = fixture(family);
        let ids = join(&prompts[3]);
        let out = tf(&[
            "generate",
            "--model",
            dir.to_str().unwrap(),
            "--ids",
            &ids,
            "--max-tokens",
            "16",
            "--ignore-eos",
            "--json",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let want: Vec<i64> = g.tensor("greedy_3").unwrap().unwrap().to_f32().iter().map(|&v| v as i64).collect();
        let got: Vec<i64> = doc["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(got, want, "{family}");
        let prompt_ids: Vec<i64> = doc["prompt_ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(prompt_ids, prompts[3], "ids are used exactly as given");
        assert!(doc["text"].is_string());
        assert!(String::from_utf8_lossy(&out.stderr).contains("tok/s"));
    }
}

#[test]
fn generate_prompt_text_uses_the_tokenizer_rules() {
    // llama's tokenizer adds BOS (id 1); qwen3's adds none.
    for (family, bos) in [("llama", true), ("qwen3", false)] {
        let dir = fixture(family);
        let out = tf(&[
            "generate",
            "--model",
            dir.to_str().unwrap(),
            "--prompt",
            "The capital",
            "--max-tokens",
            "3",
            "--json",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["prompt_ids"][0] == 1, bos, "{family}: {doc}");
    }
}

#[test]
fn logits_file_matches_transformers() {
    let (prompts, g) = golden("gemma3");
    let tmp = tempfile::tempdir().unwrap();
    let out_path = tmp.path().join("logits.safetensors");
    let dir = fixture("gemma3");
    let out = tf(&[
        "logits",
        "--model",
        dir.to_str().unwrap(),
        "--ids",
        &join(&prompts[3]),
        "--out",
        out_path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let f = SafetensorsFile::open(&out_path).unwrap();
    let t = f.tensor("logits").unwrap().unwrap();
    assert_eq!(t.shape, vec![prompts[3].len(), 512]);
    assert_eq!(t.dtype, tf_core::DType::F32);
    let want = g.tensor("logits_3").unwrap().unwrap().to_f32();
    let err = t.to_f32().iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(err < 1e-4, "max error {err}");
}

#[test]
fn out_of_range_ids_are_refused_with_exit_2() {
    let dir = fixture("qwen3");
    let d = dir.to_str().unwrap();
    for bad in ["512", "513", "-1", "4294967296", "9223372036854775807", "1.5", "x"] {
        let out = tf(&["generate", "--model", d, "--ids", &format!("1,{bad}"), "--max-tokens", "2"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(!err.contains("panicked"), "{bad}: {err}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("x.safetensors");
    let out = tf(&["logits", "--model", d, "--ids", "0,512", "--out", o.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("512"));
}

#[test]
fn seeded_sampling_is_reproducible() {
    let dir = fixture("gemma3");
    let d = dir.to_str().unwrap();
    let run = |seed: &str| {
        let out = tf(&[
            "generate",
            "--model",
            d,
            "--ids",
            "1,5,9",
            "--max-tokens",
            "12",
            "--temperature",
            "1.0",
            "--top-p",
            "0.9",
            "--seed",
            seed,
            "--ignore-eos",
            "--json",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["ids"].clone()
    };
    assert_eq!(run("7"), run("7"));
    assert_ne!(run("7"), run("8"));
}

#[test]
fn synth_makes_a_checkpoint_that_loads_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("tiny");
    let out = tf(&["synth", "--like", "tiny", "--out", d.to_str().unwrap(), "--seed", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first = std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(tf(&["check", "--model", d.to_str().unwrap()]).status.success());
    let out = tf(&["generate", "--model", d.to_str().unwrap(), "--prompt", "hello", "--max-tokens", "4", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let again = tmp.path().join("again");
    assert!(tf(&["synth", "--like", "tiny", "--out", again.to_str().unwrap(), "--seed", "3"]).status.success());
    assert_eq!(first, std::fs::read(again.join("model.safetensors")).unwrap(), "synth is seeded");
    let unknown = tf(&["synth", "--like", "nope", "--out", again.to_str().unwrap()]);
    assert_eq!(unknown.status.code(), Some(2));
}
