//! Hostile constraints against the real server: reference chains past the cap and cyclic
//! references with no base case are 400s naming the field, after which the process is alive and
//! answers `/health` within a second; recursion with a base case and tool parameters with local
//! `$defs` are served.

mod serve_util;

use serde_json::{Value, json};
use serve_util::Server;
use std::time::{Duration, Instant};

/// A schema of `n` definitions, each an object whose one property refers to the next.
fn ref_chain(n: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        let next = json!({"type": "object", "properties": {"next": {"$ref": format!("#/definitions/d{}", i + 1)}}});
        defs.insert(format!("d{i}"), if i + 1 < n { next } else { json!({"type": "string"}) });
    }
    json!({"$ref": "#/definitions/d0", "definitions": defs})
}

/// A Lark grammar of `n` rules, each naming the next.
fn rule_chain(n: usize) -> String {
    let mut g = String::from("start: r0\n");
    for i in 0..n {
        g.push_str(&format!("r{i}: r{}\n", i + 1));
    }
    g + &format!("r{n}: \"x\"\n")
}

fn completion(extra: Value) -> Value {
    let mut body = json!({"model": "tiny", "prompt": "hello", "max_tokens": 8});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn chat(extra: Value) -> Value {
    let mut body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 48});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn schema(s: Value) -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "x", "schema": s}})
}

/// Posts `body`, expects a 400 naming `param` whose message holds `says`, then `/health` within
/// a second.
fn refused(s: &Server, path: &str, body: &Value, param: &str, says: &str) {
    let r = s.post(path, body);
    r.assert_error(400, Some(param));
    assert!(r.text().contains(says), "{param}: {}", r.text());
    let t = Instant::now();
    assert_eq!(s.get("/health").status, 200, "the server died after {param}");
    assert!(t.elapsed() < Duration::from_secs(1), "/health took {:?}", t.elapsed());
}

#[test]
fn reference_chains_past_the_cap_are_refused_and_the_server_lives() {
    let s = Server::start(&[]);
    let base = s.normal();
    let deep = ref_chain(250);
    assert!(deep.to_string().len() < 64 * 1024);
    let field = "response_format.json_schema.schema";
    refused(&s, "/v1/completions", &completion(json!({"response_format": schema(deep.clone())})), field, "$ref chain");
    let lark = rule_chain(1000);
    refused(&s, "/v1/completions", &completion(json!({"guided_grammar": lark})), "guided_grammar", "rule");
    let so = completion(json!({"structured_outputs": {"grammar": lark}}));
    refused(&s, "/v1/completions", &so, "structured_outputs.grammar", "rule");
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "g", "parameters": deep}}]);
    let body = chat(json!({"tools": tools, "tool_choice": "required"}));
    refused(&s, "/v1/chat/completions", &body, "tools[1].function.parameters", "$ref chain");
    assert_eq!(s.normal(), base, "output changed after the refusals");
}

#[test]
fn cyclic_references_are_refused_and_recursion_with_a_base_case_is_served() {
    let s = Server::start(&[]);
    let field = "response_format.json_schema.schema";
    let ab = json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}});
    let needs = json!({"$ref": "#/$defs/a", "$defs": {
        "a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "required": ["b"]},
        "b": {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "required": ["a"]}}});
    for cyclic in [json!({"$ref": "#"}), ab, needs] {
        refused(&s, "/v1/completions", &completion(json!({"response_format": schema(cyclic)})), field, "cyclic $ref");
    }
    let tree = json!({"type": "object", "properties": {"v": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#"}}}, "required": ["v"]});
    let r = s.post("/v1/completions", &completion(json!({"response_format": schema(tree)})));
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.json()["choices"][0]["text"].as_str().unwrap().to_string();
    assert!(text.starts_with('{'), "{text:?}");
}

#[test]
fn tool_parameters_with_local_defs_are_served_under_required_and_named_choices() {
    let s = Server::start(&[]);
    let params = json!({"type": "object", "properties": {"unit": {"$ref": "#/$defs/unit"},
        "days": {"$ref": "#/definitions/days"}}, "required": ["unit", "days"], "additionalProperties": false,
        "$defs": {"unit": {"enum": ["c", "f"]}}, "definitions": {"days": {"enum": [1, 2]}}});
    let none = json!({"type": "object", "additionalProperties": false});
    let tools = json!([{"type": "function", "function": {"name": "now", "parameters": none}},
        {"type": "function", "function": {"name": "weather", "parameters": params}}]);
    let named = json!({"type": "function", "function": {"name": "weather"}});
    for (choice, named) in [(json!("required"), false), (named, true)] {
        // Greedy, one call a reply: a random model sampled freely may keep appending calls to the
        // array past max_tokens, and an unfinished array parses to no calls.
        let body = chat(
            json!({"tools": tools, "tool_choice": choice, "parallel_tool_calls": false, "temperature": 0, "max_tokens": 128}),
        );
        let r = s.post("/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{choice}: {}", r.text());
        let calls = r.json()["choices"][0]["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
        assert!(!calls.is_empty(), "{choice}: {}", r.text());
        for call in &calls {
            if named || call["function"]["name"] == "weather" {
                let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
                assert!(args["unit"] == "c" || args["unit"] == "f", "{args}");
                assert!(args["days"] == 1 || args["days"] == 2, "{args}");
            }
        }
    }
    let cyclic = json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#"}}});
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": cyclic}}]);
    let body = chat(json!({"tools": tools, "tool_choice": "required"}));
    refused(&s, "/v1/chat/completions", &body, "tools[0].function.parameters", "cyclic $ref");
}
