//! Multi-head latent attention's per-head ops on the device (kernels/heads.cu `head_matmul`,
//! `concat_heads`): the absorbed `W_UK` / `W_UV` products over weights copied to the device at
//! load (`Backend::head_copy`), and the per-head concatenation, so an MLA layer's round makes
//! no host round trip.

use crate::ctx::Ctx;
use crate::device::{Arg, grid_for, ptr};
use crate::tensor::{CudaAct, CudaVec};

/// Threads a block.
const BLOCK: u32 = 256;

/// Threads a block of `head_matmul`, and the outputs (and rows) it takes (kernels/heads.cu).
const HM_THREADS: u32 = 256;
const HM_T: usize = 64;

/// `x` `[rows, heads * cols]` times `w` (`heads` matrices `[out, cols]` stacked): `[rows, heads *
/// out]`, each value the host reference's (a block a head's 64 x 64 tile).
pub(crate) fn head_matmul(b: &Ctx, x: &CudaAct, w: &CudaVec, heads: usize, out: usize) -> CudaAct {
    let d = &b.dev;
    let n = heads * out;
    let cols = w.len / n.max(1);
    assert_eq!(x.cols, heads * cols, "head_matmul: x is not [rows, heads * cols]");
    assert_eq!(w.len, n * cols, "head_matmul: weights are not [heads * out, cols]");
    let y = d.alloc::<f32>(x.rows * n);
    if x.rows > 0 && n > 0 {
        let args = [
            Arg::P(ptr(x.data(d), &d.stream)),
            Arg::P(ptr(&w.data, &d.stream)),
            Arg::P(ptr(&y, &d.stream)),
            Arg::I(x.rows as i32),
            Arg::I(heads as i32),
            Arg::I(out as i32),
            Arg::I(cols as i32),
        ];
        let grid = (out.div_ceil(HM_T) as u32, x.rows.div_ceil(HM_T) as u32, heads as u32);
        d.launch(&d.k.head_matmul, grid, HM_THREADS, 0, &args);
    }
    CudaAct::new(y, x.rows, n)
}

/// Each row's heads of `a` then `c` side by side: `[rows, heads * (wa + wc)]`.
pub(crate) fn concat_heads(b: &Ctx, a: &CudaAct, c: &CudaAct, heads: usize) -> CudaAct {
    let d = &b.dev;
    assert_eq!(a.rows, c.rows, "concat_heads: rows");
    let whole = |w: usize| w.is_multiple_of(heads.max(1));
    assert!(heads > 0 && whole(a.cols) && whole(c.cols), "concat_heads: widths per head");
    let (wa, wc) = (a.cols / heads, c.cols / heads);
    let n = a.rows * (a.cols + c.cols);
    let y = d.alloc::<f32>(n);
    if n > 0 {
        let args = [
            Arg::P(ptr(a.data(d), &d.stream)),
            Arg::P(ptr(c.data(d), &d.stream)),
            Arg::P(ptr(&y, &d.stream)),
            Arg::Z(n),
            Arg::I(wa as i32),
            Arg::I(wc as i32),
        ];
        d.launch(&d.k.concat_heads, (grid_for(n, BLOCK), 1, 1), BLOCK, 0, &args);
    }
    CudaAct::new(y, a.rows, a.cols + c.cols)
}

#[cfg(test)]
mod emulated;
