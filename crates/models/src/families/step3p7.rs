//! Step 3.5 / 3.7 (`Step3p7ForConditionalGeneration`'s text decoder under `text_config`, and the
//! text-only `Step3p5ForCausalLM` with the same fields at the top level): sliding and full
//! attention layers (`layer_types`) with their own query head count (`num_sliding_attention_heads`
//! or `attention_other_setting`, or `per_layer_config` as transformers saves it), their own rope
//! (`rope_theta` and `partial_rotary_factors` per layer, `rope_scaling` on the full layers only,
//! or `rope_parameters` per layer type), QK norm, a per-head sigmoid output gate (`g_proj`,
//! `gating`), the score scale `query_pre_attn_scalar^-0.5`, `(1 + w)` norms; dense SwiGLU MLPs and
//! MoE layers (`mlp_layer_types` or `moe_layers_enum`): experts stored stacked
//! (`moe.{gate,up,down}_proj.weight`) chosen by sigmoid scores plus `moe.router_bias`, the
//! chosen scores renormalised and scaled (`moe_router_scaling_factor`), plus the `share_expert`
//! MLP of `share_expert_dim`; gate/up clamps per layer (`swiglu_limits` on the experts,
//! `swiglu_limits_shared` on the shared expert and the dense MLP). The checkpoint's
//! `num_nextn_predict_layers` MTP layers (`model.layers.{num_hidden_layers + j}.`) are read only
//! for drafting, the first of them (`MtpLayout::Step`, [`mtp_layer`]); its vision tower
//! (`vision_model.*`, `vit_large_projector.*`) is left unread.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::spec::{Common, LayerKind, ModelSpec, MoeSpec, MtpLayout, MtpSpec, SharedExperts};
use serde_json::{Map, Value};
use tf_backend::rope::RopeScaling;
use tf_backend::{Activation, MoeScoring, Rope};

/// Layer type names as `layer_types` spells them.
const FULL: &str = "full_attention";
/// See [`FULL`].
const SLIDING: &str = "sliding_attention";

/// The spec of a Step 3.5 / 3.7 checkpoint.
pub fn spec(c: &RawConfig, arch: &str) -> Result<ModelSpec, ModelError> {
    let composite = arch.starts_with("Step3p7") || arch == "step3p7";
    let nested = match c.nested("text_config") {
        Some(t) => t,
        None if composite => return Err(c.error(format!("{arch} needs a text_config object"))),
        None => c.with_fields(Map::new()),
    };
    let t = if composite { &nested } else { c };
    refuse_unsupported(t)?;
    let n = t.opt_dim("num_hidden_layers")?.unwrap_or(45);
    let mtp = match t.get("num_nextn_predict_layers") {
        Some(v) if v.as_u64() == Some(0) => 0,
        _ => t.opt_dim("num_nextn_predict_layers")?.unwrap_or(0),
    };
    let lists = Lists { t, n, mtp };
    let types: Vec<String> = match lists.strings("layer_types")? {
        Some(v) => v,
        None => vec![FULL.to_string(); n],
    };
    let kinds = types
        .iter()
        .map(|s| match s.as_str() {
            FULL => Ok(LayerKind::Full),
            SLIDING => Ok(LayerKind::Sliding),
            other => {
                Err(t.error(format!("layer type '{other}' is not supported for Step (full or sliding attention)")))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let common = common(t, n)?;
    let (rope_full, rope_sliding) = ropes(t, &lists, &types, common.head_dim, common.max_position_embeddings)?;
    let norm = t.with_fields(Map::from_iter([
        ("tie_word_embeddings".to_string(), t.get("tie_word_embeddings").cloned().unwrap_or(Value::Bool(false))),
        ("bos_token_id".to_string(), t.get("bos_token_id").cloned().unwrap_or(Value::Null)),
        ("eos_token_id".to_string(), t.get("eos_token_id").cloned().unwrap_or(Value::Null)),
        ("pad_token_id".to_string(), t.get("pad_token_id").cloned().unwrap_or(Value::from(1))),
    ]));
    let head_dim = common.head_dim;
    let mut spec = common.spec(&norm, arch, rope_full, Activation::Silu)?;
    spec.layer_kinds = kinds;
    spec.rope_sliding = rope_sliding;
    spec.layer_heads = layer_heads(t, &spec)?;
    if spec.layer_kinds.contains(&LayerKind::Sliding) {
        let w = t
            .opt_dim("sliding_window")?
            .ok_or_else(|| t.error("layer_types has sliding layers but no sliding_window"))?;
        spec.sliding_window = Some(w);
    }
    let scalar = t.opt_f32("query_pre_attn_scalar")?.unwrap_or(head_dim as f32);
    if scalar <= 0.0 {
        return Err(t.error(format!("query_pre_attn_scalar must be above 0, found {scalar}")));
    }
    spec.attn_scale = scalar.powf(-0.5);
    spec.qk_norm = true;
    spec.norm_one_plus = true;
    spec.attn_head_gate = true;
    let sparse = sparse_layers(t, &lists)?;
    spec.expert_clamp = lists.limits("swiglu_limits")?;
    spec.mlp_clamp = lists.limits("swiglu_limits_shared")?;
    spec.moe = experts(t, &spec, sparse)?;
    spec.unread_prefixes = (0..mtp).map(|j| format!("model.layers.{}.", n + j)).collect();
    if mtp > 0 {
        spec.mtp = Some(mtp_layer(t, &lists, &spec)?);
    }
    if composite {
        spec.unread_prefixes.extend(["vision_model.".to_string(), "vit_large_projector.".to_string()]);
    }
    Ok(spec)
}

/// The MTP layers as transformers' `get_mtp_config` builds the first: its attention kind from
/// `mtp_layer_types` (saved form) or the padded entry of `layer_types` (released form, full
/// where the list is absent), its channel mixer from `mtp_mlp_layer_types`, the padded entry of
/// `mlp_layer_types`, or `moe_layers_enum` over the padded range (dense where none is given).
/// Where transformers cannot build it (an unpadded list without its `mtp_*` split, a sparse
/// layer beside a decoder without experts, a sliding one without a window) drafting is refused
/// saying why.
fn mtp_layer(t: &RawConfig, lists: &Lists<'_>, s: &ModelSpec) -> Result<MtpSpec, ModelError> {
    let n = lists.n;
    // The first MTP entry of `mtp_key`, else of `key` padded past the decoder's layers:
    // `Some(None)` where `key` is absent, `None` where neither lists one.
    let first = |key: &str, mtp_key: &str| -> Result<Option<Option<String>>, ModelError> {
        let entry = |v: &Value, k: &str, i: usize| match v.as_array().and_then(|a| a.get(i)) {
            Some(Value::String(x)) => Ok(Some(Some(x.clone()))),
            Some(x) => Err(t.error(format!("'{k}' holds {x}"))),
            None => Ok(None),
        };
        match (t.get(mtp_key), t.get(key)) {
            (Some(v), _) => entry(v, mtp_key, 0),
            (None, Some(v)) => entry(v, key, n),
            (None, None) => Ok(Some(None)),
        }
    };
    let mut why = None;
    let kind = match first("layer_types", "mtp_layer_types")? {
        Some(None) => LayerKind::Full,
        Some(Some(k)) if k == FULL => LayerKind::Full,
        Some(Some(k)) if k == SLIDING => LayerKind::Sliding,
        Some(Some(k)) => return Err(t.error(format!("MTP layer type '{k}' is not supported for Step"))),
        None => {
            why = Some(
                "Step's MTP layer has no attention type ('layer_types' lists none after the decoder's and there is no 'mtp_layer_types')",
            );
            LayerKind::Full
        }
    };
    let sparse = match first("mlp_layer_types", "mtp_mlp_layer_types")? {
        Some(Some(k)) if k == "sparse" => true,
        Some(Some(k)) if k == "dense" => false,
        Some(Some(k)) => return Err(t.error(format!("MTP mlp layer type '{k}' is not sparse or dense"))),
        Some(None) => moe_set(t, n)?.contains(&n),
        None => {
            why = why.or(Some("Step's MTP layer has no mlp type ('mlp_layer_types' lists none after the decoder's and there is no 'mtp_mlp_layer_types')"));
            false
        }
    };
    if sparse && s.moe.is_none() {
        why =
            why.or(Some("Step's MTP layer is sparse but no decoder layer is, so there are no expert settings for it"));
    }
    if kind == LayerKind::Sliding && s.sliding_window.is_none() {
        why = why.or(Some("Step's MTP layer is a sliding one but the config has no sliding_window"));
    }
    Ok(MtpSpec { num_layers: lists.mtp, sparse, layout: MtpLayout::Step, own_embed: false, kind, unsupported: why })
}

/// Refuses the options transformers reads that this decoder does not run.
fn refuse_unsupported(t: &RawConfig) -> Result<(), ModelError> {
    if t.flag("use_bidirectional_attention", false)? {
        return Err(t.error("use_bidirectional_attention true is not supported for Step"));
    }
    for key in ["attention_bias", "mlp_bias"] {
        if t.flag(key, false)? {
            return Err(t.error(format!("{key} true is not supported for Step")));
        }
    }
    // transformers gates per head for `true` or "per-head"; any other value builds a gate it
    // cannot apply.
    match t.get("gating") {
        None | Some(Value::Bool(true)) => {}
        Some(Value::String(s)) if s == "per-head" => {}
        Some(v) => return Err(t.error(format!("gating {v} is not supported for Step (true or \"per-head\")"))),
    }
    if t.get("sparse_attention_config").is_some_and(|v| v.as_object().is_none_or(|m| !m.is_empty())) {
        return Err(t.error("sparse_attention_config (sparse attention layers) is not supported for Step"));
    }
    Ok(())
}

/// The size fields with transformers' `Step3p7TextConfig` defaults and its aliases
/// (`num_attention_groups` for `num_key_value_heads`).
fn common(t: &RawConfig, n: usize) -> Result<Common, ModelError> {
    let num_heads = t.opt_dim("num_attention_heads")?.unwrap_or(64);
    let num_kv_heads = alias(t, "num_key_value_heads", "num_attention_groups")?.unwrap_or(8);
    let head_dim = t.opt_dim("head_dim")?.unwrap_or(128);
    if !num_heads.is_multiple_of(num_kv_heads) {
        return Err(
            t.error(format!("num_key_value_heads {num_kv_heads} does not divide num_attention_heads {num_heads}"))
        );
    }
    if !head_dim.is_multiple_of(2) {
        return Err(t.error(format!("head_dim {head_dim} must be even for rope")));
    }
    let rms_norm_eps = t.opt_f32("rms_norm_eps")?.unwrap_or(1e-5);
    if rms_norm_eps <= 0.0 {
        return Err(t.error(format!("rms_norm_eps must be positive, found {rms_norm_eps}")));
    }
    Ok(Common {
        vocab_size: t.opt_dim("vocab_size")?.unwrap_or(128815),
        hidden_size: t.opt_dim("hidden_size")?.unwrap_or(4096),
        intermediate_size: t.opt_dim("intermediate_size")?.unwrap_or(11264),
        num_layers: n,
        num_heads,
        num_kv_heads,
        head_dim,
        rms_norm_eps,
        max_position_embeddings: t.opt_dim("max_position_embeddings")?.unwrap_or(128000),
    })
}

/// A positive integer under `key` or its legacy `alias`, refused when both are set and differ.
fn alias(t: &RawConfig, key: &str, alias: &str) -> Result<Option<usize>, ModelError> {
    match (t.opt_dim(key)?, t.opt_dim(alias)?) {
        (Some(a), Some(b)) if a != b => Err(t.error(format!("{key} {a} and {alias} {b} disagree"))),
        (a, b) => Ok(a.or(b)),
    }
}

/// Per-layer lists of a Step config, which released configs pad with one entry per MTP layer.
struct Lists<'a> {
    t: &'a RawConfig,
    n: usize,
    mtp: usize,
}

impl Lists<'_> {
    /// The list under `key` trimmed to the decoder's layers, `None` when absent.
    fn values(&self, key: &str) -> Result<Option<Vec<Value>>, ModelError> {
        let Some(v) = self.t.get(key) else { return Ok(None) };
        let a = v.as_array().ok_or_else(|| self.t.error(format!("'{key}' must be a list, found {v}")))?;
        if a.len() == self.n || (self.mtp > 0 && a.len() == self.n + self.mtp) {
            return Ok(Some(a[..self.n].to_vec()));
        }
        Err(self.t.error(format!(
            "'{key}' has {} entries for {} layers (and {} MTP layers)",
            a.len(),
            self.n,
            self.mtp
        )))
    }

    /// A list of strings under `key`.
    fn strings(&self, key: &str) -> Result<Option<Vec<String>>, ModelError> {
        let Some(v) = self.values(key)? else { return Ok(None) };
        v.iter()
            .map(|s| s.as_str().map(str::to_string).ok_or_else(|| self.t.error(format!("'{key}' holds {s}"))))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// A list of finite numbers under `key` (one per layer), `None` when absent.
    fn numbers(&self, key: &str) -> Result<Option<Vec<f32>>, ModelError> {
        let Some(v) = self.values(key)? else { return Ok(None) };
        v.iter()
            .map(|x| {
                x.as_f64()
                    .filter(|x| x.is_finite())
                    .map(|x| x as f32)
                    .ok_or_else(|| self.t.error(format!("'{key}' holds {x}, not a finite number")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Clamp limits per layer under `key`: 0 or null is no clamp, a positive value clamps.
    fn limits(&self, key: &str) -> Result<Vec<Option<f32>>, ModelError> {
        let Some(v) = self.values(key)? else { return Ok(Vec::new()) };
        v.iter()
            .map(|x| match x {
                Value::Null => Ok(None),
                _ => match x.as_f64() {
                    Some(0.0) => Ok(None),
                    Some(l) if l.is_finite() && l > 0.0 => Ok(Some(l as f32)),
                    _ => Err(self.t.error(format!("'{key}' holds {x}: a limit is 0 (none) or above 0"))),
                },
            })
            .collect()
    }
}

/// Which layers are MoE: `mlp_layer_types` (`sparse` / `dense`), else [`moe_set`].
fn sparse_layers(t: &RawConfig, lists: &Lists<'_>) -> Result<Vec<bool>, ModelError> {
    if let Some(types) = lists.strings("mlp_layer_types")? {
        return types
            .iter()
            .map(|s| match s.as_str() {
                "sparse" => Ok(true),
                "dense" => Ok(false),
                other => Err(t.error(format!("mlp layer type '{other}' is not sparse or dense"))),
            })
            .collect();
    }
    let set = moe_set(t, lists.n)?;
    Ok((0..lists.n).map(|i| set.contains(&i)).collect())
}

/// The MoE layer indices of `moe_layers_enum` (a comma-separated string or a list), else every
/// decoder layer from 3 on.
fn moe_set(t: &RawConfig, n: usize) -> Result<Vec<usize>, ModelError> {
    let bad = |v: &Value| t.error(format!("moe_layers_enum holds {v}, not a layer index"));
    Ok(match t.get("moe_layers_enum") {
        None => (3..n).collect(),
        Some(Value::String(s)) => s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<usize>().map_err(|_| bad(&Value::from(s))))
            .collect::<Result<_, _>>()?,
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => s.trim().parse::<usize>().map_err(|_| bad(v)),
                _ => v.as_u64().map(|x| x as usize).ok_or_else(|| bad(v)),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(bad(v)),
    })
}

/// Query heads per layer: `per_layer_config`'s `num_attention_heads` where given (as
/// transformers saves it), else `num_sliding_attention_heads` (or the legacy
/// `attention_other_setting.num_attention_heads`) on sliding layers; each a multiple of the KV
/// heads.
fn layer_heads(t: &RawConfig, s: &ModelSpec) -> Result<Vec<usize>, ModelError> {
    let other = t.get("attention_other_setting").and_then(Value::as_object);
    if let Some(o) = other {
        // transformers reads only the head count from it: other shapes must agree.
        for (key, want) in [
            ("num_attention_groups", s.num_kv_heads),
            ("num_key_value_heads", s.num_kv_heads),
            ("head_dim", s.head_dim),
        ] {
            if let Some(v) = o.get(key).filter(|v| v.as_u64() != Some(want as u64)) {
                return Err(t.error(format!("attention_other_setting.{key} {v} differs from the full layers' {want}")));
            }
        }
    }
    let sliding = match t.opt_dim("num_sliding_attention_heads")? {
        Some(h) => h,
        None => match other.and_then(|o| o.get("num_attention_heads")) {
            Some(v) => v
                .as_u64()
                .filter(|&h| h > 0 && h <= 1 << 20)
                .map(|h| h as usize)
                .ok_or_else(|| t.error(format!("attention_other_setting.num_attention_heads {v}")))?,
            None => s.num_heads,
        },
    };
    let mut heads: Vec<usize> =
        s.layer_kinds.iter().map(|k| if *k == LayerKind::Sliding { sliding } else { s.num_heads }).collect();
    if let Some(plc) = t.get("per_layer_config") {
        let plc = plc.as_object().ok_or_else(|| t.error(format!("per_layer_config must be an object, found {plc}")))?;
        heads = vec![s.num_heads; s.num_layers];
        for (key, entry) in plc {
            let i = key.parse::<usize>().ok().filter(|&i| i < s.num_layers);
            let i = i.ok_or_else(|| t.error(format!("per_layer_config names layer '{key}' of {}", s.num_layers)))?;
            let entry =
                entry.as_object().ok_or_else(|| t.error(format!("per_layer_config.{key} must be an object")))?;
            for (field, v) in entry {
                match (field.as_str(), v.as_u64()) {
                    ("num_attention_heads", Some(h)) if h > 0 && h <= 1 << 20 => heads[i] = h as usize,
                    _ => return Err(t.error(format!("per_layer_config.{key}.{field} {v} is not supported for Step"))),
                }
            }
        }
    }
    if let Some((i, h)) = heads.iter().enumerate().find(|(_, h)| !h.is_multiple_of(s.num_kv_heads)) {
        return Err(t.error(format!("layer {i}'s {h} query heads are not a multiple of {} KV heads", s.num_kv_heads)));
    }
    Ok(heads)
}

/// The full and sliding layers' ropes: `rope_parameters` per layer type where it has an entry for
/// every type in use (as transformers saves it), else the released form: `rope_theta` (one value
/// or one per layer), `partial_rotary_factors` (one per layer) and `rope_scaling` merged into
/// the full layers' parameters. Per-layer values must agree within a layer type (transformers
/// takes the first layer's).
fn ropes(
    t: &RawConfig,
    lists: &Lists<'_>,
    types: &[String],
    head_dim: usize,
    max_pos: usize,
) -> Result<(Rope, Rope), ModelError> {
    let used: Vec<&str> = [FULL, SLIDING].into_iter().filter(|k| types.iter().any(|t| t == k)).collect();
    let saved = t.get("rope_parameters").and_then(Value::as_object);
    let per_type = saved.filter(|m| used.iter().all(|k| m.get(*k).is_some_and(Value::is_object)));
    let mut params = Map::new();
    match per_type {
        Some(m) => {
            for k in &used {
                params.insert(k.to_string(), m[*k].clone());
            }
        }
        None if saved.is_some() => {
            return Err(
                t.error("rope_parameters needs an entry for each layer type (full_attention, sliding_attention)")
            );
        }
        None => {
            let thetas = match t.get("rope_theta") {
                Some(Value::Array(_)) => lists.numbers("rope_theta")?,
                _ => t.opt_f32("rope_theta")?.map(|x| vec![x; lists.n]),
            };
            let partials = lists.numbers("partial_rotary_factors")?;
            for k in &used {
                let of = |v: &Option<Vec<f32>>, key: &str| -> Result<Option<f32>, ModelError> {
                    let Some(v) = v else { return Ok(None) };
                    let mut it = types.iter().zip(v).filter(|(ty, _)| ty == k).map(|(_, x)| *x);
                    let first = it.next();
                    match it.find(|x| Some(*x) != first) {
                        Some(x) => Err(t.error(format!("'{key}' differs within the {k} layers ({first:?} and {x})"))),
                        None => Ok(first),
                    }
                };
                let mut p = Map::new();
                p.insert("rope_type".into(), Value::from("default"));
                p.insert("rope_theta".into(), Value::from(of(&thetas, "rope_theta")?.unwrap_or(10000.0)));
                if let Some(f) = of(&partials, "partial_rotary_factors")? {
                    p.insert("partial_rotary_factor".into(), Value::from(f));
                }
                if *k == FULL
                    && let Some(Value::Object(s)) = t.get("rope_scaling")
                {
                    p.extend(s.clone());
                }
                params.insert(k.to_string(), Value::Object(p));
            }
        }
    }
    let rope = |k: &str| -> Result<Rope, ModelError> {
        let Some(Value::Object(p)) = params.get(k) else {
            return Ok(Rope::new(head_dim, 10000.0, &RopeScaling::Default));
        };
        // Only `rope_type` names the scaling (transformers ignores a bare `type` here).
        let mut p = p.clone();
        p.insert("type".into(), p.get("rope_type").cloned().unwrap_or(Value::from("default")));
        let partial = p.get("partial_rotary_factor").and_then(Value::as_f64).unwrap_or(1.0) as f32;
        let one = t.with_fields(Map::from_iter([
            ("rope_parameters".to_string(), Value::Object(Map::from_iter([(k.to_string(), Value::Object(p))]))),
            ("max_position_embeddings".to_string(), Value::from(max_pos)),
        ]));
        let (theta, scaling) = one.rope(k, 10000.0)?;
        let partial = crate::rope_check::partial(t, partial)?;
        let dim = ((head_dim as f32 * partial) as usize) & !1;
        if dim == 0 {
            return Err(t.error(format!("rope over 0 of {head_dim} head dims ({k})")));
        }
        Ok(Rope::new(dim, theta, &scaling))
    };
    let full = if used.contains(&FULL) { rope(FULL)? } else { rope(SLIDING)? };
    let sliding = if used.contains(&SLIDING) { rope(SLIDING)? } else { full.clone() };
    Ok((full, sliding))
}

/// The MoE layers' experts: sigmoid scores plus `router_bias` for choosing, top-k renormalised,
/// times `moe_router_scaling_factor`, stacked experts, the `share_expert` MLP beside them.
fn experts(t: &RawConfig, s: &ModelSpec, sparse: Vec<bool>) -> Result<Option<MoeSpec>, ModelError> {
    if !sparse.contains(&true) {
        return Ok(None);
    }
    let num_experts = alias(t, "n_routed_experts", "moe_num_experts")?;
    let num_experts = match (num_experts, t.opt_dim("num_local_experts")?) {
        (Some(a), Some(b)) if a != b => {
            return Err(t.error(format!("n_routed_experts {a} and num_local_experts {b} disagree")));
        }
        (a, b) => a.or(b).unwrap_or(288),
    };
    let top_k = alias(t, "num_experts_per_tok", "moe_top_k")?.unwrap_or(8);
    let inter = t.opt_dim("moe_intermediate_size")?.unwrap_or(1280);
    let shared = alias(t, "share_expert_dim", "share_expert_dims")?.unwrap_or(1280);
    let mut m = MoeSpec::softmax(num_experts, top_k, inter, true, sparse);
    m.scoring = MoeScoring::Sigmoid;
    m.routed_scaling_factor = t.opt_f32("moe_router_scaling_factor")?.unwrap_or(1.0);
    m.module = "moe";
    m.choice_bias = Some("router_bias");
    m.stacked = true;
    m.shared = Some(SharedExperts {
        module: "share_expert",
        intermediate_size: shared,
        gate: None,
        names: None,
        beside: true,
    });
    if let Some(why) = m.params(s.act).check(num_experts, Some(num_experts)) {
        return Err(t.error(format!("router: {why}")));
    }
    Ok(Some(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The step3p7 fixture's config: the released form of `text_config`.
    const RELEASED: &str = include_str!("../../../../tests/fixtures/step3p7/config.json");

    /// The same text config as transformers saves it (`Step3p7Config.to_dict()`).
    const SAVED: &str = r#"{"bos_token_id":1,"eos_token_id":2,"head_dim":16,"hidden_act":"silu","hidden_size":64,
        "intermediate_size":96,"layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],
        "max_position_embeddings":256,"mlp_bias":false,"mlp_layer_types":["dense","sparse","dense","sparse"],
        "model_type":"step3p5","moe_intermediate_size":24,"moe_router_scaling_factor":2.5,
        "mtp_layer_types":["full_attention"],"mtp_mlp_layer_types":["sparse"],"n_routed_experts":8,
        "num_attention_heads":4,"num_experts_per_tok":2,"num_hidden_layers":4,"num_key_value_heads":2,
        "num_nextn_predict_layers":1,"num_sliding_attention_heads":8,"pad_token_id":0,
        "per_layer_config":{"0":{"num_attention_heads":8},"2":{"num_attention_heads":8}},"query_pre_attn_scalar":20,
        "rms_norm_eps":1e-05,"rope_parameters":{"full_attention":{"rope_type":"llama3","rope_theta":50000.0,
        "partial_rotary_factor":0.5,"factor":2.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
        "original_max_position_embeddings":16},"sliding_attention":{"rope_type":"default","rope_theta":10000.0,
        "partial_rotary_factor":1.0}},"share_expert_dim":40,"sliding_window":4,"swiglu_limits":[0,0,0,0.8],
        "swiglu_limits_shared":[0.8,0.8,0,0],"tie_word_embeddings":false,"vocab_size":512}"#;

    fn parse(text: &str) -> RawConfig {
        RawConfig::parse(Path::new("config.json"), text).expect("config")
    }

    /// A composite config holding `text` as its `text_config`.
    fn composite(text: &str) -> RawConfig {
        parse(&format!(r#"{{"architectures": ["Step3p7ForConditionalGeneration"], "text_config": {text}}}"#))
    }

    #[test]
    fn the_released_form_reads_as_transformers_reads_it() {
        let s = spec(&parse(RELEASED), "Step3p7ForConditionalGeneration").expect("spec");
        use LayerKind::{Full, Sliding};
        assert_eq!(s.layer_kinds, vec![Sliding, Full, Sliding, Full]);
        assert_eq!((s.num_heads, s.num_kv_heads, s.head_dim), (4, 2, 16));
        assert_eq!(s.layer_heads, vec![8, 4, 8, 4]);
        assert_eq!(s.sliding_window, Some(4));
        assert_eq!(s.attn_scale, 20f32.powf(-0.5));
        assert!(s.qk_norm && s.norm_one_plus && s.attn_head_gate && !s.tie_word_embeddings);
        assert_eq!(s.rope_full.inv_freq.len(), 4, "8 of 16 dims rotate on full layers");
        assert_eq!(s.rope_sliding.inv_freq.len(), 8);
        assert_eq!(s.expert_clamp, vec![None, None, None, Some(0.8)]);
        assert_eq!(s.mlp_clamp, vec![Some(0.8), Some(0.8), None, None]);
        let m = s.moe.as_ref().expect("moe");
        assert_eq!(m.sparse_layers, vec![false, true, false, true]);
        assert_eq!((m.num_experts, m.top_k, m.moe_intermediate_size, m.routed_scaling_factor), (8, 2, 24, 2.5));
        assert_eq!(
            (m.module, m.choice_bias, m.stacked, m.scoring),
            ("moe", Some("router_bias"), true, MoeScoring::Sigmoid)
        );
        let sh = m.shared.as_ref().expect("shared");
        assert_eq!((sh.module, sh.intermediate_size, sh.beside), ("share_expert", 40, true));
        assert_eq!(
            s.unread_prefixes,
            ["model.layers.4.", "vision_model.", "vit_large_projector."].map(String::from).to_vec()
        );
        assert_eq!(
            (s.bos_token_id.clone(), s.eos_token_id.clone(), s.pad_token_id.clone()),
            (vec![1], vec![2], vec![0])
        );
    }

    #[test]
    fn the_mtp_layer_is_built_as_transformers_builds_it() {
        let mtp = |text: &str| spec(&composite(text), "step3p7").expect("spec").mtp.expect("mtp");
        let s = spec(&parse(RELEASED), "Step3p7ForConditionalGeneration").expect("spec");
        let want = MtpSpec {
            num_layers: 1,
            sparse: true,
            layout: MtpLayout::Step,
            own_embed: false,
            kind: LayerKind::Full,
            unsupported: None,
        };
        assert_eq!(s.mtp, Some(want), "padded lists: the entries after the decoder's");
        assert_eq!(mtp(SAVED), want, "saved form: mtp_layer_types, mtp_mlp_layer_types");
        // A sliding MTP layer from the padded list; moe_layers_enum not naming it: dense.
        let padded = r#"{"num_hidden_layers": 2, "num_nextn_predict_layers": 3, "sliding_window": 8,
            "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention", "full_attention"],
            "moe_layers_enum": "1"}"#;
        let m = mtp(padded);
        assert_eq!((m.num_layers, m.kind, m.sparse, m.unsupported), (3, LayerKind::Sliding, false, None));
        // No list at all: full and (layers 3.. are MoE) dense.
        let m = mtp(r#"{"num_hidden_layers": 4, "num_nextn_predict_layers": 1}"#);
        assert_eq!((m.kind, m.sparse, m.unsupported), (LayerKind::Full, false, None));
        // Lists of the decoder's layers only: transformers cannot build the layer, drafting says why.
        let m = mtp(r#"{"num_hidden_layers": 2, "num_nextn_predict_layers": 1,
            "layer_types": ["full_attention", "full_attention"]}"#);
        assert!(m.unsupported.is_some_and(|w| w.contains("mtp_layer_types")), "{m:?}");
        let m =
            mtp(r#"{"num_hidden_layers": 2, "num_nextn_predict_layers": 1, "mlp_layer_types": ["dense", "sparse"]}"#);
        assert!(m.unsupported.is_some_and(|w| w.contains("mtp_mlp_layer_types")), "{m:?}");
        // A sparse MTP layer beside a dense decoder.
        let m = mtp(r#"{"num_hidden_layers": 2, "num_nextn_predict_layers": 1, "moe_layers_enum": "2"}"#);
        assert!(m.unsupported.is_some_and(|w| w.contains("no expert settings")), "{m:?}");
    }

    #[test]
    fn the_saved_form_and_the_flat_text_only_form_give_the_same_spec() {
        let released = format!("{:?}", spec(&parse(RELEASED), "Step3p7ForConditionalGeneration").expect("spec"));
        let saved = format!("{:?}", spec(&composite(SAVED), "Step3p7ForConditionalGeneration").expect("spec"));
        assert_eq!(released, saved);
        let mut flat = spec(&parse(SAVED), "Step3p5ForCausalLM").expect("spec");
        assert_eq!(flat.unread_prefixes, vec!["model.layers.4.".to_string()]);
        flat.architecture = "Step3p7ForConditionalGeneration".into();
        flat.unread_prefixes.extend(["vision_model.".to_string(), "vit_large_projector.".to_string()]);
        assert_eq!(format!("{flat:?}"), saved);
    }

    #[test]
    fn transformers_defaults_apply_where_fields_are_absent() {
        let s = spec(&composite(r#"{"num_hidden_layers": 5}"#), "step3p7").expect("spec");
        assert_eq!((s.hidden_size, s.num_heads, s.num_kv_heads, s.head_dim), (4096, 64, 8, 128));
        assert_eq!((s.rms_norm_eps, s.vocab_size, s.pad_token_id.clone()), (1e-5, 128815, vec![1]));
        let m = s.moe.expect("moe");
        assert_eq!(m.sparse_layers, vec![false, false, false, true, true], "MoE from layer 3 on");
        assert_eq!((m.num_experts, m.top_k, m.moe_intermediate_size), (288, 8, 1280));
        assert_eq!(s.layer_kinds, vec![LayerKind::Full; 5]);
        assert!(spec(&parse("{}"), "Step3p7ForConditionalGeneration").is_err(), "no text_config");
    }
}
