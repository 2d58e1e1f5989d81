//! Helpers for checked request values: a short rendering of a received value for messages, and
//! token-id lists read as integers (checked against the vocabulary by the caller).

use crate::error::ApiError;
use serde_json::Value;

/// A short rendering of a received value for error messages.
pub fn show(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s,
    }
}

/// A JSON integer as `i64`, refusing fractions, strings and other types.
pub fn int_of(v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Ok(i),
            (None, Some(u)) => Err(format!("{u} is too large")),
            _ => Err(format!("expected an integer, got {n}")),
        },
        other => Err(format!("expected an integer, got {}", show(other))),
    }
}

/// A list of raw token ids (checked against the vocabulary later), naming the index of a bad entry.
pub fn int_list(v: &Value, key: &str) -> Result<Vec<i64>, ApiError> {
    let Value::Array(items) = v else {
        return Err(ApiError::invalid(key, format!("expected a list of integer token ids, got {}", show(v))));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, x)| match x {
            Value::Number(n) if n.as_i64().is_none() && n.as_u64().is_some() => {
                Err(ApiError::invalid(format!("{key}[{i}]"), format!("token id {n} is outside the vocabulary")))
            }
            _ => int_of(x).map_err(|m| ApiError::invalid(format!("{key}[{i}]"), m)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_past_i64_are_refused_by_index() {
        let e = int_list(&json!([1, 9223372036854775808u64]), "p").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("p[1]"));
        assert!(e.message.contains("9223372036854775808"), "{}", e.message);
        assert!(int_list(&json!([1e300]), "p").is_err());
        assert_eq!(int_list(&json!([1, "x"]), "e").unwrap_err().param.as_deref(), Some("e[1]"));
        assert_eq!(int_list(&json!([0, -1]), "p").unwrap(), vec![0, -1]);
        assert!(int_of(&json!(1.5)).is_err());
    }
}
