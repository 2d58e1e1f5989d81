//! Drafted equals undrafted: with the n-gram drafter, every request's tokens and logprobs are
//! bit-identical to the same request with `draft: false`, greedy and seeded, alone and among
//! concurrent requests, under preemption too; and drafts are actually accepted.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use tf_cpu::CpuBackend;
use tf_engine::engine::{
    DraftConfig, DraftKind, EngineConfig, EngineHandle, Event, GenRequest, spawn, spawn_with_drafter,
};
use tf_engine::sampler::SamplingParams;
use tf_engine::scheduler::SchedulerConfig;
use tf_models::Model;

type Output = Vec<(u32, u32)>;

fn engine(family: &str, num_blocks: usize, kind: DraftKind) -> EngineHandle {
    let b = CpuBackend::new(2).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family);
    let m = Model::open(&dir, &b).unwrap();
    let sched = SchedulerConfig { max_num_seqs: 32, max_round_tokens: 128, prefill_chunk: 32, prefix_cache: true };
    let draft = DraftConfig { kind, num_tokens: 5 };
    spawn(m, b, EngineConfig { num_blocks, block_size: 16, sched, draft }).unwrap().0
}

/// A repetitive prompt (code-edit-like), so prompt lookup has something to find.
fn prompt(i: usize) -> Vec<i64> {
    let motif: Vec<i64> = (0..(3 + i % 5)).map(|j| ((i * 53 + j * 19) % 470) as i64).collect();
    motif.iter().cycle().take(12 + i % 17).copied().collect()
}

fn run(h: &EngineHandle, which: &[usize], seeded: bool, draft: bool) -> Vec<Output> {
    let vocab = tf_core::Vocab::new(512).unwrap();
    let rxs: Vec<_> = which
        .iter()
        .map(|&i| {
            let (tx, rx) = channel();
            let mut params = SamplingParams::default();
            if seeded {
                params.temperature = 0.7;
                params.top_k = 20;
                params.seed = 77 + i as u64;
            }
            let req = GenRequest {
                prompt: vocab.check(&prompt(i)).unwrap(),
                params,
                max_tokens: 12 + i % 9,
                stop_ids: Default::default(),
                ignore_eos: true,
                top_logprobs: Some(1),
                sink: Box::new(move |e| tx.send(e).is_ok()),
                cancel: Arc::new(AtomicBool::new(false)),
                draft,
            };
            assert!(h.submit(req));
            rx
        })
        .collect();
    rxs.into_iter()
        .map(|rx| {
            let mut out = Vec::new();
            for e in rx {
                match e {
                    Event::Token(t) => out.push((t.id, t.logprob.unwrap().to_bits())),
                    Event::Done { .. } => break,
                    Event::Error(m) => panic!("{m}"),
                }
            }
            out
        })
        .collect()
}

#[test]
fn drafted_equals_undrafted() {
    let mut accepted_total = 0;
    for family in ["gemma3", "qwen3", "llama", "qwen3_moe"] {
        for seeded in [false, true] {
            let plain = engine(family, 256, DraftKind::Off);
            let want: Vec<Output> = (0..12).map(|i| run(&plain, &[i], seeded, false).remove(0)).collect();
            let spec = engine(family, 256, DraftKind::Ngram);
            for (i, w) in want.iter().enumerate() {
                assert_eq!(&run(&spec, &[i], seeded, true)[0], w, "{family} seeded={seeded} solo {i}");
            }
            let all: Vec<usize> = (0..12).collect();
            assert_eq!(run(&spec, &all, seeded, true), want, "{family} seeded={seeded} concurrent");
            // Mixed: half the requests draft, half do not, sharing rounds.
            let mixed: Vec<Output> = all.iter().map(|&i| run(&spec, &[i], seeded, i % 2 == 0).remove(0)).collect();
            assert_eq!(mixed, want, "{family} seeded={seeded} mixed");
            // A pool too small for all at once: preemption and recompute with drafts in flight.
            let tight = engine(family, 10, DraftKind::Ngram);
            assert_eq!(run(&tight, &all, seeded, true), want, "{family} seeded={seeded} tight pool");
            accepted_total += spec.stats.draft_accepted.load(Ordering::Relaxed);
            assert!(spec.stats.draft_proposed.load(Ordering::Relaxed) > 0, "{family}: drafts were proposed");
        }
    }
    assert!(accepted_total > 0, "some drafts were accepted, so the accept path ran");
}

#[test]
fn early_exit_drafting_equals_undrafted() {
    for (family, layers) in [("gemma3", 2), ("qwen3", 1), ("qwen3_moe", 1)] {
        for seeded in [false, true] {
            let plain = engine(family, 256, DraftKind::Off);
            let all: Vec<usize> = (0..10).collect();
            let want: Vec<Output> = all.iter().map(|&i| run(&plain, &[i], seeded, false).remove(0)).collect();
            let spec = engine(family, 256, DraftKind::EarlyExit(layers));
            let solo: Vec<Output> = all.iter().map(|&i| run(&spec, &[i], seeded, true).remove(0)).collect();
            assert_eq!(solo, want, "{family} seeded={seeded} solo");
            assert_eq!(run(&spec, &all, seeded, true), want, "{family} seeded={seeded} concurrent");
            let tight = engine(family, 10, DraftKind::EarlyExit(layers));
            assert_eq!(run(&tight, &all, seeded, true), want, "{family} seeded={seeded} tight pool");
            assert!(spec.stats.draft_proposed.load(Ordering::Relaxed) > 0, "{family}: drafts were proposed");
        }
    }
}

fn with_draft_model(family: &str, drafter: &str, num_blocks: usize) -> EngineHandle {
    let b = CpuBackend::new(2).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let m = Model::open(&fixtures.join(family), &b).unwrap();
    let d = Model::open(&fixtures.join(drafter), &b).unwrap();
    let sched = SchedulerConfig { max_num_seqs: 32, max_round_tokens: 128, prefill_chunk: 32, prefix_cache: true };
    let draft = DraftConfig { kind: DraftKind::Model, num_tokens: 4 };
    spawn_with_drafter(m, Some(d), b, EngineConfig { num_blocks, block_size: 16, sched, draft }).unwrap().0
}

#[test]
fn draft_model_equals_undrafted() {
    for (family, drafter) in [("qwen3", "llama"), ("gemma3", "qwen3")] {
        for seeded in [false, true] {
            let plain = engine(family, 256, DraftKind::Off);
            let all: Vec<usize> = (0..10).collect();
            let want: Vec<Output> = all.iter().map(|&i| run(&plain, &[i], seeded, false).remove(0)).collect();
            let spec = with_draft_model(family, drafter, 256);
            let solo: Vec<Output> = all.iter().map(|&i| run(&spec, &[i], seeded, true).remove(0)).collect();
            assert_eq!(solo, want, "{family}+{drafter} seeded={seeded} solo");
            assert_eq!(run(&spec, &all, seeded, true), want, "{family}+{drafter} seeded={seeded} concurrent");
            let tight = with_draft_model(family, drafter, 10);
            assert_eq!(run(&tight, &all, seeded, true), want, "{family}+{drafter} seeded={seeded} tight");
            assert!(spec.stats.draft_proposed.load(Ordering::Relaxed) > 0);
        }
    }
    // The draft model itself as target and drafter accepts everything it proposes (greedy).
    let same = with_draft_model("qwen3", "qwen3", 256);
    let plain = engine("qwen3", 256, DraftKind::Off);
    for i in 0..4 {
        assert_eq!(run(&same, &[i], false, true), run(&plain, &[i], false, false));
    }
    let (p, a) = (same.stats.draft_proposed.load(Ordering::Relaxed), same.stats.draft_accepted.load(Ordering::Relaxed));
    assert!(p > 0 && a == p, "a model drafting for itself is always right: {a}/{p}");
}

#[test]
fn draft_model_with_another_vocabulary_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let tiny = tmp.path().join("tiny");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["synth", "--like", "tiny", "--out", tiny.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let b = CpuBackend::new(1).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let m = Model::open(&fixtures.join("qwen3"), &b).unwrap();
    let d = Model::open(&tiny, &b).unwrap();
    let sched = SchedulerConfig { max_num_seqs: 4, max_round_tokens: 64, prefill_chunk: 32, prefix_cache: true };
    let draft = DraftConfig { kind: DraftKind::Model, num_tokens: 4 };
    let err = spawn_with_drafter(m, Some(d), b, EngineConfig { num_blocks: 16, block_size: 16, sched, draft });
    assert!(err.err().unwrap().to_string().contains("vocabulary"));
}
