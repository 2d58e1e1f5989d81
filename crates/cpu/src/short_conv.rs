//! LFM2's double-gated short conv on the CPU: each sequence's conv inputs (window, then this
//! round's `B * x`) built once, then output rows in parallel. Every value is the reference's
//! arithmetic in the reference's order (tf_backend::short_conv), so the results are its bits.

use rayon::ThreadPool;
use rayon::prelude::*;
use tf_backend::short_conv::gated_input;
use tf_backend::{AttnMeta, HostState, HostTensor};

/// Rows of output one task computes.
const ROWS_PER_TASK: usize = 16;

/// `C * conv(B * x)` of `bcx` `[rows, 3 * ch]` (tf_backend::short_conv::short_conv).
pub fn short_conv(
    pool: &ThreadPool,
    bcx: &HostTensor,
    w: &[f32],
    bias: Option<&[f32]>,
    kernel: usize,
    st: &mut HostState,
    meta: &AttnMeta,
) -> HostTensor {
    let ch = bcx.cols / 3;
    let width = kernel.saturating_sub(1);
    let mut out = HostTensor::zeros(bcx.rows, ch);
    for (s, &slot) in meta.seqs.iter().zip(&meta.state_slots) {
        let rows = &bcx.data[s.q_start * 3 * ch..(s.q_start + s.q_len) * 3 * ch];
        let mut inputs = vec![0.0f32; (width + s.q_len) * ch];
        if s.start_pos > 0 {
            inputs[..width * ch].copy_from_slice(&st.slot(slot)[..width * ch]);
        }
        pool.install(|| {
            inputs[width * ch..].par_chunks_mut(ch).zip(rows.par_chunks(3 * ch)).for_each(|(dst, row)| {
                for (c, d) in dst.iter_mut().enumerate() {
                    *d = gated_input(row, ch, c);
                }
            });
            let ys = &mut out.data[s.q_start * ch..(s.q_start + s.q_len) * ch];
            ys.par_chunks_mut(ROWS_PER_TASK * ch).enumerate().for_each(|(task, ys)| {
                for (i, y) in ys.chunks_mut(ch).enumerate() {
                    let t = task * ROWS_PER_TASK + i;
                    let gate = &rows[t * 3 * ch + ch..t * 3 * ch + 2 * ch];
                    for c in 0..ch {
                        let mut acc = 0.0f32;
                        for j in 0..kernel {
                            acc += w[c * kernel + j] * inputs[(t + j) * ch + c];
                        }
                        if let Some(b) = bias {
                            acc += b[c];
                        }
                        y[c] = gate[c] * acc;
                    }
                }
            });
        });
        let keep = inputs.len() - width * ch;
        st.slot_mut(slot)[..width * ch].copy_from_slice(&inputs[keep..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::{SeqAttn, StateShape};

    fn meta(seqs: &[(usize, usize, usize)], slots: &[u32]) -> AttnMeta {
        let seqs = seqs
            .iter()
            .map(|&(q_start, q_len, start_pos)| SeqAttn { q_start, q_len, start_pos, block_table: vec![] })
            .collect();
        AttnMeta { seqs, slot_mapping: vec![], block_size: 16, state_slots: slots.to_vec() }
    }

    #[test]
    fn the_reference_bits_over_mixed_rounds() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("pool");
        let (ch, k) = (24, 4);
        let rows = 45;
        let vals = |n: usize, m: usize, s: f32| (0..n).map(|i| ((i * m % 97) as f32 - 48.0) * s).collect::<Vec<_>>();
        let bcx = HostTensor { data: vals(rows * 3 * ch, 31, 0.03), rows, cols: 3 * ch };
        let w = vals(ch * k, 17, 0.02);
        let bias = vals(ch, 7, 0.01);
        let shape = StateShape { num_slots: 4, conv_channels: ch, conv_width: k - 1, rec_len: 3 };
        // A prefill of 40 rows from 0, a decode row and a 4-row chunk from past the window.
        let m = meta(&[(0, 40, 0), (40, 1, 7), (41, 4, 2)], &[3, 0, 1]);
        let mut st = HostState::new(shape).expect("small");
        for (i, v) in st.data.iter_mut().enumerate() {
            *v = (i % 13) as f32 * 0.1 - 0.6;
        }
        let mut want_st = st.clone();
        for b in [Some(&bias[..]), None] {
            let got = short_conv(&pool, &bcx, &w, b, k, &mut st, &m);
            let want = tf_backend::short_conv::short_conv(&bcx.data, ch, &w, b, k, &mut want_st, &m);
            assert_eq!(got.data, want);
            assert_eq!(st.data, want_st.data);
        }
    }
}
