//! Sampling candidates: the ids of a logits row that can still decide a sampled token, so a
//! device can hand the host a few hundred values instead of a whole row. A row is first edited
//! (logit bias, then repetition, frequency and presence penalties, each id on its own), then
//! every id whose value divided by the temperature lies within `window` of the largest such
//! value is a candidate. The rule is written with single IEEE operations (one add, divide,
//! multiply or subtract at a time) so a device computes the same set with the same values.
//!
//! A sampled row carries its race key (the Gumbel noise's seed and position). When it is drawn by
//! a plain race (no top-k, top-p or min-p: [`RowQuery::plain_race`]) a backend may keep only the
//! ids whose race score (scaled value plus the id's Gumbel noise) lies within [`race_margin`] of
//! the row's best score ([`select_race`]). Only the winner matters, and the margin is wide enough
//! that noise computed with any logarithm within a few ulps (a device's) keeps the winner the
//! host's exact noise picks: a row of any width then sends a handful of ids. The host's own rule ([`select`]) keeps the window for such rows: its
//! race draws noise only where it can matter, which is cheaper than scoring every id.
//!
//! A backend may also draw a keyed row where the logits are: apply top-k, top-p and min-p there
//! (the survivors the host's filters keep, bit for bit, or the row goes to the host), run the
//! race with its own noise, and send only the survivors within the margin of its best score,
//! marked [`Candidates::settled`]: the host races those few with its exact noise.

use crate::logprobs::rank_value;
use crate::mask::TokenMask;
use crate::rng::{gumbel, uniform_block};
use crate::top_p::{Weighed, band_prefix, band_prefix_of};

/// The edits of one id before sampling, applied in this order: bias, repetition penalty,
/// frequency penalty, presence penalty (the host sampler's order).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogitEdit {
    /// The id (checked at the boundary or made by the engine).
    pub id: u32,
    /// Added first, when present.
    pub bias: Option<f32>,
    /// Whether the repetition penalty touches this id (it is in the prompt or the output).
    pub seen: bool,
    /// Times the id was generated (frequency and presence penalties touch it when above 0).
    pub count: u32,
}

/// How one row's candidates are chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct RowQuery {
    /// Edits, at most one per id, in increasing id order.
    pub edits: Vec<LogitEdit>,
    /// Divides positive logits of seen ids and multiplies the others; 1 is off.
    pub repetition_penalty: f32,
    /// Times a generated id's count, subtracted; 0 is off.
    pub frequency_penalty: f32,
    /// Subtracted from every generated id; 0 is off.
    pub presence_penalty: f32,
    /// Divides every value before the window is measured; `None` leaves values as they are.
    pub temperature: Option<f32>,
    /// Candidates lie within this much of the largest scaled value (0: its ties only).
    pub window: f32,
    /// A sampled row's race key (`None` for greedy rows): with [`RowQuery::plain_race`] a
    /// backend may choose candidates by race score (module docs) instead of the window.
    pub race: Option<RaceKey>,
    /// When above 0, only the row's `top_k` largest scaled values (ties to the lower id) can be
    /// kept, so the window's ids ranking below the k-th of them are left out (0: off).
    pub top_k: u32,
    /// Top-p's mass (1: off). Without top-k, a backend may send only the top of the window that
    /// settles the cut, with the window's mass (Candidates::window_mass).
    pub top_p: f32,
    /// Min-p (0: off): an id survives when its scaled value minus the largest is at least
    /// `min_p.ln()` (f32), after top-k and top-p. It narrows nothing here (the window already
    /// covers its survivors); a backend that draws the row applies it.
    pub min_p: f32,
    /// Structured output's allowed ids: every id outside it is -inf before everything else
    /// (before the edits, the window and the race); `None` allows every id.
    pub mask: Option<TokenMask>,
}

/// A scaled value's place in the filters' total order (NaN lowest, -0 below +0) as an
/// unsigned key: larger values, larger keys.
#[inline]
pub fn rank_key(s: f32) -> u32 {
    let b = if s.is_nan() { f32::NEG_INFINITY.to_bits() } else { s.to_bits() };
    if b >> 31 == 1 { !b } else { b | 0x8000_0000 }
}

/// The key of a row's Gumbel race: id `i`'s noise is `gumbel(uniform(seed, position, i))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaceKey {
    /// The request's seed.
    pub seed: u64,
    /// The sampled token's position.
    pub position: u64,
}

/// How far below the best race score `best` a candidate may lie: 2^-12 of its magnitude, at
/// least 2^-12. With logarithms within 4 ulps of exact on either side, the host's and a
/// device's noise for one id differ by under 2^-15.9 (2^-20 through the inner logarithm, 2^-16
/// from the outer one's roundings, noise being under 17), and each score's rounding adds an ulp
/// of it: the host's winner trails the device's best by under a third of the margin on the
/// device, so it is always kept.
#[inline]
pub fn race_margin(best: f32) -> f32 {
    const REL: f32 = 1.0 / 4096.0;
    let m = best.abs();
    (if m > 1.0 { m } else { 1.0 }) * REL
}

/// Id `id`'s race score for scaled value `s` under `key` (the host's noise).
#[inline]
pub fn race_score(key: &RaceKey, s: f32, id: u32) -> f32 {
    s + gumbel(uniform_block(key.seed, key.position, id / 4)[(id % 4) as usize])
}

impl RowQuery {
    /// A greedy row: no edits, penalties, temperature, window or filter (its first candidate is
    /// its first largest value; with a `mask`, among the allowed ids).
    pub fn greedy(mask: Option<TokenMask>) -> RowQuery {
        RowQuery {
            edits: Vec::new(),
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            temperature: None,
            window: 0.0,
            race: None,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            mask,
        }
    }

    /// Whether the row is drawn by a plain race over its window: keyed, no top-k, top-p or min-p.
    pub fn plain_race(&self) -> bool {
        self.race.is_some() && self.top_k == 0 && self.top_p >= 1.0 && self.min_p <= 0.0
    }

    /// The same query without edits (for a row whose edits were applied already).
    pub fn without_edits(&self) -> RowQuery {
        RowQuery { edits: Vec::new(), ..self.clone() }
    }

    /// `x` after `e`'s edits, one rounded operation at a time.
    #[inline]
    pub fn edited(&self, e: &LogitEdit, mut x: f32) -> f32 {
        if let Some(b) = e.bias {
            x += b;
        }
        let r = self.repetition_penalty;
        if e.seen && r != 1.0 {
            x = if x > 0.0 { x / r } else { x * r };
        }
        let (f, p) = (self.frequency_penalty, self.presence_penalty);
        if e.count > 0 && (f != 0.0 || p != 0.0) {
            x -= f * e.count as f32;
            x -= p;
        }
        x
    }

    /// `x` as the window measures it.
    #[inline]
    pub fn scaled(&self, x: f32) -> f32 {
        match self.temperature {
            Some(t) => x / t,
            None => x,
        }
    }
}

/// A row's candidates: ids in increasing order and their edited (unscaled) values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Candidates {
    /// Candidate ids, increasing.
    pub ids: Vec<u32>,
    /// Their edited logits, before the temperature.
    pub values: Vec<f32>,
    /// Set when a top-p row's candidates are exactly the prefix its cut keeps, settled by the
    /// backend's sum of the window's weights (top_p.rs `band_prefix`): that sum.
    pub window_mass: Option<f64>,
    /// Set when a backend drew the row (module docs): these are survivors of every filter and
    /// hold the race's winner, so the host races them as they are.
    pub settled: bool,
}

/// Applies `q`'s mask, then its edits, to `row` in place (ids past the row are left alone).
pub fn apply_edits(row: &mut [f32], q: &RowQuery) {
    if let Some(m) = &q.mask {
        m.apply(row);
    }
    for e in &q.edits {
        if let Some(x) = row.get_mut(e.id as usize) {
            *x = q.edited(e, *x);
        }
    }
}

/// The scaled threshold of an edited row, or `None` when its largest value (NaN ranking
/// lowest) is not finite: then every id is a candidate.
pub fn threshold(row: &[f32], q: &RowQuery) -> Option<f32> {
    threshold_at(row_max(row), q)
}

/// [`threshold`] of a row whose largest value is `max`.
fn threshold_at(max: f32, q: &RowQuery) -> Option<f32> {
    // NaN ranks below every number; scaling is monotone, so the scaled max is the max scaled.
    let max = q.scaled(max);
    max.is_finite().then_some(max - q.window)
}

/// Lanes of [`row_max`]: maxima kept side by side so they fit vector registers.
const MAX_LANES: usize = 16;

/// The largest value of `row` (NaN never, -inf for an empty or all-NaN row): each lane keeps
/// the largest of its values, then the lanes are folded. Only the zero's sign can depend on
/// the order (-0 and +0 compare equal), which no caller tells apart.
pub fn row_max(row: &[f32]) -> f32 {
    let keep = |m: f32, x: f32| if x > m { x } else { m };
    let mut lanes = [f32::NEG_INFINITY; MAX_LANES];
    let mut chunks = row.chunks_exact(MAX_LANES);
    for c in chunks.by_ref() {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = keep(*m, x);
        }
    }
    let tail = chunks.remainder().iter().fold(f32::NEG_INFINITY, |m, &x| keep(m, x));
    lanes.iter().fold(tail, |m, &x| keep(m, x))
}

/// The candidates of an already edited row under `q` (its edits are not applied again).
pub fn select(row: &[f32], q: &RowQuery) -> Candidates {
    let mut c = Candidates::default();
    let max = row_max(row);
    match threshold_at(max, q) {
        Some(t) => {
            // A top-p row (without top-k) narrowed in passes over the row (top_p_row.rs).
            if q.top_p < 1.0
                && q.top_k == 0
                && let Some(narrowed) = crate::top_p_row::narrow_row(row, q, t, max)
            {
                return narrowed;
            }
            if q.top_k > 0 {
                return top_k_row(row, q, t);
            }
            // Counted first, then written whether kept or not with the count moving on only
            // for the kept: no branch to mispredict on rows that keep most of their ids.
            let kept = row.iter().filter(|&&x| q.scaled(x) >= t).count();
            let (mut ids, mut values) = (vec![0u32; kept + 1], vec![0.0f32; kept + 1]);
            let mut n = 0;
            for (i, &x) in row.iter().enumerate() {
                ids[n] = i as u32;
                values[n] = x;
                n += usize::from(q.scaled(x) >= t);
            }
            ids.truncate(n);
            values.truncate(n);
            (c.ids, c.values) = (ids, values);
            keep_top_k(&mut c, q);
            narrow_top_p(&mut c, q);
        }
        None => {
            c.ids = (0..row.len() as u32).collect();
            c.values = row.to_vec();
        }
    }
    c
}

/// A top-k row's candidates ([`keep_top_k`] over the window whose scaled values start at `t`)
/// without listing the window: its rank keys, their `q.top_k`-th largest, then the window's ids
/// at or above it (every tie of it stays).
fn top_k_row(row: &[f32], q: &RowQuery, t: f32) -> Candidates {
    let in_window = |x: f32| {
        let s = q.scaled(x);
        (s >= t).then(|| rank_key(s))
    };
    let mut keys: Vec<u32> = row.iter().filter_map(|&x| in_window(x)).collect();
    let k = q.top_k as usize;
    // Fewer than k in the window: all of it.
    let kth = if k < keys.len() { *keys.select_nth_unstable_by(k - 1, |a, b| b.cmp(a)).1 } else { 0 };
    let mut c = Candidates::default();
    for (i, &x) in row.iter().enumerate() {
        if in_window(x).is_some_and(|key| key >= kth) {
            c.ids.push(i as u32);
            c.values.push(x);
        }
    }
    c
}

/// Cuts a top-p row's window (no top-k) to the prefix its draw can reach, when the window's
/// mass (the host's own sum) settles the cut.
fn narrow_top_p(c: &mut Candidates, q: &RowQuery) {
    if q.top_p >= 1.0 || q.top_k > 0 || c.ids.is_empty() {
        return;
    }
    let pool: Vec<(f32, u32)> = c.values.iter().zip(0..).map(|(&v, i)| (rank_value(q.scaled(v)), i)).collect();
    let max = pool.iter().map(|p| p.0).fold(f32::NEG_INFINITY, f32::max);
    // The host's sum over the window, in id order (the filter's own).
    let weighed = Weighed::new(&pool, max);
    let mass = weighed.total;
    if let Some(at) = band_prefix_of(pool, &weighed, q.top_p, mass) {
        keep_positions(c, &at, mass);
    }
}

/// Keeps the candidates at positions `at` (increasing), settled by `window_mass`.
fn keep_positions(c: &mut Candidates, at: &[u32], window_mass: f64) {
    c.ids = at.iter().map(|&i| c.ids[i as usize]).collect();
    c.values = at.iter().map(|&i| c.values[i as usize]).collect();
    c.window_mass = Some(window_mass);
}

/// Cuts a top-p row's candidates (the top of its window) to the prefix that `window_mass`, a
/// sum of the whole window's weights, settles (top_p.rs `band_prefix`), recording that sum;
/// false, leaving them as they are, when it settles none.
pub fn settle_top_p(c: &mut Candidates, q: &RowQuery, window_mass: f64) -> bool {
    let x: Vec<f32> = c.values.iter().map(|&v| q.scaled(v)).collect();
    let Some(at) = band_prefix(&x, q.top_p, window_mass) else { return false };
    keep_positions(c, &at, window_mass);
    true
}

/// Leaves out of a window's candidates those ranking below its `q.top_k`-th largest scaled
/// value (every tie of that value stays: the filter picks among them by id).
fn keep_top_k(c: &mut Candidates, q: &RowQuery) {
    let k = q.top_k as usize;
    if k == 0 || k >= c.ids.len() {
        return;
    }
    let keys: Vec<u32> = c.values.iter().map(|&x| rank_key(q.scaled(x))).collect();
    let mut order = keys.clone();
    let (_, &mut kth, _) = order.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
    let mut at = keys.iter();
    c.ids.retain(|_| at.next().is_some_and(|&key| key >= kth));
    let mut at = keys.iter();
    c.values.retain(|_| at.next().is_some_and(|&key| key >= kth));
}

/// The candidates of an edited row by race score with the host's noise (module docs; what a
/// device computes with its own); every id when the best score is not finite.
pub fn select_race(row: &[f32], q: &RowQuery, key: &RaceKey) -> Candidates {
    let scores: Vec<f32> = row.iter().zip(0..).map(|(&x, i)| race_score(key, q.scaled(x), i)).collect();
    let best = scores.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    if !best.is_finite() {
        return Candidates { ids: (0..row.len() as u32).collect(), values: row.to_vec(), ..Candidates::default() };
    }
    let t = best - race_margin(best);
    let mut c = Candidates::default();
    for (i, (&x, &s)) in row.iter().zip(&scores).enumerate() {
        if s >= t {
            c.ids.push(i as u32);
            c.values.push(x);
        }
    }
    c
}

/// Edits `row` in place and returns its candidates.
pub fn candidates(row: &mut [f32], q: &RowQuery) -> Candidates {
    apply_edits(row, q);
    select(row, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(window: f32, temperature: Option<f32>) -> RowQuery {
        RowQuery { temperature, window, ..RowQuery::greedy(None) }
    }

    #[test]
    fn window_keeps_values_near_the_max_after_scaling() {
        let mut row = vec![1.0, 5.0, 4.0, f32::NAN, 2.9, 5.0];
        let c = candidates(&mut row, &query(1.0, Some(0.5)));
        // Scaled: 2, 10, 8, NaN, 5.8, 10: within 1 of 10 are ids 1 and 5.
        assert_eq!(c.ids, [1, 5]);
        let c = candidates(&mut row, &query(2.0, None));
        assert_eq!(c.ids, [1, 2, 5]);
        assert_eq!(c.values, [5.0, 4.0, 5.0]);
    }

    #[test]
    fn edits_apply_in_the_host_order_and_can_raise_an_id() {
        let mut q = query(0.0, None);
        q.repetition_penalty = 2.0;
        q.frequency_penalty = 0.5;
        q.presence_penalty = 0.25;
        q.edits = vec![
            LogitEdit { id: 0, bias: Some(10.0), seen: true, count: 2 },
            LogitEdit { id: 2, bias: None, seen: true, count: 0 },
        ];
        let mut row = vec![-1.0, 3.0, 4.0];
        let c = candidates(&mut row, &q);
        // id 0: -1 + 10 = 9, / 2 = 4.5, - 1.0 = 3.5, - 0.25 = 3.25; id 2: 4 / 2 = 2.
        assert_eq!(row, [3.25, 3.0, 2.0]);
        assert_eq!(c.ids, [0]);
    }

    #[test]
    fn a_row_without_a_finite_max_keeps_every_id() {
        let mut row = vec![f32::NEG_INFINITY, f32::NAN, f32::NEG_INFINITY];
        assert_eq!(candidates(&mut row, &query(20.0, None)).ids, [0, 1, 2]);
        let mut row = vec![0.0, f32::INFINITY];
        assert_eq!(candidates(&mut row, &query(20.0, None)).ids, [0, 1]);
    }

    #[test]
    fn a_mask_applies_before_the_edits_so_a_bias_cannot_lift_a_masked_id() {
        let mut q = query(0.0, None);
        q.edits = vec![LogitEdit { id: 0, bias: Some(100.0), seen: false, count: 0 }];
        q.mask = Some(TokenMask::from_ids(3, [1, 2]));
        let mut row = vec![5.0, 1.0, 2.0];
        let c = candidates(&mut row, &q);
        assert_eq!(row, [f32::NEG_INFINITY, 1.0, 2.0]);
        assert_eq!(c.ids, [2]);
    }

    #[test]
    fn the_row_max_skips_nan_over_lanes_and_tail() {
        for n in [0usize, 1, 15, 16, 17, 40, 1000] {
            let mut row: Vec<f32> = (0..n).map(|i| ((i * 7919) % 101) as f32 - 50.0).collect();
            let want = row.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
            assert_eq!(row_max(&row), want, "{n}");
            if n > 3 {
                row[n / 2] = f32::NAN;
                row[n - 1] = f32::INFINITY;
                assert_eq!(row_max(&row), f32::INFINITY);
                row.iter_mut().for_each(|x| *x = f32::NAN);
                assert_eq!(row_max(&row), f32::NEG_INFINITY);
            }
        }
    }

    #[test]
    fn rank_keys_follow_the_total_order_with_nan_lowest() {
        let xs = [f32::NAN, f32::NEG_INFINITY, -3.5, -0.0, 0.0, 1e-40, 2.0, f32::INFINITY];
        let keys: Vec<u32> = xs.iter().map(|&x| rank_key(x)).collect();
        assert_eq!(keys[0], keys[1], "NaN ranks as -inf");
        assert!(keys[1..].windows(2).all(|w| w[0] < w[1]), "{keys:x?}");
    }

    #[test]
    fn top_k_leaves_out_the_window_ids_below_the_kth_and_keeps_its_ties() {
        let mut q = query(10.0, Some(0.5));
        q.top_k = 3;
        // Scaled: 8, 10, 6, NaN, 10, 8, -40 (out of the window), 8.
        let mut row = vec![4.0, 5.0, 3.0, f32::NAN, 5.0, 4.0, -20.0, 4.0];
        let c = candidates(&mut row, &q);
        assert_eq!(c.ids, [0, 1, 4, 5, 7], "the third largest is 8, held by ids 0, 5 and 7");
        q.top_k = 2;
        assert_eq!(candidates(&mut row, &q).ids, [1, 4]);
        q.top_k = 6;
        assert_eq!(candidates(&mut row, &q).ids, [0, 1, 2, 4, 5, 7], "fewer than k in the window: all");
        // -0 ranks below +0.
        q.top_k = 1;
        assert_eq!(candidates(&mut [-0.0, 0.0, -0.0], &q).ids, [1]);
    }

    #[test]
    fn a_race_keeps_the_best_score_and_its_near_ties_only() {
        let key = RaceKey { seed: 7, position: 3 };
        let mut q = query(20.0, Some(2.0));
        q.race = Some(key);
        // Flat values: every id is within the window, but one id leads the race.
        let row: Vec<f32> = (0..5000).map(|i| (i % 7) as f32 * 0.25).collect();
        let c = select_race(&row, &q, &key);
        assert_eq!(select(&row, &q).ids.len(), 5000, "the host's own rule keeps the window");
        let score = |i: u32| race_score(&key, row[i as usize] / 2.0, i);
        let best = (0..5000u32).max_by(|&a, &b| score(a).total_cmp(&score(b)).then(b.cmp(&a))).unwrap_or(0);
        assert!(c.ids.contains(&best), "the winner {best} is kept");
        assert!(c.ids.len() <= 3, "{} candidates", c.ids.len());
        assert!(c.ids.iter().all(|&i| score(best) - score(i) <= race_margin(score(best))));
        assert_eq!(c.values, c.ids.iter().map(|&i| row[i as usize]).collect::<Vec<_>>());
        // An id placed just inside the margin below the winner is kept; NaN never is.
        let mut near = row.clone();
        let other = if best == 0 { 1 } else { 0 };
        let gap = race_margin(score(best)) / 2.0;
        near[other as usize] = (score(best) - gap - (score(other) - row[other as usize] / 2.0)) * 2.0;
        near[2] = f32::NAN;
        let c = select_race(&near, &q, &key);
        assert!(c.ids.contains(&other) && c.ids.contains(&best) && !c.ids.contains(&2), "{:?}", c.ids);
        // No finite best score: every id.
        let c = select_race(&[f32::NEG_INFINITY, f32::NAN], &q, &key);
        assert_eq!(c.ids, [0, 1]);
    }
}
