//! Reading Hugging Face `config.json` fields by their HF names, with errors naming the field,
//! and the rope parameters in both the older (`rope_theta`/`rope_scaling`) and the newer
//! (`rope_parameters`, optionally per layer type) forms.

use crate::error::ModelError;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use tf_backend::rope::RopeScaling;

/// A parsed `config.json`.
pub struct RawConfig {
    /// The file it came from.
    pub file: PathBuf,
    map: Map<String, Value>,
}

/// Largest size accepted for any count in a config (guards allocations).
const MAX_DIM: u64 = 1 << 31;

impl RawConfig {
    /// Reads and parses `path`.
    pub fn read(path: &Path) -> Result<RawConfig, ModelError> {
        let err = |msg: String| ModelError::Config { file: path.to_path_buf(), msg };
        let bytes = tf_core::regular_file::read_regular(path).map_err(|e| err(format!("cannot read: {e}")))?;
        RawConfig::from_bytes(path, &bytes)
    }

    /// Parses `bytes` (UTF-8 JSON) as the contents of `path`.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<RawConfig, ModelError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| ModelError::Config { file: path.to_path_buf(), msg: "not UTF-8 text".into() })?;
        RawConfig::parse(path, text)
    }

    /// Parses `text` as the contents of `path`.
    pub fn parse(path: &Path, text: &str) -> Result<RawConfig, ModelError> {
        let err = |msg: String| ModelError::Config { file: path.to_path_buf(), msg };
        match serde_json::from_str(text).map_err(|e| err(format!("not JSON: {e}")))? {
            Value::Object(map) => Ok(RawConfig { file: path.to_path_buf(), map }),
            _ => Err(err("not a JSON object".into())),
        }
    }

    /// A config error for this file.
    pub fn error(&self, msg: impl Into<String>) -> ModelError {
        ModelError::Config { file: self.file.clone(), msg: msg.into() }
    }

    /// The object under `key` (a composite config's `text_config`) as a config read from the
    /// same file, `None` when absent or not an object.
    pub fn nested(&self, key: &str) -> Option<RawConfig> {
        match self.get(key) {
            Some(Value::Object(map)) => Some(RawConfig { file: self.file.clone(), map: map.clone() }),
            _ => None,
        }
    }

    /// A config of `map`'s fields read as from this config's file (values a family assembles).
    pub fn with_fields(&self, map: Map<String, Value>) -> RawConfig {
        RawConfig { file: self.file.clone(), map }
    }

    /// The same config without the fields `keys`.
    pub fn without(&self, keys: &[&str]) -> RawConfig {
        let map = self.map.iter().filter(|(k, _)| !keys.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone()));
        RawConfig { file: self.file.clone(), map: map.collect() }
    }

    /// The raw value of `key`, `None` when absent or null.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Whether the config names `key` at all, `null` included (where a family's default for a
    /// missing field differs from what `null` says).
    pub fn names(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// A positive integer field (required).
    pub fn dim(&self, key: &str) -> Result<usize, ModelError> {
        self.opt_dim(key)?.ok_or_else(|| self.error(format!("missing '{key}'")))
    }

    /// A positive integer field, `None` when absent.
    pub fn opt_dim(&self, key: &str) -> Result<Option<usize>, ModelError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        match v.as_u64() {
            Some(n) if n > 0 && n <= MAX_DIM => Ok(Some(n as usize)),
            _ => Err(self.error(format!("'{key}' must be a positive integer up to {MAX_DIM}, found {v}"))),
        }
    }

    /// A finite float field, `None` when absent.
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, ModelError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        match v.as_f64() {
            Some(x) if x.is_finite() => Ok(Some(x as f32)),
            _ => Err(self.error(format!("'{key}' must be a finite number, found {v}"))),
        }
    }

    /// A boolean field, `default` when absent.
    pub fn flag(&self, key: &str, default: bool) -> Result<bool, ModelError> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.error(format!("'{key}' must be true or false, found {v}"))),
        }
    }

    /// A string field, `None` when absent.
    pub fn opt_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// Token ids in a field that holds one id or a list of them.
    pub fn ids(&self, key: &str) -> Result<Vec<i64>, ModelError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_i64().ok_or_else(|| self.error(format!("'{key}' holds a non-integer {v}"))))
                .collect(),
            Some(v) => {
                v.as_i64().map(|i| vec![i]).ok_or_else(|| self.error(format!("'{key}' must be an id, found {v}")))
            }
        }
    }

    /// The text model's config inside a multimodal wrapper's: `text_config`'s fields, then the
    /// wrapper's own fields it lacks (`architectures`, `quantization_config`, ...; not
    /// `vision_config`), the head tied where either says so (as transformers ties it); `self`
    /// as it is where there is no `text_config` object.
    pub fn text_part(self) -> RawConfig {
        let Some(Value::Object(text)) = self.map.get("text_config") else { return self };
        let mut map = text.clone();
        let tied = |m: &Map<String, Value>| m.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
        let tie = tied(&self.map) || tied(text);
        for (k, v) in &self.map {
            if k == "architectures" || !(map.contains_key(k) || k == "text_config" || k == "vision_config") {
                map.insert(k.clone(), v.clone());
            }
        }
        map.insert("tie_word_embeddings".into(), Value::Bool(tie));
        RawConfig { file: self.file, map }
    }

    /// `architectures[0]`, else `model_type`.
    pub fn architecture(&self) -> Option<&str> {
        self.get("architectures")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .or_else(|| self.opt_str("model_type"))
    }

    /// Rope base and scaling for layers of `layer_type` (`full_attention`, `sliding_attention`).
    /// `fallback_theta` applies when the config names none (per-family default).
    pub fn rope(&self, layer_type: &str, fallback_theta: f32) -> Result<(f32, RopeScaling), ModelError> {
        if let Some(Value::Object(params)) = self.get("rope_parameters") {
            let params = match params.get(layer_type) {
                Some(Value::Object(p)) => p,
                _ if params.contains_key("full_attention") || params.contains_key("sliding_attention") => {
                    return Err(self.error(format!("rope_parameters has no entry for '{layer_type}'")));
                }
                _ => params,
            };
            let theta = match params.get("rope_theta").filter(|v| !v.is_null()) {
                Some(v) => v.as_f64().map(|x| x as f32).unwrap_or(f32::NAN),
                None => fallback_theta,
            };
            return self.checked_rope("rope_theta", theta, self.scaling(params)?);
        }
        if layer_type == "sliding_attention"
            && let Some(local) = self.opt_f32("rope_local_base_freq")?
        {
            return self.checked_rope("rope_local_base_freq", local, RopeScaling::Default);
        }
        let theta = self.opt_f32("rope_theta")?.unwrap_or(fallback_theta);
        match self.get("rope_scaling") {
            Some(Value::Object(s)) => self.checked_rope("rope_theta", theta, self.scaling(s)?),
            _ => self.checked_rope("rope_theta", theta, RopeScaling::Default),
        }
    }

    /// `(theta, scaling)` once [`crate::rope_check::check`] passes them.
    fn checked_rope(&self, field: &str, theta: f32, scaling: RopeScaling) -> Result<(f32, RopeScaling), ModelError> {
        crate::rope_check::check(self, field, theta, &scaling)?;
        Ok((theta, scaling))
    }

    fn scaling(&self, p: &Map<String, Value>) -> Result<RopeScaling, ModelError> {
        let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str).unwrap_or("default");
        let need = |k: &str| num(p, k).ok_or_else(|| self.error(format!("rope '{kind}' scaling needs '{k}'")));
        let max_pos = self.opt_f32("max_position_embeddings")?;
        Ok(match kind {
            "default" => RopeScaling::Default,
            "linear" => RopeScaling::Linear { factor: need("factor")? },
            "llama3" => RopeScaling::Llama3 {
                factor: need("factor")?,
                low_freq_factor: need("low_freq_factor")?,
                high_freq_factor: need("high_freq_factor")?,
                original_max_position_embeddings: need("original_max_position_embeddings")?,
            },
            "yarn" => RopeScaling::Yarn {
                factor: need("factor")?,
                original_max_position_embeddings: num(p, "original_max_position_embeddings")
                    .or(max_pos)
                    .ok_or_else(|| self.error("yarn needs original_max_position_embeddings"))?,
                beta_fast: num(p, "beta_fast").unwrap_or(32.0),
                beta_slow: num(p, "beta_slow").unwrap_or(1.0),
                attention_factor: num(p, "attention_factor").or_else(|| yarn_mscale_ratio(p)),
                truncate: p.get("truncate").and_then(Value::as_bool).unwrap_or(true),
            },
            other => return Err(self.error(format!("rope type '{other}' is not supported"))),
        })
    }
}

/// YaRN's `attention_factor` from `mscale` and `mscale_all_dim` where both are set and nonzero
/// (DeepSeek): `mscale(factor, mscale) / mscale(factor, mscale_all_dim)`, as transformers.
fn yarn_mscale_ratio(p: &Map<String, Value>) -> Option<f32> {
    let (factor, m, all) = (num(p, "factor")?, num(p, "mscale")?, num(p, "mscale_all_dim")?);
    (m != 0.0 && all != 0.0).then(|| yarn_mscale(factor, m) / yarn_mscale(factor, all))
}

/// `0.1 * mscale * ln(factor) + 1` for `factor` above 1, else 1 (transformers' `get_mscale`).
pub fn yarn_mscale(factor: f32, mscale: f32) -> f32 {
    if factor <= 1.0 { 1.0 } else { 0.1 * mscale * factor.ln() + 1.0 }
}

fn num(m: &Map<String, Value>, k: &str) -> Option<f32> {
    m.get(k).and_then(Value::as_f64).filter(|x| x.is_finite()).map(|x| x as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> RawConfig {
        RawConfig::parse(Path::new("config.json"), text).unwrap()
    }

    #[test]
    fn old_and_new_rope_forms_agree() {
        let old = cfg(r#"{"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}"#);
        let new = cfg(r#"{"rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}"#);
        assert_eq!(old.rope("full_attention", 1e4).unwrap(), new.rope("full_attention", 1e4).unwrap());
    }

    #[test]
    fn per_layer_type_rope() {
        let c =
            cfg(r#"{"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}"#);
        assert_eq!(c.rope("full_attention", 1.0).unwrap(), (1e6, RopeScaling::Linear { factor: 8.0 }));
        assert_eq!(c.rope("sliding_attention", 1.0).unwrap(), (1e4, RopeScaling::Default));
        let old = cfg(r#"{"rope_theta": 1e6, "rope_local_base_freq": 10000.0}"#);
        assert_eq!(old.rope("sliding_attention", 1.0).unwrap(), (1e4, RopeScaling::Default));
    }

    #[test]
    fn a_wrapper_gives_its_text_config_with_its_architecture() {
        let c = cfg(r#"{"architectures": ["Vl"], "model_type": "vl", "tie_word_embeddings": true,
            "text_config": {"model_type": "vl_text", "hidden_size": 64, "tie_word_embeddings": false},
            "vision_config": {"hidden_size": 16}, "quantization_config": {"quant_method": "fp8"}}"#)
        .text_part();
        assert_eq!((c.architecture(), c.opt_str("model_type")), (Some("Vl"), Some("vl_text")));
        assert_eq!(c.dim("hidden_size").unwrap(), 64);
        assert!(c.flag("tie_word_embeddings", false).unwrap() && c.get("quantization_config").is_some());
        assert!(c.get("vision_config").is_none() && c.get("text_config").is_none());
    }

    #[test]
    fn bad_values_name_the_field() {
        let c = cfg(r#"{"hidden_size": -3, "rope_scaling": {"type": "dynamic", "factor": 2.0}}"#);
        assert!(c.dim("hidden_size").unwrap_err().to_string().contains("hidden_size"));
        assert!(c.dim("num_hidden_layers").unwrap_err().to_string().contains("missing"));
        assert!(c.rope("full_attention", 1.0).unwrap_err().to_string().contains("dynamic"));
    }
}
