//! The CPU backend with q8_0 and q4_0 KV pools (`--kv-cache-dtype`, ggml's blocks of 32 values
//! as llama.cpp's and Ollama's quantized caches keep them): every family whose heads are whole
//! blocks within a stated error of its golden logits, the others refused at start by name, and
//! the four promises bit for bit as with f32 pools: chunked == whole, concurrent == solo (one
//! rank, and two tensor-parallel ranks), prefix-cache hits and restored sessions == fresh,
//! drafted == undrafted.

use std::sync::Arc;
use tf_core::{DType, QuantType};
use tf_cpu::{CpuBackend, CpuOptions};
use tf_engine::Runner;
use tf_engine::engine::DraftKind;
use tf_models::tp::MakeBackend;
use tf_models::{Model, ModelError};
use tf_testkit::{
    all_families, check_chunked_equals_whole, check_concurrent_equals_solo, check_concurrent_equals_solo_on,
    check_drafted_equals_undrafted, check_golden_rounded, check_prefix_resumed_equals_fresh,
    check_session_restore_equals_fresh, check_session_restore_equals_fresh_on, fixture, tp_engine,
};

/// The quantized pool types.
const QUANTS: [DType; 2] = [DType::Quant(QuantType::Q8_0), DType::Quant(QuantType::Q4_0)];

fn cpu(kv_dtype: DType) -> CpuBackend {
    CpuBackend::with_options(CpuOptions { kv_dtype, ..CpuOptions::new(2) }).unwrap()
}

/// The families whose every KV pool has heads of whole blocks; every other family's pools are
/// refused by name (checked here, so no family drops out unseen).
fn families(dtype: DType) -> Vec<&'static str> {
    let b = cpu(dtype);
    let mut kept = Vec::new();
    let refused = |msg: String| {
        assert!(msg.contains(&format!("a {dtype} KV cache needs heads of a multiple of 32 values")), "{msg}");
    };
    for family in all_families() {
        match Model::open(&fixture(family), &b).map(|m| Runner::new(&m, &b, 64).map(|_| ())) {
            Ok(Ok(())) => kept.push(family),
            Ok(Err(e)) => refused(e.to_string()),
            Err(e) => refused(e.to_string()),
        }
    }
    for f in ["qwen3", "gemma3", "glm4_moe", "minimax_m2", "qwen3_next", "qwen3_5"] {
        assert!(kept.contains(&f), "{dtype}: {f} has heads of 32 and is kept");
    }
    kept
}

/// The largest logit error allowed, as a fraction of the prompt's largest logit. q8_0: about
/// twice the largest measured over the fixtures (0.044, gemma2). q4_0 moves the random tiny
/// models' logits by up to 0.77 of the largest (gemma2's soft-capped attention; 13 times
/// q8_0's, as its step is 16 times coarser), so its bound only catches a broken read. Either
/// pool's attention equals the reference's over the dequantized K/V (tf-cpu's attention
/// tests); this bounds what the quantization costs.
fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::Quant(QuantType::Q8_0) => 0.08,
        _ => 1.0,
    }
}

#[test]
fn quantized_pools_stay_within_their_error_of_transformers() {
    for dtype in QUANTS {
        let b = cpu(dtype);
        assert_eq!(tf_backend::Backend::kv_dtype(&b), dtype);
        for family in families(dtype) {
            let rel = tolerance(dtype);
            check_golden_rounded(&b, family, &|l| rel * l.iter().fold(0.0f32, |a, x| a.max(x.abs())));
        }
    }
}

#[test]
fn quantized_pools_chunked_prefill_equals_whole() {
    for dtype in QUANTS {
        check_chunked_equals_whole(&cpu(dtype), families(dtype));
    }
}

#[test]
fn quantized_pools_concurrent_equals_solo() {
    for dtype in QUANTS {
        for family in families(dtype) {
            check_concurrent_equals_solo(&|| cpu(dtype), family, dtype == QUANTS[1]);
        }
    }
}

#[test]
fn quantized_pools_resumed_equals_fresh() {
    for dtype in QUANTS {
        for family in families(dtype) {
            check_prefix_resumed_equals_fresh(&|| cpu(dtype), family, dtype == QUANTS[0]);
            check_session_restore_equals_fresh(&|| cpu(dtype), family, Some(3));
        }
    }
}

#[test]
fn quantized_pools_drafted_equals_undrafted() {
    for family in families(QUANTS[0]) {
        check_drafted_equals_undrafted(&|| cpu(QUANTS[0]), family, DraftKind::Ngram, None, false);
    }
    // A draft model with pools of its own (heads of 32, as its target's).
    for dtype in QUANTS {
        check_drafted_equals_undrafted(&|| cpu(dtype), "qwen3", DraftKind::Model, Some("qwen3_moe"), true);
    }
}

/// Two ranks as threads, each with a q8_0 pool of its heads: a dense family and a MoE one.
#[test]
fn quantized_pools_at_two_ranks_concurrent_equals_solo_and_restore() {
    let make: MakeBackend<CpuBackend> = Arc::new(|_| {
        let o = CpuOptions { kv_dtype: QUANTS[0], ..CpuOptions::new(1) };
        CpuBackend::with_options(o).map_err(|e| ModelError::Backend(tf_backend::BackendError::Device(e.to_string())))
    });
    for family in ["qwen3", "glm4_moe"] {
        check_concurrent_equals_solo_on(&|cfg| tp_engine(&make, family, 2, cfg), family, false);
        check_session_restore_equals_fresh_on(&|cfg| tp_engine(&make, family, 2, cfg), family, None);
    }
}
