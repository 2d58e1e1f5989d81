//! Qwen3.5 text (`Qwen3_5ForCausalLM`, `qwen3_5_text`): Gated DeltaNet layers and gated
//! attention layers (QK norm, a sigmoid output gate from `q_proj`, partial rotary) in the pattern
//! of `layer_types` (or every `full_attention_interval`-th layer full), zero-centred `(1 + w)`
//! norms, dense MLP. Qwen3-Next (qwen3_next.rs) shares this reading with fused projections.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, GdnSpec, LayerKind, ModelSpec, MtpLayout, MtpSpec, activation, partial_rope};
use serde_json::Value;
use tf_backend::Activation;

/// The spec of a Qwen3.5 text checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    if c.opt_dim("num_experts")?.unwrap_or(0) > 0 {
        return Err(c.error("qwen3_5 with num_experts is the MoE family (Qwen3_5MoeForCausalLM)"));
    }
    hybrid_spec(c, arch, false)
}

/// Makes the MTP layer's MLP the experts where layer 0's is (its layer index is 0, as vLLM
/// reads it).
pub(crate) fn mtp_sparse_as_layer_zero(spec: &mut ModelSpec) {
    let sparse = spec.moe.as_ref().is_some_and(|m| m.sparse_layers.first() == Some(&true));
    if let Some(m) = spec.mtp.as_mut() {
        m.sparse = sparse;
    }
}

/// The spec shared by Qwen3.5 and Qwen3-Next: `fused` says the Gated DeltaNet projections are
/// fused per key head (Qwen3-Next).
pub fn hybrid_spec(c: &RawConfig, arch: &str, fused: bool) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    let rope = partial_rope(c, common.head_dim, 10000.0, 0.25)?;
    let kinds = layer_kinds(c, common.num_layers)?;
    if activation(c, Activation::Silu)? != Activation::Silu {
        return Err(c.error("hidden_act must be silu (the Gated DeltaNet conv's activation)"));
    }
    let mut spec = common.spec(c, arch, rope, Activation::Silu)?;
    spec.layer_kinds = kinds;
    spec.qk_norm = true;
    spec.norm_one_plus = true;
    spec.attn_output_gate = true;
    // The multi-token-prediction head (`mtp.*`) is read only for drafting (`crate::mtp`); its
    // MLP is sparse as layer 0's would be (set by the MoE families).
    spec.unread_prefixes = vec!["mtp.".to_string()];
    let depths = c.opt_dim("mtp_num_hidden_layers")?.unwrap_or(0);
    let own_embed = c.flag("mtp_use_dedicated_embeddings", false)?;
    spec.mtp = (depths > 0).then_some(MtpSpec {
        num_layers: depths,
        sparse: false,
        layout: MtpLayout::Qwen,
        own_embed,
        kind: LayerKind::Full,
        unsupported: None,
    });
    let gdn = GdnSpec {
        num_k_heads: c.opt_dim("linear_num_key_heads")?.unwrap_or(16),
        num_v_heads: c.opt_dim("linear_num_value_heads")?.unwrap_or(32),
        head_k_dim: c.opt_dim("linear_key_head_dim")?.unwrap_or(128),
        head_v_dim: c.opt_dim("linear_value_head_dim")?.unwrap_or(128),
        conv_kernel: c.opt_dim("linear_conv_kernel_dim")?.unwrap_or(4),
        // A Qwen3-Next GGUF file holds q, k, v and z apart (`gguf_split_qkvz`), b and a fused.
        fused_inputs: fused && !c.flag("gguf_split_qkvz", false)?,
        fused_ba: fused,
        tiled_v_heads: c.flag("gguf_tiled_value_heads", false)?,
    };
    if gdn.fused_inputs && gdn.tiled_v_heads {
        return Err(c.error("gguf_tiled_value_heads with fused input projections is not supported"));
    }
    if !gdn.num_v_heads.is_multiple_of(gdn.num_k_heads) {
        return Err(c.error(format!(
            "linear_num_key_heads {} does not divide linear_num_value_heads {}",
            gdn.num_k_heads, gdn.num_v_heads
        )));
    }
    if gdn.conv_kernel < 2 {
        return Err(c.error(format!("linear_conv_kernel_dim must be at least 2, found {}", gdn.conv_kernel)));
    }
    spec.gdn = Some(gdn);
    Ok(spec)
}

/// Layer kinds from `layer_types` (`linear_attention`, `full_attention`), else every
/// `full_attention_interval`-th layer (default 4) full and the rest Gated DeltaNet.
fn layer_kinds(c: &RawConfig, n: usize) -> Result<Vec<LayerKind>, ModelError> {
    let Some(types) = c.get("layer_types").and_then(Value::as_array) else {
        let interval = c.opt_dim("full_attention_interval")?.unwrap_or(4);
        return Ok((0..n)
            .map(|i| if (i + 1).is_multiple_of(interval) { LayerKind::Full } else { LayerKind::GatedDeltaNet })
            .collect());
    };
    if types.len() != n {
        return Err(c.error(format!("layer_types has {} entries for {n} layers", types.len())));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            Some("full_attention") => Ok(LayerKind::Full),
            Some("linear_attention") => Ok(LayerKind::GatedDeltaNet),
            _ => Err(c.error(format!("unknown layer type {t}"))),
        })
        .collect()
}
