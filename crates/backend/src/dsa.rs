//! DeepSeek sparse attention (DeepSeek V3.2, GLM-5): over a latent pool whose slots are `[latent
//! row | index key]`, the lightning indexer scores every causal key of a query, `sum_h (w_h /
//! sqrt(H)) * relu(q_h . k / sqrt(D))` over its `H` heads of width `D`, the `topk` best keys are
//! kept (ties to the lower position), and the latent attention runs over those keys alone. A
//! row's result reads only its own query values and the cached slots of its sequence, each sum
//! in one fixed order, so it does not depend on the batch, the chunking or a prefix-cache hit.

use crate::attn::{AttnMeta, AttnParams, SeqAttn};

/// The lightning indexer's shape and how many keys it keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsaParams {
    /// Indexer heads `H` (`index_n_heads`).
    pub heads: usize,
    /// Width `D` of an indexer head and of the cached index key (`index_head_dim`).
    pub head_dim: usize,
    /// Keys kept per query (`index_topk`, at least 1).
    pub topk: usize,
}

/// One round's query values on the host, row-major.
#[derive(Clone, Copy, Debug)]
pub struct SparseQueries<'a> {
    /// Latent queries `[rows, heads * latent]` (`AttnParams::head_dim` is the latent width).
    pub q: &'a [f32],
    /// Indexer queries `[rows, H * D]`, roped.
    pub index_q: &'a [f32],
    /// Indexer head weights `[rows, H]`.
    pub index_w: &'a [f32],
}

/// The index score of `key` for one query: `sum_h (w_h / sqrt(H)) * relu((q_h . key) / sqrt(D))`,
/// heads in order, each dot left to right.
pub fn index_score(index_q: &[f32], index_w: &[f32], key: &[f32], ix: &DsaParams) -> f32 {
    let (wscale, qscale) = ((ix.heads as f32).powf(-0.5), (ix.head_dim as f32).powf(-0.5));
    let mut total = 0.0f32;
    for (h, &w) in index_w.iter().enumerate().take(ix.heads) {
        let qh = &index_q[h * ix.head_dim..(h + 1) * ix.head_dim];
        let dot = qh.iter().zip(key).fold(0.0f32, |acc, (a, b)| acc + a * b);
        total += (w * wscale) * (dot * qscale).max(0.0);
    }
    total
}

/// The indices of the `k` largest `scores` (by `f32::total_cmp`; equal scores to the lower
/// index), in ascending order; every index where there are at most `k`.
pub fn top_positions(scores: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    if k == 0 {
        return Vec::new();
    }
    if k < scores.len() {
        order.select_nth_unstable_by(k - 1, |&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        order.truncate(k);
        order.sort_unstable();
    }
    order
}

/// One query row's sparse attention: the row at `pos` of sequence `s`, over `pool` (slot-major,
/// `width` values a slot: the latent row's `p.head_dim` values, then the index key), into `out`
/// (`[heads * latent]`, zeroed by the caller).
#[allow(clippy::too_many_arguments)]
pub fn sparse_row(
    x: &SparseQueries<'_>,
    row: usize,
    pos: usize,
    s: &SeqAttn,
    pool: &[f32],
    width: usize,
    block_size: usize,
    p: &AttnParams,
    ix: &DsaParams,
    out: &mut [f32],
) {
    let d = p.head_dim;
    let slot = |j: usize| s.block_table[j / block_size] as usize * block_size + j % block_size;
    let iq = &x.index_q[row * ix.heads * ix.head_dim..][..ix.heads * ix.head_dim];
    let iw = &x.index_w[row * ix.heads..][..ix.heads];
    let scores: Vec<f32> =
        (0..=pos).map(|j| index_score(iq, iw, &pool[slot(j) * width + d..][..ix.head_dim], ix)).collect();
    let kept: Vec<usize> = top_positions(&scores, ix.topk).into_iter().map(slot).collect();
    let q = &x.q[row * p.num_heads * d..][..p.num_heads * d];
    for h in 0..p.num_heads {
        let qh = &q[h * d..(h + 1) * d];
        let logits: Vec<f32> = kept
            .iter()
            .map(|&sl| qh.iter().zip(&pool[sl * width..][..d]).fold(0.0f32, |acc, (a, b)| acc + a * b) * p.scale)
            .collect();
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
        let sum: f32 = exps.iter().sum();
        let o = &mut out[h * d..(h + 1) * d];
        for (&e, &sl) in exps.iter().zip(&kept) {
            for (oi, vi) in o.iter_mut().zip(&pool[sl * width..][..d]) {
                *oi += e / sum * vi;
            }
        }
    }
}

/// Writes each row of `rows` (`[rows, width]`) into its slot of `pool` (`meta.slot_mapping`).
pub fn write_rows(rows: &[f32], pool: &mut [f32], width: usize, meta: &AttnMeta) {
    for (r, &slot) in meta.slot_mapping.iter().enumerate() {
        pool[slot * width..(slot + 1) * width].copy_from_slice(&rows[r * width..(r + 1) * width]);
    }
}

/// Every row's sparse attention, one after another: `[rows, heads * latent]`.
pub fn sparse_attention(
    x: &SparseQueries<'_>,
    pool: &[f32],
    width: usize,
    meta: &AttnMeta,
    p: &AttnParams,
    ix: &DsaParams,
) -> Vec<f32> {
    let n = p.num_heads * p.head_dim;
    let mut out = vec![0.0f32; meta.slot_mapping.len() * n];
    for s in &meta.seqs {
        for i in 0..s.q_len {
            let row = s.q_start + i;
            sparse_row(
                x,
                row,
                s.start_pos + i,
                s,
                pool,
                width,
                meta.block_size,
                p,
                ix,
                &mut out[row * n..(row + 1) * n],
            );
        }
    }
    out
}

/// The pool's blocks a round reads (each sequence's blocks up to its last row), sorted, and the
/// round's metadata over those blocks renumbered `0..` in that order.
pub fn compact_blocks(meta: &AttnMeta) -> (Vec<u32>, AttnMeta) {
    let bs = meta.block_size.max(1);
    let mut blocks: Vec<u32> = meta
        .seqs
        .iter()
        .flat_map(|s| s.block_table.iter().take((s.start_pos + s.q_len).div_ceil(bs)).copied())
        .collect();
    blocks.sort_unstable();
    blocks.dedup();
    let at = |b: u32| blocks.binary_search(&b).unwrap_or_default() as u32;
    let seqs = (meta.seqs.iter())
        .map(|s| {
            let used = (s.start_pos + s.q_len).div_ceil(bs);
            SeqAttn { block_table: s.block_table.iter().take(used).map(|&b| at(b)).collect(), ..s.clone() }
        })
        .collect();
    let slot_mapping = meta.slot_mapping.iter().map(|&sl| at((sl / bs) as u32) as usize * bs + sl % bs).collect();
    let local = AttnMeta { seqs, slot_mapping, block_size: meta.block_size, state_slots: meta.state_slots.clone() };
    (blocks, local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_go_to_the_lower_position_and_the_kept_come_back_in_order() {
        assert_eq!(top_positions(&[1.0, 3.0, 2.0, 3.0, 0.5], 2), vec![1, 3]);
        assert_eq!(top_positions(&[0.0, 0.0, 0.0, 1.0], 2), vec![0, 3]);
        assert_eq!(top_positions(&[0.0, 0.0, 0.0, 0.0], 3), vec![0, 1, 2]);
        assert_eq!(top_positions(&[5.0, -1.0], 8), vec![0, 1], "every key where there are at most k");
        assert_eq!(top_positions(&[-0.0, 0.0], 1), vec![1], "total order: +0 above -0");
    }

    #[test]
    fn the_score_weights_relu_of_each_head() {
        let ix = DsaParams { heads: 2, head_dim: 2, topk: 1 };
        // head 0: q.k = 2 -> relu 2 / sqrt(2); head 1: q.k = -4 -> 0.
        let s = index_score(&[1.0, 1.0, -2.0, -2.0], &[3.0, 5.0], &[1.0, 1.0], &ix);
        let want = 3.0 / 2f32.sqrt() * (2.0 / 2f32.sqrt());
        assert!((s - want).abs() < 1e-6, "{s} vs {want}");
    }

    #[test]
    fn keeping_every_key_is_dense_attention_and_fewer_keys_change_it() {
        // One sequence of 3 tokens, one head of latent width 2, index keys of width 1.
        let meta = AttnMeta::single(0, 3, vec![0], 4);
        let p = AttnParams { num_heads: 1, num_kv_heads: 1, head_dim: 2, scale: 1.0, window: None, softcap: None };
        let rows = [1.0, 0.0, 0.5, 0.0, 1.0, -0.5, 1.0, 1.0, 2.0];
        let mut pool = vec![0.0; 4 * 3];
        write_rows(&rows, &mut pool, 3, &meta);
        let x = SparseQueries { q: &[1.0, 2.0, 0.5, 0.5, 2.0, 1.0], index_q: &[1.0; 3], index_w: &[1.0; 3] };
        let all = sparse_attention(&x, &pool, 3, &meta, &p, &DsaParams { heads: 1, head_dim: 1, topk: 3 });
        // Dense softmax attention of the last row over the three latent rows.
        let l: Vec<f32> = [[1.0f32, 0.0], [0.0, 1.0], [1.0, 1.0]].iter().map(|k| 2.0 * k[0] + k[1]).collect();
        let e: Vec<f32> = l.iter().map(|v| (v - 3.0).exp()).collect();
        let sum: f32 = e.iter().sum();
        let want = [(e[0] + e[2]) / sum, (e[1] + e[2]) / sum];
        assert!((all[4] - want[0]).abs() < 1e-6 && (all[5] - want[1]).abs() < 1e-6, "{all:?}");
        // topk 1: the last row keeps only key 2 (index key 2.0, the best), so its output is that row.
        let one = sparse_attention(&x, &pool, 3, &meta, &p, &DsaParams { heads: 1, head_dim: 1, topk: 1 });
        assert_eq!(&one[4..6], &[1.0, 1.0]);
        // The first row has one key whatever topk says.
        assert_eq!(&one[0..2], &all[0..2]);
    }

    #[test]
    fn compacting_renumbers_the_blocks_a_round_reads() {
        let mut meta = AttnMeta::single(3, 2, vec![7, 2, 9], 2);
        meta.seqs[0].block_table.push(4);
        let (blocks, local) = compact_blocks(&meta);
        assert_eq!(blocks, vec![2, 7, 9], "positions 0..5 use three blocks");
        assert_eq!(local.seqs[0].block_table, vec![1, 0, 2]);
        assert_eq!(local.slot_mapping, vec![1, 4], "position 3 in block 2 -> 0, position 4 in block 9 -> 2");
    }
}
