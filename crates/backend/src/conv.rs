//! Depthwise causal conv1d over a round's rows, each sequence's past inputs kept in its state
//! slot's conv window (state.rs): the reference the backends are tested against.
//!
//! For row `t` of a sequence and channel `c`, with kernel width `K`:
//! `y[t, c] = act(sum_{j=0..K} w[c, j] * x[t - (K - 1) + j, c] + bias[c])`, the sum taken with `j`
//! rising, where rows before the round's first come from the window (oldest first; zeros for a
//! sequence at position 0). After the round the window holds the sequence's last `K - 1`
//! inputs (this round's rows after the older window rows).

use crate::attn::AttnMeta;
use crate::state::HostState;

/// One conv layer's weights and options.
pub struct Conv1d<'a, V> {
    /// `[channels, kernel]` row-major (PyTorch's `[channels, 1, kernel]`).
    pub weight: &'a V,
    /// `[channels]`, added after the sum.
    pub bias: Option<&'a V>,
    /// Kernel width `K` (the window keeps `K - 1` rows).
    pub kernel: usize,
    /// SiLU on the output.
    pub silu: bool,
}

impl<V> Clone for Conv1d<'_, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V> Copy for Conv1d<'_, V> {}

/// `x / (1 + exp(-x))` in f32.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// One output value: channel `c` of row `t` (index within the sequence) from the sequence's
/// rows `xs` (`[q_len, ch]`) and the window `win` (`[K - 1, ch]`, oldest first).
pub fn conv_value(xs: &[f32], win: &[f32], ch: usize, t: usize, c: usize, w: &[f32], k: usize) -> f32 {
    let mut acc = 0.0f32;
    for j in 0..k {
        // Input index t - (k - 1) + j, in rows of this round when not negative.
        let back = k - 1 - j;
        let v = if t >= back { xs[(t - back) * ch + c] } else { win[(k - 1 - (back - t)) * ch + c] };
        acc += w[c * k + j] * v;
    }
    acc
}

/// The new window after `xs` (`q_len` rows of `ch`): the last `K - 1` rows of `win ++ xs`.
pub fn next_window(win: &[f32], xs: &[f32], ch: usize, k: usize) -> Vec<f32> {
    let width = k - 1;
    let rows = xs.len() / ch.max(1);
    let mut out = vec![0.0f32; width * ch];
    for r in 0..width {
        // Row r of the new window is row (rows + r) of win ++ xs, counted from win's start.
        let src = rows + r;
        let from =
            if src < width { &win[src * ch..(src + 1) * ch] } else { &xs[(src - width) * ch..(src - width + 1) * ch] };
        out[r * ch..(r + 1) * ch].copy_from_slice(from);
    }
    out
}

/// The reference conv over `x` (`[rows, ch]` row-major) for the round `meta`, reading and
/// leaving each sequence's window in the first `ch * (K - 1)` values of its slot.
#[allow(clippy::too_many_arguments)]
pub fn causal_conv1d(
    x: &[f32],
    ch: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    kernel: usize,
    silu_out: bool,
    st: &mut HostState,
    meta: &AttnMeta,
) -> Vec<f32> {
    let width = kernel - 1;
    let mut out = vec![0.0f32; x.len()];
    for (i, s) in meta.seqs.iter().enumerate() {
        let slot = meta.state_slots[i];
        let win: Vec<f32> = if s.start_pos > 0 { st.slot(slot)[..width * ch].to_vec() } else { vec![0.0; width * ch] };
        let xs = &x[s.q_start * ch..(s.q_start + s.q_len) * ch];
        for t in 0..s.q_len {
            for c in 0..ch {
                let mut y = conv_value(xs, &win, ch, t, c, w, kernel);
                if let Some(b) = bias {
                    y += b[c];
                }
                out[(s.q_start + t) * ch + c] = if silu_out { silu(y) } else { y };
            }
        }
        let next = next_window(&win, xs, ch, kernel);
        st.slot_mut(slot)[..width * ch].copy_from_slice(&next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn::SeqAttn;
    use crate::state::StateShape;

    fn meta(seqs: &[(usize, usize, usize)], slots: &[u32]) -> AttnMeta {
        let seqs = seqs
            .iter()
            .map(|&(q_start, q_len, start_pos)| SeqAttn { q_start, q_len, start_pos, block_table: vec![] })
            .collect();
        AttnMeta { seqs, slot_mapping: vec![], block_size: 16, state_slots: slots.to_vec() }
    }

    #[test]
    fn conv_matches_a_direct_convolution_and_splits_anywhere() {
        let (ch, k, n) = (3, 4, 7);
        let x: Vec<f32> = (0..n * ch).map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.25).collect();
        let w: Vec<f32> = (0..ch * k).map(|i| ((i * 13 % 7) as f32 - 3.0) * 0.5).collect();
        let bias = [0.5f32, -1.0, 0.25];
        let shape = StateShape { num_slots: 2, conv_channels: ch, conv_width: k - 1, rec_len: 2 };
        // Whole: one round from position 0 in slot 1, garbage in the slot it must not read.
        let mut st = HostState::new(shape).expect("small");
        st.slot_mut(1).iter_mut().for_each(|v| *v = 9.0);
        let whole = causal_conv1d(&x, ch, &w, Some(&bias), k, false, &mut st, &meta(&[(0, n, 0)], &[1]));
        for t in 0..n {
            for c in 0..ch {
                let mut want = 0.0f32;
                for j in 0..k {
                    let idx = t as isize - (k as isize - 1) + j as isize;
                    if idx >= 0 {
                        want += w[c * k + j] * x[idx as usize * ch + c];
                    }
                }
                assert_eq!(whole[t * ch + c], want + bias[c], "row {t} channel {c}");
            }
        }
        // The window holds the last three inputs, and the recurrent part is left alone.
        assert_eq!(&st.slot(1)[..(k - 1) * ch], &x[(n - 3) * ch..]);
        assert_eq!(&st.slot(1)[(k - 1) * ch..], &[9.0, 9.0]);
        // Split at every point (including a one-row first part shorter than the window).
        for cut in 1..n {
            let mut st = HostState::new(shape).expect("small");
            let a = causal_conv1d(&x[..cut * ch], ch, &w, Some(&bias), k, false, &mut st, &meta(&[(0, cut, 0)], &[0]));
            let m = meta(&[(0, n - cut, cut)], &[0]);
            let b = causal_conv1d(&x[cut * ch..], ch, &w, Some(&bias), k, false, &mut st, &m);
            assert_eq!([a, b].concat(), whole, "split at {cut}");
        }
    }

    #[test]
    fn sequences_in_one_round_keep_their_own_windows() {
        let (ch, k) = (2, 3);
        let x: Vec<f32> = (0..10).map(|i| i as f32 - 4.5).collect();
        let w = [0.5f32, -0.25, 1.0, 2.0, 0.125, -1.0];
        let shape = StateShape { num_slots: 3, conv_channels: ch, conv_width: k - 1, rec_len: 0 };
        let mut solo = HostState::new(shape).expect("small");
        let a = causal_conv1d(&x[..6], ch, &w, None, k, true, &mut solo, &meta(&[(0, 3, 0)], &[2]));
        let b = causal_conv1d(&x[6..], ch, &w, None, k, true, &mut solo, &meta(&[(0, 2, 0)], &[0]));
        let mut both = HostState::new(shape).expect("small");
        let ab = causal_conv1d(&x, ch, &w, None, k, true, &mut both, &meta(&[(0, 3, 0), (3, 2, 0)], &[2, 0]));
        assert_eq!(ab, [a, b].concat());
        assert_eq!(both.data, solo.data);
    }
}
