//! What every handler shares: the engine handle, what the HTTP side needs of the model (vocab,
//! tokenizer, chat template, stop ids), the deployment's limits, counters and the admission count.

use crate::auth::ApiKey;
use crate::error::ApiError;
use crate::metrics::ServerMetrics;
use crate::template::ChatTemplate;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use tf_core::Vocab;
use tf_engine::engine::EngineHandle;
use tf_tokenize::Tokenizer;

/// What the HTTP side keeps of the model before the model moves into the engine.
#[derive(Clone)]
pub struct ModelInfo {
    /// Name clients use.
    pub name: String,
    /// Embedding rows: the boundary for every id from outside.
    pub vocab: Vocab,
    /// The tokenizer, if the checkpoint has one.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// Ids that end generation unless `ignore_eos`.
    pub eos_ids: Vec<u32>,
    /// BOS token text, for chat templates.
    pub bos_token: Option<String>,
    /// EOS token text, for chat templates.
    pub eos_token: Option<String>,
    /// The raw chat template, if any.
    pub chat_template: Option<String>,
    /// Where chat answers' reasoning is split off (`--reasoning-parser`), if anywhere.
    pub reasoning: Option<crate::reasoning::ReasoningParser>,
}

/// Limits a deployment sets on requests.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
    /// Longest prompt in tokens.
    pub max_prompt_tokens: usize,
    /// Largest `max_tokens`.
    pub max_tokens_limit: usize,
    /// Most sequences per request (`n` x prompts).
    pub max_n: usize,
    /// Sequences the engine runs at once.
    pub max_num_seqs: usize,
    /// Sequences that may wait beyond the running ones.
    pub max_queue: usize,
    /// Most stop strings, and most stop token ids.
    pub max_stop_strings: usize,
    /// Most bytes of all stop strings of a request together.
    pub max_stop_bytes: usize,
    /// Bytes a token of room a text prompt may have before it is refused untokenized.
    pub prompt_bytes_per_token: usize,
    /// Largest `logprobs` / `top_logprobs`.
    pub max_logprobs: usize,
    /// Most `logit_bias` entries.
    pub max_logit_bias: usize,
    /// Where saved sessions live (`None`: the session routes are off).
    pub session_dir: Option<std::path::PathBuf>,
    /// The key every route but `/health` needs (`None`: no key is asked for).
    pub api_key: Option<ApiKey>,
    /// Connection timeouts and cap.
    pub conn: crate::conn::ConnLimits,
    /// Origins allowed to call the API from a browser (`None`: no CORS headers).
    pub allowed_origins: Option<crate::cors::Origins>,
}

/// Shared by all handlers.
pub struct AppState {
    /// The engine thread.
    pub engine: EngineHandle,
    /// The model's HTTP-side parts.
    pub model: ModelInfo,
    /// The compiled chat template, if the model has one.
    pub template: Option<ChatTemplate>,
    /// Request limits.
    pub limits: Limits,
    /// HTTP-side counters.
    pub metrics: ServerMetrics,
    /// Set on SIGINT/SIGTERM: new work gets 503.
    pub shutting_down: AtomicBool,
    /// Sequences admitted and not yet released.
    in_flight: AtomicUsize,
    /// Requests holding an admission.
    requests: AtomicUsize,
    ids: RandomState,
    next_id: AtomicU64,
    /// Structured output's compiler, built on first use (constraint.rs).
    grammars: OnceLock<Result<(Arc<tf_grammar::Grammars>, u32), String>>,
    /// The OpenAPI document, rendered once.
    pub openapi: String,
}

impl AppState {
    /// Shared state over a running engine.
    pub fn new(engine: EngineHandle, model: ModelInfo, template: Option<ChatTemplate>, limits: Limits) -> AppState {
        AppState {
            engine,
            model,
            template,
            limits,
            metrics: ServerMetrics::default(),
            shutting_down: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
            ids: RandomState::new(),
            next_id: AtomicU64::new(0),
            grammars: OnceLock::new(),
            openapi: crate::openapi::json(),
        }
    }

    /// Structured output's compiler and the id that ends a constrained output, or why there is none.
    pub fn grammars(&self) -> Result<(Arc<tf_grammar::Grammars>, u32), String> {
        self.grammars.get_or_init(|| crate::constraint::build(self)).clone()
    }

    /// The longest sequence (prompt + generated) the engine holds.
    pub fn max_model_len(&self) -> usize {
        self.engine.max_seq_tokens
    }

    /// The most bytes of prompt text tokenized: the tokens a prompt may have (`--max-prompt-tokens`,
    /// and less than the context) times `prompt_bytes_per_token`; longer texts cannot fit.
    pub fn max_prompt_bytes(&self) -> usize {
        let tokens = self.limits.max_prompt_tokens.min(self.max_model_len().saturating_sub(1)).max(1);
        tokens.saturating_mul(self.limits.prompt_bytes_per_token)
    }

    /// A fresh 64-bit value, different for every call (ids, seeds).
    pub fn random_u64(&self) -> u64 {
        let mut h = self.ids.build_hasher();
        h.write_u64(self.next_id.fetch_add(1, Ordering::Relaxed));
        h.finish()
    }

    /// Reserves `n` sequence slots, or 429 when running + queued would pass the limit.
    pub fn admit(self: &Arc<Self>, n: usize) -> Result<Admission, ApiError> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err(ApiError::unavailable());
        }
        let cap = self.limits.max_num_seqs + self.limits.max_queue;
        let before = self.in_flight.fetch_add(n, Ordering::AcqRel);
        if before + n > cap {
            self.in_flight.fetch_sub(n, Ordering::AcqRel);
            self.metrics.rejected_queue_full.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::queue_full(cap));
        }
        self.requests.fetch_add(1, Ordering::AcqRel);
        Ok(Admission { state: self.clone(), n })
    }

    /// Sequences admitted and not yet released.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Requests admitted whose sequences have not all been released.
    pub fn requests_in_flight(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }
}

/// Sequence slots held by one request; released on drop.
pub struct Admission {
    state: Arc<AppState>,
    n: usize,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.state.in_flight.fetch_sub(self.n, Ordering::AcqRel);
        self.state.requests.fetch_sub(1, Ordering::AcqRel);
    }
}
