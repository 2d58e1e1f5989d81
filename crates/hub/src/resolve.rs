//! `--model ORG/NAME[:QUANT]`: the cached snapshot (or GGUF file in it) when the cache holds
//! what the engine reads, else a pull (never when offline).

use crate::cache::RepoCache;
use crate::config::HubConfig;
use crate::error::{HubError, Result};
use crate::progress::Progress;
use crate::pull::pull;
use crate::select::{self, Choice, INDEX};
use crate::spec::Spec;
use std::fs;
use std::path::{Path, PathBuf};

/// Deepest folder walked in a snapshot.
const MAX_DEPTH: usize = 4;
/// Most files looked at in a snapshot.
const MAX_FILES: usize = 100_000;

/// What the cache holds for a spec.
#[derive(Debug)]
pub enum Cached {
    /// Everything the engine reads: the snapshot directory or the GGUF file.
    Found(PathBuf),
    /// No snapshot for the revision.
    Absent,
    /// A snapshot that lacks something, or where the choice fails (why).
    Incomplete(HubError),
}

/// Looks `spec` up in the cache without the network.
pub fn cached(spec: &Spec, cfg: &HubConfig) -> Cached {
    let cache = RepoCache::new(&cfg.cache_dir, &spec.repo);
    let Some(commit) = cache.commit_of(&spec.revision) else { return Cached::Absent };
    let dir = cache.snapshot(&commit);
    if !dir.is_dir() {
        return Cached::Absent;
    }
    let mut present = Vec::new();
    walk(&dir, "", 0, &mut present);
    let names: Vec<&str> = present.iter().map(String::as_str).collect();
    let found = select::choose(&spec.repo, &names, &spec.pick).and_then(|c| match c {
        Choice::Gguf(f) => select::gguf_set(&spec.repo, &names, &f).map(|_| dir.join(f)),
        Choice::Checkpoint { sharded, .. } => {
            if sharded {
                let index = fs::read(dir.join(INDEX)).map_err(|e| HubError::io(dir.join(INDEX), e))?;
                select::shards(&spec.repo, &index, &names)?;
            }
            Ok(dir.clone())
        }
    });
    match found {
        Ok(p) => Cached::Found(p),
        Err(e) => Cached::Incomplete(e),
    }
}

/// Files under `dir` whose link resolves (a snapshot's links to blobs not yet there are left out).
fn walk(dir: &Path, prefix: &str, depth: usize, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
        let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let path = e.path();
        if out.len() >= MAX_FILES {
            return;
        }
        if path.is_file() {
            out.push(rel);
        } else if path.is_dir() && depth < MAX_DEPTH && e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&path, &rel, depth + 1, out);
        }
    }
}

/// The local path for `spec`: from the cache when it holds it, else pulled (refused offline).
pub fn resolve(spec: &Spec, cfg: &HubConfig, progress: &mut dyn Progress) -> Result<PathBuf> {
    match cached(spec, cfg) {
        Cached::Found(p) => Ok(p),
        Cached::Incomplete(e) if cfg.offline => Err(e),
        _ if cfg.offline => Err(HubError::NotCached { repo: spec.to_string(), dir: cfg.cache_dir.clone() }),
        _ => Ok(pull(spec, cfg, progress)?.path),
    }
}
