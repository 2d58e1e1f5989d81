//! Gemma 2 (`Gemma2ForCausalLM`): Gemma 3's layout without its QK norm, one rope for every layer,
//! sliding and full layers alternating (the even ones sliding), soft-capped attention scores
//! and logits (50 and 30 unless the config says otherwise; `null` turns a cap off).

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, LayerKind, ModelSpec, activation};
use tf_backend::Activation;

/// The spec of a Gemma 2 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    let rope = common.rope(c, "full_attention", 10_000.0)?;
    let (hidden, layers) = (common.hidden_size, common.num_layers);
    let mut spec = common.spec(c, arch, rope, activation(c, Activation::GeluTanh)?)?;
    if c.get("layer_types").is_none() {
        spec.layer_kinds = (0..layers).map(|i| if i % 2 == 0 { LayerKind::Sliding } else { LayerKind::Full }).collect();
    }
    spec.sliding_window = Some(c.opt_dim("sliding_window")?.unwrap_or(4096));
    spec.tie_word_embeddings = c.flag("tie_word_embeddings", true)?;
    let scalar = c.opt_f32("query_pre_attn_scalar")?.unwrap_or(256.0);
    if scalar <= 0.0 {
        return Err(c.error(format!("query_pre_attn_scalar must be positive, found {scalar}")));
    }
    spec.attn_scale = 1.0 / scalar.sqrt();
    spec.embed_scale = (hidden as f32).sqrt();
    let cap = |key: &str, default: f32| -> Result<Option<f32>, ModelError> {
        let v = if c.names(key) { c.opt_f32(key)? } else { Some(default) };
        Ok(v.filter(|&x| x > 0.0))
    };
    spec.final_softcap = cap("final_logit_softcapping", 30.0)?;
    spec.attn_softcap = cap("attn_logit_softcapping", 50.0)?;
    spec.sandwich_norms = true;
    spec.norm_one_plus = true;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(extra: &str) -> RawConfig {
        let text = format!(
            r#"{{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
            "num_hidden_layers": 4, "vocab_size": 512, "head_dim": 32{extra}}}"#
        );
        RawConfig::parse(Path::new("config.json"), &text).expect("config")
    }

    #[test]
    fn layers_alternate_from_a_sliding_one_and_the_caps_default_unless_null() {
        let s = spec(&config(""), "g").expect("spec");
        let k = [LayerKind::Sliding, LayerKind::Full, LayerKind::Sliding, LayerKind::Full];
        assert_eq!((s.layer_kinds.clone(), s.sliding_window), (k.to_vec(), Some(4096)));
        assert_eq!((s.final_softcap, s.attn_softcap), (Some(30.0), Some(50.0)));
        assert_eq!((s.attn_scale, s.embed_scale), (1.0 / 16.0, 8.0));
        assert!(s.sandwich_norms && s.norm_one_plus && !s.qk_norm && s.tie_word_embeddings);
        let off = spec(&config(r#", "final_logit_softcapping": null, "attn_logit_softcapping": 20.0"#), "g");
        let off = off.expect("spec");
        assert_eq!((off.final_softcap, off.attn_softcap), (None, Some(20.0)));
    }
}
