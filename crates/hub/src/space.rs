//! Free space under the cache, checked against what a listing says a pull will write.

use crate::error::{HubError, Result};
use std::path::Path;

/// Bytes free to an unprivileged writer on the file system holding `dir` (or its nearest
/// existing ancestor).
pub fn free_bytes(dir: &Path) -> Result<u64> {
    let mut at = dir;
    while !at.exists() {
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            _ => break,
        }
    }
    let st = rustix::fs::statvfs(at).map_err(|e| HubError::io(at, e.into()))?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Refuses when fewer than `needed` bytes are free under `dir`.
pub fn ensure(dir: &Path, needed: u64) -> Result<()> {
    let free = free_bytes(dir)?;
    if needed > free { Err(HubError::NoSpace { dir: dir.to_path_buf(), needed, free }) } else { Ok(()) }
}
