//! Embeds the git commit the binary is built from (`TENSORFOLD_COMMIT`), or "unknown" where
//! git or the repository is absent.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TENSORFOLD_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // Rebuilt when HEAD moves: HEAD itself, the branch it names, and the packed refs.
    if let Some(git_dir) = git(&["rev-parse", "--git-dir"]).map(PathBuf::from) {
        println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
    }
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]).map(PathBuf::from) {
        println!("cargo:rerun-if-changed={}", common.join("packed-refs").display());
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", common.join(branch).display());
        }
    }
}

/// The trimmed output of a successful `git ARGS`, run from this crate's directory.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
