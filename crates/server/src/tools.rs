//! Tool calling on `/v1/chat/completions`: `tools`, `tool_choice` (`none`, `auto`, `required`, a
//! named function) and `parallel_tool_calls`. `required` and a named choice are enforced by a
//! grammar: the output must be a JSON list of `{"name", "arguments"}` calls whose arguments
//! match the tool's `parameters` schema (each its own schema resource, so its local `$defs` /
//! `definitions` pointers resolve within it, as in `response_format`). Output is parsed back into `tool_calls` from the
//! families' blocks (tool_formats.rs: Hermes / Qwen3, GLM-4.x, DeepSeek V3 and V3.1, Gemma), or
//! a whole output that is one call or a list of calls as JSON (Llama 3's `{"name",
//! "parameters"}`, optionally after `<|python_tag|>`, and the grammar's form).

use crate::error::ApiError;
use crate::fields::show;
use crate::tool_formats::{json_call, parse_blocks};
use crate::wire::chat::{ChatFields, Tool, ToolChoice};
use serde_json::{Value, json};
use tf_grammar::Spec;

/// How a request's output is read for tool calls.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolMode {
    /// The tools' names and `parameters` schemas.
    pub tools: Vec<(String, Value)>,
}

impl ToolMode {
    /// Whether tool `name` declares its parameter `key` a string.
    fn string_arg(&self, name: &str, key: &str) -> bool {
        let tool = self.tools.iter().find(|(n, _)| n == name);
        let ty = tool.and_then(|(_, p)| p.get("properties")?.get(key)?.get("type"));
        ty.and_then(Value::as_str) == Some("string")
    }

    /// The calls in `text` and the text left around them (`None` when nothing is left).
    pub fn parse_calls(&self, text: &str) -> (Option<String>, Vec<Call>) {
        if let Some((left, calls)) = parse_blocks(text, &|n, k| self.string_arg(n, k)) {
            let left = left.trim();
            return ((!left.is_empty()).then(|| left.to_string()), calls);
        }
        let body = text.trim().trim_start_matches("<|python_tag|>").trim();
        let calls = match serde_json::from_str::<Value>(body) {
            Ok(Value::Array(l)) => l.iter().map(json_call).collect::<Option<Vec<_>>>().unwrap_or_default(),
            Ok(v) => json_call(&v).into_iter().collect(),
            Err(_) => Vec::new(),
        };
        if calls.is_empty() { (Some(text.to_string()), calls) } else { (None, calls) }
    }
}

/// The grammar a required or named tool choice enforces, with each chosen tool's `parameters`
/// and the field it came from (checked against the caps on its own, so a refusal names it).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolGrammar {
    /// The list of calls the output must be.
    pub spec: Spec,
    /// `(tools[i].function.parameters, the schema)` for each chosen tool.
    pub params: Vec<(String, Value)>,
}

/// One parsed call: the function's name and its arguments as JSON text.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The function.
    pub name: String,
    /// Its arguments, compact JSON.
    pub arguments: String,
}

/// Reads `tools`, `tool_choice` and `parallel_tool_calls`: whether to parse calls from the
/// output, and the constraint `required` or a named choice needs.
pub fn parse(o: &ChatFields) -> Result<(Option<ToolMode>, Option<ToolGrammar>), ApiError> {
    choose(o.tools.as_deref(), o.tool_choice.as_ref(), o.parallel_tool_calls, "tool_choice")
}

/// [`parse`] over the parts, `field` naming the choice in errors (`tool_choice`).
pub fn choose(
    tools: Option<&[Tool]>,
    choice: Option<&ToolChoice>,
    parallel: Option<bool>,
    field: &str,
) -> Result<(Option<ToolMode>, Option<ToolGrammar>), ApiError> {
    let tools: Vec<(String, Value)> =
        tools.unwrap_or_default().iter().enumerate().map(|(i, t)| tool(t, i)).collect::<Result<_, _>>()?;
    let parallel = parallel.unwrap_or(true);
    let mode_str = match choice {
        Some(ToolChoice::Mode(s)) => Some(s.as_str()),
        _ => None,
    };
    if tools.is_empty() && choice.is_some() && mode_str != Some("none") {
        return Err(ApiError::invalid(field, "needs tools"));
    }
    let chosen: Vec<(usize, &(String, Value))> = match choice {
        None => return Ok(((!tools.is_empty()).then(|| mode(&tools)), None)),
        Some(ToolChoice::Mode(s)) if s == "none" => return Ok((None, None)),
        Some(ToolChoice::Mode(s)) if s == "auto" => return Ok((Some(mode(&tools)), None)),
        Some(ToolChoice::Mode(s)) if s == "required" => tools.iter().enumerate().collect(),
        Some(ToolChoice::Named(c)) => {
            let name = c.function.as_ref().and_then(|f| f.name.as_deref());
            let name = name.ok_or_else(|| ApiError::invalid(format!("{field}.function.name"), "is required"))?;
            let found: Vec<_> = tools.iter().enumerate().filter(|(_, (n, _))| n == name).collect();
            if found.is_empty() {
                let msg = format!("{} is not one of the tools", show(&Value::from(name)));
                return Err(ApiError::invalid(format!("{field}.function.name"), msg));
            }
            found
        }
        Some(ToolChoice::Mode(s)) => {
            let msg = format!("expected none, auto, required or a function, got {}", show(&Value::from(s.as_str())));
            return Err(ApiError::invalid(field, msg));
        }
    };
    let items: Vec<Value> = chosen
        .iter()
        .map(|(i, (name, params))| {
            json!({"type": "object", "properties": {"name": {"const": name}, "arguments": own_resource(params, *i)},
                   "required": ["name", "arguments"], "additionalProperties": false})
        })
        .collect();
    let one = parallel && chosen.len() == tools.len() && mode_str == Some("required");
    let mut schema = json!({"type": "array", "items": {"anyOf": items}, "minItems": 1});
    if !one {
        schema["maxItems"] = json!(1);
    }
    let params = chosen.iter().map(|(i, (_, p))| (format!("tools[{i}].function.parameters"), p.clone())).collect();
    Ok((Some(mode(&tools)), Some(ToolGrammar { spec: Spec::JsonSchema(schema), params })))
}

/// Tool `i`'s `parameters` as a schema resource of its own (an `$id`, unless it has one), so
/// the `#...` pointers inside it resolve against it rather than the list of calls around it.
fn own_resource(params: &Value, i: usize) -> Value {
    let mut p = params.clone();
    if let Value::Object(o) = &mut p
        && !o.contains_key("$id")
    {
        o.insert("$id".into(), Value::from(format!("urn:tensorfold:tools:{i}")));
    }
    p
}

fn mode(tools: &[(String, Value)]) -> ToolMode {
    ToolMode { tools: tools.to_vec() }
}

/// `tools[i]`: `{"type": "function", "function": {"name", "parameters"?}}`.
fn tool(t: &Tool, i: usize) -> Result<(String, Value), ApiError> {
    let field = format!("tools[{i}]");
    if t.kind.as_deref() != Some("function") {
        return Err(ApiError::invalid(format!("{field}.type"), "only \"function\" tools are supported"));
    }
    let f = t.function.as_ref().ok_or_else(|| ApiError::invalid(format!("{field}.function"), "expected an object"))?;
    let name = f.name.as_deref().filter(|n| !n.is_empty());
    let name = name.ok_or_else(|| ApiError::invalid(format!("{field}.function.name"), "expected a string"))?;
    let params = match &f.parameters {
        None | Some(Value::Null) => json!({"type": "object"}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(p) => {
            let msg = format!("expected a JSON schema object, got {}", show(p));
            return Err(ApiError::invalid(format!("{field}.function.parameters"), msg));
        }
    };
    Ok((name.to_string(), params))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: Value) -> Result<(Option<ToolMode>, Option<ToolGrammar>), ApiError> {
        parse(&crate::wire::read::<ChatFields>(&v)?)
    }

    fn tools() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
               {"type": "function", "function": {"name": "now"}}])
    }

    #[test]
    fn choices_give_the_mode_and_the_grammar() {
        let (m, s) = p(json!({"tools": tools()})).unwrap();
        let names: Vec<_> = m.unwrap().tools.into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["get_weather", "now"]);
        assert!(s.is_none());
        assert_eq!(p(json!({"tools": tools(), "tool_choice": "none"})).unwrap(), (None, None));
        let t = p(json!({"tools": tools(), "tool_choice": "required"})).unwrap().1.unwrap();
        let Spec::JsonSchema(s) = t.spec else { panic!("required gives a schema") };
        assert_eq!(s["items"]["anyOf"].as_array().unwrap().len(), 2);
        assert_eq!(s["items"]["anyOf"][1]["properties"]["arguments"]["$id"], "urn:tensorfold:tools:1");
        let fields: Vec<_> = t.params.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["tools[0].function.parameters", "tools[1].function.parameters"]);
        assert!(s.get("maxItems").is_none(), "parallel calls allowed");
        let named = json!({"tools": tools(), "tool_choice": {"type": "function", "function": {"name": "now"}}});
        let t = p(named).unwrap().1.unwrap();
        let Spec::JsonSchema(s) = t.spec else { panic!("a named choice gives a schema") };
        assert_eq!(s["items"]["anyOf"][0]["properties"]["name"]["const"], "now");
        assert_eq!(s["maxItems"], 1);
        assert_eq!(t.params, [("tools[1].function.parameters".into(), json!({"type": "object"}))]);
    }

    #[test]
    fn bad_tools_and_choices_are_refused_naming_the_field() {
        let cases = [
            (
                json!({"tools": tools(), "tool_choice": {"type": "function", "function": {"name": "x"}}}),
                "tool_choice.function.name",
            ),
            (json!({"tools": tools(), "tool_choice": "sometimes"}), "tool_choice"),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (json!({"tools": [{"type": "retrieval"}]}), "tools[0].type"),
            (json!({"tools": [{"type": "function", "function": {"name": 3}}]}), "tools[0].function.name"),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 1}}]}),
                "tools[0].function.parameters",
            ),
            (json!({"tools": tools(), "parallel_tool_calls": "yes"}), "parallel_tool_calls"),
            (json!({"tools": [{"type": "function", "function": {"name": "f"}, "x": 1}]}), "tools[0].x"),
            (json!({"tools": [{"type": "function", "function": {"name": "f", "args": {}}}]}), "tools[0].function.args"),
            (
                json!({"tools": tools(), "tool_choice": {"type": "function", "function": {"name": "now", "x": 1}}}),
                "tool_choice.function.x",
            ),
            (json!({"tools": tools(), "tool_choice": {"type": "function", "name": "now"}}), "tool_choice.name"),
        ];
        for (body, field) in cases {
            let e = p(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
    }

    fn parse_calls(text: &str) -> (Option<String>, Vec<Call>) {
        p(json!({"tools": tools()})).unwrap().0.unwrap().parse_calls(text)
    }

    #[test]
    fn calls_parse_from_each_format() {
        let hermes = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>";
        let (content, calls) = parse_calls(hermes);
        assert_eq!(content.as_deref(), Some("Let me check."));
        assert_eq!(
            calls,
            [
                Call { name: "get_weather".into(), arguments: r#"{"city":"Paris"}"#.into() },
                Call { name: "now".into(), arguments: "{}".into() }
            ]
        );
        let llama = "<|python_tag|>{\"name\": \"now\", \"parameters\": {\"tz\": \"UTC\"}}";
        assert_eq!(parse_calls(llama).1, [Call { name: "now".into(), arguments: r#"{"tz":"UTC"}"#.into() }]);
        let listed = r#"[{"name":"now","arguments":{}},{"name":"get_weather","arguments":{"city":"x"}}]"#;
        assert_eq!(parse_calls(listed).1.len(), 2);
        assert_eq!(parse_calls("just text"), (Some("just text".into()), Vec::new()));
        let broken = "<tool_call>{not json</tool_call>";
        assert_eq!(parse_calls(broken), (Some(broken.into()), Vec::new()));
        let glm = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>7</arg_value>\n</tool_call>";
        assert_eq!(parse_calls(glm).1, [Call { name: "get_weather".into(), arguments: r#"{"city":"7"}"#.into() }]);
    }
}
