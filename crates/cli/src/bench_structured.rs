//! `tensorfold bench-structured`: what structured output costs. The compile time of a JSON
//! schema cold and cached, the host's mask time per token along one of its outputs, and decode
//! tokens/s at each `--batch` with the schema on against off (seeded sampling, `--gen-len`
//! tokens per sequence; the schema's list never closes before that, so both runs generate
//! the same number of tokens).

use crate::device::{OnOwnedBackend, dispatch_owned};
use crate::exit::{Failure, failed, refused};
use clap::Args;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::channel;
use std::time::Instant;
use tf_backend::Backend;
use tf_core::TokenIds;
use tf_engine::engine::{EngineConfig, EngineHandle, Event, GenRequest, spawn};
use tf_engine::sampler::SamplingParams;
use tf_engine::scheduler::SchedulerConfig;
use tf_grammar::{Compiled, Grammars, Spec};
use tf_models::Model;
use tf_server::constraint::{GrammarConstraint, compiler};

/// `bench-structured`.
#[derive(Args, Debug)]
pub struct BenchStructuredArgs {
    /// Model: a GGUF file or a Hugging Face checkpoint directory (holding config.json).
    #[arg(long)]
    pub model: PathBuf,
    /// Batch sizes, comma-separated.
    #[arg(long, default_value = "1,64")]
    pub batch: String,
    /// Tokens to generate per sequence.
    #[arg(long, default_value_t = 128, allow_negative_numbers = true, value_parser = crate::args::at_least_one)]
    pub gen_len: usize,
    /// A JSON schema file to use instead of the built-in one.
    #[arg(long)]
    pub schema: Option<PathBuf>,
    /// Write results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Device options.
    #[command(flatten)]
    pub dev: crate::args::DeviceArgs,
}

/// A list of records that cannot close before 100000 items: output of any length stays inside.
fn default_schema() -> Value {
    json!({"type": "array", "minItems": 100000, "items": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 100000},
        "name": {"type": "string", "maxLength": 24},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue", "small", "large"]}, "maxItems": 3},
        "score": {"type": "number", "minimum": -10, "maximum": 10},
        "owner": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"email": {"type": "string",
            "maxLength": 32}, "active": {"type": "boolean"}}, "required": ["email", "active"],
            "additionalProperties": false}]}},
        "required": ["id", "name", "tags", "score", "owner"], "additionalProperties": false}})
}

/// Runs `bench-structured` on the backend `--device` names.
pub fn run(a: &BenchStructuredArgs) -> Result<(), Failure> {
    dispatch_owned(&a.dev, "bench-structured", BenchStructured(a))
}

struct BenchStructured<'a>(&'a BenchStructuredArgs);

impl OnOwnedBackend for BenchStructured<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, new_backend: &dyn Fn() -> Result<B, Failure>) -> Result<(), Failure> {
        bench_on(self.0, new_backend()?)
    }
}

fn bench_on<B: Backend + 'static>(a: &BenchStructuredArgs, b: B) -> Result<(), Failure> {
    let batches: Vec<usize> = a
        .batch
        .split(',')
        .map(|s| s.trim().parse().ok().filter(|&n| n > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| refused(format!("--batch {}: expected positive integers, comma-separated", a.batch)))?;
    let schema = match &a.schema {
        Some(p) => serde_json::from_slice(&std::fs::read(p).map_err(refused)?).map_err(refused)?,
        None => default_schema(),
    };
    let m = Model::open(&a.model, &b).map_err(refused)?;
    let tok = m.tokenizer.clone().ok_or_else(|| refused("bench-structured needs a tokenizer"))?;
    let width = m.vocab.rows();
    let (grammars, eos) = compiler(&tok, width, &m.eos_ids).map_err(refused)?;
    let spec = Spec::JsonSchema(schema);
    let t = Instant::now();
    let compiled = grammars.compile(&spec).map_err(refused)?;
    let cold_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    grammars.compile(&spec).map_err(refused)?;
    let cached_ms = t.elapsed().as_secs_f64() * 1e3;
    let mask_us = mask_cost(&grammars, &compiled, a.gen_len)?;
    let prompt = tok.encode("Here are the records as JSON:\n", true).map_err(refused)?;
    let most = *batches.iter().max().unwrap_or(&1);
    let sched =
        SchedulerConfig { max_num_seqs: most, max_round_tokens: 8192, prefill_chunk: 2048, prefix_cache: false };
    let num_blocks = most * (prompt.len() + a.gen_len + 32).div_ceil(16);
    let cfg = EngineConfig { num_blocks, block_size: 16, sched, draft: Default::default(), overlap: true };
    let backend = b.name();
    let (h, thread) = spawn(m, b, cfg).map_err(refused)?;
    println!("model={} backend={backend} vocab={width} gen_len={}", a.model.display(), a.gen_len);
    println!("compile: cold {cold_ms:.1} ms, cached {cached_ms:.3} ms; mask {mask_us:.1} us/token on the host");
    println!("{:>6} {:>12} {:>12} {:>7}", "batch", "off tok/s", "on tok/s", "ratio");
    let start = |c: &Compiled| -> Box<dyn tf_engine::constraint::Constraint> {
        Box::new(GrammarConstraint::new(grammars.start(c), width, eos))
    };
    let _warm = timed(&h, &prompt, 4, 1, &|| None)?;
    let mut rows = Vec::new();
    for &n in &batches {
        let (off_tokens, off_s) = timed(&h, &prompt, a.gen_len, n, &|| None)?;
        let (on_tokens, on_s) = timed(&h, &prompt, a.gen_len, n, &|| Some(start(&compiled)))?;
        let (off, on) = (off_tokens as f64 / off_s, on_tokens as f64 / on_s);
        println!("{n:>6} {off:>12.1} {on:>12.1} {:>7.3}", on / off);
        rows.push(json!({"batch": n, "off_tok_s": off, "on_tok_s": on, "ratio": on / off,
                         "off_tokens": off_tokens, "on_tokens": on_tokens}));
    }
    h.shutdown();
    let _ = thread.join();
    if let Some(path) = &a.json {
        let doc = json!({"model": a.model, "backend": backend, "gen_len": a.gen_len, "compile_cold_ms": cold_ms,
                         "compile_cached_ms": cached_ms, "mask_us_per_token": mask_us, "results": rows});
        std::fs::write(path, doc.to_string()).map_err(failed)?;
    }
    Ok(())
}

/// Mean microseconds of one mask along a walk of `len` tokens (each step the allowed id in the
/// middle of the allowed set).
fn mask_cost(g: &Grammars, c: &Compiled, len: usize) -> Result<f64, Failure> {
    let mut m = g.start(c);
    let (mut total, mut steps) = (0.0, 0);
    for _ in 0..len {
        let t = Instant::now();
        let words = m.mask().map_err(failed)?;
        total += t.elapsed().as_secs_f64();
        steps += 1;
        let ids: Vec<u32> =
            (0..words.len() as u32 * 32).filter(|&i| words[i as usize / 32] >> (i % 32) & 1 == 1).collect();
        if ids.is_empty() || !m.accept(ids[ids.len() / 2]) || m.is_stopped() {
            break;
        }
    }
    Ok(total / steps.max(1) as f64 * 1e6)
}

/// Runs `n` seeded sequences of `max_tokens` at once (each with `constraint()`); returns the
/// tokens generated and the seconds from submitting to the last one's end.
fn timed(
    h: &EngineHandle,
    prompt: &TokenIds,
    max_tokens: usize,
    n: usize,
    constraint: &dyn Fn() -> Option<Box<dyn tf_engine::constraint::Constraint>>,
) -> Result<(usize, f64), Failure> {
    let t = Instant::now();
    let mut rxs = Vec::with_capacity(n);
    for i in 0..n {
        let (tx, rx) = channel();
        let params = SamplingParams { temperature: 1.0, seed: 1 + i as u64, ..SamplingParams::default() };
        let req = GenRequest {
            prompt: prompt.clone(),
            params,
            max_tokens,
            stop_ids: TokenIds::new(),
            ignore_eos: true,
            top_logprobs: None,
            prompt_logprobs: None,
            sink: Box::new(move |e| tx.send(e).is_ok()),
            cancel: Arc::new(AtomicBool::new(false)),
            draft: false,
            constraint: constraint(),
        };
        if !h.submit(req) {
            return Err(failed("the engine stopped"));
        }
        rxs.push(rx);
    }
    let mut tokens = 0;
    for rx in rxs {
        for e in rx {
            match e {
                Event::Token(_) => tokens += 1,
                Event::Done { .. } => break,
                Event::Error(m) => return Err(failed(m)),
                Event::PromptLogprobs(_) | Event::Scheduled(_) => {}
            }
        }
    }
    Ok((tokens, t.elapsed().as_secs_f64()))
}
