//! Mixture-of-experts routing, every family's variant in one rule ([`route`]): softmax or sigmoid
//! scores, a per-expert bias added for choosing only, group-limited choice, renormalisation and
//! a scaling factor. Every backend routes by these steps, so a token's experts and weights are
//! the same whichever backend or path runs them.
//!
//! The variants as [`MoeParams`] and the checkpoint's tensors say them:
//! - Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE: `MoeParams::softmax(top_k, norm_topk_prob, act)`, no
//!   bias; Qwen3-Next's shared expert and its `shared_expert_gate` are the model's (a dense MLP
//!   added after [`Backend::moe`](crate::Backend::moe), scaled by `sigmoid` through
//!   [`Backend::add_sigmoid_scaled`](crate::Backend::add_sigmoid_scaled)).
//! - DeepSeek-V3, GLM-4.5 (`glm4_moe`), Nemotron-H: `MoeScoring::Sigmoid`, the
//!   `e_score_correction_bias` as [`Experts::choice_bias`](crate::Experts), `n_group` /
//!   `topk_group`, `norm_eps` 1e-20, `scale` = `routed_scaling_factor`. Nemotron-H's experts
//!   have no gate (`Experts::gate` empty, `act` = `Activation::Relu2`).
//! - LFM2-MoE: `MoeScoring::Sigmoid`, its `expert_bias` (when `use_expert_bias`) as the choice
//!   bias, one group, `norm_eps` 1e-6, `scale` = `routed_scaling_factor`.

use crate::Activation;

/// How a router turns its logits into expert scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoeScoring {
    /// Softmax over the row's experts (Qwen3-MoE, Qwen3-Next).
    Softmax,
    /// Each logit's sigmoid, `1 / (1 + exp(-l))` (DeepSeek-V3, GLM-4.5, Nemotron-H, LFM2-MoE).
    Sigmoid,
}

/// Mixture-of-experts routing parameters: the steps of [`route`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeParams {
    /// Experts chosen per token.
    pub top_k: usize,
    /// Scores from router logits.
    pub scoring: MoeScoring,
    /// Expert groups (consecutive runs of `experts / n_group` ids); 1: no group limit.
    pub n_group: usize,
    /// Groups a token may choose experts from (ranked by the sum of their two best biased scores).
    pub topk_group: usize,
    /// Renormalise the chosen experts' weights by their sum (plus `norm_eps`).
    pub norm_topk_prob: bool,
    /// Added to the chosen weights' sum before dividing (Qwen 0, DeepSeek / GLM 1e-20, LFM2 1e-6).
    pub norm_eps: f32,
    /// Factor on every routed weight after renormalising (`routed_scaling_factor`; 1 for none).
    pub scale: f32,
    /// The experts' activation (gated, or on its own where experts have no gate).
    pub act: Activation,
    /// Gated experts clamp their activation at this limit (`Backend::glu_clamped`; Step's
    /// `swiglu_limits`); `None`: no clamp.
    pub clamp: Option<f32>,
}

impl MoeParams {
    /// Qwen3-MoE's router: softmax, top-k, optional renormalisation, no groups or scaling.
    pub fn softmax(top_k: usize, norm_topk_prob: bool, act: Activation) -> MoeParams {
        MoeParams {
            top_k,
            scoring: MoeScoring::Softmax,
            n_group: 1,
            topk_group: 1,
            norm_topk_prob,
            norm_eps: 0.0,
            scale: 1.0,
            act,
            clamp: None,
        }
    }

    /// Why these parameters cannot route `num_experts` experts (with a choice bias of
    /// `bias_len` values, when given), or `None` when they can: what a loader checks.
    pub fn check(&self, num_experts: usize, bias_len: Option<usize>) -> Option<String> {
        let (k, g, tg) = (self.top_k, self.n_group, self.topk_group);
        if k == 0 || k > num_experts {
            return Some(format!("{k} experts per token of {num_experts}"));
        }
        if g == 0 || !num_experts.is_multiple_of(g) {
            return Some(format!("n_group {g} does not divide {num_experts} experts"));
        }
        if g > 1 && num_experts / g < 2 {
            return Some(format!("groups of {} experts (group scores take two)", num_experts / g));
        }
        if g > 1 && (tg == 0 || tg > g || k > tg * (num_experts / g)) {
            return Some(format!("topk_group {tg} of {g} groups cannot hold {k} experts"));
        }
        if let Some(n) = bias_len.filter(|&n| n != num_experts) {
            return Some(format!("choice bias of {n} values for {num_experts} experts"));
        }
        if !self.scale.is_finite() || !self.norm_eps.is_finite() || self.norm_eps < 0.0 {
            return Some(format!("scale {} / norm_eps {} are not usable", self.scale, self.norm_eps));
        }
        None
    }
}

/// Scores of one row's logits.
pub fn scores(logits: &[f32], scoring: MoeScoring) -> Vec<f32> {
    match scoring {
        MoeScoring::Softmax => {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exps: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
            let sum: f32 = exps.iter().sum();
            exps.iter().map(|e| e / sum).collect()
        }
        MoeScoring::Sigmoid => logits.iter().map(|&l| 1.0 / (1.0 + (-l).exp())).collect(),
    }
}

/// `(expert, weight)` pairs of one row: scores of `logits`; choice values = scores plus `bias`;
/// with groups, the `topk_group` groups of the largest (best + second best choice value) kept
/// (ties: the lower group); the `top_k` largest choice values among kept experts, largest first
/// (ties: the lower expert id); weights = the unbiased scores, divided by their sum (in that
/// order) plus `norm_eps` when `norm_topk_prob`, then times `scale`.
pub fn route(logits: &[f32], bias: Option<&[f32]>, p: &MoeParams) -> Vec<(usize, f32)> {
    let s = scores(logits, p.scoring);
    let choice: Vec<f32> = match bias {
        Some(b) => s.iter().zip(b).map(|(v, b)| v + b).collect(),
        None => s.clone(),
    };
    let ne = s.len();
    let mut allowed = vec![true; ne];
    if p.n_group > 1 {
        let size = ne / p.n_group;
        let group_scores: Vec<f32> = choice
            .chunks_exact(size)
            .map(|g| {
                let (first, second) = best_two(g);
                first + second
            })
            .collect();
        let mut order: Vec<usize> = (0..p.n_group).collect();
        order.sort_by(|&a, &b| group_scores[b].total_cmp(&group_scores[a]).then(a.cmp(&b)));
        let mut keep = vec![false; p.n_group];
        order.iter().take(p.topk_group).for_each(|&g| keep[g] = true);
        allowed.iter_mut().enumerate().for_each(|(e, a)| *a = keep[e / size]);
    }
    let mut order: Vec<usize> = (0..ne).filter(|&e| allowed[e]).collect();
    order.sort_by(|&a, &b| choice[b].total_cmp(&choice[a]).then(a.cmp(&b)));
    let mut chosen: Vec<(usize, f32)> = order.into_iter().take(p.top_k).map(|e| (e, s[e])).collect();
    if p.norm_topk_prob {
        let total: f32 = chosen.iter().map(|c| c.1).sum::<f32>() + p.norm_eps;
        chosen.iter_mut().for_each(|c| c.1 /= total);
    }
    chosen.iter_mut().for_each(|c| c.1 *= p.scale);
    chosen
}

/// The largest and second largest values of `g` (two or more values; total order).
fn best_two(g: &[f32]) -> (f32, f32) {
    let mut first = f32::NEG_INFINITY;
    let mut second = f32::NEG_INFINITY;
    for &v in g {
        if v.total_cmp(&first).is_gt() {
            second = first;
            first = v;
        } else if v.total_cmp(&second).is_gt() {
            second = v;
        }
    }
    (first, second)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sigmoid(top_k: usize, n_group: usize, topk_group: usize) -> MoeParams {
        MoeParams {
            top_k,
            scoring: MoeScoring::Sigmoid,
            n_group,
            topk_group,
            norm_topk_prob: true,
            norm_eps: 1e-20,
            scale: 2.5,
            act: Activation::Silu,
            clamp: None,
        }
    }

    fn sig(l: f32) -> f32 {
        1.0 / (1.0 + (-l).exp())
    }

    #[test]
    fn softmax_top_k_keeps_the_qwen_rule() {
        let p = MoeParams::softmax(2, true, Activation::Silu);
        let r = route(&[0.1, 2.0, -1.0, 1.0], None, &p);
        assert_eq!(r.iter().map(|c| c.0).collect::<Vec<_>>(), vec![1, 3]);
        let s = scores(&[0.1, 2.0, -1.0, 1.0], MoeScoring::Softmax);
        let total = s[1] + s[3];
        assert_eq!(r[0].1.to_bits(), (s[1] / total).to_bits());
        assert_eq!(r[1].1.to_bits(), (s[3] / total).to_bits());
    }

    #[test]
    fn the_bias_chooses_but_the_weights_are_the_unbiased_scores() {
        let p = MoeParams { n_group: 1, topk_group: 1, norm_topk_prob: false, scale: 1.0, ..sigmoid(1, 1, 1) };
        let logits = [1.0, 0.0, 0.5];
        assert_eq!(route(&logits, None, &p), vec![(0, sig(1.0))]);
        // Expert 1 wins by its bias; its weight is its own sigmoid, without the bias.
        assert_eq!(route(&logits, Some(&[0.0, 0.6, 0.0]), &p), vec![(1, sig(0.0))]);
    }

    #[test]
    fn groups_rank_by_their_two_best_biased_scores_and_limit_the_choice() {
        // Groups of 3: {0,1,2} best two 0.9 + 0.0; {3,4,5} best two 0.5 + 0.5. The single best
        // expert (0) is in the weaker group, so with topk_group 1 only 3..6 may be chosen.
        let logits = [3.0, -9.0, -9.0, 0.2, 0.2, 0.1];
        let bias = [0.0; 6];
        let r = route(&logits, Some(&bias), &sigmoid(2, 2, 1));
        assert_eq!(r.iter().map(|c| c.0).collect::<Vec<_>>(), vec![3, 4]);
        let (a, b) = (sig(0.2), sig(0.2));
        let total = a + b + 1e-20;
        assert_eq!(r[0].1.to_bits(), (a / total * 2.5).to_bits());
        // Both groups kept: the best experts overall.
        let r = route(&logits, Some(&bias), &sigmoid(2, 2, 2));
        assert_eq!(r.iter().map(|c| c.0).collect::<Vec<_>>(), vec![0, 3]);
    }

    #[test]
    fn ties_go_to_the_lower_group_and_expert() {
        let logits = [0.0; 8];
        let r = route(&logits, None, &sigmoid(3, 4, 2));
        assert_eq!(r.iter().map(|c| c.0).collect::<Vec<_>>(), vec![0, 1, 2]);
        let r = route(&logits, Some(&[0.0, 0.0, 0.1, 0.1, 0.0, 0.0, 0.1, 0.1]), &sigmoid(3, 4, 2));
        assert_eq!(r.iter().map(|c| c.0).collect::<Vec<_>>(), vec![2, 3, 6]);
    }

    #[test]
    fn norm_eps_and_scale_apply_in_order() {
        let p = MoeParams { norm_eps: 1e-6, scale: 1.5, ..sigmoid(2, 1, 1) };
        let r = route(&[0.3, -0.2, 0.1], None, &p);
        let (a, b) = (sig(0.3), sig(0.1));
        assert_eq!(r[1].1.to_bits(), (b / (a + b + 1e-6) * 1.5).to_bits());
    }

    #[test]
    fn check_refuses_shapes_the_rule_cannot_route() {
        assert!(sigmoid(2, 2, 1).check(6, Some(6)).is_none());
        assert!(sigmoid(2, 4, 1).check(6, None).is_some(), "4 groups of 6");
        assert!(sigmoid(2, 3, 1).check(3, None).is_some(), "groups of one");
        assert!(sigmoid(4, 2, 1).check(6, None).is_some(), "4 from one group of 3");
        assert!(sigmoid(2, 2, 1).check(6, Some(5)).is_some(), "bias length");
        assert!(sigmoid(7, 1, 1).check(6, None).is_some(), "top_k");
    }
}
