//! Nemotron-H (`NemotronHForCausalLM`): a stack of one-part layers in the checkpoint's pattern
//! (`layers_block_type`, or the older `hybrid_override_pattern`: `M` Mamba2, `*` attention
//! without rotary embedding, `-` a relu² MLP, `E` routed and shared relu² experts), each behind
//! one RMSNorm (`norm`)
//! with a residual add, all named `backbone.*`.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::names::Names;
use crate::spec::{Common, LayerKind, MambaSpec, ModelSpec, MoeSpec, SharedExperts};
use tf_backend::rope::RopeScaling;
use tf_backend::{Activation, MoeScoring, Rope};

/// The spec of a Nemotron-H checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let (kinds, sparse) = layer_kinds(c)?;
    refuse(c)?;
    let hidden_size = c.dim("hidden_size")?;
    let num_heads = c.dim("num_attention_heads")?;
    let num_kv_heads = c.opt_dim("num_key_value_heads")?.unwrap_or(num_heads);
    let head_dim = match c.opt_dim("head_dim")? {
        Some(d) => d,
        None if hidden_size.is_multiple_of(num_heads) => hidden_size / num_heads,
        None => {
            return Err(c.error(format!("num_attention_heads {num_heads} does not divide hidden_size {hidden_size}")));
        }
    };
    if !num_heads.is_multiple_of(num_kv_heads) {
        return Err(
            c.error(format!("num_key_value_heads {num_kv_heads} does not divide num_attention_heads {num_heads}"))
        );
    }
    let eps = c.opt_f32("layer_norm_epsilon")?.unwrap_or(1e-5);
    if eps <= 0.0 {
        return Err(c.error(format!("layer_norm_epsilon must be positive, found {eps}")));
    }
    let common = Common {
        vocab_size: c.dim("vocab_size")?,
        hidden_size,
        intermediate_size: c.dim("intermediate_size")?,
        num_layers: kinds.len(),
        num_heads,
        num_kv_heads,
        head_dim,
        rms_norm_eps: eps,
        max_position_embeddings: c.opt_dim("max_position_embeddings")?.unwrap_or(4096),
    };
    let act = match c.opt_str("mlp_hidden_act").unwrap_or("relu2") {
        "relu2" => Activation::Relu2,
        other => return Err(c.error(format!("mlp_hidden_act '{other}' is not supported (relu2 is)"))),
    };
    // Attention has no rotary embedding: the rope here is never applied (`attn_rope` false).
    let unused_rope = Rope::new(2, 10_000.0, &RopeScaling::Default);
    let mut spec = common.spec(c, arch, unused_rope, act)?;
    spec.layer_kinds = kinds;
    spec.attn_rope = false;
    spec.one_part_layers = true;
    spec.mlp_gated = false;
    spec.mamba = Some(mamba(c, hidden_size)?);
    if sparse.contains(&true) {
        spec.moe = Some(moe(c, sparse)?);
    }
    spec.names = Names {
        embed: "backbone.embeddings.weight",
        layers: "backbone.layers.",
        final_norm: "backbone.norm_f.weight",
        input_norm: "norm",
        attn: "mixer",
        mlp: "mixer",
        ..Names::default()
    };
    Ok(spec)
}

/// Each layer's kind from `layers_block_type` (or `hybrid_override_pattern`), and whether it
/// is an MoE layer (a channel-only layer with experts).
fn layer_kinds(c: &RawConfig) -> Result<(Vec<LayerKind>, Vec<bool>), ModelError> {
    let kind = |t: &str| match t {
        "linear_attention" | "mamba" | "M" => Ok((LayerKind::Mamba2, false)),
        "full_attention" | "attention" | "*" => Ok((LayerKind::Full, false)),
        "mlp" | "-" => Ok((LayerKind::ChannelOnly, false)),
        "moe" | "E" => Ok((LayerKind::ChannelOnly, true)),
        other => Err(c.error(format!("unknown Nemotron-H layer type '{other}'"))),
    };
    let kinds: Vec<(LayerKind, bool)> =
        match (c.get("layers_block_type").and_then(|v| v.as_array()), c.opt_str("hybrid_override_pattern")) {
            (Some(list), _) => list
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| c.error(format!("layers_block_type holds a non-string {v}")))
                        .and_then(kind)
                })
                .collect::<Result<_, _>>()?,
            (None, Some(pattern)) => pattern.chars().map(|ch| kind(&ch.to_string())).collect::<Result<_, _>>()?,
            (None, None) => return Err(c.error("names neither layers_block_type nor hybrid_override_pattern")),
        };
    if kinds.is_empty() {
        return Err(c.error("has no layers"));
    }
    if let Some(n) = c.opt_dim("num_hidden_layers")?
        && n != kinds.len()
    {
        return Err(c.error(format!("num_hidden_layers {n} disagrees with the {} layers of its pattern", kinds.len())));
    }
    Ok(kinds.into_iter().unzip())
}

/// The Mamba2 layers' settings.
fn mamba(c: &RawConfig, hidden: usize) -> Result<MambaSpec, ModelError> {
    let num_heads = c.dim("mamba_num_heads")?;
    let head_dim = c.dim("mamba_head_dim")?;
    let n_groups = c.opt_dim("n_groups")?.or(c.opt_dim("mamba_n_groups")?).unwrap_or(8);
    let state_size = c.dim("ssm_state_size")?;
    let conv_kernel = c.opt_dim("conv_kernel")?.or(c.opt_dim("mamba_d_conv")?).unwrap_or(4);
    if n_groups == 0 || !num_heads.is_multiple_of(n_groups) {
        return Err(c.error(format!("n_groups {n_groups} does not divide mamba_num_heads {num_heads}")));
    }
    if conv_kernel < 2 {
        return Err(c.error(format!("conv_kernel must be at least 2, found {conv_kernel}")));
    }
    if let Some(act) = c.opt_str("mamba_hidden_act")
        && act != "silu"
    {
        return Err(c.error(format!("mamba_hidden_act '{act}' is not supported (silu is)")));
    }
    // transformers' mixer clamps dt to (time_step_min, inf), whatever time_step_limit says.
    let dt_min = c.opt_f32("time_step_min")?.or(c.opt_f32("mamba_dt_min")?).unwrap_or(0.001);
    let _ = hidden;
    Ok(MambaSpec {
        num_heads,
        head_dim,
        n_groups,
        state_size,
        conv_kernel,
        conv_bias: c.flag("use_conv_bias", true)? && c.flag("mamba_conv_bias", true)?,
        dt_min,
        dt_max: f32::INFINITY,
    })
}

/// The MoE layers' experts: sigmoid scores with `gate.e_score_correction_bias` for choosing,
/// `n_group` / `topk_group`, `norm_topk_prob` (+1e-20), `routed_scaling_factor`; ungated relu²
/// experts, optionally behind `fc1_latent_proj` / `fc2_latent_proj` (`moe_latent_size`), and one
/// ungated shared MLP of `moe_shared_expert_intermediate_size` (transformers makes exactly one,
/// whatever `n_shared_experts` says).
fn moe(c: &RawConfig, sparse_layers: Vec<bool>) -> Result<MoeSpec, ModelError> {
    let num_experts = match c.opt_dim("n_routed_experts")? {
        Some(n) => n,
        None => c.dim("num_local_experts")?,
    };
    let top_k = c.dim("num_experts_per_tok")?;
    let n_group = c.opt_dim("n_group")?.unwrap_or(1);
    let topk_group = c.opt_dim("topk_group")?.unwrap_or(1);
    if top_k > num_experts {
        return Err(c.error(format!("num_experts_per_tok {top_k} exceeds n_routed_experts {num_experts}")));
    }
    if !num_experts.is_multiple_of(n_group) || topk_group > n_group || num_experts / n_group < 2 {
        return Err(c.error(format!(
            "n_group {n_group} / topk_group {topk_group} do not fit {num_experts} experts (groups of at least 2)"
        )));
    }
    if topk_group * (num_experts / n_group) < top_k {
        return Err(
            c.error(format!("topk_group {topk_group} groups hold fewer than num_experts_per_tok {top_k} experts"))
        );
    }
    let latent_size = match c.get("moe_latent_size") {
        None | Some(serde_json::Value::Null) => None,
        Some(_) => Some(c.dim("moe_latent_size")?),
    };
    let mut m = MoeSpec::softmax(
        num_experts,
        top_k,
        c.dim("moe_intermediate_size")?,
        c.flag("norm_topk_prob", true)?,
        sparse_layers,
    );
    m.scoring = MoeScoring::Sigmoid;
    m.n_group = n_group;
    m.topk_group = topk_group;
    m.norm_eps = 1e-20;
    m.routed_scaling_factor = c.opt_f32("routed_scaling_factor")?.unwrap_or(1.0);
    m.module = "mixer";
    m.choice_bias = Some("gate.e_score_correction_bias");
    m.gated = false;
    m.shared = Some(SharedExperts {
        module: "shared_experts",
        intermediate_size: c.dim("moe_shared_expert_intermediate_size")?,
        gate: None,
        names: None,
        beside: false,
    });
    m.latent_size = latent_size;
    Ok(m)
}

/// Options this family does not run, refused by name.
fn refuse(c: &RawConfig) -> Result<(), ModelError> {
    // (`residual_in_fp32` needs nothing: the residual stream is f32 here either way.)
    for key in ["attention_bias", "mlp_bias", "use_bias", "mamba_proj_bias"] {
        if c.flag(key, false)? {
            return Err(c.error(format!("{key} is not supported")));
        }
    }
    if c.get("sliding_window").is_some_and(|v| !v.is_null()) {
        return Err(c.error("sliding_window is not supported for Nemotron-H attention"));
    }
    if c.get("num_nextn_predict_layers").and_then(|v| v.as_u64()).unwrap_or(0) > 0 {
        return Err(c.error("num_nextn_predict_layers (MTP layers) is not supported"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(extra: &str) -> RawConfig {
        let text = format!(
            r#"{{"architectures": ["NemotronHForCausalLM"], "vocab_size": 512, "hidden_size": 64,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
            "mamba_num_heads": 8, "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "moe_shared_expert_intermediate_size": 48, {extra}}}"#
        );
        RawConfig::parse(Path::new("config.json"), &text).expect("valid json")
    }

    #[test]
    fn the_older_pattern_string_names_each_layer() {
        let c = config(r#""hybrid_override_pattern": "M-*E", "num_hidden_layers": 4"#);
        let s = spec(&c, "NemotronHForCausalLM").expect("a valid config");
        let k = [LayerKind::Mamba2, LayerKind::ChannelOnly, LayerKind::Full, LayerKind::ChannelOnly];
        assert_eq!(s.layer_kinds, k);
        assert_eq!(s.moe.as_ref().map(|m| m.sparse_layers.clone()), Some(vec![false, false, false, true]));
        assert!(!s.attn_rope && s.one_part_layers && !s.mlp_gated);
        let m = s.mamba.expect("mamba settings");
        assert_eq!((m.inner(), m.conv_dim(), m.conv_kernel, m.dt_min), (64, 128, 4, 0.001));
    }

    #[test]
    fn unknown_layers_a_wrong_count_and_unsupported_options_are_refused() {
        let err = |extra: &str| spec(&config(extra), "NemotronHForCausalLM").err().map(|e| e.to_string());
        assert!(err(r#""hybrid_override_pattern": "M*X""#).is_some_and(|e| e.contains("'X'")));
        let e = err(r#""hybrid_override_pattern": "M*", "num_hidden_layers": 3"#);
        assert!(e.is_some_and(|e| e.contains("num_hidden_layers 3")));
        assert!(err(r#""layers_block_type": ["mamba"], "use_bias": true"#).is_some_and(|e| e.contains("use_bias")));
        assert!(
            err(r#""layers_block_type": ["mamba"], "mamba_hidden_act": "gelu""#).is_some_and(|e| e.contains("gelu"))
        );
        assert!(
            err(r#""layers_block_type": ["mamba"], "num_nextn_predict_layers": 1"#).is_some_and(|e| e.contains("MTP"))
        );
    }
}
