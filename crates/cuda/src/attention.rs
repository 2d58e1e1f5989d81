//! Paged attention: round metadata packed and uploaded once per round, the KV write, and the
//! flash-attention kernel (kernels/attention.cu) over work items of whole query tokens.

use crate::CudaBackend;
use crate::device::{ATTENTION_WG_SMEM, Arg, attention_smem, attention_split_smem, ptr};
use crate::ops::bf16_out;
use crate::tensor::{CudaAct, CudaKv, padded};
use cudarc::driver::CudaSlice;
use tf_backend::{AttnMeta, AttnParams};

/// The round's metadata as uploaded: `[seqs | items | slot mapping | block tables]`. Only the
/// block tables grow as contexts do, so in rounds of the same rows every offset stays put (a
/// recorded round's launches stay valid, graph.rs).
#[derive(Clone, PartialEq, Debug)]
pub(crate) struct Packed {
    pub(crate) host: Vec<u32>,
    lay: Layout,
}

/// Where the parts of a packed metadata start, and how its CTAs run.
#[derive(Clone, Copy, PartialEq, Debug)]
struct Layout {
    items_off: usize,
    slots_off: usize,
    bt_off: usize,
    num_items: usize,
    warps: u32,
}

/// The packed metadata and its device copy.
pub(crate) struct MetaUpload {
    packed: Packed,
    dev: CudaSlice<u32>,
}

/// Warps per CTA and whole query tokens per CTA with `group` query heads per KV head, for rounds
/// whose longest query run is `longest` tokens: eight warps when runs are long (prefill: each
/// K/V block staged once serves 128 rows), else four (decode: they share the K/V gathers). Only
/// scheduling: results do not depend on it.
fn tiling(group: usize, longest: usize) -> (u32, usize) {
    let warps = if longest * group >= 128 { 8 } else { 4 };
    (warps, (16 * warps as usize / group).max(1))
}

/// Whether a round runs on the warp-split decode kernel (kernels/attention_split.cu): one new
/// token a sequence, at most 16 query heads a KV head (one warp's rows), head width 64 or 128,
/// every CTA within one 256-key chunk (split mode, or short contexts), and at most two CTAs an SM
/// (it holds a whole chunk in shared memory, one CTA an SM; bigger rounds keep three CTAs an SM
/// on the other kernel). Only scheduling: both give the same bits.
fn warp_split(decode: bool, group: usize, hd: usize, one_chunk: bool, ctas: usize, sms: usize) -> bool {
    decode && group <= 16 && (hd == 64 || hd == 128) && one_chunk && ctas <= 2 * sms
}

/// Keys per chunk of the fixed reduction order (kernels/attention.cu `CH`).
const CHUNK: usize = 256;

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

/// The round's metadata for `group` query heads a KV head.
pub(crate) fn pack(meta: &AttnMeta, group: usize) -> Packed {
    let longest = meta.seqs.iter().map(|s| s.q_len).max().unwrap_or(0);
    let (warps, per_item) = tiling(group, longest);
    let mut seqs = Vec::with_capacity(4 * meta.seqs.len());
    let mut items: Vec<[u32; 4]> = Vec::new();
    let mut bts = Vec::new();
    for (i, s) in meta.seqs.iter().enumerate() {
        let needed = (s.start_pos + s.q_len).div_ceil(meta.block_size);
        assert!(
            s.block_table.len() >= needed,
            "attention: sequence {i} has {} blocks, needs {needed}",
            s.block_table.len()
        );
        seqs.extend([s.q_start as u32, s.q_len as u32, s.start_pos as u32, bts.len() as u32]);
        bts.extend_from_slice(&s.block_table[..needed]);
        let mut t = 0;
        while t < s.q_len {
            let n = per_item.min(s.q_len - t);
            items.push([i as u32, t as u32, n as u32, (s.start_pos + t + n) as u32]);
            t += n;
        }
    }
    // Longest first (by the keys an item's last token sees): CTAs start in grid order, so the
    // short ones fill the tail. Only scheduling: results do not depend on it.
    items.sort_by_key(|it| std::cmp::Reverse(it[3]));
    let items: Vec<u32> = items.iter().flat_map(|it| [it[0], it[1], it[2]]).collect();
    let items_off = seqs.len();
    let slots_off = items_off + items.len();
    let bt_off = slots_off + meta.slot_mapping.len();
    let num_items = items.len() / 3;
    let mut host = seqs;
    host.extend(items);
    host.extend(meta.slot_mapping.iter().map(|&s| s as u32));
    host.extend(bts);
    Packed { host, lay: Layout { items_off, slots_off, bt_off, num_items, warps } }
}

/// Keys-per-chunk index of the furthest position any sequence of the round reaches (a recorded
/// decode round's attention grid stays valid while it is unchanged).
pub(crate) fn last_chunk(meta: &AttnMeta) -> usize {
    meta.seqs.iter().map(|s| (s.start_pos + s.q_len.max(1) - 1) / CHUNK).max().unwrap_or(0)
}

pub(crate) fn attention(
    b: &CudaBackend,
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
        other => panic!("attention: head_dim {other} is not supported on CUDA (16, 32, 64, 128, 256)"),
    };
    let width = p.num_heads * hd;
    let out = d.alloc::<f32>(q.rows * width);
    let outb = bf16_out(b, q.rows, width);

    let mut c = b.caches();
    let packed = pack(meta, group);
    // A round being recorded reads the metadata from its inputs (graph.rs), else from the cache.
    let (base, m) = match b.graphs.meta(&packed) {
        Some(base) => (base, packed.lay),
        None => {
            if c.attn.as_ref().is_none_or(|m| m.packed != packed) {
                let dev = d.upload(&packed.host);
                c.attn = Some(MetaUpload { packed, dev });
            }
            let m = c.attn.as_ref().expect("just filled");
            (ptr(&m.dev, &d.stream), m.packed.lay)
        }
    };
    let at = |off: usize| base + 4 * off as u64;
    let (kp, vp) = (ptr(&kv.k, &d.stream), ptr(&kv.v, &d.stream));
    // Decode rounds (one new token per sequence) store their K/V inside the attention kernel.
    let decode = meta.seqs.iter().all(|s| s.q_len <= 1);
    if k.rows > 0 && !decode {
        let args = [
            Arg::P(ptr(k.data(b), &d.stream)),
            Arg::P(ptr(v.data(b), &d.stream)),
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
            Arg::P(ptr(q.data(b), &d.stream)),
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
            Arg::P(if decode { ptr(k.data(b), &d.stream) } else { 0 }),
            Arg::P(if decode { ptr(v.data(b), &d.stream) } else { 0 }),
            Arg::P(at(m.slots_off)),
        ];
        let grid = (m.num_items as u32, kvh as u32, nz.max(1) as u32);
        let ctas = m.num_items * kvh * nz.max(1);
        let one_chunk = nz > 0 || most_chunks(meta, window) <= 1;
        let wg = (!decode && m.warps == 8 && nz == 0 && hd == 128 && !b.lab.attn_mma).then_some(kv.maps).flatten();
        if let Some((kmap, vmap)) = wg {
            let args = [
                Arg::P(ptr(q.data(b), &d.stream)),
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
    fn items_cover_every_token_once_in_whole_tokens() {
        let meta = AttnMeta {
            seqs: vec![
                SeqAttn { q_start: 0, q_len: 1, start_pos: 40, block_table: vec![3, 4, 5] },
                SeqAttn { q_start: 1, q_len: 37, start_pos: 0, block_table: vec![0, 1, 2] },
            ],
            slot_mapping: (0..38).collect(),
            block_size: 16,
        };
        let p = pack(&meta, 4);
        let (host, l) = (&p.host, p.lay);
        let (items_off, n) = (l.items_off, l.num_items);
        assert_eq!(l.warps, 8);
        assert_eq!((l.slots_off, l.bt_off), (items_off + 3 * n, items_off + 3 * n + 38));
        assert_eq!(host[l.bt_off..], [3, 4, 5, 0, 1, 2]);
        let items: Vec<&[u32]> = host[items_off..l.slots_off].chunks(3).collect();
        assert_eq!(items.len(), n);
        let covered: usize = items.iter().filter(|i| i[0] == 1).map(|i| i[2] as usize).sum();
        assert_eq!(covered, 37);
        assert!(items.iter().all(|i| i[2] as usize * 4 <= 128));
        assert_eq!(tiling(4, 1), (4, 16));
        assert_eq!(tiling(4, 37), (8, 32));
        // Longest first, by the keys an item's last token sees: sequence 0's token (41 keys), then
        // sequence 1's tokens 32-36 (37), then its tokens 0-31 (32).
        let extent = |i: &[u32]| meta.seqs[i[0] as usize].start_pos + (i[1] + i[2]) as usize;
        assert!(items.windows(2).all(|w| extent(w[0]) >= extent(w[1])), "{items:?}");
        assert_eq!((items[0][0], items.last().map(|i| (i[0], i[1]))), (0, Some((1, 0))));
    }

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
        let meta = |seqs| AttnMeta { seqs, slot_mapping: vec![], block_size: 16 };
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
