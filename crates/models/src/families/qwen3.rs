//! Qwen3 dense (`Qwen3ForCausalLM`): Llama layout plus RMSNorm on each query and key head.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, LayerKind, ModelSpec, activation};
use tf_backend::Activation;

/// The spec of a Qwen3 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    let rope = common.rope(c, "full_attention", 10000.0)?;
    let mut spec = common.spec(c, arch, rope, activation(c, Activation::Silu)?)?;
    spec.qk_norm = true;
    if spec.layer_kinds.contains(&LayerKind::Sliding) {
        spec.sliding_window = c.opt_dim("sliding_window")?;
        if spec.sliding_window.is_none() {
            return Err(c.error("layer_types has sliding layers but no sliding_window"));
        }
    }
    Ok(spec)
}
