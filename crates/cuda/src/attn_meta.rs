//! The attention metadata of a round as the kernels read it (host side): sequences, work items
//! of whole query tokens, the slot mapping and block tables packed into one upload whose offsets
//! depend on the round's rows only (so a recorded round's launches stay valid, graph.rs).

use cudarc::driver::CudaSlice;
use tf_backend::AttnMeta;

/// The round's metadata as uploaded: `[seqs | items | slot mapping | block tables]`. Only the
/// block tables grow as contexts do, so in rounds of the same rows every offset stays put (a
/// recorded round's launches stay valid, graph.rs).
#[derive(Clone, PartialEq, Debug)]
pub(crate) struct Packed {
    pub(crate) host: Vec<u32>,
    pub(crate) lay: Layout,
}

/// Where the parts of a packed metadata start, and how its CTAs run.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) struct Layout {
    pub(crate) items_off: usize,
    pub(crate) slots_off: usize,
    pub(crate) bt_off: usize,
    pub(crate) num_items: usize,
    pub(crate) warps: u32,
}

/// The packed metadata and its device copy.
pub(crate) struct MetaUpload {
    pub(crate) packed: Packed,
    pub(crate) dev: CudaSlice<u32>,
}

/// Warps per CTA and whole query tokens per CTA with `group` query heads per KV head, for rounds
/// whose longest query run is `longest` tokens: eight warps when runs are long (prefill: each
/// K/V block staged once serves 128 rows), else four (decode: they share the K/V gathers). Only
/// scheduling: results do not depend on it.
fn tiling(group: usize, longest: usize) -> (u32, usize) {
    let warps = if longest * group >= 128 { 8 } else { 4 };
    (warps, (16 * warps as usize / group).max(1))
}

/// Keys per chunk of the fixed reduction order (kernels/attention.cu `CH`).
pub(crate) const CHUNK: usize = 256;

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

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::SeqAttn;

    #[test]
    fn items_cover_every_token_once_in_whole_tokens() {
        let meta = AttnMeta {
            state_slots: Vec::new(),
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
}
