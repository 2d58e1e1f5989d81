//! Checkpoints refused at load before anything is read from a file that cannot be one or sized
//! from a number the tensors cannot hold: weight, GGUF, config and tokenizer files that are
//! FIFOs (refused at once by `check` and `serve`, naming the file), layer counts past the
//! tensors present (refused in milliseconds, naming the field), and rope parameters that would
//! make every logit non-finite (refused naming the field).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest a refusal may take (the binary's start included) before it counts as slow.
const PROMPT: Duration = Duration::from_secs(3);

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family)
}

/// A copy of a fixture in a temp dir.
fn copy(family: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(family)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    tmp
}

/// Replaces `path` with a FIFO nobody writes to.
fn make_fifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// Edits `config.json` of the checkpoint in `dir`.
fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
}

/// Runs `tensorfold ARGS`, killing it after 30 s; asserts exit 2 within [`PROMPT`] with one
/// stderr line holding every `needle`.
fn refused_promptly(args: &[&str], needles: &[&str]) {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after 30 s (blocked?)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = start.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!err.contains("panicked"), "panic: {err}");
    assert_eq!(status.code(), Some(2), "expected exit 2, stderr: {err}");
    // serve's own log lines (the port it bound, "loading") may come before the refusal.
    let said = err.trim().lines().filter(|l| !l.contains(" INFO ")).count();
    assert_eq!(said, 1, "not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "'{n}' not in: {err}");
    }
    assert!(took < PROMPT, "{args:?} took {took:?}: {err}");
}

/// `check` and `serve` on `model` are both refused promptly, naming every needle.
fn check_and_serve_refused(model: &Path, needles: &[&str]) {
    let m = model.to_str().unwrap();
    refused_promptly(&["check", "--model", m], needles);
    refused_promptly(&["serve", "--model", m, "--port", "0", "--threads", "1", "--kv-memory", "4MiB"], needles);
}

#[test]
fn a_fifo_as_model_safetensors_is_refused_at_once() {
    let d = copy("qwen3");
    make_fifo(&d.path().join("model.safetensors"));
    check_and_serve_refused(d.path(), &["model.safetensors", "not a regular file (it is a FIFO)"]);
}

#[test]
fn a_fifo_as_a_gguf_file_is_refused_at_once() {
    let d = tempfile::tempdir().unwrap();
    let gguf = d.path().join("model.gguf");
    make_fifo(&gguf);
    check_and_serve_refused(&gguf, &["model.gguf", "not a regular file (it is a FIFO)"]);
}

#[test]
fn a_fifo_as_tokenizer_json_is_refused_at_once() {
    let d = copy("qwen3");
    make_fifo(&d.path().join("tokenizer.json"));
    check_and_serve_refused(d.path(), &["tokenizer.json", "not a regular file (it is a FIFO)"]);
}

#[test]
fn fifos_as_configs_and_templates_are_refused_at_once() {
    for name in ["config.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"] {
        let d = copy("qwen3");
        make_fifo(&d.path().join(name));
        let m = d.path().to_str().unwrap();
        refused_promptly(&["check", "--model", m], &[name, "not a regular file (it is a FIFO)"]);
    }
}

#[test]
fn two_billion_layers_are_refused_in_a_moment_naming_the_field() {
    for family in ["llama", "qwen3"] {
        let d = copy(family);
        edit_config(d.path(), |v| {
            v["num_hidden_layers"] = serde_json::json!(2_147_483_647u64);
            v.as_object_mut().unwrap().remove("layer_types");
        });
        let m = d.path().to_str().unwrap();
        refused_promptly(&["check", "--model", m], &["config.json", "'num_hidden_layers' is 2147483647"]);
    }
}

#[test]
fn widths_and_expert_counts_past_the_tensors_are_refused_naming_the_field() {
    for (family, field) in
        [("qwen3", "hidden_size"), ("qwen3", "head_dim"), ("qwen3", "vocab_size"), ("qwen3_moe", "num_experts")]
    {
        let d = copy(family);
        edit_config(d.path(), |v| v[field] = serde_json::json!(2_147_483_647u64));
        let m = d.path().to_str().unwrap();
        refused_promptly(&["check", "--model", m], &["config.json", &format!("'{field}' is 2147483647")]);
    }
}

#[test]
fn a_zero_rope_factor_is_refused_naming_the_field() {
    let scalings = [
        serde_json::json!({"rope_type": "linear", "factor": 0.0, "rope_theta": 1e6}),
        serde_json::json!({"rope_type": "yarn", "factor": 0.0, "original_max_position_embeddings": 64, "rope_theta": 1e6}),
        serde_json::json!({"rope_type": "linear", "factor": -1.0, "rope_theta": 1e6}),
    ];
    for rope in scalings {
        let d = copy("qwen3");
        edit_config(d.path(), |v| v["rope_parameters"] = rope.clone());
        let m = d.path().to_str().unwrap();
        refused_promptly(&["check", "--model", m], &["config.json", "rope 'factor' must be a finite number above 0"]);
    }
    let d = copy("qwen3");
    edit_config(d.path(), |v| v["rope_parameters"]["rope_theta"] = serde_json::json!(0.0));
    refused_promptly(&["check", "--model", d.path().to_str().unwrap()], &["'rope_theta'"]);
    let d = copy("llama");
    edit_config(d.path(), |v| v["rope_parameters"]["low_freq_factor"] = serde_json::json!(0.0));
    refused_promptly(&["check", "--model", d.path().to_str().unwrap()], &["'low_freq_factor'"]);
    let d = copy("qwen3");
    edit_config(d.path(), |v| v["partial_rotary_factor"] = serde_json::json!(1.5));
    refused_promptly(&["check", "--model", d.path().to_str().unwrap()], &["'partial_rotary_factor'"]);
}

#[test]
fn a_fifo_as_the_chat_template_or_profile_of_serve_is_refused_at_once() {
    let d = copy("qwen3");
    let fifo = d.path().join("template.jinja");
    make_fifo(&fifo);
    let (m, f) = (d.path().to_str().unwrap(), fifo.to_str().unwrap());
    let serve = ["serve", "--model", m, "--port", "0", "--threads", "1", "--kv-memory", "4MiB"];
    let args: Vec<&str> = serve.iter().copied().chain(["--chat-template", f]).collect();
    refused_promptly(&args, &["--chat-template", "it is a FIFO"]);
    let args: Vec<&str> = serve.iter().copied().chain(["--profile", f]).collect();
    refused_promptly(&args, &["--profile", "not a regular file (it is a FIFO)"]);
}
