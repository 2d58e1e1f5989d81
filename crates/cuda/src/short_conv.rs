//! LFM2's double-gated short conv on the device (kernels/short_conv.cu): every output (channel,
//! row) in parallel from the sequence's window and rows, then each sequence's window moved on.
//! The reference's arithmetic in its order (tf-backend short_conv.rs), so its bits.

use crate::capture::{Input, row_table};
use crate::ctx::Ctx;
use crate::device::{Arg, ptr};
use crate::state::CudaState;
use crate::tensor::{CudaAct, CudaVec};
use tf_backend::{AttnMeta, ShortConv};

/// Threads a block.
const BLOCK: u32 = 128;
/// Most blocks along a grid's y (rows stride past it).
const MAX_GRID_Y: usize = 65535;

/// `C * conv(B * x)` of `bcx` `[rows, 3 * ch]` into `[rows, ch]`.
pub(crate) fn short_conv(
    b: &Ctx,
    bcx: &CudaAct,
    p: &ShortConv<'_, CudaVec>,
    st: &mut CudaState,
    meta: &AttnMeta,
) -> CudaAct {
    let d = &b.dev;
    let (rows, ch) = (bcx.rows, bcx.cols / 3);
    let y = d.zeros::<f32>(rows * ch);
    let n = meta.seqs.len().min(meta.state_slots.len());
    if rows == 0 || ch == 0 || p.kernel == 0 {
        return CudaAct::new(y, rows, ch);
    }
    // Row r's sequence (-1: none), and the sequences (a recorded round's from its inputs).
    let row_seq = match meta.state_slots.is_empty() {
        true => vec![u32::MAX; rows],
        false => row_table(meta, rows),
    };
    let sq = b.capture.states(d, meta);
    let rs = b.capture.table(d, Input::RowSeq, &row_seq);
    let blocks = ch.div_ceil(BLOCK as usize) as u32;
    let (x, state) = (ptr(bcx.data(d), &d.stream), ptr(&st.data, &d.stream));
    let (slot_len, k) = (st.shape.slot_len(), p.kernel as i32);
    let out_args = [
        Arg::P(x),
        Arg::P(ptr(&p.weight.data, &d.stream)),
        Arg::P(p.bias.map_or(0, |v| ptr(&v.data, &d.stream))),
        Arg::P(ptr(&y, &d.stream)),
        Arg::P(state),
        Arg::P(sq.ptr(&d.stream)),
        Arg::P(rs.ptr(&d.stream)),
        Arg::I(rows as i32),
        Arg::I(ch as i32),
        Arg::I(k),
        Arg::Z(slot_len),
    ];
    d.launch(&d.k.short_conv_out, (blocks, rows.min(MAX_GRID_Y) as u32, 1), BLOCK, 0, &out_args);
    if n > 0 && p.kernel > 1 {
        let win_args =
            [Arg::P(x), Arg::P(state), Arg::P(sq.ptr(&d.stream)), Arg::I(ch as i32), Arg::I(k), Arg::Z(slot_len)];
        d.launch(&d.k.short_conv_window, (blocks, n as u32, 1), BLOCK, 0, &win_args);
    }
    CudaAct::new(y, rows, ch)
}
