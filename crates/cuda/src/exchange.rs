//! Tensor-parallel ranks that are threads of one process, each on a CUDA backend of its own,
//! summing their rows on the devices. Each rank records an event when its rows are ready and
//! posts their address; after a barrier every rank's stream waits for each other rank's event
//! and copies that rank's rows (a peer copy across GPUs, a plain one on a shared GPU) into a
//! gather buffer of its own, then records that it has read them; after a second barrier (so
//! every such event is recorded) its stream waits until every rank has read its rows, and adds
//! the gathered rows in rank order (`((x0 + x1) + x2) + ...` with rounded adds: the bits of the
//! host group's sum) into a new activation. The host never waits for a device: the barriers are
//! the group's, so the ranks' hosts run ahead of their GPUs as on one rank. Decode rounds are
//! not recorded as graphs here (a barrier is host work), so joining needs graphs off.

use crate::ctx::Ctx;
use crate::device::{Arg, grid_for, ptr};
use crate::error::must;
use crate::tensor::CudaAct;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, result};
use std::sync::{Arc, Mutex};
use tf_backend::BackendError;

/// What one group's ranks share: each rank's events and context, and the rows each posted.
pub struct Exchange {
    members: Mutex<Vec<Option<Arc<Member>>>>,
    /// Each rank's rows of the sum under way: device address and values.
    posts: Mutex<Vec<(u64, usize)>>,
}

/// One rank's context and its two events: its rows are ready; it has read every rank's rows.
struct Member {
    ctx: Arc<CudaContext>,
    ready: CudaEvent,
    read: CudaEvent,
}

impl Exchange {
    /// An exchange of `size` ranks, none joined.
    pub(crate) fn new(size: usize) -> Exchange {
        Exchange { members: Mutex::new(vec![None; size]), posts: Mutex::new(vec![(0, 0); size]) }
    }

    fn size(&self) -> usize {
        self.posts.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A backend's place in an exchange.
pub(crate) struct Joined {
    ex: Arc<Exchange>,
    rank: usize,
    me: Arc<Member>,
    /// Every rank's rows side by side (grown as sums need).
    gather: Option<CudaSlice<f32>>,
}

/// Rank `rank` of `ex` on the device of `b`.
pub(crate) fn join(b: &Ctx, ex: Arc<Exchange>, rank: usize) -> Result<Joined, BackendError> {
    let size = ex.size();
    if rank >= size {
        return Err(BackendError::Device(format!("rank {rank} of a {size}-rank exchange")));
    }
    let d = &b.dev;
    let event = || d.ctx.new_event(None).map_err(|e| BackendError::Device(format!("creating an event: {e}")));
    let me = Arc::new(Member { ctx: d.ctx.clone(), ready: event()?, read: event()? });
    ex.members.lock().unwrap_or_else(|p| p.into_inner())[rank] = Some(me.clone());
    Ok(Joined { ex, rank, me, gather: None })
}

/// `x` summed over the ranks of `j`'s exchange (module docs); `Err` when the ranks' rows
/// disagree or `barrier` says the group broke (then `x` is left as it is).
pub(crate) fn all_reduce(
    b: &Ctx,
    j: &mut Joined,
    x: &mut CudaAct,
    barrier: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    let d = &b.dev;
    let n = x.rows * x.cols;
    let src = ptr(x.data(d), &d.stream);
    must(j.me.ready.record(&d.stream), "recording an event");
    j.ex.posts.lock().unwrap_or_else(|p| p.into_inner())[j.rank] = (src, n);
    if !barrier() {
        return Err("the tensor-parallel group broke".into());
    }
    // Every rank posted before the barrier and posts again only after the next one.
    let posts = j.ex.posts.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let members: Vec<Arc<Member>> =
        j.ex.members.lock().unwrap_or_else(|p| p.into_inner()).iter().flatten().cloned().collect();
    let size = posts.len();
    if members.len() != size || posts.iter().any(|&(_, m)| m != n) || size * n > i32::MAX as usize {
        let counts: Vec<usize> = posts.iter().map(|p| p.1).collect();
        return Err(format!(
            "the ranks' rows to sum disagree: {counts:?} values, {} of {size} ranks joined",
            members.len()
        ));
    }
    if j.gather.as_ref().is_none_or(|g| g.len() < size * n) {
        j.gather = Some(d.alloc::<f32>(size * n));
    }
    let Some(gather) = j.gather.as_ref() else { unreachable!("allocated above") };
    let base = ptr(gather, &d.stream);
    for (r, (&(addr, _), m)) in posts.iter().zip(&members).enumerate() {
        if r != j.rank {
            must(d.stream.wait(&m.ready), "ordering a copy after a rank's rows");
        }
        let dst = base + (r * n * std::mem::size_of::<f32>()) as u64;
        // SAFETY: both addresses hold `n` f32 values: this rank's gather buffer, and rank `r`'s
        // rows, which it keeps until this stream has read them (`read`, below).
        let copied = unsafe {
            result::memcpy_peer_async(
                j.me.ctx.cu_ctx(),
                dst,
                m.ctx.cu_ctx(),
                addr,
                n * std::mem::size_of::<f32>(),
                d.stream.cu_stream(),
            )
        };
        must(copied, "copying a rank's rows");
    }
    must(j.me.read.record(&d.stream), "recording an event");
    if !barrier() {
        return Err("the tensor-parallel group broke".into());
    }
    for (r, m) in members.iter().enumerate() {
        if r != j.rank {
            must(d.stream.wait(&m.read), "ordering a sum after every rank's reads");
        }
    }
    let out = d.alloc::<f32>(n.max(1));
    let args = [Arg::P(base), Arg::P(ptr(&out, &d.stream)), Arg::I(n as i32), Arg::I(size as i32)];
    d.launch(&d.k.tp_sum, (grid_for(n, 256), 1, 1), 256, 0, &args);
    *x = CudaAct::new(out, x.rows, x.cols);
    Ok(())
}
