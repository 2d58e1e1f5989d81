//! Golden tests: every family's logits and greedy continuations against Hugging Face
//! transformers (float32), on the committed tiny fixtures, for the reference and fast CPU
//! backends; plus chunked prefill == whole prefill, bit for bit.

use tf_backend::RefBackend;
use tf_cpu::CpuBackend;
use tf_testkit::{all_families, check_chunked_equals_whole, check_golden};

/// Largest |ours - transformers| allowed on a logit. The fixtures' logits are O(1); a wrong
/// norm, rope base, scale or window moves them by 0.2 or more; f32 rounding by up to ~2e-5.
const TOL: f32 = 1e-4;

#[test]
fn golden_reference_backend() {
    for family in all_families() {
        check_golden(&RefBackend, family, &|_| TOL);
    }
}

#[test]
fn golden_cpu_backend() {
    let b = CpuBackend::new(2).unwrap();
    for family in all_families() {
        check_golden(&b, family, &|_| TOL);
    }
}

#[test]
fn chunked_prefill_equals_whole_bit_for_bit() {
    check_chunked_equals_whole(&CpuBackend::new(2).unwrap(), all_families());
}
