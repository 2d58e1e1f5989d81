//! The Python client's cache layout, so that either side reads what the other stored:
//! `CACHE/models--ORG--NAME/{blobs/<hash>, snapshots/<commit>/<path> -> ../../blobs/<hash>,
//! refs/<revision>}` and the per-blob locks under `CACHE/.locks/models--ORG--NAME/<hash>.lock`.

use crate::error::{HubError, Result};
use crate::names::{RepoId, check_revision, is_hex};
use std::fs;
use std::path::{Path, PathBuf};

/// One repo's folder in the cache.
#[derive(Debug, Clone)]
pub struct RepoCache {
    dir: PathBuf,
    locks: PathBuf,
}

impl RepoCache {
    /// The folder of `repo` under the cache root `cache_dir`.
    pub fn new(cache_dir: &Path, repo: &RepoId) -> RepoCache {
        RepoCache { dir: cache_dir.join(repo.folder_name()), locks: cache_dir.join(".locks").join(repo.folder_name()) }
    }

    /// `models--ORG--NAME`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `blobs/<name>`.
    pub fn blob(&self, name: &str) -> PathBuf {
        self.dir.join("blobs").join(name)
    }

    /// `blobs/<name>.incomplete`, where a download lands until it is verified.
    pub fn incomplete(&self, name: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{name}.incomplete"))
    }

    /// The lock file of blob `name`, where the Python client keeps its own.
    pub fn lock_path(&self, name: &str) -> PathBuf {
        self.locks.join(format!("{name}.lock"))
    }

    /// `snapshots/<commit>`.
    pub fn snapshot(&self, commit: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit)
    }

    /// The commit `revision` names: itself when it is a commit hash, else what `refs/` holds.
    pub fn commit_of(&self, revision: &str) -> Option<String> {
        if is_hex(revision, 40) {
            return Some(revision.to_string());
        }
        check_revision(revision).ok()?;
        let text = fs::read_to_string(self.dir.join("refs").join(revision)).ok()?;
        let commit = text.trim();
        is_hex(commit, 40).then(|| commit.to_string())
    }

    /// Records that `revision` is at `commit` (written whole through a rename), unless the
    /// revision is the commit itself.
    pub fn write_ref(&self, revision: &str, commit: &str) -> Result<()> {
        if revision == commit {
            return Ok(());
        }
        check_revision(revision)?;
        let path = self.dir.join("refs").join(revision);
        if fs::read_to_string(&path).is_ok_and(|t| t == commit) {
            return Ok(());
        }
        let parent = path.parent().unwrap_or(&self.dir);
        fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
        let tmp = tmp_beside(&path);
        fs::write(&tmp, commit).map_err(|e| HubError::io(&tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| HubError::io(&path, e))
    }

    /// Links `snapshots/<commit>/<path>` to `blobs/<blob>` with a relative symlink (replacing
    /// whatever was there); `path` must have been checked by `names::check_path`.
    pub fn link(&self, commit: &str, path: &str, blob: &str) -> Result<PathBuf> {
        let pointer = self.snapshot(commit).join(path);
        let parent = pointer.parent().unwrap_or(&self.dir);
        fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
        let ups = path.split('/').count() + 1;
        let target = format!("{}blobs/{blob}", "../".repeat(ups));
        if fs::read_link(&pointer).is_ok_and(|t| t == Path::new(&target)) {
            return Ok(pointer);
        }
        let tmp = tmp_beside(&pointer);
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp).map_err(|e| HubError::io(&tmp, e))?;
        fs::rename(&tmp, &pointer).map_err(|e| HubError::io(&pointer, e))?;
        Ok(pointer)
    }
}

/// A temporary name beside `p`, unique to this process and thread.
fn tmp_beside(p: &Path) -> PathBuf {
    use std::hash::{BuildHasher, RandomState};
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let salt = RandomState::new().hash_one(std::thread::current().id());
    p.with_file_name(format!(".{name}.{}.{salt:016x}.tmp", std::process::id()))
}

/// A repo found in the cache.
#[derive(Debug, Clone)]
pub struct CachedRepo {
    /// The repo.
    pub repo: RepoId,
    /// `(revision, commit)` for every ref.
    pub refs: Vec<(String, String)>,
    /// Every snapshot's commit.
    pub commits: Vec<String>,
    /// Bytes of its blobs.
    pub size: u64,
    /// Its folder.
    pub dir: PathBuf,
}

/// Every model repo in the cache rooted at `cache_dir`, sorted by id (none when it does not exist).
pub fn list(cache_dir: &Path) -> Result<Vec<CachedRepo>> {
    let entries = match fs::read_dir(cache_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(HubError::io(cache_dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(repo) = entry.file_name().to_str().and_then(RepoId::from_folder_name) else { continue };
        let dir = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let mut refs = Vec::new();
        collect_refs(&dir.join("refs"), "", &mut refs);
        refs.sort();
        let mut commits: Vec<String> = names_in(&dir.join("snapshots")).into_iter().filter(|c| is_hex(c, 40)).collect();
        commits.sort();
        let size = names_in(&dir.join("blobs"))
            .iter()
            .filter_map(|b| fs::symlink_metadata(dir.join("blobs").join(b)).ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum();
        out.push(CachedRepo { repo, refs, commits, size, dir });
    }
    out.sort_by(|a, b| a.repo.cmp(&b.repo));
    Ok(out)
}

fn names_in(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|it| it.flatten().filter_map(|e| e.file_name().to_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// `refs/` read recursively (`refs/pr/1` is the revision `refs/pr/1`), bounded in depth.
fn collect_refs(dir: &Path, prefix: &str, out: &mut Vec<(String, String)>) {
    if prefix.matches('/').count() > 8 {
        return;
    }
    for name in names_in(dir) {
        let path = dir.join(&name);
        let rev = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => collect_refs(&path, &rev, out),
            Ok(m) if m.is_file() && m.len() <= 256 => {
                if let Ok(text) = fs::read_to_string(&path)
                    && is_hex(text.trim(), 40)
                {
                    out.push((rev, text.trim().to_string()));
                }
            }
            _ => {}
        }
    }
}

/// Removes `repo`'s folder and its locks from the cache; returns the bytes its blobs held, or
/// `None` when it was not cached.
pub fn remove(cache_dir: &Path, repo: &RepoId) -> Result<Option<u64>> {
    let cache = RepoCache::new(cache_dir, repo);
    let dir = cache.dir();
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(HubError::io(dir, std::io::Error::other("not a directory"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(HubError::io(dir, e)),
    }
    let size = list(cache_dir)?.into_iter().find(|r| &r.repo == repo).map_or(0, |r| r.size);
    fs::remove_dir_all(dir).map_err(|e| HubError::io(dir, e))?;
    let _ = fs::remove_dir_all(&cache.locks);
    Ok(Some(size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_relative_to_blobs() -> Result<()> {
        let tmp = tempfile::tempdir().map_err(|e| HubError::io("tempdir", e))?;
        let repo = RepoId::parse("org/name")?;
        let c = RepoCache::new(tmp.path(), &repo);
        fs::create_dir_all(c.blob("x").parent().unwrap_or(tmp.path())).map_err(|e| HubError::io("blobs", e))?;
        fs::write(c.blob("abc"), b"hi").map_err(|e| HubError::io("blob", e))?;
        let commit = "a".repeat(40);
        let p = c.link(&commit, "sub/f.txt", "abc")?;
        assert_eq!(fs::read_link(&p).ok(), Some(PathBuf::from("../../../blobs/abc")));
        assert_eq!(fs::read(&p).ok(), Some(b"hi".to_vec()));
        c.link(&commit, "sub/f.txt", "abc")?;
        c.write_ref("main", &commit)?;
        assert_eq!(c.commit_of("main"), Some(commit.clone()));
        let listed = list(tmp.path())?;
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].size, listed[0].refs.clone()), (2, vec![("main".to_string(), commit)]));
        assert_eq!(remove(tmp.path(), &repo)?, Some(2));
        assert_eq!(remove(tmp.path(), &repo)?, None);
        Ok(())
    }
}
