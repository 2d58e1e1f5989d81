//! DeepSeek V3 (`DeepseekV3ForCausalLM`): multi-head latent attention (`blocks/mla.rs`: the
//! query through `q_lora_rank` or one `q_proj`, keys and values from a `kv_lora_rank` latent
//! and one shared rope key, `rope_interleave`, YaRN with `mscale` / `mscale_all_dim` scaling the
//! softmax), and GLM-4.5's experts (glm4_moe.rs: sigmoid, group-limited, biased choice, scaled,
//! shared experts, `first_k_dense_replace` dense layers). Its layers cache the latent row per
//! token, not the expanded K/V. The `num_nextn_predict_layers` MTP layers are read only for
//! drafting (`crate::mtp`).

use crate::config::{RawConfig, yarn_mscale};
use crate::error::ModelError;
use crate::families::glm4_moe::experts_and_mtp;
use crate::spec::{Common, LayerKind, MlaSpec, ModelSpec, activation};
use serde_json::Value;
use tf_backend::{Activation, Rope};

/// The spec of a DeepSeek V3 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    let mla = MlaSpec {
        q_lora_rank: c.opt_dim("q_lora_rank")?,
        kv_lora_rank: c.dim("kv_lora_rank")?,
        qk_nope_head_dim: c.dim("qk_nope_head_dim")?,
        qk_rope_head_dim: c.dim("qk_rope_head_dim")?,
        v_head_dim: c.dim("v_head_dim")?,
        rope_interleave: c.flag("rope_interleave", true)?,
        indexer: None,
    };
    let kinds = common.layer_kinds(c)?;
    if kinds.iter().any(|k| *k != LayerKind::Full) {
        return Err(c.error("deepseek_v3 layers are full attention only"));
    }
    let mut spec = latent_spec(c, arch, common, mla, kinds)?;
    experts_and_mtp(c, &mut spec)?;
    Ok(spec)
}

/// The spec of a latent-attention model of `kinds` (all full): `mla`'s rope (YaRN's factor on
/// cos / sin) and softmax scale, one KV "head" per token as wide as `mla`'s slot. The experts
/// are the caller's.
pub(crate) fn latent_spec(
    c: &RawConfig,
    arch: &str,
    common: Common,
    mla: MlaSpec,
    kinds: Vec<LayerKind>,
) -> Result<ModelSpec, ModelError> {
    if !mla.qk_rope_head_dim.is_multiple_of(2) {
        return Err(c.error(format!("qk_rope_head_dim {} must be even for rope", mla.qk_rope_head_dim)));
    }
    let (theta, scaling) = c.rope("full_attention", 10000.0)?;
    if theta <= 0.0 {
        return Err(c.error(format!("rope_theta {theta} makes no sense")));
    }
    let rope = Rope::new(mla.qk_rope_head_dim, theta, &scaling);
    let mut spec = common.spec_with_kinds(c, arch, rope, activation(c, Activation::Silu)?, kinds)?;
    // One latent "KV head" per token: the pools and sessions see rows of this width.
    spec.num_kv_heads = 1;
    spec.head_dim = mla.slot_dim();
    spec.attn_scale = softmax_scale(c, mla.qk_head_dim());
    spec.mla = Some(mla);
    Ok(spec)
}

/// `qk_head_dim^-0.5`, times `mscale(factor, mscale_all_dim)^2` where the rope is scaled and
/// names a nonzero `mscale_all_dim` (transformers' `yarn_apply_mscale`).
fn softmax_scale(c: &RawConfig, qk_head_dim: usize) -> f32 {
    let base = (qk_head_dim as f64).powf(-0.5);
    let params = c.get("rope_parameters").or_else(|| c.get("rope_scaling"));
    let num = |k: &str| params.and_then(|p| p.get(k)).and_then(Value::as_f64).filter(|x| x.is_finite());
    let kind = params.and_then(|p| p.get("rope_type").or_else(|| p.get("type"))).and_then(Value::as_str);
    match (kind.unwrap_or("default"), num("factor"), num("mscale_all_dim")) {
        ("default", _, _) | (_, None, _) | (_, _, None | Some(0.0)) => base as f32,
        (_, Some(factor), Some(all)) => {
            let m = yarn_mscale(factor as f32, all as f32) as f64;
            (base * m * m) as f32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A small DeepSeek V3 config with `change` merged over it.
    fn config(change: &str) -> RawConfig {
        let mut v: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
            "intermediate_size": 128, "num_hidden_layers": 3, "vocab_size": 512, "moe_intermediate_size": 32,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
            "routed_scaling_factor": 2.5, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 24,
            "qk_rope_head_dim": 16, "v_head_dim": 20, "num_nextn_predict_layers": 1,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 64, "mscale": 1.0, "mscale_all_dim": 0.8}}"#,
        )
        .expect("json");
        let extra: serde_json::Map<String, Value> = serde_json::from_str(change).expect("json");
        v.extend(extra);
        RawConfig::parse(Path::new("config.json"), &Value::Object(v).to_string()).expect("config")
    }

    #[test]
    fn reads_the_latent_shape_the_router_and_the_mtp_layers() {
        let s = spec(&config("{}"), "DeepseekV3ForCausalLM").expect("spec");
        let m = s.mla.expect("mla");
        assert_eq!((m.q_lora_rank, m.kv_lora_rank, m.qk_head_dim(), m.v_head_dim), (Some(48), 32, 40, 20));
        assert!(m.rope_interleave, "transformers' default");
        assert_eq!((s.num_kv_heads, s.head_dim), (1, 48), "one latent row of kv_lora_rank + rope");
        assert_eq!(s.rope_full.inv_freq.len(), 8);
        let moe = s.moe.expect("moe");
        assert_eq!((moe.n_group, moe.sparse_layers), (2, vec![false, true, true]));
        assert_eq!(s.unread_prefixes, vec!["model.layers.3.".to_string()]);
        let mtp = crate::spec::MtpSpec {
            unsupported: None,
            num_layers: 1,
            sparse: true,
            layout: crate::spec::MtpLayout::NextN,
            own_embed: false,
            kind: crate::spec::LayerKind::Full,
        };
        assert_eq!(s.mtp, Some(mtp));
        // mscale(4, 0.8)^2 / sqrt(40), and the rope's attention factor mscale(4, 1) / mscale(4, 0.8).
        let ms = |m: f32| 0.1 * m * 4f32.ln() + 1.0;
        assert!((s.attn_scale - ms(0.8) * ms(0.8) / 40f32.sqrt()).abs() < 1e-6);
        assert!((s.rope_full.attention_scaling - ms(1.0) / ms(0.8)).abs() < 1e-6);
    }

    #[test]
    fn plain_rope_keeps_the_plain_scale_and_q_proj_without_lora() {
        let c = config(r#"{"q_lora_rank": null, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}"#);
        let s = spec(&c, "DeepseekV3ForCausalLM").expect("spec");
        assert_eq!(s.mla.expect("mla").q_lora_rank, None);
        assert_eq!(s.attn_scale, 1.0 / 40f32.sqrt());
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        for change in [r#"{"qk_rope_head_dim": 15}"#, r#"{"kv_lora_rank": 0}"#, r#"{"attention_bias": true}"#] {
            assert!(spec(&config(change), "DeepseekV3ForCausalLM").is_err(), "{change}");
        }
    }
}
