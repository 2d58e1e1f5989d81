//! Shared engine test kit: fixtures, engines over any backend, requests, and the exactness checks
//! of docs/architecture.md (concurrent == solo, resumed == fresh, drafted == undrafted) written once, so the
//! CPU tests in CI and the CUDA tests on the GPU machine make the same assertions.

mod concurrent;
mod constrained;
mod drafted;
mod golden;
mod logprobs;
mod mtp;
mod overlapped;
mod resumed;
mod tp;

pub use concurrent::{check_concurrent_equals_solo, check_concurrent_equals_solo_on};
pub use constrained::{ModThree, check_constrained_exact, run_constrained};
pub use drafted::{
    DraftCounts, check_drafted_equals_undrafted, check_drafted_equals_undrafted_on, check_self_drafting_accepts_all,
};
pub use golden::{
    Golden, argmax, check_chunked_equals_whole, check_family_chunked_equals_whole, check_golden, check_golden_rounded,
    golden,
};
pub use logprobs::check_logprobs_are_the_raw_rows;
pub use mtp::mtp_logits;
pub use overlapped::check_overlapped_equals_waited;
pub use resumed::{
    check_prefix_resumed_equals_fresh, check_session_restore_equals_fresh, check_session_restore_equals_fresh_on,
};
pub use tp::{check_tp_matches_one_rank, tp_engine, tp_model};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::channel;
use tf_backend::Backend;
use tf_engine::engine::{DraftNet, EngineConfig, EngineHandle, Event, GenRequest, TokenEvent, spawn_with_drafter};
use tf_engine::sampler::SamplingParams;
use tf_engine::scheduler::SchedulerConfig;
use tf_models::Model;

/// The fixture families the checks run over.
pub const FAMILIES: [&str; 24] = [
    "llama",
    "qwen2",
    "mistral",
    "phi3",
    "phi3_longrope",
    "qwen3",
    "gemma2",
    "gemma3",
    "qwen3_moe",
    "glm4_moe",
    "minimax_m2",
    "gpt_oss",
    "deepseek_v3",
    "deepseek_v3_nolora",
    "glm_moe_dsa",
    "deepseek_v32",
    "deepseek_v32_allkeys",
    "gemma4",
    "gemma4_kvshare",
    "gemma4_wide",
    "gemma4_moe",
    "minimax_m3",
    "minimax_m3_cover",
    "step3p7",
];

/// Fixtures carrying an MTP layer (scripts/fixture_mtp.py), each with its source family: the
/// `--draft mtp` checks run over them.
pub const MTP_FIXTURES: [(&str, &str); 6] = [
    ("glm4_moe_mtp", "glm4_moe"),
    ("deepseek_v3_mtp", "deepseek_v3"),
    ("glm_moe_dsa_mtp", "glm_moe_dsa"),
    ("qwen3_next_mtp", "qwen3_next"),
    ("qwen3_5_mtp", "qwen3_5"),
    ("step3p7_mtp", "step3p7"),
];

/// FP8 fixtures (scripts/fixture_fp8.py), each with the family it quantizes: block-scaled dense
/// and MoE, compressed-tensors per channel, and the releases' layouts of GLM-4.5, MiniMax-M2,
/// DeepSeek-V3 (MLA) and DeepSeek-V3.2 (MLA and its indexer).
pub const FP8_FIXTURES: [(&str, &str); 7] = [
    ("qwen3_fp8", "qwen3"),
    ("qwen3_moe_fp8", "qwen3_moe"),
    ("qwen3_ct_fp8", "qwen3"),
    ("glm4_moe_fp8", "glm4_moe"),
    ("minimax_m2_fp8", "minimax_m2"),
    ("deepseek_v3_fp8", "deepseek_v3"),
    ("deepseek_v32_fp8", "deepseek_v32"),
];

/// Fixture families with recurrent layers (per-sequence state slots): golden and chunked ==
/// whole over [`Runner`](tf_engine::Runner) like the others; the engine checks list them where
/// they run them.
pub const HYBRIDS: &[&str] = &["lfm2", "lfm3", "lfm2_moe", "nemotron_h", "nemotron_h_moe", "qwen3_5", "qwen3_next"];

/// Fixture families (not hybrids) whose greedy continuations of the repetitive prompts do not
/// repeat their motifs (Step's 4-token sliding window), so no n-gram draft is ever accepted;
/// `check_self_drafting_accepts_all` runs their accept path instead.
pub const NGRAM_UNACCEPTED: [&str; 1] = ["step3p7"];

/// Every fixture family: [`FAMILIES`] then [`HYBRIDS`].
pub fn all_families() -> impl Iterator<Item = &'static str> {
    FAMILIES.into_iter().chain(HYBRIDS.iter().copied())
}

/// Fixture families the CUDA backend refuses at load: none (gpt-oss's attention sinks run the
/// host default there, its expert biases the host-driven expert path).
pub const NOT_ON_CUDA: [&str; 0] = [];

/// Whether the CUDA backend runs `family` (not in [`NOT_ON_CUDA`]).
pub fn on_cuda(family: &str) -> bool {
    !NOT_ON_CUDA.contains(&family)
}

/// The fixture families the CUDA backend runs: [`all_families`] less [`NOT_ON_CUDA`].
pub fn cuda_families() -> impl Iterator<Item = &'static str> {
    all_families().filter(|f| on_cuda(f))
}

/// Early-exit drafting cases: (family, layers that draft).
pub const EARLY_EXIT: [(&str, usize); 10] = [
    ("gemma3", 2),
    ("qwen3", 1),
    ("qwen3_moe", 1),
    ("llama", 1),
    ("glm4_moe", 2),
    ("deepseek_v3", 2),
    ("glm_moe_dsa", 2),
    ("gemma4", 2),
    ("gemma4_kvshare", 5),
    ("step3p7", 2),
];

/// Draft-model cases: (target, draft model), same vocabulary, different weights.
pub const DRAFT_MODELS: [(&str, &str); 2] = [("qwen3", "llama"), ("gemma3", "qwen3")];

/// One request's output: (token id, logprob bits) per generated token.
pub type Output = Vec<(u32, u32)>;

/// `$TF_FIXTURES` when set (test binaries carried to another machine), else the repo's fixtures.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("TF_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures"))
}

/// One family's fixture directory.
pub fn fixture(family: &str) -> PathBuf {
    fixtures_dir().join(family)
}

/// An engine config: 16-token blocks, room for 64 sequences, no drafting.
pub fn config(num_blocks: usize, max_round_tokens: usize, prefill_chunk: usize, prefix_cache: bool) -> EngineConfig {
    let sched = SchedulerConfig { max_num_seqs: 64, max_round_tokens, prefill_chunk, prefix_cache };
    EngineConfig { num_blocks, block_size: 16, sched, draft: Default::default(), overlap: true }
}

/// Opens `family`'s fixture on a fresh backend and starts an engine thread over it.
pub fn engine<B: Backend + 'static>(new_backend: &dyn Fn() -> B, family: &str, cfg: EngineConfig) -> EngineHandle {
    engine_with_drafter(new_backend, family, None, cfg)
}

/// Like [`engine`], with the `drafter` fixture (if any) loaded as the draft model.
pub fn engine_with_drafter<B: Backend + 'static>(
    new_backend: &dyn Fn() -> B,
    family: &str,
    drafter: Option<&str>,
    cfg: EngineConfig,
) -> EngineHandle {
    let backend = new_backend();
    let open = |f: &str| Model::open(&fixture(f), &backend).unwrap_or_else(|e| panic!("{f}: {e}"));
    let model = open(family);
    let open_drafter = |d: &str| DraftNet::open(&fixture(d), &model, &backend).unwrap_or_else(|e| panic!("{d}: {e}"));
    let drafter = drafter.map(open_drafter);
    spawn_with_drafter(model, drafter, backend, cfg).unwrap_or_else(|e| panic!("{family}: engine: {e}")).0
}

/// One request of a check.
#[derive(Clone, Debug)]
pub struct Req {
    /// Prompt ids (checked against the engine's vocabulary on submission).
    pub prompt: Vec<i64>,
    /// Sampling.
    pub params: SamplingParams,
    /// Tokens to generate (EOS is ignored, so exactly this many).
    pub max_tokens: usize,
    /// Top alternatives asked for, so the logprob path runs too (`None`: no logprobs, so plain
    /// greedy rounds may pick on the backend).
    pub top_logprobs: Option<usize>,
    /// Whether the engine may draft for it.
    pub draft: bool,
}

/// Submits `reqs` at once and collects each one's output, in order.
pub fn run(h: &EngineHandle, reqs: &[Req]) -> Vec<Output> {
    let out =
        |events: Vec<TokenEvent>| events.iter().map(|t| (t.id, t.logprob.map_or(NO_LOGPROB, f32::to_bits))).collect();
    run_events(h, reqs).into_iter().map(out).collect()
}

/// Submits `reqs` at once and collects each one's token events, in order.
pub fn run_events(h: &EngineHandle, reqs: &[Req]) -> Vec<Vec<TokenEvent>> {
    run_events_stopping(h, reqs, &vec![Vec::new(); reqs.len()])
}

/// [`run_events`] with `stops[i]` as request `i`'s stop ids.
pub fn run_events_stopping(h: &EngineHandle, reqs: &[Req], stops: &[Vec<i64>]) -> Vec<Vec<TokenEvent>> {
    let vocab = h.session_layout.vocab;
    let rxs: Vec<_> = reqs
        .iter()
        .zip(stops)
        .map(|(r, stop)| {
            let (tx, rx) = channel();
            let req = GenRequest {
                prompt: vocab.check(&r.prompt).expect("test prompts are inside the vocabulary"),
                params: r.params.clone(),
                max_tokens: r.max_tokens,
                stop_ids: vocab.check(stop).expect("test stop ids are inside the vocabulary"),
                ignore_eos: true,
                top_logprobs: r.top_logprobs,
                prompt_logprobs: None,
                sink: Box::new(move |e| tx.send(e).is_ok()),
                cancel: Arc::new(AtomicBool::new(false)),
                draft: r.draft,
                constraint: None,
            };
            assert!(h.submit(req), "the engine has stopped");
            rx
        })
        .collect();
    rxs.into_iter().map(collect).collect()
}

/// Runs each of `reqs` alone, one after another.
pub fn run_each(h: &EngineHandle, reqs: &[Req]) -> Vec<Output> {
    reqs.iter().map(|r| run(h, std::slice::from_ref(r)).remove(0)).collect()
}

/// The logprob slot of a token whose request asked for no logprobs.
pub const NO_LOGPROB: u32 = u32::MAX;

fn collect(rx: std::sync::mpsc::Receiver<Event>) -> Vec<TokenEvent> {
    let mut out = Vec::new();
    for e in rx {
        match e {
            Event::Token(t) => out.push(t),
            Event::Done { .. } => return out,
            Event::Error(m) => panic!("{m}"),
            Event::PromptLogprobs(_) | Event::Scheduled(_) => {}
        }
    }
    panic!("the engine dropped a request without finishing it")
}

/// Greedy when `seed` is `None`, else sampling at `temperature` with `top_k`/`top_p` keyed by the seed.
pub fn sampling(seed: Option<u64>, temperature: f32, top_k: u32, top_p: f32) -> SamplingParams {
    let mut p = SamplingParams::default();
    if let Some(seed) = seed {
        (p.temperature, p.top_k, p.top_p, p.seed) = (temperature, top_k, top_p, seed);
    }
    p
}

/// Request `i` of the mixed set: 3 to 42 prompt ids, 6 to 16 tokens, greedy or seeded top-p.
pub fn mixed_request(i: usize, seeded: bool) -> Req {
    let prompt = (0..(3 + i * 7 % 40)).map(|j| ((i * 131 + j * 17) % 500) as i64).collect();
    mixed_request_for(i, prompt, seeded)
}

/// Request `i`'s sampling and length from the mixed set, over another prompt; every third asks
/// for no logprobs (unseeded, those rounds may pick greedily on the backend).
pub fn mixed_request_for(i: usize, prompt: Vec<i64>, seeded: bool) -> Req {
    let params = sampling(seeded.then_some(1000 + i as u64), 0.9, 0, 0.95);
    let top_logprobs = (!i.is_multiple_of(3)).then_some(2);
    Req { prompt, params, max_tokens: 6 + i % 11, top_logprobs, draft: false }
}

/// Request `i` of the repetitive set: code-edit-like prompts that prompt lookup can draft from.
/// Odd requests add penalties that favour repeats (so drafts copying them are accepted and each
/// verify row's history counts); every third asks for no logprobs (so its rounds, when alone,
/// sample from the backend's candidates, verify rounds too); every fourth from the third on
/// suppresses two motif ids until six tokens are out (`min_tokens`).
pub fn repetitive_request(i: usize, seeded: bool, draft: bool) -> Req {
    let motif: Vec<i64> = (0..(3 + i % 5)).map(|j| ((i * 53 + j * 19) % 470) as i64).collect();
    let prompt = motif.iter().cycle().take(12 + i % 17).copied().collect();
    let mut params = sampling(seeded.then_some(77 + i as u64), 0.7, 20, 1.0);
    if i % 2 == 1 {
        (params.repetition_penalty, params.frequency_penalty) = (0.9, -0.4);
    }
    if i % 4 == 2 {
        // vLLM's min_tokens: the motif's first two ids (which a copying model draws) are
        // suppressed for the first six tokens.
        (params.min_tokens, params.suppress) = (6, vec![motif[0] as u32, motif[1] as u32]);
    }
    let top_logprobs = (!i.is_multiple_of(3)).then_some(1);
    Req { prompt, params, max_tokens: 12 + i % 9, top_logprobs, draft }
}

/// `len` ids of a stride-29 ramp, shifted by `salt`.
pub fn ramp(len: usize, salt: usize) -> Vec<i64> {
    (0..len).map(|j| ((j * 29 + salt * 7) % 470) as i64).collect()
}

/// A 10-token request for `prompt`: greedy, or sampled at temperature 0.8 keyed by `seed`.
pub fn ten_tokens(prompt: Vec<i64>, seed: Option<u64>) -> Req {
    Req { prompt, params: sampling(seed, 0.8, 0, 1.0), max_tokens: 10, top_logprobs: Some(1), draft: false }
}
