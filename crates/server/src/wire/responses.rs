//! `POST /v1/responses`'s body (OpenAI's Responses API, stateless) and its reply's shape.

use super::common::{JsonSchemaFormat, ResponseFormat};
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::schema::{ArrayBuilder, Object, OneOfBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};

/// The fields `/v1/responses` reads (beside the sampling part, `temperature`, `top_p`, `seed`, ...,
/// and the no-op part, `user`, `metadata`, `store`, `service_tier`).
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct ResponsesFields {
    /// The served model's name (optional).
    pub model: Option<String>,
    /// A text (one user message) or a list of items: messages, function calls and their outputs.
    pub input: Option<Input>,
    /// A system message put before the input.
    pub instructions: Option<String>,
    /// Most tokens to generate.
    pub max_output_tokens: Option<i64>,
    /// Function tools: `{"type": "function", "name", "description", "parameters", "strict"}`.
    pub tools: Option<Vec<FunctionTool>>,
    /// `none`, `auto`, `required`, or `{"type": "function", "name": ...}`.
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    /// With `required` over every tool: allow several calls.
    pub parallel_tool_calls: Option<bool>,
    /// The output's format.
    pub text: Option<TextConfig>,
    /// Stream events (`response.created`, `response.output_text.delta`, ..., `response.completed`).
    pub stream: Option<bool>,
    /// Refused: this server keeps no responses (send the whole conversation as `input`).
    #[schema(value_type = Option<String>)]
    pub previous_response_id: Option<Value>,
    /// Only `disabled`: a prompt that does not fit is refused.
    pub truncation: Option<String>,
    /// Extra output to include: none is supported, so only an empty list.
    pub include: Option<Vec<String>>,
    /// Allow speculative decoding (the output is the same either way); default true.
    pub draft: Option<bool>,
}

/// `text`: the output's format.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct TextConfig {
    /// `{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema", "name", "schema", "strict"}`.
    pub format: Option<TextFormat>,
}

/// The Responses API's format: the schema's fields beside `type`.
#[derive(Deserialize, ToSchema, Debug, Default)]
pub struct TextFormat {
    /// `text`, `json_object` or `json_schema`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
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

impl TextFormat {
    /// The same format in chat's `response_format` shape.
    pub fn as_response_format(&self) -> ResponseFormat {
        let json_schema = (self.kind.as_deref() == Some("json_schema")).then(|| JsonSchemaFormat {
            name: self.name.clone(),
            description: self.description.clone(),
            schema: self.schema.clone(),
            strict: self.strict,
        });
        ResponseFormat { kind: self.kind.clone(), json_schema }
    }
}

/// A function tool, in the Responses API's flat form.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct FunctionTool {
    /// `function` (the only kind supported).
    #[serde(rename = "type")]
    pub kind: Option<String>,
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

/// `input`: a text or a list of items.
#[derive(Debug, Clone)]
pub enum Input {
    /// One user message.
    Text(String),
    /// Messages, function calls and function call outputs.
    Items(Vec<InputItem>),
}

/// An input item: a message (`type` `message` or absent), a `function_call` or a
/// `function_call_output`.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct InputItem {
    /// `message` (the default), `function_call` or `function_call_output`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// A message's role: `user`, `assistant`, `system` or `developer`.
    pub role: Option<String>,
    /// A message's content: text, or `input_text` / `output_text` parts.
    pub content: Option<ItemContent>,
    /// The item's id (accepted, unused).
    pub id: Option<String>,
    /// The item's status (accepted, unused).
    pub status: Option<String>,
    /// A function call's or output's call id.
    pub call_id: Option<String>,
    /// A function call's name.
    pub name: Option<String>,
    /// A function call's arguments (JSON text).
    pub arguments: Option<String>,
    /// A function call output's result.
    pub output: Option<String>,
}

/// A message item's content.
#[derive(Debug, Clone)]
pub enum ItemContent {
    /// Plain text.
    Text(String),
    /// Parts; only text parts are supported.
    Parts(Vec<ContentPart>),
}

/// A content part: `input_text` or `output_text`.
#[derive(Deserialize, ToSchema, Debug, Default, Clone)]
pub struct ContentPart {
    /// `input_text` or `output_text` (others are refused).
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The text.
    pub text: Option<String>,
    /// An output part's annotations (accepted only when empty).
    #[schema(value_type = Option<Vec<Object>>)]
    pub annotations: Option<Value>,
    /// An output part's logprobs (accepted, unused).
    #[schema(value_type = Option<Vec<Object>>)]
    pub logprobs: Option<Value>,
    /// An image part's image (refused).
    #[schema(value_type = Option<String>)]
    pub image_url: Option<Value>,
    /// A file part's file (refused).
    #[schema(value_type = Option<String>)]
    pub file_id: Option<Value>,
}

/// A text-or-list field read by one visitor (`T` is the list's element).
fn text_or_list<'de, D, T, R>(
    d: D,
    text: fn(String) -> R,
    list: fn(Vec<T>) -> R,
    what: &'static str,
) -> Result<R, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct V<T, R> {
        text: fn(String) -> R,
        list: fn(Vec<T>) -> R,
        what: &'static str,
    }
    impl<'de, T: Deserialize<'de>, R> Visitor<'de> for V<T, R> {
        type Value = R;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.what)
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<R, E> {
            Ok((self.text)(s.to_string()))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<R, A::Error> {
            let mut items = Vec::new();
            while let Some(x) = seq.next_element::<T>()? {
                items.push(x);
            }
            Ok((self.list)(items))
        }
    }
    d.deserialize_any(V { text, list, what })
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Input, D::Error> {
        text_or_list(d, Input::Text, Input::Items, "text or a list of input items")
    }
}

impl<'de> Deserialize<'de> for ItemContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ItemContent, D::Error> {
        text_or_list(d, ItemContent::Text, ItemContent::Parts, "text or a list of text parts")
    }
}

/// A schema that is a string or a list of `item`.
fn string_or_list_of(item: &str) -> RefOr<Schema> {
    let list = ArrayBuilder::new().items(Ref::from_schema_name(item));
    OneOfBuilder::new().item(Object::with_type(Type::String)).item(list).into()
}

impl utoipa::PartialSchema for Input {
    fn schema() -> RefOr<Schema> {
        string_or_list_of("InputItem")
    }
}

impl ToSchema for Input {
    fn schemas(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push(("InputItem".into(), <InputItem as utoipa::PartialSchema>::schema()));
        <InputItem as ToSchema>::schemas(out);
    }
}

impl utoipa::PartialSchema for ItemContent {
    fn schema() -> RefOr<Schema> {
        string_or_list_of("ContentPart")
    }
}

impl ToSchema for ItemContent {
    fn schemas(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push(("ContentPart".into(), <ContentPart as utoipa::PartialSchema>::schema()));
    }
}

/// A `/v1/responses` reply (not streamed; a stream's `response.completed` carries the same).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ResponseObject {
    /// `resp_...`.
    id: String,
    /// `response`.
    object: String,
    /// Unix seconds.
    created_at: u64,
    /// `completed` or `incomplete`.
    status: String,
    /// The served model.
    model: String,
    /// Output items: a message with `output_text` parts, or function calls.
    #[schema(value_type = Vec<Object>)]
    output: Value,
    /// Why the response is incomplete (`max_output_tokens`), or null.
    #[schema(value_type = Option<Object>)]
    incomplete_details: Option<Value>,
    /// Token counts.
    #[schema(value_type = Object)]
    usage: Value,
}
