//! `POST /v1/completions`'s body.

use super::common::{NoOp, Run, Sampling, Structured};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

/// The fields only `/v1/completions` reads.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct CompletionFields {
    /// A text, a list of token ids, or a batch of either.
    #[schema(value_type = Option<Object>)]
    pub prompt: Option<Value>,
    /// vLLM's token-id prompt: a list of ids or a batch of them.
    #[schema(value_type = Option<Vec<i64>>)]
    pub prompt_token_ids: Option<Value>,
    /// Put the prompt before the output (with `logprobs`, the prompt's log-probabilities too).
    pub echo: Option<bool>,
    /// Log-probabilities of each output token, with this many alternatives (0-20 or the cap).
    pub logprobs: Option<i64>,
}

/// A whole `/v1/completions` body, read part by part.
#[derive(Debug, Default)]
pub struct CompletionRequest {
    /// The route's own fields.
    pub fields: CompletionFields,
    /// Sampling.
    pub sampling: Sampling,
    /// Count, length, stops, streaming.
    pub run: Run,
    /// Structured output.
    pub structured: Structured,
    /// Accepted no-op fields.
    pub noop: NoOp,
}

impl CompletionRequest {
    /// Reads `body`, refusing types and keys by path.
    pub fn read(body: &Value) -> Result<CompletionRequest, crate::error::ApiError> {
        let mut p = super::Parts::new(body);
        let r = CompletionRequest {
            fields: p.take()?,
            sampling: p.take()?,
            run: p.take()?,
            structured: p.take()?,
            noop: p.take()?,
        };
        p.finish()?;
        Ok(r)
    }
}
