//! Qwen3.5-MoE text (`Qwen3_5MoeForCausalLM`, `qwen3_5_moe_text`): Qwen3.5's layers (qwen3_5.rs)
//! with softmax top-k experts (always renormalised) and a sigmoid-gated shared expert in every
//! layer.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::ModelSpec;

/// The spec of a Qwen3.5-MoE text checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let mut spec = super::qwen3_5::hybrid_spec(c, arch, false)?;
    spec.moe = super::qwen3_next::shared_gated_moe(c, vec![true; spec.num_layers], true)?;
    if spec.moe.is_none() {
        return Err(c.error("Qwen3.5-MoE needs experts"));
    }
    super::qwen3_5::mtp_sparse_as_layer_zero(&mut spec);
    Ok(spec)
}
