//! The host-run defaults of the state ops (conv.rs, gdn.rs): a round's slots read from a
//! backend's pool into a small host pool, the reference run over it, and the slots written back.

use crate::Backend;
use crate::attn::AttnMeta;
use crate::state::{HostState, StateShape};

/// Runs `f` over a host copy of the slots of `meta`'s sequences (slot `i` for sequence `i` in
/// the metadata `f` is handed), then writes those slots back into `st`.
pub fn with_slots<B: Backend + ?Sized, R>(
    b: &B,
    st: &mut B::State,
    meta: &AttnMeta,
    f: impl FnOnce(&mut HostState, &AttnMeta) -> R,
) -> R {
    let slots = &meta.state_slots[..meta.seqs.len()];
    let bytes = b.read_state(st, slots);
    let slot_len = bytes.len() / 4 / slots.len().max(1);
    let shape = StateShape { num_slots: slots.len(), conv_channels: 0, conv_width: 0, rec_len: slot_len };
    let mut host = HostState {
        shape,
        data: bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
    };
    let mut local = meta.clone();
    local.state_slots = (0..slots.len() as u32).collect();
    let out = f(&mut host, &local);
    b.write_state(st, slots, &host.read_slots(&local.state_slots));
    out
}

/// KV pool bytes of `dtype` (f32, bf16 or f16, little-endian) as f32 values; other types give
/// none.
pub fn decode_kv(bytes: &[u8], dtype: tf_core::DType) -> Vec<f32> {
    use tf_core::DType;
    match dtype {
        DType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        DType::BF16 => bytes.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        DType::F16 => bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        _ => Vec::new(),
    }
}

/// f32 values as KV pool bytes of `dtype`, the inverse of [`decode_kv`] (rounded to nearest).
pub fn encode_kv(values: &[f32], dtype: tf_core::DType) -> Vec<u8> {
    use tf_core::DType;
    match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::BF16 => values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        DType::F16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
        _ => Vec::new(),
    }
}
