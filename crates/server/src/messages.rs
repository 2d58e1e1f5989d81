//! A chat's `messages` checked before the template sees them: a non-empty list of objects with a
//! string `role`, text content (a string, null, or text parts), and no key the server would
//! silently drop; each fault is a 400 naming its path (e.g. `messages[1].content[0].image_url`).

use crate::error::ApiError;
use crate::fields::{Obj, check_only_at, get, show};
use serde_json::Value;

/// Keys a message may carry (the template sees them all).
const MESSAGE: &[&str] = &["role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", "reasoning"];
/// Keys of a returned assistant message a client may send back, accepted only when empty.
const EMPTY_ONLY: &[&str] = &["refusal", "annotations", "audio", "function_call"];
/// Keys of a text part.
const PART: &[&str] = &["type", "text"];
/// Keys of an assistant message's tool call, and of its function.
const CALL: &[&str] = &["id", "type", "function", "index"];
const CALL_FUNCTION: &[&str] = &["name", "arguments"];

/// `messages`: a non-empty list of objects with a string `role` and text `content`.
pub fn check(o: &Obj) -> Result<(), ApiError> {
    let list = match get(o, "messages") {
        Some(Value::Array(l)) if !l.is_empty() => l,
        Some(Value::Array(_)) => return Err(ApiError::invalid("messages", "must not be empty")),
        None => return Err(ApiError::invalid("messages", "is required")),
        Some(v) => return Err(ApiError::invalid("messages", format!("expected a list, got {}", show(v)))),
    };
    for (i, m) in list.iter().enumerate() {
        let field = format!("messages[{i}]");
        let Value::Object(m) = m else {
            return Err(ApiError::invalid(field, format!("expected an object, got {}", show(m))));
        };
        message(m, &field)?;
    }
    Ok(())
}

fn message(m: &Obj, field: &str) -> Result<(), ApiError> {
    let present: Obj = m.iter().filter(|(k, v)| !is_empty(v) || !EMPTY_ONLY.contains(&k.as_str())).map(clone).collect();
    check_only_at(&present, field, &[MESSAGE])?;
    if !m.get("role").is_some_and(Value::is_string) {
        return Err(ApiError::invalid(format!("{field}.role"), "expected a string"));
    }
    match m.get("content") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(Value::Array(parts)) => {
            for (j, p) in parts.iter().enumerate() {
                let path = format!("{field}.content[{j}]");
                if p.get("type").and_then(Value::as_str) != Some("text") || !p.get("text").is_some_and(Value::is_string)
                {
                    let msg = "only text parts ({\"type\": \"text\", \"text\": ...}) are supported";
                    return Err(ApiError::invalid(path, msg));
                }
                if let Value::Object(p) = p {
                    check_only_at(p, &path, &[PART])?;
                }
            }
        }
        Some(v) => {
            return Err(ApiError::invalid(format!("{field}.content"), format!("expected text, got {}", show(v))));
        }
    }
    if let Some(Value::Array(calls)) = m.get("tool_calls") {
        for (j, c) in calls.iter().enumerate() {
            let path = format!("{field}.tool_calls[{j}]");
            let Value::Object(c) = c else {
                return Err(ApiError::invalid(path, format!("expected an object, got {}", show(c))));
            };
            check_only_at(c, &path, &[CALL])?;
            if let Some(Value::Object(f)) = c.get("function") {
                check_only_at(f, &format!("{path}.function"), &[CALL_FUNCTION])?;
            }
        }
    }
    Ok(())
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(l) => l.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

fn clone((k, v): (&String, &Value)) -> (String, Value) {
    (k.clone(), v.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check_v(v: Value) -> Result<(), ApiError> {
        check(v.as_object().unwrap())
    }

    #[test]
    fn returned_messages_pass_and_unknown_keys_are_named() {
        let back = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": null, "refusal": null, "annotations": [], "audio": null,
             "function_call": null, "tool_calls": [{"id": "c", "type": "function",
             "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "1"}]});
        assert!(check_v(back).is_ok());
        let cases = [
            (json!({"messages": [{"role": "user", "content": "x", "foo": 1}]}), "messages[0].foo"),
            (json!({"messages": [{"role": "assistant", "content": "x", "refusal": "no"}]}), "messages[0].refusal"),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "x": 1}]}]}),
                "messages[0].content[0].x",
            ),
            (
                json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "y": 1}}]}]}),
                "messages[0].tool_calls[0].function.y",
            ),
            (
                json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "z": 1}]}]}),
                "messages[0].tool_calls[0].z",
            ),
        ];
        for (body, field) in cases {
            let e = check_v(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
    }
}
