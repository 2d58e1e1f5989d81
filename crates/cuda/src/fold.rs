//! Norms folded into the weights they feed (kernels/fold.cu): `rms_norm(h, s) @ W^T` becomes
//! `(bf16(h) @ (W diag s)^T) * inv`, with `inv` the row's inverse root applied once in the
//! matmul's store. At one row the TMA GEMV makes `inv` itself while its weights stream, so a
//! decode layer has no norm kernel (and no launch dependency) between its matmuls.

use crate::CudaBackend;
use crate::device::{Arg, grid_for, ptr};
use crate::matmul::{launch, matmul_glu_scaled, outputs};
use crate::tensor::{CudaAct, CudaMat, CudaVec, padded};
use cudarc::driver::CudaSlice;
use tf_backend::Activation;

const BLOCK: u32 = 256;

/// How a matmul's output rows are scaled in its store.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scale {
    /// Not at all.
    None,
    /// Row r times `rs[r]` (a device pointer to f32 values).
    Rows(u64),
    /// One row times the inverse root of the f32 row at `h` (`cols` values), which the TMA GEMV
    /// makes itself.
    Own { h: u64, cols: usize, eps: f32 },
}

impl Scale {
    /// The device pointer of per-row scales, or 0.
    pub(crate) fn rows(self) -> u64 {
        match self {
            Scale::Rows(rs) => rs,
            _ => 0,
        }
    }

    pub(crate) fn is_none(self) -> bool {
        matches!(self, Scale::None)
    }
}

/// The norm a weight's columns were scaled by (the device address of its values), if any.
fn folded(w: &CudaMat) -> Option<u64> {
    match w {
        CudaMat::Bf16 { folded, .. } => *folded,
        CudaMat::Plain { .. } => None,
    }
}

/// Whether every weight of `ws` holds the scales of `nw` (then only a norm by `nw` may feed them);
/// panics where some do and others do not, or where one holds another norm's.
pub(crate) fn folded_by(b: &CudaBackend, ws: &[&CudaMat], nw: &CudaVec) -> bool {
    let id = ptr(&nw.data, &b.dev.stream);
    let by: Vec<Option<u64>> = ws.iter().map(|w| folded(w)).collect();
    if by.iter().all(Option::is_none) {
        return false;
    }
    assert!(by.iter().all(|f| *f == Some(id)), "matmul weights folded with another norm than the one applied");
    true
}

/// Panics where a weight holds a norm's scales: its input must come through that norm.
pub(crate) fn assert_unfolded(ws: &[&CudaMat]) {
    assert!(
        ws.iter().all(|w| folded(w).is_none()),
        "a weight holding a norm's scales multiplied by an input not normed by it"
    );
}

/// Scales the columns of each weight of `ws` by the norm `nw` (1 + nw with `one_plus`) in place
/// and marks them; false (nothing changed) unless every one is an unfolded bf16 weight of
/// `nw.len` columns.
pub(crate) fn fold_norm(b: &CudaBackend, nw: &CudaVec, one_plus: bool, ws: &mut [&mut CudaMat]) -> bool {
    let ok = ws.iter().all(|w| matches!(w, CudaMat::Bf16 { cols, folded: None, .. } if *cols == nw.len));
    if !ok || ws.is_empty() {
        return false;
    }
    let d = &b.dev;
    for w in ws.iter_mut() {
        if let CudaMat::Bf16 { w, cols, ntiles, kt, folded, .. } = &mut **w {
            let (rows, kp) = (*ntiles * 16, *kt * 16);
            let args = [
                Arg::P(ptr(w, &d.stream)),
                Arg::P(ptr(&nw.data, &d.stream)),
                Arg::I(rows as i32),
                Arg::I(*cols as i32),
                Arg::I(kp as i32),
                Arg::I(one_plus as i32),
            ];
            d.launch(&d.k.fold_norm_bf16, (grid_for(rows * kp, BLOCK), 1, 1), BLOCK, 0, &args);
            *folded = Some(ptr(&nw.data, &d.stream));
        }
    }
    true
}

/// `matmul_many(rms_norm(x, nw), ws)` for weights folded with `nw`.
pub(crate) fn norm_matmul_many(b: &CudaBackend, x: &CudaAct, eps: f32, ws: &[&CudaMat]) -> Vec<CudaAct> {
    let outs = outputs(b, x, ws);
    let ys: Vec<&CudaSlice<f32>> = outs.iter().map(|o| o.data(b)).collect();
    let (scale, _rs) = scale_for(b, x, eps, ws);
    launch(b, x, ws, &ys, false, scale, None);
    outs
}

/// `matmul_glu(rms_norm(x, nw), gu)` for a packed gate/up weight folded with `nw`.
pub(crate) fn norm_matmul_glu(b: &CudaBackend, x: &CudaAct, eps: f32, gu: &CudaMat, act: Activation) -> CudaAct {
    let (scale, _rs) = scale_for(b, x, eps, &[gu]);
    matmul_glu_scaled(b, x, gu, act, scale)
}

/// The scale of a folded norm over `x`'s rows: made by the TMA GEMV at one row (Hopper, every
/// weight with its map), else by the stats kernel (returned, to live until the matmul is queued).
fn scale_for(b: &CudaBackend, x: &CudaAct, eps: f32, ws: &[&CudaMat]) -> (Scale, Option<CudaSlice<f32>>) {
    let own = x.rows == 1 && ws.iter().all(|w| matches!(w, CudaMat::Bf16 { gmap: Some(_), .. }));
    if own {
        return (Scale::Own { h: ptr(x.data(b), &b.dev.stream), cols: x.cols, eps }, None);
    }
    let rs = row_scales(b, x, eps);
    (Scale::Rows(ptr(&rs, &b.dev.stream)), Some(rs))
}

/// Each row's inverse root (fold.cu `rms_inv_rows`); also makes `x`'s bf16 copy where it has none.
fn row_scales(b: &CudaBackend, x: &CudaAct, eps: f32) -> CudaSlice<f32> {
    let d = &b.dev;
    let rs = d.alloc::<f32>(x.rows.max(1));
    let kp = padded(x.cols);
    let copy = x.bf16.get().is_none().then(|| d.alloc::<u16>(x.rows * kp));
    let args = [
        Arg::P(ptr(x.data(b), &d.stream)),
        Arg::P(ptr(&rs, &d.stream)),
        Arg::P(copy.as_ref().map_or(0, |c| ptr(c, &d.stream))),
        Arg::I(x.cols as i32),
        Arg::I(kp as i32),
        Arg::F(eps),
    ];
    if x.rows > 0 {
        d.launch(&d.k.rms_inv_rows, (x.rows as u32, 1, 1), BLOCK, 0, &args);
    }
    if let Some(c) = copy {
        x.bf16.set(c).unwrap_or_else(|_| unreachable!("checked empty above"));
    }
    rs
}

/// `y[r][:] *= rs[r]` over `m` rows of `n` values (the store's product, for matmuls without it).
pub(crate) fn scale_rows(b: &CudaBackend, y: &CudaSlice<f32>, rs: u64, m: usize, n: usize) {
    let d = &b.dev;
    let args = [Arg::P(ptr(y, &d.stream)), Arg::P(rs), Arg::I(n as i32), Arg::Z(m * n)];
    d.launch(&d.k.scale_rows, (grid_for(m * n, BLOCK), 1, 1), BLOCK, 0, &args);
}
