//! Attention over a latent KV pool (MLA's absorbed form: one KV head, its values its keys) on the
//! GPU: outputs against the reference backend's latent pool, each row's bits whatever its round
//! (batched prefill, token by token in split mode), and the pool's blocks in the host layout
//! (K, then K again), so sessions and preemption carry a latent pool across backends.

mod common;

use common::*;
use tf_backend::{AttnMeta, AttnParams, Backend, KvShape, RefBackend, SeqAttn};

const BLOCK: usize = 16;
const BLOCKS: usize = 48;

/// A latent attention shape: `heads` query heads over one latent row of width `d`.
fn params(heads: usize, d: usize) -> AttnParams {
    AttnParams { num_heads: heads, num_kv_heads: 1, head_dim: d, scale: 192f32.powf(-0.5), window: None, softcap: None }
}

/// A latent pool for `seqs` sequences.
fn pool<B: Backend>(b: &B, p: &AttnParams, seqs: usize) -> B::Kv {
    let shape =
        KvShape { num_blocks: BLOCKS * seqs, block_size: BLOCK, num_kv_heads: 1, head_dim: p.head_dim, latent: true };
    b.kv(shape).expect("a latent pool")
}

/// A paged round: `(start_pos, q_len)` per sequence, each with its own interleaved block table.
fn round(seqs: &[(usize, usize)]) -> AttnMeta {
    let mut meta = AttnMeta { state_slots: Vec::new(), seqs: Vec::new(), slot_mapping: Vec::new(), block_size: BLOCK };
    let mut q_start = 0;
    for (i, &(start_pos, q_len)) in seqs.iter().enumerate() {
        let block_table: Vec<u32> = (0..BLOCKS).map(|j| (j * seqs.len() + (seqs.len() - 1 - i)) as u32).collect();
        let slots = (start_pos..start_pos + q_len).map(|p| block_table[p / BLOCK] as usize * BLOCK + p % BLOCK);
        meta.slot_mapping.extend(slots);
        meta.seqs.push(SeqAttn { q_start, q_len, start_pos, block_table });
        q_start += q_len;
    }
    meta
}

/// One round's queries and latent rows from `seed`; the output, downloaded.
fn attend<B: Backend>(b: &B, kv: &mut B::Kv, p: &AttnParams, meta: &AttnMeta, seed: u64) -> Vec<f32> {
    let (t, w) = (meta.slot_mapping.len(), p.num_heads * p.head_dim);
    let q = b.upload(&rand(t * w, seed, 2.0), t, w);
    let latent = b.upload(&rand(t * p.head_dim, seed + 100, 1.5), t, p.head_dim);
    b.download(&b.attention(&q, &latent, &latent, kv, meta, p))
}

/// Each sequence's history in one round, then `seqs`' rows in one round: the second's output.
fn run<B: Backend>(b: &B, p: &AttnParams, seqs: &[(usize, usize)], seed: u64) -> Vec<f32> {
    let mut kv = pool(b, p, seqs.len());
    let hist: Vec<(usize, usize)> = seqs.iter().map(|&(s, _)| (0, s.max(1))).collect();
    attend(b, &mut kv, p, &round(&hist), seed);
    attend(b, &mut kv, p, &round(seqs), seed + 1)
}

/// The fixtures' latent width (32 + 16), DeepSeek V3's (512 + 64) with 128 heads (eight head
/// tiles) and with 20 (a partial tile), over runs that cross 256-key chunks and decode tokens
/// that split them.
fn cases() -> Vec<(AttnParams, Vec<(usize, usize)>)> {
    vec![
        (params(4, 48), vec![(5, 1), (0, 70), (130, 3), (300, 1)]),
        (params(4, 48), vec![(0, 600), (520, 1)]),
        (params(128, 576), vec![(0, 60), (33, 1)]),
        (params(20, 576), vec![(17, 9), (280, 1)]),
    ]
}

#[test]
fn latent_attention_matches_reference() {
    let Some(b) = backend() else { return };
    for (i, (p, seqs)) in cases().iter().enumerate() {
        let (got, want) = (run(&b, p, seqs, 7), run(&RefBackend, p, seqs, 7));
        // bf16 latent rows in the pool: well under 1% of the O(1) outputs.
        let e = max_err(&got, &want);
        assert!(e < 2e-2, "case {i}: max error {e}");
        eprintln!("latent attention case {i}: max |cuda - ref| = {e:.2e}");
    }
}

#[test]
fn latent_attention_rows_do_not_depend_on_the_round() {
    let Some(b) = backend() else { return };
    for (i, (p, seqs)) in cases().iter().enumerate() {
        let together = run(&b, p, seqs, 3);
        let w = p.num_heads * p.head_dim;
        let mut row = 0;
        for (s, &(start, n)) in seqs.iter().enumerate() {
            // The same history, then this sequence's rows of the batched round one token a round
            // (decode rounds: split across CTAs past one chunk).
            let mut kv = pool(&b, p, seqs.len());
            let hist: Vec<(usize, usize)> = seqs.iter().map(|&(s, _)| (0, s.max(1))).collect();
            attend(&b, &mut kv, p, &round(&hist), 3);
            let full = round(seqs);
            let t = full.slot_mapping.len();
            let (qa, la) = (rand(t * w, 4, 2.0), rand(t * p.head_dim, 104, 1.5));
            let mut alone = Vec::new();
            for j in 0..n {
                let r = full.seqs[s].q_start + j;
                let one = AttnMeta {
                    state_slots: Vec::new(),
                    seqs: vec![SeqAttn { start_pos: start + j, q_start: 0, q_len: 1, ..full.seqs[s].clone() }],
                    slot_mapping: vec![full.slot_mapping[r]],
                    block_size: BLOCK,
                };
                let q = b.upload(&qa[r * w..(r + 1) * w], 1, w);
                let lat = b.upload(&la[r * p.head_dim..(r + 1) * p.head_dim], 1, p.head_dim);
                alone.extend(b.download(&b.attention(&q, &lat, &lat, &mut kv, &one, p)));
            }
            assert!(same_bits(&alone, &together[row * w..(row + n) * w]), "case {i}: sequence {s} alone vs batched");
            row += n;
        }
    }
}

#[test]
fn latent_pool_blocks_read_and_write_in_the_host_layout() {
    let Some(b) = backend() else { return };
    let p = params(4, 48);
    let seqs = [(0, 40), (3, 20)];
    let mut kv = pool(&b, &p, seqs.len());
    attend(&b, &mut kv, &p, &round(&seqs), 9);
    // K, then K again (the host pools' layout for a latent pool), bf16.
    let blocks = [0u32, 1, 2, 3, 5];
    let bytes = b.read_kv_blocks(&kv, &blocks);
    assert_eq!(bytes.len(), 2 * 2 * blocks.len() * BLOCK * p.head_dim);
    let (k, again) = bytes.split_at(bytes.len() / 2);
    assert_eq!(k, again, "a latent pool reads its keys as its values");
    assert!(k.iter().any(|&x| x != 0), "the round's latent rows are in the pool");
    // Written into a fresh pool (a restored session), the blocks attend as the original does.
    let mut restored = pool(&b, &p, seqs.len());
    b.write_kv_blocks(&mut restored, &blocks, &bytes);
    assert_eq!(b.read_kv_blocks(&restored, &blocks), bytes);
    let next = round(&[(40, 1), (23, 1)]);
    let (a, r) = (attend(&b, &mut kv, &p, &next, 11), attend(&b, &mut restored, &p, &next, 11));
    assert!(same_bits(&a, &r), "a restored latent pool attends as the original");
}

/// The absorbed per-head products on the device (weights copied there at load): the host
/// reference's bits (each sum left to right), in a round of 70 rows (two row tiles) or alone;
/// the per-head concatenation bit for bit the host's.
#[test]
fn per_head_ops_on_the_device_match_the_host() {
    let Some(b) = backend() else { return };
    // W_UK's shape (128 heads of 512 x 128), W_UV's (128 of 128 x 576), a ragged small one.
    for (heads, out, cols) in [(128, 512, 128), (128, 128, 576), (3, 5, 37)] {
        let host = rand(heads * out * cols, 11, 0.1);
        let w = tf_backend::HeadWeights { host: &host, heads, out };
        let on_device = b.head_copy(&w);
        assert!(on_device.is_some(), "the CUDA backend keeps per-head weights on the device");
        let rows = 70;
        let x = rand(rows * heads * cols, 12, 1.0);
        let want = tf_backend::heads::head_matmul(&x, rows, &w);
        let all = b.download(&b.head_matmul(&b.upload(&x, rows, heads * cols), &w, on_device.as_ref()));
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert!(bits(&all) == bits(&want), "{heads}x{out}x{cols}: max error {}", max_err(&all, &want));
        for r in [0, 4, 69] {
            let row = &x[r * heads * cols..(r + 1) * heads * cols];
            let alone = b.download(&b.head_matmul(&b.upload(row, 1, heads * cols), &w, on_device.as_ref()));
            assert_eq!(bits(&alone), bits(&all[r * heads * out..(r + 1) * heads * out]), "row {r} alone");
        }
    }
    for (rows, heads, wa, wc) in [(7, 128, 512, 64), (1, 1, 48, 16), (0, 4, 2, 3)] {
        let (a, c) = (rand(rows * heads * wa, 13, 1.0), rand(rows * heads * wc, 14, 1.0));
        let want = tf_backend::heads::concat_heads(&a, &c, rows, heads);
        let got = b.download(&b.concat_heads(&b.upload(&a, rows, heads * wa), &b.upload(&c, rows, heads * wc), heads));
        assert!(got == want, "concat_heads {rows}x{heads}x({wa}+{wc})");
    }
}
