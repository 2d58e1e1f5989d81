//! Sampling candidates on the device (tf_backend candidates.rs): rows edited in place, only candidates cross over.

use crate::ctx::Ctx;
use crate::device::{Arg, grid_for, ptr};
use crate::ops::{argmax_split, select_rows};
use crate::tensor::CudaAct;
use rayon::prelude::*;
use tf_backend::candidates::{candidates, select, settle_top_p};
use tf_backend::{Candidates, RowQuery};

/// Candidates a row keeps on the device; a row with more is downloaded and selected on the host.
pub(crate) const CAP: usize = 4096;
/// Words of one packed query (kernels/sample.cu `SQ_WORDS`).
pub(crate) const QUERY_WORDS: usize = 16;
/// Doubles of a top-p row's window masses (kernels/sample.cu `SM_WORDS`): the steps' masses,
/// then the whole window's at [`MASS_STEPS`].
const MASS_WORDS: usize = 8;
/// Steps of reach whose masses and counts a top-p row gets (kernels/sample.cu `SM_STEPS`).
const MASS_STEPS: usize = 6;
/// Words of one packed edit (kernels/sample.cu `SE_WORDS`).
pub(crate) const EDIT_WORDS: usize = 5;
/// Query flag: the row is sampled, its race key in words 8-11 (kernels/draw.cu `SD_KEYED`).
const KEYED: u32 = 8;
/// Query flag: min-p is on, ln(min_p) in word 13 (kernels/draw.cu `SD_MIN_P`).
const MIN_P: u32 = 16;
/// Query flag: a mask, its offset in the mask region and length in words 14 and 15
/// (kernels/draw.cu `SD_MASK`).
const MASKED: u32 = 32;
/// A row's count when its scaled maximum is not finite (kernels/sample.cu `SQ_FLAGGED`).
const FLAGGED: u32 = u32::MAX;

/// Per query `i`, the candidates of row `rows[i]` of `x` under `queries[i]`, that row edited in
/// place first (the rows must be distinct): two downloads (the counts, then the candidates), one
/// of the window masses when a row is top-p's, and one of the rows that need the host (more than
/// [`CAP`] candidates, no finite maximum, or a top-p cut the device's mass leaves open).
pub(crate) fn sample_candidates(b: &Ctx, x: &mut CudaAct, rows: &[usize], queries: &[RowQuery]) -> Vec<Candidates> {
    assert_eq!(rows.len(), queries.len(), "sample_candidates: one query per row");
    let (n, cols) = (rows.len(), x.cols);
    let mut sorted = rows.to_vec();
    sorted.sort_unstable();
    assert!(sorted.windows(2).all(|w| w[0] != w[1]), "sample_candidates: a row is listed twice");
    assert!(sorted.last().is_none_or(|&r| r < x.rows), "sample_candidates: row past the {} rows", x.rows);
    if n == 0 || cols == 0 {
        return vec![Candidates::default(); n];
    }
    if queries.iter().any(|q| q.mask.is_some()) {
        return on_host(b, x, rows, queries);
    }
    assert!(cols <= i32::MAX as usize && n <= i32::MAX as usize / CAP, "sample_candidates: {n} rows of {cols}");
    let d = &b.dev;
    let (packed, num_edits) = pack(rows, queries);
    let buf = d.upload(&packed);
    let qs = ptr(&buf, &d.stream);
    let xp = ptr(x.data(&b.dev), &d.stream);
    if num_edits > 0 {
        let edits = qs + (4 * n * QUERY_WORDS) as u64;
        let args = [Arg::P(xp), Arg::P(qs), Arg::P(edits), Arg::I(num_edits as i32), Arg::I(cols as i32)];
        d.launch(&d.k.sample_edits, (grid_for(num_edits, 256), 1, 1), 256, 0, &args);
        x.touched();
    }
    // The argmax's split: equal slices, a few thousand blocks at most (ops.rs `argmax_split`).
    let (parts, slice) = argmax_split(n, cols);
    let grid = (parts as u32, n.min(65535) as u32, 1);
    let pmax = d.alloc::<f32>(n * parts);
    let args = [
        Arg::P(xp),
        Arg::P(qs),
        Arg::P(ptr(&pmax, &d.stream)),
        Arg::I(n as i32),
        Arg::I(cols as i32),
        Arg::I(slice as i32),
    ];
    d.launch(&d.k.sample_max_partial, grid, 128, 0, &args);
    // Top-k's k-th key a row (a block of 1024 threads a row), when a query asks for top-k.
    let kth = queries.iter().any(|q| q.top_k > 0).then(|| {
        let kth = d.zeros::<u32>(n);
        let args = [
            Arg::P(xp),
            Arg::P(qs),
            Arg::P(ptr(&pmax, &d.stream)),
            Arg::P(ptr(&kth, &d.stream)),
            Arg::I(n as i32),
            Arg::I(cols as i32),
            Arg::I(parts as i32),
        ];
        d.launch(&d.k.sample_topk, (n.min(1024) as u32, 1, 1), 1024, 0, &args);
        kth
    });
    // A top-p row's window masses, which steer how far below its maximum its candidates reach.
    let masses = queries.iter().any(narrows_top_p).then(|| {
        let (mass, cnt) = (d.zeros::<f64>(n * MASS_WORDS), d.zeros::<u32>(n * MASS_STEPS));
        let args = [
            Arg::P(xp),
            Arg::P(qs),
            Arg::P(ptr(&pmax, &d.stream)),
            Arg::P(ptr(&mass, &d.stream)),
            Arg::P(ptr(&cnt, &d.stream)),
            Arg::I(n as i32),
            Arg::I(cols as i32),
            Arg::I(slice as i32),
            Arg::I(parts as i32),
        ];
        d.launch(&d.k.sample_mass, grid, 128, 0, &args);
        (mass, cnt)
    });
    let counts = d.zeros::<u32>(n + 1);
    let out = d.alloc::<u32>(3 * n * CAP);
    let args = [
        Arg::P(xp),
        Arg::P(qs),
        Arg::P(ptr(&pmax, &d.stream)),
        Arg::P(ptr(&counts, &d.stream)),
        Arg::P(ptr(&out, &d.stream)),
        Arg::I(n as i32),
        Arg::I(cols as i32),
        Arg::I(slice as i32),
        Arg::I(parts as i32),
        Arg::I(CAP as i32),
        Arg::P(kth.as_ref().map_or(0, |k| ptr(k, &d.stream))),
        Arg::P(masses.as_ref().map_or(0, |m| ptr(&m.0, &d.stream))),
        Arg::P(masses.as_ref().map_or(0, |m| ptr(&m.1, &d.stream))),
    ];
    d.launch(&d.k.sample_select, grid, 128, 0, &args);
    let counts = d.download(&counts, n + 1);
    let kept = (counts[n] as usize).min(n * CAP);
    let mut found = assemble(&counts[..n], &d.download(&out, 3 * kept));
    if let Some((mass, _)) = &masses {
        // A top-p row's candidates stand only when the device's window mass settles its cut.
        let mass = d.download(mass, n * MASS_WORDS);
        for (i, q) in queries.iter().enumerate().filter(|(_, q)| narrows_top_p(q)) {
            if found[i].as_mut().is_some_and(|c| !settle_top_p(c, q, mass[i * MASS_WORDS + MASS_STEPS])) {
                found[i] = None;
            }
        }
    }
    let host: Vec<usize> = (0..n).filter(|&i| found[i].is_none()).collect();
    if !host.is_empty() {
        let picked: Vec<usize> = host.iter().map(|&i| rows[i]).collect();
        let edited = select_rows(b, x, &picked);
        let data = d.download(edited.data(&b.dev), edited.len());
        // In parallel: a row that falls back may keep its whole width.
        let selected: Vec<Candidates> =
            host.par_iter().zip(data.par_chunks_exact(cols)).map(|(&i, row)| select(row, &queries[i])).collect();
        for (&i, c) in host.iter().zip(selected) {
            found[i] = Some(c);
        }
    }
    found.into_iter().map(Option::unwrap_or_default).collect()
}

/// The candidates of rows `rows` selected on the host (their mask and edits applied there):
/// the kernels do not read masks yet.
fn on_host(b: &Ctx, x: &CudaAct, rows: &[usize], queries: &[RowQuery]) -> Vec<Candidates> {
    let picked = select_rows(b, x, rows);
    let data = b.dev.download(picked.data(&b.dev), picked.len());
    data.par_chunks_exact(x.cols).zip(queries).map(|(row, q)| candidates(&mut row.to_vec(), q)).collect()
}

/// Whether `q`'s candidates may be cut to the top of its window by top-p (no top-k).
fn narrows_top_p(q: &RowQuery) -> bool {
    q.top_p < 1.0 && q.top_k == 0
}

/// The queries, their edits and their masks as kernels/sample.cu and draw.cu read them
/// (`[queries | edits | mask words]`, floats as their bits; each distinct mask once), and the
/// number of edits.
pub(crate) fn pack(rows: &[usize], queries: &[RowQuery]) -> (Vec<u32>, usize) {
    let num_edits: usize = queries.iter().map(|q| q.edits.len()).sum();
    let mut words = Vec::with_capacity(rows.len() * QUERY_WORDS + num_edits * EDIT_WORDS);
    // Each distinct mask's words (by address) and their offset in the mask region.
    let mut masks: Vec<(*const u32, u32)> = Vec::new();
    let mut mask_words: Vec<u32> = Vec::new();
    for (&row, q) in rows.iter().zip(queries) {
        let (flag, t) = q.temperature.map_or((0, 0), |t| (1, t.to_bits()));
        let (w, r, f, p) = (q.window, q.repetition_penalty, q.frequency_penalty, q.presence_penalty);
        let (seed, pos) = q.race.map_or((0, 0), |k| (k.seed, k.position));
        let race = if q.plain_race() { 2 } else { 0 };
        let top_p = if narrows_top_p(q) { 4 } else { 0 };
        let keyed = if q.race.is_some() { KEYED } else { 0 };
        let (min_p, floor) = if q.min_p > 0.0 { (MIN_P, q.min_p.ln().to_bits()) } else { (0, 0) };
        let (masked, at, len) = match &q.mask {
            Some(m) => {
                let m = m.words();
                let at = match masks.iter().find(|e| e.0 == m.as_ptr()) {
                    Some(e) => e.1,
                    None => {
                        let at = mask_words.len() as u32;
                        masks.push((m.as_ptr(), at));
                        mask_words.extend_from_slice(m);
                        at
                    }
                };
                (MASKED, at, m.len() as u32)
            }
            None => (0, 0, 0),
        };
        let flags = flag | race | top_p | keyed | min_p | masked;
        words.extend([row as u32, flags, t, w.to_bits(), r.to_bits(), f.to_bits(), p.to_bits(), q.top_k]);
        words.extend([seed as u32, (seed >> 32) as u32, pos as u32, (pos >> 32) as u32]);
        words.extend([q.top_p.to_bits(), floor, at, len]);
    }
    for (i, q) in queries.iter().enumerate() {
        debug_assert!(q.edits.windows(2).all(|w| w[0].id < w[1].id), "edits in increasing id order");
        for e in &q.edits {
            let flags = e.bias.is_some() as u32 | (e.seen as u32) << 1;
            words.extend([i as u32, e.id, e.bias.unwrap_or(0.0).to_bits(), e.count, flags]);
        }
    }
    words.extend_from_slice(&mask_words);
    (words, num_edits)
}

/// Per row, its candidates from the selection's `counts` and `(row, id, value bits)` triples
/// (ids sorted), or `None` when the host must select it: more than [`CAP`] candidates, or
/// [`FLAGGED`].
fn assemble(counts: &[u32], triples: &[u32]) -> Vec<Option<Candidates>> {
    let mut found: Vec<Option<Vec<(u32, f32)>>> =
        counts.iter().map(|&c| (c != FLAGGED && c as usize <= CAP).then(|| Vec::with_capacity(c as usize))).collect();
    for t in triples.chunks_exact(3) {
        if let Some(Some(row)) = found.get_mut(t[0] as usize) {
            row.push((t[1], f32::from_bits(t[2])));
        }
    }
    found
        .into_iter()
        .map(|row| {
            let mut row = row?;
            row.sort_unstable_by_key(|&(id, _)| id);
            let (ids, values) = row.iter().copied().unzip();
            Some(Candidates { ids, values, ..Candidates::default() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::{LogitEdit, RaceKey};

    #[test]
    fn rows_over_the_cap_or_flagged_go_to_the_host_and_the_rest_sort_by_id() {
        let v = |x: f32| x.to_bits();
        let triples = [1, 9, v(2.0), 0, 7, v(-1.0), 1, 3, v(f32::NAN), 0, 2, v(5.0)];
        let got = assemble(&[2, 2, FLAGGED, CAP as u32 + 1, CAP as u32, 0], &triples);
        let c = |ids: &[u32], values: &[f32]| Candidates {
            ids: ids.to_vec(),
            values: values.to_vec(),
            ..Candidates::default()
        };
        assert_eq!(got[0], Some(c(&[2, 7], &[5.0, -1.0])));
        let one = got[1].as_ref().map(|r| (r.ids.clone(), r.values.iter().map(|x| x.to_bits()).collect::<Vec<_>>()));
        assert_eq!(one, Some((vec![3, 9], vec![v(f32::NAN), v(2.0)])));
        assert_eq!((&got[2], &got[3]), (&None, &None));
        assert_eq!((&got[4], &got[5]), (&Some(Candidates::default()), &Some(Candidates::default())));
    }

    #[test]
    fn queries_pack_as_the_kernels_read_them() {
        let e = |id, bias, seen, count| LogitEdit { id, bias, seen, count };
        let q = |t, edits, race| RowQuery {
            edits,
            repetition_penalty: 1.3,
            frequency_penalty: 0.5,
            presence_penalty: -0.25,
            temperature: t,
            window: 20.0,
            race,
            top_k: if race.is_some() { 0 } else { 40 },
            top_p: 1.0,
            min_p: 0.0,
            mask: None,
        };
        let key = RaceKey { seed: 0x1_0000_0002, position: 0x3_0000_0004 };
        let qs = [
            q(None, vec![e(4, Some(-0.0), false, 2)], None),
            q(Some(0.7), vec![e(1, None, true, 0), e(9, None, false, 0)], Some(key)),
        ];
        let (words, num_edits) = pack(&[5, 2], &qs);
        assert_eq!(num_edits, 3);
        assert_eq!(words.len(), 2 * QUERY_WORDS + 3 * EDIT_WORDS);
        let f = |x: f32| x.to_bits();
        assert_eq!(words[..16], [5, 0, 0, f(20.0), f(1.3), f(0.5), f(-0.25), 40, 0, 0, 0, 0, f(1.0), 0, 0, 0]);
        assert_eq!(words[16..19], [2, 3 | KEYED, f(0.7)]);
        assert_eq!(words[24..29], [2, 1, 4, 3, f(1.0)]);
        assert_eq!(words[32..], [0, 4, f(-0.0), 2, 1, 1, 1, 0, 0, 2, 1, 9, 0, 0, 0]);
        // Top-p alone may narrow the window (flag bit 2); with top-k it does not.
        let top_p = |top_k| RowQuery { top_p: 0.9, top_k, ..q(None, Vec::new(), None) };
        let (words, _) = pack(&[0, 1], &[top_p(0), top_p(5)]);
        assert_eq!((words[1], words[12], words[17]), (4, f(0.9), 0));
    }
}
