//! Mamba2's ops on the CPU: the SSD scan over each (sequence, head) pair in parallel and the
//! grouped gated RMSNorm over rows. Each runs the reference's per-element arithmetic in the
//! reference's order (tf_backend::ssd), so the results are the reference's bits.

use rayon::ThreadPool;
use rayon::prelude::*;
use tf_backend::ssd::{SsdShape, head_step, head_token};
use tf_backend::{AttnMeta, HostState, HostTensor};

/// The SSD scan (tf_backend::ssd::ssd_scan), each (sequence, head) pair on its own thread.
#[allow(clippy::too_many_arguments)]
pub fn ssd_scan(
    pool: &ThreadPool,
    sh: SsdShape,
    xbc: &HostTensor,
    dt: &HostTensor,
    a_log: &[f32],
    d: &[f32],
    dt_bias: &[f32],
    state_offset: usize,
    st: &mut HostState,
    meta: &AttnMeta,
) -> HostTensor {
    let (heads, p, n) = (sh.h, sh.p, sh.p * sh.n);
    let cols = sh.xbc_cols();
    let jobs: Vec<(usize, usize)> = (0..meta.seqs.len()).flat_map(|i| (0..heads).map(move |h| (i, h))).collect();
    let st_ref = &*st;
    let done: Vec<(Vec<f32>, Vec<f32>)> = pool.install(|| {
        jobs.par_iter()
            .map(|&(i, h)| {
                let s = &meta.seqs[i];
                let range = state_offset + h * n..state_offset + (h + 1) * n;
                let mut state =
                    if s.start_pos > 0 { st_ref.slot(meta.state_slots[i])[range].to_vec() } else { vec![0.0; n] };
                let mut o = vec![0.0f32; s.q_len * p];
                for t in 0..s.q_len {
                    let r = s.q_start + t;
                    let (dt_h, da) = head_step(sh, dt.data[r * heads + h], a_log[h], dt_bias[h]);
                    let row = &xbc.data[r * cols..(r + 1) * cols];
                    head_token(sh, h, row, dt_h, da, d[h], &mut state, &mut o[t * p..(t + 1) * p]);
                }
                (state, o)
            })
            .collect()
    });
    let inner = heads * p;
    let mut out = HostTensor::zeros(xbc.rows, inner);
    for (&(i, h), (state, o)) in jobs.iter().zip(done) {
        let s = &meta.seqs[i];
        st.slot_mut(meta.state_slots[i])[state_offset + h * n..state_offset + (h + 1) * n].copy_from_slice(&state);
        for t in 0..s.q_len {
            let r = s.q_start + t;
            out.data[r * inner + h * p..r * inner + (h + 1) * p].copy_from_slice(&o[t * p..(t + 1) * p]);
        }
    }
    out
}

/// The grouped gated RMSNorm (tf_backend::ssd::rms_norm_gated_grouped), rows in parallel.
pub fn rms_norm_gated_grouped(
    pool: &ThreadPool,
    x: &HostTensor,
    z: &HostTensor,
    w: &[f32],
    group: usize,
    eps: f32,
) -> HostTensor {
    let mut out = HostTensor::zeros(x.rows, x.cols);
    let cols = x.cols.max(1);
    pool.install(|| {
        out.data.par_chunks_mut(cols).enumerate().for_each(|(r, o)| {
            o.copy_from_slice(&tf_backend::ssd::rms_norm_gated_grouped(x.row(r), z.row(r), w, group, eps));
        })
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::{Backend, RefBackend, SeqAttn, Ssd, StateShape};

    const SH: SsdShape = SsdShape { h: 4, p: 3, g: 2, n: 5, dt_min: 0.001, dt_max: f32::INFINITY };

    fn wave(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 11 + seed * 5) % 23) as f32 - 11.0) * 0.09).collect()
    }

    /// A round of three sequences (one fresh, two resuming) matches the reference bit for bit,
    /// outputs and slots.
    #[test]
    fn the_scan_and_norm_are_the_references_bits() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        let cols = SH.xbc_cols();
        let seqs = [(0usize, 5usize, 0usize), (5, 1, 7), (6, 3, 2)];
        let rows = 9;
        let meta = AttnMeta {
            seqs: seqs
                .iter()
                .map(|&(q_start, q_len, start_pos)| SeqAttn { q_start, q_len, start_pos, block_table: vec![] })
                .collect(),
            slot_mapping: vec![],
            block_size: 16,
            state_slots: vec![2, 0, 1],
        };
        let (a_log, d, bias) =
            (vec![0.1f32, -0.3, 0.7, 1.2], vec![1.0f32, 0.5, -0.2, 0.9], vec![0.4f32, -9.0, 0.0, 1.5]);
        let shape = StateShape { num_slots: 3, conv_channels: 2, conv_width: 3, rec_len: SH.state_len() };
        let mut mine = HostState::new(shape).expect("small");
        mine.data = wave(mine.data.len(), 9);
        let mut theirs = mine.clone();
        let (x, dt) = (
            HostTensor { data: wave(rows * cols, 1), rows, cols },
            HostTensor { data: wave(rows * SH.h, 2), rows, cols: SH.h },
        );
        let got = ssd_scan(&pool, SH, &x, &dt, &a_log, &d, &bias, 6, &mut mine, &meta);
        let p = Ssd {
            a_log: &a_log,
            d: &d,
            dt_bias: &bias,
            num_heads: SH.h,
            head_dim: SH.p,
            n_groups: SH.g,
            state_size: SH.n,
            dt_min: SH.dt_min,
            dt_max: SH.dt_max,
            state_offset: 6,
        };
        let want = RefBackend.ssd_scan(&x, &dt, &p, &mut theirs, &meta);
        assert_eq!(got.data, want.data);
        assert_eq!(mine.data, theirs.data);
        let (z, w) = (HostTensor { data: wave(rows * 12, 3), rows, cols: 12 }, wave(12, 4));
        let y = rms_norm_gated_grouped(&pool, &got, &z, &w, 6, 1e-5);
        assert_eq!(y.data, RefBackend.rms_norm_gated_grouped(&got, &z, &w, 6, 1e-5).data);
    }
}
