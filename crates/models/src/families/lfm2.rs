//! LFM2 dense (`Lfm2ForCausalLM`): double-gated short conv layers (`conv`) and attention layers
//! with QK norm (`full_attention`) in the pattern of `layer_types` (or `full_attn_idxs`), a
//! SwiGLU MLP (`feed_forward.w1/w3/w2`) sized by the `block_auto_adjust_ff_dim` rule, and LFM2's
//! own tensor names (`operator_norm`, `ffn_norm`, `embedding_norm` as the final norm).

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::names::Names;
use crate::spec::{Common, ConvSpec, LayerKind, ModelSpec};
use tf_backend::Activation;

/// LFM2's tensor names.
pub fn names() -> Names {
    Names {
        final_norm: "model.embedding_norm.weight",
        input_norm: "operator_norm",
        post_mixer_norm: "ffn_norm",
        qk_norm: ["q_layernorm", "k_layernorm"],
        attn_out: "out_proj",
        mlp: "feed_forward",
        gate_up_down: ["w1", "w3", "w2"],
        ..Names::default()
    }
}

/// The spec of an LFM2 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    spec_with(c, arch, true)
}

/// The spec of an LFM2-style checkpoint, its MLP width through the `block_auto_adjust_ff_dim`
/// rule where `adjust_ff` (LFM2 dense; LFM2-MoE's dense layers take `intermediate_size` as is).
pub(crate) fn spec_with(c: &RawConfig, arch: &str, adjust_ff: bool) -> Result<ModelSpec, ModelError> {
    let common = read_common(c)?;
    let rope = common.rope(c, "full_attention", 1_000_000.0)?;
    let layer_kinds = layer_kinds(c, &common)?;
    let mut spec = common.spec(c, arch, rope, Activation::Silu)?;
    spec.layer_kinds = layer_kinds;
    if adjust_ff {
        spec.intermediate_size = ff_dim(c, spec.intermediate_size)?;
    }
    spec.tie_word_embeddings = c.flag("tie_word_embeddings", c.flag("tie_embedding", true)?)?;
    spec.qk_norm = true;
    spec.names = names();
    spec.conv = Some(conv(c)?);
    Ok(spec)
}

/// The size fields with LFM2's names and defaults (`norm_eps`, `block_ff_dim`).
pub(crate) fn read_common(c: &RawConfig) -> Result<Common, ModelError> {
    if c.get("rms_norm_eps").is_some() && c.get("norm_eps").is_some() {
        return Err(c.error("both 'norm_eps' and 'rms_norm_eps' are given"));
    }
    let mut common = Common::read(c).or_else(|e| match c.opt_dim("block_ff_dim")? {
        // Older LFM2 configs name the MLP width block_ff_dim.
        Some(_) if c.get("intermediate_size").is_none() => Err(c.error(
            "'block_ff_dim' without 'intermediate_size' is not supported (re-save the config with transformers)",
        )),
        _ => Err(e),
    })?;
    common.rms_norm_eps = c.opt_f32("norm_eps")?.unwrap_or(1e-5);
    if common.rms_norm_eps <= 0.0 {
        return Err(c.error(format!("norm_eps must be positive, found {}", common.rms_norm_eps)));
    }
    Ok(common)
}

/// The short conv settings: `conv_L_cache` taps (at least 1) and `conv_bias`.
pub(crate) fn conv(c: &RawConfig) -> Result<ConvSpec, ModelError> {
    conv_with_default(c, 3)
}

/// [`conv`] where the family's default kernel is `default_kernel`.
pub(crate) fn conv_with_default(c: &RawConfig, default_kernel: usize) -> Result<ConvSpec, ModelError> {
    let kernel = c.opt_dim("conv_L_cache")?.unwrap_or(default_kernel);
    if kernel > 64 {
        return Err(c.error(format!("conv_L_cache {kernel} is larger than the 64 supported")));
    }
    let bias = c.flag("conv_bias", false)?;
    if bias {
        return Err(c.error("conv_bias true (biases on the conv's in/out projections) is not supported"));
    }
    Ok(ConvSpec { kernel, bias })
}

/// The MLP width the `block_auto_adjust_ff_dim` rule makes of `intermediate_size`: two thirds,
/// times `block_ffn_dim_multiplier` (when given), rounded up to `block_multiple_of`.
pub(crate) fn ff_dim(c: &RawConfig, inter: usize) -> Result<usize, ModelError> {
    if !c.flag("block_auto_adjust_ff_dim", true)? {
        return Ok(inter);
    }
    let mut d = 2 * inter / 3;
    // transformers applies the multiplier and the rounding only when the multiplier is not
    // null; its default is 1.0, which a config without the key (or with null) gets here.
    let m = c.opt_f32("block_ffn_dim_multiplier")?.unwrap_or(1.0);
    if m <= 0.0 {
        return Err(c.error(format!("block_ffn_dim_multiplier must be positive, found {m}")));
    }
    d = (m as f64 * d as f64) as usize;
    let multiple = c.opt_dim("block_multiple_of")?.unwrap_or(256);
    d = d.div_ceil(multiple) * multiple;
    if d == 0 {
        return Err(c.error(format!("intermediate_size {inter} adjusts to an empty MLP")));
    }
    Ok(d)
}

/// Each layer's kind from `layer_types` (`conv`, `full_attention`), else from `full_attn_idxs`
/// (every layer attention when neither is given, as transformers does).
pub(crate) fn layer_kinds(c: &RawConfig, common: &Common) -> Result<Vec<LayerKind>, ModelError> {
    let n = common.num_layers;
    if c.get("layer_types").is_some() {
        let kinds = common.layer_kinds(c)?;
        if let Some(k) = kinds.iter().find(|k| !matches!(k, LayerKind::Conv | LayerKind::Full)) {
            return Err(c.error(format!("layer kind {k:?} is not an LFM2 layer (conv, full_attention)")));
        }
        return Ok(kinds);
    }
    let Some(idx) = c.get("full_attn_idxs") else { return Ok(vec![LayerKind::Full; n]) };
    let idx = idx.as_array().ok_or_else(|| c.error("'full_attn_idxs' must be a list of layer indices"))?;
    let mut kinds = vec![LayerKind::Conv; n];
    for v in idx {
        match v.as_u64() {
            Some(i) if (i as usize) < n => kinds[i as usize] = LayerKind::Full,
            _ => return Err(c.error(format!("'full_attn_idxs' holds {v}, not a layer index below {n}"))),
        }
    }
    Ok(kinds)
}
