//! `POST /v1/responses`: OpenAI's Responses API, stateless. The input items become chat messages
//! rendered by the model's template, the function tools and `text.format` become the same
//! constraints chat uses, and the run goes through the same checks and engine path, so every
//! promise holds here as on chat. `previous_response_id` is refused (nothing is stored).

use crate::access_log::Tally;
use crate::api::{blocking, specs_for, template_ids};
use crate::body::json_body;
use crate::constraint::Prepared;
use crate::error::ApiError;
use crate::generation::{Generation, SeqSpec};
use crate::request::{Api, RouteFields, check_model, check_prompt_len, max_tokens_for, parse_options};
use crate::responses_reply::{Echo, ResponseReply};
use crate::state::AppState;
use crate::tools::ToolGrammar;
use crate::wire::chat::{ChatFields, FunctionDef, NamedTool, Tool, ToolChoice, ToolName};
use crate::wire::common::{NoOp, Run, Sampling};
use crate::wire::responses::{FunctionTool, Input, InputItem, ItemContent, ResponsesFields};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

/// Handles `POST /v1/responses`.
pub async fn responses(
    State(st): State<Arc<AppState>>,
    tally: Option<Extension<Tally>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let body = json_body(&headers, body, st.limits.max_body_bytes)?;
    let prep = st.clone();
    let (reply, specs) = blocking(move || prepare(&prep, &body.value)).await?;
    let mut generation = Generation::start(&st, specs, &reply.opts, started)?;
    if let Some(t) = tally {
        t.0.set_prompt(reply.prompt_tokens);
        generation.report_to(t.0);
    }
    if reply.opts.stream {
        return Ok(reply.stream(generation));
    }
    let doc = reply.collect(generation).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], doc.to_string()).into_response())
}

/// Reads and checks a body into the reply it will get and the one sequence to run.
fn prepare(st: &AppState, body: &Value) -> Result<(ResponseReply, Vec<SeqSpec>), ApiError> {
    let mut parts = crate::wire::Parts::new(body);
    let f: ResponsesFields = parts.take()?;
    let sampling: Sampling = parts.take()?;
    let noop: NoOp = parts.take()?;
    parts.finish()?;
    check_model(f.model.as_deref(), st)?;
    refuse_stateful(&f)?;
    let run = Run {
        model: f.model.clone(),
        max_tokens: f.max_output_tokens,
        stream: f.stream,
        draft: f.draft,
        ..Run::default()
    };
    let opts = parse_options(st, &sampling, &run, &noop, RouteFields::Chat(&ChatFields::default()))
        .map_err(|e| e.under("max_tokens", "max_output_tokens"))?;
    let tools = chat_tools(f.tools.as_deref().unwrap_or_default());
    let choice = tool_choice(f.tool_choice.as_ref())?;
    let (mode, grammar) = crate::tools::choose(Some(&tools), choice.as_ref(), f.parallel_tool_calls, "tool_choice")
        .map_err(flat_tool_path)?;
    let messages = messages(&f)?;
    let tools_json = (!tools.is_empty()).then(|| chat_tools_json(&tools));
    let prompt = template_ids(st, &messages, tools_json.as_ref(), "input")?;
    check_prompt_len(st, "input", prompt.len())?;
    let max_tokens = max_tokens_for(st, &opts, prompt.len(), st.limits.max_tokens_limit, Api::Chat)
        .map_err(|e| e.under("max_completion_tokens", "max_output_tokens"))?;
    let (reasoning, constraint) = crate::api::reasoning_of(st, &prompt, None, constraint(st, &f, grammar)?);
    crate::api::refuse_harmony_constraint(reasoning, &constraint)?;
    let specs = specs_for(st, &opts, &prompt, max_tokens, &constraint, reasoning);
    let echo = Echo {
        instructions: f.instructions.clone(),
        max_output_tokens: f.max_output_tokens,
        temperature: sampling.temperature.unwrap_or(1.0),
        top_p: sampling.top_p.unwrap_or(1.0),
        tools: body.get("tools").cloned().unwrap_or(json!([])),
        tool_choice: body.get("tool_choice").cloned().unwrap_or(json!("auto")),
        parallel_tool_calls: f.parallel_tool_calls.unwrap_or(true),
        text: body.get("text").cloned().filter(|v| !v.is_null()).unwrap_or(json!({"format": {"type": "text"}})),
        metadata: noop.metadata.map_or(json!({}), Value::Object),
        user: noop.user,
    };
    Ok((ResponseReply::new(st, opts, prompt.len(), mode, echo, reasoning), specs))
}

/// Refuses what needs stored state or output this server does not make.
fn refuse_stateful(f: &ResponsesFields) -> Result<(), ApiError> {
    if f.previous_response_id.as_ref().is_some_and(|v| !v.is_null()) {
        let msg = "this server stores no responses; send the whole conversation as input";
        return Err(ApiError::invalid("previous_response_id", msg));
    }
    if f.truncation.as_deref().is_some_and(|t| t != "disabled") {
        return Err(ApiError::invalid(
            "truncation",
            "only \"disabled\" is supported: a prompt that does not fit is refused",
        ));
    }
    if let Some(first) = f.include.as_ref().and_then(|l| l.first()) {
        return Err(ApiError::invalid("include[0]", format!("{first:?} is not supported")));
    }
    Ok(())
}

/// The Responses API's flat function tools in chat's shape.
fn chat_tools(tools: &[FunctionTool]) -> Vec<Tool> {
    tools
        .iter()
        .map(|t| Tool {
            kind: t.kind.clone(),
            function: Some(FunctionDef {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
                strict: t.strict,
            }),
        })
        .collect()
}

/// Checked tools as the chat template reads them (`{"type": "function", "function": {...}}`).
fn chat_tools_json(tools: &[Tool]) -> Value {
    let list = tools.iter().filter_map(|t| t.function.as_ref()).map(|f| {
        let mut function =
            json!({"name": f.name, "parameters": f.parameters.clone().unwrap_or(json!({"type": "object"}))});
        if let Some(d) = &f.description {
            function["description"] = json!(d);
        }
        json!({"type": "function", "function": function})
    });
    Value::Array(list.collect())
}

/// `tool_choice`: a mode, or `{"type": "function", "name": ...}`.
fn tool_choice(v: Option<&Value>) -> Result<Option<ToolChoice>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(ToolChoice::Mode(s.clone()))),
        Some(Value::Object(o)) => {
            if let Some(k) = o.keys().find(|k| !["type", "name"].contains(&k.as_str())) {
                return Err(ApiError::invalid(format!("tool_choice.{k}"), "unsupported field"));
            }
            if o.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::invalid("tool_choice.type", "only \"function\" is supported"));
            }
            let name = o.get("name").and_then(Value::as_str).map(str::to_string);
            let function = Some(ToolName { name });
            Ok(Some(ToolChoice::Named(NamedTool { kind: Some("function".into()), function })))
        }
        Some(v) => Err(ApiError::invalid(
            "tool_choice",
            format!("expected none, auto, required or a function, got {}", crate::fields::show(v)),
        )),
    }
}

/// Chat's error paths for tools (`tools[0].function.name`) in the flat form (`tools[0].name`).
fn flat_tool_path(e: ApiError) -> ApiError {
    let Some(p) = e.param.clone() else { return e };
    match p.split_once(".function") {
        Some((head, _)) if head.starts_with("tools[") || head == "tool_choice" => {
            e.under(&format!("{head}.function"), head)
        }
        _ => e,
    }
}

/// `instructions` and `input` as chat messages (JSON, keys in order).
fn messages(f: &ResponsesFields) -> Result<Value, ApiError> {
    let mut out: Vec<Value> = Vec::new();
    if let Some(i) = &f.instructions {
        out.push(json!({"role": "system", "content": i}));
    }
    match &f.input {
        None => return Err(ApiError::invalid("input", "is required")),
        Some(Input::Text(t)) => out.push(json!({"role": "user", "content": t})),
        Some(Input::Items(items)) if items.is_empty() => return Err(ApiError::invalid("input", "must not be empty")),
        Some(Input::Items(items)) => {
            for (i, item) in items.iter().enumerate() {
                item_message(item, &format!("input[{i}]"), &mut out)?;
            }
        }
    }
    Ok(Value::Array(out))
}

/// One input item appended as a chat message (consecutive function calls share one assistant
/// message, as chat carries them).
fn item_message(item: &InputItem, field: &str, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let need = |v: &Option<String>, key: &str| {
        v.clone().ok_or_else(|| ApiError::invalid(format!("{field}.{key}"), "is required"))
    };
    match item.kind.as_deref().unwrap_or("message") {
        "message" => {
            let role = need(&item.role, "role")?;
            let role = match role.as_str() {
                "developer" | "system" => "system",
                r @ ("user" | "assistant") => r,
                r => return Err(ApiError::invalid(format!("{field}.role"), format!("{r:?} is not a message role"))),
            };
            let content = match &item.content {
                None => return Err(ApiError::invalid(format!("{field}.content"), "is required")),
                Some(ItemContent::Text(t)) => t.clone(),
                Some(ItemContent::Parts(parts)) => text_parts(parts, field)?,
            };
            out.push(json!({"role": role, "content": content}));
        }
        "function_call" => {
            let call = json!({"id": need(&item.call_id, "call_id")?, "type": "function",
                              "function": {"name": need(&item.name, "name")?, "arguments": need(&item.arguments, "arguments")?}});
            let joins = out.last().is_some_and(|m| m["role"] == "assistant" && m["tool_calls"].is_array());
            match out.last_mut().filter(|_| joins).and_then(|m| m["tool_calls"].as_array_mut()) {
                Some(calls) => calls.push(call),
                None => out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]})),
            }
        }
        "function_call_output" => {
            out.push(json!({"role": "tool", "tool_call_id": need(&item.call_id, "call_id")?,
                            "content": need(&item.output, "output")?}));
        }
        other => {
            let msg = format!("{other:?} items are not supported (message, function_call, function_call_output)");
            return Err(ApiError::invalid(format!("{field}.type"), msg));
        }
    }
    Ok(())
}

/// A message's text parts (`input_text`, `output_text`) joined by newlines.
fn text_parts(parts: &[crate::wire::responses::ContentPart], field: &str) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(parts.len());
    for (j, p) in parts.iter().enumerate() {
        let annotated = p.annotations.as_ref().is_some_and(|a| a.as_array().is_none_or(|l| !l.is_empty()));
        let other = p.image_url.is_some() || p.file_id.is_some() || annotated;
        match (p.kind.as_deref(), &p.text) {
            (Some("input_text" | "output_text"), Some(t)) if !other => texts.push(t.as_str()),
            _ => {
                let msg = "only text parts ({\"type\": \"input_text\", \"text\": ...}) are supported";
                return Err(ApiError::invalid(format!("{field}.content[{j}]"), msg));
            }
        }
    }
    Ok(texts.join("\n"))
}

/// `text.format`'s constraint, or the forced tool choice's (not both).
fn constraint(st: &AppState, f: &ResponsesFields, grammar: Option<ToolGrammar>) -> Result<Option<Prepared>, ApiError> {
    let format = f.text.as_ref().and_then(|t| t.format.as_ref());
    let spec = match format {
        Some(fmt) => crate::structured::from_format(&fmt.as_response_format(), "text.format")?,
        None => None,
    };
    match (grammar, spec) {
        (Some(_), Some(_)) => {
            Err(ApiError::invalid("tool_choice", "a required or named tool choice takes no text.format"))
        }
        (Some(t), None) => {
            for (field, params) in t.params {
                let field = field.replacen(".function.", ".", 1);
                crate::constraint::check(st, &tf_grammar::Spec::JsonSchema(params), &field)?;
            }
            Ok(Some(crate::constraint::prepare(st, &t.spec, "tool_choice")?))
        }
        (None, Some((spec, field))) => Ok(Some(crate::constraint::prepare(st, &spec, &field)?)),
        (None, None) => Ok(None),
    }
}
