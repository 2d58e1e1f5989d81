//! `POST /v1/completions` and `POST /v1/chat/completions`: parse and check on a blocking thread
//! (JSON, templates and tokenization stay off the async workers), then run and respond.

use crate::access_log::Tally;
use crate::body::json_body;
use crate::chat_ids;
use crate::constraint::Prepared;
use crate::error::ApiError;
use crate::generation::{Generation, SeqSpec};
use crate::reasoning::ReasoningParser;
use crate::request::{
    Api, Options, RouteFields, check_model, check_prompt_len, max_tokens_for, parse_options, parse_prompts, seed_for,
};
use crate::respond::Reply;
use crate::state::AppState;
use crate::template::TemplateInput;
use crate::wire::chat::{ChatRequest, Content, Message};
use crate::wire::common::Structured;
use crate::wire::completions::CompletionRequest;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use minijinja::Value as JValue;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tf_core::TokenIds;
use tf_tokenize::Tokenizer;

/// Tokens a completion generates when the request names no `max_tokens` (OpenAI's default).
const COMPLETIONS_DEFAULT_MAX_TOKENS: usize = 16;

/// Handles `POST /v1/completions`.
pub async fn completions(
    State(st): State<Arc<AppState>>,
    tally: Option<Extension<Tally>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    run(st, tally.map(|t| t.0), headers, body, Api::Completions).await
}

/// Handles `POST /v1/chat/completions`.
pub async fn chat(
    State(st): State<Arc<AppState>>,
    tally: Option<Extension<Tally>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    run(st, tally.map(|t| t.0), headers, body, Api::Chat).await
}

async fn run(
    st: Arc<AppState>,
    tally: Option<Tally>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    api: Api,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let body = json_body(&headers, body, st.limits.max_body_bytes)?;
    let prep = st.clone();
    let (reply, specs) = blocking(move || match api {
        Api::Completions => prepare_completions(&prep, &body.value),
        Api::Chat => prepare_chat(&prep, &body.value, &body.raw),
    })
    .await?;
    let mut generation = Generation::start(&st, specs, &reply.opts, started)?;
    if let Some(t) = tally {
        t.set_prompt(reply.prompt_tokens);
        generation.report_to(t);
    }
    if reply.opts.stream {
        return Ok(reply.stream(generation));
    }
    let doc = reply.collect(generation).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], doc.to_string()).into_response())
}

/// Runs CPU-bound request preparation on tokio's blocking pool.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::internal(format!("request preparation failed: {e}")))?
}

fn reply(st: &AppState, api: Api, opts: Options, prompt_tokens: usize, echo: Vec<Option<String>>) -> Reply {
    reply_with_tools(st, api, opts, prompt_tokens, echo, None, None)
}

fn reply_with_tools(
    st: &AppState,
    api: Api,
    opts: Options,
    prompt_tokens: usize,
    echo: Vec<Option<String>>,
    tools: Option<crate::tools::ToolMode>,
    reasoning: Option<ReasoningParser>,
) -> Reply {
    let prefix = if api == Api::Chat { "chatcmpl" } else { "cmpl" };
    Reply {
        api,
        id: format!("{prefix}-{:016x}", st.random_u64()),
        created: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        model: st.model.name.clone(),
        opts,
        prompt_tokens,
        echo,
        tokenizer: st.model.tokenizer.clone(),
        tools,
        reasoning: reasoning.filter(|_| api == Api::Chat),
    }
}

/// `n` sequences of one prompt, the first with the request's seed; `reasoning`: where a chat's
/// output reasons.
pub(crate) fn specs_for(
    st: &AppState,
    opts: &Options,
    prompt: &TokenIds,
    max_tokens: usize,
    constraint: &Option<Prepared>,
    reasoning: Option<ReasoningParser>,
) -> Vec<SeqSpec> {
    (0..opts.n)
        .map(|j| {
            let mut params = opts.params.clone();
            params.seed = seed_for(st, opts.seed, j);
            SeqSpec { prompt: prompt.clone(), params, max_tokens, constraint: constraint.clone(), reasoning }
        })
        .collect()
}

/// A chat's reasoning parser as `prompt` leaves it (and `prefill`, the text of a final message
/// left open, where there is one), and `constraint` holding on its answer alone (reasoning.rs
/// `Gate`).
pub(crate) fn reasoning_of(
    st: &AppState,
    prompt: &TokenIds,
    prefill: Option<&str>,
    constraint: Option<Prepared>,
) -> (Option<ReasoningParser>, Option<Prepared>) {
    let tok = st.model.tokenizer.as_deref();
    let parser = st.model.reasoning.map(|p| p.for_prompt(prompt.as_slice(), tok));
    let Some(parser) = parser.map(|p| prefill.map_or(p, |text| p.for_prefill(text))) else {
        return (None, constraint);
    };
    let gate = tok.and_then(|t| parser.gate(t));
    (Some(parser), constraint.map(|c| c.after(gate)))
}

fn prepare_completions(st: &AppState, body: &Value) -> Result<(Reply, Vec<SeqSpec>), ApiError> {
    let r = CompletionRequest::read(body)?;
    check_model(r.run.model.as_deref(), st)?;
    let opts = parse_options(st, &r.sampling, &r.run, &r.noop, RouteFields::Completions(&r.fields))?;
    let prompts = parse_prompts(&r.fields, st, opts.truncate)?;
    let constraint = with_allowed(&opts, constraint_of(st, &r.structured)?)?;
    if prompts.len() * opts.n > st.limits.max_n {
        let msg =
            format!("{} prompts x n = {} sequences; at most {} are allowed", prompts.len(), opts.n, st.limits.max_n);
        return Err(ApiError::invalid("n", msg));
    }
    let mut specs = Vec::new();
    let mut echo = Vec::new();
    for p in &prompts {
        let max_tokens = max_tokens_for(st, &opts, p.ids.len(), COMPLETIONS_DEFAULT_MAX_TOKENS, Api::Completions)?;
        specs.extend(specs_for(st, &opts, &p.ids, max_tokens, &constraint, None));
        let text = match (opts.echo, &p.text, &st.model.tokenizer) {
            (false, _, _) => None,
            (true, Some(t), _) => Some(t.clone()),
            (true, None, Some(tok)) => Some(tok.decode(p.ids.as_slice(), false).unwrap_or_default()),
            (true, None, None) => Some(String::new()),
        };
        echo.extend(std::iter::repeat_n(text, opts.n));
    }
    let prompt_tokens = prompts.iter().map(|p| p.ids.len()).sum();
    Ok((reply(st, Api::Completions, opts, prompt_tokens, echo), specs))
}

fn prepare_chat(st: &AppState, body: &Value, raw: &[u8]) -> Result<(Reply, Vec<SeqSpec>), ApiError> {
    let r = ChatRequest::read(body)?;
    check_model(r.run.model.as_deref(), st)?;
    let opts = parse_options(st, &r.sampling, &r.run, &r.noop, RouteFields::Chat(&r.fields))?;
    let chat = ChatInput {
        messages: r.fields.messages.as_ref(),
        add_generation_prompt: r.fields.add_generation_prompt,
        continue_final_message: r.fields.continue_final_message,
        reasoning_effort: r.fields.reasoning_effort.as_deref(),
    };
    let mut prompt = chat_prompt(st, &chat, raw, false)?;
    if let Some(k) = opts.truncate {
        prompt.keep_last(k);
    }
    check_prompt_len(st, "messages", prompt.len())?;
    let max_tokens = max_tokens_for(st, &opts, prompt.len(), st.limits.max_tokens_limit, Api::Chat)?;
    let (tools, tool_grammar) = crate::tools::parse(&r.fields)?;
    let constraint = match (tool_grammar, constraint_of(st, &r.structured)?) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("tool_choice", "a required or named tool choice takes no other constraint"));
        }
        (Some(t), None) => {
            for (field, params) in t.params {
                crate::constraint::check(st, &tf_grammar::Spec::JsonSchema(params), &field)?;
            }
            Some(crate::constraint::prepare(st, &t.spec, "tool_choice")?)
        }
        (None, c) => c,
    };
    let constraint = with_allowed(&opts, constraint)?;
    let prefill = chat.continue_final_message.unwrap_or(false).then(|| final_text(chat.messages)).flatten();
    let (reasoning, constraint) = reasoning_of(st, &prompt, prefill.as_deref(), constraint);
    refuse_harmony_constraint(reasoning, &constraint)?;
    let specs = specs_for(st, &opts, &prompt, max_tokens, &constraint, reasoning);
    let echo = vec![None; opts.n];
    let prompt_tokens = prompt.len();
    Ok((reply_with_tools(st, Api::Chat, opts, prompt_tokens, echo, tools, reasoning), specs))
}

/// `constraint`, or the request's `allowed_token_ids` where it has them and no other constraint
/// (400 naming them beside one).
fn with_allowed(opts: &Options, constraint: Option<Prepared>) -> Result<Option<Prepared>, ApiError> {
    match (&opts.allowed, constraint) {
        (None, c) => Ok(c),
        (Some(m), None) => Ok(Some(Prepared::allowed(m.clone()))),
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "allowed_token_ids",
            "takes no other constraint (response_format, structured_outputs, guided_*, a required or named tool choice)",
        )),
    }
}

/// The request's structured-output constraint, compiled (here, never on the engine thread).
fn constraint_of(st: &AppState, o: &Structured) -> Result<Option<Prepared>, ApiError> {
    match crate::structured::parse(o)? {
        Some((spec, field)) => Ok(Some(crate::constraint::prepare(st, &spec, &field)?)),
        None => Ok(None),
    }
}

/// The order-preserving parts of a chat body (tool schemas keep their key order, as in HF).
#[derive(Deserialize)]
struct ChatParts {
    #[serde(default)]
    messages: Option<JValue>,
    #[serde(default)]
    tools: Option<JValue>,
    #[serde(default)]
    chat_template_kwargs: Option<JValue>,
}

/// What the chat template renders, read from a body's typed parts (the raw body gives the
/// messages and tools again with their keys in order, as the template must see them).
pub struct ChatInput<'a> {
    /// The messages (checked here).
    pub messages: Option<&'a Vec<Message>>,
    /// Whether the prompt ends with the assistant's turn opening (default true, false with
    /// `continue_final_message`).
    pub add_generation_prompt: Option<bool>,
    /// Whether the final message is left open for the model to continue (default false).
    pub continue_final_message: Option<bool>,
    /// The template's `reasoning_effort`, where the request gives one.
    pub reasoning_effort: Option<&'a str>,
}

/// The ids of a chat request's prompt: rendered by the template, users' text kept literal.
pub fn chat_prompt(st: &AppState, o: &ChatInput, raw: &[u8], add_special_tokens: bool) -> Result<TokenIds, ApiError> {
    let tok = st
        .model
        .tokenizer
        .as_ref()
        .ok_or_else(|| ApiError::invalid("messages", "this model has no tokenizer; send token ids"))?;
    let mut literals = Vec::new();
    let text = render_chat(st, o, raw, tok, &mut literals)?;
    chat_ids::encode(tok, &text, &literals, add_special_tokens)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))
}

/// Refuses a constraint under gpt-oss's harmony parser: its grammar would have to start after
/// the `final` channel's header, which is not built yet.
pub(crate) fn refuse_harmony_constraint(
    reasoning: Option<ReasoningParser>,
    constraint: &Option<Prepared>,
) -> Result<(), ApiError> {
    if reasoning == Some(ReasoningParser::GptOss) && constraint.is_some() {
        let msg = "structured output (response_format, guided_*, a required or named tool choice, allowed_token_ids) \
                   with --reasoning-parser gpt_oss is not supported yet";
        return Err(ApiError::invalid("response_format", msg));
    }
    Ok(())
}

/// The final message's text (its content, text parts joined), if any.
fn final_text(messages: Option<&Vec<Message>>) -> Option<String> {
    match &messages?.last()?.content {
        Some(Content::Text(t)) => Some(t.clone()),
        Some(Content::Parts(parts)) => Some(parts.iter().filter_map(|p| p.text.as_deref()).collect()),
        None => None,
    }
}

/// Renders a chat request's prompt text; contents that spell special tokens are swapped for
/// sentinels (collected in `literals`) for [`chat_ids::encode`].
fn render_chat(
    st: &AppState,
    o: &ChatInput,
    raw: &[u8],
    tok: &Tokenizer,
    literals: &mut Vec<String>,
) -> Result<String, ApiError> {
    crate::messages::check(o.messages)?;
    let open = o.continue_final_message.unwrap_or(false);
    if open && o.add_generation_prompt == Some(true) {
        let msg = "leaves the final message open; it cannot be used with add_generation_prompt: true";
        return Err(ApiError::invalid("continue_final_message", msg));
    }
    let parts: ChatParts =
        serde_json::from_slice(raw).map_err(|e| ApiError::malformed(format!("malformed JSON: {e}")))?;
    let mut extra = Vec::new();
    if let Some(kw) = parts.chat_template_kwargs.filter(|v| !v.is_none()) {
        for key in kw.try_iter().map_err(|e| ApiError::invalid("chat_template_kwargs", e.to_string()))? {
            let value = kw.get_item(&key).unwrap_or_default();
            extra.push((key.to_string(), value));
        }
    }
    if let Some(effort) = o.reasoning_effort {
        if !matches!(effort, "low" | "medium" | "high") {
            return Err(ApiError::invalid("reasoning_effort", "one of low, medium or high"));
        }
        if !st.template.as_ref().is_some_and(|t| t.reads("reasoning_effort")) {
            let msg = "this model's chat template does not read reasoning_effort (gpt-oss's does)";
            return Err(ApiError::invalid("reasoning_effort", msg));
        }
        // The field wins over a chat_template_kwargs entry of the same name.
        extra.retain(|(k, _)| k != "reasoning_effort");
        extra.push(("reasoning_effort".into(), JValue::from(effort)));
    }
    let input = TemplateInput {
        messages: parts.messages.map(normalize_messages).unwrap_or_default(),
        tools: parts.tools.filter(|v| !v.is_none()),
        add_generation_prompt: o.add_generation_prompt.unwrap_or(!open),
        extra,
    };
    render(st, input, tok, literals, "messages", open)
}

/// Renders `input` through the model's chat template (its messages' special-token spellings
/// kept literal), cut after the final message's text where `open` (`continue_final_message`);
/// `field` names the request's messages in errors.
fn render(
    st: &AppState,
    mut input: TemplateInput,
    tok: &Tokenizer,
    literals: &mut Vec<String>,
    field: &str,
    open: bool,
) -> Result<String, ApiError> {
    let template = st
        .template
        .as_ref()
        .ok_or_else(|| ApiError::invalid(field, "this model has no chat template; use /v1/completions"))?;
    input.messages = chat_ids::protect(input.messages, tok, literals);
    // The final message's text as the template sees it (parts joined, special-token spellings
    // swapped for their sentinels).
    let last = open.then(|| input.messages.try_iter().ok().and_then(|it| it.last())).flatten();
    let content = last.and_then(|m| m.get_attr("content").ok()).and_then(|c| c.as_str().map(str::to_owned));
    let text = template
        .render_capped(input, st.max_prompt_bytes())
        .map_err(|e| ApiError::invalid(field, format!("chat template: {e}")))?;
    if !open {
        return Ok(text);
    }
    crate::template::continue_final::cut(&text, content.as_deref().unwrap_or(""))
        .map(str::to_owned)
        .map_err(|e| ApiError::invalid("continue_final_message", e))
}

/// The ids of checked messages and tools (chat's shapes, as JSON) rendered by the chat template
/// with the generation prompt; `field` names them in errors.
pub fn template_ids(st: &AppState, messages: &Value, tools: Option<&Value>, field: &str) -> Result<TokenIds, ApiError> {
    let tok = st
        .model
        .tokenizer
        .as_ref()
        .ok_or_else(|| ApiError::invalid(field, "this model has no tokenizer; send token ids"))?;
    let jinja = |v: &Value| JValue::deserialize(v).map_err(|e| ApiError::invalid(field, e.to_string()));
    let input = TemplateInput {
        messages: jinja(messages)?,
        tools: tools.map(jinja).transpose()?,
        add_generation_prompt: true,
        extra: Vec::new(),
    };
    let mut literals = Vec::new();
    let text = render(st, input, tok, &mut literals, field, false)?;
    chat_ids::encode(tok, &text, &literals, false).map_err(|e| ApiError::invalid(field, e.to_string()))
}

/// Joins list-of-text-parts contents into one string (vLLM's "string" content format).
fn normalize_messages(messages: JValue) -> JValue {
    let Ok(iter) = messages.try_iter() else { return messages };
    iter.map(|m| {
        let content = m.get_attr("content").unwrap_or_default();
        if content.kind() != minijinja::value::ValueKind::Seq {
            return m;
        }
        let texts: Vec<String> = content
            .try_iter()
            .into_iter()
            .flatten()
            .map(|p| p.get_attr("text").ok().and_then(|t| t.as_str().map(str::to_string)).unwrap_or_default())
            .collect();
        let keys: Vec<JValue> = m.try_iter().into_iter().flatten().collect();
        JValue::from_pairs(keys.into_iter().map(|k| {
            let v = match k.as_str() == Some("content") {
                true => JValue::from(texts.join("\n")),
                false => m.get_item(&k).unwrap_or_default(),
            };
            (k, v)
        }))
    })
    .collect()
}
