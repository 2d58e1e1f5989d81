//! GLM-4.5 / 4.6 MoE (`Glm4MoeForCausalLM`): attention with q/k/v biases (`attention_bias`),
//! optional QK norm (`use_qk_norm`) and partial rotary (`partial_rotary_factor`, in
//! `rope_parameters` or at the top level, default 0.5); dense MLPs in the first
//! `first_k_dense_replace` layers, then experts routed by sigmoid scores with the
//! `e_score_correction_bias` for choosing, group-limited (`n_group`, `topk_group`),
//! renormalised (`norm_topk_prob`, +1e-20), scaled (`routed_scaling_factor`), plus
//! `n_shared_experts` shared experts as one MLP. The `num_nextn_predict_layers` MTP layers a
//! checkpoint holds after the decoder's layers are left unread by the decoder and loaded only
//! for drafting (`crate::mtp`).

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, LayerKind, ModelSpec, MoeSpec, MtpLayout, MtpSpec, SharedExperts, activation, partial_rope};
use serde_json::Value;
use tf_backend::{Activation, MoeScoring};

/// The spec of a GLM-4.5 MoE checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read_with_attention_bias(c)?;
    let rope = partial_rope(c, common.head_dim, 10000.0, 0.5)?;
    let mut spec = common.spec(c, arch, rope, activation(c, Activation::Silu)?)?;
    if spec.layer_kinds.iter().any(|k| *k != crate::spec::LayerKind::Full) {
        return Err(c.error("glm4_moe layers are full attention only"));
    }
    spec.qk_norm = c.flag("use_qk_norm", false)?;
    spec.attention_bias = c.flag("attention_bias", false)?;
    experts_and_mtp(c, &mut spec)?;
    Ok(spec)
}

/// GLM-4.5's and DeepSeek V3's experts (sigmoid, group-limited, biased choice, scaled, shared
/// experts, dense first layers) into `spec.moe`, and the MTP layers after the decoder's into
/// `spec.unread_prefixes`.
pub(crate) fn experts_and_mtp(c: &RawConfig, spec: &mut ModelSpec) -> Result<(), ModelError> {
    let num_experts = match c.opt_dim("n_routed_experts")? {
        Some(n) => n,
        None => c.dim("num_local_experts")?,
    };
    let top_k = c.dim("num_experts_per_tok")?;
    let inter = c.dim("moe_intermediate_size")?;
    let first_dense = c.opt_dim("first_k_dense_replace")?.unwrap_or(1);
    let sparse_layers = (0..spec.num_layers).map(|i| i >= first_dense).collect();
    let n_shared = c.opt_dim("n_shared_experts")?.unwrap_or(1);
    let mut moe = MoeSpec::softmax(num_experts, top_k, inter, c.flag("norm_topk_prob", true)?, sparse_layers);
    moe.scoring = MoeScoring::Sigmoid;
    moe.n_group = c.opt_dim("n_group")?.unwrap_or(1);
    moe.topk_group = c.opt_dim("topk_group")?.unwrap_or(1);
    moe.norm_eps = 1e-20;
    moe.routed_scaling_factor = c.opt_f32("routed_scaling_factor")?.unwrap_or(1.0);
    moe.choice_bias = Some("gate.e_score_correction_bias");
    moe.shared = (n_shared > 0).then_some(SharedExperts {
        module: "shared_experts",
        intermediate_size: n_shared * inter,
        gate: None,
        names: None,
        beside: false,
    });
    if let Some(why) = moe.params(spec.act).check(num_experts, Some(num_experts)) {
        return Err(c.error(format!("router: {why}")));
    }
    spec.moe = Some(moe);
    // MTP layers (drafting heads) follow the decoder's layers; they are not read.
    let key = "num_nextn_predict_layers";
    let mtp = if c.get(key).and_then(Value::as_u64) == Some(0) { 0 } else { c.opt_dim(key)?.unwrap_or(0) };
    spec.unread_prefixes = (0..mtp).map(|j| format!("model.layers.{}.", spec.num_layers + j)).collect();
    let sparse = spec.num_layers >= first_dense;
    let layout = MtpLayout::NextN;
    let kind = LayerKind::Full;
    spec.mtp =
        (mtp > 0).then_some(MtpSpec { num_layers: mtp, sparse, layout, own_embed: false, kind, unsupported: None });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The fixture's config with `key` set to `value` (when given).
    fn config(change: Option<(&str, u64)>) -> RawConfig {
        let mut v: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "intermediate_size": 128, "num_hidden_layers": 3, "vocab_size": 512, "moe_intermediate_size": 32,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
            "routed_scaling_factor": 2.5, "attention_bias": true, "use_qk_norm": true,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5}}"#,
        )
        .expect("json");
        if let Some((key, value)) = change {
            v.insert(key.into(), Value::from(value));
        }
        RawConfig::parse(Path::new("config.json"), &Value::Object(v).to_string()).expect("config")
    }

    #[test]
    fn reads_the_router_variant_and_the_attention_options() {
        let s = spec(&config(None), "Glm4MoeForCausalLM").expect("spec");
        let m = s.moe.expect("moe");
        assert_eq!((m.scoring, m.n_group, m.topk_group, m.routed_scaling_factor), (MoeScoring::Sigmoid, 2, 1, 2.5));
        assert_eq!(m.sparse_layers, vec![false, true, true]);
        assert_eq!(m.shared.expect("shared").intermediate_size, 32);
        assert_eq!(m.choice_bias, Some("gate.e_score_correction_bias"));
        assert!(s.attention_bias && s.qk_norm);
        assert_eq!(s.rope_full.inv_freq.len(), 8, "16 of 32 dims rotate");
    }

    #[test]
    fn refuses_routers_the_config_cannot_route() {
        // 8 experts in 3 groups; topk_group past n_group; 5 experts from one group of 4.
        for change in [("n_group", 3), ("topk_group", 3), ("num_experts_per_tok", 5)] {
            let e = spec(&config(Some(change)), "Glm4MoeForCausalLM").err();
            assert!(e.is_some_and(|e| e.to_string().contains("router")), "{change:?}");
        }
    }
}
