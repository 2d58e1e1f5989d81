//! FP8 (E4M3, block-scaled) weights on the GPU: every matmul over an FP8 weight equals bit for
//! bit the bf16 matmul over its bf16 weight (fp8_host.rs: code times block scale, rounded once),
//! at every row count and through every fused op, and a row's result does not depend on the
//! batch; the FP8 fixtures against transformers and the engine's promises over them. Without a
//! GPU each test prints "skipped" and passes.

mod common;

use common::*;
use std::path::PathBuf;
use tf_backend::{Activation, Backend, Experts, Fp8Scales, MoeParams};
use tf_core::DType;
use tf_cuda::{CudaBackend, CudaMat};
use tf_formats::{TensorBytes, TensorView};

/// Row counts: one row, the GEMV's row groups (1, 2, 4, 8 of them) and their edges, and past the
/// GEMV (the bf16 weight made in the scratch, then the GEMMs).
const ROWS: [usize; 8] = [1, 2, 8, 31, 33, 64, 65, 200];

/// (rows, cols, block): partial edge blocks and K not whole blocks (128 x 128 over 200 x 1000),
/// many K segments, a block width that is not whole 16-wide k tiles (only the scratch path),
/// per channel and per tensor (one block column), thin blocks.
const SHAPES: [(usize, usize, [usize; 2]); 7] = [
    (200, 1000, [128, 128]),
    (96, 4096, [128, 128]),
    (80, 200, [48, 40]),
    (72, 130, [1, 130]),
    (33, 70, [33, 70]),
    (128, 512, [16, 16]),
    (48, 1040, [128, 128]),
];

/// A random FP8 weight (no NaN codes) with scales in [1/64, 3/64), one block's scale tiny enough
/// that its products are subnormal (`tiny`): the view, its scales, and the bf16 twin's view.
fn fp8_weight(n: usize, k: usize, block: [usize; 2], seed: u64, tiny: bool) -> (TensorView, Fp8Scales, TensorView) {
    let codes: Vec<u8> = rand(n * k, seed, 1.0)
        .iter()
        .map(|v| ((v.to_bits() >> 7) & 0xFF) as u8)
        .map(|c| if c & 0x7F == 0x7F { c ^ 1 } else { c })
        .collect();
    let g = [n.div_ceil(block[0]), k.div_ceil(block[1])];
    let mut values: Vec<f32> = rand(g[0] * g[1], seed + 1, 1.0).iter().map(|v| (v + 2.0) / 64.0).collect();
    if tiny {
        values[0] = 2f32.powi(-130);
    }
    let scales = Fp8Scales { block, values };
    let bits = tf_cuda::fp8_dequantize_bf16(&codes, n, k, &scales);
    let view = |name: &str, dtype, bytes: Vec<u8>| TensorView {
        name: name.into(),
        dtype,
        shape: vec![n, k],
        data: TensorBytes::from_vec(&bytes),
        file: PathBuf::from("test"),
    };
    let twin = view("w_bf16", DType::BF16, bits.iter().flat_map(|b| b.to_le_bytes()).collect());
    (view("w_fp8", DType::F8E4M3, codes), scales, twin)
}

/// The FP8 weight and its bf16 twin on `b`.
fn pair(b: &CudaBackend, n: usize, k: usize, block: [usize; 2], seed: u64) -> (CudaMat, CudaMat) {
    let (w, s, twin) = fp8_weight(n, k, block, seed, seed % 2 == 1);
    (b.mat_fp8(&w, &s).unwrap(), b.mat(&twin).unwrap())
}

#[test]
fn fp8_matmul_equals_the_bf16_matmul_over_its_weight_at_every_row_count() {
    let Some(b) = backend() else { return };
    for (i, &(n, k, block)) in SHAPES.iter().enumerate() {
        let (f, w) = pair(&b, n, k, block, 10 + i as u64);
        let big = 200;
        let x = rand(big * k, 50 + i as u64, 1.0);
        let full = b.download(&b.matmul(&b.upload(&x, big, k), &f));
        assert!(same_bits(&full, &b.download(&b.matmul(&b.upload(&x, big, k), &w))), "{n}x{k} {block:?}: {big} rows");
        for m in ROWS {
            let xm = b.upload(&x[..m * k], m, k);
            let got = b.download(&b.matmul(&xm, &f));
            let want = b.download(&b.matmul(&xm, &w));
            assert!(same_bits(&got, &want), "{n}x{k} {block:?}: {m} rows differ from the bf16 matmul");
            assert!(same_bits(&got, &full[..m * n]), "{n}x{k} {block:?}: {m} rows differ from the {big}-row call");
        }
        for r in [0, 7, 199] {
            let one = b.download(&b.matmul(&b.upload(&x[r * k..(r + 1) * k], 1, k), &f));
            assert!(same_bits(&one, &full[r * n..(r + 1) * n]), "{n}x{k} {block:?}: row {r} alone");
        }
    }
}

#[test]
fn fp8_gemv_row_bounds_change_no_bits() {
    // No FP8 GEMV (every row count dequantizes first), and FP8 GEMVs up to 256 rows (65 and 200
    // rows in launches of 64): the bf16 twin's bits at every row count, with a residual add.
    for limit in [0, 256] {
        let Some(b) = common::backend_fp8_gemv_rows(limit) else { return };
        let (n, k) = (200, 1000);
        let (f, w) = pair(&b, n, k, [128, 128], 30);
        for m in ROWS {
            let x = b.upload(&rand(m * k, 90 + m as u64, 1.0), m, k);
            let at = format!("limit {limit}, {m} rows");
            assert!(same_bits(&b.download(&b.matmul(&x, &f)), &b.download(&b.matmul(&x, &w))), "{at}");
            let h0 = rand(m * n, 91, 2.0);
            let (mut h, mut want) = (b.upload(&h0, m, n), b.upload(&h0, m, n));
            b.matmul_add(&x, &f, &mut h);
            b.matmul_add(&x, &w, &mut want);
            assert!(same_bits(&b.download(&h), &b.download(&want)), "{at}: matmul_add");
        }
    }
}

#[test]
fn fp8_fused_ops_equal_their_bf16_twins() {
    let Some(b) = backend() else { return };
    let k = 1000;
    let (fa, wa) = pair(&b, 200, k, [128, 128], 1);
    let (fb, wb) = pair(&b, 96, k, [48, 40], 2);
    let (fc, wc) = pair(&b, 64, k, [1, 1000], 7);
    let (fd, wd) = pair(&b, 40, k, [16, 16], 8);
    let plain = b.mat(&weight("p", DType::BF16, 80, k, &rand(80 * k, 3, 0.5))).unwrap();
    let nw = b.vec(&rand(k, 4, 1.0));
    for m in ROWS {
        let x = b.upload(&rand(m * k, 60 + m as u64, 1.0), m, k);
        let at = |what: &str| format!("{what}, {m} rows");
        // matmul_many: FP8 weights beside a bf16 one, as one matmul each of the twins.
        let many = b.matmul_many(&x, &[&fa, &plain, &fb]);
        for (i, (y, w)) in many.iter().zip([&wa, &plain, &wb]).enumerate() {
            let (got, want) = (b.download(y), b.download(&b.matmul(&x, w)));
            assert!(same_bits(&got, &want), "{} weight {i}: {}", at("matmul_many"), first_difference(&got, &want));
        }
        // Four FP8 weights of three block shapes: three share a launch, the fourth has its own.
        let many = b.matmul_many(&x, &[&fa, &fc, &fd, &fc]);
        for (i, (y, w)) in many.iter().zip([&wa, &wc, &wd, &wc]).enumerate() {
            let (got, want) = (b.download(y), b.download(&b.matmul(&x, w)));
            let why = first_difference(&got, &want);
            assert!(same_bits(&got, &want), "{} weight {i}: {why}", at("matmul_many of FP8"));
        }
        // norm_matmul_many.
        let normed = b.rms_norm(&x, &nw, 1e-6, false);
        let nm = b.norm_matmul_many(&x, &nw, 1e-6, false, &[&fa, &fb]);
        for (y, w) in nm.iter().zip([&wa, &wb]) {
            assert!(same_bits(&b.download(y), &b.download(&b.matmul(&normed, w))), "{}", at("norm_matmul_many"));
        }
        // matmul_add: h += x W^T with the residual add in the store.
        let h0 = rand(m * 200, 70 + m as u64, 2.0);
        let mut h = b.upload(&h0, m, 200);
        b.matmul_add(&x, &fa, &mut h);
        let mut want = b.upload(&h0, m, 200);
        b.matmul_add(&x, &wa, &mut want);
        assert!(same_bits(&b.download(&h), &b.download(&want)), "{}", at("matmul_add"));
    }
}

#[test]
fn fp8_embedding_rows_are_the_host_values() {
    let Some(b) = backend() else { return };
    let (n, k) = (50, 300);
    let (w, s, _) = fp8_weight(n, k, [16, 128], 5, false);
    let table = b.mat_fp8(&w, &s).unwrap();
    let ids = [3u32, 0, 49, 17, 17];
    let got = b.download(&b.embed(&table, &ids, 0.5));
    let mut row = vec![0.0; k];
    for (i, &id) in ids.iter().enumerate() {
        s.dequantize_row(&w.data.as_bytes()[id as usize * k..][..k], id as usize, &mut row);
        let want: Vec<f32> = row.iter().map(|v| v * 0.5).collect();
        assert!(same_bits(&got[i * k..(i + 1) * k], &want), "row {i} (id {id})");
    }
}

#[test]
fn fp8_weights_with_bad_scales_are_refused_by_name() {
    let Some(b) = backend() else { return };
    let (w, mut s, _) = fp8_weight(40, 64, [16, 16], 6, false);
    s.values.pop();
    let e = b.mat_fp8(&w, &s).err().expect("a scale short").to_string();
    assert!(e.contains("w_fp8") && e.contains("FP8 scales"), "{e}");
}

#[test]
fn fp8_experts_equal_their_bf16_twins_on_both_moe_paths() {
    // 8 experts of [96, 200] / [200, 96] in 32 x 32 blocks (partial edge blocks): rows up to 64
    // take the grouped FP8 GEMV, 70 the per-expert path (scratch or FP8 GEMV per expert).
    let Some(b) = backend() else { return };
    let (ne, h, inter) = (8, 200, 96);
    let mut fp8: Experts<CudaMat, tf_cuda::CudaVec> =
        Experts { gate: vec![], up: vec![], down: vec![], choice_bias: None, biases: None, first: 0 };
    let mut twin: Experts<CudaMat, tf_cuda::CudaVec> =
        Experts { gate: vec![], up: vec![], down: vec![], choice_bias: None, biases: None, first: 0 };
    for e in 0..ne as u64 {
        for (kind, (n, k)) in [(inter, h), (inter, h), (h, inter)].into_iter().enumerate() {
            let (f, w) = pair(&b, n, k, [32, 32], 100 + 10 * e + kind as u64);
            let (fl, wl) = match kind {
                0 => (&mut fp8.gate, &mut twin.gate),
                1 => (&mut fp8.up, &mut twin.up),
                _ => (&mut fp8.down, &mut twin.down),
            };
            fl.push(f);
            wl.push(w);
        }
    }
    let p = MoeParams::softmax(2, true, Activation::Silu);
    let rows = 70;
    let x = rand(rows * h, 80, 1.0);
    let logits = rand(rows * ne, 81, 3.0);
    let run = |ex: &Experts<CudaMat, tf_cuda::CudaVec>, m: usize| {
        let (xa, la) = (b.upload(&x[..m * h], m, h), b.upload(&logits[..m * ne], m, ne));
        b.download(&b.moe(&xa, &la, ex, &p))
    };
    for m in [1, 8, 64, 70] {
        assert!(same_bits(&run(&fp8, m), &run(&twin, m)), "{m} rows: FP8 experts differ from their bf16 twins");
    }
    let all = run(&fp8, rows);
    for m in [1, 8, 64] {
        assert!(same_bits(&run(&fp8, m), &all[..m * h]), "{m} rows differ from the {rows}-row round");
    }
}

/// Where two outputs first differ, and by how much (for a failing assertion's message).
fn first_difference(got: &[f32], want: &[f32]) -> String {
    let at = got.iter().zip(want).position(|(a, b)| a.to_bits() != b.to_bits());
    let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    format!("lengths {} / {}, first at {at:?}, largest difference {worst}", got.len(), want.len())
}
