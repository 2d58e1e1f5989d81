//! The CUDA backend's short conv (kernels/short_conv.cu) gives the reference's bits (outputs and
//! the windows left in the slots) over a round of a prefill, a decode row past the window, a
//! chunk shorter than the window and a row of no sequence, for kernels 1 to 7, with and
//! without a bias; and a prompt split at every point equals it whole. Skips without a device.

mod common;

use common::*;
use tf_backend::{AttnMeta, Backend, RefBackend, SeqAttn, ShortConv, StateShape};

/// Channels (not a multiple of the kernel's block of 128).
const CH: usize = 200;

fn meta(seqs: &[(usize, usize, usize)], slots: &[u32]) -> AttnMeta {
    let seqs = seqs
        .iter()
        .map(|&(q_start, q_len, start_pos)| SeqAttn { q_start, q_len, start_pos, block_table: vec![] })
        .collect();
    AttnMeta { seqs, slot_mapping: vec![], block_size: 16, state_slots: slots.to_vec() }
}

fn floats(v: &[u8]) -> Vec<f32> {
    v.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn the_short_conv_is_the_references_bits() {
    let Some(b) = backend() else { return };
    let r = RefBackend;
    for k in 1..=7usize {
        for with_bias in [false, true] {
            let w = rand(CH * k, 40 + k as u64, 0.5);
            let bias = rand(CH, 50, 0.1);
            let (dw, db) = (b.vec(&w), b.vec(&bias));
            let dconv = ShortConv {
                weight: &dw,
                bias: with_bias.then_some(&db),
                host_weight: &w,
                host_bias: with_bias.then_some(&bias[..]),
                kernel: k,
            };
            let rconv = ShortConv {
                weight: &w,
                bias: with_bias.then_some(&bias),
                host_weight: &w,
                host_bias: with_bias.then_some(&bias[..]),
                kernel: k,
            };
            let shape = StateShape { num_slots: 4, conv_channels: CH, conv_width: k - 1, rec_len: 5 };
            let rows = 40;
            let x = rand(rows * 3 * CH, 60 + k as u64, 1.0);
            let init = rand(4 * shape.slot_len(), 70, 0.5);
            let bytes: Vec<u8> = init.iter().flat_map(|v| v.to_le_bytes()).collect();
            // A fresh prefill (30 rows), a decode row, a 2-row chunk, a row of no sequence.
            let m = meta(&[(0, 30, 0), (30, 1, 17), (31, 2, 1)], &[3, 0, 1]);
            let rows = 34;
            let x = &x[..rows * 3 * CH];
            let mut dst = b.state(shape).expect("state");
            b.write_state(&mut dst, &[0, 1, 2, 3], &bytes);
            let mut rst = r.state(shape).expect("state");
            r.write_state(&mut rst, &[0, 1, 2, 3], &bytes);
            let got = b.download(&b.short_conv(&b.upload(x, rows, 3 * CH), &dconv, &mut dst, &m));
            let want = r.download(&r.short_conv(&r.upload(x, rows, 3 * CH), &rconv, &mut rst, &m));
            assert_eq!(got, want, "kernel {k}, bias {with_bias}: outputs");
            let slots = [0, 1, 2, 3];
            assert_eq!(floats(&b.read_state(&dst, &slots)), floats(&r.read_state(&rst, &slots)), "kernel {k}: slots");
            // Split at every point of the first sequence.
            for cut in 1..30 {
                let mut st = b.state(shape).expect("state");
                let a = b.short_conv(
                    &b.upload(&x[..cut * 3 * CH], cut, 3 * CH),
                    &dconv,
                    &mut st,
                    &meta(&[(0, cut, 0)], &[2]),
                );
                let rest = &x[cut * 3 * CH..30 * 3 * CH];
                let c = b.short_conv(
                    &b.upload(rest, 30 - cut, 3 * CH),
                    &dconv,
                    &mut st,
                    &meta(&[(0, 30 - cut, cut)], &[2]),
                );
                let split = [b.download(&a), b.download(&c)].concat();
                assert_eq!(split, want[..30 * CH], "kernel {k}: split at {cut}");
            }
        }
    }
}
