//! Qwen3-Next (`Qwen3NextForCausalLM`): Qwen3.5's layers (qwen3_5.rs) with Gated DeltaNet's
//! projections fused per key head (`in_proj_qkvz`, `in_proj_ba`), and softmax top-k experts with
//! a sigmoid-gated shared expert in the layers `decoder_sparse_step` selects (minus
//! `mlp_only_layers`).

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{ModelSpec, MoeSpec, SharedExperts};

/// The spec of a Qwen3-Next checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let mut spec = super::qwen3_5::hybrid_spec(c, arch, true)?;
    let step = c.opt_dim("decoder_sparse_step")?.unwrap_or(1).max(1);
    let dense: Vec<usize> = c
        .get("mlp_only_layers")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_u64()).map(|v| v as usize).collect())
        .unwrap_or_default();
    let experts = c.opt_dim("num_experts")?.unwrap_or(512);
    let sparse = (0..spec.num_layers).map(|i| experts > 0 && !dense.contains(&i) && (i + 1).is_multiple_of(step));
    spec.moe = shared_gated_moe(c, sparse.collect(), c.flag("norm_topk_prob", true)?)?;
    super::qwen3_5::mtp_sparse_as_layer_zero(&mut spec);
    Ok(spec)
}

/// Softmax top-k experts plus the sigmoid-gated `shared_expert` (Qwen3-Next, Qwen3.5-MoE) in the
/// `sparse` layers; `None` where no layer is sparse.
pub(crate) fn shared_gated_moe(c: &RawConfig, sparse: Vec<bool>, norm: bool) -> Result<Option<MoeSpec>, ModelError> {
    if !sparse.contains(&true) {
        return Ok(None);
    }
    let num_experts = c.opt_dim("num_experts")?.unwrap_or(512);
    let top_k = c.opt_dim("num_experts_per_tok")?.unwrap_or(10);
    if top_k == 0 || top_k > num_experts {
        return Err(c.error(format!("num_experts_per_tok {top_k} must be in 1..={num_experts} (num_experts)")));
    }
    let inter = c.opt_dim("moe_intermediate_size")?.unwrap_or(512);
    let shared = c.opt_dim("shared_expert_intermediate_size")?.unwrap_or(512);
    let mut m = MoeSpec::softmax(num_experts, top_k, inter, norm, sparse);
    if shared > 0 {
        m.shared = Some(SharedExperts {
            module: "shared_expert",
            intermediate_size: shared,
            gate: Some("shared_expert_gate"),
            names: None,
            beside: false,
        });
    }
    Ok(Some(m))
}
