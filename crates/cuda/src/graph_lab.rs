//! `TF_LAB_GRAPH=K:N` (lab, off unless set): the K-th forward (counted by `embed` calls) is
//! captured into a CUDA graph, from its embedding to its argmax kernel, and replayed N times,
//! back to back and each followed by a synchronize, before its ids are read back. Prints the
//! round times to stderr, to set against the same rounds launched one kernel at a time (the
//! bench's decode figures). Replays recompute the same round (same token, same KV slot), so the
//! run's results are unchanged. While capturing, uploads stage through pinned host memory (a
//! capture cannot copy from pageable memory) and the caches' device buffers made before the
//! capture are set aside, so nothing allocated outside the graph is freed inside it.

use crate::device::Device;
use cudarc::driver::sys;
use cudarc::driver::{CudaGraph, CudaSlice};
use std::sync::Mutex;
use std::time::Instant;

/// The lab's setting and where it stands.
pub(crate) struct GraphLab {
    at: usize,
    replays: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    embeds: usize,
    capturing: bool,
    /// Cache entries set aside while capturing (dropped after it).
    parked: Vec<Box<dyn Send>>,
}

impl GraphLab {
    /// The setting `K:N` from the environment, or `None`.
    pub(crate) fn from_env() -> Option<GraphLab> {
        let v = std::env::var("TF_LAB_GRAPH").ok()?;
        let (k, n) = v.split_once(':')?;
        let (at, replays) = (k.trim().parse().ok()?, n.trim().parse().ok()?);
        (at > 0 && replays > 0).then(|| GraphLab { at, replays, state: Mutex::new(State::default()) })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called at each `embed`: whether this forward is the one to capture (capture begun).
    pub(crate) fn at_embed(&self, dev: &Device, park: impl FnOnce() -> Vec<Box<dyn Send>>) -> bool {
        let mut s = self.state();
        s.embeds += 1;
        if s.embeds != self.at {
            return false;
        }
        dev.synchronize();
        s.parked = park();
        dev.set_capturing(true);
        if let Err(e) = dev.stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED) {
            eprintln!("graph lab: begin capture: {e:?}");
            dev.set_capturing(false);
            return false;
        }
        s.capturing = true;
        true
    }

    /// Whether a capture is open (the round's argmax ends it).
    pub(crate) fn capturing(&self) -> bool {
        self.state().capturing
    }

    /// Ends the capture after the argmax kernel wrote `out`, replays, and returns `out`'s ids.
    pub(crate) fn finish(&self, dev: &Device, out: &CudaSlice<u32>, rows: usize, unpark: impl FnOnce()) -> Vec<u32> {
        let mut s = self.state();
        s.capturing = false;
        dev.set_capturing(false);
        let flags = sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
        let graph = match dev.stream.end_capture(flags) {
            Ok(Some(g)) => g,
            other => {
                eprintln!("graph lab: end capture: {:?}", other.err());
                std::process::exit(3);
            }
        };
        let times = replay(dev, &graph, self.replays);
        eprintln!(
            "graph lab: forward {} ({} rows) as one graph: {:.1} us a round back to back, {:.1} us with a \
             synchronize after each ({} replays, first {:.1} us)",
            self.at, rows, times.0, times.1, self.replays, times.2
        );
        let ids = dev.download(out, rows);
        drop(graph);
        s.parked.clear();
        unpark();
        ids
    }
}

/// (back to back, synchronized, first) microseconds a replay.
fn replay(dev: &Device, g: &CudaGraph, n: usize) -> (f64, f64, f64) {
    let go = |what: &str| {
        if let Err(e) = g.launch() {
            eprintln!("graph lab: {what}: {e:?}");
            std::process::exit(3);
        }
    };
    if let Err(e) = g.upload() {
        eprintln!("graph lab: upload: {e:?}");
    }
    let t = Instant::now();
    go("first launch");
    dev.synchronize();
    let first = t.elapsed().as_secs_f64() * 1e6;
    let t = Instant::now();
    for _ in 0..n {
        go("launch");
    }
    dev.synchronize();
    let b2b = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        go("launch");
        dev.synchronize();
    }
    let synced = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    (b2b, synced, first)
}
