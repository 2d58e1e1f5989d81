//! Test helpers for checkpoints the loader must refuse: copies of the committed fixtures with
//! their config or one tensor changed, and `tensorfold check` run on them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The committed fixture directory of `family`.
pub fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(family)
}

/// A copy of `family`'s fixture in a temporary directory.
pub fn copy(family: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(family)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    tmp
}

/// Rewrites `dir`'s config.json through `edit`.
pub fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
}

/// A copy of `family`'s fixture whose config.json has `key` set to `value`.
pub fn with_config(family: &str, key: &str, value: serde_json::Value) -> tempfile::TempDir {
    let tmp = copy(family);
    edit_config(tmp.path(), |v| v[key] = value);
    tmp
}

/// Replaces tensor `name` of `dir`'s model.safetensors by zeros of `shape` in bf16, or removes
/// it (`None`).
pub fn set_tensor(dir: &Path, name: &str, shape: Option<&[usize]>) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let zeros = vec![0u8; shape.map_or(0, |s| s.iter().product::<usize>() * 2)];
    let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> =
        st.tensors().into_iter().filter(|(n, _)| n != name).map(|(n, v)| (n.to_string(), v)).collect();
    if let Some(shape) = shape {
        let view = safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, shape.to_vec(), &zeros).unwrap();
        views.push((name.into(), view));
    }
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    std::fs::write(&path, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

/// `tensorfold check` on `dir`: its exit code and stderr.
pub fn check(dir: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold")).args(["check", "--model"]).arg(dir).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Asserts a clean one-line refusal of `dir` holding every needle.
pub fn refused(dir: &Path, needles: &[&str]) {
    let (code, err) = check(dir);
    assert!(!err.contains("panicked"), "panic: {err}");
    assert_eq!(code, Some(2), "expected exit 2, stderr: {err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "'{n}' not in: {err}");
    }
}
