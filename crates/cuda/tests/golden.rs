//! The fixture families on the GPU: logits against transformers (float32) within a bf16
//! tolerance, identical greedy continuations, and chunked prefill == whole prefill bit for bit.
//! The engine-level checks (concurrent == solo and the rest) are in engine.rs.

mod common;

use common::backend;
use tf_testkit::{check_chunked_equals_whole, check_golden_rounded, cuda_families};

/// Largest |ours - transformers| allowed, as a fraction of the prompt's largest |logit|. The GPU
/// rounds activations entering bf16 matmuls, attention's Q/K/V and probabilities to bf16 (as a
/// bf16 transformers run does); a numpy emulation of exactly that rounding lands at 0.2-1.2% of
/// the largest logit on these fixtures. Wrong norms, rope or windows miss by 10% and more. MoE
/// fixtures whose routing has near-ties are compared up to the first one, and a prompt whose own
/// transformers bf16 run misses by more is allowed that (`bf16_rel_err`, golden.rs).
const REL_TOL: f32 = 0.025;

#[test]
fn golden_cuda_backend() {
    let Some(b) = backend() else { return };
    // Every family runs and each failure is named, so one run tells all of them.
    let failed: Vec<&str> = cuda_families()
        .filter(|family| {
            let check =
                || check_golden_rounded(&b, family, &|want| REL_TOL * want.iter().fold(0.0f32, |a, &x| a.max(x.abs())));
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).is_err()
        })
        .collect();
    assert!(failed.is_empty(), "golden on CUDA failed for {failed:?}");
}

#[test]
fn mxfp4_experts_golden_cuda_backend() {
    // gpt-oss's MXFP4 experts decoded to bf16 at load, against transformers' float32 run of the
    // same dequantized weights.
    let Some(b) = backend() else { return };
    check_golden_rounded(&b, "gpt_oss_mxfp4", &|want| REL_TOL * want.iter().fold(0.0f32, |a, &x| a.max(x.abs())));
}

#[test]
fn chunked_prefill_equals_whole_bit_for_bit() {
    let Some(b) = backend() else { return };
    check_chunked_equals_whole(&b, cuda_families());
}
