//! Saved sessions through the real engine: a session saved by one engine and restored into a
//! fresh one (as after a restart) serves a prompt extending it exactly as a cold engine does;
//! corrupted or foreign session files are refused while the engine keeps serving.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use tf_cpu::CpuBackend;
use tf_engine::engine::{EngineConfig, EngineHandle, Event, GenRequest, spawn};
use tf_engine::sampler::SamplingParams;
use tf_engine::scheduler::SchedulerConfig;
use tf_engine::session::{self, confined_path};
use tf_models::Model;

fn engine(family: &str, num_blocks: usize, prefix_cache: bool) -> EngineHandle {
    let b = CpuBackend::new(2).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family);
    let m = Model::open(&dir, &b).unwrap();
    let sched = SchedulerConfig { max_num_seqs: 16, max_round_tokens: 256, prefill_chunk: 64, prefix_cache };
    spawn(m, b, EngineConfig { num_blocks, block_size: 16, sched, draft: Default::default() }).unwrap().0
}

/// Greedy and seeded outputs (token, logprob bits) for `prompt`.
fn generate(h: &EngineHandle, prompt: &[i64], seed: Option<u64>) -> Vec<(u32, u32)> {
    let mut params = SamplingParams::default();
    if let Some(s) = seed {
        params.temperature = 0.8;
        params.seed = s;
    }
    let (tx, rx) = channel();
    let req = GenRequest {
        prompt: tf_core::Vocab::new(512).unwrap().check(prompt).unwrap(),
        params,
        max_tokens: 10,
        stop_ids: Default::default(),
        ignore_eos: true,
        top_logprobs: Some(1),
        sink: Box::new(move |e| tx.send(e).is_ok()),
        cancel: Arc::new(AtomicBool::new(false)),
        draft: false,
    };
    assert!(h.submit(req));
    let mut out = Vec::new();
    for e in rx {
        match e {
            Event::Token(t) => out.push((t.id, t.logprob.unwrap().to_bits())),
            Event::Done { .. } => break,
            Event::Error(m) => panic!("{m}"),
        }
    }
    out
}

fn prompt(len: usize, salt: usize) -> Vec<i64> {
    (0..len).map(|j| ((j * 29 + salt * 7) % 470) as i64).collect()
}

#[test]
fn restored_session_equals_fresh_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    for (family, seed) in [("qwen3", None), ("gemma3", Some(5)), ("llama", Some(9))] {
        let base = prompt(45, 1);
        let path = confined_path(dir.path(), family).unwrap();
        let first = engine(family, 64, true);
        let vocab = tf_core::Vocab::new(512).unwrap();
        assert_eq!(first.save_session(vocab.check(&base).unwrap(), path.clone()), Ok(32));
        first.shutdown();

        let restarted = engine(family, 64, true);
        let checked = session::read(&path, &restarted.session_layout).unwrap();
        assert_eq!(restarted.restore_session(checked), Ok(32));
        let cold = engine(family, 64, false);
        for extra in [0usize, 1, 5, 20] {
            let mut p = base.clone();
            p.extend(prompt(extra, 3));
            assert_eq!(generate(&restarted, &p, seed), generate(&cold, &p, seed), "{family}: +{extra}");
        }
        let hits = restarted.stats.prefix_hit_tokens.load(Ordering::Relaxed);
        assert!(hits >= 4 * 32, "{family}: restored blocks were used ({hits})");
    }
}

#[test]
fn bad_session_files_are_refused_and_the_engine_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = tf_core::Vocab::new(512).unwrap();
    let h = engine("qwen3", 64, true);
    let good = confined_path(dir.path(), "good").unwrap();
    assert_eq!(h.save_session(vocab.check(&prompt(40, 2)).unwrap(), good.clone()), Ok(32));
    let layout = h.session_layout;
    let bytes = std::fs::read(&good).unwrap();
    let refuse = |name: &str, data: &[u8], needle: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, data).unwrap();
        let err = session::read(&p, &layout).unwrap_err().to_string();
        assert!(err.contains(needle), "{name}: {err}");
    };
    refuse("truncated", &bytes[..bytes.len() - 100], "truncated");
    refuse("short", &bytes[..20], "shorter than the header");
    let mut past_rows = bytes.clone();
    past_rows[45..49].copy_from_slice(&512u32.to_le_bytes());
    refuse("ids", &past_rows, "outside the vocabulary");
    let mut too_long = bytes.clone();
    too_long[37..45].copy_from_slice(&(1u64 << 40).to_le_bytes());
    refuse("long", &too_long, "at most");
    let mut magic = bytes.clone();
    magic[0] = b'X';
    refuse("magic", &magic, "magic");
    // Saved from another model with the same shapes: the fingerprint differs.
    let other = engine("qwen3_moe", 64, true);
    let theirs = confined_path(dir.path(), "theirs").unwrap();
    assert_eq!(other.save_session(vocab.check(&prompt(40, 2)).unwrap(), theirs.clone()), Ok(32));
    assert!(session::read(&theirs, &layout).unwrap_err().to_string().contains("another model"));
    for name in ["../good", "/tmp/x", "a/b", ".."] {
        assert!(confined_path(dir.path(), name).is_err(), "{name}");
    }
    // Too few tokens for a block is refused by the engine, which then serves normally.
    assert!(h.save_session(vocab.check(&[1, 2, 3]).unwrap(), dir.path().join("tiny.tfsession")).is_err());
    assert_eq!(generate(&h, &prompt(20, 4), None).len(), 10);
}
