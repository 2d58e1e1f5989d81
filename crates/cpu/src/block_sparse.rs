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
    use tf_backend::on_host::{encode_kv, rounded_tensor};
    use tf_backend::{Backend, KvShape, SeqAttn};
    use tf_core::DType;

    fn values(rows: usize, cols: usize, seed: u32) -> HostTensor {
        let data = (0..rows * cols)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 250.0 - 2.0)
            .collect();
        HostTensor { data, rows, cols }
    }

    /// Two sequences in scattered pool blocks, the second a 5-token chunk after 6 cached: the
    /// pool's shape and cached values, the round's metadata and its inputs.
    struct Case {
        shape: KvShape,
        cached: HostTensor,
        meta: AttnMeta,
        ip: IndexParams,
        p: AttnParams,
        /// Index queries, index keys, q, k, v.
        rows: [HostTensor; 5],
    }

    fn case() -> Case {
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
        let ip = IndexParams { num_heads: 2, head_dim: 4, block_size: 3, topk: 2, local: 1, in_v: true, col: 8 };
        let p = AttnParams { num_heads: 4, num_kv_heads: 2, head_dim: 8, scale: 0.5, window: Some(9), softcap: None };
        let rows = [values(16, 8, 4), values(16, 4, 5), values(16, 32, 6), values(16, 16, 7), values(16, 16, 8)];
        Case { shape, cached: values(64, 16, 9), meta, ip, p, rows }
    }

    /// The reference's picks, output and pool over `c` with the pool's values and the round's
    /// keys and values rounded as a pool of `dtype` stores them.
    fn reference(c: &Case, dtype: DType) -> (BlockPicks, HostTensor, HostKv) {
        let round = |t: &HostTensor| rounded_tensor(t.clone(), dtype);
        let cached = round(&c.cached);
        let mut kv = HostKv::new(c.shape).unwrap();
        kv.k.copy_from_slice(&cached.data[..1024]);
        kv.v.copy_from_slice(&cached.data);
        let [iq, ik, q, k, v] = &c.rows;
        tf_backend::sparse::write_index_keys(&round(ik), &mut kv, &c.meta, &c.ip);
        let picks = tf_backend::sparse::pick_blocks(iq, &kv, &c.meta, &c.ip);
        let out = tf_backend::sparse::attention_blocks(q, &round(k), &round(v), &mut kv, &c.meta, &c.p, &picks);
        (picks, out, kv)
    }

    #[test]
    fn rows_over_the_pool_equal_the_reference_bit_for_bit() {
        let c = case();
        let (want_picks, want, want_kv) = reference(&c, DType::F32);
        let mut got_kv = HostKv::new(c.shape).unwrap();
        got_kv.k.copy_from_slice(&c.cached.data[..1024]);
        got_kv.v.copy_from_slice(&c.cached.data);
        let [iq, ik, q, k, v] = &c.rows;
        let cpu = CpuBackend::new(2).unwrap();
        let picks = index_blocks(&cpu, iq, ik, &mut got_kv, &c.meta, &c.ip);
        assert_eq!(picks, want_picks);
        let got = attention_blocks(&cpu, q, k, v, &mut got_kv, &c.meta, &c.p, &picks);
        assert!(got.data.iter().zip(&want.data).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!((got_kv.k, got_kv.v), (want_kv.k, want_kv.v));
    }

    /// Over a 16-bit pool the backend's ops give the reference's picks and values over rounded
    /// keys and values, bit for bit, and leave the pool as the reference's rounded one.
    #[test]
    fn a_half_pool_equals_the_reference_over_rounded_values() {
        let c = case();
        for dtype in [DType::BF16, DType::F16] {
            let (want_picks, want, want_kv) = reference(&c, dtype);
            let cpu = crate::testutil::cpu_kv(2, crate::Simd::detect(), dtype);
            let mut kv = cpu.kv(c.shape).unwrap();
            let all: Vec<u32> = (0..16).collect();
            let cached = [encode_kv(&c.cached.data[..1024], dtype), encode_kv(&c.cached.data, dtype)].concat();
            cpu.write_kv_blocks(&mut kv, &all, &cached);
            let [iq, ik, q, k, v] = &c.rows;
            let picks = cpu.index_blocks(iq, ik, &mut kv, &c.meta, &c.ip);
            assert_eq!(picks, want_picks, "{dtype}");
            let got = cpu.attention_blocks(q, k, v, &mut kv, &c.meta, &c.p, &picks);
            assert!(got.data.iter().zip(&want.data).all(|(a, b)| a.to_bits() == b.to_bits()), "{dtype}");
            let pool = [encode_kv(&want_kv.k, dtype), encode_kv(&want_kv.v, dtype)].concat();
            assert!(cpu.read_kv_blocks(&kv, &all) == pool, "{dtype}: the pool the reference leaves");
        }
    }
}
