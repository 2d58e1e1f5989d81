//! The replies' shapes, for the OpenAPI document only (respond.rs writes them; the schemathesis
//! run checks every reply against these).

#![allow(dead_code)]

use serde_json::Value;
use utoipa::ToSchema;

/// An error, in OpenAI's shape.
#[derive(ToSchema)]
pub struct ErrorReply {
    /// What went wrong.
    error: ErrorDetail,
}

/// The error's details.
#[derive(ToSchema)]
pub struct ErrorDetail {
    /// A sentence naming the field at fault.
    message: String,
    /// `invalid_request_error`, `rate_limit_error` or `server_error`.
    #[schema(rename = "type")]
    kind: String,
    /// The request field at fault (`messages[1].content`), if any.
    param: Option<String>,
    /// A short machine-readable code.
    code: String,
}

/// Token counts.
#[derive(ToSchema)]
pub struct Usage {
    /// Tokens of the prompt(s).
    prompt_tokens: u64,
    /// Tokens generated.
    completion_tokens: u64,
    /// Their sum.
    total_tokens: u64,
    /// Where the prompt tokens came from.
    prompt_tokens_details: PromptTokensDetails,
    /// What the completion tokens were (with `--reasoning-parser`; absent without one).
    completion_tokens_details: Option<CompletionTokensDetails>,
}

/// What a reply's completion tokens were.
#[derive(ToSchema)]
pub struct CompletionTokensDetails {
    /// Tokens generated before the answer's first text, where the output had reasoning.
    reasoning_tokens: u64,
}

/// Where a reply's prompt tokens came from.
#[derive(ToSchema)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache (each prompt counted once).
    cached_tokens: u64,
}

/// A `/v1/completions` reply (not streamed).
#[derive(ToSchema)]
pub struct Completion {
    /// `cmpl-...`.
    id: String,
    /// `text_completion`.
    object: String,
    /// Unix seconds.
    created: u64,
    /// The served model.
    model: String,
    /// One choice per prompt and `n`.
    choices: Vec<CompletionChoice>,
    /// Token counts.
    usage: Usage,
}

/// A completion choice.
#[derive(ToSchema)]
pub struct CompletionChoice {
    /// Its index.
    index: u64,
    /// The text (after the prompt with `echo`).
    text: String,
    /// Log-probabilities, when asked for.
    #[schema(value_type = Option<Object>)]
    logprobs: Option<Value>,
    /// `stop`, `length` or `abort`.
    finish_reason: Option<String>,
    /// vLLM's prompt logprobs, when asked for.
    #[schema(value_type = Option<Vec<Object>>)]
    prompt_logprobs: Option<Value>,
}

/// A `/v1/chat/completions` reply (not streamed).
#[derive(ToSchema)]
pub struct ChatCompletion {
    /// `chatcmpl-...`.
    id: String,
    /// `chat.completion`.
    object: String,
    /// Unix seconds.
    created: u64,
    /// The served model.
    model: String,
    /// `n` choices.
    choices: Vec<ChatChoice>,
    /// Token counts.
    usage: Usage,
    /// vLLM's prompt logprobs, when asked for.
    #[schema(value_type = Option<Vec<Object>>)]
    prompt_logprobs: Option<Value>,
}

/// A chat choice.
#[derive(ToSchema)]
pub struct ChatChoice {
    /// Its index.
    index: u64,
    /// The assistant's message.
    message: AssistantMessage,
    /// Log-probabilities, when asked for.
    #[schema(value_type = Option<Object>)]
    logprobs: Option<Value>,
    /// `stop`, `length`, `tool_calls` or `abort`.
    finish_reason: Option<String>,
}

/// The assistant's answer.
#[derive(ToSchema)]
pub struct AssistantMessage {
    /// `assistant`.
    role: String,
    /// The text (null when it is only tool calls).
    content: Option<String>,
    /// The calls parsed from the output.
    #[schema(value_type = Option<Vec<Object>>)]
    tool_calls: Option<Value>,
    /// The reasoning split off the answer (`--reasoning-parser`; absent without one).
    reasoning_content: Option<String>,
}

/// `/v1/models`.
#[derive(ToSchema)]
pub struct ModelList {
    /// `list`.
    object: String,
    /// The served model.
    data: Vec<ModelObject>,
}

/// The served model.
#[derive(ToSchema)]
pub struct ModelObject {
    /// Its name.
    id: String,
    /// `model`.
    object: String,
    /// 0.
    created: u64,
    /// `tensorfold`.
    owned_by: String,
    /// Its name.
    root: String,
    /// The context length served.
    max_model_len: u64,
}

/// `/tokenize`'s reply.
#[derive(ToSchema)]
pub struct TokenizeReply {
    /// How many ids.
    count: u64,
    /// The context length served.
    max_model_len: u64,
    /// The ids.
    tokens: Vec<u32>,
}

/// `/detokenize`'s reply.
#[derive(ToSchema)]
pub struct DetokenizeReply {
    /// The text.
    prompt: String,
}

/// `/health`'s reply.
#[derive(ToSchema)]
pub struct HealthReply {
    /// `ok`.
    status: String,
}

/// `/version`'s reply (as vLLM's).
#[derive(ToSchema)]
pub struct VersionReply {
    /// TensorFold's version.
    version: String,
}

/// A saved or restored session.
#[derive(ToSchema)]
pub struct SessionReply {
    /// `session`.
    object: String,
    /// Its name.
    name: String,
    /// Tokens it holds.
    tokens: u64,
}
