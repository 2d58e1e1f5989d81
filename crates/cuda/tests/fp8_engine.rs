//! The FP8 fixtures (scripts/fixture_fp8.py) on the GPU: logits within the bf16 golden
//! tolerance of transformers' run on the dequantized weights, chunked prefill == whole,
//! concurrent == solo, overlapped == waited and n-gram drafted == undrafted bit for bit. Without
//! a GPU each test prints "skipped" and passes.

mod common;

use tf_cuda::CudaBackend;
use tf_engine::engine::DraftKind;
use tf_testkit::{
    check_concurrent_equals_solo, check_drafted_equals_undrafted, check_family_chunked_equals_whole,
    check_golden_rounded, check_overlapped_equals_waited,
};

/// Block-scaled dense and MoE, compressed-tensors per channel.
const FP8: [&str; 3] = ["qwen3_fp8", "qwen3_moe_fp8", "qwen3_ct_fp8"];

/// golden.rs's `REL_TOL` (a fraction of the prompt's largest |logit|): the GPU multiplies the
/// bf16 rounding of each dequantized weight (a relative change under 2^-9, as a bf16
/// checkpoint's own rounding) with bf16 activations, against transformers' f32 run.
const REL_TOL: f32 = 0.025;

/// A maker of fresh GPU-0 backends (one per engine), or `None` after printing why it skipped.
fn gpu() -> Option<impl Fn() -> CudaBackend> {
    common::backend()?;
    Some(|| common::backend().expect("the GPU was there a moment ago"))
}

#[test]
fn fp8_golden_within_the_bf16_tolerance() {
    let Some(b) = common::backend() else { return };
    for family in FP8 {
        check_golden_rounded(&b, family, &|want| REL_TOL * want.iter().fold(0.0f32, |a, &x| a.max(x.abs())));
    }
}

#[test]
fn fp8_chunked_prefill_equals_whole_bit_for_bit() {
    let Some(b) = common::backend() else { return };
    for family in FP8 {
        check_family_chunked_equals_whole(&b, family);
    }
}

#[test]
fn fp8_concurrent_equals_solo() {
    let Some(gpu) = gpu() else { return };
    for family in FP8 {
        for seeded in [false, true] {
            check_concurrent_equals_solo(&gpu, family, seeded);
        }
    }
}

#[test]
fn fp8_overlapped_rounds_equal_waited_rounds() {
    let Some(gpu) = gpu() else { return };
    for family in FP8 {
        check_overlapped_equals_waited(&gpu, family);
    }
}

#[test]
fn fp8_ngram_drafted_equals_undrafted() {
    let Some(gpu) = gpu() else { return };
    for family in FP8 {
        for seeded in [false, true] {
            check_drafted_equals_undrafted(&gpu, family, DraftKind::Ngram, None, seeded);
        }
    }
}
