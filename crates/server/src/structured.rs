//! Structured output's request fields to one constraint: OpenAI's `response_format`
//! (`text`, `json_object`, `json_schema`) and vLLM's `structured_outputs` (`json`, `regex`,
//! `choice`, `grammar`, `json_object`) and `guided_json`, `guided_regex`, `guided_choice`,
//! `guided_grammar`. At most one may constrain a request; each bad shape is a 400 naming its field.

use crate::error::ApiError;
use crate::fields::{Obj, check_only_at, get, show};
use serde_json::Value;
use tf_grammar::Spec;

/// The fields that may carry a constraint (both generation routes accept them).
pub const FIELDS: &[&str] =
    &["response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar"];

/// The request's constraint and the field it came from, if any.
pub fn parse(o: &Obj) -> Result<Option<(Spec, String)>, ApiError> {
    let mut found: Option<(Spec, String)> = None;
    for &field in FIELDS {
        let Some(v) = get(o, field) else { continue };
        let spec = match field {
            "response_format" => response_format(v)?,
            "structured_outputs" => structured_outputs(v)?,
            "guided_json" => Some(json_schema(v, field)?),
            "guided_regex" => Some(Spec::Regex(string(v, field)?)),
            "guided_choice" => Some(choice(v, field)?),
            _ => Some(Spec::Lark(string(v, field)?)),
        };
        if let Some(spec) = spec {
            if let Some((_, first)) = &found {
                return Err(ApiError::invalid(field, format!("only one constraint per request; {first} is given too")));
            }
            let name = match (field, &spec) {
                ("structured_outputs", _) => structured_field(v),
                ("response_format", Spec::JsonSchema(_)) => "response_format.json_schema.schema".into(),
                _ => field.to_string(),
            };
            found = Some((spec, name));
        }
    }
    Ok(found)
}

/// `response_format`: `{"type": "text" | "json_object" | "json_schema", "json_schema": {...}}`.
fn response_format(v: &Value) -> Result<Option<Spec>, ApiError> {
    let f = "response_format";
    let Value::Object(o) = v else { return Err(ApiError::invalid(f, format!("expected an object, got {}", show(v)))) };
    check_only_at(o, f, &[&["type", "json_schema"]])?;
    match o.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Spec::JsonObject)),
        Some("json_schema") => {
            let f = "response_format.json_schema";
            let js = match o.get("json_schema") {
                Some(Value::Object(js)) => js,
                Some(v) => return Err(ApiError::invalid(f, format!("expected an object, got {}", show(v)))),
                None => return Err(ApiError::invalid(f, "is required with type json_schema")),
            };
            check_only_at(js, f, &[&["name", "description", "schema", "strict"]])?;
            if let Some(s) = js.get("strict").filter(|s| !s.is_boolean() && !s.is_null()) {
                return Err(ApiError::invalid(
                    format!("{f}.strict"),
                    format!("expected true or false, got {}", show(s)),
                ));
            }
            match js.get("schema") {
                Some(s) => Ok(Some(json_schema(s, "response_format.json_schema.schema")?)),
                None => Err(ApiError::invalid(format!("{f}.schema"), "is required")),
            }
        }
        _ => Err(ApiError::invalid(
            "response_format.type",
            format!("expected text, json_object or json_schema, got {}", show(o.get("type").unwrap_or(&Value::Null))),
        )),
    }
}

/// vLLM's `structured_outputs`: an object with exactly one of its kinds set.
fn structured_outputs(v: &Value) -> Result<Option<Spec>, ApiError> {
    let f = "structured_outputs";
    let Value::Object(o) = v else { return Err(ApiError::invalid(f, format!("expected an object, got {}", show(v)))) };
    let kinds = ["json", "regex", "choice", "grammar", "json_object"];
    if let Some(k) = o.keys().find(|k| !kinds.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!("{f}.{k}"), "unsupported field"));
    }
    let set: Vec<(&String, &Value)> = o.iter().filter(|(_, v)| !v.is_null() && **v != Value::Bool(false)).collect();
    let [(k, v)] = set.as_slice() else {
        return Err(ApiError::invalid(f, "expected exactly one of json, regex, choice, grammar, json_object"));
    };
    let field = format!("{f}.{k}");
    Ok(Some(match k.as_str() {
        "json" => json_schema(v, &field)?,
        "regex" => Spec::Regex(string(v, &field)?),
        "choice" => choice(v, &field)?,
        "grammar" => Spec::Lark(string(v, &field)?),
        _ => Spec::JsonObject,
    }))
}

/// The name of the one kind a `structured_outputs` object sets.
fn structured_field(v: &Value) -> String {
    let k = v.as_object().and_then(|o| o.iter().find(|(_, v)| !v.is_null() && **v != Value::Bool(false)));
    k.map_or("structured_outputs".into(), |(k, _)| format!("structured_outputs.{k}"))
}

/// A schema: an object, or (vLLM) its JSON text.
fn json_schema(v: &Value, field: &str) -> Result<Spec, ApiError> {
    match v {
        Value::Object(_) | Value::Bool(true) => Ok(Spec::JsonSchema(v.clone())),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => Ok(Spec::JsonSchema(v)),
            _ => Err(ApiError::invalid(field, "expected a JSON schema (an object, or its JSON text)")),
        },
        v => Err(ApiError::invalid(field, format!("expected a JSON schema object, got {}", show(v)))),
    }
}

fn string(v: &Value, field: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        v => Err(ApiError::invalid(field, format!("expected a string, got {}", show(v)))),
    }
}

fn choice(v: &Value, field: &str) -> Result<Spec, ApiError> {
    let list = match v {
        Value::Array(l) if !l.is_empty() => l,
        v => return Err(ApiError::invalid(field, format!("expected a non-empty list of strings, got {}", show(v)))),
    };
    let strings = list.iter().enumerate().map(|(i, s)| string(s, &format!("{field}[{i}]")));
    Ok(Spec::Choice(strings.collect::<Result<_, _>>()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(v: Value) -> Result<Option<(Spec, String)>, ApiError> {
        parse(v.as_object().unwrap())
    }

    #[test]
    fn each_field_gives_its_constraint_and_names_itself() {
        let schema = json!({"type": "object"});
        let rf = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}});
        let want = Some((Spec::JsonSchema(schema.clone()), "response_format.json_schema.schema".into()));
        assert_eq!(p(rf).unwrap(), want);
        assert_eq!(p(json!({"response_format": {"type": "text"}})).unwrap(), None);
        assert_eq!(p(json!({"response_format": {"type": "json_object"}})).unwrap().unwrap().0, Spec::JsonObject);
        assert_eq!(p(json!({"guided_json": "{\"type\": \"object\"}"})).unwrap().unwrap().0, Spec::JsonSchema(schema));
        let so = p(json!({"structured_outputs": {"regex": "a+"}})).unwrap().unwrap();
        assert_eq!(so, (Spec::Regex("a+".into()), "structured_outputs.regex".into()));
        let c = p(json!({"guided_choice": ["a", "b"]})).unwrap().unwrap().0;
        assert_eq!(c, Spec::Choice(vec!["a".into(), "b".into()]));
        assert_eq!(p(json!({"guided_grammar": "start: \"x\""})).unwrap().unwrap().0, Spec::Lark("start: \"x\"".into()));
    }

    #[test]
    fn bad_shapes_are_refused_naming_the_field() {
        let cases = [
            (json!({"response_format": {"type": "yaml"}}), "response_format.type"),
            (json!({"response_format": "json"}), "response_format"),
            (json!({"response_format": {"type": "json_schema"}}), "response_format.json_schema"),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
                "response_format.json_schema.schema",
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"schema": 5}}}),
                "response_format.json_schema.schema",
            ),
            (json!({"guided_regex": 5}), "guided_regex"),
            (json!({"guided_choice": []}), "guided_choice"),
            (json!({"guided_choice": ["a", 1]}), "guided_choice[1]"),
            (json!({"guided_json": "not json"}), "guided_json"),
            (json!({"structured_outputs": {"regex": "a", "choice": ["b"]}}), "structured_outputs"),
            (json!({"structured_outputs": {"yaml": "a"}}), "structured_outputs.yaml"),
            (json!({"response_format": {"type": "text", "x": 1}}), "response_format.x"),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "foo": 1}}}),
                "response_format.json_schema.foo",
            ),
            (json!({"guided_regex": "a", "guided_choice": ["b"]}), "guided_choice"),
        ];
        for (body, field) in cases {
            let e = p(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
    }
}
