//! The engine's exactness checks over the families with recurrent layers (tf_testkit::HYBRIDS)
//! on the CPU backend, as engine_exact.rs, speculative.rs and sessions.rs run them over the
//! others (crates/cuda/tests/engine.rs runs them on the GPU): concurrent == solo (prefills split
//! at 5, 7 and 512 tokens, under preemption too), prefix-cache hits (from state snapshots) ==
//! cold, a restored session == fresh after a restart, overlapped == waited, and drafted ==
//! undrafted for n-gram, early-exit and draft-model drafting, greedy and seeded.

use tf_cpu::CpuBackend;
use tf_engine::engine::DraftKind;
use tf_testkit::{
    HYBRIDS, check_concurrent_equals_solo, check_drafted_equals_undrafted, check_overlapped_equals_waited,
    check_prefix_resumed_equals_fresh, check_self_drafting_accepts_all, check_session_restore_equals_fresh,
};

fn cpu() -> CpuBackend {
    CpuBackend::new(2).unwrap()
}

#[test]
fn hybrid_concurrent_equals_solo() {
    for family in HYBRIDS {
        for seeded in [false, true] {
            check_concurrent_equals_solo(&cpu, family, seeded);
        }
    }
}

#[test]
fn hybrid_prefix_cache_hits_equal_fresh_prefill() {
    for family in HYBRIDS {
        for seeded in [false, true] {
            check_prefix_resumed_equals_fresh(&cpu, family, seeded);
        }
    }
}

#[test]
fn hybrid_restored_session_equals_fresh_after_restart() {
    for family in HYBRIDS {
        for seed in [None, Some(5)] {
            check_session_restore_equals_fresh(&cpu, family, seed);
        }
    }
}

#[test]
fn hybrid_overlapped_rounds_equal_waited_rounds() {
    for family in HYBRIDS {
        check_overlapped_equals_waited(&cpu, family);
    }
}

/// Drafts rejected at their first token (the state put back, nothing accepted), partly
/// accepted (put back, the accepted tokens fed again) and wholly accepted (kept) all occur.
#[test]
fn hybrid_ngram_drafted_equals_undrafted() {
    for family in HYBRIDS {
        for seeded in [false, true] {
            let c = check_drafted_equals_undrafted(&cpu, family, DraftKind::Ngram, None, seeded);
            eprintln!("{family} ngram seeded={seeded}: {} of {} accepted", c.accepted, c.proposed);
        }
    }
}

/// Early exit after the first layer, which advances that layer's state on the draft tokens.
#[test]
fn hybrid_early_exit_drafted_equals_undrafted() {
    for family in HYBRIDS {
        for seeded in [false, true] {
            let c = check_drafted_equals_undrafted(&cpu, family, DraftKind::EarlyExit(1), None, seeded);
            eprintln!("{family} early exit seeded={seeded}: {} of {} accepted", c.accepted, c.proposed);
        }
    }
}

/// A hybrid drafting for itself (its own state slots for the draft model) has every draft
/// accepted, so the verify round's state is kept whole.
#[test]
fn hybrid_self_drafting_accepts_all() {
    for family in HYBRIDS {
        check_self_drafting_accepts_all(&cpu, family);
    }
}

/// A hybrid target with a transformer draft model, and a transformer target with a hybrid one.
#[test]
fn hybrid_draft_model_equals_undrafted() {
    for family in HYBRIDS {
        for (target, drafter) in [(*family, "qwen3"), ("qwen3", *family)] {
            for seeded in [false, true] {
                check_drafted_equals_undrafted(&cpu, target, DraftKind::Model, Some(drafter), seeded);
            }
        }
    }
}
