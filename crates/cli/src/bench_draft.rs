//! `tensorfold bench-draft`: one repetitive task (rewrite a code block with one change) and one
//! free-running prompt, each generated greedily with drafting off and on through the engine;
//! prints tokens/s for both, their ratio, the acceptance rate and the mean accepted length, and
//! checks that both runs produced the same tokens.

use crate::args::BenchDraftArgs;
use crate::device::{OnOwnedBackend, dispatch_owned};
use crate::exit::{Failure, failed, refused};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::time::Instant;
use tf_backend::Backend;
use tf_core::TokenIds;
use tf_engine::engine::{
    DraftConfig, DraftKind, DraftNet, EngineConfig, EngineHandle, Event, GenRequest, spawn_with_drafter,
};
use tf_engine::sampler::SamplingParams;
use tf_engine::scheduler::SchedulerConfig;
use tf_models::Model;

const CODE_TASK: &str = "Rewrite the function with the loop counting down instead of up.\n\n```python\ndef total(values):\n    result = 0\n    for i in range(len(values)):\n        result += values[i] * weights[i]\n    return result\n```\n\nRewritten:\n\n```python\ndef total(values):\n    result = 0\n    for i in range(";
const FREE_TASK: &str = "Once upon a time, in a small village by the sea, there lived";

fn kind(s: &str) -> Result<DraftKind, Failure> {
    match (s, s.strip_prefix("early-exit:").and_then(|n| n.parse().ok())) {
        ("ngram", _) => Ok(DraftKind::Ngram),
        ("mtp", _) => Ok(DraftKind::Mtp),
        (_, Some(n)) => Ok(DraftKind::EarlyExit(n)),
        _ if s.starts_with("model:") => Ok(DraftKind::Model),
        _ => Err(refused(format!("--draft {s}: expected ngram, mtp, early-exit:N or model:DIR"))),
    }
}

/// Generates `max_tokens` greedily; returns the ids and the seconds from submit to done.
fn timed(h: &EngineHandle, prompt: &TokenIds, max_tokens: usize, draft: bool) -> Result<(Vec<u32>, f64), Failure> {
    let (tx, rx) = channel();
    let req = GenRequest {
        prompt: prompt.clone(),
        params: SamplingParams::default(),
        max_tokens,
        stop_ids: TokenIds::new(),
        ignore_eos: true,
        top_logprobs: None,
        prompt_logprobs: None,
        sink: Box::new(move |e| tx.send(e).is_ok()),
        cancel: Arc::new(AtomicBool::new(false)),
        draft,
        constraint: None,
    };
    let t = Instant::now();
    if !h.submit(req) {
        return Err(failed("the engine stopped"));
    }
    let mut ids = Vec::new();
    for e in rx {
        match e {
            Event::Token(tok) => ids.push(tok.id),
            Event::Done { .. } => break,
            Event::Error(m) => return Err(failed(m)),
            Event::PromptLogprobs(_) | Event::Scheduled(_) => {}
        }
    }
    Ok((ids, t.elapsed().as_secs_f64()))
}

/// Runs the tasks on backend `b` (owned: the engine thread takes it).
fn bench_on<B: Backend + 'static>(a: &BenchDraftArgs, b: B) -> Result<(), Failure> {
    {
        let draft = DraftConfig { kind: kind(&a.draft)?, num_tokens: a.num_draft_tokens.max(1) };
        let m = Model::open(&a.model, &b).map_err(refused)?;
        let dm = match a.draft.strip_prefix("model:") {
            Some(d) => Some(DraftNet::open(Path::new(d), &m, &b).map_err(refused)?),
            None => None,
        };
        let tok = m.tokenizer.clone().ok_or_else(|| refused("bench-draft needs a tokenizer"))?;
        let prompts = [("code-edit", CODE_TASK), ("free", FREE_TASK)]
            .map(|(name, text)| tok.encode(text, true).map(|ids| (name, ids)).map_err(refused));
        let sched =
            SchedulerConfig { max_num_seqs: 4, max_round_tokens: 2048, prefill_chunk: 2048, prefix_cache: false };
        let num_blocks = (4096 + a.gen_len * 2).div_ceil(16);
        let cfg = EngineConfig { num_blocks, block_size: 16, sched, draft, overlap: true };
        // One engine; tasks run one at a time, drafting off then on.
        let backend = b.name();
        let (h, thread) = spawn_with_drafter(m, dm, b, cfg).map_err(refused)?;
        println!("model={} draft={} k={} backend={backend}", a.model.display(), a.draft, draft.num_tokens);
        println!(
            "{:>10} {:>12} {:>12} {:>7} {:>10} {:>12}",
            "task", "off tok/s", "on tok/s", "ratio", "accept", "mean accept"
        );
        let mut results = Vec::new();
        for p in prompts {
            let (name, prompt) = p?;
            let _warm = timed(&h, &prompt, 4, false)?;
            let (plain, t_off) = timed(&h, &prompt, a.gen_len, false)?;
            let s = &h.stats;
            let (p0, a0, v0) = (
                s.draft_proposed.load(Ordering::Relaxed),
                s.draft_accepted.load(Ordering::Relaxed),
                s.draft_verifies.load(Ordering::Relaxed),
            );
            let (drafted, t_on) = timed(&h, &prompt, a.gen_len, true)?;
            let proposed = s.draft_proposed.load(Ordering::Relaxed) - p0;
            let accepted = s.draft_accepted.load(Ordering::Relaxed) - a0;
            let verifies = (s.draft_verifies.load(Ordering::Relaxed) - v0).max(1);
            if plain != drafted {
                return Err(failed(format!("{name}: drafted output differs from undrafted (a bug)")));
            }
            let (off, on) = (plain.len() as f64 / t_off, drafted.len() as f64 / t_on);
            let rate = accepted as f64 / proposed.max(1) as f64;
            let mean = 1.0 + accepted as f64 / verifies as f64;
            println!("{name:>10} {off:>12.2} {on:>12.2} {:>7.2} {rate:>10.2} {mean:>12.2}", on / off);
            results.push(json!({"task": name, "prompt_tokens": prompt.len(), "gen_len": a.gen_len,
                "off_tok_s": off, "on_tok_s": on, "ratio": on / off, "acceptance_rate": rate,
                "mean_accepted_length": mean, "identical": true}));
        }
        h.shutdown();
        let _ = thread.join();
        if let Some(path) = &a.json {
            let doc =
                json!({"model": a.model, "draft": a.draft, "num_draft_tokens": draft.num_tokens, "results": results});
            std::fs::write(path, doc.to_string()).map_err(failed)?;
        }
        Ok(())
    }
}

/// Runs `bench-draft` on the backend `--device` names.
pub fn run(a: &BenchDraftArgs) -> Result<(), Failure> {
    dispatch_owned(&a.dev, "bench-draft", BenchDraft(a))
}

/// `bench-draft`'s body over whichever backend `--device` names.
struct BenchDraft<'a>(&'a BenchDraftArgs);

impl OnOwnedBackend for BenchDraft<'_> {
    type Out = ();
    fn run<B: Backend + 'static>(self, new_backend: &dyn Fn() -> Result<B, Failure>) -> Result<(), Failure> {
        bench_on(self.0, new_backend()?)
    }
}
