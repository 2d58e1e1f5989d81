//! LongRoPE (`rope_type` `longrope`: Phi-3.5, Phi-4-mini) read as transformers reads it: a short
//! and a long set of per-frequency divisors, the context the model was pretrained at
//! (`original_max_position_embeddings`, the top-level field first), and a cos / sin factor
//! (`attention_factor`, else `sqrt(1 + ln(factor) / ln(original))` with `factor` the config's or
//! `max_position_embeddings / original`). transformers switches between the sets by the length
//! of each forward pass, which no cache can follow; a model here holds the short set and an
//! engine whose context passes the original one switches it to the long set once, before any
//! round (`Model::fit_context`, as llama.cpp chooses by its context size).

use crate::config::RawConfig;
use crate::error::ModelError;
use serde_json::{Map, Value};
use tf_backend::rope::{Rope, RopeScaling};

/// A LongRoPE config's two rope tables over the rotated dims.
#[derive(Clone, Debug, PartialEq)]
pub struct LongRope {
    /// The context the model was pretrained at: contexts past it take [`LongRope::long`].
    pub original: usize,
    /// The table of the long factors.
    pub long: Rope,
}

/// The short table (what the model loads with) and the [`LongRope`] of a `longrope` config
/// rotating `dim` dims of each head, `None` for any other rope; `fallback_theta` where the
/// config names no base. Factor sets of the wrong length, non-positive factors and an original
/// context below 2 are refused by name.
pub fn read(c: &RawConfig, dim: usize, fallback_theta: f32) -> Result<Option<(Rope, LongRope)>, ModelError> {
    let (p, theta) = match (c.get("rope_parameters"), c.get("rope_scaling")) {
        (Some(Value::Object(p)), _) => (p, num(p, "rope_theta").or(c.opt_f32("rope_theta")?)),
        (_, Some(Value::Object(s))) => (s, c.opt_f32("rope_theta")?),
        _ => return Ok(None),
    };
    if p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str) != Some("longrope") {
        return Ok(None);
    }
    let theta = theta.unwrap_or(fallback_theta);
    let max_pos = c.opt_dim("max_position_embeddings")?;
    let original = match c.opt_dim("original_max_position_embeddings")? {
        Some(o) => Some(o),
        None => p.get("original_max_position_embeddings").and_then(Value::as_u64).map(|o| o as usize),
    }
    .or(max_pos)
    .ok_or_else(|| c.error("rope 'longrope' needs 'original_max_position_embeddings'"))?;
    if original < 2 {
        return Err(c.error(format!("rope 'original_max_position_embeddings' {original} must be at least 2")));
    }
    let factor = match p.get("factor").and_then(Value::as_f64) {
        Some(f) => f,
        None => max_pos.unwrap_or(original) as f64 / original as f64,
    };
    let attention_factor = match p.get("attention_factor").and_then(Value::as_f64) {
        Some(a) => a,
        None if factor <= 1.0 => 1.0,
        None => (1.0 + factor.ln() / (original as f64).ln()).sqrt(),
    } as f32;
    let set = |key: &str| -> Result<Vec<f32>, ModelError> {
        let values =
            p.get(key).and_then(Value::as_array).ok_or_else(|| c.error(format!("rope 'longrope' needs '{key}'")))?;
        let factors: Vec<f32> = values.iter().map(|v| v.as_f64().map_or(f32::NAN, |x| x as f32)).collect();
        if factors.len() != dim / 2 {
            let msg = format!("rope '{key}' has {} factors; {dim} rotated dims need {}", factors.len(), dim / 2);
            return Err(c.error(msg));
        }
        Ok(factors)
    };
    let table = |key: &str| -> Result<Rope, ModelError> {
        let scaling = RopeScaling::LongRope { factors: set(key)?, attention_factor };
        crate::rope_check::check(c, "rope_theta", theta, &scaling)?;
        Ok(Rope::new(dim, theta, &scaling))
    };
    Ok(Some((table("short_factor")?, LongRope { original, long: table("long_factor")? })))
}

fn num(m: &Map<String, Value>, k: &str) -> Option<f32> {
    m.get(k).and_then(Value::as_f64).map(|x| x as f32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(text: &str) -> RawConfig {
        RawConfig::parse(Path::new("config.json"), text).expect("config")
    }

    #[test]
    fn both_sets_the_original_context_and_the_attention_factor_as_transformers_reads_them() {
        // Phi-3.5's layout: rope_scaling, the original context at the top level.
        let c = config(
            r#"{"rope_theta": 10000.0, "max_position_embeddings": 1024, "original_max_position_embeddings": 256,
            "rope_scaling": {"type": "longrope", "short_factor": [1.0, 2.0], "long_factor": [4.0, 8.0]}}"#,
        );
        let (short, long) = read(&c, 4, 1.0).expect("reads").expect("longrope");
        let scale = (1.0f64 + 4f64.ln() / 256f64.ln()).sqrt() as f32;
        assert_eq!(short.inv_freq, vec![1.0, 1.0 / (2.0 * 100.0)]);
        assert_eq!(long.long.inv_freq, vec![1.0 / 4.0, 1.0 / (8.0 * 100.0)]);
        assert_eq!((short.attention_scaling, long.long.attention_scaling, long.original), (scale, scale, 256));
        // transformers' rope_parameters, an explicit factor.
        let c = config(
            r#"{"max_position_embeddings": 256, "rope_parameters": {"rope_type": "longrope", "rope_theta": 100.0,
            "factor": 1.0, "original_max_position_embeddings": 64, "short_factor": [1.0], "long_factor": [3.0]}}"#,
        );
        let (short, long) = read(&c, 2, 1.0).expect("reads").expect("longrope");
        assert_eq!((short.attention_scaling, long.original, long.long.inv_freq.clone()), (1.0, 64, vec![1.0 / 3.0]));
        assert!(read(&config(r#"{"rope_theta": 5.0}"#), 2, 1.0).expect("reads").is_none());
    }

    #[test]
    fn wrong_lengths_bad_factors_and_a_tiny_original_context_are_refused_by_name() {
        let bad = |rope: &str| {
            let text = format!(r#"{{"max_position_embeddings": 64, "rope_scaling": {{"type": "longrope", {rope}}}}}"#);
            read(&config(&text), 4, 1.0).expect_err("refused").to_string()
        };
        let e = bad(r#""short_factor": [1.0], "long_factor": [1.0, 2.0]"#);
        assert!(e.contains("'short_factor' has 1 factors; 4 rotated dims need 2"), "{e}");
        let e = bad(r#""short_factor": [1.0, 0.0], "long_factor": [1.0, 2.0]"#);
        assert!(e.contains("short_factor / long_factor"), "{e}");
        let e = bad(r#""short_factor": [1.0, "x"], "long_factor": [1.0, 2.0]"#);
        assert!(e.contains("short_factor / long_factor"), "{e}");
        let e = bad(r#""long_factor": [1.0, 2.0]"#);
        assert!(e.contains("needs 'short_factor'"), "{e}");
        let e = bad(r#""original_max_position_embeddings": 1, "short_factor": [1.0, 1.0], "long_factor": [1.0, 2.0]"#);
        assert!(e.contains("at least 2"), "{e}");
    }
}
