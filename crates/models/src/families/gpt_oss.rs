//! gpt-oss (`GptOssForCausalLM`): sliding (`sliding_window`, 128) and full attention layers
//! alternating, q, k, v and o with biases, per-head sink logits in every softmax
//! (`self_attn.sinks`), YaRN rope; every layer a mixture of experts routed by a linear with a
//! bias (softmax over the top-k logits), each expert a clamped SwiGLU (`swiglu_limit` 7, alpha
//! 1.702, `(up + 1)`) stored fused and input-first (`experts.gate_up_proj` `[experts, hidden, 2
//! inter]`, gate and up interleaved; `experts.down_proj`) with biases, or as the release stores
//! them in MXFP4 (`quantization_config` `mxfp4`; held packed, mxfp4.rs).
//! On CUDA the sinks' attention runs the trait's host default and the experts the host-driven
//! path with their biases (docs/cuda.md); tensor parallelism refuses it.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, LayerKind, ModelSpec, MoeSpec};
use tf_backend::{Activation, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT};

/// The spec of a gpt-oss checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read_with_attention_bias(c)?;
    for (field, want) in [("swiglu_alpha", SWIGLU_OAI_ALPHA), ("swiglu_limit", SWIGLU_OAI_LIMIT)] {
        if let Some(v) = c.opt_f32(field)?.filter(|v| *v != want) {
            return Err(c.error(format!("{field} {v}: only {want} is supported")));
        }
    }
    let rope = common.rope(c, "full_attention", 150_000.0)?;
    let n = common.num_layers;
    let kinds = match c.get("layer_types") {
        Some(_) => common.layer_kinds(c)?,
        None => (0..n).map(|i| if i % 2 == 0 { LayerKind::Sliding } else { LayerKind::Full }).collect(),
    };
    if kinds.iter().any(|k| !matches!(k, LayerKind::Full | LayerKind::Sliding)) {
        return Err(c.error("gpt-oss layers are sliding or full attention only"));
    }
    let num_experts = c.opt_dim("num_local_experts")?.unwrap_or(128);
    let top_k = c.opt_dim("num_experts_per_tok")?.or(c.opt_dim("experts_per_token")?).unwrap_or(4);
    let inter = common.intermediate_size;
    let mut spec = common.spec_with_kinds(c, arch, rope, Activation::SwigluOai, kinds)?;
    spec.sliding_window = Some(c.opt_dim("sliding_window")?.unwrap_or(128));
    let bias = c.flag("attention_bias", true)?;
    spec.attention_bias = bias;
    spec.attn_out_bias = bias;
    spec.attn_sinks = true;
    let mut moe = MoeSpec::softmax(num_experts, top_k, inter, true, vec![true; n]);
    moe.router = "router";
    moe.gpt_oss = true;
    if let Some(why) = moe.params(spec.act).check(num_experts, Some(num_experts)) {
        return Err(c.error(format!("router: {why}")));
    }
    spec.moe = Some(moe);
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(extra: &str) -> RawConfig {
        let text = format!(
            r#"{{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 32, "num_hidden_layers": 2, "vocab_size": 512, "num_local_experts": 4,
            "num_experts_per_tok": 2, "sliding_window": 8, "attention_bias": true,
            "rope_parameters": {{"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": false, "original_max_position_embeddings": 64, "rope_theta": 150000.0}}{extra}}}"#
        );
        RawConfig::parse(Path::new("config.json"), &text).expect("config")
    }

    #[test]
    fn sinks_biases_alternating_layers_and_the_experts() {
        let s = spec(&config(""), "GptOssForCausalLM").expect("spec");
        assert!(s.attn_sinks && s.attention_bias && s.attn_out_bias);
        assert_eq!((s.layer_kinds, s.sliding_window), (vec![LayerKind::Sliding, LayerKind::Full], Some(8)));
        let m = s.moe.expect("moe");
        assert!(m.gpt_oss && m.norm_topk_prob && m.sparse_layers.iter().all(|&x| x));
        assert_eq!((m.num_experts, m.top_k, m.moe_intermediate_size, m.router), (4, 2, 32, "router"));
        assert_eq!(s.act, Activation::SwigluOai);
        let e = spec(&config(r#", "swiglu_limit": 5.0"#), "g").err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("swiglu_limit 5")));
    }
}
