//! Gemma 3 text (`Gemma3ForCausalLM`): `(1 + w)` RMSNorm, embeddings scaled by sqrt(hidden),
//! sandwich norms, QK-norm, `query_pre_attn_scalar`, interleaved sliding and full layers with
//! their own rope bases, GELU-tanh MLP, optional soft-capping.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, LayerKind, ModelSpec, activation};
use tf_backend::Activation;

/// The spec of a Gemma 3 text checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    let rope_full = common.rope(c, "full_attention", 1_000_000.0)?;
    let rope_sliding = common.rope(c, "sliding_attention", 10_000.0)?;
    let hidden = common.hidden_size;
    let head_dim = common.head_dim;
    let layers = common.num_layers;
    let mut spec = common.spec(c, arch, rope_full, activation(c, Activation::GeluTanh)?)?;
    if c.get("layer_types").is_none() {
        let pattern = c.opt_dim("sliding_window_pattern")?.unwrap_or(6);
        spec.layer_kinds = (0..layers)
            .map(|i| if (i + 1).is_multiple_of(pattern) { LayerKind::Full } else { LayerKind::Sliding })
            .collect();
    }
    spec.rope_sliding = rope_sliding;
    spec.sliding_window = Some(c.opt_dim("sliding_window")?.unwrap_or(4096));
    spec.tie_word_embeddings = c.flag("tie_word_embeddings", true)?;
    let scalar = c.opt_f32("query_pre_attn_scalar")?.unwrap_or(head_dim as f32);
    if scalar <= 0.0 {
        return Err(c.error(format!("query_pre_attn_scalar must be positive, found {scalar}")));
    }
    spec.attn_scale = 1.0 / scalar.sqrt();
    spec.embed_scale = (hidden as f32).sqrt();
    spec.final_softcap = c.opt_f32("final_logit_softcapping")?.filter(|&c| c > 0.0);
    spec.attn_softcap = c.opt_f32("attn_logit_softcapping")?.filter(|&c| c > 0.0);
    spec.qk_norm = true;
    spec.sandwich_norms = true;
    spec.norm_one_plus = true;
    Ok(spec)
}
