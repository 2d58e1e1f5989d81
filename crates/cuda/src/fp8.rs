//! FP8 weights on the device (kernels/fp8.cu, gemv_fp8.cu): their upload (codes one byte a
//! weight plus f32 block scales), the FP8 GEMV that reads the codes for few rows, and the bf16
//! weight made in a scratch for every other matmul. Both multiply by the bf16 weight of
//! fp8_host.rs in the bf16 kernels' reduction order, so each result has the bf16 path's bits.

use crate::ctx::Ctx;
use crate::device::{Arg, grid_for, ptr};
use crate::options::FP8_GEMV_ROWS;
use crate::smem::{GEMV_WARPS, gemv_fp8_smem};
use crate::tensor::CudaMat;
use cudarc::driver::CudaSlice;
use tf_backend::{BackendError, Fp8Scales};
use tf_core::DType;
use tf_formats::TensorView;

const BLOCK: u32 = 256;

/// Takes a 2-D E4M3 weight with its block scales (checked as the host backends check them):
/// codes zero-padded to 16 x 16 tiles on the device, and the backend's scratch grown to its
/// bf16 weight.
pub(crate) fn mat_fp8(b: &Ctx, t: &TensorView, scales: &Fp8Scales) -> Result<CudaMat, BackendError> {
    let (DType::F8E4M3, [rows, cols]) = (t.dtype, &t.shape[..]) else {
        let msg = format!("{}: expected a 2-D FP8 E4M3 weight, found {} {:?}", t.name, t.dtype, t.shape);
        return Err(BackendError::Unsupported(msg));
    };
    let (rows, cols) = (*rows, *cols);
    if t.data.as_bytes().len() != rows * cols {
        let msg = format!("{}: {} bytes for a [{rows}, {cols}] FP8 weight", t.name, t.data.as_bytes().len());
        return Err(BackendError::Unsupported(msg));
    }
    scales.check(&t.name, rows, cols)?;
    let d = &b.dev;
    let (ntiles, kt) = (rows.div_ceil(16), cols.div_ceil(16));
    let total = ntiles * 16 * kt * 16;
    let raw = d.upload(t.data.as_bytes());
    let w = d.alloc::<u8>(total);
    let args = [
        Arg::P(ptr(&raw, &d.stream)),
        Arg::P(ptr(&w, &d.stream)),
        Arg::I(rows as i32),
        Arg::I(cols as i32),
        Arg::I(ntiles as i32),
        Arg::I(kt as i32),
    ];
    d.launch(&d.k.pad_fp8, (grid_for(total, BLOCK), 1, 1), BLOCK, 0, &args);
    let mut scratch = b.fp8_scratch.lock().unwrap_or_else(|p| p.into_inner());
    if scratch.as_ref().is_none_or(|s| s.len() < total) {
        *scratch = None; // the smaller one goes first
        *scratch = Some(d.alloc::<u16>(total));
    }
    let grid = scales.grid(rows, cols);
    let values = d.upload(&scales.values);
    Ok(CudaMat::Fp8 { w, scales: values, block: scales.block, grid, rows, cols, ntiles, kt })
}

/// Whether the FP8 GEMV takes a weight of `block` blocks in a `grid`: each 16-wide k tile must lie
/// in one block column.
pub(crate) fn gemv_fits(block: [usize; 2], grid: [usize; 2]) -> bool {
    block[1].is_multiple_of(16) || grid[1] == 1
}

/// The FP8 GEMV's view of `w`'s blocks: height, k tiles a block column holds (all of them where
/// there is one column), the scale grid; `None` where `w` is not FP8 or its blocks do not fit.
pub(crate) fn gemv_blocks(w: &CudaMat) -> Option<[i32; 4]> {
    let CudaMat::Fp8 { block, grid, kt, .. } = w else { return None };
    let bt = if grid[1] == 1 { *kt } else { block[1] / 16 };
    gemv_fits(*block, *grid).then_some([block[0] as i32, bt.max(1) as i32, grid[0] as i32, grid[1] as i32])
}

/// Whether the FP8 GEMV takes `m` rows of `w`: an FP8 weight whose blocks fit it, at most
/// `Ctx::fp8_gemv_rows` rows (64 by default; past 64 in launches of 64 rows).
pub(crate) fn gemv_takes(b: &Ctx, w: &CudaMat, m: usize) -> bool {
    gemv_blocks(w).is_some() && (1..=b.fp8_gemv_rows).contains(&m)
}

/// `y = x @ w^T` (with `add`, `y +=`) by the FP8 GEMV for each `(w, y)` of `ws` (weights that
/// [`gemv_takes`]), `m` rows of x's bf16 copy at `xb`: up to three weights and 64 rows a launch
/// (a row's sums do not depend on the rows beside it).
pub(crate) fn gemv(b: &Ctx, ws: &[(&CudaMat, u64)], xb: u64, m: usize, add: bool) {
    let kp = x_tiles(ws) * 16;
    for r0 in (0..m).step_by(FP8_GEMV_ROWS) {
        let rows = (m - r0).min(FP8_GEMV_ROWS);
        let at: Vec<(&CudaMat, u64)> = ws.iter().map(|&(w, y)| (w, y + (4 * r0 * w.shape().0) as u64)).collect();
        gemv_rows(b, &at, xb + (2 * r0 * kp) as u64, rows, add);
    }
}

/// [`gemv`] of at most 64 rows.
fn gemv_rows(b: &Ctx, ws: &[(&CudaMat, u64)], xb: u64, m: usize, add: bool) {
    let d = &b.dev;
    let nt = m.div_ceil(8).next_power_of_two();
    let f = match nt {
        1 => &d.k.gemv_fp8_n1,
        2 => &d.k.gemv_fp8_n2,
        4 => &d.k.gemv_fp8_n4,
        _ => &d.k.gemv_fp8_n8,
    };
    let kt = x_tiles(ws);
    for seg in ws.chunks(3) {
        let mut args = Vec::with_capacity(32);
        let mut tiles = 0;
        for i in 0..3 {
            let item = seg.get(i).and_then(|&(w, y)| match (w, gemv_blocks(w)) {
                (CudaMat::Fp8 { w, scales, rows, ntiles, .. }, Some(blocks)) => {
                    Some((w, scales, y, *rows, *ntiles, blocks))
                }
                _ => None,
            });
            // An absent weight (or one the GEMV does not take, which callers never pass): no tiles.
            let Some((codes, scales, y, rows, ntiles, [bh, bt, gr, gc])) = item else {
                args.extend([Arg::P(0), Arg::P(0), Arg::P(0), Arg::I(0), Arg::I(1), Arg::I(1), Arg::I(1), Arg::I(1)]);
                if i < 2 {
                    args.push(Arg::I(0));
                }
                continue;
            };
            args.extend([
                Arg::P(ptr(codes, &d.stream)),
                Arg::P(ptr(scales, &d.stream)),
                Arg::P(y),
                Arg::I(rows as i32),
                Arg::I(bh),
                Arg::I(bt),
                Arg::I(gr),
                Arg::I(gc),
            ]);
            if i < 2 {
                args.push(Arg::I(ntiles as i32));
            }
            tiles += ntiles;
        }
        args.extend([Arg::P(xb), Arg::I(m as i32), Arg::I(kt as i32), Arg::I((kt * 16) as i32), Arg::I(add as i32)]);
        d.launch(f, (tiles as u32, 1, 1), 32 * GEMV_WARPS as u32, gemv_fp8_smem(nt), &args);
    }
}

/// The 16-wide k tiles of the weights' shared input (the first one's; 0 for none).
fn x_tiles(ws: &[(&CudaMat, u64)]) -> usize {
    ws.first().map_or(0, |(w, _)| w.shape().1.div_ceil(16))
}

/// `f` of the bf16 weight of FP8 `w` (fp8_host.rs's values, padded as `CudaMat::Bf16`), made in
/// the backend's scratch: one pass writing 2 bytes a weight over 1 read, before the matmul reads
/// the 2 bytes again. `None` where `w` is not FP8.
pub(crate) fn with_bf16<R>(b: &Ctx, w: &CudaMat, f: impl FnOnce(&CudaMat) -> R) -> Option<R> {
    let CudaMat::Fp8 { w, scales, block, grid, rows, cols, ntiles, kt, .. } = w else { return None };
    let d = &b.dev;
    let total = ntiles * 16 * kt * 16;
    let mut scratch = b.fp8_scratch.lock().unwrap_or_else(|p| p.into_inner());
    // mat_fp8 sized it to the largest FP8 weight; a fresh buffer only if something took it.
    let buf: CudaSlice<u16> = match scratch.take() {
        Some(s) if s.len() >= total => s,
        _ => d.alloc::<u16>(total),
    };
    let args = [
        Arg::P(ptr(w, &d.stream)),
        Arg::P(ptr(scales, &d.stream)),
        Arg::P(ptr(&buf, &d.stream)),
        Arg::I(*ntiles as i32),
        Arg::I(*kt as i32),
        Arg::I(block[0] as i32),
        Arg::I(block[1] as i32),
        Arg::I(grid[0] as i32),
        Arg::I(grid[1] as i32),
    ];
    // A thread 8 weights of a row: blocks across a row, rows strided over at most 65535.
    let grid = ((kt * 16 / 8).div_ceil(BLOCK as usize) as u32, (ntiles * 16).min(65535) as u32, 1);
    d.launch(&d.k.fp8_to_bf16, grid, BLOCK, 0, &args);
    // The GEMVs stream their first weight stages in before their launch wait: the matmul after
    // this must not start before the scratch is written.
    d.serialize_next();
    let mat = CudaMat::bf16(d, buf, *rows, *cols);
    let out = f(&mat);
    if let CudaMat::Bf16 { w, .. } = mat {
        *scratch = Some(w);
    }
    Some(out)
}
