//! The parts both generation routes read: sampling, how the run goes (count, length, stops,
//! streaming), structured output, and the fields clients send that change nothing here.

use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// Sampling settings (OpenAI's names, and vLLM's `top_k`, `min_p`, `repetition_penalty`).
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct Sampling {
    /// Randomness: 0 is greedy; default 1.
    pub temperature: Option<f64>,
    /// Nucleus sampling mass in (0, 1]; default 1.
    pub top_p: Option<f64>,
    /// Keep the k most likely tokens; -1 or 0 is off.
    pub top_k: Option<i64>,
    /// Drop tokens below this fraction of the best token's probability.
    pub min_p: Option<f64>,
    /// Multiplicative penalty on tokens already seen (1 is off).
    pub repetition_penalty: Option<f64>,
    /// Additive penalty on tokens already seen, in [-2, 2].
    pub presence_penalty: Option<f64>,
    /// Additive penalty per occurrence, in [-2, 2].
    pub frequency_penalty: Option<f64>,
    /// Token id (as a string) to a bias in [-100, 100].
    #[schema(value_type = Option<std::collections::BTreeMap<String, f64>>)]
    pub logit_bias: Option<Map<String, Value>>,
    /// Seed of the draw: the same seed gives the same output.
    pub seed: Option<i64>,
}

/// How a generation runs: how many, how long, when it stops, how it is returned.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct Run {
    /// The served model's name (optional).
    pub model: Option<String>,
    /// Sequences to generate for each prompt.
    pub n: Option<i64>,
    /// Most tokens to generate (completions: 0 only to score the prompt).
    pub max_tokens: Option<i64>,
    /// A stop string or a list of them.
    #[schema(value_type = Option<Vec<String>>)]
    pub stop: Option<Value>,
    /// Token ids that stop the sequence.
    #[schema(value_type = Option<Vec<i64>>)]
    pub stop_token_ids: Option<Value>,
    /// Keep only the prompt's last this many tokens (vLLM; -1: the context length).
    pub truncate_prompt_tokens: Option<i64>,
    /// Only these token ids may be generated (vLLM); not with another constraint.
    #[schema(value_type = Option<Vec<i64>>)]
    pub allowed_token_ids: Option<Value>,
    /// Generate past the end-of-sequence token.
    pub ignore_eos: Option<bool>,
    /// Stream the answer as server-sent events.
    pub stream: Option<bool>,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Allow speculative decoding (the output is the same either way); default true.
    pub draft: Option<bool>,
    /// Name logprob tokens `token_id:<id>` (vLLM).
    pub return_tokens_as_token_ids: Option<bool>,
    /// Log-probabilities of the prompt's tokens, with this many alternatives (vLLM).
    pub prompt_logprobs: Option<i64>,
    /// Tokens generated before EOS or a stop id may end the sequence (vLLM); default 0.
    pub min_tokens: Option<i64>,
    /// Keep the stop string that ended the text at its end (vLLM); default false.
    pub include_stop_str_in_output: Option<bool>,
    /// Leave special tokens out of the text (vLLM); default true.
    pub skip_special_tokens: Option<bool>,
}

/// `stream_options`.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    pub include_usage: Option<bool>,
    /// vLLM's usage on every chunk: only `false` is accepted.
    pub continuous_usage_stats: Option<bool>,
}

/// Fields OpenAI clients send that change nothing here; their values are still checked.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct NoOp {
    /// An end-user id (at most 512 characters).
    pub user: Option<String>,
    /// Up to 16 string values.
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
    pub metadata: Option<Map<String, Value>>,
    /// Only `false`: nothing is stored.
    pub store: Option<bool>,
    /// `auto` or `default`.
    pub service_tier: Option<String>,
}

/// Structured output: at most one of these constrains a request.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct Structured {
    /// OpenAI's output format.
    pub response_format: Option<ResponseFormat>,
    /// vLLM's constraint object: exactly one kind set.
    pub structured_outputs: Option<StructuredOutputs>,
    /// A JSON schema (an object or its JSON text).
    #[schema(value_type = Option<Object>)]
    pub guided_json: Option<Value>,
    /// A regular expression the output matches.
    pub guided_regex: Option<String>,
    /// The output is one of these strings.
    pub guided_choice: Option<Vec<String>>,
    /// A Lark grammar.
    pub guided_grammar: Option<String>,
}

/// `response_format`: `text`, `json_object`, or `json_schema` with its schema.
#[derive(Deserialize, ToSchema, Debug)]
pub struct ResponseFormat {
    /// `text`, `json_object` or `json_schema`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The schema, with type `json_schema`.
    pub json_schema: Option<JsonSchemaFormat>,
}

/// A named JSON schema for the output.
#[derive(Deserialize, ToSchema, Debug)]
pub struct JsonSchemaFormat {
    /// The schema's name.
    pub name: Option<String>,
    /// What the schema is for.
    pub description: Option<String>,
    /// The JSON schema.
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Value>,
    /// Accepted; the output always matches the schema.
    pub strict: Option<bool>,
}

/// vLLM's `structured_outputs`.
#[derive(Deserialize, ToSchema, Debug)]
pub struct StructuredOutputs {
    /// A JSON schema (an object or its JSON text).
    #[schema(value_type = Option<Object>)]
    pub json: Option<Value>,
    /// A regular expression.
    pub regex: Option<String>,
    /// One of these strings.
    pub choice: Option<Vec<String>>,
    /// A Lark grammar.
    pub grammar: Option<String>,
    /// Any JSON object.
    pub json_object: Option<bool>,
}
