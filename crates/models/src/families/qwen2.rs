//! Qwen2 / Qwen2.5 (`Qwen2ForCausalLM`; also QwQ and the DeepSeek-R1 distills of Qwen):
//! Llama's layout with biases on the q, k and v projections (never on o), and, where
//! `use_sliding_window` says so, a sliding window on the layers from `max_window_layers` on
//! (transformers' `layer_types` when the config has them).

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, LayerKind, ModelSpec, activation};
use tf_backend::Activation;

/// The spec of a Qwen2 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read_with_attention_bias(c)?;
    let rope = common.rope(c, "full_attention", 10000.0)?;
    let n = common.num_layers;
    let kinds = match (c.get("layer_types"), c.flag("use_sliding_window", false)?) {
        (Some(_), _) => common.layer_kinds(c)?,
        (None, false) => vec![LayerKind::Full; n],
        (None, true) => {
            let from = c.opt_dim("max_window_layers")?.unwrap_or(n);
            (0..n).map(|i| if i >= from { LayerKind::Sliding } else { LayerKind::Full }).collect()
        }
    };
    if kinds.iter().any(|k| !matches!(k, LayerKind::Full | LayerKind::Sliding)) {
        return Err(c.error("qwen2 layers are full or sliding attention only"));
    }
    let mut spec = common.spec_with_kinds(c, arch, rope, activation(c, Activation::Silu)?, kinds)?;
    // transformers' Qwen2 attention always has q, k and v biases; the config has no switch.
    spec.attention_bias = true;
    if spec.layer_kinds.contains(&LayerKind::Sliding) {
        spec.sliding_window = c.opt_dim("sliding_window")?;
        if spec.sliding_window.is_none() {
            return Err(c.error("sliding layers but no sliding_window"));
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(extra: &str) -> RawConfig {
        let text = format!(
            r#"{{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
            "num_hidden_layers": 4, "vocab_size": 512, "rope_theta": 1000000.0{extra}}}"#
        );
        RawConfig::parse(Path::new("config.json"), &text).expect("config")
    }

    #[test]
    fn biases_always_and_sliding_layers_where_the_config_turns_them_on() {
        // A released Qwen2.5 config: the window named but off.
        let s = spec(&config(r#", "use_sliding_window": false, "sliding_window": 32768, "max_window_layers": 2"#), "q")
            .expect("spec");
        assert!(s.attention_bias);
        assert_eq!((s.layer_kinds, s.sliding_window), (vec![LayerKind::Full; 4], None));
        let on = r#", "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 3"#;
        let s = spec(&config(on), "q").expect("spec");
        let want = [LayerKind::Full, LayerKind::Full, LayerKind::Full, LayerKind::Sliding];
        assert_eq!((s.layer_kinds, s.sliding_window), (want.to_vec(), Some(8)));
        // transformers' own layer_types win where saved.
        let types = r#", "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention"]"#;
        assert_eq!(spec(&config(types), "q").expect("spec").layer_kinds[0], LayerKind::Sliding);
        let e = spec(&config(r#", "use_sliding_window": true, "max_window_layers": 1"#), "q").err();
        assert!(e.is_some_and(|e| e.to_string().contains("no sliding_window")));
    }

    #[test]
    fn a_partial_rotary_factor_is_read_wherever_transformers_saves_it() {
        // Head width 16: 8 frequency pairs over the whole head.
        let pairs = |extra: &str| spec(&config(extra), "q").expect("spec").rope_full.inv_freq.len();
        assert_eq!(pairs(""), 8);
        assert_eq!(pairs(r#", "partial_rotary_factor": 0.5"#), 4, "top level");
        assert_eq!(pairs(r#", "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}"#), 4);
        let per_type =
            r#", "rope_parameters": {"full_attention": {"rope_type": "default", "partial_rotary_factor": 0.25}}"#;
        assert_eq!(pairs(per_type), 2, "transformers 5's per-layer-type form");
        let bad = spec(&config(r#", "rope_parameters": {"partial_rotary_factor": "half"}"#), "q").err();
        assert!(bad.is_some_and(|e| e.to_string().contains("must be a number")));
    }
}
