//! Gated DeltaNet's ops on the CPU: the causal conv over each sequence's window, the gated delta
//! rule over each (sequence, value head) pair in parallel, and the gated RMSNorm over rows. Each
//! runs the reference's per-element arithmetic in the reference's order (tf_backend::conv and
//! tf_backend::gdn), so the results are the reference's bits.

use rayon::ThreadPool;
use rayon::prelude::*;
use tf_backend::conv::{conv_value, next_window, silu};
use tf_backend::gdn::{GdnShape, head_rows, seq_inputs};
use tf_backend::{AttnMeta, HostState, HostTensor};

/// Each sequence's window before the round (zeros at position 0), in `meta.seqs` order.
fn windows(st: &HostState, meta: &AttnMeta, len: usize) -> Vec<Vec<f32>> {
    meta.seqs
        .iter()
        .zip(&meta.state_slots)
        .map(|(s, &slot)| if s.start_pos > 0 { st.slot(slot)[..len].to_vec() } else { vec![0.0; len] })
        .collect()
}

/// The depthwise causal conv (tf_backend::conv::causal_conv1d), sequences in parallel.
#[allow(clippy::too_many_arguments)]
pub fn causal_conv1d(
    pool: &ThreadPool,
    x: &HostTensor,
    w: &[f32],
    bias: Option<&[f32]>,
    kernel: usize,
    silu_out: bool,
    st: &mut HostState,
    meta: &AttnMeta,
) -> HostTensor {
    let ch = x.cols;
    let wins = windows(st, meta, (kernel - 1) * ch);
    let per_seq: Vec<Vec<f32>> = pool.install(|| {
        meta.seqs
            .par_iter()
            .zip(&wins)
            .map(|(s, win)| {
                let xs = &x.data[s.q_start * ch..(s.q_start + s.q_len) * ch];
                let mut out = vec![0.0f32; s.q_len * ch];
                for t in 0..s.q_len {
                    for c in 0..ch {
                        let mut y = conv_value(xs, win, ch, t, c, w, kernel);
                        if let Some(b) = bias {
                            y += b[c];
                        }
                        out[t * ch + c] = if silu_out { silu(y) } else { y };
                    }
                }
                out
            })
            .collect()
    });
    let mut out = HostTensor::zeros(x.rows, ch);
    for ((s, ys), (win, &slot)) in meta.seqs.iter().zip(per_seq).zip(wins.iter().zip(&meta.state_slots)) {
        out.data[s.q_start * ch..(s.q_start + s.q_len) * ch].copy_from_slice(&ys);
        let xs = &x.data[s.q_start * ch..(s.q_start + s.q_len) * ch];
        st.slot_mut(slot)[..win.len()].copy_from_slice(&next_window(win, xs, ch, kernel));
    }
    out
}

/// The gated delta rule (tf_backend::gdn::gated_delta_rule), each (sequence, value head) pair
/// on its own thread.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule(
    pool: &ThreadPool,
    sh: GdnShape,
    qkv: &HostTensor,
    a: &HostTensor,
    b: &HostTensor,
    a_log: &[f32],
    dt_bias: &[f32],
    state_offset: usize,
    st: &mut HostState,
    meta: &AttnMeta,
) -> HostTensor {
    let (hv, dv, n) = (sh.hv, sh.dv, sh.dk * sh.dv);
    let inputs: Vec<_> =
        meta.seqs.iter().map(|s| seq_inputs(sh, &qkv.data, &a.data, &b.data, s.q_start, s.q_len)).collect();
    let jobs: Vec<(usize, usize)> = (0..meta.seqs.len()).flat_map(|i| (0..hv).map(move |h| (i, h))).collect();
    let st_ref = &*st;
    let done: Vec<(Vec<f32>, Vec<f32>)> = pool.install(|| {
        jobs.par_iter()
            .map(|&(i, h)| {
                let s = &meta.seqs[i];
                let range = state_offset + h * n..state_offset + (h + 1) * n;
                let mut state =
                    if s.start_pos > 0 { st_ref.slot(meta.state_slots[i])[range].to_vec() } else { vec![0.0; n] };
                let mut o = vec![0.0f32; s.q_len * dv];
                let (q, sa, sb) = &inputs[i];
                head_rows(sh, h, q, sa, sb, a_log[h], dt_bias[h], &mut state, &mut o);
                (state, o)
            })
            .collect()
    });
    let mut out = HostTensor::zeros(qkv.rows, hv * dv);
    for (&(i, h), (state, o)) in jobs.iter().zip(done) {
        let s = &meta.seqs[i];
        st.slot_mut(meta.state_slots[i])[state_offset + h * n..state_offset + (h + 1) * n].copy_from_slice(&state);
        for t in 0..s.q_len {
            let r = s.q_start + t;
            out.data[r * hv * dv + h * dv..r * hv * dv + (h + 1) * dv].copy_from_slice(&o[t * dv..(t + 1) * dv]);
        }
    }
    out
}

/// The gated RMSNorm (tf_backend::gdn::rms_norm_gated), rows in parallel.
pub fn rms_norm_gated(pool: &ThreadPool, x: &HostTensor, z: &HostTensor, w: &[f32], eps: f32) -> HostTensor {
    let mut out = HostTensor::zeros(x.rows, x.cols);
    let cols = x.cols.max(1);
    pool.install(|| {
        out.data.par_chunks_mut(cols).enumerate().for_each(|(r, o)| {
            let row = tf_backend::gdn::rms_norm_gated(x.row(r), z.row(r), w, eps);
            o.copy_from_slice(&row);
        })
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::attn::SeqAttn;
    use tf_backend::{StateShape, conv, gdn};

    fn wave(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 7919 + seed * 104729) % 1000) as f32 / 500.0 - 1.0) * 0.9).collect()
    }

    fn round() -> AttnMeta {
        // Two sequences: one continuing from position 3 in slot 2, one fresh in slot 0.
        let seqs = vec![
            SeqAttn { q_start: 0, q_len: 4, start_pos: 3, block_table: vec![] },
            SeqAttn { q_start: 4, q_len: 2, start_pos: 0, block_table: vec![] },
        ];
        AttnMeta { seqs, slot_mapping: vec![], block_size: 16, state_slots: vec![2, 0] }
    }

    #[test]
    fn the_cpu_ops_give_the_reference_bits() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("pool");
        let sh = GdnShape { hk: 2, hv: 4, dk: 4, dv: 3, tiled: false };
        let (ch, k, rows) = (sh.qkv_cols(), 4, 6);
        let shape = StateShape { num_slots: 3, conv_channels: ch, conv_width: k - 1, rec_len: sh.state_len() };
        let mut base = HostState::new(shape).expect("small");
        base.data = wave(base.data.len(), 9);
        let meta = round();
        let x = HostTensor { data: wave(rows * ch, 1), rows, cols: ch };
        let w = wave(ch * k, 2);
        let (mut st_ref, mut st_cpu) = (base.clone(), base.clone());
        let want = conv::causal_conv1d(&x.data, ch, &w, None, k, true, &mut st_ref, &meta);
        let got = causal_conv1d(&pool, &x, &w, None, k, true, &mut st_cpu, &meta);
        assert_eq!(got.data, want);
        assert_eq!(st_cpu.data, st_ref.data);

        let (a, b) = (wave(rows * 4, 3), wave(rows * 4, 4));
        let (a_log, dt) = (wave(4, 5), wave(4, 6));
        let off = ch * (k - 1);
        let want = gdn::gated_delta_rule(sh, &got.data, &a, &b, &a_log, &dt, off, &mut st_ref, &meta);
        let (at, bt) = (HostTensor { data: a, rows, cols: 4 }, HostTensor { data: b, rows, cols: 4 });
        let o = gated_delta_rule(&pool, sh, &got, &at, &bt, &a_log, &dt, off, &mut st_cpu, &meta);
        assert_eq!(o.data, want);
        assert_eq!(st_cpu.data, st_ref.data);

        let z = HostTensor { data: wave(rows * 12, 7), rows, cols: 12 };
        let nw = wave(3, 8);
        assert_eq!(rms_norm_gated(&pool, &o, &z, &nw, 1e-6).data, gdn::rms_norm_gated(&o.data, &z.data, &nw, 1e-6));
    }
}
