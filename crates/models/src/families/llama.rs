//! Llama 2 / 3.x (`LlamaForCausalLM`): pre-norm decoder, SiLU MLP, rope incl. `llama3` scaling.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, ModelSpec, activation};
use tf_backend::Activation;

/// The spec of a Llama checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    let rope = common.rope(c, "full_attention", 10000.0)?;
    common.spec(c, arch, rope, activation(c, Activation::Silu)?)
}
