//! The bodies of `/tokenize`, `/detokenize` and `/v1/sessions/{name}`.

use super::chat::{Message, Tool};
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// `POST /tokenize`: a prompt, or messages rendered by the chat template.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct TokenizeRequest {
    /// The served model's name (optional).
    pub model: Option<String>,
    /// A text to tokenize.
    pub prompt: Option<String>,
    /// Messages to render and tokenize.
    pub messages: Option<Vec<Message>>,
    /// Add the tokenizer's special tokens (default true for a prompt, false for messages).
    pub add_special_tokens: Option<bool>,
    /// Tools for the chat template.
    pub tools: Option<Vec<Tool>>,
    /// Extra variables for the chat template.
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// End the prompt with the assistant's turn opening; default true (false with
    /// `continue_final_message`).
    pub add_generation_prompt: Option<bool>,
    /// Leave the final message open, as chat completions do.
    pub continue_final_message: Option<bool>,
}

/// `POST /detokenize`: token ids to text.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct DetokenizeRequest {
    /// The served model's name (optional).
    pub model: Option<String>,
    /// The ids.
    #[schema(value_type = Vec<i64>)]
    pub tokens: Option<Value>,
}

/// `POST /v1/sessions/{name}`: the prompt whose cache is saved.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct SessionRequest {
    /// The served model's name (optional).
    pub model: Option<String>,
    /// A text or a list of token ids.
    #[schema(value_type = Object)]
    pub prompt: Option<Value>,
    /// vLLM's token-id prompt.
    #[schema(value_type = Option<Vec<i64>>)]
    pub prompt_token_ids: Option<Value>,
}
