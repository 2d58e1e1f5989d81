//! Launching the matmul kernels: the GEMVs for few rows (decode), the tiled GEMMs for many.

use crate::ctx::Ctx;
use crate::device::{Arg, Device, grid_for, ptr};
use crate::ops::bf16_of;
use crate::smem::{
    GEMM_SMEM, GEMV_WARPS, MAX_SMEM, WGMMA_SMEM, WGMMA_THREADS, gemv_smem, gemv_tma_smem, gemv_tma_xr_smem,
};
use crate::tensor::{CudaAct, CudaMat, CudaVec, bf16_out, padded};
use cudarc::driver::CudaSlice;
use tf_backend::Activation;

const BLOCK: u32 = 256;

/// Most rows the f32 / f16 GEMM takes with a warp a weight row (gemm.cu `gemm_simt_e1`).
const SIMT_FEW_ROWS: usize = 16;

/// `x @ w^T`.
pub(crate) fn matmul(b: &Ctx, x: &CudaAct, w: &CudaMat) -> CudaAct {
    matmul_many(b, x, &[w]).pop().expect("one weight, one output")
}

/// `x @ w^T` for each weight of `ws` (same input width): bf16 weights share one GEMV or wgmma
/// GEMM launch (up to three per launch); each output equals its own `matmul` bit for bit.
pub(crate) fn matmul_many(b: &Ctx, x: &CudaAct, ws: &[&CudaMat]) -> Vec<CudaAct> {
    let outs = outputs(b, x, ws);
    let ys: Vec<&CudaSlice<f32>> = outs.iter().map(|o| o.data(&b.dev)).collect();
    launch(b, x, ws, &ys, false);
    outs
}

/// `h += x @ w^T`: the residual add in the matmul's store (the same f32 addition as `add_assign`).
pub(crate) fn matmul_add(b: &Ctx, x: &CudaAct, w: &CudaMat, h: &mut CudaAct) {
    let (n, k) = w.shape();
    assert_eq!(
        (x.cols, h.rows, h.cols),
        (k, x.rows, n),
        "matmul_add: x {}x{}, W {n}x{k}, h {}x{}",
        x.rows,
        x.cols,
        h.rows,
        h.cols
    );
    launch(b, x, &[w], &[h.data(&b.dev)], true);
    h.touched();
}

/// `matmul_many(rms_norm(x, nw), ws)`: the norm kernel, then the matmuls.
pub(crate) fn norm_matmul_many(
    b: &Ctx,
    x: &CudaAct,
    nw: &CudaVec,
    eps: f32,
    one_plus: bool,
    ws: &[&CudaMat],
) -> Vec<CudaAct> {
    matmul_many(b, &norm_for(b, x, nw, eps, one_plus, ws), ws)
}

/// `rms_norm(x, nw)` as the input of matmuls by `ws`: held as bf16 only where they all read bf16.
fn norm_for(b: &Ctx, x: &CudaAct, nw: &CudaVec, eps: f32, one_plus: bool, ws: &[&CudaMat]) -> CudaAct {
    if ws.iter().all(|w| matches!(w, CudaMat::Bf16 { .. } | CudaMat::Fp8 { .. })) {
        return crate::ops::rms_norm_for_matmul(b, x, nw, eps, one_plus);
    }
    crate::ops::rms_norm(b, x, nw, eps, one_plus)
}

/// Fresh outputs `[x.rows, w.rows]` for each weight (checking the input width).
fn outputs(b: &Ctx, x: &CudaAct, ws: &[&CudaMat]) -> Vec<CudaAct> {
    ws.iter()
        .map(|w| {
            let (n, k) = w.shape();
            assert_eq!(x.cols, k, "matmul: x has {} columns, W is {n}x{k}", x.cols);
            CudaAct::new(b.dev.alloc::<f32>(x.rows * n), x.rows, n)
        })
        .collect()
}

/// `ys[i] = x @ ws[i]^T` (or `+=` with `add`) through the kernel that suits the row count.
fn launch(b: &Ctx, x: &CudaAct, ws: &[&CudaMat], ys: &[&CudaSlice<f32>], add: bool) {
    let d = &b.dev;
    let m = x.rows;
    if m == 0 {
        return;
    }
    if ws.iter().any(|w| matches!(w, CudaMat::Fp8 { .. })) {
        return launch_fp8(b, x, ws, ys, add);
    }
    let bf16: Vec<(u64, usize, usize)> = ws
        .iter()
        .filter_map(|w| match w {
            CudaMat::Bf16 { w, rows, ntiles, .. } => Some((ptr(w, &d.stream), *rows, *ntiles)),
            CudaMat::Plain { .. } | CudaMat::Fp8 { .. } => None,
        })
        .collect();
    // From 33 rows the wgmma GEMM (same reduction order) outruns the GEMV; weights carry a map
    // only where it runs (Hopper).
    let wgmma = ws.iter().all(|w| matches!(w, CudaMat::Bf16 { map: Some(_), .. }));
    if m > 32 && wgmma && gemm_wgmma(b, x, ws, ys, add) {
        return;
    }
    if m > 64 || (m > 32 && wgmma) || bf16.len() != ws.len() {
        for (w, y) in ws.iter().zip(ys) {
            matmul_one(b, x, w, y, add);
        }
        return;
    }
    let xb = ptr(bf16_of(b, x), &d.stream);
    let kt = x.cols.div_ceil(16);
    let yp: Vec<u64> = ys.iter().map(|y| ptr(*y, &d.stream)).collect();
    // Up to 32 rows, the TMA GEMV (Hopper). At one row it beats the cp.async GEMV in place (H200,
    // qwen3-8b batch-1 decode in one call: 205.4 against 199.0 tok/s at prompt 128, 186.2 against
    // 179.1 at 4096), though back-to-back launches of one weight had ranked them the other way.
    if m <= 32 && gemv_tma(b, ws, xb, m, kt, TmaStore::Plain { ys: &yp, add }) {
        return;
    }
    let (f, smem) = gemv_config(d, m);
    for (seg, yseg) in bf16.chunks(3).zip(yp.chunks(3)) {
        let at = |i: usize| seg.get(i).copied().unwrap_or((0, 0, 0));
        let ((w0, n0, t0), (w1, n1, t1), (w2, n2, t2)) = (at(0), at(1), at(2));
        let y = |i: usize| yseg.get(i).copied().unwrap_or(0);
        let args = [
            Arg::P(w0),
            Arg::P(y(0)),
            Arg::I(n0 as i32),
            Arg::I(t0 as i32),
            Arg::P(w1),
            Arg::P(y(1)),
            Arg::I(n1 as i32),
            Arg::I(t1 as i32),
            Arg::P(w2),
            Arg::P(y(2)),
            Arg::I(n2 as i32),
            Arg::P(xb),
            Arg::I(m as i32),
            Arg::I(kt as i32),
            Arg::I(padded(x.cols) as i32),
            Arg::I(add as i32),
        ];
        d.launch(f, ((t0 + t1 + t2) as u32, 1, 1), 32 * GEMV_WARPS as u32, smem, &args);
    }
}

/// [`launch`] where some weights are FP8: by the FP8 GEMV (up to 64 rows, blocks it takes; up to
/// three weights a launch), else each by the bf16 kernels over its bf16 weight made in the
/// scratch (fp8.rs); the other weights share their launches as before. Every path has the bf16
/// path's bits.
fn launch_fp8(b: &Ctx, x: &CudaAct, ws: &[&CudaMat], ys: &[&CudaSlice<f32>], add: bool) {
    let (rest, rest_ys): (Vec<&CudaMat>, Vec<&CudaSlice<f32>>) =
        ws.iter().zip(ys).filter(|(w, _)| !matches!(w, CudaMat::Fp8 { .. })).map(|(w, y)| (*w, *y)).unzip();
    if !rest.is_empty() {
        launch(b, x, &rest, &rest_ys, add);
    }
    let d = &b.dev;
    let fp8 = ws.iter().zip(ys).filter(|(w, _)| matches!(w, CudaMat::Fp8 { .. }));
    let (gemv, scratch): (Vec<_>, Vec<_>) = fp8.partition(|(w, _)| crate::fp8::gemv_takes(b, w, x.rows));
    if !gemv.is_empty() {
        let gemv: Vec<(&CudaMat, u64)> = gemv.iter().map(|(w, y)| (**w, ptr(**y, &d.stream))).collect();
        crate::fp8::gemv(b, &gemv, ptr(bf16_of(b, x), &d.stream), x.rows, add);
    }
    for (w, y) in scratch {
        crate::fp8::with_bf16(b, w, |wb| launch(b, x, &[wb], &[*y], add));
    }
}

/// One matmul of many rows into `y` (or added into it): the wgmma GEMM (Hopper), the tiled GEMM
/// (bf16), or the plain SIMT kernel.
fn matmul_one(b: &Ctx, x: &CudaAct, w_mat: &CudaMat, y: &CudaSlice<f32>, add: bool) {
    let d = &b.dev;
    let (n, k) = w_mat.shape();
    let m = x.rows;
    match w_mat {
        CudaMat::Bf16 { w, ntiles, kt, map, .. } => {
            if map.is_some() && gemm_wgmma(b, x, &[w_mat], &[y], add) {
                return;
            }
            let xb = bf16_of(b, x);
            let args = [
                Arg::P(ptr(w, &d.stream)),
                Arg::P(ptr(xb, &d.stream)),
                Arg::P(ptr(y, &d.stream)),
                Arg::I(m as i32),
                Arg::I(n as i32),
                Arg::I(*ntiles as i32),
                Arg::I(*kt as i32),
                Arg::I(padded(k) as i32),
                Arg::I(add as i32),
            ];
            let grid = (ntiles.div_ceil(8) as u32, m.div_ceil(128) as u32, 1);
            d.launch(&d.k.gemm_bf16, grid, 256, GEMM_SMEM, &args);
        }
        CudaMat::Fp8 { .. } => {
            crate::fp8::with_bf16(b, w_mat, |wb| matmul_one(b, x, wb, y, add));
        }
        CudaMat::Plain { w, f16, .. } => {
            let args = [
                Arg::P(ptr(x.data(&b.dev), &d.stream)),
                Arg::P(ptr(w, &d.stream)),
                Arg::I(*f16 as i32),
                Arg::P(ptr(y, &d.stream)),
                Arg::I(m as i32),
                Arg::I(n as i32),
                Arg::I(k as i32),
                Arg::I(add as i32),
            ];
            // Both variants give each output the same bits (gemm.cu `gemm_simt_tile`): a warp a
            // weight row while rows are few, four (and blocks of 16 x 16 outputs) past that.
            let (f, rows, cols, threads) =
                if m <= SIMT_FEW_ROWS { (&d.k.gemm_simt_e1, 4, 4, 128) } else { (&d.k.gemm_simt_e4, 16, 16, 512) };
            d.launch(f, (n.div_ceil(cols) as u32, m.div_ceil(rows) as u32, 1), threads, 0, &args);
        }
    }
}

/// k blocks the wgmma GEMM's second warpgroup trails the first by (kernels/gemm_wgmma.cu). None:
/// on the H200 (4096-token prefill, ncu per layer) lags of 0, 2 and 4 gave 2389, 2389 and 2443 us
/// over the four matmuls with token tiles first (docs/perf.md).
const WGMMA_LAG: i32 = 0;

/// The wgmma GEMM's tile order: token tiles fastest (1; 0 would walk W blocks fastest).
const WGMMA_ORDER: i32 = 1;

/// The wgmma GEMM of `ws` (each with its tensor map) into `ys` (or added into them), up to three
/// weights a launch; false (nothing launched) where a weight or x has no map.
fn gemm_wgmma(b: &Ctx, x: &CudaAct, ws: &[&CudaMat], ys: &[&CudaSlice<f32>], add: bool) -> bool {
    let d = &b.dev;
    let m = x.rows;
    let maps: Option<Vec<([u64; 16], usize, usize)>> = ws
        .iter()
        .map(|w| match w {
            CudaMat::Bf16 { map: Some(g), rows, ntiles, .. } => Some((**g, *rows, ntiles.div_ceil(8))),
            _ => None,
        })
        .collect();
    let Some(maps) = maps else { return false };
    let xb = bf16_of(b, x);
    let Some(xmap) = crate::tma::row_map(ptr(xb, &d.stream), m, padded(x.cols), crate::tma::BOX_ROWS) else {
        return false;
    };
    let kt = x.cols.div_ceil(16);
    let mtiles = m.div_ceil(crate::tma::BOX_ROWS);
    // Scheduling only (the same bits either way): warpgroup lag and tile order.
    let (lag, order) = (WGMMA_LAG, WGMMA_ORDER);
    for (seg, yseg) in maps.chunks(3).zip(ys.chunks(3)) {
        let at = |i: usize| seg.get(i).copied().unwrap_or(([0; 16], 0, 0));
        let ((w0, n0, b0), (w1, n1, b1), (w2, n2, b2)) = (at(0), at(1), at(2));
        let y = |i: usize| yseg.get(i).map_or(0, |s| ptr(*s, &d.stream));
        let ctas = b0 + b1 + b2;
        let nz = k_splits(b, m, ctas, kt);
        let work = (nz > 1).then(|| d.alloc::<f32>(nz * m * (n0 + n1 + n2)));
        let wsp = work.as_ref().map_or(0, |w| ptr(w, &d.stream));
        let split = if nz > 1 { nz as i32 } else { 0 };
        let args = [
            Arg::M(w0),
            Arg::M(w1),
            Arg::M(w2),
            Arg::M(xmap),
            Arg::P(y(0)),
            Arg::P(y(1)),
            Arg::P(y(2)),
            Arg::I(n0 as i32),
            Arg::I(n1 as i32),
            Arg::I(n2 as i32),
            Arg::I(b0 as i32),
            Arg::I(b1 as i32),
            Arg::I(ctas as i32),
            Arg::I(m as i32),
            Arg::I(kt as i32),
            Arg::P(wsp),
            Arg::I(split),
            Arg::I(add as i32),
            Arg::I(lag),
            Arg::I(order),
        ];
        // Persistent: one CTA an SM at most (its ring fills the shared memory), looping over tiles.
        let tiles = ctas * mtiles * nz;
        d.launch(&d.k.gemm_wgmma, (tiles.min(d.num_sms) as u32, 1, 1), WGMMA_THREADS, WGMMA_SMEM, &args);
        if nz > 1 {
            let args = [
                Arg::P(wsp),
                Arg::P(y(0)),
                Arg::P(y(1)),
                Arg::P(y(2)),
                Arg::I(n0 as i32),
                Arg::I(n1 as i32),
                Arg::I(n2 as i32),
                Arg::I(m as i32),
                Arg::I(nz as i32),
                Arg::I(add as i32),
            ];
            d.launch(&d.k.gemm_fold, (grid_for(m * (n0 + n1 + n2), BLOCK), 1, 1), BLOCK, 0, &args);
        }
    }
    true
}

/// K segments the wgmma GEMM of `m` rows over `ctas` 128-row W blocks splits into: decode batches
/// leave SMs idle where a weight has fewer blocks than SMs (one CTA per W block), so K is split by
/// segment and a fold adds the segment sums in order (the same additions, so the same bits).
/// `Ctx::split` says when: by default to 64 rows and under one block an SM (H100, qwen3-8b
/// decode against the older two blocks an SM: batch 64 1.10x, as gate/up's 192 blocks no longer
/// fold a 50 MB workspace; to 128 rows dense batch 128 gained 1.04x but qwen3-30b-a3b's batch 128
/// lost 1.17x, and from 256 rows the fold's workspace costs more than the idle SMs).
fn k_splits(b: &Ctx, m: usize, ctas: usize, kt: usize) -> usize {
    let r = b.split;
    if m <= r.max_rows && (ctas as f32) < r.below * b.dev.num_sms as f32 { crate::tma::segments(kt) } else { 1 }
}

/// `glu_packed(x @ gu^T)` for a packed gate/up weight, held as bf16 only: from
/// `Ctx::glu_store_rows` rows on Hopper the wgmma GEMM applies the activation in its store, so
/// the `[rows, 2 inter]` product is never written; else the matmul, then the `glu_packed` kernel
/// (the same bits either way).
pub(crate) fn matmul_glu(b: &Ctx, x: &CudaAct, gu: &CudaMat, act: Activation) -> CudaAct {
    let d = &b.dev;
    let (m, (n, k)) = (x.rows, gu.shape());
    assert_eq!(x.cols, k, "matmul_glu: x has {} columns, W is {n}x{k}", x.cols);
    let kt = x.cols.div_ceil(16);
    if let CudaMat::Bf16 { map: Some(map), ntiles, .. } = gu
        && m >= b.glu_store_rows
        && let Some(xmap) = crate::tma::row_map(ptr(bf16_of(b, x), &d.stream), m, padded(x.cols), crate::tma::BOX_ROWS)
    {
        let inter = n / 2;
        let yb = bf16_out(&b.dev, m, inter);
        let nb = ntiles.div_ceil(8);
        let (lag, order) = (WGMMA_LAG, WGMMA_ORDER);
        let args = [
            Arg::M(**map),
            Arg::M(xmap),
            Arg::P(ptr(&yb, &d.stream)),
            Arg::I(n as i32),
            Arg::I(nb as i32),
            Arg::I(m as i32),
            Arg::I(kt as i32),
            Arg::I(padded(inter) as i32),
            Arg::I(crate::ops::act_code(act)),
            Arg::I(lag),
            Arg::I(order),
        ];
        let tiles = nb * m.div_ceil(crate::tma::BOX_ROWS);
        d.launch(&d.k.gemm_wgmma_glu, (tiles.min(d.num_sms) as u32, 1, 1), WGMMA_THREADS, WGMMA_SMEM, &args);
        return CudaAct::bf16_only(yb, m, inter);
    }
    if let Some(y) = gemv_tma_glu(b, x, gu, act) {
        return y;
    }
    let y = matmul(b, x, gu);
    crate::ops::glu_packed(b, &y, act)
}

/// `matmul_glu(rms_norm(x, nw), gu)`: the norm kernel, then the packed matmul.
pub(crate) fn norm_matmul_glu(
    b: &Ctx,
    x: &CudaAct,
    nw: &CudaVec,
    eps: f32,
    one_plus: bool,
    gu: &CudaMat,
    act: Activation,
) -> CudaAct {
    matmul_glu(b, &norm_for(b, x, nw, eps, one_plus, &[gu]), gu, act)
}

/// Where a TMA GEMV's sums go: into f32 outputs `ys` (or added into them), or, for one packed
/// gate/up weight, through the gated activation (`act`: 0 SiLU, 1 GELU tanh) into the bf16
/// output at `yb` (row stride `kp`).
#[derive(Clone, Copy)]
enum TmaStore<'a> {
    Plain { ys: &'a [u64], add: bool },
    Glu { yb: u64, kp: usize, act: i32 },
}

/// The TMA GEMV (Hopper, `m <= 32` rows) of `ws` storing as `store`; false (nothing launched)
/// where a weight or x has no tensor map. One row takes `gemv_tma_xr` (W-only rings, the row held
/// in shared memory, gemv_tma_n1's bits) where the row fits beside the ring, else gemv_tma_n1 (an
/// x box a stage). H200, qwen3-8b batch 1 (docs/perf.md): alone it tied gemv_tma_n1 (its blocks
/// beside early-launched small kernels ended late); with those kernels padded in shared memory
/// (device.rs `small_smem`) 235.3 / 216.9 against 231.5 / 215.2 tok/s at prompt 128 / 4096.
fn gemv_tma(b: &Ctx, ws: &[&CudaMat], xb: u64, m: usize, kt: usize, store: TmaStore) -> bool {
    let k = &b.dev.k;
    let nt = m.div_ceil(8).next_power_of_two();
    let maps: Option<Vec<([u64; 16], usize, usize)>> = ws
        .iter()
        .map(|w| match w {
            CudaMat::Bf16 { gmap: Some(g), rows, ntiles, .. } => Some((**g, *rows, *ntiles)),
            _ => None,
        })
        .collect();
    let Some(maps) = maps else { return false };
    let no_y = [0u64];
    let (ys, add, glu) = match store {
        TmaStore::Plain { ys, add } => (ys, add, None),
        TmaStore::Glu { yb, kp, act } => (&no_y[..], false, Some([Arg::P(yb), Arg::I(kp as i32), Arg::I(act)])),
    };
    // The kernel's arguments between the tile counts and `kt`: x, then the GLU store's.
    let x_args = |x: Vec<Arg>| x.into_iter().chain(glu.into_iter().flatten()).collect::<Vec<Arg>>();
    let xr_smem = gemv_tma_xr_smem(kt * 16);
    if m == 1 && xr_smem <= MAX_SMEM {
        let f = if glu.is_some() { &k.gemv_tma_xr_glu } else { &k.gemv_tma_xr };
        tma_launches(b, f, xr_smem, &maps, ys, &x_args(vec![Arg::P(xb)]), kt, add);
        return true;
    }
    let Some(xmap) = crate::tma::row_map(xb, m, kt * 16, 8 * nt) else { return false };
    let f = match (nt, glu.is_some()) {
        (1, false) => &k.gemv_tma_n1,
        (2, false) => &k.gemv_tma_n2,
        (_, false) => &k.gemv_tma_n4,
        (1, true) => &k.gemv_tma_glu_n1,
        (2, true) => &k.gemv_tma_glu_n2,
        (_, true) => &k.gemv_tma_glu_n4,
    };
    tma_launches(b, f, gemv_tma_smem(nt), &maps, ys, &x_args(vec![Arg::M(xmap), Arg::I(m as i32)]), kt, add);
    true
}

/// One launch of TMA GEMV `f` (`smem` bytes) for each three weights of `maps` (tensor map, rows,
/// tiles) into `ys`, x given by `x` (the kernel's arguments between the tile counts and `kt`).
#[allow(clippy::too_many_arguments)]
fn tma_launches(
    b: &Ctx,
    f: &cudarc::driver::CudaFunction,
    smem: u32,
    maps: &[([u64; 16], usize, usize)],
    ys: &[u64],
    x: &[Arg],
    kt: usize,
    add: bool,
) {
    let d = &b.dev;
    for (seg, yseg) in maps.chunks(3).zip(ys.chunks(3)) {
        let at = |i: usize| seg.get(i).copied().unwrap_or(([0; 16], 0, 0));
        let ((w0, n0, t0), (w1, n1, t1), (w2, n2, t2)) = (at(0), at(1), at(2));
        let y = |i: usize| yseg.get(i).copied().unwrap_or(0);
        let ntot = t0 + t1 + t2;
        let mut args = vec![
            Arg::M(w0),
            Arg::M(w1),
            Arg::M(w2),
            Arg::P(y(0)),
            Arg::P(y(1)),
            Arg::P(y(2)),
            Arg::I(n0 as i32),
            Arg::I(n1 as i32),
            Arg::I(n2 as i32),
            Arg::I(t0 as i32),
            Arg::I(t1 as i32),
            Arg::I(ntot as i32),
        ];
        args.extend_from_slice(x);
        let (grid, pre) = (ntot.min(d.num_sms), GEMV_PRE);
        args.extend([Arg::I(kt as i32), Arg::I(add as i32), Arg::I(pre as i32)]);
        d.launch(f, (grid as u32, 1, 1), 32 * GEMV_WARPS as u32, smem, &args);
    }
}

/// `glu_packed(x @ gu^T)` for 2 to 32 rows from the TMA GEMV with the activation in its store
/// (kernels/gemv_tma.cu `gemv_tma_glu_n*`: the same bits, no f32 product written, no `glu_packed`
/// launch); None (nothing launched) where those rows of `gu` do not take the TMA GEMV, or for one
/// row. H200, qwen3-8b (docs/perf.md; one binary, interleaved, tok/s with the store against
/// apart): batch 8 1846.5 /
/// 1819.9 at prompt 128, 1253.3 / 1231.6 at 4096; batch 1 234.8 / 236.8 at prompt 128 but 215.5
/// / 213.8 at 4096 (5 rounds, spread 0.2%), so one row stays apart by default.
fn gemv_tma_glu(b: &Ctx, x: &CudaAct, gu: &CudaMat, act: Activation) -> Option<CudaAct> {
    let d = &b.dev;
    let m = x.rows;
    let CudaMat::Bf16 { gmap: Some(_), .. } = gu else { return None };
    if m <= 1 || m > 32 {
        return None;
    }
    let (n, k) = gu.shape();
    let (kt, inter) = (k.div_ceil(16), n / 2);
    let xb = ptr(bf16_of(b, x), &d.stream);
    let yb = bf16_out(&b.dev, m, inter);
    let act = crate::ops::act_code(act);
    let store = TmaStore::Glu { yb: ptr(&yb, &d.stream), kp: padded(inter), act };
    gemv_tma(b, &[gu], xb, m, kt, store).then(|| CudaAct::bf16_only(yb, m, inter))
}

/// Stages of W a TMA GEMV warp loads before its launch wait (at most its ring's stages less one;
/// the rest of its ring's first stages follow the wait). Scheduling only, the same bits.
const GEMV_PRE: usize = 7;

/// Row groups of 8 (`NT`) of the few-row GEMV variant for `m <= 64` rows: 1, 2, 4 or 8.
pub(crate) fn gemv_row_groups(m: usize) -> usize {
    m.div_ceil(8).next_power_of_two().min(8)
}

/// The GEMV kernel for `m <= 64` rows and its shared memory.
fn gemv_config(d: &Device, m: usize) -> (&cudarc::driver::CudaFunction, u32) {
    let nt = gemv_row_groups(m);
    let f = match nt {
        1 => &d.k.gemv_bf16_n1,
        2 => &d.k.gemv_bf16_n2,
        4 => &d.k.gemv_bf16_n4,
        _ => &d.k.gemv_bf16_n8,
    };
    (f, gemv_smem(nt))
}
