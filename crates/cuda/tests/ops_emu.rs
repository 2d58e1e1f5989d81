//! kernels/ops.cu's clamped SwiGLU and `scale_inplace` run on the host (scripts/ops_emu, built
//! here with g++ over their source cut out of ops.cu and common.cuh): with the CUDA intrinsics
//! replaced by their exact host operations, every value equals tf_backend's reference
//! (`reference::glu_clamped`, `x * c`; GELU with the kernels' `sqrt(2 / pi)`, one ulp from the
//! reference's) bit for bit, over NaN, infinite and saturating inputs,
//! limits that clamp most values and none, and the bf16 copy lands at its padded row stride. On
//! the device only SiLU's `__fdividef` and CUDA's `expf` / `tanhf` differ (within a few ulp, as
//! for the unclamped `glu`); tests/ops.rs covers that. Skips (passing) where g++ or the sources
//! are missing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tf_backend::Activation;
use tf_backend::reference::glu_clamped;

/// The source of the `__device__` function or `__global__` kernel `name` in `src`.
fn cut(src: &str, name: &str) -> String {
    let start = src
        .lines()
        .scan(0, |off, l| {
            let at = *off;
            *off += l.len() + 1;
            Some((at, l))
        })
        .find(|(_, l)| {
            (l.starts_with("__device__") || l.starts_with("extern \"C\" __global__"))
                && l.contains(&format!(" {name}("))
        })
        .map(|(at, _)| at)
        .unwrap_or_else(|| panic!("{name} is not in the kernel source"));
    let line_end = src[start..].find('\n').map_or(src.len(), |e| start + e);
    if src[start..line_end].trim_end().ends_with('}') {
        return src[start..line_end].to_string();
    }
    let end = src[start..].find("\n}\n").map(|e| start + e + 3).unwrap_or_else(|| panic!("{name} has no end"));
    src[start..end].to_string()
}

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
    let mut header = cut(&common, "f2bf");
    for name in ["act_one", "glu_clamped_one", "glu_clamped", "scale_inplace"] {
        header.push('\n');
        header.push_str(&cut(&ops, name));
    }
    std::fs::write(dir.join("ops_emu.h"), header).expect("writing the emulator's header");
    let out = dir.join("ops-emu");
    let status = Command::new("g++")
        .args(["-std=c++17", "-O1", "-ffp-contract=off", "-fno-strict-aliasing", "-I"])
        .arg(&dir)
        .arg("-o")
        .arg(&out)
        .arg(root.join("scripts/ops_emu/main.cpp"))
        .status();
    match status {
        Ok(s) if s.success() => Some(out),
        Ok(s) => panic!("the ops emulator did not build: {s}"),
        Err(e) => {
            eprintln!("skipped: no g++ ({e})");
            None
        }
    }
}

/// The emulator's `y`, its bf16 copy `[rows, kp]` and `gate * c`.
#[allow(clippy::too_many_arguments)]
fn run(
    emu: &Path,
    rows: usize,
    cols: usize,
    kp: usize,
    act: i32,
    limit: f32,
    c: f32,
    gate: &[f32],
    up: &[f32],
) -> (Vec<f32>, Vec<u16>, Vec<f32>) {
    let mut child = Command::new(emu).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("the emulator runs");
    let mut input: Vec<u8> = [rows as i32, cols as i32, kp as i32, act].iter().flat_map(|v| v.to_le_bytes()).collect();
    input.extend([limit, c].iter().chain(gate).chain(up).flat_map(|v| v.to_le_bytes()));
    child.stdin.take().expect("stdin").write_all(&input).expect("feeding the emulator");
    let out = child.wait_with_output().expect("the emulator's output");
    assert!(out.status.success(), "the emulator failed: {}", out.status);
    let n = rows * cols;
    assert_eq!(out.stdout.len(), 4 * n + 2 * rows * kp + 4 * n, "emulator output size");
    let f32s = |b: &[u8]| b.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect::<Vec<_>>();
    let (y, rest) = out.stdout.split_at(4 * n);
    let (yb, s) = rest.split_at(2 * rows * kp);
    (f32s(y), yb.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect(), f32s(s))
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

#[test]
fn clamped_glu_and_scale_on_the_host_equal_the_reference() {
    let Some(emu) = build() else { return };
    // (rows, cols): rows of whole 16-wide tiles and rows with padding past them.
    for (rows, cols) in [(5usize, 96usize), (3, 40), (4, 7), (1, 1)] {
        let kp = cols.next_multiple_of(16);
        let (gate, up) = (values(rows * cols, 3 + cols as u64, 12.0), values(rows * cols, 5 + rows as u64, 12.0));
        // ops.rs `act_code`: SiLU 0, GELU (tanh) 1.
        for (act, code) in [(Activation::Silu, 0), (Activation::GeluTanh, 1)] {
            for limit in [0.8, 7.0, f32::INFINITY] {
                let c = 0.37;
                let (y, yb, s) = run(&emu, rows, cols, kp, code, limit, c, &gate, &up);
                let what = format!("{rows}x{cols} {act:?} limit {limit}");
                for i in 0..rows * cols {
                    let want = match act {
                        Activation::GeluTanh => gelu_kernel(gate[i]).min(limit) * up[i].max(-limit).min(limit),
                        _ => glu_clamped(gate[i], up[i], act, limit),
                    };
                    let ok = want.to_bits() == y[i].to_bits() || (want.is_nan() && y[i].is_nan());
                    assert!(ok, "{what}: value {i} ({}, {}): {} against {want}", gate[i], up[i], y[i]);
                    let (r, col) = (i / cols, i % cols);
                    let b = yb[r * kp + col];
                    // A NaN stays a NaN (common.cuh `f2bf` keeps its high bits, quiet).
                    let nan = y[i].is_nan() && b & 0x7f80 == 0x7f80 && b & 0x7f != 0;
                    assert!(nan || b == bf16(y[i]), "{what}: bf16 copy of value {i}");
                    let want = gate[i] * c;
                    assert!(want.to_bits() == s[i].to_bits() || want.is_nan() && s[i].is_nan(), "{what}: scale {i}");
                }
                for r in 0..rows {
                    assert!(yb[r * kp + cols..(r + 1) * kp].iter().all(|&b| b == 0xffff), "{what}: padding of row {r}");
                }
                if limit < 1.0 {
                    let clamped = (0..rows * cols).filter(|&i| y[i].abs() == limit * limit).count();
                    assert!(rows * cols < 8 || clamped > 0, "{what}: no value clamped at both ends");
                }
            }
        }
    }
}
