//! Indexed block-sparse attention (MiniMax M3's lightning indexer), on the host: each sparse
//! layer's indexer keys (one head of `head_dim` per token) live in a KV pool beside the K/V
//! pools, written per token into the token's slot as K/V are; each query row scores every key
//! it can see per indexer head (`q_h · k`, no scale), takes each key block's maximum
//! (`block_size` keys by absolute position), and keeps `topk` blocks: its `local` most recent
//! blocks always, the rest by score. Ties go to the lower block number (the fixed rule: a row's
//! choice depends only on its own query and the cached keys, never on the batch, the chunking or
//! a prefix hit). Attention then sees, per query head, only the keys of its indexer head's
//! blocks, causally. Every sum runs left to right in key order, so a row's values do not depend
//! on what else is in the round.

use crate::attn::{AttnMeta, AttnParams};
use crate::host::{HostKv, HostTensor};
use crate::reference::{window_start, write_kv};

/// Where one layer's indexer keys sit in an indexer-key pool and how its blocks are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexParams {
    /// Indexer heads (`index_n_heads`); query head `h` takes the blocks of indexer head
    /// `h / (num_heads / index heads)`.
    pub num_heads: usize,
    /// Width of an indexer head and of the one key head (`index_head_dim`).
    pub head_dim: usize,
    /// Keys per scored block, by absolute position (`index_block_size`).
    pub block_size: usize,
    /// Blocks kept per row and indexer head, the local ones included (`index_topk_blocks`).
    pub topk: usize,
    /// The most recent blocks always kept (`index_local_blocks`, at most `topk`).
    pub local: usize,
    /// The keys sit in the V half of each slot (else the K half).
    pub in_v: bool,
    /// First column of the keys within that half.
    pub col: usize,
}

/// Each row's chosen key blocks per indexer head: absolute block numbers, ascending.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockPicks {
    /// Indexer heads.
    pub num_heads: usize,
    /// Keys per block.
    pub block_size: usize,
    /// `picks[row * num_heads + h]`.
    pub picks: Vec<Vec<u32>>,
}

impl BlockPicks {
    /// The picks of indexer heads `heads` alone (a tensor-parallel rank's, whose query heads
    /// read those).
    pub fn heads(&self, heads: std::ops::Range<usize>) -> BlockPicks {
        let n = self.num_heads.max(1);
        let picks = self.picks.chunks(n).flat_map(|row| row[heads.clone()].iter().cloned()).collect();
        BlockPicks { num_heads: heads.len(), block_size: self.block_size, picks }
    }

    /// Every block up to each row's own, for every head: dense causal attention.
    pub fn every_block(meta: &AttnMeta, num_heads: usize, block_size: usize) -> BlockPicks {
        let bs = block_size.max(1);
        let picks = meta
            .positions()
            .iter()
            .flat_map(|&p| std::iter::repeat_n((0..=p / bs as u32).collect::<Vec<u32>>(), num_heads))
            .collect();
        BlockPicks { num_heads, block_size: bs, picks }
    }
}

/// The blocks a row in block `own` keeps from `scores` (one maximum per block `0..=own`): the
/// `local` most recent (clamped at block 0), then the best others by score, ties to the lower
/// block, `topk` in all; ascending.
pub fn choose(scores: &[f32], own: usize, topk: usize, local: usize) -> Vec<u32> {
    let forced: Vec<usize> = (0..local.min(own + 1)).map(|i| own - i).collect();
    let mut rest: Vec<usize> = (0..=own).filter(|b| !forced.contains(b)).collect();
    rest.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut out: Vec<u32> =
        forced.iter().chain(rest.iter().take(topk.saturating_sub(forced.len()))).map(|&b| b as u32).collect();
    out.truncate(topk);
    out.sort_unstable();
    out
}

/// The pool slot of absolute position `j` of a sequence.
fn slot(block_table: &[u32], pool_block: usize, j: usize) -> usize {
    block_table[j / pool_block] as usize * pool_block + j % pool_block
}

/// The indexer-key half and row width of `kv` that `p` names.
fn keys<'a>(kv: &'a HostKv, p: &IndexParams) -> (&'a [f32], usize) {
    (if p.in_v { &kv.v } else { &kv.k }, kv.slot_width())
}

/// Writes each row of `k` `[rows, head_dim]` into its slot of `kv` where `p` says.
pub fn write_index_keys(k: &HostTensor, kv: &mut HostKv, meta: &AttnMeta, p: &IndexParams) {
    let w = kv.slot_width();
    assert!(p.col + p.head_dim <= w && k.cols == p.head_dim, "indexer keys: {} columns at {} of {w}", k.cols, p.col);
    let half = if p.in_v { &mut kv.v } else { &mut kv.k };
    for (row, &s) in meta.slot_mapping.iter().enumerate() {
        half[s * w + p.col..][..p.head_dim].copy_from_slice(k.row(row));
    }
}

/// Each row's chosen blocks from its indexer queries `q` `[rows, heads * head_dim]` against the
/// keys in `kv` (this round's written first).
pub fn pick_blocks(q: &HostTensor, kv: &HostKv, meta: &AttnMeta, p: &IndexParams) -> BlockPicks {
    let mut picks = Vec::with_capacity(q.rows * p.num_heads);
    for s in &meta.seqs {
        for i in 0..s.q_len {
            picks.extend(pick_row(q.row(s.q_start + i), s.start_pos + i, &s.block_table, kv, meta.block_size, p));
        }
    }
    BlockPicks { num_heads: p.num_heads, block_size: p.block_size, picks }
}

/// One query row's chosen blocks per indexer head ([`pick_blocks`]'s row `row` at position
/// `pos` of the sequence whose pool blocks are `block_table`, `pool_block` tokens each).
pub fn pick_row(
    row: &[f32],
    pos: usize,
    block_table: &[u32],
    kv: &HostKv,
    pool_block: usize,
    p: &IndexParams,
) -> Vec<Vec<u32>> {
    let (half, w) = keys(kv, p);
    let (d, bs) = (p.head_dim, p.block_size);
    let own = pos / bs;
    (0..p.num_heads)
        .map(|h| {
            let qh = &row[h * d..][..d];
            let scores: Vec<f32> = (0..=own)
                .map(|b| {
                    (b * bs..((b + 1) * bs).min(pos + 1))
                        .map(|j| {
                            let key = &half[slot(block_table, pool_block, j) * w + p.col..][..d];
                            qh.iter().zip(key).map(|(a, b)| a * b).sum::<f32>()
                        })
                        .fold(f32::NEG_INFINITY, f32::max)
                })
                .collect();
            choose(&scores, own, p.topk, p.local)
        })
        .collect()
}

/// Writes K/V as [`crate::Backend::attention`] does, then attends each query head over the keys
/// of its indexer head's picked blocks up to its own position: scores, their maximum, `exp`,
/// their sum, then the weighted values, each in key order.
pub fn attention_blocks(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    kv: &mut HostKv,
    meta: &AttnMeta,
    p: &AttnParams,
    picks: &BlockPicks,
) -> HostTensor {
    write_kv(k, v, kv, meta);
    let n = p.num_heads * p.head_dim;
    let mut out = HostTensor::zeros(q.rows, n);
    for s in &meta.seqs {
        for i in 0..s.q_len {
            let row = s.q_start + i;
            let o = &mut out.data[row * n..(row + 1) * n];
            attend_row(q.row(row), row, s.start_pos + i, &s.block_table, kv, meta.block_size, p, picks, o);
        }
    }
    out
}

/// One query row's output `o` (`[heads * head_dim]`, zeroed) in [`attention_blocks`] (its K/V
/// already written): row `row` of `picks`, at position `pos` of the sequence whose pool blocks
/// are `block_table`.
#[allow(clippy::too_many_arguments)]
pub fn attend_row(
    q: &[f32],
    row: usize,
    pos: usize,
    block_table: &[u32],
    kv: &HostKv,
    pool_block: usize,
    p: &AttnParams,
    picks: &BlockPicks,
    o: &mut [f32],
) {
    let (d, w, group) = (p.head_dim, kv.slot_width(), p.num_heads / p.num_kv_heads);
    let per_pick = p.num_heads / picks.num_heads.max(1);
    let bs = picks.block_size;
    let first = window_start(pos, p.window);
    for h in 0..p.num_heads {
        let blocks = &picks.picks[row * picks.num_heads + h / per_pick.max(1)];
        let slots: Vec<usize> = (blocks.iter())
            .flat_map(|&b| (b as usize * bs).max(first)..((b as usize + 1) * bs).min(pos + 1))
            .map(|j| slot(block_table, pool_block, j))
            .collect();
        let qh = &q[h * d..(h + 1) * d];
        let kvh = (h / group) * d;
        let scores: Vec<f32> = (slots.iter())
            .map(|&sl| {
                let x = qh.iter().zip(&kv.k[sl * w + kvh..][..d]).map(|(a, b)| a * b).sum::<f32>() * p.scale;
                p.softcap.map_or(x, |c| c * (x / c).tanh())
            })
            .collect();
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f32 = exps.iter().sum();
        let oh = &mut o[h * d..(h + 1) * d];
        for (&e, &sl) in exps.iter().zip(&slots) {
            for (oi, vi) in oh.iter_mut().zip(&kv.values()[sl * w + kvh..][..d]) {
                *oi += e / sum * vi;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn::KvShape;
    use crate::{Backend, RefBackend};

    #[test]
    fn choose_keeps_the_local_blocks_then_the_best_ties_to_the_lower_block() {
        let scores = [0.5, 2.0, 0.5, 9.0, -1.0, 0.0];
        assert_eq!(choose(&scores, 5, 3, 1), vec![1, 3, 5]);
        assert_eq!(choose(&scores, 5, 3, 2), vec![3, 4, 5], "the two most recent, then the best");
        let tied = [1.0, 1.0, 1.0, 1.0];
        assert_eq!(choose(&tied, 3, 3, 1), vec![0, 1, 3], "ties to the lower block");
        assert_eq!(choose(&tied, 1, 3, 2), vec![0, 1], "fewer blocks than topk: all of them");
        assert_eq!(choose(&[3.0], 0, 2, 0), vec![0]);
    }

    /// A pool, metadata for one sequence of `len` tokens in pool blocks of 4, and random rows.
    fn setup(len: usize) -> (HostKv, AttnMeta) {
        let shape = KvShape { num_blocks: 16, block_size: 4, num_kv_heads: 2, head_dim: 8, latent: false };
        let table: Vec<u32> = (0..16).rev().collect();
        (HostKv::new(shape).expect("pool"), AttnMeta::single(0, len, table, 4))
    }

    fn rows(rows: usize, cols: usize, seed: u32) -> HostTensor {
        let data = (0..rows * cols)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 250.0 - 2.0)
            .collect();
        HostTensor { data, rows, cols }
    }

    #[test]
    fn every_block_picked_is_the_reference_dense_attention() {
        let (mut kv, meta) = setup(13);
        let mut dense = HostKv::new(kv.shape).expect("pool");
        let p = AttnParams { num_heads: 4, num_kv_heads: 2, head_dim: 8, scale: 0.3, window: None, softcap: None };
        let (q, k, v) = (rows(13, 32, 1), rows(13, 16, 2), rows(13, 16, 3));
        let picks = BlockPicks::every_block(&meta, 2, 3);
        let sparse = attention_blocks(&q, &k, &v, &mut kv, &meta, &p, &picks);
        let reference = RefBackend.attention(&q, &k, &v, &mut dense, &meta, &p);
        let err = sparse.data.iter().zip(&reference.data).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(err < 1e-6, "{err}");
    }

    #[test]
    fn a_dropped_block_is_not_attended_and_picks_do_not_depend_on_chunking() {
        let (mut index, meta) = setup(12);
        let ip = IndexParams { num_heads: 2, head_dim: 4, block_size: 3, topk: 2, local: 1, in_v: true, col: 8 };
        let (iq, ik) = (rows(12, 8, 4), rows(12, 4, 5));
        write_index_keys(&ik, &mut index, &meta, &ip);
        let whole = pick_blocks(&iq, &index, &meta, &ip);
        for (r, b) in whole.picks.iter().enumerate() {
            let own = (r / 2) as u32 / 3;
            assert!(b.len() == (own as usize + 1).min(2) && b.last() == Some(&own), "row {}: {b:?}", r / 2);
        }
        // The last 5 rows as a second chunk over the same pool.
        let mut tail = meta.clone();
        tail.seqs[0] = crate::SeqAttn { q_start: 0, q_len: 5, start_pos: 7, ..meta.seqs[0].clone() };
        tail.slot_mapping = meta.slot_mapping[7..].to_vec();
        let q_tail = HostTensor { data: iq.data[7 * 8..].to_vec(), rows: 5, cols: 8 };
        assert_eq!(pick_blocks(&q_tail, &index, &tail, &ip).picks, whole.picks[7 * 2..].to_vec());
        // Row 11 (block 3) keeps blocks 1 and 3: the values of block 0 change nothing there.
        let (mut kv, _) = setup(12);
        let p = AttnParams { num_heads: 4, num_kv_heads: 2, head_dim: 8, scale: 0.5, window: None, softcap: None };
        let (q, k, mut v) = (rows(12, 32, 6), rows(12, 16, 7), rows(12, 16, 8));
        let mut picks = BlockPicks::every_block(&meta, 2, 3);
        picks.picks[22] = vec![1, 3];
        picks.picks[23] = vec![1, 3];
        let a = attention_blocks(&q, &k, &v, &mut kv, &meta, &p, &picks);
        v.data[16..32].iter_mut().for_each(|x| *x += 5.0); // row 1: block 0
        let b = attention_blocks(&q, &k, &v, &mut kv, &meta, &p, &picks);
        assert_eq!(a.row(11), b.row(11), "block 0 dropped");
        assert_ne!(a.row(10), b.row(10), "block 0 kept");
    }

    #[test]
    fn the_trait_defaults_over_a_copy_of_the_round_blocks_equal_the_pool_in_place() {
        // Two sequences in scattered pool blocks, the second a 3-token chunk after 6 cached.
        let shape = KvShape { num_blocks: 16, block_size: 4, num_kv_heads: 2, head_dim: 8, latent: false };
        let seqs = vec![
            crate::SeqAttn { q_start: 0, q_len: 9, start_pos: 0, block_table: vec![11, 2, 7] },
            crate::SeqAttn { q_start: 9, q_len: 3, start_pos: 6, block_table: vec![5, 14, 0] },
        ];
        let slot = |t: &[u32], j: usize| t[j / 4] as usize * 4 + j % 4;
        let slot_mapping = (0..9)
            .map(|j| slot(&seqs[0].block_table, j))
            .chain((6..9).map(|j| slot(&seqs[1].block_table, j)))
            .collect();
        let meta = AttnMeta { seqs, slot_mapping, block_size: 4, state_slots: vec![0, 1] };
        let (mut direct, mut defaults) = (HostKv::new(shape).expect("pool"), HostKv::new(shape).expect("pool"));
        let cached = rows(64, 16, 9);
        direct.k.copy_from_slice(&cached.data[..1024]);
        direct.v.copy_from_slice(&cached.data);
        defaults.k.copy_from_slice(&cached.data[..1024]);
        defaults.v.copy_from_slice(&cached.data);
        let ip = IndexParams { num_heads: 2, head_dim: 4, block_size: 3, topk: 2, local: 1, in_v: true, col: 8 };
        let (iq, ik) = (rows(12, 8, 4), rows(12, 4, 5));
        write_index_keys(&ik, &mut direct, &meta, &ip);
        let want = pick_blocks(&iq, &direct, &meta, &ip);
        assert_eq!(RefBackend.index_blocks(&iq, &ik, &mut defaults, &meta, &ip), want);
        let p = AttnParams { num_heads: 4, num_kv_heads: 2, head_dim: 8, scale: 0.5, window: Some(7), softcap: None };
        let (q, k, v) = (rows(12, 32, 6), rows(12, 16, 7), rows(12, 16, 8));
        let out = attention_blocks(&q, &k, &v, &mut direct, &meta, &p, &want);
        assert_eq!(RefBackend.attention_blocks(&q, &k, &v, &mut defaults, &meta, &p, &want), out);
        assert_eq!((defaults.k, defaults.v), (direct.k, direct.v), "the same pool after the round");
    }
}
