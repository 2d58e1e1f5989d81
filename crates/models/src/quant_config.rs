//! A checkpoint's `quantization_config`, read and checked: FP8 E4M3 weights with block scales
//! (`quant_method: fp8`, DeepSeek-V3's `weight_scale_inv`) or compressed-tensors' float
//! quantization (`weight_scale` per channel, per tensor or per block). Activations stay f32:
//! only weight-only FP8 is taken, and what would quantize activations is refused by name.

use crate::config::RawConfig;
use crate::error::ModelError;
use serde_json::{Map, Value};

/// How one FP8 weight's scales cover it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Strategy {
    /// One scale per `[rows, cols]` block; edge blocks may be partial.
    Block([usize; 2]),
    /// One scale per output row (`[out, 1]`).
    Channel,
    /// One scale for the whole weight (`[]` or `[1]`).
    Tensor,
}

/// What an FP8 checkpoint's weights need: the scale's name suffix and its layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fp8Config {
    /// Appended to a weight's name for its scale (`weight_scale_inv` or `weight_scale`).
    pub scale_suffix: &'static str,
    /// How the scales cover each weight.
    pub strategy: Fp8Strategy,
    /// Modules kept unquantized (`modules_to_not_convert`, `ignore`): stored as they are.
    pub ignore: Vec<String>,
}

/// The checkpoint's FP8 config, `None` when it has no `quantization_config` (or gpt-oss's
/// `mxfp4`, whose experts the family decodes); any other quantization, or an FP8 one that cannot
/// be run exactly with f32 activations, is refused.
pub fn fp8_config(cfg: &RawConfig) -> Result<Option<Fp8Config>, ModelError> {
    let Some(q) = cfg.get("quantization_config") else { return Ok(None) };
    let q = q.as_object().ok_or_else(|| cfg.error("'quantization_config' must be an object"))?;
    let err = |msg: String| cfg.error(format!("quantization_config: {msg}"));
    match q.get("quant_method").and_then(Value::as_str) {
        Some("fp8") => block_fp8(q).map(Some).map_err(err),
        // gpt-oss's experts (the family decodes their `_blocks` / `_scales`); the rest as stored.
        Some("mxfp4") if cfg.opt_str("model_type") == Some("gpt_oss") => Ok(None),
        Some("mxfp4") => Err(err("quant_method 'mxfp4' is read only for gpt-oss's experts".into())),
        Some("compressed-tensors") => compressed(q).map(Some).map_err(err),
        Some(other) => Err(err(format!(
            "quant_method '{}' is not supported (TensorFold reads fp8 and compressed-tensors float8 weights)",
            tf_formats::show(other)
        ))),
        None => Err(err("'quant_method' is missing".into())),
    }
}

/// `quant_method: fp8` (transformers' FineGrainedFP8: DeepSeek-V3, Qwen3-FP8, MiniMax-M2).
fn block_fp8(q: &Map<String, Value>) -> Result<Fp8Config, String> {
    expect_str(q, "fmt", &["e4m3", "float8_e4m3fn"])?;
    if let Some(s) = str_field(q, "activation_scheme")?
        && s != "dynamic"
    {
        return Err(format!(
            "activation_scheme '{}' is not supported: its activation scales quantize activations, which stay f32 here (only 'dynamic' is taken, as weight-only FP8)",
            tf_formats::show(s)
        ));
    }
    expect_str(q, "scale_fmt", &["float"])?;
    expect_str(q, "expert_dtype", &["fp8"])?;
    let strategy = match q.get("weight_block_size") {
        None => Fp8Strategy::Block([128, 128]),
        Some(Value::Null) => Fp8Strategy::Tensor,
        Some(v) => Fp8Strategy::Block(block_size(v, "weight_block_size")?),
    };
    let mut ignore = names(q, "modules_to_not_convert")?;
    ignore.extend(names(q, "ignored_layers")?);
    Ok(Fp8Config { scale_suffix: "_scale_inv", strategy, ignore })
}

/// `quant_method: compressed-tensors` with 8-bit float weights and no activation quantization.
fn compressed(q: &Map<String, Value>) -> Result<Fp8Config, String> {
    expect_str(q, "format", &["float-quantized", "naive-quantized"])?;
    if q.get("kv_cache_scheme").is_some_and(|v| !v.is_null()) {
        return Err("kv_cache_scheme is not supported: the KV cache stays f32".into());
    }
    let groups = q.get("config_groups").and_then(Value::as_object).ok_or("'config_groups' must be an object")?;
    let mut strategy = None;
    for (name, g) in groups {
        let s = group(g).map_err(|e| format!("config_groups.{}: {e}", tf_formats::show(name)))?;
        if strategy.is_some_and(|t| t != s) {
            return Err("config_groups give different weight strategies; one is supported".into());
        }
        strategy = Some(s);
    }
    let strategy = strategy.ok_or("'config_groups' is empty")?;
    Ok(Fp8Config { scale_suffix: "_scale", strategy, ignore: names(q, "ignore")? })
}

/// One compressed-tensors scheme: symmetric 8-bit float weights; input activations at most
/// dynamic (taken as weight-only FP8, as `activation_scheme: dynamic` is: they stay f32 here).
fn group(g: &Value) -> Result<Fp8Strategy, String> {
    let g = g.as_object().ok_or("must be an object")?;
    if let Some(a) = g.get("input_activations").filter(|v| !v.is_null())
        && a.get("dynamic") != Some(&Value::Bool(true))
    {
        return Err("input_activations with stored (static) scales is not supported: activations stay f32 here (only dynamic ones are taken, as weight-only FP8)".into());
    }
    if g.get("output_activations").is_some_and(|v| !v.is_null()) {
        return Err("output_activations is not supported: it quantizes outputs, which stay f32 here".into());
    }
    let w = g.get("weights").and_then(Value::as_object).ok_or("'weights' must be an object")?;
    if w.get("num_bits").and_then(Value::as_u64) != Some(8) {
        return Err(format!("weights.num_bits must be 8, found {}", w.get("num_bits").unwrap_or(&Value::Null)));
    }
    expect_str(w, "type", &["float"]).map_err(|e| format!("weights.{e}"))?;
    if w.get("symmetric").is_some_and(|v| v != &Value::Bool(true)) {
        return Err("weights.symmetric must be true (no zero points)".into());
    }
    if w.get("dynamic").is_some_and(|v| v != &Value::Bool(false)) {
        return Err("weights.dynamic must be false (stored scales)".into());
    }
    match str_field(w, "strategy")? {
        Some("channel") => Ok(Fp8Strategy::Channel),
        Some("tensor") => Ok(Fp8Strategy::Tensor),
        Some("block") => {
            let b = w.get("block_structure").ok_or("weights.block_structure is missing for strategy 'block'")?;
            Ok(Fp8Strategy::Block(block_size(b, "weights.block_structure")?))
        }
        Some(other) => Err(format!("weights.strategy '{}' is not supported", tf_formats::show(other))),
        None => Err("weights.strategy is missing".into()),
    }
}

/// Two positive block sides.
fn block_size(v: &Value, field: &str) -> Result<[usize; 2], String> {
    let sides: Option<Vec<usize>> =
        v.as_array().and_then(|a| a.iter().map(|s| s.as_u64().map(|n| n as usize)).collect());
    match sides.as_deref() {
        Some(&[a, b]) if a > 0 && b > 0 && a <= 1 << 20 && b <= 1 << 20 => Ok([a, b]),
        _ => Err(format!("'{field}' must be two positive integers that tile a weight, found {v}")),
    }
}

/// A string field, `None` when absent or null.
fn str_field<'a>(m: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(format!("'{key}' must be a string, found {v}")),
    }
}

/// Refuses a present `key` whose value is not one of `allowed`.
fn expect_str(m: &Map<String, Value>, key: &str, allowed: &[&str]) -> Result<(), String> {
    match str_field(m, key)? {
        Some(s) if !allowed.contains(&s) => {
            Err(format!("{key} '{}' is not supported (supported: {})", tf_formats::show(s), allowed.join(", ")))
        }
        _ => Ok(()),
    }
}

/// A list of module names, empty when absent.
fn names(m: &Map<String, Value>, key: &str) -> Result<Vec<String>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(|| format!("'{key}' holds a non-string {v}")))
            .collect(),
        Some(v) => Err(format!("'{key}' must be a list of module names, found {v}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(q: &str) -> Result<Option<Fp8Config>, String> {
        let cfg = RawConfig::parse(Path::new("config.json"), &format!(r#"{{"quantization_config": {q}}}"#)).unwrap();
        fp8_config(&cfg).map_err(|e| e.to_string())
    }

    #[test]
    fn qwen3_fp8_and_compressed_tensors_configs_are_read() {
        let q = parse(
            r#"{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}"#,
        );
        let q = q.unwrap().unwrap();
        assert_eq!((q.scale_suffix, q.strategy), ("_scale_inv", Fp8Strategy::Block([128, 128])));
        assert_eq!(q.ignore, ["lm_head"]);
        let ct = r#"{"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null,
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false}}}}"#;
        let q = parse(ct).unwrap().unwrap();
        assert_eq!((q.scale_suffix, q.strategy), ("_scale", Fp8Strategy::Channel));
        // An "FP8-dynamic" release: per-token dynamic input activations, taken as weight-only.
        let dynamic = ct.replace(
            r#""input_activations": null"#,
            r#""input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true, "symmetric": true}"#,
        );
        assert_eq!(parse(&dynamic).unwrap().unwrap().strategy, Fp8Strategy::Channel);
        let none = RawConfig::parse(Path::new("config.json"), "{}").unwrap();
        assert_eq!(fp8_config(&none).unwrap(), None);
    }

    #[test]
    fn what_cannot_run_exactly_is_refused_by_name() {
        let cases = [
            (r#"{"quant_method": "awq", "bits": 4}"#, "quant_method 'awq'"),
            (r#"{"quant_method": "gptq"}"#, "quant_method 'gptq'"),
            (r#"{"quant_method": "bitsandbytes"}"#, "quant_method 'bitsandbytes'"),
            (r#"{"quant_method": "fp8", "fmt": "e5m2"}"#, "fmt 'e5m2'"),
            (r#"{"quant_method": "fp8", "activation_scheme": "static"}"#, "activation_scheme 'static'"),
            (r#"{"quant_method": "fp8", "weight_block_size": [128, 0]}"#, "weight_block_size"),
            (r#"{"quant_method": "fp8", "weight_block_size": [128]}"#, "weight_block_size"),
            (r#"{"quant_method": "fp8", "scale_fmt": "ue8m0"}"#, "scale_fmt 'ue8m0'"),
            (r#"{"fmt": "e4m3"}"#, "'quant_method' is missing"),
            (
                r#"{"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {"input_activations": {"num_bits": 8}, "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}}}}"#,
                "input_activations",
            ),
            (
                r#"{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}}"#,
                "format 'pack-quantized'",
            ),
            (
                r#"{"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "strategy": "group"}}}}"#,
                "num_bits must be 8",
            ),
        ];
        for (q, want) in cases {
            let e = parse(q).unwrap_err();
            assert!(e.contains("config.json: quantization_config: ") && e.contains(want), "{q}: {e}");
        }
    }
}
