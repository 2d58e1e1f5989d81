//! Mamba2's selective state-space scan (SSD, Nemotron-H's mixer) token by token over each
//! sequence's recurrent state, and the grouped gated RMSNorm after it: the reference the
//! backends are tested against (transformers' `NemotronHMamba2Mixer`).
//!
//! Input rows are the conv's output after SiLU, `[x (H * P), B (G * N), C (G * N)]`, with `dt`
//! `[H]` per row (before its bias). Head `h` reads group `h / (H / G)`. Per token, in f32:
//! `dt = clamp(softplus(dt + dt_bias), dt_min, dt_max)`, `dA = exp(dt * A)` (`A = -exp(A_log)`), then for each `p < P` and `n < N` with `n` rising:
//! `s[h, p, n] = s[h, p, n] * dA + (dt * B[n]) * x[p]`, `y[p] = sum_n s[h, p, n] * C[n]` (the sum
//! taken as the state is updated), and `y[p] += D[h] * x[p]`. The state is `[H, P, N]` f32 in the
//! slot after its first `state_offset` values (the conv window), read only for a sequence past
//! position 0. Each token's update reads only the state before it, so a prefill split anywhere
//! and a batch of sequences give the same bits as one sequence run whole.

use crate::attn::AttnMeta;
use crate::conv::silu;
use crate::gdn::softplus;
use crate::state::HostState;

/// One Mamba2 layer's SSD shape and per-head parameters (`[H]` each).
pub struct Ssd<'a, V> {
    /// `A_log` (`A = -exp(A_log)`).
    pub a_log: &'a V,
    /// The skip `D`.
    pub d: &'a V,
    /// `dt_bias`.
    pub dt_bias: &'a V,
    /// Mamba heads `H`.
    pub num_heads: usize,
    /// Width of a head `P`.
    pub head_dim: usize,
    /// Groups `G` of B and C (divides `H`).
    pub n_groups: usize,
    /// State size `N`.
    pub state_size: usize,
    /// `dt` is clamped into `[dt_min, dt_max]` after the softplus.
    pub dt_min: f32,
    /// See `dt_min`.
    pub dt_max: f32,
    /// Values before the recurrent state in each slot (the conv window's length).
    pub state_offset: usize,
}

impl<V> Clone for Ssd<'_, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V> Copy for Ssd<'_, V> {}

/// The shape half of [`Ssd`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SsdShape {
    /// Heads.
    pub h: usize,
    /// Head width.
    pub p: usize,
    /// Groups.
    pub g: usize,
    /// State size.
    pub n: usize,
    /// Lower clamp of `dt`.
    pub dt_min: f32,
    /// Upper clamp of `dt`.
    pub dt_max: f32,
}

impl SsdShape {
    /// The shape of `s`.
    pub fn of<V>(s: &Ssd<'_, V>) -> SsdShape {
        SsdShape { h: s.num_heads, p: s.head_dim, g: s.n_groups, n: s.state_size, dt_min: s.dt_min, dt_max: s.dt_max }
    }

    /// Columns of an input row (`x`, `B`, `C`): the conv's channels.
    pub fn xbc_cols(&self) -> usize {
        self.h * self.p + 2 * self.g * self.n
    }

    /// f32 values of one sequence's recurrent state.
    pub fn state_len(&self) -> usize {
        self.h * self.p * self.n
    }
}

/// The discretised step of a head for a raw `dt`: `(dt, exp(dt * A))` with `A = -exp(a_log)`.
pub fn head_step(sh: SsdShape, dt_raw: f32, a_log: f32, dt_bias: f32) -> (f32, f32) {
    let dt = softplus(dt_raw + dt_bias).max(sh.dt_min).min(sh.dt_max);
    (dt, (dt * -a_log.exp()).exp())
}

/// One token of head `h`: `row` is the token's `[x, B, C]` input, `(dt, da)` from
/// [`head_step`], `s` the head's state `[P, N]` (updated), its output `[P]` into `out`. Every
/// backend that keeps the reference's bits runs exactly this.
#[allow(clippy::too_many_arguments)]
pub fn head_token(sh: SsdShape, h: usize, row: &[f32], dt: f32, da: f32, d: f32, s: &mut [f32], out: &mut [f32]) {
    let (p, n) = (sh.p, sh.n);
    let grp = h / (sh.h / sh.g);
    let b = &row[sh.h * p + grp * n..sh.h * p + (grp + 1) * n];
    let c = &row[sh.h * p + (sh.g + grp) * n..sh.h * p + (sh.g + grp + 1) * n];
    for (i, o) in out.iter_mut().enumerate().take(p) {
        let x = row[h * p + i];
        let si = &mut s[i * n..(i + 1) * n];
        let mut acc = 0.0f32;
        for k in 0..n {
            si[k] = si[k] * da + (dt * b[k]) * x;
            acc += si[k] * c[k];
        }
        *o = acc + d * x;
    }
}

/// The reference scan over the round `meta`: `xbc` `[rows, xbc_cols]`, `dt` `[rows, H]`, the
/// per-head `[A_log, D, dt_bias]` in `heads`; returns `y` `[rows, H * P]` before the gated norm.
#[allow(clippy::too_many_arguments)]
pub fn ssd_scan(
    sh: SsdShape,
    xbc: &[f32],
    dt: &[f32],
    heads: &[f32],
    state_offset: usize,
    st: &mut HostState,
    meta: &AttnMeta,
) -> Vec<f32> {
    let (cols, inner, len) = (sh.xbc_cols(), sh.h * sh.p, sh.state_len());
    let (a, d, bias) = (&heads[..sh.h], &heads[sh.h..2 * sh.h], &heads[2 * sh.h..3 * sh.h]);
    let mut y = vec![0.0f32; dt.len() / sh.h.max(1) * inner];
    for (i, s) in meta.seqs.iter().enumerate() {
        let slot = st.slot_mut(meta.state_slots[i]);
        let state = &mut slot[state_offset..state_offset + len];
        if s.start_pos == 0 {
            state.fill(0.0);
        }
        for t in s.q_start..s.q_start + s.q_len {
            let row = &xbc[t * cols..(t + 1) * cols];
            for h in 0..sh.h {
                let (dt_h, da) = head_step(sh, dt[t * sh.h + h], a[h], bias[h]);
                let out = &mut y[t * inner + h * sh.p..t * inner + (h + 1) * sh.p];
                head_token(sh, h, row, dt_h, da, d[h], &mut state[h * sh.p * sh.n..(h + 1) * sh.p * sh.n], out);
            }
        }
    }
    y
}

/// Mamba2's gated RMSNorm: `v = x * silu(z)`, then each group of `group` values of a row
/// scaled by `1 / sqrt(mean(v^2) + eps)` (the squares summed with the index rising), times
/// `w` (`[cols]`): `(v * inv) * w`.
pub fn rms_norm_gated_grouped(x: &[f32], z: &[f32], w: &[f32], group: usize, eps: f32) -> Vec<f32> {
    let mut out: Vec<f32> = x.iter().zip(z).map(|(&v, &g)| v * silu(g)).collect();
    let cols = w.len();
    for row in out.chunks_exact_mut(cols) {
        for (gi, grp) in row.chunks_exact_mut(group).enumerate() {
            let ms = grp.iter().map(|v| v * v).sum::<f32>() / group as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            for (j, v) in grp.iter_mut().enumerate() {
                *v = *v * inv * w[gi * group + j];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn::SeqAttn;
    use crate::state::StateShape;

    const SH: SsdShape = SsdShape { h: 4, p: 2, g: 2, n: 3, dt_min: 0.01, dt_max: f32::INFINITY };

    fn meta(seqs: &[(usize, usize, usize)], slots: &[u32]) -> AttnMeta {
        let seqs = seqs
            .iter()
            .map(|&(q_start, q_len, start_pos)| SeqAttn { q_start, q_len, start_pos, block_table: vec![] })
            .collect();
        AttnMeta { seqs, slot_mapping: vec![], block_size: 16, state_slots: slots.to_vec() }
    }

    fn wave(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 7 + seed * 13) % 17) as f32 - 8.0) * 0.125).collect()
    }

    /// Heads' A_log, D and dt_bias; head 3's bias so low its dt is clamped.
    fn heads() -> Vec<f32> {
        vec![0.0, -0.7, 0.7, -1.4, 1.0, 0.5, -0.75, 2.0, 0.5, -1.0, 0.0, -30.0]
    }

    fn shape(slots: usize, offset: usize) -> StateShape {
        StateShape { num_slots: slots, conv_channels: offset, conv_width: 1, rec_len: SH.state_len() }
    }

    #[test]
    fn the_scan_matches_the_discretised_recurrence() {
        let rows = 5;
        let (cols, hs) = (SH.xbc_cols(), heads());
        let (xbc, dt) = (wave(rows * cols, 1), wave(rows * SH.h, 2));
        let mut st = HostState::new(shape(1, 3)).expect("small");
        st.slot_mut(0)[..3].copy_from_slice(&[7.0, 8.0, 9.0]);
        let y = ssd_scan(SH, &xbc, &dt, &hs, 3, &mut st, &meta(&[(0, rows, 0)], &[0]));
        // Straight from the formulas, in f64, group g = h / 2.
        let mut s = vec![0.0f64; SH.state_len()];
        for t in 0..rows {
            let row = &xbc[t * cols..(t + 1) * cols];
            for h in 0..SH.h {
                let g = h / 2;
                let raw = (dt[t * SH.h + h] + hs[8 + h]) as f64;
                let dtv = (raw.exp().ln_1p()).max(0.01);
                let da = (dtv * -(hs[h] as f64).exp()).exp();
                for p in 0..SH.p {
                    let x = row[h * SH.p + p] as f64;
                    let mut acc = 0.0;
                    for n in 0..SH.n {
                        let i = (h * SH.p + p) * SH.n + n;
                        let b = row[8 + g * 3 + n] as f64;
                        let c = row[8 + 6 + g * 3 + n] as f64;
                        s[i] = s[i] * da + dtv * b * x;
                        acc += s[i] * c;
                    }
                    let want = acc + hs[4 + h] as f64 * x;
                    let got = y[t * 8 + h * SH.p + p] as f64;
                    assert!((got - want).abs() < 1e-5, "row {t} head {h} p {p}: {got} vs {want}");
                }
            }
        }
        // The conv window is left alone and the state after the last row is kept.
        assert_eq!(&st.slot(0)[..3], &[7.0, 8.0, 9.0]);
        for (a, b) in st.slot(0)[3..].iter().zip(&s) {
            assert!((*a as f64 - b).abs() < 1e-5);
        }
        // Head 3's dt is the clamp's: its decay is exp(0.01 * -exp(-1.4)).
        let (dt3, da3) = head_step(SH, 0.0, -1.4, -30.0);
        assert_eq!(dt3, 0.01);
        assert!((da3 as f64 - (-0.01 * (-1.4f64).exp()).exp()).abs() < 1e-7);
    }

    #[test]
    fn chunked_and_batched_rounds_give_the_same_bits() {
        let rows = 7;
        let (cols, hs) = (SH.xbc_cols(), heads());
        let (xbc, dt) = (wave(rows * cols, 3), wave(rows * SH.h, 4));
        let mut st = HostState::new(shape(3, 2)).expect("small");
        st.data.iter_mut().for_each(|v| *v = 5.0); // a fresh sequence never reads it
        let whole = ssd_scan(SH, &xbc, &dt, &hs, 2, &mut st, &meta(&[(0, rows, 0)], &[2]));
        let end = st.slot(2).to_vec();
        for cut in 1..rows {
            let mut st2 = HostState::new(shape(3, 2)).expect("small");
            let a = ssd_scan(SH, &xbc[..cut * cols], &dt[..cut * SH.h], &hs, 2, &mut st2, &meta(&[(0, cut, 0)], &[1]));
            let m = meta(&[(0, rows - cut, cut)], &[1]);
            let b = ssd_scan(SH, &xbc[cut * cols..], &dt[cut * SH.h..], &hs, 2, &mut st2, &m);
            assert_eq!([a, b].concat(), whole, "split at {cut}");
            assert_eq!(&st2.slot(1)[2..], &end[2..]);
        }
        // Two sequences in one round: each as it is alone.
        let mut both = HostState::new(shape(3, 2)).expect("small");
        let xy = [&xbc[..], &xbc[..3 * cols]].concat();
        let dts = [&dt[..], &dt[..3 * SH.h]].concat();
        let ab = ssd_scan(SH, &xy, &dts, &hs, 2, &mut both, &meta(&[(0, rows, 0), (rows, 3, 0)], &[0, 1]));
        assert_eq!(&ab[..rows * 8], &whole[..]);
        assert_eq!(&ab[rows * 8..], &whole[..3 * 8]);
        assert_eq!(&both.slot(0)[2..], &end[2..]);
    }

    #[test]
    fn the_gated_norm_gates_before_norming_each_group() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let z = [0.0f32, 1.0, 2.0, -1.0];
        let w = [1.0f32, 0.5, 2.0, 1.0];
        let y = rms_norm_gated_grouped(&x, &z, &w, 2, 0.0);
        let v: Vec<f32> = x.iter().zip(&z).map(|(a, b)| a * silu(*b)).collect();
        let inv0 = 1.0 / ((v[0] * v[0] + v[1] * v[1]) / 2.0).sqrt();
        let inv1 = 1.0 / ((v[2] * v[2] + v[3] * v[3]) / 2.0).sqrt();
        assert_eq!(y, vec![v[0] * inv0 * 1.0, v[1] * inv0 * 0.5, v[2] * inv1 * 2.0, v[3] * inv1 * 1.0]);
        assert_eq!(y[0], 0.0); // silu(0) = 0 gates the first value off
    }
}
