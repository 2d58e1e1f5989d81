//! kernels/moe.cu's `moe_plan_tiles` (the grouped expert GEMM's plan on the device) run on the
//! host: its source, cut out of moe.cu, is built with g++ as one thread walking every loop (its
//! barriers then order nothing that one thread does not), and its pair order, places and token
//! tiles are checked against a stable counting sort by expert (the order the host plan and
//! `moe_plan` give). Skips (passing) where g++ or the sources are missing.

mod common;

use common::emu::cut;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The host stand-ins for the CUDA names the kernel uses, and a main that reads
/// `pairs ne k` and the ids (u32 LE) and writes `ntt`, then pair_row, pos and the tiles.
const MAIN: &str = r#"
#include <cstdint>
#include <cstdio>
#include <vector>
typedef unsigned int u32;
#define __global__
#define __shared__
#define __restrict__
#define tf_pdl_enter()
#define __syncthreads()
struct Dim3 { unsigned x, y, z; };
static Dim3 threadIdx = {0, 0, 0}, blockDim = {1, 1, 1};
static int min(int a, int b) { return a < b ? a : b; }
u32 s_ids[MOE_PLAN_PAIRS];
#include "plan.h"
int main() {
    int head[3];
    if (fread(head, 4, 3, stdin) != 3) return 2;
    const int pairs = head[0], ne = head[1], k = head[2];
    std::vector<u32> ids(pairs), pair_row(pairs), pos(pairs), tiles(3 * (pairs / 128 + 1 + ne)), ntt(1);
    if (fread(ids.data(), 4, pairs, stdin) != (size_t)pairs) return 2;
    moe_plan_tiles(ids.data(), pairs, ne, k, pair_row.data(), pos.data(), tiles.data(), ntt.data());
    fwrite(ntt.data(), 4, 1, stdout);
    fwrite(pair_row.data(), 4, pairs, stdout);
    fwrite(pos.data(), 4, pairs, stdout);
    fwrite(tiles.data(), 4, 3 * ntt[0], stdout);
    return 0;
}
"#;

/// The emulator, built into a temporary directory; `None` without g++ or the sources.
fn build() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Ok(moe) = std::fs::read_to_string(root.join("crates/cuda/kernels/moe.cu")) else {
        eprintln!("skipped: no kernel sources beside this test binary's sources");
        return None;
    };
    let dir = std::env::temp_dir().join(format!("tf-moe-plan-emu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let defines: Vec<&str> = moe
        .lines()
        .filter(|l| {
            ["MAX_EXPERTS", "PLAN_PAIRS", "PLAN_THREADS"].iter().any(|d| l.starts_with(&format!("#define MOE_{d} ")))
        })
        .collect();
    assert_eq!(defines.len(), 3, "moe.cu's plan limits");
    std::fs::write(dir.join("plan.h"), cut(&moe, "moe_plan_tiles")).expect("writing the kernel");
    std::fs::write(dir.join("main.cpp"), format!("{}\n{MAIN}", defines.join("\n"))).expect("writing the main");
    let out = dir.join("plan-emu");
    common::emu::gxx(&["-std=c++17", "-O1"], Some(&dir), &dir.join("main.cpp"), out, "plan")
}

/// The emulator's `(pair_row, pos, tiles)` for `ids` (`[rows, k]`) over `ne` experts.
fn run(emu: &Path, ids: &[u32], ne: usize, k: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut child = Command::new(emu).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("the emulator runs");
    let head = [ids.len() as u32, ne as u32, k as u32];
    let input: Vec<u8> = head.iter().chain(ids).flat_map(|v| v.to_le_bytes()).collect();
    child.stdin.take().expect("stdin").write_all(&input).expect("feeding the emulator");
    let out = child.wait_with_output().expect("the emulator's output");
    assert!(out.status.success(), "the emulator failed: {}", out.status);
    let words: Vec<u32> = out.stdout.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let (ntt, rest) = words.split_first().expect("a tile count");
    let pairs = ids.len();
    assert_eq!(rest.len(), 2 * pairs + 3 * *ntt as usize, "emulator output size");
    (rest[..pairs].to_vec(), rest[pairs..2 * pairs].to_vec(), rest[2 * pairs..].to_vec())
}

/// The oracle: pairs stably sorted by expert, each pair's place, each expert's 128-pair tiles.
fn oracle(ids: &[u32], ne: usize, k: usize) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by_key(|&p| ids[p]);
    let pair_row = order.iter().map(|&p| (p / k) as u32).collect();
    let mut pos = vec![0u32; ids.len()];
    for (at, &p) in order.iter().enumerate() {
        pos[p] = at as u32;
    }
    let mut tiles = Vec::new();
    let mut start = 0u32;
    for e in 0..ne as u32 {
        let n = ids.iter().filter(|&&i| i == e).count() as u32;
        for first in (start..start + n).step_by(128) {
            tiles.extend([e, first, start + n]);
        }
        start += n;
    }
    (pair_row, pos, tiles)
}

#[test]
fn the_device_plan_sorts_pairs_by_expert_and_tiles_them_as_the_host_plan() {
    let Some(emu) = build() else { return };
    let mut x = 0x9e37_79b9_u64;
    let mut next = |n: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((x >> 33) % n) as u32
    };
    // (rows, top-k, experts): a decode round of 65 rows (more runs than pairs: most runs empty),
    // one of 256 rows over 128 experts (top-8: its 2048 pairs in 8 runs), runs of a length that
    // does not divide the pairs, a skewed router whose first expert takes most pairs (several
    // tiles, the last partial), and the most pairs the kernel takes (one run).
    let cases =
        [(65, 2, 8, false), (256, 8, 128, false), (77, 6, 64, false), (200, 4, 16, true), (1024, 8, 1024, false)];
    for (rows, k, ne, skew) in cases {
        let ids: Vec<u32> = (0..rows)
            .flat_map(|_| {
                // A row's experts are distinct.
                let mut chosen: Vec<u32> = Vec::new();
                while chosen.len() < k {
                    let e = if skew && chosen.is_empty() { 0 } else { next(ne as u64) };
                    if !chosen.contains(&e) {
                        chosen.push(e);
                    }
                }
                chosen
            })
            .collect();
        assert_eq!(run(&emu, &ids, ne, k), oracle(&ids, ne, k), "{rows} rows, top-{k} of {ne}");
    }
}
