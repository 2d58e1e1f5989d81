//! `tensorfold synth`: a seeded random-weight checkpoint with a real model's shapes and a
//! working byte-level tokenizer, written where it will run (nothing large travels).

use crate::args::SynthArgs;
use crate::exit::{Failure, failed, refused};
use rayon::prelude::*;
use serde_json::{Value, json};
use std::io::{BufWriter, Write};
use std::path::Path;
use tf_core::DType;
use tf_models::config::RawConfig;
use tf_models::registry::spec_for;
use tf_models::spec::{LayerKind, ModelSpec};

/// Special tokens every synthesized tokenizer has, at ids 256, 257, 258.
const SPECIALS: [&str; 3] = ["<|bos|>", "<|eos|>", "<|pad|>"];

/// The `config.json` of a preset.
pub(crate) fn preset(name: &str) -> Option<Value> {
    let qwen3 = |vocab: u64, hidden: u64, inter: u64, layers: u64, heads: u64, kv: u64, tie: bool| {
        json!({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": vocab,
            "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 128,
            "rms_norm_eps": 1e-6, "max_position_embeddings": 40960, "tie_word_embeddings": tie,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "hidden_act": "silu"})
    };
    Some(match name {
        "qwen3-0.6b" => qwen3(151936, 1024, 3072, 28, 16, 8, true),
        "qwen3-8b" => qwen3(151936, 4096, 12288, 36, 32, 8, false),
        "qwen3-30b-a3b" => {
            let mut c = qwen3(151936, 2048, 6144, 48, 32, 4, false);
            c["architectures"] = json!(["Qwen3MoeForCausalLM"]);
            c["model_type"] = json!("qwen3_moe");
            c["num_experts"] = json!(128);
            c["num_experts_per_tok"] = json!(8);
            c["moe_intermediate_size"] = json!(768);
            c["norm_topk_prob"] = json!(true);
            c["decoder_sparse_step"] = json!(1);
            c
        }
        // GLM-4.5-Air: 128 sigmoid-routed experts (8 a token) and one shared, layer 0 dense,
        // q/k/v biases, rope over half of each head (its MTP layer is not written).
        "glm4.5-air" => json!({"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
            "vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
            "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-5,
            "max_position_embeddings": 131072, "tie_word_embeddings": false, "hidden_act": "silu",
            "attention_bias": true, "use_qk_norm": false, "moe_intermediate_size": 1408,
            "n_routed_experts": 128, "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 1,
            "n_group": 1, "topk_group": 1, "norm_topk_prob": true, "routed_scaling_factor": 1.0,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5}}),
        // DeepSeek-V3: multi-head latent attention (128 heads, q_lora_rank 1536, kv_lora_rank
        // 512, 128 + 64 query / key dims, values of 128, YaRN over 4096 positions), 256
        // sigmoid-routed experts (8 a token from 4 of 8 groups) and one shared, the first 3 layers
        // dense (its MTP layer is not written).
        "deepseek-v3" => json!({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
            "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
            "num_attention_heads": 128, "num_key_value_heads": 128, "rms_norm_eps": 1e-6,
            "max_position_embeddings": 163840, "tie_word_embeddings": false, "hidden_act": "silu",
            "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "rope_interleave": true, "moe_intermediate_size": 2048, "n_routed_experts": 256,
            "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3, "n_group": 8,
            "topk_group": 4, "norm_topk_prob": true, "routed_scaling_factor": 2.5, "rope_theta": 10000.0,
            "rope_scaling": {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}}),
        // Llama 3 70B's shapes (80 layers of 8192, 64 heads, 8 KV heads): 141 GB in bf16, more
        // than one card holds with a KV cache (`--layers` shrinks it for one card's comparison).
        "llama3-70b" => json!({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": 128256, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
            "num_attention_heads": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
            "max_position_embeddings": 131072, "tie_word_embeddings": false, "hidden_act": "silu",
            "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}),
        "llama3-8b" => json!({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
            "max_position_embeddings": 131072, "tie_word_embeddings": false, "hidden_act": "silu",
            "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}),
        "gemma3-270m" => json!({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "vocab_size": 262144, "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "rms_norm_eps": 1e-6,
            "max_position_embeddings": 32768, "sliding_window": 512, "query_pre_attn_scalar": 256,
            "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true,
            "layer_types": (0..18).map(|i| if (i + 1) % 6 == 0 { "full_attention" } else { "sliding_attention" }).collect::<Vec<_>>(),
            "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}),
        // Gemma 4 E2B-sized text shapes: sliding heads of 256, full heads of 512, per-layer inputs
        // of 256, the last 20 layers KV-shared with double-wide MLPs.
        "gemma4-e2b" => json!({"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
            "vocab_size": 262144, "hidden_size": 1536, "intermediate_size": 6144, "num_hidden_layers": 35,
            "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256, "global_head_dim": 512,
            "rms_norm_eps": 1e-6, "max_position_embeddings": 131072, "sliding_window": 512,
            "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true, "final_logit_softcapping": 30.0,
            "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262144, "num_kv_shared_layers": 20,
            "use_double_wide_mlp": true,
            "layer_types": (0..35).map(|i| if (i + 1) % 5 == 0 { "full_attention" } else { "sliding_attention" }).collect::<Vec<_>>(),
            "rope_parameters": {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                "rope_theta": 1000000.0}, "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}),
        // Qwen3.5-27B's text shapes: three Gated DeltaNet layers (16 key, 48 value heads) to one
        // gated attention layer (24 heads of 256, 4 KV heads, rope over a quarter), dense MLP.
        "qwen3.5-27b" => {
            let mut c = qwen3(248320, 5120, 17408, 64, 24, 4, false);
            c["architectures"] = json!(["Qwen3_5ForCausalLM"]);
            c["model_type"] = json!("qwen3_5_text");
            c["head_dim"] = json!(256);
            c["max_position_embeddings"] = json!(262144);
            c["rope_parameters"] =
                json!({"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25});
            gdn(&mut c, 16, 48);
            c
        }
        // Qwen3-Next-80B-A3B: Qwen3.5's layer pattern with fused Gated DeltaNet projections (16
        // key, 32 value heads), 512 softmax-routed experts (10 a token) and a gated shared expert
        // in every layer (its MTP layer is not written).
        "qwen3-next-80b-a3b" => {
            let mut c = qwen3(151936, 2048, 5120, 48, 16, 2, false);
            c["architectures"] = json!(["Qwen3NextForCausalLM"]);
            c["model_type"] = json!("qwen3_next");
            c["head_dim"] = json!(256);
            c["max_position_embeddings"] = json!(262144);
            c["rope_parameters"] =
                json!({"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25});
            gdn(&mut c, 16, 32);
            for (k, v) in [
                ("num_experts", 512),
                ("num_experts_per_tok", 10),
                ("moe_intermediate_size", 512),
                ("shared_expert_intermediate_size", 512),
                ("decoder_sparse_step", 1),
            ] {
                c[k] = json!(v);
            }
            c["norm_topk_prob"] = json!(true);
            c
        }
        // MiniMax-M2: 62 attention layers (48 heads of 128, 8 KV heads, the QK norm over all
        // heads, rope over 64 dims), each 256 sigmoid-routed experts of 1536 (8 a token).
        "minimax-m2" => {
            let mut c = qwen3(200064, 3072, 1536, 62, 48, 8, false);
            c["architectures"] = json!(["MiniMaxM2ForCausalLM"]);
            c["model_type"] = json!("minimax_m2");
            c["max_position_embeddings"] = json!(196608);
            c["rope_parameters"] =
                json!({"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.5});
            c["num_local_experts"] = json!(256);
            c["num_experts_per_tok"] = json!(8);
            c
        }
        // gpt-oss-20b: 24 layers (sliding over 128 and full alternating; 64 heads of 64, 8 KV
        // heads, sinks, q/k/v/o biases, YaRN), each 32 experts of 2880 (4 a token) with biases,
        // stored as the release stores them: MXFP4 blocks and scales.
        "gpt-oss-20b" => json!({"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
            "vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24,
            "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "rms_norm_eps": 1e-5,
            "max_position_embeddings": 131072, "tie_word_embeddings": false, "attention_bias": true,
            "sliding_window": 128, "num_local_experts": 32, "num_experts_per_tok": 4, "swiglu_limit": 7.0,
            "rope_parameters": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "truncate": false, "original_max_position_embeddings": 4096, "rope_theta": 150000.0},
            "quantization_config": {"quant_method": "mxfp4"}}),
        "tiny" => qwen3(512, 64, 128, 2, 4, 2, true),
        _ => return None,
    })
}

/// Sets a Qwen3.5 / Qwen3-Next config's Gated DeltaNet fields: `k` key and `v` value heads of
/// 128, a 4-tap conv, every fourth layer full attention.
fn gdn(c: &mut Value, k: u64, v: u64) {
    for (name, n) in [
        ("linear_num_key_heads", k),
        ("linear_num_value_heads", v),
        ("linear_key_head_dim", 128),
        ("linear_value_head_dim", 128),
        ("linear_conv_kernel_dim", 4),
        ("full_attention_interval", 4),
    ] {
        c[name] = json!(n);
    }
}

/// The presets `--like` takes.
const PRESETS: &str = "qwen3-0.6b, qwen3-8b, llama3-8b, llama3-70b, qwen3-30b-a3b, glm4.5-air, deepseek-v3, gemma3-270m, gemma4-e2b, qwen3.5-27b, qwen3-next-80b-a3b, minimax-m2, gpt-oss-20b or tiny";

/// Runs `synth`.
pub fn run(a: &SynthArgs) -> Result<(), Failure> {
    let mut config = preset(&a.like).ok_or_else(|| refused(format!("--like {}: expected {PRESETS}", a.like)))?;
    let fp8 = a.dtype.eq_ignore_ascii_case("fp8");
    let dtype = if fp8 { Some(DType::BF16) } else { DType::parse(&a.dtype) }
        .ok_or_else(|| refused(format!("--dtype {}: expected bf16, f16, f32 or fp8", a.dtype)))?;
    if let Some(n) = a.layers {
        shrink(&mut config, n);
    }
    config["bos_token_id"] = json!(256);
    config["eos_token_id"] = json!(257);
    config["pad_token_id"] = json!(258);
    config["torch_dtype"] = json!(match dtype {
        DType::F32 => "float32",
        DType::F16 => "float16",
        _ => "bfloat16",
    });
    if fp8 {
        config["quantization_config"] = json!({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
            "weight_block_size": FP8_BLOCK});
    }
    std::fs::create_dir_all(&a.out).map_err(failed)?;
    let spec = spec_for(&RawConfig::parse(&a.out.join("config.json"), &config.to_string()).map_err(refused)?)
        .map_err(refused)?;
    write_json(&a.out.join("config.json"), &config)?;
    write_json(
        &a.out.join("generation_config.json"),
        &json!({"bos_token_id": 256, "eos_token_id": 257, "pad_token_id": 258}),
    )?;
    write_json(&a.out.join("tokenizer.json"), &tokenizer_json(spec.vocab_size))?;
    write_json(
        &a.out.join("tokenizer_config.json"),
        &json!({"bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "pad_token": SPECIALS[2]}),
    )?;
    let tensors = stored(tensor_list(&spec), dtype, fp8);
    let bytes: usize = tensors.iter().map(|t| t.1.iter().product::<usize>() * t.2.size()).sum();
    eprintln!(
        "synth: {} ({} tensors, {:.2} GB {}) -> {}",
        a.like,
        tensors.len(),
        bytes as f64 / 1e9,
        if fp8 { "fp8" } else { dtype.name() },
        a.out.display()
    );
    write_weights(&a.out.join("model.safetensors"), &tensors, a.seed, spec.norm_one_plus)
}

/// `config` cut to `n` layers: its `layer_types` pattern repeated, and a KV-shared tail (Gemma 4)
/// shrunk in proportion to the most layers whose kinds have an earlier layer to read from.
fn shrink(config: &mut Value, n: usize) {
    let from = config["num_hidden_layers"].as_u64().unwrap_or(1).max(1) as usize;
    config["num_hidden_layers"] = json!(n);
    let mut kinds: Vec<String> = Vec::new();
    if let Some(types) = config["layer_types"].as_array().cloned() {
        let types: Vec<Value> = types.into_iter().cycle().take(n).collect();
        kinds = types.iter().map(|t| t.as_str().unwrap_or_default().to_string()).collect();
        config["layer_types"] = json!(types);
    }
    let Some(shared) = config["num_kv_shared_layers"].as_u64() else { return };
    if let Some(last) = kinds.last_mut() {
        *last = "full_attention".into(); // as Gemma 4 forces it
    }
    let mut k = (shared as usize * n / from).min(n);
    while k > 0 && !(n - k..n).all(|i| kinds[..n - k].contains(&kinds[i])) {
        k -= 1;
    }
    config["num_kv_shared_layers"] = json!(k);
}

/// The block of `--dtype fp8`'s scales (Qwen3-FP8's, DeepSeek-V3's).
const FP8_BLOCK: [usize; 2] = [128, 128];

/// Each tensor with the type it is stored in: with `fp8`, the decoder's projections (2-D
/// weights under `layers.` but the routers, `*.gate.weight`) in FP8 followed by their
/// `weight_scale_inv`, the rest in `dtype`.
fn stored(tensors: Vec<(String, Vec<usize>)>, dtype: DType, fp8: bool) -> Vec<(String, Vec<usize>, DType)> {
    let mut out = Vec::with_capacity(tensors.len());
    for (name, shape) in tensors {
        // MXFP4 blocks and scales (gpt-oss's experts) are bytes.
        if name.ends_with("_blocks") || name.ends_with("_scales") {
            out.push((name, shape, DType::U8));
            continue;
        }
        let quantized = fp8 && shape.len() == 2 && name.contains(".layers.") && !name.ends_with(".gate.weight");
        if !quantized {
            out.push((name, shape, dtype));
            continue;
        }
        let grid = vec![shape[0].div_ceil(FP8_BLOCK[0]), shape[1].div_ceil(FP8_BLOCK[1])];
        out.push((format!("{name}_scale_inv"), grid, DType::F32));
        out.push((name, shape, DType::F8E4M3));
    }
    out
}

fn write_json(path: &Path, v: &Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(v).map_err(failed)?;
    std::fs::write(path, text).map_err(|e| failed(format!("{}: {e}", path.display())))
}

/// Names and shapes of every tensor the spec needs, in the HF layout (attention, latent
/// attention and Gated DeltaNet token mixers: the presets have no other kinds).
pub(crate) fn tensor_list(s: &ModelSpec) -> Vec<(String, Vec<usize>)> {
    let (h, d, v) = (s.hidden_size, s.head_dim, s.vocab_size);
    let mut t = vec![("model.embed_tokens.weight".to_string(), vec![v, h]), ("model.norm.weight".into(), vec![h])];
    if !s.tie_word_embeddings {
        t.push(("lm_head.weight".into(), vec![v, h]));
    }
    if let Some(p) = s.per_layer_input {
        let all = p.width * s.num_layers;
        t.push(("model.embed_tokens_per_layer.weight".into(), vec![p.vocab, all]));
        t.push(("model.per_layer_model_projection.weight".into(), vec![all, h]));
        t.push(("model.per_layer_projection_norm.weight".into(), vec![p.width]));
    }
    for i in 0..s.num_layers {
        let p = format!("model.layers.{i}.");
        // Tensors not named `*.weight` (biases), added after the layer's weights.
        let mut raw: Vec<(String, Vec<usize>)> = Vec::new();
        let mut add = |n: &str, shape: Vec<usize>| t.push((format!("{p}{n}.weight"), shape));
        add("input_layernorm", vec![h]);
        add("post_attention_layernorm", vec![h]);
        if s.sandwich_norms {
            add("pre_feedforward_layernorm", vec![h]);
            add("post_feedforward_layernorm", vec![h]);
        }
        let gdn = s.layer_kinds[i] == LayerKind::GatedDeltaNet;
        if gdn {
            let g = s.gdn.unwrap_or_else(|| unreachable!("a Gated DeltaNet layer has its spec"));
            let (ch, hv, vd) = (g.conv_channels(), g.num_v_heads, g.num_v_heads * g.head_v_dim);
            if g.fused_inputs {
                add("linear_attn.in_proj_qkvz", vec![ch + vd, h]);
                add("linear_attn.in_proj_ba", vec![2 * hv, h]);
            } else {
                add("linear_attn.in_proj_qkv", vec![ch, h]);
                add("linear_attn.in_proj_z", vec![vd, h]);
                add("linear_attn.in_proj_b", vec![hv, h]);
                add("linear_attn.in_proj_a", vec![hv, h]);
            }
            add("linear_attn.conv1d", vec![ch, 1, g.conv_kernel]);
            add("linear_attn.norm", vec![g.head_v_dim]);
            add("linear_attn.out_proj", vec![h, vd]);
            raw.push((format!("{p}linear_attn.A_log"), vec![hv]));
            raw.push((format!("{p}linear_attn.dt_bias"), vec![hv]));
        } else if let Some(m) = s.mla {
            let (heads, qk, lora) = (s.num_heads, m.qk_head_dim(), m.kv_lora_rank);
            match m.q_lora_rank {
                Some(r) => {
                    add("self_attn.q_a_proj", vec![r, h]);
                    add("self_attn.q_a_layernorm", vec![r]);
                    add("self_attn.q_b_proj", vec![heads * qk, r]);
                }
                None => add("self_attn.q_proj", vec![heads * qk, h]),
            }
            add("self_attn.kv_a_proj_with_mqa", vec![m.latent_dim(), h]);
            add("self_attn.kv_a_layernorm", vec![lora]);
            add("self_attn.kv_b_proj", vec![heads * (m.qk_nope_head_dim + m.v_head_dim), lora]);
            add("self_attn.o_proj", vec![h, heads * m.v_head_dim]);
        } else {
            // An output gate doubles q_proj's rows (Qwen3.5's gated attention).
            let gate = if s.attn_output_gate { 2 } else { 1 };
            let (kvh, d) = s.attn_shape(i);
            add("self_attn.q_proj", vec![gate * s.num_heads * d, h]);
            // A KV-shared layer has no K/V projections; full layers with V from K no `v_proj`.
            let owns = s.kv_source(i).is_none();
            if owns {
                add("self_attn.k_proj", vec![kvh * d, h]);
            }
            if owns && !(s.full_v_from_k && s.layer_kinds[i] == LayerKind::Full) {
                add("self_attn.v_proj", vec![kvh * d, h]);
            }
            add("self_attn.o_proj", vec![h, s.num_heads * d]);
        }
        if s.attn_out_bias {
            raw.push((format!("{p}self_attn.o_proj.bias"), vec![h]));
        }
        if s.attn_sinks {
            raw.push((format!("{p}self_attn.sinks"), vec![s.num_heads]));
        }
        if s.attention_bias && !gdn {
            for (n, rows) in
                [("q_proj", s.num_heads * d), ("k_proj", s.num_kv_heads * d), ("v_proj", s.num_kv_heads * d)]
            {
                raw.push((format!("{p}self_attn.{n}.bias"), vec![rows]));
            }
        }
        if s.qk_norm && !gdn {
            // Per head, or over all heads together (MiniMax-M2).
            let (qh, kh) = if s.qk_norm_full { (s.num_heads, s.num_kv_heads) } else { (1, 1) };
            let d = s.attn_shape(i).1;
            add("self_attn.q_norm", vec![qh * d]);
            if s.kv_source(i).is_none() {
                add("self_attn.k_norm", vec![kh * d]);
            }
        }
        match &s.moe {
            Some(m) if m.sparse_layers[i] => {
                let (md, inter, [g, u, dn]) = (m.module, m.moe_intermediate_size, m.expert_names);
                add(&format!("{md}.{}", m.router), vec![m.num_experts, h]);
                if let Some(b) = m.choice_bias {
                    raw.push((format!("{p}{md}.{b}"), vec![m.num_experts]));
                }
                // gpt-oss: a router bias, experts in the release's MXFP4 layout with biases.
                let ne = if m.gpt_oss { 0 } else { m.num_experts };
                if m.gpt_oss {
                    let (e, x) = (m.num_experts, format!("{p}{md}.experts."));
                    raw.push((format!("{p}{md}.{}.bias", m.router), vec![e]));
                    raw.push((format!("{x}gate_up_proj_blocks"), vec![e, 2 * inter, h / 32, 16]));
                    raw.push((format!("{x}gate_up_proj_scales"), vec![e, 2 * inter, h / 32]));
                    raw.push((format!("{x}gate_up_proj_bias"), vec![e, 2 * inter]));
                    raw.push((format!("{x}down_proj_blocks"), vec![e, h, inter / 32, 16]));
                    raw.push((format!("{x}down_proj_scales"), vec![e, h, inter / 32]));
                    raw.push((format!("{x}down_proj_bias"), vec![e, h]));
                }
                for e in 0..ne {
                    if m.gated {
                        add(&format!("{md}.experts.{e}.{g}"), vec![inter, h]);
                    }
                    add(&format!("{md}.experts.{e}.{u}"), vec![inter, h]);
                    add(&format!("{md}.experts.{e}.{dn}"), vec![h, inter]);
                }
                if let Some(sh) = &m.shared {
                    let (sm, si) = (sh.module, sh.intermediate_size);
                    if m.gated {
                        add(&format!("{md}.{sm}.{g}"), vec![si, h]);
                    }
                    add(&format!("{md}.{sm}.{u}"), vec![si, h]);
                    add(&format!("{md}.{sm}.{dn}"), vec![h, si]);
                    if let Some(gw) = sh.gate {
                        add(&format!("{md}.{gw}"), vec![1, h]);
                    }
                }
            }
            _ => {
                let w = s.mlp_width(i);
                add("mlp.gate_proj", vec![w, h]);
                add("mlp.up_proj", vec![w, h]);
                add("mlp.down_proj", vec![h, w]);
            }
        }
        if let Some(pl) = s.per_layer_input {
            add("per_layer_input_gate", vec![pl.width, h]);
            add("per_layer_projection", vec![h, pl.width]);
            add("post_per_layer_input_norm", vec![h]);
        }
        if s.layer_scalar {
            raw.push((format!("{p}layer_scalar"), vec![1]));
        }
        t.extend(raw);
    }
    t
}

/// Streams a safetensors file: header, then each tensor's seeded values made in parallel.
fn write_weights(
    path: &Path,
    tensors: &[(String, Vec<usize>, DType)],
    seed: u64,
    one_plus: bool,
) -> Result<(), Failure> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, shape, dtype) in tensors {
        let n = shape.iter().product::<usize>() * dtype.size();
        let st = match dtype {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::F8E4M3 => "F8_E4M3",
            DType::U8 => "U8",
            _ => "BF16",
        };
        header.insert(name.clone(), json!({"dtype": st, "shape": shape, "data_offsets": [offset, offset + n]}));
        offset += n;
    }
    let mut head = Value::Object(header).to_string().into_bytes();
    head.resize(head.len().next_multiple_of(8), b' ');
    let file = std::fs::File::create(path).map_err(|e| failed(format!("{}: {e}", path.display())))?;
    let mut w = BufWriter::with_capacity(1 << 22, file);
    let io = |e: std::io::Error| failed(format!("{}: {e}", path.display()));
    w.write_all(&(head.len() as u64).to_le_bytes()).map_err(io)?;
    w.write_all(&head).map_err(io)?;
    const CHUNK: usize = 1 << 20;
    for (ti, (name, shape, dtype)) in tensors.iter().enumerate() {
        let (numel, dtype): (usize, DType) = (shape.iter().product(), *dtype);
        // Norm scales and layer scalars are constant; biases (1-D, not norms) are small random values.
        let is_norm = shape.len() == 1 && (name.contains("norm") || name.ends_with("layer_scalar"));
        let scale = if is_norm { 0.0 } else { 0.02 * 3f32.sqrt() };
        // Zero-centred `(1 + w)` norms are written as 0; the Gated DeltaNet's gated norm is a
        // plain scale in every family.
        let plain = !one_plus || name.ends_with("linear_attn.norm.weight");
        let base = if is_norm && plain { 1.0 } else { 0.0 };
        let chunks: Vec<Vec<u8>> = (0..numel.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| {
                let n = CHUNK.min(numel - c * CHUNK);
                let mut state = seed
                    ^ (ti as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ (c as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
                let mut out = Vec::with_capacity(n * dtype.size());
                for _ in 0..n {
                    let u = (splitmix(&mut state) >> 40) as f32 / (1u64 << 24) as f32;
                    let x = base + scale * (2.0 * u - 1.0);
                    match dtype {
                        // MXFP4 scales of 2^-6 to 2^-4 (random codes then span the plain
                        // weights' range), and random code bytes.
                        DType::U8 if name.ends_with("_scales") => out.push(121 + (u * 3.0) as u8),
                        DType::U8 => out.push((u * 256.0) as u8),
                        // Codes of random values in [-448, 448] (no NaN), whose scales bring
                        // them to the plain weights' range.
                        DType::F8E4M3 => out.push(fp8_code(x / scale * 448.0)),
                        DType::F32 if name.ends_with("_scale_inv") => out.extend((scale / 448.0).to_le_bytes()),
                        DType::F32 => out.extend(x.to_le_bytes()),
                        DType::F16 => out.extend(half::f16::from_f32(x).to_le_bytes()),
                        _ => out.extend(half::bf16::from_f32(x).to_le_bytes()),
                    }
                }
                out
            })
            .collect();
        for c in chunks {
            w.write_all(&c).map_err(io)?;
        }
    }
    w.flush().map_err(io)
}

/// The E4M3 code of `x`'s magnitude rounded down (`|x| <= 448`): codes 0 to 0x7E rise in value.
fn fp8_code(x: f32) -> u8 {
    let mag = tf_formats::fp8::E4M3[..0x7F].partition_point(|&v| v <= x.abs()).saturating_sub(1) as u8;
    if x < 0.0 { mag | 0x80 } else { mag }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// GPT-2's printable stand-ins for the 256 byte values.
fn byte_level_chars() -> Vec<char> {
    let printable: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut chars = vec!['\0'; 256];
    let mut extra = 0;
    for b in 0..256u32 {
        let c = if printable.contains(&b) {
            b
        } else {
            extra += 1;
            255 + extra
        };
        chars[b as usize] = char::from_u32(c).unwrap_or('?');
    }
    chars
}

/// A byte-level BPE tokenizer with no merges: every byte a token, then the specials, then every
/// other id of a `vocab_size` vocabulary a word (` t<id>`) that text never encodes to but that
/// decodes, so a random model's output streams text at every token as a real vocabulary does.
/// The specials are in the model's vocabulary too, so the added tokens keep their ids.
fn tokenizer_json(vocab_size: usize) -> Value {
    let chars = byte_level_chars();
    let space = chars[b' ' as usize];
    let first = 256 + SPECIALS.len();
    let vocab: serde_json::Map<String, Value> = chars
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), json!(i)))
        .chain(SPECIALS.iter().enumerate().map(|(i, s)| (s.to_string(), json!(256 + i))))
        .chain((first..vocab_size).map(|i| (format!("{space}t{i}"), json!(i))))
        .collect();
    let added: Vec<Value> = SPECIALS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({"id": 256 + i, "content": s, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    json!({"version": "1.0", "truncation": null, "padding": null, "added_tokens": added, "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": []}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_past_the_specials_decodes_to_text_and_text_encodes_to_bytes() {
        let dir = std::env::temp_dir().join(format!("tf-synth-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        write_json(&dir.join("tokenizer.json"), &tokenizer_json(300)).expect("write");
        let vocab = tf_core::Vocab::new(300).expect("vocab");
        let tok = tf_tokenize::Tokenizer::from_dir(&dir, vocab).expect("the synthesized tokenizer loads");
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(tok.decode(&[259], false).expect("decode"), " t259");
        assert_eq!(tok.token_to_id("<|eos|>"), Some(257), "the specials keep their ids");
        assert_eq!(tok.decode(&[299, 104, 105], false).expect("decode"), " t299hi");
        let ids = tok.encode("hi t259", false).expect("encode");
        assert!(ids.as_slice().iter().all(|&i| i < 256), "text encodes to byte tokens only: {:?}", ids.as_slice());
    }

    #[test]
    fn every_preset_is_a_model_and_llama3_70b_has_its_70_billion_weights() {
        for name in PRESETS.replace(" or ", ", ").split(", ") {
            let config = preset(name).unwrap_or_else(|| panic!("{name}: listed but no preset"));
            let raw = RawConfig::parse(Path::new("config.json"), &config.to_string()).expect("config");
            let spec = spec_for(&raw).unwrap_or_else(|e| panic!("{name}: {e}"));
            if name == "llama3-70b" {
                let n: usize = tensor_list(&spec).iter().map(|t| t.1.iter().product::<usize>()).sum();
                assert_eq!(n, 70_553_706_496, "Llama 3 70B's weight count");
            }
        }
    }

    /// A tensor's name, shape and stored type.
    type Stored = (String, Vec<usize>, DType);

    /// `config`'s checkpoint written into a temporary directory (bf16, seed 1): the directory,
    /// its spec and the tensors as stored.
    fn written(config: &Value) -> (tempfile::TempDir, ModelSpec, Vec<Stored>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let spec = spec_for(&RawConfig::parse(&dir.path().join("config.json"), &config.to_string()).expect("config"))
            .expect("spec");
        write_json(&dir.path().join("config.json"), config).expect("write");
        write_json(&dir.path().join("tokenizer.json"), &tokenizer_json(spec.vocab_size)).expect("write");
        let tensors = stored(tensor_list(&spec), DType::BF16, false);
        write_weights(&dir.path().join("model.safetensors"), &tensors, 1, false).expect("weights");
        (dir, spec, tensors)
    }

    #[test]
    fn the_gpt_oss_preset_shrunk_writes_mxfp4_experts_that_load_and_run() {
        let mut config = preset("gpt-oss-20b").expect("preset");
        for (k, v) in [
            ("vocab_size", 300),
            ("hidden_size", 64),
            ("intermediate_size", 64),
            ("num_hidden_layers", 2),
            ("num_attention_heads", 4),
            ("num_key_value_heads", 2),
            ("head_dim", 16),
            ("num_local_experts", 4),
            ("num_experts_per_tok", 2),
        ] {
            config[k] = json!(v);
        }
        let (dir, _, tensors) = written(&config);
        assert!(tensors.iter().any(|t| t.0.ends_with("gate_up_proj_blocks") && t.2 == DType::U8));
        let b = tf_backend::RefBackend;
        let m = tf_models::Model::open(dir.path(), &b).unwrap_or_else(|e| panic!("{e}"));
        let ids = m.vocab.check(&[5, 6, 7]).expect("ids");
        let logits = tf_engine::Runner::new(&m, &b, 3).expect("runner").prefill(&ids, 3, true);
        assert!(logits.iter().all(|v| v.is_finite()) && logits.iter().any(|&v| v != 0.0));
    }

    #[test]
    fn the_deepseek_v3_preset_shrunk_writes_every_tensor_its_latent_attention_loads() {
        let mut config = preset("deepseek-v3").expect("preset");
        for (k, v) in [
            ("vocab_size", 300),
            ("hidden_size", 64),
            ("intermediate_size", 96),
            ("num_hidden_layers", 2),
            ("num_attention_heads", 2),
            ("num_key_value_heads", 2),
            ("q_lora_rank", 24),
            ("kv_lora_rank", 16),
            ("qk_nope_head_dim", 8),
            ("qk_rope_head_dim", 4),
            ("v_head_dim", 12),
            ("moe_intermediate_size", 16),
            ("n_routed_experts", 8),
            ("first_k_dense_replace", 1),
            ("n_group", 2),
            ("topk_group", 1),
            ("num_experts_per_tok", 2),
        ] {
            config[k] = json!(v);
        }
        let (dir, spec, _) = written(&config);
        let m = tf_models::Model::open(dir.path(), &tf_backend::RefBackend);
        assert!(m.is_ok(), "{:?}", m.err().map(|e| e.to_string()));
        // FP8 projections, the latent attention's included (split by rows or absorbed at load).
        config["quantization_config"] = json!({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
            "weight_block_size": FP8_BLOCK});
        write_json(&dir.path().join("config.json"), &config).expect("write");
        let tensors = stored(tensor_list(&spec), DType::BF16, true);
        write_weights(&dir.path().join("model.safetensors"), &tensors, 1, false).expect("weights");
        let m = tf_models::Model::open(dir.path(), &tf_backend::RefBackend);
        assert!(m.is_ok(), "{:?}", m.err().map(|e| e.to_string()));
    }

    #[test]
    fn the_gemma4_preset_shrunk_writes_every_tensor_its_per_layer_inputs_wide_full_and_kv_shared_layers_load() {
        let mut config = preset("gemma4-e2b").expect("preset");
        for (k, v) in [
            ("vocab_size", 300),
            ("vocab_size_per_layer_input", 300),
            ("hidden_size", 64),
            ("intermediate_size", 96),
            ("num_hidden_layers", 5),
            ("num_kv_shared_layers", 2),
            ("num_attention_heads", 2),
            ("head_dim", 16),
            ("global_head_dim", 32),
            ("hidden_size_per_layer_input", 8),
        ] {
            config[k] = json!(v);
        }
        let (s, f) = ("sliding_attention", "full_attention");
        config["layer_types"] = json!([s, f, s, s, f]);
        let (dir, spec, _) = written(&config);
        assert_eq!((spec.attn_shape(0), spec.attn_shape(4)), ((1, 16), (1, 32)));
        assert_eq!((spec.kv_source(3), spec.kv_source(4), spec.mlp_width(4)), (Some(2), Some(1), 192));
        let m = tf_models::Model::open(dir.path(), &tf_backend::RefBackend);
        assert!(m.is_ok(), "{:?}", m.err().map(|e| e.to_string()));
    }

    #[test]
    fn shrinking_the_gemma4_preset_keeps_a_kv_shared_tail_that_has_sources() {
        for (n, want) in [(35, 20), (10, 5), (6, 1), (5, 0), (2, 0)] {
            let mut config = preset("gemma4-e2b").expect("preset");
            shrink(&mut config, n);
            assert_eq!(config["num_kv_shared_layers"], json!(want), "{n} layers");
            let c = RawConfig::parse(Path::new("config.json"), &config.to_string()).expect("config");
            assert!(spec_for(&c).is_ok(), "{n} layers: {:?}", spec_for(&c).err().map(|e| e.to_string()));
        }
    }
}
