//! The host-run defaults of the state ops (conv.rs, gdn.rs), of block-sparse attention
//! (sparse.rs) and of attention with sinks: a round's slots or KV blocks read from a backend's
//! pool into a small host pool, the reference run over it, and the slots or blocks written back.

use crate::Backend;
use crate::attn::{AttnMeta, AttnParams, KvShape};
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

/// KV pool bytes of `dtype` (f32, bf16 or f16 little-endian, or ggml's q8_0 / q4_0 blocks) as
/// f32 values; other types give none.
pub fn decode_kv(bytes: &[u8], dtype: tf_core::DType) -> Vec<f32> {
    use tf_core::DType;
    match dtype {
        DType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        DType::BF16 => bytes.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        DType::F16 => bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        DType::Quant(q) if tf_formats::quantize::WRITABLE.contains(&q) => tf_formats::quant::dequantize(q, bytes),
        _ => Vec::new(),
    }
}

/// f32 values as KV pool bytes of `dtype`, the inverse of [`decode_kv`] (rounded to nearest;
/// q8_0 / q4_0 quantized as ggml's reference quantizers do, whole blocks of 32).
pub fn encode_kv(values: &[f32], dtype: tf_core::DType) -> Vec<u8> {
    use tf_core::DType;
    match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::BF16 => values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        DType::F16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
        // Blocks of 32 values in a row: a pool's rows are whole blocks (its head width a
        // multiple of 32), so the blocks here are the pool's.
        DType::Quant(q) => tf_formats::quantize::quantize(q, values).unwrap_or_default(),
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

/// [`Backend::attention_sinks`] on the host: this round's K and V rounded as `kv` stores them and
/// written into a host copy of the round's blocks ([`with_blocks`]), then the reference attention
/// with each query head's sink over it; the output uploaded.
#[allow(clippy::too_many_arguments)]
pub fn attention_sinks<B: Backend + ?Sized>(
    b: &B,
    q: &B::Act,
    k: &B::Act,
    v: &B::Act,
    kv: &mut B::Kv,
    meta: &AttnMeta,
    p: &AttnParams,
    sinks: &[f32],
) -> B::Act {
    let dtype = b.kv_dtype();
    let qh = host_tensor(b, q);
    let kh = rounded_tensor(host_tensor(b, k), dtype);
    let vh = rounded_tensor(host_tensor(b, v), dtype);
    let out = with_blocks(b, kv, meta, |pool, local| {
        crate::reference::write_kv(&kh, &vh, pool, local);
        crate::reference::attend(&qh, pool, local, p, Some(sinks))
    });
    b.upload(&out.data, out.rows, out.cols)
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
    fn attention_with_sinks_on_the_host_equals_the_reference_bit_for_bit() {
        use crate::attn::SeqAttn;
        use crate::reference::RefBackend;
        // Two sequences over scattered blocks of 4 (one a continuation, one a prefill past its
        // sliding window), 4 query heads on 2 KV heads of 8.
        let b = RefBackend;
        let p = AttnParams { num_heads: 4, num_kv_heads: 2, head_dim: 8, scale: 0.35, window: Some(5), softcap: None };
        let shape = KvShape { num_blocks: 8, block_size: 4, num_kv_heads: 2, head_dim: 8, latent: false };
        let vals = |n: usize, seed: u32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 250.0 - 2.0)
                .collect()
        };
        let mut pool = b.kv(shape).unwrap();
        pool.k = vals(pool.k.len(), 1);
        pool.v = vals(pool.v.len(), 2);
        let seqs = vec![
            SeqAttn { q_start: 0, q_len: 2, start_pos: 6, block_table: vec![5, 2] },
            SeqAttn { q_start: 2, q_len: 7, start_pos: 0, block_table: vec![7, 0] },
        ];
        let slot = |t: &[u32], pos: usize| t[pos / 4] as usize * 4 + pos % 4;
        let mut slot_mapping: Vec<usize> = (6..8).map(|j| slot(&seqs[0].block_table, j)).collect();
        slot_mapping.extend((0..7).map(|j| slot(&seqs[1].block_table, j)));
        let meta = AttnMeta { seqs, slot_mapping, block_size: 4, state_slots: Vec::new() };
        let t = |cols: usize, seed: u32| HostTensor { data: vals(9 * cols, seed), rows: 9, cols };
        let (q, k, v) = (t(32, 3), t(16, 4), t(16, 5));
        let sinks = [0.5, -1.0, 2.0, 0.0];
        let mut ref_pool = pool.clone();
        let want = b.attention_sinks(&q, &k, &v, &mut ref_pool, &meta, &p, &sinks);
        let got = attention_sinks(&b, &q, &k, &v, &mut pool, &meta, &p, &sinks);
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        assert_eq!(bits(&got.data), bits(&want.data));
        assert_eq!(bits(&pool.k), bits(&ref_pool.k), "the round's keys written where the reference writes them");
        assert_eq!(bits(&pool.v), bits(&ref_pool.v));
        // The sinks count: without them the rows differ.
        let plain = b.attention(&q, &k, &v, &mut pool.clone(), &meta, &p);
        assert_ne!(bits(&plain.data), bits(&want.data));
    }

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
