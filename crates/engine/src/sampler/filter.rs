//! The candidate set after temperature: top-k, then top-p, then min-p (the order of HF
//! transformers and vLLM v0), over a row's sampling candidates (tf_backend::candidates): the ids
//! within a window of the most likely one, which is the whole row when its max is not finite.
//! Top-p's mass counts the candidates only: with the window of [`TOP_P_WINDOW`] an id left out
//! weighs under e^-40 of the most likely one, below what the f32 `top_p` resolves. When all
//! three filters are off nothing is sorted or allocated.

pub use tf_backend::logprobs::rank_value;
use tf_backend::top_p::{Cut, Weighed, by_ranked, cut};

/// The tokens that may be sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Every candidate.
    All,
    /// These candidates (positions in the candidate list), in increasing order.
    Only(Vec<u32>),
}

/// The window (in scaled logits below the most likely) that top-p's candidates need.
pub const TOP_P_WINDOW: f32 = 40.0;

/// A candidate as `(rank_value, id)`: sorting these touches no other memory.
type Ranked = (f32, u32);

/// The candidates kept under top-k, top-p and min-p: `x` holds the candidates' scaled logits in
/// increasing id order (the candidate list of a row `width` wide). A `window_mass` says the
/// candidates are exactly top-p's prefix, settled by that sum of the window's weights (tf_backend
/// top_p.rs), so top-p keeps them all.
pub fn kept(x: &[f32], width: usize, top_k: u32, top_p: f32, min_p: f32, window_mass: Option<f64>) -> Kept {
    let top_k_on = top_k > 0 && (top_k as usize) < width;
    let top_p_on = top_p < 1.0;
    let min_p_on = min_p > 0.0;
    if !(top_k_on || top_p_on || min_p_on) {
        return Kept::All;
    }
    // Candidates that a window mass settled are top-p's prefix already: without top-k or
    // min-p every one is kept.
    if window_mass.is_some() && !(top_k_on || min_p_on) {
        return Kept::All;
    }
    let max = x.iter().copied().map(rank_value).fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return Kept::All;
    }
    let all = || -> Vec<Ranked> { x.iter().zip(0..).map(|(&v, i)| (rank_value(v), i)).collect() };
    let mut pool: Option<Vec<Ranked>> = None;
    if top_k_on {
        let mut ranked = all();
        let k = top_k as usize;
        if k < ranked.len() {
            ranked.select_nth_unstable_by(k - 1, by_ranked);
            ranked.truncate(k);
            // Top-p sums its mass in candidate order.
            ranked.sort_unstable_by_key(|p| p.1);
        }
        pool = Some(ranked);
    }
    if top_p_on {
        // Candidates with a window mass are the prefix that mass settled (without top-k).
        pool = Some(match (&pool, window_mass) {
            (None, Some(_)) => all(),
            _ => top_p_prefix(pool.unwrap_or_else(all), top_p, max),
        });
    }
    // p_i >= min_p * p_max  <=>  x_i - max >= ln(min_p); the renormalisation by earlier
    // filters cancels in the ratio, and the most likely token always passes. Compared in the
    // log domain (one f32 subtraction against one logarithm a row) so a device that draws the
    // row keeps the same ids bit for bit.
    let floor = min_p.ln();
    let passes_min_p = |v: f32| !min_p_on || v - max >= floor;
    let mut ids: Vec<u32> = match pool {
        Some(pool) => pool.into_iter().filter(|p| passes_min_p(p.0)).map(|p| p.1).collect(),
        None => (0..x.len() as u32).filter(|&i| passes_min_p(rank_value(x[i as usize]))).collect(),
    };
    ids.sort_unstable();
    Kept::Only(ids)
}

/// The smallest most-likely-first prefix of `pool` whose probability (renormalised over
/// `pool`, summed in candidate order) reaches `top_p`; never empty. `max` is the largest value
/// in `pool`.
fn top_p_prefix(mut pool: Vec<Ranked>, top_p: f32, max: f32) -> Vec<Ranked> {
    let weighed = Weighed::new(&pool, max);
    let target = f64::from(top_p) * weighed.total;
    match cut(&mut pool, &weighed, target, target) {
        Cut::At(n) => pool.truncate(n),
        // Rounding left the sum a hair short of the target: keep everything.
        Cut::Open | Cut::Short => {}
    }
    pool
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_backend::logprobs::by_rank;

    /// A reproducible spread of logits with ties, -inf and NaN.
    fn logits(n: usize, salt: u64) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let u = crate::rng::uniform(salt, 0, i as u32);
                match i % 97 {
                    5 => f32::NEG_INFINITY,
                    6 => f32::NAN,
                    7 | 8 => 3.0,
                    _ => 12.0 * u - 6.0,
                }
            })
            .collect()
    }

    /// The same filters with a full sort and straightforward loops.
    fn naive(x: &[f32], top_k: u32, top_p: f32, min_p: f32) -> Vec<u32> {
        let mut order: Vec<u32> = (0..x.len() as u32).collect();
        order.sort_by(|&a, &b| by_rank(x, a, b));
        if top_k > 0 {
            order.truncate(top_k as usize);
        }
        let max = rank_value(x[order[0] as usize]);
        let w = |i: u32| f64::from(rank_value(x[i as usize]) - max).exp();
        if top_p < 1.0 {
            let total: f64 = order.iter().map(|&i| w(i)).sum();
            let mut mass = 0.0;
            let n = order.iter().take_while(|&&i| {
                let before = mass;
                mass += w(i);
                before < f64::from(top_p) * total
            });
            let n = n.count();
            order.truncate(n.max(1));
        }
        order.retain(|&i| min_p == 0.0 || (f64::from(rank_value(x[i as usize]) - max)).exp() >= f64::from(min_p));
        order.sort();
        order
    }

    #[test]
    fn all_off_keeps_all() {
        assert_eq!(kept(&logits(1000, 1), 1000, 0, 1.0, 0.0, None), Kept::All);
        assert_eq!(kept(&logits(10, 1), 10, 10, 1.0, 0.0, None), Kept::All);
    }

    #[test]
    fn matches_a_full_sort() {
        let cases = [
            (0, 0.9, 0.0),
            (0, 0.999, 0.0),
            (0, 0.05, 0.0),
            (50, 1.0, 0.0),
            (1, 1.0, 0.0),
            (300, 0.95, 0.0),
            (0, 1.0, 0.1),
            (0, 1.0, 1.0),
            (40, 0.8, 0.05),
        ];
        for salt in 0..4 {
            let x = logits(5000, salt);
            for (k, p, m) in cases {
                let Kept::Only(got) = kept(&x, x.len(), k, p, m, None) else { panic!("nothing filtered") };
                assert_eq!(got, naive(&x, k, p, m), "top_k {k} top_p {p} min_p {m}");
                assert!(!got.is_empty());
            }
        }
    }

    #[test]
    fn min_p_compares_in_the_log_domain() {
        // Values one f32 step around ln(min_p), where exp(d) >= min_p and d >= ln(min_p) part.
        let mut parted = 0;
        for k in 1..400u32 {
            let min_p = k as f32 / 400.0;
            let floor = min_p.ln();
            for step in -8i32..8 {
                let d = f32::from_bits(floor.to_bits().wrapping_add_signed(-step));
                if (d.exp() >= min_p) == (d >= floor) {
                    continue;
                }
                parted += 1;
                let want = if d >= floor { vec![0, 1] } else { vec![0] };
                assert_eq!(kept(&[0.0, d], 2, 0, 1.0, min_p, None), Kept::Only(want), "min_p {min_p} d {d}");
            }
        }
        assert!(parted > 0, "no value parts the two rules");
    }

    #[test]
    fn ties_keep_the_lower_id() {
        let x = [1.0, 5.0, 5.0, 5.0, 0.0];
        assert_eq!(kept(&x, 5, 2, 1.0, 0.0, None), Kept::Only(vec![1, 2]));
        assert_eq!(kept(&x, 5, 0, 1e-6, 0.0, None), Kept::Only(vec![1]));
    }
}
