//! Names from outside (a repo id typed by a user, file names and hashes in the hub's listing)
//! checked before they become paths: repo ids as the hub's own validator has them, file names as
//! plain relative paths that cannot leave the snapshot directory.

use crate::error::{HubError, Result};

/// Longest repo id the hub accepts.
const MAX_REPO_ID: usize = 96;
/// Longest file name accepted from a listing (bytes).
const MAX_PATH: usize = 1024;

/// A checked `ORG/NAME` repo id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RepoId {
    id: String,
}

impl RepoId {
    /// Checks `s` as `huggingface_hub.validate_repo_id` does, and requires the `ORG/NAME` form.
    pub fn parse(s: &str) -> Result<RepoId> {
        let bad = || HubError::BadRepoId(s.escape_debug().to_string());
        let (org, name) = s.split_once('/').ok_or_else(bad)?;
        if s.len() > MAX_REPO_ID || s.contains("--") || s.contains("..") || !part_ok(org) || !part_ok(name) {
            return Err(bad());
        }
        Ok(RepoId { id: s.to_string() })
    }

    /// The id, `ORG/NAME`.
    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// The cache folder's name, `models--ORG--NAME`, as the Python client names it.
    pub fn folder_name(&self) -> String {
        format!("models--{}", self.id.replace('/', "--"))
    }

    /// The id a cache folder name stands for, when it is a model repo's folder.
    pub fn from_folder_name(folder: &str) -> Option<RepoId> {
        let rest = folder.strip_prefix("models--")?;
        let (org, name) = rest.split_once("--")?;
        RepoId::parse(&format!("{org}/{name}")).ok()
    }
}

impl std::fmt::Display for RepoId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id)
    }
}

/// One part of a repo id: word characters, `-` and `.`, not starting or ending with `-` or `.`.
fn part_ok(p: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    !p.is_empty()
        && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && edge(p.chars().next())
        && edge(p.chars().last())
}

/// Why `path` is not a plain relative path inside the snapshot, if it is not.
pub fn path_problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("empty");
    }
    if path.len() > MAX_PATH {
        return Some("too long");
    }
    if path.starts_with('/') {
        return Some("absolute path");
    }
    if path.contains('\\') {
        return Some("backslash");
    }
    if path.chars().any(char::is_control) {
        return Some("control character");
    }
    for part in path.split('/') {
        match part {
            "" => return Some("empty path component"),
            "." | ".." => return Some("'.' or '..' component"),
            _ => {}
        }
    }
    None
}

/// Checks a file name from the hub's listing of `repo`.
pub fn check_path(repo: &RepoId, path: &str) -> Result<()> {
    match path_problem(path) {
        None => Ok(()),
        Some(why) => Err(HubError::UnsafeName { repo: repo.to_string(), name: path.to_string(), why }),
    }
}

/// Checks a revision (branch, tag or commit) before it names a file under `refs/`.
pub fn check_revision(rev: &str) -> Result<()> {
    match path_problem(rev) {
        Some(why) => Err(HubError::BadRevision(rev.to_string(), why)),
        None if rev.len() > 256 => Err(HubError::BadRevision(rev.to_string(), "too long")),
        None => Ok(()),
    }
}

/// Whether `s` is `len` lowercase hex digits (a commit hash, a git blob id or a sha256).
pub fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_follow_the_hubs_rules() {
        for ok in ["google/gemma-3-270m", "unsloth/Qwen3-0.6B-GGUF", "a_b/c.d", "x/y"] {
            assert_eq!(
                RepoId::parse(ok).map(|r| r.folder_name()).ok(),
                Some(format!("models--{}", ok.replace('/', "--")))
            );
        }
        for bad in ["gpt2", "a/b/c", "/a", "a/", "../x", "a/..", "a--b/c", "-a/b", "a/b.", "a b/c", "a/b\0", ""] {
            assert!(RepoId::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(RepoId::from_folder_name("models--org--name").map(|r| r.to_string()), Some("org/name".into()));
        assert_eq!(RepoId::from_folder_name("datasets--org--name"), None);
    }

    #[test]
    fn listing_paths_stay_inside() {
        for ok in ["config.json", "sub/dir/model.safetensors", "a..b", ".gitattributes"] {
            assert_eq!(path_problem(ok), None, "{ok}");
        }
        for bad in
            ["", "/etc/passwd", "../x", "a/../b", "a/./b", "a//b", "a/", "a\\b", "a\0b", "a\nb", "a\u{7f}b", "..", "."]
        {
            assert!(path_problem(bad).is_some(), "{bad:?} accepted");
        }
    }

    #[test]
    fn hex_lengths() {
        assert!(is_hex(&"a".repeat(40), 40));
        assert!(!is_hex(&"A".repeat(40), 40));
        assert!(!is_hex(&"a".repeat(39), 40));
    }
}
