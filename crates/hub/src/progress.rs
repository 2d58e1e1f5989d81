//! How a pull reports what it does; the CLI draws bars or prints lines, tests stay silent.

/// Receives a pull's progress.
pub trait Progress {
    /// The files about to be fetched, with their sizes.
    fn plan(&mut self, _files: &[(String, u64)]) {}
    /// `path` (of `size` bytes) has `pos` bytes on disk now (it may go back to 0 on a restart).
    fn position(&mut self, _path: &str, _size: u64, _pos: u64) {}
    /// `path` is verified and in the cache.
    fn finished(&mut self, _path: &str) {}
    /// `path` was already in the cache.
    fn cached(&mut self, _path: &str, _size: u64) {}
}

/// Reports nothing.
pub struct Silent;

impl Progress for Silent {}
