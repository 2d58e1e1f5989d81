//! The engine thread: owns the backend, the model and the KV pools; takes checked requests over
//! a channel, runs lane rounds (schedule -> one forward over the flat batch -> sample -> emit),
//! and frees finished or cancelled sequences' blocks. HTTP threads never touch the device.

use crate::block_pool::BlockPool;
use crate::draft::Drafter;
use crate::sampler::{History, Logprobs, SamplingParams, sample};
use crate::scheduler::{RoundEntry, Scheduler, SchedulerConfig, SeqId};
use crate::session::{CheckedSession, SessionLayout};
use rayon::prelude::*;
use session_ops::PendingSave;
pub use speculate::{DraftConfig, DraftKind};
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::Instant;
use tf_backend::{AttnMeta, Backend, RowLogprobs, SeqAttn};
use tf_core::TokenIds;
use tf_models::{Batch, Cache, Gemma4Assistant, Model, MtpHead};

mod assistant;
mod constrain;
mod draft_model;
mod mtp;
mod overlap;
mod pick;
mod prompt_logprobs;
mod session_ops;
mod speculate;
mod state;
use assistant::AssistantDrafter;
use draft_model::DraftModel;
use mtp::MtpDrafter;
pub use state::{state_bytes, state_layout};

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// EOS or a stop id.
    Stop,
    /// `max_tokens` or the context was reached.
    Length,
    /// The client went away or asked to stop.
    Cancelled,
}

/// A sampled token and, when asked, its log-probability and the top alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    /// The token.
    pub id: u32,
    /// Log-probability of `id` under the model's raw distribution.
    pub logprob: Option<f32>,
    /// Top alternatives `(id, logprob)`, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// One prompt token's log-probability given the tokens before it.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptLogprob {
    /// The prompt token.
    pub id: u32,
    /// Its log-probability under the model's raw distribution.
    pub logprob: f32,
    /// Its rank in that distribution (1: the most likely; ties: lower id first).
    pub rank: usize,
    /// Top alternatives `(id, logprob)`, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// What the engine tells a request's sink.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The logprobs of prompt positions 1.. (sent once, before the first token, when asked).
    PromptLogprobs(Vec<PromptLogprob>),
    /// The sequence's first round was planned, this long after the engine took it.
    Scheduled(std::time::Duration),
    /// One more token.
    Token(TokenEvent),
    /// The sequence ended; no more events follow.
    Done {
        /// Why.
        reason: FinishReason,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Generated tokens.
        completion_tokens: usize,
        /// Prompt tokens served from the prefix cache when it was first scheduled (0 if it never was).
        cached_tokens: usize,
    },
    /// The request was refused by the engine; no more events follow.
    Error(String),
}

/// Receives a request's events; returns false when nobody listens any more (cancels it).
pub type EventSink = Box<dyn FnMut(Event) -> bool + Send>;

/// A request as the engine sees it: every id already checked at the boundary.
pub struct GenRequest {
    /// The prompt.
    pub prompt: TokenIds,
    /// Sampling settings (validated).
    pub params: SamplingParams,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Ids that end the sequence (checked).
    pub stop_ids: TokenIds,
    /// Keep going past EOS.
    pub ignore_eos: bool,
    /// Alternatives to report per token (`None`: no logprobs).
    pub top_logprobs: Option<usize>,
    /// Alternatives to report per prompt token (`None`: no prompt logprobs); such a request skips
    /// the prefix cache so that every prompt position is computed.
    pub prompt_logprobs: Option<usize>,
    /// Where events go.
    pub sink: EventSink,
    /// Set by anyone to cancel the request within one round.
    pub cancel: Arc<AtomicBool>,
    /// Allow speculative decoding (output is identical either way).
    pub draft: bool,
    /// Structured output: only the ids it allows are sampled (engine/constrain.rs), and the
    /// sequence ends when it is finished.
    pub constraint: Option<Box<dyn crate::constraint::Constraint>>,
}

/// Engine sizing.
#[derive(Debug, Clone, Copy)]
pub struct EngineConfig {
    /// KV blocks in the pool.
    pub num_blocks: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Round limits.
    pub sched: SchedulerConfig,
    /// Speculative decoding.
    pub draft: DraftConfig,
    /// Queue a round of plain decoding before the tokens of the round before it are reported
    /// (overlap.rs: greedy ids still on the backend, sampled ones held back to it), so the device
    /// does not wait for the host between rounds; the same tokens either way.
    pub overlap: bool,
}

/// Counters the engine keeps for metrics.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Requests accepted.
    pub requests: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Prompt tokens prefilled.
    pub prompt_tokens: AtomicU64,
    /// Rounds run.
    pub rounds: AtomicU64,
    /// Total round time in microseconds.
    pub round_micros: AtomicU64,
    /// Sequences waiting.
    pub waiting: AtomicU64,
    /// Sequences running.
    pub running: AtomicU64,
    /// KV blocks in use.
    pub kv_blocks_used: AtomicU64,
    /// KV blocks in the pool.
    pub kv_blocks_total: AtomicU64,
    /// Live state slots taken (models with recurrent layers).
    pub state_slots_used: AtomicU64,
    /// Live state slots in the pool.
    pub state_slots_total: AtomicU64,
    /// Preemptions.
    pub preemptions: AtomicU64,
    /// Rows picked on the backend (plain greedy rounds): only their ids crossed to the host.
    pub device_sampled_rows: AtomicU64,
    /// Rounds queued before the tokens of the round before them were reported (overlap.rs).
    pub overlapped_rounds: AtomicU64,
    /// Rows sampled from candidates the backend selected (only those crossed to the host).
    pub candidate_rows: AtomicU64,
    /// Prompt tokens served from the prefix cache.
    pub prefix_hit_tokens: AtomicU64,
    /// Prompt tokens admitted (hit rate = hits / queries).
    pub prefix_query_tokens: AtomicU64,
    /// Blocks findable in the prefix cache.
    pub prefix_cached_blocks: AtomicU64,
    /// Draft tokens proposed.
    pub draft_proposed: AtomicU64,
    /// Draft tokens accepted.
    pub draft_accepted: AtomicU64,
    /// Verify rounds (sequence-rounds carrying a draft).
    pub draft_verifies: AtomicU64,
    /// Time spent drafting, microseconds.
    pub draft_micros: AtomicU64,
    /// Positions whose K/V a draft model or MTP head took from its own prefix cache.
    pub draft_cached_tokens: AtomicU64,
    /// Why the engine stopped on its own (a tensor-parallel group broke), once it has.
    pub fault: std::sync::Mutex<Option<String>>,
}

impl EngineStats {
    /// Why the engine stopped on its own, if it has.
    pub fn fault(&self) -> Option<String> {
        self.fault.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

enum Command {
    Submit(Box<GenRequest>),
    SaveSession { ids: TokenIds, path: PathBuf, reply: Sender<Result<usize, String>> },
    RestoreSession { session: Box<CheckedSession>, reply: Sender<Result<usize, String>> },
    Shutdown,
}

/// The HTTP side's handle on the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Command>,
    /// Live counters.
    pub stats: Arc<EngineStats>,
    /// Most tokens one sequence can hold (prompt + generated).
    pub max_seq_tokens: usize,
    /// What a saved session must match to be restored here.
    pub session_layout: SessionLayout,
}

impl EngineHandle {
    /// Hands a request to the engine; false when the engine has stopped.
    pub fn submit(&self, req: GenRequest) -> bool {
        self.tx.send(Command::Submit(Box::new(req))).is_ok()
    }

    /// Computes the K/V of the full blocks of `ids` (from the prefix cache where possible) and
    /// writes them with the ids to `path`; returns the tokens saved.
    pub fn save_session(&self, ids: TokenIds, path: PathBuf) -> Result<usize, String> {
        let (reply, rx) = channel();
        self.tx.send(Command::SaveSession { ids, path, reply }).map_err(|_| "the engine has stopped".to_string())?;
        rx.recv().map_err(|_| "the engine has stopped".to_string())?
    }

    /// Puts a checked session's blocks into the prefix cache; returns the tokens restored.
    pub fn restore_session(&self, session: CheckedSession) -> Result<usize, String> {
        let (reply, rx) = channel();
        let cmd = Command::RestoreSession { session: Box::new(session), reply };
        self.tx.send(cmd).map_err(|_| "the engine has stopped".to_string())?;
        rx.recv().map_err(|_| "the engine has stopped".to_string())?
    }

    /// Asks the engine to cancel everything and stop.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Command::Shutdown);
    }
}

/// What sampling one sequence's next token reads (shared across threads: plain data only).
struct SampleJob<'a> {
    params: &'a SamplingParams,
    history: &'a History,
    position: u64,
    /// The row's logprob statistics when its request asks for logprobs.
    stats: Option<&'a RowLogprobs>,
    /// The constraint's mask of this row.
    mask: Option<&'a tf_backend::TokenMask>,
    row: &'a [f32],
}

impl<'a> SampleJob<'a> {
    /// Sequence `a`'s next token from logits `row` (with `stats` when it asks for logprobs).
    fn of(a: &'a Active, row: &'a [f32], stats: Option<&'a RowLogprobs>) -> SampleJob<'a> {
        let position = (a.req.prompt.len() + a.generated) as u64;
        SampleJob { params: &a.req.params, history: &a.history, position, stats, mask: a.masks.front(), row }
    }

    /// The token and, when asked for, its logprobs.
    fn choose(&self, vocab: &tf_core::Vocab) -> (u32, Option<Logprobs>) {
        let mut logits = self.row.to_vec();
        if let Some(m) = self.mask {
            m.apply(&mut logits);
        }
        let token = vocab.sampled(sample(&mut logits, self.params, self.history, self.position) as usize);
        let raw = self.row.get(token as usize).copied().unwrap_or(f32::NEG_INFINITY);
        (token, self.stats.map(|r| Logprobs::of(r, raw)))
    }
}

/// A plain decode entry's sampled token and logprobs (`None`: the sequence is gone).
type Chosen = Option<(u32, Option<Logprobs>)>;

struct Active {
    req: GenRequest,
    history: History,
    generated: usize,
    /// Draft tokens to propose next (adapted to the acceptance seen).
    draft_k: usize,
    /// Until `generated` reaches this, rounds holding this sequence download whole rows: its
    /// last row sampled from candidates had more than the backend keeps (pick.rs).
    whole_until: usize,
    /// The constraint's masks of this round's rows, first row first (constrain.rs).
    masks: VecDeque<tf_backend::TokenMask>,
    /// Prompt logprobs gathered so far, while asked for and not yet sent (prompt_logprobs.rs).
    prompt_lp: Option<Vec<PromptLogprob>>,
    /// When the engine took it, until its first round is planned.
    queued: Option<Instant>,
    /// Prompt tokens the prefix cache served at its first round (reported when it ends).
    cached_tokens: usize,
}

/// Starts the engine thread for `model` on `backend`.
pub fn spawn<B: Backend + 'static>(
    model: Model<B>,
    backend: B,
    cfg: EngineConfig,
) -> Result<(EngineHandle, JoinHandle<()>), tf_models::ModelError> {
    spawn_with_drafter(model, None, backend, cfg)
}

/// What drafts for [`DraftKind::Model`] (a smaller checkpoint of the same vocabulary, or a
/// Gemma 4 assistant) or [`DraftKind::Mtp`] (the target's multi-token-prediction head).
pub enum DraftNet<B: Backend> {
    /// A draft model.
    Model(Box<Model<B>>),
    /// The target checkpoint's MTP head ([`Model::load_mtp`]).
    Mtp(Box<MtpHead<B>>),
    /// A Gemma 4 assistant reading the target's KV pools (engine/assistant.rs).
    Assistant(Box<Gemma4Assistant<B>>),
}

impl<B: Backend> DraftNet<B> {
    /// The draft checkpoint `dir` for `target` (`--draft model:DIR`): a Gemma 4 assistant where
    /// its config's `model_type` is `gemma4_assistant`, else a draft model.
    pub fn open(dir: &Path, target: &Model<B>, backend: &B) -> Result<DraftNet<B>, tf_models::ModelError> {
        let sharded = target.decoder.tp_size() > 1;
        Ok(match tf_models::assistant::is_assistant(dir) {
            true if sharded => {
                let msg = "a Gemma 4 assistant reads the target's KV pools, which a tensor-parallel rank holds only a part of";
                return Err(tf_models::ModelError::Backend(tf_backend::BackendError::Unsupported(msg.into())));
            }
            true => DraftNet::Assistant(Box::new(Gemma4Assistant::open(dir, &target.decoder, backend)?)),
            false => DraftNet::Model(Box::new(Model::open(dir, backend)?)),
        })
    }
}

/// Starts the engine thread with what `cfg.draft.kind` drafts with: a draft model for
/// `DraftKind::Model`; for `DraftKind::Mtp` the MTP head given, else the one the target's
/// checkpoint holds (loaded here).
pub fn spawn_with_drafter<B: Backend + 'static>(
    model: Model<B>,
    drafter: Option<DraftNet<B>>,
    backend: B,
    cfg: EngineConfig,
) -> Result<(EngineHandle, JoinHandle<()>), tf_models::ModelError> {
    let mut model = model;
    // LongRoPE's factors for the context the model is served at (its own, or `--max-model-len`),
    // whatever the pool holds: before any round and any saved state's check.
    let context = model.decoder.spec.max_position_embeddings;
    model.fit_context(context);
    let max_seq_tokens = (cfg.num_blocks * cfg.block_size).min(context);
    let layout = state_layout(&model, &cfg);
    let num_slots = layout.map_or(0, |l| l.num_slots());
    let cache = model.decoder.alloc_cache(&backend, cfg.num_blocks, cfg.block_size, num_slots)?;
    let refuse = |msg: &str| tf_models::ModelError::Backend(tf_backend::BackendError::Unsupported(msg.into()));
    let (draft_model, mtp, assistant) = match (cfg.draft.kind, drafter) {
        (DraftKind::Model, Some(DraftNet::Model(mut d))) => {
            d.fit_context(context);
            (Some(DraftModel::new(&model, *d, &backend, &cfg)?), None, None)
        }
        (DraftKind::Model, Some(DraftNet::Assistant(a))) => (None, None, Some(AssistantDrafter::new(&model, *a))),
        (DraftKind::Model, _) => return Err(refuse("--draft model needs a draft checkpoint")),
        (DraftKind::Mtp, Some(DraftNet::Model(_) | DraftNet::Assistant(_))) => {
            return Err(refuse("--draft mtp drafts with the target's own MTP head, not a draft model"));
        }
        (DraftKind::Mtp, head) => {
            let head = match head {
                Some(DraftNet::Mtp(h)) => *h,
                _ => model.load_mtp(&backend)?,
            };
            (None, Some(MtpDrafter::new(&model, head, &backend, &cfg)?), None)
        }
        _ => (None, None, None),
    };
    let (tx, rx) = channel();
    let stats = Arc::new(EngineStats::default());
    stats.kv_blocks_total.store(cfg.num_blocks as u64, Ordering::Relaxed);
    // Every rank's pools; where a sharded rank 0 was not told its followers' (a group started
    // by hand), sessions are refused and the handle's layout is rank 0's alone.
    let sessions = SessionLayout::of(&model, &backend, cfg.block_size, max_seq_tokens).map_err(|e| e.to_string());
    let session_layout = sessions.clone().unwrap_or_else(|_| {
        let own = [model.decoder.own_pools(&backend)];
        SessionLayout::of_pools(&model, backend.kv_dtype(), &own, cfg.block_size, max_seq_tokens)
    });
    let handle = EngineHandle { tx, stats: stats.clone(), max_seq_tokens, session_layout };
    let mut sched = Scheduler::new(cfg.sched, BlockPool::new(cfg.num_blocks, cfg.block_size));
    if let Some(l) = layout {
        sched = sched.with_state(l);
    }
    let drafter = cfg.draft.drafter();
    let mut core = Core {
        draft: cfg.draft,
        drafter,
        draft_model,
        mtp,
        assistant,
        model,
        backend,
        cache,
        sched,
        active: HashMap::new(),
        saves: HashMap::new(),
        next_id: 0,
        stats,
        max_seq_tokens,
        sessions,
        overlap: cfg.overlap,
        in_flight: None,
        prompt_rows: Vec::new(),
    };
    // The loop runs on the backend's own threads where it has them (Backend::home).
    let home = core.backend.home();
    let thread = std::thread::Builder::new()
        .name("tensorfold-engine".into())
        .spawn(move || {
            let mut rx = Some(rx);
            let mut body = || {
                if let Some(rx) = rx.take() {
                    core.run(rx)
                }
            };
            match home {
                Some(home) => home(&mut body),
                None => body(),
            }
        })
        .map_err(|e| tf_models::ModelError::Backend(tf_backend::BackendError::Device(e.to_string())))?;
    Ok((handle, thread))
}

struct Core<B: Backend> {
    draft: DraftConfig,
    drafter: Option<Box<dyn Drafter>>,
    draft_model: Option<DraftModel<B>>,
    /// The MTP drafter (`DraftKind::Mtp`).
    mtp: Option<MtpDrafter<B>>,
    /// The Gemma 4 assistant drafter (`DraftKind::Model` with a `gemma4_assistant` checkpoint).
    assistant: Option<AssistantDrafter<B>>,
    model: Model<B>,
    backend: B,
    cache: Cache<B>,
    sched: Scheduler,
    active: HashMap<SeqId, Active>,
    saves: HashMap<SeqId, PendingSave>,
    next_id: SeqId,
    stats: Arc<EngineStats>,
    max_seq_tokens: usize,
    /// What a saved session holds here, or why none is saved or restored.
    sessions: Result<SessionLayout, String>,
    /// Overlap greedy rounds (`EngineConfig::overlap`).
    overlap: bool,
    /// A greedy round whose ids are still on the backend (overlap.rs).
    in_flight: Option<overlap::InFlight<B::Held>>,
    /// This round's prompt-logprob rows: (logits row, sequence, prompt position).
    prompt_rows: Vec<(usize, SeqId, usize)>,
}

impl<B: Backend> Core<B> {
    fn run(&mut self, rx: Receiver<Command>) {
        loop {
            if self.sched.is_idle() && self.in_flight.is_none() {
                match rx.recv() {
                    Ok(Command::Shutdown) | Err(_) => return,
                    Ok(cmd) => self.command(cmd),
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(Command::Shutdown) => return self.cancel_all(),
                    Ok(cmd) => self.command(cmd),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => return self.cancel_all(),
                }
            }
            self.reap_cancelled();
            if let Some(p) = self.in_flight.take() {
                self.land_in_flight(p);
            } else {
                self.propose_drafts();
                let plan = self.sched.schedule();
                if !plan.is_empty() {
                    self.round(&plan);
                }
            }
            // A tensor-parallel group that broke (a rank left, hung or refused a plan) ends
            // the engine: every request gets the reason.
            if let Some(why) = self.model.decoder.fault() {
                return self.fail_all(&why);
            }
            self.publish();
        }
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Submit(r) => self.admit(*r),
            Command::SaveSession { ids, path, reply } => self.admit_save(ids, path, reply),
            Command::RestoreSession { session, reply } => {
                let _ = reply.send(self.restore(&session));
            }
            Command::Shutdown => self.cancel_all(),
        }
    }

    fn admit(&mut self, mut req: GenRequest) {
        let total = req.prompt.len() + req.max_tokens;
        if req.prompt.is_empty() || total > self.max_seq_tokens {
            let msg = format!(
                "prompt ({}) + max_tokens ({}) exceeds {} tokens",
                req.prompt.len(),
                req.max_tokens,
                self.max_seq_tokens
            );
            (req.sink)(Event::Error(msg));
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        self.sched.add(id, req.prompt.as_slice().to_vec());
        if req.prompt_logprobs.is_some() {
            self.sched.skip_prefix_cache(id);
        }
        let history = History::new(&req.prompt);
        let draft_k = if req.draft { self.draft.num_tokens } else { 0 };
        let prompt_lp = req.prompt_logprobs.map(|_| Vec::new());
        let masks = VecDeque::new();
        let queued = Some(Instant::now());
        let a =
            Active { req, history, generated: 0, draft_k, whole_until: 0, masks, prompt_lp, queued, cached_tokens: 0 };
        self.active.insert(id, a);
    }

    fn reap_cancelled(&mut self) {
        let gone: Vec<SeqId> =
            self.active.iter().filter(|(_, a)| a.req.cancel.load(Ordering::Relaxed)).map(|(&id, _)| id).collect();
        for id in gone {
            self.finish(id, FinishReason::Cancelled);
        }
    }

    /// Ends every request and pending save with the error `why`, which the stats keep.
    fn fail_all(&mut self, why: &str) {
        *self.stats.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.to_string());
        let ids: Vec<SeqId> = self.active.keys().chain(self.saves.keys()).copied().collect();
        for id in ids {
            if let Some(a) = self.active.get_mut(&id) {
                (a.req.sink)(Event::Error(why.to_string()));
            }
            self.active.remove(&id);
            if let Some(save) = self.saves.remove(&id) {
                let _ = save.reply.send(Err(why.to_string()));
            }
            self.sched.remove(id);
        }
    }

    fn cancel_all(&mut self) {
        let ids: Vec<SeqId> = self.active.keys().chain(self.saves.keys()).copied().collect();
        for id in ids {
            self.finish(id, FinishReason::Cancelled);
        }
    }

    fn finish(&mut self, id: SeqId, reason: FinishReason) {
        self.sched.remove(id);
        if let Some(d) = self.draft_model.as_mut() {
            d.forget(id);
        }
        if let Some(d) = self.mtp.as_mut() {
            d.forget(id);
        }
        if let Some(d) = self.assistant.as_mut() {
            d.forget(id);
        }
        if let Some(save) = self.saves.remove(&id) {
            let _ = save.reply.send(Err("the engine stopped before the session was saved".into()));
        }
        if let Some(mut a) = self.active.remove(&id) {
            let (prompt_tokens, cached_tokens) = (a.req.prompt.len(), a.cached_tokens);
            let done = Event::Done { reason, prompt_tokens, completion_tokens: a.generated, cached_tokens };
            (a.req.sink)(done);
        }
    }

    /// Runs the forward of `plan`'s rows; with `fed`, its ids are rows of ids the backend holds
    /// (one index per entry, in order: entries of one new token each). Logits of the rows wanting them.
    fn forward_plan(&mut self, plan: &[RoundEntry], fed: Option<(&B::Held, &[u32])>) -> B::Act {
        self.apply_state_copies();
        let state_slots = self.state_slots(plan);
        let block_size = self.sched.pool().block_size();
        let (mut ids, mut seqs, mut slots, mut rows) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut q_start = 0;
        let mut prompt_rows = Vec::new();
        // (sequence, first position, first row, rows) of the entries whose hidden rows the MTP
        // drafter or the assistant keeps
        let mut mtp_rows = Vec::new();
        let keeps_rows = self.mtp.is_some() || self.assistant.is_some();
        for e in plan {
            let Some(s) = self.sched.seq(e.seq) else {
                continue;
            };
            if let Some(a) = self.active.get_mut(&e.seq)
                && let Some(t) = a.queued.take()
            {
                a.cached_tokens = s.cached_tokens;
                (a.req.sink)(Event::Scheduled(t.elapsed()));
            }
            if fed.is_none() {
                prompt_rows.extend(self.prompt_positions(e, s.prompt_len).map(|p| (q_start + p - e.start, e.seq, p)));
            }
            // Fed entries' tokens are not on the host yet (the backend holds them).
            if fed.is_none() {
                ids.extend_from_slice(&s.tokens[e.start..e.start + e.num_tokens - e.draft.len()]);
                ids.extend_from_slice(&e.draft);
            }
            slots.extend(
                (e.start..e.start + e.num_tokens)
                    .map(|p| s.block_table[p / block_size] as usize * block_size + p % block_size),
            );
            seqs.push(SeqAttn { q_start, q_len: e.num_tokens, start_pos: e.start, block_table: s.block_table.clone() });
            if keeps_rows && self.active.get(&e.seq).is_some_and(|a| a.draft_k > 0) {
                mtp_rows.push((e.seq, e.start, q_start, e.num_tokens));
            }
            q_start += e.num_tokens;
            if e.wants_logits {
                rows.extend(q_start - 1 - e.draft.len()..q_start);
            }
            if e.start < s.prompt_len {
                let n = (e.start + e.num_tokens).min(s.prompt_len) - e.start;
                self.stats.prompt_tokens.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        // Prompt-logprob rows follow the rows sampled from, so those keep their indices.
        self.prompt_rows.clear();
        for (q, seq, p) in prompt_rows {
            self.prompt_rows.push((rows.len(), seq, p));
            rows.push(q);
        }
        let meta = AttnMeta { state_slots, seqs, slot_mapping: slots, block_size };
        let (ids, held) = match fed {
            Some((held, picks)) => (picks, Some(held)),
            None => (&ids[..], None),
        };
        let batch = Batch { ids, meta: &meta, logits_rows: &rows, held };
        // Only a round feeding a drafting sequence hands its hidden rows to the drafter.
        if mtp_rows.is_empty() {
            return self.model.decoder.forward(&self.backend, &batch, &mut self.cache);
        }
        let (logits, hidden) = self.model.decoder.forward_hidden(&self.backend, &batch, &mut self.cache);
        let (host, w) = (self.backend.download(&hidden), self.model.decoder.spec.hidden_size);
        for (seq, start, q, n) in mtp_rows {
            let rows = &host[q * w..(q + n) * w];
            if let Some(mtp) = self.mtp.as_mut() {
                mtp.record(seq, start, rows);
            }
            if let Some(a) = self.assistant.as_mut() {
                a.record(seq, start, rows);
            }
        }
        logits
    }

    fn round(&mut self, plan: &[RoundEntry]) {
        let t = Instant::now();
        let logits = self.forward_plan(plan, None);
        self.gather_prompt_logprobs(&logits);
        // While a device runs the forward.
        self.compute_masks(plan);
        self.sched.commit(plan);
        self.pick(plan, logits, t);
    }

    /// Picks and delivers the tokens of round `plan` (forwarded, its masks made, committed;
    /// started at `t`) from its `logits`; a round of plain rows leaves its ids held for the next
    /// round to be queued on (overlap.rs) instead of delivering them.
    fn pick(&mut self, plan: &[RoundEntry], mut logits: B::Act, t: Instant) {
        let vocab = self.model.vocab.rows();
        // Each wanting entry's first logits row; plain decode rows are sampled together first
        // (sampling is a pure function of the row, params, history and position), then every
        // entry is delivered in plan order.
        let mut first_row = Vec::new();
        let mut row = 0;
        for e in plan.iter().filter(|e| e.wants_logits) {
            first_row.push(row);
            row += 1 + e.draft.len();
        }
        // A round of plain greedy rows only takes their argmax ids from the backend (the same
        // function of the same values as the host sampler's greedy pick), and leaves them there
        // until the next round is queued on them (overlap.rs); other rounds take their rows'
        // sampling candidates (pick.rs) unless a row needs its logprobs or a save runs; those
        // download the rows.
        if self.all_plain_greedy(plan) {
            let held = self.backend.argmax_rows_held(&logits);
            self.in_flight = Some(overlap::InFlight::new(plan.to_vec(), held, t));
            return;
        }
        let sampled = self.tokens_from_candidates(plan, &first_row, &mut logits);
        // Plain rows sampled from candidates: their tokens are held as greedy ids are, so the next
        // round is queued before they are delivered (one row an entry; a placeholder, never
        // delivered, for a sequence that ended since the round was queued).
        if let Some(tokens) = &sampled
            && self.overlap
            && self.all_holdable(plan)
        {
            let ids: Vec<u32> = tokens.iter().map(|s| s.first().map_or(0, |&(t, _)| t)).collect();
            let held = self.backend.hold_ids(&ids);
            self.in_flight = Some(overlap::InFlight::new(plan.to_vec(), held, t).host_picked());
            return;
        }
        let (host, stats) = if sampled.is_some() {
            (Vec::new(), Vec::new())
        } else {
            let stats = self.row_logprobs(plan, &first_row, &logits, row);
            (self.backend.download(&logits), stats)
        };
        let mut chosen = if sampled.is_some() {
            Vec::new().into_iter()
        } else {
            self.choose_plain(plan, &first_row, &host, &stats, vocab).into_iter()
        };
        let mut sampled = sampled.map(Vec::into_iter);
        for (e, &row) in plan.iter().filter(|e| e.wants_logits).zip(&first_row) {
            if self.saves.contains_key(&e.seq) {
                self.complete_save(e.seq);
            } else if let Some(mut tokens) = sampled.as_mut().map(|s| s.next().unwrap_or_default()) {
                if !e.draft.is_empty() {
                    self.verify_sampled(e, tokens);
                } else if let Some(token) = tokens.drain(..).next().and_then(|(t, lp)| self.deliver(e.seq, t, lp)) {
                    self.sched.append(e.seq, token);
                }
            } else if e.draft.is_empty() {
                let pick = chosen.next().flatten();
                if let Some(token) = pick.and_then(|(token, lp)| self.deliver(e.seq, token, lp)) {
                    self.sched.append(e.seq, token);
                }
            } else {
                let rows = row..row + 1 + e.draft.len();
                self.verify(e, &host[rows.start * vocab..rows.end * vocab], &stats[rows]);
            }
        }
        self.stats.rounds.fetch_add(1, Ordering::Relaxed);
        self.stats.round_micros.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// Whether every entry wanting logits is a plain decode row (no draft, no save) of an active
    /// sequence that samples greedily from the raw logits and asks for no logprobs.
    fn all_plain_greedy(&self, plan: &[RoundEntry]) -> bool {
        let mut wanting = plan.iter().filter(|e| e.wants_logits).peekable();
        wanting.peek().is_some()
            && wanting.all(|e| {
                e.draft.is_empty()
                    && !self.saves.contains_key(&e.seq)
                    && self.active.get(&e.seq).is_some_and(|a| {
                        a.req.params.is_plain_greedy()
                            && a.generated >= a.req.params.min_tokens
                            && a.req.top_logprobs.is_none()
                            && a.req.constraint.is_none()
                    })
            })
    }

    /// Whether a round sampled from candidates may hold its tokens (overlap.rs): every entry
    /// wanting logits a row without a draft or a save, of a sequence asking for no logprobs and
    /// no grammar (whose tokens `deliver` reports without either), or ended already.
    fn all_holdable(&self, plan: &[RoundEntry]) -> bool {
        plan.iter().filter(|e| e.wants_logits).all(|e| {
            e.draft.is_empty()
                && !self.saves.contains_key(&e.seq)
                && self.active.get(&e.seq).is_none_or(|a| a.req.top_logprobs.is_none() && a.req.constraint.is_none())
        })
    }

    /// The token (and logprobs) of every plain decode entry wanting logits (not saving, no
    /// draft), in plan order, `None` for sequences no longer active; sampled in parallel.
    fn choose_plain(
        &self,
        plan: &[RoundEntry],
        first_row: &[usize],
        logits: &[f32],
        stats: &[Option<RowLogprobs>],
        vocab: usize,
    ) -> Vec<Chosen> {
        let jobs: Vec<Option<SampleJob<'_>>> = plan
            .iter()
            .filter(|e| e.wants_logits)
            .zip(first_row)
            .filter(|(e, _)| !self.saves.contains_key(&e.seq) && e.draft.is_empty())
            .map(|(e, &row)| {
                let a = self.active.get(&e.seq)?;
                Some(SampleJob::of(a, &logits[row * vocab..(row + 1) * vocab], stats[row].as_ref()))
            })
            .collect();
        let v = &self.model.vocab;
        let choose = |job: &Option<SampleJob<'_>>| job.as_ref().map(|j| j.choose(v));
        match jobs.len() > 1 {
            true => self.backend.install(|| jobs.par_iter().map(choose).collect()),
            false => jobs.iter().map(choose).collect(),
        }
    }

    /// Samples, reports and checks the end of sequence `id`; the token when it goes on.
    fn emit(&mut self, id: SeqId, logits: &[f32], stats: Option<&RowLogprobs>) -> Option<u32> {
        let (token, lp) = SampleJob::of(self.active.get(&id)?, logits, stats).choose(&self.model.vocab);
        self.deliver(id, token, lp)
    }

    /// Records and reports sequence `id`'s next token, checks its end; the token when it goes on.
    fn deliver(&mut self, id: SeqId, token: u32, lp: Option<Logprobs>) -> Option<u32> {
        let a = self.active.get_mut(&id)?;
        a.history.push(token);
        a.generated += 1;
        a.masks.pop_front();
        let complete = a.req.constraint.as_mut().is_some_and(|c| !c.accept(token) || c.is_finished());
        self.stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
        if let Some(prompt) = a.prompt_lp.take() {
            (a.req.sink)(Event::PromptLogprobs(prompt));
        }
        let (logprob, top) = match lp {
            Some(l) => (Some(l.chosen), l.top),
            None => (None, Vec::new()),
        };
        let alive = (a.req.sink)(Event::Token(TokenEvent { id: token, logprob, top }));
        let stop = (!a.req.ignore_eos && self.model.eos_ids.contains(&token))
            || a.req.stop_ids.as_slice().contains(&token)
            || complete;
        let length = a.generated >= a.req.max_tokens;
        let end = match (alive, stop, length) {
            (false, _, _) => FinishReason::Cancelled,
            (_, true, _) => FinishReason::Stop,
            (_, _, true) => FinishReason::Length,
            _ => return Some(token),
        };
        self.finish(id, end);
        None
    }

    fn publish(&self) {
        let s = &self.stats;
        s.waiting.store(self.sched.num_waiting() as u64, Ordering::Relaxed);
        s.running.store(self.sched.num_running() as u64, Ordering::Relaxed);
        s.kv_blocks_used.store(self.sched.pool().num_used() as u64, Ordering::Relaxed);
        let (state_used, state_total) = self.sched.state_use();
        s.state_slots_used.store(state_used as u64, Ordering::Relaxed);
        s.state_slots_total.store(state_total as u64, Ordering::Relaxed);
        s.preemptions.store(self.sched.num_preemptions(), Ordering::Relaxed);
        let (hits, queries) = self.sched.prefix_stats();
        s.prefix_hit_tokens.store(hits, Ordering::Relaxed);
        s.prefix_query_tokens.store(queries, Ordering::Relaxed);
        s.prefix_cached_blocks.store(self.sched.pool().num_cached() as u64, Ordering::Relaxed);
    }
}
