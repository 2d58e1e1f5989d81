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

#[test]
fn synth_fp8_makes_a_block_scaled_checkpoint_that_loads_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("fp8");
    let out = tf(&["synth", "--like", "tiny", "--dtype", "fp8", "--out", d.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let f = tf_formats::SafetensorsFile::open(&d.join("model.safetensors")).unwrap();
    let q = f.tensor("model.layers.0.self_attn.q_proj.weight").unwrap().unwrap();
    assert_eq!(q.dtype, tf_core::DType::F8E4M3);
    let s = f.tensor("model.layers.0.self_attn.q_proj.weight_scale_inv").unwrap().unwrap();
    assert_eq!(s.shape, [q.shape[0].div_ceil(128), q.shape[1].div_ceil(128)]);
    assert!(tf(&["check", "--model", d.to_str().unwrap()]).status.success());
    let out =
        tf(&["generate", "--model", d.to_str().unwrap(), "--device", "cpu", "--prompt", "hello", "--max-tokens", "4"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `args`, expects exit 2, returns stderr.
fn refused_with(args: &[&str]) -> String {
    let out = tf(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty(), "{args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn model_paths_that_are_neither_gguf_nor_a_checkpoint_say_what_was_found() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope/model.gguf");
    let missing = missing.to_str().unwrap();
    for cmd in ["check", "generate", "serve"] {
        let mut args = vec![cmd, "--model", missing, "--device", "cpu"];
        if cmd == "generate" {
            args.extend(["--prompt", "hi"]);
        }
        let msg = refused_with(&args);
        assert_eq!(msg.trim(), format!("error: {missing}: no such file or directory"), "{cmd}");
    }
    let not_gguf = dir.path().join("model.gguf");
    std::fs::write(&not_gguf, b"PK\x03\x04 a zip file").unwrap();
    let msg = refused_with(&["check", "--model", not_gguf.to_str().unwrap()]);
    assert!(
        msg.contains("not a GGUF file (magic 50 4b 03 04 \"PK\\x03\\x04\"), and not a directory holding config.json"),
        "{msg}"
    );
    let msg = refused_with(&["check", "--model", dir.path().to_str().unwrap()]);
    assert!(msg.contains("a directory without config.json"), "{msg}");
    // The file's name does not matter: GGUF is told by its magic.
    let renamed = dir.path().join("weights.bin");
    std::fs::write(&renamed, b"GGUF\x03\x00\x00\x00").unwrap();
    let msg = refused_with(&["check", "--model", renamed.to_str().unwrap()]);
    assert!(!msg.contains("not a GGUF file") && !msg.contains("config.json"), "{msg}");
}

#[test]
fn help_says_model_takes_a_gguf_file_or_a_checkpoint_directory() {
    for cmd in ["check", "logits", "generate", "bench", "bench-draft", "bench-prefix", "serve"] {
        let out = tf(&[cmd, "--help"]);
        let help = String::from_utf8_lossy(&out.stdout);
        let line = help
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("-m, --model"))
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        assert!(line.contains("GGUF file") && line.contains("Hugging Face"), "{cmd}: {line}");
        assert!(!help.contains("Checkpoint directory"), "{cmd}");
    }
    let help = String::from_utf8_lossy(&tf(&["serve", "--help"]).stdout).into_owned();
    assert!(help.contains("--chat-template") && help.contains("chatml, gemma, llama2, llama3, qwen3"), "{help}");
}

#[test]
fn negative_flag_values_reach_the_range_checks() {
    let dir = fixture("qwen3");
    let model = dir.to_str().unwrap();
    let base = ["generate", "--model", model, "--prompt", "hi", "--device", "cpu"];
    let with = |extra: &[&str]| refused_with(&[&base[..], extra].concat());
    assert_eq!(
        with(&["--temperature", "-1"]).trim(),
        "error: --temperature -1 is out of range: expected 0 <= x <= 100"
    );
    assert!(with(&["--top-p", "-0.5"]).contains("--top-p -0.5 is out of range"));
    assert!(
        with(&["--presence-penalty", "-3"]).contains("--presence-penalty -3 is out of range: expected -2 <= x <= 2")
    );
    assert!(with(&["--top-k", "-1"]).contains("invalid value '-1' for '--top-k <TOP_K>': must be 0 or more"));
    assert!(with(&["--seed", "-7"]).contains("must be 0 or more"));
    assert!(with(&["--chunk", "0"]).contains("'--chunk <CHUNK>': must be at least 1"));
    // A negative penalty inside its range is a value like any other.
    let out = tf(&[&base[..], &["--presence-penalty", "-1.5", "--max-tokens", "2", "--json"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn max_tokens_below_one_is_refused_before_loading() {
    // vLLM refuses max_tokens < 1 the same way; nothing is generated and no speed is printed.
    for n in ["0", "-1"] {
        let msg = refused_with(&["generate", "--model", "/no/such/model", "--prompt", "hi", "--max-tokens", n]);
        assert!(
            msg.contains(&format!("invalid value '{n}' for '--max-tokens <MAX_TOKENS>': must be at least 1")),
            "{msg}"
        );
        assert!(!msg.contains("tok/s") && !msg.contains("/no/such/model"), "{msg}");
    }
    let msg = refused_with(&["bench", "--model", "/no/such/model", "--gen-len", "0"]);
    assert!(msg.contains("'--gen-len <GEN_LEN>': must be at least 1"), "{msg}");
}
