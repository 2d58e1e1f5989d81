//! Indexed block-sparse attention on the CPU (MiniMax M3): tf-backend's sparse.rs row by row,
//! the rows spread over the thread pool. Each row is picked and attended alone in sparse.rs's
//! order, so the values are the reference's bit for bit whatever the batch.

use crate::CpuBackend;
use rayon::prelude::*;
use tf_backend::sparse::{attend_row, pick_row, write_index_keys};
use tf_backend::{AttnMeta, AttnParams, BlockPicks, HostKv, HostTensor, IndexParams};

/// Each query row of the round as (its row in `meta`'s order, its position, its sequence).
fn rows(meta: &AttnMeta) -> Vec<(usize, usize, usize)> {
    (meta.seqs.iter().enumerate())
        .flat_map(|(si, s)| (0..s.q_len).map(move |i| (s.q_start + i, s.start_pos + i, si)))
        .collect()
}

/// [`tf_backend::Backend::index_blocks`] over a host pool.
pub(crate) fn index_blocks(
    cpu: &CpuBackend,
    q: &HostTensor,
    k: &HostTensor,
    kv: &mut HostKv,
    meta: &AttnMeta,
    p: &IndexParams,
) -> BlockPicks {
    write_index_keys(k, kv, meta, p);
    let pool = &*kv;
    let per_row: Vec<Vec<Vec<u32>>> = cpu.pool.install(|| {
        (rows(meta).par_iter())
            .map(|&(row, pos, si)| pick_row(q.row(row), pos, &meta.seqs[si].block_table, pool, meta.block_size, p))
            .collect()
    });
    BlockPicks { num_heads: p.num_heads, block_size: p.block_size, picks: per_row.into_iter().flatten().collect() }
}

/// [`tf_backend::Backend::attention_blocks`] over a host pool.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_blocks(
    cpu: &CpuBackend,
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    kv: &mut HostKv,
    meta: &AttnMeta,
    p: &AttnParams,
    picks: &BlockPicks,
) -> HostTensor {
    tf_backend::reference::write_kv(k, v, kv, meta);
    let n = p.num_heads * p.head_dim;
    let pool = &*kv;
    let outs: Vec<(usize, Vec<f32>)> = cpu.pool.install(|| {
        (rows(meta).par_iter())
            .map(|&(row, pos, si)| {
                let mut o = vec![0.0f32; n];
                attend_row(q.row(row), row, pos, &meta.seqs[si].block_table, pool, meta.block_size, p, picks, &mut o);
                (row, o)
            })
            .collect()
    });
    let mut out = HostTensor::zeros(q.rows, n);
    for (row, o) in outs {
        out.data[row * n..(row + 1) * n].copy_from_slice(&o);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::{KvShape, SeqAttn};

    fn values(rows: usize, cols: usize, seed: u32) -> HostTensor {
        let data = (0..rows * cols)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 250.0 - 2.0)
            .collect();
        HostTensor { data, rows, cols }
    }

    #[test]
    fn rows_over_the_pool_equal_the_reference_bit_for_bit() {
        // Two sequences in scattered pool blocks, the second a 5-token chunk after 6 cached.
        let shape = KvShape { num_blocks: 16, block_size: 4, num_kv_heads: 2, head_dim: 8, latent: false };
        let seqs = vec![
            SeqAttn { q_start: 0, q_len: 11, start_pos: 0, block_table: vec![11, 2, 7] },
            SeqAttn { q_start: 11, q_len: 5, start_pos: 6, block_table: vec![5, 14, 0] },
        ];
        let slot = |t: &[u32], j: usize| t[j / 4] as usize * 4 + j % 4;
        let slot_mapping = (0..11)
            .map(|j| slot(&seqs[0].block_table, j))
            .chain((6..11).map(|j| slot(&seqs[1].block_table, j)))
            .collect();
        let meta = AttnMeta { seqs, slot_mapping, block_size: 4, state_slots: vec![0, 1] };
        let mut want_kv = HostKv::new(shape).unwrap();
        let cached = values(64, 16, 9);
        want_kv.k.copy_from_slice(&cached.data[..1024]);
        want_kv.v.copy_from_slice(&cached.data);
        let mut got_kv = want_kv.clone();
        let ip = IndexParams { num_heads: 2, head_dim: 4, block_size: 3, topk: 2, local: 1, in_v: true, col: 8 };
        let (iq, ik) = (values(16, 8, 4), values(16, 4, 5));
        let p = AttnParams { num_heads: 4, num_kv_heads: 2, head_dim: 8, scale: 0.5, window: Some(9), softcap: None };
        let (q, k, v) = (values(16, 32, 6), values(16, 16, 7), values(16, 16, 8));
        tf_backend::sparse::write_index_keys(&ik, &mut want_kv, &meta, &ip);
        let want_picks = tf_backend::sparse::pick_blocks(&iq, &want_kv, &meta, &ip);
        let want = tf_backend::sparse::attention_blocks(&q, &k, &v, &mut want_kv, &meta, &p, &want_picks);
        let cpu = CpuBackend::new(2).unwrap();
        let picks = index_blocks(&cpu, &iq, &ik, &mut got_kv, &meta, &ip);
        assert_eq!(picks, want_picks);
        let got = attention_blocks(&cpu, &q, &k, &v, &mut got_kv, &meta, &p, &picks);
        assert!(got.data.iter().zip(&want.data).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!((got_kv.k, got_kv.v), (want_kv.k, want_kv.v));
    }
}
