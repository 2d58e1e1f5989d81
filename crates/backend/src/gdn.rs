//! Gated DeltaNet (Qwen3-Next, Qwen3.5): the gated delta rule over each sequence's recurrent
//! state, token by token, and the gated RMSNorm after it; the reference the backends are tested
//! against (transformers' `torch_recurrent_gated_delta_rule` with `use_qk_l2norm_in_kernel`).
//!
//! Input rows are the conv's output `[q (Hk * Dk), k (Hk * Dk), v (Hv * Dv)]`, with `a` and `b`
//! `[Hv]` per row. Value head `h` reads key head `h / (Hv / Hk)` (the value heads grouped by key
//! head, as transformers orders them), or `h % Hk` where they are tiled (llama.cpp's GGUF
//! order: every key head's first value head, then every one's second, ...). Per token, in f32:
//! `q = l2norm(q) * Dk^-0.5`, `k = l2norm(k)` (`x / sqrt(sum x^2 + 1e-6)`),
//! `g = -exp(A_log) * softplus(a + dt_bias)`, `beta = sigmoid(b)`; then
//! `S *= exp(g)`, `u = (v - S^T k) * beta`, `S += k u^T`, `o = S^T q`, every sum over `Dk` taken
//! with the key index rising. The state `S` is `[Hv, Dk, Dv]` f32 in the slot after its first
//! `state_offset` values (the conv window), read only for a sequence past position 0.

use crate::attn::AttnMeta;
use crate::conv::silu;
use crate::state::HostState;

/// One Gated DeltaNet layer's shape and decay parameters.
pub struct Gdn<'a, V> {
    /// `A_log`, `[Hv]`.
    pub a_log: &'a V,
    /// `dt_bias`, `[Hv]`.
    pub dt_bias: &'a V,
    /// Key (and query) heads `Hk`.
    pub num_k_heads: usize,
    /// Value heads `Hv` (a multiple of `Hk`).
    pub num_v_heads: usize,
    /// Width of a key head `Dk`.
    pub head_k_dim: usize,
    /// Width of a value head `Dv`.
    pub head_v_dim: usize,
    /// Values before the recurrent state in each slot (the conv window's length).
    pub state_offset: usize,
    /// The value heads are tiled over the key heads (value head `h` reads key head `h % Hk`)
    /// rather than grouped (`h / (Hv / Hk)`).
    pub tiled: bool,
}

impl<V> Clone for Gdn<'_, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V> Copy for Gdn<'_, V> {}

/// The shape half of [`Gdn`], for code that holds the decay parameters on the host.
#[derive(Clone, Copy, Debug)]
pub struct GdnShape {
    /// Key heads.
    pub hk: usize,
    /// Value heads.
    pub hv: usize,
    /// Key head width.
    pub dk: usize,
    /// Value head width.
    pub dv: usize,
    /// Value heads tiled over the key heads ([`Gdn::tiled`]).
    pub tiled: bool,
}

impl GdnShape {
    /// The shape of `p`.
    pub fn of<V>(p: &Gdn<'_, V>) -> GdnShape {
        GdnShape { hk: p.num_k_heads, hv: p.num_v_heads, dk: p.head_k_dim, dv: p.head_v_dim, tiled: p.tiled }
    }

    /// The key head value head `h` reads.
    pub fn key_head(&self, h: usize) -> usize {
        match self.tiled {
            true => h % self.hk,
            false => h / (self.hv / self.hk),
        }
    }

    /// Columns of an input row (`q`, `k`, `v`).
    pub fn qkv_cols(&self) -> usize {
        2 * self.hk * self.dk + self.hv * self.dv
    }

    /// f32 values of one sequence's recurrent state.
    pub fn state_len(&self) -> usize {
        self.hv * self.dk * self.dv
    }
}

/// `log(1 + exp(x))`, linear above 20 as torch's `softplus`.
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// `1 / (1 + exp(-x))`.
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `x / sqrt(sum x^2 + 1e-6)` into `out`, scaled by `scale`.
fn l2norm_into(x: &[f32], scale: f32, out: &mut [f32]) {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let inv = 1.0 / (ss + 1e-6).sqrt();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v * inv * scale;
    }
}

/// Value head `h` over one sequence's rows: `qkv` (`[rows, qkv_cols]`), `a` and `b`
/// (`[rows, Hv]`), its state `s` (`[Dk, Dv]`, updated) and its output per row into `out`
/// (`[rows, Dv]`). Every backend that keeps the reference's bits runs exactly this.
#[allow(clippy::too_many_arguments)]
pub fn head_rows(
    sh: GdnShape,
    h: usize,
    qkv: &[f32],
    a: &[f32],
    b: &[f32],
    a_log: f32,
    dt_bias: f32,
    s: &mut [f32],
    out: &mut [f32],
) {
    let (dk, dv) = (sh.dk, sh.dv);
    let cols = sh.qkv_cols();
    let kh = sh.key_head(h);
    let scale = 1.0 / (dk as f32).sqrt();
    let (mut q, mut k, mut u) = (vec![0.0f32; dk], vec![0.0f32; dk], vec![0.0f32; dv]);
    let rows = a.len() / sh.hv;
    for t in 0..rows {
        let row = &qkv[t * cols..(t + 1) * cols];
        l2norm_into(&row[kh * dk..(kh + 1) * dk], scale, &mut q);
        l2norm_into(&row[sh.hk * dk + kh * dk..sh.hk * dk + (kh + 1) * dk], 1.0, &mut k);
        let v = &row[2 * sh.hk * dk + h * dv..2 * sh.hk * dk + (h + 1) * dv];
        let g = -a_log.exp() * softplus(a[t * sh.hv + h] + dt_bias);
        let beta = sigmoid(b[t * sh.hv + h]);
        let decay = g.exp();
        s.iter_mut().for_each(|x| *x *= decay);
        for j in 0..dv {
            let mut mem = 0.0f32;
            for i in 0..dk {
                mem += s[i * dv + j] * k[i];
            }
            u[j] = (v[j] - mem) * beta;
        }
        for i in 0..dk {
            for j in 0..dv {
                s[i * dv + j] += k[i] * u[j];
            }
        }
        let o = &mut out[t * dv..(t + 1) * dv];
        for (j, oj) in o.iter_mut().enumerate() {
            let mut acc = 0.0f32;
            for i in 0..dk {
                acc += s[i * dv + j] * q[i];
            }
            *oj = acc;
        }
    }
}

/// The columns of value head `h` of rows `[start, start + len)` of a `[rows, cols]` matrix.
fn head_cols(x: &[f32], cols: usize, start: usize, len: usize, at: usize, width: usize) -> Vec<f32> {
    (start..start + len).flat_map(|r| x[r * cols + at..r * cols + at + width].iter().copied()).collect()
}

/// The inputs `head_rows` takes for sequence rows `[start, start + len)`: its `qkv`, `a` and `b` rows.
pub fn seq_inputs(
    sh: GdnShape,
    qkv: &[f32],
    a: &[f32],
    b: &[f32],
    start: usize,
    len: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let cols = sh.qkv_cols();
    (
        qkv[start * cols..(start + len) * cols].to_vec(),
        head_cols(a, sh.hv, start, len, 0, sh.hv),
        head_cols(b, sh.hv, start, len, 0, sh.hv),
    )
}

/// The reference gated delta rule over the round `meta` (`qkv` `[rows, qkv_cols]`, `a`, `b`
/// `[rows, Hv]`): output `[rows, Hv * Dv]`, each sequence's state left in its slot.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule(
    sh: GdnShape,
    qkv: &[f32],
    a: &[f32],
    b: &[f32],
    a_log: &[f32],
    dt_bias: &[f32],
    state_offset: usize,
    st: &mut HostState,
    meta: &AttnMeta,
) -> Vec<f32> {
    let (hv, dv, n) = (sh.hv, sh.dv, sh.dk * sh.dv);
    let rows = a.len() / hv;
    let mut out = vec![0.0f32; rows * hv * dv];
    for (i, s) in meta.seqs.iter().enumerate() {
        let slot = meta.state_slots[i];
        let (q, sa, sb) = seq_inputs(sh, qkv, a, b, s.q_start, s.q_len);
        for h in 0..hv {
            let range = state_offset + h * n..state_offset + (h + 1) * n;
            let mut state = if s.start_pos > 0 { st.slot(slot)[range.clone()].to_vec() } else { vec![0.0; n] };
            let mut o = vec![0.0f32; s.q_len * dv];
            head_rows(sh, h, &q, &sa, &sb, a_log[h], dt_bias[h], &mut state, &mut o);
            st.slot_mut(slot)[range].copy_from_slice(&state);
            for t in 0..s.q_len {
                let r = s.q_start + t;
                out[r * hv * dv + h * dv..r * hv * dv + (h + 1) * dv].copy_from_slice(&o[t * dv..(t + 1) * dv]);
            }
        }
    }
    out
}

/// Gated RMSNorm over each group of `w.len()` values: `x * rsqrt(mean(x^2) + eps) * w * silu(z)`.
pub fn rms_norm_gated(x: &[f32], z: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let d = w.len();
    let mut out = vec![0.0f32; x.len()];
    for ((o, xs), zs) in out.chunks_exact_mut(d).zip(x.chunks_exact(d)).zip(z.chunks_exact(d)) {
        let ms = xs.iter().map(|v| v * v).sum::<f32>() / d as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for (((o, &xv), &zv), &wv) in o.iter_mut().zip(xs).zip(zs).zip(w) {
            *o = wv * (xv * inv) * silu(zv);
        }
    }
    out
}

/// `x * sigmoid(gate)` elementwise, in place (gated attention's output gate).
pub fn mul_sigmoid(x: &mut [f32], gate: &[f32]) {
    for (v, &g) in x.iter_mut().zip(gate) {
        *v *= sigmoid(g);
    }
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

    fn wave(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 7919 + seed * 104729) % 1000) as f32 / 500.0 - 1.0) * 0.9).collect()
    }

    const SH: GdnShape = GdnShape { hk: 1, hv: 2, dk: 4, dv: 3, tiled: false };

    /// The same rule written from the formulas with whole-matrix steps, one token.
    fn naive_step(s: &mut [f32], q: &[f32], k: &[f32], v: &[f32], g: f32, beta: f32) -> Vec<f32> {
        let (dk, dv) = (q.len(), v.len());
        let nq: f32 = q.iter().map(|x| x * x).sum::<f32>() + 1e-6;
        let nk: f32 = k.iter().map(|x| x * x).sum::<f32>() + 1e-6;
        let q: Vec<f32> = q.iter().map(|x| x / nq.sqrt() / (dk as f32).sqrt()).collect();
        let k: Vec<f32> = k.iter().map(|x| x / nk.sqrt()).collect();
        s.iter_mut().for_each(|x| *x *= g.exp());
        let u: Vec<f32> = (0..dv).map(|j| (v[j] - (0..dk).map(|i| s[i * dv + j] * k[i]).sum::<f32>()) * beta).collect();
        for i in 0..dk {
            for j in 0..dv {
                s[i * dv + j] += k[i] * u[j];
            }
        }
        (0..dv).map(|j| (0..dk).map(|i| s[i * dv + j] * q[i]).sum::<f32>()).collect()
    }

    #[test]
    fn the_rule_matches_the_formulas_with_shared_key_heads() {
        let rows = 5;
        let (qkv, a, b) = (wave(rows * SH.qkv_cols(), 1), wave(rows * 2, 2), wave(rows * 2, 3));
        let (a_log, dt) = ([0.3f32, -0.5], [1.0f32, 0.2]);
        let shape = StateShape { num_slots: 1, conv_channels: 2, conv_width: 1, rec_len: SH.state_len() };
        let mut st = HostState::new(shape).expect("small");
        let out = gated_delta_rule(SH, &qkv, &a, &b, &a_log, &dt, 2, &mut st, &meta(&[(0, rows, 0)], &[0]));
        let cols = SH.qkv_cols();
        for h in 0..2 {
            let mut s = vec![0.0f32; 12];
            for t in 0..rows {
                let r = &qkv[t * cols..(t + 1) * cols];
                let g = -a_log[h].exp() * softplus(a[t * 2 + h] + dt[h]);
                let o = naive_step(&mut s, &r[0..4], &r[4..8], &r[8 + 3 * h..11 + 3 * h], g, sigmoid(b[t * 2 + h]));
                for j in 0..3 {
                    let got = out[t * 6 + h * 3 + j];
                    assert!((got - o[j]).abs() < 1e-5, "row {t} head {h}: {got} vs {}", o[j]);
                }
            }
            let got = &st.slot(0)[2 + h * 12..2 + (h + 1) * 12];
            assert!(got.iter().zip(&s).all(|(x, y)| (x - y).abs() < 1e-5));
        }
        // The conv window's values before the state are not touched.
        assert_eq!(&st.slot(0)[..2], &[0.0, 0.0]);
    }

    #[test]
    fn tiled_value_heads_give_the_grouped_result_in_their_order_bit_for_bit() {
        // 2 key heads, 3 value heads each: grouped head `k * 3 + v` is tiled head `v * 2 + k`.
        let grouped = GdnShape { hk: 2, hv: 6, dk: 4, dv: 3, tiled: false };
        let tiled = GdnShape { tiled: true, ..grouped };
        let to_tiled = |g: usize| (g % 3) * 2 + g / 3;
        let (rows, cols, qk) = (4, grouped.qkv_cols(), 2 * 2 * 4);
        let (qkv, a, b) = (wave(rows * cols, 7), wave(rows * 6, 8), wave(rows * 6, 9));
        let (a_log, dt) = (wave(6, 10), wave(6, 11));
        // Every per-value-head input moved to its tiled place.
        let mut qkv_t = qkv.clone();
        let (mut a_t, mut b_t, mut al_t, mut dt_t) = (a.clone(), b.clone(), a_log.clone(), dt.clone());
        for g in 0..6 {
            let t = to_tiled(g);
            for r in 0..rows {
                let (src, dst) = (r * cols + qk + g * 3, r * cols + qk + t * 3);
                qkv_t[dst..dst + 3].copy_from_slice(&qkv[src..src + 3]);
                a_t[r * 6 + t] = a[r * 6 + g];
                b_t[r * 6 + t] = b[r * 6 + g];
            }
            al_t[t] = a_log[g];
            dt_t[t] = dt[g];
        }
        let shape = StateShape { num_slots: 1, conv_channels: 0, conv_width: 0, rec_len: grouped.state_len() };
        let run = |sh, qkv: &[f32], a: &[f32], b: &[f32], al: &[f32], dt: &[f32]| {
            let mut st = HostState::new(shape).expect("small");
            let out = gated_delta_rule(sh, qkv, a, b, al, dt, 0, &mut st, &meta(&[(0, rows, 0)], &[0]));
            (out, st.slot(0).to_vec())
        };
        let (out_g, st_g) = run(grouped, &qkv, &a, &b, &a_log, &dt);
        let (out_t, st_t) = run(tiled, &qkv_t, &a_t, &b_t, &al_t, &dt_t);
        let n = 4 * 3;
        for g in 0..6 {
            let t = to_tiled(g);
            for r in 0..rows {
                assert_eq!(out_t[r * 18 + t * 3..r * 18 + t * 3 + 3], out_g[r * 18 + g * 3..r * 18 + g * 3 + 3]);
            }
            assert_eq!(st_t[t * n..(t + 1) * n], st_g[g * n..(g + 1) * n], "head {g}'s state");
        }
        assert_eq!((tiled.key_head(5), grouped.key_head(5)), (1, 1));
        assert_eq!((tiled.key_head(2), grouped.key_head(2)), (0, 0));
        assert_eq!((tiled.key_head(3), grouped.key_head(3)), (1, 1));
        assert_eq!((tiled.key_head(1), grouped.key_head(1)), (1, 0));
    }

    #[test]
    fn chunked_and_batched_rounds_give_the_same_bits() {
        let rows = 6;
        let (qkv, a, b) = (wave(rows * SH.qkv_cols(), 4), wave(rows * 2, 5), wave(rows * 2, 6));
        let (a_log, dt) = ([0.1f32, 0.7], [0.5f32, -0.3]);
        let shape = StateShape { num_slots: 3, conv_channels: 0, conv_width: 0, rec_len: SH.state_len() };
        let mut st = HostState::new(shape).expect("small");
        st.data.iter_mut().for_each(|v| *v = 7.0); // never read at position 0
        let whole = gated_delta_rule(SH, &qkv, &a, &b, &a_log, &dt, 0, &mut st, &meta(&[(0, rows, 0)], &[2]));
        let cols = SH.qkv_cols();
        for cut in 1..rows {
            let mut st2 = HostState::new(shape).expect("small");
            let first = meta(&[(0, cut, 0)], &[1]);
            let x = gated_delta_rule(
                SH,
                &qkv[..cut * cols],
                &a[..cut * 2],
                &b[..cut * 2],
                &a_log,
                &dt,
                0,
                &mut st2,
                &first,
            );
            // The rest batched behind another sequence's one row.
            let (q2, a2, b2) = (
                [&qkv[..cols], &qkv[cut * cols..]].concat(),
                [&a[..2], &a[cut * 2..]].concat(),
                [&b[..2], &b[cut * 2..]].concat(),
            );
            let m = meta(&[(0, 1, 0), (1, rows - cut, cut)], &[0, 1]);
            let y = gated_delta_rule(SH, &q2, &a2, &b2, &a_log, &dt, 0, &mut st2, &m);
            assert_eq!([&x[..], &y[6..]].concat(), whole, "split at {cut}");
            assert_eq!(st2.slot(1), st.slot(2));
        }
    }

    #[test]
    fn gated_norm_and_sigmoid_gate() {
        let x = [3.0f32, -4.0, 1.0, 1.0];
        let z = [0.0f32, 100.0, -100.0, 2.0];
        let y = rms_norm_gated(&x, &z, &[1.0, 0.5], 0.0);
        // Group 0: rms 5/sqrt(2); silu(0) = 0, silu(100) = 100.
        assert_eq!(y[0], 0.0);
        assert!((y[1] - 0.5 * (-4.0 / (12.5f32).sqrt()) * 100.0).abs() < 1e-4);
        assert!(y[2].abs() < 1e-30 && (y[3] - 0.5 * silu(2.0)).abs() < 1e-6);
        let mut v = [2.0f32, 2.0];
        mul_sigmoid(&mut v, &[0.0, 1000.0]);
        assert_eq!(v, [1.0, 2.0]);
        assert_eq!(softplus(30.0), 30.0);
        assert!((softplus(0.0) - std::f32::consts::LN_2).abs() < 1e-7);
    }
}
