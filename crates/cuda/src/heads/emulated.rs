//! kernels/heads.cu's `head_matmul` run on the host by scripts/heads_emu (built here with g++;
//! skipped without it): every value is the host reference's (tf_backend heads.rs) bit for bit,
//! for shapes past and short of the kernel's 64 x 64 tiles and 16-column stages.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The emulator, built into the temporary directory; `None` without g++ or the sources.
fn build() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if !root.join("scripts/heads_emu/main.cpp").exists() {
        eprintln!("skipped: no scripts/heads_emu beside this test binary's sources");
        return None;
    }
    let out = std::env::temp_dir().join(format!("tf-heads-emu-{}", std::process::id()));
    let status = Command::new("g++")
        .args(["-std=c++20", "-O2", "-ffp-contract=off", "-pthread", "-o"])
        .arg(&out)
        .arg(root.join("scripts/heads_emu/main.cpp"))
        .status();
    match status {
        Ok(s) if s.success() => Some(out),
        Ok(s) => panic!("the head_matmul emulator did not build: {s}"),
        Err(e) => {
            eprintln!("skipped: no g++ ({e})");
            None
        }
    }
}

/// The emulated kernel's `[rows, heads * out]`.
fn run(emu: &Path, rows: usize, heads: usize, out: usize, cols: usize, x: &[f32], w: &[f32]) -> Vec<f32> {
    let mut child = Command::new(emu).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("emulator");
    let mut input = Vec::new();
    for v in [rows, heads, out, cols] {
        input.extend((v as i32).to_le_bytes());
    }
    input.extend(x.iter().chain(w).flat_map(|v| v.to_le_bytes()));
    child.stdin.take().expect("stdin").write_all(&input).expect("feeding the emulator");
    let done = child.wait_with_output().expect("emulator output");
    assert!(done.status.success(), "the emulator failed");
    done.stdout.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn the_emulated_kernel_gives_the_host_references_bits() {
    let Some(emu) = build() else { return };
    let val = |i: usize, s: f32| ((i * 7919 + 13) % 1009) as f32 / 1009.0 * s - s / 2.0;
    for (rows, heads, out, cols) in [(3, 2, 19, 33), (70, 2, 130, 37), (1, 3, 64, 128), (65, 1, 1, 1), (2, 1, 5, 16)] {
        let x: Vec<f32> = (0..rows * heads * cols).map(|i| val(i + 5, 2.0)).collect();
        let w: Vec<f32> = (0..heads * out * cols).map(|i| val(i, 0.3)).collect();
        let want = tf_backend::heads::head_matmul(&x, rows, &tf_backend::HeadWeights { host: &w, heads, out });
        let got = run(&emu, rows, heads, out, cols, &x, &w);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "{rows}x{heads}x{out}x{cols}");
    }
}
