//! Mamba2's ops on the device (kernels/ssd.cu): the SSD scan over each sequence's `[H, P, N]`
//! state, token by token, and the grouped gated RMSNorm. Each matches tf-backend's reference
//! (ssd.rs) within f32 rounding (`expf` / `log1pf` against the host's) and keeps its own bits
//! whatever the round's batching or chunking.

use crate::ctx::Ctx;
use crate::device::{Arg, ptr};
use crate::state::CudaState;
use crate::tensor::{CudaAct, CudaVec};
use tf_backend::{AttnMeta, Ssd};

/// Threads a block of the norm kernel (a warp a group).
const NORM_BLOCK: u32 = 128;
/// State sizes the scan has a kernel for (kernels/ssd.cu `ssd_scan_n*`).
pub(crate) const SCAN_N: [usize; 4] = [16, 32, 64, 128];

/// Whether the device kernel takes a scan of this shape.
pub(crate) fn scan_fits(p: &Ssd<'_, CudaVec>) -> bool {
    SCAN_N.contains(&p.state_size) && (1..=1024).contains(&p.head_dim) && p.n_groups > 0
}

/// The SSD scan (tf-backend ssd.rs) over `xbc` `[rows, H P + 2 G N]` with `dt` `[rows, H]`.
pub(crate) fn ssd_scan(
    b: &Ctx,
    xbc: &CudaAct,
    dt: &CudaAct,
    p: &Ssd<'_, CudaVec>,
    st: &mut CudaState,
    meta: &AttnMeta,
) -> CudaAct {
    let d = &b.dev;
    let (h, hp) = (p.num_heads, p.head_dim);
    let out = d.zeros::<f32>(xbc.rows * h * hp);
    let n = meta.seqs.len();
    if n > 0 && h > 0 {
        let sq = b.capture.states(d, meta);
        let k = match p.state_size {
            16 => &d.k.ssd_scan_n16,
            32 => &d.k.ssd_scan_n32,
            64 => &d.k.ssd_scan_n64,
            _ => &d.k.ssd_scan_n128,
        };
        let args = [
            Arg::P(ptr(xbc.data(d), &d.stream)),
            Arg::P(ptr(dt.data(d), &d.stream)),
            Arg::P(ptr(&p.a_log.data, &d.stream)),
            Arg::P(ptr(&p.d.data, &d.stream)),
            Arg::P(ptr(&p.dt_bias.data, &d.stream)),
            Arg::P(ptr(&out, &d.stream)),
            Arg::P(ptr(&st.data, &d.stream)),
            Arg::P(sq.ptr(&d.stream)),
            Arg::I(h as i32),
            Arg::I(hp as i32),
            Arg::I(p.n_groups as i32),
            Arg::Z(st.shape.slot_len()),
            Arg::Z(p.state_offset),
            Arg::F(p.dt_min),
            Arg::F(p.dt_max),
        ];
        let threads = hp.div_ceil(32) * 32;
        d.launch(k, (h as u32, n as u32, 1), threads as u32, 0, &args);
    }
    CudaAct::new(out, xbc.rows, h * hp)
}

/// `x * silu(z)` normed over each group of `group` values, times `w` (`[cols]`).
pub(crate) fn rms_norm_gated_grouped(
    b: &Ctx,
    x: &CudaAct,
    z: &CudaAct,
    w: &CudaVec,
    group: usize,
    eps: f32,
) -> CudaAct {
    let d = &b.dev;
    let groups = x.len() / group.max(1);
    let y = d.zeros::<f32>(x.len());
    if groups > 0 {
        let args = [
            Arg::P(ptr(x.data(d), &d.stream)),
            Arg::P(ptr(z.data(d), &d.stream)),
            Arg::P(ptr(&w.data, &d.stream)),
            Arg::P(ptr(&y, &d.stream)),
            Arg::I(groups as i32),
            Arg::I(group as i32),
            Arg::I(x.cols as i32),
            Arg::F(eps),
        ];
        let per_block = NORM_BLOCK as usize / 32;
        d.launch(&d.k.rms_norm_gated_grouped, (groups.div_ceil(per_block) as u32, 1, 1), NORM_BLOCK, 0, &args);
    }
    CudaAct::new(y, x.rows, x.cols)
}
