//! Drafted equals undrafted: speculative decoding (n-gram, early exit, a draft model) returns
//! exactly the tokens and logprobs of the same request with `draft: false`.
//!
//! 12 repetitive requests, greedy or seeded, are run undrafted for reference, then drafted: each
//! alone, all at once, all at once with every other one undrafted (drafted and plain sequences in
//! the same rounds), and all at once in a 10-block pool that must preempt. Drafts must have been
//! proposed, and for greedy n-gram drafting accepted too (the tiny models copy repeated motifs),
//! so the accept path ran; a model drafting for itself must have every draft accepted.

use crate::concurrent::assert_same;
use crate::{Req, config, engine, engine_with_drafter, repetitive_request, run, run_each};
use std::sync::atomic::Ordering;
use tf_backend::Backend;
use tf_engine::engine::{DraftConfig, DraftKind, EngineConfig, EngineHandle};

/// Requests per check.
const NUM_REQUESTS: usize = 12;

/// Draft tokens proposed and accepted by one check's drafting engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DraftCounts {
    /// Draft tokens proposed.
    pub proposed: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
}

/// Drafted by `kind` (`draft_model` for `DraftKind::Model`) equals undrafted; returns the draft counts.
pub fn check_drafted_equals_undrafted<B: Backend + 'static>(
    new_backend: &dyn Fn() -> B,
    family: &str,
    kind: DraftKind,
    draft_model: Option<&str>,
    seeded: bool,
) -> DraftCounts {
    let what =
        format!("{family} {kind:?}{} seeded={seeded}", draft_model.map(|d| format!("({d})")).unwrap_or_default());
    let plain = engine(new_backend, family, config(256, 128, 32, true));
    let open = |cfg| engine_with_drafter(new_backend, family, draft_model, cfg);
    drafted_equals_undrafted(&plain, &open, family, kind, seeded, &what)
}

/// [`check_drafted_equals_undrafted`] for a drafter of the target's own (n-gram, early exit),
/// on the engines `open` starts for `family` (a tensor-parallel group's, say).
pub fn check_drafted_equals_undrafted_on(
    open: &dyn Fn(EngineConfig) -> EngineHandle,
    family: &str,
    kind: DraftKind,
    seeded: bool,
) -> DraftCounts {
    let plain = open(config(256, 128, 32, true));
    drafted_equals_undrafted(&plain, open, family, kind, seeded, &format!("{family} {kind:?} seeded={seeded}"))
}

/// The check over the undrafted engine `plain` and drafting engines from `open`.
fn drafted_equals_undrafted(
    plain: &EngineHandle,
    open: &dyn Fn(EngineConfig) -> EngineHandle,
    family: &str,
    kind: DraftKind,
    seeded: bool,
    what: &str,
) -> DraftCounts {
    let reqs = |draft: &dyn Fn(usize) -> bool| -> Vec<Req> {
        (0..NUM_REQUESTS).map(|i| repetitive_request(i, seeded, draft(i))).collect()
    };
    let want = run_each(plain, &reqs(&|_| false));
    let spec = open(drafting(256, kind));
    let drafted = reqs(&|_| true);
    for (i, (got, w)) in run_each(&spec, &drafted).iter().zip(&want).enumerate() {
        assert_same(got, w, &format!("{what}: request {i} alone"));
    }
    assert_eq!(run(&spec, &drafted), want, "{what}: concurrent");
    assert_eq!(run(&spec, &reqs(&|i| i % 2 == 0)), want, "{what}: half drafted, sharing rounds");
    let counts = counts(&spec);
    assert!(counts.proposed > 0, "{what}: drafts were proposed");
    let from_candidates = spec.stats.candidate_rows.load(Ordering::Relaxed);
    assert!(from_candidates > 0, "{what}: verify rows were sampled from candidates ({from_candidates})");
    // (The tiny hybrid fixtures and NGRAM_UNACCEPTED do not copy motifs greedily;
    // check_self_drafting_accepts_all runs their accept path.)
    if kind == DraftKind::Ngram
        && !seeded
        && !crate::HYBRIDS.contains(&family)
        && !crate::NGRAM_UNACCEPTED.contains(&family)
    {
        assert!(counts.accepted > 0, "{what}: drafts were accepted, so the accept path ran");
    }
    let tight = open(drafting(10, kind));
    assert_eq!(run(&tight, &drafted), want, "{what}: 10-block pool");
    assert!(tight.stats.preemptions.load(Ordering::Relaxed) > 0, "{what}: the 10-block pool preempted");
    counts
}

/// `family` drafting for itself (greedy) equals undrafted and has every proposed token accepted.
pub fn check_self_drafting_accepts_all<B: Backend + 'static>(new_backend: &dyn Fn() -> B, family: &str) {
    let plain = engine(new_backend, family, config(256, 128, 32, true));
    let same = engine_with_drafter(new_backend, family, Some(family), drafting(256, DraftKind::Model));
    // Even requests: no penalties, which the greedy drafter does not apply.
    for i in [0, 2, 4, 6] {
        let (undrafted, drafted) = (repetitive_request(i, false, false), repetitive_request(i, false, true));
        assert_same(&run(&same, &[drafted]).remove(0), &run(&plain, &[undrafted]).remove(0), &format!("{family}: {i}"));
    }
    let DraftCounts { proposed, accepted } = counts(&same);
    assert!(
        proposed > 0 && accepted == proposed,
        "{family} drafting for itself is always right: {accepted}/{proposed}"
    );
}

/// The drafting engine's config: `num_blocks` blocks, 128-token rounds, 32-token chunks, k = 5.
fn drafting(num_blocks: usize, kind: DraftKind) -> EngineConfig {
    EngineConfig { draft: DraftConfig { kind, num_tokens: 5 }, ..config(num_blocks, 128, 32, true) }
}

fn counts(h: &EngineHandle) -> DraftCounts {
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    DraftCounts { proposed: load(&h.stats.draft_proposed), accepted: load(&h.stats.draft_accepted) }
}
