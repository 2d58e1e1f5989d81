//! The Responses API's reply: the response object (output items: a message with `output_text`,
//! or function calls parsed from the output) and its event stream (`response.created`, ...,
//! `response.output_text.delta`, ..., `response.completed`), each event numbered.

use crate::error::ApiError;
use crate::generation::{Generation, Update};
use crate::request::Options;
use crate::state::AppState;
use crate::tools::ToolMode;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

/// The request's settings a response object repeats.
pub struct Echo {
    /// `instructions`.
    pub instructions: Option<String>,
    /// `max_output_tokens`.
    pub max_output_tokens: Option<i64>,
    /// `temperature` (default 1).
    pub temperature: f64,
    /// `top_p` (default 1).
    pub top_p: f64,
    /// `tools` as sent.
    pub tools: Value,
    /// `tool_choice` as sent (default `auto`).
    pub tool_choice: Value,
    /// `parallel_tool_calls`.
    pub parallel_tool_calls: bool,
    /// `text` as sent (default `{"format": {"type": "text"}}`).
    pub text: Value,
    /// `metadata`.
    pub metadata: Value,
    /// `user`.
    pub user: Option<String>,
}

/// How one response is answered.
pub struct ResponseReply {
    id: String,
    created_at: u64,
    model: String,
    /// The checked options.
    pub opts: Options,
    /// Tokens of the rendered prompt.
    pub prompt_tokens: usize,
    mode: Option<ToolMode>,
    echo: Echo,
}

impl ResponseReply {
    /// A reply for one sequence of `prompt_tokens`; `mode`: read the output for function calls.
    pub fn new(
        st: &AppState,
        opts: Options,
        prompt_tokens: usize,
        mode: Option<ToolMode>,
        echo: Echo,
    ) -> ResponseReply {
        ResponseReply {
            id: format!("resp_{:016x}", st.random_u64()),
            created_at: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            model: st.model.name.clone(),
            opts,
            prompt_tokens,
            mode,
            echo,
        }
    }

    /// The response object with `status`, `output` and, once known, `usage`.
    fn object(&self, status: &str, output: Vec<Value>, generation: Option<&Generation>) -> Value {
        let usage = generation.map(|g| {
            let c = g.completion_tokens();
            json!({"input_tokens": self.prompt_tokens, "input_tokens_details": {"cached_tokens": g.cached_tokens()},
                   "output_tokens": c, "output_tokens_details": {"reasoning_tokens": 0},
                   "total_tokens": self.prompt_tokens + c})
        });
        let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
        let e = &self.echo;
        json!({"id": self.id, "object": "response", "created_at": self.created_at, "status": status,
               "error": null, "incomplete_details": incomplete, "instructions": e.instructions,
               "max_output_tokens": e.max_output_tokens, "model": self.model, "output": output,
               "parallel_tool_calls": e.parallel_tool_calls, "previous_response_id": null,
               "reasoning": {"effort": null, "summary": null}, "store": false,
               "temperature": e.temperature, "text": e.text, "tool_choice": e.tool_choice, "tools": e.tools,
               "top_p": e.top_p, "truncation": "disabled", "usage": usage, "user": e.user,
               "metadata": e.metadata})
    }

    /// An id for an output item, stable within the response.
    fn item_id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}_{}_{index}", &self.id[5..])
    }

    /// The output items of a finished text: function calls (in tool mode, when the text is
    /// calls) after a message with whatever text is left.
    fn items(&self, text: &str, status: &str) -> Vec<Value> {
        let (left, calls) = match &self.mode {
            Some(m) => m.parse_calls(text),
            None => (Some(text.to_string()), Vec::new()),
        };
        let mut out = Vec::new();
        if let Some(t) = left.filter(|t| !t.is_empty() || calls.is_empty()) {
            out.push(self.message(&t, status));
        }
        for (i, c) in calls.iter().enumerate() {
            out.push(json!({"type": "function_call", "id": self.item_id("fc", i), "call_id": self.item_id("call", i),
                            "name": c.name, "arguments": c.arguments, "status": "completed"}));
        }
        out
    }

    fn message(&self, text: &str, status: &str) -> Value {
        json!({"type": "message", "id": self.item_id("msg", 0), "status": status, "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
    }

    /// Runs `generation` to the end and builds the response object.
    pub async fn collect(self, mut generation: Generation) -> Result<Value, ApiError> {
        let mut text = String::new();
        let mut finish = "abort";
        while let Some(u) = generation.next().await {
            match u {
                Update::Delta { text: t, .. } => text.push_str(&t),
                Update::Finish { reason, .. } => finish = reason,
                Update::Failed { message, .. } => return Err(ApiError::invalid("input", message)),
                Update::Prompt { .. } => {}
            }
        }
        let status = status_of(finish);
        Ok(self.object(status, self.items(&text, status), Some(&generation)))
    }

    /// Streams `generation` as the Responses API's events.
    pub fn stream(self, generation: Generation) -> Response {
        let mut s =
            EventStream { reply: self, generation, pending: VecDeque::new(), seq: 0, text: String::new(), done: false };
        let created = s.reply.object("in_progress", Vec::new(), None);
        s.push("response.created", json!({"response": created.clone()}));
        s.push("response.in_progress", json!({"response": created}));
        if s.reply.mode.is_none() {
            s.open_message();
        }
        let body = futures_util::stream::unfold(s, |mut s| async move {
            let b = s.next_bytes().await?;
            Some((Ok::<Bytes, Infallible>(b), s))
        });
        let headers = [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")];
        (headers, Body::from_stream(body)).into_response()
    }
}

/// The response's status for an engine finish reason.
fn status_of(finish: &str) -> &'static str {
    match finish {
        "length" => "incomplete",
        _ => "completed",
    }
}

struct EventStream {
    reply: ResponseReply,
    generation: Generation,
    pending: VecDeque<Bytes>,
    seq: u64,
    /// The text so far.
    text: String,
    done: bool,
}

impl EventStream {
    /// Queues one event (`type` and `sequence_number` added to `data`).
    fn push(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.pending.push_back(Bytes::from(format!("event: {kind}\ndata: {data}\n\n")));
    }

    /// The message item and its text part, opened before the first delta.
    fn open_message(&mut self) {
        let mut item = self.reply.message("", "in_progress");
        item["content"] = json!([]);
        self.push("response.output_item.added", json!({"output_index": 0, "item": item}));
        let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
        let item_id = self.reply.item_id("msg", 0);
        self.push(
            "response.content_part.added",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": part}),
        );
    }

    fn delta(&mut self, text: &str) {
        let item_id = self.reply.item_id("msg", 0);
        self.push(
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": text, "logprobs": []}),
        );
    }

    /// The closing events of every output item, then the final response.
    fn finish(&mut self, finish: &str) {
        let status = status_of(finish);
        let items = self.reply.items(&self.text, status);
        let streamed_message = self.reply.mode.is_none();
        for (i, item) in items.iter().enumerate() {
            let item_id = item["id"].clone();
            if item["type"] == "message" {
                if !streamed_message {
                    self.open_message();
                    let t = item["content"][0]["text"].as_str().unwrap_or_default().to_string();
                    self.delta(&t);
                }
                let part = item["content"][0].clone();
                let text = part["text"].clone();
                self.push(
                    "response.output_text.done",
                    json!({"item_id": item_id, "output_index": i, "content_index": 0, "text": text, "logprobs": []}),
                );
                self.push(
                    "response.content_part.done",
                    json!({"item_id": item_id, "output_index": i, "content_index": 0, "part": part}),
                );
            } else {
                let mut added = item.clone();
                added["arguments"] = json!("");
                added["status"] = json!("in_progress");
                self.push("response.output_item.added", json!({"output_index": i, "item": added}));
                let args = item["arguments"].clone();
                self.push(
                    "response.function_call_arguments.delta",
                    json!({"item_id": item_id, "output_index": i, "delta": args}),
                );
                self.push(
                    "response.function_call_arguments.done",
                    json!({"item_id": item_id, "output_index": i, "arguments": args, "name": item["name"]}),
                );
            }
            self.push("response.output_item.done", json!({"output_index": i, "item": item}));
        }
        let done = self.reply.object(status, items, Some(&self.generation));
        let kind = if status == "incomplete" { "response.incomplete" } else { "response.completed" };
        self.push(kind, json!({"response": done}));
        self.done = true;
    }

    async fn next_bytes(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            if self.done {
                return None;
            }
            match self.generation.next().await {
                Some(Update::Delta { text, .. }) => {
                    if self.reply.mode.is_none() && !text.is_empty() {
                        self.delta(&text);
                    }
                    self.text.push_str(&text);
                }
                Some(Update::Finish { reason, .. }) => self.finish(reason),
                Some(Update::Failed { message, .. }) => {
                    let e = ApiError::invalid("input", message);
                    self.push("error", json!({"code": e.code, "message": e.message, "param": e.param}));
                    self.done = true;
                }
                Some(Update::Prompt { .. }) => {}
                None if !self.done => self.finish("abort"),
                None => return None,
            }
        }
    }
}
