//! Tensor-parallel ranks that are threads of one process, each on a CUDA backend of its own,
//! summing their rows on the devices. Each rank records an event when its rows are ready and
//! posts their address; after a barrier every rank's stream waits for each other rank's event
//! and copies that rank's rows (a peer copy across GPUs, a plain one on a shared GPU) into a
//! gather buffer of its own, then records that it has read them; after a second barrier (so
//! every such event is recorded) its stream waits until every rank has read its rows, and adds
//! the gathered rows in rank order (`((x0 + x1) + x2) + ...` with rounded adds: the bits of the
//! host group's sum) into a new activation. The vocabulary-parallel head's gather goes alike,
//! rank 0 alone copying every rank's columns and the others waiting until it has read theirs.
//! The host never waits for a device: the barriers are the group's, so the ranks' hosts run
//! ahead of their GPUs as on one rank. Decode rounds are not recorded as graphs here (a barrier
//! is host work), so joining needs graphs off.

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
    /// Each rank's rows of the collective under way: device address, rows and columns.
    posts: Mutex<Vec<Post>>,
}

/// A rank's rows posted to a collective: device address, rows, columns.
type Post = (u64, usize, usize);

/// One rank's context and its two events: its rows are ready; it has read the rows it copies.
struct Member {
    ctx: Arc<CudaContext>,
    ready: CudaEvent,
    read: CudaEvent,
}

impl Exchange {
    /// An exchange of `size` ranks, none joined.
    pub(crate) fn new(size: usize) -> Exchange {
        Exchange { members: Mutex::new(vec![None; size]), posts: Mutex::new(vec![(0, 0, 0); size]) }
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
    /// Every rank's rows side by side (grown as collectives need).
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
    let (posts, members) = post(b, j, (src, x.rows, x.cols), barrier)?;
    let size = posts.len();
    if posts.iter().any(|&(_, r, c)| r * c != n) || size * n > i32::MAX as usize {
        let counts: Vec<usize> = posts.iter().map(|p| p.1 * p.2).collect();
        return Err(format!("the ranks' rows to sum disagree: {counts:?} values"));
    }
    let base = gather_buffer(b, j, size * n);
    for (r, (&(addr, _, _), m)) in posts.iter().zip(&members).enumerate() {
        copy_in(b, j, m, r, (base + (r * n * 4) as u64, addr, n));
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

/// On rank 0, each row of every rank's `x` side by side in rank order (`total` columns in all);
/// elsewhere `None` (the rank keeps `x`, which rank 0 has read by the time its stream goes on).
/// `Err` as [`all_reduce`].
pub(crate) fn gather_cols(
    b: &Ctx,
    j: &mut Joined,
    x: &CudaAct,
    total: usize,
    barrier: &mut dyn FnMut() -> bool,
) -> Result<Option<CudaAct>, String> {
    let d = &b.dev;
    let rows = x.rows;
    let src = ptr(x.data(d), &d.stream);
    let (posts, members) = post(b, j, (src, rows, x.cols), barrier)?;
    let widths: Vec<usize> = posts.iter().map(|p| p.2).collect();
    if posts.iter().any(|p| p.1 != rows) || widths.iter().sum::<usize>() != total || rows * total > i32::MAX as usize {
        return Err(format!("the ranks' logits are not {rows} whole rows of {total} columns: widths {widths:?}"));
    }
    let mut out = None;
    if j.rank == 0 {
        let base = gather_buffer(b, j, rows * total);
        // Rank r's rows land at `rows` times its first column, `[rows, width]`.
        let (mut parts, mut first) = (Vec::with_capacity(2 * widths.len()), 0);
        for (r, (&(addr, _, w), m)) in posts.iter().zip(&members).enumerate() {
            copy_in(b, j, m, r, (base + (rows * first * 4) as u64, addr, rows * w));
            parts.extend([first as i32, w as i32]);
            first += w;
        }
        let table = d.upload(&parts);
        let all = d.alloc::<f32>((rows * total).max(1));
        let args = [
            Arg::P(base),
            Arg::P(ptr(&all, &d.stream)),
            Arg::I(rows as i32),
            Arg::I(total as i32),
            Arg::P(ptr(&table, &d.stream)),
            Arg::I(widths.len() as i32),
        ];
        d.launch(&d.k.tp_interleave, (grid_for(rows * total, 256), 1, 1), 256, 0, &args);
        out = Some(CudaAct::new(all, rows, total));
    }
    must(j.me.read.record(&d.stream), "recording an event");
    if !barrier() {
        return Err("the tensor-parallel group broke".into());
    }
    if j.rank != 0 {
        must(d.stream.wait(&members[0].read), "ordering after rank 0's reads");
    }
    Ok(out)
}

/// Records that this rank's rows `mine` are ready and posts them; after the barrier, every
/// rank's posts and members (every rank posted before it, and posts again only after the
/// collective's second barrier).
fn post(
    b: &Ctx,
    j: &Joined,
    mine: Post,
    barrier: &mut dyn FnMut() -> bool,
) -> Result<(Vec<Post>, Vec<Arc<Member>>), String> {
    must(j.me.ready.record(&b.dev.stream), "recording an event");
    j.ex.posts.lock().unwrap_or_else(|p| p.into_inner())[j.rank] = mine;
    if !barrier() {
        return Err("the tensor-parallel group broke".into());
    }
    let posts = j.ex.posts.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let members: Vec<Arc<Member>> =
        j.ex.members.lock().unwrap_or_else(|p| p.into_inner()).iter().flatten().cloned().collect();
    if members.len() != posts.len() {
        return Err(format!("{} of {} ranks joined the exchange", members.len(), posts.len()));
    }
    Ok((posts, members))
}

/// The address of this rank's gather buffer of at least `n` values (grown as needed).
fn gather_buffer(b: &Ctx, j: &mut Joined, n: usize) -> u64 {
    let d = &b.dev;
    let gather = match j.gather.take() {
        Some(g) if g.len() >= n => g,
        _ => d.alloc::<f32>(n.max(1)),
    };
    let p = ptr(&gather, &d.stream);
    j.gather = Some(gather);
    p
}

/// Copies `n` f32 values from rank `r`'s address `src` (member `m`) to `dst` on this rank's
/// device, once rank `r`'s rows are ready.
fn copy_in(b: &Ctx, j: &Joined, m: &Member, r: usize, (dst, src, n): (u64, u64, usize)) {
    let d = &b.dev;
    if r != j.rank {
        must(d.stream.wait(&m.ready), "ordering a copy after a rank's rows");
    }
    // SAFETY: both addresses hold `n` f32 values: this rank's gather buffer, and rank `r`'s
    // rows, which it keeps until this stream has read them (its `read` event, waited on).
    let copied =
        unsafe { result::memcpy_peer_async(j.me.ctx.cu_ctx(), dst, m.ctx.cu_ctx(), src, n * 4, d.stream.cu_stream()) };
    must(copied, "copying a rank's rows");
}
