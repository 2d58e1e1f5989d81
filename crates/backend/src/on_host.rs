//! The host-run defaults of the state ops (conv.rs, gdn.rs) and of block-sparse attention
//! (sparse.rs): a round's slots or KV blocks read from a backend's pool into a small host pool,
//! the reference run over it, and the slots or blocks written back.

use crate::Backend;
use crate::attn::{AttnMeta, KvShape};
use crate::host::{HostKv, HostTensor};
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

/// `values` as a pool of `dtype` stores them (rounded to nearest, then read back as f32): the
/// rows a host default writes into its copy of the round's blocks, so this round's queries
/// see the values later rounds read back from the backend's pool (chunked == whole).
pub fn rounded(values: &[f32], dtype: tf_core::DType) -> Vec<f32> {
    match dtype {
        tf_core::DType::F32 => values.to_vec(),
        _ => decode_kv(&encode_kv(values, dtype), dtype),
    }
}

/// [`rounded`] of a host tensor.
pub fn rounded_tensor(x: HostTensor, dtype: tf_core::DType) -> HostTensor {
    match dtype {
        tf_core::DType::F32 => x,
        _ => HostTensor { data: rounded(&x.data, dtype), ..x },
    }
}

/// Runs `f` over a host copy (f32) of the blocks `meta`'s sequences use in `kv`, renumbered as
/// [`crate::dsa::compact_blocks`] does (the metadata `f` is handed names them), then writes
/// back the blocks holding this round's slots (`meta.slot_mapping`: the only rows `f` may write;
/// the others go back unread): the host-run defaults of the block-sparse attention ops. Rows
/// `f` writes must be [`rounded`] to the pool's dtype first. The host pool has one "head" as
/// wide as a slot, and keeps the K and V halves as the backend's pool does.
pub fn with_blocks<B: Backend + ?Sized, R>(
    b: &B,
    kv: &mut B::Kv,
    meta: &AttnMeta,
    f: impl FnOnce(&mut HostKv, &AttnMeta) -> R,
) -> R {
    let (blocks, local) = crate::dsa::compact_blocks(meta);
    let dtype = b.kv_dtype();
    let bytes = b.read_kv_blocks(kv, &blocks);
    let (k, v) = bytes.split_at(bytes.len() / 2);
    let (k, v) = (decode_kv(k, dtype), decode_kv(v, dtype));
    let block_size = meta.block_size.max(1);
    let width = k.len() / (blocks.len() * block_size).max(1);
    let shape = KvShape { num_blocks: blocks.len(), block_size, num_kv_heads: 1, head_dim: width, latent: false };
    let mut host = HostKv { shape, k, v };
    #[cfg(debug_assertions)]
    let before = host.clone();
    let out = f(&mut host, &local);
    let mut touched: Vec<usize> = local.slot_mapping.iter().map(|&s| s / block_size).collect();
    touched.sort_unstable();
    touched.dedup();
    let per = block_size * width;
    #[cfg(debug_assertions)]
    for i in (0..blocks.len()).filter(|i| touched.binary_search(i).is_err()) {
        let bits = |x: &[f32]| x[i * per..(i + 1) * per].iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        let same = |a: &[f32], b: &[f32]| bits(a) == bits(b);
        debug_assert!(
            same(&host.k, &before.k) && same(&host.v, &before.v),
            "with_blocks: f wrote block {i}, no slot of the round"
        );
    }
    let half =
        |x: &[f32]| -> Vec<u8> { touched.iter().flat_map(|&i| encode_kv(&x[i * per..(i + 1) * per], dtype)).collect() };
    let ids: Vec<u32> = touched.iter().map(|&i| blocks[i]).collect();
    b.write_kv_blocks(kv, &ids, &[half(&host.k), half(&host.v)].concat());
    out
}

/// `x`'s values on the host as a [`HostTensor`].
pub fn host_tensor<B: Backend + ?Sized>(b: &B, x: &B::Act) -> HostTensor {
    let (rows, cols) = b.shape(x);
    HostTensor { data: b.download(x), rows, cols }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_core::DType;

    #[test]
    fn rows_are_rounded_as_the_pool_stores_them() {
        let x = [1.0f32 + 1.0 / 512.0 + 1.0 / 4096.0, -3.3, 65519.0, f32::MIN_POSITIVE];
        let pooled = |d| decode_kv(&encode_kv(&x, d), d);
        for d in [DType::BF16, DType::F16] {
            let r = rounded(&x, d);
            assert_eq!(r, pooled(d), "{d:?}: the values a later round reads back");
            assert_ne!(r, x.to_vec(), "{d:?}: rounding changes them");
        }
        assert_eq!(rounded(&x, DType::F32), x.to_vec());
        let t = HostTensor { data: x.to_vec(), rows: 2, cols: 2 };
        assert_eq!(rounded_tensor(t, DType::BF16).data, pooled(DType::BF16));
    }
}
