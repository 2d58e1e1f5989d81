//! The CPU backend with bf16 and f16 KV pools (`--kv-cache-dtype`): every family within
//! transformers' bf16 error of its golden logits, and the four promises bit for bit as with f32
//! pools: chunked == whole, concurrent == solo (one rank, and two tensor-parallel ranks), prefix-
//! cache hits and restored sessions == fresh, n-gram drafted == undrafted.

use std::sync::Arc;
use tf_core::DType;
use tf_cpu::{CpuBackend, CpuOptions};
use tf_engine::engine::DraftKind;
use tf_models::ModelError;
use tf_models::tp::MakeBackend;
use tf_testkit::{
    all_families, check_chunked_equals_whole, check_concurrent_equals_solo, check_concurrent_equals_solo_on,
    check_drafted_equals_undrafted, check_golden_rounded, check_prefix_resumed_equals_fresh,
    check_session_restore_equals_fresh, check_session_restore_equals_fresh_on, tp_engine,
};

/// The 16-bit pool types.
const HALVES: [DType; 2] = [DType::BF16, DType::F16];

fn cpu(kv_dtype: DType) -> CpuBackend {
    CpuBackend::with_options(CpuOptions { kv_dtype, ..CpuOptions::new(2) }).unwrap()
}

/// f32 rounding's bound, as golden.rs allows the f32 pool (the bf16 slack is added per prompt).
const TOL: f32 = 1e-4;

#[test]
fn half_pools_stay_within_bf16_error_of_transformers() {
    for dtype in HALVES {
        let b = cpu(dtype);
        assert_eq!(tf_backend::Backend::kv_dtype(&b), dtype);
        for family in all_families() {
            check_golden_rounded(&b, family, &|_| TOL);
        }
    }
}

#[test]
fn half_pools_chunked_prefill_equals_whole() {
    for dtype in HALVES {
        check_chunked_equals_whole(&cpu(dtype), all_families());
    }
}

#[test]
fn half_pools_concurrent_equals_solo() {
    for dtype in HALVES {
        for family in all_families() {
            check_concurrent_equals_solo(&|| cpu(dtype), family, dtype == DType::F16);
        }
    }
}

#[test]
fn half_pools_resumed_equals_fresh() {
    for dtype in HALVES {
        for family in all_families() {
            check_prefix_resumed_equals_fresh(&|| cpu(dtype), family, dtype == DType::BF16);
            check_session_restore_equals_fresh(&|| cpu(dtype), family, Some(3));
        }
    }
}

#[test]
fn half_pools_drafted_equals_undrafted() {
    for family in all_families() {
        check_drafted_equals_undrafted(&|| cpu(DType::BF16), family, DraftKind::Ngram, None, false);
    }
    // A draft model with pools of its own, and the Gemma 4 assistant reading the target's.
    for (target, drafter) in [("qwen3", "llama"), ("gemma4", "gemma4_assistant")] {
        for dtype in HALVES {
            check_drafted_equals_undrafted(&|| cpu(dtype), target, DraftKind::Model, Some(drafter), true);
        }
    }
}

/// Two ranks as threads, each with a bf16 pool of its heads: a dense family, latent attention
/// (its latent whole on each rank) and block-sparse attention (the indexer keys in the pools).
#[test]
fn half_pools_at_two_ranks_concurrent_equals_solo_and_restore() {
    let make: MakeBackend<CpuBackend> = Arc::new(|_| {
        let o = CpuOptions { kv_dtype: DType::BF16, ..CpuOptions::new(1) };
        CpuBackend::with_options(o).map_err(|e| ModelError::Backend(tf_backend::BackendError::Device(e.to_string())))
    });
    for family in ["qwen3", "deepseek_v3", "minimax_m3"] {
        check_concurrent_equals_solo_on(&|cfg| tp_engine(&make, family, 2, cfg), family, false);
        check_session_restore_equals_fresh_on(&|cfg| tp_engine(&make, family, 2, cfg), family, None);
    }
}
