//! Rope parameters checked at load, naming the field: a base (`rope_theta`) and every scaling
//! factor finite and positive, YaRN's `beta_fast` above its positive `beta_slow`, Llama 3's
//! `high_freq_factor` above its positive `low_freq_factor`, a positive original context,
//! LongRoPE's factors and attention factor positive, and `partial_rotary_factor` in (0, 1]. A
//! zero factor would make every logit non-finite.

use crate::config::RawConfig;
use crate::error::ModelError;
use tf_backend::rope::RopeScaling;

/// Refuses `value` of `field` unless it is finite and above zero.
fn positive(c: &RawConfig, field: &str, value: f32) -> Result<(), ModelError> {
    if value.is_finite() && value > 0.0 {
        return Ok(());
    }
    Err(c.error(format!("rope '{field}' must be a finite number above 0, found {value}")))
}

/// Checks a rope's base (read from `theta_field`) and scaling.
pub fn check(c: &RawConfig, theta_field: &str, theta: f32, scaling: &RopeScaling) -> Result<(), ModelError> {
    positive(c, theta_field, theta)?;
    match *scaling {
        RopeScaling::Default => {}
        RopeScaling::Linear { factor } => positive(c, "factor", factor)?,
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
            positive(c, "factor", factor)?;
            positive(c, "low_freq_factor", low_freq_factor)?;
            positive(c, "high_freq_factor", high_freq_factor)?;
            positive(c, "original_max_position_embeddings", original_max_position_embeddings)?;
            if high_freq_factor <= low_freq_factor {
                return Err(c.error(format!(
                    "rope 'high_freq_factor' {high_freq_factor} must be above 'low_freq_factor' {low_freq_factor}"
                )));
            }
        }
        RopeScaling::Yarn {
            factor, original_max_position_embeddings, beta_fast, beta_slow, attention_factor, ..
        } => {
            positive(c, "factor", factor)?;
            positive(c, "original_max_position_embeddings", original_max_position_embeddings)?;
            positive(c, "beta_fast", beta_fast)?;
            positive(c, "beta_slow", beta_slow)?;
            if let Some(a) = attention_factor {
                positive(c, "attention_factor", a)?;
            }
            if beta_fast <= beta_slow {
                return Err(c.error(format!("rope 'beta_fast' {beta_fast} must be above 'beta_slow' {beta_slow}")));
            }
        }
        RopeScaling::LongRope { ref factors, attention_factor } => {
            factors.iter().try_for_each(|&f| positive(c, "short_factor / long_factor", f))?;
            positive(c, "attention_factor", attention_factor)?;
        }
    }
    Ok(())
}

/// Refuses a `partial_rotary_factor` outside (0, 1].
pub fn partial(c: &RawConfig, factor: f32) -> Result<f32, ModelError> {
    if factor.is_finite() && factor > 0.0 && factor <= 1.0 {
        return Ok(factor);
    }
    Err(c.error(format!("'partial_rotary_factor' must be in (0, 1], found {factor}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn rope(text: &str) -> Result<(f32, RopeScaling), ModelError> {
        RawConfig::parse(Path::new("config.json"), text).unwrap().rope("full_attention", 1e4)
    }

    fn refused(text: &str, needle: &str) {
        let msg = rope(text).unwrap_err().to_string();
        assert!(msg.contains(needle), "'{needle}' not in {msg}");
    }

    #[test]
    fn zero_negative_and_inverted_parameters_are_refused_naming_the_field() {
        refused(r#"{"rope_scaling": {"rope_type": "linear", "factor": 0}}"#, "'factor'");
        refused(
            r#"{"rope_scaling": {"type": "yarn", "factor": 0.0, "original_max_position_embeddings": 4}}"#,
            "'factor'",
        );
        refused(r#"{"rope_parameters": {"rope_type": "linear", "factor": -2}}"#, "'factor'");
        refused(r#"{"rope_theta": 0}"#, "'rope_theta'");
        refused(r#"{"rope_parameters": {"rope_theta": -1.0}}"#, "'rope_theta'");
        let local = RawConfig::parse(Path::new("config.json"), r#"{"rope_local_base_freq": 0, "rope_theta": 1}"#);
        let msg = local.unwrap().rope("sliding_attention", 1e4).unwrap_err().to_string();
        assert!(msg.contains("'rope_local_base_freq'"), "{msg}");
        let yarn = r#"{"rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 0}}"#;
        refused(yarn, "'original_max_position_embeddings'");
        let yarn = r#"{"rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 8,
            "beta_fast": 1, "beta_slow": 32}}"#;
        refused(yarn, "'beta_fast' 1 must be above 'beta_slow' 32");
        let l3 = r#"{"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 0,
            "high_freq_factor": 4, "original_max_position_embeddings": 8192}}"#;
        refused(l3, "'low_freq_factor'");
        let l3 = r#"{"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4,
            "high_freq_factor": 4, "original_max_position_embeddings": 8192}}"#;
        refused(l3, "'high_freq_factor' 4 must be above");
        assert!(
            rope(r#"{"rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 8}}"#).is_ok()
        );
    }

    #[test]
    fn partial_factor_is_in_zero_to_one() {
        let c = RawConfig::parse(Path::new("config.json"), "{}").unwrap();
        assert!(partial(&c, 0.5).is_ok() && partial(&c, 1.0).is_ok());
        for bad in [0.0, -0.5, 1.5, f32::NAN] {
            assert!(partial(&c, bad).unwrap_err().to_string().contains("partial_rotary_factor"));
        }
    }
}
