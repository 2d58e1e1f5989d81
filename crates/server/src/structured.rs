//! Structured output's request fields to one constraint: OpenAI's `response_format`
//! (`text`, `json_object`, `json_schema`) and vLLM's `structured_outputs` (`json`, `regex`,
//! `choice`, `grammar`, `json_object`) and `guided_json`, `guided_regex`, `guided_choice`,
//! `guided_grammar`. At most one may constrain a request; each bad shape is a 400 naming its field.

use crate::error::ApiError;
use crate::fields::show;
use crate::wire::common::{ResponseFormat, Structured, StructuredOutputs};
use serde_json::Value;
use tf_grammar::Spec;

/// The request's constraint and the field it came from, if any.
pub fn parse(o: &Structured) -> Result<Option<(Spec, String)>, ApiError> {
    let mut found: Vec<(Spec, String)> = Vec::new();
    if let Some(rf) = &o.response_format
        && let Some(spec) = response_format(rf)?
    {
        let name = match spec {
            Spec::JsonSchema(_) => "response_format.json_schema.schema",
            _ => "response_format",
        };
        found.push((spec, name.into()));
    }
    if let Some(so) = &o.structured_outputs {
        found.push(structured_outputs(so)?);
    }
    if let Some(v) = o.guided_json.as_ref().filter(|v| !v.is_null()) {
        found.push((json_schema(v, "guided_json")?, "guided_json".into()));
    }
    if let Some(r) = &o.guided_regex {
        found.push((Spec::Regex(r.clone()), "guided_regex".into()));
    }
    if let Some(c) = &o.guided_choice {
        found.push((choice(c, "guided_choice")?, "guided_choice".into()));
    }
    if let Some(g) = &o.guided_grammar {
        found.push((Spec::Lark(g.clone()), "guided_grammar".into()));
    }
    if let [(_, first), (_, second), ..] = found.as_slice() {
        let top = second.split('.').next().unwrap_or(second);
        return Err(ApiError::invalid(top, format!("only one constraint per request; {first} is given too")));
    }
    Ok(found.pop())
}

/// Constrains the output with `spec` through the other constraints' checks (the Responses
/// API's `text.format`, read into the same types).
pub fn from_format(rf: &ResponseFormat, path: &str) -> Result<Option<(Spec, String)>, ApiError> {
    let spec =
        response_format(rf).map_err(|e| e.under("response_format.json_schema", path).under("response_format", path))?;
    Ok(spec.map(|s| {
        let name = match s {
            Spec::JsonSchema(_) => format!("{path}.schema"),
            _ => path.to_string(),
        };
        (s, name)
    }))
}

/// `response_format`: `{"type": "text" | "json_object" | "json_schema", "json_schema": {...}}`.
fn response_format(o: &ResponseFormat) -> Result<Option<Spec>, ApiError> {
    match o.kind.as_deref() {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Spec::JsonObject)),
        Some("json_schema") => {
            let f = "response_format.json_schema";
            let js = o.json_schema.as_ref().ok_or_else(|| ApiError::invalid(f, "is required with type json_schema"))?;
            match js.schema.as_ref().filter(|v| !v.is_null()) {
                Some(s) => Ok(Some(json_schema(s, "response_format.json_schema.schema")?)),
                None => Err(ApiError::invalid(format!("{f}.schema"), "is required")),
            }
        }
        other => Err(ApiError::invalid(
            "response_format.type",
            format!("expected text, json_object or json_schema, got {}", show(&Value::from(other))),
        )),
    }
}

/// vLLM's `structured_outputs`: an object with exactly one of its kinds set.
fn structured_outputs(o: &StructuredOutputs) -> Result<(Spec, String), ApiError> {
    let f = "structured_outputs";
    let mut set = Vec::new();
    if let Some(v) = o.json.as_ref().filter(|v| !v.is_null()) {
        set.push((json_schema(v, "structured_outputs.json")?, "json"));
    }
    if let Some(r) = &o.regex {
        set.push((Spec::Regex(r.clone()), "regex"));
    }
    if let Some(c) = &o.choice {
        set.push((choice(c, "structured_outputs.choice")?, "choice"));
    }
    if let Some(g) = &o.grammar {
        set.push((Spec::Lark(g.clone()), "grammar"));
    }
    if o.json_object == Some(true) {
        set.push((Spec::JsonObject, "json_object"));
    }
    match set.len() {
        1 => set.pop().map(|(s, k)| (s, format!("{f}.{k}"))).ok_or_else(|| ApiError::invalid(f, "empty")),
        _ => Err(ApiError::invalid(f, "expected exactly one of json, regex, choice, grammar, json_object")),
    }
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

fn choice(list: &[String], field: &str) -> Result<Spec, ApiError> {
    match list.is_empty() {
        true => Err(ApiError::invalid(field, "expected a non-empty list of strings")),
        false => Ok(Spec::Choice(list.to_vec())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(v: Value) -> Result<Option<(Spec, String)>, ApiError> {
        parse(&crate::wire::read(&v)?)
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
