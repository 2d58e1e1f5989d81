//! Qwen3-MoE (`Qwen3MoeForCausalLM`): Qwen3 attention with softmax-top-k routed experts in the
//! layers `decoder_sparse_step` selects (minus `mlp_only_layers`).

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::ModelSpec;
use crate::spec::MoeSpec;

/// The spec of a Qwen3-MoE checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let mut spec = super::qwen3::spec(c, arch)?;
    let num_experts = match c.opt_dim("num_experts")? {
        Some(n) => n,
        None => c.dim("num_local_experts")?,
    };
    let top_k = c.dim("num_experts_per_tok")?;
    if top_k > num_experts {
        return Err(c.error(format!("num_experts_per_tok {top_k} exceeds num_experts {num_experts}")));
    }
    let step = c.opt_dim("decoder_sparse_step")?.unwrap_or(1);
    let dense: Vec<usize> = c
        .get("mlp_only_layers")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_u64()).map(|v| v as usize).collect())
        .unwrap_or_default();
    let sparse_layers = (0..spec.num_layers).map(|i| !dense.contains(&i) && (i + 1).is_multiple_of(step)).collect();
    let (inter, norm) = (c.dim("moe_intermediate_size")?, c.flag("norm_topk_prob", false)?);
    spec.moe = Some(MoeSpec::softmax(num_experts, top_k, inter, norm, sparse_layers));
    Ok(spec)
}
