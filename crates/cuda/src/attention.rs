//! Paged attention: the round's metadata (attn_meta.rs) uploaded once per round, the KV write,
//! and the flash-attention kernels (kernels/attention*.cu) over work items of whole query tokens;
//! the same kernels over K/V already in a pool, writing none (`attention_cached`: the Gemma 4
//! assistant reading its target's pools).

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
        let (lo, last) = (*keys_read(s, 0, window).start(), *keys_read(s, s.q_len.max(1) - 1, window).end());
        last / CHUNK - lo / CHUNK + 1
    };
    meta.seqs.iter().map(chunks).max().unwrap_or(1)
}

/// Where a round's new K/V rows go: into their slots before the kernel reads them (`kv_write`,
/// rounds with more than one token a sequence), inside the attention kernel (decode rounds: the
/// kernel's `knew` / `vnew`), or nowhere (`attention_cached`: the keys are in the pool already).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NewRows {
    /// The `kv_write` kernel, then attention.
    Apart,
    /// The attention kernel stores them.
    InKernel,
    /// Nothing is written.
    None,
}

/// How a round with (`write`) or without new K/V rows stores them: `decode` is one token at most
/// a sequence.
fn new_rows(write: bool, decode: bool) -> NewRows {
    match (write, decode) {
        (false, _) => NewRows::None,
        (true, true) => NewRows::InKernel,
        (true, false) => NewRows::Apart,
    }
}

/// The key positions query `i` of `s` reads (the kernels' `attn_rows` and block range:
/// `[max(0, pos + 1 - window), pos]` for `pos = start_pos + i`, every key up to `pos` without a
/// window, `window` 0), as tf_backend's `reference::window_start` gives them.
fn keys_read(s: &tf_backend::SeqAttn, i: usize, window: usize) -> std::ops::RangeInclusive<usize> {
    let pos = s.start_pos + i;
    let lo = if window > 0 { (pos + 1).saturating_sub(window) } else { 0 };
    lo..=pos
}

/// Writes the round's K/V rows into their slots, then attends (kernels/attention*.cu).
pub(crate) fn attention(
    b: &Ctx,
    q: &CudaAct,
    k: &CudaAct,
    v: &CudaAct,
    kv: &mut CudaKv,
    meta: &AttnMeta,
    p: &AttnParams,
) -> CudaAct {
    let kvh = p.num_kv_heads;
    assert_eq!((k.cols, v.cols), (kvh * p.head_dim, kvh * p.head_dim), "attention: k/v widths");
    assert_eq!(meta.slot_mapping.len(), k.rows, "attention: one slot per K/V row");
    // The pool's blocks and the scratch block past them (ops.rs `kv`, graph_pad.rs's pad rows).
    let pool_slots = (kv.shape.num_blocks + 1) * kv.shape.block_size;
    assert!(meta.slot_mapping.iter().all(|&s| s < pool_slots), "attention: slot outside the pool");
    attend(b, q, Some((k, v)), kv, meta, p)
}

/// Attention of `q` over the K/V already in `kv`, writing none: row `i` of each sequence reads
/// the positions `[window_start(start_pos + i), start_pos + i]` of its block table, with the
/// kernels and bits [`attention`] has after writing them (the slot mapping is not read).
pub(crate) fn attention_cached(b: &Ctx, q: &CudaAct, kv: &CudaKv, meta: &AttnMeta, p: &AttnParams) -> CudaAct {
    attend(b, q, None, kv, meta, p)
}

/// The attention kernels over `kv`, storing the round's new rows `write` first where given.
fn attend(
    b: &Ctx,
    q: &CudaAct,
    write: Option<(&CudaAct, &CudaAct)>,
    kv: &CudaKv,
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
    assert_eq!(q.cols, p.num_heads * hd, "attention: q width");
    for s in &meta.seqs {
        assert!(s.q_start + s.q_len <= q.rows, "attention: a sequence's rows pass the batch");
    }
    let pool_slots = (kv.shape.num_blocks + 1) * kv.shape.block_size;
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
        None => {
            // Inside a capture the cached copy holds this round's values on every replay.
            d.spoil_capture();
            c.meta(d, packed)
        }
    };
    let at = |off: usize| base + 4 * off as u64;
    let (kp, vp) = (ptr(&kv.k, &d.stream), ptr(&kv.v, &d.stream));
    // Decode rounds (one new token per sequence) store their K/V inside the attention kernel.
    let decode = meta.seqs.iter().all(|s| s.q_len <= 1);
    let how = new_rows(write.is_some(), decode);
    if let Some((k, v)) = write
        && k.rows > 0
        && how == NewRows::Apart
    {
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
            Arg::P(match write {
                Some((k, _)) if how == NewRows::InKernel => ptr(k.data(&b.dev), &d.stream),
                _ => 0,
            }),
            Arg::P(match write {
                Some((_, v)) if how == NewRows::InKernel => ptr(v.data(&b.dev), &d.stream),
                _ => 0,
            }),
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

    #[test]
    fn new_rows_are_written_apart_in_the_kernel_or_not_at_all() {
        assert_eq!(new_rows(true, false), NewRows::Apart, "prefill rounds: kv_write first");
        assert_eq!(new_rows(true, true), NewRows::InKernel, "decode rounds: the kernel stores them");
        assert_eq!(new_rows(false, true), NewRows::None, "attention_cached writes nothing");
        assert_eq!(new_rows(false, false), NewRows::None, "not for runs of several tokens either");
    }

    #[test]
    fn an_assistant_step_reads_the_keys_the_reference_reads() {
        use tf_backend::{Backend, KvShape, RefBackend};
        // Keys of zeros (every score equal) and one-hot values: the reference's output is nonzero
        // exactly at the positions its query read.
        let r = RefBackend;
        let (bs, d, n): (usize, usize, usize) = (4, 64, 40);
        // Blocks in reverse order, so a slot is not its position.
        let table: Vec<u32> = (0..n.div_ceil(bs) as u32).rev().collect();
        let shape = KvShape { num_blocks: table.len(), block_size: bs, num_kv_heads: 1, head_dim: d, latent: false };
        let mut kv = r.kv(shape).expect("a host pool");
        let p = |window| AttnParams { num_heads: 1, num_kv_heads: 1, head_dim: d, scale: 1.0, window, softcap: None };
        let one_hot: Vec<f32> = (0..n * d).map(|i| if i % d == i / d { 1.0 } else { 0.0 }).collect();
        let zeros = r.upload(&vec![0.0; n * d], n, d);
        let v = r.upload(&one_hot, n, d);
        let _ = r.attention(&zeros, &zeros, &v, &mut kv, &AttnMeta::single(0, n, table.clone(), bs), &p(None));
        // The assistant's sliding layers take the window one wider than their own `W`
        // (assistant.rs): they read the last W + 1 of the target's positions before the query's.
        for (window, own) in [(None, None), (Some(2), Some(1)), (Some(7), Some(6)), (Some(9), Some(8))] {
            for pos in 1..n {
                let meta = tf_models::Gemma4Assistant::<RefBackend>::step_meta(vec![(pos, table.clone())], bs);
                let out = r.attention_cached(&r.upload(&vec![0.0; d], 1, d), &kv, &meta, &p(window));
                let read: Vec<usize> = (0..d).filter(|&j| out.row(0)[j] > 0.0).collect();
                let want: Vec<usize> = keys_read(&meta.seqs[0], 0, window.unwrap_or(0)).collect();
                assert_eq!(read, want, "window {window:?}, position {pos}");
                let first = own.map_or(0, |w: usize| pos.saturating_sub(w + 1));
                assert_eq!(want, (first..pos).collect::<Vec<_>>(), "window {window:?}, position {pos}");
            }
        }
    }
}
