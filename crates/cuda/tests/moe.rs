//! The CUDA backend's mixture of experts: a row's output has the same bits alone (the device
//! path: routing, grouped GEMVs and combine with no host round trip), in batches of up to 64
//! rows (the same path, other experts sharing the GEMVs), and in a batch of more rows (routing
//! downloaded, each expert through the ordinary matmuls); and it is the reference backend's MoE
//! within bf16 tolerance.

mod common;

use common::*;
use tf_backend::{Activation, Backend, Experts, MoeParams, RefBackend};
use tf_core::DType;

/// Experts.
const E: usize = 16;
/// Hidden width: 69 k tiles, two K segments (the grouped GEMV packs four 16-row tiles a block).
const H: usize = 1100;
/// Expert width: 65 k tiles, two segments; 65 row tiles, so the last block packs one.
const I: usize = 1040;
/// Rows of the big batch (past the device path's 64).
const ROWS: usize = 70;

/// Gate, up and down views of `E` experts, seeded by `salt`.
fn experts(salt: u64) -> Experts<tf_formats::TensorView> {
    let mk = |kind: u64, e: usize, rows: usize, cols: usize| {
        let vals = rand(rows * cols, salt * 1000 + kind * 100 + e as u64, 0.2);
        weight("w", DType::BF16, rows, cols, &vals)
    };
    Experts {
        gate: (0..E).map(|e| mk(1, e, I, H)).collect(),
        up: (0..E).map(|e| mk(2, e, I, H)).collect(),
        down: (0..E).map(|e| mk(3, e, H, I)).collect(),
    }
}

/// Router logits with exact ties in some rows (equal logits across experts).
fn router(rows: usize) -> Vec<f32> {
    let mut l = rand(rows * E, 77, 3.0);
    for r in (0..rows).step_by(5) {
        for e in (0..E).step_by(3) {
            l[r * E + e] = 1.25;
        }
    }
    l
}

#[test]
fn moe_rows_equal_alone_in_batches_and_past_the_device_path() {
    let Some(b) = backend() else { return };
    let views = experts(1);
    let load = |v: &Vec<tf_formats::TensorView>| v.iter().map(|t| b.mat(t).expect("bf16 weight")).collect::<Vec<_>>();
    let ex = Experts { gate: load(&views.gate), up: load(&views.up), down: load(&views.down) };
    let r = RefBackend;
    let rload = |v: &Vec<tf_formats::TensorView>| v.iter().map(|t| r.mat(t).expect("ref weight")).collect::<Vec<_>>();
    let rex = Experts { gate: rload(&views.gate), up: rload(&views.up), down: rload(&views.down) };
    let x = rand(ROWS * H, 5, 1.0);
    let logits = router(ROWS);
    for (top_k, norm) in [(4, true), (2, false), (1, true)] {
        let p = MoeParams { top_k, norm_topk_prob: norm, act: Activation::Silu };
        let run = |lo: usize, hi: usize| {
            let xs = b.upload(&x[lo * H..hi * H], hi - lo, H);
            let ls = b.upload(&logits[lo * E..hi * E], hi - lo, E);
            b.download(&b.moe(&xs, &ls, &ex, &p))
        };
        let all = run(0, ROWS);
        let at = |v: &[f32], r: usize| v[r * H..(r + 1) * H].to_vec();
        for (lo, hi) in [(0, 1), (3, 4), (0, 3), (5, 13), (0, 17), (6, 70), (0, 64)] {
            let part = run(lo, hi);
            for r in lo..hi {
                let what = format!("top-{top_k} norm {norm}: row {r} of rows {lo}..{hi} against all {ROWS}");
                assert!(same_bits(&at(&part, r - lo), &at(&all, r)), "{what}");
            }
        }
        let want = r.download(&r.moe(&r.upload(&x, ROWS, H), &r.upload(&logits, ROWS, E), &rex, &p));
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = max_err(&all, &want);
        assert!(scale > 0.0 && err <= 0.03 * scale, "top-{top_k}: {err} against the reference (scale {scale})");
    }
}
