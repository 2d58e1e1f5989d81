//! Mistral (`MistralForCausalLM`: Mistral 7B, Ministral, Mistral Small, Mistral NeMo): Llama's
//! layout; a `sliding_window`, where the config sets one, on every layer.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, LayerKind, ModelSpec, activation};
use tf_backend::Activation;

/// The spec of a Mistral checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    let rope = common.rope(c, "full_attention", 10000.0)?;
    let window = c.opt_dim("sliding_window")?;
    let kind = if window.is_some() { LayerKind::Sliding } else { LayerKind::Full };
    let kinds = vec![kind; common.num_layers];
    let mut spec = common.spec_with_kinds(c, arch, rope, activation(c, Activation::Silu)?, kinds)?;
    spec.sliding_window = window;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(extra: &str) -> RawConfig {
        let text = format!(
            r#"{{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
            "num_hidden_layers": 2, "vocab_size": 512, "head_dim": 32{extra}}}"#
        );
        RawConfig::parse(Path::new("config.json"), &text).expect("config")
    }

    #[test]
    fn a_window_slides_on_every_layer_and_none_is_full_attention() {
        let s = spec(&config(r#", "sliding_window": 4096"#), "m").expect("spec");
        assert_eq!((s.layer_kinds, s.sliding_window, s.head_dim), (vec![LayerKind::Sliding; 2], Some(4096), 32));
        let s = spec(&config(r#", "sliding_window": null"#), "m").expect("spec");
        assert_eq!((s.layer_kinds, s.sliding_window), (vec![LayerKind::Full; 2], None));
        assert!(spec(&config(r#", "attention_bias": true"#), "m").is_err(), "Mistral has no biases");
    }
}
