//! Norms folded into the weights they feed (fold.rs): every matmul path gives a row the same bits
//! as it gets alone (where the GEMV makes the row's scale itself), and the values stay within
//! bf16 rounding of the unfolded norm then matmul.

mod common;

use common::*;
use tf_backend::{Activation, Backend};
use tf_core::DType;
use tf_cuda::CudaBackend;

/// Rows of each kind of path: one (the GEMV makes the scale), the TMA GEMV with row scales (3,
/// 9, 32), the split wgmma GEMM and its fold (33, 40), the wgmma GEMM (80), its gated store (300).
const ROWS: [usize; 8] = [1, 3, 9, 32, 33, 40, 80, 300];

/// |got - want| within `tol` of the largest |want|.
fn near(got: &[f32], want: &[f32], tol: f32) -> bool {
    let top = want.iter().fold(0.0f32, |a, x| a.max(x.abs()));
    max_err(got, want) <= tol * top
}

#[test]
fn folded_norm_matmuls_equal_alone_and_unfolded_within_bf16() {
    let Some(b) = backend() else { return };
    // 4096 columns: one sixteen-value load a thread; 640 and 5000: partial and several chunks.
    for (cols, one_plus) in [(4096, false), (640, true), (5000, false)] {
        let rows_w = [256, 128, 96];
        let views: Vec<_> = rows_w
            .iter()
            .enumerate()
            .map(|(i, &n)| weight("w", DType::BF16, n, cols, &rand(n * cols, 50 + i as u64, 0.5)))
            .collect();
        let plain: Vec<_> = views.iter().map(|v| b.mat(v).unwrap()).collect();
        let mut folded: Vec<_> = views.iter().map(|v| b.mat(v).unwrap()).collect();
        let nw = b.vec(&rand(cols, 60, 1.0));
        assert!(b.fold_norm(&nw, one_plus, &mut folded.iter_mut().collect::<Vec<_>>()), "bf16 weights fold");
        let (pw, fw): (Vec<_>, Vec<_>) = (plain.iter().collect(), folded.iter().collect());
        for m in ROWS {
            let h = rand(m * cols, 61 + m as u64, 3.0);
            let x = b.upload(&h, m, cols);
            let got: Vec<Vec<f32>> =
                b.norm_matmul_many(&x, &nw, 1e-6, one_plus, &fw).iter().map(|y| b.download(y)).collect();
            let want = b.norm_matmul_many(&x, &nw, 1e-6, one_plus, &pw);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(near(g, &b.download(w), 0.02), "cols={cols} m={m} weight {i}: far from the unfolded norm");
            }
            for r in [0, m / 2, m - 1] {
                let one = b.upload(&h[r * cols..(r + 1) * cols], 1, cols);
                let alone = b.norm_matmul_many(&one, &nw, 1e-6, one_plus, &fw);
                for (i, (a, g)) in alone.iter().zip(&got).enumerate() {
                    let n = rows_w[i];
                    assert!(same_bits(&b.download(a), &g[r * n..(r + 1) * n]), "cols={cols} m={m} row {r} weight {i}");
                }
            }
        }
    }
}

#[test]
fn folded_gate_up_equals_alone_and_unfolded_within_bf16() {
    let Some(b) = backend() else { return };
    let (inter, k) = (1096, 512);
    let (gt, ut) = (
        weight("g", DType::BF16, inter, k, &rand(inter * k, 71, 0.5)),
        weight("u", DType::BF16, inter, k, &rand(inter * k, 72, 0.5)),
    );
    let plain = b.mat_gate_up(&gt, &ut).unwrap().expect("packs");
    let mut folded = b.mat_gate_up(&gt, &ut).unwrap().expect("packs");
    let nw = b.vec(&rand(k, 73, 1.0));
    assert!(b.fold_norm(&nw, false, &mut [&mut folded]), "a packed bf16 weight folds");
    for act in [Activation::Silu, Activation::GeluTanh] {
        for m in ROWS {
            let h = rand(m * k, 74 + m as u64, 3.0);
            let x = b.upload(&h, m, k);
            let got = b.download(&b.norm_matmul_glu(&x, &nw, 1e-6, false, &folded, act));
            let want = b.download(&b.norm_matmul_glu(&x, &nw, 1e-6, false, &plain, act));
            assert!(near(&got, &want, 0.02), "{act:?} m={m}: far from the unfolded norm");
            for r in [0, m / 2, m - 1] {
                let one = b.upload(&h[r * k..(r + 1) * k], 1, k);
                let alone = b.download(&b.norm_matmul_glu(&one, &nw, 1e-6, false, &folded, act));
                assert!(same_bits(&alone, &got[r * inter..(r + 1) * inter]), "{act:?} m={m} row {r}");
            }
        }
    }
}

/// A decode step's chain: the residual add's GEMV writes h's bf16 copy, which the next folded
/// matmul reads; it must hold what a fresh conversion of h gives.
#[test]
fn residual_add_leaves_the_bf16_copy_folded_matmuls_read() {
    let Some(b): Option<CudaBackend> = backend() else { return };
    let (n, k) = (4096, 1024);
    let o = b.mat(&weight("o", DType::BF16, n, k, &rand(n * k, 81, 0.5))).unwrap();
    let mut q = b.mat(&weight("q", DType::BF16, 512, n, &rand(512 * n, 82, 0.5))).unwrap();
    let nw = b.vec(&rand(n, 83, 1.0));
    assert!(b.fold_norm(&nw, false, &mut [&mut q]));
    for m in [1, 5, 32] {
        let mut h = b.upload(&rand(m * n, 84 + m as u64, 2.0), m, n);
        b.matmul_add(&b.upload(&rand(m * k, 85, 1.0), m, k), &o, &mut h);
        let via_copy = b.download(&b.norm_matmul_many(&h, &nw, 1e-6, false, &[&q])[0]);
        let fresh = b.upload(&b.download(&h), m, n);
        let via_fresh = b.download(&b.norm_matmul_many(&fresh, &nw, 1e-6, false, &[&q])[0]);
        assert!(same_bits(&via_copy, &via_fresh), "m={m}: the store's bf16 copy differs from h's");
    }
}
