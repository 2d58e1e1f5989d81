//! Tensor parallelism with CUDA ranks as threads of one process (`tf_models::tp`), every rank
//! on GPU 0: the ranks' sums between the devices give the bits of the sums through the host,
//! TP = 2 against one rank within a bf16 tolerance with the same greedy picks, and concurrent
//! equals solo through the engine, with the experts split by rows or (expert parallelism) whole.

mod common;

use std::sync::Arc;
use tf_cuda::{CudaBackend, CudaOptions};
use tf_engine::Runner;
use tf_models::ModelError;
use tf_models::tp::MakeBackend;
use tf_testkit::{
    check_concurrent_equals_solo_on, check_tp_matches_one_rank, fixture, golden, on_cuda, tp_engine, tp_model,
};

/// Largest |TP = 2 - one rank| allowed, as a fraction of the prompt's largest |logit|: the two
/// differ only where a row-parallel sum rounds, but the next matmul rounds its input to bf16,
/// so a flipped last bit there carries on (a bf16 ulp is 0.4%).
const REL_TOL: f32 = 0.01;

/// Rank `r`'s backend: GPU 0, decode op by op (a sum waits for the other ranks mid-round), the
/// ranks' sums on the devices or (`host_sums`) through the host.
fn make_with(host_sums: bool) -> Option<MakeBackend<CudaBackend>> {
    common::backend()?;
    Some(Arc::new(move |_| {
        let cache_dir = std::env::var_os("TF_CUDA_CACHE").map(std::path::PathBuf::from);
        let no_pdl = common::pdl_off();
        let opts =
            CudaOptions { no_graphs: true, tp_host_sums: host_sums, cache_dir, no_pdl, ..CudaOptions::default() };
        CudaBackend::with_options(0, &opts)
            .map_err(|e| ModelError::Backend(tf_backend::BackendError::Device(e.to_string())))
    }))
}

fn make() -> Option<MakeBackend<CudaBackend>> {
    make_with(false)
}

/// Every golden prompt's logits at 2 ranks, summing on the devices and through the host: the
/// same bits.
#[test]
fn device_sums_give_the_host_sums_bits() {
    let (Some(device), Some(host)) = (make_with(false), make_with(true)) else { return };
    for family in ["qwen3", "qwen3_moe", "qwen3_next", "gemma3"] {
        let logits = |make: &MakeBackend<CudaBackend>| -> Vec<Vec<u32>> {
            let b = make(0).unwrap_or_else(|e| panic!("{family}: {e}"));
            let (m, followers) = tp_model(&b, make, family, 2);
            let out = golden(&fixture(family))
                .prompts
                .iter()
                .map(|p| {
                    let ids = m.vocab.check(p).unwrap_or_else(|e| panic!("{family}: {e:?}"));
                    let got = Runner::new(&m, &b, ids.len()).expect("runner").prefill(&ids, ids.len(), true);
                    got.iter().map(|v| v.to_bits()).collect()
                })
                .collect();
            assert!(m.decoder.fault().is_none(), "{family}: {:?}", m.decoder.fault());
            drop(m);
            followers.join().unwrap_or_else(|e| panic!("{family}: a follower failed: {e}"));
            out
        };
        assert!(logits(&device) == logits(&host), "{family}: sums between the devices differ from the host's");
    }
}

/// Dense, MoE, hybrid, latent-attention and Gemma 4 layouts.
const FAMILIES: [&str; 9] =
    ["qwen3", "llama", "gemma3", "qwen3_moe", "glm4_moe", "qwen3_next", "lfm2", "deepseek_v3", "gemma4_kvshare"];

#[test]
fn two_ranks_match_one_rank_on_cuda() {
    let Some(make) = make() else { return };
    let failed: Vec<String> = FAMILIES
        .into_iter()
        .filter(|f| on_cuda(f))
        .filter_map(|family| {
            let check = || check_tp_matches_one_rank(&make, family, 2, REL_TOL);
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
                Ok(worst) => {
                    eprintln!("{family} at 2 ranks on cuda: largest logit difference {worst:e} of the largest logit");
                    None
                }
                Err(_) => Some(family.to_string()),
            }
        })
        .collect();
    assert!(failed.is_empty(), "TP = 2 on CUDA differs from one rank for {failed:?}");
}

/// Expert parallelism on CUDA ranks: each rank's whole experts run on their rows (the
/// host-driven path), the ranks' outputs summed; per-expert and stacked weights, a router with a
/// choice bias and groups.
#[test]
fn expert_parallel_matches_one_rank_on_cuda() {
    let Some(make) = make() else { return };
    for family in ["qwen3_moe", "glm4_moe", "gemma4_moe"].into_iter().filter(|f| on_cuda(f)) {
        let shape = tf_models::tp::GroupShape { size: 2, expert_parallel: true };
        let worst = check_tp_matches_one_rank(&make, family, shape, REL_TOL);
        eprintln!("{family}, experts over 2 ranks on cuda: largest logit difference {worst:e} of the largest logit");
    }
    check_concurrent_equals_solo_on(
        &|cfg| tp_engine(&make, "qwen3_moe", tf_models::tp::GroupShape { size: 2, expert_parallel: true }, cfg),
        "qwen3_moe",
        false,
    );
}

#[test]
fn concurrent_equals_solo_at_two_ranks_on_cuda() {
    let Some(make) = make() else { return };
    for family in ["qwen3", "qwen3_moe"] {
        check_concurrent_equals_solo_on(&|cfg| tp_engine(&make, family, 2, cfg), family, false);
    }
}
