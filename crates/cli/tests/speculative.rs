//! Drafted equals undrafted on the CPU backend (the checks live in tf-testkit;
//! crates/cuda/tests/engine.rs runs them on the GPU): with the n-gram, early-exit and draft-model
//! drafters, every request's tokens and logprobs are bit-identical to the same request with
//! `draft: false`, greedy and seeded, alone and among concurrent requests, under preemption too;
//! and drafts are actually accepted.

use tf_cpu::CpuBackend;
use tf_engine::engine::{DraftConfig, DraftKind, DraftNet, EngineConfig, spawn_with_drafter};
use tf_models::Model;
use tf_testkit::{
    DRAFT_MODELS, EARLY_EXIT, FAMILIES, NGRAM_UNACCEPTED, check_drafted_equals_undrafted,
    check_self_drafting_accepts_all, config, fixture,
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
