//! Concurrent equals solo and prefix-cache resumed equals fresh, on the CPU backend through the
//! real engine thread (the checks live in tf-testkit; crates/cuda/tests/engine.rs runs them on
//! the GPU): a request's tokens and logprobs are bit-identical alone and among 1, 4 and 16
//! others, with or without the prefix cache, chunked, and under preemption.

use tf_cpu::CpuBackend;
use tf_testkit::{
    FAMILIES, check_concurrent_equals_solo, check_logprobs_are_the_raw_rows, check_overlapped_equals_waited,
    check_prefix_resumed_equals_fresh,
};

fn cpu() -> CpuBackend {
    CpuBackend::new(2).unwrap()
}

#[test]
fn concurrent_equals_solo_greedy() {
    for family in FAMILIES {
        check_concurrent_equals_solo(&cpu, family, false);
    }
}

#[test]
fn concurrent_equals_solo_seeded() {
    for family in FAMILIES {
        check_concurrent_equals_solo(&cpu, family, true);
    }
}

/// Biased, penalised, greedy and seeded tokens report the raw rows' logprobs, alone or batched.
#[test]
fn logprobs_are_the_raw_rows() {
    for family in FAMILIES {
        check_logprobs_are_the_raw_rows(&cpu, family);
    }
}

/// Prompts sharing cached prefixes (block-aligned and not) equal a cache-less engine's output.
#[test]
fn prefix_cache_hits_equal_fresh_prefill() {
    for family in FAMILIES {
        for seeded in [false, true] {
            check_prefix_resumed_equals_fresh(&cpu, family, seeded);
        }
    }
}

/// Rounds queued before the previous round's tokens are reported (greedy and sampled) give the same tokens.
#[test]
fn overlapped_rounds_equal_waited_rounds() {
    for family in FAMILIES {
        check_overlapped_equals_waited(&cpu, family);
    }
}
