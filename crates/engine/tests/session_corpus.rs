//! The session fuzz target's seed corpus (tests/corpus/session): valid files of each KV dtype,
//! one with state layers, and one file per refusal rule, written by an ignored test and checked current and judged by name
//! (`valid_*` verifies, `bad_*` is refused).

use std::path::{Path, PathBuf};
use tf_backend::StateShape;
use tf_core::{DType, Vocab};
use tf_engine::session::{self, CheckedSession, HEADER, SessionLayout};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/session")
}

/// The bytes `session::write` gives for a 4-token session of `dtype` with `state` layers.
fn saved(dtype: DType, state: &[StateShape]) -> Vec<u8> {
    let vocab = Vocab::new(100).unwrap();
    let l = SessionLayout {
        fingerprint: 0x5eed,
        kv_dtype: dtype,
        ranks: 1,
        kv_widths: vec![4, 8],
        block_size: 2,
        max_tokens: 8,
        vocab,
        state: state.to_vec(),
    };
    // Small positive values in every dtype: the top byte of each element stays below 0x3f.
    let layers =
        (0..2).map(|i| (0..2 * 2 * l.half_block_bytes(i)).map(|b| ((b * 5 + i) % 0x3f) as u8).collect()).collect();
    let state =
        state.iter().map(|s| (0..s.slot_len()).flat_map(|v| (v as f32 - 2.5).to_le_bytes()).collect()).collect();
    let s = CheckedSession { ids: vocab.check(&[1, 2, 3, 4]).unwrap(), layers, state };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.tfsession");
    session::write(&p, &l, &s).unwrap();
    std::fs::read(&p).unwrap()
}

/// Valid files and one corrupted file per rule.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let good = saved(DType::F32, &[]);
    let shapes = [
        StateShape { num_slots: 1, conv_channels: 2, conv_width: 3, rec_len: 4 },
        StateShape { num_slots: 1, conv_channels: 0, conv_width: 0, rec_len: 3 },
    ];
    let hybrid = saved(DType::F32, &shapes);
    let edit_hybrid = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = hybrid.clone();
        f(&mut b);
        session::reseal(&mut b);
        b
    };
    let table = HEADER + 16;
    let len = good.len();
    let edit = |f: &dyn Fn(&mut Vec<u8>), resealed: bool| {
        let mut b = good.clone();
        f(&mut b);
        if resealed {
            session::reseal(&mut b);
        }
        b
    };
    // The widths' table (2 layers) after the (empty) state table, then the K/V.
    let widths = HEADER + 16;
    let kv = widths + 8;
    vec![
        ("valid_f32.tfsession", good.clone()),
        ("valid_f16.tfsession", saved(DType::F16, &[])),
        ("valid_bf16.tfsession", saved(DType::BF16, &[])),
        ("valid_state.tfsession", hybrid.clone()),
        (
            "bad_state_nan_resealed.tfsession",
            edit_hybrid(&|b| {
                let at = b.len() - 4;
                b[at..].copy_from_slice(&f32::INFINITY.to_le_bytes())
            }),
        ),
        (
            "bad_state_table_resealed.tfsession",
            edit_hybrid(&|b| b[table..table + 4].copy_from_slice(&9u32.to_le_bytes())),
        ),
        ("bad_state_count_resealed.tfsession", edit_hybrid(&|b| b[45..49].copy_from_slice(&u32::MAX.to_le_bytes()))),
        ("bad_version_2.tfsession", edit(&|b| b[8..12].copy_from_slice(&2u32.to_le_bytes()), false)),
        ("bad_version_3.tfsession", edit(&|b| b[8..12].copy_from_slice(&3u32.to_le_bytes()), false)),
        ("bad_version_4.tfsession", edit(&|b| b[8..12].copy_from_slice(&4u32.to_le_bytes()), false)),
        ("bad_width_zero_resealed.tfsession", edit(&|b| b[widths + 4..widths + 8].fill(0), true)),
        (
            "bad_width_first_resealed.tfsession",
            edit(&|b| b[widths..widths + 4].copy_from_slice(&5u32.to_le_bytes()), true),
        ),
        ("bad_width_count_resealed.tfsession", edit(&|b| b[21..25].copy_from_slice(&3u32.to_le_bytes()), true)),
        (
            "bad_payload_flipped.tfsession",
            edit(&|b| b[len / 2 - 8..len / 2 + 8].iter_mut().for_each(|x| *x ^= 0xa5), false),
        ),
        ("bad_nan_resealed.tfsession", edit(&|b| b[kv..kv + 4].copy_from_slice(&f32::NAN.to_le_bytes()), true)),
        ("bad_truncated.tfsession", good[..len - 1].to_vec()),
        ("bad_appended.tfsession", edit(&|b| b.push(0), false)),
        ("bad_digest_zeroed.tfsession", edit(&|b| b[HEADER - 32..HEADER].fill(0), false)),
        ("bad_version_1.tfsession", edit(&|b| b[8..12].copy_from_slice(&1u32.to_le_bytes()), false)),
        ("bad_magic.tfsession", edit(&|b| b[0] = b'X', false)),
        ("bad_zero_dim_resealed.tfsession", edit(&|b| b[25..29].fill(0), true)),
        ("bad_odd_tokens_resealed.tfsession", edit(&|b| b[37..45].copy_from_slice(&3u64.to_le_bytes()), true)),
        ("bad_short_header.tfsession", good[..20].to_vec()),
    ]
}

/// Rewrites tests/corpus/session (run with
/// `cargo test -p tf-engine --test session_corpus -- --ignored`).
#[test]
#[ignore = "rewrites the committed fuzz seed corpus"]
fn write_seed_corpus() {
    std::fs::create_dir_all(corpus_dir()).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(corpus_dir().join(name), bytes).unwrap();
    }
}

#[test]
fn seed_corpus_is_current_and_judged_by_name() {
    let names: Vec<_> = seeds().iter().map(|(n, _)| *n).collect();
    for (name, bytes) in seeds() {
        let path = corpus_dir().join(name);
        let on_disk = std::fs::read(&path).unwrap_or_default();
        assert_eq!(on_disk, bytes, "{name} is stale: run the ignored write_seed_corpus test");
        let verdict = session::inspect(&path);
        assert_eq!(verdict.is_ok(), name.starts_with("valid_"), "{name}: {verdict:?}");
    }
    let on_disk = std::fs::read_dir(corpus_dir()).unwrap().count();
    assert_eq!(on_disk, names.len(), "files in the corpus that no seed writes");
}
