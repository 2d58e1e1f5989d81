//! Drawing a round's rows on the device (kernels/draw.cu): greedy rows send their first largest
//! id, sampled rows their filters' survivors nearest the race's best score (tf_backend
//! candidates.rs module docs), in one launch for the whole round (two with edits) and one
//! download; a row the device cannot settle exactly is downloaded alone and drawn on the host.

use crate::ctx::Ctx;
use crate::device::{Arg, grid_for, ptr};
use crate::ops::select_rows;
use crate::sample::{EDIT_WORDS, QUERY_WORDS, pack};
use crate::tensor::CudaAct;
use rayon::prelude::*;
use tf_backend::candidates::candidates;
use tf_backend::{Candidates, RowQuery};

/// Finalists a row may send (kernels/draw.cu `SD_NEAR`).
const NEAR: usize = 16;
/// Words of a row's answer: its count, then (id, value bits) pairs.
const OUT_WORDS: usize = 1 + 2 * NEAR;
/// A row's count when the host must draw it (kernels/draw.cu `SD_HOST`).
const HOST: u32 = u32::MAX;
/// Threads of a draw block (kernels/draw.cu `SD_THREADS`).
const THREADS: u32 = 1024;

/// Whether the device draws `q`'s row: a sampled row (it has a race key), or a greedy one (no
/// window, temperature or filter).
pub(crate) fn drawable(q: &RowQuery) -> bool {
    q.race.is_some() || (q.window == 0.0 && q.temperature.is_none() && q.top_k == 0 && q.top_p >= 1.0 && q.min_p <= 0.0)
}

/// Per query `i` (every one [`drawable`]), the candidates that decide row `rows[i]` of `x` under
/// `queries[i]`, the rows edited in place first (they must be distinct): a greedy row's first
/// largest id, a sampled row's finalists ([`Candidates::settled`]), or for a row the device
/// left to the host, the host's own candidates of that row.
pub(crate) fn draw(b: &Ctx, x: &mut CudaAct, rows: &[usize], queries: &[RowQuery]) -> Vec<Candidates> {
    assert_eq!(rows.len(), queries.len(), "draw: one query per row");
    let (n, cols) = (rows.len(), x.cols);
    let mut sorted = rows.to_vec();
    sorted.sort_unstable();
    assert!(sorted.windows(2).all(|w| w[0] != w[1]), "draw: a row is listed twice");
    assert!(sorted.last().is_none_or(|&r| r < x.rows), "draw: row past the {} rows", x.rows);
    if n == 0 || cols == 0 {
        return vec![Candidates::default(); n];
    }
    assert!(cols <= i32::MAX as usize && n <= i32::MAX as usize / OUT_WORDS, "draw: {n} rows of {cols}");
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
    let masks = qs + (4 * (n * QUERY_WORDS + num_edits * EDIT_WORDS)) as u64;
    let out = d.alloc::<u32>(n * OUT_WORDS);
    let args =
        [Arg::P(xp), Arg::P(qs), Arg::P(masks), Arg::P(ptr(&out, &d.stream)), Arg::I(n as i32), Arg::I(cols as i32)];
    d.launch(&d.k.sample_draw, (n.min(65535) as u32, 1, 1), THREADS, 0, &args);
    let words = d.download(&out, n * OUT_WORDS);
    let mut found: Vec<Option<Candidates>> =
        words.chunks_exact(OUT_WORDS).zip(queries).map(|(w, q)| answer(w, q.race.is_some())).collect();
    let host: Vec<usize> = (0..n).filter(|&i| found[i].is_none()).collect();
    if !host.is_empty() {
        let picked: Vec<usize> = host.iter().map(|&i| rows[i]).collect();
        let edited = select_rows(b, x, &picked);
        let data = d.download(edited.data(&b.dev), edited.len());
        // The edits are in the rows already; the mask is applied here.
        let selected: Vec<Candidates> = host
            .par_iter()
            .zip(data.par_chunks_exact(cols))
            .map(|(&i, row)| candidates(&mut row.to_vec(), &queries[i].without_edits()))
            .collect();
        for (&i, c) in host.iter().zip(selected) {
            found[i] = Some(c);
        }
    }
    found.into_iter().map(Option::unwrap_or_default).collect()
}

/// A row's candidates from its answer words (count, then (id, value bits) pairs; ids sorted
/// here), marked settled for a sampled row, or `None` when the host must draw it.
fn answer(words: &[u32], sampled: bool) -> Option<Candidates> {
    let count = words[0] as usize;
    if words[0] == HOST || count == 0 || count > NEAR {
        return None;
    }
    let mut pairs: Vec<(u32, f32)> =
        words[1..1 + 2 * count].chunks_exact(2).map(|p| (p[0], f32::from_bits(p[1]))).collect();
    pairs.sort_unstable_by_key(|p| p.0);
    let (ids, values) = pairs.into_iter().unzip();
    Some(Candidates { ids, values, window_mass: None, settled: sampled })
}

#[cfg(test)]
mod emulated;

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::RaceKey;

    #[test]
    fn answers_sort_their_finalists_and_leave_flagged_rows_to_the_host() {
        let mut w = vec![0u32; OUT_WORDS];
        w[..5].copy_from_slice(&[2, 9, 2.0f32.to_bits(), 3, (-1.0f32).to_bits()]);
        let c = answer(&w, true).unwrap_or_default();
        assert_eq!((c.ids, c.values, c.settled), (vec![3, 9], vec![-1.0, 2.0], true));
        assert!(!answer(&w, false).is_some_and(|c| c.settled), "a greedy row is not settled");
        for count in [HOST, 0, NEAR as u32 + 1] {
            w[0] = count;
            assert_eq!(answer(&w, true), None, "count {count}");
        }
    }

    #[test]
    fn greedy_and_sampled_rows_are_drawn_other_rows_are_not() {
        let greedy = RowQuery::greedy(None);
        let key = Some(RaceKey { seed: 1, position: 2 });
        assert!(drawable(&greedy));
        assert!(drawable(&RowQuery { race: key, top_k: 50, window: 20.0, ..greedy.clone() }));
        assert!(!drawable(&RowQuery { window: 20.0, ..greedy.clone() }));
        assert!(!drawable(&RowQuery { top_k: 5, ..greedy.clone() }));
        assert!(!drawable(&RowQuery { temperature: Some(0.5), ..greedy }));
    }
}
