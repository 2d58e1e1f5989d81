//! The request bodies as typed structs, one file a route, with the OpenAI field names. A body is
//! read into its parts ([`Parts`]) in one pass each: a value of the wrong type is a 400 naming
//! its path (`messages[1].content`), and a key that no part reads, at any depth, is a 400 naming
//! it. The same types make the OpenAPI document (openapi.rs).

pub mod chat;
pub mod common;
pub mod completions;
pub mod other;
pub mod replies;
pub mod responses;

use crate::error::ApiError;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeSet;

/// A JSON object body read part by part; [`Parts::finish`] refuses what no part read.
pub struct Parts<'a> {
    body: &'a Value,
    /// Top-level keys every part so far left unread.
    unread: Option<BTreeSet<String>>,
    /// Nested paths a part left unread inside a field it reads.
    nested: Vec<String>,
}

impl<'a> Parts<'a> {
    /// Starts reading `body` (a JSON object).
    pub fn new(body: &'a Value) -> Parts<'a> {
        Parts { body, unread: None, nested: Vec::new() }
    }

    /// Reads one part: the fields of `T` from the body, each type checked by path.
    pub fn take<T: DeserializeOwned>(&mut self) -> Result<T, ApiError> {
        let mut track = serde_path_to_error::Track::new();
        let mut ignored = Vec::new();
        let de = serde_path_to_error::Deserializer::new(self.body, &mut track);
        let part = serde_ignored::deserialize(de, |p| ignored.push(ignored_path(&p)));
        let part = part.map_err(|e| type_error(&track.path(), &e.to_string()))?;
        let (top, nested): (Vec<Vec<String>>, Vec<Vec<String>>) = ignored.into_iter().partition(|p| p.len() == 1);
        self.nested.extend(nested.iter().map(|p| render(p)));
        let top: BTreeSet<String> = top.into_iter().flatten().collect();
        self.unread = Some(match self.unread.take() {
            None => top,
            Some(before) => before.intersection(&top).cloned().collect(),
        });
        Ok(part)
    }

    /// Refuses the first key no part read: top-level keys first, then nested ones.
    pub fn finish(self) -> Result<(), ApiError> {
        if let Some(k) = self.unread.into_iter().flatten().next() {
            let shown = crate::fields::show(&Value::from(k.as_str()));
            return Err(ApiError::invalid(k, format!("unsupported field {shown}")));
        }
        match self.nested.into_iter().next() {
            Some(p) => Err(ApiError::invalid(p, "unsupported field")),
            None => Ok(()),
        }
    }
}

/// Reads a whole body that is one part.
pub fn read<T: DeserializeOwned>(body: &Value) -> Result<T, ApiError> {
    let mut parts = Parts::new(body);
    let t = parts.take()?;
    parts.finish()?;
    Ok(t)
}

/// The segments of an unread key's path (`Some` and newtype wrappers dropped).
fn ignored_path(p: &serde_ignored::Path) -> Vec<String> {
    use serde_ignored::Path as P;
    match p {
        P::Root => Vec::new(),
        P::Seq { parent, index } => push(ignored_path(parent), format!("[{index}]")),
        P::Map { parent, key } => push(ignored_path(parent), key.clone()),
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => ignored_path(parent),
    }
}

fn push(mut v: Vec<String>, s: String) -> Vec<String> {
    v.push(s);
    v
}

/// `["messages", "[1]", "content"]` as `messages[1].content`.
fn render(segments: &[String]) -> String {
    let mut out = String::new();
    for s in segments {
        if !out.is_empty() && !s.starts_with('[') {
            out.push('.');
        }
        out.push_str(s);
    }
    out
}

/// A serde type error as a 400 naming the path, in the server's wording.
fn type_error(path: &serde_path_to_error::Path, message: &str) -> ApiError {
    use serde_path_to_error::Segment as S;
    let segments: Vec<String> = path
        .iter()
        .filter_map(|s| match s {
            S::Seq { index } => Some(format!("[{index}]")),
            S::Map { key } => Some(key.clone()),
            S::Enum { .. } | S::Unknown => None,
        })
        .collect();
    let message = reword(message);
    match segments.is_empty() {
        true => ApiError::malformed(message),
        false => ApiError::invalid(render(&segments), message),
    }
}

/// serde's `invalid type: X, expected Y` as `expected Y, got X`, with Rust's type names in words.
fn reword(message: &str) -> String {
    let Some(rest) = message.strip_prefix("invalid type: ") else { return message.to_string() };
    let Some((got, want)) = rest.rsplit_once(", expected ") else { return message.to_string() };
    let want = match want {
        "f32" | "f64" => "a number",
        "i64" | "u64" | "u32" | "i32" | "usize" => "an integer",
        "a boolean" => "true or false",
        w => w,
    };
    format!("expected {want}, got {got}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct A {
        x: Option<i64>,
        inner: Option<Vec<Inner>>,
    }
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        k: Option<bool>,
    }
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct B {
        y: Option<String>,
    }

    fn both(v: Value) -> Result<(), ApiError> {
        let mut p = Parts::new(&v);
        p.take::<A>()?;
        p.take::<B>()?;
        p.finish()
    }

    #[test]
    fn keys_read_by_any_part_pass_and_others_are_named_by_path() {
        assert!(both(json!({"x": 1, "y": "s", "inner": [{"k": true}]})).is_ok());
        let param = |v: Value| both(v).unwrap_err().param;
        assert_eq!(param(json!({"x": 1, "z": 2})).as_deref(), Some("z"));
        assert_eq!(param(json!({"inner": [{"k": true}, {"k": false, "q": 1}]})).as_deref(), Some("inner[1].q"));
        assert_eq!(param(json!({"x": 1.5})).as_deref(), Some("x"));
        assert_eq!(param(json!({"inner": [{"k": 3}]})).as_deref(), Some("inner[0].k"));
        let e = both(json!({"x": "1"})).unwrap_err();
        assert_eq!(e.message, "x: expected an integer, got string \"1\"");
        assert!(both(json!({"x": null, "y": null})).is_ok());
    }
}
