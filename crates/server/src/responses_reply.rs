//! The Responses API's reply: the response object (output items: with `--reasoning-parser`, a
//! `reasoning` item holding the reasoning's `reasoning_text`, then a message with `output_text`,
//! or function calls parsed from the answer) and its event stream (`response.created`, ...,
//! `response.reasoning_text.delta`, ..., `response.output_text.delta`, ...,
//! `response.completed`), each event numbered.

use crate::error::ApiError;
use crate::generation::{Generation, Update};
use crate::reasoning::{ReasoningParser, Splitter};
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
    /// Where the reasoning is split off the answer (`--reasoning-parser`).
    reasoning: Option<ReasoningParser>,
}

impl ResponseReply {
    /// A reply for one sequence of `prompt_tokens`; `mode`: read the output for function calls;
    /// `reasoning`: where the output reasons.
    pub fn new(
        st: &AppState,
        opts: Options,
        prompt_tokens: usize,
        mode: Option<ToolMode>,
        echo: Echo,
        reasoning: Option<ReasoningParser>,
    ) -> ResponseReply {
        ResponseReply {
            id: format!("resp_{:016x}", st.random_u64()),
            created_at: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            model: st.model.name.clone(),
            opts,
            prompt_tokens,
            mode,
            echo,
            reasoning,
        }
    }

    /// The response object with `status`, `output` and, once known, `usage`.
    fn object(&self, status: &str, output: Vec<Value>, generation: Option<&Generation>) -> Value {
        let usage = generation.map(|g| {
            let c = g.completion_tokens();
            json!({"input_tokens": self.prompt_tokens, "input_tokens_details": {"cached_tokens": g.cached_tokens()},
                   "output_tokens": c, "output_tokens_details": {"reasoning_tokens": g.reasoning_tokens()},
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

    /// The output items of a finished text: its reasoning (with a parser, where it has some),
    /// then the answer's ([`ResponseReply::answer_items`]).
    fn items(&self, text: &str, status: &str) -> Vec<Value> {
        let (reasoning, answer) = match self.reasoning {
            Some(p) => p.split(text),
            None => (None, text.to_string()),
        };
        let mut out: Vec<Value> = reasoning.map(|r| self.reasoning_item(&r)).into_iter().collect();
        out.extend(self.answer_items(&answer, status));
        out
    }

    /// The reasoning item holding `text`.
    fn reasoning_item(&self, text: &str) -> Value {
        json!({"type": "reasoning", "id": self.item_id("rs", 0), "summary": [], "status": "completed",
               "content": [{"type": "reasoning_text", "text": text}]})
    }

    /// The output items of an answer: function calls (in tool mode, when the text is calls)
    /// after a message with whatever text is left.
    fn answer_items(&self, text: &str, status: &str) -> Vec<Value> {
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
        let split = self.reasoning.map(Splitter::new);
        let mut s = EventStream {
            reply: self,
            generation,
            pending: VecDeque::new(),
            seq: 0,
            text: String::new(),
            done: false,
            split,
            reasoning: None,
            reasoning_closed: false,
            message_open: false,
        };
        let created = s.reply.object("in_progress", Vec::new(), None);
        s.push("response.created", json!({"response": created.clone()}));
        s.push("response.in_progress", json!({"response": created}));
        // Without a parser the message opens at once; with one, once the answer starts.
        if s.reply.mode.is_none() && s.split.is_none() {
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
    /// The answer so far (the text after any reasoning).
    text: String,
    done: bool,
    /// The reasoning split (with a parser).
    split: Option<Splitter>,
    /// The reasoning so far, once its item is open.
    reasoning: Option<String>,
    /// Its item is done: the answer has started.
    reasoning_closed: bool,
    /// The message item is open (its text streams).
    message_open: bool,
}

impl EventStream {
    /// Queues one event (`type` and `sequence_number` added to `data`).
    fn push(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.pending.push_back(Bytes::from(format!("event: {kind}\ndata: {data}\n\n")));
    }

    /// The output index of the answer's first item (after the reasoning item, if any).
    fn answer_index(&self) -> usize {
        usize::from(self.reasoning.is_some())
    }

    /// The message item and its text part, opened before the first delta.
    fn open_message(&mut self) {
        self.message_open = true;
        let index = self.answer_index();
        let mut item = self.reply.message("", "in_progress");
        item["content"] = json!([]);
        self.push("response.output_item.added", json!({"output_index": index, "item": item}));
        let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
        let item_id = self.reply.item_id("msg", 0);
        self.push(
            "response.content_part.added",
            json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": part}),
        );
    }

    fn delta(&mut self, text: &str) {
        let (item_id, index) = (self.reply.item_id("msg", 0), self.answer_index());
        self.push(
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": index, "content_index": 0, "delta": text, "logprobs": []}),
        );
    }

    /// Reasoning text: the reasoning item opened first.
    fn reasoning_delta(&mut self, text: &str) {
        if self.reasoning.is_none() {
            let mut item = self.reply.reasoning_item("");
            (item["content"], item["status"]) = (json!([]), json!("in_progress"));
            self.push("response.output_item.added", json!({"output_index": 0, "item": item}));
            self.reasoning = Some(String::new());
        }
        let item_id = self.reply.item_id("rs", 0);
        self.push(
            "response.reasoning_text.delta",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": text}),
        );
        self.reasoning.get_or_insert_default().push_str(text);
    }

    /// The reasoning item's closing events, once (where it was opened).
    fn close_reasoning(&mut self) {
        let Some(text) = self.reasoning.clone().filter(|_| !self.reasoning_closed) else { return };
        self.reasoning_closed = true;
        let item_id = self.reply.item_id("rs", 0);
        self.push(
            "response.reasoning_text.done",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "text": text}),
        );
        let item = self.reply.reasoning_item(&text);
        self.push("response.output_item.done", json!({"output_index": 0, "item": item}));
    }

    /// One piece of generated text: its reasoning streamed, its answer streamed as the
    /// message's text (unless the answer is read for calls at its end) and kept.
    fn on_text(&mut self, piece: &str) {
        let (reasoning, answer) = match self.split.as_mut() {
            Some(s) => s.push(piece),
            None => (String::new(), piece.to_string()),
        };
        if !reasoning.is_empty() {
            self.reasoning_delta(&reasoning);
        }
        if !answer.is_empty() {
            self.close_reasoning();
            if self.reply.mode.is_none() {
                if !self.message_open {
                    self.open_message();
                }
                self.delta(&answer);
            }
            self.text.push_str(&answer);
        }
    }

    /// The closing events of every output item, then the final response.
    fn finish(&mut self, finish: &str) {
        if let Some((reasoning, answer)) = self.split.as_mut().map(Splitter::finish) {
            if !reasoning.is_empty() {
                self.reasoning_delta(&reasoning);
            }
            self.on_text(&answer);
        }
        self.close_reasoning();
        let status = status_of(finish);
        let mut items: Vec<Value> =
            self.reasoning.as_deref().map(|r| self.reply.reasoning_item(r)).into_iter().collect();
        let first = items.len();
        items.extend(self.reply.answer_items(&self.text, status));
        for (i, item) in items.iter().enumerate().skip(first) {
            let item_id = item["id"].clone();
            if item["type"] == "message" {
                if !self.message_open {
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
                Some(Update::Delta { text, .. }) => self.on_text(&text),
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
