//! Config counts bounded by what the checkpoint's tensor headers can hold, checked before any
//! structure is sized from them: a layer count above the number of tensors, an expert count
//! above the largest tensor dimension, or a width, head count or vocabulary above the largest
//! tensor's element count is refused naming the field (a 265 KB checkpoint cannot claim 2^31
//! layers and have 2 GB allocated for them).

use crate::config::RawConfig;
use crate::error::ModelError;

/// What the tensor headers hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorBounds {
    /// Tensors in the checkpoint.
    pub tensors: usize,
    /// The largest single dimension of any tensor.
    pub max_dim: usize,
    /// The largest element count of any tensor.
    pub max_elements: usize,
}

impl TensorBounds {
    /// The bounds of tensors of these shapes.
    pub fn of<'a>(shapes: impl IntoIterator<Item = &'a [usize]>) -> TensorBounds {
        shapes.into_iter().fold(TensorBounds::default(), |b, s| TensorBounds {
            tensors: b.tensors + 1,
            max_dim: b.max_dim.max(s.iter().copied().max().unwrap_or(1)),
            max_elements: b.max_elements.max(s.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX)),
        })
    }
}

/// Layer counts: every layer has at least one tensor of its own.
const LAYER_FIELDS: &[&str] = &["num_hidden_layers", "num_layers", "n_layers"];

/// Expert counts: a router weight has one row per expert.
const EXPERT_FIELDS: &[&str] = &["num_experts", "num_local_experts", "n_routed_experts", "n_shared_experts"];

/// Widths, head counts and the vocabulary: each is a dimension of some weight.
const SIZE_FIELDS: &[&str] = &[
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "moe_shared_expert_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_experts_per_tok",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "moe_latent_size",
    "dense_intermediate_size",
    "shared_intermediate_size",
    "index_n_heads",
    "index_head_dim",
    "block_ff_dim",
    "rotary_dim",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
];

/// Refuses the first count field of `config` that the tensors described by `b` cannot hold.
pub fn check(config: &RawConfig, b: &TensorBounds) -> Result<(), ModelError> {
    let groups: [(&[&str], usize, &str); 3] = [
        (LAYER_FIELDS, b.tensors, "tensors in the checkpoint (every layer has at least one)"),
        (EXPERT_FIELDS, b.max_dim, "as the largest dimension of any tensor (a router has a row per expert)"),
        (SIZE_FIELDS, b.max_elements, "as the elements of the largest tensor"),
    ];
    for (fields, bound, what) in groups {
        for &field in fields {
            let Some(n) = config.get(field).and_then(serde_json::Value::as_u64) else { continue };
            if n > bound as u64 {
                return Err(config.error(format!("'{field}' is {n}, but there are only {bound} {what}")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cfg(text: &str) -> RawConfig {
        RawConfig::parse(Path::new("config.json"), text).unwrap()
    }

    #[test]
    fn counts_past_the_tensors_are_refused_naming_the_field() {
        let shapes: [&[usize]; 3] = [&[256, 64], &[64], &[8, 64]];
        let b = TensorBounds::of(shapes);
        assert_eq!(b, TensorBounds { tensors: 3, max_dim: 256, max_elements: 16384 });
        assert!(check(&cfg(r#"{"num_hidden_layers": 3, "hidden_size": 64, "num_experts": 8}"#), &b).is_ok());
        let msg = check(&cfg(r#"{"num_hidden_layers": 2147483647}"#), &b).unwrap_err().to_string();
        assert!(msg.contains("'num_hidden_layers' is 2147483647") && msg.contains("only 3 tensors"), "{msg}");
        let msg = check(&cfg(r#"{"num_experts": 257}"#), &b).unwrap_err().to_string();
        assert!(msg.contains("'num_experts' is 257"), "{msg}");
        let msg = check(&cfg(r#"{"head_dim": 16385}"#), &b).unwrap_err().to_string();
        assert!(msg.contains("'head_dim' is 16385"), "{msg}");
    }
}
