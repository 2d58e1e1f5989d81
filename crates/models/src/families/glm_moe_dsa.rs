//! GLM-5 (`GlmMoeDsaForCausalLM`) and DeepSeek V3.2 (`DeepseekV32ForCausalLM`), one architecture:
//! DeepSeek V3's latent attention (deepseek_v3.rs; rope always interleaved, the query always
//! low-rank) with DeepSeek sparse attention, a lightning indexer per layer
//! (`blocks/dsa_indexer.rs`: `index_n_heads` heads of `index_head_dim`, `index_topk` keys kept per
//! query), and GLM-4.5's experts with `mlp_layer_types` (else `first_k_dense_replace`, 3 by
//! default) naming the dense layers. The two differ only in the indexer's rope: GLM-5's pairs
//! are interleaved, DeepSeek V3.2's rotate-half. GLM's `indexer_types` "shared" layers (an
//! earlier layer's top-k reused) are refused by name; the `num_nextn_predict_layers` MTP layers
//! are left unread (MTP drafting, `crate::mtp`, runs DeepSeek V3's dense latent attention only).

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::families::deepseek_v3::latent_spec;
use crate::families::glm4_moe::experts_and_mtp;
use crate::spec::{Common, IndexerSpec, LayerKind, MlaSpec, ModelSpec};
use serde_json::Value;

/// Whether `arch` is GLM-5's (interleaved indexer rope, `indexer_types`).
fn is_glm(arch: &str) -> bool {
    matches!(arch, "GlmMoeDsaForCausalLM" | "glm_moe_dsa")
}

/// The spec of a GLM-5 or DeepSeek V3.2 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let common = Common::read(c)?;
    let glm = is_glm(arch);
    let q_lora_rank = c.opt_dim("q_lora_rank")?.ok_or_else(|| {
        c.error(
            "q_lora_rank null (one q_proj) is not supported: the sparse attention's indexer reads the low-rank query",
        )
    })?;
    if !c.flag("rope_interleave", true)? {
        return Err(
            c.error("rope_interleave false is not supported: this architecture's attention interleaves its rope")
        );
    }
    let indexer = IndexerSpec {
        n_heads: c.opt_dim("index_n_heads")?.unwrap_or(if glm { 32 } else { 64 }),
        head_dim: c.opt_dim("index_head_dim")?.unwrap_or(128),
        topk: c.opt_dim("index_topk")?.unwrap_or(2048),
        rope_interleave: glm,
    };
    let mla = MlaSpec {
        q_lora_rank: Some(q_lora_rank),
        kv_lora_rank: c.dim("kv_lora_rank")?,
        qk_nope_head_dim: c.dim("qk_nope_head_dim")?,
        qk_rope_head_dim: c.dim("qk_rope_head_dim")?,
        v_head_dim: c.dim("v_head_dim")?,
        rope_interleave: true,
        indexer: Some(indexer),
    };
    if indexer.head_dim < mla.qk_rope_head_dim {
        return Err(c.error(format!(
            "index_head_dim {} is narrower than its roped part, qk_rope_head_dim {}",
            indexer.head_dim, mla.qk_rope_head_dim
        )));
    }
    check_layer_types(c, common.num_layers)?;
    if glm {
        check_indexer_types(c, common.num_layers)?;
    }
    let num_layers = common.num_layers;
    let mut spec = latent_spec(c, arch, common, mla, vec![LayerKind::Full; num_layers])?;
    experts_and_mtp(c, &mut spec)?;
    let sparse = sparse_layers(c, num_layers)?;
    if let Some(moe) = spec.moe.as_mut() {
        moe.sparse_layers = sparse;
    }
    Ok(spec)
}

/// `layer_types` must be absent or every entry `indexed_attention`.
fn check_layer_types(c: &RawConfig, num_layers: usize) -> Result<(), ModelError> {
    let Some(types) = c.get("layer_types") else { return Ok(()) };
    let list = types.as_array().ok_or_else(|| c.error(format!("layer_types must be a list, found {types}")))?;
    if list.len() != num_layers {
        return Err(c.error(format!("layer_types has {} entries for {num_layers} layers", list.len())));
    }
    match list.iter().find(|t| t.as_str() != Some("indexed_attention")) {
        Some(t) => Err(c.error(format!("layer_types: {t} is not supported (every layer is indexed_attention)"))),
        None => Ok(()),
    }
}

/// GLM's per-layer indexer mode, as transformers derives it: `indexer_types`, else
/// `index_topk_pattern` (`F` full, `S` shared), else `index_topk_freq` /
/// `index_skip_topk_offset`; any `shared` layer is refused by name.
fn check_indexer_types(c: &RawConfig, num_layers: usize) -> Result<(), ModelError> {
    let list = |v: &Value| -> Option<Vec<String>> {
        match v {
            Value::String(s) => s.chars().map(|ch| Some(if ch == 'S' { "shared" } else { "full" }.into())).collect(),
            Value::Array(a) => a.iter().map(|t| t.as_str().map(str::to_string)).collect(),
            _ => None,
        }
    };
    let (key, types) = if let Some(v) = c.get("indexer_types") {
        (
            "indexer_types",
            list(v).ok_or_else(|| c.error(format!("indexer_types must be a list of strings, found {v}")))?,
        )
    } else if let Some(v) = c.get("index_topk_pattern") {
        let bad = || c.error(format!("index_topk_pattern must be a string of F and S or a list, found {v}"));
        if v.as_str().is_some_and(|s| s.chars().any(|ch| ch != 'F' && ch != 'S')) {
            return Err(bad());
        }
        ("index_topk_pattern", list(v).ok_or_else(bad)?)
    } else {
        let freq = c.get("index_topk_freq").and_then(Value::as_i64).unwrap_or(1).max(1);
        let offset = c.get("index_skip_topk_offset").and_then(Value::as_i64).unwrap_or(2);
        let full = |i: i64| (i - offset + 1).max(0) % freq == 0;
        (
            "index_topk_freq",
            (0..num_layers as i64).map(|i| if full(i) { "full" } else { "shared" }.to_string()).collect(),
        )
    };
    for (i, t) in types.iter().enumerate() {
        match t.as_str() {
            "full" => {}
            "shared" => {
                return Err(c.error(format!(
                    "{key}: layer {i} is 'shared' (it reuses an earlier layer's top-k), which is not supported"
                )));
            }
            other => return Err(c.error(format!("{key}: layer {i} is '{other}', neither 'full' nor 'shared'"))),
        }
    }
    Ok(())
}

/// Which layers run experts: `mlp_layer_types` (`dense` / `sparse`) where given, else the layers
/// from `first_k_dense_replace` (3 by default) on.
fn sparse_layers(c: &RawConfig, num_layers: usize) -> Result<Vec<bool>, ModelError> {
    let Some(v) = c.get("mlp_layer_types") else {
        let first_dense = c.opt_dim("first_k_dense_replace")?.unwrap_or(3);
        return Ok((0..num_layers).map(|i| i >= first_dense).collect());
    };
    let types = v.as_array().ok_or_else(|| c.error(format!("mlp_layer_types must be a list, found {v}")))?;
    if types.len() != num_layers {
        return Err(c.error(format!("mlp_layer_types has {} entries for {num_layers} layers", types.len())));
    }
    (types.iter())
        .map(|t| match t.as_str() {
            Some("dense") => Ok(false),
            Some("sparse") => Ok(true),
            _ => Err(c.error(format!("mlp_layer_types: {t} is neither \"dense\" nor \"sparse\""))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The glm_moe_dsa fixture's config with `change` merged over it.
    fn config(change: &str) -> RawConfig {
        let mut v: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16,
            "intermediate_size": 128, "num_hidden_layers": 3, "vocab_size": 512, "moe_intermediate_size": 32,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
            "routed_scaling_factor": 2.5, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 24,
            "qk_rope_head_dim": 16, "v_head_dim": 20, "num_nextn_predict_layers": 1, "first_k_dense_replace": 1,
            "index_n_heads": 16, "index_head_dim": 32, "index_topk": 8,
            "indexer_types": ["full", "full", "full"],
            "layer_types": ["indexed_attention", "indexed_attention", "indexed_attention"],
            "mlp_layer_types": ["dense", "sparse", "sparse"],
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 64, "mscale": 1.0, "mscale_all_dim": 0.8}}"#,
        )
        .expect("json");
        let extra: serde_json::Map<String, Value> = serde_json::from_str(change).expect("json");
        v.extend(extra);
        RawConfig::parse(Path::new("config.json"), &Value::Object(v).to_string()).expect("config")
    }

    #[test]
    fn reads_the_indexer_beside_the_latent_attention() {
        let s = spec(&config("{}"), "GlmMoeDsaForCausalLM").expect("spec");
        let m = s.mla.expect("mla");
        let ix = m.indexer.expect("indexer");
        assert_eq!((ix.n_heads, ix.head_dim, ix.topk, ix.rope_interleave), (16, 32, 8, true));
        assert!(m.rope_interleave);
        assert_eq!((s.num_kv_heads, s.head_dim), (1, 32 + 16 + 32), "the slot: latent row, then the index key");
        assert_eq!(s.moe.expect("moe").sparse_layers, vec![false, true, true]);
        assert_eq!(s.unread_prefixes, vec!["model.layers.3.".to_string()]);
        let m = s.mtp.expect("an MTP layer");
        assert!(m.unsupported.is_none() && m.sparse, "the MTP layer drafts, its MLP the routed experts");
        let v32 = spec(&config(r#"{"indexer_types": null}"#), "DeepseekV32ForCausalLM").expect("spec");
        assert!(!v32.mla.and_then(|m| m.indexer).expect("indexer").rope_interleave, "rotate-half indexer rope");
    }

    #[test]
    fn mlp_layer_types_outrank_first_k_dense_replace_and_its_default_is_three() {
        let c = config(r#"{"mlp_layer_types": ["dense", "dense", "sparse"]}"#);
        assert_eq!(spec(&c, "glm_moe_dsa").expect("spec").moe.expect("moe").sparse_layers, vec![false, false, true]);
        let c = config(
            r#"{"mlp_layer_types": null, "first_k_dense_replace": null, "num_hidden_layers": 4,
            "layer_types": null, "indexer_types": null}"#,
        );
        assert_eq!(
            spec(&c, "deepseek_v32").expect("spec").moe.expect("moe").sparse_layers,
            vec![false, false, false, true]
        );
    }

    #[test]
    fn refuses_options_it_does_not_run_by_name() {
        for (change, named) in [
            (r#"{"indexer_types": ["full", "shared", "full"]}"#, "indexer_types: layer 1 is 'shared'"),
            (r#"{"indexer_types": null, "index_topk_pattern": "FFS"}"#, "index_topk_pattern: layer 2 is 'shared'"),
            (r#"{"indexer_types": null, "index_topk_freq": 2}"#, "index_topk_freq: layer 2 is 'shared'"),
            (r#"{"index_topk": 0}"#, "index_topk"),
            (r#"{"index_topk": -3}"#, "index_topk"),
            (r#"{"index_head_dim": 8}"#, "index_head_dim 8"),
            (r#"{"q_lora_rank": null}"#, "q_lora_rank"),
            (r#"{"rope_interleave": false}"#, "rope_interleave"),
            (r#"{"layer_types": ["indexed_attention", "full_attention", "indexed_attention"]}"#, "layer_types"),
            (r#"{"mlp_layer_types": ["dense", "moe", "sparse"]}"#, "mlp_layer_types"),
            (r#"{"attention_bias": true}"#, "attention_bias"),
        ] {
            let e = spec(&config(change), "GlmMoeDsaForCausalLM").err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(named), "{change}: {e}");
        }
        // transformers' default schedule (freq 1, offset 2) keeps every layer full.
        assert!(spec(&config(r#"{"indexer_types": null}"#), "GlmMoeDsaForCausalLM").is_ok());
    }
}
