//! Concurrent equals solo, on the CPU backend through the real engine thread: a request's
//! tokens and logprobs are bit-identical alone and among 1, 4 and 16 others of different
//! lengths, greedy and seeded; a tiny KV pool that forces preemption changes nothing either.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::channel;
use tf_cpu::CpuBackend;
use tf_engine::engine::{EngineConfig, Event, GenRequest, spawn};
use tf_engine::sampler::SamplingParams;
use tf_engine::scheduler::SchedulerConfig;
use tf_models::Model;

type Output = Vec<(u32, u32)>; // (token, logprob bits)

fn engine(family: &str, num_blocks: usize, chunk: usize) -> tf_engine::engine::EngineHandle {
    engine_with(family, num_blocks, chunk, true)
}

fn engine_with(family: &str, num_blocks: usize, chunk: usize, prefix_cache: bool) -> tf_engine::engine::EngineHandle {
    let b = CpuBackend::new(2).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family);
    let m = Model::open(&dir, &b).unwrap();
    let sched = SchedulerConfig { max_num_seqs: 64, max_round_tokens: 256, prefill_chunk: chunk, prefix_cache };
    let (h, _thread) =
        spawn(m, b, EngineConfig { num_blocks, block_size: 16, sched, draft: Default::default() }).unwrap();
    h
}

fn prompt(i: usize) -> Vec<i64> {
    (0..(3 + i * 7 % 40)).map(|j| ((i * 131 + j * 17) % 500) as i64).collect()
}

fn params(i: usize, seeded: bool) -> SamplingParams {
    let mut p = SamplingParams::default();
    if seeded {
        p.temperature = 0.9;
        p.top_p = 0.95;
        p.seed = 1000 + i as u64;
    }
    p
}

/// Submits requests `which` at once and collects each one's output.
fn run(h: &tf_engine::engine::EngineHandle, which: &[usize], seeded: bool) -> Vec<Output> {
    let prompts: Vec<(usize, Vec<i64>)> = which.iter().map(|&i| (i, prompt(i))).collect();
    run_prompts(h, &prompts, seeded)
}

/// Submits `(request index, prompt)` pairs at once and collects each one's output.
fn run_prompts(h: &tf_engine::engine::EngineHandle, prompts: &[(usize, Vec<i64>)], seeded: bool) -> Vec<Output> {
    let vocab = tf_core::Vocab::new(512).unwrap();
    let rxs: Vec<_> = prompts
        .iter()
        .map(|(i, p)| {
            let (i, (tx, rx)) = (*i, channel());
            let req = GenRequest {
                prompt: vocab.check(p).unwrap(),
                params: params(i, seeded),
                max_tokens: 6 + i % 11,
                stop_ids: Default::default(),
                ignore_eos: true,
                top_logprobs: Some(2),
                sink: Box::new(move |e| tx.send(e).is_ok()),
                cancel: Arc::new(AtomicBool::new(false)),
                draft: false,
            };
            assert!(h.submit(req));
            rx
        })
        .collect();
    rxs.into_iter()
        .map(|rx| {
            let mut out = Vec::new();
            for e in rx {
                match e {
                    Event::Token(t) => out.push((t.id, t.logprob.unwrap().to_bits())),
                    Event::Done { .. } => break,
                    Event::Error(m) => panic!("{m}"),
                }
            }
            out
        })
        .collect()
}

fn check(family: &str, seeded: bool) {
    let h = engine(family, 256, 512);
    let solo: Vec<Output> = (0..17).map(|i| run(&h, &[i], seeded).remove(0)).collect();
    for group in [vec![0, 1], vec![2, 3, 4, 5, 6], (0..17).collect::<Vec<_>>()] {
        let together = run(&h, &group, seeded);
        for (k, &i) in group.iter().enumerate() {
            assert_eq!(together[k], solo[i], "{family} seeded={seeded}: request {i} in a group of {}", group.len());
        }
    }
    // A pool too small for everyone at once (preemption + recompute) and small chunks.
    let tight = engine(family, 12, 5);
    let together = run(&tight, &(0..17).collect::<Vec<_>>(), seeded);
    for (i, out) in together.iter().enumerate() {
        assert_eq!(out, &solo[i], "{family} seeded={seeded}: request {i} under preemption");
    }
}

#[test]
fn concurrent_equals_solo_greedy() {
    for family in ["qwen3", "gemma3", "qwen3_moe", "llama"] {
        check(family, false);
    }
}

#[test]
fn concurrent_equals_solo_seeded() {
    for family in ["qwen3", "gemma3"] {
        check(family, true);
    }
}

/// Resumed equals fresh: prompts sharing prefixes of many lengths (block-aligned and not) give,
/// after the cache holds the prefix, exactly what an engine without a prefix cache gives.
#[test]
fn prefix_cache_hits_equal_fresh_prefill() {
    for (family, seeded) in [("qwen3", false), ("gemma3", true), ("llama", false)] {
        let base: Vec<i64> = (0..50).map(|j| (j * 37 % 470) as i64).collect();
        let variants: Vec<(usize, Vec<i64>)> = [15usize, 16, 17, 31, 32, 33, 48, 50]
            .iter()
            .enumerate()
            .map(|(k, &len)| {
                let mut p = base[..len].to_vec();
                p.extend([(400 + k) as i64, 7, 9]);
                (k, p)
            })
            .chain(std::iter::once((99, base.clone())))
            .collect();
        let fresh = engine_with(family, 256, 512, false);
        let want: Vec<Output> =
            variants.iter().map(|v| run_prompts(&fresh, std::slice::from_ref(v), seeded).remove(0)).collect();
        let cached = engine_with(family, 256, 7, true);
        run_prompts(&cached, &[(99, base.clone())], seeded);
        for (v, w) in variants.iter().zip(&want) {
            assert_eq!(&run_prompts(&cached, std::slice::from_ref(v), seeded)[0], w, "{family}: prefix {}", v.1.len());
        }
        let hits = cached.stats.prefix_hit_tokens.load(std::sync::atomic::Ordering::Relaxed);
        assert!(hits >= 16 * 8, "{family}: the cache was used ({hits} tokens)");
        // All together, sharing blocks while running.
        let together = run_prompts(&cached, &variants, seeded);
        assert_eq!(together, want, "{family}: concurrent prefix sharing");
    }
}
