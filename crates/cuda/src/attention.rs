//! Paged attention: the round's metadata (attn_meta.rs) uploaded once per round, the KV write,
//! and the flash-attention kernels (kernels/attention*.cu) over work items of whole query tokens.

use crate::attn_meta::{CHUNK, pack};
use crate::ctx::Ctx;
use crate::device::{Arg, ptr};
use crate::smem::{ATTENTION_WG_SMEM, HEAD_DIMS, attention_smem, attention_split_smem};
use crate::tensor::{CudaAct, CudaKv, bf16_out, padded};
use tf_backend::{AttnMeta, AttnParams};

/// Whether a round runs on the warp-split decode kernel (kernels/attention_split.cu): one new
/// token a sequence, at most 16 query heads a KV head (one warp's rows), head width 64 or 128,
/// every CTA within one 256-key chunk (split mode, or short contexts), and at most two CTAs an SM
/// (it holds a whole chunk in shared memory, one CTA an SM; bigger rounds keep three CTAs an SM
/// on the other kernel). Only scheduling: both give the same bits.
fn warp_split(decode: bool, group: usize, hd: usize, one_chunk: bool, ctas: usize, sms: usize) -> bool {
    decode && group <= 16 && (hd == 64 || hd == 128) && one_chunk && ctas <= 2 * sms
}

/// Chunks per CTA row in split mode, or 0 to let each CTA fold all its chunks. Split only when the
/// round has few CTAs and few query rows but long contexts (decode): results are the same either
/// way, only the parallelism differs.
fn split_chunks(meta: &AttnMeta, ctas: usize, rows: usize, window: usize) -> usize {
    if ctas >= 256 || rows > 64 {
        return 0;
    }
    let most = most_chunks(meta, window);
    if most >= 2 { most } else { 0 }
}

/// The most 256-key chunks any sequence's queries of the round see.
fn most_chunks(meta: &AttnMeta, window: usize) -> usize {
    let chunks = |s: &tf_backend::SeqAttn| {
        let last = s.start_pos + s.q_len.max(1) - 1;
        let lo = if window > 0 { (s.start_pos + 1).saturating_sub(window) } else { 0 };
        last / CHUNK - lo / CHUNK + 1
    };
    meta.seqs.iter().map(chunks).max().unwrap_or(1)
}

pub(crate) fn attention(
    b: &Ctx,
    q: &CudaAct,
    k: &CudaAct,
    v: &CudaAct,
    kv: &mut CudaKv,
    meta: &AttnMeta,
    p: &AttnParams,
) -> CudaAct {
    let d = &b.dev;
    let (hd, kvh) = (p.head_dim, p.num_kv_heads);
    assert!(kvh > 0 && p.num_heads.is_multiple_of(kvh), "attention: {} heads over {kvh} KV heads", p.num_heads);
    let group = p.num_heads / kvh;
    assert!(group <= 64, "attention: {group} query heads per KV head (at most 64 supported)");
    assert_eq!((kv.shape.head_dim, kv.shape.num_kv_heads), (hd, kvh), "attention: KV pool shape");
    assert_eq!(meta.block_size, kv.shape.block_size, "attention: block size");
    assert_eq!((q.cols, k.cols, v.cols), (p.num_heads * hd, kvh * hd, kvh * hd), "attention: q/k/v widths");
    assert_eq!(meta.slot_mapping.len(), k.rows, "attention: one slot per K/V row");
    // The pool's blocks and the scratch block past them (ops.rs `kv`, graph_pad.rs's pad rows).
    let pool_slots = (kv.shape.num_blocks + 1) * kv.shape.block_size;
    assert!(meta.slot_mapping.iter().all(|&s| s < pool_slots), "attention: slot outside the pool");
    let func = match hd {
        16 => &d.k.attention_d16,
        32 => &d.k.attention_d32,
        64 => &d.k.attention_d64,
        128 => &d.k.attention_d128,
        256 => &d.k.attention_d256,
        // Refused at the pool's allocation (ops.rs `kv`).
        other => panic!("attention: head_dim {other} is not supported on CUDA ({HEAD_DIMS:?})"),
    };
    let width = p.num_heads * hd;
    let out = d.alloc::<f32>(q.rows * width);
    let outb = bf16_out(&b.dev, q.rows, width);

    let mut c = b.caches();
    let packed = pack(meta, group);
    // A round being recorded reads the metadata from its inputs (graph.rs), else from the cache,
    // which keeps one upload per packing of the round (layers with other query heads a KV head
    // pack other work items: Step's sliding layers, Gemma 4's full layers).
    let (base, m) = match b.capture.meta(&packed) {
        Some(base) => (base, packed.lay),
        None => c.meta(d, packed),
    };
    let at = |off: usize| base + 4 * off as u64;
    let (kp, vp) = (ptr(&kv.k, &d.stream), ptr(&kv.v, &d.stream));
    // Decode rounds (one new token per sequence) store their K/V inside the attention kernel.
    let decode = meta.seqs.iter().all(|s| s.q_len <= 1);
    if k.rows > 0 && !decode {
        let args = [
            Arg::P(ptr(k.data(&b.dev), &d.stream)),
            Arg::P(ptr(v.data(&b.dev), &d.stream)),
            Arg::P(at(m.slots_off)),
            Arg::P(kp),
            Arg::P(vp),
            Arg::I((kvh * hd) as i32),
        ];
        d.launch(&d.k.kv_write, (k.rows as u32, 1, 1), 128, 0, &args);
    }
    if m.num_items > 0 {
        let window = p.window.map_or(0, |w| w.min(i32::MAX as usize));
        let nz = split_chunks(meta, m.num_items * kvh, q.rows, window);
        let ws = d.alloc::<f32>(if nz > 0 { q.rows * p.num_heads * nz * (hd + 2) } else { 1 });
        let args = [
            Arg::P(ptr(q.data(&b.dev), &d.stream)),
            Arg::P(kp),
            Arg::P(vp),
            Arg::P(base),
            Arg::P(at(m.items_off)),
            Arg::P(at(m.bt_off)),
            Arg::P(ptr(&out, &d.stream)),
            Arg::P(ptr(&outb, &d.stream)),
            Arg::P(ptr(&ws, &d.stream)),
            Arg::I(nz as i32),
            Arg::I(p.num_heads as i32),
            Arg::I(kvh as i32),
            Arg::I(meta.block_size as i32),
            Arg::F(p.scale),
            Arg::I(window as i32),
            Arg::F(p.softcap.unwrap_or(0.0)),
            Arg::I(padded(width) as i32),
            Arg::P(if decode { ptr(k.data(&b.dev), &d.stream) } else { 0 }),
            Arg::P(if decode { ptr(v.data(&b.dev), &d.stream) } else { 0 }),
            Arg::P(at(m.slots_off)),
        ];
        let grid = (m.num_items as u32, kvh as u32, nz.max(1) as u32);
        let ctas = m.num_items * kvh * nz.max(1);
        let one_chunk = nz > 0 || most_chunks(meta, window) <= 1;
        let wg =
            (!decode && m.warps == 8 && nz == 0 && hd == 128 && !b.mma_sync_attention).then_some(kv.maps).flatten();
        if let Some((kmap, vmap)) = wg {
            let args = [
                Arg::P(ptr(q.data(&b.dev), &d.stream)),
                Arg::M(kmap),
                Arg::M(vmap),
                Arg::P(base),
                Arg::P(at(m.items_off)),
                Arg::P(at(m.bt_off)),
                Arg::P(ptr(&out, &d.stream)),
                Arg::P(ptr(&outb, &d.stream)),
                Arg::I(p.num_heads as i32),
                Arg::I(kvh as i32),
                Arg::I(meta.block_size as i32),
                Arg::F(p.scale),
                Arg::I(window as i32),
                Arg::F(p.softcap.unwrap_or(0.0)),
                Arg::I(padded(width) as i32),
                Arg::I(pool_slots as i32),
            ];
            d.launch(&d.k.attention_wg_d128, (grid.0, grid.1, 1), 384, ATTENTION_WG_SMEM, &args);
        } else if m.warps == 4 && warp_split(decode, group, hd, one_chunk, ctas, d.num_sms) {
            let f = if hd == 64 { &d.k.attention_split_d64 } else { &d.k.attention_split_d128 };
            d.launch(f, grid, 128, attention_split_smem(hd), &args);
        } else {
            d.launch(func, grid, 32 * m.warps, attention_smem(hd), &args);
        }
        if nz > 0 {
            let args = [
                Arg::P(ptr(&ws, &d.stream)),
                Arg::P(base),
                Arg::P(at(m.items_off)),
                Arg::P(ptr(&out, &d.stream)),
                Arg::P(ptr(&outb, &d.stream)),
                Arg::I(nz as i32),
                Arg::I(p.num_heads as i32),
                Arg::I(hd as i32),
                Arg::I(window as i32),
                Arg::I(padded(width) as i32),
            ];
            d.launch(&d.k.attention_combine, (m.num_items as u32, p.num_heads as u32, 1), hd as u32, 0, &args);
        }
    }
    drop(c);
    CudaAct::with_bf16(out, outb, q.rows, width)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::SeqAttn;

    #[test]
    fn warp_split_kernel_only_for_small_decode_rounds_of_single_chunks() {
        // Batch-1 decode of a GQA model (4 query heads a KV head, width 128) on 132 SMs.
        assert!(warp_split(true, 4, 128, true, 8, 132));
        assert!(warp_split(true, 4, 64, true, 264, 132));
        assert!(!warp_split(false, 4, 128, true, 8, 132), "prefill rows");
        assert!(!warp_split(true, 32, 128, true, 8, 132), "more rows than one warp holds");
        assert!(!warp_split(true, 4, 256, true, 8, 132), "head width without room for four stages");
        assert!(!warp_split(true, 4, 128, false, 8, 132), "a CTA walking several chunks");
        assert!(!warp_split(true, 4, 128, true, 265, 132), "more than two CTAs an SM");
    }

    #[test]
    fn split_mode_only_for_few_rows_over_long_contexts() {
        let seq = |start_pos, q_len| SeqAttn { q_start: 0, q_len, start_pos, block_table: vec![] };
        let meta = |seqs| AttnMeta { state_slots: Vec::new(), seqs, slot_mapping: vec![], block_size: 16 };
        // One decode token at position 300: keys 0..=300 span chunks 0 and 1.
        assert_eq!(split_chunks(&meta(vec![seq(300, 1)]), 8, 1, 0), 2);
        // Short contexts fit one chunk: nothing to split.
        assert_eq!(split_chunks(&meta(vec![seq(100, 1)]), 8, 1, 0), 0);
        // A window hides the early chunks: position 1000 with a 300-key window spans chunks 2..=3.
        assert_eq!(split_chunks(&meta(vec![seq(1000, 1)]), 8, 1, 300), 2);
        // Prefill-sized rounds or rounds with many CTAs fold inside each CTA.
        assert_eq!(split_chunks(&meta(vec![seq(0, 600)]), 8, 600, 0), 0);
        assert_eq!(split_chunks(&meta(vec![seq(5000, 1)]), 256, 1, 0), 0);
    }
}
