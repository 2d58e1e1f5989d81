//! `POST /v1/chat/completions`'s body: messages, tools and the chat-only fields.

use super::common::{NoOp, Run, Sampling, Structured};
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::{Map, Value};
use utoipa::ToSchema;
use utoipa::openapi::schema::{ArrayBuilder, Object, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};

/// The fields only `/v1/chat/completions` reads.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct ChatFields {
    /// The conversation, rendered by the model's chat template.
    pub messages: Option<Vec<Message>>,
    /// Functions the model may call.
    pub tools: Option<Vec<Tool>>,
    /// `none`, `auto`, `required`, or `{"type": "function", "function": {"name": ...}}`.
    pub tool_choice: Option<ToolChoice>,
    /// With `required` over every tool: allow several calls.
    pub parallel_tool_calls: Option<bool>,
    /// Extra variables for the chat template.
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// End the prompt with the assistant's turn opening; default true (false with
    /// `continue_final_message`).
    pub add_generation_prompt: Option<bool>,
    /// Leave the final message open (no end of its turn): the model continues its text, a
    /// prefill of the reply; not with `add_generation_prompt: true`.
    pub continue_final_message: Option<bool>,
    /// `low`, `medium` or `high`: passed to the chat template as `reasoning_effort` (gpt-oss's
    /// reads it); refused where the model's template does not read it.
    pub reasoning_effort: Option<String>,
    /// Most tokens to generate (OpenAI's newer name of `max_tokens`).
    pub max_completion_tokens: Option<i64>,
    /// Return log-probabilities of the output tokens.
    pub logprobs: Option<bool>,
    /// Alternatives per token (needs `logprobs: true`).
    pub top_logprobs: Option<i64>,
}

/// One chat message.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, or another role the template knows.
    pub role: Option<String>,
    /// Text, or a list of text parts.
    pub content: Option<Content>,
    /// The author's name.
    pub name: Option<String>,
    /// An assistant's tool calls.
    pub tool_calls: Option<Vec<ToolCall>>,
    /// The call a tool message answers.
    pub tool_call_id: Option<String>,
    /// An assistant's reasoning, for templates that show it.
    pub reasoning_content: Option<String>,
    /// An assistant's reasoning (vLLM's newer name).
    pub reasoning: Option<String>,
    /// A returned message's refusal: accepted only when empty.
    #[schema(value_type = Option<String>)]
    pub refusal: Option<Value>,
    /// A returned message's annotations: accepted only when empty.
    #[schema(value_type = Option<Vec<Object>>)]
    pub annotations: Option<Value>,
    /// A returned message's audio: accepted only when empty.
    #[schema(value_type = Option<Object>)]
    pub audio: Option<Value>,
    /// The legacy function call: accepted only when empty.
    #[schema(value_type = Option<Object>)]
    pub function_call: Option<Value>,
}

/// A message's content: text, or parts of which only text parts are supported.
#[derive(Debug, Clone)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Content parts.
    Parts(Vec<Part>),
}

/// A content part; other types than `text` are refused.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct Part {
    /// `text` (the only kind supported).
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The text.
    pub text: Option<String>,
    /// An image part's image (refused).
    #[schema(value_type = Option<Object>)]
    pub image_url: Option<Value>,
    /// An audio part's audio (refused).
    #[schema(value_type = Option<Object>)]
    pub input_audio: Option<Value>,
    /// A file part's file (refused).
    #[schema(value_type = Option<Object>)]
    pub file: Option<Value>,
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Content, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("text or a list of text parts")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Content, E> {
                Ok(Content::Text(s.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Vec::new();
                while let Some(p) = seq.next_element::<Part>()? {
                    parts.push(p);
                }
                Ok(Content::Parts(parts))
            }
        }
        d.deserialize_any(V)
    }
}

/// An assistant message's tool call, as the API returned it.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct ToolCall {
    /// The call's id.
    pub id: Option<String>,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The function called.
    pub function: Option<FunctionCall>,
    /// The call's index (streamed calls).
    pub index: Option<i64>,
}

/// A called function.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct FunctionCall {
    /// The function's name.
    pub name: Option<String>,
    /// Its arguments as JSON text (an object is accepted too).
    #[schema(value_type = Option<String>)]
    pub arguments: Option<Value>,
}

/// A tool the model may call.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct Tool {
    /// `function` (the only kind supported).
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The function.
    pub function: Option<FunctionDef>,
}

/// A function's declaration.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct FunctionDef {
    /// Its name.
    pub name: Option<String>,
    /// What it does.
    pub description: Option<String>,
    /// Its arguments' JSON schema.
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
    /// Accepted; arguments of a forced call always match the schema.
    pub strict: Option<bool>,
}

/// `tool_choice`: a mode or a named function.
#[derive(Debug, Clone)]
pub enum ToolChoice {
    /// `none`, `auto` or `required`.
    Mode(String),
    /// `{"type": "function", "function": {"name": ...}}`.
    Named(NamedTool),
}

/// A named tool choice.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct NamedTool {
    /// `function`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The function to call.
    pub function: Option<ToolName>,
}

/// A function named by a tool choice.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct ToolName {
    /// The function's name.
    pub name: Option<String>,
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolChoice, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolChoice;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("none, auto, required or a function")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ToolChoice, E> {
                Ok(ToolChoice::Mode(s.to_string()))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, m: A) -> Result<ToolChoice, A::Error> {
                NamedTool::deserialize(de::value::MapAccessDeserializer::new(m)).map(ToolChoice::Named)
            }
        }
        d.deserialize_any(V)
    }
}

/// A whole `/v1/chat/completions` body, read part by part.
#[derive(Debug, Default)]
pub struct ChatRequest {
    /// The route's own fields.
    pub fields: ChatFields,
    /// Sampling.
    pub sampling: Sampling,
    /// Count, length, stops, streaming.
    pub run: Run,
    /// Structured output.
    pub structured: Structured,
    /// Accepted no-op fields.
    pub noop: NoOp,
}

impl ChatRequest {
    /// Reads `body`, refusing types and keys by path.
    pub fn read(body: &Value) -> Result<ChatRequest, crate::error::ApiError> {
        let mut p = super::Parts::new(body);
        let r = ChatRequest {
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

impl utoipa::PartialSchema for Content {
    fn schema() -> RefOr<Schema> {
        let parts = ArrayBuilder::new().items(Ref::from_schema_name("Part"));
        OneOfBuilder::new().item(Object::with_type(Type::String)).item(parts).into()
    }
}

impl ToSchema for Content {
    fn schemas(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push(("Part".into(), <Part as utoipa::PartialSchema>::schema()));
    }
}

impl utoipa::PartialSchema for ToolChoice {
    fn schema() -> RefOr<Schema> {
        let modes = ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["none", "auto", "required"]));
        OneOfBuilder::new().item(modes).item(Ref::from_schema_name("NamedTool")).into()
    }
}

impl ToSchema for ToolChoice {
    fn schemas(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push(("NamedTool".into(), <NamedTool as utoipa::PartialSchema>::schema()));
        out.push(("ToolName".into(), <ToolName as utoipa::PartialSchema>::schema()));
    }
}
