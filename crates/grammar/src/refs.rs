//! A JSON schema's `$ref` structure, measured without recursion: the longest chain of local
//! references followed in a row (what the compiler's recursion depth grows with), and reference
//! cycles that never pass through a nested schema (no base case, so no value matches them).

use serde_json::Value;
use std::collections::HashMap;

/// Keywords whose values are data rather than subschemas: a `$ref` inside them is not followed.
const DATA: &[&str] = &["const", "enum", "default", "examples", "x-guidance"];

/// What makes a schema's references unacceptable.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RefError {
    /// A chain of at least this many references followed in a row, past the cap.
    TooDeep(usize),
    /// A cycle of references with no nested schema between them, as the pointers followed.
    Cycle(Vec<String>),
}

/// One schema on the walk's path.
struct Frame<'a> {
    /// The schema (its address, the key of the maps).
    owner: *const Value,
    /// The resource `#...` pointers inside it resolve against (the nearest `$id`, else the root).
    base: &'a Value,
    /// The schemas it leads to: (schema, entered through `$ref` (its pointer), an alias step).
    next: Vec<(&'a Value, Option<String>, bool)>,
    /// How many of `next` have been walked.
    at: usize,
    /// References in a row from here, the longest found so far.
    best: usize,
    /// References followed from the root to here.
    depth: usize,
    /// The pointer it was reached through, if by `$ref`.
    via: Option<String>,
    /// Whether it was reached by an alias step (`$ref`, or an `allOf` entry).
    alias: bool,
}

/// The longest chain of `$ref`s followed in a row in `root` (at most `cap`; one reached again on
/// the same chain ends it), or why the references are refused.
pub(crate) fn ref_depth(root: &Value, cap: usize) -> Result<usize, RefError> {
    let mut done: HashMap<*const Value, usize> = HashMap::new();
    let mut path: Vec<Frame> = vec![frame(root, root, 0, None, false)];
    let mut on_path: HashMap<*const Value, usize> = HashMap::from([(root as *const Value, 0)]);
    loop {
        let Some(top) = path.last_mut() else { return Ok(0) };
        if let Some((v, via, alias)) = top.next.get(top.at).cloned() {
            top.at += 1;
            let step = usize::from(via.is_some());
            let (base, depth) = (top.base, top.depth + step);
            if let Some(&i) = on_path.get(&(v as *const Value)) {
                if alias && path[i + 1..].iter().all(|f| f.alias) {
                    let mut chain: Vec<String> = path[i + 1..].iter().filter_map(|f| f.via.clone()).collect();
                    chain.extend(via);
                    return Err(RefError::Cycle(chain));
                }
                continue;
            }
            if let Some(&d) = done.get(&(v as *const Value)) {
                top.best = top.best.max(step + d);
                if depth + d > cap {
                    return Err(RefError::TooDeep(depth + d));
                }
                continue;
            }
            if depth > cap {
                return Err(RefError::TooDeep(depth));
            }
            on_path.insert(v as *const Value, path.len());
            path.push(frame(v, base, depth, via, alias));
            continue;
        }
        let Some(f) = path.pop() else { return Ok(0) };
        let (v, best, step) = (f.owner, f.best, usize::from(f.via.is_some()));
        on_path.remove(&v);
        done.insert(v, best);
        match path.last_mut() {
            Some(parent) => parent.best = parent.best.max(step + best),
            None => return Ok(best),
        }
    }
}

/// The frame of `v` (resolved against `base` unless it sets its own `$id`).
fn frame<'a>(v: &'a Value, base: &'a Value, depth: usize, via: Option<String>, alias: bool) -> Frame<'a> {
    let base = match v {
        Value::Object(o) if o.get("$id").is_some_and(Value::is_string) => v,
        _ => base,
    };
    let mut next = Vec::new();
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                if DATA.contains(&k.as_str()) {
                    continue;
                }
                if let (true, Some(r)) = (k == "$ref", x.as_str()) {
                    next.extend(resolve(base, r).map(|target| (target, Some(r.to_string()), true)));
                } else if let (true, Some(all)) = (k == "allOf", x.as_array()) {
                    next.extend(all.iter().map(|s| (s, None, true)));
                } else if x.is_object() || x.is_array() {
                    next.push((x, None, false));
                }
            }
        }
        Value::Array(a) => next.extend(a.iter().filter(|x| x.is_object() || x.is_array()).map(|x| (x, None, false))),
        _ => {}
    }
    Frame { owner: v, base, next, at: 0, best: 0, depth, via, alias }
}

/// The schema a local reference (`#` followed by a JSON pointer, percent-encoded or not) names
/// in `base`; `None` for other references (anchors, other documents), which are not followed.
fn resolve<'a>(base: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return None;
    }
    base.pointer(&percent_decode(pointer)?)
}

/// `s` with `%XX` escapes decoded; `None` when they do not decode to UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(h) = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(h);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A schema whose `$defs` chain `n` deep, each an object holding the next.
    fn chain(n: usize) -> Value {
        let mut defs = serde_json::Map::new();
        for i in 0..n {
            let next = json!({"type": "object", "properties": {"next": {"$ref": format!("#/$defs/d{}", i + 1)}}});
            defs.insert(format!("d{i}"), if i + 1 < n { next } else { json!({"type": "string"}) });
        }
        json!({"$ref": "#/$defs/d0", "$defs": defs})
    }

    #[test]
    fn chains_are_measured_in_references_followed() {
        assert_eq!(ref_depth(&json!({"type": "string"}), 10), Ok(0));
        assert_eq!(ref_depth(&chain(5), 10), Ok(5));
        assert_eq!(ref_depth(&chain(11), 10), Err(RefError::TooDeep(11)));
        let escaped = json!({"$ref": "#/$defs/a~1b%20c", "$defs": {"a/b c": {"$ref": "#/$defs/d"}, "d": {}}});
        assert_eq!(ref_depth(&escaped, 10), Ok(2));
        let data = json!({"const": {"$ref": "#"}, "enum": [{"$ref": "#"}]});
        assert_eq!(ref_depth(&data, 10), Ok(0), "a $ref inside data is not followed");
    }

    #[test]
    fn cycles_with_no_nested_schema_are_refused_and_recursion_with_a_base_case_is_not() {
        assert_eq!(ref_depth(&json!({"$ref": "#"}), 10), Err(RefError::Cycle(vec!["#".into()])));
        let ab = json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}});
        assert!(matches!(ref_depth(&ab, 10), Err(RefError::Cycle(c)) if c.len() == 2));
        let all = json!({"allOf": [{"$ref": "#"}], "type": "object"});
        assert!(matches!(ref_depth(&all, 10), Err(RefError::Cycle(_))));
        let tree = json!({"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}});
        assert_eq!(ref_depth(&tree, 10), Ok(0), "the reference back to the root ends the chain");
    }

    #[test]
    fn pointers_resolve_against_the_nearest_id() {
        let tool = json!({"$id": "urn:t", "$ref": "#/$defs/x", "$defs": {"x": {"$ref": "#"}}});
        let whole = json!({"type": "array", "items": tool});
        assert!(matches!(ref_depth(&whole, 10), Err(RefError::Cycle(_))), "# inside the tool is the tool");
    }
}
