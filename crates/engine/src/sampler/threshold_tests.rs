//! The sampler with its top-p cut found by a threshold search against the sorting sampler it
//! replaced (sorted.rs): over rows flat, peaked, tied and with -inf (and NaN), and every
//! combination of temperature, top-k, top-p and min-p, the same candidates, kept ids, tokens
//! and logprobs, bit for bit (the window's mass within the band a backend's sum may take).

use super::sorted;
use super::*;
use crate::rng::uniform;
use filter::kept;
use tf_backend::LogprobQuery;
use tf_backend::logprobs::row_logprobs;
use tf_core::TokenIds;

/// A row of `n` logits of shape `kind`, from uniforms salted by `salt`.
fn row(kind: usize, n: usize, salt: u64) -> Vec<f32> {
    let u = |i: usize| uniform(salt, 1, i as u32);
    (0..n)
        .map(|i| match kind {
            // A random-weight model's row: every id within a fraction of a logit.
            0 => 0.4 * u(i) - 0.2,
            // Spread over twelve logits.
            1 => 12.0 * u(i) - 6.0,
            // A few ids far above a flat rest.
            2 => {
                if i % 997 == 3 {
                    8.0 + u(i)
                } else {
                    u(i) - 0.5
                }
            }
            // Eight levels: long runs of ties.
            3 => (u(i) * 8.0).floor() * 0.25,
            // A flat row with -inf sprinkled in.
            4 => {
                if i % 13 == 5 {
                    f32::NEG_INFINITY
                } else {
                    u(i)
                }
            }
            // Every id tied.
            5 => 1.5,
            // Large magnitudes, spread wider than the window.
            6 => 3000.0 * u(i) - 1000.0,
            // Flat, with NaN sprinkled in.
            _ => {
                if i % 29 == 7 {
                    f32::NAN
                } else {
                    0.5 * u(i)
                }
            }
        })
        .collect()
}

/// Row kinds of [`row`].
const KINDS: usize = 8;

/// Equal candidates, NaN values compared by their bits; a window mass is the backend's own sum
/// (a vector sum of fast weights on the CPU), within the band top_p.rs allows of the host's.
fn same(a: &Candidates, b: &Candidates) -> bool {
    let bits = |c: &Candidates| c.values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let mass = match (a.window_mass, b.window_mass) {
        (Some(x), Some(y)) => (x - y).abs() <= y * tf_backend::top_p::MASS_TOLERANCE,
        (x, y) => x == y,
    };
    a.ids == b.ids && bits(a) == bits(b) && mass && a.settled == b.settled
}

/// The positions a [`Kept`] keeps of `n` candidates.
fn positions(k: Kept, n: usize) -> Vec<u32> {
    match k {
        Kept::All => (0..n as u32).collect(),
        Kept::Only(at) => at,
    }
}

/// Every combination of the filters and temperatures, with a bias on two ids in some.
fn settings() -> Vec<SamplingParams> {
    let mut all = Vec::new();
    for temperature in [0.0, 1.0, 0.8, 0.25, 1.7] {
        for top_k in [0, 1, 7, 50, 3000] {
            for top_p in [1.0, 0.95, 0.5, 0.05, 0.9999] {
                for min_p in [0.0, 0.05, 0.5] {
                    let logit_bias = if top_k == 7 { vec![(3, 0.3), (11, -2.0)] } else { Vec::new() };
                    all.push(SamplingParams {
                        temperature,
                        top_k,
                        top_p,
                        min_p,
                        logit_bias,
                        seed: u64::from(top_k) + 7,
                        ..SamplingParams::default()
                    });
                }
            }
        }
    }
    all
}

#[test]
fn the_threshold_search_gives_the_sorting_samplers_candidates_tokens_and_logprobs() {
    let history = History::new(&TokenIds::new());
    let (mut rows_compared, mut narrowed) = (0, 0);
    for kind in 0..KINDS {
        for (salt, n) in [(1u64, 1200usize), (2, 20_000)] {
            let raw = row(kind, n, salt + 10 * kind as u64);
            let lq = LogprobQuery { row: 0, top_n: 3, ids: Vec::new() };
            let stats = row_logprobs(&raw, &lq);
            for (j, p) in settings().iter().enumerate() {
                let position = 40 + j as u64;
                let (mut edited, mut edited_old) = (raw.clone(), raw.clone());
                apply_logit_bias(&mut edited, &p.logit_bias);
                apply_logit_bias(&mut edited_old, &p.logit_bias);
                let q = base_query(p);
                let (c, c_old) = (select(&edited, &q), sorted::select(&edited_old, &q));
                assert!(same(&c, &c_old), "kind {kind} n {n} {p:?}: candidates differ");
                narrowed += usize::from(c.window_mass.is_some());
                // The filters over the whole row and over the candidates.
                if !p.is_greedy() {
                    let x: Vec<f32> = edited.iter().map(|&v| v / p.temperature).collect();
                    let (k, pp, m) = (p.top_k, p.top_p, p.min_p);
                    assert_eq!(kept(&x, n, k, pp, m, None), sorted::kept(&x, n, k, pp, m, None), "kind {kind} {p:?}");
                    let xc: Vec<f32> = c.values.iter().map(|&v| v / p.temperature).collect();
                    let (w, cm) = (c.window_mass, c.window_mass);
                    let (got, want) = (kept(&xc, n, k, pp, m, w), sorted::kept(&xc, n, k, pp, m, cm));
                    assert_eq!(positions(got, xc.len()), positions(want, xc.len()), "kind {kind} {p:?}");
                }
                let t = sample_from(&c, n, p, position);
                assert_eq!(t, sorted::sample_from(&c_old, n, p, position), "kind {kind} n {n} {p:?}");
                let whole = sample(&mut raw.clone(), p, &history, position);
                assert_eq!(whole, sorted::sample(&mut raw.clone(), p, &history, position), "kind {kind} {p:?}");
                assert_eq!(whole, t, "the whole row and its candidates agree");
                let lp = |t: u32| Logprobs::of(&stats, raw[t as usize]);
                let (a, b) = (lp(t), lp(whole));
                assert_eq!((a.chosen.to_bits(), a.top), (b.chosen.to_bits(), b.top));
                rows_compared += 1;
            }
        }
    }
    assert_eq!(rows_compared, KINDS * 2 * settings().len());
    assert!(narrowed > 100, "top-p rows narrowed to their cut: {narrowed}");
}

#[test]
fn cuts_at_exact_prefix_masses_match_the_sorting_sampler() {
    // Targets placed on a rank-order prefix mass exactly (and one ulp either side), where only
    // the rank-order sum settles the cut: the search must hand these to the sort.
    let x = row(0, 5000, 3);
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut ranked: Vec<(f32, u32)> = x.iter().zip(0..).map(|(&v, i)| (v, i)).collect();
    ranked.sort_by(tf_backend::top_p::by_ranked);
    let mut prefix = Vec::new();
    let mut mass = 0.0f64;
    for p in &ranked {
        mass += f64::from(p.0 - max).exp();
        prefix.push(mass);
    }
    let total: f64 = x.iter().map(|&v| f64::from(v - max).exp()).sum();
    for at in [0, 1, 17, 255, 256, 1000, 2500, 4998] {
        for step in [-1i64, 0, 1] {
            let target = f64::from_bits(prefix[at].to_bits().wrapping_add_signed(step));
            // A window mass whose band centres on the target.
            let top_p = (target / total) as f32;
            let window_mass = target / f64::from(top_p);
            assert_eq!(
                tf_backend::top_p::band_prefix(&x, top_p, window_mass),
                sorted::band_prefix(&x, top_p, window_mass),
                "prefix {at} step {step}"
            );
            assert_eq!(kept(&x, x.len(), 0, top_p, 0.0, None), sorted::kept(&x, x.len(), 0, top_p, 0.0, None));
        }
    }
}
