//! kernels/attention_mla.cu run on the host by scripts/mla_emu (built here with g++; skipped
//! without it): the latent rows land in their pool slots, every row's output is the f64
//! attention over its sequence's causal latent rows, and a row's bits do not depend on its round
//! (whole prefill == chunked prefill == decode in split mode, with other sequences beside it).

use super::{head_tile, split_chunks};
use crate::attn_meta::pack;
use crate::tensor::padded;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tf_backend::{AttnMeta, SeqAttn};

const BLOCK: usize = 16;
const BLOCKS: usize = 64;

/// The emulator, built into the temporary directory; `None` without g++ or the sources.
fn build() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if !root.join("scripts/mla_emu/main.cpp").exists() {
        eprintln!("skipped: no scripts/mla_emu beside this test binary's sources");
        return None;
    }
    let out = std::env::temp_dir().join(format!("tf-mla-emu-{}", std::process::id()));
    let status = Command::new("g++")
        .args(["-std=c++20", "-O2", "-ffp-contract=off", "-pthread", "-o"])
        .arg(&out)
        .arg(root.join("scripts/mla_emu/main.cpp"))
        .status();
    match status {
        Ok(s) if s.success() => Some(out),
        Ok(s) => panic!("the latent attention emulator did not build: {s}"),
        Err(e) => {
            eprintln!("skipped: no g++ ({e})");
            None
        }
    }
}

/// Deterministic values in [-scale, scale).
fn rand(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// f32 to bf16, nearest even (common.cuh `f2bf`; no NaNs here).
fn bf16(x: f32) -> u16 {
    let u = x.to_bits();
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// One sequence's queries `[len, heads * d]`, latent rows `[len, d]` and block table.
struct Seq {
    q: Vec<f32>,
    lat: Vec<f32>,
    table: Vec<u32>,
}

/// A model's shape and the pool the rounds share.
struct Case {
    emu: PathBuf,
    heads: usize,
    d: usize,
    scale: f32,
    pool: Vec<u16>,
}

impl Case {
    /// Runs rows `start..start + n` of each `(seq, start, n)` as one round: each row's output
    /// (f32, then its bf16 copy) keyed by (sequence, position).
    fn round(
        &mut self,
        seqs: &[Seq],
        parts: &[(usize, usize, usize)],
    ) -> HashMap<(usize, usize), (Vec<u32>, Vec<u16>)> {
        let (heads, d) = (self.heads, self.d);
        let mut meta =
            AttnMeta { state_slots: Vec::new(), seqs: Vec::new(), slot_mapping: Vec::new(), block_size: BLOCK };
        let (mut q, mut lat) = (Vec::new(), Vec::new());
        for &(s, start, n) in parts {
            let table = seqs[s].table.clone();
            meta.slot_mapping.extend((start..start + n).map(|p| table[p / BLOCK] as usize * BLOCK + p % BLOCK));
            meta.seqs.push(SeqAttn { q_start: q.len() / (heads * d), q_len: n, start_pos: start, block_table: table });
            q.extend_from_slice(&seqs[s].q[start * heads * d..(start + n) * heads * d]);
            lat.extend_from_slice(&seqs[s].lat[start * d..(start + n) * d]);
        }
        let rows = meta.slot_mapping.len();
        let packed = pack(&meta, heads);
        let l = packed.lay;
        let per_item = packed.host[l.items_off..l.slots_off].chunks(3).map(|it| it[2] as usize).max().unwrap_or(1);
        let ht = head_tile(heads, d).expect("the tile fits");
        let nz = split_chunks(&meta, rows, l.num_items * per_item * heads.div_ceil(ht), 132, heads, d);
        let kp = padded(heads * d);
        let hdr = [rows, heads, d, ht, nz, per_item, BLOCK, (BLOCKS + 1) * BLOCK, packed.host.len()];
        let hdr2 = [l.items_off, l.slots_off, l.bt_off, l.num_items, kp];
        let mut input: Vec<u8> = hdr.iter().chain(&hdr2).flat_map(|&v| (v as i32).to_le_bytes()).collect();
        input.extend(self.scale.to_le_bytes());
        input.extend(packed.host.iter().flat_map(|v| v.to_le_bytes()));
        input.extend(q.iter().chain(&lat).flat_map(|v| v.to_le_bytes()));
        input.extend(self.pool.iter().flat_map(|v| v.to_le_bytes()));
        let mut child =
            Command::new(&self.emu).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("the emulator runs");
        child.stdin.take().expect("stdin").write_all(&input).expect("feeding the emulator");
        let out = child.wait_with_output().expect("the emulator's output");
        assert!(out.status.success(), "the emulator failed: {}", out.status);
        let w = heads * d;
        assert_eq!(out.stdout.len(), rows * w * 4 + rows * kp * 2 + self.pool.len() * 2, "emulator output size");
        let (f, rest) = out.stdout.split_at(rows * w * 4);
        let (b, pool) = rest.split_at(rows * kp * 2);
        let words =
            |x: &[u8]| x.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>();
        let halves = |x: &[u8]| x.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect::<Vec<_>>();
        let (f, b) = (words(f), halves(b));
        self.pool = halves(pool);
        let mut res = HashMap::new();
        let mut r = 0;
        for &(s, start, n) in parts {
            for p in start..start + n {
                res.insert((s, p), (f[r * w..(r + 1) * w].to_vec(), b[r * kp..r * kp + w].to_vec()));
                r += 1;
            }
        }
        res
    }
}

/// The f64 attention of sequence `s`'s row at `pos` over its bf16 latent rows `0..=pos`.
fn reference(c: &Case, s: &Seq, pos: usize) -> Vec<f64> {
    let (heads, d) = (c.heads, c.d);
    let key = |j: usize, i: usize| f32::from_bits((bf16(s.lat[j * d + i]) as u32) << 16) as f64;
    let mut out = vec![0.0; heads * d];
    for h in 0..heads {
        let qh = &s.q[(pos * heads + h) * d..][..d];
        let sc: Vec<f64> =
            (0..=pos).map(|j| (0..d).map(|i| qh[i] as f64 * key(j, i)).sum::<f64>() * c.scale as f64).collect();
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
        let l: f64 = e.iter().sum();
        for i in 0..d {
            out[h * d + i] = (0..=pos).map(|j| e[j] * key(j, i)).sum::<f64>() / l;
        }
    }
    out
}

/// Two sequences (`lens`) run whole, then chunked with decode rounds last (split mode past one
/// chunk): the pool holds the latent rows, outputs match the f64 reference, and each row's bits
/// are the same in both schedules.
fn check(emu: &Path, heads: usize, d: usize, lens: [usize; 2]) {
    let scale = (d as f32).powf(-0.5) * 2.0;
    let seqs: Vec<Seq> = (0..2)
        .map(|i| Seq {
            q: rand(lens[i] * heads * d, 10 + i as u64, 3.0),
            lat: rand(lens[i] * d, 20 + i as u64, 1.5),
            table: (0..lens[i].div_ceil(BLOCK) as u32).map(|b| 2 * b + i as u32).collect(),
        })
        .collect();
    let fresh = || Case { emu: emu.to_path_buf(), heads, d, scale, pool: vec![0; (BLOCKS + 1) * BLOCK * d] };
    let mut whole = fresh();
    let one = whole.round(&seqs, &[(0, 0, lens[0]), (1, 0, lens[1])]);
    for (s, seq) in seqs.iter().enumerate() {
        for p in 0..lens[s] {
            let slot = seq.table[p / BLOCK] as usize * BLOCK + p % BLOCK;
            let want: Vec<u16> = seq.lat[p * d..(p + 1) * d].iter().map(|&x| bf16(x)).collect();
            assert_eq!(whole.pool[slot * d..(slot + 1) * d], want, "d={d}: seq {s} pos {p}'s latent row in its slot");
        }
    }
    let mut chunked = fresh();
    let (a, b) = (lens[0], lens[1]);
    let mut two = chunked.round(&seqs, &[(0, 0, a / 3)]);
    two.extend(chunked.round(&seqs, &[(1, 0, b - 1), (0, a / 3, a - 1 - a / 3)]));
    two.extend(chunked.round(&seqs, &[(1, b - 1, 1), (0, a - 1, 1)]));
    assert_eq!(whole.pool, chunked.pool, "d={d}: the same pool either way");
    for (key, got) in &one {
        assert!(two[key] == *got, "d={d}: row {key:?} differs between whole and chunked/split rounds");
        let want = reference(&whole, &seqs[key.0], key.1);
        let top = want.iter().fold(0f64, |a, &x| a.max(x.abs()));
        for (i, (&g, &w)) in got.0.iter().zip(&want).enumerate() {
            let g = f32::from_bits(g) as f64;
            assert!((g - w).abs() <= 1e-5 * top.max(1.0), "d={d}: row {key:?} value {i}: {g} vs {w}");
            assert_eq!(got.1[i], bf16(g as f32), "d={d}: row {key:?} value {i}'s bf16 copy");
        }
    }
}

#[test]
fn latent_attention_kernel_on_the_host_equals_the_reference_in_every_schedule() {
    let Some(emu) = build() else { return };
    // The fixtures' latent width (32 + 16) over two 256-key chunks, then DeepSeek V3's (512 +
    // 64) with two head tiles, the second partial.
    check(&emu, 4, 48, [300, 37]);
    check(&emu, 20, 576, [40, 9]);
    let _ = std::fs::remove_file(emu);
}
