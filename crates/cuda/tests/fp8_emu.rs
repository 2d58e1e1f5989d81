//! kernels/fp8.cu run on the host (scripts/fp8_emu, built here with g++): the FP8 upload's
//! padding, the dequantizing path's bf16 weight (fp8_to_bf16) and the embedding rows equal the
//! host's definition (fp8_host.rs, `Fp8Scales::dequantize_row`) bit for bit, over partial edge
//! blocks, block widths that are not whole 8-weight groups, and every code but the NaNs, with
//! no GPU. It covers the portable E4M3 decode (cards before sm_89); the device tests
//! (tests/fp8.rs) cover the card's own. Skips (passing) where g++ or the sources are missing.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tf_backend::Fp8Scales;

/// The emulator, built into the test's temporary directory; `None` without g++ or the sources
/// (a test binary carried to another machine).
fn build() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if !root.join("scripts/fp8_emu/main.cpp").exists() {
        eprintln!("skipped: no scripts/fp8_emu beside this test binary's sources");
        return None;
    }
    let out = std::env::temp_dir().join(format!("tf-fp8-emu-{}", std::process::id()));
    common::emu::gxx(
        &["-std=c++17", "-O1", "-ffp-contract=off", "-fno-strict-aliasing"],
        None,
        &root.join("scripts/fp8_emu/main.cpp"),
        out,
        "FP8",
    )
}

/// The emulator's padded bf16 weight and embedding rows for codes `[n, k]` with `scales`.
fn run(emu: &Path, n: usize, k: usize, codes: &[u8], scales: &Fp8Scales) -> (Vec<u16>, Vec<f32>) {
    let mut child = Command::new(emu).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("the emulator runs");
    let mut input: Vec<u8> =
        [n, k, scales.block[0], scales.block[1]].iter().flat_map(|&v| (v as i32).to_le_bytes()).collect();
    input.extend_from_slice(codes);
    input.extend(scales.values.iter().flat_map(|v| v.to_le_bytes()));
    child.stdin.take().expect("stdin").write_all(&input).expect("feeding the emulator");
    let out = child.wait_with_output().expect("the emulator's output");
    assert!(out.status.success(), "the emulator failed: {}", out.status);
    let (nt, kt) = (n.div_ceil(16), k.div_ceil(16));
    let wlen = nt * 16 * kt * 16 * 2;
    assert_eq!(out.stdout.len(), wlen + n * k * 4, "emulator output size");
    let w = out.stdout[..wlen].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    let e = out.stdout[wlen..].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    (w, e)
}

#[test]
fn fp8_kernels_on_the_host_equal_the_definition() {
    let Some(emu) = build() else { return };
    let cases: [(usize, usize, [usize; 2]); 6] = [
        (37, 101, [16, 48]),
        (40, 130, [1, 130]),
        (33, 70, [33, 70]),
        (50, 75, [7, 5]),
        (16, 256, [128, 128]),
        (3, 9, [2, 3]),
    ];
    for (i, &(n, k, block)) in cases.iter().enumerate() {
        // Every code but the NaNs, in turn; scales from tiny (subnormal products) to large.
        let codes: Vec<u8> = (0..n * k)
            .map(|j| ((j * 7 + i * 13) % 256) as u8)
            .map(|c| if c & 0x7F == 0x7F { c ^ 1 } else { c })
            .collect();
        let g = [n.div_ceil(block[0]), k.div_ceil(block[1])];
        let values = (0..g[0] * g[1])
            .map(|j| [2f32.powi(-130), 0.013, 1.0, 3.7e3][(i + j) % 4] * (1.0 + j as f32 / 7.0))
            .collect();
        let scales = Fp8Scales { block, values };
        assert!(scales.check("w", n, k).is_ok());
        let (w, emb) = run(&emu, n, k, &codes, &scales);
        let want = tf_cuda::fp8_dequantize_bf16(&codes, n, k, &scales);
        let kp = k.div_ceil(16) * 16;
        for (r, row) in w.chunks_exact(kp).enumerate() {
            let (body, pad) = row.split_at(k);
            if r < n {
                assert_eq!(body, &want[r * k..(r + 1) * k], "{n}x{k} {block:?}: row {r}");
            } else {
                assert!(body.iter().all(|&v| v == 0), "{n}x{k} {block:?}: padding row {r}");
            }
            assert!(pad.iter().all(|&v| v == 0), "{n}x{k} {block:?}: padding of row {r}");
        }
        let mut row = vec![0.0; k];
        for r in 0..n {
            scales.dequantize_row(&codes[r * k..(r + 1) * k], r, &mut row);
            let got = &emb[r * k..(r + 1) * k];
            assert!(
                row.iter().zip(got).all(|(a, b)| (a * 0.5).to_bits() == b.to_bits()),
                "{n}x{k} {block:?}: embedding row {r}"
            );
        }
    }
}
