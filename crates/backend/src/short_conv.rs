//! LFM2's double-gated short convolution (transformers' `Lfm2ShortConv`), the reference: the
//! in-projection's `[B, C, x]` (each `ch` wide, in that order), `Bx = B * x`, a depthwise causal
//! conv of width `K` over `Bx` continued from each sequence's conv window, `y = C * conv(Bx)`.
//!
//! For row `t` of a sequence and channel `c`:
//! `conv[t, c] = sum_{j=0..K} w[c, j] * Bx[t - (K - 1) + j, c] (+ bias[c])`, the sum taken with
//! `j` rising from `0.0` and the bias added after it; rows before the round's first come from the
//! window (`K - 1` rows of `ch`, oldest first, the first `ch * (K - 1)` values of the slot; zeros
//! for a sequence at position 0). After the round the window holds the sequence's last `K - 1`
//! values of `Bx`. Each token reads only the window before it and its own row, so a round split
//! anywhere, or batched with other sequences, gives the same bits.

use crate::attn::AttnMeta;
use crate::state::{HostState, StateShape};

/// One short conv layer's weights, as the backend holds them and as the host reads them.
pub struct ShortConv<'a, V> {
    /// `[ch, K]` row-major (PyTorch's `[ch, 1, K]`) on the backend.
    pub weight: &'a V,
    /// `[ch]` on the backend, added after the sum.
    pub bias: Option<&'a V>,
    /// `weight`'s values on the host (what the default op reads).
    pub host_weight: &'a [f32],
    /// `bias`'s values on the host.
    pub host_bias: Option<&'a [f32]>,
    /// Kernel width `K` (the window keeps `K - 1` rows).
    pub kernel: usize,
}

impl<V> Clone for ShortConv<'_, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V> Copy for ShortConv<'_, V> {}

/// `B * x` of one in-projection row `[B, C, x]` (`3 * ch` wide), channel `c`.
pub fn gated_input(row: &[f32], ch: usize, c: usize) -> f32 {
    row[c] * row[2 * ch + c]
}

/// The reference over the round `meta`: `bcx` is `[rows, 3 * ch]`; returns `[rows, ch]`. Rows of
/// no sequence give zeros.
pub fn short_conv(
    bcx: &[f32],
    ch: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    kernel: usize,
    st: &mut HostState,
    meta: &AttnMeta,
) -> Vec<f32> {
    let width = kernel.saturating_sub(1);
    let mut out = vec![0.0f32; bcx.len() / 3];
    for (i, s) in meta.seqs.iter().enumerate() {
        let Some(&slot) = meta.state_slots.get(i) else { continue };
        // The sequence's conv inputs: the window, then this round's rows of Bx.
        let mut inputs: Vec<f32> =
            if s.start_pos > 0 { st.slot(slot)[..width * ch].to_vec() } else { vec![0.0; width * ch] };
        for r in s.q_start..s.q_start + s.q_len {
            let row = &bcx[r * 3 * ch..(r + 1) * 3 * ch];
            inputs.extend((0..ch).map(|c| gated_input(row, ch, c)));
        }
        for t in 0..s.q_len {
            let row = &bcx[(s.q_start + t) * 3 * ch..(s.q_start + t + 1) * 3 * ch];
            for c in 0..ch {
                // Input j of the taps sits at row t + j of `inputs` (the window's rows first).
                let mut acc = 0.0f32;
                for j in 0..kernel {
                    acc += w[c * kernel + j] * inputs[(t + j) * ch + c];
                }
                if let Some(b) = bias {
                    acc += b[c];
                }
                out[(s.q_start + t) * ch + c] = row[ch + c] * acc;
            }
        }
        let keep = inputs.len() - width * ch;
        st.slot_mut(slot)[..width * ch].copy_from_slice(&inputs[keep..]);
    }
    out
}

/// A host pool of one slot per sequence of `meta` from `bytes` (`Backend::read_state` of
/// `meta.state_slots`), and the round's metadata pointed at those slots (0, 1, ...): what the
/// default ops run the reference on before writing the slots back.
pub fn host_slots(bytes: &[u8], meta: &AttnMeta, conv_channels: usize, conv_width: usize) -> (HostState, AttnMeta) {
    let n = meta.state_slots.len().min(meta.seqs.len());
    let slot_len = (bytes.len() / 4).checked_div(n).unwrap_or(0);
    let rec_len = slot_len.saturating_sub(conv_channels * conv_width);
    let shape = StateShape { num_slots: n, conv_channels, conv_width, rec_len };
    let mut st = HostState { shape, data: vec![0.0; n * slot_len] };
    st.write_slots(&(0..n as u32).collect::<Vec<_>>(), bytes);
    let mut local = meta.clone();
    local.seqs.truncate(n);
    local.state_slots = (0..n as u32).collect();
    (st, local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn::SeqAttn;

    fn meta(seqs: &[(usize, usize, usize)], slots: &[u32]) -> AttnMeta {
        let seqs = seqs
            .iter()
            .map(|&(q_start, q_len, start_pos)| SeqAttn { q_start, q_len, start_pos, block_table: vec![] })
            .collect();
        AttnMeta { seqs, slot_mapping: vec![], block_size: 16, state_slots: slots.to_vec() }
    }

    fn values(n: usize, mul: usize, m: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|i| ((i * mul % m) as f32 - (m / 2) as f32) * scale).collect()
    }

    #[test]
    fn matches_the_gated_convolution_and_splits_anywhere() {
        let (ch, k, n) = (3, 4, 7);
        let bcx = values(n * 3 * ch, 37, 11, 0.25);
        let w = values(ch * k, 13, 7, 0.5);
        let bias = [0.5f32, -1.0, 0.25];
        let shape = StateShape { num_slots: 2, conv_channels: ch, conv_width: k - 1, rec_len: 2 };
        // Whole, from position 0 in slot 1, with values in the slot it must not read.
        let mut st = HostState::new(shape).expect("small");
        st.slot_mut(1).iter_mut().for_each(|v| *v = 9.0);
        let whole = short_conv(&bcx, ch, &w, Some(&bias), k, &mut st, &meta(&[(0, n, 0)], &[1]));
        let bx = |t: usize, c: usize| bcx[t * 3 * ch + c] * bcx[t * 3 * ch + 2 * ch + c];
        for t in 0..n {
            for c in 0..ch {
                let mut conv = 0.0f32;
                for j in 0..k {
                    if t + j >= k - 1 {
                        conv += w[c * k + j] * bx(t + j + 1 - k, c);
                    }
                }
                let want = bcx[t * 3 * ch + ch + c] * (conv + bias[c]);
                assert_eq!(whole[t * ch + c], want, "row {t} channel {c}");
            }
        }
        // The window holds the last three Bx rows; the rest of the slot is left alone.
        let last: Vec<f32> = (n - 3..n).flat_map(|t| (0..ch).map(move |c| (t, c))).map(|(t, c)| bx(t, c)).collect();
        assert_eq!(&st.slot(1)[..(k - 1) * ch], &last[..]);
        assert_eq!(&st.slot(1)[(k - 1) * ch..], &[9.0, 9.0]);
        // Split at every point, including first parts shorter than the window.
        for cut in 1..n {
            let mut st = HostState::new(shape).expect("small");
            let a = short_conv(&bcx[..cut * 3 * ch], ch, &w, Some(&bias), k, &mut st, &meta(&[(0, cut, 0)], &[0]));
            let m = meta(&[(0, n - cut, cut)], &[0]);
            let b = short_conv(&bcx[cut * 3 * ch..], ch, &w, Some(&bias), k, &mut st, &m);
            assert_eq!([a, b].concat(), whole, "split at {cut}");
        }
        // Token by token.
        let mut st = HostState::new(shape).expect("small");
        let steps: Vec<f32> = (0..n)
            .flat_map(|t| {
                short_conv(
                    &bcx[t * 3 * ch..(t + 1) * 3 * ch],
                    ch,
                    &w,
                    Some(&bias),
                    k,
                    &mut st,
                    &meta(&[(0, 1, t)], &[0]),
                )
            })
            .collect();
        assert_eq!(steps, whole);
    }

    #[test]
    fn sequences_in_one_round_keep_their_own_windows() {
        let (ch, k) = (2, 3);
        let bcx = values(5 * 3 * ch, 7, 13, 0.5);
        let w = [0.5f32, -0.25, 1.0, 2.0, 0.125, -1.0];
        let shape = StateShape { num_slots: 3, conv_channels: ch, conv_width: k - 1, rec_len: 0 };
        let mut solo = HostState::new(shape).expect("small");
        let a = short_conv(&bcx[..18], ch, &w, None, k, &mut solo, &meta(&[(0, 3, 0)], &[2]));
        let b = short_conv(&bcx[18..], ch, &w, None, k, &mut solo, &meta(&[(0, 2, 0)], &[0]));
        let mut both = HostState::new(shape).expect("small");
        let ab = short_conv(&bcx, ch, &w, None, k, &mut both, &meta(&[(0, 3, 0), (3, 2, 0)], &[2, 0]));
        assert_eq!(ab, [a, b].concat());
        assert_eq!(both.data, solo.data);
    }

    #[test]
    fn host_slots_round_trip() {
        let shape = StateShape { num_slots: 4, conv_channels: 2, conv_width: 1, rec_len: 1 };
        let mut st = HostState::new(shape).expect("small");
        st.slot_mut(3).copy_from_slice(&[1.0, 2.0, 3.0]);
        let m = meta(&[(0, 1, 5)], &[3]);
        let (local, lm) = host_slots(&st.read_slots(&m.state_slots), &m, 2, 1);
        assert_eq!(local.slot(0), &[1.0, 2.0, 3.0]);
        assert_eq!(lm.state_slots, vec![0]);
    }
}
