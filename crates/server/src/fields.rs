//! Typed reads of request fields from a JSON object: absent or `null` is `None`, a value of the
//! wrong type or out of range is a 400 naming the field. A top-level key a route does not read is
//! refused by [`check_keys`] before any other parsing.

use crate::error::ApiError;
use serde_json::{Map, Value};

/// A request body.
pub type Obj = Map<String, Value>;

/// The field's value unless absent or null.
pub fn get<'a>(o: &'a Obj, key: &str) -> Option<&'a Value> {
    o.get(key).filter(|v| !v.is_null())
}

/// Keys read by both generation routes (the accepted no-op fields are in noop.rs).
const COMMON: &[&str] = &[
    "model",
    "seed",
    "n",
    "max_tokens",
    "stop",
    "stop_token_ids",
    "logprobs",
    "stream",
    "stream_options",
    "draft",
    "ignore_eos",
    "return_tokens_as_token_ids",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "prompt_logprobs",
];
/// `/v1/completions` only.
pub const COMPLETIONS: &[&str] = &["prompt", "prompt_token_ids", "echo"];
/// `/v1/chat/completions` only.
pub const CHAT: &[&str] = &[
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "chat_template_kwargs",
    "add_generation_prompt",
    "max_completion_tokens",
    "top_logprobs",
];
/// `/tokenize` (its own list: it generates nothing).
pub const TOKENIZE: &[&str] =
    &["model", "prompt", "messages", "add_special_tokens", "tools", "chat_template_kwargs", "add_generation_prompt"];
/// `/detokenize`.
pub const DETOKENIZE: &[&str] = &["model", "tokens"];

/// Refuses the first top-level key of a generation request that is neither common nor in
/// `route`: 400 naming it.
pub fn check_keys(o: &Obj, route: &[&str]) -> Result<(), ApiError> {
    check_only(o, &[COMMON, route, crate::structured::FIELDS, crate::noop::FIELDS])
}

/// Refuses the first key of the nested object at `path` in none of `lists`: 400 naming
/// `path.key` (e.g. `response_format.json_schema.foo`).
pub fn check_only_at(o: &Obj, path: &str, lists: &[&[&str]]) -> Result<(), ApiError> {
    match o.keys().find(|k| !lists.iter().any(|l| l.contains(&k.as_str()))) {
        Some(k) => Err(ApiError::invalid(format!("{path}.{k}"), "unsupported field")),
        None => Ok(()),
    }
}

/// Refuses the first top-level key in none of `lists`: 400 naming it.
pub fn check_only(o: &Obj, lists: &[&[&str]]) -> Result<(), ApiError> {
    match o.keys().find(|k| !lists.iter().any(|l| l.contains(&k.as_str()))) {
        Some(k) => Err(ApiError::invalid(k.as_str(), format!("unsupported field {}", show(&Value::from(k.as_str()))))),
        None => Ok(()),
    }
}

/// A short rendering of a received value for error messages.
pub fn show(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s,
    }
}

/// A boolean field.
pub fn opt_bool(o: &Obj, key: &str) -> Result<Option<bool>, ApiError> {
    match get(o, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::invalid(key, format!("expected true or false, got {}", show(v)))),
    }
}

/// A number field, as `f32` (range checks come later; huge values become infinite and fail them).
pub fn opt_f32(o: &Obj, key: &str) -> Result<Option<f32>, ApiError> {
    match get(o, key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|x| Some(x as f32))
            .ok_or_else(|| ApiError::invalid(key, format!("expected a number, got {}", show(v)))),
    }
}

/// An integer field; a non-integer or one past `i64` is refused.
pub fn opt_int(o: &Obj, key: &str) -> Result<Option<i64>, ApiError> {
    match get(o, key) {
        None => Ok(None),
        Some(v) => int_of(v).map(Some).map_err(|m| ApiError::invalid(key, m)),
    }
}

/// An integer field within `min..=max`.
pub fn opt_count(o: &Obj, key: &str, min: i64, max: usize) -> Result<Option<usize>, ApiError> {
    let Some(x) = opt_int(o, key)? else { return Ok(None) };
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    if x < min || x > max {
        return Err(ApiError::invalid(key, format!("{x} is out of range: expected {min} <= x <= {max}")));
    }
    Ok(Some(x as usize))
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

/// A string field.
pub fn opt_str<'a>(o: &'a Obj, key: &str) -> Result<Option<&'a str>, ApiError> {
    match get(o, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(ApiError::invalid(key, format!("expected a string, got {}", show(v)))),
    }
}

/// A field that is a string or a list of strings (e.g. `stop`), with at most `max` entries.
pub fn str_or_list(o: &Obj, key: &str, max: usize) -> Result<Vec<String>, ApiError> {
    let list = match get(o, key) {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => {
                    Err(ApiError::invalid(format!("{key}[{i}]"), format!("expected a string, got {}", show(other))))
                }
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(ApiError::invalid(key, format!("expected a string or a list of strings, got {}", show(v))));
        }
    };
    if list.len() > max {
        return Err(ApiError::invalid(key, format!("{} entries; at most {max} are allowed", list.len())));
    }
    Ok(list)
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

    fn obj(v: Value) -> Obj {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn types_are_checked_and_named() {
        let o = obj(json!({"a": "1", "b": 1.5, "c": null, "d": 3, "e": [1, "x"], "f": 18446744073709551615u64}));
        assert_eq!(opt_int(&o, "a").unwrap_err().param.as_deref(), Some("a"));
        assert!(opt_int(&o, "b").is_err());
        assert_eq!(opt_int(&o, "c").unwrap(), None);
        assert_eq!(opt_int(&o, "missing").unwrap(), None);
        assert_eq!(opt_count(&o, "d", 1, 3).unwrap(), Some(3));
        assert!(opt_count(&o, "d", 1, 2).is_err());
        assert!(opt_int(&o, "f").is_err());
        assert_eq!(int_list(&o["e"], "e").unwrap_err().param.as_deref(), Some("e[1]"));
        assert!(opt_bool(&o, "d").is_err());
        assert!(opt_f32(&o, "a").is_err());
        assert_eq!(str_or_list(&o, "e", 4).unwrap_err().param.as_deref(), Some("e[0]"));
    }

    #[test]
    fn ids_past_i64_are_refused_by_index() {
        let e = int_list(&json!([1, 9223372036854775808u64]), "p").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("p[1]"));
        assert!(e.message.contains("9223372036854775808"), "{}", e.message);
        assert!(int_list(&json!([1e300]), "p").is_err());
        assert_eq!(int_list(&json!([0, -1]), "p").unwrap(), vec![0, -1]);
    }
}
