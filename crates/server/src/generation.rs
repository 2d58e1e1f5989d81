//! One request's sequences in the engine. Submits them, turns engine events into text deltas on
//! the HTTP side (incremental detokenization, stop strings: a hit cancels the sequence and reports
//! "stop"), and cancels every sequence when dropped, e.g. when the client goes away. A sequence
//! whose tokens pile up unread (a client that stopped reading) is cancelled at a bound.

use crate::access_log::Tally;
use crate::error::ApiError;
use crate::reasoning::Splitter;
use crate::request::{Options, check_fan_out};
use crate::state::{Admission, AppState};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;
use tf_core::TokenIds;
use tf_engine::engine::{Event, FinishReason, GenRequest, PromptLogprob, TokenEvent};
use tf_engine::sampler::SamplingParams;
use tf_tokenize::{IncrementalDecoder, StopMatcher};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// Tokens of one sequence the engine may hand over before the HTTP side has taken them; one
/// more cancels the sequence (it ends as "abort" and frees its KV blocks), so a client that
/// stops reading cannot make the server hold its output.
pub const MAX_UNREAD_TOKENS: usize = 512;

/// One sequence to run.
#[derive(Debug, Clone)]
pub struct SeqSpec {
    /// The checked prompt.
    pub prompt: TokenIds,
    /// Sampling settings, seed included.
    pub params: SamplingParams,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Structured output's compiled constraint.
    pub constraint: Option<crate::constraint::Prepared>,
    /// Where this output's reasoning is (a chat with `--reasoning-parser`), as its prompt
    /// leaves it (`ReasoningParser::for_prompt`).
    pub reasoning: Option<crate::reasoning::ReasoningParser>,
}

/// What happened to one sequence since the last update.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// New text (possibly empty) and the tokens that produced it.
    Delta {
        /// The sequence.
        index: usize,
        /// Text safe to show.
        text: String,
        /// The tokens, with logprobs when asked for.
        tokens: Vec<TokenEvent>,
    },
    /// The logprobs of the sequence's prompt tokens after the first.
    Prompt {
        /// The sequence.
        index: usize,
        /// The prompt's first token (it has no logprob).
        first: u32,
        /// Position 1 on.
        logprobs: Vec<PromptLogprob>,
    },
    /// The sequence ended: "stop", "length" or "abort".
    Finish {
        /// The sequence.
        index: usize,
        /// OpenAI's finish reason.
        reason: &'static str,
    },
    /// The engine refused the sequence.
    Failed {
        /// The sequence.
        index: usize,
        /// Why.
        message: String,
    },
}

struct SeqState {
    decoder: IncrementalDecoder,
    stops: StopMatcher,
    cancel: Arc<AtomicBool>,
    /// Tokens sent by the engine and not yet received here.
    unread: Arc<AtomicUsize>,
    /// A finish was reported (stop string, or the engine's end).
    finished: bool,
    /// The engine sent its last event.
    done: bool,
    completion_tokens: usize,
    /// Prompt tokens the engine served from its prefix cache (known at its end).
    cached_tokens: usize,
    /// With a reasoning parser: the split of the text so far, and the tokens generated before
    /// its answer started (reasoning tokens, once the split saw reasoning).
    thinking: Option<(Splitter, usize)>,
    /// The prompt's first token.
    first: u32,
    /// When its first and its latest token came (metrics).
    first_at: Option<Instant>,
    last_at: Option<Instant>,
}

/// A running request: yields [`Update`]s until every sequence has ended.
pub struct Generation {
    state: Arc<AppState>,
    rx: UnboundedReceiver<(usize, Event)>,
    seqs: Vec<SeqState>,
    pending: VecDeque<Update>,
    /// Ids that end a sequence and are not part of its text (EOS unless ignored, stop ids).
    final_ids: Vec<u32>,
    started: Instant,
    /// Nothing is generated (`max_tokens: 0`): the engine's one token is dropped.
    score_only: bool,
    open: usize,
    /// Sequences per prompt (`n`): consecutive sequences share a prompt.
    per_prompt: usize,
    _admission: Admission,
    tally: Option<Tally>,
}

impl Generation {
    /// Admits (400 when the engine could never run them all, 429 when the queue is full) and
    /// submits every sequence.
    pub fn start(
        state: &Arc<AppState>,
        specs: Vec<SeqSpec>,
        opts: &Options,
        started: Instant,
    ) -> Result<Self, ApiError> {
        check_fan_out(state, specs.len(), opts.n)?;
        let admission = state.admit(specs.len())?;
        let (tx, rx) = unbounded_channel();
        let mut seqs = Vec::with_capacity(specs.len());
        let mut gen_requests = Vec::with_capacity(specs.len());
        for (i, spec) in specs.into_iter().enumerate() {
            let cancel = Arc::new(AtomicBool::new(false));
            let unread = Arc::new(AtomicUsize::new(0));
            let tx = tx.clone();
            seqs.push(SeqState {
                // Harmony's markup is special tokens the reasoning split reads (and drops).
                decoder: IncrementalDecoder::new(
                    spec.prompt.as_slice(),
                    opts.skip_special && !spec.reasoning.is_some_and(|p| p.keeps_special_tokens()),
                ),
                stops: StopMatcher::new(&opts.stop).including(opts.include_stop),
                cancel: cancel.clone(),
                unread: unread.clone(),
                finished: false,
                done: false,
                completion_tokens: 0,
                cached_tokens: 0,
                thinking: spec.reasoning.map(|p| (Splitter::new(p), 0)),
                first: spec.prompt.as_slice().first().copied().unwrap_or(0),
                first_at: None,
                last_at: None,
            });
            gen_requests.push(GenRequest {
                prompt: spec.prompt,
                params: spec.params,
                max_tokens: spec.max_tokens,
                stop_ids: opts.stop_ids.clone(),
                ignore_eos: opts.ignore_eos,
                top_logprobs: opts.logprobs,
                prompt_logprobs: opts.engine_prompt_logprobs(),
                sink: Box::new(move |e| {
                    // Past the bound the token is not sent and the engine cancels the sequence;
                    // its end (Done) is always sent.
                    if matches!(e, Event::Token(_)) && unread.fetch_add(1, Ordering::AcqRel) >= MAX_UNREAD_TOKENS {
                        return false;
                    }
                    tx.send((i, e)).is_ok()
                }),
                cancel,
                draft: opts.draft,
                constraint: spec.constraint.as_ref().map(crate::constraint::Prepared::start),
            });
        }
        let mut final_ids = opts.stop_ids.as_slice().to_vec();
        if !opts.ignore_eos {
            final_ids.extend(&state.model.eos_ids);
        }
        let open = seqs.len();
        let generation = Generation {
            state: state.clone(),
            rx,
            seqs,
            pending: VecDeque::new(),
            final_ids,
            started,
            score_only: opts.score_only,
            open,
            per_prompt: opts.n.max(1),
            _admission: admission,
            tally: None,
        };
        for r in gen_requests {
            if !state.engine.submit(r) {
                return Err(ApiError::unavailable());
            }
        }
        Ok(generation)
    }

    /// The next update; `None` once every sequence has ended.
    pub async fn next(&mut self) -> Option<Update> {
        loop {
            if let Some(u) = self.pending.pop_front() {
                return Some(u);
            }
            if self.open == 0 {
                return None;
            }
            match self.rx.recv().await {
                Some((i, event)) => self.on_event(i, event),
                None => self.engine_gone(),
            }
        }
    }

    /// Reports the tokens generated to `tally` when dropped.
    pub fn report_to(&mut self, tally: Tally) {
        self.tally = Some(tally);
    }

    /// Tokens generated so far, over all sequences (up to a stop string where one hit).
    pub fn completion_tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.completion_tokens).sum()
    }

    /// Prompt tokens served from the prefix cache, each prompt counted once (as usage counts
    /// prompt tokens): the fewest any of its sequences got.
    pub fn cached_tokens(&self) -> usize {
        self.seqs.chunks(self.per_prompt).map(|g| g.iter().map(|s| s.cached_tokens).min().unwrap_or(0)).sum()
    }

    /// Tokens of the reasoning over all sequences (with a reasoning parser): those generated
    /// before each answer's first text, where its output had reasoning.
    pub fn reasoning_tokens(&self) -> usize {
        self.seqs
            .iter()
            .filter_map(|s| s.thinking.as_ref())
            .filter(|(split, _)| split.saw_reasoning())
            .map(|t| t.1)
            .sum()
    }

    fn on_event(&mut self, i: usize, event: Event) {
        let Some(s) = self.seqs.get_mut(i) else { return };
        if matches!(event, Event::Token(_)) {
            s.unread.fetch_sub(1, Ordering::AcqRel);
        }
        if s.done {
            return;
        }
        match event {
            Event::PromptLogprobs(logprobs) => {
                self.pending.push_back(Update::Prompt { index: i, first: s.first, logprobs })
            }
            Event::Scheduled(waited) => self.state.metrics.queue.observe(waited),
            Event::Token(_) if self.score_only => {}
            Event::Token(t) => self.on_token(i, t),
            Event::Done { reason, cached_tokens, .. } => {
                s.done = true;
                s.cached_tokens = cached_tokens;
                self.open -= 1;
                let m = &self.state.metrics;
                m.e2e.observe(self.started.elapsed());
                if let (Some(first), Some(last)) = (s.first_at, s.last_at)
                    && s.completion_tokens > 1
                {
                    m.tpot.observe((last - first) / (s.completion_tokens as u32 - 1));
                }
                if !s.finished {
                    let scored = self.score_only && reason != FinishReason::Cancelled;
                    let reason = if scored { FinishReason::Length } else { reason };
                    self.flush(i, reason);
                }
            }
            Event::Error(message) => {
                s.done = true;
                self.open -= 1;
                if !s.finished {
                    s.finished = true;
                    self.pending.push_back(Update::Failed { index: i, message });
                }
            }
        }
    }

    fn on_token(&mut self, i: usize, t: TokenEvent) {
        let s = &mut self.seqs[i];
        if s.finished {
            return; // a stop string hit; the engine has not seen the cancel yet
        }
        s.completion_tokens += 1;
        let now = Instant::now();
        match s.last_at {
            None => {
                self.state.metrics.ttft.observe(now - self.started);
                s.first_at = Some(now);
            }
            Some(last) => self.state.metrics.itl.observe(now - last),
        }
        s.last_at = Some(now);
        if self.final_ids.contains(&t.id) {
            return;
        }
        let piece = match &self.state.model.tokenizer {
            Some(tok) => s.decoder.step(tok, t.id).unwrap_or_default(),
            None => String::new(),
        };
        let out = s.stops.push(&piece);
        if let Some((split, n)) = s.thinking.as_mut()
            && split.push(&out.text).1.is_empty()
            && !split.answering()
        {
            *n += 1;
        }
        self.pending.push_back(Update::Delta { index: i, text: out.text, tokens: vec![t] });
        if out.stopped {
            s.cancel.store(true, Ordering::Relaxed);
            s.finished = true;
            self.pending.push_back(Update::Finish { index: i, reason: "stop" });
        }
    }

    /// The engine ended sequence `i`: emit held-back text, then the finish.
    fn flush(&mut self, i: usize, reason: FinishReason) {
        let s = &mut self.seqs[i];
        s.finished = true;
        let rest = match &self.state.model.tokenizer {
            Some(tok) => s.decoder.finish(tok).unwrap_or_default(),
            None => String::new(),
        };
        let out = s.stops.push(&rest);
        let mut text = out.text;
        if !out.stopped {
            text.push_str(&s.stops.finish());
        }
        if !text.is_empty() {
            self.pending.push_back(Update::Delta { index: i, text, tokens: Vec::new() });
        }
        let reason = match reason {
            _ if out.stopped => "stop",
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "abort",
        };
        self.pending.push_back(Update::Finish { index: i, reason });
    }

    fn engine_gone(&mut self) {
        for (i, s) in self.seqs.iter_mut().enumerate() {
            if !s.done && !s.finished {
                self.pending.push_back(Update::Finish { index: i, reason: "abort" });
            }
            s.done = true;
            s.finished = true;
        }
        self.open = 0;
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if let Some(t) = &self.tally {
            t.set_completion(self.completion_tokens());
        }
        for s in &self.seqs {
            s.cancel.store(true, Ordering::Relaxed);
        }
    }
}
