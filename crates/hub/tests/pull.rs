//! `pull` and `resolve` against the loopback stand-in: what lands in the cache and how each bad
//! listing or download is refused (one line, nothing unverified in `blobs/` or `snapshots/`,
//! nothing outside the cache, never the token).

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{FakeRepo, Fault, HubServer, git_oid, sha256};
use tf_hub::{Cached, HubConfig, HubError, Silent, Spec, Token, cached, pull, resolve};

const TOKEN: &str = "hf_SeCrEt_token_0123456789";
const SHARDED: &str = "tf-test/sharded";

fn shard(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn sharded_repo() -> FakeRepo {
    let index = br#"{"metadata": {"total_size": 0}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}"#;
    FakeRepo::new(
        SHARDED,
        &[
            ("config.json", br#"{"architectures": ["LlamaForCausalLM"]}"#, false),
            ("tokenizer.json", b"{\"model\": {}}", false),
            ("generation_config.json", b"{}", false),
            ("model.safetensors.index.json", index, false),
            ("model-00001-of-00002.safetensors", &shard(1, 300_000), true),
            ("model-00002-of-00002.safetensors", &shard(2, 200_001), true),
            ("README.md", b"# not fetched", false),
            ("pytorch_model.bin", &shard(3, 1000), true),
        ],
    )
}

fn gguf_repo() -> FakeRepo {
    FakeRepo::new(
        "tf-test/tiny-GGUF",
        &[
            ("tiny-Q4_K_M.gguf", &shard(4, 5000), true),
            ("tiny-Q4_K_S.gguf", &shard(5, 4000), true),
            ("tiny-Q8_0.gguf", &shard(6, 9000), true),
            ("mmproj-tiny-F16.gguf", &shard(7, 100), true),
        ],
    )
}

fn config(server: &HubServer, root: &Path) -> HubConfig {
    let mut cfg = HubConfig::new(root.join("cache"));
    cfg.endpoint = server.endpoint();
    cfg.token = Token::new(TOKEN.to_string());
    cfg.limits.read_timeout = Duration::from_secs(5);
    cfg.limits.max_attempts = 3;
    cfg
}

fn spec(s: &str) -> Spec {
    Spec::parse(s, None).unwrap()
}

/// Every file under `dir`, recursively (links not followed).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() { out.extend(files_under(&p)) } else { out.push(p) }
    }
    out
}

/// Checks what a pull left: only `cache/` under `root`; every blob's bytes hash to its name; no
/// partial file; every snapshot link resolves to a blob; the token nowhere. Returns the blobs.
fn audit(root: &Path) -> Vec<String> {
    let top: Vec<_> = std::fs::read_dir(root).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(top.iter().all(|n| n == "cache"), "written outside the cache: {top:?}");
    let mut blobs = Vec::new();
    for f in files_under(root) {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let meta = std::fs::symlink_metadata(&f).unwrap();
        if meta.file_type().is_symlink() {
            assert!(rel.contains("/snapshots/"), "{rel}: a link outside snapshots/");
            let target = std::fs::canonicalize(&f).unwrap();
            assert!(target.parent().unwrap().ends_with("blobs"), "{rel} -> {}", target.display());
            continue;
        }
        let bytes = std::fs::read(&f).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(TOKEN), "{rel} holds the token");
        if rel.contains("/blobs/") {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let found = if name.len() == 64 { sha256(&bytes) } else { git_oid(&bytes) };
            assert_eq!(found, name, "{rel}: an unverified blob");
            blobs.push(name);
        } else {
            assert!(rel.contains("/refs/") || rel.contains(".locks/"), "unexpected file {rel}");
        }
    }
    blobs.sort();
    blobs
}

fn one_line(e: &HubError) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "more than one line: {s}");
    assert!(!s.contains(TOKEN), "the token in an error: {s}");
    s
}

#[test]
fn pulls_a_sharded_checkpoint_in_the_python_layout() {
    let repo = sharded_repo();
    let server = HubServer::start(vec![repo.clone()]);
    server.paginate(3);
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(&server, tmp.path());
    let pulled = pull(&spec(SHARDED), &cfg, &mut Silent).unwrap();
    let snap = tmp.path().join("cache/models--tf-test--sharded/snapshots").join(&repo.commit);
    assert_eq!(pulled.path, snap);
    for f in &repo.files {
        let fetched = !matches!(f.path.as_str(), "README.md" | "pytorch_model.bin");
        assert_eq!(std::fs::read(snap.join(&f.path)).ok(), fetched.then(|| f.bytes.clone()), "{}", f.path);
    }
    assert_eq!(
        std::fs::read_link(snap.join("config.json")).unwrap(),
        PathBuf::from(format!("../../blobs/{}", git_oid(&repo.files[0].bytes)))
    );
    let refs = std::fs::read_to_string(tmp.path().join("cache/models--tf-test--sharded/refs/main")).unwrap();
    assert_eq!(refs, repo.commit);
    assert_eq!(audit(tmp.path()).len(), 6);
    for seen in server.log() {
        let want = (!seen.cdn).then(|| format!("Bearer {TOKEN}"));
        assert_eq!(seen.authorization, want, "{} (cdn: {})", seen.path, seen.cdn);
    }
    let again = pull(&spec(SHARDED), &cfg, &mut Silent).unwrap();
    assert_eq!(again.fetched, 0);
    let offline = HubConfig { offline: true, ..cfg };
    let before = server.log().len();
    assert_eq!(resolve(&spec(SHARDED), &offline, &mut Silent).unwrap(), snap);
    assert_eq!(server.log().len(), before, "offline opened a connection");
}

#[test]
fn pulls_one_gguf_file_by_quant() {
    let repo = gguf_repo();
    let server = HubServer::start(vec![repo.clone()]);
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(&server, tmp.path());
    let pulled = pull(&spec("tf-test/tiny-GGUF:q8_0"), &cfg, &mut Silent).unwrap();
    assert!(pulled.path.ends_with(format!("snapshots/{}/tiny-Q8_0.gguf", repo.commit)));
    assert_eq!(std::fs::read(&pulled.path).unwrap(), repo.files[2].bytes);
    assert_eq!(audit(tmp.path()), vec![sha256(&repo.files[2].bytes)]);
    let offline = HubConfig { offline: true, ..cfg.clone() };
    assert_eq!(resolve(&spec("tf-test/tiny-GGUF:Q8_0"), &offline, &mut Silent).unwrap(), pulled.path);
    assert!(matches!(cached(&spec("tf-test/tiny-GGUF:Q4_K_M"), &offline), Cached::Incomplete(_)));
    let by_name = pull(&spec("tf-test/tiny-GGUF:tiny-Q4_K_S.gguf"), &cfg, &mut Silent).unwrap();
    assert!(by_name.path.ends_with("tiny-Q4_K_S.gguf"));
    let missing = one_line(&pull(&spec("tf-test/tiny-GGUF:Q6_K"), &cfg, &mut Silent).unwrap_err());
    assert_eq!(
        missing,
        "tf-test/tiny-GGUF: no GGUF file for quant \"Q6_K\"; choices: tiny-Q4_K_M.gguf, tiny-Q4_K_S.gguf, tiny-Q8_0.gguf"
    );
    let ambiguous = one_line(&pull(&spec("tf-test/tiny-GGUF:Q4_K"), &cfg, &mut Silent).unwrap_err());
    assert!(ambiguous.contains("no GGUF file for quant \"Q4_K\""), "{ambiguous}");
}

#[test]
fn a_split_gguf_is_pulled_whole_by_quant_and_resolved_only_when_every_shard_is_cached() {
    let repo = FakeRepo::new(
        "tf-test/split-GGUF",
        &[
            ("tiny-Q4_K_M.gguf", &shard(4, 5000), true),
            ("Q8_0/tiny-Q8_0-00001-of-00002.gguf", &shard(8, 7000), true),
            ("Q8_0/tiny-Q8_0-00002-of-00002.gguf", &shard(9, 6000), true),
        ],
    );
    let server = HubServer::start(vec![repo.clone()]);
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(&server, tmp.path());
    let pulled = pull(&spec("tf-test/split-GGUF:Q8_0"), &cfg, &mut Silent).unwrap();
    assert!(pulled.path.ends_with(format!("snapshots/{}/Q8_0/tiny-Q8_0-00001-of-00002.gguf", repo.commit)));
    let second = pulled.path.with_file_name("tiny-Q8_0-00002-of-00002.gguf");
    assert_eq!(std::fs::read(&second).unwrap(), repo.files[2].bytes);
    assert_eq!(pulled.files.len(), 2);
    let offline = HubConfig { offline: true, ..cfg.clone() };
    assert_eq!(resolve(&spec("tf-test/split-GGUF:Q8_0"), &offline, &mut Silent).unwrap(), pulled.path);
    std::fs::remove_file(&second).unwrap();
    assert!(matches!(cached(&spec("tf-test/split-GGUF:Q8_0"), &offline), Cached::Incomplete(_)));
}

#[test]
fn a_cut_transfer_resumes_with_range() {
    let repo = sharded_repo();
    let server = HubServer::start(vec![repo.clone()]);
    server.fault("model-00001-of-00002.safetensors", Fault::Cut { after: 100_000, times: 2 });
    let tmp = tempfile::tempdir().unwrap();
    let pulled = pull(&spec(SHARDED), &config(&server, tmp.path()), &mut Silent).unwrap();
    assert_eq!(std::fs::read(pulled.path.join("model-00001-of-00002.safetensors")).unwrap(), repo.files[4].bytes);
    let ranges: Vec<_> = server
        .log()
        .into_iter()
        .filter(|s| s.cdn && s.path.contains(&sha256(&repo.files[4].bytes)))
        .map(|s| s.range)
        .collect();
    assert_eq!(ranges, vec![None, Some("bytes=100000-".into()), Some("bytes=200000-".into())]);
    audit(tmp.path());
}

#[test]
fn bad_downloads_are_refused_and_leave_nothing_unverified() {
    let shard1 = "model-00001-of-00002.safetensors";
    let cases: [(&str, Fault, &str); 7] = [
        (shard1, Fault::FlipByte, "model-00001-of-00002.safetensors: sha256 mismatch: expected "),
        ("config.json", Fault::FlipByte, "config.json: git blob sha1 mismatch: expected "),
        (shard1, Fault::Cut { after: 1000, times: 99 }, "3000 of 300000 listed bytes arrived in 3 requests"),
        (shard1, Fault::Longer(7), "the body is longer than the 300000 bytes listed"),
        (shard1, Fault::LongerNoLength(7), "the body is longer than the 300000 bytes listed"),
        (shard1, Fault::RedirectLoop, "refused a redirect loop"),
        (shard1, Fault::RedirectFile, "refused a redirect to a URL that is not http or https"),
    ];
    for (file, fault, want) in cases {
        let repo = sharded_repo();
        let server = HubServer::start(vec![repo.clone()]);
        server.fault(file, fault.clone());
        let tmp = tempfile::tempdir().unwrap();
        let err = pull(&spec(SHARDED), &config(&server, tmp.path()), &mut Silent).unwrap_err();
        let msg = one_line(&err);
        assert!(msg.contains(want), "{fault:?}: {msg}");
        let bad = repo.files.iter().find(|f| f.path == file).unwrap();
        let blobs = audit(tmp.path());
        let bad_blob = if bad.lfs { sha256(&bad.bytes) } else { git_oid(&bad.bytes) };
        assert!(!blobs.contains(&bad_blob), "{fault:?}: the bad file was stored");
        let snap = tmp.path().join("cache/models--tf-test--sharded/snapshots").join(&repo.commit);
        assert!(!snap.join(file).exists(), "{fault:?}: linked");
        assert!(!tmp.path().join("cache/models--tf-test--sharded/refs/main").exists());
    }
}

#[test]
fn unsafe_names_refuse_the_pull_before_any_byte() {
    for name in ["../evil.json", "/etc/evil", "sub/../../evil", "a\\b.json", "a\u{1}b", "a//b", "sub/", ".."] {
        let server = HubServer::start(vec![sharded_repo()]);
        server.extra_name(name);
        let tmp = tempfile::tempdir().unwrap();
        let msg = one_line(&pull(&spec(SHARDED), &config(&server, tmp.path()), &mut Silent).unwrap_err());
        assert!(msg.contains("unsafe file") && msg.contains("nothing was fetched"), "{name:?}: {msg}");
        assert!(server.log().iter().all(|s| !s.path.contains("/resolve/") && !s.cdn), "{name:?}: fetched");
        assert!(!tmp.path().join("cache").exists(), "{name:?}: the cache was written");
        assert!(!tmp.path().join("evil.json").exists() && !Path::new("/etc/evil").exists());
    }
}

#[test]
fn missing_repos_huge_listings_and_offline_are_refused() {
    let server = HubServer::start(vec![sharded_repo()]);
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = config(&server, tmp.path());
    let msg = one_line(&pull(&spec("tf-test/absent"), &cfg, &mut Silent).unwrap_err());
    assert!(msg.starts_with("tf-test/absent: not found on http://127.0.0.1:"), "{msg}");
    server.pad_listing(2 << 20);
    cfg.limits.max_listing_bytes = 1 << 20;
    let msg = one_line(&pull(&spec(SHARDED), &cfg, &mut Silent).unwrap_err());
    assert_eq!(msg, "tf-test/sharded: the repo's file listing is over 1048576 bytes");
    let before = server.log().len();
    let offline = HubConfig { offline: true, ..cfg };
    let msg = one_line(&resolve(&spec(SHARDED), &offline, &mut Silent).unwrap_err());
    assert!(msg.contains("not in the cache") && msg.contains("HF_HUB_OFFLINE=1"), "{msg}");
    assert_eq!(server.log().len(), before);
    assert!(!tmp.path().join("cache").exists());
}

#[test]
fn concurrent_pulls_fetch_each_blob_once() {
    let repo = sharded_repo();
    let server = HubServer::start(vec![repo.clone()]);
    server.fault("model-00001-of-00002.safetensors", Fault::Cut { after: 150_000, times: 1 });
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(&server, tmp.path());
    std::thread::scope(|s| {
        let pulls: Vec<_> = (0..3).map(|_| s.spawn(|| pull(&spec(SHARDED), &cfg, &mut Silent))).collect();
        for p in pulls {
            if let Err(e) = p.join().unwrap() {
                panic!("{e}");
            }
        }
    });
    let cdn_gets = server.log().iter().filter(|s| s.cdn && s.range.is_none()).count();
    assert_eq!(cdn_gets, 2, "each LFS blob fetched once from the start");
    audit(tmp.path());
}
