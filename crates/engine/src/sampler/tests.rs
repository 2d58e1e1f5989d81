//! Tests of the sampler as a whole: greedy, seeded Gumbel-max, filters, bias and penalties.

use super::*;
use crate::rng::{GUMBEL_BOUND, gumbel, to_unit, uniform};
use tf_backend::logprobs::rank_value;
use tf_core::{TokenIds, Vocab};

fn no_history() -> History {
    History::new(&TokenIds::new())
}

fn seeded(temperature: f32, seed: u64) -> SamplingParams {
    SamplingParams { temperature, seed, ..SamplingParams::default() }
}

fn draw(logits: &[f32], params: &SamplingParams, position: u64) -> u32 {
    sample(&mut logits.to_vec(), params, &no_history(), position)
}

/// Reproducible logits: `scale` times a uniform in (-1, 1), with a salt per test.
fn logits(n: usize, scale: f32, salt: u64) -> Vec<f32> {
    (0..n).map(|i| scale * (2.0 * uniform(salt, 99, i as u32) - 1.0)).collect()
}

/// Counts of `draws` tokens sampled at positions 0..draws.
fn histogram(logits: &[f32], params: &SamplingParams, draws: u64) -> Vec<u64> {
    let mut counts = vec![0; logits.len()];
    for position in 0..draws {
        counts[draw(logits, params, position) as usize] += 1;
    }
    counts
}

/// Pearson's chi-square of observed counts against probabilities.
fn chi_square(counts: &[u64], probs: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    let expected = |p: f64| p * n as f64;
    counts.iter().zip(probs).map(|(&c, &p)| (c as f64 - expected(p)).powi(2) / expected(p)).sum()
}

fn softmax(logits: &[f32], temperature: f32) -> Vec<f64> {
    let w: Vec<f64> = logits.iter().map(|&x| (f64::from(x) / f64::from(temperature)).exp()).collect();
    let z: f64 = w.iter().sum();
    w.into_iter().map(|w| w / z).collect()
}

#[test]
fn greedy_is_argmax_with_ties_to_the_lowest_id() {
    let params = SamplingParams::default();
    for salt in 0..20 {
        let x = logits(1000, 10.0, salt);
        let want = (0..1000).max_by(|&a, &b| x[a].total_cmp(&x[b]).then(b.cmp(&a))).unwrap();
        assert_eq!(draw(&x, &params, salt) as usize, want);
    }
    assert_eq!(draw(&[1.0, 4.0, 4.0, f32::NAN, 2.0], &params, 0), 1);
    assert_eq!(draw(&[f32::NAN, 0.5], &params, 0), 1);
}

#[test]
fn same_seed_and_position_give_the_same_token() {
    let x = logits(5000, 2.0, 1);
    let params = seeded(1.0, 1234);
    let first: Vec<u32> = (0..50).map(|p| draw(&x, &params, p)).collect();
    // Reverse order, with other requests' draws in between: nothing carries over.
    for p in (0..50).rev() {
        draw(&x, &seeded(0.8, 7), p + 1000);
        assert_eq!(draw(&x, &params, p), first[p as usize]);
    }
    let distinct: std::collections::HashSet<_> = first.iter().collect();
    assert!(distinct.len() > 10, "positions should draw different tokens: {first:?}");
    let other_seed: Vec<u32> = (0..50).map(|p| draw(&x, &seeded(1.0, 1235), p)).collect();
    assert_ne!(first, other_seed);
}

#[test]
fn gumbel_max_follows_softmax() {
    let x = [1.0f32, 2.0, 0.5, -1.0, 3.0, 0.0];
    // Five degrees of freedom: a chi-square above 30 has probability about 1e-5.
    for temperature in [1.0, 0.7, 2.0] {
        let counts = histogram(&x, &seeded(temperature, 42), 20_000);
        let chi = chi_square(&counts, &softmax(&x, temperature));
        assert!(chi < 30.0, "T {temperature}: chi-square {chi}, counts {counts:?}");
    }
    // A wrong temperature is detected, so the test has teeth.
    let counts = histogram(&x, &seeded(1.0, 42), 20_000);
    assert!(chi_square(&counts, &softmax(&x, 0.8)) > 100.0);
}

#[test]
fn pruned_noise_gives_the_same_token_as_noise_for_every_id() {
    for (salt, scale, temperature) in [(1, 1.0, 1.0), (2, 10.0, 1.0), (3, 40.0, 0.5), (4, 5.0, 3.0)] {
        let x = logits(3000, scale, salt);
        let params = seeded(temperature, salt);
        for position in 0..200 {
            let brute = (0..3000u32)
                .map(|i| (x[i as usize] / temperature + gumbel(uniform(salt, position, i)), i))
                .fold((f32::NEG_INFINITY, 0), |best, s| if s.0 > best.0 { s } else { best });
            assert_eq!(draw(&x, &params, position), brute.1, "salt {salt} position {position}");
        }
    }
}

#[test]
fn gumbel_bound_is_above_every_draw() {
    assert!(gumbel(to_unit(u32::MAX)) < GUMBEL_BOUND);
    assert!(gumbel(to_unit(u32::MAX)) > GUMBEL_BOUND - 1.0);
    assert!(gumbel(to_unit(0)).is_finite());
}

#[test]
fn top_k_one_and_tiny_top_p_are_greedy() {
    let greedy = SamplingParams::default();
    for salt in 0..10 {
        let x = logits(2000, 3.0, salt);
        let want = draw(&x, &greedy, 0);
        for position in 0..20 {
            let top_k = SamplingParams { top_k: 1, ..seeded(1.5, salt) };
            let top_p = SamplingParams { top_p: 1e-6, ..seeded(1.5, salt) };
            assert_eq!(draw(&x, &top_k, position), want);
            assert_eq!(draw(&x, &top_p, position), want);
        }
    }
}

#[test]
fn top_k_and_top_p_renormalise_over_what_they_keep() {
    let x = [0.0f32, 2.0, 1.0, 1.5, -1.0];
    let top_k = SamplingParams { top_k: 2, ..seeded(1.0, 9) };
    let counts = histogram(&x, &top_k, 10_000);
    let probs = softmax(&[2.0, 1.5], 1.0);
    assert_eq!(counts[0] + counts[2] + counts[4], 0, "{counts:?}");
    assert!(chi_square(&[counts[1], counts[3]], &probs) < 20.0, "{counts:?}");
    // Masses 0.43, 0.26, 0.16, ...: top_p 0.6 keeps the first two.
    let top_p = SamplingParams { top_p: 0.6, ..seeded(1.0, 9) };
    let counts = histogram(&x, &top_p, 10_000);
    assert_eq!(counts[0] + counts[2] + counts[4], 0, "{counts:?}");
    assert!(chi_square(&[counts[1], counts[3]], &probs) < 20.0, "{counts:?}");
}

#[test]
fn min_p_drops_unlikely_tokens_only() {
    // Probabilities proportional to 1, 0.5, 0.2, 0.05.
    let x = [0.0f32, 0.5f32.ln(), 0.2f32.ln(), 0.05f32.ln()];
    let params = SamplingParams { min_p: 0.1, ..seeded(1.0, 3) };
    let counts = histogram(&x, &params, 10_000);
    assert_eq!(counts[3], 0, "{counts:?}");
    let probs = softmax(&x[..3], 1.0);
    assert!(chi_square(&counts[..3], &probs) < 20.0, "{counts:?}");
    let without = histogram(&x, &seeded(1.0, 3), 10_000);
    assert!(without[3] > 200, "{without:?}");
}

#[test]
fn logit_bias_forces_and_bans() {
    let x = logits(1000, 5.0, 8);
    let force = SamplingParams { logit_bias: vec![(777, 100.0)], ..seeded(1.0, 1) };
    let greedy_force = SamplingParams { temperature: 0.0, ..force.clone() };
    for position in 0..50 {
        assert_eq!(draw(&x, &force, position), 777);
        assert_eq!(draw(&x, &greedy_force, position), 777);
    }
    let top = draw(&x, &SamplingParams::default(), 0);
    let ban = SamplingParams { logit_bias: vec![(top, -100.0)], ..SamplingParams::default() };
    assert_ne!(draw(&x, &ban, 0), top);
}

#[test]
fn suppressed_ids_cannot_be_drawn_before_min_tokens_on_either_path() {
    let x = logits(1000, 5.0, 12);
    let top = draw(&x, &SamplingParams::default(), 0);
    for base in [SamplingParams::default(), seeded(1.0, 4)] {
        let p = SamplingParams { min_tokens: 2, suppress: vec![top], logit_bias: vec![(top, 100.0)], ..base };
        let mut history = no_history();
        for generated in 0..4 {
            let whole = sample(&mut x.clone(), &p, &history, generated);
            let q = query(&p, &history, generated).expect("one bias per id");
            let mut edited = x.clone();
            tf_backend::candidates::apply_edits(&mut edited, &q);
            let picked = sample_from(&select(&edited, &q), x.len(), &p, generated);
            assert_eq!(whole, picked, "the whole row and its candidates agree");
            // The bias forces `top` once it may be drawn.
            assert_eq!(whole == top, generated >= 2, "{generated} generated");
            history.push(whole);
        }
    }
}

#[test]
fn penalties_change_the_right_logits_by_the_right_amount() {
    let prompt = Vocab::new(8).unwrap().check(&[0, 1, 0]).unwrap();
    let mut history = History::new(&prompt);
    for id in [2, 2, 1] {
        history.push(id);
    }
    let x = [2.0f32, -2.0, 1.0, 0.5, -1.0, 3.0, 0.0, 4.0];
    let mut got = x;
    let rep = SamplingParams { repetition_penalty: 2.0, ..SamplingParams::default() };
    apply_penalties(&mut got, &rep, &history);
    // Seen once each however often they occur: 0 and 1 from the prompt, 2 from the output.
    assert_eq!(got, [1.0, -4.0, 0.5, 0.5, -1.0, 3.0, 0.0, 4.0]);

    let mut got = x;
    let pf = SamplingParams { frequency_penalty: 0.5, presence_penalty: 0.25, ..SamplingParams::default() };
    apply_penalties(&mut got, &pf, &history);
    // Output only: id 2 twice, id 1 once; prompt-only id 0 untouched.
    assert_eq!(got, [2.0, -2.0 - 0.5 - 0.25, 1.0 - 1.0 - 0.25, 0.5, -1.0, 3.0, 0.0, 4.0]);

    // Through `sample`: bias, then penalties (the temperature scales a copy).
    let mut got = x;
    let all = SamplingParams {
        temperature: 2.0,
        logit_bias: vec![(7, -1.0), (1, 4.0)],
        ..SamplingParams { repetition_penalty: 2.0, ..pf }
    };
    sample(&mut got, &all, &history, 0);
    let want = [1.0, 1.0 - 0.5 - 0.25, 0.5 - 1.0 - 0.25, 0.5, -1.0, 3.0, 0.0, 3.0];
    assert_eq!(got, want);
}

#[test]
fn non_finite_logits_do_not_panic_or_win() {
    let x = [f32::NAN, f32::NEG_INFINITY, 1.0, f32::NAN, 0.5];
    for params in [
        seeded(1.0, 5),
        SamplingParams { top_p: 0.5, ..seeded(1.0, 5) },
        SamplingParams { top_k: 2, min_p: 0.1, ..seeded(1.0, 5) },
    ] {
        for position in 0..100 {
            let token = draw(&x, &params, position);
            assert!(token == 2 || token == 4, "{token}");
        }
    }
    assert_eq!(draw(&[f32::NEG_INFINITY; 3], &seeded(1.0, 1), 0), 0);
}

/// The sampler written over the whole row with a full sort and noise for every kept id.
fn whole_row(row: &[f32], params: &SamplingParams, history: &History, position: u64) -> u32 {
    let mut x = row.to_vec();
    apply_logit_bias(&mut x, &params.logit_bias);
    apply_penalties(&mut x, params, history);
    if params.is_greedy() {
        return argmax(&x);
    }
    x.iter_mut().for_each(|v| *v /= params.temperature);
    let mut order: Vec<u32> = (0..x.len() as u32).collect();
    order.sort_by(|&a, &b| tf_backend::logprobs::by_rank(&x, a, b));
    if params.top_k > 0 {
        order.truncate(params.top_k as usize);
    }
    let max = rank_value(x[order[0] as usize]);
    let w = |i: u32| f64::from(rank_value(x[i as usize]) - max).exp();
    if params.top_p < 1.0 {
        let total: f64 = order.iter().map(|&i| w(i)).sum();
        let mut mass = 0.0;
        let n = order.iter().take_while(|&&i| {
            let before = mass;
            mass += w(i);
            before < f64::from(params.top_p) * total
        });
        let n = n.count();
        order.truncate(n.max(1));
    }
    order.retain(|&i| params.min_p == 0.0 || (rank_value(x[i as usize]) - max).exp() >= params.min_p);
    order.sort();
    let score = |i: u32| x[i as usize] + gumbel(uniform(params.seed, position, i));
    let first = (f32::NEG_INFINITY, order[0]);
    order.into_iter().fold(first, |best, i| if score(i) > best.0 { (score(i), i) } else { best }).1
}

#[test]
fn candidates_give_the_token_the_whole_row_gives() {
    let prompt = Vocab::new(6000).unwrap().check(&[3, 17, 17, 4000, 5999]).unwrap();
    let mut history = History::new(&prompt);
    for id in [17, 250, 250, 4000] {
        history.push(id);
    }
    let base = |t: f32, seed: u64| SamplingParams { temperature: t, seed, ..SamplingParams::default() };
    let cases = [
        base(0.0, 0),
        base(1.0, 1),
        base(0.7, 2),
        base(1.5, 3),
        SamplingParams { top_k: 5, ..base(1.0, 4) },
        SamplingParams { top_k: 50, top_p: 0.9, ..base(0.8, 5) },
        SamplingParams { top_k: 5900, ..base(1.2, 6) },
        SamplingParams { top_p: 0.5, ..base(1.0, 7) },
        SamplingParams { top_p: 0.95, min_p: 0.05, ..base(1.0, 8) },
        SamplingParams { min_p: 1e-30, ..base(2.0, 9) },
        SamplingParams { min_p: 0.05, ..base(1.0, 14) },
        SamplingParams { min_p: 0.3, top_k: 40, ..base(0.7, 15) },
        SamplingParams { min_p: 1.0, ..base(1.3, 16) },
        SamplingParams { logit_bias: vec![(250, 30.0), (9, -5.0)], ..base(1.0, 10) },
        SamplingParams { logit_bias: vec![(4000, 2.5)], ..base(0.0, 11) },
        SamplingParams {
            repetition_penalty: 1.3,
            frequency_penalty: 0.5,
            presence_penalty: -0.25,
            top_p: 0.8,
            ..base(0.9, 12)
        },
        SamplingParams {
            repetition_penalty: 1.3,
            frequency_penalty: 0.5,
            presence_penalty: -0.25,
            logit_bias: vec![(250, 3.0)],
            ..base(1.1, 13)
        },
    ];
    // Spreads of 40 and 8: the windows leave most ids out, or keep nearly all.
    for (salt, scale) in [(21, 40.0), (22, 8.0), (23, 80.0)] {
        let row = logits(6000, scale, salt);
        for params in &cases {
            for position in 0..40 {
                let want = whole_row(&row, params, &history, position);
                assert_eq!(sample(&mut row.clone(), params, &history, position), want, "{params:?} {position}");
                let q = query(params, &history, position).unwrap();
                let c = tf_backend::candidates::candidates(&mut row.clone(), &q);
                assert!(c.ids.len() < row.len() || scale < 40.0, "the window should leave ids out");
                // A plain race's candidates by race score (a device's rule, with the host's
                // noise) keep its winner and near ties only, at any spread.
                let plain = !params.is_greedy() && params.top_k == 0 && params.top_p >= 1.0 && params.min_p == 0.0;
                assert_eq!(q.race.is_some(), !params.is_greedy());
                assert_eq!(q.plain_race(), plain);
                if let Some(key) = q.race.as_ref().filter(|_| plain) {
                    let mut edited = row.clone();
                    tf_backend::candidates::apply_edits(&mut edited, &q);
                    let r = tf_backend::candidates::select_race(&edited, &q, key);
                    assert!(r.ids.len() <= 8, "{params:?}: {} race candidates", r.ids.len());
                    assert_eq!(sample_from(&r, row.len(), params, position), want, "{params:?} {position}");
                }
                // Min-p alone narrows the window to its survivors' reach.
                if params.min_p > 0.0 && params.top_p >= 1.0 {
                    assert!(q.window < 20.0 || params.min_p < 2e-9, "{params:?}: window {}", q.window);
                }
                // Top-p alone sends the prefix it settles, with the window's mass.
                let narrowed = params.top_p < 1.0 && params.top_k == 0 && !params.is_greedy();
                assert_eq!(c.window_mass.is_some(), narrowed, "{params:?}: window mass");
                // Top-k keeps its k (and ties of the k-th) at most.
                let k = params.top_k as usize;
                assert!(k == 0 || c.ids.len() <= k, "{params:?}: {} candidates past top-k", c.ids.len());
                assert_eq!(sample_from(&c, row.len(), params, position), want, "{params:?} {position}");
            }
        }
    }
}

#[test]
fn a_bias_named_twice_has_no_query() {
    let params = SamplingParams { logit_bias: vec![(1, 1.0), (1, 2.0)], ..seeded(1.0, 0) };
    assert_eq!(query(&params, &no_history(), 0), None);
    assert!(query(&seeded(1.0, 0), &no_history(), 0).is_some());
}

#[test]
fn settled_candidates_are_raced_as_they_are() {
    // Two tied survivors under top-k 1: unsettled, top-k keeps the lower id; settled (a backend
    // drew the row and these are its finalists) the race decides between them.
    let params = SamplingParams { top_k: 1, ..seeded(1.0, 3) };
    let unsettled = Candidates { ids: vec![4, 9], values: vec![2.0, 2.0], ..Candidates::default() };
    let settled = Candidates { settled: true, ..unsettled.clone() };
    let (mut lower, mut higher) = (0, 0);
    for position in 0..64 {
        assert_eq!(sample_from(&unsettled, 100, &params, position), 4);
        let g = |id| gumbel(uniform(3, position, id));
        let want = if g(9) > g(4) { 9 } else { 4 };
        let got = sample_from(&settled, 100, &params, position);
        assert_eq!(got, want, "position {position}");
        if got == 4 { lower += 1 } else { higher += 1 }
    }
    assert!(lower > 0 && higher > 0, "{lower} {higher}");
}
