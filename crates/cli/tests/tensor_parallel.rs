//! Tensor parallelism on the CPU backend, ranks as threads (`tf_models::tp`): concurrent equals
//! solo at 2 and 4 ranks through the real engine, TP = N against one rank within a stated
//! tolerance, for dense, MoE and hybrid fixtures; a follower refuses a malformed, oversized or
//! out-of-range plan (a round, a block read or write) without a crash, and the group's other
//! ranks see it break; a saved session holds every rank's part and restores exactly; families and
//! shapes the sharding does not cover are refused at load by name. Expert parallelism (the
//! routed experts whole, split over the ranks) likewise, for every MoE layout.

mod checkpoint_util;

use checkpoint_util::{copy, edit_config};
use std::sync::Arc;
use std::time::Duration;
use tf_backend::{Collective, ThreadGroup};
use tf_core::LoadProgress;
use tf_cpu::CpuBackend;
use tf_engine::engine::DraftKind;
use tf_engine::session;
use tf_models::tp::plan::{MAX_PLAN_BYTES, Pass, Plan, RoundPlan};
use tf_models::tp::{GroupShape, MakeBackend, Shard, TpLink, open_group};
use tf_models::{Model, ModelError};
use tf_testkit::{
    check_concurrent_equals_solo_on, check_drafted_equals_undrafted_on, check_session_restore_equals_fresh_on,
    check_tp_matches_one_rank, fixture, tp_engine,
};

/// One thread per rank: the test machine has two cores.
fn make() -> MakeBackend<CpuBackend> {
    Arc::new(|_| CpuBackend::new(1).map_err(|e| ModelError::Backend(tf_backend::BackendError::Device(e.to_string()))))
}

/// A dense family, an MoE one, and a hybrid MoE one (Gated DeltaNet and gated attention layers,
/// fused inputs, a sigmoid-gated shared expert).
const FAMILIES: [&str; 3] = ["qwen3", "qwen3_moe", "qwen3_next"];

#[test]
fn concurrent_equals_solo_at_two_and_four_ranks() {
    let make = make();
    for family in FAMILIES {
        for size in [2, 4] {
            check_concurrent_equals_solo_on(&|cfg| tp_engine(&make, family, size, cfg), family, false);
        }
    }
}

/// The other recurrent kinds, short conv (LFM2 MoE) and Mamba2 (Nemotron-H, one-part layers),
/// Gemma 4 (KV-shared layers, per-layer inputs, a dense MLP beside stacked experts) and
/// MiniMax M2 (q and k normed over every rank's heads), DeepSeek V3 (latent attention), GLM-5
/// (DeepSeek sparse attention) and MiniMax M3 (block-sparse attention).
#[test]
fn more_families_concurrent_equals_solo_at_two_ranks() {
    let make = make();
    let families = [
        "lfm2_moe",
        "nemotron_h",
        "gemma4_kvshare",
        "gemma4_moe",
        "minimax_m2",
        "deepseek_v3",
        "glm_moe_dsa",
        "minimax_m3",
    ];
    for family in families {
        check_concurrent_equals_solo_on(&|cfg| tp_engine(&make, family, 2, cfg), family, false);
    }
}

#[test]
fn seeded_concurrent_equals_solo_at_two_ranks() {
    let make = make();
    for family in FAMILIES {
        check_concurrent_equals_solo_on(&|cfg| tp_engine(&make, family, 2, cfg), family, true);
    }
}

/// Speculative decoding on rank 0 (n-gram, and early exit: the first layers' forward on every
/// rank) returns what undrafted requests do, greedy and seeded, under preemption too.
#[test]
fn drafted_equals_undrafted_at_two_ranks() {
    let make = make();
    for family in FAMILIES {
        for kind in [DraftKind::Ngram, DraftKind::EarlyExit(1)] {
            for seeded in [false, true] {
                check_drafted_equals_undrafted_on(&|cfg| tp_engine(&make, family, 2, cfg), family, kind, seeded);
            }
        }
    }
}

/// The target's MTP head drafting on rank 0 (unsharded, with the whole head) returns what
/// undrafted requests do: a MoE target and a hybrid one.
#[test]
fn mtp_drafted_equals_undrafted_at_two_ranks() {
    let make = make();
    for family in ["glm4_moe_mtp", "qwen3_5_mtp", "deepseek_v3_mtp", "step3p7_mtp", "glm_moe_dsa_mtp"] {
        for seeded in [false, true] {
            check_drafted_equals_undrafted_on(&|cfg| tp_engine(&make, family, 2, cfg), family, DraftKind::Mtp, seeded);
        }
    }
}

/// The row-parallel sums add each rank's partial products, so the bits differ from one rank's
/// single reduction by f32 rounding: within 1e-5 of the largest logit (seen: a few 1e-7).
#[test]
fn n_ranks_match_one_rank_within_tolerance() {
    let make = make();
    let families = [
        "qwen3",
        "qwen3_moe",
        "llama",
        "gemma3",
        // q, k and v biases split with their heads; a sliding window; soft-caps; fused q/k/v and
        // gate/up split like their parts.
        "qwen2",
        "mistral",
        "gemma2",
        "phi3",
        "glm4_moe",
        "qwen3_5",
        "qwen3_next",
        "lfm2",
        "lfm2_moe",
        "lfm3",
        // Per-layer inputs, KV sharing, V from K, dense MLP beside stacked experts.
        "gemma4",
        "gemma4_kvshare",
        "gemma4_wide",
        "gemma4_moe",
        // q and k normed over all heads at once.
        "minimax_m2",
        // Multi-head latent attention: query heads split, the latent whole on every rank.
        "deepseek_v3",
        "deepseek_v3_nolora",
        // DeepSeek sparse attention: the indexer whole on every rank, so every rank keeps the same keys.
        "deepseek_v32",
        "deepseek_v32_allkeys",
        "glm_moe_dsa",
        // MiniMax M3's block-sparse attention: the indexer whole on every rank, each rank's query
        // heads reading their indexer heads' picks.
        "minimax_m3",
        "minimax_m3_cover",
        // Query heads per layer kind, stacked experts, a shared expert.
        "step3p7",
        // FP8 weights: block scales, per-channel scales, FP8 experts.
        "qwen3_fp8",
        "qwen3_ct_fp8",
        "qwen3_moe_fp8",
        "glm4_moe_fp8",
        "minimax_m2_fp8",
        "deepseek_v3_fp8",
    ];
    for (family, sizes) in
        families.iter().map(|f| (*f, &[2, 4][..])).chain([("nemotron_h", &[2][..]), ("nemotron_h_moe", &[2][..])])
    {
        for &size in sizes {
            let worst = check_tp_matches_one_rank(&make, family, size, 1e-5);
            eprintln!("{family} at {size} ranks: largest logit difference {worst:e} of the largest logit");
        }
    }
}

/// `size` ranks, each holding its part of the routed experts whole.
fn experts_over(size: usize) -> GroupShape {
    GroupShape { size, expert_parallel: true }
}

/// Expert parallelism: each rank runs its whole experts for every token and the ranks' outputs
/// are summed, so only the f32 rounding of that sum differs from one rank (within 1e-5 of the
/// largest logit): every MoE layout (per-expert and stacked weights, a router bias with groups,
/// shared and sigmoid-gated shared experts, latent experts, Gemma 4's experts beside a dense
/// MLP, FP8 experts).
#[test]
fn expert_parallel_matches_one_rank_within_tolerance() {
    let make = make();
    let families = [
        "qwen3_moe",
        "glm4_moe",
        "lfm2_moe",
        "gemma4_moe",
        "minimax_m2",
        "deepseek_v3",
        "step3p7",
        "qwen3_next",
        "qwen3_moe_fp8",
        "glm4_moe_fp8",
    ];
    for (family, sizes) in families.iter().map(|f| (*f, &[2, 4][..])).chain([("nemotron_h_moe", &[2][..])]) {
        for &size in sizes {
            let worst = check_tp_matches_one_rank(&make, family, experts_over(size), 1e-5);
            eprintln!("{family}, experts over {size} ranks: largest logit difference {worst:e} of the largest logit");
        }
    }
    // The switch takes effect: whole experts sum their outputs in another order than every
    // expert's row parts do.
    let logits = |shape: GroupShape| {
        let b = CpuBackend::new(1).expect("cpu");
        let (model, _followers) = tf_testkit::tp_model(&b, &make, "qwen3_moe", shape);
        let prompt = &tf_testkit::golden(&fixture("qwen3_moe")).prompts[0];
        let ids = model.vocab.check(prompt).expect("ids");
        tf_engine::Runner::new(&model, &b, ids.len()).expect("runner").prefill(&ids, ids.len(), true)
    };
    assert_ne!(logits(experts_over(2)), logits(2.into()), "expert parallelism loads whole experts");
}

#[test]
fn expert_parallel_concurrent_equals_solo() {
    let make = make();
    for (family, size) in [("qwen3_moe", 4), ("gemma4_moe", 2), ("glm4_moe", 2)] {
        let shape = experts_over(size);
        check_concurrent_equals_solo_on(&|cfg| tp_engine(&make, family, shape, cfg), family, false);
    }
    check_drafted_equals_undrafted_on(
        &|cfg| tp_engine(&make, "qwen3_moe", experts_over(2), cfg),
        "qwen3_moe",
        DraftKind::Ngram,
        true,
    );
}

#[test]
fn expert_parallel_with_fewer_experts_than_ranks_is_refused_by_name() {
    let d = copy("qwen3_moe");
    edit_config(d.path(), |c| c["num_local_experts"] = 2.into());
    let b = CpuBackend::new(1).expect("cpu");
    let err = match open_group(d.path(), &b, &LoadProgress::default(), experts_over(4), make(), Duration::from_secs(60))
    {
        Ok(_) => panic!("2 experts loaded over 4 ranks"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("2 routed experts, fewer than the ranks"), "{err}");
}

/// Rank 1 of `family` at 2 ranks on its own thread, following plans that the test sends from a
/// bare rank 0 handle (dropped after them, closing the group, where `close`); returns the
/// follower's result and the handle if kept.
fn follower_with(family: &str, plans: &[Vec<u8>], close: bool) -> (Result<(), ModelError>, Option<ThreadGroup>) {
    let mut groups = ThreadGroup::new(2, Duration::from_secs(60));
    let link = TpLink::new(Box::new(groups.pop().expect("rank 1")));
    let leader = groups.pop().expect("rank 0");
    let path = fixture(family);
    let follower = std::thread::spawn(move || {
        let b = CpuBackend::new(1).expect("cpu");
        let model = Model::open_shard(&path, &b, &LoadProgress::default(), Shard::new(link)).expect("rank 1 loads");
        model.decoder.follow(&b)
    });
    for p in plans {
        leader.send_plan(p).expect("send");
    }
    let leader = (!close).then_some(leader);
    let out = follower.join().expect("the follower does not panic");
    (out, leader)
}

fn alloc() -> Vec<u8> {
    Plan::Alloc { num_blocks: 4, block_size: 16, num_slots: 1 }.encode()
}

fn round(ids: Vec<u32>, block: u32) -> Vec<u8> {
    let n = ids.len();
    let seqs = vec![tf_backend::SeqAttn { q_start: 0, q_len: n, start_pos: 0, block_table: vec![block] }];
    let r = RoundPlan { pass: Pass::Full, ids, logits_rows: vec![n - 1], block_size: 16, seqs, state_slots: vec![] };
    Plan::Round(r).encode()
}

#[test]
fn a_follower_refuses_bad_plans_without_a_crash_and_the_group_breaks() {
    let write = |parts: Vec<Vec<u8>>| Plan::WriteBlocks { blocks: vec![0], slot: None, parts }.encode();
    let cases: [(&str, Vec<Vec<u8>>, &str); 8] = [
        ("garbage", vec![b"not a plan at all".to_vec()], "no plan magic"),
        ("oversized", vec![vec![0; MAX_PLAN_BYTES + 1]], "limit"),
        ("token id out of range", vec![alloc(), round(vec![1, 2, 512], 0)], "token id 512"),
        ("block out of range", vec![alloc(), round(vec![1, 2, 3], 4)], "block 4"),
        ("round before alloc", vec![round(vec![1, 2, 3], 0)], "before the pools"),
        ("a short part of blocks", vec![alloc(), write(vec![vec![0; 3]])], "a part of blocks of 3 bytes"),
        ("parts for other ranks", vec![alloc(), write(vec![vec![], vec![]])], "2 parts of blocks for 1 followers"),
        (
            "a read past the pools",
            vec![alloc(), Plan::ReadBlocks { blocks: vec![4], slot: None }.encode()],
            "block 4 of 4",
        ),
    ];
    for (what, plans, says) in cases {
        let (out, leader) = follower_with("qwen3", &plans, false);
        let err = out.expect_err(what).to_string();
        assert!(err.contains(says), "{what}: {err}");
        // Rank 0's next collective fails at once with the follower's reason, not a hang.
        let leader = leader.expect("kept");
        let broken = leader.all_reduce(&mut [0.0]).expect_err("the group is broken");
        assert!(broken.to_string().contains(says), "{what}: {broken}");
    }
}

#[test]
fn rank_0_ends_the_followers_by_closing_the_group() {
    let (out, _) = follower_with("qwen3", &[alloc()], true);
    assert!(out.is_ok(), "{out:?}");
}

#[test]
fn unsharded_families_and_uneven_shapes_are_refused_at_load_by_name() {
    let refused = |family: &str, size: usize| {
        let b = CpuBackend::new(1).expect("cpu");
        match open_group(&fixture(family), &b, &LoadProgress::default(), size.into(), make(), Duration::from_secs(60)) {
            Ok(_) => panic!("{family} at {size} ranks loaded"),
            Err(e) => e.to_string(),
        }
    };
    // 2 Mamba2 groups: 4 ranks cannot each hold whole groups.
    assert!(refused("nemotron_h", 4).contains("n_groups"));
    // 4 query heads, 2 KV heads: 3 ranks split neither.
    assert!(refused("qwen3", 3).contains("KV heads"));
    assert!(refused("gpt_oss", 2).contains("biases after its output and expert down projections"));
    assert!(refused("phi3_longrope", 2).contains("LongRoPE"));
}

/// A follower gone mid-serve: the next round's collective fails at once, the engine ends every
/// request with the reason and records it (which ends `serve`), with no hang.
#[test]
fn a_follower_that_leaves_ends_the_engine_with_an_error() {
    let mut groups = ThreadGroup::new(2, Duration::from_secs(60));
    let rank1 = groups.pop().expect("rank 1");
    let link = TpLink::new(Box::new(groups.pop().expect("rank 0")));
    let b = CpuBackend::new(1).expect("cpu");
    let model = Model::open_shard(&fixture("qwen3"), &b, &LoadProgress::default(), Shard::new(link)).expect("loads");
    let (h, thread) = tf_engine::engine::spawn(model, b, tf_testkit::config(64, 256, 512, false)).expect("engine");
    drop(rank1);
    let req = tf_testkit::mixed_request(0, false);
    let failed = std::panic::catch_unwind(|| tf_testkit::run(&h, &[req])).expect_err("the request fails");
    let msg = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("rank 1 left"), "{msg}");
    assert!(h.stats.fault().is_some_and(|f| f.contains("rank 1 left")));
    thread.join().expect("the engine thread ends");
}

/// A saved session under tensor parallelism: every rank's K/V (and state) saved and restored
/// into a new group serves its extensions as a cold group does, bit for bit, for a dense, a
/// hybrid (Gated DeltaNet state) and a latent-attention family.
#[test]
fn sessions_saved_and_restored_at_two_ranks_equal_fresh() {
    let make = make();
    for family in ["qwen3", "qwen3_next", "deepseek_v3", "lfm2_moe", "minimax_m3"] {
        check_session_restore_equals_fresh_on(&|cfg| tp_engine(&make, family, 2, cfg), family, Some(7));
    }
}

/// A session holds each rank's heads: one saved at 2 ranks is refused by one rank by name,
/// and one of one rank by 2 ranks.
#[test]
fn a_session_of_another_rank_count_is_refused_by_name() {
    let make = make();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = session::confined_path(dir.path(), "tp").expect("confined");
    let two = tp_engine(&make, "qwen3", 2, tf_testkit::config(64, 256, 64, true));
    assert_eq!(two.session_layout.ranks, 2);
    let ids = two.session_layout.vocab.check(&tf_testkit::ramp(40, 1)).expect("ids");
    assert_eq!(two.save_session(ids.clone(), path.clone()), Ok(32));
    assert_eq!(session::inspect(&path).expect("a whole file").ranks, 2);
    let cpu = || CpuBackend::new(1).expect("cpu");
    let one = tf_testkit::engine(&cpu, "qwen3", tf_testkit::config(64, 256, 64, true));
    let e = session::read(&path, &one.session_layout).expect_err("refused").to_string();
    assert!(e.contains("saved by 2 tensor-parallel rank(s)") && e.contains("--tensor-parallel-size 2"), "{e}");
    assert_eq!(one.save_session(ids, path.clone()), Ok(32));
    let e = session::read(&path, &two.session_layout).expect_err("refused").to_string();
    assert!(e.contains("saved by 1 tensor-parallel rank(s)") && e.contains("runs on 2"), "{e}");
}
