//! MiniMax M3's text decoder (`MiniMaxM3SparseForConditionalGeneration`, `minimax_m3_vl`: the
//! text part of the released vision-language checkpoint, `language_model.model.*` and
//! `language_model.lm_head`; the vision tower and projector are left unread). `(1 + w)` RMS
//! norms everywhere, the QK norm per head, partial rotary; full attention layers and
//! block-sparse ones (`layer_types` `minimax_m3_sparse`) whose lightning indexer
//! (`self_attn.index_{q,k}_proj`, `index_{q,k}_norm`) chooses each query's key blocks
//! (blocks/indexer.rs); dense MLP layers (`mlp_layer_types` `dense`, `dense_intermediate_size`)
//! and MoE layers (`block_sparse_moe`: experts `w1/w3/w2` chosen by sigmoid scores plus
//! `e_score_correction_bias`, the chosen scores renormalised times `routed_scaling_factor`, plus
//! a shared MLP of `shared_intermediate_size`); every MLP the clamped SwiGLU (`swiglu_alpha`
//! 1.702, `swiglu_limit` 7). The legacy `sparse_attention_config` and `moe_layer_freq` fields
//! are read as transformers reads them.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::names::Names;
use crate::spec::{Common, IndexSpec, LayerKind, ModelSpec, MoeSpec, SharedExperts, partial_rope};
use serde_json::Value;
use tf_backend::{Activation, MoeScoring, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT};

/// The spec of a MiniMax M3 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    if let Some(a) = c.opt_str("hidden_act").filter(|a| !matches!(*a, "silu" | "swigluoai")) {
        return Err(c.error(format!("hidden_act {a}: MiniMax M3's MLPs are the clamped SwiGLU (swigluoai)")));
    }
    for (field, want) in [("swiglu_alpha", SWIGLU_OAI_ALPHA), ("swiglu_limit", SWIGLU_OAI_LIMIT)] {
        if let Some(v) = c.opt_f32(field)?.filter(|v| *v != want) {
            return Err(c.error(format!("{field} {v}: only {want} is supported")));
        }
    }
    let rope = partial_rope(c, common.head_dim, 5_000_000.0, 1.0)?;
    let rotary = 2 * rope.inv_freq.len();
    // transformers rotates what `partial_rotary_factor` says and never reads `rotary_dim`.
    if let Some(d) = c.opt_dim("rotary_dim")?.filter(|&d| d != rotary) {
        return Err(c.error(format!(
            "rotary_dim {d} disagrees with the {rotary} dims partial_rotary_factor rotates (transformers reads only the latter)"
        )));
    }
    let n = common.num_layers;
    let sparse_attn = per_layer(c, "layer_types", n, "full_attention", "minimax_m3_sparse", "sparse_attention_freq")?;
    let sparse_mlp = per_layer(c, "mlp_layer_types", n, "dense", "sparse", "moe_layer_freq")?;
    let index = index_spec(c, &common, rotary, sparse_attn)?;
    let dense_width = c.opt_dim("dense_intermediate_size")?.unwrap_or(12288);
    let expert_width = common.intermediate_size;
    let mut spec = common.spec_with_kinds(c, arch, rope, Activation::SwigluOai, vec![LayerKind::Full; n])?;
    spec.intermediate_size = dense_width;
    spec.norm_one_plus = true;
    spec.qk_norm = true;
    spec.index = Some(index);
    spec.names = Names {
        embed: "language_model.model.embed_tokens.weight",
        layers: "language_model.model.layers.",
        final_norm: "language_model.model.norm.weight",
        lm_head: "language_model.lm_head.weight",
        ..Names::default()
    };
    spec.unread_prefixes = ["vision_tower.", "multi_modal_projector.", "patch_merge_mlp."].map(String::from).to_vec();
    let num_experts = match c.opt_dim("num_local_experts")? {
        Some(e) => e,
        None => c.opt_dim("num_experts")?.unwrap_or(128),
    };
    let top_k = c.opt_dim("num_experts_per_tok")?.unwrap_or(4);
    let mut moe = MoeSpec::softmax(num_experts, top_k, expert_width, true, sparse_mlp);
    moe.scoring = MoeScoring::Sigmoid;
    moe.module = "block_sparse_moe";
    moe.choice_bias = Some("e_score_correction_bias");
    moe.expert_names = ["w1", "w3", "w2"];
    moe.routed_scaling_factor = c.opt_f32("routed_scaling_factor")?.unwrap_or(2.0);
    moe.shared = Some(SharedExperts {
        module: "shared_experts",
        intermediate_size: c.opt_dim("shared_intermediate_size")?.unwrap_or(3072),
        gate: None,
        names: Some(["gate_proj", "up_proj", "down_proj"]),
        beside: false,
    });
    if let Some(why) = moe.params(spec.act).check(num_experts, Some(num_experts)) {
        return Err(c.error(format!("router: {why}")));
    }
    spec.moe = Some(moe);
    Ok(spec)
}

/// A per-layer choice between two kinds, from `key` (a list of `off` / `on` names) or the legacy
/// `legacy` list of 0 / 1 flags (inside `sparse_attention_config` for the attention); all `on`
/// for the MLP and all `off` for the attention when neither says, as transformers defaults.
fn per_layer(c: &RawConfig, key: &str, n: usize, off: &str, on: &str, legacy: &str) -> Result<Vec<bool>, ModelError> {
    let nested = c.get("sparse_attention_config").and_then(|s| s.get(legacy)).filter(|v| !v.is_null());
    let list = match (c.get(key), nested.or_else(|| c.get(legacy))) {
        (Some(Value::Array(a)), _) => a
            .iter()
            .map(|t| match t.as_str() {
                Some(t) if t == off => Ok(false),
                Some(t) if t == on => Ok(true),
                _ => Err(c.error(format!("{key}: unknown entry {t} (only {off} and {on})"))),
            })
            .collect::<Result<Vec<bool>, _>>()?,
        (Some(v), _) => return Err(c.error(format!("{key} must be a list, found {v}"))),
        (None, Some(Value::Array(a))) => a
            .iter()
            .map(|f| match (f.as_bool(), f.as_u64()) {
                (Some(b), _) => Ok(b),
                (_, Some(x)) => Ok(x != 0),
                _ => Err(c.error(format!("{legacy}: entry {f} is not a flag"))),
            })
            .collect::<Result<Vec<bool>, _>>()?,
        (None, Some(v)) => return Err(c.error(format!("{legacy} must be a list, found {v}"))),
        (None, None) => vec![key == "mlp_layer_types"; n],
    };
    if list.len() != n {
        return Err(c.error(format!("{key} has {} entries for {n} layers", list.len())));
    }
    Ok(list)
}

/// An indexer field: `sparse_attention_config`'s legacy name first (transformers lets it win),
/// then the flat one, then transformers' default; zero allowed only where `zero_ok`.
fn index_field(c: &RawConfig, flat: &str, legacy: &str, default: usize, zero_ok: bool) -> Result<usize, ModelError> {
    let v = c.get("sparse_attention_config").and_then(|s| s.get(legacy)).filter(|v| !v.is_null());
    let Some(v) = v.or_else(|| c.get(flat)) else { return Ok(default) };
    match v.as_u64() {
        Some(x) if (x > 0 || zero_ok) && x <= 1 << 31 => Ok(x as usize),
        _ => Err(c.error(format!(
            "'{flat}' must be a {} integer, found {v}",
            if zero_ok { "non-negative" } else { "positive" }
        ))),
    }
}

/// The indexer's settings, checked against the attention they choose for.
fn index_spec(c: &RawConfig, m: &Common, rotary: usize, layers: Vec<bool>) -> Result<IndexSpec, ModelError> {
    let x = IndexSpec {
        num_heads: index_field(c, "index_n_heads", "sparse_num_index_heads", 4, false)?,
        head_dim: index_field(c, "index_head_dim", "sparse_index_dim", 128, false)?,
        block_size: index_field(c, "index_block_size", "sparse_block_size", 128, false)?,
        topk: index_field(c, "index_topk_blocks", "sparse_topk_blocks", 16, false)?,
        local: index_field(c, "index_local_blocks", "sparse_local_block", 1, true)?,
        layers,
    };
    if !m.num_heads.is_multiple_of(x.num_heads) {
        return Err(
            c.error(format!("index_n_heads {} does not divide num_attention_heads {}", x.num_heads, m.num_heads))
        );
    }
    if x.head_dim < rotary || !x.head_dim.is_multiple_of(2) {
        return Err(c.error(format!(
            "index_head_dim {}: the indexer's heads must be even and hold the {rotary} rotary dims",
            x.head_dim
        )));
    }
    let slot = m.num_kv_heads * m.head_dim;
    if x.head_dim > slot {
        return Err(c.error(format!(
            "index_head_dim {} is wider than a KV slot (num_key_value_heads * head_dim = {slot}), where its keys are kept",
            x.head_dim
        )));
    }
    if x.local > x.topk {
        return Err(c.error(format!(
            "index_local_blocks {} above index_topk_blocks {}: which local blocks transformers keeps is its top-k's tie order",
            x.local, x.topk
        )));
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A small config with `extra` fields set.
    fn config(extra: &str) -> RawConfig {
        let text = format!(
            r#"{{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "intermediate_size": 32, "dense_intermediate_size": 96, "shared_intermediate_size": 48,
            "num_hidden_layers": 3, "vocab_size": 512, "num_local_experts": 8, "num_experts_per_tok": 2,
            "rope_parameters": {{"rope_theta": 5000000.0, "partial_rotary_factor": 0.5}},
            "layer_types": ["full_attention", "minimax_m3_sparse", "minimax_m3_sparse"],
            "mlp_layer_types": ["dense", "sparse", "sparse"], "index_n_heads": 2, "index_head_dim": 16,
            "index_block_size": 4, "index_topk_blocks": 3, "index_local_blocks": 1{extra}}}"#
        );
        RawConfig::parse(Path::new("config.json"), &text).expect("config")
    }

    #[test]
    fn reads_the_indexer_the_layer_types_and_the_experts() {
        let s = spec(&config(""), "MiniMaxM3SparseForConditionalGeneration").expect("spec");
        let x = s.index.clone().expect("index");
        assert_eq!((x.num_heads, x.head_dim, x.block_size, x.topk, x.local), (2, 16, 4, 3, 1));
        assert_eq!(x.layers, vec![false, true, true]);
        let m = s.moe.clone().expect("moe");
        assert_eq!(m.sparse_layers, vec![false, true, true]);
        assert_eq!((m.scoring, m.routed_scaling_factor, m.moe_intermediate_size), (MoeScoring::Sigmoid, 2.0, 32));
        assert_eq!(m.shared.expect("shared").intermediate_size, 48);
        assert_eq!((s.intermediate_size, s.act, s.norm_one_plus), (96, Activation::SwigluOai, true));
        assert_eq!(s.rope_full.inv_freq.len(), 8, "16 of 32 dims rotate");
        // Slots of 2 x 32 values: 4 indexer keys of 16 per half, so both sparse layers share pool 0.
        assert_eq!((s.attn_pools(), s.index_pools()), (3, 1));
        assert_eq!(
            (s.index_slot(0), s.index_slot(1), s.index_slot(2)),
            (None, Some((0, false, 0)), Some((0, false, 16)))
        );
    }

    #[test]
    fn reads_the_legacy_sparse_attention_config() {
        let c = config(
            r#", "sparse_attention_config": {"sparse_attention_freq": [0, 1, 0], "sparse_block_size": 8, "sparse_local_block": 0}"#,
        );
        let text = c.get("layer_types").is_some();
        assert!(text, "the flat list wins over the legacy one, as transformers' layer_types does");
        let x = spec(&c, "minimax_m3_vl").expect("spec").index.expect("index");
        assert_eq!((x.block_size, x.local, x.layers), (8, 0, vec![false, true, true]));
    }

    #[test]
    fn refuses_what_it_does_not_run() {
        for (extra, says) in [
            (r#", "swiglu_limit": 8.0"#, "swiglu_limit"),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (r#", "rotary_dim": 32"#, "rotary_dim 32"),
            (r#", "index_n_heads": 3"#, "index_n_heads 3"),
            (r#", "index_head_dim": 8"#, "index_head_dim 8"),
            (r#", "index_head_dim": 80"#, "wider than a KV slot"),
            (r#", "index_local_blocks": 4"#, "index_local_blocks 4"),
            (r#", "index_block_size": 0"#, "index_block_size"),
            (r#", "num_experts_per_tok": 9"#, "router"),
        ] {
            let e = spec(&config(extra), "minimax_m3_vl").err().map(|e| e.to_string());
            assert!(e.as_deref().is_some_and(|e| e.contains(says)), "{extra}: {e:?}");
        }
        let bad = r#", "layer_types": ["full_attention", "sliding_attention", "minimax_m3_sparse"]"#;
        let e = spec(&config(bad), "minimax_m3_vl").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("sliding_attention"), "{e}");
    }
}
