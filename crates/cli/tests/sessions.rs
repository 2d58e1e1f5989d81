//! Saved sessions through the real engine on the CPU backend: a session saved by one engine and
//! restored into a fresh one (as after a restart) serves a prompt extending it exactly as a cold
//! engine does (the check lives in tf-testkit; crates/cuda/tests/engine.rs runs it on the GPU);
//! corrupted or foreign session files are refused while the engine keeps serving.

use tf_cpu::CpuBackend;
use tf_engine::session::{self, confined_path};
use tf_testkit::{FAMILIES, check_session_restore_equals_fresh, config, engine, ramp, run, ten_tokens};

fn cpu() -> CpuBackend {
    CpuBackend::new(2).unwrap()
}

#[test]
fn restored_session_equals_fresh_after_restart() {
    for family in FAMILIES {
        for seed in [None, Some(5)] {
            check_session_restore_equals_fresh(&cpu, family, seed);
        }
    }
}

#[test]
fn a_model_whose_pools_differ_in_width_saves_each_at_its_own() {
    // gemma4_wide's full layers keep 64 values a slot, its sliding layers 32 (the restore itself
    // is checked with every family above).
    let e = engine(&cpu, "gemma4_wide", config(64, 256, 64, true));
    assert_eq!(e.session_layout.kv_widths, [32, 64, 32, 64]);
    let dir = tempfile::tempdir().unwrap();
    let path = confined_path(dir.path(), "wide").unwrap();
    let ids = e.session_layout.vocab.check(&ramp(40, 3)).unwrap();
    assert_eq!(e.save_session(ids, path.clone()), Ok(32));
    let h = session::inspect(&path).unwrap();
    assert_eq!((h.kv_widths, h.num_tokens), (vec![32, 64, 32, 64], 32));
    let bytes = std::fs::read(&path).unwrap().len();
    let kv = 2 * 32 * (32 + 64 + 32 + 64) * e.session_layout.kv_dtype.size();
    assert_eq!(bytes, session::HEADER + 32 * 4 + 4 * session::KV_WIDTH_BYTES + kv);
}

#[test]
fn bad_session_files_are_refused_and_the_engine_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let h = engine(&cpu, "qwen3", config(64, 256, 64, true));
    let vocab = h.session_layout.vocab;
    let good = confined_path(dir.path(), "good").unwrap();
    assert_eq!(h.save_session(vocab.check(&ramp(40, 2)).unwrap(), good.clone()), Ok(32));
    let layout = h.session_layout.clone();
    let bytes = std::fs::read(&good).unwrap();
    let refuse = |name: &str, data: &[u8], needle: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, data).unwrap();
        let err = session::read(&p, &layout).unwrap_err().to_string();
        assert!(err.contains(needle), "{name}: {err}");
    };
    refuse("truncated", &bytes[..bytes.len() - 100], "truncated");
    refuse("short", &bytes[..20], "shorter than the header");
    // An id past the rows, digest resealed: the vocabulary check still refuses it.
    let mut past_rows = bytes.clone();
    past_rows[session::HEADER..session::HEADER + 4].copy_from_slice(&512u32.to_le_bytes());
    session::reseal(&mut past_rows);
    refuse("ids", &past_rows, "outside the vocabulary");
    let mut flipped = bytes.clone();
    let mid = bytes.len() / 2;
    flipped[mid - 32..mid + 32].iter_mut().for_each(|b| *b ^= 0xff);
    refuse("flipped", &flipped, "digest mismatch");
    let mut nan = bytes.clone();
    let at = bytes.len() - 64;
    nan[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    session::reseal(&mut nan);
    refuse("nan", &nan, "non-finite");
    let mut too_long = bytes.clone();
    too_long[37..45].copy_from_slice(&(1u64 << 40).to_le_bytes());
    refuse("long", &too_long, "at most");
    let mut magic = bytes.clone();
    magic[0] = b'X';
    refuse("magic", &magic, "magic");
    // Saved from another model with the same shapes: the fingerprint differs.
    let other = engine(&cpu, "qwen3_moe", config(64, 256, 64, true));
    let theirs = confined_path(dir.path(), "theirs").unwrap();
    assert_eq!(other.save_session(vocab.check(&ramp(40, 2)).unwrap(), theirs.clone()), Ok(32));
    assert!(session::read(&theirs, &layout).unwrap_err().to_string().contains("another model"));
    for name in ["../good", "/tmp/x", "a/b", ".."] {
        assert!(confined_path(dir.path(), name).is_err(), "{name}");
    }
    // Too few tokens for a block is refused by the engine, which then serves normally.
    assert!(h.save_session(vocab.check(&[1, 2, 3]).unwrap(), dir.path().join("tiny.tfsession")).is_err());
    assert_eq!(run(&h, &[ten_tokens(ramp(20, 4), None)])[0].len(), 10);
}
