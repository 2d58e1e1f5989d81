//! DeepSeek sparse attention on the CPU: tf-backend's dsa.rs row by row, the rows spread over
//! the thread pool. Each row is computed alone in dsa.rs's order, so the values are the
//! reference's bit for bit whatever the batch.

use crate::CpuBackend;
use rayon::prelude::*;
use tf_backend::dsa::{sparse_row, write_rows};
use tf_backend::{AttnMeta, AttnParams, DsaParams, HostKv, HostTensor, SparseQueries};

/// [`tf_backend::Backend::sparse_attention`] over a host pool.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sparse_attention(
    cpu: &CpuBackend,
    q: &HostTensor,
    index_q: &HostTensor,
    index_w: &HostTensor,
    rows: &HostTensor,
    kv: &mut HostKv,
    meta: &AttnMeta,
    p: &AttnParams,
    ix: &DsaParams,
) -> HostTensor {
    let w = kv.slot_width();
    write_rows(&rows.data, &mut kv.k, w, meta);
    let x = SparseQueries { q: &q.data, index_q: &index_q.data, index_w: &index_w.data };
    let n = p.num_heads * p.head_dim;
    let tasks: Vec<(usize, usize)> =
        meta.seqs.iter().enumerate().flat_map(|(si, s)| (0..s.q_len).map(move |i| (si, i))).collect();
    let pool = &kv.k;
    let outs: Vec<(usize, Vec<f32>)> = cpu.pool.install(|| {
        tasks
            .par_iter()
            .map(|&(si, i)| {
                let s = &meta.seqs[si];
                let mut o = vec![0.0f32; n];
                sparse_row(&x, s.q_start + i, s.start_pos + i, s, pool, w, meta.block_size, p, ix, &mut o);
                (s.q_start + i, o)
            })
            .collect()
    });
    let mut out = HostTensor::zeros(q.rows, n);
    for (row, o) in outs {
        out.data[row * n..(row + 1) * n].copy_from_slice(&o);
    }
    out
}
