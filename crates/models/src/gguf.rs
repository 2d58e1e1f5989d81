//! llama.cpp GGUF checkpoints through the Hugging Face model code: a `config.json` built from
//! GGUF metadata (as transformers' GGUF loader builds it, plus what llama.cpp hard-codes), and
//! tensors served under HF names with `convert_hf_to_gguf.py`'s changes undone: Gemma's norms
//! stored as `1 + w` (Gemma 2's and 3's), Llama's q/k rows permuted for interleaved rope,
//! experts stacked in 3-D (Qwen2's q, k and v biases as they are; Phi-3's fused `attn_qkv` and
//! `ffn_up` served as the fused weights its family splits; gpt-oss's experts split into gate and
//! up, in MXFP4 or any other type, with their biases, its sinks and router bias; LFM2's layer
//! kinds read from its per-layer KV head counts, its conv weights given back their middle dim;
//! GLM-4.5's sigmoid router, shared experts and dense first layers, its MTP block (`nextn.*`);
//! MiniMax-M2's experts and full-projection QK norm; Qwen3.5's Gated DeltaNet layers with their
//! value heads kept in the file's tiled order, `A` taken back to `A_log`, norms stored as `1 + w`,
//! its MTP block (`nextn.*`);
//! Qwen3-Next's split or fused projections and its experts, which Qwen3.5-MoE's layers carry too; Nemotron-H's one-part layers from
//! its per-layer KV head and MLP widths, its Mamba2 mixers and ungated experts behind their
//! latent projections; DeepSeek V3's latent attention with `kv_b_proj` put back together from
//! the converter's transposed key half and its value half, GLM-5's lightning indexer beside it;
//! Gemma 4's two head widths, per-layer KV heads and MLP widths, proportional rope from its
//! `rope_freqs` marks, per-layer inputs and MoE block; Qwen3-VL's text decoders as Qwen3's, their
//! multi-axis rope checked to be the 1-D one on text; Mistral Small 3's as Llama's; Step 3.5's
//! per-kind heads and ropes, its Llama 3 factors over the full layers' rotated dims, its MTP
//! block).

use crate::config::RawConfig;
use crate::error::ModelError;
use serde_json::{Map, Value, json};
use std::path::Path;
use tf_core::DType;
use tf_formats::gguf::GgufFile;
use tf_formats::{FormatError, TensorBytes, TensorView};

/// The GGUF architectures TensorFold maps, with their HF names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `llama` -> `LlamaForCausalLM`.
    Llama,
    /// `qwen2` -> `Qwen2ForCausalLM` (q, k and v biases).
    Qwen2,
    /// `phi3` -> `Phi3ForCausalLM` (q, k, v fused; gate and up fused).
    Phi3,
    /// `qwen3` -> `Qwen3ForCausalLM`.
    Qwen3,
    /// `qwen3moe` -> `Qwen3MoeForCausalLM`.
    Qwen3Moe,
    /// `gemma2` -> `Gemma2ForCausalLM`.
    Gemma2,
    /// `gemma3` -> `Gemma3ForCausalLM`.
    Gemma3,
    /// `gemma4` -> `Gemma4ForCausalLM` (sliding and full layers of their own head widths,
    /// per-layer inputs, KV-shared layers, the MoE block).
    Gemma4,
    /// `gpt-oss` -> `GptOssForCausalLM` (sinks, biases, experts split into gate and up).
    GptOss,
    /// `lfm2` -> `Lfm2ForCausalLM` (short conv and attention layers).
    Lfm2,
    /// `lfm2moe` -> `Lfm2MoeForCausalLM` (LFM2's layers, experts after the dense ones).
    Lfm2Moe,
    /// `glm4moe` -> `Glm4MoeForCausalLM` (GLM-4.5 / 4.6 MoE).
    Glm4Moe,
    /// `minimax-m2` -> `MiniMaxM2ForCausalLM`.
    MiniMaxM2,
    /// `qwen35` -> `Qwen3_5ForCausalLM` (Qwen3.5 dense text).
    Qwen35,
    /// `qwen3next` -> `Qwen3NextForCausalLM`.
    Qwen3Next,
    /// `qwen35moe` -> `Qwen3_5MoeForCausalLM` (Qwen3.5's layers, Qwen3-Next's experts).
    Qwen35Moe,
    /// `nemotron_h` and `nemotron_h_moe` -> `NemotronHForCausalLM` (Mamba2, attention, MLP and
    /// MoE layers).
    NemotronH,
    /// `deepseek2` -> `DeepseekV3ForCausalLM` (latent attention, sigmoid-routed experts: DeepSeek
    /// V3 / R1 and the checkpoints converted as it).
    Deepseek2,
    /// `glm-dsa` -> `GlmMoeDsaForCausalLM` (GLM-5: DeepSeek V3's layers with a lightning indexer).
    GlmDsa,
    /// `step35` -> `Step3p5ForCausalLM` (Step 3.5 / 3.7's text decoder: sliding and full layers
    /// of their own head counts and ropes, head gates, sigmoid-routed experts, MTP blocks).
    Step35,
}

const FAMILIES: &[(&str, Family, &str, &str)] = &[
    ("llama", Family::Llama, "LlamaForCausalLM", "llama"),
    // Mistral Small 3.x's text decoder as newer converters name it: Llama's layout.
    ("mistral3", Family::Llama, "LlamaForCausalLM", "llama"),
    ("qwen2", Family::Qwen2, "Qwen2ForCausalLM", "qwen2"),
    ("phi3", Family::Phi3, "Phi3ForCausalLM", "phi3"),
    ("qwen3", Family::Qwen3, "Qwen3ForCausalLM", "qwen3"),
    ("qwen3moe", Family::Qwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe"),
    // Qwen3-VL's text decoders: Qwen3's layers, their multi-axis rope the 1-D one on text.
    ("qwen3vl", Family::Qwen3, "Qwen3ForCausalLM", "qwen3"),
    ("qwen3vlmoe", Family::Qwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe"),
    ("gemma2", Family::Gemma2, "Gemma2ForCausalLM", "gemma2"),
    ("gemma3", Family::Gemma3, "Gemma3ForCausalLM", "gemma3_text"),
    ("gemma4", Family::Gemma4, "Gemma4ForCausalLM", "gemma4_text"),
    ("gpt-oss", Family::GptOss, "GptOssForCausalLM", "gpt_oss"),
    ("lfm2", Family::Lfm2, "Lfm2ForCausalLM", "lfm2"),
    ("lfm2moe", Family::Lfm2Moe, "Lfm2MoeForCausalLM", "lfm2_moe"),
    ("glm4moe", Family::Glm4Moe, "Glm4MoeForCausalLM", "glm4_moe"),
    ("minimax-m2", Family::MiniMaxM2, "MiniMaxM2ForCausalLM", "minimax_m2"),
    ("qwen35", Family::Qwen35, "Qwen3_5ForCausalLM", "qwen3_5_text"),
    ("qwen3next", Family::Qwen3Next, "Qwen3NextForCausalLM", "qwen3_next"),
    ("qwen35moe", Family::Qwen35Moe, "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text"),
    ("nemotron_h", Family::NemotronH, "NemotronHForCausalLM", "nemotron_h"),
    ("nemotron_h_moe", Family::NemotronH, "NemotronHForCausalLM", "nemotron_h"),
    ("deepseek2", Family::Deepseek2, "DeepseekV3ForCausalLM", "deepseek_v3"),
    ("glm-dsa", Family::GlmDsa, "GlmMoeDsaForCausalLM", "glm_moe_dsa"),
    ("step35", Family::Step35, "Step3p5ForCausalLM", "step3p5"),
];

impl Family {
    /// The family of GGUF `general.architecture` `arch`.
    pub fn from_arch(arch: &str) -> Option<Family> {
        FAMILIES.iter().find(|f| f.0 == arch).map(|f| f.1)
    }

    fn entry(self) -> (&'static str, Family, &'static str, &'static str) {
        FAMILIES.iter().copied().find(|f| f.1 == self).unwrap_or(FAMILIES[0])
    }

    /// The HF `architectures[0]`.
    pub fn hf_architecture(self) -> &'static str {
        self.entry().2
    }
}

fn family(f: &GgufFile) -> Result<Family, ModelError> {
    let arch = f.architecture()?;
    Family::from_arch(arch).ok_or_else(|| ModelError::Architecture {
        file: f.path().to_path_buf(),
        arch: arch.to_string(),
        supported: FAMILIES.iter().map(|f| f.0).collect::<Vec<_>>().join(", "),
    })
}

/// Reads `{arch}.*` metadata with errors naming the file and key.
struct Meta<'a> {
    f: &'a GgufFile,
    arch: &'a str,
}

impl Meta<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    fn error(&self, msg: String) -> ModelError {
        ModelError::Config { file: self.f.path().to_path_buf(), msg }
    }

    fn opt_u64(&self, k: &str) -> Result<Option<u64>, ModelError> {
        Ok(self.f.get_u64(&self.key(k))?)
    }

    fn u64(&self, k: &str) -> Result<u64, ModelError> {
        self.opt_u64(k)?.ok_or_else(|| self.error(format!("GGUF metadata has no '{}'", self.key(k))))
    }

    fn opt_f32(&self, k: &str) -> Result<Option<f32>, ModelError> {
        Ok(self.f.get_f32(&self.key(k))?)
    }

    /// `{arch}.k` given one value a layer: each value, or the single value for every layer.
    fn per_layer(&self, k: &str) -> Result<Vec<u64>, ModelError> {
        let key = self.key(k);
        match self.f.get(&key) {
            Some(tf_formats::gguf::MetaValue::Array(_)) => {
                let per = self.f.get_i32_array(&key)?.unwrap_or_default();
                per.iter().map(|&n| u64::try_from(n).map_err(|_| self.error(format!("'{key}' holds {n}")))).collect()
            }
            _ => Ok(vec![self.u64(k)?]),
        }
    }

    /// The largest of [`Meta::per_layer`]'s values.
    fn per_layer_max(&self, k: &str) -> Result<u64, ModelError> {
        Ok(self.per_layer(k)?.into_iter().max().unwrap_or(0))
    }

    /// `attention.head_count_kv`: one count for every layer, or (LFM2) one a layer, 0 where the
    /// layer has no attention; `None` when absent.
    /// The decoder's blocks of the file's `layers` and the MTP blocks after them
    /// (`nextn_predict_layers`), at least one block left to the decoder.
    fn decoder_blocks(&self, layers: u64) -> Result<(u64, u64), ModelError> {
        let nextn = self.opt_u64("nextn_predict_layers")?.unwrap_or(0);
        if nextn >= layers {
            let msg = format!("nextn_predict_layers {nextn} leaves none of the {layers} blocks to the decoder");
            return Err(self.error(msg));
        }
        Ok((layers - nextn, nextn))
    }

    fn kv_heads(&self) -> Result<Option<KvHeads>, ModelError> {
        let k = self.key("attention.head_count_kv");
        match self.f.get(&k) {
            None => Ok(None),
            Some(tf_formats::gguf::MetaValue::Array(_)) => {
                let per = self.f.get_i32_array(&k)?.unwrap_or_default();
                let per: Option<Vec<u64>> = per.iter().map(|&n| u64::try_from(n).ok()).collect();
                per.map(|p| Some(KvHeads::PerLayer(p)))
                    .ok_or_else(|| self.error(format!("'{k}' holds a negative count")))
            }
            Some(_) => Ok(self.opt_u64("attention.head_count_kv")?.map(KvHeads::All)),
        }
    }
}

/// KV heads as `attention.head_count_kv` gives them.
enum KvHeads {
    /// The same count in every layer.
    All(u64),
    /// One count a layer (0: no attention there).
    PerLayer(Vec<u64>),
}

impl KvHeads {
    /// The count of the layers that attend (the largest).
    fn count(&self) -> u64 {
        match self {
            KvHeads::All(n) => *n,
            KvHeads::PerLayer(p) => p.iter().copied().max().unwrap_or(0),
        }
    }
}

/// A HF-style `config.json` object for the GGUF file `f`.
pub fn config_from_gguf(f: &GgufFile) -> Result<Value, ModelError> {
    let fam = family(f)?;
    let m = Meta { f, arch: f.architecture()? };
    let (_, _, hf_arch, model_type) = fam.entry();
    let embd = f.tensor_info("token_embd.weight").ok_or_else(|| missing(f, "token_embd.weight"))?;
    let hidden = m.u64("embedding_length")?;
    // (Step 3.5's one a layer: the largest here, each kind's in `step35`.)
    let heads = m.per_layer_max("attention.head_count")?;
    let head_dim = match (m.opt_u64("attention.key_length")?, m.opt_u64("rope.dimension_count")?) {
        (Some(k), _) => k,
        (None, Some(r)) if fam == Family::Llama => r,
        _ if heads > 0 => hidden / heads,
        _ => return Err(m.error("attention.head_count is 0".into())),
    };
    // (DeepSeek's latent attention: a key of the latent and rope dims, a value of the latent.)
    let latent = matches!(fam, Family::Deepseek2 | Family::GlmDsa);
    if let Some(v) = m.opt_u64("attention.value_length")?.filter(|&v| v != head_dim && !latent) {
        return Err(m.error(format!("value_length {v} differs from key_length {head_dim}")));
    }
    // Ministral 3's position-dependent attention temperature (`llama_4_scaling_beta`).
    let temperature = m.key("attention.temperature_scale");
    if f.get(&temperature).is_some() {
        return Err(m.error(format!("'{temperature}' (Llama 4's attention temperature scaling) is not supported")));
    }
    text_positions_rope(&m, head_dim)?;
    let layers = m.u64("block_count")?;
    // Checked before anything is sized from it (Gemma 3's per-layer types are).
    if layers > f.tensors().len() as u64 {
        let n = f.tensors().len();
        return Err(m.error(format!("'{}' is {layers}, but the file holds only {n} tensors", m.key("block_count"))));
    }
    let mut c = Map::new();
    c.insert("architectures".into(), json!([hf_arch]));
    c.insert("model_type".into(), json!(model_type));
    c.insert("vocab_size".into(), json!(embd.shape.first().copied().unwrap_or(0)));
    c.insert("hidden_size".into(), json!(hidden));
    c.insert("num_hidden_layers".into(), json!(layers));
    c.insert("num_attention_heads".into(), json!(heads));
    let kv_heads = m.kv_heads()?;
    c.insert("num_key_value_heads".into(), json!(kv_heads.as_ref().map_or(heads, KvHeads::count)));
    c.insert("head_dim".into(), json!(head_dim));
    let ffn = match fam {
        // Nemotron-H: one width a layer (0 where the layer has no MLP).
        Family::NemotronH | Family::Gemma4 => m.per_layer_max("feed_forward_length")?,
        _ => match m.opt_u64("feed_forward_length")? {
            Some(n) => n,
            None if matches!(fam, Family::Qwen3Moe | Family::GptOss | Family::Qwen35Moe) => {
                m.u64("expert_feed_forward_length")?
            }
            None => m.u64("feed_forward_length")?,
        },
    };
    c.insert("intermediate_size".into(), json!(ffn));
    if let Some(eps) = m.opt_f32("attention.layer_norm_rms_epsilon")? {
        c.insert("rms_norm_eps".into(), json!(eps));
    }
    if let Some(ctx) = m.opt_u64("context_length")? {
        c.insert("max_position_embeddings".into(), json!(ctx));
    }
    c.insert("tie_word_embeddings".into(), json!(f.tensor_info("output.weight").is_none()));
    c.insert("attention_bias".into(), json!(f.tensor_info("blk.0.attn_q.bias").is_some()));
    for (key, field) in
        [("bos", "bos_token_id"), ("eos", "eos_token_id"), ("padding", "pad_token_id"), ("unknown", "unk_token_id")]
    {
        if let Some(id) = f.get_u64(&format!("tokenizer.ggml.{key}_token_id"))? {
            c.insert(field.into(), json!(id));
        }
    }
    // (Gemma 4's `rope_freqs` marks its full layers' unrotated dims: read by `gemma4`.)
    // (Step 3.5's holds Llama 3 factors over its full layers' rotated dims alone: read by `step35`.)
    let scaling = if matches!(fam, Family::Gemma4 | Family::Step35) { None } else { rope_scaling(&m, head_dim)? };
    let theta = m.opt_f32("rope.freq_base")?;
    match fam {
        Family::Gemma3 => gemma3(&m, &mut c, Dims { layers, hidden, heads, head_dim }, theta, scaling)?,
        Family::Gemma2 => gemma2(&m, &mut c, Dims { layers, hidden, heads, head_dim }, theta)?,
        Family::Gemma4 => gemma4(&m, &mut c, layers, head_dim, theta)?,
        Family::Step35 => step35(&m, &mut c, layers, head_dim, theta)?,
        Family::GptOss => gpt_oss(&m, &mut c, layers, theta, scaling)?,
        Family::Lfm2 => lfm2(&m, &mut c, layers, kv_heads, theta)?,
        Family::Lfm2Moe => {
            lfm2(&m, &mut c, layers, kv_heads, theta)?;
            lfm2_moe(&m, &mut c)?
        }
        Family::Glm4Moe => glm4_moe(&m, &mut c, layers, head_dim, theta)?,
        Family::MiniMaxM2 => minimax_m2(&m, &mut c, head_dim, theta)?,
        Family::Qwen35 => qwen35(&m, &mut c, layers, head_dim, theta, true)?,
        Family::Qwen35Moe => {
            if let Some(t) = f.tensors().iter().find(|t| t.name.ends_with("ffn_gate_up_exps.weight")) {
                return Err(m.error(format!("{}: experts with gate and up merged are not read", t.name)));
            }
            qwen35(&m, &mut c, layers, head_dim, theta, true)?;
            qwen3_next(&m, &mut c)?
        }
        Family::Qwen3Next => {
            qwen35(&m, &mut c, layers, head_dim, theta, false)?;
            qwen3_next(&m, &mut c)?
        }
        Family::NemotronH => nemotron_h(&m, &mut c, layers)?,
        Family::Deepseek2 => deepseek2(&m, &mut c, layers, heads, theta, scaling)?,
        Family::GlmDsa => {
            deepseek2(&m, &mut c, layers, heads, theta, scaling)?;
            glm_dsa(&m, &mut c, layers)?
        }
        Family::Phi3 => {
            c.insert("hidden_act".into(), json!("silu"));
            let mut rope = json!({"rope_type": "default", "rope_theta": theta.unwrap_or(10_000.0)});
            // llama.cpp's rope.dimension_count: the rotated dims of each head (Phi-4-mini's 0.75).
            if let Some(dims) = m.opt_u64("rope.dimension_count")?.filter(|&d| d > 0 && d < head_dim) {
                rope["partial_rotary_factor"] = json!(dims as f64 / head_dim as f64);
            }
            if let Some(long) = longrope(&m)? {
                for (k, v) in long {
                    rope[k.as_str()] = v;
                }
                c.insert("original_max_position_embeddings".into(), rope["original_max_position_embeddings"].clone());
            }
            c.insert("rope_parameters".into(), rope);
            if let Some(w) = m.opt_u64("attention.sliding_window")?.filter(|&w| w > 0) {
                c.insert("sliding_window".into(), json!(w));
            }
        }
        _ => {
            c.insert("hidden_act".into(), json!("silu"));
            if let Some(t) = theta {
                c.insert("rope_theta".into(), json!(t));
            }
            if let Some(s) = scaling {
                c.insert("rope_scaling".into(), Value::Object(s));
            }
        }
    }
    if fam == Family::Qwen3Moe {
        c.insert("num_experts".into(), json!(m.u64("expert_count")?));
        c.insert("num_experts_per_tok".into(), json!(m.u64("expert_used_count")?));
        c.insert("moe_intermediate_size".into(), json!(m.u64("expert_feed_forward_length")?));
        // llama.cpp's qwen3moe graph always renormalises the chosen experts' weights.
        let norm = f.get_bool(&m.key("expert_weights_norm"))?.unwrap_or(true);
        c.insert("norm_topk_prob".into(), json!(norm));
        c.insert("decoder_sparse_step".into(), json!(1));
        c.insert("mlp_only_layers".into(), json!([]));
    }
    Ok(Value::Object(c))
}

/// The config of `f` as a [`RawConfig`] (errors name the GGUF file).
pub fn raw_config(f: &GgufFile) -> Result<RawConfig, ModelError> {
    RawConfig::parse(f.path(), &config_from_gguf(f)?.to_string())
}

/// Texts of control tokens llama.cpp treats as end of generation (its `llama-vocab.cpp` list).
const EOG_TEXTS: &[&str] =
    &["<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end|>", "<|return|>", "<|call|>"];

/// Ids that end generation as llama.cpp decides them: `tokenizer.ggml.{eos,eot,eom}_token_id`
/// and control tokens (type 3) with a turn-end text, but not `<|end|>` where `<|return|>` and
/// `<|call|>` are both there (gpt-oss's harmony format ends a message, not the reply, with
/// it); GGUF has no `generation_config.json`.
pub fn eog_token_ids(f: &GgufFile) -> Result<Vec<i64>, ModelError> {
    let mut ids = Vec::new();
    for key in ["eos", "eot", "eom"] {
        if let Some(id) = f.get_u64(&format!("tokenizer.ggml.{key}_token_id"))? {
            ids.push(i64::try_from(id).unwrap_or(i64::MAX));
        }
    }
    let tokens = f.get_str_array("tokenizer.ggml.tokens")?.unwrap_or_default();
    let types = f.get_i32_array("tokenizer.ggml.token_type")?.unwrap_or_default();
    let control = |t: &str| tokens.iter().zip(&types).any(|(text, ty)| *ty == 3 && text == t);
    let harmony = control("<|return|>") && control("<|call|>");
    for (id, (text, ty)) in tokens.iter().zip(&types).enumerate() {
        if *ty == 3 && EOG_TEXTS.contains(&text.as_str()) {
            ids.push(id as i64);
        }
    }
    // `<|end|>` leaves the set whether a key or its text put it there.
    if harmony {
        ids.retain(|&id| usize::try_from(id).ok().and_then(|i| tokens.get(i)).is_none_or(|t| t != "<|end|>"));
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

fn missing(f: &GgufFile, tensor: &str) -> ModelError {
    ModelError::Missing { dir: f.path().to_path_buf(), tensor: tensor.to_string() }
}

/// Sizes read from the common metadata.
#[derive(Clone, Copy)]
struct Dims {
    layers: u64,
    hidden: u64,
    heads: u64,
    head_dim: u64,
}

/// Gemma 3 as llama.cpp runs it: every 6th layer full, sliding layers with rope base 10000,
/// attention scaled by key_length (the 62-layer 27B by hidden / heads).
fn gemma3(
    m: &Meta<'_>,
    c: &mut Map<String, Value>,
    d: Dims,
    theta: Option<f32>,
    scaling: Option<Map<String, Value>>,
) -> Result<(), ModelError> {
    c.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
    let window = m.u64("attention.sliding_window")?;
    c.insert("sliding_window".into(), json!(window));
    let pattern = m.opt_u64("attention.sliding_window_pattern")?.unwrap_or(6).max(1);
    let kinds: Vec<&str> =
        (0..d.layers).map(|i| if (i + 1) % pattern == 0 { "full_attention" } else { "sliding_attention" }).collect();
    c.insert("layer_types".into(), json!(kinds));
    let mut full = scaling.unwrap_or_default();
    full.entry("rope_type").or_insert(json!("default"));
    full.insert("rope_theta".into(), json!(theta.unwrap_or(1_000_000.0)));
    let local = m.opt_f32("rope.freq_base_swa")?.unwrap_or(10_000.0);
    let sliding = json!({"rope_type": "default", "rope_theta": local});
    c.insert("rope_parameters".into(), json!({"full_attention": full, "sliding_attention": sliding}));
    let scalar = if d.layers == 62 && d.heads > 0 { d.hidden / d.heads } else { d.head_dim };
    c.insert("query_pre_attn_scalar".into(), json!(scalar));
    for key in ["final_logit_softcapping", "attn_logit_softcapping"] {
        c.insert(key.into(), json!(m.opt_f32(key)?));
    }
    Ok(())
}

/// Qwen3-VL's multi-axis rope (`rope.dimension_sections`: rotated pairs per time, height, width
/// and a fourth axis) on text, whose positions are `[p, p, p, 0]`: the 1-D rope when the first
/// three sections rotate every pair of the head and the fourth none; other sections refused.
fn text_positions_rope(m: &Meta<'_>, head_dim: u64) -> Result<(), ModelError> {
    let key = m.key("rope.dimension_sections");
    let Some(sections) = m.f.get_i32_array(&key)? else { return Ok(()) };
    let three: i64 = sections.iter().take(3).map(|&s| i64::from(s)).sum();
    let fourth = sections.get(3).copied().unwrap_or(0);
    if sections.iter().any(|&s| s < 0) || fourth != 0 || 2 * three != head_dim as i64 {
        return Err(m.error(format!(
            "'{key}' {sections:?}: text runs the 1-D rope only where the first three sections rotate all {} pairs of the head and the fourth none",
            head_dim / 2
        )));
    }
    Ok(())
}

/// Gemma 4 as `convert_hf_to_gguf.py` stores it: the full layers' head width as `key_length`
/// and the sliding layers' as `key_length_swa`, KV heads one count a layer, layer kinds from
/// `sliding_window_pattern`, the full layers' proportional rope as the `rope_freqs` tensor (1
/// for each rotated frequency, 1e30 for the others), the MLP widths one a layer (twice as wide
/// on KV-shared layers with `use_double_wide_mlp`), V from K where full layers have no `attn_v`.
fn gemma4(
    m: &Meta<'_>,
    c: &mut Map<String, Value>,
    layers: u64,
    full_dim: u64,
    theta: Option<f32>,
) -> Result<(), ModelError> {
    let n = usize::try_from(layers).map_err(|_| m.error(format!("block_count {layers} is too large")))?;
    if n == 0 || full_dim == 0 || !full_dim.is_multiple_of(2) {
        return Err(m.error(format!(
            "block_count {layers} and key_length {full_dim}: a Gemma 4 needs layers and an even head width"
        )));
    }
    c.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
    c.insert("sliding_window".into(), json!(m.u64("attention.sliding_window")?));
    let key = m.key("attention.sliding_window_pattern");
    let sliding = m.f.get_bool_array(&key)?.ok_or_else(|| m.error(format!("GGUF metadata has no '{key}'")))?;
    if sliding.len() != n {
        return Err(m.error(format!("'{key}' has {} flags for {layers} layers", sliding.len())));
    }
    let kinds: Vec<&str> = sliding.iter().map(|&s| if s { "sliding_attention" } else { "full_attention" }).collect();
    c.insert("layer_types".into(), json!(kinds));
    let swa_dim = m.u64("attention.key_length_swa")?;
    if let Some(v) = m.opt_u64("attention.value_length_swa")?.filter(|&v| v != swa_dim) {
        return Err(m.error(format!("value_length_swa {v} differs from key_length_swa {swa_dim}")));
    }
    c.insert("head_dim".into(), json!(swa_dim));
    // KV heads: one count, or one a layer (the sliding layers' one count, the full layers' another).
    let kv = m.per_layer("attention.head_count_kv")?;
    let kv_at = |i: usize| if kv.len() == 1 { kv[0] } else { kv.get(i).copied().unwrap_or(0) };
    if kv.len() != 1 && kv.len() != n {
        return Err(m.error(format!("attention.head_count_kv has {} counts for {layers} layers", kv.len())));
    }
    let swa_kv: Vec<u64> = (0..n).filter(|&i| sliding[i]).map(kv_at).collect();
    let full: Vec<usize> = (0..n).filter(|&i| !sliding[i]).collect();
    if swa_kv.windows(2).any(|w| w[0] != w[1]) || full.windows(2).any(|w| kv_at(w[0]) != kv_at(w[1])) {
        return Err(m.error("attention.head_count_kv differs between layers of one kind".into()));
    }
    let swa_kv = swa_kv.first().copied().or(full.first().map(|&i| kv_at(i))).unwrap_or(0);
    c.insert("num_key_value_heads".into(), json!(swa_kv));
    let overrides: Map<String, Value> =
        full.iter().map(|&i| (i.to_string(), json!({"head_dim": full_dim, "num_key_value_heads": kv_at(i)}))).collect();
    c.insert("per_layer_config".into(), Value::Object(overrides));
    // KV-shared last layers, and their double-wide MLPs.
    let shared = m.opt_u64("attention.shared_kv_layers")?.unwrap_or(0);
    c.insert("num_kv_shared_layers".into(), json!(shared));
    let ffn = m.per_layer("feed_forward_length")?;
    let first_shared = n.saturating_sub(shared as usize);
    let width = ffn.first().copied().unwrap_or(0);
    let ffn_at = |i: usize| if ffn.len() == 1 { width } else { ffn.get(i).copied().unwrap_or(0) };
    if ffn.len() != 1 && ffn.len() != n {
        return Err(m.error(format!("feed_forward_length has {} widths for {layers} layers", ffn.len())));
    }
    let wide = shared > 0 && ffn_at(n - 1) == 2 * width;
    if let Some(i) = (0..n).find(|&i| ffn_at(i) != if wide && i >= first_shared { 2 * width } else { width }) {
        return Err(m.error(format!(
            "feed_forward_length of layer {i} is {}, not the model's {width} or twice it on KV-shared layers",
            ffn_at(i)
        )));
    }
    c.insert("intermediate_size".into(), json!(width));
    c.insert("use_double_wide_mlp".into(), json!(wide));
    // V from K on full layers that have no `attn_v` (the shared layers' own are not read).
    let has_v = |i: usize| m.f.tensor_info(&format!("blk.{i}.attn_v.weight")).is_some();
    let owning: Vec<usize> = full.iter().copied().filter(|&i| i < first_shared).collect();
    let k_eq_v = owning.first().is_some_and(|&i| !has_v(i));
    if owning.iter().any(|&i| has_v(i) == k_eq_v) {
        return Err(m.error("some full layers have attn_v and others not".into()));
    }
    c.insert("attention_k_eq_v".into(), json!(k_eq_v));
    // Ropes: the full layers' proportional one (the rotated share from `rope_freqs`), the
    // sliding layers' default one over every dim.
    let half = (full_dim / 2) as usize;
    let rotated = match m.f.tensor("rope_freqs.weight")? {
        None => half,
        Some(view) => {
            let f = view.to_f32();
            let r = f.iter().take_while(|&&v| v == 1.0).count();
            if f.len() != half || f[r..].iter().any(|&v| v < 1e29) {
                return Err(m.error(format!("rope_freqs.weight: {} values, not 1 for each rotated frequency and 1e30 for the {half} - rotated others", f.len())));
            }
            r
        }
    };
    let partial = (2 * rotated) as f32 / full_dim as f32;
    if ((partial * full_dim as f32) as usize) / 2 != rotated {
        return Err(
            m.error(format!("rope_freqs.weight: {rotated} rotated frequencies of {half} is no proportional rope"))
        );
    }
    let swa_theta = m.opt_f32("rope.freq_base_swa")?.unwrap_or(10_000.0);
    if let Some(d) = m.opt_u64("rope.dimension_count_swa")?.filter(|&d| d != swa_dim) {
        return Err(m.error(format!(
            "rope.dimension_count_swa {d}: sliding layers rotating part of their {swa_dim} dims are not supported"
        )));
    }
    c.insert(
        "rope_parameters".into(),
        json!({
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": partial, "rope_theta": theta.unwrap_or(1_000_000.0)},
            "sliding_attention": {"rope_type": "default", "rope_theta": swa_theta},
        }),
    );
    c.insert("final_logit_softcapping".into(), json!(m.opt_f32("final_logit_softcapping")?));
    // Per-layer inputs: their width, and the rows of their table.
    let per_layer = m.opt_u64("embedding_length_per_layer_input")?.unwrap_or(0);
    c.insert("hidden_size_per_layer_input".into(), json!(per_layer));
    if per_layer > 0 {
        let t =
            m.f.tensor_info("per_layer_token_embd.weight")
                .ok_or_else(|| missing(m.f, "per_layer_token_embd.weight"))?;
        c.insert("vocab_size_per_layer_input".into(), json!(t.shape.first().copied().unwrap_or(0)));
    }
    if let Some(experts) = m.opt_u64("expert_count")?.filter(|&e| e > 0) {
        c.insert("enable_moe_block".into(), json!(true));
        c.insert("num_experts".into(), json!(experts));
        c.insert("top_k_experts".into(), json!(m.u64("expert_used_count")?));
        c.insert("moe_intermediate_size".into(), json!(m.u64("expert_feed_forward_length")?));
    }
    Ok(())
}

/// Step 3.5 as `convert_hf_to_gguf.py` stores it and llama.cpp runs it: query heads one count a
/// layer (the sliding layers' one, the full layers' another), one KV head count, layer kinds from
/// `sliding_window_pattern`, full layers rotating half of `rope.dimension_count` from
/// `rope.freq_base` (Llama 3 factors over those dims in `rope_freqs`) and sliding layers
/// `rope.dimension_count_swa` from `rope.freq_base_swa`, scores scaled by `key_length^-0.5`,
/// sigmoid-routed experts beside the shared one wherever a block has a router, the gate/up
/// clamps one a block (`swiglu_clamp_exp` / `_shexp`, 0 for none), `nextn_predict_layers` MTP
/// blocks after the decoder's.
fn step35(
    m: &Meta<'_>,
    c: &mut Map<String, Value>,
    blocks: u64,
    head_dim: u64,
    theta: Option<f32>,
) -> Result<(), ModelError> {
    let (layers, nextn) = m.decoder_blocks(blocks)?;
    let (n, all) = (layers as usize, blocks as usize);
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(m.error(format!("key_length {head_dim} must be even")));
    }
    c.insert("num_hidden_layers".into(), json!(layers));
    c.insert("num_nextn_predict_layers".into(), json!(nextn));
    let key = m.key("attention.sliding_window_pattern");
    let sliding = m.f.get_bool_array(&key)?.unwrap_or_else(|| vec![false; all]);
    if sliding.len() != all {
        return Err(m.error(format!("'{key}' has {} flags for {blocks} blocks", sliding.len())));
    }
    let kinds: Vec<&str> = sliding.iter().map(|&s| if s { "sliding_attention" } else { "full_attention" }).collect();
    c.insert("layer_types".into(), json!(kinds));
    if sliding.contains(&true) {
        c.insert("sliding_window".into(), json!(m.u64("attention.sliding_window")?));
    }
    // Query heads a kind, KV heads everywhere.
    let one_a_block = |k: &str| -> Result<Vec<u64>, ModelError> {
        let v = m.per_layer(k)?;
        match v.len() {
            1 => Ok(vec![v[0]; all]),
            l if l == all => Ok(v),
            l => Err(m.error(format!("'{}' has {l} values for {blocks} blocks", m.key(k)))),
        }
    };
    let heads = one_a_block("attention.head_count")?;
    let of_kind = |v: &[u64], s: bool| -> Result<Option<u64>, ModelError> {
        let mut it = (0..all).filter(|&i| sliding[i] == s).map(|i| v[i]);
        let first = it.next();
        match it.find(|&x| Some(x) != first) {
            Some(x) => Err(m.error(format!("head counts differ within one kind of layer ({first:?} and {x})"))),
            None => Ok(first),
        }
    };
    let (full_heads, swa_heads) = (of_kind(&heads, false)?, of_kind(&heads, true)?);
    let full_heads = full_heads.or(swa_heads).unwrap_or(0);
    c.insert("num_attention_heads".into(), json!(full_heads));
    c.insert("num_sliding_attention_heads".into(), json!(swa_heads.unwrap_or(full_heads)));
    let kv = one_a_block("attention.head_count_kv")?;
    if kv.windows(2).any(|w| w[0] != w[1]) {
        return Err(m.error("attention.head_count_kv differs between layers: Step's layers share one count".into()));
    }
    c.insert("num_key_value_heads".into(), json!(kv.first().copied().unwrap_or(0)));
    // Scores scaled by the head width (llama.cpp's), whatever the checkpoint's scalar was.
    c.insert("query_pre_attn_scalar".into(), json!(head_dim));
    // Ropes by kind.
    let n_rot = m.opt_u64("rope.dimension_count")?.unwrap_or(head_dim);
    let n_rot_swa = m.opt_u64("rope.dimension_count_swa")?.unwrap_or(n_rot);
    let (rot_full, rot_swa) = (n_rot / 2, n_rot_swa);
    if rot_full == 0
        || rot_full > head_dim
        || !rot_full.is_multiple_of(2)
        || rot_swa == 0
        || rot_swa > head_dim
        || !rot_swa.is_multiple_of(2)
    {
        return Err(m.error(format!("rope.dimension_count {n_rot} / _swa {n_rot_swa} do not fit heads of {head_dim}")));
    }
    let full_theta = theta.unwrap_or(10_000.0);
    let mut full = Map::new();
    full.insert("rope_type".into(), json!("default"));
    full.insert("rope_theta".into(), json!(full_theta));
    full.insert("partial_rotary_factor".into(), json!(rot_full as f64 / head_dim as f64));
    if let Some(view) = m.f.tensor("rope_freqs.weight")? {
        let f = view.to_f32();
        let used = (rot_full / 2) as usize;
        if f.len() < used || f[used..].iter().any(|&v| v != 1.0) {
            return Err(m.error(format!(
                "rope_freqs.weight: {} factors for {used} rotated frequencies, the rest not 1",
                f.len()
            )));
        }
        let factors = &f[..used];
        if factors.iter().any(|&v| v != 1.0) {
            let orig = llama3_original_context(factors, full_theta, rot_full)
                .ok_or_else(|| m.error("rope_freqs.weight does not match Llama 3 scaling (low 1, high 4)".into()))?;
            for (k, v) in llama3_from_factors(m, factors, full_theta, rot_full, orig)? {
                full.insert(k, v);
            }
        }
    }
    let swa = json!({"rope_type": "default", "rope_theta": m.opt_f32("rope.freq_base_swa")?.unwrap_or(full_theta),
        "partial_rotary_factor": rot_swa as f64 / head_dim as f64});
    c.insert("rope_parameters".into(), json!({"full_attention": full, "sliding_attention": swa}));
    // Experts where a block has a router; gate/up clamps.
    let sparse: Vec<&str> = (0..all)
        .map(|i| if m.f.tensor_info(&format!("blk.{i}.ffn_gate_inp.weight")).is_some() { "sparse" } else { "dense" })
        .collect();
    c.insert("mlp_layer_types".into(), json!(sparse));
    if sparse.contains(&"sparse") {
        c.insert("n_routed_experts".into(), json!(m.u64("expert_count")?));
        c.insert("num_experts_per_tok".into(), json!(m.u64("expert_used_count")?));
        c.insert("moe_intermediate_size".into(), json!(m.u64("expert_feed_forward_length")?));
        c.insert("share_expert_dim".into(), json!(m.u64("expert_shared_feed_forward_length")?));
        c.insert("moe_router_scaling_factor".into(), json!(m.opt_f32("expert_weights_scale")?.unwrap_or(1.0)));
        if m.f.get_bool(&m.key("expert_weights_norm"))? == Some(false) {
            return Err(m.error("expert_weights_norm false: Step's chosen scores are always renormalised".into()));
        }
        if let Some(g) = m.opt_u64("expert_gating_func")?.filter(|&g| g != 2) {
            return Err(m.error(format!("expert_gating_func {g}: Step's router is sigmoid (2)")));
        }
    }
    for (gguf, hf) in [("swiglu_clamp_exp", "swiglu_limits"), ("swiglu_clamp_shexp", "swiglu_limits_shared")] {
        if let Some(v) = m.f.get_f32_array(&m.key(gguf))? {
            if v.len() != all && v.len() != n {
                return Err(m.error(format!("'{}' has {} limits for {blocks} blocks", m.key(gguf), v.len())));
            }
            c.insert(hf.into(), json!(v));
        }
    }
    c.insert("hidden_act".into(), json!("silu"));
    Ok(())
}

/// The Llama 3 context length behind `factors` (over the `dims` rotated dims from `theta`, low
/// and high frequency factors 1 and 4, as `convert_hf_to_gguf.py` writes them): read off a
/// smoothed factor where there is one, else any length the plain ones allow (all such give the
/// same factors); `None` when none fits.
fn llama3_original_context(factors: &[f32], theta: f32, dims: u64) -> Option<u64> {
    let factor = f64::from(factors.iter().copied().fold(f32::NAN, f32::max));
    let wavelen = |i: usize| 2.0 * std::f64::consts::PI * f64::from(theta).powf((2 * i) as f64 / dims as f64);
    let smoothed = factors.iter().enumerate().find(|(_, f)| **f != 1.0 && f64::from(**f) != factor);
    if let Some((i, &f)) = smoothed {
        let s = (1.0 / f64::from(f) - 1.0 / factor) / (1.0 - 1.0 / factor);
        return Some((wavelen(i) * (3.0 * s + 1.0)).round() as u64);
    }
    // Plain: every frequency kept (wavelength under orig / 4) or scaled (over orig).
    let kept = factors.iter().take_while(|&&f| f == 1.0).count();
    if factors[kept..].iter().any(|&f| f64::from(f) != factor) {
        return None;
    }
    let above = if kept == 0 { 1.0 } else { wavelen(kept - 1) * 4.0 };
    let below = if kept == factors.len() { f64::MAX } else { wavelen(kept) };
    let orig = above.ceil().max(1.0);
    (orig < below).then_some(orig as u64)
}

/// gpt-oss as its release configures it: sliding and full layers alternating from a sliding one
/// (llama.cpp's pattern of 2), every layer's experts, YaRN as the metadata gives it with
/// transformers' untruncated correction range (the release's `truncate: false`, which the GGUF
/// metadata does not carry; llama.cpp rounds the range to whole dimensions).
fn gpt_oss(
    m: &Meta<'_>,
    c: &mut Map<String, Value>,
    layers: u64,
    theta: Option<f32>,
    scaling: Option<Map<String, Value>>,
) -> Result<(), ModelError> {
    c.insert("sliding_window".into(), json!(m.u64("attention.sliding_window")?));
    let kinds: Vec<&str> =
        (0..layers).map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
    c.insert("layer_types".into(), json!(kinds));
    let mut rope = scaling.unwrap_or_default();
    rope.entry("rope_type").or_insert(json!("default"));
    if rope.get("rope_type") == Some(&json!("yarn")) {
        rope.insert("truncate".into(), json!(false));
    }
    rope.insert("rope_theta".into(), json!(theta.unwrap_or(150_000.0)));
    c.insert("rope_parameters".into(), Value::Object(rope));
    c.insert("num_local_experts".into(), json!(m.u64("expert_count")?));
    c.insert("num_experts_per_tok".into(), json!(m.u64("expert_used_count")?));
    if let Some(n) = m.opt_u64("expert_feed_forward_length")? {
        c.insert("intermediate_size".into(), json!(n));
    }
    Ok(())
}

/// LFM2 as `convert_hf_to_gguf.py` stores it: attention where the layer's KV head count is not
/// 0, short conv elsewhere, `shortconv.l_cache` taps, the MLP width already adjusted
/// (`feed_forward_length` is the width the layers have).
fn lfm2(
    m: &Meta<'_>,
    c: &mut Map<String, Value>,
    layers: u64,
    kv_heads: Option<KvHeads>,
    theta: Option<f32>,
) -> Result<(), ModelError> {
    let kinds: Vec<&str> = match kv_heads {
        Some(KvHeads::PerLayer(p)) if p.len() as u64 == layers => {
            p.iter().map(|&n| if n == 0 { "conv" } else { "full_attention" }).collect()
        }
        Some(KvHeads::PerLayer(p)) => {
            return Err(m.error(format!("attention.head_count_kv has {} layers' counts for {layers} layers", p.len())));
        }
        _ => return Err(m.error("LFM2 needs attention.head_count_kv per layer (0 for its conv layers)".into())),
    };
    c.insert("layer_types".into(), json!(kinds));
    c.insert("conv_L_cache".into(), json!(m.u64("shortconv.l_cache")?));
    c.insert("block_auto_adjust_ff_dim".into(), json!(false));
    if let Some(eps) = c.remove("rms_norm_eps") {
        c.insert("norm_eps".into(), eps);
    }
    c.insert("rope_theta".into(), json!(theta.unwrap_or(1_000_000.0)));
    Ok(())
}

/// LFM2-MoE's experts as `convert_hf_to_gguf.py` stores them: sigmoid routing (any other
/// `expert_gating_func` refused), the choice bias where the file has one, renormalised and
/// unscaled weights unless `expert_weights_norm` / `expert_weights_scale` say otherwise (llama.cpp's
/// LFM2-MoE graph), `leading_dense_block_count` dense layers first.
fn lfm2_moe(m: &Meta<'_>, c: &mut Map<String, Value>) -> Result<(), ModelError> {
    if let Some(f) = m.opt_u64("expert_gating_func")?.filter(|&f| f != 2) {
        return Err(m.error(format!("expert_gating_func {f}: LFM2-MoE routes by sigmoid scores (2)")));
    }
    c.insert("num_experts".into(), json!(m.u64("expert_count")?));
    c.insert("num_experts_per_tok".into(), json!(m.u64("expert_used_count")?));
    c.insert("moe_intermediate_size".into(), json!(m.u64("expert_feed_forward_length")?));
    c.insert("num_dense_layers".into(), json!(m.opt_u64("leading_dense_block_count")?.unwrap_or(0)));
    let norm = m.f.get_bool(&m.key("expert_weights_norm"))?.unwrap_or(true);
    c.insert("norm_topk_prob".into(), json!(norm));
    c.insert("routed_scaling_factor".into(), json!(m.opt_f32("expert_weights_scale")?.unwrap_or(1.0)));
    let biased = m.f.tensors().iter().any(|t| t.name.contains(".exp_probs_b"));
    c.insert("use_expert_bias".into(), json!(biased));
    Ok(())
}

/// GLM-4.5 / 4.6 as `convert_hf_to_gguf.py` stores it: `block_count` counts the MTP
/// (`nextn_predict_layers`) blocks after the decoder's, experts routed by sigmoid scores
/// (`expert_gating_func` 2; any other refused) with their choice bias, weighted and scaled as
/// `expert_weights_norm` / `expert_weights_scale` say (llama.cpp's defaults where absent),
/// groups where `expert_group_count` is given, shared experts, `leading_dense_block_count`
/// dense layers, partial rotary over `rope.dimension_count` dims, QK norm where the file has it.
fn glm4_moe(
    m: &Meta<'_>,
    c: &mut Map<String, Value>,
    layers: u64,
    head_dim: u64,
    theta: Option<f32>,
) -> Result<(), ModelError> {
    let (n, nextn) = m.decoder_blocks(layers)?;
    c.insert("num_hidden_layers".into(), json!(n));
    c.insert("num_nextn_predict_layers".into(), json!(nextn));
    if let Some(f) = m.opt_u64("expert_gating_func")?.filter(|&f| f != 2) {
        return Err(m.error(format!("expert_gating_func {f}: GLM-4.5 routes by sigmoid scores (2)")));
    }
    c.insert("hidden_act".into(), json!("silu"));
    glm_router(m, c)?;
    let rotated = m.opt_u64("rope.dimension_count")?.unwrap_or(head_dim / 2);
    if rotated == 0 || rotated > head_dim {
        return Err(m.error(format!("rope.dimension_count {rotated} of a head of {head_dim}")));
    }
    c.insert("partial_rotary_factor".into(), json!(rotated as f64 / head_dim as f64));
    c.insert("rope_theta".into(), json!(theta.unwrap_or(10_000.0)));
    c.insert("use_qk_norm".into(), json!(m.f.tensor_info("blk.0.attn_q_norm.weight").is_some()));
    Ok(())
}

/// GLM-4.5's and DeepSeek V3's experts as the converter keys them: their counts and width,
/// shared experts, dense first layers, the router's scaling, renormalising and groups.
fn glm_router(m: &Meta<'_>, c: &mut Map<String, Value>) -> Result<(), ModelError> {
    c.insert("n_routed_experts".into(), json!(m.u64("expert_count")?));
    c.insert("num_experts_per_tok".into(), json!(m.u64("expert_used_count")?));
    c.insert("moe_intermediate_size".into(), json!(m.u64("expert_feed_forward_length")?));
    c.insert("n_shared_experts".into(), json!(m.opt_u64("expert_shared_count")?.unwrap_or(0)));
    c.insert("first_k_dense_replace".into(), json!(m.opt_u64("leading_dense_block_count")?.unwrap_or(0)));
    c.insert("routed_scaling_factor".into(), json!(m.opt_f32("expert_weights_scale")?.unwrap_or(1.0)));
    let norm = m.f.get_bool(&m.key("expert_weights_norm"))?.unwrap_or(false);
    c.insert("norm_topk_prob".into(), json!(norm));
    c.insert("n_group".into(), json!(m.opt_u64("expert_group_count")?.unwrap_or(1)));
    c.insert("topk_group".into(), json!(m.opt_u64("expert_group_used_count")?.unwrap_or(1)));
    Ok(())
}

/// DeepSeek V3 as `convert_hf_to_gguf.py` stores it (`deepseek2`): latent attention sized by
/// `attention.{q,kv}_lora_rank` (no q rank: one `attn_q`), `key_length_mla` (the nope and rope
/// dims of a head; `key_length` and `value_length` where a file predates the MLA keys) and
/// `value_length_mla`, the rope over `rope.dimension_count` dims interleaved (ggml's normal
/// rope), YaRN's `mscale_all_dim` as ten times `rope.scaling.yarn_log_multiplier` with `mscale`
/// equal to it (llama.cpp's reading); GLM-4.5's router keys (sigmoid scores only), dense first
/// layers; MTP blocks after the decoder's, if a file counts any, left unread.
fn deepseek2(
    m: &Meta<'_>,
    c: &mut Map<String, Value>,
    layers: u64,
    heads: u64,
    theta: Option<f32>,
    scaling: Option<Map<String, Value>>,
) -> Result<(), ModelError> {
    let (n, _) = m.decoder_blocks(layers)?;
    c.insert("num_hidden_layers".into(), json!(n));
    c.insert("num_nextn_predict_layers".into(), json!(0));
    // llama.cpp's reading of a file without the key: GLM-4.7-Flash's shape (47 or 48 blocks,
    // 154,880 tokens) routes by sigmoid scores, any other by softmax (DeepSeek V2).
    let vocab = m.f.tensor_info("token_embd.weight").and_then(|t| t.shape.first().copied());
    let glm_lite = matches!(layers, 47 | 48) && vocab == Some(154_880);
    match m.opt_u64("expert_gating_func")? {
        Some(2) => {}
        None if glm_lite => {}
        Some(f) => return Err(m.error(format!("expert_gating_func {f}: DeepSeek V3 routes by sigmoid scores (2)"))),
        None => {
            let msg = "expert_gating_func is absent: llama.cpp then routes by softmax (DeepSeek V2), which \
                       DeepseekV3ForCausalLM does not; DeepSeek V3 files say 2 (sigmoid)";
            return Err(m.error(msg.into()));
        }
    }
    let rope = m.u64("rope.dimension_count")?;
    let (qk, v) = match (m.opt_u64("attention.key_length_mla")?, m.opt_u64("attention.value_length_mla")?) {
        (Some(k), Some(v)) => (k, v),
        (None, None) => (m.u64("attention.key_length")?, m.u64("attention.value_length")?),
        _ => return Err(m.error("key_length_mla and value_length_mla come together".into())),
    };
    if rope == 0 || rope >= qk || !rope.is_multiple_of(2) {
        return Err(m.error(format!("rope.dimension_count {rope} of a query-key head of {qk}")));
    }
    c.insert("q_lora_rank".into(), m.opt_u64("attention.q_lora_rank")?.map_or(Value::Null, |r| json!(r)));
    c.insert("kv_lora_rank".into(), json!(m.u64("attention.kv_lora_rank")?));
    c.insert("qk_nope_head_dim".into(), json!(qk - rope));
    c.insert("qk_rope_head_dim".into(), json!(rope));
    c.insert("v_head_dim".into(), json!(v));
    c.insert("head_dim".into(), json!(rope));
    c.insert("num_key_value_heads".into(), json!(heads));
    c.insert("rope_interleave".into(), json!(true));
    c.insert("hidden_act".into(), json!("silu"));
    glm_router(m, c)?;
    let mut params = Map::new();
    params.insert("rope_theta".into(), json!(theta.unwrap_or(10_000.0)));
    params.insert("rope_type".into(), json!("default"));
    if let Some(s) = scaling {
        if s.get("rope_type").and_then(Value::as_str) != Some("yarn") {
            return Err(m.error(format!("rope scaling {:?}: DeepSeek V3 files scale by YaRN", s.get("rope_type"))));
        }
        if let Some(a) = m.opt_f32("rope.scaling.attn_factor")?.filter(|&a| a != 1.0) {
            return Err(m.error(format!("rope.scaling.attn_factor {a}: only 1 is read")));
        }
        // llama.cpp takes mscale_all_dim back from the converter's 0.1 x, and mscale as equal.
        let log_mul = m.opt_f32("rope.scaling.yarn_log_multiplier")?.ok_or_else(|| {
            m.error("YaRN without rope.scaling.yarn_log_multiplier (DeepSeek's mscale_all_dim / 10)".into())
        })?;
        if !(log_mul.is_finite() && log_mul >= 0.0) {
            return Err(m.error(format!("rope.scaling.yarn_log_multiplier {log_mul} must be finite and at least 0")));
        }
        let all = log_mul / 0.1;
        params.extend(s);
        params.insert("mscale".into(), json!(all));
        params.insert("mscale_all_dim".into(), json!(all));
    }
    c.insert("rope_parameters".into(), Value::Object(params));
    Ok(())
}

/// GLM-5 as `convert_hf_to_gguf.py` stores it (`glm-dsa`): DeepSeek V3's keys ([`deepseek2`]),
/// the lightning indexer's (`attention.indexer.head_count`, `key_length`, `top_k`), its MTP
/// blocks after the decoder's (read by `--draft mtp`). Every layer must run its own indexer:
/// `attention.indexer.types` all true, or where a file has no such key, every decoder block
/// holding indexer tensors (GLM-5.2's shared indexer layers, which hold none and which llama.cpp
/// may assume without the key, are refused by name).
fn glm_dsa(m: &Meta<'_>, c: &mut Map<String, Value>, layers: u64) -> Result<(), ModelError> {
    let (n, nextn) = m.decoder_blocks(layers)?;
    c.insert("num_nextn_predict_layers".into(), json!(nextn));
    c.insert("index_n_heads".into(), json!(m.u64("attention.indexer.head_count")?));
    c.insert("index_head_dim".into(), json!(m.u64("attention.indexer.key_length")?));
    c.insert("index_topk".into(), json!(m.u64("attention.indexer.top_k")?));
    for key in ["attention.indexer.top_k_frequency", "attention.indexer.skip_top_k_offset"] {
        if m.f.get(&m.key(key)).is_some() {
            return Err(m.error(format!("{key}: shared indexer layers (IndexShare) are not supported")));
        }
    }
    match m.f.get_bool_array(&m.key("attention.indexer.types"))? {
        Some(types) => {
            if let Some(i) = types.iter().take(n as usize).position(|full| !full) {
                return Err(m.error(format!(
                    "attention.indexer.types: layer {i} shares an earlier layer's indexer, which is not supported"
                )));
            }
        }
        None => {
            if let Some(i) = (0..n).find(|i| m.f.tensor_info(&format!("blk.{i}.indexer.attn_k.weight")).is_none()) {
                return Err(m.error(format!(
                    "block {i} holds no indexer (a shared indexer layer, as GLM-5.2 has), which is not supported"
                )));
            }
        }
    }
    c.insert("indexer_types".into(), json!(vec!["full"; n as usize]));
    Ok(())
}

/// Qwen3.5 as `convert_hf_to_gguf.py` stores it: `block_count` counts the MTP blocks
/// (`nextn_predict_layers`, read by `--draft mtp`) after the decoder's; Gated DeltaNet layers where
/// `attention.recurrent_layers` says (else all but every `full_attention_interval`-th), sized by
/// the `ssm.*` keys (`group_count` key heads, `time_step_rank` value heads of `inner_size /
/// time_step_rank`, `state_size` key width, `conv_kernel` taps), their value heads tiled over the
/// key heads as the converter reorders them; partial rotary over `rope.dimension_count` dims.
fn qwen35(
    m: &Meta<'_>,
    c: &mut Map<String, Value>,
    layers: u64,
    head_dim: u64,
    theta: Option<f32>,
    reordered: bool,
) -> Result<(), ModelError> {
    let (n, nextn) = m.decoder_blocks(layers)?;
    c.insert("num_hidden_layers".into(), json!(n));
    if nextn > 0 {
        c.insert("mtp_num_hidden_layers".into(), json!(nextn));
    }
    let recurrent: Vec<bool> = match m.f.get_bool_array(&m.key("attention.recurrent_layers"))? {
        // Its MTP blocks' flags after the decoder's.
        Some(flags) => flags.into_iter().take(n as usize).collect(),
        None => {
            let every = m.opt_u64("full_attention_interval")?.unwrap_or(4).max(1);
            (0..n).map(|i| (i + 1) % every != 0).collect()
        }
    };
    if recurrent.len() as u64 != n {
        return Err(m.error(format!("attention.recurrent_layers says {} layers of {n}", recurrent.len())));
    }
    let kinds: Vec<&str> = recurrent.iter().map(|&r| if r { "linear_attention" } else { "full_attention" }).collect();
    c.insert("layer_types".into(), json!(kinds));
    let (nk, nv) = (m.u64("ssm.group_count")?, m.u64("ssm.time_step_rank")?);
    let inner = m.u64("ssm.inner_size")?;
    if nv == 0 || !inner.is_multiple_of(nv) {
        return Err(m.error(format!("ssm.inner_size {inner} does not split into {nv} value heads")));
    }
    c.insert("linear_num_key_heads".into(), json!(nk));
    c.insert("linear_num_value_heads".into(), json!(nv));
    c.insert("linear_key_head_dim".into(), json!(m.u64("ssm.state_size")?));
    c.insert("linear_value_head_dim".into(), json!(inner / nv));
    c.insert("linear_conv_kernel_dim".into(), json!(m.u64("ssm.conv_kernel")?));
    // llama.cpp's converter reorders Qwen3.5's, not Qwen3-Next's; Ollama's says which it did.
    let reordered = m.f.get_bool(&m.key("ssm.v_head_reordered"))?.unwrap_or(reordered);
    c.insert("gguf_tiled_value_heads".into(), json!(reordered && nk != nv));
    c.insert("hidden_act".into(), json!("silu"));
    let rotated = m.opt_u64("rope.dimension_count")?.unwrap_or(head_dim / 4);
    if rotated == 0 || rotated > head_dim {
        return Err(m.error(format!("rope.dimension_count {rotated} of a head of {head_dim}")));
    }
    let rope = json!({"rope_type": "default", "rope_theta": theta.unwrap_or(10_000_000.0),
        "partial_rotary_factor": rotated as f64 / head_dim as f64});
    c.insert("rope_parameters".into(), rope);
    Ok(())
}

/// Qwen3-Next's experts and projections as `convert_hf_to_gguf.py` stores them (its Gated
/// DeltaNet as Qwen3.5's, [`qwen35`], without the value heads' reorder): q, k, v and z split
/// (`attn_qkv`, `attn_gate`) or, in older files, fused (`ssm_in`), b and a fused (`ssm_ba`);
/// softmax top-k experts in the layers that have a router (`ffn_gate_inp`), a sigmoid-gated
/// shared expert.
fn qwen3_next(m: &Meta<'_>, c: &mut Map<String, Value>) -> Result<(), ModelError> {
    let split = m.f.tensors().iter().any(|t| t.name.ends_with(".attn_qkv.weight"));
    c.insert("gguf_split_qkvz".into(), json!(split));
    c.insert("num_experts".into(), json!(m.u64("expert_count")?));
    c.insert("num_experts_per_tok".into(), json!(m.u64("expert_used_count")?));
    c.insert("moe_intermediate_size".into(), json!(m.u64("expert_feed_forward_length")?));
    let shared = m.opt_u64("expert_shared_feed_forward_length")?.unwrap_or(0);
    c.insert("shared_expert_intermediate_size".into(), json!(shared));
    let norm = m.f.get_bool(&m.key("expert_weights_norm"))?.unwrap_or(true);
    c.insert("norm_topk_prob".into(), json!(norm));
    c.insert("decoder_sparse_step".into(), json!(1));
    let n = c.get("num_hidden_layers").and_then(Value::as_u64).unwrap_or(0);
    let dense: Vec<u64> =
        (0..n).filter(|i| m.f.tensor_info(&format!("blk.{i}.ffn_gate_inp.weight")).is_none()).collect();
    c.insert("mlp_only_layers".into(), json!(dense));
    Ok(())
}

/// Nemotron-H as `convert_hf_to_gguf.py` stores it (`nemotron_h`, `nemotron_h_moe`): each layer
/// one mixer, attention where its `attention.head_count_kv` is not 0, a relu² MLP (or, where the
/// block has a router, experts: [`nemotron_h_moe`]) where its `feed_forward_length` is not 0,
/// Mamba2 elsewhere, sized by the `ssm.*` keys (`time_step_rank` heads of `inner_size /
/// time_step_rank`, `group_count` groups, `state_size`, `conv_kernel` taps); no rope.
fn nemotron_h(m: &Meta<'_>, c: &mut Map<String, Value>, layers: u64) -> Result<(), ModelError> {
    // The MTP block after the decoder's (a MoE file's) is left unread.
    let (n, _) = m.decoder_blocks(layers)?;
    c.insert("num_hidden_layers".into(), json!(n));
    let (kv, ff) = (m.per_layer("attention.head_count_kv")?, m.per_layer("feed_forward_length")?);
    if kv.len() as u64 != layers || ff.len() as u64 != layers {
        let (a, b) = (kv.len(), ff.len());
        return Err(m.error(format!("{layers} layers, but {a} KV head counts and {b} MLP widths (one a layer)")));
    }
    let routed = |i: usize| m.f.tensor_info(&format!("blk.{i}.ffn_gate_inp.weight")).is_some();
    let kinds: Vec<&str> = (kv.iter().zip(&ff).enumerate())
        .take(n as usize)
        .map(|(i, (&k, &f))| match (k, f) {
            (0, 0) => "mamba",
            (0, _) if routed(i) => "moe",
            (0, _) => "mlp",
            _ => "attention",
        })
        .collect();
    c.insert("layers_block_type".into(), json!(kinds));
    if let Some(first) = kinds.iter().position(|k| *k == "moe") {
        nemotron_h_moe(m, c, first)?;
    }
    let (heads, inner) = (m.u64("ssm.time_step_rank")?, m.u64("ssm.inner_size")?);
    if heads == 0 || !inner.is_multiple_of(heads) {
        return Err(m.error(format!("ssm.inner_size {inner} does not split into {heads} heads")));
    }
    c.insert("mamba_num_heads".into(), json!(heads));
    c.insert("mamba_head_dim".into(), json!(inner / heads));
    c.insert("n_groups".into(), json!(m.u64("ssm.group_count")?));
    c.insert("ssm_state_size".into(), json!(m.u64("ssm.state_size")?));
    c.insert("conv_kernel".into(), json!(m.u64("ssm.conv_kernel")?));
    let conv_bias = m.f.tensors().iter().any(|t| t.name.ends_with("ssm_conv1d.bias"));
    c.insert("use_conv_bias".into(), json!(conv_bias));
    if let Some(eps) = c.remove("rms_norm_eps") {
        c.insert("layer_norm_epsilon".into(), eps);
    }
    Ok(())
}

/// Nemotron-H's MoE layers as `convert_hf_to_gguf.py` keys them (`nemotron_h_moe`): the expert
/// counts and widths, the router's renormalising, scaling and groups (a group count above one
/// only with `expert_group_used_count`, which the converter does not write); the latent size
/// from layer `first`'s `ffn_latent_down`, where the experts sit behind one.
fn nemotron_h_moe(m: &Meta<'_>, c: &mut Map<String, Value>, first: usize) -> Result<(), ModelError> {
    c.insert("n_routed_experts".into(), json!(m.u64("expert_count")?));
    c.insert("num_experts_per_tok".into(), json!(m.u64("expert_used_count")?));
    c.insert("moe_intermediate_size".into(), json!(m.u64("expert_feed_forward_length")?));
    c.insert("moe_shared_expert_intermediate_size".into(), json!(m.u64("expert_shared_feed_forward_length")?));
    c.insert("n_shared_experts".into(), json!(m.opt_u64("expert_shared_count")?.unwrap_or(1)));
    let norm = m.f.get_bool(&m.key("expert_weights_norm"))?.unwrap_or(false);
    c.insert("norm_topk_prob".into(), json!(norm));
    c.insert("routed_scaling_factor".into(), json!(m.opt_f32("expert_weights_scale")?.unwrap_or(1.0)));
    let groups = m.opt_u64("expert_group_count")?.unwrap_or(1);
    let used = match (groups, m.opt_u64("expert_group_used_count")?) {
        (_, Some(u)) => u,
        (0 | 1, None) => 1,
        (g, None) => {
            let msg = format!("expert_group_count {g} without expert_group_used_count: the groups a token may use");
            return Err(m.error(msg));
        }
    };
    c.insert("n_group".into(), json!(groups));
    c.insert("topk_group".into(), json!(used));
    let latent = m.f.tensor_info(&format!("blk.{first}.ffn_latent_down.weight")).map(|t| t.shape.first().copied());
    c.insert("moe_latent_size".into(), latent.flatten().map_or(Value::Null, |n| json!(n)));
    c.insert("mlp_hidden_act".into(), json!("relu2"));
    Ok(())
}

/// MiniMax-M2 as `convert_hf_to_gguf.py` stores it: every layer's experts
/// (`expert_feed_forward_length` wide) routed by sigmoid scores (`expert_gating_func` 2 where
/// given; any other refused), `rope.dimension_count` rotated dims.
fn minimax_m2(m: &Meta<'_>, c: &mut Map<String, Value>, head_dim: u64, theta: Option<f32>) -> Result<(), ModelError> {
    if let Some(f) = m.opt_u64("expert_gating_func")?.filter(|&f| f != 2) {
        return Err(m.error(format!("expert_gating_func {f}: MiniMax-M2 routes by sigmoid scores (2)")));
    }
    c.insert("hidden_act".into(), json!("silu"));
    c.insert("num_local_experts".into(), json!(m.u64("expert_count")?));
    c.insert("num_experts_per_tok".into(), json!(m.u64("expert_used_count")?));
    c.insert("intermediate_size".into(), json!(m.u64("expert_feed_forward_length")?));
    c.insert("rotary_dim".into(), json!(m.opt_u64("rope.dimension_count")?.unwrap_or(head_dim)));
    c.insert("rope_theta".into(), json!(theta.unwrap_or(5_000_000.0)));
    Ok(())
}

/// Gemma 2 as llama.cpp runs it: sliding and full layers alternating from a sliding one, one
/// rope, attention scaled by key_length (the 46-layer 27B by hidden / heads), the soft-caps
/// the metadata gives (llama.cpp's 50 and 30 where it gives none).
fn gemma2(m: &Meta<'_>, c: &mut Map<String, Value>, d: Dims, theta: Option<f32>) -> Result<(), ModelError> {
    c.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
    c.insert("sliding_window".into(), json!(m.u64("attention.sliding_window")?));
    let kinds: Vec<&str> =
        (0..d.layers).map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
    c.insert("layer_types".into(), json!(kinds));
    c.insert("rope_parameters".into(), json!({"rope_type": "default", "rope_theta": theta.unwrap_or(10_000.0)}));
    let scalar = if d.layers == 46 && d.heads > 0 { d.hidden / d.heads } else { d.head_dim };
    c.insert("query_pre_attn_scalar".into(), json!(scalar));
    // Absent: llama.cpp's defaults, which are the family's (50 and 30).
    for key in ["final_logit_softcapping", "attn_logit_softcapping"] {
        if let Some(v) = m.opt_f32(key)? {
            c.insert(key.into(), json!(v));
        }
    }
    Ok(())
}

/// Step 3.5's own layer tensors: the head gate, the router, the stacked experts, the shared
/// expert, the MTP block's head (`shared_head.output`).
fn step35_only(rest: &str) -> Option<&'static str> {
    Some(match rest {
        "self_attn.g_proj.weight" => "attn_gate.weight",
        "moe.gate.weight" => "ffn_gate_inp.weight",
        "moe.gate_proj.weight" => "ffn_gate_exps.weight",
        "moe.up_proj.weight" => "ffn_up_exps.weight",
        "moe.down_proj.weight" => "ffn_down_exps.weight",
        "share_expert.gate_proj.weight" => "ffn_gate_shexp.weight",
        "share_expert.up_proj.weight" => "ffn_up_shexp.weight",
        "share_expert.down_proj.weight" => "ffn_down_shexp.weight",
        "shared_head.output.weight" => "nextn.shared_head_head.weight",
        _ => return None,
    })
}

/// Gemma 4's own layer tensors: per-layer inputs, the layer scalar, the MoE block's norms,
/// router and experts (stacked, gate and up fused, as transformers holds them).
fn gemma4_only(rest: &str) -> Option<&'static str> {
    Some(match rest {
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
        _ => return None,
    })
}

/// LongRoPE (Phi-3.5, Phi-4-mini) as `convert_hf_to_gguf.py` stores it: the short and long
/// factors as the tensors `rope_factors_short` / `rope_factors_long`, the pretrained context
/// and the cos / sin factor it computed in `rope.scaling.*`; `None` without the long factors.
fn longrope(m: &Meta<'_>) -> Result<Option<Map<String, Value>>, ModelError> {
    let Some(long) = m.f.tensor("rope_factors_long.weight")? else { return Ok(None) };
    let short = m.f.tensor("rope_factors_short.weight")?.ok_or_else(|| missing(m.f, "rope_factors_short.weight"))?;
    let mut r = Map::new();
    r.insert("rope_type".into(), json!("longrope"));
    r.insert("long_factor".into(), json!(long.to_f32()));
    r.insert("short_factor".into(), json!(short.to_f32()));
    let original = m.u64("rope.scaling.original_context_length")?;
    r.insert("original_max_position_embeddings".into(), json!(original));
    if let Some(a) = m.opt_f32("rope.scaling.attn_factor")? {
        r.insert("attention_factor".into(), json!(a));
    }
    Ok(Some(r))
}

/// HF rope scaling from `{arch}.rope.scaling.*`, or Llama 3's from the `rope_freqs` tensor.
fn rope_scaling(m: &Meta<'_>, head_dim: u64) -> Result<Option<Map<String, Value>>, ModelError> {
    let orig = m.opt_u64("rope.scaling.original_context_length")?;
    if let Some(view) = m.f.tensor("rope_freqs.weight")? {
        let theta = m.opt_f32("rope.freq_base")?.unwrap_or(10_000.0);
        return llama3_from_factors(m, &view.to_f32(), theta, head_dim, orig.unwrap_or(8192)).map(Some);
    }
    let kind = match m.f.get_str(&m.key("rope.scaling.type"))? {
        None | Some("none") => return Ok(None),
        Some(k) => k,
    };
    let mut s = Map::new();
    s.insert("rope_type".into(), json!(kind));
    let factor = m.opt_f32("rope.scaling.factor")?;
    s.insert("factor".into(), json!(factor.unwrap_or(1.0)));
    if let Some(o) = orig {
        s.insert("original_max_position_embeddings".into(), json!(o));
    }
    for (gguf, hf) in [("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")] {
        if let Some(v) = m.opt_f32(&format!("rope.scaling.{gguf}"))? {
            s.insert(hf.into(), json!(v));
        }
    }
    Ok(Some(s))
}

/// Recovers Llama 3 scaling from the per-frequency divisors `convert_hf_to_gguf.py` stores
/// (assuming its default low / high frequency factors 1 and 4, then checking every divisor).
fn llama3_from_factors(
    m: &Meta<'_>,
    factors: &[f32],
    theta: f32,
    head_dim: u64,
    orig: u64,
) -> Result<Map<String, Value>, ModelError> {
    let factor = factors.iter().copied().fold(f32::NAN, f32::max);
    let dim = head_dim as f64;
    let (low, high, orig_f) = (1.0f64, 4.0f64, orig as f64);
    let fits = factors.len() as u64 * 2 == head_dim
        && factor.is_finite()
        && factors.iter().enumerate().all(|(i, &got)| {
            let freq = 1.0 / f64::from(theta).powf((2 * i) as f64 / dim);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let want = if wavelen < orig_f / high {
                1.0
            } else if wavelen > orig_f / low {
                f64::from(factor)
            } else {
                let smooth = (orig_f / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / f64::from(factor) + smooth)
            };
            (f64::from(got) - want).abs() <= 1e-4 * want.abs().max(1.0)
        });
    if !fits {
        return Err(m.error("rope_freqs.weight does not match Llama 3 scaling (low 1, high 4); not supported".into()));
    }
    let mut s = Map::new();
    s.insert("rope_type".into(), json!("llama3"));
    s.insert("factor".into(), json!(factor));
    s.insert("low_freq_factor".into(), json!(low));
    s.insert("high_freq_factor".into(), json!(high));
    s.insert("original_max_position_embeddings".into(), json!(orig));
    Ok(s)
}

/// How a GGUF tensor becomes the HF one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fix {
    /// Served as stored.
    Plain,
    /// Gemma norm stored as `1 + w`: served as `w` in f32.
    MinusOne,
    /// Llama q/k with rows permuted per head for interleaved rope (`heads` heads).
    Unpermute { heads: usize },
    /// Expert `e` of a stacked `[experts, rows, cols]` tensor.
    Expert(usize),
    /// A `[rows, cols]` tensor served as `[rows, 1, cols]` (the same bytes).
    MiddleOne,
    /// `A = -exp(A_log)` served as `A_log = ln(-A)` in f32, one dim (every value finite and
    /// below 0).
    LogOfMinus,
    /// Served with its dims flattened into one (the same bytes).
    Flatten,
    /// A vector served as a one-row matrix `[1, n]` (the same bytes).
    OneRow,
    /// DeepSeek's `kv_b_proj` `[heads * (nope + v), lora]` in f32 from the converter's halves:
    /// this `attn_k_b` (`[heads, lora, nope]`, each head's key rows transposed) and the layer's
    /// `attn_v_b` (`[heads, v, lora]`).
    KvB,
}

/// A GGUF file's tensors under Hugging Face names.
pub struct GgufSource {
    file: GgufFile,
    family: Family,
    num_heads: usize,
    num_kv_heads: usize,
    /// The block holding Qwen3.5's / Qwen3-Next's MTP layer (`mtp.*`), after the decoder's.
    mtp_block: Option<usize>,
}

impl GgufSource {
    /// Wraps `file`, refusing architectures TensorFold does not map.
    pub fn new(file: GgufFile) -> Result<GgufSource, ModelError> {
        let family = family(&file)?;
        let m = Meta { f: &file, arch: file.architecture()? };
        let to_usize = |n: u64| usize::try_from(n).map_err(|_| m.error(format!("head count {n} is too large")));
        let num_heads = to_usize(m.per_layer_max("attention.head_count")?)?;
        let num_kv_heads = to_usize(m.kv_heads()?.map_or(num_heads as u64, |k| k.count()))?;
        let nextn = m.opt_u64("nextn_predict_layers")?.unwrap_or(0);
        let mtp_block = match family {
            Family::Qwen35 | Family::Qwen3Next | Family::Qwen35Moe if nextn > 0 => {
                Some(to_usize(m.u64("block_count")?.saturating_sub(nextn))?)
            }
            _ => None,
        };
        Ok(GgufSource { file, family, num_heads, num_kv_heads, mtp_block })
    }

    /// Opens and wraps the GGUF file at `path`.
    pub fn open(path: &Path) -> Result<GgufSource, ModelError> {
        GgufSource::new(GgufFile::open(path)?)
    }

    /// The underlying file.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The mapped family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// The GGUF tensor holding HF tensor `hf_name`, and how to convert it.
    fn locate(&self, hf_name: &str) -> Option<(String, Fix)> {
        // Norms the converter stores as `1 + w` (Qwen3.5's gated norm of the delta rule kept as is).
        let one_plus = matches!(
            self.family,
            Family::Gemma2 | Family::Gemma3 | Family::Qwen35 | Family::Qwen3Next | Family::Qwen35Moe | Family::Step35
        );
        if self.family == Family::NemotronH {
            return self.locate_nemotron_h(hf_name);
        }
        let global = match hf_name {
            // LFM2's final norm: llama.cpp has named it either way.
            "model.embedding_norm.weight" if self.file.tensor_info("token_embd_norm.weight").is_some() => {
                Some("token_embd_norm.weight")
            }
            "model.embedding_norm.weight" => Some("output_norm.weight"),
            "model.embed_tokens.weight" => Some("token_embd.weight"),
            "model.embed_tokens_per_layer.weight" => Some("per_layer_token_embd.weight"),
            "model.per_layer_model_projection.weight" => Some("per_layer_model_proj.weight"),
            "model.per_layer_projection_norm.weight" => Some("per_layer_proj_norm.weight"),
            "model.norm.weight" => Some("output_norm.weight"),
            "lm_head.weight" => Some("output.weight"),
            _ => None,
        };
        let (name, mut fix) = match (global, hf_name.strip_prefix("mtp.")) {
            (Some(g), _) => (g.to_string(), Fix::Plain),
            (None, Some(mtp)) => self.locate_qwen_mtp(mtp)?,
            (None, None) => self.locate_layer(hf_name.strip_prefix("model.layers.")?)?,
        };
        if one_plus && name.ends_with("norm.weight") && !name.ends_with("ssm_norm.weight") {
            fix = Fix::MinusOne;
        }
        Some((name, fix))
    }

    fn locate_layer(&self, rest: &str) -> Option<(String, Fix)> {
        let (layer, rest) = rest.split_once('.')?;
        let layer: usize = layer.parse().ok()?;
        if self.family == Family::GptOss
            && let Some(gguf) = gpt_oss_only(rest)
        {
            return Some((format!("blk.{layer}.{gguf}"), Fix::Plain));
        }
        if self.family == Family::MiniMaxM2
            && let Some(found) = self.w_experts(layer, rest, "block_sparse_moe.", "e_score_correction_bias")
        {
            return Some(found);
        }
        if self.family == Family::Glm4Moe {
            if rest == "mlp.gate.e_score_correction_bias" {
                return Some((self.probs_bias(layer), Fix::Plain));
            }
            let gguf = match rest {
                "post_attention_layernorm.weight" => Some("post_attention_norm.weight"),
                "mlp.shared_experts.gate_proj.weight" => Some("ffn_gate_shexp.weight"),
                "mlp.shared_experts.up_proj.weight" => Some("ffn_up_shexp.weight"),
                "mlp.shared_experts.down_proj.weight" => Some("ffn_down_shexp.weight"),
                _ => nextn_name(rest),
            };
            if let Some(g) = gguf {
                return Some((format!("blk.{layer}.{g}"), Fix::Plain));
            }
        }
        if matches!(self.family, Family::Deepseek2 | Family::GlmDsa)
            && let Some(found) = self.deepseek2_layer(layer, rest)
        {
            return Some(found);
        }
        if self.family == Family::Lfm2Moe
            && let Some(found) = self.w_experts(layer, rest, "feed_forward.", "expert_bias")
        {
            return Some(found);
        }
        if matches!(self.family, Family::Qwen35 | Family::Qwen3Next | Family::Qwen35Moe)
            && let Some((g, fix)) = qwen35_only(rest)
        {
            return Some((format!("blk.{layer}.{g}"), fix));
        }
        if matches!(self.family, Family::Qwen3Next | Family::Qwen35Moe) {
            let (g, fix) = match rest {
                "linear_attn.in_proj_qkvz.weight" => ("ssm_in.weight", Fix::Plain),
                "linear_attn.in_proj_ba.weight" => ("ssm_ba.weight", Fix::Plain),
                "mlp.shared_expert.gate_proj.weight" => ("ffn_gate_shexp.weight", Fix::Plain),
                "mlp.shared_expert.up_proj.weight" => ("ffn_up_shexp.weight", Fix::Plain),
                "mlp.shared_expert.down_proj.weight" => ("ffn_down_shexp.weight", Fix::Plain),
                "mlp.shared_expert_gate.weight" => ("ffn_gate_inp_shexp.weight", Fix::OneRow),
                _ => ("", Fix::Plain),
            };
            if !g.is_empty() {
                return Some((format!("blk.{layer}.{g}"), fix));
            }
        }
        if self.family == Family::Step35 {
            if rest == "moe.router_bias" {
                return Some((self.probs_bias(layer), Fix::Plain));
            }
            if let Some(g) = step35_only(rest).or_else(|| nextn_name(rest)) {
                return Some((format!("blk.{layer}.{g}"), Fix::Plain));
            }
        }
        if self.family == Family::Gemma4
            && let Some(g) = gemma4_only(rest)
        {
            return Some((format!("blk.{layer}.{g}"), Fix::Plain));
        }
        if matches!(self.family, Family::Lfm2 | Family::Lfm2Moe) {
            let (gguf, fix) = lfm2_only(rest)?;
            return Some((format!("blk.{layer}.{gguf}"), fix));
        }
        // q, k and v biases, stored as they are (Llama's would need its rows' permutation).
        if let Some(stem) = rest.strip_suffix(".bias").filter(|_| self.family != Family::Llama) {
            let gguf = match stem {
                "self_attn.q_proj" => "attn_q",
                "self_attn.k_proj" => "attn_k",
                "self_attn.v_proj" => "attn_v",
                _ => return None,
            };
            return Some((format!("blk.{layer}.{gguf}.bias"), Fix::Plain));
        }
        let stem = rest.strip_suffix(".weight")?;
        let gemma = matches!(self.family, Family::Gemma2 | Family::Gemma3 | Family::Gemma4);
        let llama = self.family == Family::Llama;
        let unpermute = |heads| if llama { Fix::Unpermute { heads } } else { Fix::Plain };
        let (gguf, fix) = match stem {
            "input_layernorm" => ("attn_norm", Fix::Plain),
            "post_attention_layernorm" if gemma => ("post_attention_norm", Fix::Plain),
            "post_attention_layernorm" => ("ffn_norm", Fix::Plain),
            "pre_feedforward_layernorm" if gemma => ("ffn_norm", Fix::Plain),
            "post_feedforward_layernorm" if gemma => ("post_ffw_norm", Fix::Plain),
            "self_attn.qkv_proj" => ("attn_qkv", Fix::Plain),
            "mlp.gate_up_proj" => ("ffn_up", Fix::Plain),
            "self_attn.q_proj" => ("attn_q", unpermute(self.num_heads)),
            "self_attn.k_proj" => ("attn_k", unpermute(self.num_kv_heads)),
            "self_attn.v_proj" => ("attn_v", Fix::Plain),
            "self_attn.o_proj" => ("attn_output", Fix::Plain),
            "self_attn.q_norm" => ("attn_q_norm", Fix::Plain),
            "self_attn.k_norm" => ("attn_k_norm", Fix::Plain),
            "mlp.gate_proj" => ("ffn_gate", Fix::Plain),
            "mlp.up_proj" => ("ffn_up", Fix::Plain),
            "mlp.down_proj" => ("ffn_down", Fix::Plain),
            "mlp.gate" => ("ffn_gate_inp", Fix::Plain),
            _ => {
                let (expert, proj) = stem.strip_prefix("mlp.experts.")?.split_once('.')?;
                let gguf = match proj {
                    "gate_proj" => "ffn_gate_exps",
                    "up_proj" => "ffn_up_exps",
                    "down_proj" => "ffn_down_exps",
                    _ => return None,
                };
                return Some((format!("blk.{layer}.{gguf}.weight"), Fix::Expert(expert.parse().ok()?)));
            }
        };
        Some((format!("blk.{layer}.{gguf}.weight"), fix))
    }

    /// Nemotron-H's tensors (`backbone.*`; each layer's mixer under `mixer.`, its Mamba2
    /// parameters stored as llama.cpp's Mamba2 keeps them: `A` for `A_log`, `D` and the grouped
    /// norm 2-D, the conv without its middle dim).
    fn locate_nemotron_h(&self, hf_name: &str) -> Option<(String, Fix)> {
        let global = match hf_name {
            "backbone.embeddings.weight" => Some("token_embd.weight"),
            "backbone.norm_f.weight" => Some("output_norm.weight"),
            "lm_head.weight" => Some("output.weight"),
            _ => None,
        };
        if let Some(g) = global {
            return Some((g.to_string(), Fix::Plain));
        }
        let (layer, rest) = hf_name.strip_prefix("backbone.layers.")?.split_once('.')?;
        let layer: usize = layer.parse().ok()?;
        let (g, fix) = match rest {
            "norm.weight" => ("attn_norm.weight", Fix::Plain),
            "mixer.in_proj.weight" => ("ssm_in.weight", Fix::Plain),
            "mixer.conv1d.weight" => ("ssm_conv1d.weight", Fix::MiddleOne),
            "mixer.conv1d.bias" => ("ssm_conv1d.bias", Fix::Plain),
            "mixer.dt_bias" => ("ssm_dt.bias", Fix::Plain),
            "mixer.A_log" => ("ssm_a", Fix::LogOfMinus),
            "mixer.D" => ("ssm_d", Fix::Flatten),
            "mixer.norm.weight" => ("ssm_norm.weight", Fix::Flatten),
            "mixer.out_proj.weight" => ("ssm_out.weight", Fix::Plain),
            "mixer.q_proj.weight" => ("attn_q.weight", Fix::Plain),
            "mixer.k_proj.weight" => ("attn_k.weight", Fix::Plain),
            "mixer.v_proj.weight" => ("attn_v.weight", Fix::Plain),
            "mixer.o_proj.weight" => ("attn_output.weight", Fix::Plain),
            "mixer.up_proj.weight" => ("ffn_up.weight", Fix::Plain),
            "mixer.down_proj.weight" => ("ffn_down.weight", Fix::Plain),
            "mixer.gate.weight" => ("ffn_gate_inp.weight", Fix::Plain),
            "mixer.gate.e_score_correction_bias" => return Some((self.probs_bias(layer), Fix::Plain)),
            "mixer.fc1_latent_proj.weight" => ("ffn_latent_down.weight", Fix::Plain),
            "mixer.fc2_latent_proj.weight" => ("ffn_latent_up.weight", Fix::Plain),
            "mixer.shared_experts.up_proj.weight" => ("ffn_up_shexp.weight", Fix::Plain),
            "mixer.shared_experts.down_proj.weight" => ("ffn_down_shexp.weight", Fix::Plain),
            _ => {
                let (e, proj) = rest.strip_prefix("mixer.experts.")?.strip_suffix(".weight")?.split_once('.')?;
                let g = match proj {
                    "up_proj" => "ffn_up_exps.weight",
                    "down_proj" => "ffn_down_exps.weight",
                    _ => return None,
                };
                (g, Fix::Expert(e.parse().ok()?))
            }
        };
        Some((format!("blk.{layer}.{g}"), fix))
    }

    /// Layer `layer`'s router (`{module}gate.weight`), choice bias (`{module}{bias}`) and experts
    /// named `w1` / `w3` / `w2` (`{module}experts.{e}.w1.weight`: MiniMax-M2, LFM2-MoE), each
    /// expert a view of its stacked tensor; `None` for any other tensor.
    fn w_experts(&self, layer: usize, rest: &str, module: &str, bias: &str) -> Option<(String, Fix)> {
        let rest = rest.strip_prefix(module)?;
        if rest == bias {
            return Some((self.probs_bias(layer), Fix::Plain));
        }
        if rest == "gate.weight" {
            return Some((format!("blk.{layer}.ffn_gate_inp.weight"), Fix::Plain));
        }
        let (e, w) = rest.strip_prefix("experts.")?.strip_suffix(".weight")?.split_once('.')?;
        let g = match w {
            "w1" => "ffn_gate_exps",
            "w3" => "ffn_up_exps",
            "w2" => "ffn_down_exps",
            _ => return None,
        };
        Some((format!("blk.{layer}.{g}.weight"), Fix::Expert(e.parse().ok()?)))
    }

    /// Qwen3.5's / Qwen3-Next's MTP head (`mtp.*`) in the block after the decoder's: its own
    /// tensors under `nextn.`, its layer's (`mtp.layers.0.`) as a decoder layer's.
    fn locate_qwen_mtp(&self, rest: &str) -> Option<(String, Fix)> {
        let block = self.mtp_block?;
        let own = match rest {
            "fc.weight" => "nextn.eh_proj.weight",
            "pre_fc_norm_embedding.weight" => "nextn.enorm.weight",
            "pre_fc_norm_hidden.weight" => "nextn.hnorm.weight",
            "norm.weight" => "nextn.shared_head_norm.weight",
            _ => return self.locate_layer(&format!("{block}.{}", rest.strip_prefix("layers.0.")?)),
        };
        Some((format!("blk.{block}.{own}"), Fix::Plain))
    }

    /// DeepSeek V3's latent attention tensors and its router's choice bias and shared experts
    /// (`kv_b_proj` whole where an older file keeps `attn_kv_b`, else from its two halves).
    fn deepseek2_layer(&self, layer: usize, rest: &str) -> Option<(String, Fix)> {
        let (g, fix) = match rest {
            "mlp.gate.e_score_correction_bias" => return Some((self.probs_bias(layer), Fix::Plain)),
            "self_attn.q_a_proj.weight" => ("attn_q_a.weight", Fix::Plain),
            "self_attn.q_a_layernorm.weight" => ("attn_q_a_norm.weight", Fix::Plain),
            "self_attn.q_b_proj.weight" => ("attn_q_b.weight", Fix::Plain),
            "self_attn.kv_a_proj_with_mqa.weight" => ("attn_kv_a_mqa.weight", Fix::Plain),
            "self_attn.kv_a_layernorm.weight" => ("attn_kv_a_norm.weight", Fix::Plain),
            "self_attn.kv_b_proj.weight"
                if self.file.tensor_info(&format!("blk.{layer}.attn_kv_b.weight")).is_some() =>
            {
                ("attn_kv_b.weight", Fix::Plain)
            }
            "self_attn.kv_b_proj.weight" => ("attn_k_b.weight", Fix::KvB),
            "mlp.shared_experts.gate_proj.weight" => ("ffn_gate_shexp.weight", Fix::Plain),
            "mlp.shared_experts.up_proj.weight" => ("ffn_up_shexp.weight", Fix::Plain),
            "mlp.shared_experts.down_proj.weight" => ("ffn_down_shexp.weight", Fix::Plain),
            // GLM-5's lightning indexer.
            "self_attn.indexer.wq_b.weight" => ("indexer.attn_q_b.weight", Fix::Plain),
            "self_attn.indexer.wk.weight" => ("indexer.attn_k.weight", Fix::Plain),
            "self_attn.indexer.k_norm.weight" => ("indexer.k_norm.weight", Fix::Plain),
            "self_attn.indexer.k_norm.bias" => ("indexer.k_norm.bias", Fix::Plain),
            "self_attn.indexer.weights_proj.weight" => ("indexer.proj.weight", Fix::Plain),
            _ => return Some((format!("blk.{layer}.{}", nextn_name(rest)?), Fix::Plain)),
        };
        Some((format!("blk.{layer}.{g}"), fix))
    }

    /// Layer `layer`'s router choice bias: `exp_probs_b.bias`, or as some converters name it,
    /// `exp_probs_b`.
    fn probs_bias(&self, layer: usize) -> String {
        let plain = format!("blk.{layer}.exp_probs_b");
        match self.file.tensor_info(&plain) {
            Some(_) => plain,
            None => format!("{plain}.bias"),
        }
    }

    /// Whether HF tensor `hf_name` can be served.
    pub fn contains(&self, hf_name: &str) -> bool {
        let Some((name, fix)) = self.locate(hf_name) else { return false };
        match (self.file.tensor_info(&name), fix) {
            (Some(t), Fix::Expert(e)) => t.shape.len() == 3 && t.shape.first().is_some_and(|&n| e < n),
            (Some(_), Fix::KvB) => self.file.tensor_info(&v_b_of(&name)).is_some(),
            (Some(_), _) => true,
            (None, _) => false,
        }
    }

    /// HF tensor `hf_name` with llama.cpp's conversion undone; `None` when the file lacks it.
    pub fn get(&self, hf_name: &str) -> Result<Option<TensorView>, ModelError> {
        let Some((name, fix)) = self.locate(hf_name) else { return Ok(None) };
        if matches!(fix, Fix::Expert(_)) && !self.contains(hf_name) {
            return Ok(None);
        }
        let Some(view) = self.file.tensor(&name)? else { return Ok(None) };
        let bad = |msg: String| ModelError::Format(FormatError::tensor(self.file.path(), &name, msg));
        let view = match fix {
            Fix::Plain => view,
            Fix::MinusOne => {
                let w: Vec<u8> = view.to_f32().iter().flat_map(|v| (v - 1.0).to_le_bytes()).collect();
                TensorView { dtype: DType::F32, data: TensorBytes::from_vec(&w), ..view }
            }
            Fix::Unpermute { heads } => unpermute_rows(view, heads).map_err(bad)?,
            Fix::Expert(e) => expert(view, e).map_err(bad)?,
            Fix::LogOfMinus => {
                let a = view.to_f32();
                if let Some(v) = a.iter().find(|v| !(v.is_finite() && **v < 0.0)) {
                    return Err(bad(format!("A = -exp(A_log) must be finite and below 0, found {v}")));
                }
                let w: Vec<u8> = a.iter().flat_map(|v| (-v).ln().to_le_bytes()).collect();
                TensorView { dtype: DType::F32, shape: vec![a.len()], data: TensorBytes::from_vec(&w), ..view }
            }
            Fix::Flatten => TensorView { shape: vec![view.shape.iter().product()], ..view },
            Fix::OneRow => TensorView { shape: vec![1, view.shape.iter().product()], ..view },
            Fix::KvB => {
                let v_name = v_b_of(&name);
                let v = self.file.tensor(&v_name)?.ok_or_else(|| missing(&self.file, &v_name))?;
                kv_b(&view, &v).map_err(bad)?
            }
            Fix::MiddleOne => match view.shape[..] {
                [rows, cols] => TensorView { shape: vec![rows, 1, cols], ..view },
                _ => return Err(bad(format!("expected 2 dims, found {:?}", view.shape))),
            },
        };
        if view.dtype == DType::Mxfp4 {
            check_mxfp4_scales(view.data.as_bytes()).map_err(bad)?;
        }
        Ok(Some(TensorView { name: hf_name.to_string(), ..view }))
    }
}

/// The GGUF name (after `blk.{layer}.`) of an MTP block's own tensor `rest` in the NextN layout
/// (GLM-4.5's, GLM-5's: `eh_proj`, its norms, its own embedding and head).
fn nextn_name(rest: &str) -> Option<&'static str> {
    Some(match rest {
        "eh_proj.weight" => "nextn.eh_proj.weight",
        "enorm.weight" => "nextn.enorm.weight",
        "hnorm.weight" => "nextn.hnorm.weight",
        "embed_tokens.weight" => "nextn.embed_tokens.weight",
        "shared_head.norm.weight" => "nextn.shared_head_norm.weight",
        "shared_head.head.weight" => "nextn.shared_head_head.weight",
        _ => return None,
    })
}

/// gpt-oss's tensors that the other families lack or name otherwise: the sinks, the norm before
/// the experts, o's and the router's biases, and each projection's biases of every expert
/// (`[experts, rows]`; their weights are served per expert as the other MoE families' are).
fn gpt_oss_only(rest: &str) -> Option<&'static str> {
    Some(match rest {
        "self_attn.sinks" => "attn_sinks.weight",
        "post_attention_layernorm.weight" => "post_attention_norm.weight",
        "self_attn.o_proj.bias" => "attn_output.bias",
        "mlp.router.weight" => "ffn_gate_inp.weight",
        "mlp.router.bias" => "ffn_gate_inp.bias",
        "mlp.experts.gate_proj.bias" => "ffn_gate_exps.bias",
        "mlp.experts.up_proj.bias" => "ffn_up_exps.bias",
        "mlp.experts.down_proj.bias" => "ffn_down_exps.bias",
        _ => return None,
    })
}

/// Qwen3.5's tensors the other families lack or name otherwise: its Gated DeltaNet layers'
/// (`A_log` stored as `A = -exp(A_log)`, the conv without its middle dim) and the norm before
/// the MLP.
fn qwen35_only(rest: &str) -> Option<(&'static str, Fix)> {
    Some(match rest {
        "post_attention_layernorm.weight" => ("post_attention_norm.weight", Fix::Plain),
        "linear_attn.in_proj_qkv.weight" => ("attn_qkv.weight", Fix::Plain),
        "linear_attn.in_proj_z.weight" => ("attn_gate.weight", Fix::Plain),
        "linear_attn.in_proj_b.weight" => ("ssm_beta.weight", Fix::Plain),
        "linear_attn.in_proj_a.weight" => ("ssm_alpha.weight", Fix::Plain),
        "linear_attn.A_log" => ("ssm_a", Fix::LogOfMinus),
        "linear_attn.dt_bias" => ("ssm_dt.bias", Fix::Plain),
        "linear_attn.conv1d.weight" => ("ssm_conv1d.weight", Fix::MiddleOne),
        "linear_attn.norm.weight" => ("ssm_norm.weight", Fix::Plain),
        "linear_attn.out_proj.weight" => ("ssm_out.weight", Fix::Plain),
        _ => return None,
    })
}

/// LFM2's layer tensors, every one named its own way (its conv weight stored without the
/// middle dim of HF's `[channels, 1, taps]`).
fn lfm2_only(rest: &str) -> Option<(&'static str, Fix)> {
    Some(match rest {
        "operator_norm.weight" => ("attn_norm.weight", Fix::Plain),
        "ffn_norm.weight" => ("ffn_norm.weight", Fix::Plain),
        "self_attn.q_proj.weight" => ("attn_q.weight", Fix::Plain),
        "self_attn.k_proj.weight" => ("attn_k.weight", Fix::Plain),
        "self_attn.v_proj.weight" => ("attn_v.weight", Fix::Plain),
        "self_attn.out_proj.weight" => ("attn_output.weight", Fix::Plain),
        "self_attn.q_layernorm.weight" => ("attn_q_norm.weight", Fix::Plain),
        "self_attn.k_layernorm.weight" => ("attn_k_norm.weight", Fix::Plain),
        "conv.conv.weight" => ("shortconv.conv.weight", Fix::MiddleOne),
        "conv.in_proj.weight" => ("shortconv.in_proj.weight", Fix::Plain),
        "conv.out_proj.weight" => ("shortconv.out_proj.weight", Fix::Plain),
        "feed_forward.w1.weight" => ("ffn_gate.weight", Fix::Plain),
        "feed_forward.w3.weight" => ("ffn_up.weight", Fix::Plain),
        "feed_forward.w2.weight" => ("ffn_down.weight", Fix::Plain),
        _ => return None,
    })
}

/// Undoes `convert_hf_to_gguf.py`'s `permute`: within each head, GGUF row `2j + t` is HF row
/// `t * head_dim / 2 + j`. Whole rows move, so quantized rows are handled unchanged.
fn unpermute_rows(view: TensorView, heads: usize) -> Result<TensorView, String> {
    let [rows, _cols] = view.shape[..] else { return Err(format!("expected 2 dims, found {:?}", view.shape)) };
    if heads == 0 || rows == 0 || !rows.is_multiple_of(2 * heads) {
        return Err(format!("{rows} rows do not split into {heads} heads of even width"));
    }
    let bytes = view.data.as_bytes();
    if !bytes.len().is_multiple_of(rows) {
        return Err(format!("{} bytes do not split into {rows} rows", bytes.len()));
    }
    let (row_bytes, head_dim) = (bytes.len() / rows, rows / heads);
    let half = head_dim / 2;
    let mut out = Vec::with_capacity(bytes.len());
    for hf_row in 0..rows {
        let (h, r) = (hf_row / head_dim, hf_row % head_dim);
        let (t, j) = (r / half, r % half);
        let src = (h * head_dim + 2 * j + t) * row_bytes;
        out.extend_from_slice(bytes.get(src..src + row_bytes).ok_or("row outside the tensor")?);
    }
    Ok(TensorView { data: TensorBytes::from_vec(&out), ..view })
}

/// The `attn_v_b` beside `attn_k_b` tensor `k_b`.
fn v_b_of(k_b: &str) -> String {
    k_b.replace("attn_k_b", "attn_v_b")
}

/// `kv_b_proj` `[heads * (nope + v), lora]` in f32 from `k` (`[heads, lora, nope]`) and `v`
/// (`[heads, v, lora]`): per head its `nope` key rows (columns of `k`'s head), then its value rows.
fn kv_b(k: &TensorView, v: &TensorView) -> Result<TensorView, String> {
    let (&[heads, lora, nope], &[v_heads, dv, v_lora]) = (&k.shape[..], &v.shape[..]) else {
        return Err(format!("attn_k_b {:?} and attn_v_b {:?} are not 3-D", k.shape, v.shape));
    };
    if (v_heads, v_lora) != (heads, lora) {
        return Err(format!("attn_k_b {:?} and attn_v_b {:?} disagree on heads or rank", k.shape, v.shape));
    }
    let count = |a: usize, b: usize, c: usize| a.checked_mul(b).and_then(|n| n.checked_mul(c));
    let (kf, vf) = (k.to_f32(), v.to_f32());
    if count(heads, lora, nope) != Some(kf.len()) || count(heads, dv, lora) != Some(vf.len()) {
        return Err(format!("attn_k_b {:?} or attn_v_b {:?} holds other than its shape's values", k.shape, v.shape));
    }
    let mut out = Vec::with_capacity(4 * (kf.len() + vf.len()));
    for h in 0..heads {
        let kh = &kf[h * lora * nope..][..lora * nope];
        for i in 0..nope {
            out.extend((0..lora).flat_map(|o| kh[o * nope + i].to_le_bytes()));
        }
        out.extend(vf[h * dv * lora..][..dv * lora].iter().flat_map(|x| x.to_le_bytes()));
    }
    Ok(TensorView {
        dtype: DType::F32,
        shape: vec![heads * (nope + dv), lora],
        data: TensorBytes::from_vec(&out),
        ..k.clone()
    })
}

/// Every MXFP4 block's scale byte finite (a block is its scale byte, then 16 bytes of codes).
fn check_mxfp4_scales(bytes: &[u8]) -> Result<(), String> {
    let block = tf_formats::mxfp4::BLOCK_BYTES;
    bytes.chunks(block).enumerate().try_for_each(|(k, b)| {
        let s = b.first().copied().unwrap_or(0);
        crate::mxfp4::check_scale(s).map_err(|why| format!("MXFP4 block {k}: {why}"))
    })
}

/// Expert `e` of a stacked `[experts, rows, cols]` tensor, zero copy when mapped.
fn expert(view: TensorView, e: usize) -> Result<TensorView, String> {
    let [n, rows, cols] = view.shape[..] else { return Err(format!("expected 3 dims, found {:?}", view.shape)) };
    let total = view.data.as_bytes().len();
    if n == 0 || e >= n || !total.is_multiple_of(n) {
        return Err(format!("expert {e} of {n} experts in {total} bytes"));
    }
    let per = total / n;
    let data = match &view.data {
        TensorBytes::Mapped(map, range) => {
            TensorBytes::Mapped(map.clone(), range.start + e * per..range.start + (e + 1) * per)
        }
        owned => {
            TensorBytes::from_vec(owned.as_bytes().get(e * per..(e + 1) * per).ok_or("expert outside the tensor")?)
        }
    };
    Ok(TensorView { shape: vec![rows, cols], data, ..view })
}

#[cfg(test)]
mod tests;
