//! `generate --session` and `session inspect` through the real binary: the first run saves, a
//! second process restores the file into the prefix cache and prints what a run without the
//! session prints (greedy and seeded, ids and text, one rank or two); corrupted, foreign or badly
//! named sessions, and one saved by another rank count, exit 2 with one line.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family)
}

fn tf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorfold")).args(args).output().unwrap()
}

fn join(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// `generate --json` of `ids` with `extra` switches: the document and stderr.
fn generate(family: &str, ids: &[i64], extra: &[&str]) -> (Value, String) {
    let dir = fixture(family);
    let ids = join(ids);
    let mut args = vec!["generate", "--model", dir.to_str().unwrap(), "--ids", &ids, "--max-tokens", "12"];
    args.extend_from_slice(&["--ignore-eos", "--json", "--threads", "2"]);
    args.extend_from_slice(extra);
    let out = tf(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{family}: {stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

fn ids_of(doc: &Value) -> Vec<i64> {
    doc["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
}

/// Exit 2, nothing on stdout, one `error:` line naming `needle`.
fn assert_refused(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: ") && stderr.contains(needle), "{stderr}");
}

#[test]
fn a_restored_session_prints_what_a_run_without_it_prints() {
    let sessions = tempfile::tempdir().unwrap();
    let dir = sessions.path().to_str().unwrap();
    for family in ["qwen3", "gemma3"] {
        for (name, sampling) in [("greedy", vec![]), ("seeded", vec!["--temperature", "0.8", "--seed", "7"])] {
            let session = format!("{family}-{name}");
            let with_session: Vec<&str> =
                sampling.iter().copied().chain(["--session", &session, "--session-dir", dir]).collect();
            let prompt: Vec<i64> = (0..40).map(|i| (i * 37 % 470 + 3) as i64).collect();
            let (plain, _) = generate(family, &prompt, &sampling);
            let (first, log) = generate(family, &prompt, &with_session);
            assert_eq!(first, plain, "{family} {name}: a cold session run");
            assert!(log.contains("saved 48 tokens"), "{log}");
            // The next turn: the whole first exchange plus a new message, in a new process.
            let mut next = prompt.clone();
            next.extend(ids_of(&first));
            next.extend([7, 8, 9, 10, 11]);
            let (plain, _) = generate(family, &next, &sampling);
            let (resumed, log) = generate(family, &next, &with_session);
            assert_eq!(resumed, plain, "{family} {name}: restored equals fresh");
            assert!(log.contains("restored 48 tokens"), "{log}");
            assert!(log.contains("48 of 57 prompt tokens from the cache"), "{log}");
            assert!(log.contains("saved 64 tokens"), "{log}");
        }
    }
}

#[test]
fn bad_sessions_exit_2_with_one_line() {
    let sessions = tempfile::tempdir().unwrap();
    let dir = sessions.path().to_str().unwrap();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 11 % 470) as i64).collect();
    let save = |family: &str, name: &str| generate(family, &prompt, &["--session", name, "--session-dir", dir]);
    save("qwen3", "good");
    let good = sessions.path().join("good.tfsession");
    let inspect = tf(&["session", "inspect", good.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    for line in ["tokens: 48", "block size: 16", "kv dtype: f32", "fingerprint: ", "sha-256: ", "(verified)"] {
        assert!(text.contains(line), "{line} in {text}");
    }
    let qwen3 = fixture("qwen3");
    let against = tf(&["session", "inspect", good.to_str().unwrap(), "--model", qwen3.to_str().unwrap()]);
    assert!(against.status.success(), "{}", String::from_utf8_lossy(&against.stderr));

    let bytes = std::fs::read(&good).unwrap();
    let corrupt = sessions.path().join("corrupt.tfsession");
    std::fs::write(&corrupt, &bytes[..bytes.len() - 100]).unwrap();
    let ids = join(&prompt);
    let run = |name: &str| {
        let m = qwen3.to_str().unwrap();
        tf(&["generate", "--model", m, "--ids", &ids, "--json", "--session", name, "--session-dir", dir])
    };
    assert_refused(&run("corrupt"), "truncated");
    assert_refused(&tf(&["session", "inspect", corrupt.to_str().unwrap()]), "truncated");
    std::fs::write(&corrupt, b"GGUF and then some bytes that are no session at all").unwrap();
    assert_refused(&run("corrupt"), "not a TensorFold session file");
    assert_refused(&tf(&["session", "inspect", corrupt.to_str().unwrap()]), "not a TensorFold session file");
    let mut past_rows = bytes.clone();
    past_rows[tf_engine::session::HEADER..tf_engine::session::HEADER + 4].copy_from_slice(&100_000u32.to_le_bytes());
    tf_engine::session::reseal(&mut past_rows);
    std::fs::write(&corrupt, &past_rows).unwrap();
    assert_refused(&run("corrupt"), "outside the vocabulary");

    save("llama", "foreign");
    assert_refused(&run("foreign"), "another model");
    let foreign = sessions.path().join("foreign.tfsession");
    let m = qwen3.to_str().unwrap();
    assert_refused(&tf(&["session", "inspect", foreign.to_str().unwrap(), "--model", m]), "another model");
    assert_refused(&run("../good"), "must be 1-64 characters");
    assert_eq!(std::fs::read(&good).unwrap(), bytes, "refusals leave the good session alone");
}

#[test]
fn session_inspect_refuses_a_corrupted_payload_with_exit_2() {
    use tf_engine::session::reseal;
    let sessions = tempfile::tempdir().unwrap();
    let dir = sessions.path().to_str().unwrap();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 11 % 470) as i64).collect();
    generate("qwen3", &prompt, &["--session", "good", "--session-dir", dir]);
    let bytes = std::fs::read(sessions.path().join("good.tfsession")).unwrap();
    let len = bytes.len();
    let mut flipped = bytes.clone();
    flipped[len / 2 - 32..len / 2 + 32].iter_mut().for_each(|b| *b ^= 0xa5);
    let mut nan = bytes.clone();
    nan[len - 64..len - 60].copy_from_slice(&f32::NAN.to_le_bytes());
    let mut nan_resealed = nan.clone();
    reseal(&mut nan_resealed);
    let mut appended = bytes.clone();
    appended.push(0);
    let cases = [
        ("flipped", flipped, "digest mismatch"),
        ("nan", nan, "digest mismatch"),
        ("nan-resealed", nan_resealed, "non-finite"),
        ("truncated", bytes[..len - 1].to_vec(), "truncated or padded"),
        ("appended", appended, "truncated or padded"),
    ];
    let qwen3 = fixture("qwen3");
    let ids = join(&prompt);
    for (name, data, needle) in cases {
        let file = sessions.path().join(format!("{name}.tfsession"));
        std::fs::write(&file, &data).unwrap();
        assert_refused(&tf(&["session", "inspect", file.to_str().unwrap()]), needle);
        let m = qwen3.to_str().unwrap();
        assert_refused(&tf(&["session", "inspect", file.to_str().unwrap(), "--model", m]), needle);
        // `generate --session` refuses it before running anything, and leaves the file as it was.
        let run = tf(&["generate", "--model", m, "--ids", &ids, "--json", "--session", name, "--session-dir", dir]);
        assert_refused(&run, needle);
        assert_eq!(std::fs::read(&file).unwrap(), data, "{name}");
    }
    let fifo = sessions.path().join("fifo.tfsession");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    assert_refused(&tf(&["session", "inspect", fifo.to_str().unwrap()]), "not a regular file");
}

/// A copy of the `family` fixture whose largest tensor has one bit flipped in the byte in its
/// middle, more than 4 KiB from both of its ends.
fn one_byte_apart(family: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(family)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    let path = tmp.path().join("model.safetensors");
    let range = {
        let f = tf_formats::SafetensorsFile::open(&path).unwrap();
        let views = f.tensors().keys().map(|n| f.tensor(n).unwrap().unwrap());
        match views.max_by_key(|v| v.data.as_bytes().len()).unwrap().data {
            tf_formats::TensorBytes::Mapped(_, r) => r,
            tf_formats::TensorBytes::Owned(..) => panic!("a file's tensor is mapped"),
        }
    };
    assert!(range.len() > 16 * 1024, "the largest tensor is {} bytes", range.len());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(range.start + range.end) / 2] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    tmp
}

#[test]
fn a_session_from_weights_one_byte_apart_exits_2() {
    let sessions = tempfile::tempdir().unwrap();
    let dir = sessions.path().to_str().unwrap();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 13 % 470) as i64).collect();
    generate("qwen3", &prompt, &["--session", "a", "--session-dir", dir]);
    let file = sessions.path().join("a.tfsession");
    let other = one_byte_apart("qwen3");
    let m = other.path().to_str().unwrap();
    let f = file.to_str().unwrap();
    assert_refused(&tf(&["session", "inspect", f, "--model", m]), "saved from another model (fingerprint differs)");
    let ids = join(&prompt);
    let run = tf(&["generate", "--model", m, "--ids", &ids, "--json", "--session", "a", "--session-dir", dir]);
    assert_refused(&run, "saved from another model");
    let same = fixture("qwen3");
    assert!(tf(&["session", "inspect", f, "--model", same.to_str().unwrap()]).status.success());
}

/// `generate --session` under `--tensor-parallel-size 2`: every rank's part saved, restored in a
/// new process as a run without the session prints; one rank refuses that file by name.
#[test]
fn a_session_at_two_ranks_restores_in_a_new_process_and_one_rank_refuses_it() {
    let sessions = tempfile::tempdir().unwrap();
    let dir = sessions.path().to_str().unwrap();
    let tp = ["--device", "cpu", "--tensor-parallel-size", "2"];
    let with_session: Vec<&str> = tp.iter().copied().chain(["--session", "tp", "--session-dir", dir]).collect();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 29 % 470 + 5) as i64).collect();
    let (plain, _) = generate("qwen3_next", &prompt, &tp);
    let (first, log) = generate("qwen3_next", &prompt, &with_session);
    assert_eq!(first, plain, "a cold session run at two ranks");
    assert!(log.contains("saved 48 tokens"), "{log}");
    let mut next = prompt.clone();
    next.extend(ids_of(&first));
    next.extend([7, 8, 9]);
    let (plain, _) = generate("qwen3_next", &next, &tp);
    let (resumed, log) = generate("qwen3_next", &next, &with_session);
    assert_eq!(resumed, plain, "restored equals fresh at two ranks");
    assert!(log.contains("restored 48 tokens"), "{log}");
    let (m, ids) = (fixture("qwen3_next"), join(&next));
    let one = tf(&[
        "generate",
        "--model",
        m.to_str().unwrap(),
        "--ids",
        &ids,
        "--json",
        "--session",
        "tp",
        "--session-dir",
        dir,
    ]);
    assert_refused(&one, "--tensor-parallel-size 2");
}

/// A session saved with a bf16 KV cache restores into a bf16 run and prints what that run prints
/// without it; a run of another KV type (the default f32) refuses it naming the type to pass;
/// `--device ref` refuses a bf16 cache.
#[test]
fn a_half_kv_session_restores_into_its_own_type_only() {
    let sessions = tempfile::tempdir().unwrap();
    let dir = sessions.path().to_str().unwrap();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 29 % 470 + 5) as i64).collect();
    let half = ["--kv-cache-dtype", "bf16"];
    let with_session = ["--kv-cache-dtype", "bf16", "--session", "half", "--session-dir", dir];
    let (first, log) = generate("qwen3", &prompt, &with_session);
    assert!(log.contains("saved 48 tokens"), "{log}");
    let mut next = prompt.clone();
    next.extend(ids_of(&first));
    next.extend([7, 8, 9]);
    let (plain, _) = generate("qwen3", &next, &half);
    let (resumed, log) = generate("qwen3", &next, &with_session);
    assert_eq!(resumed, plain, "restored equals fresh with a bf16 cache");
    assert!(log.contains("restored 48 tokens"), "{log}");
    let inspect = tf(&["session", "inspect", sessions.path().join("half.tfsession").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&inspect.stdout).contains("kv dtype: bf16"));

    let (m, ids) = (fixture("qwen3"), join(&next));
    let run = |extra: &[&str]| {
        let mut args = vec!["generate", "--model", m.to_str().unwrap(), "--ids", &ids, "--json", "--threads", "2"];
        args.extend_from_slice(extra);
        tf(&args)
    };
    assert_refused(&run(&["--session", "half", "--session-dir", dir]), "restore it with --kv-cache-dtype bf16");
    assert_refused(&run(&["--device", "ref", "--kv-cache-dtype", "bf16"]), "the ref backend keeps a f32 KV cache");
    let (f16_run, _) = generate("qwen3", &prompt, &["--kv-cache-dtype", "f16"]);
    assert_eq!(ids_of(&f16_run).len(), 12, "an f16 cache runs too");
}

/// A q8_0 session restores into a q8_0 run and prints what that run prints without it, and
/// `inspect` names the type; a model whose heads are not whole blocks of 32 (llama's fixture,
/// heads of 16) is refused at start naming the types that fit it.
#[test]
fn a_quantized_kv_session_restores_and_partial_blocks_are_refused() {
    let sessions = tempfile::tempdir().unwrap();
    let dir = sessions.path().to_str().unwrap();
    let prompt: Vec<i64> = (0..40).map(|i| (i * 31 % 470 + 5) as i64).collect();
    let q8 = ["--kv-cache-dtype", "q8_0"];
    let with_session = ["--kv-cache-dtype", "q8_0", "--session", "q8", "--session-dir", dir];
    let (first, log) = generate("qwen3", &prompt, &with_session);
    assert!(log.contains("saved 48 tokens"), "{log}");
    let mut next = prompt.clone();
    next.extend(ids_of(&first));
    next.extend([7, 8, 9]);
    let (plain, _) = generate("qwen3", &next, &q8);
    let (resumed, log) = generate("qwen3", &next, &with_session);
    assert_eq!(resumed, plain, "restored equals fresh with a q8_0 cache");
    assert!(log.contains("restored 48 tokens"), "{log}");
    let inspect = tf(&["session", "inspect", sessions.path().join("q8.tfsession").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&inspect.stdout).contains("kv dtype: q8_0"));

    let m = fixture("llama");
    let ids = join(&prompt);
    let args =
        ["generate", "--model", m.to_str().unwrap(), "--ids", &ids, "--threads", "2", "--kv-cache-dtype", "q4_0"];
    assert_refused(&tf(&args), "a q4_0 KV cache needs heads of a multiple of 32 values; this model has a head of 16");
}
