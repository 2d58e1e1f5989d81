//! Structured output keeps the promises on the CPU backend (the check lives in tf-testkit;
//! crates/cuda/tests/structured.rs runs it on the GPU): with a constraint on every request,
//! concurrent equals solo and drafted equals undrafted, greedy and seeded, and every token lies
//! inside its row's mask (greedy rows take the masked path, never the argmax-only one).

use tf_cpu::CpuBackend;
use tf_testkit::{FAMILIES, check_constrained_exact};

#[test]
fn constrained_concurrent_and_drafted_equal_solo() {
    let cpu = || CpuBackend::new(2).unwrap();
    let mut accepted = 0;
    for family in FAMILIES {
        for seeded in [false, true] {
            accepted += check_constrained_exact(&cpu, family, seeded);
        }
    }
    assert!(accepted > 0, "some drafts were accepted under the mask, so the accept path ran");
}
