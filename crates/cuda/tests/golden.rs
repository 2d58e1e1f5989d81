//! The fixture families on the GPU: logits against transformers (float32) within a bf16
//! tolerance, identical greedy continuations, and chunked prefill == whole prefill bit for bit;
//! the families the backend lacks an op for (`NOT_ON_CUDA`) are refused naming it.
//! The engine-level checks (concurrent == solo and the rest) are in engine.rs.

mod common;

use common::backend;
use tf_testkit::{NOT_ON_CUDA, check_chunked_equals_whole, check_golden_rounded, cuda_families, fixture};

/// Largest |ours - transformers| allowed, as a fraction of the prompt's largest |logit|. The GPU
/// rounds activations entering bf16 matmuls, attention's Q/K/V and probabilities to bf16 (as a
/// bf16 transformers run does); a numpy emulation of exactly that rounding lands at 0.2-1.2% of
/// the largest logit on these fixtures. Wrong norms, rope or windows miss by 10% and more. MoE
/// fixtures whose routing has near-ties are compared up to the first one (golden.rs).
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
fn chunked_prefill_equals_whole_bit_for_bit() {
    let Some(b) = backend() else { return };
    check_chunked_equals_whole(&b, cuda_families());
}

#[test]
fn families_without_cuda_attention_are_refused_naming_what_is_missing() {
    let Some(b) = backend() else { return };
    for family in NOT_ON_CUDA {
        if family == "step3p7" {
            // Refused at load: its MLPs' clamped SwiGLU has no kernel.
            let e = tf_models::Model::open(&fixture(family), &b).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("clamped SwiGLU") && e.contains("--device cpu"), "{family}: {e}");
            continue;
        }
        let m = tf_models::Model::open(&fixture(family), &b).unwrap_or_else(|e| panic!("{family}: {e}"));
        let e = m.decoder.alloc_cache(&b, 4, 16, 1).err().map(|e| e.to_string()).unwrap_or_default();
        let what = match family {
            f if f.starts_with("gemma4") => "KV pools of different shapes",
            _ => "clamped SwiGLU of MiniMax M3",
        };
        assert!(e.contains(what) && e.contains("--device cpu"), "{family}: {e}");
    }
}
