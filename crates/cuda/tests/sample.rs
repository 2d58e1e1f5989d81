//! The CUDA backend's sampling candidates against tf_backend's host rule (candidates.rs) on the
//! same raw rows, bit for bit: ties, NaN, infinities, rows past the device's capacity, edits,
//! top-k; a plain race's candidates, which must hold the host's winner; and rounds drawn on the
//! device (draw.rs), whose tokens must be the host sampler's on the whole row.

mod common;

use common::*;
use std::collections::BTreeMap;
use tf_backend::candidates::{apply_edits, candidates, race_score};
use tf_backend::rng::{gumbel, uniform};
use tf_backend::{Backend, LogitEdit, RaceKey, RowQuery, TokenMask};
use tf_engine::sampler::{History, SamplingParams, query, sample, sample_from};

/// Candidates a row keeps on the device before it falls back to the host (src/sample.rs `CAP`).
const CAP: usize = 4096;

/// Whether two slices are equal bit for bit, any NaN equal to any NaN (arithmetic on a NaN gives
/// the device's canonical NaN, the host's keeps its payload).
fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan())
}

/// Logits whose top is spread: one value in 64 (in 4 for short rows) in [-20, 20), the rest in
/// [-45, -35).
fn spread(cols: usize, seed: u64) -> Vec<f32> {
    let share = if cols > 4 * CAP { 1.0 / 64.0 } else { 0.25 };
    let (u, pick) = (rand(cols, seed, 1.0), rand(cols, seed + 1000, 1.0));
    u.iter().zip(&pick).map(|(&u, &p)| if p >= 1.0 - 2.0 * share { 20.0 * u } else { -40.0 + 5.0 * u }).collect()
}

/// The test rows of width `cols`; row 6 is never listed.
fn rows(cols: usize) -> Vec<Vec<f32>> {
    let mut ties = spread(cols, 2);
    for i in [3, cols / 3, cols / 2, cols - 1, cols / 3 + 2048] {
        if i < cols {
            ties[i] = 25.0;
        }
    }
    let mut holes = spread(cols, 3);
    for i in (0..cols).step_by(97) {
        holes[i] = f32::NAN;
    }
    for i in (5..cols).step_by(89) {
        holes[i] = f32::NEG_INFINITY;
    }
    let mut inf = spread(cols, 4);
    inf[cols / 2] = f32::INFINITY;
    // Many values just below the top: past the device's capacity for a window of 2 or more.
    let dense: Vec<f32> =
        rand(cols, 6, 1.0).iter().map(|&u| if u > 0.9 { 19.0 + 10.0 * (u - 0.9) } else { u }).collect();
    vec![
        spread(cols, 1),
        ties,
        holes,
        vec![f32::NEG_INFINITY; cols],
        inf,
        vec![1.0; cols],
        spread(cols, 5),
        vec![f32::NAN; cols],
        dense,
    ]
}

/// The column of the first largest value (NaN never taken).
fn top(row: &[f32]) -> usize {
    (0..row.len()).fold(0, |b, i| if row[i] > row[b] || row[b].is_nan() && !row[i].is_nan() { i } else { b })
}

/// Edits touching the row's top, a raised id, a zero bias, a seen negative value, a counted id, a
/// NaN (column 0 of the NaN rows), and an id past the row (left alone).
fn edits(row: &[f32]) -> Vec<LogitEdit> {
    let cols = row.len();
    let e = |id: usize, bias, seen, count| (id as u32, LogitEdit { id: id as u32, bias, seen, count });
    let all = [
        e(0, Some(1.0), true, 1),
        e(7, Some(30.0), false, 0),
        e(13, Some(0.0), true, 0),
        e(cols / 2 + 1, None, true, 0),
        e(cols - 1, None, false, 3),
        e(cols + 5, Some(100.0), true, 2),
        e(top(row), None, true, 2),
    ];
    all.into_iter().collect::<BTreeMap<_, _>>().into_values().collect()
}

/// A query on `row` with no filter, race or temperature, and with the test's edits and
/// penalties when `edited`.
fn base(row: &[f32], edited: bool) -> RowQuery {
    RowQuery {
        edits: if edited { edits(row) } else { Vec::new() },
        repetition_penalty: if edited { 1.3 } else { 1.0 },
        frequency_penalty: if edited { 0.5 } else { 0.0 },
        presence_penalty: if edited { -0.25 } else { 0.0 },
        temperature: None,
        window: 0.0,
        race: None,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        mask: None,
    }
}

#[test]
fn sample_candidates_equal_the_host_rule() {
    let Some(b) = backend() else { return };
    let listed = [5usize, 0, 2, 1, 8, 3, 4, 7];
    for cols in [151936usize, 1000] {
        let raw = rows(cols);
        let flat: Vec<f32> = raw.iter().flatten().copied().collect();
        let mut counts_of_row0 = Vec::new();
        let mut over_cap = 0;
        for (round, window) in [0.0f32, 2.0, 20.0, 40.0].into_iter().enumerate() {
            for edited in [false, true] {
                let queries: Vec<RowQuery> = listed
                    .iter()
                    .enumerate()
                    .map(|(i, &r)| RowQuery {
                        temperature: [None, Some(0.7), Some(1.3)][(i + round) % 3],
                        window,
                        // Row 0 keeps its whole window (its counts grow with the window below).
                        top_k: if r == 0 { 0 } else { [0, 1, 3, 40, 3000][(i + round) % 5] },
                        ..base(&raw[r], edited)
                    })
                    .collect();
                let mut x = b.upload(&flat, raw.len(), cols);
                let got = b.sample_candidates(&mut x, &listed, &queries);
                assert_eq!(got.len(), listed.len());
                let after = b.download(&x);
                for (i, (&r, q)) in listed.iter().zip(&queries).enumerate() {
                    let at = format!("{cols} columns, window {window}, edits {edited}, row {r}");
                    let mut host = raw[r].clone();
                    let want = candidates(&mut host, q);
                    assert_eq!(got[i].ids, want.ids, "{at}: ids");
                    assert!(same(&got[i].values, &want.values), "{at}: values");
                    assert!(same(&after[r * cols..(r + 1) * cols], &host), "{at}: the device row is not edited");
                    let mut again = raw[r].clone();
                    apply_edits(&mut again, q);
                    assert!(same(&again, &host), "{at}: the host's own edits");
                    over_cap += (want.ids.len() > CAP) as usize;
                    if r == 0 && !edited {
                        counts_of_row0.push(want.ids.len());
                    }
                }
                assert!(same(&after[6 * cols..7 * cols], &raw[6]), "{cols} columns: an unlisted row changed");
            }
        }
        // The windows select different counts (the test's own expectation), and wide rows take
        // the host's path.
        assert!(counts_of_row0.windows(2).all(|w| w[0] < w[1]), "{cols} columns: {counts_of_row0:?}");
        assert_eq!(over_cap > 0, cols > CAP, "{cols} columns: rows past the capacity");
    }
    let mut x = b.upload(&[1.0, 2.0], 1, 2);
    assert!(b.sample_candidates(&mut x, &[], &[]).is_empty());
}

/// The host's race winner over a whole edited row: the largest race score, ties to the lower id,
/// NaN never (none when no score is finite).
fn race_winner(row: &[f32], q: &RowQuery, key: &RaceKey) -> Option<u32> {
    let scores: Vec<f32> = row.iter().zip(0..).map(|(&x, i)| race_score(key, q.scaled(x), i)).collect();
    let best = (0..row.len()).filter(|&i| !scores[i].is_nan()).fold(None, |b: Option<usize>, i| match b {
        Some(b) if scores[b] >= scores[i] => Some(b),
        _ => Some(i),
    })?;
    scores[best].is_finite().then_some(best as u32)
}

#[test]
fn race_candidates_keep_the_hosts_winner() {
    let Some(b) = backend() else { return };
    for cols in [151936usize, 1000] {
        let mut raw = rows(cols);
        // Near ties made from the host's own noise: 300 ids whose host scores all round to about
        // 30 (the rest far below), so device noise a few ulps off reorders them; only the margin
        // keeps the host's winner among the device's candidates.
        let key0 = RaceKey { seed: 11, position: 5 };
        let mut ties = vec![-50.0f32; cols];
        for i in (0..cols).step_by(cols / 300) {
            ties[i] = 30.0 - gumbel(uniform(key0.seed, key0.position, i as u32));
        }
        raw.push(ties);
        let flat: Vec<f32> = raw.iter().flatten().copied().collect();
        let listed: Vec<usize> = (0..raw.len()).filter(|&r| r != 6).collect();
        for (round, seed) in [11u64, 12, 1 << 40].into_iter().enumerate() {
            for edited in [false, true] {
                let tie_row = raw.len() - 1;
                let queries: Vec<RowQuery> = listed
                    .iter()
                    .enumerate()
                    .map(|(i, &r)| RowQuery {
                        // The tie row keeps its values and key, so its scores stay near ties.
                        temperature: if r == tie_row { None } else { [None, Some(0.7), Some(1.3)][(i + round) % 3] },
                        window: 20.0,
                        race: Some(if r == tie_row {
                            key0
                        } else {
                            RaceKey { seed: seed + (i as u64 % 2), position: 5 + ((round as u64) << 33) }
                        }),
                        ..base(&raw[r], edited)
                    })
                    .collect();
                let mut x = b.upload(&flat, raw.len(), cols);
                let got = b.sample_candidates(&mut x, &listed, &queries);
                for (i, (&r, q)) in listed.iter().zip(&queries).enumerate() {
                    let at = format!("{cols} columns, seed {seed}, edits {edited}, row {r}");
                    let key = q.race.unwrap_or(key0);
                    let mut host = raw[r].clone();
                    apply_edits(&mut host, q);
                    let c = &got[i];
                    match race_winner(&host, q, &key) {
                        Some(w) => {
                            assert!(c.ids.contains(&w), "{at}: the host's winner {w} is not among {:?}", c.ids);
                            assert!(c.ids.len() <= 400, "{at}: {} candidates", c.ids.len());
                        }
                        // No finite best: the whole row goes to the host's rule.
                        None => assert_eq!(c.ids.len(), cols, "{at}"),
                    }
                    let values: Vec<f32> = c.ids.iter().map(|&id| host[id as usize]).collect();
                    assert!(same(&c.values, &values), "{at}: values");
                }
            }
        }
    }
}

#[test]
fn top_p_candidates_equal_the_host_rule() {
    let Some(b) = backend() else { return };
    for cols in [151936usize, 1000] {
        let raw = rows(cols);
        let flat: Vec<f32> = raw.iter().flatten().copied().collect();
        let listed: Vec<usize> = (0..raw.len()).filter(|&r| r != 6).collect();
        for (round, top_p) in [0.5f32, 0.9, 0.95, 0.999].into_iter().enumerate() {
            for edited in [false, true] {
                let queries: Vec<RowQuery> = listed
                    .iter()
                    .enumerate()
                    .map(|(i, &r)| RowQuery {
                        temperature: [None, Some(0.2), Some(1.3)][(i + round) % 3],
                        window: 40.0,
                        top_p,
                        ..base(&raw[r], edited)
                    })
                    .collect();
                let mut x = b.upload(&flat, raw.len(), cols);
                let got = b.sample_candidates(&mut x, &listed, &queries);
                for (i, (&r, q)) in listed.iter().zip(&queries).enumerate() {
                    let at = format!("{cols} columns, top-p {top_p}, edits {edited}, row {r}");
                    // The host's rule narrows with its own exact window mass.
                    let want = candidates(&mut raw[r].clone(), q);
                    assert_eq!(got[i].ids, want.ids, "{at}: ids");
                    assert!(same(&got[i].values, &want.values), "{at}: values");
                    assert_eq!(got[i].window_mass.is_some(), want.window_mass.is_some(), "{at}: settled");
                    if let (Some(g), Some(w)) = (got[i].window_mass, want.window_mass) {
                        assert!((g - w).abs() <= w * 1e-10, "{at}: window mass {g} against {w}");
                    }
                }
            }
        }
    }
}

/// The sampling settings a drawn round mixes, row by row: the temperature 0.8 + top-p
/// 0.95 and top-k 50, both together, min-p, a plain race, penalties with a bias, greedy rows,
/// top-k 1 and a small top-p with min-p.
fn draw_params() -> Vec<SamplingParams> {
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
    ]
}

/// Rows a drawn round is tested on: flat (a random-weight model's: every id a top-p candidate),
/// flat with the top planted with ties (at top-k's k-th key and inside top-p's cut), peaked, and
/// the capacity test's rows (NaN, infinities, all -inf).
fn draw_rows(cols: usize) -> Vec<Vec<f32>> {
    let flat = |seed| rand(cols, seed, 3.0);
    let mut ties = flat(31);
    for i in (0..cols).step_by(cols / 120 + 1) {
        ties[i] = 3.5;
    }
    let mut wide_ties = flat(32);
    for i in (0..cols).step_by(7) {
        wide_ties[i] = 2.0;
    }
    let mut out = vec![flat(30), ties, flat(33), wide_ties, spread(cols, 34)];
    out.extend(rows(cols));
    out
}

/// Each row of a round of `batch` rows drawn by the device gives the token the host's sampler
/// gives on the whole row (`sample`, with the row's mask applied first), whatever the batch;
/// returns how many of the flat, tied and peaked rows sampled the device settled, and how many
/// such rows it sampled.
fn check_drawn_round(b: &tf_cuda::CudaBackend, cols: usize, batch: usize, salt: u64) -> (usize, usize) {
    let base = draw_rows(cols);
    let params = draw_params();
    let mut history = History::default();
    for id in [7u32, 9, 9, 100, 2] {
        history.push(id);
    }
    let kinds: Vec<usize> = (0..batch).map(|r| (r + salt as usize) % base.len()).collect();
    let rows: Vec<&Vec<f32>> = kinds.iter().map(|&k| &base[k]).collect();
    let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    let mut x = b.upload(&flat, batch, cols);
    let listed: Vec<usize> = (0..batch).rev().collect();
    let jobs: Vec<(SamplingParams, u64, Option<TokenMask>)> = listed
        .iter()
        .map(|&r| {
            let p = SamplingParams { seed: salt * 1000 + r as u64, ..params[(r / 3 + r) % params.len()].clone() };
            // Every fifth row allows two ids in three (structured output's mask).
            let mask = (r % 5 == 4).then(|| TokenMask::from_ids(cols, (0..cols as u32).filter(|i| i % 3 != 1)));
            (p, 17 + r as u64, mask)
        })
        .collect();
    let queries: Vec<RowQuery> = jobs
        .iter()
        .map(|(p, pos, mask)| RowQuery {
            mask: mask.clone(),
            ..query(p, &history, *pos).unwrap_or_else(|| panic!("{p:?}"))
        })
        .collect();
    let got = b.sample_candidates(&mut x, &listed, &queries);
    let (mut settled, mut sampled) = (0, 0);
    for (i, (&r, (p, pos, mask))) in listed.iter().zip(&jobs).enumerate() {
        let mut row = rows[r].clone();
        if let Some(m) = mask {
            m.apply(&mut row);
        }
        let want = sample(&mut row, p, &history, *pos);
        let token = sample_from(&got[i], cols, p, *pos);
        assert_eq!(token, want, "{cols} columns, batch {batch}, row {r} ({p:?}): {} candidates", got[i].ids.len());
        if !p.is_greedy() && kinds[r] < 5 {
            sampled += 1;
            settled += got[i].settled as usize;
        }
    }
    (settled, sampled)
}

#[test]
fn drawn_rounds_give_the_host_samplers_tokens_at_every_batch() {
    let Some(b) = backend() else { return };
    for cols in [151936usize, 1000] {
        let (mut settled, mut sampled) = (0, 0);
        for (batch, salt) in [(1usize, 0u64), (1, 1), (1, 2), (64, 3), (256, 4)] {
            let (s, n) = check_drawn_round(&b, cols, batch, salt);
            settled += s;
            sampled += n;
        }
        // A flat, tied or peaked row goes to the host only when its top-p cut lies within the
        // sums' rounding band (rare), or a mask leaves a huge tie (none here).
        assert!(settled * 20 >= sampled * 19, "{cols} columns: {settled} of {sampled} sampled rows settled");
    }
}
