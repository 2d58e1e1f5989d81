//! Recurrent state ops on the device (kernels/gdn.cu): the causal conv1d over each sequence's
//! conv window, Gated DeltaNet's delta rule over its state, the gated RMSNorm and the sigmoid
//! output gate. Each matches tf-backend's reference (conv.rs, gdn.rs) within f32 rounding and
//! keeps its own bits whatever the round's batching or chunking.

use crate::capture::Table;
use crate::ctx::Ctx;
use crate::device::{Arg, grid_for, ptr};
use crate::state::CudaState;
use crate::tensor::{CudaAct, CudaVec};
use tf_backend::{AttnMeta, Conv1d, Gdn};

/// Threads a block of the elementwise and conv kernels.
const BLOCK: u32 = 128;
/// Widest conv kernel (kernels/gdn.cu `CONV_MAX_K`).
pub(crate) const CONV_MAX_K: usize = 8;
/// Key head widths the delta rule has a kernel for (kernels/gdn.cu `gdn_rule_d*`).
pub(crate) const RULE_DK: [usize; 4] = [16, 32, 64, 128];

/// The round's sequences as the kernels read them: `{q_start, q_len, start_pos, slot}` each (a
/// recorded round's from its inputs: capture.rs).
fn seqs(b: &Ctx, meta: &AttnMeta) -> Table {
    b.capture.states(&b.dev, meta)
}

/// Whether the device kernels take a conv of width `kernel`.
pub(crate) fn conv_fits(kernel: usize) -> bool {
    (1..=CONV_MAX_K).contains(&kernel)
}

/// The depthwise causal conv1d (tf-backend conv.rs) of `x` `[rows, channels]`.
pub(crate) fn causal_conv1d(
    b: &Ctx,
    x: &CudaAct,
    p: &Conv1d<'_, CudaVec>,
    st: &mut CudaState,
    meta: &AttnMeta,
) -> CudaAct {
    let d = &b.dev;
    let (rows, ch) = (x.rows, x.cols);
    let y = d.zeros::<f32>(rows * ch);
    let n = meta.seqs.len();
    if n > 0 && ch > 0 {
        let sq = seqs(b, meta);
        let args = [
            Arg::P(ptr(x.data(d), &d.stream)),
            Arg::P(ptr(&p.weight.data, &d.stream)),
            Arg::P(p.bias.map_or(0, |v| ptr(&v.data, &d.stream))),
            Arg::P(ptr(&y, &d.stream)),
            Arg::P(ptr(&st.data, &d.stream)),
            Arg::P(sq.ptr(&d.stream)),
            Arg::I(ch as i32),
            Arg::I(p.kernel as i32),
            Arg::Z(st.shape.slot_len()),
            Arg::I(p.silu as i32),
        ];
        d.launch(&d.k.conv1d_state, (ch.div_ceil(BLOCK as usize) as u32, n as u32, 1), BLOCK, 0, &args);
    }
    CudaAct::new(y, rows, ch)
}

/// Whether the device kernels take a delta rule of this shape.
pub(crate) fn rule_fits(p: &Gdn<'_, CudaVec>) -> bool {
    RULE_DK.contains(&p.head_k_dim) && (1..=1024).contains(&p.head_v_dim)
}

/// The gated delta rule (tf-backend gdn.rs) over `qkv` `[rows, 2 Hk Dk + Hv Dv]`.
pub(crate) fn gated_delta_rule(
    b: &Ctx,
    qkv: &CudaAct,
    a: &CudaAct,
    bt: &CudaAct,
    p: &Gdn<'_, CudaVec>,
    st: &mut CudaState,
    meta: &AttnMeta,
) -> CudaAct {
    let d = &b.dev;
    let (hv, dv) = (p.num_v_heads, p.head_v_dim);
    let out = d.zeros::<f32>(qkv.rows * hv * dv);
    let n = meta.seqs.len();
    if n > 0 {
        let sq = seqs(b, meta);
        let k = match p.head_k_dim {
            16 => &d.k.gdn_rule_d16,
            32 => &d.k.gdn_rule_d32,
            64 => &d.k.gdn_rule_d64,
            _ => &d.k.gdn_rule_d128,
        };
        let args = [
            Arg::P(ptr(qkv.data(d), &d.stream)),
            Arg::P(ptr(a.data(d), &d.stream)),
            Arg::P(ptr(bt.data(d), &d.stream)),
            Arg::P(ptr(&p.a_log.data, &d.stream)),
            Arg::P(ptr(&p.dt_bias.data, &d.stream)),
            Arg::P(ptr(&out, &d.stream)),
            Arg::P(ptr(&st.data, &d.stream)),
            Arg::P(sq.ptr(&d.stream)),
            Arg::I(p.num_k_heads as i32),
            Arg::I(hv as i32),
            Arg::I(dv as i32),
            Arg::Z(st.shape.slot_len()),
            Arg::Z(p.state_offset),
            Arg::I(p.tiled as i32),
        ];
        let threads = dv.div_ceil(32) * 32;
        d.launch(k, (hv as u32, n as u32, 1), threads as u32, 0, &args);
    }
    CudaAct::new(out, qkv.rows, hv * dv)
}

/// `norm(x) * w * silu(z)` over each group of `w.len` values.
pub(crate) fn rms_norm_gated(b: &Ctx, x: &CudaAct, z: &CudaAct, w: &CudaVec, eps: f32) -> CudaAct {
    let d = &b.dev;
    let groups = x.len() / w.len.max(1);
    let y = d.zeros::<f32>(x.len());
    if groups > 0 {
        let args = [
            Arg::P(ptr(x.data(d), &d.stream)),
            Arg::P(ptr(z.data(d), &d.stream)),
            Arg::P(ptr(&w.data, &d.stream)),
            Arg::P(ptr(&y, &d.stream)),
            Arg::I(groups as i32),
            Arg::I(w.len as i32),
            Arg::F(eps),
        ];
        let per_block = BLOCK as usize / 32;
        d.launch(&d.k.rms_norm_gated, (groups.div_ceil(per_block) as u32, 1, 1), BLOCK, 0, &args);
    }
    CudaAct::new(y, x.rows, x.cols)
}

/// `x *= sigmoid(gate)` elementwise.
pub(crate) fn mul_sigmoid(b: &Ctx, x: &mut CudaAct, gate: &CudaAct) {
    let d = &b.dev;
    let n = x.len();
    if n > 0 {
        let args = [Arg::P(ptr(x.data(d), &d.stream)), Arg::P(ptr(gate.data(d), &d.stream)), Arg::Z(n)];
        d.launch(&d.k.mul_sigmoid, (grid_for(n, BLOCK), 1, 1), BLOCK, 0, &args);
    }
    x.touched();
}
