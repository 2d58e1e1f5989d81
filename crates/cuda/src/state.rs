//! Per-sequence state pools on the device (state.rs of tf-backend gives the slot layout): one
//! f32 buffer of `num_slots` slots per recurrent layer, and its host reads, writes and copies.

use crate::ctx::Ctx;
use crate::error::must;
use cudarc::driver::CudaSlice;
use tf_backend::{BackendError, StateShape};

/// One layer's state pool: `[num_slots, slot_len]` f32.
pub struct CudaState {
    pub(crate) shape: StateShape,
    pub(crate) data: CudaSlice<f32>,
}

/// A zeroed pool of `shape`.
pub(crate) fn alloc(b: &Ctx, shape: StateShape) -> Result<CudaState, BackendError> {
    let n = shape
        .num_slots
        .checked_mul(shape.slot_len())
        .ok_or_else(|| BackendError::Unsupported(format!("state pool {shape:?} is too large")))?;
    Ok(CudaState { shape, data: b.dev.zeros(n.max(1)) })
}

/// `slots`' values as little-endian f32 bytes.
pub(crate) fn read(b: &Ctx, st: &CudaState, slots: &[u32]) -> Vec<u8> {
    let n = st.shape.slot_len();
    let mut out = Vec::with_capacity(4 * n * slots.len());
    let mut buf = vec![0f32; n];
    for &s in slots {
        let start = s as usize * n;
        must(b.dev.stream.memcpy_dtoh(&st.data.slice(start..start + n), &mut buf), "reading state slots");
        out.extend(buf.iter().flat_map(|x| x.to_le_bytes()));
    }
    out
}

/// Writes bytes laid out as [`read`] gives them.
pub(crate) fn write(b: &Ctx, st: &mut CudaState, slots: &[u32], bytes: &[u8]) {
    let n = st.shape.slot_len();
    assert_eq!(bytes.len(), 4 * n * slots.len(), "write_state: byte count");
    for (&s, chunk) in slots.iter().zip(bytes.chunks_exact(4 * n)) {
        let vals: Vec<f32> = chunk.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let start = s as usize * n;
        must(b.dev.stream.memcpy_htod(&vals, &mut st.data.slice_mut(start..start + n)), "writing state slots");
    }
}

/// Copies slot `from` over slot `to` on the device.
pub(crate) fn copy(b: &Ctx, st: &mut CudaState, from: u32, to: u32) {
    let n = st.shape.slot_len();
    if from == to || n == 0 {
        return;
    }
    let (f, t) = (from as usize * n, to as usize * n);
    let src = st.data.slice(f..f + n);
    let mut tmp: CudaSlice<f32> = b.dev.alloc(n);
    must(b.dev.stream.memcpy_dtod(&src, &mut tmp), "copying a state slot");
    must(b.dev.stream.memcpy_dtod(&tmp, &mut st.data.slice_mut(t..t + n)), "copying a state slot");
}
