//! Mixture of experts (kernels/moe.cu). Every round routes on the device (softmax or sigmoid
//! scores, choice bias, expert groups, top-k, renormalisation, scaling: router.rs `route`'s
//! steps), so a token's experts and weights do not
//! depend on the path below (a model past the routing kernels' limits, more than 1024 experts or
//! 32 chosen, routes every round on the host instead). Rounds of at most [`DEVICE_ROWS`] rows of
//! bf16 experts (or FP8 ones whose blocks the FP8 GEMV takes, whose codes the grouped FP8 GEMV
//! reads) stay on the device: the routed (row, expert) pairs are sorted by expert, gathered, run
//! through grouped GEMVs over every chosen expert (gate and up in one launch, then down), and
//! combined, with no host round trip (so decode rounds can be recorded as graphs). Larger rounds
//! download only the routing, then per expert a gather, the expert's gated MLP through the
//! ordinary matmul kernels, and a weighted scatter-add; or by default, on
//! Hopper, bf16 experts through one grouped wgmma GEMM a weight kind over every routed expert
//! (grouped.rs: rounds of up to 256 rows planned on the device, with no download; the per-expert
//! matmuls where `CudaOptions::moe_per_expert` asks, or the weights or card do not fit it). Both paths clamp the gated activation where `MoeParams::clamp`
//! says (Step's `swiglu_limits`: ops.rs `glu_clamped`). The grouped GEMV gives an expert's rows
//! the bits the ordinary matmul gives them, and both paths add a row's experts in increasing expert order, so each row's sum has the same
//! bits whatever else is batched with it and whichever path ran.

mod grouped;

use crate::ctx::{Ctx, Table};
use crate::device::{Arg, ptr};
use crate::matmul::{gemv_row_groups, matmul};
use crate::ops::{activate, add_bias, bf16_of, gather, glu_limited};
use crate::smem::{gemv_fp8_smem, gemv_smem};
use crate::tensor::{CudaAct, CudaMat, CudaVec, padded};
use cudarc::driver::CudaSlice;
use std::sync::Arc;
use tf_backend::{ExpertBiases, Experts, MoeParams, MoeScoring};

/// Most rows a round may have for the device path: the grouped GEMV takes at most 64 rows an
/// expert, and a row chooses an expert at most once.
pub(crate) const DEVICE_ROWS: usize = 64;
/// Most experts the routing kernels take (kernels/moe.cu `MOE_MAX_EXPERTS`).
const MAX_EXPERTS: usize = 1024;
/// Most experts a token may choose (kernels/moe.cu `MOE_MAX_TOPK`).
const MAX_TOPK: usize = 32;
/// Most expert groups the routing kernel ranks (kernels/moe.cu `MOE_MAX_GROUPS`).
const MAX_GROUPS: usize = 32;
/// Expert pointer tables kept (one per MoE layer of the loaded models).
const KEEP_TABLES: usize = 4096;

pub(crate) fn moe(
    b: &Ctx,
    x: &CudaAct,
    router_logits: &CudaAct,
    experts: &Experts<CudaMat, CudaVec>,
    p: &MoeParams,
) -> CudaAct {
    let gated = !experts.gate.is_empty();
    let bias = experts.choice_bias.as_ref();
    let gate = |e: usize| if gated { &experts.gate[e] } else { &experts.up[e] };
    let of = |e: usize| [gate(e), &experts.up[e], &experts.down[e]];
    if let Some(eb) = &experts.biases {
        return with_biases(b, x, router_logits, experts, eb, p);
    }
    if experts.first != 0 || experts.up.len() != router_logits.cols {
        return held_experts(b, x, router_logits, experts.first, experts.up.len(), bias, gated, of, p);
    }
    moe_by(b, x, router_logits, bias, gated, of, p)
}

/// Experts with biases after their projections (gpt-oss): routed as every MoE is, then each held
/// expert over its rows through the host-driven path, its biases added after its matmuls.
fn with_biases(
    b: &Ctx,
    x: &CudaAct,
    router_logits: &CudaAct,
    experts: &Experts<CudaMat, CudaVec>,
    eb: &ExpertBiases<CudaVec>,
    p: &MoeParams,
) -> CudaAct {
    let held = experts.up.len();
    let bias = experts.choice_bias.as_ref();
    let Some((local, weights)) = held_routes(b, x, router_logits, experts.first, held, bias, p) else {
        return CudaAct::new(b.dev.zeros::<f32>(0), 0, x.cols);
    };
    let gated = !experts.gate.is_empty();
    let run = |e: usize, xe: &CudaAct| {
        let mut u = matmul(b, xe, &experts.up[e]);
        add_bias(b, &mut u, &eb.up[e]);
        let h = if gated {
            let mut g = matmul(b, xe, &experts.gate[e]);
            if let Some(gb) = eb.gate.get(e) {
                add_bias(b, &mut g, gb);
            }
            glu_limited(b, &g, &u, p.act, p.clamp)
        } else {
            activate(b, &u, p.act)
        };
        let mut y = matmul(b, &h, &experts.down[e]);
        add_bias(b, &mut y, &eb.down[e]);
        y
    };
    scatter_experts(b, x, &local, &weights, held, p.top_k, run)
}

/// Every row's routes (`[rows, top_k]` ids and weights) with the experts `first..first + held`
/// renumbered from 0 and the others past `held` (which [`scatter_experts`] drops); `None` for no
/// rows.
fn held_routes(
    b: &Ctx,
    x: &CudaAct,
    router_logits: &CudaAct,
    first: usize,
    held: usize,
    bias: Option<&CudaVec>,
    p: &MoeParams,
) -> Option<(Vec<u32>, Vec<f32>)> {
    let (ne, k, d) = (router_logits.cols, p.top_k, &b.dev);
    assert!(first + held <= ne && k >= 1 && k <= ne, "moe: experts {first}..{} of {ne}, top-{k}", first + held);
    if x.rows == 0 {
        return None;
    }
    let (ids, weights) = if past_kernels(ne, p) {
        host_routes(b, router_logits, bias, p)
    } else {
        let (ids, w) = route(b, router_logits, bias, p);
        (d.download(&ids, x.rows * k), d.download(&w, x.rows * k))
    };
    let local = ids
        .iter()
        .map(|&e| match (e as usize).checked_sub(first) {
            Some(l) if l < held => l as u32,
            _ => u32::MAX,
        })
        .collect();
    Some((local, weights))
}

/// Expert parallelism: this rank holds experts `first..first + held` of the router's. Every row
/// is routed as on one rank, and each held expert runs on its rows through the host-driven path
/// (the others' pairs dropped): the rank's part of the output, which the ranks sum.
#[allow(clippy::too_many_arguments)]
fn held_experts<'a>(
    b: &Ctx,
    x: &CudaAct,
    router_logits: &CudaAct,
    first: usize,
    held: usize,
    bias: Option<&CudaVec>,
    gated: bool,
    experts: impl Fn(usize) -> [&'a CudaMat; 3],
    p: &MoeParams,
) -> CudaAct {
    let Some((local, weights)) = held_routes(b, x, router_logits, first, held, bias, p) else {
        return CudaAct::new(b.dev.zeros::<f32>(0), 0, x.cols);
    };
    by_expert(b, x, &local, &weights, held, gated, experts, p)
}

/// [`moe`] over experts held in any container: `experts(e)` gives expert `e`'s gate, up, down
/// (the gate is not read unless `gated`); `bias` is the router's choice bias.
#[allow(clippy::too_many_arguments)]
pub(crate) fn moe_by<'a>(
    b: &Ctx,
    x: &CudaAct,
    router_logits: &CudaAct,
    bias: Option<&CudaVec>,
    gated: bool,
    experts: impl Fn(usize) -> [&'a CudaMat; 3],
    p: &MoeParams,
) -> CudaAct {
    let (ne, k, d) = (router_logits.cols, p.top_k, &b.dev);
    assert_eq!(router_logits.rows, x.rows, "moe: one router row per token");
    assert!(k >= 1 && k <= ne, "moe: top-{k} of {ne} experts (the loader checks it)");
    if x.rows == 0 {
        return CudaAct::new(d.zeros::<f32>(0), 0, x.cols);
    }
    if past_kernels(ne, p) {
        // Past the routing kernels' limits (no supported family is): the reference rule on the
        // host, for every round of the model, so its paths still agree.
        let (ids, weights) = host_routes(b, router_logits, bias, p);
        return by_expert(b, x, &ids, &weights, ne, gated, experts, p);
    }
    let (ids, w) = route(b, router_logits, bias, p);
    if x.rows <= DEVICE_ROWS
        && let Some((table, fp8)) = table(b, x.rows, ne, &experts)
    {
        return on_device(b, x, &ids, &w, (&table, fp8), &experts(0), gated, p);
    }
    let maps = b.moe_grouped.then(|| grouped::maps(b, ne, &experts)).flatten();
    if let Some(maps) = &maps
        && grouped::plans_on_device(x.rows, k)
    {
        return grouped::grouped(b, x, &ids, &w, None, maps, &experts(0), gated, p);
    }
    let host_ids = d.download(&ids, x.rows * k);
    if let Some(maps) = &maps
        && host_ids.iter().all(|&e| (e as usize) < ne)
    {
        return grouped::grouped(b, x, &ids, &w, Some(&host_ids), maps, &experts(0), gated, p);
    }
    by_expert(b, x, &host_ids, &d.download(&w, x.rows * k), ne, gated, experts, p)
}

/// Whether a router of `ne` experts with `p` is past the routing kernels' limits.
fn past_kernels(ne: usize, p: &MoeParams) -> bool {
    p.top_k > MAX_TOPK || ne > MAX_EXPERTS || p.n_group > MAX_GROUPS
}

/// Every row's routes by the reference rule on the host: `[rows, top_k]` ids and weights.
fn host_routes(b: &Ctx, logits: &CudaAct, bias: Option<&CudaVec>, p: &MoeParams) -> (Vec<u32>, Vec<f32>) {
    let (d, ne) = (&b.dev, logits.cols);
    let values = d.download(logits.data(d), logits.rows * ne);
    let bias = bias.map(|v| d.download(&v.data, v.len));
    let routes = values.chunks_exact(ne).flat_map(|row| tf_backend::reference::route(row, bias.as_deref(), p));
    routes.map(|(e, w)| (e as u32, w)).unzip()
}

/// Per row its `top_k` experts and weights, largest choice value first: `[rows, top_k]` each.
fn route(b: &Ctx, logits: &CudaAct, bias: Option<&CudaVec>, p: &MoeParams) -> (CudaSlice<u32>, CudaSlice<f32>) {
    let d = &b.dev;
    let (rows, ne, k) = (logits.rows, logits.cols, p.top_k);
    let (ids, w) = (d.alloc::<u32>(rows * k), d.alloc::<f32>(rows * k));
    let args = [
        Arg::P(ptr(logits.data(&b.dev), &d.stream)),
        Arg::P(ptr(&ids, &d.stream)),
        Arg::P(ptr(&w, &d.stream)),
        Arg::I(rows as i32),
        Arg::I(ne as i32),
        Arg::I(k as i32),
        Arg::I(p.norm_topk_prob as i32),
        Arg::P(bias.map_or(0, |v| ptr(&v.data, &d.stream))),
        Arg::I(matches!(p.scoring, MoeScoring::Sigmoid) as i32),
        Arg::I(p.n_group as i32),
        Arg::I(p.topk_group as i32),
        Arg::F(p.norm_eps),
        Arg::F(p.scale),
    ];
    // A warp a row, four rows a block (kernels/moe.cu `MOE_ROUTE_ROWS`).
    d.launch(&d.k.moe_route, (rows.div_ceil(4) as u32, 1, 1), 128, 0, &args);
    (ids, w)
}

/// An FP8 expert kind's blocks as the FP8 GEMV takes them (fp8.rs `gemv_blocks`).
type Fp8Blocks = [i32; 4];

/// The experts' gate, up and down weight addresses on the device (`[gate | up | down]`, `ne`
/// each; FP8 experts: their codes', then their scales' alike, with each kind's blocks), uploaded
/// on first use; `None` unless every weight is bf16, or FP8 whose blocks the FP8 GEMV takes (and
/// `rows` within `Ctx::fp8_gemv_rows`), of one shape and (FP8) one block layout per kind, gate
/// and up alike.
#[allow(clippy::type_complexity)]
fn table<'a>(
    b: &Ctx,
    rows: usize,
    ne: usize,
    experts: &impl Fn(usize) -> [&'a CudaMat; 3],
) -> Option<(Arc<CudaSlice<u64>>, Option<[Fp8Blocks; 3]>)> {
    let d = &b.dev;
    let first = experts(0);
    let fp8 = match first[0] {
        CudaMat::Fp8 { .. } => Some(first.map(crate::fp8::gemv_blocks)),
        _ => None,
    };
    // FP8 experts take the grouped FP8 GEMV only where the FP8 GEMV takes the round's rows.
    if fp8.is_some() && rows > b.fp8_gemv_rows.min(DEVICE_ROWS) {
        return None;
    }
    let fp8 = match fp8 {
        Some([Some(g), Some(u), Some(dn)]) if g == u => Some([g, u, dn]),
        Some(_) => return None,
        None => None,
    };
    let mut host = vec![0u64; if fp8.is_some() { 6 * ne } else { 3 * ne }];
    for e in 0..ne {
        for (kind, m) in experts(e).into_iter().enumerate() {
            if m.shape() != first[kind].shape() {
                return None;
            }
            match (m, fp8) {
                (CudaMat::Bf16 { w, .. }, None) => host[kind * ne + e] = ptr(w, &d.stream),
                (CudaMat::Fp8 { w, scales, .. }, Some(blocks)) if crate::fp8::gemv_blocks(m) == Some(blocks[kind]) => {
                    host[kind * ne + e] = ptr(w, &d.stream);
                    host[(3 + kind) * ne + e] = ptr(scales, &d.stream);
                }
                _ => return None,
            }
        }
    }
    let mut c = b.caches();
    // Shared, not cloned: a CudaSlice clone is a device copy (in a recording, a copy node that
    // would end the kernels' programmatic launches).
    if let Some(t) = c.experts.get(&host) {
        return Some((Arc::clone(&t.dev), fp8));
    }
    let (in_capture, t) = (d.capturing(), Arc::new(d.upload(&host)));
    if c.experts.len() >= KEEP_TABLES {
        c.experts.clear();
    }
    c.experts.insert(host, Table { dev: Arc::clone(&t), in_capture });
    Some((t, fp8))
}

/// The device path: plan, gather, grouped gate and up, glu, grouped down, combine.
#[allow(clippy::too_many_arguments)]
fn on_device(
    b: &Ctx,
    x: &CudaAct,
    ids: &CudaSlice<u32>,
    w: &CudaSlice<f32>,
    (table, fp8): (&CudaSlice<u64>, Option<[Fp8Blocks; 3]>),
    shapes: &[&CudaMat; 3],
    gated: bool,
    p: &MoeParams,
) -> CudaAct {
    let d = &b.dev;
    let (rows, k) = (x.rows, p.top_k);
    let ne = table.len() / if fp8.is_some() { 6 } else { 3 };
    let pairs = rows * k;
    let offsets = d.alloc::<u32>(ne + 1);
    let active = d.alloc::<u32>(ne);
    let n_active = d.alloc::<u32>(1);
    let pair_row = d.alloc::<u32>(pairs);
    let pos = d.alloc::<u32>(pairs);
    let s = &d.stream;
    let args = [
        Arg::P(ptr(ids, s)),
        Arg::I(pairs as i32),
        Arg::I(ne as i32),
        Arg::I(k as i32),
        Arg::P(ptr(&offsets, s)),
        Arg::P(ptr(&active, s)),
        Arg::P(ptr(&n_active, s)),
        Arg::P(ptr(&pair_row, s)),
        Arg::P(ptr(&pos, s)),
    ];
    d.launch(&d.k.moe_plan, (1, 1, 1), ne.next_multiple_of(32) as u32, 0, &args);
    let xe = gather(b, x, ptr(&pair_row, s), pairs);
    // Experts with pairs: at most one a pair.
    let slots = ne.min(pairs) as u32;
    let plan = [ptr(&offsets, s), ptr(&active, s), ptr(&n_active, s)];
    // Weights `kinds` (gate and up, or down) of every active expert over `xin`'s pairs.
    let grouped = |xin: &CudaAct, kinds: std::ops::Range<usize>| {
        let (n, kin) = shapes[kinds.start].shape();
        assert!(kinds.clone().all(|k| shapes[k].shape() == (n, kin)), "moe: grouped weights differ in shape");
        assert_eq!(xin.cols, kin, "moe: expert input width");
        let ys: Vec<CudaSlice<f32>> = kinds.clone().map(|_| d.alloc::<f32>(pairs * n)).collect();
        let nt = gemv_row_groups(rows);
        if let Some(blocks) = fp8 {
            let kw = |kind: usize| ptr(table, s) + (8 * kind * ne) as u64;
            let [bh, bt, gr, gc] = blocks[kinds.start];
            // Tiles packed a block as the bf16 kernel's (gemm.cu `PACK`).
            let per = 8 / crate::tma::segments(kin.div_ceil(16));
            let nblk = n.div_ceil(16).div_ceil(per);
            let f = match nt {
                1 => &d.k.moe_gemv_fp8_n1,
                2 => &d.k.moe_gemv_fp8_n2,
                4 => &d.k.moe_gemv_fp8_n4,
                _ => &d.k.moe_gemv_fp8_n8,
            };
            let args = [
                Arg::P(kw(kinds.start)),
                Arg::P(kw(3 + kinds.start)),
                Arg::I(ne as i32),
                Arg::P(ptr(&ys[0], s)),
                Arg::P(ptr(ys.last().unwrap_or(&ys[0]), s)),
                Arg::I(n as i32),
                Arg::I(nblk as i32),
                Arg::I(bh),
                Arg::I(bt),
                Arg::I(gr),
                Arg::I(gc),
                Arg::P(ptr(bf16_of(b, xin), s)),
                Arg::P(plan[0]),
                Arg::P(plan[1]),
                Arg::P(plan[2]),
                Arg::I(kin.div_ceil(16) as i32),
                Arg::I(padded(kin) as i32),
            ];
            d.launch(f, ((nblk * kinds.len()) as u32, slots, 1), 256, gemv_fp8_smem(nt), &args);
            return ys.into_iter().map(|y| CudaAct::new(y, pairs, n)).collect::<Vec<_>>();
        }
        let f = match nt {
            1 => &d.k.moe_gemv_n1,
            2 => &d.k.moe_gemv_n2,
            4 => &d.k.moe_gemv_n4,
            _ => &d.k.moe_gemv_n8,
        };
        // Tiles a block takes: as many as its warps hold whole segment sets (gemm.cu `PACK`).
        let per = 8 / crate::tma::segments(kin.div_ceil(16));
        let nblk = n.div_ceil(16).div_ceil(per);
        let args = [
            Arg::P(ptr(table, s) + (8 * kinds.start * ne) as u64),
            Arg::I(ne as i32),
            Arg::P(ptr(&ys[0], s)),
            Arg::P(ptr(ys.last().unwrap_or(&ys[0]), s)),
            Arg::I(n as i32),
            Arg::I(nblk as i32),
            Arg::P(ptr(bf16_of(b, xin), s)),
            Arg::P(plan[0]),
            Arg::P(plan[1]),
            Arg::P(plan[2]),
            Arg::I(kin.div_ceil(16) as i32),
            Arg::I(padded(kin) as i32),
        ];
        d.launch(f, ((nblk * kinds.len()) as u32, slots, 1), 256, gemv_smem(nt), &args);
        ys.into_iter().map(|y| CudaAct::new(y, pairs, n)).collect::<Vec<_>>()
    };
    experts_and_combine(b, x, &xe, gated, p, (ids, w, ptr(&pos, s)), grouped)
}

/// Every routed expert's MLP over the expert-sorted pairs `xe` through `run(input, kinds)` (one
/// output per weight kind: gate and up `0..2`, up alone `1..2`, down `2..3`), the gated
/// activation between, then each of `x`'s rows' experts added in increasing expert order
/// (kernels/moe.cu `moe_combine`) from the routing `(ids, weights, each pair's place)`.
fn experts_and_combine(
    b: &Ctx,
    x: &CudaAct,
    xe: &CudaAct,
    gated: bool,
    p: &MoeParams,
    (ids, w, pos): (&CudaSlice<u32>, &CudaSlice<f32>, u64),
    run: impl Fn(&CudaAct, std::ops::Range<usize>) -> Vec<CudaAct>,
) -> CudaAct {
    let (d, s) = (&b.dev, &b.dev.stream);
    let h = if gated {
        let gu = run(xe, 0..2);
        glu_limited(b, &gu[0], &gu[1], p.act, p.clamp)
    } else {
        activate(b, &run(xe, 1..2)[0], p.act)
    };
    let y = run(&h, 2..3).remove(0);
    let out = d.alloc::<f32>(x.rows * x.cols);
    let args = [
        Arg::P(ptr(y.data(&b.dev), s)),
        Arg::P(ptr(ids, s)),
        Arg::P(ptr(w, s)),
        Arg::P(pos),
        Arg::P(ptr(&out, s)),
        Arg::I(p.top_k as i32),
        Arg::I(x.cols as i32),
    ];
    d.launch(&d.k.moe_combine, (x.rows as u32, x.cols.div_ceil(256) as u32, 1), 256, 0, &args);
    CudaAct::new(out, x.rows, x.cols)
}

/// The host-driven path: from the routing (`[rows, top_k]` ids and weights, on the host), each
/// chosen expert runs on its rows.
#[allow(clippy::too_many_arguments)]
fn by_expert<'a>(
    b: &Ctx,
    x: &CudaAct,
    ids: &[u32],
    weights: &[f32],
    ne: usize,
    gated: bool,
    experts: impl Fn(usize) -> [&'a CudaMat; 3],
    p: &MoeParams,
) -> CudaAct {
    let k = p.top_k;
    let run = |e: usize, xe: &CudaAct| {
        let [gate, up, down] = experts(e);
        let u = matmul(b, xe, up);
        let h = if gated { glu_limited(b, &matmul(b, xe, gate), &u, p.act, p.clamp) } else { activate(b, &u, p.act) };
        matmul(b, &h, down)
    };
    scatter_experts(b, x, ids, weights, ne, k, run)
}

/// Per expert `e` below `ne` with rows routed to it (`ids` / `weights`: `[rows, k]`; other ids
/// dropped), `run(e, its rows of x)` added into the output times each row's weight, experts in
/// increasing order.
fn scatter_experts(
    b: &Ctx,
    x: &CudaAct,
    ids: &[u32],
    weights: &[f32],
    ne: usize,
    k: usize,
    run: impl Fn(usize, &CudaAct) -> CudaAct,
) -> CudaAct {
    let d = &b.dev;
    let mut lists: Vec<Vec<(u32, f32)>> = vec![Vec::new(); ne];
    for (i, (&e, &wt)) in ids.iter().zip(weights).enumerate() {
        // Routed ids are below `ne` by construction; a bad one would only drop its term.
        if let Some(l) = lists.get_mut(e as usize) {
            l.push(((i / k) as u32, wt));
        }
    }
    let rows: Vec<u32> = lists.iter().flatten().map(|&(r, _)| r).collect();
    let weights: Vec<f32> = lists.iter().flatten().map(|&(_, w)| w).collect();
    let (rows_d, weights_d) = (d.upload(&rows), d.upload(&weights));
    let (rbase, wbase) = (ptr(&rows_d, &d.stream), ptr(&weights_d, &d.stream));
    let out = d.zeros::<f32>(x.rows * x.cols);
    let mut start = 0usize;
    for (e, list) in lists.iter().enumerate() {
        let n = list.len();
        if n == 0 {
            continue;
        }
        let (ri, wi) = (rbase + 4 * start as u64, wbase + 4 * start as u64);
        let xe = gather(b, x, ri, n);
        let y = run(e, &xe);
        let args = [
            Arg::P(ptr(&out, &d.stream)),
            Arg::P(ptr(y.data(&b.dev), &d.stream)),
            Arg::P(ri),
            Arg::P(wi),
            Arg::I(x.cols as i32),
        ];
        d.launch(&d.k.scatter_add, (n as u32, 1, 1), 256, 0, &args);
        start += n;
    }
    CudaAct::new(out, x.rows, x.cols)
}
