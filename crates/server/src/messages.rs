//! A chat's `messages` checked before the template sees them: a non-empty list of objects with a
//! string `role`, text content (a string, null, or text parts), and no key the server would
//! silently drop; each fault is a 400 naming its path (e.g. `messages[1].content[0].image_url`).

use crate::error::ApiError;
use crate::wire::chat::{Content, Message};
use serde_json::Value;

/// `messages`: a non-empty list of messages with a `role` and text content.
pub fn check(messages: Option<&Vec<Message>>) -> Result<(), ApiError> {
    let list = match messages {
        Some(l) if !l.is_empty() => l,
        Some(_) => return Err(ApiError::invalid("messages", "must not be empty")),
        None => return Err(ApiError::invalid("messages", "is required")),
    };
    for (i, m) in list.iter().enumerate() {
        message(m, &format!("messages[{i}]"))?;
    }
    Ok(())
}

fn message(m: &Message, field: &str) -> Result<(), ApiError> {
    let returned = [("refusal", &m.refusal), ("annotations", &m.annotations), ("audio", &m.audio)];
    for (key, v) in returned.into_iter().chain([("function_call", &m.function_call)]) {
        if v.as_ref().is_some_and(|v| !is_empty(v)) {
            return Err(ApiError::invalid(format!("{field}.{key}"), "unsupported field"));
        }
    }
    if m.role.is_none() {
        return Err(ApiError::invalid(format!("{field}.role"), "expected a string"));
    }
    if let Some(Content::Parts(parts)) = &m.content {
        for (j, p) in parts.iter().enumerate() {
            let other = p.image_url.is_some() || p.input_audio.is_some() || p.file.is_some();
            if p.kind.as_deref() != Some("text") || p.text.is_none() || other {
                let msg = "only text parts ({\"type\": \"text\", \"text\": ...}) are supported";
                return Err(ApiError::invalid(format!("{field}.content[{j}]"), msg));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check_v(v: Value) -> Result<(), ApiError> {
        let c: crate::wire::chat::ChatFields = crate::wire::read(&v)?;
        check(c.messages.as_ref())
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
