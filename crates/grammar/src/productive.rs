//! Whether a schema's references let any finite JSON value match it: a schema that needs itself
//! (a required property, or a list that must hold an item, whose schema refers back) with no
//! alternative has no finite instance. Computed as a least fixpoint over the schemas, each
//! flipping to productive at most once; keywords it does not model count as satisfiable, so it
//! only ever refuses for a reference cycle.

use crate::refs::{Id, Step};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// Types whose values contain no subschema's instance.
const LEAF_TYPES: &[&str] = &["string", "number", "integer", "boolean", "null"];

/// Whether some finite value matches `root`, given its schemas in walk order and each one's
/// steps (from `refs::graph`).
pub(crate) fn productive(root: &Value, order: &[&Value], steps: &HashMap<Id, Vec<Step>>) -> bool {
    // Who to look at again when a schema turns out satisfiable: the schemas it is a step of,
    // and of their steps (a property's schema sits in its object's `properties` map).
    let mut users: HashMap<Id, Vec<&Value>> = HashMap::new();
    for &v in order {
        for (c, _, _) in steps.get(&(v as Id)).into_iter().flatten() {
            users.entry(*c as Id).or_default().push(v);
            for (g, _, _) in steps.get(&(*c as Id)).into_iter().flatten() {
                users.entry(*g as Id).or_default().push(v);
            }
        }
    }
    let mut todo: Vec<&Value> = order.iter().rev().copied().collect();
    let mut good: HashSet<Id> = HashSet::new();
    while let Some(v) = todo.pop() {
        if good.contains(&(v as Id)) || !satisfiable(v, steps, &good) {
            continue;
        }
        good.insert(v as Id);
        todo.extend(users.get(&(v as Id)).into_iter().flatten());
        if std::ptr::eq(v, root) {
            return true;
        }
    }
    good.contains(&(root as Id))
}

/// Whether `v` is satisfiable when the schemas in `good` are (the others taken as not yet).
fn satisfiable(v: &Value, steps: &HashMap<Id, Vec<Step>>, good: &HashSet<Id>) -> bool {
    let Value::Object(o) = v else { return true };
    let ok = |s: &Value| !s.is_object() || good.contains(&(s as *const Value));
    let target = steps.get(&(v as Id)).and_then(|s| s.iter().find(|s| s.1.is_some())).map(|s| s.0);
    if !target.is_none_or(ok) {
        return false;
    }
    let list = |k: &str| o.get(k).and_then(Value::as_array);
    if !list("allOf").is_none_or(|l| l.iter().all(ok)) {
        return false;
    }
    for k in ["anyOf", "oneOf"] {
        if !list(k).is_none_or(|l| l.is_empty() || l.iter().any(ok)) {
            return false;
        }
    }
    let types: Vec<&str> = match o.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return true,
    };
    types.iter().any(|t| LEAF_TYPES.contains(t))
        || (types.contains(&"object") && object_ok(o, &ok))
        || (types.contains(&"array") && array_ok(o, &ok))
}

/// Whether an object schema's required properties are satisfiable.
fn object_ok(o: &Map<String, Value>, ok: &impl Fn(&Value) -> bool) -> bool {
    let required = o.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
    let props = o.get("properties").and_then(Value::as_object);
    let extra = o.get("additionalProperties");
    required.into_iter().all(|p| match props.and_then(|ps| ps.get(p)).or(extra) {
        Some(s) => ok(s),
        None => true,
    })
}

/// Whether an array schema's required items are satisfiable.
fn array_ok(o: &Map<String, Value>, ok: &impl Fn(&Value) -> bool) -> bool {
    let min = o.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
    let prefix = o.get("prefixItems").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    if !prefix.iter().take(min).all(ok) {
        return false;
    }
    min <= prefix.len() || o.get("items").is_none_or(ok)
}
