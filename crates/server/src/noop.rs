//! Fields OpenAI clients send that change nothing here, accepted on both generation routes once
//! their values are checked: `user`, `metadata`, `store` (false only: nothing is stored) and
//! `service_tier` (`auto` or `default`).

use crate::error::ApiError;
use crate::fields::show;
use crate::wire::common::NoOp;
use serde_json::{Map, Value};

/// Most `metadata` entries (OpenAI's bound).
const MAX_METADATA_KEYS: usize = 16;
/// Longest `metadata` key, in characters (OpenAI's bound).
const MAX_METADATA_KEY_CHARS: usize = 64;
/// Longest `metadata` value, in characters (OpenAI's bound).
const MAX_METADATA_VALUE_CHARS: usize = 512;
/// Longest `user`, in characters.
const MAX_USER_CHARS: usize = 512;

/// Checks the no-op fields' values; each bad one is a 400 naming it.
pub fn check(o: &NoOp) -> Result<(), ApiError> {
    if let Some(u) = &o.user
        && u.chars().count() > MAX_USER_CHARS
    {
        return Err(ApiError::invalid("user", format!("longer than {MAX_USER_CHARS} characters")));
    }
    if let Some(m) = &o.metadata {
        metadata(m)?;
    }
    if o.store == Some(true) {
        return Err(ApiError::invalid("store", "this server stores no completions; send false or leave it out"));
    }
    match o.service_tier.as_deref() {
        None | Some("auto" | "default") => Ok(()),
        Some(t) => Err(ApiError::invalid("service_tier", format!("expected auto or default, got {t:?}"))),
    }
}

/// `metadata`: at most 16 string values, keys up to 64 characters and values up to 512.
fn metadata(m: &Map<String, Value>) -> Result<(), ApiError> {
    if m.len() > MAX_METADATA_KEYS {
        return Err(ApiError::invalid("metadata", format!("{} entries; at most {MAX_METADATA_KEYS}", m.len())));
    }
    for (k, v) in m {
        if k.chars().count() > MAX_METADATA_KEY_CHARS {
            return Err(ApiError::invalid(
                "metadata",
                format!("a key is longer than {MAX_METADATA_KEY_CHARS} characters"),
            ));
        }
        match v {
            Value::String(s) if s.chars().count() <= MAX_METADATA_VALUE_CHARS => {}
            Value::String(_) => {
                let msg = format!("longer than {MAX_METADATA_VALUE_CHARS} characters");
                return Err(ApiError::invalid(format!("metadata.{k}"), msg));
            }
            v => return Err(ApiError::invalid(format!("metadata.{k}"), format!("expected a string, got {}", show(v)))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn good_values_pass_and_bad_ones_are_named() {
        let ok = json!({"user": "u", "metadata": {"a": "b"}, "store": false, "service_tier": "auto"});
        assert!(check(&crate::wire::read(&ok).unwrap()).is_ok());
        let many: serde_json::Map<String, Value> = (0..17).map(|i| (i.to_string(), json!("x"))).collect();
        let cases = [
            (json!({"user": 5}), "user"),
            (json!({"metadata": "x"}), "metadata"),
            (json!({"metadata": many}), "metadata"),
            (json!({"metadata": {"k": 1}}), "metadata.k"),
            (json!({"metadata": {"k": "v".repeat(513)}}), "metadata.k"),
            (json!({"store": true}), "store"),
            (json!({"store": "no"}), "store"),
            (json!({"service_tier": "flex"}), "service_tier"),
        ];
        for (body, field) in cases {
            let e = crate::wire::read::<NoOp>(&body).and_then(|o| check(&o)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}");
        }
    }
}
