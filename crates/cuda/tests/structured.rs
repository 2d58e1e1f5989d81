//! Structured output on the CUDA backend: the tf-testkit check the CPU tests run in CI, with a
//! constraint on every request (concurrent == solo, drafted == undrafted, every token inside its
//! mask). Without a GPU it prints "skipped" and passes.

mod common;

use tf_cuda::CudaBackend;
use tf_testkit::{FAMILIES, check_constrained_exact, on_cuda};

/// A maker of fresh GPU-0 backends (one per engine), or `None` after printing why it skipped.
fn gpu() -> Option<impl Fn() -> CudaBackend> {
    common::backend()?;
    Some(|| common::backend().expect("the GPU was there a moment ago"))
}

#[test]
fn constrained_concurrent_and_drafted_equal_solo() {
    let Some(gpu) = gpu() else { return };
    for family in FAMILIES.into_iter().filter(|f| on_cuda(f)) {
        for seeded in [false, true] {
            check_constrained_exact(&gpu, family, seeded);
        }
    }
}
