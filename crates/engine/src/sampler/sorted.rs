//! The sampler as it was before its top-p cut stopped sorting the row: the window, top-k,
//! top-p and min-p filters with the cut found by sorting a growing most-likely part of the pool
//! (copied unchanged), kept as the oracle that the threshold search must equal bit for bit.

use super::{History, Kept, SamplingParams, apply_logit_bias, apply_penalties, argmax, base_query, gumbel_argmax};
use std::cmp::Ordering;
use tf_backend::candidates::{rank_key, threshold};
use tf_backend::logprobs::rank_value;
use tf_backend::top_p::MASS_TOLERANCE;
use tf_backend::{Candidates, RowQuery};

/// Most likely first, ties to the lower position.
fn by_ranked(a: &(f32, u32), b: &(f32, u32)) -> Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// Where the rank-order prefix mass first reaches `lo`.
#[derive(Debug, PartialEq)]
enum Cut {
    At(usize),
    Open,
    Short,
}

/// The cut by sorting a part that grows fourfold from 256.
fn cut(pool: &mut [(f32, u32)], max: f32, lo: f64, hi: f64) -> Cut {
    let (mut sorted, mut mass) = (0, 0.0);
    let mut window = 256.min(pool.len());
    loop {
        let rest = &mut pool[sorted..];
        let take = window - sorted;
        if take < rest.len() {
            rest.select_nth_unstable_by(take - 1, by_ranked);
        }
        rest[..take].sort_unstable_by(by_ranked);
        for (n, p) in pool.iter().enumerate().take(window).skip(sorted) {
            mass += f64::from(p.0 - max).exp();
            if mass >= lo {
                return if mass >= hi { Cut::At(n + 1) } else { Cut::Open };
            }
        }
        if window == pool.len() {
            return Cut::Short;
        }
        sorted = window;
        window = (window * 4).min(pool.len());
    }
}

/// The band prefix of candidates `x` under `window_mass`.
pub fn band_prefix(x: &[f32], top_p: f32, window_mass: f64) -> Option<Vec<u32>> {
    let mut pool: Vec<(f32, u32)> = x.iter().zip(0..).map(|(&v, i)| (rank_value(v), i)).collect();
    let max = pool.iter().map(|p| p.0).fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() || !window_mass.is_finite() {
        return None;
    }
    let target = f64::from(top_p) * window_mass;
    match cut(&mut pool, max, target * (1.0 - MASS_TOLERANCE), target * (1.0 + MASS_TOLERANCE)) {
        Cut::At(n) => {
            let mut kept: Vec<u32> = pool[..n].iter().map(|p| p.1).collect();
            kept.sort_unstable();
            Some(kept)
        }
        Cut::Open | Cut::Short => None,
    }
}

/// The candidates of an edited row under `q`.
pub fn select(row: &[f32], q: &RowQuery) -> Candidates {
    let mut c = Candidates::default();
    match threshold(row, q) {
        Some(t) => {
            for (i, &x) in row.iter().enumerate() {
                if q.scaled(x) >= t {
                    c.ids.push(i as u32);
                    c.values.push(x);
                }
            }
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

/// Cuts a top-p row's window to the prefix its own mass settles.
fn narrow_top_p(c: &mut Candidates, q: &RowQuery) {
    if q.top_p >= 1.0 || q.top_k > 0 || c.ids.is_empty() {
        return;
    }
    let x: Vec<f32> = c.values.iter().map(|&v| q.scaled(v)).collect();
    let max = x.iter().copied().map(rank_value).fold(f32::NEG_INFINITY, f32::max);
    let mass: f64 = x.iter().map(|&v| f64::from(rank_value(v) - max).exp()).sum();
    let Some(at) = band_prefix(&x, q.top_p, mass) else { return };
    c.ids = at.iter().map(|&i| c.ids[i as usize]).collect();
    c.values = at.iter().map(|&i| c.values[i as usize]).collect();
    c.window_mass = Some(mass);
}

/// Leaves out the window's ids below its `top_k`-th largest scaled value.
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

/// The candidates kept under top-k, top-p and min-p.
pub fn kept(x: &[f32], width: usize, top_k: u32, top_p: f32, min_p: f32, window_mass: Option<f64>) -> Kept {
    let top_k_on = top_k > 0 && (top_k as usize) < width;
    let top_p_on = top_p < 1.0;
    let min_p_on = min_p > 0.0;
    if !(top_k_on || top_p_on || min_p_on) {
        return Kept::All;
    }
    let max = x.iter().copied().map(rank_value).fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return Kept::All;
    }
    let all = || -> Vec<(f32, u32)> { x.iter().zip(0..).map(|(&v, i)| (rank_value(v), i)).collect() };
    let mut pool: Option<Vec<(f32, u32)>> = None;
    if top_k_on {
        let mut ranked = all();
        let k = top_k as usize;
        if k < ranked.len() {
            ranked.select_nth_unstable_by(k - 1, by_ranked);
            ranked.truncate(k);
            ranked.sort_unstable_by_key(|p| p.1);
        }
        pool = Some(ranked);
    }
    if top_p_on {
        pool = Some(match (&pool, window_mass) {
            (None, Some(_)) => all(),
            _ => top_p_prefix(pool.unwrap_or_else(all), top_p, max),
        });
    }
    let floor = min_p.ln();
    let passes_min_p = |v: f32| !min_p_on || v - max >= floor;
    let mut ids: Vec<u32> = match pool {
        Some(pool) => pool.into_iter().filter(|p| passes_min_p(p.0)).map(|p| p.1).collect(),
        None => (0..x.len() as u32).filter(|&i| passes_min_p(rank_value(x[i as usize]))).collect(),
    };
    ids.sort_unstable();
    Kept::Only(ids)
}

/// The smallest most-likely-first prefix of `pool` whose mass reaches `top_p`.
fn top_p_prefix(mut pool: Vec<(f32, u32)>, top_p: f32, max: f32) -> Vec<(f32, u32)> {
    let total: f64 = pool.iter().map(|p| f64::from(p.0 - max).exp()).sum();
    let target = f64::from(top_p) * total;
    match cut(&mut pool, max, target, target) {
        Cut::At(n) => pool.truncate(n),
        Cut::Open | Cut::Short => {}
    }
    pool
}

/// The token drawn from a row's candidates.
pub fn sample_from(c: &Candidates, width: usize, params: &SamplingParams, position: u64) -> u32 {
    if params.is_greedy() {
        return c.ids.get(argmax(&c.values) as usize).copied().unwrap_or(0);
    }
    let x: Vec<f32> =
        c.values.iter().map(|&v| if params.temperature == 1.0 { v } else { v / params.temperature }).collect();
    let kept =
        if c.settled { Kept::All } else { kept(&x, width, params.top_k, params.top_p, params.min_p, c.window_mass) };
    gumbel_argmax(&c.ids, &x, &kept, params.seed, position)
}

/// The token of a whole row, edited in place.
pub fn sample(logits: &mut [f32], params: &SamplingParams, history: &History, position: u64) -> u32 {
    apply_logit_bias(logits, &params.logit_bias);
    apply_penalties(logits, params, history);
    let candidates = select(logits, &base_query(params));
    sample_from(&candidates, logits.len(), params, position)
}
