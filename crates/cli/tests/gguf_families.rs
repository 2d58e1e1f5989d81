//! GGUF files of the fixture checkpoints, written here as llama.cpp's `convert_hf_to_gguf.py`
//! writes them (tensor names, metadata, Gemma's norms as `1 + w`, the byte-level vocabulary
//! with its merges), load as the safetensors checkpoint does where it says what llama.cpp
//! reads (Qwen2 without its sliding window, Gemma 2 scaled by its key width, Phi-3's fused
//! projections served as their parts): the same token
//! ids for the fixture's encodings, and the same logits on every golden prompt (f32 tensors
//! holding the bf16 weights' values exactly).

use serde_json::Value;
use std::path::{Path, PathBuf};
use tf_cpu::{CpuBackend, CpuOptions, QuantActs};
use tf_engine::Runner;
use tf_formats::gguf::writer::{GgufWriter, WriteValue};
use tf_formats::safetensors_file::SafetensorsFile;
use tf_models::Model;

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family)
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The GGUF name `convert_hf_to_gguf.py` gives HF tensor `name` (the Llama-shaped families';
/// Gemma's four norms a layer where `gemma`).
fn gguf_name(name: &str, gemma: bool) -> String {
    let global = [("model.embed_tokens", "token_embd"), ("model.norm", "output_norm"), ("lm_head", "output")];
    if let Some((_, g)) = global.iter().find(|(hf, _)| name.starts_with(&format!("{hf}."))) {
        return format!("{g}.{}", name.rsplit('.').next().unwrap());
    }
    let rest = name.strip_prefix("model.layers.").unwrap();
    let (layer, rest) = rest.split_once('.').unwrap();
    let (stem, kind) = rest.rsplit_once('.').unwrap();
    let g = match stem {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" if gemma => "post_attention_norm",
        "pre_feedforward_layernorm" => "ffn_norm",
        "post_feedforward_layernorm" => "post_ffw_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.qkv_proj" => "attn_qkv",
        "mlp.gate_up_proj" => "ffn_up",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        other => panic!("no GGUF name for {other}"),
    };
    format!("blk.{layer}.{g}.{kind}")
}

/// The fixture `family` as a GGUF file of architecture `arch` in `dir`, with `extra` metadata
/// (keys after `{arch}.`) and the byte-level split `pre`.
fn to_gguf(family: &str, arch: &str, pre: &str, extra: &[(&str, WriteValue)], dir: &Path) -> PathBuf {
    let src = fixture(family);
    let config = json(&src.join("config.json"));
    let dim = |k: &str| config[k].as_u64().unwrap() as u32;
    let gemma = arch.starts_with("gemma");
    let mut w = GgufWriter::new();
    for (key, value) in extra {
        w.kv(&format!("{arch}.{key}"), value.clone());
    }
    w.kv("general.architecture", WriteValue::str(arch));
    for (key, field) in [
        ("block_count", "num_hidden_layers"),
        ("context_length", "max_position_embeddings"),
        ("embedding_length", "hidden_size"),
        ("feed_forward_length", "intermediate_size"),
        ("attention.head_count", "num_attention_heads"),
        ("attention.head_count_kv", "num_key_value_heads"),
    ] {
        w.kv(&format!("{arch}.{key}"), WriteValue::U32(dim(field)));
    }
    let theta = config["rope_parameters"]["rope_theta"].as_f64().unwrap() as f32;
    w.kv(&format!("{arch}.rope.freq_base"), WriteValue::F32(theta));
    let eps = config["rms_norm_eps"].as_f64().unwrap() as f32;
    w.kv(&format!("{arch}.attention.layer_norm_rms_epsilon"), WriteValue::F32(eps));
    // The byte-level vocabulary: tokens by id, merges, special tokens as control (type 3).
    let tok = json(&src.join("tokenizer.json"));
    let vocab = tok["model"]["vocab"].as_object().unwrap();
    let added = tok["added_tokens"].as_array().unwrap();
    let n = vocab.len().max(added.iter().map(|a| a["id"].as_u64().unwrap() as usize + 1).max().unwrap_or(0));
    let mut tokens = vec![String::new(); n];
    let mut types = vec![1i32; n];
    for (t, id) in vocab {
        tokens[id.as_u64().unwrap() as usize] = t.clone();
    }
    for a in added {
        let id = a["id"].as_u64().unwrap() as usize;
        tokens[id] = a["content"].as_str().unwrap().to_string();
        types[id] = if a["special"].as_bool().unwrap_or(false) { 3 } else { 4 };
    }
    let merges: Vec<String> = (tok["model"]["merges"].as_array().unwrap().iter())
        .map(|m| match m {
            Value::String(s) => s.clone(),
            Value::Array(p) => format!("{} {}", p[0].as_str().unwrap(), p[1].as_str().unwrap()),
            other => panic!("merge {other}"),
        })
        .collect();
    w.kv("tokenizer.ggml.model", WriteValue::str("gpt2"));
    w.kv("tokenizer.ggml.pre", WriteValue::str(pre));
    w.kv("tokenizer.ggml.tokens", WriteValue::strs(&tokens.iter().map(String::as_str).collect::<Vec<_>>()));
    w.kv("tokenizer.ggml.merges", WriteValue::strs(&merges.iter().map(String::as_str).collect::<Vec<_>>()));
    w.kv("tokenizer.ggml.token_type", WriteValue::i32s(&types));
    for (key, field) in [("bos", "bos_token_id"), ("eos", "eos_token_id"), ("padding", "pad_token_id")] {
        w.kv(&format!("tokenizer.ggml.{key}_token_id"), WriteValue::U32(dim(field)));
    }
    let adds_bos = json(&src.join("golden.json"))["tokenizer_adds_bos"].as_bool().unwrap();
    w.kv("tokenizer.ggml.add_bos_token", WriteValue::Bool(adds_bos));
    let st = SafetensorsFile::open(&src.join("model.safetensors")).unwrap();
    for name in st.tensors().keys() {
        let t = st.tensor(name).unwrap().unwrap();
        let mut values = t.to_f32();
        // Gemma's norms multiply by 1 + w: the converter stores 1 + w.
        if gemma && name.ends_with("norm.weight") {
            values.iter_mut().for_each(|v| *v += 1.0);
        }
        w.f32_tensor(&gguf_name(name, gemma), &t.shape, &values);
    }
    let path = dir.join(format!("{family}.gguf"));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

fn cpu() -> CpuBackend {
    CpuBackend::with_options(CpuOptions { quant_acts: QuantActs::F32, ..CpuOptions::new(2) }).unwrap()
}

/// `family`'s logits from `hf` (a checkpoint directory) and from the GGUF file `gguf` on every
/// golden prompt within 1e-5 of the largest, and the GGUF vocabulary's encodings the fixture's.
fn check_same(family: &str, hf: &Path, gguf: &Path) {
    let b = cpu();
    let (hf, gguf) = (Model::open(hf, &b).unwrap(), Model::open(gguf, &b).unwrap());
    let golden = json(&fixture(family).join("golden.json"));
    let tok = gguf.tokenizer.as_ref().expect("a GGUF vocabulary");
    for e in golden["encode"].as_array().unwrap() {
        let want: Vec<u32> = e["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        assert_eq!(tok.encode(e["text"].as_str().unwrap(), true).unwrap().as_slice(), want, "{family}: {}", e["text"]);
    }
    for prompt in golden["prompts"].as_array().unwrap() {
        let ids: Vec<i64> = prompt["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        let ids = hf.vocab.check(&ids).unwrap();
        let logits = |m: &Model<CpuBackend>| Runner::new(m, &b, ids.len()).unwrap().prefill(&ids, ids.len(), true);
        let (want, got) = (logits(&hf), logits(&gguf));
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        let worst = want.iter().zip(&got).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
        assert!(worst <= 1e-5 * scale, "{family}, {} ids: {worst} of {scale}", ids.len());
    }
}

#[test]
fn a_qwen2_gguf_tokenizes_and_computes_as_its_safetensors_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = to_gguf("qwen2", "qwen2", "qwen2", &[], dir.path());
    // llama.cpp's qwen2 has no sliding window (nor do the released Qwen2.5 configs turn it on):
    // the fixture with its window off is what the GGUF file holds.
    let full = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture("qwen2").join(f), full.path().join(f)).unwrap();
    }
    let mut config = json(&full.path().join("config.json"));
    config["use_sliding_window"] = false.into();
    config.as_object_mut().unwrap().remove("layer_types");
    std::fs::write(full.path().join("config.json"), config.to_string()).unwrap();
    let b = cpu();
    let m = Model::open(&path, &b).unwrap();
    assert_eq!(m.decoder.spec.architecture, "Qwen2ForCausalLM");
    assert!(m.decoder.spec.attention_bias, "q, k and v biases");
    check_same("qwen2", full.path(), &path);
}

#[test]
fn a_gemma2_gguf_tokenizes_and_computes_as_its_safetensors_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        ("attention.key_length", WriteValue::U32(32)),
        ("attention.value_length", WriteValue::U32(32)),
        ("attention.sliding_window", WriteValue::U32(8)),
        ("attn_logit_softcapping", WriteValue::F32(10.0)),
        ("final_logit_softcapping", WriteValue::F32(15.0)),
    ];
    let path = to_gguf("gemma2", "gemma2", "llama-bpe", &extra, dir.path());
    let b = cpu();
    let s = Model::open(&path, &b).unwrap().decoder.spec;
    assert_eq!((s.attn_softcap, s.final_softcap, s.sliding_window), (Some(10.0), Some(15.0), Some(8)));
    // llama.cpp's Gemma 2 scales attention by key_length, where the fixture's config says 24.
    let scaled = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture("gemma2").join(f), scaled.path().join(f)).unwrap();
    }
    let mut config = json(&scaled.path().join("config.json"));
    config["query_pre_attn_scalar"] = 32.into();
    std::fs::write(scaled.path().join("config.json"), config.to_string()).unwrap();
    check_same("gemma2", scaled.path(), &path);
}

#[test]
fn a_phi3_gguf_tokenizes_and_computes_as_its_safetensors_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [("rope.dimension_count", WriteValue::U32(12)), ("attention.sliding_window", WriteValue::U32(8))];
    let path = to_gguf("phi3", "phi3", "llama-bpe", &extra, dir.path());
    let b = cpu();
    let s = Model::open(&path, &b).unwrap().decoder.spec;
    assert_eq!((s.rope_full.inv_freq.len(), s.sliding_window), (6, Some(8)), "12 of 16 dims rotate; the window");
    check_same("phi3", &fixture("phi3"), &path);
}
