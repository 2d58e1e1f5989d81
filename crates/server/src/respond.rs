//! Responses in OpenAI's shapes for completions and chat: one JSON body, or server-sent events
//! (`data: {chunk}` per delta, a usage chunk when asked, then `data: [DONE]`).

use crate::error::ApiError;
use crate::generation::{Generation, Update};
use crate::request::{Api, Options};
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use tf_engine::engine::{PromptLogprob, TokenEvent};
use tf_tokenize::Tokenizer;

use crate::reasoning::{ReasoningParser, Splitter};
use crate::tools::ToolMode;

/// What every chunk or body of one response shares.
pub struct Reply {
    /// Which route.
    pub api: Api,
    /// `cmpl-...` or `chatcmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model name.
    pub model: String,
    /// The request's options.
    pub opts: Options,
    /// Prompt tokens over all prompts (each counted once).
    pub prompt_tokens: usize,
    /// Per sequence: the prompt text to echo first (completions with `echo`).
    pub echo: Vec<Option<String>>,
    /// For token texts in logprobs.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// Chat with tools: the output is parsed for tool calls (tools.rs).
    pub tools: Option<ToolMode>,
    /// Chat with `--reasoning-parser`: the reasoning split off each answer first (reasoning.rs).
    pub reasoning: Option<ReasoningParser>,
}

impl Reply {
    fn object(&self, stream: bool) -> &'static str {
        match (self.api, stream) {
            (Api::Completions, _) => "text_completion",
            (Api::Chat, false) => "chat.completion",
            (Api::Chat, true) => "chat.completion.chunk",
        }
    }

    fn token_text(&self, id: u32) -> String {
        match &self.tokenizer {
            Some(t) if !self.opts.tokens_as_ids => t.decode(&[id], false).unwrap_or_default(),
            _ => format!("token_id:{id}"),
        }
    }

    /// OpenAI's usage: with the prompt tokens the prefix cache served (`generation`'s), and with
    /// a reasoning parser the tokens of the reasoning.
    fn usage(&self, generation: &Generation) -> Value {
        let completion_tokens = generation.completion_tokens();
        let mut usage = json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": completion_tokens,
               "total_tokens": self.prompt_tokens + completion_tokens,
               "prompt_tokens_details": {"cached_tokens": generation.cached_tokens()}});
        if self.reasoning.is_some() {
            usage["completion_tokens_details"] = json!({"reasoning_tokens": generation.reasoning_tokens()});
        }
        usage
    }

    /// Logprobs of `tokens` in the route's shape; `offset` is the text length before them.
    fn logprobs(&self, tokens: &[TokenEvent], offset: usize) -> Value {
        match self.api {
            Api::Completions => {
                let texts: Vec<String> = tokens.iter().map(|t| self.token_text(t.id)).collect();
                let top: Vec<Value> = tokens
                    .iter()
                    .map(|t| Value::Object(t.top.iter().map(|&(id, lp)| (self.token_text(id), json!(lp))).collect()))
                    .collect();
                let mut offsets = Vec::with_capacity(texts.len());
                let mut at = offset;
                for t in &texts {
                    offsets.push(at);
                    at += t.len();
                }
                let lps: Vec<Option<f32>> = tokens.iter().map(|t| t.logprob).collect();
                json!({"tokens": texts, "token_logprobs": lps, "top_logprobs": top, "text_offset": offsets})
            }
            Api::Chat => {
                let entry = |id: u32, lp: Option<f32>| {
                    let text = self.token_text(id);
                    json!({"token": text, "logprob": lp, "bytes": text.as_bytes()})
                };
                let content: Vec<Value> = tokens
                    .iter()
                    .map(|t| {
                        let mut e = entry(t.id, t.logprob);
                        e["top_logprobs"] = t.top.iter().map(|&(id, lp)| entry(id, Some(lp))).collect();
                        e
                    })
                    .collect();
                json!({ "content": content })
            }
        }
    }

    /// Completions' `logprobs` with `echo`: the prompt's tokens first (the first with `null`s),
    /// then the generated ones, offsets counted from the start of the echoed text.
    fn echo_logprobs(&self, first: u32, prompt: &[PromptLogprob], n: usize, tokens: &[TokenEvent]) -> Value {
        let head = std::iter::once(TokenEvent { id: first, logprob: None, top: Vec::new() });
        let scored = prompt.iter().map(|p| TokenEvent {
            id: p.id,
            logprob: Some(p.logprob),
            top: p.top.iter().take(n).copied().collect(),
        });
        let all: Vec<TokenEvent> = head.chain(scored).chain(tokens.iter().cloned()).collect();
        let mut v = self.logprobs(&all, 0);
        v["top_logprobs"][0] = Value::Null;
        v
    }

    /// vLLM's `prompt_logprobs`: `null` for the first position, then per position a map from
    /// token id to `{logprob, rank, decoded_token}` holding the prompt's token and the `n` most
    /// likely.
    fn prompt_logprobs(&self, prompt: Option<&[PromptLogprob]>, n: usize) -> Value {
        let Some(prompt) = prompt else { return Value::Null };
        let entry =
            |lp: f32, rank: usize, id: u32| json!({"logprob": lp, "rank": rank, "decoded_token": self.token_text(id)});
        let positions = prompt.iter().map(|p| {
            let mut m = serde_json::Map::new();
            for (r, &(id, lp)) in p.top.iter().take(n).enumerate() {
                m.insert(id.to_string(), entry(lp, r + 1, id));
            }
            m.insert(p.id.to_string(), entry(p.logprob, p.rank, p.id));
            Value::Object(m)
        });
        Value::Array(std::iter::once(Value::Null).chain(positions).collect())
    }

    /// Runs `generation` to the end and builds the response body.
    pub async fn collect(self, mut generation: Generation) -> Result<Value, ApiError> {
        let k = self.echo.len();
        let mut texts: Vec<String> = self.echo.iter().map(|e| e.clone().unwrap_or_default()).collect();
        let mut tokens: Vec<Vec<TokenEvent>> = vec![Vec::new(); k];
        let mut finish: Vec<&str> = vec!["abort"; k];
        let mut prompt: Vec<Option<(u32, Vec<PromptLogprob>)>> = vec![None; k];
        while let Some(u) = generation.next().await {
            match u {
                Update::Prompt { index, first, logprobs } => prompt[index] = Some((first, logprobs)),
                Update::Delta { index, text, tokens: t } => {
                    texts[index].push_str(&text);
                    tokens[index].extend(t);
                }
                Update::Finish { index, reason } => finish[index] = reason,
                Update::Failed { message, .. } => return Err(ApiError::invalid("prompt", message)),
            }
        }
        let choices: Vec<Value> = (0..k)
            .map(|i| {
                let lp = match (&prompt[i], self.opts.echo) {
                    (Some((first, p)), true) => {
                        self.opts.logprobs.map(|n| self.echo_logprobs(*first, p, n, &tokens[i]))
                    }
                    _ => self.opts.logprobs.map(|_| self.logprobs(&tokens[i], 0)),
                };
                match self.api {
                    Api::Completions => {
                        let mut c = json!({"index": i, "text": texts[i], "logprobs": lp, "finish_reason": finish[i]});
                        if let Some(n) = self.opts.prompt_logprobs {
                            c["prompt_logprobs"] = self.prompt_logprobs(prompt[i].as_ref().map(|p| &p.1[..]), n);
                        }
                        c
                    }
                    Api::Chat => {
                        let (message, finish) = self.message(&texts[i], finish[i]);
                        json!({"index": i, "message": message, "logprobs": lp, "finish_reason": finish})
                    }
                }
            })
            .collect();
        let mut doc = json!({"id": self.id, "object": self.object(false), "created": self.created,
                             "model": self.model, "choices": choices,
                             "usage": self.usage(&generation)});
        if let (Api::Chat, Some(n)) = (self.api, self.opts.prompt_logprobs) {
            doc["prompt_logprobs"] = self.prompt_logprobs(prompt.first().and_then(|p| p.as_ref()).map(|p| &p.1[..]), n);
        }
        Ok(doc)
    }

    /// A chat choice's message and finish reason: its reasoning split off where a parser is on,
    /// and with tools, the calls parsed from the answer.
    fn message<'a>(&self, text: &str, finish: &'a str) -> (Value, &'a str) {
        let (reasoning, answer) = match self.reasoning {
            Some(p) => p.split(text),
            None => (None, text.to_string()),
        };
        let (mut message, finish) = match self.tools.as_ref().map(|m| m.parse_calls(&answer)) {
            Some((content, c)) if !c.is_empty() => {
                let calls: Vec<Value> = c.iter().enumerate().map(|(j, c)| self.tool_call(c, j, false)).collect();
                (json!({"role": "assistant", "content": content, "tool_calls": calls}), "tool_calls")
            }
            _ => (json!({"role": "assistant", "content": answer}), finish),
        };
        if let Some(r) = reasoning {
            message["reasoning_content"] = json!(r);
        }
        (message, finish)
    }

    /// One call in OpenAI's shape (with its `index` in a stream's delta).
    fn tool_call(&self, c: &crate::tools::Call, index: usize, streamed: bool) -> Value {
        let mut v = json!({"id": format!("call_{:016x}", fnv(&self.id, &c.arguments, index)), "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}});
        if streamed {
            v["index"] = json!(index);
        }
        v
    }

    /// A streamed tool-mode choice's end: its content, its calls (each whole, so the
    /// concatenated `arguments` are valid JSON), then the finish chunk.
    fn tool_finish(&self, index: usize, text: &str, reason: &str) -> Bytes {
        let (content, calls) = self.tools.as_ref().map_or((None, Vec::new()), |m| m.parse_calls(text));
        let mut out = Vec::new();
        let content = if calls.is_empty() { Some(text.to_string()) } else { content };
        if let Some(c) = content.filter(|c| !c.is_empty()) {
            out.extend_from_slice(&self.chunk(self.delta_choice(index, c, None, None)));
        }
        if !calls.is_empty() {
            let deltas: Vec<Value> = calls.iter().enumerate().map(|(j, c)| self.tool_call(c, j, true)).collect();
            let choice =
                json!({"index": index, "delta": {"tool_calls": deltas}, "logprobs": null, "finish_reason": null});
            out.extend_from_slice(&self.chunk(choice));
        }
        let reason = if calls.is_empty() { reason } else { "tool_calls" };
        out.extend_from_slice(&self.chunk(self.delta_choice(index, String::new(), None, Some(reason))));
        Bytes::from(out)
    }

    /// One streamed chunk holding `choice`.
    fn chunk(&self, choice: Value) -> Bytes {
        let mut c = json!({"id": self.id, "object": self.object(true), "created": self.created,
                           "model": self.model, "choices": [choice]});
        if self.opts.include_usage {
            c["usage"] = Value::Null;
        }
        sse(&c)
    }

    fn delta_choice(&self, index: usize, text: String, lp: Option<Value>, finish: Option<&str>) -> Value {
        match self.api {
            Api::Completions => json!({"index": index, "text": text, "logprobs": lp, "finish_reason": finish}),
            Api::Chat => {
                let delta = if finish.is_some() && text.is_empty() { json!({}) } else { json!({"content": text}) };
                json!({"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish})
            }
        }
    }

    /// Chunks sent before any token: chat's role announcements, completions' echoed prompts.
    fn prelude(&self, offsets: &mut [usize]) -> Vec<Bytes> {
        (0..self.echo.len())
            .filter_map(|i| match self.api {
                Api::Chat => Some(self.chunk(json!({"index": i, "delta": {"role": "assistant", "content": ""},
                                                     "logprobs": null, "finish_reason": null}))),
                Api::Completions => self.echo[i].as_ref().map(|text| {
                    offsets[i] = text.len();
                    self.chunk(self.delta_choice(i, text.clone(), None, None))
                }),
            })
            .collect()
    }

    /// A chat delta of reasoning `reasoning` and answer `content` (either may be empty).
    fn split_delta(&self, index: usize, reasoning: String, content: String, lp: Option<Value>) -> Bytes {
        let mut delta = serde_json::Map::new();
        if !reasoning.is_empty() {
            delta.insert("reasoning_content".into(), json!(reasoning));
        }
        if !content.is_empty() {
            delta.insert("content".into(), json!(content));
        }
        self.chunk(json!({"index": index, "delta": delta, "logprobs": lp, "finish_reason": null}))
    }

    /// The chunk for one update, if it has anything to say (`split`: each chat choice's
    /// reasoning split where a parser is on).
    fn update_chunk(
        &self,
        u: Update,
        offsets: &mut [usize],
        held: &mut [String],
        split: &mut [Splitter],
    ) -> Option<Bytes> {
        let tool_mode = self.tools.is_some() && self.api == Api::Chat;
        let splitting = self.reasoning.is_some() && self.api == Api::Chat;
        match u {
            // Reasoning streams as it comes; the answer is held for its tool calls.
            Update::Delta { index, text, .. } if tool_mode && splitting => {
                let (reasoning, content) = split[index].push(&text);
                held[index].push_str(&content);
                (!reasoning.is_empty()).then(|| self.split_delta(index, reasoning, String::new(), None))
            }
            Update::Finish { index, reason } if tool_mode && splitting => {
                let (reasoning, content) = split[index].finish();
                held[index].push_str(&content);
                let mut out = Vec::new();
                if !reasoning.is_empty() {
                    out.extend_from_slice(&self.split_delta(index, reasoning, String::new(), None));
                }
                out.extend_from_slice(&self.tool_finish(index, &held[index], reason));
                Some(Bytes::from(out))
            }
            Update::Delta { index, text, .. } if tool_mode => {
                held[index].push_str(&text);
                None
            }
            Update::Finish { index, reason } if tool_mode => Some(self.tool_finish(index, &held[index], reason)),
            Update::Delta { index, text, tokens } if splitting => {
                let (reasoning, content) = split[index].push(&text);
                let lp = self.opts.logprobs.filter(|_| !tokens.is_empty()).map(|_| self.logprobs(&tokens, 0));
                if reasoning.is_empty() && content.is_empty() && lp.is_none() {
                    return None;
                }
                Some(self.split_delta(index, reasoning, content, lp))
            }
            Update::Finish { index, reason } if splitting => {
                let (reasoning, content) = split[index].finish();
                let mut out = Vec::new();
                if !reasoning.is_empty() || !content.is_empty() {
                    out.extend_from_slice(&self.split_delta(index, reasoning, content, None));
                }
                out.extend_from_slice(&self.chunk(self.delta_choice(index, String::new(), None, Some(reason))));
                Some(Bytes::from(out))
            }
            Update::Delta { index, text, tokens } => {
                if text.is_empty() && (tokens.is_empty() || self.opts.logprobs.is_none()) {
                    return None;
                }
                let lp = self.opts.logprobs.map(|_| self.logprobs(&tokens, offsets[index]));
                offsets[index] += text.len();
                Some(self.chunk(self.delta_choice(index, text, lp, None)))
            }
            Update::Finish { index, reason } => {
                Some(self.chunk(self.delta_choice(index, String::new(), None, Some(reason))))
            }
            Update::Failed { message, .. } => Some(sse(&ApiError::invalid("prompt", message).body())),
            Update::Prompt { .. } => None,
        }
    }

    /// Streams `generation` as server-sent events.
    pub fn stream(self, generation: Generation) -> Response {
        let mut offsets = vec![0; self.echo.len()];
        let mut prelude = self.prelude(&mut offsets);
        prelude.reverse(); // popped from the back
        let held = vec![String::new(); self.echo.len()];
        let parser = self.reasoning.unwrap_or(ReasoningParser::Qwen3);
        let split = (0..self.echo.len()).map(|_| Splitter::new(parser)).collect();
        let state = StreamState { reply: self, generation, offsets, held, split, prelude, phase: Phase::Prelude };
        let body = futures_util::stream::unfold(state, |mut s| async move {
            let b = s.next_bytes().await?;
            Some((Ok::<Bytes, Infallible>(b), s))
        });
        let headers = [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")];
        (headers, Body::from_stream(body)).into_response()
    }
}

/// A stable 64-bit mix of a response id, a call's arguments and its index (call ids).
fn fnv(id: &str, args: &str, index: usize) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes().chain(args.bytes()).chain(index.to_le_bytes()) {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// A value as one server-sent event.
fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

enum Phase {
    Prelude,
    Tokens,
    Usage,
    Done,
    End,
}

struct StreamState {
    reply: Reply,
    generation: Generation,
    offsets: Vec<usize>,
    /// Tool mode: each choice's text so far, parsed at its end.
    held: Vec<String>,
    /// Each choice's reasoning split (read only where `Reply::reasoning` is on).
    split: Vec<Splitter>,
    prelude: Vec<Bytes>,
    phase: Phase,
}

impl StreamState {
    async fn next_bytes(&mut self) -> Option<Bytes> {
        loop {
            match self.phase {
                Phase::Prelude => match self.prelude.pop() {
                    Some(b) => return Some(b),
                    None => self.phase = Phase::Tokens,
                },
                Phase::Tokens => match self.generation.next().await {
                    Some(u) => {
                        if let Some(b) = self.reply.update_chunk(u, &mut self.offsets, &mut self.held, &mut self.split)
                        {
                            return Some(b);
                        }
                    }
                    None => self.phase = Phase::Usage,
                },
                Phase::Usage => {
                    self.phase = Phase::Done;
                    if self.reply.opts.include_usage {
                        let r = &self.reply;
                        let usage = r.usage(&self.generation);
                        return Some(sse(&json!({"id": r.id, "object": r.object(true), "created": r.created,
                                                "model": r.model, "choices": [], "usage": usage})));
                    }
                }
                Phase::Done => {
                    self.phase = Phase::End;
                    return Some(Bytes::from_static(b"data: [DONE]\n\n"));
                }
                Phase::End => return None,
            }
        }
    }
}
