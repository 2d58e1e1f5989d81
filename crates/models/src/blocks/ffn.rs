//! Channel mixers: the dense gated MLP and the mixture of experts (moe.rs).

use super::dense_moe::DenseMoe;
use super::moe::Moe;
use super::{project, project_add};
use crate::error::ModelError;
use crate::spec::ModelSpec;
use crate::tp::TpLink;
use crate::weights::{GateUp, Loader};
use tf_backend::Backend;

/// One layer's channel mixer.
pub(crate) enum Ffn<B: Backend> {
    /// `down(act(gate(x)) * up(x))`; with `clamp`, the activation clamped
    /// (`Backend::glu_clamped`, gate and up kept apart).
    Dense { gate_up: GateUp<B::Mat>, down: B::Mat, clamp: Option<f32> },
    /// `down(act(up(x)))`, without a gate (Nemotron-H's relu² MLP).
    Plain { up: B::Mat, down: B::Mat },
    /// Routed experts, and shared experts where the family has them.
    Moe(Box<Moe<B>>),
    /// A dense MLP (always `Dense`, run with its own post norm) beside experts (Gemma 4).
    DenseMoe(Box<Ffn<B>>, Box<DenseMoe<B>>),
}

/// What the channel mixer runs on: rows already normed, or the residual stream and the norm to
/// apply (which a backend may fuse into the first matmul).
pub(crate) enum FfnIn<'a, B: Backend> {
    Normed(B::Act),
    Residual(&'a B::Vec),
}

impl<B: Backend> Ffn<B> {
    /// Loads layer `i`'s MLP (`{p}mlp.*`): experts where the spec makes the layer sparse.
    pub(crate) fn load(s: &ModelSpec, ld: &Loader<'_, B>, p: &str, i: usize) -> Result<Ffn<B>, ModelError> {
        let (hidden, width) = (s.hidden_size, s.mlp_width(i));
        let sparse = s.moe.as_ref().is_some_and(|m| m.sparse_layers[i]);
        if let (Some(m), true, true) = (&s.moe, sparse, s.dense_beside_experts) {
            let dense = Ffn::load(&ModelSpec { moe: None, ..s.clone() }, ld, p, i)?;
            return Ok(Ffn::DenseMoe(Box::new(dense), Box::new(DenseMoe::load(s, m, ld, p)?)));
        }
        Ok(match (&s.moe, sparse) {
            (Some(m), true) => Ffn::Moe(Box::new(Moe::load(s, m, ld, p, i)?)),
            _ if !s.mlp_gated => {
                let (m, [_, u, d]) = (s.names.mlp, s.names.gate_up_down);
                Ffn::Plain {
                    up: ld.mat_split_rows(&format!("{p}{m}.{u}.weight"), width, hidden, 1)?,
                    down: ld.mat_split_cols(&format!("{p}{m}.{d}.weight"), hidden, width, 1)?,
                }
            }
            _ => {
                let (m, [g, u, d]) = (s.names.mlp, s.names.gate_up_down);
                let (g, u) = (format!("{p}{m}.{g}.weight"), format!("{p}{m}.{u}.weight"));
                let clamp = s.mlp_clamp(i);
                // Kept apart where clamped: no fused gate/up path applies the clamp.
                let gate_up = match clamp {
                    Some(_) => GateUp::Apart(
                        ld.mat_split_rows(&g, width, hidden, 1)?,
                        ld.mat_split_rows(&u, width, hidden, 1)?,
                    ),
                    None => ld.gate_up_split(&g, &u, width, hidden)?,
                };
                let down = ld.mat_split_cols(&format!("{p}{m}.{d}.weight"), hidden, width, 1)?;
                Ffn::Dense { gate_up, down, clamp }
            }
        })
    }

    /// The mixer on `input`; a dense MLP without `post` norm adds its output into `h` in the down
    /// projection's store and returns `None`, the others return their output. Sharded (`tp`),
    /// each output is summed over the ranks before any norm or add.
    pub(crate) fn run(
        &self,
        b: &B,
        s: &ModelSpec,
        h: &mut B::Act,
        input: FfnIn<'_, B>,
        post: Option<&B::Vec>,
        tp: Option<&TpLink>,
    ) -> Option<B::Act> {
        let (eps, one_plus) = (s.rms_norm_eps, s.norm_one_plus);
        let normed = |h: &B::Act, ws: &[&B::Mat]| match &input {
            FfnIn::Normed(x) => b.matmul_many(x, ws),
            FfnIn::Residual(nw) => b.norm_matmul_many(h, nw, eps, one_plus, ws),
        };
        match self {
            Ffn::Plain { up, down } => {
                let u = normed(h, &[up]).pop().unwrap_or_else(|| unreachable!("one output"));
                let a = b.activate(&u, s.act);
                match post {
                    Some(post) => Some(b.rms_norm(&project(b, &a, down, tp), post, eps, one_plus)),
                    None => {
                        project_add(b, &a, down, h, tp);
                        None
                    }
                }
            }
            Ffn::Dense { gate_up, down, clamp } => {
                let act = s.act;
                let a = match (gate_up, &input) {
                    (GateUp::Apart(gate, up), _) => {
                        let [g, u]: [B::Act; 2] =
                            normed(h, &[gate, up]).try_into().unwrap_or_else(|_| unreachable!("two outputs"));
                        match clamp {
                            Some(limit) => b.glu_clamped(&g, &u, act, *limit),
                            None => b.glu(&g, &u, act),
                        }
                    }
                    (GateUp::Packed(gu), FfnIn::Normed(x)) => b.matmul_glu(x, gu, act),
                    (GateUp::Packed(gu), FfnIn::Residual(nw)) => b.norm_matmul_glu(h, nw, eps, one_plus, gu, act),
                };
                match post {
                    Some(post) => Some(b.rms_norm(&project(b, &a, down, tp), post, eps, one_plus)),
                    None => {
                        project_add(b, &a, down, h, tp);
                        None
                    }
                }
            }
            Ffn::DenseMoe(dense, moe) => {
                // The dense part with its output normed apart (by `moe`), never added into h here.
                let y = match &**dense {
                    Ffn::Dense { gate_up, down, .. } => {
                        let a = match (gate_up, &input) {
                            (GateUp::Apart(gate, up), _) => {
                                let [g, u]: [B::Act; 2] =
                                    normed(h, &[gate, up]).try_into().unwrap_or_else(|_| unreachable!("two outputs"));
                                b.glu(&g, &u, s.act)
                            }
                            (GateUp::Packed(gu), FfnIn::Normed(x)) => b.matmul_glu(x, gu, s.act),
                            (GateUp::Packed(gu), FfnIn::Residual(nw)) => {
                                b.norm_matmul_glu(h, nw, eps, one_plus, gu, s.act)
                            }
                        };
                        project(b, &a, down, tp)
                    }
                    _ => unreachable!("loaded as a dense MLP"),
                };
                let y = moe.run(b, s, &y, h, tp);
                Some(match post {
                    Some(post) => b.rms_norm(&y, post, eps, one_plus),
                    None => y,
                })
            }
            Ffn::Moe(moe) => {
                let x = match input {
                    FfnIn::Normed(x) => x,
                    FfnIn::Residual(nw) => b.rms_norm(h, nw, eps, one_plus),
                };
                let mut y = moe.run(b, &x);
                if let Some(tp) = tp {
                    tp.all_reduce(b, &mut y);
                }
                Some(match post {
                    Some(post) => b.rms_norm(&y, post, eps, one_plus),
                    None => y,
                })
            }
        }
    }
}
