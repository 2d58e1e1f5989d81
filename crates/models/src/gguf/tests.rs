//! Tests of the GGUF -> Hugging Face mapping on small files written by the GGUF test writer,
//! and (ignored) on the real Gemma 3 270M file against transformers.

use super::*;
use crate::registry::spec_for;
use crate::spec::{LayerKind, ModelSpec};
use tf_formats::gguf::writer::{GgufWriter, WriteValue};

fn open(w: &GgufWriter) -> GgufFile {
    GgufFile::from_bytes(Path::new("t.gguf"), w.to_bytes()).unwrap()
}

/// Distinct values for tensor number `k`, so a wrong mapping shows.
fn values(n: usize, k: usize) -> Vec<f32> {
    (0..n).map(|i| (k * 1000 + i) as f32 / 64.0).collect()
}

/// Writes every tensor a family's HF checkpoint would need, numbering them in order.
fn add(w: &mut GgufWriter, tensors: &[(String, Vec<usize>)]) {
    for (k, (name, shape)) in tensors.iter().enumerate() {
        w.f32_tensor(name, shape, &values(shape.iter().product(), k));
    }
}

fn kvs(w: &mut GgufWriter, arch: &str, pairs: &[(&str, u32)]) {
    w.kv("general.architecture", WriteValue::str(arch));
    for (k, v) in pairs {
        w.kv(&format!("{arch}.{k}"), WriteValue::U32(*v));
    }
    w.kv(&format!("{arch}.attention.layer_norm_rms_epsilon"), WriteValue::F32(1e-6));
    w.kv("tokenizer.ggml.bos_token_id", WriteValue::U32(2));
    w.kv("tokenizer.ggml.eos_token_id", WriteValue::U32(1));
}

/// The HF names and shapes the shared decoder loads for `s` (as decoder.rs asks for them).
fn needed(s: &ModelSpec) -> Vec<(String, Vec<usize>)> {
    let (h, d) = (s.hidden_size, s.head_dim);
    let mut out =
        vec![("model.embed_tokens.weight".to_string(), vec![s.vocab_size, h]), ("model.norm.weight".into(), vec![h])];
    for i in 0..s.num_layers {
        let p = format!("model.layers.{i}.");
        let mut add = |n: &str, shape: Vec<usize>| out.push((format!("{p}{n}.weight"), shape));
        add("input_layernorm", vec![h]);
        add("post_attention_layernorm", vec![h]);
        if s.sandwich_norms {
            add("pre_feedforward_layernorm", vec![h]);
            add("post_feedforward_layernorm", vec![h]);
        }
        add("self_attn.q_proj", vec![s.num_heads * d, h]);
        add("self_attn.k_proj", vec![s.num_kv_heads * d, h]);
        add("self_attn.v_proj", vec![s.num_kv_heads * d, h]);
        add("self_attn.o_proj", vec![h, s.num_heads * d]);
        if s.qk_norm {
            add("self_attn.q_norm", vec![d]);
            add("self_attn.k_norm", vec![d]);
        }
        match &s.moe {
            Some(m) => {
                add("mlp.gate", vec![m.num_experts, h]);
                for e in 0..m.num_experts {
                    add(&format!("mlp.experts.{e}.gate_proj"), vec![m.moe_intermediate_size, h]);
                    add(&format!("mlp.experts.{e}.up_proj"), vec![m.moe_intermediate_size, h]);
                    add(&format!("mlp.experts.{e}.down_proj"), vec![h, m.moe_intermediate_size]);
                }
            }
            None => {
                add("mlp.gate_proj", vec![s.intermediate_size, h]);
                add("mlp.up_proj", vec![s.intermediate_size, h]);
                add("mlp.down_proj", vec![h, s.intermediate_size]);
            }
        }
    }
    out
}

fn check_serves(src: &GgufSource, s: &ModelSpec) {
    for (name, shape) in needed(s) {
        assert!(src.contains(&name), "{name}");
        let t = src.get(&name).unwrap().unwrap();
        assert_eq!((t.name.as_str(), &t.shape), (name.as_str(), &shape));
    }
}

/// Gemma 3, 6 layers, hidden 8, heads 2 x 4, one KV head, 10 tokens; norms stored as 1 + w.
fn gemma3() -> GgufWriter {
    let mut w = GgufWriter::new();
    let pairs = [
        ("embedding_length", 8),
        ("block_count", 6),
        ("feed_forward_length", 16),
        ("attention.head_count", 2),
        ("attention.head_count_kv", 1),
        ("attention.key_length", 4),
        ("attention.value_length", 4),
        ("attention.sliding_window", 3),
        ("context_length", 64),
    ];
    kvs(&mut w, "gemma3", &pairs);
    w.kv("gemma3.rope.freq_base", WriteValue::F32(1e6));
    let mut t = vec![("token_embd.weight".to_string(), vec![10, 8]), ("output_norm.weight".into(), vec![8])];
    for i in 0..6 {
        for (n, shape) in [
            ("attn_norm", vec![8]),
            ("post_attention_norm", vec![8]),
            ("ffn_norm", vec![8]),
            ("post_ffw_norm", vec![8]),
            ("attn_q", vec![8, 8]),
            ("attn_k", vec![4, 8]),
            ("attn_v", vec![4, 8]),
            ("attn_output", vec![8, 8]),
            ("attn_q_norm", vec![4]),
            ("attn_k_norm", vec![4]),
            ("ffn_gate", vec![16, 8]),
            ("ffn_up", vec![16, 8]),
            ("ffn_down", vec![8, 16]),
        ] {
            t.push((format!("blk.{i}.{n}.weight"), shape));
        }
    }
    add(&mut w, &t);
    w
}

#[test]
fn a_block_count_past_the_tensors_is_refused_before_anything_is_sized_from_it() {
    let mut w = GgufWriter::new();
    let pairs = [("embedding_length", 8), ("block_count", 0x7fff_ffff), ("attention.head_count", 2)];
    kvs(&mut w, "gemma3", &pairs);
    add(&mut w, &[("token_embd.weight".to_string(), vec![10, 8]), ("output_norm.weight".into(), vec![8])]);
    let msg = config_from_gguf(&open(&w)).unwrap_err().to_string();
    assert!(msg.contains("'gemma3.block_count' is 2147483647, but the file holds only 2 tensors"), "{msg}");
}

#[test]
fn gemma3_config_follows_llama_cpp() {
    let f = open(&gemma3());
    let c = config_from_gguf(&f).unwrap();
    assert_eq!(c["architectures"], json!(["Gemma3ForCausalLM"]));
    assert_eq!((c["vocab_size"].as_u64(), c["head_dim"].as_u64()), (Some(10), Some(4)));
    assert_eq!(c["query_pre_attn_scalar"], json!(4));
    assert_eq!(c["tie_word_embeddings"], json!(true));
    assert_eq!((c["bos_token_id"].as_u64(), c["eos_token_id"].as_u64()), (Some(2), Some(1)));
    assert_eq!(c["rope_parameters"]["sliding_attention"]["rope_theta"], json!(10000.0));
    let spec = spec_for(&raw_config(&f).unwrap()).unwrap();
    let full: Vec<bool> = spec.layer_kinds.iter().map(|k| *k == LayerKind::Full).collect();
    assert_eq!(full, [false, false, false, false, false, true]);
    assert_eq!((spec.sliding_window, spec.attn_scale, spec.max_position_embeddings), (Some(3), 0.5, 64));
    assert!(spec.tie_word_embeddings && spec.norm_one_plus && spec.sandwich_norms && spec.qk_norm);
    assert_ne!(spec.rope_full, spec.rope_sliding);
}

#[test]
fn gemma3_tensors_map_and_norms_lose_the_one() {
    let f = open(&gemma3());
    let spec = spec_for(&raw_config(&f).unwrap()).unwrap();
    let src = GgufSource::new(f).unwrap();
    check_serves(&src, &spec);
    let pairs = [
        ("model.layers.2.input_layernorm.weight", "blk.2.attn_norm.weight"),
        ("model.layers.2.post_attention_layernorm.weight", "blk.2.post_attention_norm.weight"),
        ("model.layers.2.pre_feedforward_layernorm.weight", "blk.2.ffn_norm.weight"),
        ("model.layers.2.post_feedforward_layernorm.weight", "blk.2.post_ffw_norm.weight"),
        ("model.layers.2.self_attn.q_norm.weight", "blk.2.attn_q_norm.weight"),
        ("model.norm.weight", "output_norm.weight"),
    ];
    for (hf, gguf) in pairs {
        let stored = src.file().tensor(gguf).unwrap().unwrap().to_f32();
        let want: Vec<f32> = stored.iter().map(|v| v - 1.0).collect();
        assert_eq!(src.get(hf).unwrap().unwrap().to_f32(), want, "{hf}");
    }
    let q = src.get("model.layers.4.self_attn.q_proj.weight").unwrap().unwrap();
    assert_eq!(q.to_f32(), src.file().tensor("blk.4.attn_q.weight").unwrap().unwrap().to_f32());
    assert!(!src.contains("lm_head.weight") && src.get("lm_head.weight").unwrap().is_none());
    assert!(!src.contains("model.layers.6.input_layernorm.weight"));
    assert!(!src.contains("model.layers.x.input_layernorm.weight"));
}

/// llama.cpp's `permute` (convert_hf_to_gguf.py) on whole rows.
fn permute<T: Clone>(rows: &[T], heads: usize) -> Vec<T> {
    let half = rows.len() / heads / 2;
    let mut out = rows.to_vec();
    for h in 0..heads {
        for t in 0..2 {
            for j in 0..half {
                out[h * 2 * half + 2 * j + t] = rows[h * 2 * half + t * half + j].clone();
            }
        }
    }
    out
}

fn llama(q_type_q8: bool) -> (GgufWriter, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    llama_as("llama", q_type_q8)
}

/// [`llama`]'s file under architecture `arch`.
fn llama_as(arch: &str, q_type_q8: bool) -> (GgufWriter, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut w = GgufWriter::new();
    let pairs = [
        ("embedding_length", 32),
        ("block_count", 1),
        ("feed_forward_length", 64),
        ("attention.head_count", 2),
        ("attention.head_count_kv", 1),
        ("rope.dimension_count", 16),
    ];
    kvs(&mut w, arch, &pairs);
    w.kv(&format!("{arch}.rope.freq_base"), WriteValue::F32(500000.0));
    // HF rows: q has 2 heads x 16, k one head x 16; each row distinct.
    let row = |r: usize, salt: u8| -> Vec<u8> {
        if q_type_q8 {
            (0..34).map(|i| (r as u8).wrapping_mul(7).wrapping_add(i).wrapping_add(salt)).collect()
        } else {
            values(32, r + 100 * salt as usize).iter().flat_map(|v| v.to_le_bytes()).collect()
        }
    };
    let q_hf: Vec<Vec<u8>> = (0..32).map(|r| row(r, 1)).collect();
    let k_hf: Vec<Vec<u8>> = (0..16).map(|r| row(r, 2)).collect();
    let ty = if q_type_q8 { 8 } else { 0 };
    w.tensor("blk.0.attn_q.weight", &[32, 32], ty, permute(&q_hf, 2).concat());
    w.tensor("blk.0.attn_k.weight", &[32, 16], ty, permute(&k_hf, 1).concat());
    let mut t = vec![("token_embd.weight".to_string(), vec![5, 32]), ("output_norm.weight".into(), vec![32])];
    t.push(("output.weight".into(), vec![5, 32]));
    for (n, shape) in
        [("attn_norm", vec![32]), ("ffn_norm", vec![32]), ("attn_v", vec![16, 32]), ("attn_output", vec![32, 32])]
    {
        t.push((format!("blk.0.{n}.weight"), shape));
    }
    for (n, shape) in [("ffn_gate", vec![64, 32]), ("ffn_up", vec![64, 32]), ("ffn_down", vec![32, 64])] {
        t.push((format!("blk.0.{n}.weight"), shape));
    }
    add(&mut w, &t);
    (w, q_hf, k_hf)
}

#[test]
fn llama_q_k_rows_are_unpermuted() {
    // Mistral Small 3.x's text decoder (`mistral3`) is converted as Llama is.
    for (arch, q8) in [("llama", false), ("llama", true), ("mistral3", false)] {
        let (w, q_hf, k_hf) = llama_as(arch, q8);
        let f = open(&w);
        let spec = spec_for(&raw_config(&f).unwrap()).unwrap();
        assert_eq!((spec.head_dim, spec.tie_word_embeddings), (16, false));
        let src = GgufSource::new(f).unwrap();
        check_serves(&src, &spec);
        let q = src.get("model.layers.0.self_attn.q_proj.weight").unwrap().unwrap();
        assert_eq!(q.data.as_bytes(), q_hf.concat().as_slice(), "{arch} q8 {q8}");
        let k = src.get("model.layers.0.self_attn.k_proj.weight").unwrap().unwrap();
        assert_eq!(k.data.as_bytes(), k_hf.concat().as_slice(), "{arch} q8 {q8}");
        let post = src.get("model.layers.0.post_attention_layernorm.weight").unwrap().unwrap();
        assert_eq!(post.to_f32(), src.file().tensor("blk.0.ffn_norm.weight").unwrap().unwrap().to_f32());
        assert!(!src.contains("model.layers.0.pre_feedforward_layernorm.weight"));
    }
}

#[test]
fn ministral3_attention_temperature_is_refused_by_name() {
    let (mut w, ..) = llama_as("mistral3", false);
    w.kv("mistral3.attention.temperature_scale", WriteValue::F32(0.1));
    let err = raw_config(&open(&w)).err().expect("refused").to_string();
    assert!(err.contains("mistral3.attention.temperature_scale"), "{err}");
}

/// The divisors convert_hf_to_gguf.py writes for Llama 3 scaling.
fn llama3_factors(theta: f64, dim: usize, factor: f64) -> Vec<f32> {
    (0..dim / 2)
        .map(|i| {
            let wavelen = 2.0 * std::f64::consts::PI * theta.powf((2 * i) as f64 / dim as f64);
            if wavelen < 8192.0 / 4.0 {
                1.0
            } else if wavelen > 8192.0 {
                factor as f32
            } else {
                let smooth = (8192.0 / wavelen - 1.0) / 3.0;
                (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
            }
        })
        .collect()
}

#[test]
fn llama3_scaling_is_recovered_from_rope_freqs() {
    let (mut w, ..) = llama(false);
    w.f32_tensor("rope_freqs.weight", &[8], &llama3_factors(500000.0, 16, 8.0));
    let c = config_from_gguf(&open(&w)).unwrap();
    let s = &c["rope_scaling"];
    assert_eq!((s["rope_type"].as_str(), s["factor"].as_f64()), (Some("llama3"), Some(8.0)));
    assert_eq!(s["original_max_position_embeddings"], json!(8192));
    assert!(spec_for(&RawConfig::parse(Path::new("c"), &c.to_string()).unwrap()).is_ok());
    let mut off = llama3_factors(500000.0, 16, 8.0);
    off[5] *= 1.1;
    let (mut w, ..) = llama(false);
    w.f32_tensor("rope_freqs.weight", &[8], &off);
    assert!(config_from_gguf(&open(&w)).unwrap_err().to_string().contains("rope_freqs"));
}

fn qwen3moe() -> GgufWriter {
    qwen3moe_as("qwen3moe")
}

/// [`qwen3moe`]'s file under architecture `arch`.
fn qwen3moe_as(arch: &str) -> GgufWriter {
    let mut w = GgufWriter::new();
    let pairs = [
        ("embedding_length", 8),
        ("block_count", 1),
        ("feed_forward_length", 12),
        ("attention.head_count", 2),
        ("attention.head_count_kv", 1),
        ("attention.key_length", 4),
        ("expert_count", 3),
        ("expert_used_count", 2),
        ("expert_feed_forward_length", 4),
    ];
    kvs(&mut w, arch, &pairs);
    let mut t = vec![("token_embd.weight".to_string(), vec![6, 8]), ("output_norm.weight".into(), vec![8])];
    for (n, shape) in [
        ("attn_norm", vec![8]),
        ("ffn_norm", vec![8]),
        ("attn_q", vec![8, 8]),
        ("attn_k", vec![4, 8]),
        ("attn_v", vec![4, 8]),
        ("attn_output", vec![8, 8]),
        ("attn_q_norm", vec![4]),
        ("attn_k_norm", vec![4]),
        ("ffn_gate_inp", vec![3, 8]),
        ("ffn_gate_exps", vec![3, 4, 8]),
        ("ffn_up_exps", vec![3, 4, 8]),
        ("ffn_down_exps", vec![3, 8, 4]),
    ] {
        t.push((format!("blk.0.{n}.weight"), shape));
    }
    add(&mut w, &t);
    w
}

#[test]
fn qwen3_moe_experts_are_sub_views() {
    // Qwen3-VL-MoE's text decoder (`qwen3vlmoe`, with its rope sections) is read as Qwen3-MoE.
    let mut vl = qwen3moe_as("qwen3vlmoe");
    vl.kv("qwen3vlmoe.rope.dimension_sections", WriteValue::i32s(&[1, 1, 0, 0]));
    let c = config_from_gguf(&open(&vl)).unwrap();
    assert_eq!((c["architectures"][0].as_str(), c["num_experts"].as_u64()), (Some("Qwen3MoeForCausalLM"), Some(3)));
    let f = open(&qwen3moe());
    let c = config_from_gguf(&f).unwrap();
    assert_eq!((c["num_experts"].as_u64(), c["moe_intermediate_size"].as_u64()), (Some(3), Some(4)));
    assert_eq!(c["norm_topk_prob"], json!(true));
    let spec = spec_for(&raw_config(&f).unwrap()).unwrap();
    assert!(spec.moe.as_ref().is_some_and(|m| m.top_k == 2 && m.sparse_layers == [true]));
    let src = GgufSource::new(f).unwrap();
    check_serves(&src, &spec);
    let all = src.file().tensor("blk.0.ffn_down_exps.weight").unwrap().unwrap().to_f32();
    let e1 = src.get("model.layers.0.mlp.experts.1.down_proj.weight").unwrap().unwrap();
    assert_eq!(e1.to_f32(), all[32..64].to_vec());
    assert!(!src.contains("model.layers.0.mlp.experts.3.up_proj.weight"));
    assert!(src.get("model.layers.0.mlp.experts.3.up_proj.weight").unwrap().is_none());
}

#[test]
fn end_of_generation_ids_include_control_turn_ends() {
    let mut w = gemma3();
    w.kv("tokenizer.ggml.tokens", WriteValue::strs(&["<pad>", "<eos>", "<bos>", "<end_of_turn>", "<|im_end|>"]));
    w.kv("tokenizer.ggml.token_type", WriteValue::i32s(&[3, 3, 3, 3, 1]));
    assert_eq!(eog_token_ids(&open(&w)).unwrap(), vec![1, 3]);
}

#[test]
fn gpt_oss_end_of_generation_leaves_out_end_where_return_and_call_are_there() {
    let tokens = ["<|endoftext|>", "<|return|>", "<|call|>", "<|end|>", "<|start|>"];
    let mut w = gemma3();
    w.kv("tokenizer.ggml.tokens", WriteValue::strs(&tokens));
    w.kv("tokenizer.ggml.token_type", WriteValue::i32s(&[3, 3, 3, 3, 3]));
    w.kv("tokenizer.ggml.eot_token_id", WriteValue::U32(3));
    // eos (1) by key, <|end|> (3) by key and text: out.
    assert_eq!(eog_token_ids(&open(&w)).unwrap(), vec![0, 1, 2]);
    // Without <|call|>, <|end|> ends generation as llama.cpp has it (Phi-3's turn end).
    let mut w = gemma3();
    w.kv("tokenizer.ggml.tokens", WriteValue::strs(&tokens));
    w.kv("tokenizer.ggml.token_type", WriteValue::i32s(&[3, 3, 1, 3, 3]));
    assert_eq!(eog_token_ids(&open(&w)).unwrap(), vec![0, 1, 3]);
}

/// A one-layer gpt-oss file: 2 experts of 32 rows over 32 inputs, MXFP4 (ggml's type 39) with
/// scale byte `scale` in every block, biases, sinks and YaRN metadata.
fn gpt_oss(scale: u8) -> GgufWriter {
    let mut w = GgufWriter::new();
    let pairs = [
        ("embedding_length", 32),
        ("block_count", 1),
        ("attention.head_count", 2),
        ("attention.head_count_kv", 1),
        ("attention.key_length", 16),
        ("attention.sliding_window", 4),
        ("expert_count", 2),
        ("expert_used_count", 1),
        ("expert_feed_forward_length", 32),
        ("rope.scaling.original_context_length", 64),
    ];
    kvs(&mut w, "gpt-oss", &pairs);
    w.kv("gpt-oss.rope.scaling.type", WriteValue::str("yarn"));
    w.kv("gpt-oss.rope.scaling.factor", WriteValue::F32(4.0));
    w.kv("gpt-oss.rope.freq_base", WriteValue::F32(150000.0));
    let mut t = vec![("token_embd.weight".to_string(), vec![6, 32]), ("output_norm.weight".into(), vec![32])];
    for (n, shape) in [
        ("attn_norm.weight", vec![32]),
        ("post_attention_norm.weight", vec![32]),
        ("attn_q.weight", vec![32, 32]),
        ("attn_q.bias", vec![32]),
        ("attn_k.weight", vec![16, 32]),
        ("attn_k.bias", vec![16]),
        ("attn_v.weight", vec![16, 32]),
        ("attn_v.bias", vec![16]),
        ("attn_output.weight", vec![32, 32]),
        ("attn_output.bias", vec![32]),
        ("attn_sinks.weight", vec![2]),
        ("ffn_gate_inp.weight", vec![2, 32]),
        ("ffn_gate_inp.bias", vec![2]),
        ("ffn_gate_exps.bias", vec![2, 32]),
        ("ffn_up_exps.bias", vec![2, 32]),
        ("ffn_down_exps.bias", vec![2, 32]),
    ] {
        t.push((format!("blk.0.{n}"), shape));
    }
    add(&mut w, &t);
    for (k, n) in ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"].iter().enumerate() {
        // 2 experts x 32 rows, a block a row: the scale, then codes k + 1 and 0 in turn.
        let block: Vec<u8> = std::iter::once(scale).chain(std::iter::repeat_n(k as u8 + 1, 16)).collect();
        let data: Vec<u8> = (0..64).flat_map(|_| block.clone()).collect();
        w.tensor(&format!("blk.0.{n}.weight"), &[32, 32, 2], 39, data);
    }
    w
}

#[test]
fn gpt_oss_config_tensors_and_mxfp4_experts_map() {
    let f = open(&gpt_oss(127));
    let c = config_from_gguf(&f).unwrap();
    assert_eq!(
        (c["architectures"][0].as_str(), c["model_type"].as_str()),
        (Some("GptOssForCausalLM"), Some("gpt_oss"))
    );
    assert_eq!(c["layer_types"], json!(["sliding_attention"]));
    let rope = &c["rope_parameters"];
    assert_eq!((rope["rope_type"].as_str(), rope["truncate"].as_bool()), (Some("yarn"), Some(false)));
    assert_eq!((rope["factor"].as_f64(), rope["original_max_position_embeddings"].as_u64()), (Some(4.0), Some(64)));
    assert_eq!((c["num_local_experts"].as_u64(), c["intermediate_size"].as_u64()), (Some(2), Some(32)));
    let spec = spec_for(&raw_config(&f).unwrap()).unwrap();
    assert!(spec.attn_sinks && spec.attention_bias && spec.moe.as_ref().is_some_and(|m| m.gpt_oss && m.top_k == 1));
    let src = GgufSource::new(f).unwrap();
    for (hf, shape) in [
        ("self_attn.sinks", vec![2]),
        ("self_attn.o_proj.bias", vec![32]),
        ("post_attention_layernorm.weight", vec![32]),
        ("mlp.router.weight", vec![2, 32]),
        ("mlp.router.bias", vec![2]),
        ("mlp.experts.up_proj.bias", vec![2, 32]),
    ] {
        let t = src.get(&format!("model.layers.0.{hf}")).unwrap().unwrap_or_else(|| panic!("{hf}"));
        assert_eq!(t.shape, shape, "{hf}");
    }
    let up = src.get("model.layers.0.mlp.experts.1.up_proj.weight").unwrap().unwrap();
    assert_eq!((up.dtype, &up.shape), (DType::Mxfp4, &vec![32, 32]));
    // Code 2 is 1.0: the low nibble's 16 values, then the high nibble's (code 0).
    let row = &up.to_f32()[..32];
    assert!(row[..16].iter().all(|&v| v == 1.0) && row[16..].iter().all(|&v| v == 0.0), "{row:?}");
}

#[test]
fn a_gpt_oss_mxfp4_scale_that_is_not_finite_is_refused_naming_the_tensor() {
    let src = GgufSource::new(open(&gpt_oss(255))).unwrap();
    let e = src.get("model.layers.0.mlp.experts.0.down_proj.weight").unwrap_err().to_string();
    assert!(e.contains("blk.0.ffn_down_exps.weight") && e.contains("scale byte 255"), "{e}");
    assert!(GgufSource::new(open(&gpt_oss(252))).unwrap().get("model.layers.0.mlp.experts.0.down_proj.weight").is_ok());
}

#[test]
fn lfm2_layer_kinds_come_from_its_per_layer_kv_heads() {
    let lfm2 = |kv: WriteValue| {
        let mut w = GgufWriter::new();
        kvs(&mut w, "lfm2", &[("block_count", 3), ("embedding_length", 8), ("attention.head_count", 2)]);
        w.kv("lfm2.feed_forward_length", WriteValue::U32(24));
        w.kv("lfm2.shortconv.l_cache", WriteValue::U32(3));
        w.kv("lfm2.attention.head_count_kv", kv);
        w.f32_tensor("token_embd.weight", &[6, 8], &values(48, 0));
        w.f32_tensor("blk.0.shortconv.conv.weight", &[8, 3], &values(24, 1));
        w.f32_tensor("output_norm.weight", &[8], &values(8, 2));
        open(&w)
    };
    let f = lfm2(WriteValue::i32s(&[0, 1, 0]));
    let c = config_from_gguf(&f).unwrap();
    assert_eq!(c["layer_types"], json!(["conv", "full_attention", "conv"]));
    assert_eq!((c["num_key_value_heads"].as_u64(), c["conv_L_cache"].as_u64()), (Some(1), Some(3)));
    assert_eq!((c["block_auto_adjust_ff_dim"].as_bool(), c["norm_eps"].as_f64().is_some()), (Some(false), true));
    let src = GgufSource::new(f).unwrap();
    let conv = src.get("model.layers.0.conv.conv.weight").unwrap().unwrap();
    assert_eq!((conv.shape.clone(), conv.to_f32()), (vec![8, 1, 3], values(24, 1)));
    let e = config_from_gguf(&lfm2(WriteValue::U32(1))).unwrap_err().to_string();
    assert!(e.contains("per layer"), "{e}");
    let e = config_from_gguf(&lfm2(WriteValue::i32s(&[0, 1]))).unwrap_err().to_string();
    assert!(e.contains("2 layers' counts for 3 layers"), "{e}");
    let e = config_from_gguf(&lfm2(WriteValue::i32s(&[0, -1, 0]))).unwrap_err().to_string();
    assert!(e.contains("negative"), "{e}");
}

#[test]
fn glm4_moe_counts_its_mtp_blocks_apart_and_refuses_another_gating() {
    let glm = |extra: &[(&str, u32)]| {
        let mut w = GgufWriter::new();
        let mut pairs = vec![
            ("block_count", 3),
            ("embedding_length", 8),
            ("attention.head_count", 2),
            ("attention.key_length", 4),
            ("feed_forward_length", 16),
            ("expert_count", 4),
            ("expert_used_count", 2),
            ("expert_feed_forward_length", 4),
        ];
        pairs.extend_from_slice(extra);
        kvs(&mut w, "glm4moe", &pairs);
        for (k, n) in ["token_embd.weight", "output_norm.weight", "blk.0.attn_q_norm.weight"].iter().enumerate() {
            w.f32_tensor(n, &[4], &values(4, k));
        }
        open(&w)
    };
    let c = config_from_gguf(&glm(&[("nextn_predict_layers", 1), ("rope.dimension_count", 2)])).unwrap();
    assert_eq!((c["num_hidden_layers"].as_u64(), c["num_nextn_predict_layers"].as_u64()), (Some(2), Some(1)));
    assert_eq!((c["partial_rotary_factor"].as_f64(), c["use_qk_norm"].as_bool()), (Some(0.5), Some(true)));
    // llama.cpp's defaults where the keys are absent.
    assert_eq!((c["norm_topk_prob"].as_bool(), c["routed_scaling_factor"].as_f64()), (Some(false), Some(1.0)));
    let e = config_from_gguf(&glm(&[("expert_gating_func", 1)])).unwrap_err().to_string();
    assert!(e.contains("expert_gating_func 1"), "{e}");
    let e = config_from_gguf(&glm(&[("nextn_predict_layers", 3)])).unwrap_err().to_string();
    assert!(e.contains("leaves none"), "{e}");
}

#[test]
fn qwen35_sizes_its_delta_rule_from_the_ssm_keys_and_refuses_a_decay_that_is_not_negative() {
    let mut w = GgufWriter::new();
    let pairs = [
        ("block_count", 4),
        ("embedding_length", 8),
        ("attention.head_count", 2),
        ("attention.key_length", 8),
        ("feed_forward_length", 16),
        ("nextn_predict_layers", 1),
        ("ssm.group_count", 1),
        ("ssm.time_step_rank", 2),
        ("ssm.state_size", 4),
        ("ssm.inner_size", 8),
        ("ssm.conv_kernel", 4),
        ("full_attention_interval", 3),
    ];
    kvs(&mut w, "qwen35", &pairs);
    for (k, n) in ["token_embd.weight", "output_norm.weight", "blk.0.ssm_a", "blk.1.ssm_a"].iter().enumerate() {
        w.f32_tensor(n, &[2], &[-0.5, if k == 3 { 0.25 } else { -2.0 }]);
    }
    let f = open(&w);
    let c = config_from_gguf(&f).unwrap();
    assert_eq!(c["layer_types"], json!(["linear_attention", "linear_attention", "full_attention"]));
    assert_eq!((c["linear_value_head_dim"].as_u64(), c["gguf_tiled_value_heads"].as_bool()), (Some(4), Some(true)));
    let src = GgufSource::new(f).unwrap();
    let a_log = src.get("model.layers.0.linear_attn.A_log").unwrap().unwrap().to_f32();
    assert_eq!(a_log, vec![0.5f32.ln(), 2.0f32.ln()]);
    let e = src.get("model.layers.1.linear_attn.A_log").unwrap_err().to_string();
    assert!(e.contains("blk.1.ssm_a") && e.contains("below 0, found 0.25"), "{e}");
    // A file that says its value heads were left grouped (Ollama's `ssm.v_head_reordered`) is
    // read grouped.
    w.kv("qwen35.ssm.v_head_reordered", WriteValue::Bool(false));
    let c = config_from_gguf(&open(&w)).unwrap();
    assert_eq!(c["gguf_tiled_value_heads"].as_bool(), Some(false));
}

#[test]
fn nemotron_h_layer_kinds_come_from_its_per_layer_counts_and_its_routers() {
    let nemo = |ff: &[i32], experts: Option<&[(&str, u32)]>| {
        let mut w = GgufWriter::new();
        kvs(&mut w, "nemotron_h", &[("block_count", 3), ("embedding_length", 8), ("attention.head_count", 2)]);
        w.kv("nemotron_h.attention.head_count_kv", WriteValue::i32s(&[0, 1, 0]));
        w.kv("nemotron_h.feed_forward_length", WriteValue::i32s(ff));
        for (k, v) in [
            ("ssm.time_step_rank", 2),
            ("ssm.inner_size", 8),
            ("ssm.group_count", 1),
            ("ssm.state_size", 4),
            ("ssm.conv_kernel", 4),
        ] {
            w.kv(&format!("nemotron_h.{k}"), WriteValue::U32(v));
        }
        for (k, v) in experts.unwrap_or_default() {
            w.kv(&format!("nemotron_h.{k}"), WriteValue::U32(*v));
        }
        let mut names = vec!["token_embd.weight", "output_norm.weight", "blk.0.ssm_d"];
        if experts.is_some() {
            names.push("blk.2.ffn_gate_inp.weight");
        }
        for (k, n) in names.iter().enumerate() {
            w.f32_tensor(n, &[2, 1], &values(2, k));
        }
        open(&w)
    };
    let f = nemo(&[0, 0, 16], None);
    let c = config_from_gguf(&f).unwrap();
    assert_eq!(c["layers_block_type"], json!(["mamba", "attention", "mlp"]));
    assert_eq!((c["intermediate_size"].as_u64(), c["mamba_head_dim"].as_u64()), (Some(16), Some(4)));
    let d = GgufSource::new(f).unwrap().get("backbone.layers.0.mixer.D").unwrap().unwrap();
    assert_eq!(d.shape, vec![2], "[heads, 1] served flat");
    let e = config_from_gguf(&nemo(&[0, 16], None)).unwrap_err().to_string();
    assert!(e.contains("3 layers, but 3 KV head counts and 2 MLP widths"), "{e}");
    // A layer with a router is a MoE layer; groups above one need how many a token uses.
    let moe = [
        ("expert_count", 4),
        ("expert_used_count", 2),
        ("expert_feed_forward_length", 16),
        ("expert_shared_feed_forward_length", 8),
        ("expert_group_count", 2),
    ];
    let e = config_from_gguf(&nemo(&[0, 0, 16], Some(&moe))).unwrap_err().to_string();
    assert!(e.contains("expert_group_used_count"), "{e}");
    let used = [moe.as_slice(), &[("expert_group_used_count", 1)]].concat();
    let c = config_from_gguf(&nemo(&[0, 0, 16], Some(&used))).unwrap();
    assert_eq!(c["layers_block_type"], json!(["mamba", "attention", "moe"]));
    assert_eq!((c["n_group"].as_u64(), c["topk_group"].as_u64()), (Some(2), Some(1)));
    assert!(c["moe_latent_size"].is_null(), "no ffn_latent_down: experts on the hidden rows");
}

#[test]
fn phi3_rotary_dims_window_and_longrope_are_read() {
    let mut w = GgufWriter::new();
    kvs(&mut w, "phi3", &[("block_count", 1), ("embedding_length", 64), ("attention.head_count", 4)]);
    w.kv("phi3.feed_forward_length", WriteValue::U32(96));
    w.kv("phi3.rope.dimension_count", WriteValue::U32(12));
    w.kv("phi3.attention.sliding_window", WriteValue::U32(2047));
    w.f32_tensor("token_embd.weight", &[32, 64], &values(32 * 64, 0));
    let c = config_from_gguf(&open(&w)).unwrap();
    assert_eq!((c["architectures"][0].as_str(), c["sliding_window"].as_u64()), (Some("Phi3ForCausalLM"), Some(2047)));
    assert_eq!(c["rope_parameters"]["partial_rotary_factor"].as_f64(), Some(0.75));
    // LongRoPE: both factor sets as tensors, the pretrained context and cos / sin factor.
    w.f32_tensor("rope_factors_long.weight", &[6], &values(6, 1));
    let e = config_from_gguf(&open(&w)).unwrap_err().to_string();
    assert!(e.contains("rope_factors_short.weight"), "{e}");
    w.f32_tensor("rope_factors_short.weight", &[6], &values(6, 2));
    w.kv("phi3.rope.scaling.original_context_length", WriteValue::U32(4096));
    w.kv("phi3.rope.scaling.attn_factor", WriteValue::F32(1.25));
    let c = config_from_gguf(&open(&w)).unwrap();
    let r = &c["rope_parameters"];
    assert_eq!((r["rope_type"].as_str(), r["attention_factor"].as_f64()), (Some("longrope"), Some(1.25)));
    assert_eq!(r["long_factor"][1].as_f64(), Some(f64::from(values(6, 1)[1])));
    assert_eq!(r["short_factor"][0].as_f64(), Some(f64::from(values(6, 2)[0])));
    assert_eq!(
        (c["original_max_position_embeddings"].as_u64(), r["partial_rotary_factor"].as_f64()),
        (Some(4096), Some(0.75))
    );
}

#[test]
fn unknown_architecture_and_missing_keys_are_refused() {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", WriteValue::str("mamba")).f32_tensor("token_embd.weight", &[2, 2], &[0.0; 4]);
    assert!(matches!(config_from_gguf(&open(&w)), Err(ModelError::Architecture { .. })));
    assert!(GgufSource::new(open(&w)).is_err());
    let mut g = gemma3();
    g.kvs.retain(|(k, _)| k != "gemma3.attention.sliding_window");
    let e = config_from_gguf(&open(&g)).unwrap_err().to_string();
    assert!(e.contains("t.gguf") && e.contains("gemma3.attention.sliding_window"), "{e}");
}

/// Fingerprint of f32 bit patterns (as scripts/make_quant_golden.py computes it).
fn fingerprint(values: &[f32]) -> u64 {
    values.iter().enumerate().fold(0u64, |acc, (i, v)| {
        let weight = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        acc.wrapping_add((u64::from(v.to_bits()) + 1).wrapping_mul(weight))
    })
}

/// The real Gemma 3 270M file: our config equals the one transformers builds from it, and
/// tensors under HF names equal transformers' loaded state dict (float32) bit for bit.
#[test]
#[ignore = "needs the real GGUF: set TF_GEMMA3_GGUF (scripts/fetch_gemma3_gguf.sh)"]
fn gemma3_270m_matches_transformers() {
    let Some(path) = std::env::var_os("TF_GEMMA3_GGUF") else { panic!("set TF_GEMMA3_GGUF") };
    let f = GgufFile::open(Path::new(&path)).unwrap();
    let ours = config_from_gguf(&f).unwrap();
    // transformers 5.24 AutoConfig.from_pretrained(dir, gguf_file=...), fields it sets.
    let theirs = json!({"model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 640,
        "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 32768, "rms_norm_eps": 9.999999974752427e-07, "pad_token_id": 0,
        "eos_token_id": 1, "bos_token_id": 2, "unk_token_id": 3, "tie_word_embeddings": true,
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
        "attention_bias": false, "query_pre_attn_scalar": 256, "sliding_window": 512,
        "final_logit_softcapping": null, "attn_logit_softcapping": null,
        "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
            "sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
            "sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
            "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
            "sliding_attention", "full_attention"]});
    for (k, v) in theirs.as_object().unwrap() {
        assert_eq!(&ours[k], v, "{k}");
    }
    assert_eq!(eog_token_ids(&f).unwrap(), vec![1, 106]);
    let spec = spec_for(&raw_config(&f).unwrap()).unwrap();
    let src = GgufSource::new(f).unwrap();
    check_serves(&src, &spec);
    let want = [
        ("model.embed_tokens.weight", "352155e3cef59d80"),
        ("model.norm.weight", "7023f7fd1ca88700"),
        ("model.layers.0.input_layernorm.weight", "a1be50dfb5028700"),
        ("model.layers.0.post_attention_layernorm.weight", "e149f78b1da98700"),
        ("model.layers.0.pre_feedforward_layernorm.weight", "5a07bbf579f68700"),
        ("model.layers.0.post_feedforward_layernorm.weight", "80e4704d799f8700"),
        ("model.layers.0.self_attn.q_norm.weight", "db9ddff992e57600"),
        ("model.layers.0.self_attn.k_norm.weight", "cba5270350f67600"),
        ("model.layers.0.self_attn.q_proj.weight", "f60b6041544f4000"),
        ("model.layers.0.self_attn.v_proj.weight", "d69a3e66bd460000"),
        ("model.layers.1.self_attn.v_proj.weight", "7f38c13217edd340"),
        ("model.layers.0.self_attn.o_proj.weight", "a49306f124b0c160"),
        ("model.layers.0.mlp.down_proj.weight", "5fbe96fab7163152"),
        ("model.layers.1.mlp.down_proj.weight", "48e7b8e3c2b094e4"),
        ("model.layers.17.mlp.gate_proj.weight", "898c98171a84e000"),
        ("model.layers.17.mlp.up_proj.weight", "3a5453d13ac36000"),
    ];
    for (name, fp) in want {
        let t = src.get(name).unwrap().unwrap();
        assert_eq!(format!("{:016x}", fingerprint(&t.to_f32())), fp, "{name}");
    }
}

/// An f32 view of `shape` holding `vals`.
fn f32_view(shape: &[usize], vals: &[f32]) -> TensorView {
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    TensorView {
        name: "t".into(),
        dtype: DType::F32,
        shape: shape.to_vec(),
        data: TensorBytes::from_vec(&bytes),
        file: "t.gguf".into(),
    }
}

#[test]
fn kv_b_is_each_heads_transposed_key_rows_then_its_value_rows() {
    // 2 heads, rank 3, nope 2, v 1: k_b[h][o][i], v_b[h][r][o].
    let k: Vec<f32> = (0..12).map(|x| x as f32).collect();
    let v: Vec<f32> = (100..106).map(|x| x as f32).collect();
    let out = kv_b(&f32_view(&[2, 3, 2], &k), &f32_view(&[2, 1, 3], &v)).unwrap();
    assert_eq!(out.shape, [6, 3]);
    let want = [0., 2., 4., 1., 3., 5., 100., 101., 102., 6., 8., 10., 7., 9., 11., 103., 104., 105.];
    assert_eq!(out.to_f32(), want);
    // Halves of other heads or ranks, or holding other than their shape's values, are refused.
    assert!(kv_b(&f32_view(&[2, 3, 2], &k), &f32_view(&[1, 2, 3], &v)).is_err());
    assert!(kv_b(&f32_view(&[2, 3, 2], &k), &f32_view(&[2, 1, 2], &v[..4])).is_err());
    assert!(kv_b(&f32_view(&[2, 3, 3], &k), &f32_view(&[2, 1, 3], &v)).is_err());
    assert!(kv_b(&f32_view(&[12], &k), &f32_view(&[2, 1, 3], &v)).is_err());
}

/// A latent-attention file of architecture `arch` with `blocks` blocks (each an `attn_norm` and,
/// where `indexed` says, an indexer key projection), a `vocab`-row embedding and `extra` keys.
fn mla_file(arch: &str, blocks: u32, vocab: usize, indexed: &dyn Fn(u32) -> bool, extra: &[(&str, u32)]) -> GgufFile {
    let mut w = GgufWriter::new();
    kvs(&mut w, arch, &[("block_count", blocks), ("embedding_length", 2), ("attention.head_count", 1)]);
    for (k, v) in [
        ("attention.kv_lora_rank", 4),
        ("attention.key_length_mla", 6),
        ("attention.value_length_mla", 4),
        ("rope.dimension_count", 2),
        ("expert_count", 4),
        ("expert_used_count", 2),
        ("expert_feed_forward_length", 4),
        ("feed_forward_length", 8),
    ]
    .iter()
    .chain(extra)
    {
        w.kv(&format!("{arch}.{k}"), WriteValue::U32(*v));
    }
    w.f32_tensor("token_embd.weight", &[vocab, 2], &vec![0.5; vocab * 2]);
    for b in 0..blocks {
        w.f32_tensor(&format!("blk.{b}.attn_norm.weight"), &[2], &[1.0, 1.0]);
        if indexed(b) {
            w.f32_tensor(&format!("blk.{b}.indexer.attn_k.weight"), &[2], &[1.0, 1.0]);
        }
    }
    open(&w)
}

#[test]
fn a_glm_dsa_file_whose_blocks_do_not_all_hold_an_indexer_is_refused_without_its_types() {
    let keys = [
        ("expert_gating_func", 2),
        ("attention.indexer.head_count", 2),
        ("attention.indexer.key_length", 4),
        ("attention.indexer.top_k", 8),
    ];
    let c = config_from_gguf(&mla_file("glm-dsa", 2, 16, &|_| true, &keys)).unwrap();
    assert_eq!((c["index_topk"].as_u64(), c["indexer_types"].clone()), (Some(8), json!(["full", "full"])));
    let e = config_from_gguf(&mla_file("glm-dsa", 2, 16, &|b| b == 0, &keys)).unwrap_err().to_string();
    assert!(e.contains("block 1 holds no indexer"), "{e}");
}

#[test]
fn a_deepseek2_file_without_its_gating_func_routes_by_sigmoid_only_in_glm_4_7_flashs_shape() {
    let file = |blocks: u32, vocab: usize| mla_file("deepseek2", blocks, vocab, &|_| false, &[]);
    let c = config_from_gguf(&file(48, 154_880)).unwrap();
    assert_eq!(c["architectures"], json!(["DeepseekV3ForCausalLM"]));
    let e = config_from_gguf(&file(48, 1000)).unwrap_err().to_string();
    assert!(e.contains("expert_gating_func is absent"), "{e}");
}

#[test]
fn llama3_context_is_read_off_a_smoothed_factor_or_any_the_plain_ones_allow() {
    // Smoothed: Llama 3.1's own (8192, factor 8) over 128 dims comes back exactly.
    let f = llama3_factors(500000.0, 128, 8.0);
    assert_eq!(llama3_original_context(&f, 500000.0, 128), Some(8192));
    // Plain: 2 frequencies of wavelengths 2 pi and 200 pi, one kept and one scaled, for any
    // context between 8 pi and 200 pi; the one given keeps them so.
    let orig = llama3_original_context(&[1.0, 8.0], 10000.0, 4).expect("a context");
    assert!((26..629).contains(&orig), "{orig}");
    // A divisor of the wrong side (scaled below kept) fits none.
    assert_eq!(llama3_original_context(&[8.0, 1.0], 10000.0, 4), None);
}
