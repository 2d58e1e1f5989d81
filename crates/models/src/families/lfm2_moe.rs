//! LFM2-MoE (`Lfm2MoeForCausalLM`): LFM2's conv and attention layers, dense SwiGLU MLPs of
//! `intermediate_size` in the first `num_dense_layers` layers and experts after them, routed by
//! sigmoid scores with LFM2's `expert_bias` used for choosing only (`use_expert_bias`), the
//! chosen weights renormalised (`norm_topk_prob`, plus 1e-6) and scaled by
//! `routed_scaling_factor`; the experts' `w1` / `w3` / `w2` per expert.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::families::lfm2;
use crate::spec::{ModelSpec, MoeSpec};
use tf_backend::MoeScoring;

/// The spec of an LFM2-MoE checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let mut spec = lfm2::spec_with(c, arch, false)?;
    let num_experts = c.opt_dim("num_experts")?.unwrap_or(32);
    let top_k = c.opt_dim("num_experts_per_tok")?.unwrap_or(4);
    if top_k > num_experts {
        return Err(c.error(format!("num_experts_per_tok {top_k} exceeds num_experts {num_experts}")));
    }
    let dense = match c.get("num_dense_layers") {
        None => 2,
        Some(v) => v.as_u64().map(|n| n as usize).ok_or_else(|| c.error(format!("'num_dense_layers' {v}")))?,
    };
    let scale = c.opt_f32("routed_scaling_factor")?.unwrap_or(1.0);
    if scale <= 0.0 {
        return Err(c.error(format!("routed_scaling_factor must be positive, found {scale}")));
    }
    spec.moe = Some(MoeSpec {
        num_experts,
        top_k,
        moe_intermediate_size: c.opt_dim("moe_intermediate_size")?.unwrap_or(1792),
        norm_topk_prob: c.flag("norm_topk_prob", true)?,
        sparse_layers: (0..spec.num_layers).map(|i| i >= dense).collect(),
        scoring: MoeScoring::Sigmoid,
        n_group: 1,
        topk_group: 1,
        norm_eps: 1e-6,
        routed_scaling_factor: scale,
        module: "feed_forward",
        router: "gate",
        choice_bias: if c.flag("use_expert_bias", true)? { Some("expert_bias") } else { None },
        expert_names: ["w1", "w3", "w2"],
        gated: true,
        shared: None,
        latent_size: None,
        stacked: false,
        gpt_oss: false,
    });
    Ok(spec)
}
