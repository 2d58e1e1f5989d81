//! `tensorfold bench-prefix`: a multi-turn chat over a long shared system prompt, where each turn
//! resends the whole conversation plus a new user message, run once on an engine with the prefix
//! cache and once on a fresh engine without it; prints time to first token per turn for both,
//! the means and their ratio, the cache's hit rate, and whether the answers are identical.

use crate::args::BenchPrefixArgs;
use crate::device::{OnOwnedBackend, dispatch_owned, threads};
use crate::exit::{Failure, failed, refused};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::channel;
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

/// A conversation's turns, answers, and prefix-cache hit rate.
type Talk = (Vec<Turn>, Vec<Vec<u32>>, f64);

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
        sink: Box::new(move |e| tx.send(e).is_ok()),
        cancel: Arc::new(AtomicBool::new(false)),
        draft: false,
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
        }
    }
    Ok((ids, ttft))
}

struct BenchPrefix<'a>(&'a BenchPrefixArgs);

impl BenchPrefix<'_> {
    /// The whole conversation on a fresh engine, with or without the prefix cache.
    fn conversation<B: Backend + 'static>(&self, b: B, cache: bool) -> Result<Talk, Failure> {
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
        let cfg = EngineConfig { num_blocks, block_size: BLOCK_SIZE, sched, draft: Default::default() };
        let system = filler(tok.as_ref(), vocab, SYSTEM_TEXT, true, 0, a.system_len)?;
        let warm = filler(tok.as_ref(), vocab, USER_TEXT, false, a.turns + 1, 32)?;
        let (h, thread) = spawn(m, b, cfg).map_err(refused)?;
        let result = ask(&h, vocab.check_u32(&warm).map_err(refused)?, 2)
            .and_then(|_| self.talk(&h, tok.as_ref(), vocab, system));
        h.shutdown();
        let _ = thread.join();
        result
    }

    /// The turns over `history` (the system prompt) on a warm engine.
    fn talk(
        &self,
        h: &EngineHandle,
        tok: Option<&Tokenizer>,
        vocab: Vocab,
        mut history: Vec<u32>,
    ) -> Result<Talk, Failure> {
        let a = self.0;
        let stats = &h.stats;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let (hits0, queries0) = (load(&stats.prefix_hit_tokens), load(&stats.prefix_query_tokens));
        let (mut turns, mut answers) = (Vec::new(), Vec::new());
        for t in 0..a.turns {
            history.extend(filler(tok, vocab, USER_TEXT, false, t + 1, a.turn_len)?);
            let before = load(&stats.prefix_hit_tokens);
            let (answer, ttft_s) = ask(h, vocab.check_u32(&history).map_err(refused)?, a.gen_len)?;
            let cached_tokens = load(&stats.prefix_hit_tokens) - before;
            turns.push(Turn { prompt_tokens: history.len(), cached_tokens, ttft_s });
            history.extend_from_slice(&answer);
            answers.push(answer);
        }
        let hits = load(&stats.prefix_hit_tokens) - hits0;
        let queries = load(&stats.prefix_query_tokens) - queries0;
        Ok((turns, answers, hits as f64 / queries.max(1) as f64))
    }
}

fn mean_ms(turns: &[Turn]) -> f64 {
    1e3 * turns.iter().fold(0.0, |sum, t| sum + t.ttft_s) / turns.len().max(1) as f64
}

impl OnOwnedBackend for BenchPrefix<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, new_backend: &dyn Fn() -> Result<B, Failure>) -> Result<(), Failure> {
        let a = self.0;
        let (off, off_answers, _) = self.conversation(new_backend()?, false)?;
        let (on, on_answers, hit_rate) = self.conversation(new_backend()?, true)?;
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
        println!(
            "{:>5} {:>8} {:>8} {:>13} {:>13} {:>8}",
            "turn", "prompt", "cached", "off TTFT ms", "on TTFT ms", "ratio"
        );
        let mut rows = Vec::new();
        for (i, (f, n)) in off.iter().zip(&on).enumerate() {
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
        let (off_ms, on_ms) = (mean_ms(&off), mean_ms(&on));
        let ratio = off_ms / on_ms.max(1e-9);
        let identical = off_answers == on_answers;
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
        if !identical {
            return Err(failed("answers with the prefix cache differ from answers without it (a bug)"));
        }
        Ok(())
    }
}

/// Runs `bench-prefix`.
pub fn run(a: &BenchPrefixArgs) -> Result<(), Failure> {
    dispatch_owned(&a.dev, "bench-prefix", BenchPrefix(a))
}
