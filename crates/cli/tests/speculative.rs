//! Drafted equals undrafted on the CPU backend (the checks live in tf-testkit;
//! crates/cuda/tests/engine.rs runs them on the GPU): with the n-gram, early-exit and draft-model
//! drafters, every request's tokens and logprobs are bit-identical to the same request with
//! `draft: false`, greedy and seeded, alone and among concurrent requests, under preemption too;
//! and drafts are actually accepted, also where the draft model reads a shared prefix from its
//! own prefix cache.

use std::sync::atomic::Ordering;
use tf_cpu::CpuBackend;
use tf_engine::engine::{DraftConfig, DraftKind, DraftNet, EngineConfig, spawn_with_drafter};
use tf_models::Model;
use tf_testkit::{
    DRAFT_MODELS, EARLY_EXIT, FAMILIES, NGRAM_UNACCEPTED, Req, check_drafted_equals_undrafted,
    check_self_drafting_accepts_all, config, engine, engine_with_drafter, fixture, run, sampling,
};

fn cpu() -> CpuBackend {
    CpuBackend::new(2).unwrap()
}

#[test]
fn drafted_equals_undrafted() {
    let mut accepted = 0;
    for family in FAMILIES {
        for seeded in [false, true] {
            accepted += check_drafted_equals_undrafted(&cpu, family, DraftKind::Ngram, None, seeded).accepted;
        }
    }
    assert!(accepted > 0, "some drafts were accepted, so the accept path ran");
}

#[test]
fn early_exit_drafting_equals_undrafted() {
    for (family, layers) in EARLY_EXIT {
        for seeded in [false, true] {
            check_drafted_equals_undrafted(&cpu, family, DraftKind::EarlyExit(layers), None, seeded);
        }
    }
}

#[test]
fn draft_model_equals_undrafted() {
    for (family, drafter) in DRAFT_MODELS {
        for seeded in [false, true] {
            check_drafted_equals_undrafted(&cpu, family, DraftKind::Model, Some(drafter), seeded);
        }
    }
    check_self_drafting_accepts_all(&cpu, "qwen3");
    for family in NGRAM_UNACCEPTED {
        check_self_drafting_accepts_all(&cpu, family);
    }
}

#[test]
fn draft_model_reads_a_shared_prefix_from_its_own_cache() {
    let cfg =
        EngineConfig { draft: DraftConfig { kind: DraftKind::Model, num_tokens: 4 }, ..config(256, 128, 32, true) };
    let req = |tail: i64| {
        let mut prompt: Vec<i64> = (0..64).map(|j| (j * 37 + 11) % 400).collect();
        prompt.extend([tail, tail + 3, tail + 7]);
        Req { prompt, params: sampling(None, 0.0, 0, 1.0), max_tokens: 16, top_logprobs: None, draft: true }
    };
    let want = run(&engine(&cpu, "qwen3", config(256, 128, 32, true)), &[req(9)]);
    // qwen3 drafting for itself: every draft is accepted only if the K/V it read are its own.
    let same = engine_with_drafter(&cpu, "qwen3", Some("qwen3"), cfg);
    run(&same, &[req(5)]);
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let before = (load(&same.stats.draft_proposed), load(&same.stats.draft_accepted));
    assert_eq!(run(&same, &[req(9)]), want);
    assert_eq!(load(&same.stats.draft_cached_tokens), 64, "the draft model took the four prefix blocks");
    let (proposed, accepted) =
        (load(&same.stats.draft_proposed) - before.0, load(&same.stats.draft_accepted) - before.1);
    assert!(proposed > 0 && accepted == proposed, "{accepted} of {proposed} drafts accepted after the hit");
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
    let m = Model::open(&fixture("qwen3"), &b).unwrap();
    let d = Model::open(&tiny, &b).unwrap();
    let cfg = EngineConfig { draft: DraftConfig { kind: DraftKind::Model, num_tokens: 4 }, ..config(16, 64, 32, true) };
    let err = spawn_with_drafter(m, Some(DraftNet::Model(Box::new(d))), b, cfg);
    assert!(err.err().unwrap().to_string().contains("vocabulary"));
}
