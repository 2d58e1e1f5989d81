//! How far a checkpoint's load has come: tensors and bytes placed on the backend out of the
//! checkpoint's total, shared between the loading thread and whoever reports it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Counters a load advances and a reporter reads (all relaxed: a snapshot may be a step behind).
#[derive(Debug, Default)]
pub struct LoadProgress {
    tensors_done: AtomicU64,
    tensors_total: AtomicU64,
    bytes_done: AtomicU64,
    bytes_total: AtomicU64,
    finished: AtomicBool,
}

/// One reading of a [`LoadProgress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgressSnapshot {
    /// Tensors placed on the backend.
    pub tensors_done: u64,
    /// Tensors in the checkpoint (0 until known).
    pub tensors_total: u64,
    /// Bytes of those tensors.
    pub bytes_done: u64,
    /// Bytes of every tensor in the checkpoint (0 until known).
    pub bytes_total: u64,
    /// The load has ended (the model is ready or refused).
    pub finished: bool,
}

impl LoadProgress {
    /// Sets the checkpoint's totals, once its headers are read.
    pub fn set_totals(&self, tensors: u64, bytes: u64) {
        self.tensors_total.store(tensors, Ordering::Relaxed);
        self.bytes_total.store(bytes, Ordering::Relaxed);
    }

    /// Counts one more tensor of `bytes` bytes as loaded.
    pub fn add_tensor(&self, bytes: u64) {
        self.tensors_done.fetch_add(1, Ordering::Relaxed);
        self.bytes_done.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Marks the load as ended.
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> ProgressSnapshot {
        let tensors_total = self.tensors_total.load(Ordering::Relaxed);
        let bytes_total = self.bytes_total.load(Ordering::Relaxed);
        ProgressSnapshot {
            tensors_done: self.tensors_done.load(Ordering::Relaxed).min(tensors_total.max(1)),
            tensors_total,
            bytes_done: self.bytes_done.load(Ordering::Relaxed).min(bytes_total),
            bytes_total,
            finished: self.finished.load(Ordering::Relaxed),
        }
    }
}

impl ProgressSnapshot {
    /// The share of bytes loaded, 0 to 1 (0 while the total is unknown).
    pub fn fraction(&self) -> f64 {
        match self.bytes_total {
            0 => 0.0,
            total => self.bytes_done as f64 / total as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_never_pass_the_totals() {
        let p = LoadProgress::default();
        assert_eq!(p.snapshot().fraction(), 0.0);
        p.set_totals(2, 100);
        p.add_tensor(60);
        assert_eq!((p.snapshot().tensors_done, p.snapshot().bytes_done), (1, 60));
        assert!((p.snapshot().fraction() - 0.6).abs() < 1e-9);
        p.add_tensor(60);
        p.add_tensor(1);
        let s = p.snapshot();
        assert_eq!((s.tensors_done, s.bytes_done, s.finished), (2, 100, false));
        p.finish();
        assert!(p.snapshot().finished);
    }
}
