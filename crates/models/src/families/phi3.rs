//! Phi-3 / Phi-4 (`Phi3ForCausalLM`): Llama's layout with q, k and v stored fused as
//! `qkv_proj` and gate and up as `gate_up_proj` (loaded as their parts, fused.rs), a
//! `sliding_window` on every layer where the config sets one, partial rotary where
//! `partial_rotary_factor` says. LongRoPE (`longrope`: Phi-3.5, Phi-4-mini) loads its short
//! factors and keeps the long ones for an engine of a longer context (longrope.rs).

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::fused::FusedRows;
use crate::spec::{Common, LayerKind, ModelSpec, activation, partial_rope, rotary_dim};
use tf_backend::Activation;

/// The spec of a Phi-3 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    // `partial_rotary_factor` at the top level (released configs) or in `rope_parameters`.
    let (rope, long_rope) = match crate::longrope::read(c, rotary_dim(c, common.head_dim, 1.0)?, 10000.0)? {
        Some((short, long)) => (short, Some(long)),
        None => (partial_rope(c, common.head_dim, 10000.0, 1.0)?, None),
    };
    let (heads, kv, d, inter) = (common.num_heads, common.num_kv_heads, common.head_dim, common.intermediate_size);
    let window = c.opt_dim("sliding_window")?;
    let kinds = vec![if window.is_some() { LayerKind::Sliding } else { LayerKind::Full }; common.num_layers];
    let mut spec = common.spec_with_kinds(c, arch, rope, activation(c, Activation::Silu)?, kinds)?;
    spec.sliding_window = window;
    spec.long_rope = long_rope;
    spec.fused = vec![
        FusedRows {
            fused: "self_attn.qkv_proj.weight",
            parts: vec![
                ("self_attn.q_proj.weight", heads * d),
                ("self_attn.k_proj.weight", kv * d),
                ("self_attn.v_proj.weight", kv * d),
            ],
        },
        FusedRows {
            fused: "mlp.gate_up_proj.weight",
            parts: vec![("mlp.gate_proj.weight", inter), ("mlp.up_proj.weight", inter)],
        },
    ];
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(extra: &str) -> RawConfig {
        let text = format!(
            r#"{{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
            "num_hidden_layers": 2, "vocab_size": 512{extra}}}"#
        );
        RawConfig::parse(Path::new("config.json"), &text).expect("config")
    }

    #[test]
    fn fused_parts_by_the_config_and_longrope_read_with_its_sets_checked() {
        let s = spec(&config(r#", "sliding_window": 2047"#), "p").expect("spec");
        assert_eq!(s.fused[0].parts.iter().map(|p| p.1).collect::<Vec<_>>(), [64, 32, 32]);
        assert_eq!(s.fused[1].parts.iter().map(|p| p.1).collect::<Vec<_>>(), [96, 96]);
        assert_eq!((s.layer_kinds[1], s.sliding_window), (LayerKind::Sliding, Some(2047)));
        let long = r#", "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [2.0]},
            "original_max_position_embeddings": 16"#;
        assert!(spec(&config(long), "p").err().is_some_and(|e| e.to_string().contains("'short_factor' has 1")));
        let eight = "[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]";
        let long = format!(
            r#", "rope_scaling": {{"type": "longrope", "short_factor": {eight}, "long_factor": {eight}}},
            "original_max_position_embeddings": 16"#
        );
        let s = spec(&config(&long), "p").expect("spec");
        assert_eq!(s.long_rope.map(|l| (l.original, l.long.inv_freq.len())), Some((16, 8)));
        let s = spec(&config(r#", "partial_rotary_factor": 0.75"#), "p").expect("spec");
        assert_eq!(s.rope_full.inv_freq.len(), 6, "12 of 16 dims rotate");
        let nested =
            r#", "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}"#;
        assert_eq!(spec(&config(nested), "p").expect("spec").rope_full.inv_freq.len(), 4);
    }
}
