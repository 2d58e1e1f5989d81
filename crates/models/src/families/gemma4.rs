//! Gemma 4 text (`Gemma4ForCausalLM`, `gemma4_text`): Gemma 3's sandwich norms, embedding scale,
//! GELU-tanh MLP and sliding / full layers, with plain-`w` RMSNorms, attention scale 1, an
//! unscaled norm on each V head, full layers' own head width and KV heads (`global_head_dim`,
//! `num_global_key_value_heads`, or `per_layer_config`) whose V may be their K projection
//! (`attention_k_eq_v`), a `proportional` rope on full layers, per-layer input embeddings
//! (`hidden_size_per_layer_input`), a `layer_scalar` per layer, and KV-shared last layers
//! (`num_kv_shared_layers`, with `use_double_wide_mlp`) reading the K/V of the last earlier
//! layer of their kind, and the MoE block (`enable_moe_block`, `blocks/dense_moe.rs`).
//! Bidirectional attention over text (`use_bidirectional_attention` `all`) is refused by name.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::families::lfm3::layer_rope;
use crate::spec::{Common, LayerKind, ModelSpec, MoeSpec, PerLayerInputSpec, activation};
use serde_json::Value;
use tf_backend::Activation;

/// The spec of a Gemma 4 text checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    refuse_unsupported(c)?;
    let common = Common::read(c)?;
    let hidden = common.hidden_size;
    let kinds = layer_kinds(c, &common)?;
    let full_shape = full_attn_shape(c, &common, &kinds)?;
    if !common.num_heads.is_multiple_of(full_shape.0) {
        return Err(c.error(format!(
            "full layers' {} KV heads do not divide num_attention_heads {}",
            full_shape.0, common.num_heads
        )));
    }
    if !full_shape.1.is_multiple_of(2) {
        return Err(c.error(format!("full layers' head width {} must be even for rope", full_shape.1)));
    }
    let rope_full = layer_rope(c, full_shape.1, "full_attention", 1_000_000.0, 0.25, "Gemma 4")?;
    let rope_sliding = layer_rope(c, common.head_dim, "sliding_attention", 10_000.0, 0.25, "Gemma 4")?;
    let vocab = common.vocab_size;
    let mut spec = common.spec(c, arch, rope_full, activation(c, Activation::GeluTanh)?)?;
    spec.layer_kinds = kinds;
    spec.rope_sliding = rope_sliding;
    spec.sliding_window = Some(c.opt_dim("sliding_window")?.unwrap_or(512));
    spec.tie_word_embeddings = c.flag("tie_word_embeddings", true)?;
    spec.attn_scale = 1.0;
    spec.embed_scale = (hidden as f32).sqrt();
    spec.final_softcap = c.opt_f32("final_logit_softcapping")?.filter(|&c| c > 0.0);
    spec.qk_norm = true;
    spec.v_norm = true;
    spec.sandwich_norms = true;
    spec.layer_scalar = true;
    spec.full_attn_shape = Some(full_shape);
    spec.full_v_from_k = c.flag("attention_k_eq_v", false)?;
    kv_sharing(c, &mut spec)?;
    if c.flag("enable_moe_block", false)? {
        let (experts, top_k, width) = (c.dim("num_experts")?, c.dim("top_k_experts")?, c.dim("moe_intermediate_size")?);
        if top_k > experts {
            return Err(c.error(format!("top_k_experts {top_k} is more than num_experts {experts}")));
        }
        spec.moe = Some(MoeSpec::softmax(experts, top_k, width, true, vec![true; spec.num_layers]));
        spec.dense_beside_experts = true;
    }
    // 0 (the larger Gemma 4 models) or absent: no per-layer inputs.
    let width = c.get("hidden_size_per_layer_input").filter(|v| v.as_u64() != Some(0));
    spec.per_layer_input = match width.map(|_| c.opt_dim("hidden_size_per_layer_input")).transpose()?.flatten() {
        None => None,
        Some(width) => {
            let rows = c.opt_dim("vocab_size_per_layer_input")?.unwrap_or(vocab);
            if rows < vocab {
                return Err(c.error(format!(
                    "vocab_size_per_layer_input {rows} is smaller than vocab_size {vocab}: some ids would have no per-layer embedding"
                )));
            }
            Some(PerLayerInputSpec { width, vocab: rows })
        }
    };
    Ok(spec)
}

/// The KV-shared layers (`num_kv_shared_layers`, the last ones), each reading the K/V of the last
/// earlier layer of its kind, which must exist; their MLPs twice as wide with
/// `use_double_wide_mlp`; the K/V weights transformers ignores in them left unread.
fn kv_sharing(c: &RawConfig, spec: &mut ModelSpec) -> Result<(), ModelError> {
    let layers = spec.num_layers;
    let shared = match c.get("num_kv_shared_layers") {
        None => 0,
        Some(v) => v.as_u64().filter(|&n| n as usize <= layers).ok_or_else(|| {
            c.error(format!("num_kv_shared_layers must be an integer from 0 to num_hidden_layers {layers}, found {v}"))
        })? as usize,
    };
    if shared == 0 {
        return Ok(());
    }
    let first = layers - shared;
    spec.kv_shared_from = Some(first);
    if let Some(i) = (first..layers).find(|&i| spec.kv_source(i).is_none()) {
        return Err(c.error(format!(
            "num_kv_shared_layers {shared}: layer {i} ({:?}) has no earlier layer of its kind to read K/V from",
            spec.layer_kinds[i]
        )));
    }
    if c.flag("use_double_wide_mlp", false)? {
        spec.wide_mlp_from = Some(first);
    }
    for i in first..layers {
        for name in ["k_proj", "v_proj", "k_norm", "v_norm"] {
            spec.unread_prefixes.push(format!("{}{i}.self_attn.{name}.", spec.names.layers));
        }
    }
    Ok(())
}

/// Refuses the options this family does not run, by name.
fn refuse_unsupported(c: &RawConfig) -> Result<(), ModelError> {
    // "vision" makes only image tokens attend both ways: text stays causal.
    if let Some(v) = c.get("use_bidirectional_attention").filter(|v| v.as_str() != Some("vision")) {
        return Err(c.error(format!("use_bidirectional_attention {v} is not supported: text decoding is causal")));
    }
    Ok(())
}

/// `layer_types`, else five sliding layers to one full; the last layer is full either way
/// (as transformers forces it).
fn layer_kinds(c: &RawConfig, common: &Common) -> Result<Vec<LayerKind>, ModelError> {
    let mut kinds = if c.get("layer_types").is_some() {
        common.layer_kinds(c)?
    } else {
        (0..common.num_layers)
            .map(|i| if (i + 1).is_multiple_of(6) { LayerKind::Full } else { LayerKind::Sliding })
            .collect()
    };
    if let Some(k) = kinds.iter().find(|k| !matches!(k, LayerKind::Full | LayerKind::Sliding)) {
        return Err(c.error(format!("layer kind {k:?} is not a Gemma 4 layer (sliding or full attention)")));
    }
    if let Some(last) = kinds.last_mut() {
        *last = LayerKind::Full;
    }
    Ok(kinds)
}

/// Full layers' `(KV heads, head width)`: from `per_layer_config` (as transformers saves it;
/// every full layer the same, sliding layers with no override), else `global_head_dim`
/// (default 512) and, with `attention_k_eq_v`, `num_global_key_value_heads`.
fn full_attn_shape(c: &RawConfig, common: &Common, kinds: &[LayerKind]) -> Result<(usize, usize), ModelError> {
    let k_eq_v = c.flag("attention_k_eq_v", false)?;
    let Some(per_layer) = c.get("per_layer_config") else {
        let head_dim = c.opt_dim("global_head_dim")?.unwrap_or(512);
        let global_kv = if k_eq_v { c.opt_dim("num_global_key_value_heads")? } else { None };
        return Ok((global_kv.unwrap_or(common.num_kv_heads), head_dim));
    };
    let Value::Object(map) = per_layer else {
        return Err(c.error(format!("per_layer_config must be an object of layer overrides, found {per_layer}")));
    };
    let mut shape = None;
    for (i, kind) in kinds.iter().enumerate() {
        let o = map.get(&i.to_string()).filter(|v| !v.is_null());
        let field = |key: &str, default: usize| -> Result<usize, ModelError> {
            match o.and_then(|o| o.get(key)).filter(|v| !v.is_null()) {
                None => Ok(default),
                Some(v) => v.as_u64().filter(|&n| n > 0 && n <= 1 << 20).map(|n| n as usize).ok_or_else(|| {
                    c.error(format!("per_layer_config[{i}].{key} must be a positive integer, found {v}"))
                }),
            }
        };
        let here = (field("num_key_value_heads", common.num_kv_heads)?, field("head_dim", common.head_dim)?);
        match kind {
            LayerKind::Sliding if here != (common.num_kv_heads, common.head_dim) => {
                return Err(c.error(format!("per_layer_config overrides sliding layer {i}, which is not supported")));
            }
            LayerKind::Full if shape.is_some_and(|s| s != here) => {
                return Err(c.error(format!("per_layer_config gives full layer {i} a shape other full layers lack")));
            }
            LayerKind::Full => shape = Some(here),
            _ => {}
        }
    }
    if let Some(k) = map.keys().find(|k| k.parse::<usize>().map_or(true, |i| i >= kinds.len())) {
        return Err(c.error(format!("per_layer_config names layer '{k}', which the model does not have")));
    }
    Ok(shape.unwrap_or((common.num_kv_heads, common.head_dim)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A Gemma 4 config (E2B-like shapes, shrunk) with the JSON fields of `change` set.
    fn config(change: &str) -> RawConfig {
        let mut v: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"architectures": ["Gemma4ForCausalLM"], "vocab_size": 300, "hidden_size": 64,
            "intermediate_size": 96, "num_hidden_layers": 6, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                "full_attention", "sliding_attention", "sliding_attention"]}"#,
        )
        .expect("json");
        let extra: serde_json::Map<String, Value> = serde_json::from_str(change).expect("json");
        v.extend(extra);
        RawConfig::parse(Path::new("config.json"), &Value::Object(v).to_string()).expect("config")
    }

    #[test]
    fn reads_full_layers_shape_rope_and_forces_the_last_layer_full() {
        let s = spec(&config("{}"), "Gemma4ForCausalLM").expect("spec");
        assert_eq!(s.layer_kinds[5], LayerKind::Full, "transformers forces the last layer full");
        assert_eq!((s.attn_shape(0), s.attn_shape(1)), ((2, 16), (2, 32)), "no k_eq_v: the usual KV heads");
        // The proportional default: a quarter of the 16 pairs of a 32-wide head rotate.
        let f = &s.rope_full.inv_freq;
        assert_eq!((f.len(), f[3] > 0.0, f[4]), (16, true, 0.0));
        assert_eq!((s.attn_scale, s.norm_one_plus, s.per_layer_input), (1.0, false, None));
        assert!(spec(&config(r#"{"use_bidirectional_attention": "vision"}"#), "x").is_ok(), "text stays causal");
        let s = spec(&config(r#"{"hidden_size_per_layer_input": 0}"#), "x").expect("0: none");
        assert_eq!(s.per_layer_input, None);
        let s = spec(&config(r#"{"hidden_size_per_layer_input": 8}"#), "x").expect("spec");
        assert_eq!(s.per_layer_input, Some(PerLayerInputSpec { width: 8, vocab: 300 }));
        let s = spec(&config(r#"{"attention_k_eq_v": true, "num_global_key_value_heads": 1}"#), "x").expect("spec");
        assert_eq!((s.attn_shape(1), s.full_v_from_k), ((1, 32), true));
    }

    #[test]
    fn kv_shared_layers_read_the_last_earlier_layer_of_their_kind() {
        let s = spec(&config(r#"{"num_kv_shared_layers": 2, "use_double_wide_mlp": true}"#), "x").expect("spec");
        assert_eq!((0..6).map(|i| s.kv_source(i)).collect::<Vec<_>>(), [None, None, None, None, Some(2), Some(3)]);
        assert_eq!((s.mlp_width(3), s.mlp_width(4)), (96, 192));
        assert!(s.unread_prefixes.contains(&"model.layers.5.self_attn.k_proj.".to_string()));
        // Every layer shared, or more than the layers: refused.
        for n in ["6", "7", "-1", "1.5"] {
            assert!(spec(&config(&format!(r#"{{"num_kv_shared_layers": {n}}}"#)), "x").is_err(), "{n}");
        }
    }

    #[test]
    fn the_moe_block_routes_softmax_top_k_beside_the_dense_mlp() {
        let c =
            config(r#"{"enable_moe_block": true, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 8}"#);
        let s = spec(&c, "x").expect("spec");
        let m = s.moe.expect("moe");
        assert_eq!((m.num_experts, m.top_k, m.moe_intermediate_size, m.norm_topk_prob), (4, 2, 8, true));
        assert!(s.dense_beside_experts && m.sparse_layers.iter().all(|&x| x));
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        for change in [
            r#"{"enable_moe_block": true}"#,
            r#"{"enable_moe_block": true, "num_experts": 4, "top_k_experts": 5, "moe_intermediate_size": 8}"#,
            r#"{"use_bidirectional_attention": "all"}"#,
            r#"{"hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 200}"#,
            r#"{"per_layer_config": {"0": {"head_dim": 32}}}"#,
            r#"{"per_layer_config": {"9": {"head_dim": 32}}}"#,
            r#"{"global_head_dim": 33}"#,
            r#"{"hidden_size_per_layer_input": -8}"#,
            r#"{"attention_k_eq_v": true, "num_global_key_value_heads": 3}"#,
        ] {
            assert!(spec(&config(change), "Gemma4ForCausalLM").is_err(), "{change}");
        }
    }
}
