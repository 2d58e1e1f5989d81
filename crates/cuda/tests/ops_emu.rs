//! kernels/ops.cu's gated activations (`glu` with and without its up operand, `glu_packed`, the
//! clamped `glu_clamped`) and `scale_inplace` run on the host (scripts/ops_emu, built here with
//! g++ over their source cut out of ops.cu and common.cuh): with the CUDA intrinsics replaced by
//! their exact host operations, every value equals tf_backend's reference (`reference::glu_one`,
//! `activate`, `glu_clamped`, `x * c`; GELU with the kernels' `sqrt(2 / pi)`, one ulp from the
//! reference's) bit for bit, for every activation code (MiniMax M3's clamped SwiGLU,
//! `Activation::SwigluOai`, included), over NaN, infinite and saturating inputs, limits that
//! clamp most values and none, and the bf16 copies land at their padded row stride. The GLU
//! stores of the matmuls (gemm_wgmma.cu, gemv_tma.cu) call the same `glu_one`. On the device
//! only SiLU's `__fdividef` and CUDA's `expf` / `tanhf` differ (within a few ulp); tests/ops.rs
//! covers that. Skips (passing) where g++ or the sources are missing.

mod common;

use common::emu::cut;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tf_backend::Activation;
use tf_backend::reference::{activate, glu_clamped, glu_one};

/// The emulator, built into the test's temporary directory; `None` without g++ or the sources.
fn build() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kernels = root.join("crates/cuda/kernels");
    let (Ok(ops), Ok(common)) =
        (std::fs::read_to_string(kernels.join("ops.cu")), std::fs::read_to_string(kernels.join("common.cuh")))
    else {
        eprintln!("skipped: no kernel sources beside this test binary's sources");
        return None;
    };
    if !root.join("scripts/ops_emu/main.cpp").exists() {
        eprintln!("skipped: no scripts/ops_emu beside this test binary's sources");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("tf-ops-emu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let mut header = [cut(&common, "f2bf"), cut(&common, "pack_bf2")].join("\n");
    // The clamped SwiGLU's constants.
    for line in ops.lines().filter(|l| l.starts_with("#define SWIGLU_OAI_")) {
        header.push('\n');
        header.push_str(line);
    }
    let names = ["swiglu_oai_gate", "act_one", "glu_one", "glu_clamped_one", "glu_clamped", "glu", "scale_inplace"];
    for name in names.into_iter().chain(["gate_up_col", "glu_packed"]) {
        header.push('\n');
        header.push_str(&cut(&ops, name));
    }
    std::fs::write(dir.join("ops_emu.h"), header).expect("writing the emulator's header");
    let out = dir.join("ops-emu");
    common::emu::gxx(
        &["-std=c++17", "-O1", "-ffp-contract=off", "-fno-strict-aliasing"],
        Some(&dir),
        &root.join("scripts/ops_emu/main.cpp"),
        out,
        "ops",
    )
}

/// What the emulator's kernels wrote.
struct Out {
    /// `glu_clamped`'s values and their bf16 copy `[rows, kp]`.
    clamped: (Vec<f32>, Vec<u16>),
    /// `gate * c` (`scale_inplace`).
    scaled: Vec<f32>,
    /// `glu`'s values and their bf16 copy.
    glu: (Vec<f32>, Vec<u16>),
    /// `glu`'s values without an up operand: `act(gate)`.
    act: Vec<f32>,
    /// `glu_packed`'s bf16 values `[rows, kp]`, where `cols` is a multiple of 8.
    packed: Option<Vec<u16>>,
}

/// The emulator's outputs over `gate` and `up` `[rows, cols]`.
#[allow(clippy::too_many_arguments)]
fn run(emu: &Path, rows: usize, cols: usize, kp: usize, act: i32, limit: f32, c: f32, gate: &[f32], up: &[f32]) -> Out {
    let mut child = Command::new(emu).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("the emulator runs");
    let mut input: Vec<u8> = [rows as i32, cols as i32, kp as i32, act].iter().flat_map(|v| v.to_le_bytes()).collect();
    input.extend([limit, c].iter().chain(gate).chain(up).flat_map(|v| v.to_le_bytes()));
    child.stdin.take().expect("stdin").write_all(&input).expect("feeding the emulator");
    let out = child.wait_with_output().expect("the emulator's output");
    assert!(out.status.success(), "the emulator failed: {}", out.status);
    let n = rows * cols;
    let packed = cols.is_multiple_of(8);
    let size = 4 * n + 2 * rows * kp + 4 * n + 4 * n + 2 * rows * kp + 4 * n + if packed { 2 * rows * kp } else { 0 };
    assert_eq!(out.stdout.len(), size, "emulator output size");
    let mut rest = out.stdout.as_slice();
    let mut take = |len: usize| {
        let (a, b) = rest.split_at(len);
        rest = b;
        a
    };
    let f32s = |b: &[u8]| b.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect::<Vec<_>>();
    let u16s = |b: &[u8]| b.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect::<Vec<_>>();
    let clamped = (f32s(take(4 * n)), u16s(take(2 * rows * kp)));
    let scaled = f32s(take(4 * n));
    let glu = (f32s(take(4 * n)), u16s(take(2 * rows * kp)));
    let act = f32s(take(4 * n));
    let packed = packed.then(|| u16s(take(2 * rows * kp)));
    Out { clamped, scaled, glu, act, packed }
}

/// GELU (tanh) as the kernels make it: the reference's operations with `sqrt(2 / pi)` written as
/// the f32 nearest it (0.79788458), where the reference takes the f32 square root of the f32
/// quotient (0.79788452, one ulp below), so the two differ in the last bits of some values.
fn gelu_kernel(v: f32) -> f32 {
    let c = 0.797_884_6_f32;
    0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
}

/// `x` rounded to bf16 bits, to nearest even (not NaN).
fn bf16(x: f32) -> u16 {
    let u = x.to_bits();
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// Deterministic values in [-scale, scale) with special values spread among them.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0, 1e-40, 88.0, -88.0, 30.0, -30.0];
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|i| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            match i % 7 {
                3 => special[(s >> 33) as usize % special.len()],
                _ => ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale,
            }
        })
        .collect()
}

/// `act(g)` as the kernels make it: the reference's, GELU's constant aside ([`gelu_kernel`]).
fn act_kernel(g: f32, act: Activation) -> f32 {
    match act {
        Activation::GeluTanh => gelu_kernel(g),
        _ => activate(g, act),
    }
}

/// Whether `got` is `want`'s bits, or both are NaN.
fn same(got: f32, want: f32) -> bool {
    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
}

/// Whether the bf16 copy `b` is `y` rounded (a NaN stays a NaN: common.cuh `f2bf` keeps its
/// high bits, quiet).
fn bf16_of(b: u16, y: f32) -> bool {
    (y.is_nan() && b & 0x7f80 == 0x7f80 && b & 0x7f != 0) || b == bf16(y)
}

/// Whether row padding of `yb` `[rows, kp]` past `cols` is untouched.
fn padding_untouched(yb: &[u16], rows: usize, cols: usize, kp: usize) -> bool {
    (0..rows).all(|r| yb[r * kp + cols..(r + 1) * kp].iter().all(|&b| b == 0xffff))
}

#[test]
fn gated_activations_and_scale_on_the_host_equal_the_reference() {
    let Some(emu) = build() else { return };
    // ops.rs `act_code`: SiLU 0, GELU (tanh) 1, relu² 2, the clamped SwiGLU 3.
    let acts = [(Activation::Silu, 0), (Activation::GeluTanh, 1), (Activation::Relu2, 2), (Activation::SwigluOai, 3)];
    // (rows, cols): rows of whole 16-wide tiles and rows with padding past them; glu's four
    // values a thread (cols a multiple of 4) and one; glu_packed's groups of 8.
    for (rows, cols) in [(5usize, 96usize), (3, 40), (4, 7), (1, 1)] {
        let kp = cols.next_multiple_of(16);
        let (gate, up) = (values(rows * cols, 3 + cols as u64, 12.0), values(rows * cols, 5 + rows as u64, 12.0));
        for (act, code) in acts {
            for limit in [0.8, 7.0, f32::INFINITY] {
                let c = 0.37;
                let out = run(&emu, rows, cols, kp, code, limit, c, &gate, &up);
                let what = format!("{rows}x{cols} {act:?} limit {limit}");
                let (y, yb) = &out.clamped;
                for i in 0..rows * cols {
                    let want = match act {
                        Activation::GeluTanh => gelu_kernel(gate[i]).min(limit) * up[i].max(-limit).min(limit),
                        _ => glu_clamped(gate[i], up[i], act, limit),
                    };
                    assert!(same(y[i], want), "{what}: value {i} ({}, {}): {} against {want}", gate[i], up[i], y[i]);
                    assert!(bf16_of(yb[(i / cols) * kp + i % cols], y[i]), "{what}: bf16 copy of value {i}");
                    assert!(same(out.scaled[i], gate[i] * c), "{what}: scale {i}");
                }
                assert!(padding_untouched(yb, rows, cols, kp), "{what}: padding");
                if limit < 1.0 && act != Activation::Relu2 {
                    let clamped = (0..rows * cols).filter(|&i| y[i].abs() == limit * limit).count();
                    assert!(rows * cols < 8 || clamped > 0, "{what}: no value clamped at both ends");
                }
            }
            // glu, glu without its up operand and glu_packed do not read the limit.
            let out = run(&emu, rows, cols, kp, code, 7.0, 1.0, &gate, &up);
            let what = format!("{rows}x{cols} {act:?}");
            let (y, yb) = &out.glu;
            for i in 0..rows * cols {
                let want = match act {
                    Activation::GeluTanh => gelu_kernel(gate[i]) * up[i],
                    _ => glu_one(gate[i], up[i], act),
                };
                assert!(same(y[i], want), "{what}: glu {i} ({}, {}): {} against {want}", gate[i], up[i], y[i]);
                let b = yb[(i / cols) * kp + i % cols];
                assert!(bf16_of(b, y[i]), "{what}: glu's bf16 copy of value {i}");
                let want = act_kernel(gate[i], act);
                assert!(same(out.act[i], want), "{what}: act {i} ({}): {} against {want}", gate[i], out.act[i]);
                if let Some(p) = &out.packed {
                    assert!(bf16_of(p[(i / cols) * kp + i % cols], y[i]), "{what}: glu_packed value {i}");
                }
            }
            assert!(padding_untouched(yb, rows, cols, kp), "{what}: glu's padding");
            assert_eq!(out.packed.is_some(), cols.is_multiple_of(8));
            if act == Activation::SwigluOai {
                // The gate saturates at the limit and the up value at ±limit, both ways.
                let sat = |i: usize| gate[i].is_finite() && gate[i] > 7.0 && up[i].abs() > 7.0 && up[i].is_finite();
                let hits = (0..rows * cols).filter(|&i| sat(i)).count();
                assert!(rows * cols < 40 || hits > 0, "{what}: no saturating pair among the inputs");
                for i in (0..rows * cols).filter(|&i| sat(i)) {
                    let want = act_kernel(7.0, act) * (7.0f32.copysign(up[i]) + 1.0);
                    assert_eq!(y[i], want, "{what}: saturated value {i}");
                }
            }
        }
    }
}
