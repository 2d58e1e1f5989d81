//! One conversation of `tensorfold run` with the engine thread in this process: each turn's
//! prompt is the whole conversation through the chat template (its earlier turns come from the
//! prefix cache), the reply streamed as text; a reply stopped by Ctrl-C leaves no trace.

use crate::exit::{Failure, failed};
use crate::run_thinking::ThinkingView;
use serde_json::{Value, json};
use std::hash::{BuildHasher, RandomState};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use tf_core::TokenIds;
use tf_engine::engine::{EngineHandle, Event, FinishReason, GenRequest};
use tf_engine::sampler::SamplingParams;
use tf_server::ChatTemplate;
use tf_tokenize::{IncrementalDecoder, Tokenizer};

/// How a reply ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The model finished (or the reply reached its length); the turn joins the conversation.
    Done,
    /// Ctrl-C stopped it; the turn is forgotten.
    Interrupted,
    /// The turn could not run (the conversation fills the context, a template error).
    Refused(String),
}

/// What a reply may use, changed by `/set parameter`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Sampling (its seed is replaced per reply unless `seed` is set).
    pub params: SamplingParams,
    /// A fixed seed for every reply.
    pub seed: Option<u64>,
    /// Tokens of one reply at most (`None`: what the context leaves).
    pub max_tokens: Option<usize>,
    /// Where a reply's reasoning is (shown framed, or hidden where the flag is set), if anywhere.
    pub reasoning: Option<(tf_server::reasoning::ReasoningParser, bool)>,
}

/// The model's side of a chat.
pub struct Model {
    /// The engine thread.
    pub engine: EngineHandle,
    /// The compiled chat template.
    pub template: ChatTemplate,
    /// The tokenizer.
    pub tok: Tokenizer,
    /// Ids that end a reply and are not shown.
    pub eos_ids: Vec<u32>,
    /// Lines `/show info` prints.
    pub info: Vec<String>,
    /// The model answers in harmony messages (gpt-oss): read with the `gpt_oss` parser unless
    /// another is named.
    pub harmony: bool,
}

/// A conversation.
pub struct Chat {
    model: Model,
    /// The system message, if any.
    pub system: Option<String>,
    /// Earlier turns: (user, assistant).
    turns: Vec<(String, String)>,
    /// Sampling and length.
    pub settings: Settings,
    /// Set to stop the reply being generated (Ctrl-C).
    cancel: Arc<AtomicBool>,
    seeds: RandomState,
}

impl Chat {
    /// A fresh conversation.
    pub fn new(model: Model, system: Option<String>, settings: Settings) -> Chat {
        let cancel = Arc::new(AtomicBool::new(false));
        Chat { model, system, turns: Vec::new(), settings, cancel, seeds: RandomState::new() }
    }

    /// The flag that stops a reply (Ctrl-C sets it).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// Forgets every turn (the system message stays).
    pub fn clear(&mut self) {
        self.turns.clear();
    }

    /// The engine, for shutting it down.
    pub fn engine(&self) -> &EngineHandle {
        &self.model.engine
    }

    /// `/show info`'s lines.
    pub fn info(&self) -> &[String] {
        &self.model.info
    }

    /// The conversation with `user` as its next message, in OpenAI's shape.
    pub fn messages(&self, user: &str) -> Value {
        let mut m: Vec<Value> = self.system.iter().map(|s| json!({"role": "system", "content": s})).collect();
        for (u, a) in &self.turns {
            m.push(json!({"role": "user", "content": u}));
            m.push(json!({"role": "assistant", "content": a}));
        }
        m.push(json!({"role": "user", "content": user}));
        Value::Array(m)
    }

    /// Answers `user`, streaming the reply's text to `out`.
    pub fn reply(&mut self, user: &str, out: &mut dyn Write) -> Result<Ended, Failure> {
        let m = &self.model;
        let prompt = match tf_server::chat_ids::conversation_ids(&m.template, &m.tok, &self.messages(user)) {
            Ok(ids) => ids,
            Err(e) => return Ok(Ended::Refused(e)),
        };
        let ctx = m.engine.max_seq_tokens;
        if prompt.len() >= ctx {
            let msg =
                format!("the conversation's {} tokens fill the context of {ctx}; /clear starts afresh", prompt.len());
            return Ok(Ended::Refused(msg));
        }
        let room = ctx - prompt.len();
        let max_tokens = self.settings.max_tokens.map_or(room, |n| n.min(room));
        let (text, reason) = self.stream(prompt, max_tokens, out)?;
        match reason {
            Ok(FinishReason::Cancelled) => Ok(Ended::Interrupted),
            Ok(_) => {
                self.turns.push((user.to_string(), text));
                Ok(Ended::Done)
            }
            Err(e) => Ok(Ended::Refused(e)),
        }
    }

    /// Runs one sequence, writing its text as it comes; the text and how it ended.
    fn stream(
        &self,
        prompt: TokenIds,
        max_tokens: usize,
        out: &mut dyn Write,
    ) -> Result<(String, Result<FinishReason, String>), Failure> {
        let m = &self.model;
        let mut params = self.settings.params.clone();
        params.seed = self.settings.seed.unwrap_or_else(|| self.seeds.hash_one(std::time::Instant::now()));
        // Harmony's markup is special tokens the reasoning split reads (and drops).
        let keep = self.settings.reasoning.is_some_and(|(p, _)| p.keeps_special_tokens());
        let mut decoder = IncrementalDecoder::new(prompt.as_slice(), !keep);
        let (tx, rx) = channel();
        self.cancel.store(false, Ordering::Relaxed);
        let req = GenRequest {
            prompt,
            params,
            max_tokens,
            stop_ids: TokenIds::new(),
            ignore_eos: false,
            top_logprobs: None,
            prompt_logprobs: None,
            sink: Box::new(move |e| tx.send(e).is_ok()),
            cancel: self.cancel.clone(),
            draft: false,
            constraint: None,
        };
        if !m.engine.submit(req) {
            return Err(failed("the engine has stopped"));
        }
        let mut text = String::new();
        let mut view = self.settings.reasoning.map(|(p, hide)| ThinkingView::new(p, hide));
        // The piece as shown, and the answer text it holds (all of it without a parser).
        let mut say = |piece: &str, end: bool, text: &mut String| -> Result<(), Failure> {
            let (shown, answer) = match view.as_mut() {
                Some(v) => {
                    let (mut shown, mut answer) = v.push(piece);
                    if end {
                        let (s, a) = v.finish();
                        shown.push_str(&s);
                        answer.push_str(&a);
                    }
                    (shown, answer)
                }
                None => (piece.to_string(), piece.to_string()),
            };
            text.push_str(&answer);
            out.write_all(shown.as_bytes()).and_then(|_| out.flush()).map_err(failed)
        };
        for event in rx {
            match event {
                Event::Token(t) if m.eos_ids.contains(&t.id) => {}
                Event::Token(t) => say(&decoder.step(&m.tok, t.id).unwrap_or_default(), false, &mut text)?,
                Event::Done { reason, .. } => {
                    say(&decoder.finish(&m.tok).unwrap_or_default(), true, &mut text)?;
                    return Ok((text, Ok(reason)));
                }
                Event::Error(e) => return Ok((text, Err(e))),
                Event::PromptLogprobs(_) | Event::Scheduled(_) => {}
            }
        }
        Err(failed("the engine has stopped"))
    }

    /// `/set parameter NAME VALUE`: what changed, or why not.
    pub fn set_parameter(&mut self, name: &str, value: &str) -> Result<String, String> {
        let mut s = self.settings.clone();
        match name {
            "temperature" => s.params.temperature = parse(name, value)?,
            "top_p" => s.params.top_p = parse(name, value)?,
            "top_k" => s.params.top_k = parse(name, value)?,
            "min_p" => s.params.min_p = parse(name, value)?,
            "repetition_penalty" | "repeat_penalty" => s.params.repetition_penalty = parse(name, value)?,
            "seed" => s.seed = Some(parse(name, value)?),
            "max_tokens" | "num_predict" => s.max_tokens = Some(parse(name, value)?).filter(|&n| n > 0),
            _ => return Err(format!("unknown parameter '{name}'; /? lists them")),
        }
        s.params.validate().map_err(|e| format!("{} {} is out of range: expected {}", e.field, e.value, e.expected))?;
        self.settings = s;
        Ok(format!("Set parameter '{name}' to '{value}'"))
    }

    /// `/show parameters`'s lines.
    pub fn parameters(&self) -> Vec<String> {
        let (p, s) = (&self.settings.params, &self.settings);
        let or = |v: Option<String>, none: &str| v.unwrap_or_else(|| none.to_string());
        vec![
            format!("temperature        {}", p.temperature),
            format!("top_p              {}", p.top_p),
            format!("top_k              {}", p.top_k),
            format!("min_p              {}", p.min_p),
            format!("repetition_penalty {}", p.repetition_penalty),
            format!("seed               {}", or(s.seed.map(|x| x.to_string()), "a fresh one per reply")),
            format!("max_tokens         {}", or(s.max_tokens.map(|x| x.to_string()), "what the context leaves")),
        ]
    }
}

/// A parameter's value, or why it is not one.
fn parse<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String> {
    value.parse().map_err(|_| format!("'{value}' is not a value for {name}"))
}
