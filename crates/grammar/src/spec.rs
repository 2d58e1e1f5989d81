//! What a request constrains its output to, and its llguidance grammar.

use crate::GrammarError;
use llguidance::api::TopLevelGrammar;
use serde_json::{Value, json};

/// A request's constraint.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON matching a schema.
    JsonSchema(Value),
    /// Text matching a regular expression.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A Lark grammar (llguidance's dialect).
    Lark(String),
}

impl Spec {
    /// The cache key: the kind and the content, one string.
    pub fn key(&self) -> String {
        match self {
            Spec::JsonObject => "object".into(),
            Spec::JsonSchema(v) => format!("schema:{v}"),
            Spec::Regex(r) => format!("regex:{r}"),
            Spec::Choice(c) => format!("choice:{}", Value::from(c.clone())),
            Spec::Lark(g) => format!("lark:{g}"),
        }
    }

    /// The bytes of its content (what the size cap measures).
    pub fn size(&self) -> usize {
        match self {
            Spec::JsonObject => 0,
            Spec::JsonSchema(v) => v.to_string().len(),
            Spec::Regex(r) | Spec::Lark(r) => r.len(),
            Spec::Choice(c) => c.iter().map(|s| s.len() + 1).sum(),
        }
    }

    /// The deepest nesting of a schema's objects and lists (0 for other kinds).
    pub fn depth(&self) -> usize {
        match self {
            Spec::JsonSchema(v) => depth(v),
            _ => 0,
        }
    }

    /// The grammar llguidance compiles.
    pub(crate) fn grammar(&self) -> Result<TopLevelGrammar, GrammarError> {
        Ok(match self {
            Spec::JsonObject => TopLevelGrammar::from_json_schema(compact(json!({"type": "object"}))),
            Spec::JsonSchema(v) => TopLevelGrammar::from_json_schema(compact(v.clone())),
            Spec::Regex(r) => TopLevelGrammar::from_regex(r),
            Spec::Choice(c) if c.is_empty() => return Err(GrammarError::Invalid("needs at least one choice".into())),
            Spec::Choice(c) => TopLevelGrammar::from_regex(&c.iter().map(|s| escape(s)).collect::<Vec<_>>().join("|")),
            Spec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        })
    }
}

/// `schema` producing compact JSON (no whitespace between tokens, OpenAI's form), unless it
/// sets llguidance's own options (`x-guidance`).
fn compact(mut schema: Value) -> Value {
    if let Value::Object(o) = &mut schema
        && !o.contains_key("x-guidance")
    {
        o.insert("x-guidance".into(), json!({"whitespace_flexible": false}));
    }
    schema
}

/// Nesting depth of a JSON value (a scalar is 0).
fn depth(v: &Value) -> usize {
    // Iterative: a hostile value must not overflow the stack.
    let mut stack = vec![(v, 0usize)];
    let mut most = 0;
    while let Some((v, d)) = stack.pop() {
        most = most.max(d);
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    most
}

/// `s` as a regex matching exactly it.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('(');
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~ \t\n\r/\"".contains(c) {
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c => {
                    out.push('\\');
                    out.push(c);
                }
            }
        } else {
            out.push(c);
        }
    }
    out.push(')');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_nested_objects_and_lists() {
        assert_eq!(Spec::JsonSchema(json!({"type": "string"})).depth(), 1);
        let s = json!({"properties": {"a": {"type": "array", "items": {"anyOf": [{"type": "integer"}]}}}});
        assert_eq!(Spec::JsonSchema(s).depth(), 6);
        assert_eq!(Spec::Regex("a".into()).depth(), 0);
    }

    #[test]
    fn keys_differ_by_kind_and_content() {
        assert_ne!(Spec::Regex("a".into()).key(), Spec::Lark("a".into()).key());
        assert_ne!(Spec::Choice(vec!["a|b".into()]).key(), Spec::Choice(vec!["a".into(), "b".into()]).key());
        assert_eq!(escape("a.b c"), "(a\\.b\\ c)");
    }
}
