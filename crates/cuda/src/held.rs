//! Token ids a round picked, held on the device (`Backend::argmax_rows_held`): the engine queues
//! the next round on them before they reach the host, so the GPU does not idle while the host
//! reads them. The next round's inputs name rows of them and `gather_ids` turns those into ids
//! where the embedding reads them (graph.rs for recorded rounds, [`embed_held`] otherwise).

use crate::capture::Input;
use crate::ctx::Ctx;
use crate::device::ptr;
use crate::error::must;
use crate::ops;
use crate::tensor::{CudaAct, CudaMat};
use cudarc::driver::{CudaEvent, CudaSlice, PinnedHostSlice, sys};
use std::sync::{Arc, Mutex};

/// Pinned buffers kept for reuse (allocating pinned memory costs more than a round's host work).
const SPARE: usize = 8;

/// A pinned host buffer, the event recorded on the compute stream once the ids are picked, and
/// the one recorded after their copy into the buffer (our own: the context's stream
/// synchronization is off, device.rs, so cudarc records none for a pinned copy).
type Landing = (PinnedHostSlice<u32>, CudaEvent, CudaEvent);

/// Pinned host buffers (with their events) that held ids before, for the next rounds' copies.
pub(crate) type Spare = Arc<Mutex<Vec<Landing>>>;

/// Ids picked on the device and their copy to the host, queued behind them; or ids picked on
/// the host ([`hold_ids`]) and uploaded.
pub struct CudaHeld {
    /// The ids on the device (`n` of them).
    pub(crate) ids: CudaSlice<u32>,
    n: usize,
    /// Their copy on the host (ready once its event is; `None` for no rows or known ids).
    host: Option<Landing>,
    /// The ids, where the host picked them.
    known: Option<Vec<u32>>,
    spare: Spare,
}

impl CudaHeld {
    /// Whether the host picked these ids (no copy to wait for).
    pub(crate) fn is_known(&self) -> bool {
        self.known.is_some()
    }
}

impl Drop for CudaHeld {
    fn drop(&mut self) {
        if let Some(h) = self.host.take() {
            // A copy still landing must not have its buffer freed or reused (ids read already:
            // no wait).
            let _ = h.2.synchronize();
            let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
            if spare.len() == SPARE {
                spare.remove(0);
            }
            spare.push(h);
        }
    }
}

/// The argmax of every row of `x`, kept on the device, with its copy to the host queued.
pub(crate) fn argmax_rows_held(b: &Ctx, spare: &Spare, x: &CudaAct) -> CudaHeld {
    let ids = ops::argmax_on_device(b, x);
    let n = x.rows;
    let spare = spare.clone();
    if n == 0 {
        return CudaHeld { ids, n, host: None, known: None, spare };
    }
    let reused = {
        let mut s = spare.lock().unwrap_or_else(|p| p.into_inner());
        // The copy fills the whole buffer (cudarc copies the host slice's length), so its
        // length is the round's rows.
        s.iter().position(|h| h.0.len() == n).map(|i| s.swap_remove(i))
    };
    let d = &b.dev;
    let event = || must(d.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)), "creating an event");
    let (mut host, picked, done) = match reused {
        Some(h) => h,
        // SAFETY: the buffer is only read after the copy below fills it (its event).
        None => (must(unsafe { d.ctx.alloc_pinned::<u32>(n) }, "allocating pinned memory"), event(), event()),
    };
    // The copy runs on its own stream once the ids are picked, so the compute stream goes on to
    // the next round (queued on these ids) without a copy between; the ids stay allocated until
    // it lands (`Drop` waits for it).
    must(picked.record(&d.stream), "recording an event");
    must(d.to_host.wait(&picked), "ordering the ids' copy after their pick");
    must(d.to_host.memcpy_dtoh(&ids.slice(..n), &mut host), "copying ids to the host");
    must(done.record(&d.to_host), "recording an event");
    CudaHeld { ids, n, host: Some((host, picked, done)), known: None, spare }
}

/// Ids the host picked, uploaded where the next round's embedding reads held ids.
pub(crate) fn hold_ids(b: &Ctx, spare: &Spare, ids: &[u32]) -> CudaHeld {
    // An empty upload has no buffer: one id stands in, never read (no row names it).
    let dev = b.dev.upload(if ids.is_empty() { &[0] } else { ids });
    CudaHeld { ids: dev, n: ids.len(), host: None, known: Some(ids.to_vec()), spare: spare.clone() }
}

/// The ids of `h` on the host (waits for their copy).
pub(crate) fn held_ids(h: &CudaHeld) -> Vec<u32> {
    if let Some(ids) = &h.known {
        return ids.clone();
    }
    match &h.host {
        Some((host, _, done)) => {
            must(done.synchronize(), "waiting for ids copied to the host");
            must(host.as_slice(), "reading ids copied to the host")[..h.n].to_vec()
        }
        None => Vec::new(),
    }
}

/// The embedding of ids `held[rows[i]]`: inside a capture the round's inputs already hold them
/// (graph.rs gathers them before it captures or replays); otherwise the row indices are uploaded
/// and gathered into ids on the device.
pub(crate) fn embed_held(b: &Ctx, table: &CudaMat, held: &CudaHeld, rows: &[u32], scale: f32) -> CudaAct {
    if let Some(p) = b.capture.input(Input::Ids, rows) {
        return ops::embed_at(b, table, p, rows.len(), scale);
    }
    let buf = b.dev.upload(rows);
    let at = ptr(&buf, &b.dev.stream);
    ops::gather_ids(b, at, &held.ids, rows.len());
    ops::embed_at(b, table, at, rows.len(), scale)
}
