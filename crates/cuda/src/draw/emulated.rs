//! kernels/draw.cu run on the host by scripts/draw_emu (built by scripts/draw_emu.sh): each row's
//! token from the emulated kernel's answer equals the host sampler's on the whole row. Ignored by
//! default (it needs the emulator and takes minutes); the device test is tests/sample.rs.

use super::*;
use tf_backend::TokenMask;
use tf_backend::candidates::apply_edits;
use tf_engine::sampler::{History, SamplingParams, query, sample, sample_from};

/// The emulator scripts/draw_emu.sh builds.
const EMU: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/draw_emu/emu");

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

/// Flat rows (wide and very narrow), planted ties, a peaked row, NaN and -inf holes, +inf, all
/// equal, all -inf.
fn rows(cols: usize) -> Vec<Vec<f32>> {
    let flat = |seed| rand(cols, seed, 3.0);
    let mut ties = flat(31);
    for i in (0..cols).step_by(cols / 120 + 1) {
        ties[i] = 3.5;
    }
    let mut wide_ties = flat(32);
    for i in (0..cols).step_by(7) {
        wide_ties[i] = 2.0;
    }
    let peaked: Vec<f32> = rand(cols, 40, 1.0)
        .iter()
        .enumerate()
        .map(|(i, &u)| if i % 61 == 0 { 20.0 * u } else { -40.0 + 5.0 * u })
        .collect();
    let mut holes = flat(41);
    for i in (0..cols).step_by(97) {
        holes[i] = f32::NAN;
    }
    for i in (5..cols).step_by(89) {
        holes[i] = f32::NEG_INFINITY;
    }
    let mut inf = flat(42);
    inf[cols / 2] = f32::INFINITY;
    vec![
        flat(30),
        ties,
        flat(33),
        wide_ties,
        peaked,
        holes,
        inf,
        vec![1.0; cols],
        vec![f32::NEG_INFINITY; cols],
        rand(cols, 50, 0.3),
    ]
}

/// Every kind of row the engine draws.
fn params() -> Vec<SamplingParams> {
    let t = |temperature: f32| SamplingParams { temperature, ..SamplingParams::default() };
    vec![
        SamplingParams { top_p: 0.95, ..t(0.8) },
        SamplingParams { top_k: 50, ..t(0.8) },
        SamplingParams { top_k: 50, top_p: 0.9, ..t(0.8) },
        SamplingParams { min_p: 0.05, ..t(1.0) },
        t(1.0),
        SamplingParams {
            repetition_penalty: 1.3,
            frequency_penalty: 0.5,
            presence_penalty: -0.25,
            logit_bias: vec![(7, 3.0), (100, -2.0)],
            top_p: 0.95,
            ..t(0.8)
        },
        t(0.0),
        SamplingParams { top_k: 1, ..t(0.8) },
        SamplingParams { top_p: 0.5, min_p: 0.1, ..t(1.3) },
        SamplingParams { logit_bias: vec![(3, 1.5)], ..t(0.0) },
        SamplingParams { top_k: 200, top_p: 0.99, min_p: 0.01, ..t(0.5) },
        SamplingParams { top_p: 0.3, ..t(2.0) },
    ]
}

/// The emulated kernel's answers for `edited` rows under `queries` (packed as draw() packs them).
fn emulate(edited: &[Vec<f32>], queries: &[RowQuery]) -> Vec<u32> {
    let (n, cols) = (edited.len(), edited[0].len());
    let listed: Vec<usize> = (0..n).collect();
    let (packed, num_edits) = pack(&listed, queries);
    let masks = n * QUERY_WORDS + num_edits * EDIT_WORDS;
    let mut bytes = Vec::new();
    for w in [n, cols, packed.len(), masks] {
        bytes.extend((w as u32).to_le_bytes());
    }
    bytes.extend(edited.iter().flatten().flat_map(|v| v.to_le_bytes()));
    bytes.extend(packed.iter().flat_map(|w| w.to_le_bytes()));
    let dir = std::env::temp_dir();
    let (input, output) = (dir.join(format!("draw_emu_{cols}.in")), dir.join(format!("draw_emu_{cols}.out")));
    std::fs::write(&input, &bytes).expect("writing the emulator's input");
    let ran = std::process::Command::new(EMU).arg(&input).arg(&output).status();
    assert!(ran.is_ok_and(|s| s.success()), "{EMU} failed: build it with scripts/draw_emu.sh");
    let out = std::fs::read(&output).expect("reading the emulator's answers");
    out.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
#[ignore]
fn the_emulated_kernel_gives_the_host_samplers_tokens() {
    let mut history = History::default();
    for id in [7u32, 9, 9, 100, 2] {
        history.push(id);
    }
    for cols in [151936usize, 4099, 1000, 3] {
        let (mut base, params) = (rows(cols), params());
        // Three near-tied race scores in one thread's group of four (ids 0, 1, 2), made from the
        // host's noise for the plain race's row of this kind (params 4): one thread's third best
        // is a finalist, so the finalists are gathered by a second pass.
        let (kind, plain) = (base.len(), 4);
        let (seed, position) = ((kind * 100 + plain) as u64, 17 + (kind * params.len() + plain) as u64);
        let mut near = vec![-50.0f32; cols];
        for (id, v) in near.iter_mut().enumerate().take(3) {
            *v = 30.0 - tf_backend::rng::gumbel(tf_backend::rng::uniform(seed, position, id as u32));
        }
        base.push(near);
        let (mut edited, mut jobs, mut queries) = (Vec::new(), Vec::new(), Vec::new());
        for (k, raw) in base.iter().enumerate() {
            for (j, p) in params.iter().enumerate() {
                let r = jobs.len();
                let p = SamplingParams { seed: (k * 100 + j) as u64, ..p.clone() };
                // Every fifth row allows two ids in three.
                let mask = (r % 5 == 4).then(|| TokenMask::from_ids(cols, (0..cols as u32).filter(|i| i % 3 != 1)));
                let position = 17 + r as u64;
                let q = RowQuery { mask: mask.clone(), ..query(&p, &history, position).expect("a query") };
                // The edits kernel's work (the same single roundings); the mask is the kernel's.
                let mut e = raw.clone();
                apply_edits(&mut e, &RowQuery { mask: None, ..q.clone() });
                edited.push(e);
                jobs.push((p, position, mask, k));
                queries.push(q);
            }
        }
        let out = emulate(&edited, &queries);
        // Rows of finite values without a huge tie at the cut are all settled on the device.
        let (mut settled, mut left) = (0, Vec::new());
        for (i, ((p, position, mask, k), q)) in jobs.iter().zip(&queries).enumerate() {
            let words = &out[i * OUT_WORDS..(i + 1) * OUT_WORDS];
            let c = answer(words, q.race.is_some())
                .unwrap_or_else(|| candidates(&mut edited[i].clone(), &q.without_edits()));
            if q.race.is_some() && ([0, 1, 2, 4, 5, 9].contains(k) || (*k == kind && i % params.len() == plain)) {
                match words[0] {
                    HOST => left.push((*k, i % params.len())),
                    _ => settled += 1,
                }
            }
            let mut whole = base[*k].clone();
            if let Some(m) = mask {
                m.apply(&mut whole);
            }
            let want = sample(&mut whole, p, &history, *position);
            assert_eq!(sample_from(&c, cols, p, *position), want, "{cols} ids, row kind {k}, {p:?}: {:?}", &words[..5]);
        }
        assert!(left.is_empty(), "{cols} ids: rows (kind, params) left to the host: {left:?}");
        eprintln!("{cols} ids: {settled} sampled rows settled on the device");
    }
}
