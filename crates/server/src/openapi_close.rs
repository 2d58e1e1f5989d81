//! The document's request schemas closed as the server reads them: a body made of parts
//! (`allOf` of their schemas) becomes one object with every part's properties, and every request
//! object with properties gets `additionalProperties: false`, since a key no part reads is
//! refused (the maps, `logit_bias`, `metadata`, and JSON schemas stay open).

use serde_json::{Map, Value};

/// Closes the request schemas of `doc` (an OpenAPI document as JSON); `replies` names the
/// component schemas of replies, which stay open.
pub fn close(doc: &mut Value, replies: &[&str]) {
    let components = doc["components"]["schemas"].as_object().cloned().unwrap_or_default();
    if let Some(paths) = doc["paths"].as_object_mut() {
        for item in paths.values_mut() {
            for op in item.as_object_mut().into_iter().flat_map(|o| o.values_mut()) {
                let schema = &mut op["requestBody"]["content"]["application/json"]["schema"];
                if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
                    *schema = merged(parts, &components);
                }
            }
        }
    }
    if let Some(schemas) = doc["components"]["schemas"].as_object_mut() {
        for (name, schema) in schemas.iter_mut() {
            if !replies.contains(&name.as_str()) {
                close_objects(schema);
            }
        }
    }
}

/// One object with the properties and required keys of every part (`$ref`s resolved).
fn merged(parts: &[Value], components: &Map<String, Value>) -> Value {
    let mut properties = Map::new();
    let mut required: Vec<Value> = Vec::new();
    for part in parts {
        let name = part["$ref"].as_str().and_then(|r| r.rsplit('/').next());
        let schema = name.and_then(|n| components.get(n)).unwrap_or(part);
        if let Some(p) = schema["properties"].as_object() {
            properties.extend(p.clone());
        }
        if let Some(r) = schema["required"].as_array() {
            required.extend(r.iter().cloned());
        }
    }
    let mut out = serde_json::json!({"type": "object", "properties": properties, "additionalProperties": false});
    if !required.is_empty() {
        out["required"] = Value::Array(required);
    }
    out
}

/// `additionalProperties: false` on `v` and every object schema inside it that lists
/// properties and says nothing of others.
fn close_objects(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.get("properties").is_some_and(Value::is_object) && !o.contains_key("additionalProperties") {
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
            for (key, child) in o.iter_mut() {
                match key.as_str() {
                    "properties" => {
                        child.as_object_mut().into_iter().flat_map(|p| p.values_mut()).for_each(close_objects)
                    }
                    "items" | "oneOf" | "anyOf" | "allOf" => close_objects(child),
                    _ => {}
                }
            }
        }
        Value::Array(list) => list.iter_mut().for_each(close_objects),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parts_merge_and_request_objects_close() {
        let mut doc = json!({
            "paths": {"/x": {"post": {"requestBody": {"content": {"application/json": {"schema":
                {"allOf": [{"$ref": "#/components/schemas/A"}, {"$ref": "#/components/schemas/B"}]}}}}}}},
            "components": {"schemas": {
                "A": {"type": "object", "properties": {"a": {"type": "object", "properties": {"n": {}}}}},
                "B": {"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {}}},
                      "required": ["m"]},
                "R": {"type": "object", "properties": {"r": {}}}}}});
        close(&mut doc, &["R"]);
        let body = &doc["paths"]["/x"]["post"]["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(body["additionalProperties"], false);
        assert!(body["properties"]["a"].is_object() && body["properties"]["m"].is_object());
        assert_eq!(body["required"], json!(["m"]));
        let a = &doc["components"]["schemas"]["A"];
        assert_eq!(a["additionalProperties"], false);
        assert_eq!(a["properties"]["a"]["additionalProperties"], false);
        assert_eq!(doc["components"]["schemas"]["B"]["properties"]["m"]["additionalProperties"], json!({}));
        assert!(doc["components"]["schemas"]["R"].get("additionalProperties").is_none());
    }
}
