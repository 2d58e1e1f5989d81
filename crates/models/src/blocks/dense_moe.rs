//! Gemma 4's MoE block: the dense MLP on the pre-FFN-normed rows beside routed experts on the
//! residual stream, each output normed, summed before the layer's post-FFN norm. The router
//! reads the residual through an unscaled norm, times `router.scale / sqrt(hidden)` (folded into
//! its weight at load); each expert's output is times `router.per_expert_scale` (folded into
//! its down projection, kept in f32). Experts are stored fused (`experts.gate_up_proj`
//! `[experts, 2 inter, hidden]`, `experts.down_proj` `[experts, hidden, inter]`).

use crate::error::ModelError;
use crate::spec::{ModelSpec, MoeSpec};
use crate::tp::TpLink;
use crate::weights::Loader;
use tf_backend::{Backend, Experts, MoeParams};

/// One layer's experts with the norms around them.
pub(crate) struct DenseMoe<B: Backend> {
    /// `router.proj` times `router.scale / sqrt(hidden)` per input column, f32.
    router: B::Mat,
    /// Ones of the hidden width: the router's unscaled input norm.
    ones: B::Vec,
    experts: Experts<B::Mat, B::Vec>,
    params: MoeParams,
    /// `pre_feedforward_layernorm_2`: the experts' input norm.
    pre: B::Vec,
    /// `post_feedforward_layernorm_1`: the dense MLP's output norm.
    post_dense: B::Vec,
    /// `post_feedforward_layernorm_2`: the experts' output norm.
    post_experts: B::Vec,
}

impl<B: Backend> DenseMoe<B> {
    /// Loads layer prefix `p`'s router, experts and norms.
    pub(crate) fn load(s: &ModelSpec, m: &MoeSpec, ld: &Loader<'_, B>, p: &str) -> Result<DenseMoe<B>, ModelError> {
        let (hidden, ne, inter) = (s.hidden_size, m.num_experts, m.moe_intermediate_size);
        let proj_name = format!("{p}router.proj.weight");
        let proj = ld.host_values(&proj_name, &[ne, hidden])?;
        let scale = ld.host_values(&format!("{p}router.scale"), &[hidden])?;
        let per_expert = ld.host_values(&format!("{p}router.per_expert_scale"), &[ne])?;
        let c = (hidden as f32).sqrt().recip();
        let folded: Vec<f32> = proj.iter().enumerate().map(|(i, w)| w * (scale[i % hidden] * c)).collect();
        let router = ld.mat_f32_from(&proj_name, ne, hidden, &folded)?;
        let (gu, down) = (format!("{p}experts.gate_up_proj"), format!("{p}experts.down_proj"));
        // Sharded, each rank holds every expert's part of its intermediate rows, or (expert
        // parallelism) its part of the experts whole.
        let (held, part) = ld.experts_part(ne, inter);
        let mut experts = Experts {
            gate: Vec::new(),
            up: Vec::new(),
            down: Vec::new(),
            choice_bias: None,
            biases: None,
            first: held.start,
        };
        let up_rows = inter + part.start..inter + part.end;
        for (e, &pe) in per_expert.iter().enumerate().filter(|(e, _)| held.contains(e)) {
            experts.gate.push(ld.stacked_mat(&gu, [ne, 2 * inter, hidden], e, part.clone(), None)?);
            experts.up.push(ld.stacked_mat(&gu, [ne, 2 * inter, hidden], e, up_rows.clone(), None)?);
            experts.down.push(ld.stacked_part(&down, [ne, hidden, inter], e, 0..hidden, part.clone(), Some(pe))?);
        }
        let norm = |name: &str| ld.vec(&format!("{p}{name}.weight"), hidden);
        Ok(DenseMoe {
            router,
            ones: ld.backend_vec(&vec![1.0; hidden]),
            experts,
            params: m.params(s.act),
            pre: norm("pre_feedforward_layernorm_2")?,
            post_dense: norm("post_feedforward_layernorm_1")?,
            post_experts: norm("post_feedforward_layernorm_2")?,
        })
    }

    /// `post_dense(dense) + post_experts(experts(pre(h)))` for the dense MLP's output `dense`
    /// and the residual stream `h` (sharded, the experts' output summed over the ranks before
    /// its norm, as `dense` was).
    pub(crate) fn run(&self, b: &B, s: &ModelSpec, dense: &B::Act, h: &B::Act, tp: Option<&TpLink>) -> B::Act {
        let eps = s.rms_norm_eps;
        let logits = b.matmul(&b.rms_norm(h, &self.ones, eps, false), &self.router);
        let mut y = b.moe(&b.rms_norm(h, &self.pre, eps, false), &logits, &self.experts, &self.params);
        if let Some(tp) = tp {
            tp.all_reduce(b, &mut y);
        }
        let mut out = b.rms_norm(dense, &self.post_dense, eps, false);
        b.add_assign(&mut out, &b.rms_norm(&y, &self.post_experts, eps, false));
        out
    }
}
