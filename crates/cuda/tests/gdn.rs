//! The CUDA backend's Gated DeltaNet ops (kernels/gdn.cu): the causal conv1d and the delta rule
//! are the reference's within f32 rounding for every key head width with a kernel (outputs and
//! the state left in the slots; value heads grouped by key head and tiled over them), a sequence split at every point or batched with another gives
//! the same bits as run whole, and the gated RMSNorm and sigmoid gate are the reference's within
//! rounding. Skips without a device.

mod common;

use common::*;
use tf_backend::{AttnMeta, Backend, Conv1d, Gdn, RefBackend, SeqAttn, StateShape};

/// Key heads, value heads, value head width, conv kernel.
const HK: usize = 2;
const HV: usize = 6;
const DV: usize = 40;
const K: usize = 4;

fn meta(seqs: &[(usize, usize, usize)], slots: &[u32]) -> AttnMeta {
    let seqs = seqs
        .iter()
        .map(|&(q_start, q_len, start_pos)| SeqAttn { q_start, q_len, start_pos, block_table: vec![] })
        .collect();
    AttnMeta { seqs, slot_mapping: vec![], block_size: 16, state_slots: slots.to_vec() }
}

fn shape(dk: usize, slots: usize) -> StateShape {
    let ch = 2 * HK * dk + HV * DV;
    StateShape { num_slots: slots, conv_channels: ch, conv_width: K - 1, rec_len: HV * dk * DV }
}

/// Conv, then the delta rule (value heads `tiled` over the key heads or grouped), over `rows`
/// rows of `x` for round `m` on backend `b`, from the slot values `init`: the rule's output and
/// the pool after.
#[allow(clippy::too_many_arguments)]
fn run<B: Backend>(
    b: &B,
    tiled: bool,
    dk: usize,
    x: &[f32],
    ab: &[f32],
    m: &AttnMeta,
    init: &[f32],
    slots: usize,
) -> (Vec<f32>, Vec<f32>) {
    let sh = shape(dk, slots);
    let ch = sh.conv_channels;
    let rows = x.len() / ch;
    let mut st = b.state(sh).expect("state");
    let all: Vec<u32> = (0..slots as u32).collect();
    let bytes: Vec<u8> = init.iter().flat_map(|v| v.to_le_bytes()).collect();
    b.write_state(&mut st, &all, &bytes);
    let w = b.vec(&rand(ch * K, 11, 0.5));
    let (a_log, dt) = (b.vec(&rand(HV, 12, 1.0)), b.vec(&rand(HV, 13, 1.0)));
    let conv = Conv1d { weight: &w, bias: None, kernel: K, silu: true };
    let y = b.causal_conv1d(&b.upload(x, rows, ch), &conv, &mut st, m);
    let p = Gdn {
        a_log: &a_log,
        dt_bias: &dt,
        num_k_heads: HK,
        num_v_heads: HV,
        head_k_dim: dk,
        head_v_dim: DV,
        state_offset: ch * (K - 1),
        tiled,
    };
    let (a, bb) = (b.upload(&ab[..rows * HV], rows, HV), b.upload(&ab[rows * HV..], rows, HV));
    let o = b.gated_delta_rule(&y, &a, &bb, &p, &mut st, m);
    let pool: Vec<f32> =
        b.read_state(&st, &all).chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    (b.download(&o), pool)
}

#[test]
fn conv_and_delta_rule_match_the_reference() {
    let Some(g) = backend() else { return };
    for dk in [16, 32, 64, 128] {
        let sh = shape(dk, 3);
        let rows = 9;
        let x = rand(rows * sh.conv_channels, dk as u64, 1.0);
        let ab = rand(2 * rows * HV, 100 + dk as u64, 2.0);
        let init = rand(3 * sh.slot_len(), 200 + dk as u64, 0.5);
        // A sequence continuing from its slot, then a fresh one in another slot.
        let m = meta(&[(0, 5, 7), (5, 4, 0)], &[2, 0]);
        for tiled in [false, true] {
            let (want, want_pool) = run(&RefBackend, tiled, dk, &x, &ab, &m, &init, 3);
            let (got, got_pool) = run(&g, tiled, dk, &x, &ab, &m, &init, 3);
            let (e, ep) = (max_err(&got, &want), max_err(&got_pool, &want_pool));
            assert!(e < 1e-4 && ep < 1e-4, "dk {dk}, tiled {tiled}: output err {e}, state err {ep}");
        }
    }
}

#[test]
fn split_and_batched_rounds_give_the_same_bits() {
    let Some(g) = backend() else { return };
    for dk in [16, 128] {
        let sh = shape(dk, 2);
        let (ch, rows) = (sh.conv_channels, 8);
        let x = rand(rows * ch, 7 + dk as u64, 1.0);
        let ab = rand(2 * rows * HV, 8 + dk as u64, 2.0);
        let init = vec![0.0f32; 2 * sh.slot_len()];
        let (whole, whole_pool) = run(&g, false, dk, &x, &ab, &meta(&[(0, rows, 0)], &[1]), &init, 2);
        for cut in 1..rows {
            // Rows [0, cut) alone; then rows [cut, rows) behind another sequence's one row.
            let split = |lo: usize, hi: usize| {
                let xs = x[lo * ch..hi * ch].to_vec();
                let (a, b) = (&ab[..rows * HV], &ab[rows * HV..]);
                (xs, [&a[lo * HV..hi * HV], &b[lo * HV..hi * HV]].concat())
            };
            let (x1, ab1) = split(0, cut);
            let (first, pool) = run(&g, false, dk, &x1, &ab1, &meta(&[(0, cut, 0)], &[1]), &init, 2);
            let (x2, ab2) = split(cut, rows);
            let (x0, ab0) = split(0, 1);
            let n = rows - cut;
            let xb = [&x0[..], &x2[..]].concat();
            let abb = [&ab0[..HV], &ab2[..n * HV], &ab0[HV..], &ab2[n * HV..]].concat();
            let (second, pool2) = run(&g, false, dk, &xb, &abb, &meta(&[(0, 1, 0), (1, n, cut)], &[0, 1]), &pool, 2);
            let joined = [&first[..], &second[HV * DV..]].concat();
            assert!(same_bits(&joined, &whole), "dk {dk}: split at {cut}");
            let len = sh.slot_len();
            assert!(same_bits(&pool2[len..], &whole_pool[len..]), "dk {dk}: state after split at {cut}");
        }
    }
}

#[test]
fn gated_norm_and_sigmoid_gate_match_the_reference() {
    let Some(g) = backend() else { return };
    let (rows, cols) = (7, HV * DV);
    let (x, z, w) = (rand(rows * cols, 1, 2.0), rand(rows * cols, 2, 3.0), rand(DV, 3, 1.0));
    let want =
        RefBackend.rms_norm_gated(&RefBackend.upload(&x, rows, cols), &RefBackend.upload(&z, rows, cols), &w, 1e-6);
    let got = g.rms_norm_gated(&g.upload(&x, rows, cols), &g.upload(&z, rows, cols), &g.vec(&w), 1e-6);
    let e = max_err(&g.download(&got), &want.data);
    assert!(e < 1e-4, "gated norm err {e}");
    let mut a = RefBackend.upload(&x, rows, cols);
    RefBackend.mul_sigmoid(&mut a, &RefBackend.upload(&z, rows, cols));
    let mut b = g.upload(&x, rows, cols);
    g.mul_sigmoid(&mut b, &g.upload(&z, rows, cols));
    let e = max_err(&g.download(&b), &a.data);
    assert!(e < 1e-5, "sigmoid gate err {e}");
}
