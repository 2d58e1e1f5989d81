//! `tensorfold generate --session NAME` (llama.cpp's `--prompt-cache`, exact): runs through the
//! engine; a saved session is checked and restored into the prefix cache before the prompt runs,
//! and the prompt and generated tokens are saved to it afterwards (every tensor-parallel rank's
//! part under `--tensor-parallel-size`). The output equals a run without the session, bit for bit.

use crate::args::GenerateArgs;
use crate::device::{OnOwnedBackend, dispatch_owned};
use crate::exit::{Failure, failed, refused};
use crate::gen_text::TextOut;
use crate::generate::Generate;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::time::Instant;
use tf_backend::Backend;
use tf_core::TokenIds;
use tf_engine::engine::{EngineConfig, EngineHandle, Event, GenRequest, spawn};
use tf_engine::runner::BLOCK_SIZE;
use tf_engine::scheduler::SchedulerConfig;
use tf_engine::session::{self, SessionHeader};
use tf_models::tp::GroupShape;
use tf_tokenize::Tokenizer;

struct SessionGenerate<'a>(&'a GenerateArgs);

/// The header of the session file at `path`, `None` when there is none yet.
fn existing(path: &Path) -> Result<Option<SessionHeader>, Failure> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => session::inspect(path).map(Some).map_err(refused),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(failed(format!("session '{}': {e}", path.display()))),
    }
}

impl OnOwnedBackend for SessionGenerate<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, new_backend: &dyn Fn() -> Result<B, Failure>) -> Result<(), Failure> {
        let (a, b) = (self.0, new_backend()?);
        let g = Generate(a);
        let path = session::confined_path(&a.session_dir, a.session.as_deref().unwrap_or_default()).map_err(refused)?;
        let params = g.params()?;
        let dev = crate::tp::rank_device(&a.dev, a.tensor_parallel_size)?;
        let shape = GroupShape { size: a.tensor_parallel_size, expert_parallel: a.enable_expert_parallel };
        let mut m = crate::tp::open(&a.model, &b, &Default::default(), &dev, shape)?;
        crate::load::cap_context(&mut m, a.max_model_len.map(|n| n as u64))?;
        let prompt = g.prompt(&m)?;
        let stop_ids = g.stop_ids(&m)?;
        let max_tokens = g.max_tokens(&m, &prompt);
        let saved = existing(&path)?;
        // Room for this run and for the whole saved session (refused later if past the context).
        let ctx = m.decoder.spec.max_position_embeddings;
        let tokens = (prompt.len() + max_tokens).max(saved.as_ref().map_or(0, |h| h.num_tokens.min(ctx)));
        let chunk = a.chunk.max(1);
        let sched =
            SchedulerConfig { max_num_seqs: 1, max_round_tokens: chunk, prefill_chunk: chunk, prefix_cache: true };
        let num_blocks = tokens.div_ceil(BLOCK_SIZE) + 1;
        let cfg = EngineConfig { num_blocks, block_size: BLOCK_SIZE, sched, draft: Default::default(), overlap: true };
        let (tok, eos_ids) = (m.tokenizer.clone(), m.eos_ids.clone());
        let (h, thread) = spawn(m, b, cfg).map_err(refused)?;
        let job = Job { g, h: &h, path: &path, tok: tok.as_ref(), eos_ids: &eos_ids, stop_ids: &stop_ids };
        let result = job.run(saved.is_some(), prompt, params, max_tokens);
        h.shutdown();
        let _ = thread.join();
        result
    }
}

/// One session run against a started engine.
struct Job<'a> {
    g: Generate<'a>,
    h: &'a EngineHandle,
    path: &'a Path,
    tok: Option<&'a Tokenizer>,
    eos_ids: &'a [u32],
    stop_ids: &'a TokenIds,
}

impl Job<'_> {
    fn run(
        &self,
        restore: bool,
        prompt: TokenIds,
        params: tf_engine::sampler::SamplingParams,
        max_tokens: usize,
    ) -> Result<(), Failure> {
        let shown = self.path.display();
        if restore {
            let checked = session::read(self.path, &self.h.session_layout).map_err(refused)?;
            let n = self.h.restore_session(checked).map_err(|e| failed(format!("session '{shown}': {e}")))?;
            eprintln!("session '{shown}': restored {n} tokens");
        }
        let mut out = TextOut::new(self.tok, &prompt, &self.g.0.stop, self.g.0.json);
        let (tx, rx) = channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let req = GenRequest {
            prompt: prompt.clone(),
            params,
            max_tokens,
            stop_ids: self.stop_ids.clone(),
            ignore_eos: self.g.0.ignore_eos,
            top_logprobs: None,
            prompt_logprobs: None,
            sink: Box::new(move |e| tx.send(e).is_ok()),
            cancel: cancel.clone(),
            draft: false,
            constraint: None,
        };
        let t0 = Instant::now();
        let (mut prefill_s, mut t1) = (0.0, t0);
        let mut generated = TokenIds::new();
        if max_tokens > 0 {
            if !self.h.submit(req) {
                return Err(failed("the engine stopped"));
            }
            let mut ended = false;
            for e in rx {
                match e {
                    Event::Token(_) if ended => {}
                    Event::Token(t) => {
                        if generated.is_empty() {
                            (prefill_s, t1) = (t0.elapsed().as_secs_f64(), Instant::now());
                        }
                        generated.push_sampled(t.id);
                        ended = self.g.ends(self.eos_ids, self.stop_ids, t.id) || out.push(t.id)?;
                        cancel.store(ended, Ordering::Relaxed);
                    }
                    Event::Done { .. } => break,
                    Event::Error(m) => return Err(failed(m)),
                    Event::PromptLogprobs(_) | Event::Scheduled(_) => {}
                }
            }
        }
        let hits = self.h.stats.prefix_hit_tokens.load(Ordering::Relaxed);
        out.finish(&prompt, &generated, prefill_s, t1.elapsed().as_secs_f64())?;
        eprintln!("session '{shown}': {hits} of {} prompt tokens from the cache", prompt.len());
        self.save(prompt, &generated)
    }

    /// Saves the whole blocks of the prompt and the generated tokens.
    fn save(&self, mut ids: TokenIds, generated: &TokenIds) -> Result<(), Failure> {
        let shown = self.path.display();
        ids.extend_from(generated);
        if ids.len() < BLOCK_SIZE {
            eprintln!("session '{shown}': not saved ({} tokens fill no block of {BLOCK_SIZE})", ids.len());
            return Ok(());
        }
        let n =
            self.h.save_session(ids, self.path.to_path_buf()).map_err(|e| failed(format!("session '{shown}': {e}")))?;
        eprintln!("session '{shown}': saved {n} tokens");
        Ok(())
    }
}

/// Runs `generate --session`.
pub fn run(a: &GenerateArgs) -> Result<(), Failure> {
    dispatch_owned(&crate::tp::rank_device(&a.dev, a.tensor_parallel_size)?, "generate --session", SessionGenerate(a))
}
