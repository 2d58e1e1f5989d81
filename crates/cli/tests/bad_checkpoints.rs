//! Bad checkpoints derived from the good fixtures: each is refused by `tensorfold check` with
//! exit code 2 and a one-line reason naming what is wrong, never a panic.

use safetensors::tensor::{Dtype, TensorView};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use tf_formats::SafetensorsFile;

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

type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

fn dtype(d: tf_core::DType) -> Dtype {
    match d {
        tf_core::DType::F32 => Dtype::F32,
        tf_core::DType::F16 => Dtype::F16,
        tf_core::DType::BF16 => Dtype::BF16,
        tf_core::DType::I64 => Dtype::I64,
        tf_core::DType::F8E4M3 => Dtype::F8_E4M3,
        tf_core::DType::U8 => Dtype::U8,
        tf_core::DType::Quant(q) => panic!("no quantized tensors in safetensors fixtures: {q:?}"),
        tf_core::DType::Mxfp4 => panic!("no mxfp4 tensors in safetensors fixtures"),
    }
}

/// Rewrites `model.safetensors` after `edit` changes its tensors.
fn rewrite(dir: &Path, edit: impl FnOnce(&mut Tensors)) {
    let path = dir.join("model.safetensors");
    let mut t: Tensors = {
        let f = SafetensorsFile::open(&path).unwrap();
        f.tensors()
            .keys()
            .map(|n| {
                let v = f.tensor(n).unwrap().unwrap();
                (n.clone(), (dtype(v.dtype), v.shape.clone(), v.data.as_bytes().to_vec()))
            })
            .collect()
    };
    edit(&mut t);
    let views: Vec<(String, TensorView)> =
        t.iter().map(|(n, (d, s, b))| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize_to_file(views, None, &path).unwrap();
}

/// Edits a JSON file in the checkpoint.
fn edit_json(dir: &Path, name: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join(name);
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
}

/// Runs `check` and asserts a clean refusal whose message holds every `needle`.
fn refused(dir: &Path, needles: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold")).args(["check", "--model"]).arg(dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "panic: {err}");
    assert_eq!(out.status.code(), Some(2), "expected exit 2, stderr: {err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "'{n}' not in: {err}");
    }
}

fn drop_rows(t: &mut Tensors, name: &str, rows: isize) {
    let (d, shape, bytes) = t.get_mut(name).unwrap();
    let row_bytes = bytes.len() / shape[0];
    if rows < 0 {
        bytes.truncate(bytes.len() - row_bytes * (-rows) as usize);
        shape[0] -= (-rows) as usize;
    } else {
        bytes.extend(std::iter::repeat_n(0u8, row_bytes * rows as usize));
        shape[0] += rows as usize;
    }
    let _ = d;
}

#[test]
fn good_fixtures_pass() {
    for family in ["llama", "qwen3", "gemma3", "qwen3_moe"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
            .args(["check", "--model"])
            .arg(fixture(family))
            .output()
            .unwrap();
        assert!(out.status.success(), "{family}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn too_few_embedding_rows() {
    let d = copy("qwen3");
    rewrite(d.path(), |t| drop_rows(t, "model.embed_tokens.weight", -1));
    refused(d.path(), &["model.embed_tokens.weight", "[511, 64]", "[512, 64]"]);
}

#[test]
fn too_many_embedding_rows() {
    let d = copy("gemma3");
    rewrite(d.path(), |t| drop_rows(t, "model.embed_tokens.weight", 3));
    refused(d.path(), &["model.embed_tokens.weight", "[515, 64]"]);
}

#[test]
fn lm_head_rows_differ() {
    let d = copy("llama");
    rewrite(d.path(), |t| drop_rows(t, "lm_head.weight", -2));
    refused(d.path(), &["lm_head.weight", "[510, 64]"]);
}

#[test]
fn missing_tensor() {
    let d = copy("llama");
    rewrite(d.path(), |t| {
        t.remove("model.layers.1.mlp.down_proj.weight");
    });
    refused(d.path(), &["model.layers.1.mlp.down_proj.weight", "missing"]);
}

#[test]
fn wrong_shape() {
    let d = copy("qwen3");
    rewrite(d.path(), |t| {
        let e = t.get_mut("model.layers.0.self_attn.q_proj.weight").unwrap();
        e.1.reverse();
    });
    refused(d.path(), &["model.layers.0.self_attn.q_proj.weight", "expected"]);
}

#[test]
fn wrong_dtype() {
    let d = copy("qwen3");
    rewrite(d.path(), |t| {
        let e = t.get_mut("model.norm.weight").unwrap();
        e.0 = Dtype::I64;
        e.1 = vec![e.2.len() / 8];
    });
    refused(d.path(), &["model.norm.weight"]);
}

#[test]
fn truncated_file() {
    let d = copy("qwen3");
    let p = d.path().join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    refused(d.path(), &["model.safetensors", "data section"]);
}

#[test]
fn absurd_header_length() {
    let d = copy("qwen3");
    let p = d.path().join("model.safetensors");
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[..8].copy_from_slice(&(u64::MAX - 7).to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    refused(d.path(), &["model.safetensors", "header length"]);
}

/// Rewrites the header JSON of `model.safetensors`, keeping the data section.
fn edit_header(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut header);
    let text = header.to_string().into_bytes();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(&bytes[8 + n..]);
    std::fs::write(&p, out).unwrap();
}

#[test]
fn offsets_past_the_end() {
    let d = copy("qwen3");
    edit_header(d.path(), |h| {
        let e = &mut h["model.norm.weight"]["data_offsets"];
        let end = e[1].as_u64().unwrap();
        *e = serde_json::json!([end + 1_000_000, end + 1_000_128]);
    });
    refused(d.path(), &["model.norm.weight", "outside"]);
}

#[test]
fn overlapping_offsets() {
    let d = copy("qwen3");
    edit_header(d.path(), |h| {
        let a = h["model.norm.weight"]["data_offsets"].clone();
        h["model.layers.0.input_layernorm.weight"]["data_offsets"] = a;
    });
    refused(d.path(), &["overlaps"]);
}

#[test]
fn header_not_json() {
    let d = copy("qwen3");
    let p = d.path().join("model.safetensors");
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[8] = b'#';
    std::fs::write(&p, &bytes).unwrap();
    refused(d.path(), &["model.safetensors", "JSON"]);
}

#[test]
fn tokenizer_larger_than_the_table() {
    // tokenizers renumbers added tokens densely after the model's vocab (480 here), so 40 of
    // them reach ids 480..=519, past the 512 embedding rows.
    let d = copy("llama");
    edit_json(d.path(), "tokenizer.json", |t| {
        let added = t["added_tokens"].as_array_mut().unwrap();
        for i in 0..40 {
            added.push(serde_json::json!({"id": 480 + i, "content": format!("<extra_{i}>"),
                "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
        }
    });
    refused(d.path(), &["tokenizer.json", "519", "512"]);
    // A model-vocabulary entry past the rows keeps its id.
    let d = copy("qwen3");
    edit_json(d.path(), "tokenizer.json", |t| t["model"]["vocab"]["zzfar"] = serde_json::json!(700));
    refused(d.path(), &["tokenizer.json", "700"]);
}

#[test]
fn eos_past_the_table() {
    let d = copy("gemma3");
    edit_json(d.path(), "config.json", |c| c["eos_token_id"] = serde_json::json!(512));
    refused(d.path(), &["eos_token_id", "512"]);
    let d = copy("qwen3");
    edit_json(d.path(), "generation_config.json", |c| c["eos_token_id"] = serde_json::json!([2, 100000]));
    refused(d.path(), &["generation_config.json", "100000"]);
}

#[test]
fn nonsense_config() {
    let d = copy("llama");
    edit_json(d.path(), "config.json", |c| c["num_key_value_heads"] = serde_json::json!(3));
    refused(d.path(), &["num_key_value_heads"]);
    let d = copy("llama");
    edit_json(d.path(), "config.json", |c| c["hidden_size"] = serde_json::json!(0));
    refused(d.path(), &["hidden_size"]);
    let d = copy("llama");
    edit_json(d.path(), "config.json", |c| c["architectures"] = serde_json::json!(["NoSuchForCausalLM"]));
    refused(d.path(), &["NoSuchForCausalLM"]);
}

#[test]
fn header_one_byte_short() {
    // The reference pads its header with spaces; with one of them dropped from the length every
    // tensor would read one byte off.
    let d = copy("qwen3");
    let p = d.path().join("model.safetensors");
    let mut bytes = std::fs::read(&p).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert_eq!(bytes[8 + n as usize - 1], b' ');
    bytes[..8].copy_from_slice(&(n - 1).to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    refused(d.path(), &["model.safetensors", "1 bytes past its last tensor"]);
}

#[test]
fn tensors_the_config_does_not_use() {
    // A layer past num_hidden_layers (a checkpoint with more layers than its config says).
    let d = copy("llama");
    rewrite(d.path(), |t| {
        let extra = t["model.layers.1.mlp.down_proj.weight"].clone();
        t.insert("model.layers.7.mlp.down_proj.weight".into(), extra.clone());
        t.insert("model.layers.7.mlp.up_proj.weight".into(), extra);
    });
    refused(d.path(), &["2 tensor(s) the config does not use", "'model.layers.7.mlp.down_proj.weight'"]);
}

#[test]
fn harmless_unused_tensors_pass() {
    // Rotary inv_freq buffers, and a tied head's copy of the embedding.
    let d = copy("llama");
    rewrite(d.path(), |t| {
        t.insert("model.layers.0.self_attn.rotary_emb.inv_freq".into(), (Dtype::F32, vec![4], vec![0; 16]));
    });
    let d2 = copy("gemma3");
    rewrite(d2.path(), |t| {
        let embed = t["model.embed_tokens.weight"].clone();
        t.insert("lm_head.weight".into(), embed);
    });
    for dir in [d.path(), d2.path()] {
        let out = Command::new(env!("CARGO_BIN_EXE_tensorfold")).args(["check", "--model"]).arg(dir).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn file_controlled_strings_reach_the_terminal_escaped() {
    // A GGUF whose architecture holds a terminal escape (set the window title), a NUL and a
    // right-to-left override.
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("evil.gguf");
    let mut w = tf_formats::gguf::writer::GgufWriter::new();
    w.kv("general.architecture", tf_formats::gguf::writer::WriteValue::str("ev\u{1b}]0;pwned\u{7}il\0\u{202e}"));
    std::fs::write(&path, w.to_bytes()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold")).args(["check", "--model"]).arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(r"ev\x1b]0;pwned\x07il\x00\u{202e}"), "{err}");
    assert!(!err.trim_end().chars().any(|c| c.is_control() || c == '\u{202e}'), "{err:?}");
}
