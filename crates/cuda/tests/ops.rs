//! Every CUDA op against the scalar reference backend on random data (odd sizes included), and
//! the exactness properties of the matmul and attention kernels: a row's result is the same bits
//! whatever the row count, its position in the batch, or the kernel that ran it.

mod common;

use common::*;
use tf_backend::rope::RopeScaling;
use tf_backend::{Activation, AttnMeta, AttnParams, Backend, KvShape, QkNorm, RefBackend, Rope, Round, SeqAttn};
use tf_core::DType;

/// `x @ W^T` in f64 with x rounded to bf16 (what the tensor-core path multiplies), and the sum of
/// |products| per output for a rounding bound.
fn bf16_matmul_ref(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> (Vec<f32>, Vec<f32>) {
    let mut y = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for t in 0..m {
        for o in 0..n {
            let (mut s, mut a) = (0f64, 0f64);
            for i in 0..k {
                let p = bf16_round(x[t * k + i]) as f64 * bf16_round(w[o * k + i]) as f64;
                s += p;
                a += p.abs();
            }
            y[t * n + o] = s as f32;
            mag[t * n + o] = a as f32;
        }
    }
    (y, mag)
}

#[test]
fn bf16_matmul_matches_reference_and_rows_are_invariant() {
    let Some(b) = backend() else { return };
    bf16_matmul_case(&b);
}

fn bf16_matmul_case(b: &tf_cuda::CudaBackend) {
    // (64, 1040): K segments end inside the wgmma GEMM's 64-wide blocks, so the tiled GEMM runs.
    for (n, k) in [(80, 200), (128, 64), (64, 128), (512, 64), (48, 1000), (1024, 4096), (32, 5000), (64, 1040)] {
        let w = rand(n * k, 1 + n as u64, 0.5);
        let wm = b.mat(&weight("w", DType::BF16, n, k, &w)).unwrap();
        let big = 300;
        let x = rand((big + 7) * k, 99 + k as u64, 1.0);
        let full = b.download(&b.matmul(&b.upload(&x[..big * k], big, k), &wm));
        let (want, mag) = bf16_matmul_ref(&x[..big * k], &w, big, n, k);
        for i in 0..big * n {
            let tol = 1e-5 * mag[i] + 1e-6;
            assert!((full[i] - want[i]).abs() <= tol, "{n}x{k} element {i}: {} vs {} (tol {tol})", full[i], want[i]);
        }
        for m in [1, 2, 5, 8, 9, 17, 33, 64, 65, 130, 293] {
            let y = b.download(&b.matmul(&b.upload(&x[..m * k], m, k), &wm));
            assert!(same_bits(&y, &full[..m * n]), "{n}x{k}: rows of a {m}-row call differ from the {big}-row call");
            let ys = b.download(&b.matmul(&b.upload(&x[7 * k..(7 + m) * k], m, k), &wm));
            assert!(same_bits(&ys, &full[7 * n..(7 + m) * n]), "{n}x{k}: rows shifted by 7 in a {m}-row call differ");
        }
    }
}

#[test]
fn matmul_many_equals_one_matmul_per_weight() {
    let Some(b) = backend() else { return };
    let k = 200;
    let ws: Vec<_> = [(96, 1), (32, 2), (48, 3), (80, 4)]
        .iter()
        .map(|&(n, seed)| b.mat(&weight("w", DType::BF16, n, k, &rand(n * k, seed, 0.5))).unwrap())
        .collect();
    let refs: Vec<_> = ws.iter().collect();
    for m in [1, 3, 8, 9, 17, 33, 64, 65] {
        let x = b.upload(&rand(m * k, 40 + m as u64, 1.0), m, k);
        let many = b.matmul_many(&x, &refs);
        assert_eq!(many.len(), ws.len());
        for (w, y) in ws.iter().zip(&many) {
            assert!(same_bits(&b.download(y), &b.download(&b.matmul(&x, w))), "m={m}: shared launch differs");
        }
    }
}

#[test]
fn packed_gate_up_equals_glu_of_two_matmuls() {
    // The TMA GEMVs with the activation in their store from 2 to 32 rows, one row apart.
    let Some(b) = backend() else { return };
    packed_gate_up_case(&b);
}

fn packed_gate_up_case(b: &tf_cuda::CudaBackend) {
    // Every path of matmul_glu: TMA GEMVs (1-32 rows: 1-8, 9-16, 17-32), the wgmma GEMM with the
    // activation in its store (33+; 200 and 1096 rows end mid W block), the tiled GEMM (K = 200
    // is not whole 64-wide blocks); `glu_packed` of the plain product (split wgmma to 64 rows):
    // each result (bf16 only) must equal glu of the two plain matmuls rounded to bf16, and feed
    // the down projection the same bits.
    for (inter, k) in [(200, 256), (1096, 512), (64, 200)] {
        let (gt, ut) = (
            weight("g", DType::BF16, inter, k, &rand(inter * k, 21, 0.5)),
            weight("u", DType::BF16, inter, k, &rand(inter * k, 22, 0.5)),
        );
        let gu = b.mat_gate_up(&gt, &ut).unwrap().expect("bf16 gate/up with whole groups packs");
        let (g, u) = (b.mat(&gt).unwrap(), b.mat(&ut).unwrap());
        let down = b.mat(&weight("d", DType::BF16, 48, inter, &rand(48 * inter, 24, 0.5))).unwrap();
        let nw = b.vec(&rand(k, 25, 1.0));
        for act in [Activation::Silu, Activation::GeluTanh, Activation::SwigluOai] {
            for m in [1, 3, 8, 12, 20, 32, 33, 64, 130, 300, 700] {
                let x = b.upload(&rand(m * k, 23 + m as u64, 1.0), m, k);
                let want = b.glu(&b.matmul(&x, &g), &b.matmul(&x, &u), act);
                let normed = b.rms_norm(&x, &nw, 1e-6, false);
                let want_n = b.glu(&b.matmul(&normed, &g), &b.matmul(&normed, &u), act);
                let cases = [
                    ("matmul_glu", b.matmul_glu(&x, &gu, act), &want),
                    ("glu_packed", b.glu_packed(&b.matmul(&x, &gu), act), &want),
                    ("norm_matmul_glu", b.norm_matmul_glu(&x, &nw, 1e-6, false, &gu, act), &want_n),
                ];
                for (what, got, want) in cases {
                    let at = format!("{what} inter={inter} k={k} {act:?} m={m}");
                    let rounded: Vec<f32> = b.download(want).into_iter().map(bf16_round).collect();
                    assert!(same_bits(&b.download(&got), &rounded), "{at}: values differ");
                    let (p, q) = (b.download(&b.matmul(&got, &down)), b.download(&b.matmul(want, &down)));
                    assert!(same_bits(&p, &q), "{at}: bf16 copies differ");
                }
            }
        }
    }
    let odd = weight("g", DType::BF16, 12, 64, &rand(12 * 64, 26, 0.5));
    assert!(b.mat_gate_up(&odd, &odd).unwrap().is_none(), "12 rows are not whole groups of 8");
}

#[test]
fn matmul_add_equals_matmul_then_add() {
    let Some(b) = backend() else { return };
    matmul_add_case(&b);
}

fn matmul_add_case(b: &tf_cuda::CudaBackend) {
    // Each matmul kernel's store adds into h: the one-row TMA GEMV (the row in shared memory), the
    // few-row TMA GEMV, split and whole wgmma GEMM, tiled GEMM (K past a 64-wide block), plain f32
    // weights.
    for (n, k, dt) in [
        (1024, 4096, DType::BF16),
        (4224, 12288, DType::BF16),
        (80, 200, DType::BF16),
        (64, 1040, DType::BF16),
        (48, 96, DType::F32),
    ] {
        let w = b.mat(&weight("w", dt, n, k, &rand(n * k, 11 + n as u64, 0.5))).unwrap();
        for m in [1, 2, 8, 33, 64, 130] {
            let (x, h0) = (b.upload(&rand(m * k, 12 + m as u64, 1.0), m, k), rand(m * n, 13, 2.0));
            let mut fused = b.upload(&h0, m, n);
            b.matmul_add(&x, &w, &mut fused);
            let mut apart = b.upload(&h0, m, n);
            b.add_assign(&mut apart, &b.matmul(&x, &w));
            assert!(same_bits(&b.download(&fused), &b.download(&apart)), "{n}x{k} {dt:?} m={m}: fused add differs");
        }
    }
}

#[test]
fn norm_in_the_matmul_equals_norm_then_matmul() {
    // The norm kernel runs first (1-9 rows). Rows must equal the same rows normed among 80 (the
    // quarter-size prefill blocks) and multiplied among them.
    let Some(b) = backend() else { return };
    let counts: &[usize] = &[1, 3, 8, 9];
    for cols in [4096, 2048, 640, 64, 8192, 1536] {
        let ws: Vec<_> = [(96, 1u64), (48, 2), (160, 3)]
            .iter()
            .map(|&(n, seed)| b.mat(&weight("w", DType::BF16, n, cols, &rand(n * cols, seed, 0.5))).unwrap())
            .collect();
        let refs: Vec<_> = ws.iter().collect();
        let nw = b.vec(&rand(cols, 14, 1.0));
        let rows = 80;
        let h = rand(rows * cols, 15, 2.0);
        for one_plus in [false, true] {
            let many = b.matmul_many(&b.rms_norm(&b.upload(&h, rows, cols), &nw, 1e-6, one_plus), &refs);
            for (&c, r) in counts.iter().flat_map(|c| [0, 37, 71].map(move |r| (c, r))) {
                let x = b.upload(&h[r * cols..(r + c) * cols], c, cols);
                let fused = b.norm_matmul_many(&x, &nw, 1e-6, one_plus, &refs);
                for ((f, m), w) in fused.iter().zip(&many).zip(&ws) {
                    let n = w.shape().0;
                    let want = &b.download(m)[r * n..(r + c) * n];
                    assert!(
                        same_bits(&b.download(f), want),
                        "cols={cols} one_plus={one_plus} rows {r}..{}: {n} outputs differ",
                        r + c
                    );
                }
            }
        }
    }
}

#[test]
fn many_rows_normed_for_matmuls_equal_norm_then_matmul() {
    // Prefill rows normed for bf16 matmuls only keep the bf16 copy; f32 weights read the f32 rows.
    let Some(b) = backend() else { return };
    let cols = 256;
    let nw = b.vec(&rand(cols, 41, 1.0));
    for dt in [DType::BF16, DType::F32] {
        let w = b.mat(&weight("w", dt, 96, cols, &rand(96 * cols, 42, 0.5))).unwrap();
        for rows in [65, 300] {
            let x = b.upload(&rand(rows * cols, 43 + rows as u64, 2.0), rows, cols);
            let fused = b.norm_matmul_many(&x, &nw, 1e-6, false, &[&w]);
            let apart = b.matmul_many(&b.rms_norm(&x, &nw, 1e-6, false), &[&w]);
            assert!(same_bits(&b.download(&fused[0]), &b.download(&apart[0])), "{dt:?} rows={rows}: differs");
        }
    }
}

#[test]
fn fused_add_norm_equals_add_then_norm() {
    let Some(b) = backend() else { return };
    for (rows, cols) in [(1, 4096), (3, 640), (5, 20000), (2, 96)] {
        let (h0, a) = (rand(rows * cols, 5, 2.0), rand(rows * cols, 6, 1.0));
        let w = b.vec(&rand(cols, 7, 1.0));
        let mut h1 = b.upload(&h0, rows, cols);
        let y1 = b.add_rms_norm(&mut h1, &b.upload(&a, rows, cols), &w, 1e-6, true);
        let mut h2 = b.upload(&h0, rows, cols);
        b.add_assign(&mut h2, &b.upload(&a, rows, cols));
        let y2 = b.rms_norm(&h2, &w, 1e-6, true);
        assert!(same_bits(&b.download(&h1), &b.download(&h2)), "{rows}x{cols}: residual sums differ");
        assert!(same_bits(&b.download(&y1), &b.download(&y2)), "{rows}x{cols}: norms differ");
    }
}

#[test]
fn norm_rows_do_not_depend_on_the_row_count() {
    let Some(b) = backend() else { return };
    // Over 64 rows run on quarter-size blocks (prefill), one row on full ones (decode; up to 4096
    // values the `_j4` kernels, past them the sixteen-value ones), 40 rows on full blocks of the
    // sixteen-value ones: same bits.
    for cols in [4096, 640, 512, 20000, 96] {
        let rows = 80;
        let (h0, a) = (rand(rows * cols, 8, 2.0), rand(rows * cols, 9, 1.0));
        let w = b.vec(&rand(cols, 10, 1.0));
        let mut many = b.upload(&h0, rows, cols);
        let y_many = b.download(&b.add_rms_norm(&mut many, &b.upload(&a, rows, cols), &w, 1e-6, false));
        let n_many = b.download(&b.rms_norm(&b.upload(&h0, rows, cols), &w, 1e-6, true));
        for r in [0, 41, 79] {
            let row = |v: &[f32]| v[r * cols..(r + 1) * cols].to_vec();
            let mut one = b.upload(&row(&h0), 1, cols);
            let y_one = b.download(&b.add_rms_norm(&mut one, &b.upload(&row(&a), 1, cols), &w, 1e-6, false));
            assert!(same_bits(&y_one, &row(&y_many)), "cols={cols} row {r}: add_rms_norm differs");
            assert!(same_bits(&b.download(&one), &row(&b.download(&many))), "cols={cols} row {r}: residual");
            let n_one = b.download(&b.rms_norm(&b.upload(&row(&h0), 1, cols), &w, 1e-6, true));
            assert!(same_bits(&n_one, &row(&n_many)), "cols={cols} row {r}: rms_norm differs");
        }
        let n40 = b.download(&b.rms_norm(&b.upload(&h0[..40 * cols], 40, cols), &w, 1e-6, true));
        assert!(same_bits(&n40, &n_many[..40 * cols]), "cols={cols}: 40 rows differ");
    }
}

#[test]
fn fused_qk_norm_rope_equals_norms_then_rope() {
    let Some(b) = backend() else { return };
    // (rows, q heads, k heads, head_dim, rotary width, with norms)
    // Many rows: each warp takes several heads of its row in turn (ops.rs `qk_heads_per_warp`; on
    // 132 SMs 9 and 2 here, with partial last turns).
    for (rows, nq, nk, d, rot, norm) in
        [(3, 8, 2, 128, 128, true), (2, 4, 1, 256, 256, true), (5, 4, 4, 64, 32, true), (1, 6, 2, 16, 16, true)]
            .into_iter()
            .chain([(4, 4, 2, 128, 128, false), (2000, 32, 8, 128, 128, true), (3000, 6, 1, 64, 32, true)])
            .chain([(2500, 4, 2, 128, 64, false)])
    {
        let rope = Rope::new(rot, 10000.0, &RopeScaling::Default);
        let pos: Vec<u32> = (0..rows as u32).map(|r| 7 + 13 * r).collect();
        let (qv, kv) = (rand(rows * nq * d, 1, 2.0), rand(rows * nk * d, 2, 2.0));
        let (wq, wk) = (b.vec(&rand(d, 3, 1.0)), b.vec(&rand(d, 4, 1.0)));
        let norms = norm.then_some(tf_backend::QkNorm { q: &wq, k: &wk, eps: 1e-6, one_plus: false });
        let (mut q1, mut k1) = (b.upload(&qv, rows, nq * d), b.upload(&kv, rows, nk * d));
        b.qk_norm_rope(&mut q1, &mut k1, norms, &pos, d, &rope);
        let (mut q2, mut k2) = (b.upload(&qv, rows, nq * d), b.upload(&kv, rows, nk * d));
        if norm {
            q2 = b.rms_norm(&q2, &wq, 1e-6, false);
            k2 = b.rms_norm(&k2, &wk, 1e-6, false);
        }
        b.rope(&mut q2, &pos, d, &rope);
        b.rope(&mut k2, &pos, d, &rope);
        assert!(same_bits(&b.download(&q1), &b.download(&q2)), "d={d} norm={norm}: q differs");
        assert!(same_bits(&b.download(&k1), &b.download(&k2)), "d={d} norm={norm}: k differs");
    }
}

#[test]
fn plain_matmuls_match_reference() {
    let Some(b) = backend() else { return };
    let r = RefBackend;
    for dtype in [DType::F16, DType::F32] {
        let (m, n, k) = (13, 37, 70);
        let w = weight("w", dtype, n, k, &rand(n * k, 5, 0.5));
        let x = rand(m * k, 6, 1.0);
        let got = b.download(&b.matmul(&b.upload(&x, m, k), &b.mat(&w).unwrap()));
        let want = r.download(&r.matmul(&r.upload(&x, m, k), &r.mat(&w).unwrap()));
        assert!(max_err(&got, &want) < 1e-5, "{dtype:?}: {}", max_err(&got, &want));
    }
}

#[test]
fn f32_matmul_rows_do_not_depend_on_the_row_count() {
    // The f32 / f16 GEMM (MoE routers) has two variants, for few rows and many; a row's bits
    // must be the same in either and at any position. k not a multiple of 4 takes the scalar
    // loads, k of 100 a partial chunk, 7168 DeepSeek-sized rows.
    let Some(b) = backend() else { return };
    for (dtype, n, k) in [(DType::F32, 128, 2048), (DType::F32, 37, 70), (DType::F16, 64, 100), (DType::F32, 256, 7168)]
    {
        let wv = rand(n * k, 11 + k as u64, 0.5);
        let wm = b.mat(&weight("w", dtype, n, k, &wv)).unwrap();
        let big = 200;
        let x = rand((big + 5) * k, 12 + n as u64, 1.0);
        let full = b.download(&b.matmul(&b.upload(&x[..big * k], big, k), &wm));
        let wr: Vec<f32> = match dtype {
            DType::F16 => wv.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect(),
            _ => wv.clone(),
        };
        for t in 0..big {
            for o in 0..n {
                let (s, a) = (0..k).fold((0f64, 0f64), |(s, a), i| {
                    let p = x[t * k + i] as f64 * wr[o * k + i] as f64;
                    (s + p, a + p.abs())
                });
                let got = full[t * n + o] as f64;
                assert!((got - s).abs() <= 1e-6 * a + 1e-7, "{dtype:?} {n}x{k} ({t}, {o}): {got} vs {s}");
            }
        }
        for m in [1, 2, 4, 5, 16, 17, 64, 130] {
            let y = b.download(&b.matmul(&b.upload(&x[..m * k], m, k), &wm));
            assert!(same_bits(&y, &full[..m * n]), "{dtype:?} {n}x{k}: a {m}-row call differs from the {big}-row call");
            let ys = b.download(&b.matmul(&b.upload(&x[5 * k..(5 + m) * k], m, k), &wm));
            assert!(
                same_bits(&ys, &full[5 * n..(5 + m) * n]),
                "{dtype:?} {n}x{k}: rows shifted by 5 in {m} rows differ"
            );
        }
    }
}

#[test]
fn an_f32_router_reads_a_bf16_weight_exactly() {
    // mat_f32 widens a bf16 router to f32: its products are the bf16 values times f32 inputs.
    let Some(b) = backend() else { return };
    let (m, n, k) = (3, 128, 2048);
    let w = rand(n * k, 21, 0.5);
    let wm = b.mat_f32(&weight("router", DType::BF16, n, k, &w)).unwrap();
    let x = rand(m * k, 22, 1.0);
    let got = b.download(&b.matmul(&b.upload(&x, m, k), &wm));
    for t in 0..m {
        for o in 0..n {
            let s: f64 = (0..k).map(|i| x[t * k + i] as f64 * bf16_round(w[o * k + i]) as f64).sum();
            let a: f64 = (0..k).map(|i| (x[t * k + i] as f64 * bf16_round(w[o * k + i]) as f64).abs()).sum();
            assert!((got[t * n + o] as f64 - s).abs() <= 1e-6 * a + 1e-7, "({t}, {o}): {} vs {s}", got[t * n + o]);
        }
    }
}

#[test]
fn row_ops_match_reference() {
    let Some(b) = backend() else { return };
    let r = RefBackend;
    let (rows, cols) = (5, 96);
    let x = rand(rows * cols, 11, 2.0);
    let y = rand(rows * cols, 12, 2.0);
    let close = |got: Vec<f32>, want: Vec<f32>, what: &str| {
        let e = max_err(&got, &want);
        assert!(e < 2e-5, "{what}: max error {e}");
    };
    for (group, one_plus) in [(96, false), (32, true), (16, false)] {
        let w = rand(group, 13, 1.0);
        close(
            b.download(&b.rms_norm(&b.upload(&x, rows, cols), &b.vec(&w), 1e-6, one_plus)),
            r.download(&r.rms_norm(&r.upload(&x, rows, cols), &r.vec(&w), 1e-6, one_plus)),
            "rms_norm",
        );
    }
    for act in [Activation::Silu, Activation::GeluTanh] {
        close(
            b.download(&b.glu(&b.upload(&x, rows, cols), &b.upload(&y, rows, cols), act)),
            r.download(&r.glu(&r.upload(&x, rows, cols), &r.upload(&y, rows, cols), act)),
            "glu",
        );
        // 15 columns: the kernel's one-value-a-thread path (96 takes four at a time).
        let (gx, gy) = (&x[..rows * 15], &y[..rows * 15]);
        close(
            b.download(&b.glu(&b.upload(gx, rows, 15), &b.upload(gy, rows, 15), act)),
            r.download(&r.glu(&r.upload(gx, rows, 15), &r.upload(gy, rows, 15), act)),
            "glu, 15 columns",
        );
    }
    let (mut xb, mut xr) = (b.upload(&x, rows, cols), r.upload(&x, rows, cols));
    b.add_assign(&mut xb, &b.upload(&y, rows, cols));
    r.add_assign(&mut xr, &r.upload(&y, rows, cols));
    close(b.download(&xb), r.download(&xr), "add_assign");
    b.softcap(&mut xb, 3.0);
    r.softcap(&mut xr, 3.0);
    close(b.download(&xb), r.download(&xr), "softcap");
    let pick = [4, 0, 4, 2];
    close(b.download(&b.select_rows(&xb, &pick)), r.download(&r.select_rows(&xr, &pick)), "select_rows");
    let llama3 = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 64.0,
    };
    for (head_dim, rope) in [(32, Rope::new(32, 10000.0, &RopeScaling::Default)), (16, Rope::new(8, 500000.0, &llama3))]
    {
        let pos = [0u32, 3, 17, 250, 1000];
        let (mut qb, mut qr) = (b.upload(&x, rows, cols), r.upload(&x, rows, cols));
        b.rope(&mut qb, &pos, head_dim, &rope);
        r.rope(&mut qr, &pos, head_dim, &rope);
        let e = max_err(&b.download(&qb), &r.download(&qr));
        assert!(e < 2e-4, "rope head_dim {head_dim}: max error {e}");
    }
    // 4500 columns: a thread's second turn of 16 loads is partial (kernels/ops.cu `EMBED_J`).
    for ((vocab, hidden), dtype) in
        [(50, 40), (20, 4500)].into_iter().flat_map(|s| [DType::BF16, DType::F16, DType::F32].map(|d| (s, d)))
    {
        let t = weight("embed", dtype, vocab, hidden, &rand(vocab * hidden, 21, 1.0));
        let ids = [3u32, 19, 0, 3, 17];
        close(
            b.download(&b.embed(&b.mat(&t).unwrap(), &ids, 1.5)),
            r.download(&r.embed(&r.mat(&t).unwrap(), &ids, 1.5)),
            "embed",
        );
    }
}

/// A paged round: `(start_pos, q_len)` per sequence, each with its own scattered block table.
fn round(seqs: &[(usize, usize)], block_size: usize, blocks_per_seq: usize) -> AttnMeta {
    let mut meta = AttnMeta { state_slots: Vec::new(), seqs: Vec::new(), slot_mapping: Vec::new(), block_size };
    let mut q_start = 0;
    for (i, &(start_pos, q_len)) in seqs.iter().enumerate() {
        // Interleave sequences' blocks in the pool so tables are not contiguous.
        let block_table: Vec<u32> =
            (0..blocks_per_seq).map(|j| (j * seqs.len() + (seqs.len() - 1 - i)) as u32).collect();
        meta.slot_mapping.extend(
            (start_pos..start_pos + q_len).map(|p| block_table[p / block_size] as usize * block_size + p % block_size),
        );
        meta.seqs.push(SeqAttn { q_start, q_len, start_pos, block_table });
        q_start += q_len;
    }
    meta
}

/// Runs `rounds` (the first a prefill) through `forward_round` as a decoder's layers do: each
/// embeds its ids, projects q/k/v, normalizes and rotates them, attends (split across CTAs past
/// 256 keys) and projects o; the last row of each sequence is read back after the recorded part.
/// The ops read the round they are handed (a recording backend may pad it). With `fed`, each
/// round's ids reach it as the engine's overlapped rounds feed them: picked on the device (the
/// argmax of one-hot rows, in reverse order) and named by row (`Round::held`).
fn run_rounds(b: &tf_cuda::CudaBackend, rounds: &[AttnMeta], num_blocks: usize, fed: bool) -> Vec<Vec<f32>> {
    run_layered_rounds(b, rounds, num_blocks, fed, &[(8, 2, 128)])
}

/// One attention layer of [`run_layered_rounds`]: its projections, norms, rope and pool shape.
struct Layer {
    p: AttnParams,
    w: [tf_cuda::CudaMat; 4],
    norms: [tf_cuda::CudaVec; 2],
    rope: Rope,
}

/// [`run_rounds`] through a layer a `(query heads, KV heads, head width)` of `layers`, each over
/// a KV pool of its own shape, the next layer reading the previous one's output (the round's
/// group is the first layer's).
fn run_layered_rounds(
    b: &tf_cuda::CudaBackend,
    rounds: &[AttnMeta],
    num_blocks: usize,
    fed: bool,
    layers: &[(usize, usize, usize)],
) -> Vec<Vec<f32>> {
    let (hidden, vocab, bs) = (256, 64, 16);
    let w = |name, rows, cols, seed| b.mat(&weight(name, DType::BF16, rows, cols, &rand(rows * cols, seed, 0.5)));
    let table = w("e", vocab, hidden, 1).unwrap();
    let layers: Vec<Layer> = (layers.iter().enumerate())
        .map(|(l, &(h, kvh, d))| {
            let s = 10 * l as u64;
            Layer {
                p: AttnParams {
                    num_heads: h,
                    num_kv_heads: kvh,
                    head_dim: d,
                    scale: 0.088,
                    window: None,
                    softcap: None,
                },
                w: [
                    w("q", h * d, hidden, 2 + s).unwrap(),
                    w("k", kvh * d, hidden, 3 + s).unwrap(),
                    w("v", kvh * d, hidden, 4 + s).unwrap(),
                    w("o", hidden, h * d, 5 + s).unwrap(),
                ],
                norms: [b.vec(&rand(d, 9 + s, 1.0)), b.vec(&rand(d, 10 + s, 1.0))],
                rope: Rope::new(d, 10000.0, &RopeScaling::Default),
            }
        })
        .collect();
    let model = [b.fresh_id(), 1];
    let mut kv: Vec<_> = (layers.iter())
        .map(|l| {
            let (num_kv_heads, head_dim) = (l.p.num_kv_heads, l.p.head_dim);
            b.kv(KvShape { num_blocks, block_size: bs, num_kv_heads, head_dim, latent: false }).unwrap()
        })
        .collect();
    let group = layers[0].p.num_heads / layers[0].p.num_kv_heads;
    let mut outs = Vec::new();
    for (step, meta) in rounds.iter().enumerate() {
        let t = meta.slot_mapping.len();
        let ids: Vec<u32> = (0..t).map(|i| ((step * 7 + i * 3) % vocab) as u32).collect();
        let positions = meta.positions();
        let rows: Vec<usize> = meta.seqs.iter().map(|s| s.q_start + s.q_len - 1).collect();
        let mut onehot = vec![0.0f32; t * vocab];
        for (i, &id) in ids.iter().rev().enumerate() {
            onehot[i * vocab + id as usize] = 1.0;
        }
        let held = fed.then(|| b.argmax_rows_held(&b.upload(&onehot, t, vocab)));
        let picks: Vec<u32> = (0..t as u32).rev().collect();
        if let Some(h) = &held {
            assert_eq!(b.held_ids(h), ids.iter().rev().copied().collect::<Vec<_>>(), "round {step}: held ids");
        }
        let (ids, held) = if fed { (&picks, held.as_ref()) } else { (&ids, None) };
        let r = Round { replayable: true, model, ids, held, positions: &positions, meta, group };
        let out = b.forward_round(&r, &mut kv, &mut |r, kv| {
            let mut x = match r.held {
                Some(held) => b.embed_held(&table, held, r.ids, 1.0),
                None => b.embed(&table, r.ids, 1.0),
            };
            for (l, pool) in layers.iter().zip(kv.iter_mut()) {
                let [wq, wk, wv, wo] = &l.w;
                let [mut q, mut k, v]: [_; 3] = b.matmul_many(&x, &[wq, wk, wv]).try_into().ok().unwrap();
                let norms = QkNorm { q: &l.norms[0], k: &l.norms[1], eps: 1e-6, one_plus: false };
                b.qk_norm_rope(&mut q, &mut k, Some(norms), r.positions, l.p.head_dim, &l.rope);
                let a = b.attention(&q, &k, &v, pool, r.meta, &l.p);
                x = b.matmul(&a, wo);
            }
            x
        });
        assert_eq!(b.shape(&out).0, t, "round {step}: the round's own rows come back");
        outs.push(b.download(&b.select_rows(&out, &rows)));
    }
    outs
}

/// Whether two runs' outputs are equal bit for bit, naming the first round that is not.
fn same_rounds(got: &[Vec<f32>], want: &[Vec<f32>], what: &str) {
    for (step, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}, round {step}");
    }
}

/// Decode rounds replayed from CUDA graph recordings (graph.rs) give the bits of the same rounds
/// run op by op while contexts grow across 16-token blocks and the 256-key chunk, for one
/// sequence and for three (recorded padded to four rows, graph_pad.rs), on a recording backend
/// and on one that never records.
#[test]
fn recorded_decode_rounds_equal_op_by_op() {
    let (Some(on), Some(off)) = (backend(), backend_no_graphs()) else { return };
    let (bs, blocks) = (16, 24);
    for starts in [vec![230usize], vec![250, 17, 300]] {
        let n = starts.len();
        // Round 0 fills each sequence's history (a prefill round: never recorded).
        let rounds: Vec<AttnMeta> = (0..=70)
            .map(|step| {
                let seqs: Vec<(usize, usize)> =
                    starts.iter().map(|&s| if step == 0 { (0, s) } else { (s + step - 1, 1) }).collect();
                round(&seqs, bs, blocks)
            })
            .collect();
        let want = run_rounds(&off, &rounds, blocks * n, false);
        same_rounds(&run_rounds(&on, &rounds, blocks * n, false), &want, &format!("{n} rows"));
        let (captures, replays) = on.graph_counts();
        eprintln!("{n} rows: {captures} captures, {replays} replays so far");
        assert!(replays > 40 * n.min(2) && captures >= 2, "{captures} captures, {replays} replays");
        // Ids held on the device and named by row: replayed, captured and op by op alike.
        same_rounds(&run_rounds(&on, &rounds, blocks * n, true), &want, &format!("{n} rows, held ids"));
        same_rounds(&run_rounds(&off, &rounds, blocks * n, true), &want, &format!("{n} rows, held ids, no graphs"));
        let (c2, r2) = on.graph_counts();
        // 70 rounds a run, at least 40 of them replayed, from recordings of its own (two at one
        // row, which crosses the 256-key chunk; one at three, already past it).
        assert!(r2 > replays + 40 && c2 > captures, "held: {c2} captures, {r2} replays");
        assert_eq!(off.graph_counts(), (0, 0));
    }
}

/// A model whose layers' KV pools differ in KV heads and head width (Gemma 4's sliding and full
/// layers; Step's layers differ in query heads a KV head): decode rounds recorded (three rows
/// padded to four, the pad rows in each pool's scratch block) and replayed give the bits of the
/// same rounds run op by op, the layers' metadata packings found in the recording's inputs.
#[test]
fn recorded_rounds_over_pools_of_several_shapes_equal_op_by_op() {
    let (Some(on), Some(off)) = (backend(), backend_no_graphs()) else { return };
    let (bs, blocks) = (16, 24);
    // Groups 4, 8 and 2; widths 128, 64 and 32.
    let layers = [(8, 2, 128), (8, 1, 64), (4, 2, 32)];
    let starts = [250usize, 17, 300];
    let rounds: Vec<AttnMeta> = (0..=40)
        .map(|step| {
            let seqs: Vec<(usize, usize)> =
                starts.iter().map(|&s| if step == 0 { (0, s) } else { (s + step - 1, 1) }).collect();
            round(&seqs, bs, blocks)
        })
        .collect();
    let want = run_layered_rounds(&off, &rounds, blocks * 3, false, &layers);
    same_rounds(&run_layered_rounds(&on, &rounds, blocks * 3, false, &layers), &want, "three shapes");
    let (captures, replays) = on.graph_counts();
    assert!(captures >= 1 && replays > 30, "{captures} captures, {replays} replays");
    same_rounds(&run_layered_rounds(&on, &rounds, blocks * 3, true, &layers), &want, "three shapes, held ids");
}

/// Attention layers of two pool shapes interleaved over the same rounds (their metadata packed
/// apart: other query heads a KV head) give the bits each gives alone, within bf16 of the
/// reference.
#[test]
fn attention_over_pools_of_two_shapes_in_one_round_equals_each_alone() {
    let Some(b) = backend() else { return };
    let p = |h, kvh, d: usize, window| AttnParams {
        num_heads: h,
        num_kv_heads: kvh,
        head_dim: d,
        scale: 1.0,
        window,
        softcap: None,
    };
    // Gemma 4's fixture: sliding layers of 2 KV heads of 16 (window 8), full layers of 1 of 32.
    let seqs = vec![(5, 1), (0, 40), (20, 3), (64, 1)];
    let cases = [AttnCase { p: p(4, 2, 16, Some(8)), seqs: seqs.clone() }, AttnCase { p: p(4, 1, 32, None), seqs }];
    let alone: Vec<Vec<f32>> = cases.iter().map(|c| run_attention(&b, c, 7)).collect();
    let (block_size, blocks) = (16, 40);
    let mut pools: Vec<_> = cases
        .iter()
        .map(|c| {
            let (num_kv_heads, head_dim) = (c.p.num_kv_heads, c.p.head_dim);
            let shape =
                KvShape { num_blocks: blocks * c.seqs.len(), block_size, num_kv_heads, head_dim, latent: false };
            b.kv(shape).unwrap()
        })
        .collect();
    let hist: Vec<(usize, usize)> = cases[0].seqs.iter().map(|&(s, _)| (0, s.max(1))).collect();
    let mut got = vec![Vec::new(); cases.len()];
    for (meta, seed) in [(round(&hist, block_size, blocks), 7), (round(&cases[0].seqs, block_size, blocks), 8)] {
        let t = meta.slot_mapping.len();
        // Layer order sliding, full, sliding, full: each pool written and read twice a round
        // (the second time the same rows, as a KV-shared layer writes its source's again).
        for _ in 0..2 {
            for (i, (c, pool)) in cases.iter().zip(pools.iter_mut()).enumerate() {
                let (h, kvh, d) = (c.p.num_heads, c.p.num_kv_heads, c.p.head_dim);
                let q = b.upload(&rand(t * h * d, seed, 1.0), t, h * d);
                let k = b.upload(&rand(t * kvh * d, seed + 100, 1.0), t, kvh * d);
                let v = b.upload(&rand(t * kvh * d, seed + 200, 1.0), t, kvh * d);
                got[i] = b.download(&b.attention(&q, &k, &v, pool, &meta, &c.p));
            }
        }
    }
    for (i, c) in cases.iter().enumerate() {
        assert!(same_bits(&got[i], &alone[i]), "shape {i}: interleaved and alone differ");
        let e = max_err(&got[i], &run_attention(&RefBackend, c, 7));
        assert!(e < 3e-2, "shape {i}: max error {e} against the reference");
    }
}

/// A KV pool of a head width the attention kernels lack (Gemma 4's full layers of
/// `global_head_dim` 512) is refused at allocation, naming the width.
#[test]
fn kv_pools_of_widths_without_a_kernel_are_refused_by_name() {
    let Some(b) = backend() else { return };
    for head_dim in [16, 32, 64, 128, 256] {
        assert!(b.kv(KvShape { num_blocks: 2, block_size: 16, num_kv_heads: 1, head_dim, latent: false }).is_ok());
    }
    for head_dim in [512, 96, 8] {
        let e = b.kv(KvShape { num_blocks: 2, block_size: 16, num_kv_heads: 1, head_dim, latent: false });
        let e = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(&format!("head width {head_dim}")) && e.contains("--device cpu"), "{head_dim}: {e}");
    }
}

/// The clamped SwiGLU (Step's `swiglu_limits`) against the reference: values whose activation
/// reaches the limit and whose up value is clamped are the same bits (`limit * ±limit`), the rest
/// within the activation's few ulp; without a limit it is `glu`'s bits; each row the same alone;
/// its bf16 copy is a fresh conversion's; `scale` is the reference's bits.
#[test]
fn clamped_glu_and_scale_match_the_reference() {
    let Some(b) = backend() else { return };
    let r = RefBackend;
    let (rows, cols) = (6, 100);
    let x = rand(rows * cols, 41, 12.0);
    let y = rand(rows * cols, 42, 12.0);
    let (xb, yb) = (b.upload(&x, rows, cols), b.upload(&y, rows, cols));
    let (xr, yr) = (r.upload(&x, rows, cols), r.upload(&y, rows, cols));
    for act in [Activation::Silu, Activation::GeluTanh] {
        for limit in [0.8f32, 7.0] {
            let got = b.download(&b.glu_clamped(&xb, &yb, act, limit));
            let want = r.download(&r.glu_clamped(&xr, &yr, act, limit));
            let mut saturated = 0;
            for i in 0..rows * cols {
                let what = format!("{act:?} limit {limit}, value {i} ({}, {})", x[i], y[i]);
                if want[i].abs() == limit * limit {
                    saturated += 1;
                    assert_eq!(got[i].to_bits(), want[i].to_bits(), "{what}");
                }
                let close = (got[i] - want[i]).abs() <= 1e-4 + 1e-6 * want[i].abs();
                assert!(close, "{what}: {} vs {}", got[i], want[i]);
            }
            assert!(saturated > 0, "{act:?} limit {limit}: no value saturated at both ends");
            for row in [0, rows - 1] {
                let span = row * cols..(row + 1) * cols;
                let one = b.glu_clamped(
                    &b.upload(&x[span.clone()], 1, cols),
                    &b.upload(&y[span.clone()], 1, cols),
                    act,
                    limit,
                );
                assert!(same_bits(&b.download(&one), &got[span]), "{act:?} limit {limit}: row {row} alone");
            }
        }
        let unclamped = b.download(&b.glu_clamped(&xb, &yb, act, f32::INFINITY));
        assert!(same_bits(&unclamped, &b.download(&b.glu(&xb, &yb, act))), "{act:?}: no limit is glu");
    }
    let w = b.mat(&weight("w", DType::BF16, 64, cols, &rand(64 * cols, 43, 0.5))).unwrap();
    let gl = b.glu_clamped(&xb, &yb, Activation::Silu, 0.8);
    let fresh = b.upload(&b.download(&gl), rows, cols);
    assert!(same_bits(&b.download(&b.matmul(&gl, &w)), &b.download(&b.matmul(&fresh, &w))), "bf16 copy");
    let (mut sb, mut sr) = (b.upload(&x, rows, cols), r.upload(&x, rows, cols));
    b.scale(&mut sb, 0.37);
    r.scale(&mut sr, 0.37);
    assert!(same_bits(&b.download(&sb), &r.download(&sr)), "scale");
    // The scaled values feed a matmul through a fresh bf16 copy, not the stale one.
    let mut sb2 = b.upload(&x, rows, cols);
    let _ = b.matmul(&sb2, &w);
    b.scale(&mut sb2, 0.37);
    let fresh = b.upload(&b.download(&sb2), rows, cols);
    assert!(same_bits(&b.download(&b.matmul(&sb2, &w)), &b.download(&b.matmul(&fresh, &w))), "scale's bf16 copy");
}

/// MiniMax M3's clamped SwiGLU (`Activation::SwigluOai`, kernels/ops.cu `glu_one` code 3) against
/// the reference, four values a thread and one: within CUDA's `expf` (a few ulp; the host
/// emulation, ops_emu.rs, checks the operations bit for bit); `activate` (no up operand) is the
/// gate alone, not the gate times (0 + 1) offset; each row the same bits alone.
#[test]
fn clamped_swiglu_matches_the_reference() {
    let Some(b) = backend() else { return };
    let r = RefBackend;
    let act = Activation::SwigluOai;
    for (rows, cols) in [(6, 100), (5, 7)] {
        let (x, y) = (rand(rows * cols, 51, 12.0), rand(rows * cols, 52, 12.0));
        let (xb, yb) = (b.upload(&x, rows, cols), b.upload(&y, rows, cols));
        let (xr, yr) = (r.upload(&x, rows, cols), r.upload(&y, rows, cols));
        let cases = [
            ("glu", b.download(&b.glu(&xb, &yb, act)), r.download(&r.glu(&xr, &yr, act))),
            ("activate", b.download(&b.activate(&xb, act)), r.download(&r.activate(&xr, act))),
        ];
        for (what, got, want) in &cases {
            for i in 0..rows * cols {
                let close = (got[i] - want[i]).abs() <= 1e-4 + 1e-6 * want[i].abs();
                assert!(close, "{what} {rows}x{cols} value {i} ({}, {}): {} vs {}", x[i], y[i], got[i], want[i]);
            }
        }
        let saturated = (0..rows * cols).filter(|&i| x[i] > 7.0 && y[i].abs() > 7.0).count();
        assert!(rows * cols < 100 || saturated > 0, "{rows}x{cols}: no value saturated at both ends");
        for row in [0, rows - 1] {
            let span = row * cols..(row + 1) * cols;
            let one = b.glu(&b.upload(&x[span.clone()], 1, cols), &b.upload(&y[span.clone()], 1, cols), act);
            assert!(same_bits(&b.download(&one), &cases[0].1[span]), "{rows}x{cols}: row {row} alone");
        }
    }
}

/// Rounds of 5 to 8 sequences (some waiting a round) are padded to one bucket of 8 rows: one
/// recording serves them all, with the bits of the rounds run op by op.
#[test]
fn rounds_of_nearby_sizes_share_one_padded_recording() {
    let (Some(on), Some(off)) = (backend(), backend_no_graphs()) else { return };
    let (bs, per) = (16, 8);
    // Sequence i owns blocks i * per .. (i + 1) * per whatever else runs.
    let meta_of = |seqs: &[(usize, usize, usize)]| {
        let mut m = AttnMeta { state_slots: Vec::new(), seqs: Vec::new(), slot_mapping: Vec::new(), block_size: bs };
        for &(i, start_pos, q_len) in seqs {
            let block_table: Vec<u32> = (0..per).map(|j| (i * per + j) as u32).collect();
            let slots = (start_pos..start_pos + q_len).map(|p| block_table[p / bs] as usize * bs + p % bs);
            m.slot_mapping.extend(slots);
            m.seqs.push(SeqAttn { q_start: m.slot_mapping.len() - q_len, q_len, start_pos, block_table });
        }
        m
    };
    let mut pos: Vec<usize> = (0..8).map(|i| 20 + 9 * i).collect();
    let mut rounds = vec![meta_of(&pos.iter().enumerate().map(|(i, &p)| (i, 0, p)).collect::<Vec<_>>())];
    for step in 0..40 {
        let n = 5 + step % 4;
        rounds.push(meta_of(&(0..n).map(|i| (i, pos[i], 1)).collect::<Vec<_>>()));
        pos.iter_mut().take(n).for_each(|p| *p += 1);
    }
    let want = run_rounds(&off, &rounds, 8 * per, false);
    same_rounds(&run_rounds(&on, &rounds, 8 * per, true), &want, "5 to 8 rows, held ids");
    let (captures, replays) = on.graph_counts();
    assert_eq!(captures, 1, "one recording for the bucket ({replays} replays)");
    assert!(replays >= 37, "{replays} replays");
}

/// A round that uploads inside its forward cannot be recorded: its captures are dropped (the
/// upload staged through pinned memory meanwhile), it runs op by op, and its values are right.
#[test]
fn rounds_that_upload_run_op_by_op() {
    let Some(b) = backend() else { return };
    let meta = round(&[(0, 1)], 16, 2);
    let mut kv =
        vec![b.kv(KvShape { num_blocks: 2, block_size: 16, num_kv_heads: 1, head_dim: 16, latent: false }).unwrap()];
    let model = [b.fresh_id(), 1];
    for step in 0..6u32 {
        let positions = meta.positions();
        let r = Round { replayable: true, model, ids: &[0], held: None, positions: &positions, meta: &meta, group: 1 };
        let vals = [step as f32, 2.0, -1.5];
        let out = b.forward_round(&r, &mut kv, &mut |_, _| b.upload(&vals, 1, 3));
        assert_eq!(b.download(&out), vals, "round {step}");
    }
    assert_eq!(b.graph_counts(), (0, 0));
}

struct AttnCase {
    p: AttnParams,
    seqs: Vec<(usize, usize)>,
}

/// Runs a prefill round then the given round on a backend; returns the second round's output.
fn run_attention<B: Backend>(b: &B, c: &AttnCase, qkv_seed: u64) -> Vec<f32> {
    run_attention_in(b, c, qkv_seed, 16, 40)
}

/// [`run_attention`] with `block_size`-slot pool blocks, `blocks` of them a sequence.
fn run_attention_in<B: Backend>(b: &B, c: &AttnCase, qkv_seed: u64, block_size: usize, blocks: usize) -> Vec<f32> {
    let (h, kvh, d) = (c.p.num_heads, c.p.num_kv_heads, c.p.head_dim);
    let mut kv = b
        .kv(KvShape { num_blocks: blocks * c.seqs.len(), block_size, num_kv_heads: kvh, head_dim: d, latent: false })
        .unwrap();
    // Fill each sequence's history (positions before start_pos) in one earlier round.
    let hist: Vec<(usize, usize)> = c.seqs.iter().map(|&(s, _)| (0, s.max(1))).collect();
    for (meta, seed) in
        [(round(&hist, block_size, blocks), qkv_seed), (round(&c.seqs, block_size, blocks), qkv_seed + 1)]
    {
        let t = meta.slot_mapping.len();
        let q = b.upload(&rand(t * h * d, seed, 1.0), t, h * d);
        let k = b.upload(&rand(t * kvh * d, seed + 100, 1.0), t, kvh * d);
        let v = b.upload(&rand(t * kvh * d, seed + 200, 1.0), t, kvh * d);
        let out = b.attention(&q, &k, &v, &mut kv, &meta, &c.p);
        if seed == qkv_seed + 1 {
            return b.download(&out);
        }
    }
    unreachable!()
}

fn cases() -> Vec<AttnCase> {
    let p = |h, kvh, d: usize, window, softcap| AttnParams {
        num_heads: h,
        num_kv_heads: kvh,
        head_dim: d,
        scale: (d as f32).powf(-0.5),
        window,
        softcap,
    };
    vec![
        AttnCase { p: p(8, 2, 128, None, None), seqs: vec![(5, 1), (0, 70), (130, 3), (64, 1)] },
        AttnCase { p: p(4, 2, 32, Some(8), None), seqs: vec![(20, 1), (0, 30), (9, 7)] },
        AttnCase { p: p(4, 4, 16, None, Some(5.0)), seqs: vec![(3, 2), (0, 17)] },
        AttnCase { p: p(32, 8, 128, None, None), seqs: vec![(300, 1), (77, 1)] },
        // Long runs: the batched round folds its 256-key chunks inside one CTA (too many rows to
        // split), the same tokens fed one by one are split across CTAs and folded by the combine
        // kernel; both must agree bit for bit, with and without a window.
        AttnCase { p: p(8, 2, 128, None, None), seqs: vec![(0, 600), (520, 1)] },
        AttnCase { p: p(4, 2, 64, Some(300), None), seqs: vec![(0, 620), (400, 2)] },
    ]
}

#[test]
fn attention_matches_reference() {
    let Some(b) = backend() else { return };
    for (i, c) in cases().iter().enumerate() {
        let got = run_attention(&b, c, 7);
        let want = run_attention(&RefBackend, c, 7);
        let e = max_err(&got, &want);
        // bf16 K/V, Q and probabilities: about 1% of the O(1) outputs.
        assert!(e < 3e-2, "case {i}: max error {e}");
        eprintln!("attention case {i}: max |cuda - ref| = {e:.2e}");
    }
}

#[test]
fn wgmma_attention_equals_the_mma_sync_kernel() {
    // Prefill rounds of head width 128 take kernels/attention_wg.cu on Hopper;
    // `CudaOptions::mma_sync_attention` keeps them on attention.cu. Both must give the same bits: Qwen3-like groups, a window that cuts
    // blocks, soft-capping, runs that start mid-block after a history, keys past the sequence in
    // its last pool block, and pool blocks of 8, 16 and 128 slots.
    let (Some(b), Some(m)) = (backend(), backend_mma_sync_attention()) else { return };
    let p = |h, kvh, window, softcap| AttnParams {
        num_heads: h,
        num_kv_heads: kvh,
        head_dim: 128,
        scale: 128f32.powf(-0.5),
        window,
        softcap,
    };
    let mut all: Vec<(AttnCase, usize)> =
        cases().into_iter().filter(|c| c.p.head_dim == 128).map(|c| (c, 16)).collect();
    all.push((AttnCase { p: p(32, 8, None, None), seqs: vec![(0, 700), (37, 45), (300, 1)] }, 16));
    all.push((AttnCase { p: p(16, 2, Some(200), None), seqs: vec![(100, 333), (0, 9)] }, 8));
    all.push((AttnCase { p: p(8, 8, None, Some(30.0)), seqs: vec![(250, 130)] }, 128));
    all.push((AttnCase { p: p(32, 4, None, None), seqs: vec![(0, 65), (511, 20)] }, 16));
    for (i, (c, bs)) in all.iter().enumerate() {
        let blocks = 1200usize.div_ceil(*bs);
        let got = run_attention_in(&b, c, 11, *bs, blocks);
        let want = run_attention_in(&m, c, 11, *bs, blocks);
        assert!(same_bits(&got, &want), "case {i} (block size {bs}): wgmma and mma.sync attention differ");
    }
}

#[test]
fn attention_rows_do_not_depend_on_the_round() {
    let Some(b) = backend() else { return };
    for c in cases() {
        let together = run_attention(&b, &c, 3);
        let width = c.p.num_heads * c.p.head_dim;
        let mut row = 0;
        for (i, &s) in c.seqs.iter().enumerate() {
            // The same sequence alone, with the same history and the same new rows.
            let solo = AttnCase { p: c.p, seqs: vec![s] };
            let alone = run_solo(&b, &solo, &c, i);
            let mine = &together[row * width..(row + s.1) * width];
            assert!(same_bits(&alone, mine), "sequence {i} differs alone vs batched");
            row += s.1;
        }
    }
}

/// Runs sequence `i` of `full` alone: the same K/V/Q rows it had in the batch, token by token
/// for the new rows (chunk size 1), and returns its outputs.
fn run_solo<B: Backend>(b: &B, solo: &AttnCase, full: &AttnCase, i: usize) -> Vec<f32> {
    let (h, kvh, d) = (full.p.num_heads, full.p.num_kv_heads, full.p.head_dim);
    let block_size = 16;
    let blocks = 40;
    let (start, q_len) = solo.seqs[0];
    let mut kv = b
        .kv(KvShape { num_blocks: blocks * full.seqs.len(), block_size, num_kv_heads: kvh, head_dim: d, latent: false })
        .unwrap();
    let hist: Vec<(usize, usize)> = full.seqs.iter().map(|&(s, _)| (0, s.max(1))).collect();
    // History round: identical to the batched test (all sequences), so the pool matches.
    let meta = round(&hist, block_size, blocks);
    let t = meta.slot_mapping.len();
    let q = b.upload(&rand(t * h * d, 3, 1.0), t, h * d);
    let k = b.upload(&rand(t * kvh * d, 103, 1.0), t, kvh * d);
    let v = b.upload(&rand(t * kvh * d, 203, 1.0), t, kvh * d);
    b.attention(&q, &k, &v, &mut kv, &meta, &full.p);
    // This sequence's rows of the batched round, fed one token at a time.
    let meta = round(&full.seqs, block_size, blocks);
    let t = meta.slot_mapping.len();
    let (qa, ka, va) = (rand(t * h * d, 4, 1.0), rand(t * kvh * d, 104, 1.0), rand(t * kvh * d, 204, 1.0));
    let s = &meta.seqs[i];
    let mut out = Vec::new();
    for j in 0..q_len {
        let r = s.q_start + j;
        let one = AttnMeta {
            state_slots: Vec::new(),
            seqs: vec![SeqAttn { q_start: 0, q_len: 1, start_pos: start + j, block_table: s.block_table.clone() }],
            slot_mapping: vec![meta.slot_mapping[r]],
            block_size,
        };
        let q = b.upload(&qa[r * h * d..(r + 1) * h * d], 1, h * d);
        let k = b.upload(&ka[r * kvh * d..(r + 1) * kvh * d], 1, kvh * d);
        let v = b.upload(&va[r * kvh * d..(r + 1) * kvh * d], 1, kvh * d);
        out.extend(b.download(&b.attention(&q, &k, &v, &mut kv, &one, &full.p)));
    }
    out
}

#[test]
fn producers_bf16_copies_equal_a_fresh_conversion() {
    let Some(b) = backend() else { return };
    let (rows, cols, n) = (3, 128, 64);
    let w = b.mat(&weight("w", DType::BF16, n, cols, &rand(n * cols, 31, 0.5))).unwrap();
    let x = rand(rows * cols, 32, 2.0);
    let y = rand(rows * cols, 33, 2.0);
    let via = |a: &tf_cuda::CudaAct| {
        let fresh = b.upload(&b.download(a), rows, cols);
        (b.download(&b.matmul(a, &w)), b.download(&b.matmul(&fresh, &w)))
    };
    let normed = b.rms_norm(&b.upload(&x, rows, cols), &b.vec(&rand(cols, 34, 1.0)), 1e-6, false);
    let (p, q) = via(&normed);
    assert!(same_bits(&p, &q), "rms_norm's bf16 copy");
    let gl = b.glu(&b.upload(&x, rows, cols), &b.upload(&y, rows, cols), Activation::Silu);
    let (p, q) = via(&gl);
    assert!(same_bits(&p, &q), "glu's bf16 copy");
    let grouped = b.rms_norm(&b.upload(&x, rows, cols), &b.vec(&rand(32, 35, 1.0)), 1e-6, true);
    let (p, q) = via(&grouped);
    assert!(same_bits(&p, &q), "grouped rms_norm's bf16 copy");
}

/// The greedy id the device gives: the first largest value, NaN never taken, 0 when no value
/// is above -inf (`host::argmax` keeps index 0 when it holds a NaN).
fn greedy_id(row: &[f32]) -> u32 {
    let mut best = (f32::NEG_INFINITY, 0);
    for (i, &v) in row.iter().enumerate() {
        if v > best.0 {
            best = (v, i as u32);
        }
    }
    best.1
}

#[test]
fn argmax_rows_matches_the_host() {
    let Some(b) = backend() else { return };
    // (70000, 3): more rows than the partial kernel's grid holds; (600, 40000): slices widened
    // to keep the block count down.
    for (rows, cols) in [(1, 151936), (5, 1000), (3, 7), (64, 4097), (600, 40000), (70000, 3)] {
        let mut x = rand(rows * cols, 11 + cols as u64, 3.0);
        // A tie: the first of two equal maxima wins, also against a third 2048 columns on (in
        // another block, or where slices are wide, the same thread's next 16 loads).
        x[cols / 3] = 10.0;
        x[cols / 2] = 10.0;
        if cols / 3 + 2048 < cols {
            x[cols / 3 + 2048] = 10.0;
        }
        let got = b.argmax_rows(&b.upload(&x, rows, cols));
        let want: Vec<u32> = x.chunks(cols).map(|r| tf_backend::host::argmax(r) as u32).collect();
        assert_eq!(got, want, "{rows}x{cols}");
    }
}

#[test]
fn argmax_rows_split_over_blocks_keeps_the_first_largest() {
    let Some(b) = backend() else { return };
    // 151936 columns: 75 blocks of 2026 (ops.rs `argmax_split`); 1000: one block.
    for cols in [151936usize, 1000] {
        let slice = cols.div_ceil(cols.div_ceil(2048));
        let last = cols - 1;
        let base = |seed: u64| rand(cols, seed, 3.0);
        let mut rows: Vec<(Vec<f32>, u32)> = Vec::new();
        // The maximum at the very end, and inside the last slice.
        let mut r = base(1);
        r[last] = 10.0;
        rows.push((r, last as u32));
        let mut r = base(2);
        r[last - slice / 2] = 10.0;
        rows.push((r, (last - slice / 2) as u32));
        // Ties across slices (first and last, two middle ones): the lower column.
        let mut r = base(3);
        r[last] = 10.0;
        r[5] = 10.0;
        rows.push((r, 5));
        let (lo, hi) = ((slice + 7).min(cols / 4), cols / 2);
        let mut r = base(4);
        r[hi] = 10.0;
        r[lo] = 10.0;
        rows.push((r, lo as u32));
        // Nothing above -inf: all -inf, all NaN, both mixed.
        rows.push((vec![f32::NEG_INFINITY; cols], 0));
        rows.push((vec![f32::NAN; cols], 0));
        rows.push(((0..cols).map(|i| if i % 3 == 0 { f32::NAN } else { f32::NEG_INFINITY }).collect(), 0));
        // NaNs before, after and in the slice of the maximum (and at column 0) never win.
        let mut r = base(5);
        for i in (0..cols).step_by(97) {
            r[i] = f32::NAN;
        }
        r[last - 1] = f32::NAN;
        r[last - 2] = 10.0;
        r[last - 3] = f32::NAN;
        rows.push((r, (last - 2) as u32));
        // One finite value among -inf and NaN, in the middle slice.
        let mut r: Vec<f32> = (0..cols).map(|i| if i % 2 == 0 { f32::NAN } else { f32::NEG_INFINITY }).collect();
        r[cols / 2 + 1] = -1e30;
        rows.push((r, (cols / 2 + 1) as u32));
        // Random rows, each with its own maximum.
        for seed in 6..10 {
            let r = base(seed);
            let id = greedy_id(&r);
            rows.push((r, id));
        }
        for (i, (r, id)) in rows.iter().enumerate() {
            assert_eq!(greedy_id(r), *id, "{cols} columns, row {i}: the test's own expectation");
        }
        let x: Vec<f32> = rows.iter().flat_map(|(r, _)| r.iter().copied()).collect();
        let got = b.argmax_rows(&b.upload(&x, rows.len(), cols));
        let want: Vec<u32> = rows.iter().map(|(_, id)| *id).collect();
        assert_eq!(got, want, "{cols} columns");
        // Each row alone gives the same id as among the others.
        for (i, (r, id)) in rows.iter().enumerate() {
            assert_eq!(b.argmax_rows(&b.upload(r, 1, cols)), vec![*id], "{cols} columns, row {i} alone");
        }
    }
}
