//! Two one-row GEMVs with the RMSNorm between them in one launch (kernels/gemv_pair.cu): `h += x @
//! w^T`, then `rms_norm(h) @ ws^T`, for batch-1 decode on Hopper (o then gate/up, down then the
//! next layer's q/k/v). The same bits as the residual-add GEMV, the norm kernel and the GEMV of
//! the normed row; the second weight streams in while the first GEMV drains.

use crate::CudaBackend;
use crate::device::{Arg, ptr};
use crate::ops::{bf16_of, norm_threads};
use crate::tensor::{CudaAct, CudaMat, CudaVec};

/// Ring stages of the one-row TMA GEMV (kernels/gemv_tma.cu `GT_XR_ST`).
const STAGES: usize = 11;
/// Warps a block (kernels/gemv_tma.cu `GT_W`).
const WARPS: usize = 8;

/// Shared memory of the paired GEMV for rows of `kta` and `ktb` k tiles: 1 KB of alignment, the W
/// rings, two sets of segment sums, the ring barriers and one a warp for its segment of the first
/// row, the norm's 32 warp sums, both rows.
pub(crate) fn pair_smem(kta: usize, ktb: usize) -> u32 {
    (1024 + WARPS * STAGES * 2048 + 2 * WARPS * 4 * 32 * 4 + (WARPS * STAGES + WARPS) * 8 + 32 * 4 + (kta + ktb) * 32)
        as u32
}

/// The norm's virtual threads for a row of `group` values where the paired kernel's 256 threads
/// play them with every value in registers (rms_norm_body's register path), else none.
pub(crate) fn pair_norm_threads(group: usize) -> Option<usize> {
    let v = norm_threads(group);
    (v.is_multiple_of(256) && group <= 4 * v).then_some(v)
}

/// `h += x @ w^T`, then `rms_norm(h, nw) @ ws^T` (one to three weights) in one launch; `None`
/// (nothing launched) where the paired kernel does not apply: not one row, not Hopper, a weight
/// without a tensor map, a norm not over the whole row, or rows too wide for shared memory.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_add_norm_matmul(
    b: &CudaBackend,
    x: &CudaAct,
    w: &CudaMat,
    h: &mut CudaAct,
    nw: &CudaVec,
    eps: f32,
    one_plus: bool,
    ws: &[&CudaMat],
) -> Option<Vec<CudaAct>> {
    let d = &b.dev;
    if !b.pair || x.rows != 1 || h.rows != 1 || ws.is_empty() || ws.len() > 3 || nw.len != h.cols {
        return None;
    }
    let map = |m: &CudaMat| match m {
        CudaMat::Bf16 { gmap: Some(g), rows, ntiles, .. } => Some((**g, *rows, *ntiles)),
        _ => None,
    };
    let (wa, na, nta) = map(w)?;
    let bs: Vec<([u64; 16], usize, usize)> = ws.iter().map(|m| map(m)).collect::<Option<_>>()?;
    let v = pair_norm_threads(h.cols)?;
    let (kta, ktb) = (x.cols.div_ceil(16), h.cols.div_ceil(16));
    let smem = pair_smem(kta, ktb);
    if w.shape() != (h.cols, x.cols) || ws.iter().any(|m| m.shape().1 != h.cols) || smem > crate::gemv_m1::MAX_SMEM {
        return None;
    }
    let outs: Vec<CudaAct> = ws.iter().map(|m| CudaAct::new(d.alloc::<f32>(m.shape().0), 1, m.shape().0)).collect();
    let at = |i: usize| bs.get(i).copied().unwrap_or(([0; 16], 0, 0));
    let ((w0, n0, t0), (w1, n1, t1), (w2, n2, t2)) = (at(0), at(1), at(2));
    let y = |i: usize| outs.get(i).map_or(0, |o| ptr(o.data(b), &d.stream));
    let xg = ptr(bf16_of(b, x), &d.stream);
    let args = [
        Arg::M(wa),
        Arg::P(ptr(h.data(b), &d.stream)),
        Arg::I(na as i32),
        Arg::I(nta as i32),
        Arg::P(xg),
        Arg::I(kta as i32),
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
        Arg::I((t0 + t1 + t2) as i32),
        Arg::I(ktb as i32),
        Arg::P(ptr(&nw.data, &d.stream)),
        Arg::I(h.cols as i32),
        Arg::I(v as i32),
        Arg::F(eps),
        Arg::I(one_plus as i32),
        Arg::P(ptr(&b.pair_sync, &d.stream)),
        Arg::I(b.gemv_pre as i32),
        Arg::I(b.pair_lab),
    ];
    // One block an SM, every SM: the blocks wait for each other between the phases, so the grid
    // is never larger than what is resident at once.
    d.launch(&d.k.gemv_pair_xr, (d.num_sms as u32, 1, 1), 32 * WARPS as u32, smem, &args);
    h.touched();
    b.pairs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen3_8b_rows_fit_and_norms_run_in_registers() {
        // down (12288) then q/k/v (4096): the widest pair of a qwen3-8b layer.
        assert!(pair_smem(768, 256) <= crate::gemv_m1::MAX_SMEM);
        assert_eq!(pair_norm_threads(4096), Some(1024));
        assert_eq!(pair_norm_threads(2048), Some(512));
        assert_eq!(pair_norm_threads(5120), None, "1280 values a virtual warp is past the registers");
        assert_eq!(pair_norm_threads(512), None, "128 virtual threads: not a multiple of the block");
    }
}
