//! LFM3 (`Lfm3ForCausalLM`): LFM2's short conv layers beside sliding and full attention layers
//! (`layer_types`), Qwen3-style attention (QK norm `q_norm` / `k_norm`, `o_proj`) with an
//! optional per-head sigmoid output gate (`g_proj`, `use_attention_gate`), a rope per attention
//! kind (the full layers' `proportional` rope rotates the first `partial_rotary_factor` of the
//! frequencies over the whole head), optional sandwich norms (`post_operator_norm`,
//! `post_ffn_norm`) and a SwiGLU MLP of `intermediate_size`.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::families::lfm2;
use crate::names::Names;
use crate::spec::{Common, LayerKind, ModelSpec};
use serde_json::Value;
use tf_backend::rope::RopeScaling;
use tf_backend::{Activation, Rope};

/// The spec of an LFM3 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = lfm2::read_common(c)?;
    if c.flag("attention_bias", false)? {
        return Err(c.error("attention_bias true is not supported for LFM3"));
    }
    let rope_full = rope(c, &common, "full_attention", 1_000_000.0)?;
    let rope_sliding = rope(c, &common, "sliding_attention", 10_000.0)?;
    let layer_kinds = layer_kinds(c, &common)?;
    let mut spec = common.spec(c, arch, rope_full, Activation::Silu)?;
    spec.rope_sliding = rope_sliding;
    spec.layer_kinds = layer_kinds;
    spec.sliding_window = Some(c.opt_dim("sliding_window")?.unwrap_or(256));
    spec.tie_word_embeddings = c.flag("tie_word_embeddings", true)?;
    spec.qk_norm = true;
    spec.attn_head_gate = c.flag("use_attention_gate", true)?;
    spec.sandwich_norms = c.flag("use_sandwich_norm", true)?;
    let mut names = Names { qk_norm: ["q_norm", "k_norm"], attn_out: "o_proj", ..lfm2::names() };
    if spec.sandwich_norms {
        names.post_mixer_norm = "post_operator_norm";
        names.pre_ffn_norm = "ffn_norm";
        names.post_ffn_norm = "post_ffn_norm";
    }
    spec.names = names;
    spec.conv = Some(lfm2::conv_with_default(c, 7)?);
    Ok(spec)
}

/// `layer_types` (`conv`, `sliding_attention`, `full_attention`), else LFM3's default pattern:
/// full at `i % 4 == 2`, sliding at `i % 4 == 0` past layer 0, conv elsewhere.
fn layer_kinds(c: &RawConfig, common: &Common) -> Result<Vec<LayerKind>, ModelError> {
    if c.get("layer_types").is_none() {
        return Ok((0..common.num_layers)
            .map(|i| match i % 4 {
                2 => LayerKind::Full,
                0 if i > 0 => LayerKind::Sliding,
                _ => LayerKind::Conv,
            })
            .collect());
    }
    let kinds = common.layer_kinds(c)?;
    if let Some(k) = kinds.iter().find(|k| !matches!(k, LayerKind::Conv | LayerKind::Full | LayerKind::Sliding)) {
        return Err(c.error(format!("layer kind {k:?} is not an LFM3 layer (conv, sliding or full attention)")));
    }
    Ok(kinds)
}

/// The rope of `layer_type`'s layers from `rope_parameters[layer_type]`: `default`, or
/// `proportional` (inverse frequencies `theta^(-2i / head_dim)` for the first
/// `partial_rotary_factor * head_dim / 2` pairs, zero, so no rotation, for the rest).
fn rope(c: &RawConfig, common: &Common, layer_type: &str, theta_default: f32) -> Result<Rope, ModelError> {
    layer_rope(c, common.head_dim, layer_type, theta_default, 0.5, "LFM3")
}

/// [`rope`] over heads of `head_dim` for `family`, whose full layers default to a
/// `proportional` rope of `full_partial` at theta 1e6 (shared with Gemma 4).
pub(crate) fn layer_rope(
    c: &RawConfig,
    head_dim: usize,
    layer_type: &str,
    theta_default: f32,
    full_partial: f32,
    family: &str,
) -> Result<Rope, ModelError> {
    let params = match c.get("rope_parameters") {
        Some(Value::Object(m)) => m.get(layer_type).and_then(Value::as_object),
        _ => None,
    };
    let Some(p) = params else {
        // No entry for this kind: LFM3's own default for it.
        return Ok(match layer_type {
            "full_attention" => proportional(head_dim, 1_000_000.0, full_partial),
            _ => Rope::new(head_dim, theta_default, &RopeScaling::Default),
        });
    };
    let num = |k: &str| p.get(k).and_then(Value::as_f64).filter(|x| x.is_finite()).map(|x| x as f32);
    let theta = num("rope_theta").unwrap_or(theta_default);
    if theta <= 0.0 {
        return Err(c.error(format!("rope_theta {theta} of '{layer_type}' must be positive")));
    }
    let partial = num("partial_rotary_factor").unwrap_or(1.0);
    if !(partial > 0.0 && partial <= 1.0) {
        return Err(c.error(format!("partial_rotary_factor {partial} of '{layer_type}' must be in (0, 1]")));
    }
    match p.get("rope_type").and_then(Value::as_str).unwrap_or("default") {
        "proportional" => {
            if num("factor").is_some_and(|f| f != 1.0) {
                return Err(c.error(format!("proportional rope of '{layer_type}' with a factor is not supported")));
            }
            Ok(proportional(head_dim, theta, partial))
        }
        "default" if partial == 1.0 => Ok(Rope::new(head_dim, theta, &RopeScaling::Default)),
        other => Err(c.error(format!(
            "rope type '{other}' (partial_rotary_factor {partial}) of '{layer_type}' is not supported for {family}"
        ))),
    }
}

/// transformers' proportional rope over a head of `head_dim`.
fn proportional(head_dim: usize, theta: f32, partial: f32) -> Rope {
    let angles = (partial * head_dim as f32) as usize / 2;
    let mut r = Rope::new(head_dim, theta, &RopeScaling::Default);
    for f in r.inv_freq.iter_mut().skip(angles) {
        *f = 0.0;
    }
    r
}
