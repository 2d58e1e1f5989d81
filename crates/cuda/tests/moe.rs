//! The CUDA backend's mixture of experts: a row's output has the same bits alone (the device
//! path: routing, grouped GEMVs and combine with no host round trip), in batches of up to 64
//! rows (the same path, other experts sharing the GEMVs), and in a batch of more rows (routing
//! downloaded, each expert through the ordinary matmuls); and it is the reference backend's MoE
//! within bf16 tolerance; for every router variant (softmax top-k; sigmoid with a choice bias,
//! expert groups and scaling; LFM2's eps; ungated relu2 experts; Step's clamped SwiGLU; gpt-oss's
//! experts with biases).

mod common;

use common::*;
use tf_backend::{Activation, Backend, ExpertBiases, Experts, MoeParams, MoeScoring, RefBackend};
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
fn experts(salt: u64) -> Experts<tf_formats::TensorView, Vec<f32>> {
    let mk = |kind: u64, e: usize, rows: usize, cols: usize| {
        let vals = rand(rows * cols, salt * 1000 + kind * 100 + e as u64, 0.2);
        weight("w", DType::BF16, rows, cols, &vals)
    };
    Experts {
        gate: (0..E).map(|e| mk(1, e, I, H)).collect(),
        up: (0..E).map(|e| mk(2, e, I, H)).collect(),
        down: (0..E).map(|e| mk(3, e, H, I)).collect(),
        choice_bias: None,
        biases: None,
        first: 0,
    }
}

/// The router variants: `(name, params, choice bias, gated)`.
fn variants() -> Vec<(&'static str, MoeParams, Option<Vec<f32>>, bool)> {
    let sig = |top_k, n_group, topk_group, norm_eps, act| MoeParams {
        top_k,
        scoring: MoeScoring::Sigmoid,
        n_group,
        topk_group,
        norm_topk_prob: true,
        norm_eps,
        scale: 2.5,
        act,
        clamp: None,
    };
    let bias: Vec<f32> = rand(E, 91, 0.3);
    vec![
        ("softmax top-4 norm", MoeParams::softmax(4, true, Activation::Silu), None, true),
        ("softmax top-2", MoeParams::softmax(2, false, Activation::Silu), None, true),
        ("softmax top-1 norm", MoeParams::softmax(1, true, Activation::Silu), None, true),
        ("sigmoid bias 4 groups top-2 groups top-4", sig(4, 4, 2, 1e-20, Activation::Silu), Some(bias.clone()), true),
        ("sigmoid lfm2 eps top-2", sig(2, 1, 1, 1e-6, Activation::Silu), Some(bias), true),
        ("sigmoid ungated relu2 top-3", sig(3, 1, 1, 1e-20, Activation::Relu2), None, false),
        // Step's experts: the gated activation clamped (`swiglu_limits`), on both expert paths.
        (
            "sigmoid bias clamped 0.8 top-4",
            MoeParams { clamp: Some(0.8), ..sig(4, 1, 1, 1e-20, Activation::Silu) },
            Some(rand(E, 92, 0.3)),
            true,
        ),
        (
            "softmax clamped 7 top-2",
            MoeParams { clamp: Some(7.0), ..MoeParams::softmax(2, true, Activation::Silu) },
            None,
            true,
        ),
    ]
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
    let r = RefBackend;
    let rload = |v: &Vec<tf_formats::TensorView>| v.iter().map(|t| r.mat(t).expect("ref weight")).collect::<Vec<_>>();
    let x = rand(ROWS * H, 5, 1.0);
    let logits = router(ROWS);
    for (name, p, bias, gated) in variants() {
        let gate = if gated { load(&views.gate) } else { Vec::new() };
        let choice_bias = bias.as_ref().map(|v| b.vec(v));
        let ex = Experts { gate, up: load(&views.up), down: load(&views.down), choice_bias, biases: None, first: 0 };
        let gate = if gated { rload(&views.gate) } else { Vec::new() };
        let rex = Experts {
            gate,
            up: rload(&views.up),
            down: rload(&views.down),
            choice_bias: bias.clone(),
            biases: None,
            first: 0,
        };
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
                let what = format!("{name}: row {r} of rows {lo}..{hi} against all {ROWS}");
                assert!(same_bits(&at(&part, r - lo), &at(&all, r)), "{what}");
            }
        }
        let want = r.download(&r.moe(&r.upload(&x, ROWS, H), &r.upload(&logits, ROWS, E), &rex, &p));
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = max_err(&all, &want);
        assert!(scale > 0.0 && err <= 0.03 * scale, "{name}: {err} against the reference (scale {scale})");
    }
}

/// Experts with biases after their projections (gpt-oss: the clamped SwiGLU with `up + 1`,
/// softmax over the top-k logits): each row the same alone as in a batch, and the reference's
/// MoE within bf16 tolerance.
#[test]
fn experts_with_biases_match_the_reference_and_rows_equal_alone() {
    let Some(b) = backend() else { return };
    let r = RefBackend;
    let views = experts(2);
    let load = |v: &Vec<tf_formats::TensorView>| v.iter().map(|t| b.mat(t).expect("bf16 weight")).collect::<Vec<_>>();
    let rload = |v: &Vec<tf_formats::TensorView>| v.iter().map(|t| r.mat(t).expect("ref weight")).collect::<Vec<_>>();
    let bias = |n: usize, salt: u64| (0..E).map(|e| rand(n, salt + e as u64, 0.5)).collect::<Vec<_>>();
    let (bg, bu, bd) = (bias(I, 300), bias(I, 400), bias(H, 500));
    let on_gpu = |v: &[Vec<f32>]| v.iter().map(|x| b.vec(x)).collect::<Vec<_>>();
    let ex = Experts {
        gate: load(&views.gate),
        up: load(&views.up),
        down: load(&views.down),
        choice_bias: None,
        biases: Some(ExpertBiases { gate: on_gpu(&bg), up: on_gpu(&bu), down: on_gpu(&bd) }),
        first: 0,
    };
    let rex = Experts {
        gate: rload(&views.gate),
        up: rload(&views.up),
        down: rload(&views.down),
        choice_bias: None,
        biases: Some(ExpertBiases { gate: bg.clone(), up: bu.clone(), down: bd.clone() }),
        first: 0,
    };
    let p = MoeParams::softmax(4, true, Activation::SwigluOai);
    let x = rand(ROWS * H, 6, 1.0);
    let logits = router(ROWS);
    let run = |lo: usize, hi: usize| {
        let xs = b.upload(&x[lo * H..hi * H], hi - lo, H);
        let ls = b.upload(&logits[lo * E..hi * E], hi - lo, E);
        b.download(&b.moe(&xs, &ls, &ex, &p))
    };
    let all = run(0, ROWS);
    let at = |v: &[f32], row: usize| v[row * H..(row + 1) * H].to_vec();
    for (lo, hi) in [(0, 1), (3, 4), (5, 13), (6, 70)] {
        let part = run(lo, hi);
        for row in lo..hi {
            assert!(same_bits(&at(&part, row - lo), &at(&all, row)), "row {row} of rows {lo}..{hi} against all {ROWS}");
        }
    }
    let want = r.download(&r.moe(&r.upload(&x, ROWS, H), &r.upload(&logits, ROWS, E), &rex, &p));
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = max_err(&all, &want);
    assert!(scale > 0.0 && err <= 0.03 * scale, "{err} against the reference (scale {scale})");
}

/// The ops the MoE mixer adds around `moe`: `activate` (every activation, the expert without a
/// gate), `add_bias` (GLM's q/k/v biases) and `add_sigmoid_scaled` (Qwen3-Next's gated shared
/// expert) against the reference, and each row the same alone as in a batch.
#[test]
fn activate_add_bias_and_add_sigmoid_scaled_match_the_reference() {
    let Some(b) = backend() else { return };
    let r = RefBackend;
    let (rows, cols) = (37, 260);
    let x = rand(rows * cols, 11, 3.0);
    let y = rand(rows * cols, 12, 1.0);
    let g = rand(rows, 13, 4.0);
    let bias = rand(cols, 14, 0.5);
    let close = |got: &[f32], want: &[f32], what: &str| {
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = max_err(got, want);
        assert!(err <= 1e-5 * scale.max(1.0), "{what}: {err} (scale {scale})");
    };
    for act in [Activation::Silu, Activation::GeluTanh, Activation::Relu2] {
        let got = b.download(&b.activate(&b.upload(&x, rows, cols), act));
        let want = r.download(&r.activate(&r.upload(&x, rows, cols), act));
        close(&got, &want, &format!("activate {act:?}"));
    }
    let mut gx = b.upload(&x, rows, cols);
    b.add_bias(&mut gx, &b.vec(&bias));
    let mut rx = r.upload(&x, rows, cols);
    r.add_bias(&mut rx, &r.vec(&bias));
    close(&b.download(&gx), &r.download(&rx), "add_bias");
    let mut gx = b.upload(&x, rows, cols);
    b.add_sigmoid_scaled(&mut gx, &b.upload(&y, rows, cols), &b.upload(&g, rows, 1));
    let mut rx = r.upload(&x, rows, cols);
    r.add_sigmoid_scaled(&mut rx, &r.upload(&y, rows, cols), &r.upload(&g, rows, 1));
    let all = b.download(&gx);
    close(&all, &r.download(&rx), "add_sigmoid_scaled");
    for row in [0, 5, rows - 1] {
        let mut one = b.upload(&x[row * cols..(row + 1) * cols], 1, cols);
        b.add_sigmoid_scaled(
            &mut one,
            &b.upload(&y[row * cols..(row + 1) * cols], 1, cols),
            &b.upload(&g[row..row + 1], 1, 1),
        );
        assert!(same_bits(&b.download(&one), &all[row * cols..(row + 1) * cols]), "add_sigmoid_scaled row {row} alone");
    }
}

/// Experts for the grouped wgmma GEMM: hidden width 960 (60 k tiles, one K segment; 7.5 W
/// blocks of down, so a partial one), expert width 1536 (96 k tiles, three segments).
const GH: usize = 960;
const GI: usize = 1536;
/// Experts of the grouped case, and its rows: 300 rows of top-4 over 8 experts give each
/// expert about 150 pairs (two token tiles, the second partial).
const GE: usize = 8;
const GROWS: usize = 300;

#[test]
fn grouped_gemm_rows_equal_alone_and_the_per_expert_path() {
    // Rounds past 64 rows run every expert in one grouped wgmma GEMM a kind (Hopper,
    // the default), planned on the device to 256 rows and on the host past them: each row must
    // keep the bits it has alone (the grouped GEMV), in smaller batches (65 and 233 rows: the
    // device plan), and through the per-expert matmuls (`CudaOptions::moe_per_expert`).
    let Some(b) = backend() else { return };
    let Some(per) = backend_with(tf_cuda::CudaOptions { moe_per_expert: true, ..Default::default() }) else { return };
    let mk = |kind: u64, e: usize, rows: usize, cols: usize| {
        weight("w", DType::BF16, rows, cols, &rand(rows * cols, 5000 + kind * 100 + e as u64, 0.2))
    };
    let gate: Vec<_> = (0..GE).map(|e| mk(1, e, GI, GH)).collect();
    let up: Vec<_> = (0..GE).map(|e| mk(2, e, GI, GH)).collect();
    let down: Vec<_> = (0..GE).map(|e| mk(3, e, GH, GI)).collect();
    let x = rand(GROWS * GH, 6, 1.0);
    let mut logits = rand(GROWS * GE, 78, 3.0);
    // Most rows prefer the first experts, so expert 7 gets few pairs and one none at some cuts.
    for (i, l) in logits.iter_mut().enumerate() {
        *l -= 0.4 * (i % GE) as f32;
    }
    let sig = MoeParams {
        top_k: 4,
        scoring: MoeScoring::Sigmoid,
        n_group: 2,
        topk_group: 1,
        norm_topk_prob: true,
        norm_eps: 1e-20,
        scale: 2.5,
        act: Activation::Silu,
        clamp: None,
    };
    let cases = [
        ("softmax top-4 norm", MoeParams::softmax(4, true, Activation::Silu), true),
        ("sigmoid 2 groups top-1 group top-4", sig, true),
        (
            "softmax top-2 clamped 7",
            MoeParams { clamp: Some(7.0), ..MoeParams::softmax(2, true, Activation::Silu) },
            true,
        ),
        ("sigmoid ungated relu2 top-3", MoeParams { top_k: 3, n_group: 1, act: Activation::Relu2, ..sig }, false),
    ];
    let r = RefBackend;
    for (name, p, gated) in cases {
        let on = |be: &tf_cuda::CudaBackend, lo: usize, hi: usize| {
            let load = |v: &Vec<tf_formats::TensorView>| v.iter().map(|t| be.mat(t).expect("bf16 weight")).collect();
            let ex = Experts {
                gate: if gated { load(&gate) } else { Vec::new() },
                up: load(&up),
                down: load(&down),
                choice_bias: None,
                biases: None,
                first: 0,
            };
            let xs = be.upload(&x[lo * GH..hi * GH], hi - lo, GH);
            let ls = be.upload(&logits[lo * GE..hi * GE], hi - lo, GE);
            be.download(&be.moe(&xs, &ls, &ex, &p))
        };
        let all = on(&b, 0, GROWS);
        let at = |v: &[f32], r: usize| v[r * GH..(r + 1) * GH].to_vec();
        assert!(same_bits(&all, &on(&per, 0, GROWS)), "{name}: grouped against per-expert, all rows");
        for (lo, hi) in [(0, 1), (131, 132), (299, 300), (10, 74), (0, 65), (17, 250)] {
            let part = on(&b, lo, hi);
            for row in lo..hi {
                let what = format!("{name}: row {row} of rows {lo}..{hi} against all {GROWS}");
                assert!(same_bits(&at(&part, row - lo), &at(&all, row)), "{what}");
            }
        }
        let rload = |v: &Vec<tf_formats::TensorView>| v.iter().map(|t| r.mat(t).expect("ref weight")).collect();
        let rex = Experts {
            gate: if gated { rload(&gate) } else { Vec::new() },
            up: rload(&up),
            down: rload(&down),
            choice_bias: None,
            biases: None,
            first: 0,
        };
        let want = r.download(&r.moe(&r.upload(&x, GROWS, GH), &r.upload(&logits, GROWS, GE), &rex, &p));
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = max_err(&all, &want);
        assert!(scale > 0.0 && err <= 0.03 * scale, "{name}: {err} against the reference (scale {scale})");
    }
}
