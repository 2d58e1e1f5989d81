//! MiniMax-M2 (`MiniMaxM2ForCausalLM`): full attention with the QK norm over each token's whole
//! q and k projections (`qk_norm_type` `per_layer`) and partial rotary (`rotary_dim` or
//! `partial_rotary_factor`); every layer's MLP is `num_local_experts` experts
//! (`block_sparse_moe.experts.{e}.w1/w3/w2`, `intermediate_size` wide) chosen by sigmoid scores
//! plus `e_score_correction_bias`, weighted by the chosen sigmoid scores renormalised.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, LayerKind, ModelSpec, MoeSpec, activation, partial_rope};
use tf_backend::{Activation, MoeScoring, Rope};

/// The spec of a MiniMax-M2 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    let rope = rope(c, common.head_dim)?;
    if activation(c, Activation::Silu)? != Activation::Silu {
        return Err(c.error("hidden_act must be silu"));
    }
    let mut spec = common.spec(c, arch, rope, Activation::Silu)?;
    if spec.layer_kinds.iter().any(|k| *k != LayerKind::Full) {
        return Err(c.error("minimax_m2 layers are full attention only"));
    }
    if let Some(t) = c.opt_str("qk_norm_type").filter(|t| *t != "per_layer") {
        return Err(c.error(format!("qk_norm_type {t}: only per_layer (one norm over all heads) is supported")));
    }
    if let Some(f) = c.opt_str("scoring_func").filter(|f| *f != "sigmoid") {
        return Err(c.error(format!("scoring_func {f}: the router is sigmoid-scored")));
    }
    spec.qk_norm = true;
    spec.qk_norm_full = true;
    let num_experts = c.dim("num_local_experts")?;
    let top_k = c.dim("num_experts_per_tok")?;
    let mut moe = MoeSpec::softmax(num_experts, top_k, spec.intermediate_size, true, vec![true; spec.num_layers]);
    moe.scoring = MoeScoring::Sigmoid;
    moe.module = "block_sparse_moe";
    moe.choice_bias = Some("e_score_correction_bias");
    moe.expert_names = ["w1", "w3", "w2"];
    if let Some(why) = moe.params(spec.act).check(num_experts, Some(num_experts)) {
        return Err(c.error(format!("router: {why}")));
    }
    spec.moe = Some(moe);
    Ok(spec)
}

/// The rope over `partial_rotary_factor` of each head, or over `rotary_dim` dims as the released
/// checkpoints say; the whole head when neither is set.
fn rope(c: &RawConfig, head_dim: usize) -> Result<Rope, ModelError> {
    let default = c.opt_dim("rotary_dim")?.map_or(1.0, |d| d as f32 / head_dim as f32);
    partial_rope(c, head_dim, 5_000_000.0, default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A small config with `extra` fields set.
    fn config(extra: &str) -> RawConfig {
        let text = format!(
            r#"{{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "intermediate_size": 32, "num_hidden_layers": 2, "vocab_size": 512, "num_local_experts": 8,
            "num_experts_per_tok": 2{extra}}}"#
        );
        RawConfig::parse(Path::new("config.json"), &text).expect("config")
    }

    #[test]
    fn reads_the_router_the_whole_row_qk_norm_and_the_rotary_width() {
        let s = spec(&config(r#", "rotary_dim": 16, "rope_theta": 5000000.0"#), "MiniMaxM2ForCausalLM").expect("spec");
        let m = s.moe.expect("moe");
        assert_eq!(
            (m.scoring, m.top_k, m.norm_topk_prob, m.routed_scaling_factor),
            (MoeScoring::Sigmoid, 2, true, 1.0)
        );
        assert_eq!(
            (m.module, m.choice_bias, m.expert_names),
            ("block_sparse_moe", Some("e_score_correction_bias"), ["w1", "w3", "w2"])
        );
        assert_eq!(m.sparse_layers, vec![true, true]);
        assert!(s.qk_norm && s.qk_norm_full);
        assert_eq!(s.rope_full.inv_freq.len(), 8, "16 of 32 dims rotate");
        let s = spec(&config(""), "MiniMaxM2ForCausalLM").expect("spec");
        assert_eq!(s.rope_full.inv_freq.len(), 16, "no rotary width: the whole head");
    }

    #[test]
    fn refuses_what_it_does_not_run() {
        for (extra, says) in [
            (r#", "qk_norm_type": "per_head""#, "qk_norm_type"),
            (r#", "scoring_func": "softmax""#, "scoring_func"),
            (r#", "num_experts_per_tok": 9"#, "router"),
            (r#", "rotary_dim": 48"#, "rope over 48"),
        ] {
            let e = spec(&config(extra), "MiniMaxM2ForCausalLM").err().map(|e| e.to_string());
            assert!(e.as_deref().is_some_and(|e| e.contains(says)), "{extra}: {e:?}");
        }
    }
}
