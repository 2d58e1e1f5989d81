//! `tensorfold pull`, `list`, `rm` and `--model ORG/NAME` against the loopback hub stand-in
//! (`crates/hub/tests/support`), with the qwen3 fixture as the repo so the model really loads.

#[path = "../../hub/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Output};
use support::{FakeRepo, Fault, HubServer};

const TOKEN: &str = "hf_cli_SeCrEt_987654321";
const REPO: &str = "tf-test/qwen3-tiny";

fn fixture_repo() -> FakeRepo {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen3");
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let files: Vec<(&str, Vec<u8>, bool)> =
        ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
            .into_iter()
            .map(|f| (f, read(f), false))
            .chain([
                ("model.safetensors", read("model.safetensors"), true),
                ("golden.json", read("golden.json"), false),
            ])
            .collect();
    let refs: Vec<(&str, &[u8], bool)> = files.iter().map(|(p, b, l)| (*p, b.as_slice(), *l)).collect();
    FakeRepo::new(REPO, &refs)
}

fn tf(args: &[&str], server: &HubServer, home: &Path, offline: bool) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(args)
        .env_remove("HF_HUB_CACHE")
        .env("HF_HOME", home)
        .env("HF_ENDPOINT", server.endpoint())
        .env("HF_TOKEN", TOKEN)
        .env("HF_HUB_OFFLINE", if offline { "1" } else { "0" })
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn pull_list_check_offline_and_rm() {
    let repo = fixture_repo();
    let server = HubServer::start(vec![repo.clone()]);
    let home = tempfile::tempdir().unwrap();
    let out = tf(&["pull", REPO], &server, home.path(), false);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let snap = home.path().join("hub/models--tf-test--qwen3-tiny/snapshots").join(&repo.commit);
    assert_eq!(text(&out.stdout).trim(), snap.to_str().unwrap());
    assert!(!snap.join("golden.json").exists(), "fetched a file the engine does not read");
    assert!(!text(&out.stderr).contains(TOKEN));

    let before = server.log().len();
    let out = tf(&["check", "--model", REPO, "--device", "cpu"], &server, home.path(), true);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("ok: Qwen3ForCausalLM"), "{}", text(&out.stdout));
    assert_eq!(server.log().len(), before, "offline opened a connection");

    let out = tf(&["list"], &server, home.path(), true);
    let listing = text(&out.stdout);
    assert!(listing.contains(REPO) && listing.contains(&format!("main={}", &repo.commit[..12])), "{listing}");

    let out = tf(&["rm", "../evil"], &server, home.path(), true);
    assert_eq!(out.status.code(), Some(2));
    let out = tf(&["rm", REPO], &server, home.path(), true);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!snap.exists());
    let out = tf(&["check", "--model", REPO, "--device", "cpu"], &server, home.path(), true);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not in the cache"), "{}", text(&out.stderr));
}

#[test]
fn model_flag_pulls_when_missing_and_refuses_bad_bytes() {
    let server = HubServer::start(vec![fixture_repo()]);
    let home = tempfile::tempdir().unwrap();
    let out = tf(&["check", "--model", REPO, "--device", "cpu"], &server, home.path(), false);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let server = HubServer::start(vec![fixture_repo()]);
    server.fault("model.safetensors", Fault::FlipByte);
    let home = tempfile::tempdir().unwrap();
    let out = tf(&["pull", REPO], &server, home.path(), false);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    let err = stderr.lines().last().unwrap_or_default();
    assert_eq!(stderr.lines().filter(|l| l.starts_with("error")).count(), 1, "{stderr}");
    assert!(err.starts_with("error: tf-test/qwen3-tiny: model.safetensors: sha256 mismatch: expected "), "{err}");
    assert!(!stderr.contains(TOKEN));
}
