//! A JSON schema's `$ref` structure, measured without recursion: the longest chain of local
//! references followed in a row (what the compiler's recursion depth grows with), reference
//! cycles that never pass through a nested schema, and cycles no finite value can end (both
//! without a base case, so no value matches them).

use crate::productive::productive;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// Keywords whose values are data rather than subschemas: a `$ref` inside them is not followed.
const DATA: &[&str] = &["const", "enum", "default", "examples", "x-guidance"];

/// What makes a schema's references unacceptable.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RefError {
    /// A chain of at least this many references followed in a row, past the cap.
    TooDeep(usize),
    /// A cycle of references with no nested schema between them, as the pointers followed.
    Cycle(Vec<String>),
    /// No finite value matches: the schema needs an instance of itself (through a required
    /// property or a list that must hold an item) with no alternative.
    NoBaseCase,
}

/// A schema's address, the key of the walks' maps.
pub(crate) type Id = *const Value;

/// Where a schema leads: (schema, the `$ref` followed to it, or `None` when nested in it), and
/// whether the step is an alias (a `$ref`, or an `allOf` entry: the schema is the target).
pub(crate) type Step<'a> = (&'a Value, Option<String>, bool);

/// Checks `root`'s references: no cycle of alias steps, no chain of more than `cap` `$ref`s in a
/// row (one reached again on the same chain ends it). Returns the longest chain.
pub(crate) fn check_refs(root: &Value, cap: usize) -> Result<usize, RefError> {
    let (order, steps) = graph(root);
    if let Some(chain) = alias_cycle(&order, &steps) {
        return Err(RefError::Cycle(chain));
    }
    let depth = ref_depth(root, &steps, cap)?;
    if !productive(root, &order, &steps) {
        return Err(RefError::NoBaseCase);
    }
    Ok(depth)
}

/// Every schema object and array in `root` in walk order, with its steps.
fn graph(root: &Value) -> (Vec<&Value>, HashMap<Id, Vec<Step<'_>>>) {
    let mut order = Vec::new();
    let mut steps = HashMap::new();
    let mut todo = vec![(root, root)];
    while let Some((v, base)) = todo.pop() {
        if steps.contains_key(&(v as Id)) {
            continue;
        }
        let base = match v {
            Value::Object(o) if o.get("$id").is_some_and(Value::is_string) => v,
            _ => base,
        };
        let mut out: Vec<Step> = Vec::new();
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    if DATA.contains(&k.as_str()) {
                        continue;
                    }
                    if let (true, Some(r)) = (k == "$ref", x.as_str()) {
                        out.extend(resolve(base, r).map(|t| (t, Some(r.to_string()), true)));
                    } else if let (true, Some(all)) = (k == "allOf", x.as_array()) {
                        out.extend(all.iter().map(|s| (s, None, true)));
                    } else if x.is_object() || x.is_array() {
                        out.push((x, None, false));
                    }
                }
            }
            Value::Array(a) => out.extend(a.iter().filter(|x| x.is_object() || x.is_array()).map(|x| (x, None, false))),
            _ => {}
        }
        todo.extend(out.iter().filter(|(_, via, _)| via.is_none()).map(|(x, _, _)| (*x, base)));
        order.push(v);
        steps.insert(v as Id, out);
    }
    (order, steps)
}

/// A cycle of alias steps (the `$ref`s on it), if any: such a schema is only itself.
fn alias_cycle(order: &[&Value], steps: &HashMap<Id, Vec<Step>>) -> Option<Vec<String>> {
    // 1: on the path, 2: done.
    let mut state: HashMap<Id, u8> = HashMap::new();
    for &start in order {
        let start = start as Id;
        if state.contains_key(&start) {
            continue;
        }
        let mut path: Vec<(Id, usize, Option<String>)> = vec![(start, 0, None)];
        state.insert(start, 1);
        while let Some(top) = path.last_mut() {
            let next = steps.get(&top.0).and_then(|s| s.iter().filter(|s| s.2).nth(top.1));
            let Some((v, via, _)) = next else {
                state.insert(top.0, 2);
                path.pop();
                continue;
            };
            top.1 += 1;
            match state.get(&(*v as Id)) {
                Some(1) => {
                    let at = path.iter().position(|f| std::ptr::eq(f.0, *v)).unwrap_or(0);
                    let mut chain: Vec<String> = path[at + 1..].iter().filter_map(|f| f.2.clone()).collect();
                    chain.extend(via.clone());
                    return Some(chain);
                }
                Some(_) => {}
                None => {
                    state.insert(*v as Id, 1);
                    path.push((*v as Id, 0, via.clone()));
                }
            }
        }
    }
    None
}

/// The longest chain of `$ref`s followed in a row from `root`, or `TooDeep` past `cap`.
fn ref_depth(root: &Value, steps: &HashMap<Id, Vec<Step>>, cap: usize) -> Result<usize, RefError> {
    let mut done: HashMap<Id, usize> = HashMap::new();
    let mut on_path: HashSet<Id> = HashSet::from([root as Id]);
    // (schema, next step, longest chain below it so far, references followed to reach it)
    let mut path: Vec<(Id, usize, usize, usize)> = vec![(root as Id, 0, 0, 0)];
    while let Some(top) = path.last_mut() {
        let (id, depth) = (top.0, top.3);
        if let Some((v, via, _)) = steps.get(&id).and_then(|s| s.get(top.1)) {
            top.1 += 1;
            let (v, step) = (*v as Id, usize::from(via.is_some()));
            if on_path.contains(&v) {
                continue;
            }
            if let Some(&below) = done.get(&v) {
                top.2 = top.2.max(step + below);
                if depth + step + below > cap {
                    return Err(RefError::TooDeep(depth + step + below));
                }
                continue;
            }
            if depth + step > cap {
                return Err(RefError::TooDeep(depth + step));
            }
            on_path.insert(v);
            path.push((v, 0, 0, depth + step));
            continue;
        }
        let below = top.2;
        path.pop();
        on_path.remove(&id);
        done.insert(id, below);
        if let Some(parent) = path.last_mut() {
            let step = usize::from(depth > parent.3);
            parent.2 = parent.2.max(step + below);
        }
    }
    Ok(done.get(&(root as Id)).copied().unwrap_or(0))
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
        assert_eq!(check_refs(&json!({"type": "string"}), 10), Ok(0));
        assert_eq!(check_refs(&chain(5), 10), Ok(5));
        assert_eq!(check_refs(&chain(11), 10), Err(RefError::TooDeep(11)));
        let escaped = json!({"$ref": "#/$defs/a~1b%20c", "$defs": {"a/b c": {"$ref": "#/$defs/d"}, "d": {}}});
        assert_eq!(check_refs(&escaped, 10), Ok(2));
        let data = json!({"const": {"$ref": "#"}, "enum": [{"$ref": "#"}]});
        assert_eq!(check_refs(&data, 10), Ok(0), "a $ref inside data is not followed");
    }

    #[test]
    fn cycles_with_no_nested_schema_are_refused_and_recursion_with_a_base_case_is_not() {
        assert_eq!(check_refs(&json!({"$ref": "#"}), 10), Err(RefError::Cycle(vec!["#".into()])));
        let ab = json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}});
        assert!(matches!(check_refs(&ab, 10), Err(RefError::Cycle(c)) if c.len() == 2));
        let via_root = json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#"}}});
        assert_eq!(check_refs(&via_root, 10), Err(RefError::Cycle(vec!["#/$defs/a".into(), "#".into()])));
        let all = json!({"allOf": [{"$ref": "#"}], "type": "object"});
        assert!(matches!(check_refs(&all, 10), Err(RefError::Cycle(_))));
        let needs_itself = json!({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]});
        assert_eq!(check_refs(&needs_itself, 10), Err(RefError::NoBaseCase));
        let pair = json!({"$ref": "#/$defs/a", "$defs": {
            "a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "required": ["b"]},
            "b": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1}}});
        assert_eq!(check_refs(&pair, 10), Err(RefError::NoBaseCase));
        let optional = json!({"type": "object", "properties": {"a": {"$ref": "#"}}});
        assert_eq!(check_refs(&optional, 10), Ok(0));
        let either = json!({"anyOf": [{"type": "null"}, {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}]});
        assert_eq!(check_refs(&either, 10), Ok(0));
        let tree = json!({"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}});
        assert_eq!(check_refs(&tree, 10), Ok(0), "the reference back to the root ends the chain");
    }

    #[test]
    fn pointers_resolve_against_the_nearest_id() {
        let tool = json!({"$id": "urn:t", "$ref": "#/$defs/x", "$defs": {"x": {"$ref": "#"}}});
        let whole = json!({"type": "array", "items": tool});
        assert!(matches!(check_refs(&whole, 10), Err(RefError::Cycle(_))), "# inside the tool is the tool");
    }
}
