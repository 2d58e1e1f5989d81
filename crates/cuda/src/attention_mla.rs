//! Attention over a latent KV pool (MLA's absorbed form, tf_models blocks/mla.rs): the round's
//! latent rows written into the pool (K alone), then kernels/attention_mla.cu over one KV head
//! shared by every query head, its values its keys; split mode folds chunks in a second kernel.

use crate::attn_meta::{CHUNK, pack};
use crate::ctx::Ctx;
use crate::device::{Arg, ptr};
use crate::smem::{MLA_HEADS, MLA_SMEM, MLA_THREADS, attention_mla_smem};
use crate::tensor::{CudaAct, CudaKv, bf16_out, padded};
use tf_backend::{AttnMeta, AttnParams};

/// Query heads a CTA takes for `heads` heads of width `d`: up to `MLA_HEADS`, fewer where their
/// tile would not fit the kernel's shared memory (`None`: not even one head fits). Only
/// scheduling: a head's result does not depend on its tile.
fn head_tile(heads: usize, d: usize) -> Option<usize> {
    let mut ht = heads.clamp(1, MLA_HEADS);
    while attention_mla_smem(d, ht) > MLA_SMEM {
        if ht == 1 {
            return None;
        }
        ht /= 2;
    }
    Some(ht)
}

/// Chunks per token in split mode (each CTA builds one 256-key chunk, a second kernel folds
/// them), or 0 to let each CTA fold its token's chunks: split only rounds of few rows whose CTAs
/// would leave most SMs idle, over contexts of several chunks, with a workspace of at most
/// 256 MiB. Only scheduling: both give the same bits.
fn split_chunks(meta: &AttnMeta, rows: usize, ctas: usize, sms: usize, heads: usize, d: usize) -> usize {
    let most = meta.seqs.iter().map(|s| (s.start_pos + s.q_len.max(1) - 1) / CHUNK + 1).max().unwrap_or(1);
    let workspace = rows * heads * most * (d + 2) * 4;
    if rows > 64 || ctas >= 2 * sms || most < 2 || workspace > 256 << 20 { 0 } else { most }
}

/// Writes the round's latent rows `k` `[rows, d]` into their slots of the latent pool `kv`, then
/// attends (causal, paged) with queries `q` `[rows, heads * d]`: `[rows, heads * d]`.
pub(crate) fn attention(
    b: &Ctx,
    q: &CudaAct,
    k: &CudaAct,
    kv: &mut CudaKv,
    meta: &AttnMeta,
    p: &AttnParams,
) -> CudaAct {
    assert_eq!((k.cols, meta.slot_mapping.len()), (p.head_dim, k.rows), "latent attention: latent rows");
    let pool_slots = (kv.shape.num_blocks + 1) * kv.shape.block_size;
    assert!(meta.slot_mapping.iter().all(|&s| s < pool_slots), "latent attention: slot outside the pool");
    attend(b, q, Some(k), kv, meta, p)
}

/// [`attention`] over the latent rows already in `kv`, writing none (the slot mapping is not read).
pub(crate) fn attention_cached(b: &Ctx, q: &CudaAct, kv: &CudaKv, meta: &AttnMeta, p: &AttnParams) -> CudaAct {
    attend(b, q, None, kv, meta, p)
}

/// The latent attention kernel over `kv`, writing the round's latent rows `write` first where given.
fn attend(b: &Ctx, q: &CudaAct, write: Option<&CudaAct>, kv: &CudaKv, meta: &AttnMeta, p: &AttnParams) -> CudaAct {
    let d = &b.dev;
    let (hd, heads) = (p.head_dim, p.num_heads);
    assert!(kv.shape.latent && p.num_kv_heads == 1, "latent attention: one KV head in a latent pool");
    assert!(p.window.is_none() && p.softcap.is_none(), "latent attention: no sliding window or soft-cap");
    assert!(hd > 0 && hd.is_multiple_of(2), "latent attention: width {hd} is not even");
    assert_eq!((kv.shape.head_dim, kv.shape.num_kv_heads), (hd, 1), "latent attention: KV pool shape");
    assert_eq!(meta.block_size, kv.shape.block_size, "latent attention: block size");
    assert_eq!(q.cols, heads * hd, "latent attention: q width");
    let Some(ht) = head_tile(heads, hd) else {
        panic!("latent attention: width {hd} does not fit the kernel's shared memory on CUDA")
    };
    let width = heads * hd;
    let out = d.alloc::<f32>(q.rows * width);
    let outb = bf16_out(&b.dev, q.rows, width);

    let mut c = b.caches();
    let packed = pack(meta, heads);
    // A round being recorded reads the metadata from its inputs (graph.rs), else from the cache.
    let per_item = packed.host[packed.lay.items_off..packed.lay.slots_off].chunks(3).map(|it| it[2]).max();
    let per_item = per_item.unwrap_or(1).max(1) as usize;
    let (base, m) = match b.capture.meta(&packed) {
        Some(base) => (base, packed.lay),
        None => {
            // Inside a capture the cached copy holds this round's values on every replay.
            d.spoil_capture();
            c.meta(d, packed)
        }
    };
    let at = |off: usize| base + 4 * off as u64;
    let kp = ptr(&kv.k, &d.stream);
    if let Some(k) = write
        && k.rows > 0
    {
        let args = [Arg::P(ptr(k.data(&b.dev), &d.stream)), Arg::P(at(m.slots_off)), Arg::P(kp), Arg::I(hd as i32)];
        d.launch(&d.k.kv_write_latent, (k.rows as u32, 1, 1), 128, 0, &args);
    }
    if m.num_items > 0 {
        let tiles = heads.div_ceil(ht);
        let ctas = m.num_items * per_item * tiles;
        let nz = split_chunks(meta, q.rows, ctas, d.num_sms, heads, hd);
        let ws = d.alloc::<f32>(if nz > 0 { q.rows * heads * nz * (hd + 2) } else { 1 });
        let args = [
            Arg::P(ptr(q.data(&b.dev), &d.stream)),
            Arg::P(kp),
            Arg::P(base),
            Arg::P(at(m.items_off)),
            Arg::P(at(m.bt_off)),
            Arg::P(ptr(&out, &d.stream)),
            Arg::P(ptr(&outb, &d.stream)),
            Arg::P(ptr(&ws, &d.stream)),
            Arg::I(nz as i32),
            Arg::I(per_item as i32),
            Arg::I(heads as i32),
            Arg::I(ht as i32),
            Arg::I(hd as i32),
            Arg::I(meta.block_size as i32),
            Arg::F(p.scale),
            Arg::I(padded(width) as i32),
        ];
        let grid = ((m.num_items * per_item) as u32, tiles as u32, nz.max(1) as u32);
        d.launch(&d.k.attention_mla, grid, MLA_THREADS, attention_mla_smem(hd, ht), &args);
        if nz > 0 {
            let args = [
                Arg::P(ptr(&ws, &d.stream)),
                Arg::P(base),
                Arg::P(at(m.items_off)),
                Arg::P(ptr(&out, &d.stream)),
                Arg::P(ptr(&outb, &d.stream)),
                Arg::I(nz as i32),
                Arg::I(per_item as i32),
                Arg::I(heads as i32),
                Arg::I(hd as i32),
                Arg::I(padded(width) as i32),
            ];
            let threads = hd.next_multiple_of(32).min(1024) as u32;
            d.launch(&d.k.attention_mla_combine, ((m.num_items * per_item) as u32, heads as u32, 1), threads, 0, &args);
        }
    }
    drop(c);
    CudaAct::with_bf16(out, outb, q.rows, width)
}

#[cfg(test)]
mod emulated;

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::SeqAttn;

    #[test]
    fn head_tiles_fit_shared_memory() {
        // DeepSeek V3 (128 heads of 576) takes whole tiles; the fixtures (4 heads of 48) one tile.
        assert_eq!((head_tile(128, 576), head_tile(4, 48), head_tile(1, 576)), (Some(16), Some(4), Some(1)));
        // Wider rows take fewer heads a CTA; a row wider than one head's tile is refused.
        assert_eq!((head_tile(128, 1024), head_tile(128, 1536)), (Some(4), Some(2)));
        assert_eq!(head_tile(16, 4096), None);
        for d in [48, 288, 576, 1024] {
            let ht = head_tile(128, d).expect("fits");
            assert!(
                attention_mla_smem(d, ht) <= MLA_SMEM && (ht == MLA_HEADS || attention_mla_smem(d, 2 * ht) > MLA_SMEM)
            );
        }
    }

    #[test]
    fn split_mode_only_for_few_rows_over_long_contexts() {
        let seq = |start_pos, q_len| SeqAttn { q_start: 0, q_len, start_pos, block_table: vec![] };
        let meta = |seqs| AttnMeta { state_slots: Vec::new(), seqs, slot_mapping: vec![], block_size: 16 };
        // One decode token at position 300 of a 128-head model: chunks 0 and 1, 8 CTAs.
        assert_eq!(split_chunks(&meta(vec![seq(300, 1)]), 1, 8, 132, 128, 576), 2);
        // One chunk: nothing to split; many CTAs or rows: each CTA folds its own.
        assert_eq!(split_chunks(&meta(vec![seq(100, 1)]), 1, 8, 132, 128, 576), 0);
        assert_eq!(split_chunks(&meta(vec![seq(5000, 1)]), 1, 264, 132, 128, 576), 0);
        assert_eq!(split_chunks(&meta(vec![seq(0, 600)]), 600, 8, 132, 128, 576), 0);
        // A workspace past 256 MiB stays unsplit: 64 rows x 128 heads x 32 chunks x 578 floats.
        assert_eq!(split_chunks(&meta(vec![seq(8000, 1)]), 64, 100, 132, 128, 576), 0);
        assert_eq!(split_chunks(&meta(vec![seq(8000, 1)]), 1, 8, 132, 128, 576), 32);
    }
}
