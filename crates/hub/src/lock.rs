//! A lock per blob, so that two pulls (ours or the Python client's, which takes the same
//! `flock` on the same file) never write one blob at once.

use crate::error::{HubError, Result};
use std::fs::{self, File, OpenOptions};
use std::path::Path;

/// Held while a blob is fetched; dropping it unlocks.
pub struct BlobLock {
    _file: File,
}

/// Waits for and takes the exclusive lock at `path` (created if missing).
pub fn lock(path: &Path) -> Result<BlobLock> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
    }
    let file =
        OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(|e| HubError::io(path, e))?;
    file.lock().map_err(|e| HubError::io(path, e))?;
    Ok(BlobLock { _file: file })
}
