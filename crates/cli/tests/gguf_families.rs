//! GGUF files of the fixture checkpoints, written here as llama.cpp's `convert_hf_to_gguf.py`
//! writes them (tensor names, metadata, Gemma's norms as `1 + w`, the byte-level vocabulary
//! with its merges), load as the safetensors checkpoint does where it says what llama.cpp
//! reads (Qwen2 without its sliding window, Gemma 2 scaled by its key width, Phi-3's fused
//! projections served as their parts, gpt-oss's experts split, in f32 or MXFP4): the same token
//! ids for the fixture's encodings, and the same logits on every golden prompt (f32 tensors
//! holding the bf16 weights' values exactly).

use serde_json::Value;
use std::path::{Path, PathBuf};
use tf_cpu::{CpuBackend, CpuOptions, QuantActs};
use tf_engine::Runner;
use tf_formats::gguf::ValueType;
use tf_formats::gguf::writer::{GgufWriter, WriteValue, ggml_ne};
use tf_formats::safetensors_file::SafetensorsFile;
use tf_models::Model;
use tf_testkit::mtp_logits;

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
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
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
    let w = gguf_writer(family, arch, pre, extra);
    let path = dir.join(format!("{family}.gguf"));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

/// [`to_gguf`]'s file, unwritten.
fn gguf_writer(family: &str, arch: &str, pre: &str, extra: &[(&str, WriteValue)]) -> GgufWriter {
    let gemma = arch.starts_with("gemma");
    let mut w = metadata(family, arch, pre, extra);
    let st = SafetensorsFile::open(&fixture(family).join("model.safetensors")).unwrap();
    for name in st.tensors().keys() {
        let t = st.tensor(name).unwrap().unwrap();
        let mut values = t.to_f32();
        // Gemma's norms multiply by 1 + w: the converter stores 1 + w.
        if gemma && name.ends_with("norm.weight") {
            values.iter_mut().for_each(|v| *v += 1.0);
        }
        w.f32_tensor(&gguf_name(name, gemma), &t.shape, &values);
    }
    w
}

/// The fixture `family`'s metadata and vocabulary as `convert_hf_to_gguf.py` writes them for
/// architecture `arch`, with `extra` metadata and the byte-level split `pre`.
fn metadata(family: &str, arch: &str, pre: &str, extra: &[(&str, WriteValue)]) -> GgufWriter {
    metadata_at(&fixture(family), arch, pre, extra)
}

/// [`metadata`] of the checkpoint in `src`.
fn metadata_at(src: &Path, arch: &str, pre: &str, extra: &[(&str, WriteValue)]) -> GgufWriter {
    let src = src.to_path_buf();
    let config = json(&src.join("config.json"));
    let dim = |k: &str| config[k].as_u64().unwrap() as u32;
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
        // `extra` says otherwise for some families.
        if extra.iter().all(|(k, _)| *k != key) {
            w.kv(&format!("{arch}.{key}"), WriteValue::U32(dim(field)));
        }
    }
    if let Some(theta) = config["rope_parameters"]["rope_theta"].as_f64() {
        w.kv(&format!("{arch}.rope.freq_base"), WriteValue::F32(theta as f32));
    }
    if extra.iter().all(|(k, _)| *k != "attention.layer_norm_rms_epsilon") {
        let eps = config["rms_norm_eps"].as_f64().or(config["norm_eps"].as_f64()).unwrap() as f32;
        w.kv(&format!("{arch}.attention.layer_norm_rms_epsilon"), WriteValue::F32(eps));
    }
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
    w
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
fn a_split_gguf_opened_from_its_first_shard_computes_as_the_whole_checkpoint() {
    // As llama.cpp's gguf-split writes one: the metadata in the first shard, the tensors spread
    // over three, each shard numbered.
    let whole = gguf_writer("qwen2", "qwen2", "qwen2", &[]);
    let dir = tempfile::tempdir().unwrap();
    let n = whole.tensors.len();
    let cuts = [0, n / 3, 2 * n / 3, n];
    for k in 0..3 {
        let mut w = GgufWriter::new();
        if k == 0 {
            w.kvs = whole.kvs.clone();
            w.kv("split.tensors.count", WriteValue::I32(n as i32));
        }
        w.kv("split.no", WriteValue::U16(k as u16));
        w.kv("split.count", WriteValue::U16(3));
        w.tensors = whole.tensors[cuts[k]..cuts[k + 1]].to_vec();
        std::fs::write(dir.path().join(format!("qwen2-{:05}-of-00003.gguf", k + 1)), w.to_bytes()).unwrap();
    }
    let first = dir.path().join("qwen2-00001-of-00003.gguf");
    let mut config = json(&fixture("qwen2").join("config.json"));
    config["use_sliding_window"] = false.into();
    config.as_object_mut().unwrap().remove("layer_types");
    let full = tempfile::tempdir().unwrap();
    for f in ["model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture("qwen2").join(f), full.path().join(f)).unwrap();
    }
    std::fs::write(full.path().join("config.json"), config.to_string()).unwrap();
    check_same("qwen2", full.path(), &first);
    // A later shard alone is refused, naming the first.
    let b = cpu();
    let e = Model::open(&dir.path().join("qwen2-00002-of-00003.gguf"), &b).err().map(|e| e.to_string());
    assert!(e.is_some_and(|e| e.contains("open the first") && e.contains("qwen2-00001-of-00003.gguf")));
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
fn a_phi3_longrope_gguf_computes_as_its_safetensors_checkpoint_with_both_factor_sets() {
    let dir = tempfile::tempdir().unwrap();
    let config = json(&fixture("phi3_longrope").join("config.json"));
    let rope = &config["rope_parameters"];
    let extra = [
        ("rope.dimension_count", WriteValue::U32(12)),
        ("attention.sliding_window", WriteValue::U32(8)),
        ("rope.scaling.original_context_length", WriteValue::U32(256)),
        ("rope.scaling.attn_factor", WriteValue::F32((1.0 + 2f64.ln() / 256f64.ln()).sqrt() as f32)),
    ];
    let mut w = metadata("phi3_longrope", "phi3", "llama-bpe", &extra);
    let st = SafetensorsFile::open(&fixture("phi3_longrope").join("model.safetensors")).unwrap();
    for name in st.tensors().keys() {
        let t = st.tensor(name).unwrap().unwrap();
        w.f32_tensor(&gguf_name(name, false), &t.shape, &t.to_f32());
    }
    for (t, key) in [("rope_factors_long.weight", "long_factor"), ("rope_factors_short.weight", "short_factor")] {
        let f: Vec<f32> = rope[key].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        w.f32_tensor(t, &[f.len()], &f);
    }
    let path = dir.path().join("phi3_longrope.gguf");
    std::fs::write(&path, w.to_bytes()).unwrap();
    check_same("phi3_longrope", &fixture("phi3_longrope"), &path);
    let b = cpu();
    let (hf, gguf) = (Model::open(&fixture("phi3_longrope"), &b).unwrap(), Model::open(&path, &b).unwrap());
    assert!(hf.decoder.spec.long_rope.is_some());
    assert_eq!(hf.decoder.spec.long_rope, gguf.decoder.spec.long_rope, "the long factors' table");
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

/// The gpt-oss fixture `family` as `convert_hf_to_gguf.py` writes it: YaRN and the experts in
/// the metadata, the sinks as `attn_sinks.weight`, the norm before the experts as
/// `post_attention_norm`, each expert projection split (gate the even rows of `gate_up`, up
/// the odd ones), output-major, with its biases; MXFP4 blocks repacked into ggml's layout
/// (scale byte first, value `j` in byte `j`'s low nibble and `j + 16` in its high one).
fn gpt_oss_gguf(family: &str, dir: &Path) -> PathBuf {
    let config = json(&fixture(family).join("config.json"));
    let rope = &config["rope_parameters"];
    let f = |v: &Value| WriteValue::F32(v.as_f64().unwrap() as f32);
    let u = |k: &str| WriteValue::U32(config[k].as_u64().unwrap() as u32);
    let extra = [
        ("attention.key_length", u("head_dim")),
        ("attention.value_length", u("head_dim")),
        ("attention.sliding_window", u("sliding_window")),
        ("expert_count", u("num_local_experts")),
        ("expert_used_count", u("num_experts_per_tok")),
        ("expert_feed_forward_length", u("intermediate_size")),
        ("rope.scaling.type", WriteValue::str("yarn")),
        ("rope.scaling.factor", f(&rope["factor"])),
        (
            "rope.scaling.original_context_length",
            WriteValue::U32(rope["original_max_position_embeddings"].as_u64().unwrap() as u32),
        ),
    ];
    let mut w = metadata(family, "gpt-oss", "llama-bpe", &extra);
    let st = SafetensorsFile::open(&fixture(family).join("model.safetensors")).unwrap();
    let names: Vec<String> = st.tensors().keys().cloned().collect();
    for name in &names {
        let t = st.tensor(name).unwrap().unwrap();
        let Some(rest) = name.strip_prefix("model.layers.") else {
            w.f32_tensor(&gguf_name(name, false), &t.shape, &t.to_f32());
            continue;
        };
        let (layer, stem) = rest.split_once('.').unwrap();
        let out = |g: &str| format!("blk.{layer}.{g}");
        let values = t.to_f32();
        match stem {
            "self_attn.sinks" => _ = w.f32_tensor(&out("attn_sinks.weight"), &t.shape, &values),
            "post_attention_layernorm.weight" => {
                _ = w.f32_tensor(&out("post_attention_norm.weight"), &t.shape, &values)
            }
            "mlp.router.weight" => _ = w.f32_tensor(&out("ffn_gate_inp.weight"), &t.shape, &values),
            "mlp.router.bias" => _ = w.f32_tensor(&out("ffn_gate_inp.bias"), &t.shape, &values),
            "self_attn.o_proj.bias" => _ = w.f32_tensor(&out("attn_output.bias"), &t.shape, &values),
            "mlp.experts.gate_up_proj_bias" => {
                let [n, two] = t.shape[..] else { panic!("{name}") };
                for (g, parity) in [("ffn_gate_exps.bias", 0), ("ffn_up_exps.bias", 1)] {
                    let v: Vec<f32> = (0..n * two / 2).map(|i| values[2 * i + parity]).collect();
                    w.f32_tensor(&out(g), &[n, two / 2], &v);
                }
            }
            "mlp.experts.down_proj_bias" => _ = w.f32_tensor(&out("ffn_down_exps.bias"), &t.shape, &values),
            // Input-major floats: transposed, gate_up split by parity of its columns.
            "mlp.experts.gate_up_proj" => {
                let [n, h, two] = t.shape[..] else { panic!("{name}") };
                for (g, parity) in [("ffn_gate_exps.weight", 0), ("ffn_up_exps.weight", 1)] {
                    let mut v = Vec::with_capacity(n * h * two / 2);
                    for e in 0..n {
                        for c in 0..two / 2 {
                            v.extend((0..h).map(|r| values[(e * h + r) * two + 2 * c + parity]));
                        }
                    }
                    w.f32_tensor(&out(g), &[n, two / 2, h], &v);
                }
            }
            "mlp.experts.down_proj" => {
                let [n, i, h] = t.shape[..] else { panic!("{name}") };
                let mut v = Vec::with_capacity(n * i * h);
                for e in 0..n {
                    for r in 0..h {
                        v.extend((0..i).map(|c| values[(e * i + c) * h + r]));
                    }
                }
                w.f32_tensor(&out("ffn_down_exps.weight"), &[n, h, i], &v);
            }
            "mlp.experts.gate_up_proj_blocks" | "mlp.experts.down_proj_blocks" => {
                let scales = st.tensor(&name.replace("_blocks", "_scales")).unwrap().unwrap();
                let (codes, exps) = (t.data.as_bytes(), scales.data.as_bytes());
                let [n, rows, g, _] = t.shape[..] else { panic!("{name}") };
                let parts: &[(&str, usize, usize)] = match stem.starts_with("mlp.experts.gate_up") {
                    true => &[("ffn_gate_exps.weight", 0, 2), ("ffn_up_exps.weight", 1, 2)],
                    false => &[("ffn_down_exps.weight", 0, 1)],
                };
                for &(gname, first, step) in parts {
                    let mut data = Vec::new();
                    for e in 0..n {
                        for r in (first..rows).step_by(step) {
                            for k in 0..g {
                                let at = (e * rows + r) * g + k;
                                data.push(exps[at]);
                                let b = &codes[at * 16..(at + 1) * 16];
                                // HF: value 2j in byte j's low nibble, 2j + 1 in its high one.
                                let code = |v: usize| (b[v / 2] >> (4 * (v % 2))) & 0x0f;
                                data.extend((0..16).map(|j| code(j) | (code(j + 16) << 4)));
                            }
                        }
                    }
                    w.tensor(&out(gname), &ggml_ne(&[n, rows / step, g * 32]), 39, data);
                }
            }
            "mlp.experts.gate_up_proj_scales" | "mlp.experts.down_proj_scales" => {}
            _ => _ = w.f32_tensor(&gguf_name(name, false), &t.shape, &values),
        }
    }
    let path = dir.join(format!("{family}.gguf"));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

#[test]
fn gpt_oss_ggufs_float_and_mxfp4_compute_as_their_safetensors_checkpoints() {
    let b = cpu();
    for family in ["gpt_oss", "gpt_oss_mxfp4"] {
        let dir = tempfile::tempdir().unwrap();
        let path = gpt_oss_gguf(family, dir.path());
        let m = Model::open(&path, &b).unwrap();
        let s = &m.decoder.spec;
        assert_eq!(s.architecture, "GptOssForCausalLM");
        assert!(s.attn_sinks && s.attention_bias && s.attn_out_bias, "{family}: sinks and biases");
        assert_eq!(s.sliding_window, Some(8), "{family}");
        check_same(family, &fixture(family), &path);
    }
}

/// Routed experts' projections named as transformers names them, with their GGUF names.
const MLP_EXPERTS: [(&str, &str); 3] =
    [("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")];
/// The same, named `w1` / `w3` / `w2` (MiniMax-M2).
const W_EXPERTS: [(&str, &str); 3] = [("w1", "ffn_gate_exps"), ("w3", "ffn_up_exps"), ("w2", "ffn_down_exps")];

/// Layer `layer`'s `experts` routed experts (`model.layers.{layer}.{module}experts.{e}.{hf}.weight`)
/// stacked `[experts, rows, cols]` a projection into `w`, as the converter merges them.
fn stack_experts(
    w: &mut GgufWriter,
    st: &SafetensorsFile,
    layer: usize,
    module: &str,
    experts: usize,
    names: [(&str, &str); 3],
) {
    stack_experts_at(w, st, &format!("model.layers.{layer}.{module}"), layer, experts, &names);
}

/// [`stack_experts`] for the experts under `prefix` (`{prefix}experts.{e}.{hf}.weight`) into
/// block `layer`'s tensors.
fn stack_experts_at(
    w: &mut GgufWriter,
    st: &SafetensorsFile,
    prefix: &str,
    layer: usize,
    experts: usize,
    names: &[(&str, &str)],
) {
    for (hf, g) in names {
        let name = |e: usize| format!("{prefix}experts.{e}.{hf}.weight");
        let parts: Vec<_> = (0..experts).map(|e| st.tensor(&name(e)).unwrap().unwrap()).collect();
        let shape = [experts, parts[0].shape[0], parts[0].shape[1]];
        let values: Vec<f32> = parts.iter().flat_map(|t| t.to_f32()).collect();
        w.f32_tensor(&format!("blk.{layer}.{g}.weight"), &shape, &values);
    }
}

/// One routed expert's projection: its number, shape and values.
type Expert = (usize, Vec<usize>, Vec<f32>);

/// The LFM2-style fixture `family` as `convert_hf_to_gguf.py` writes it for `arch`: KV heads per
/// layer, the MLP width as the layers have it (`ffn`), the conv taps, `extra` keys; its conv
/// weights without their middle dim, routed experts stacked a projection.
fn lfm2_gguf(family: &str, arch: &str, ffn: u32, extra: &[(&str, WriteValue)], dir: &Path) -> PathBuf {
    let config = json(&fixture(family).join("config.json"));
    let kv = config["num_key_value_heads"].as_i64().unwrap() as i32;
    let per_layer: Vec<i32> =
        config["layer_types"].as_array().unwrap().iter().map(|t| if t == "conv" { 0 } else { kv }).collect();
    let mut keys = vec![
        ("attention.head_count_kv", WriteValue::i32s(&per_layer)),
        ("shortconv.l_cache", WriteValue::U32(config["conv_L_cache"].as_u64().unwrap() as u32)),
        ("feed_forward_length", WriteValue::U32(ffn)),
    ];
    keys.extend(extra.iter().cloned());
    let mut w = metadata(family, arch, "lfm2", &keys);
    let st = SafetensorsFile::open(&fixture(family).join("model.safetensors")).unwrap();
    let mut experts: std::collections::BTreeMap<(String, &str), Vec<Expert>> = Default::default();
    for name in st.tensors().keys() {
        let t = st.tensor(name).unwrap().unwrap();
        let (mut shape, values) = (t.shape.clone(), t.to_f32());
        let g = match name.as_str() {
            "model.embed_tokens.weight" => "token_embd.weight".to_string(),
            "model.embedding_norm.weight" => "token_embd_norm.weight".to_string(),
            _ => {
                let (layer, stem) = name.strip_prefix("model.layers.").unwrap().split_once('.').unwrap();
                if let Some(e) = stem.strip_prefix("feed_forward.experts.") {
                    let (e, w) = e.strip_suffix(".weight").unwrap().split_once('.').unwrap();
                    let g = match w {
                        "w1" => "ffn_gate_exps",
                        "w3" => "ffn_up_exps",
                        _ => "ffn_down_exps",
                    };
                    experts.entry((layer.to_string(), g)).or_default().push((e.parse().unwrap(), shape, values));
                    continue;
                }
                let g = match stem {
                    "operator_norm.weight" => "attn_norm.weight",
                    "ffn_norm.weight" => "ffn_norm.weight",
                    "self_attn.q_proj.weight" => "attn_q.weight",
                    "self_attn.k_proj.weight" => "attn_k.weight",
                    "self_attn.v_proj.weight" => "attn_v.weight",
                    "self_attn.out_proj.weight" => "attn_output.weight",
                    "self_attn.q_layernorm.weight" => "attn_q_norm.weight",
                    "self_attn.k_layernorm.weight" => "attn_k_norm.weight",
                    // The converter squeezes the conv's middle dim.
                    "conv.conv.weight" => {
                        shape.remove(1);
                        "shortconv.conv.weight"
                    }
                    "conv.in_proj.weight" => "shortconv.in_proj.weight",
                    "conv.out_proj.weight" => "shortconv.out_proj.weight",
                    "feed_forward.w1.weight" => "ffn_gate.weight",
                    "feed_forward.w3.weight" => "ffn_up.weight",
                    "feed_forward.w2.weight" => "ffn_down.weight",
                    "feed_forward.gate.weight" => "ffn_gate_inp.weight",
                    "feed_forward.expert_bias" => "exp_probs_b.bias",
                    other => panic!("no GGUF name for {other}"),
                };
                format!("blk.{layer}.{g}")
            }
        };
        w.f32_tensor(&g, &shape, &values);
    }
    for ((layer, g), mut parts) in experts {
        parts.sort_by_key(|p| p.0);
        let shape = [parts.len(), parts[0].1[0], parts[0].1[1]];
        let values: Vec<f32> = parts.into_iter().flat_map(|p| p.2).collect();
        w.f32_tensor(&format!("blk.{layer}.{g}.weight"), &shape, &values);
    }
    let path = dir.join(format!("{family}.gguf"));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

#[test]
fn an_lfm2_gguf_tokenizes_and_computes_as_its_safetensors_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    // The MLP width as the layers have it (its auto-adjusted 96, not the config's 128).
    let path = lfm2_gguf("lfm2", "lfm2", 96, &[], dir.path());
    let b = cpu();
    let s = Model::open(&path, &b).unwrap().decoder.spec;
    assert_eq!(s.architecture, "Lfm2ForCausalLM");
    assert_eq!(s.intermediate_size, 96);
    check_same("lfm2", &fixture("lfm2"), &path);
}

#[test]
fn an_lfm2_moe_gguf_computes_as_its_safetensors_checkpoint() {
    let config = json(&fixture("lfm2_moe").join("config.json"));
    let u = |k: &str| WriteValue::U32(config[k].as_u64().unwrap() as u32);
    let extra = [
        ("expert_count", u("num_experts")),
        ("expert_used_count", u("num_experts_per_tok")),
        ("expert_feed_forward_length", u("moe_intermediate_size")),
        ("leading_dense_block_count", u("num_dense_layers")),
        ("expert_gating_func", WriteValue::U32(2)),
        ("expert_weights_scale", WriteValue::F32(config["routed_scaling_factor"].as_f64().unwrap() as f32)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path =
        lfm2_gguf("lfm2_moe", "lfm2moe", config["intermediate_size"].as_u64().unwrap() as u32, &extra, dir.path());
    let b = cpu();
    let s = Model::open(&path, &b).unwrap().decoder.spec;
    assert_eq!(s.architecture, "Lfm2MoeForCausalLM");
    assert!(s.moe.as_ref().is_some_and(|m| m.choice_bias.is_some() && m.sparse_layers == [false, true, true, true]));
    check_same("lfm2_moe", &fixture("lfm2_moe"), &path);
}

/// The GGUF name (after `blk.{layer}.`) of GLM-4.5's and DeepSeek V3's router, choice bias and
/// shared expert tensor `stem`.
fn glm_router_name(stem: &str) -> Option<&'static str> {
    Some(match stem {
        "mlp.gate.weight" => "ffn_gate_inp.weight",
        "mlp.gate.e_score_correction_bias" => "exp_probs_b.bias",
        "mlp.shared_experts.gate_proj.weight" => "ffn_gate_shexp.weight",
        "mlp.shared_experts.up_proj.weight" => "ffn_up_shexp.weight",
        "mlp.shared_experts.down_proj.weight" => "ffn_down_shexp.weight",
        _ => return None,
    })
}

/// The GLM-4.5 fixture `family` as convert_hf_to_gguf.py writes it in `dir`: the router's
/// settings as expert_* keys, the rotated dims, groups as deepseek2's keys; the MTP block after
/// the decoder's (its layer's tensors as a decoder layer's, its own under `nextn.`), or where the
/// fixture has none, one holding only a norm (the decoder never reads it).
fn glm4_gguf(family: &str, dir: &Path) -> PathBuf {
    let config = json(&fixture(family).join("config.json"));
    let u = |k: &str| WriteValue::U32(config[k].as_u64().unwrap() as u32);
    let layers = config["num_hidden_layers"].as_u64().unwrap() as usize;
    let extra = [
        ("attention.key_length", u("head_dim")),
        ("attention.value_length", u("head_dim")),
        ("block_count", WriteValue::U32(layers as u32 + 1)),
        ("nextn_predict_layers", WriteValue::U32(1)),
        ("rope.dimension_count", WriteValue::U32(16)),
        ("expert_count", u("n_routed_experts")),
        ("expert_used_count", u("num_experts_per_tok")),
        ("expert_feed_forward_length", u("moe_intermediate_size")),
        ("expert_shared_count", u("n_shared_experts")),
        ("leading_dense_block_count", u("first_k_dense_replace")),
        ("expert_gating_func", WriteValue::U32(2)),
        ("expert_weights_scale", WriteValue::F32(config["routed_scaling_factor"].as_f64().unwrap() as f32)),
        ("expert_weights_norm", WriteValue::Bool(config["norm_topk_prob"].as_bool().unwrap())),
        ("expert_group_count", u("n_group")),
        ("expert_group_used_count", u("topk_group")),
    ];
    let mut w = metadata(family, "glm4moe", "glm4", &extra);
    let st = SafetensorsFile::open(&fixture(family).join("model.safetensors")).unwrap();
    let experts = config["n_routed_experts"].as_u64().unwrap() as usize;
    let mtp = config["num_nextn_predict_layers"].as_u64().unwrap_or(0) as usize;
    for name in st.tensors().keys() {
        let t = st.tensor(name).unwrap().unwrap();
        let Some(rest) = name.strip_prefix("model.layers.") else {
            w.f32_tensor(&gguf_name(name, false), &t.shape, &t.to_f32());
            continue;
        };
        let (layer, stem) = rest.split_once('.').unwrap();
        let g = match stem {
            "eh_proj.weight" => "nextn.eh_proj.weight",
            "enorm.weight" => "nextn.enorm.weight",
            "hnorm.weight" => "nextn.hnorm.weight",
            "shared_head.norm.weight" => "nextn.shared_head_norm.weight",
            "shared_head.head.weight" => "nextn.shared_head_head.weight",
            "embed_tokens.weight" => "nextn.embed_tokens.weight",
            "post_attention_layernorm.weight" => "post_attention_norm.weight",
            "self_attn.q_norm.weight" => "attn_q_norm.weight",
            "self_attn.k_norm.weight" => "attn_k_norm.weight",
            // Stacked below.
            s if s.starts_with("mlp.experts.") => continue,
            s => match glm_router_name(s) {
                Some(g) => g,
                None => {
                    w.f32_tensor(&gguf_name(name, false), &t.shape, &t.to_f32());
                    continue;
                }
            },
        };
        w.f32_tensor(&format!("blk.{layer}.{g}"), &t.shape, &t.to_f32());
    }
    for layer in 1..layers + mtp {
        stack_experts(&mut w, &st, layer, "mlp.", experts, MLP_EXPERTS);
    }
    if mtp == 0 {
        w.f32_tensor(&format!("blk.{layers}.nextn.enorm.weight"), &[64], &[1.0; 64]);
    }
    let path = dir.join(format!("{family}.gguf"));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

#[test]
fn a_glm4_moe_gguf_computes_as_its_safetensors_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = glm4_gguf("glm4_moe", dir.path());
    let b = cpu();
    let s = Model::open(&path, &b).unwrap().decoder.spec;
    assert_eq!((s.architecture.as_str(), s.num_layers), ("Glm4MoeForCausalLM", 3));
    assert!(s.qk_norm && s.attention_bias && s.mtp.is_some());
    check_same("glm4_moe", &fixture("glm4_moe"), &path);
}

/// The MTP heads beside `hf` and `gguf` (the fixture `family` both ways) give the same logits on
/// every golden prompt (in chunks of 5 rows).
fn same_mtp_logits(b: &CpuBackend, family: &str, hf: &Model<CpuBackend>, gguf: &Model<CpuBackend>) {
    let golden = json(&fixture(family).join("golden.json"));
    for prompt in golden["prompts"].as_array().unwrap() {
        let ids: Vec<i64> = prompt["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        let ids = hf.vocab.check(&ids).unwrap();
        let (want, got) = (mtp_logits(b, hf, ids.as_slice(), 5), mtp_logits(b, gguf, ids.as_slice(), 5));
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        let worst = want.iter().zip(&got).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
        assert!(worst <= 1e-5 * scale, "{family}, {} ids: {worst} of {scale}", ids.len());
    }
}

#[test]
fn a_glm4_moe_gguf_mtp_block_drafts_as_the_safetensors_checkpoints_head() {
    let dir = tempfile::tempdir().unwrap();
    let path = glm4_gguf("glm4_moe_mtp", dir.path());
    let b = cpu();
    let (hf, gguf) = (Model::open(&fixture("glm4_moe_mtp"), &b).unwrap(), Model::open(&path, &b).unwrap());
    same_mtp_logits(&b, "glm4_moe_mtp", &hf, &gguf);
    // A file that counts an MTP block but holds only a norm of it is refused naming what is missing.
    let bare = Model::open(&glm4_gguf("glm4_moe", dir.path()), &b).unwrap();
    let err = bare.load_mtp(&b).err().expect("refused").to_string();
    assert!(err.contains("model.layers.3."), "{err}");
}

#[test]
fn a_minimax_m2_gguf_computes_as_its_safetensors_checkpoint() {
    let config = json(&fixture("minimax_m2").join("config.json"));
    let u = |k: &str| WriteValue::U32(config[k].as_u64().unwrap() as u32);
    let extra = [
        ("attention.key_length", u("head_dim")),
        ("attention.value_length", u("head_dim")),
        ("rope.dimension_count", WriteValue::U32(16)),
        ("expert_count", u("num_local_experts")),
        ("expert_used_count", u("num_experts_per_tok")),
        ("expert_feed_forward_length", u("intermediate_size")),
        ("expert_gating_func", WriteValue::U32(2)),
    ];
    let mut w = metadata("minimax_m2", "minimax-m2", "minimax-m2", &extra);
    let st = SafetensorsFile::open(&fixture("minimax_m2").join("model.safetensors")).unwrap();
    let (experts, layers) = (config["num_local_experts"].as_u64().unwrap() as usize, 3);
    for name in st.tensors().keys() {
        let t = st.tensor(name).unwrap().unwrap();
        let Some(rest) = name.strip_prefix("model.layers.") else {
            w.f32_tensor(&gguf_name(name, false), &t.shape, &t.to_f32());
            continue;
        };
        let (layer, stem) = rest.split_once('.').unwrap();
        let g = match stem {
            "self_attn.q_norm.weight" => "attn_q_norm.weight",
            "self_attn.k_norm.weight" => "attn_k_norm.weight",
            "block_sparse_moe.gate.weight" => "ffn_gate_inp.weight",
            // Without a suffix, as some converters write it.
            "block_sparse_moe.e_score_correction_bias" => "exp_probs_b",
            s if s.starts_with("block_sparse_moe.experts.") => continue,
            _ => {
                w.f32_tensor(&gguf_name(name, false), &t.shape, &t.to_f32());
                continue;
            }
        };
        w.f32_tensor(&format!("blk.{layer}.{g}"), &t.shape, &t.to_f32());
    }
    for layer in 0..layers {
        stack_experts(&mut w, &st, layer, "block_sparse_moe.", experts, W_EXPERTS);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("minimax_m2.gguf");
    std::fs::write(&path, w.to_bytes()).unwrap();
    let b = cpu();
    let s = Model::open(&path, &b).unwrap().decoder.spec;
    assert_eq!(s.architecture, "MiniMaxM2ForCausalLM");
    assert!(s.qk_norm_full && s.rope_full.inv_freq.len() == 8, "16 of 32 dims rotate");
    check_same("minimax_m2", &fixture("minimax_m2"), &path);
}

/// Where `convert_hf_to_gguf.py` puts Qwen3.5's / Qwen3-Next's HF tensor `name` with a decoder of
/// `layers` layers: `Err` the GGUF name of one of the MTP head's own tensors (in the block after
/// the decoder's, under `nextn.`), `Ok` the HF name to map as a decoder tensor (the head's layer
/// `mtp.layers.0.` as layer `layers`).
fn qwen_mtp_name(name: &str, layers: usize) -> Result<String, String> {
    let own = match name {
        "mtp.fc.weight" => "eh_proj",
        "mtp.pre_fc_norm_embedding.weight" => "enorm",
        "mtp.pre_fc_norm_hidden.weight" => "hnorm",
        "mtp.norm.weight" => "shared_head_norm",
        _ => match name.strip_prefix("mtp.layers.0.") {
            Some(rest) => return Ok(format!("model.layers.{layers}.{rest}")),
            None => return Ok(name.to_string()),
        },
    };
    Err(format!("blk.{layers}.nextn.{own}.weight"))
}

/// Whether Qwen3.5's / Qwen3-Next's converter stores HF tensor `name` as `1 + w` (the
/// zero-centred norms, the MTP head's input norms too; not the delta rule's gated norm).
fn qwen_one_plus(name: &str) -> bool {
    (name.ends_with("norm.weight") || name.starts_with("mtp.pre_fc_norm_"))
        && !name.ends_with("linear_attn.norm.weight")
}

/// The Qwen3.5 fixture `family` as `convert_hf_to_gguf.py` writes it in `dir`: the ssm.* sizes,
/// which layers recur, the value heads tiled, norms as `1 + w`; one MTP block after the
/// decoder's (the head's own tensors under `nextn.`, its layer's as a decoder layer's; where the
/// fixture has no head, a norm the decoder never reads).
fn qwen3_5_gguf(family: &str, dir: &Path) -> PathBuf {
    qwen3_5_gguf_of(&fixture(family), family, "qwen35", dir)
}

/// [`qwen3_5_gguf`] of the checkpoint in `src` as architecture `arch` (`qwen35moe`: its experts
/// stacked, its router, shared expert and the shared expert's gate as Qwen3-Next's), named
/// `name`.
fn qwen3_5_gguf_of(src: &Path, name: &str, arch: &str, dir: &Path) -> PathBuf {
    let config = json(&src.join("config.json"));
    let u = |k: &str| config[k].as_u64().unwrap() as usize;
    let (nk, nv, dk, dv, taps) = (
        u("linear_num_key_heads"),
        u("linear_num_value_heads"),
        u("linear_key_head_dim"),
        u("linear_value_head_dim"),
        u("linear_conv_kernel_dim"),
    );
    let (r, layers) = (nv / nk, u("num_hidden_layers"));
    // As convert_hf_to_gguf.py writes Qwen3.5: the ssm.* sizes, which layers recur, one MTP
    // block after the decoder's.
    let recurrent: Vec<bool> =
        config["layer_types"].as_array().unwrap().iter().map(|t| t == "linear_attention").chain([false]).collect();
    let w32 = |n: usize| WriteValue::U32(n as u32);
    let extra = [
        ("attention.key_length", w32(u("head_dim"))),
        ("attention.value_length", w32(u("head_dim"))),
        ("block_count", w32(layers + 1)),
        ("nextn_predict_layers", w32(1)),
        ("rope.dimension_count", w32(8)),
        ("ssm.group_count", w32(nk)),
        ("ssm.time_step_rank", w32(nv)),
        ("ssm.state_size", w32(dk)),
        ("ssm.inner_size", w32(nv * dv)),
        ("ssm.conv_kernel", w32(taps)),
        (
            "attention.recurrent_layers",
            WriteValue::Array(ValueType::Bool, recurrent.iter().map(|&b| WriteValue::Bool(b)).collect()),
        ),
    ];
    let experts = config["num_experts"].as_u64().unwrap_or(0) as usize;
    let mut extra = extra.to_vec();
    if experts > 0 {
        extra.extend([
            ("expert_count", w32(experts)),
            ("expert_used_count", w32(u("num_experts_per_tok"))),
            ("expert_feed_forward_length", w32(u("moe_intermediate_size"))),
            ("expert_shared_feed_forward_length", w32(u("shared_expert_intermediate_size"))),
        ]);
    }
    let mut w = metadata_at(src, arch, "llama-bpe", &extra);
    // The converter's reorder of the value heads: tiled head t = j * nk + k holds grouped head
    // g = k * r + j; `width` values a head along the reordered dim.
    let grouped_of = |t: usize| (t % nk) * r + t / nk;
    let tile_rows = |values: &[f32], first: usize, width: usize, cols: usize| -> Vec<f32> {
        let mut out = values.to_vec();
        for t in 0..nv {
            let (dst, src) = ((first + t * width) * cols, (first + grouped_of(t) * width) * cols);
            out[dst..dst + width * cols].copy_from_slice(&values[src..src + width * cols]);
        }
        out
    };
    let st = SafetensorsFile::open(&src.join("model.safetensors")).unwrap();
    let mut mtp = false;
    for hf_name in st.tensors().keys() {
        let t = st.tensor(hf_name).unwrap().unwrap();
        let (mut shape, mut values) = (t.shape.clone(), t.to_f32());
        if qwen_one_plus(hf_name) {
            values.iter_mut().for_each(|v| *v += 1.0);
        }
        let name = match qwen_mtp_name(hf_name, layers) {
            Ok(name) => name,
            Err(own) => {
                w.f32_tensor(&own, &shape, &values);
                mtp = true;
                continue;
            }
        };
        let name = &name;
        let Some(rest) = name.strip_prefix("model.layers.") else {
            w.f32_tensor(&gguf_name(name, false), &shape, &values);
            continue;
        };
        let (layer, stem) = rest.split_once('.').unwrap();
        let cols = *shape.last().unwrap();
        let g = match stem {
            "post_attention_layernorm.weight" => "post_attention_norm.weight",
            "self_attn.q_norm.weight" => "attn_q_norm.weight",
            "self_attn.k_norm.weight" => "attn_k_norm.weight",
            "linear_attn.in_proj_qkv.weight" => {
                values = tile_rows(&values, 2 * nk * dk, dv, cols);
                "attn_qkv.weight"
            }
            "linear_attn.in_proj_z.weight" => {
                values = tile_rows(&values, 0, dv, cols);
                "attn_gate.weight"
            }
            "linear_attn.in_proj_b.weight" => {
                values = tile_rows(&values, 0, 1, cols);
                "ssm_beta.weight"
            }
            "linear_attn.in_proj_a.weight" => {
                values = tile_rows(&values, 0, 1, cols);
                "ssm_alpha.weight"
            }
            "linear_attn.A_log" => {
                values = tile_rows(&values, 0, 1, 1).iter().map(|v| -v.exp()).collect();
                "ssm_a"
            }
            "linear_attn.dt_bias" => {
                values = tile_rows(&values, 0, 1, 1);
                "ssm_dt.bias"
            }
            "linear_attn.conv1d.weight" => {
                shape.remove(1);
                values = tile_rows(&values, 2 * nk * dk, dv, taps);
                "ssm_conv1d.weight"
            }
            "linear_attn.norm.weight" => "ssm_norm.weight",
            "mlp.gate.weight" => "ffn_gate_inp.weight",
            "mlp.shared_expert.gate_proj.weight" => "ffn_gate_shexp.weight",
            "mlp.shared_expert.up_proj.weight" => "ffn_up_shexp.weight",
            "mlp.shared_expert.down_proj.weight" => "ffn_down_shexp.weight",
            "mlp.shared_expert_gate.weight" => {
                shape = vec![cols];
                "ffn_gate_inp_shexp.weight"
            }
            // Stacked below.
            s if s.starts_with("mlp.experts.") => continue,
            "linear_attn.out_proj.weight" => {
                // Its columns: one row at a time.
                let rows = shape[0];
                let mut out = values.clone();
                for row in 0..rows {
                    let tiled = tile_rows(&values[row * cols..(row + 1) * cols], 0, dv, 1);
                    out[row * cols..(row + 1) * cols].copy_from_slice(&tiled);
                }
                values = out;
                "ssm_out.weight"
            }
            _ => {
                w.f32_tensor(&gguf_name(name, false), &shape, &values);
                continue;
            }
        };
        w.f32_tensor(&format!("blk.{layer}.{g}"), &shape, &values);
    }
    if !mtp {
        w.f32_tensor(&format!("blk.{layers}.nextn.enorm.weight"), &[64], &[1.0; 64]);
    }
    for layer in (0..layers).filter(|_| experts > 0) {
        stack_experts(&mut w, &st, layer, "mlp.", experts, MLP_EXPERTS);
    }
    let path = dir.join(format!("{name}.gguf"));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

#[test]
fn a_qwen3_5_gguf_with_tiled_value_heads_computes_as_its_safetensors_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = qwen3_5_gguf("qwen3_5", dir.path());
    let layers = json(&fixture("qwen3_5").join("config.json"))["num_hidden_layers"].as_u64().unwrap() as usize;
    let b = cpu();
    let s = Model::open(&path, &b).unwrap().decoder.spec;
    assert_eq!((s.architecture.as_str(), s.num_layers), ("Qwen3_5ForCausalLM", layers));
    assert!(s.gdn.as_ref().is_some_and(|g| g.tiled_v_heads), "4 value heads over 2 key heads: tiled");
    check_same("qwen3_5", &fixture("qwen3_5"), &path);
}

#[test]
fn a_qwen3_5_gguf_mtp_block_drafts_as_the_safetensors_checkpoints_head() {
    let dir = tempfile::tempdir().unwrap();
    let path = qwen3_5_gguf("qwen3_5_mtp", dir.path());
    let b = cpu();
    let (hf, gguf) = (Model::open(&fixture("qwen3_5_mtp"), &b).unwrap(), Model::open(&path, &b).unwrap());
    check_same("qwen3_5_mtp", &fixture("qwen3_5_mtp"), &path);
    same_mtp_logits(&b, "qwen3_5_mtp", &hf, &gguf);
}

/// The Nemotron-H fixture `family` as `convert_hf_to_gguf.py` writes it in `dir`
/// (`nemotron_h`, or `nemotron_h_moe` with experts): KV heads and MLP or expert widths one a
/// layer (0 where the layer has none), the Mamba2 sizes as ssm.* keys, the experts' settings as
/// expert_* keys (the group count with how many a token uses, which the converter leaves out),
/// the experts stacked, their latent projections as `ffn_latent_down` / `ffn_latent_up`.
fn nemotron_h_gguf(family: &str, dir: &Path) -> PathBuf {
    let config = json(&fixture(family).join("config.json"));
    let u = |k: &str| config[k].as_u64().unwrap() as u32;
    let kinds: Vec<&str> =
        config["layers_block_type"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let attention = |k: &str| k == "full_attention" || k == "attention";
    let kv: Vec<i32> = kinds.iter().map(|k| if attention(k) { u("num_key_value_heads") as i32 } else { 0 }).collect();
    let ff: Vec<i32> = (kinds.iter())
        .map(|k| match *k {
            "mlp" => u("intermediate_size") as i32,
            "moe" => u("moe_intermediate_size") as i32,
            _ => 0,
        })
        .collect();
    let (heads, head_dim, groups) = (u("mamba_num_heads"), u("mamba_head_dim"), u("n_groups"));
    let moe = kinds.contains(&"moe");
    let mut extra = vec![
        ("block_count", WriteValue::U32(kinds.len() as u32)),
        ("attention.head_count_kv", WriteValue::i32s(&kv)),
        ("feed_forward_length", WriteValue::i32s(&ff)),
        ("attention.key_length", WriteValue::U32(u("head_dim"))),
        ("attention.value_length", WriteValue::U32(u("head_dim"))),
        ("ssm.time_step_rank", WriteValue::U32(heads)),
        ("ssm.inner_size", WriteValue::U32(heads * head_dim)),
        ("ssm.group_count", WriteValue::U32(groups)),
        ("ssm.state_size", WriteValue::U32(u("ssm_state_size"))),
        ("ssm.conv_kernel", WriteValue::U32(u("conv_kernel"))),
        ("attention.layer_norm_rms_epsilon", WriteValue::F32(config["layer_norm_epsilon"].as_f64().unwrap() as f32)),
    ];
    if moe {
        extra.extend([
            ("expert_count", WriteValue::U32(u("n_routed_experts"))),
            ("expert_used_count", WriteValue::U32(u("num_experts_per_tok"))),
            ("expert_feed_forward_length", WriteValue::U32(u("moe_intermediate_size"))),
            ("expert_shared_feed_forward_length", WriteValue::U32(u("moe_shared_expert_intermediate_size"))),
            ("expert_shared_count", WriteValue::U32(u("n_shared_experts"))),
            ("expert_weights_norm", WriteValue::Bool(config["norm_topk_prob"].as_bool().unwrap())),
            ("expert_weights_scale", WriteValue::F32(config["routed_scaling_factor"].as_f64().unwrap() as f32)),
            ("expert_group_count", WriteValue::U32(u("n_group"))),
            ("expert_group_used_count", WriteValue::U32(u("topk_group"))),
        ]);
    }
    let arch = if moe { "nemotron_h_moe" } else { "nemotron_h" };
    let mut w = metadata(family, arch, "llama-bpe", &extra);
    let st = SafetensorsFile::open(&fixture(family).join("model.safetensors")).unwrap();
    for name in st.tensors().keys() {
        let t = st.tensor(name).unwrap().unwrap();
        let (mut shape, mut values) = (t.shape.clone(), t.to_f32());
        let g = match name.as_str() {
            "backbone.embeddings.weight" => "token_embd.weight".to_string(),
            "backbone.norm_f.weight" => "output_norm.weight".to_string(),
            "lm_head.weight" => "output.weight".to_string(),
            _ => {
                let (layer, stem) = name.strip_prefix("backbone.layers.").unwrap().split_once('.').unwrap();
                let g = match stem {
                    "norm.weight" => "attn_norm.weight",
                    "mixer.in_proj.weight" => "ssm_in.weight",
                    "mixer.conv1d.weight" => {
                        shape.remove(1);
                        "ssm_conv1d.weight"
                    }
                    "mixer.conv1d.bias" => "ssm_conv1d.bias",
                    "mixer.dt_bias" => "ssm_dt.bias",
                    // llama.cpp's Mamba2: -exp(A_log) and D as [heads, 1], the norm per group.
                    "mixer.A_log" => {
                        values.iter_mut().for_each(|v| *v = -v.exp());
                        shape = vec![heads as usize, 1];
                        "ssm_a"
                    }
                    "mixer.D" => {
                        shape = vec![heads as usize, 1];
                        "ssm_d"
                    }
                    "mixer.norm.weight" => {
                        shape = vec![groups as usize, (heads * head_dim / groups) as usize];
                        "ssm_norm.weight"
                    }
                    "mixer.out_proj.weight" => "ssm_out.weight",
                    "mixer.q_proj.weight" => "attn_q.weight",
                    "mixer.k_proj.weight" => "attn_k.weight",
                    "mixer.v_proj.weight" => "attn_v.weight",
                    "mixer.o_proj.weight" => "attn_output.weight",
                    "mixer.up_proj.weight" => "ffn_up.weight",
                    "mixer.down_proj.weight" => "ffn_down.weight",
                    "mixer.gate.weight" => "ffn_gate_inp.weight",
                    "mixer.gate.e_score_correction_bias" => "exp_probs_b.bias",
                    "mixer.fc1_latent_proj.weight" => "ffn_latent_down.weight",
                    "mixer.fc2_latent_proj.weight" => "ffn_latent_up.weight",
                    "mixer.shared_experts.up_proj.weight" => "ffn_up_shexp.weight",
                    "mixer.shared_experts.down_proj.weight" => "ffn_down_shexp.weight",
                    // Stacked below.
                    s if s.starts_with("mixer.experts.") => continue,
                    other => panic!("no GGUF name for {other}"),
                };
                format!("blk.{layer}.{g}")
            }
        };
        w.f32_tensor(&g, &shape, &values);
    }
    let experts = config["n_routed_experts"].as_u64().unwrap_or(0) as usize;
    for layer in (0..kinds.len()).filter(|&i| kinds[i] == "moe") {
        let prefix = format!("backbone.layers.{layer}.mixer.");
        stack_experts_at(
            &mut w,
            &st,
            &prefix,
            layer,
            experts,
            &[("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")],
        );
    }
    let path = dir.join(format!("{family}.gguf"));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

#[test]
fn nemotron_h_ggufs_dense_and_moe_compute_as_their_safetensors_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let b = cpu();
    for family in ["nemotron_h", "nemotron_h_moe"] {
        let path = nemotron_h_gguf(family, dir.path());
        let layers = json(&fixture(family).join("config.json"))["layers_block_type"].as_array().unwrap().len();
        let s = Model::open(&path, &b).unwrap().decoder.spec;
        assert_eq!((s.architecture.as_str(), s.num_layers), ("NemotronHForCausalLM", layers));
        assert_eq!(s.moe.is_some(), family.ends_with("moe"), "{family}");
        check_same(family, &fixture(family), &path);
    }
}

#[test]
fn qwen3_next_ggufs_split_and_fused_compute_as_their_safetensors_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let b = cpu();
    for split in [true, false] {
        let path = qwen3_next_gguf("qwen3_next", split, dir.path());
        let s = Model::open(&path, &b).unwrap().decoder.spec;
        assert_eq!(s.architecture, "Qwen3NextForCausalLM");
        assert!(s.gdn.as_ref().is_some_and(|g| g.fused_inputs != split && g.fused_ba && !g.tiled_v_heads));
        check_same("qwen3_next", &fixture("qwen3_next"), &path);
    }
}

#[test]
fn a_qwen3_next_gguf_mtp_block_drafts_as_the_safetensors_checkpoints_head() {
    let dir = tempfile::tempdir().unwrap();
    let path = qwen3_next_gguf("qwen3_next_mtp", true, dir.path());
    let b = cpu();
    let (hf, gguf) = (Model::open(&fixture("qwen3_next_mtp"), &b).unwrap(), Model::open(&path, &b).unwrap());
    check_same("qwen3_next_mtp", &fixture("qwen3_next_mtp"), &path);
    same_mtp_logits(&b, "qwen3_next_mtp", &hf, &gguf);
}

/// The Qwen3-Next fixture `family` as `convert_hf_to_gguf.py` writes it in `dir`: q, k, v and z
/// split into `attn_qkv` / `attn_gate` where `split`, else fused as older converters left them
/// (`ssm_in`); its MTP head, where it has one, in a block after the decoder's.
fn qwen3_next_gguf(family: &str, split: bool, dir: &Path) -> PathBuf {
    let config = json(&fixture(family).join("config.json"));
    let u = |k: &str| config[k].as_u64().unwrap() as usize;
    let (nk, nv, dk, dv, taps) = (
        u("linear_num_key_heads"),
        u("linear_num_value_heads"),
        u("linear_key_head_dim"),
        u("linear_value_head_dim"),
        u("linear_conv_kernel_dim"),
    );
    let (r, layers, experts) = (nv / nk, u("num_hidden_layers"), u("num_experts"));
    let mtp = config["mtp_num_hidden_layers"].as_u64().unwrap_or(0) as usize;
    let types = config["layer_types"].as_array().unwrap().iter().map(|t| t == "linear_attention");
    let recurrent: Vec<WriteValue> = types.chain((0..mtp).map(|_| false)).map(WriteValue::Bool).collect();
    let w32 = |n: usize| WriteValue::U32(n as u32);
    let extra = [
        ("block_count", w32(layers + mtp)),
        ("nextn_predict_layers", w32(mtp)),
        ("attention.key_length", w32(u("head_dim"))),
        ("attention.value_length", w32(u("head_dim"))),
        ("rope.dimension_count", w32(8)),
        ("ssm.group_count", w32(nk)),
        ("ssm.time_step_rank", w32(nv)),
        ("ssm.state_size", w32(dk)),
        ("ssm.inner_size", w32(nv * dv)),
        ("ssm.conv_kernel", w32(taps)),
        ("attention.recurrent_layers", WriteValue::Array(ValueType::Bool, recurrent)),
        ("expert_count", w32(experts)),
        ("expert_used_count", w32(u("num_experts_per_tok"))),
        ("expert_feed_forward_length", w32(u("moe_intermediate_size"))),
        ("expert_shared_feed_forward_length", w32(u("shared_expert_intermediate_size"))),
    ];
    let mut w = metadata(family, "qwen3next", "llama-bpe", &extra);
    // in_proj_qkvz's rows per key head `[q (dk), k (dk), v (r dv), z (r dv)]`, split as the
    // converter splits them: every head's q, then k, then v (attn_qkv), and z (attn_gate).
    let per = 2 * dk + 2 * r * dv;
    let part =
        |off: usize, len: usize| -> Vec<usize> { (0..nk).flat_map(|h| h * per + off..h * per + off + len).collect() };
    let qkv_rows = [part(0, dk), part(dk, dk), part(2 * dk, r * dv)].concat();
    let z_rows = part(2 * dk + r * dv, r * dv);
    let rows_of = |values: &[f32], rows: &[usize], cols: usize| -> Vec<f32> {
        rows.iter().flat_map(|&i| values[i * cols..(i + 1) * cols].iter().copied()).collect()
    };
    let st = SafetensorsFile::open(&fixture(family).join("model.safetensors")).unwrap();
    for hf_name in st.tensors().keys() {
        let t = st.tensor(hf_name).unwrap().unwrap();
        let (mut shape, mut values) = (t.shape.clone(), t.to_f32());
        if qwen_one_plus(hf_name) {
            values.iter_mut().for_each(|v| *v += 1.0);
        }
        let name = match qwen_mtp_name(hf_name, layers) {
            Ok(name) => name,
            Err(own) => {
                w.f32_tensor(&own, &shape, &values);
                continue;
            }
        };
        let name = &name;
        let Some(rest) = name.strip_prefix("model.layers.") else {
            w.f32_tensor(&gguf_name(name, false), &shape, &values);
            continue;
        };
        let (layer, stem) = rest.split_once('.').unwrap();
        let out = |g: &str| format!("blk.{layer}.{g}");
        let cols = *shape.last().unwrap();
        let g = match stem {
            "linear_attn.in_proj_qkvz.weight" if !split => "ssm_in.weight",
            "linear_attn.in_proj_qkvz.weight" => {
                w.f32_tensor(&out("attn_qkv.weight"), &[qkv_rows.len(), cols], &rows_of(&values, &qkv_rows, cols));
                w.f32_tensor(&out("attn_gate.weight"), &[z_rows.len(), cols], &rows_of(&values, &z_rows, cols));
                continue;
            }
            "linear_attn.in_proj_ba.weight" => "ssm_ba.weight",
            "linear_attn.A_log" => {
                values.iter_mut().for_each(|v| *v = -v.exp());
                "ssm_a"
            }
            "linear_attn.dt_bias" => "ssm_dt.bias",
            "linear_attn.conv1d.weight" => {
                shape.remove(1);
                "ssm_conv1d.weight"
            }
            "linear_attn.norm.weight" => "ssm_norm.weight",
            "linear_attn.out_proj.weight" => "ssm_out.weight",
            "post_attention_layernorm.weight" => "post_attention_norm.weight",
            "self_attn.q_norm.weight" => "attn_q_norm.weight",
            "self_attn.k_norm.weight" => "attn_k_norm.weight",
            "mlp.gate.weight" => "ffn_gate_inp.weight",
            "mlp.shared_expert.gate_proj.weight" => "ffn_gate_shexp.weight",
            "mlp.shared_expert.up_proj.weight" => "ffn_up_shexp.weight",
            "mlp.shared_expert.down_proj.weight" => "ffn_down_shexp.weight",
            "mlp.shared_expert_gate.weight" => {
                shape = vec![cols];
                "ffn_gate_inp_shexp.weight"
            }
            s if s.starts_with("mlp.experts.") => continue,
            _ => {
                w.f32_tensor(&gguf_name(name, false), &shape, &values);
                continue;
            }
        };
        w.f32_tensor(&out(g), &shape, &values);
    }
    for layer in 0..layers {
        if st.tensor(&format!("model.layers.{layer}.mlp.gate.weight")).unwrap().is_none() {
            continue;
        }
        stack_experts(&mut w, &st, layer, "mlp.", experts, MLP_EXPERTS);
    }
    let path = dir.join(format!("{family}-{}.gguf", if split { "split" } else { "fused" }));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

/// Metadata keys (after `{arch}.`) and values, as `metadata` takes them.
type Extra = Vec<(&'static str, WriteValue)>;

/// A change to [`Extra`].
type Edit<'a> = &'a dyn Fn(&mut Extra);

/// The DeepSeek V3 fixture as `convert_hf_to_gguf.py` writes it (`deepseek2`): `kv_b_proj`
/// split into the transposed key half and the value half with the MLA keys where `split`, else
/// whole with the older files' key and value lengths; YaRN's `mscale_all_dim` as a tenth in
/// `yarn_log_multiplier`; one key-value head (MQA over the latent); its metadata then changed
/// by `edit`.
fn deepseek2_gguf(split: bool, dir: &Path, edit: Edit<'_>) -> PathBuf {
    mla_gguf("deepseek_v3", "deepseek2", split, dir, edit)
}

/// [`deepseek2_gguf`] of the latent-attention fixture `family` as architecture `arch`: GLM-5's
/// (`glm-dsa`) with its indexer keys and tensors (`indexer.*`), and where the fixture has an MTP
/// layer, its block after the decoder's (`nextn.*` beside the layer's own tensors).
fn mla_gguf(family: &str, arch: &str, split: bool, dir: &Path, edit: Edit<'_>) -> PathBuf {
    let config = json(&fixture(family).join("config.json"));
    let n = |k: &str| config[k].as_u64().unwrap() as usize;
    let u = |k: &str| WriteValue::U32(n(k) as u32);
    let (heads, lora, nope, rope, dv) =
        (n("num_attention_heads"), n("kv_lora_rank"), n("qk_nope_head_dim"), n("qk_rope_head_dim"), n("v_head_dim"));
    let yarn = &config["rope_parameters"];
    let mut extra = vec![
        ("attention.head_count_kv", WriteValue::U32(1)),
        ("attention.q_lora_rank", u("q_lora_rank")),
        ("attention.kv_lora_rank", u("kv_lora_rank")),
        ("rope.dimension_count", u("qk_rope_head_dim")),
        ("rope.scaling.type", WriteValue::str("yarn")),
        ("rope.scaling.factor", WriteValue::F32(yarn["factor"].as_f64().unwrap() as f32)),
        (
            "rope.scaling.original_context_length",
            WriteValue::U32(yarn["original_max_position_embeddings"].as_u64().unwrap() as u32),
        ),
        ("rope.scaling.yarn_log_multiplier", WriteValue::F32(0.1 * yarn["mscale_all_dim"].as_f64().unwrap() as f32)),
        ("expert_count", u("n_routed_experts")),
        ("expert_used_count", u("num_experts_per_tok")),
        ("expert_feed_forward_length", u("moe_intermediate_size")),
        ("expert_shared_count", u("n_shared_experts")),
        ("leading_dense_block_count", u("first_k_dense_replace")),
        ("expert_gating_func", WriteValue::U32(2)),
        ("expert_weights_scale", WriteValue::F32(config["routed_scaling_factor"].as_f64().unwrap() as f32)),
        ("expert_weights_norm", WriteValue::Bool(config["norm_topk_prob"].as_bool().unwrap())),
        ("expert_group_count", u("n_group")),
        ("expert_group_used_count", u("topk_group")),
    ];
    let mtp = config["num_nextn_predict_layers"].as_u64().unwrap_or(0) as usize;
    if mtp > 0 {
        extra.push(("block_count", WriteValue::U32((n("num_hidden_layers") + mtp) as u32)));
        extra.push(("nextn_predict_layers", WriteValue::U32(mtp as u32)));
    }
    if config.get("index_n_heads").is_some() {
        extra.extend([
            ("attention.indexer.head_count", u("index_n_heads")),
            ("attention.indexer.key_length", u("index_head_dim")),
            ("attention.indexer.top_k", u("index_topk")),
        ]);
    }
    if split {
        extra.extend([
            ("attention.key_length", WriteValue::U32((lora + rope) as u32)),
            ("attention.value_length", WriteValue::U32(lora as u32)),
            ("attention.key_length_mla", WriteValue::U32((nope + rope) as u32)),
            ("attention.value_length_mla", WriteValue::U32(dv as u32)),
        ]);
    } else {
        extra.extend([
            ("attention.key_length", WriteValue::U32((nope + rope) as u32)),
            ("attention.value_length", WriteValue::U32(dv as u32)),
        ]);
    }
    edit(&mut extra);
    let mut w = metadata(family, arch, "llama-bpe", &extra);
    let st = SafetensorsFile::open(&fixture(family).join("model.safetensors")).unwrap();
    let (experts, layers) = (n("n_routed_experts"), n("num_hidden_layers") + mtp);
    for name in st.tensors().keys() {
        let t = st.tensor(name).unwrap().unwrap();
        let Some(rest) = name.strip_prefix("model.layers.") else {
            w.f32_tensor(&gguf_name(name, false), &t.shape, &t.to_f32());
            continue;
        };
        let (layer, stem) = rest.split_once('.').unwrap();
        let g = match stem {
            "self_attn.q_a_proj.weight" => "attn_q_a.weight",
            "self_attn.q_a_layernorm.weight" => "attn_q_a_norm.weight",
            "self_attn.q_b_proj.weight" => "attn_q_b.weight",
            "self_attn.kv_a_proj_with_mqa.weight" => "attn_kv_a_mqa.weight",
            "self_attn.kv_a_layernorm.weight" => "attn_kv_a_norm.weight",
            "self_attn.indexer.wq_b.weight" => "indexer.attn_q_b.weight",
            "self_attn.indexer.wk.weight" => "indexer.attn_k.weight",
            "self_attn.indexer.k_norm.weight" => "indexer.k_norm.weight",
            "self_attn.indexer.k_norm.bias" => "indexer.k_norm.bias",
            "self_attn.indexer.weights_proj.weight" => "indexer.proj.weight",
            "eh_proj.weight" => "nextn.eh_proj.weight",
            "enorm.weight" => "nextn.enorm.weight",
            "hnorm.weight" => "nextn.hnorm.weight",
            "shared_head.norm.weight" => "nextn.shared_head_norm.weight",
            "self_attn.kv_b_proj.weight" if !split => "attn_kv_b.weight",
            "self_attn.kv_b_proj.weight" => {
                // Per head: nope key rows then dv value rows of `lora`; the key half transposed.
                let kv = t.to_f32();
                let (mut k_b, mut v_b) = (Vec::new(), Vec::new());
                for h in 0..heads {
                    let row = |i: usize| &kv[(h * (nope + dv) + i) * lora..][..lora];
                    k_b.extend((0..lora).flat_map(|o| (0..nope).map(move |i| row(i)[o])));
                    v_b.extend((0..dv).flat_map(|o| row(nope + o).to_vec()));
                }
                w.f32_tensor(&format!("blk.{layer}.attn_k_b.weight"), &[heads, lora, nope], &k_b);
                w.f32_tensor(&format!("blk.{layer}.attn_v_b.weight"), &[heads, dv, lora], &v_b);
                continue;
            }
            // Stacked below.
            s if s.starts_with("mlp.experts.") => continue,
            s => match glm_router_name(s) {
                Some(g) => g,
                None => {
                    w.f32_tensor(&gguf_name(name, false), &t.shape, &t.to_f32());
                    continue;
                }
            },
        };
        w.f32_tensor(&format!("blk.{layer}.{g}"), &t.shape, &t.to_f32());
    }
    for layer in n("first_k_dense_replace")..layers {
        stack_experts(&mut w, &st, layer, "mlp.", experts, MLP_EXPERTS);
    }
    let path = dir.join(format!("{family}_{}.gguf", if split { "mla" } else { "kv_b" }));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

/// A copy of the fixture `family` in `dir` whose YaRN `mscale` is its `mscale_all_dim`, as
/// llama.cpp takes them (and the released checkpoints set them; the fixtures' differ).
fn equal_mscales(family: &str, dir: &Path) -> PathBuf {
    let same = dir.join(format!("{family}-hf"));
    std::fs::create_dir(&same).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture(family).join(f), same.join(f)).unwrap();
    }
    let mut config = json(&same.join("config.json"));
    config["rope_parameters"]["mscale"] = config["rope_parameters"]["mscale_all_dim"].clone();
    std::fs::write(same.join("config.json"), config.to_string()).unwrap();
    same
}

#[test]
fn a_deepseek2_gguf_computes_as_its_safetensors_checkpoint_read_as_llama_cpp_reads_yarn() {
    let dir = tempfile::tempdir().unwrap();
    let same = equal_mscales("deepseek_v3", dir.path());
    let b = cpu();
    for split in [true, false] {
        let path = deepseek2_gguf(split, dir.path(), &|_| {});
        let s = Model::open(&path, &b).unwrap().decoder.spec;
        assert_eq!((s.architecture.as_str(), s.num_layers), ("DeepseekV3ForCausalLM", 3));
        let mla = s.mla.expect("latent attention");
        assert_eq!((mla.q_lora_rank, mla.kv_lora_rank, mla.qk_head_dim(), mla.v_head_dim), (Some(48), 32, 40, 20));
        assert!(mla.rope_interleave, "ggml's normal rope rotates adjacent pairs");
        check_same("deepseek_v3", &same, &path);
    }
}

#[test]
fn a_deepseek2_gguf_routed_by_softmax_or_without_the_yarn_multiplier_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let b = cpu();
    let softmax = |e: &mut Extra| {
        e.retain(|(k, _)| *k != "expert_gating_func");
        e.push(("expert_gating_func", WriteValue::U32(1)));
    };
    let unsaid = |e: &mut Extra| e.retain(|(k, _)| *k != "expert_gating_func");
    let no_mul = |e: &mut Extra| e.retain(|(k, _)| *k != "rope.scaling.yarn_log_multiplier");
    let cases: [(Edit<'_>, &str); 3] = [
        (&softmax, "expert_gating_func 1"),
        (&unsaid, "expert_gating_func is absent"),
        (&no_mul, "yarn_log_multiplier"),
    ];
    for (edit, why) in cases {
        let path = deepseek2_gguf(true, dir.path(), edit);
        let err = Model::open(&path, &b).err().expect("refused").to_string();
        assert!(err.contains(why), "{why}: {err}");
    }
}

#[test]
fn latent_ggufs_with_any_key_out_of_range_load_or_are_refused_never_panic() {
    // Each of the keys the converter writes (DeepSeek V3's, GLM-5's with its indexer and MTP
    // block), one at a time, at 0, 1 and the type's largest (NaN, negative and 0 for the floats):
    // Model::open answers Ok or an error, never a panic.
    let dir = tempfile::tempdir().unwrap();
    let b = cpu();
    for (family, arch) in [("deepseek_v3", "deepseek2"), ("glm_moe_dsa_mtp", "glm-dsa")] {
        let keys = std::cell::RefCell::new(Vec::new());
        mla_gguf(family, arch, true, dir.path(), &|e| keys.borrow_mut().extend(e.iter().map(|(k, v)| (*k, v.clone()))));
        for (key, value) in keys.into_inner() {
            let tries = match value {
                WriteValue::U32(_) => vec![WriteValue::U32(0), WriteValue::U32(1), WriteValue::U32(u32::MAX)],
                WriteValue::F32(_) => vec![WriteValue::F32(f32::NAN), WriteValue::F32(-1.0), WriteValue::F32(0.0)],
                _ => continue,
            };
            for bad in tries {
                let path = mla_gguf(family, arch, true, dir.path(), &|e| {
                    if let Some(slot) = e.iter_mut().find(|(k, _)| *k == key) {
                        slot.1 = bad.clone();
                    }
                });
                let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Model::open(&path, &b).err()));
                let Ok(refused) = opened else { panic!("{arch}: {key} = {bad:?} panicked") };
                // A multiplier that is not a number would make every logit NaN.
                if key == "rope.scaling.yarn_log_multiplier" && matches!(bad, WriteValue::F32(v) if v.is_nan()) {
                    assert!(refused.is_some(), "{arch}: {key} = NaN loaded");
                }
            }
        }
    }
}

#[test]
fn a_glm_dsa_gguf_computes_and_drafts_as_its_safetensors_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let b = cpu();
    let path = mla_gguf("glm_moe_dsa", "glm-dsa", true, dir.path(), &|_| {});
    let s = Model::open(&path, &b).unwrap().decoder.spec;
    assert_eq!((s.architecture.as_str(), s.num_layers), ("GlmMoeDsaForCausalLM", 3));
    check_same("glm_moe_dsa", &equal_mscales("glm_moe_dsa", dir.path()), &path);
    // The MTP block after the decoder's drafts as the checkpoint's head does.
    let path = mla_gguf("glm_moe_dsa_mtp", "glm-dsa", true, dir.path(), &|_| {});
    let same = equal_mscales("glm_moe_dsa_mtp", dir.path());
    let (hf, gguf) = (Model::open(&same, &b).unwrap(), Model::open(&path, &b).unwrap());
    check_same("glm_moe_dsa_mtp", &same, &path);
    same_mtp_logits(&b, "glm_moe_dsa_mtp", &hf, &gguf);
    // Shared indexer layers, said or left to be assumed, are refused by name.
    let shared = |e: &mut Extra| {
        let types = WriteValue::Array(ValueType::Bool, vec![WriteValue::Bool(true), WriteValue::Bool(false)]);
        e.push(("attention.indexer.types", types));
    };
    let err = Model::open(&mla_gguf("glm_moe_dsa", "glm-dsa", true, dir.path(), &shared), &b).err().unwrap();
    assert!(err.to_string().contains("layer 1 shares"), "{err}");
}

/// A Qwen3.5-MoE checkpoint in `dir` built from the qwen3_5 fixture: its layers with each dense
/// MLP replaced by 4 experts (top 2) and a gated shared expert of deterministic values (the
/// fixture script makes no Qwen3.5-MoE checkpoint: transformers reloads its tokenizer as another;
/// the experts' code is Qwen3-Next's, checked against transformers there).
fn qwen3_5_moe_checkpoint(dir: &Path) -> PathBuf {
    let out = dir.join("qwen3_5_moe");
    std::fs::create_dir(&out).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json", "golden.json"] {
        std::fs::copy(fixture("qwen3_5").join(f), out.join(f)).unwrap();
    }
    let mut config = json(&fixture("qwen3_5").join("config.json"));
    let (experts, inter, shared) = (4usize, 16usize, 24usize);
    config["architectures"] = serde_json::json!(["Qwen3_5MoeForCausalLM"]);
    config["model_type"] = "qwen3_5_moe_text".into();
    config["num_experts"] = experts.into();
    config["num_experts_per_tok"] = 2.into();
    config["moe_intermediate_size"] = inter.into();
    config["shared_expert_intermediate_size"] = shared.into();
    std::fs::write(out.join("config.json"), config.to_string()).unwrap();
    let (hidden, layers) = (config["hidden_size"].as_u64().unwrap() as usize, 3);
    let st = SafetensorsFile::open(&fixture("qwen3_5").join("model.safetensors")).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for name in st.tensors().keys().filter(|n| !n.contains(".mlp.")) {
        let t = st.tensor(name).unwrap().unwrap();
        tensors.push((name.clone(), t.shape.clone(), t.to_f32()));
    }
    let mut seed = 7u64;
    let mut values = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2
            })
            .collect()
    };
    for l in 0..layers {
        let p = format!("model.layers.{l}.mlp.");
        tensors.push((format!("{p}gate.weight"), vec![experts, hidden], values(experts * hidden)));
        for e in 0..experts {
            for (proj, shape) in
                [("gate_proj", [inter, hidden]), ("up_proj", [inter, hidden]), ("down_proj", [hidden, inter])]
            {
                tensors.push((format!("{p}experts.{e}.{proj}.weight"), shape.to_vec(), values(inter * hidden)));
            }
        }
        for (proj, shape) in
            [("gate_proj", [shared, hidden]), ("up_proj", [shared, hidden]), ("down_proj", [hidden, shared])]
        {
            tensors.push((format!("{p}shared_expert.{proj}.weight"), shape.to_vec(), values(shared * hidden)));
        }
        tensors.push((format!("{p}shared_expert_gate.weight"), vec![1, hidden], values(hidden)));
    }
    let bytes: Vec<Vec<u8>> =
        tensors.iter().map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, shape, _), b)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), b).unwrap())
        })
        .collect();
    std::fs::write(out.join("model.safetensors"), safetensors::serialize(views, None).unwrap()).unwrap();
    out
}

#[test]
fn a_qwen3_5_moe_gguf_computes_as_its_safetensors_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let hf = qwen3_5_moe_checkpoint(dir.path());
    let path = qwen3_5_gguf_of(&hf, "qwen3_5_moe", "qwen35moe", dir.path());
    let b = cpu();
    let s = Model::open(&path, &b).unwrap().decoder.spec;
    assert_eq!(s.architecture, "Qwen3_5MoeForCausalLM");
    assert!(s.moe.as_ref().is_some_and(|m| m.shared.is_some()), "experts and the gated shared expert");
    assert!(s.gdn.as_ref().is_some_and(|g| g.tiled_v_heads), "the value heads as the converter tiles them");
    // (The fixture's golden prompts and encodings: the same vocabulary and attention weights.)
    check_same("qwen3_5", &hf, &path);
}

/// The Gemma 4 fixture `family` as `convert_hf_to_gguf.py` writes it (`gemma4`): full and
/// sliding head widths as `key_length` / `key_length_swa`, KV heads and (double-wide) MLP widths
/// one a layer, the layer kinds as `sliding_window_pattern`, the full layers' proportional rope as
/// the `rope_freqs` tensor, plain norms, per-layer input and MoE tensors under llama.cpp's names.
fn gemma4_gguf(family: &str, dir: &Path) -> PathBuf {
    gemma4_gguf_edited(family, dir, None, &|_| {})
}

/// [`gemma4_gguf`] with `freqs` for its `rope_freqs` tensor, and `edit` applied last.
fn gemma4_gguf_edited(family: &str, dir: &Path, freqs: Option<Vec<f32>>, edit: &dyn Fn(&mut GgufWriter)) -> PathBuf {
    let config = json(&fixture(family).join("config.json"));
    let u = |k: &str| config[k].as_u64().unwrap_or(0) as u32;
    let layers = u("num_hidden_layers") as usize;
    let sliding: Vec<bool> =
        config["layer_types"].as_array().unwrap().iter().map(|t| t == "sliding_attention").collect();
    let full_at =
        |i: usize, k: &str, dflt: u32| config["per_layer_config"][i.to_string()][k].as_u64().map_or(dflt, |v| v as u32);
    let first_full = sliding.iter().position(|s| !s).unwrap();
    let (swa_dim, full_dim) = (u("head_dim"), full_at(first_full, "head_dim", u("head_dim")));
    let kv: Vec<i32> = (0..layers)
        .map(|i| {
            if sliding[i] {
                u("num_key_value_heads")
            } else {
                full_at(i, "num_key_value_heads", u("num_key_value_heads"))
            }
        })
        .map(|n| n as i32)
        .collect();
    let shared = u("num_kv_shared_layers") as usize;
    let wide = config["use_double_wide_mlp"].as_bool().unwrap_or(false);
    let ffn: Vec<i32> =
        (0..layers).map(|i| u("intermediate_size") as i32 * if wide && i >= layers - shared { 2 } else { 1 }).collect();
    let rope = &config["rope_parameters"];
    let theta = |kind: &str| WriteValue::F32(rope[kind]["rope_theta"].as_f64().unwrap() as f32);
    let flags = sliding.iter().map(|&s| WriteValue::Bool(s)).collect();
    let mut extra = vec![
        ("attention.key_length", WriteValue::U32(full_dim)),
        ("attention.value_length", WriteValue::U32(full_dim)),
        ("attention.key_length_swa", WriteValue::U32(swa_dim)),
        ("attention.value_length_swa", WriteValue::U32(swa_dim)),
        ("attention.head_count_kv", WriteValue::i32s(&kv)),
        ("feed_forward_length", WriteValue::i32s(&ffn)),
        ("attention.sliding_window", WriteValue::U32(u("sliding_window"))),
        ("attention.sliding_window_pattern", WriteValue::Array(ValueType::Bool, flags)),
        ("attention.shared_kv_layers", WriteValue::U32(shared as u32)),
        ("embedding_length_per_layer_input", WriteValue::U32(u("hidden_size_per_layer_input"))),
        ("rope.freq_base", theta("full_attention")),
        ("rope.freq_base_swa", theta("sliding_attention")),
        ("rope.dimension_count", WriteValue::U32(full_dim)),
        ("rope.dimension_count_swa", WriteValue::U32(swa_dim)),
        ("final_logit_softcapping", WriteValue::F32(config["final_logit_softcapping"].as_f64().unwrap() as f32)),
    ];
    if config["enable_moe_block"].as_bool().unwrap_or(false) {
        extra.push(("expert_count", WriteValue::U32(u("num_experts"))));
        extra.push(("expert_used_count", WriteValue::U32(u("top_k_experts"))));
        extra.push(("expert_feed_forward_length", WriteValue::U32(u("moe_intermediate_size"))));
    }
    let mut w = metadata(family, "gemma4", "llama-bpe", &extra);
    // The full layers' rope: 1 for each rotated frequency, 1e30 for the others.
    let partial = rope["full_attention"]["partial_rotary_factor"].as_f64().unwrap_or(1.0);
    let rotated = (full_dim as f64 * partial / 2.0) as usize;
    let freqs =
        freqs.unwrap_or_else(|| (0..full_dim as usize / 2).map(|i| if i < rotated { 1.0 } else { 1e30 }).collect());
    w.f32_tensor("rope_freqs.weight", &[freqs.len()], &freqs);
    let st = SafetensorsFile::open(&fixture(family).join("model.safetensors")).unwrap();
    for name in st.tensors().keys() {
        let t = st.tensor(name).unwrap().unwrap();
        let g = match name.as_str() {
            "model.embed_tokens_per_layer.weight" => "per_layer_token_embd.weight".to_string(),
            "model.per_layer_model_projection.weight" => "per_layer_model_proj.weight".to_string(),
            "model.per_layer_projection_norm.weight" => "per_layer_proj_norm.weight".to_string(),
            _ => match name.strip_prefix("model.layers.").and_then(|r| r.split_once('.')) {
                Some((layer, stem)) => {
                    let g = match stem {
                        "layer_scalar" => "layer_output_scale.weight",
                        "per_layer_input_gate.weight" => "inp_gate.weight",
                        "per_layer_projection.weight" => "proj.weight",
                        "post_per_layer_input_norm.weight" => "post_norm.weight",
                        "pre_feedforward_layernorm_2.weight" => "pre_ffw_norm_2.weight",
                        "post_feedforward_layernorm_1.weight" => "post_ffw_norm_1.weight",
                        "post_feedforward_layernorm_2.weight" => "post_ffw_norm_2.weight",
                        "router.proj.weight" => "ffn_gate_inp.weight",
                        "router.scale" => "ffn_gate_inp.scale",
                        "router.per_expert_scale" => "ffn_down_exps.scale",
                        "experts.gate_up_proj" => "ffn_gate_up_exps.weight",
                        "experts.down_proj" => "ffn_down_exps.weight",
                        _ => "",
                    };
                    if g.is_empty() { gguf_name(name, true) } else { format!("blk.{layer}.{g}") }
                }
                None => gguf_name(name, true),
            },
        };
        // Gemma 4's norms multiply by w: stored as they are.
        w.f32_tensor(&g, &t.shape, &t.to_f32());
    }
    edit(&mut w);
    let path = dir.join(format!("{family}.gguf"));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

#[test]
fn gemma4_ggufs_compute_as_their_safetensors_checkpoints() {
    // Per-layer inputs with V from K on full layers of their own width and KV heads (gemma4),
    // KV-shared layers (gemma4_kvshare), double-wide MLPs on them (gemma4_wide), the MoE block
    // (gemma4_moe).
    for family in ["gemma4", "gemma4_kvshare", "gemma4_wide", "gemma4_moe"] {
        let dir = tempfile::tempdir().unwrap();
        let path = gemma4_gguf(family, dir.path());
        check_same(family, &fixture(family), &path);
    }
}

#[test]
fn a_gemma4_gguf_with_a_rope_not_proportional_or_full_layers_half_without_v_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = cpu();
    let path = gemma4_gguf("gemma4", dir.path());
    let f = tf_formats::gguf::GgufFile::open(&path).unwrap();
    let config = tf_models::gguf::config_from_gguf(&f).unwrap();
    assert_eq!(config["attention_k_eq_v"], true);
    assert_eq!(config["rope_parameters"]["full_attention"]["partial_rotary_factor"], 0.25);
    // A rope_freqs tensor of the wrong length, or with a value neither 1 nor 1e30.
    let mut odd = vec![1e30f32; 16];
    odd[..2].copy_from_slice(&[1.0, 2.0]);
    for freqs in [vec![1.0f32; 3], odd] {
        let bad = gemma4_gguf_edited("gemma4", dir.path(), Some(freqs), &|_| {});
        let err = Model::open(&bad, &b).err().expect("a bad rope_freqs refused").to_string();
        assert!(err.contains("rope_freqs"), "{err}");
    }
    // One full layer with its own V, the other without.
    let add_v = |w: &mut GgufWriter| {
        w.f32_tensor("blk.1.attn_v.weight", &[32, 64], &[0.0; 32 * 64]);
    };
    let bad = gemma4_gguf_edited("gemma4", dir.path(), None, &add_v);
    let err = Model::open(&bad, &b).err().expect("mixed attn_v refused").to_string();
    assert!(err.contains("attn_v"), "{err}");
}

/// `values` (rows of `cols`) in ggml's Q8_0 blocks (an f16 scale, 32 int8 codes), and the f32
/// values those blocks hold.
fn q8_0(values: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let (mut bytes, mut back) = (Vec::new(), Vec::new());
    for block in values.chunks(32) {
        let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = half::f16::from_f32(amax / 127.0);
        let inv = if d.to_f32() > 0.0 { 1.0 / d.to_f32() } else { 0.0 };
        bytes.extend_from_slice(&d.to_bits().to_le_bytes());
        for &v in block {
            let q = (v * inv).round().clamp(-127.0, 127.0) as i8;
            bytes.push(q as u8);
            back.push(d.to_f32() * q as f32);
        }
    }
    (bytes, back)
}

/// Values in [-scale, scale) from `seed` (a fixed LCG).
fn lcg(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

#[test]
fn a_gemma4_gguf_with_a_quantized_per_layer_table_computes_as_with_its_values() {
    // Released E2B / E4B files hold `per_layer_token_embd` quantized: each layer's columns are
    // whole blocks of it (256 wide there), sliced as they are stored. The fixture's per-layer
    // inputs widened to 32 (one Q8_0 block a layer), in one file as Q8_0 and in another as the
    // f32 values those blocks hold: the same logits, bit for bit.
    let dir = tempfile::tempdir().unwrap();
    let (vocab, hidden, layers, width) = (512, 64, 4, 32);
    let (blocks, values) = q8_0(&lcg(vocab * layers * width, 1, 0.5));
    let table = "per_layer_token_embd.weight";
    let widen = |w: &mut GgufWriter, quant: bool| {
        let ours = ["per_layer_", "inp_gate", ".proj."];
        w.tensors.retain(|t| !ours.iter().any(|o| t.name.contains(o)));
        for (key, value) in w.kvs.iter_mut() {
            if key == "gemma4.embedding_length_per_layer_input" {
                *value = WriteValue::U32(width as u32);
            }
        }
        if quant {
            w.tensor(table, &ggml_ne(&[vocab, layers * width]), 8, blocks.clone());
        } else {
            w.f32_tensor(table, &[vocab, layers * width], &values);
        }
        w.f32_tensor("per_layer_model_proj.weight", &[layers * width, hidden], &lcg(layers * width * hidden, 2, 0.2));
        w.f32_tensor("per_layer_proj_norm.weight", &[width], &lcg(width, 3, 1.0));
        for i in 0..layers {
            w.f32_tensor(
                &format!("blk.{i}.inp_gate.weight"),
                &[width, hidden],
                &lcg(width * hidden, 10 + i as u64, 0.2),
            );
            w.f32_tensor(&format!("blk.{i}.proj.weight"), &[hidden, width], &lcg(width * hidden, 20 + i as u64, 0.2));
        }
    };
    let q_path = gemma4_gguf_edited("gemma4", dir.path(), None, &|w| widen(w, true));
    let q_path = std::fs::rename(&q_path, dir.path().join("q.gguf")).map(|_| dir.path().join("q.gguf")).unwrap();
    let f_path = gemma4_gguf_edited("gemma4", dir.path(), None, &|w| widen(w, false));
    let b = cpu();
    let (q, f) = (Model::open(&q_path, &b).unwrap(), Model::open(&f_path, &b).unwrap());
    assert_eq!(f.decoder.spec.per_layer_input.map(|p| p.width), Some(width));
    let golden = json(&fixture("gemma4").join("golden.json"));
    for prompt in golden["prompts"].as_array().unwrap() {
        let ids: Vec<i64> = prompt["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        let ids = f.vocab.check(&ids).unwrap();
        let logits = |m: &Model<CpuBackend>| Runner::new(m, &b, ids.len()).unwrap().prefill(&ids, ids.len(), true);
        let (want, got) = (logits(&f), logits(&q));
        assert!(want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()), "{} ids", ids.len());
    }
    // The fixture's own width, 8, is a quarter of a block: refused by name.
    let eighth = |w: &mut GgufWriter| {
        let st = SafetensorsFile::open(&fixture("gemma4").join("model.safetensors")).unwrap();
        let t = st.tensor("model.embed_tokens_per_layer.weight").unwrap().unwrap();
        w.tensors.retain(|t| t.name != table);
        w.tensor(table, &ggml_ne(&t.shape), 8, q8_0(&t.to_f32()).0);
    };
    let bad = gemma4_gguf_edited("gemma4", dir.path(), None, &eighth);
    let err = Model::open(&bad, &b).err().expect("a table sliced inside its blocks refused").to_string();
    assert!(err.contains("blocks"), "{err}");
}

#[test]
fn gemma4_gguf_metadata_that_disagrees_with_itself_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let b = cpu();
    let set = |key: &'static str, value: WriteValue| {
        move |w: &mut GgufWriter| {
            for (k, v) in w.kvs.iter_mut() {
                if k == key {
                    *v = value.clone();
                }
            }
        }
    };
    let flags = |n: usize| WriteValue::Array(ValueType::Bool, vec![WriteValue::Bool(true); n]);
    type Edit = Box<dyn Fn(&mut GgufWriter)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("sliding_window_pattern", Box::new(set("gemma4.attention.sliding_window_pattern", flags(3)))),
        ("head_count_kv", Box::new(set("gemma4.attention.head_count_kv", WriteValue::i32s(&[2, 1, 2])))),
        ("head_count_kv", Box::new(set("gemma4.attention.head_count_kv", WriteValue::i32s(&[2, 1, 1, 1])))),
        ("feed_forward_length", Box::new(set("gemma4.feed_forward_length", WriteValue::i32s(&[128, 128, 96, 128])))),
        ("block_count", Box::new(set("gemma4.block_count", WriteValue::U32(0)))),
        ("key_length", Box::new(set("gemma4.attention.key_length", WriteValue::U32(0)))),
        ("dimension_count_swa", Box::new(set("gemma4.rope.dimension_count_swa", WriteValue::U32(8)))),
    ];
    for (what, edit) in cases {
        let path = gemma4_gguf_edited("gemma4", dir.path(), None, &*edit);
        let err = Model::open(&path, &b).err().unwrap_or_else(|| panic!("{what}: loaded")).to_string();
        assert!(err.contains(what), "{what}: {err}");
    }
}

#[test]
fn a_qwen3_vl_gguf_computes_on_text_as_qwen3() {
    // Qwen3-VL's text decoder (`qwen3vl`): Qwen3's tensors, its multi-axis rope sections the
    // 1-D rope on text; sections that leave pairs unrotated, or a fourth axis, are refused.
    let dir = tempfile::tempdir().unwrap();
    let sections = |s: &[i32]| ("rope.dimension_sections", WriteValue::i32s(s));
    let keys = |s: &[i32]| {
        vec![
            ("attention.key_length", WriteValue::U32(32)),
            ("attention.value_length", WriteValue::U32(32)),
            sections(s),
            ("n_deepstack_layers", WriteValue::U32(3)),
        ]
    };
    let path = to_gguf("qwen3", "qwen3vl", "llama-bpe", &keys(&[6, 5, 5, 0]), dir.path());
    check_same("qwen3", &fixture("qwen3"), &path);
    let b = cpu();
    for bad in [[6, 5, 4, 0], [6, 5, 4, 1]] {
        let path = to_gguf("qwen3", "qwen3vl", "llama-bpe", &keys(&bad), dir.path());
        let err = Model::open(&path, &b).err().expect("refused").to_string();
        assert!(err.contains("rope.dimension_sections"), "{err}");
    }
}

#[test]
fn gemma4_gguf_metadata_of_any_wrong_type_or_value_is_refused_not_a_panic() {
    // Every `gemma4.*` key in turn made a string, a zero, a huge count, an empty array or an
    // array of the wrong length: the file loads or is refused, never a panic.
    let dir = tempfile::tempdir().unwrap();
    let b = cpu();
    let base = gemma4_gguf_edited("gemma4", dir.path(), None, &|_| {});
    let keys: Vec<String> = {
        let f = tf_formats::gguf::GgufFile::open(&base).unwrap();
        f.metadata().map(|(k, _)| k.to_string()).filter(|k| k.starts_with("gemma4.")).collect()
    };
    assert!(keys.len() > 10, "{keys:?}");
    let values = [
        WriteValue::str("x"),
        WriteValue::U32(0),
        WriteValue::U32(u32::MAX),
        WriteValue::i32s(&[]),
        WriteValue::i32s(&[-1; 4]),
        WriteValue::Array(ValueType::Bool, vec![WriteValue::Bool(false); 4]),
        WriteValue::F32(f32::NAN),
    ];
    for key in &keys {
        for value in &values {
            let edit = |w: &mut GgufWriter| {
                for (k, v) in w.kvs.iter_mut() {
                    if k == key {
                        *v = value.clone();
                    }
                }
            };
            let path = gemma4_gguf_edited("gemma4", dir.path(), None, &edit);
            let _ = Model::open(&path, &b);
        }
    }
}

/// The Step 3.7 fixture's text decoder as `convert_hf_to_gguf.py` writes it (`step35`) in
/// `dir`, with the metadata llama.cpp reads: head counts one a block, the thetas of each kind,
/// Llama 3 factors over the full layers' rotated dims in `rope_freqs`, the clamps one a block,
/// norms as `1 + w`, the MTP block after the decoder's (`nextn.*`); `edit` applied last.
fn step35_gguf(dir: &Path, edit: &dyn Fn(&mut GgufWriter)) -> PathBuf {
    let top = json(&fixture("step3p7").join("config.json"));
    let t = &top["text_config"];
    // metadata_at reads a flat config: the text config with the checkpoint's tokenizer beside it.
    let flat = dir.join("step_src");
    std::fs::create_dir_all(&flat).unwrap();
    let mut cfg = t.clone();
    cfg["num_key_value_heads"] = t["num_attention_groups"].clone();
    std::fs::write(flat.join("config.json"), cfg.to_string()).unwrap();
    for f in ["tokenizer.json", "golden.json"] {
        std::fs::copy(fixture("step3p7").join(f), flat.join(f)).unwrap();
    }
    let u = |k: &str| t[k].as_u64().unwrap() as u32;
    let (n, mtp) = (u("num_hidden_layers") as usize, u("num_nextn_predict_layers") as usize);
    let types: Vec<bool> = t["layer_types"].as_array().unwrap().iter().map(|k| k == "sliding_attention").collect();
    assert_eq!(types.len(), n + mtp);
    let other = &t["attention_other_setting"];
    let heads: Vec<i32> =
        types
            .iter()
            .map(|&s| {
                if s { other["num_attention_heads"].as_i64().unwrap() as i32 } else { u("num_attention_heads") as i32 }
            })
            .collect();
    let theta_of = |sliding: bool| {
        let i = types.iter().position(|&s| s == sliding).unwrap();
        t["rope_theta"][i].as_f64().unwrap() as f32
    };
    let head_dim = u("head_dim") as usize;
    let limits =
        |k: &str| -> Vec<f32> { t[k].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect() };
    let flags = types.iter().map(|&s| WriteValue::Bool(s)).collect();
    let extra = vec![
        ("block_count", WriteValue::U32((n + mtp) as u32)),
        ("nextn_predict_layers", WriteValue::U32(mtp as u32)),
        ("attention.head_count", WriteValue::i32s(&heads)),
        ("attention.head_count_kv", WriteValue::i32s(&vec![u("num_attention_groups") as i32; n + mtp])),
        ("attention.key_length", WriteValue::U32(head_dim as u32)),
        ("attention.value_length", WriteValue::U32(head_dim as u32)),
        ("attention.sliding_window", WriteValue::U32(u("sliding_window"))),
        ("attention.sliding_window_pattern", WriteValue::Array(ValueType::Bool, flags)),
        ("rope.dimension_count", WriteValue::U32(head_dim as u32)),
        ("rope.freq_base", WriteValue::F32(theta_of(false))),
        ("rope.freq_base_swa", WriteValue::F32(theta_of(true))),
        ("expert_count", WriteValue::U32(u("moe_num_experts"))),
        ("expert_used_count", WriteValue::U32(u("moe_top_k"))),
        ("expert_feed_forward_length", WriteValue::U32(u("moe_intermediate_size"))),
        ("expert_shared_feed_forward_length", WriteValue::U32(u("share_expert_dim"))),
        ("expert_weights_scale", WriteValue::F32(t["moe_router_scaling_factor"].as_f64().unwrap() as f32)),
        ("swiglu_clamp_exp", WriteValue::f32s(&limits("swiglu_limits"))),
        ("swiglu_clamp_shexp", WriteValue::f32s(&limits("swiglu_limits_shared"))),
    ];
    let mut w = metadata_at(&flat, "step35", "llama-bpe", &extra);
    // Llama 3 factors over the full layers' rotated dims (half the head), padded with 1.
    let s = &t["rope_scaling"];
    let (factor, orig) = (s["factor"].as_f64().unwrap(), s["original_max_position_embeddings"].as_f64().unwrap());
    let (low, high, base, rot) = (1.0f64, 4.0f64, f64::from(theta_of(false)), head_dim / 2);
    let mut freqs: Vec<f32> = (0..rot / 2)
        .map(|i| {
            let wavelen = 2.0 * std::f64::consts::PI * base.powf((2 * i) as f64 / rot as f64);
            if wavelen < orig / high {
                1.0
            } else if wavelen > orig / low {
                factor as f32
            } else {
                let smooth = (orig / wavelen - low) / (high - low);
                (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
            }
        })
        .collect();
    freqs.resize(head_dim / 2, 1.0);
    w.f32_tensor("rope_freqs.weight", &[freqs.len()], &freqs);
    let st = SafetensorsFile::open(&fixture("step3p7").join("model.safetensors")).unwrap();
    for name in st.tensors().keys() {
        if name.starts_with("vision_model.") || name.starts_with("vit_large_projector.") {
            continue;
        }
        let t = st.tensor(name).unwrap().unwrap();
        let g = match name.strip_prefix("model.layers.").and_then(|r| r.split_once('.')) {
            None => gguf_name(name, false),
            Some((layer, stem)) => {
                let g = match stem {
                    "self_attn.g_proj.weight" => "attn_gate.weight",
                    "moe.gate.weight" => "ffn_gate_inp.weight",
                    "moe.router_bias" => "exp_probs_b.bias",
                    "moe.gate_proj.weight" => "ffn_gate_exps.weight",
                    "moe.up_proj.weight" => "ffn_up_exps.weight",
                    "moe.down_proj.weight" => "ffn_down_exps.weight",
                    "share_expert.gate_proj.weight" => "ffn_gate_shexp.weight",
                    "share_expert.up_proj.weight" => "ffn_up_shexp.weight",
                    "share_expert.down_proj.weight" => "ffn_down_shexp.weight",
                    "eh_proj.weight" => "nextn.eh_proj.weight",
                    "enorm.weight" => "nextn.enorm.weight",
                    "hnorm.weight" => "nextn.hnorm.weight",
                    "shared_head.norm.weight" => "nextn.shared_head_norm.weight",
                    "post_attention_layernorm.weight" => "ffn_norm.weight",
                    _ => "",
                };
                if g.is_empty() { gguf_name(name, false) } else { format!("blk.{layer}.{g}") }
            }
        };
        let mut values = t.to_f32();
        // Step's norms multiply by 1 + w: the converter stores 1 + w.
        if name.ends_with("norm.weight") {
            values.iter_mut().for_each(|v| *v += 1.0);
        }
        w.f32_tensor(&g, &t.shape, &values);
    }
    edit(&mut w);
    let path = dir.join("step35.gguf");
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

#[test]
fn a_step35_gguf_computes_as_its_safetensors_checkpoint_read_as_llama_cpp_scales_scores() {
    // llama.cpp scales Step's scores by head_dim^-0.5; the fixture's config says 20.
    let dir = tempfile::tempdir().unwrap();
    let path = step35_gguf(dir.path(), &|_| {});
    let scaled = dir.path().join("scaled");
    std::fs::create_dir_all(&scaled).unwrap();
    for f in ["model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"] {
        if fixture("step3p7").join(f).exists() {
            std::fs::copy(fixture("step3p7").join(f), scaled.join(f)).unwrap();
        }
    }
    let mut config = json(&fixture("step3p7").join("config.json"));
    config["text_config"]["query_pre_attn_scalar"] = 16.into();
    std::fs::write(scaled.join("config.json"), config.to_string()).unwrap();
    check_same("step3p7", &scaled, &path);
    let b = cpu();
    let f = tf_formats::gguf::GgufFile::open(&path).unwrap();
    let c = tf_models::gguf::config_from_gguf(&f).unwrap();
    assert_eq!(c["rope_parameters"]["full_attention"]["original_max_position_embeddings"], 16);
    // The MTP block drafts as the checkpoint's head does.
    let (hf, gguf) = (Model::open(&scaled, &b).unwrap(), Model::open(&path, &b).unwrap());
    same_mtp_logits(&b, "step3p7", &hf, &gguf);
}

#[test]
fn a_step35_gguf_that_disagrees_with_step_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let b = cpu();
    let set = |key: &'static str, value: WriteValue| {
        move |w: &mut GgufWriter| {
            w.kvs.retain(|(k, _)| k != key);
            w.kv(key, value.clone());
        }
    };
    type Edit = Box<dyn Fn(&mut GgufWriter)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("head_count_kv", Box::new(set("step35.attention.head_count_kv", WriteValue::i32s(&[2, 2, 1, 2, 2])))),
        ("expert_gating_func", Box::new(set("step35.expert_gating_func", WriteValue::U32(1)))),
        ("expert_weights_norm", Box::new(set("step35.expert_weights_norm", WriteValue::Bool(false)))),
        ("swiglu_clamp_exp", Box::new(set("step35.swiglu_clamp_exp", WriteValue::f32s(&[0.0; 3])))),
        ("head counts differ", Box::new(set("step35.attention.head_count", WriteValue::i32s(&[8, 4, 4, 4, 4])))),
        (
            "rope_freqs",
            Box::new(|w: &mut GgufWriter| {
                w.tensors.retain(|t| t.name != "rope_freqs.weight");
                w.f32_tensor("rope_freqs.weight", &[8], &[1.5, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 3.0]);
            }),
        ),
    ];
    for (what, edit) in cases {
        let path = step35_gguf(dir.path(), &*edit);
        let err = Model::open(&path, &b).err().unwrap_or_else(|| panic!("{what}: loaded")).to_string();
        assert!(err.contains(what), "{what}: {err}");
    }
}
