//! `tensorfold bench-prefix`: a multi-turn chat over a long shared system prompt, where each turn
//! resends the whole conversation plus a new user message, run on two fresh engines, one with the
//! prefix cache and one without, turn by turn in alternation; prints time to first token per turn
//! for both, the means and their ratio, the cache's hit rate, and whether the answers are identical.

use crate::args::BenchPrefixArgs;
use crate::device::{OnOwnedBackend, dispatch_owned, threads};
use crate::exit::{Failure, failed, refused};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::channel;
use std::thread::JoinHandle;
use std::time::Instant;
use tf_backend::Backend;
use tf_core::{TokenIds, Vocab};
use tf_engine::engine::{EngineConfig, EngineHandle, Event, GenRequest, spawn};
use tf_engine::sampler::SamplingParams;
use tf_engine::scheduler::SchedulerConfig;
use tf_models::Model;
use tf_tokenize::Tokenizer;

const SYSTEM_TEXT: &str = "You are a careful assistant for a team that maintains a large codebase. Answer in plain \
    English, cite the file and function you mean, prefer small changes over rewrites, say when you are unsure, and \
    keep every answer short enough to read in a minute. ";
const USER_TEXT: &str = "Here is the next question about the build, the tests and the release steps we discussed. ";
const BLOCK_SIZE: usize = 16;

/// One turn as measured: prompt tokens, tokens served from the cache, time to first token.
#[derive(Debug, Clone, Copy)]
struct Turn {
    prompt_tokens: usize,
    cached_tokens: u64,
    ttft_s: f64,
}

/// `len` tokens: BOS (when `bos` and the tokenizer adds one), then `text` marked with `salt`,
/// repeated; a fixed id pattern instead when the model has no tokenizer.
fn filler(
    tok: Option<&Tokenizer>,
    vocab: Vocab,
    text: &str,
    bos: bool,
    salt: usize,
    len: usize,
) -> Result<Vec<u32>, Failure> {
    let piece: Vec<u32> = match tok {
        Some(t) => t.encode(&format!("({salt}) {text}"), false).map_err(refused)?.as_slice().to_vec(),
        None => (0..7 * BLOCK_SIZE).map(|i| ((i * 7919 + salt * 104_729) % vocab.rows()) as u32).collect(),
    };
    if piece.is_empty() {
        return Err(refused("the tokenizer made no tokens of the bench text"));
    }
    let mut ids = match (tok, bos) {
        (Some(t), true) => t.encode("", true).map_err(refused)?.as_slice().to_vec(),
        _ => Vec::new(),
    };
    while ids.len() < len {
        ids.extend_from_slice(&piece);
    }
    ids.truncate(len);
    Ok(ids)
}

/// Greedy `gen_len` tokens of `prompt`: the ids and the seconds from submit to the first token.
fn ask(h: &EngineHandle, prompt: TokenIds, gen_len: usize) -> Result<(Vec<u32>, f64), Failure> {
    let (tx, rx) = channel();
    let req = GenRequest {
        prompt,
        params: SamplingParams::default(),
        max_tokens: gen_len,
        stop_ids: TokenIds::new(),
        ignore_eos: true,
        top_logprobs: None,
        prompt_logprobs: None,
        sink: Box::new(move |e| tx.send(e).is_ok()),
        cancel: Arc::new(AtomicBool::new(false)),
        draft: false,
        constraint: None,
    };
    let t = Instant::now();
    if !h.submit(req) {
        return Err(failed("the engine stopped"));
    }
    let (mut ids, mut ttft) = (Vec::new(), 0.0);
    for e in rx {
        match e {
            Event::Token(tok) => {
                if ids.is_empty() {
                    ttft = t.elapsed().as_secs_f64();
                }
                ids.push(tok.id);
            }
            Event::Done { .. } => break,
            Event::Error(m) => return Err(failed(m)),
            Event::PromptLogprobs(_) | Event::Scheduled(_) => {}
        }
    }
    Ok((ids, ttft))
}

/// One side of the comparison: an engine (prefix cache on or off) and its conversation so far.
struct Side {
    h: EngineHandle,
    thread: JoinHandle<()>,
    tok: Option<Tokenizer>,
    vocab: Vocab,
    history: Vec<u32>,
    turns: Vec<Turn>,
    answers: Vec<Vec<u32>>,
    /// Prefix-cache hits and queries after the warm-up.
    base: (u64, u64),
}

fn load(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

impl Side {
    /// The hit rate of the turns so far.
    fn hit_rate(&self) -> f64 {
        let s = &self.h.stats;
        let (hits, queries) = (load(&s.prefix_hit_tokens) - self.base.0, load(&s.prefix_query_tokens) - self.base.1);
        hits as f64 / queries.max(1) as f64
    }

    fn stop(self) {
        self.h.shutdown();
        let _ = self.thread.join();
    }
}

struct BenchPrefix<'a>(&'a BenchPrefixArgs);

impl BenchPrefix<'_> {
    /// A fresh engine with or without the prefix cache, warmed up on an unrelated prompt.
    fn start<B: Backend + 'static>(&self, b: B, cache: bool) -> Result<Side, Failure> {
        let a = self.0;
        let m = Model::open(&a.model, &b).map_err(refused)?;
        let (tok, vocab) = (m.tokenizer.clone(), m.vocab);
        let total = a.system_len + a.turns * (a.turn_len + a.gen_len);
        let ctx = m.decoder.spec.max_position_embeddings;
        if total > ctx || a.system_len + a.turn_len == 0 || a.turns == 0 || a.gen_len == 0 {
            return Err(refused(format!(
                "the conversation ({total} tokens) must be non-empty and fit the context ({ctx})"
            )));
        }
        let chunk = a.chunk.max(1);
        let sched =
            SchedulerConfig { max_num_seqs: 1, max_round_tokens: chunk, prefill_chunk: chunk, prefix_cache: cache };
        let num_blocks = total.div_ceil(BLOCK_SIZE) + 2;
        let cfg = EngineConfig { num_blocks, block_size: BLOCK_SIZE, sched, draft: Default::default(), overlap: true };
        let history = filler(tok.as_ref(), vocab, SYSTEM_TEXT, true, 0, a.system_len)?;
        let warm = filler(tok.as_ref(), vocab, USER_TEXT, false, a.turns + 1, 32)?;
        let (h, thread) = spawn(m, b, cfg).map_err(refused)?;
        let mut side = Side { h, thread, tok, vocab, history, turns: Vec::new(), answers: Vec::new(), base: (0, 0) };
        if let Err(e) = vocab.check_u32(&warm).map_err(refused).and_then(|w| ask(&side.h, w, 2)) {
            side.stop();
            return Err(e);
        }
        let s = &side.h.stats;
        side.base = (load(&s.prefix_hit_tokens), load(&s.prefix_query_tokens));
        Ok(side)
    }

    /// Turn `t` (from 0): a new user message after the conversation so far, and the answer.
    fn turn(&self, side: &mut Side, t: usize) -> Result<(), Failure> {
        let a = self.0;
        side.history.extend(filler(side.tok.as_ref(), side.vocab, USER_TEXT, false, t + 1, a.turn_len)?);
        let before = load(&side.h.stats.prefix_hit_tokens);
        let prompt = side.vocab.check_u32(&side.history).map_err(refused)?;
        let (answer, ttft_s) = ask(&side.h, prompt, a.gen_len)?;
        let cached_tokens = load(&side.h.stats.prefix_hit_tokens) - before;
        side.turns.push(Turn { prompt_tokens: side.history.len(), cached_tokens, ttft_s });
        side.history.extend_from_slice(&answer);
        side.answers.push(answer);
        Ok(())
    }

    /// The conversation on both sides, turn by turn (off then on), so load changes hit both alike.
    fn talk(&self, off: &mut Side, on: &mut Side) -> Result<(), Failure> {
        for t in 0..self.0.turns {
            self.turn(off, t)?;
            self.turn(on, t)?;
        }
        Ok(())
    }
}

fn mean_ms(turns: &[Turn]) -> f64 {
    1e3 * turns.iter().fold(0.0, |sum, t| sum + t.ttft_s) / turns.len().max(1) as f64
}

impl OnOwnedBackend for BenchPrefix<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, new_backend: &dyn Fn() -> Result<B, Failure>) -> Result<(), Failure> {
        let a = self.0;
        let mut off = self.start(new_backend()?, false)?;
        let mut on = match new_backend().and_then(|b| self.start(b, true)) {
            Ok(on) => on,
            Err(e) => {
                off.stop();
                return Err(e);
            }
        };
        let talked = self.talk(&mut off, &mut on);
        let (hit_rate, identical) = (on.hit_rate(), off.answers == on.answers);
        let (off_turns, on_turns) = (std::mem::take(&mut off.turns), std::mem::take(&mut on.turns));
        off.stop();
        on.stop();
        talked?;
        report(a, &off_turns, &on_turns, hit_rate, identical)?;
        if !identical {
            return Err(failed("answers with the prefix cache differ from answers without it (a bug)"));
        }
        Ok(())
    }
}

/// Prints the table and the summary, and writes `--json`.
fn report(a: &BenchPrefixArgs, off: &[Turn], on: &[Turn], hit_rate: f64, identical: bool) -> Result<(), Failure> {
    println!(
        "model={} threads={} system={} turns={} turn={} gen={} chunk={}",
        a.model.display(),
        threads(&a.dev),
        a.system_len,
        a.turns,
        a.turn_len,
        a.gen_len,
        a.chunk
    );
    println!("{:>5} {:>8} {:>8} {:>13} {:>13} {:>8}", "turn", "prompt", "cached", "off TTFT ms", "on TTFT ms", "ratio");
    let mut rows = Vec::new();
    for (i, (f, n)) in off.iter().zip(on).enumerate() {
        let (off_ms, on_ms) = (f.ttft_s * 1e3, n.ttft_s * 1e3);
        let ratio = off_ms / on_ms.max(1e-9);
        println!(
            "{:>5} {:>8} {:>8} {off_ms:>13.1} {on_ms:>13.1} {ratio:>8.2}",
            i + 1,
            n.prompt_tokens,
            n.cached_tokens
        );
        rows.push(json!({"turn": i + 1, "prompt_tokens": n.prompt_tokens, "cached_tokens": n.cached_tokens,
            "off_ttft_ms": off_ms, "on_ttft_ms": on_ms}));
    }
    let (off_ms, on_ms) = (mean_ms(off), mean_ms(on));
    let ratio = off_ms / on_ms.max(1e-9);
    println!("mean TTFT: off {off_ms:.1} ms, on {on_ms:.1} ms, ratio {ratio:.2}");
    // Turns after the first, where the conversation so far can be cached.
    let (later_off, later_on) = (mean_ms(off.get(1..).unwrap_or(&[])), mean_ms(on.get(1..).unwrap_or(&[])));
    let later_ratio = later_off / later_on.max(1e-9);
    if a.turns > 1 {
        println!("mean TTFT of turns 2+: off {later_off:.1} ms, on {later_on:.1} ms, ratio {later_ratio:.2}");
    }
    println!("prefix cache hit rate: {:.1}% of prompt tokens", 100.0 * hit_rate);
    println!("answers identical with and without the cache: {identical}");
    if let Some(path) = &a.json {
        let doc = json!({"model": a.model, "threads": threads(&a.dev), "system_len": a.system_len,
            "turns": a.turns, "turn_len": a.turn_len, "gen_len": a.gen_len, "chunk": a.chunk, "per_turn": rows,
            "mean_off_ttft_ms": off_ms, "mean_on_ttft_ms": on_ms, "ratio": ratio, "later_mean_off_ttft_ms": later_off,
            "later_mean_on_ttft_ms": later_on, "later_ratio": later_ratio, "hit_rate": hit_rate,
            "identical": identical});
        std::fs::write(path, doc.to_string()).map_err(failed)?;
    }
    Ok(())
}

/// Runs `bench-prefix`.
pub fn run(a: &BenchPrefixArgs) -> Result<(), Failure> {
    dispatch_owned(&a.dev, "bench-prefix", BenchPrefix(a))
}
