//! The CUDA backend's Mamba2 ops (kernels/ssd.cu): the SSD scan is the reference's within f32
//! rounding for every state size with a kernel (outputs and the state left in the slots), a
//! sequence split at every point or batched with others gives the same bits as run whole, and
//! the grouped gated RMSNorm is the reference's within rounding. Skips without a device.

mod common;

use common::*;
use tf_backend::{AttnMeta, Backend, RefBackend, SeqAttn, Ssd, StateShape};

/// Heads, head width, groups.
const H: usize = 8;
const P: usize = 40;
const G: usize = 2;
/// Values before the scan state in a slot (a conv window).
const OFFSET: usize = 12;

fn meta(seqs: &[(usize, usize, usize)], slots: &[u32]) -> AttnMeta {
    let seqs = seqs
        .iter()
        .map(|&(q_start, q_len, start_pos)| SeqAttn { q_start, q_len, start_pos, block_table: vec![] })
        .collect();
    AttnMeta { seqs, slot_mapping: vec![], block_size: 16, state_slots: slots.to_vec() }
}

/// Heads' A_log, D and dt_bias (head 1's dt under the clamp).
fn heads() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let a_log: Vec<f32> = (0..H).map(|h| ((h + 1) as f32).ln()).collect();
    let d: Vec<f32> = rand(H, 3, 1.0).iter().map(|v| 1.0 + v).collect();
    let mut bias = rand(H, 4, 2.0);
    bias[1] = -10.0;
    (a_log, d, bias)
}

fn params<'a, V>(v: &'a (V, V, V), n: usize) -> Ssd<'a, V> {
    Ssd {
        a_log: &v.0,
        d: &v.1,
        dt_bias: &v.2,
        num_heads: H,
        head_dim: P,
        n_groups: G,
        state_size: n,
        dt_min: 0.001,
        dt_max: f32::INFINITY,
        state_offset: OFFSET,
    }
}

#[test]
fn the_scan_is_the_references_and_keeps_its_bits_split_or_batched() {
    let Some(b) = backend() else { return };
    let r = RefBackend;
    let (a_log, d, bias) = heads();
    let hv = (b.vec(&a_log), b.vec(&d), b.vec(&bias));
    let rv = (a_log.clone(), d.clone(), bias.clone());
    for n in [16usize, 32, 64, 128] {
        let cols = H * P + 2 * G * n;
        let shape = StateShape { num_slots: 4, conv_channels: OFFSET, conv_width: 1, rec_len: H * P * n };
        let rows = 13;
        let x = rand(rows * cols, 10 + n as u64, 1.0);
        let dt = rand(rows * H, 20 + n as u64, 2.0);
        let init = rand(4 * shape.slot_len(), 30, 0.5);
        let bytes: Vec<u8> = init.iter().flat_map(|v| v.to_le_bytes()).collect();
        // A round of three sequences: fresh (6 rows), resuming (1 row), resuming (6 rows).
        let m = meta(&[(0, 6, 0), (6, 1, 9), (7, 6, 3)], &[3, 0, 1]);
        let mut dst = b.state(shape).expect("state");
        b.write_state(&mut dst, &[0, 1, 2, 3], &bytes);
        let mut rst = r.state(shape).expect("state");
        r.write_state(&mut rst, &[0, 1, 2, 3], &bytes);
        let (xd, dd) = (b.upload(&x, rows, cols), b.upload(&dt, rows, H));
        let got = b.download(&b.ssd_scan(&xd, &dd, &params(&hv, n), &mut dst, &m));
        let want =
            r.download(&r.ssd_scan(&r.upload(&x, rows, cols), &r.upload(&dt, rows, H), &params(&rv, n), &mut rst, &m));
        let err = max_err(&got, &want);
        assert!(err < 2e-4, "n {n}: output error {err}");
        let (gs, ws) = (b.read_state(&dst, &[0, 1, 2, 3]), r.read_state(&rst, &[0, 1, 2, 3]));
        let f =
            |v: &[u8]| v.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<f32>>();
        let serr = max_err(&f(&gs), &f(&ws));
        assert!(serr < 2e-4, "n {n}: state error {serr}");
        assert_eq!(
            &gs[2 * shape.slot_bytes()..3 * shape.slot_bytes()],
            &bytes[2 * shape.slot_bytes()..3 * shape.slot_bytes()],
            "slot 2 untouched"
        );

        // The fresh sequence whole, split at every point, and alone: the same bits.
        let whole = |st: &mut tf_cuda::CudaState| {
            b.download(&b.ssd_scan(
                &b.upload(&x[..6 * cols], 6, cols),
                &b.upload(&dt[..6 * H], 6, H),
                &params(&hv, n),
                st,
                &meta(&[(0, 6, 0)], &[2]),
            ))
        };
        let mut solo = b.state(shape).expect("state");
        let alone = whole(&mut solo);
        assert!(same_bits(&alone, &got[..6 * H * P]), "n {n}: batched != alone");
        for cut in 1..6 {
            let mut st = b.state(shape).expect("state");
            let first = b.ssd_scan(
                &b.upload(&x[..cut * cols], cut, cols),
                &b.upload(&dt[..cut * H], cut, H),
                &params(&hv, n),
                &mut st,
                &meta(&[(0, cut, 0)], &[2]),
            );
            let rest = 6 - cut;
            let second = b.ssd_scan(
                &b.upload(&x[cut * cols..6 * cols], rest, cols),
                &b.upload(&dt[cut * H..6 * H], rest, H),
                &params(&hv, n),
                &mut st,
                &meta(&[(0, rest, cut)], &[2]),
            );
            let split = [b.download(&first), b.download(&second)].concat();
            assert!(same_bits(&split, &alone), "n {n}: split at {cut}");
            assert_eq!(
                b.read_state(&st, &[2])[4 * OFFSET..],
                b.read_state(&solo, &[2])[4 * OFFSET..],
                "n {n}: state split at {cut}"
            );
        }
    }
}

#[test]
fn the_grouped_gated_norm_is_the_references() {
    let Some(b) = backend() else { return };
    let r = RefBackend;
    let (rows, cols, group) = (7, 256, 64);
    let (x, z, w) = (rand(rows * cols, 1, 1.5), rand(rows * cols, 2, 2.0), rand(cols, 3, 1.0));
    let got = b.download(&b.rms_norm_gated_grouped(
        &b.upload(&x, rows, cols),
        &b.upload(&z, rows, cols),
        &b.vec(&w),
        group,
        1e-5,
    ));
    let want =
        r.download(&r.rms_norm_gated_grouped(&r.upload(&x, rows, cols), &r.upload(&z, rows, cols), &w, group, 1e-5));
    let err = max_err(&got, &want);
    assert!(err < 1e-5, "error {err}");
}
