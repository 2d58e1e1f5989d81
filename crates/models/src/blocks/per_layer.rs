//! Gemma 4's per-layer inputs and layer scalars: each layer's slice of a per-layer token
//! embedding plus a normed projection of the scaled token embedding, made once per round
//! ([`PerLayer::inputs`]), then gated into the residual stream after the layer, whose output
//! is finally multiplied by its `layer_scalar` ([`PerLayer::after`]).

use crate::error::ModelError;
use crate::spec::ModelSpec;
use crate::weights::Loader;
use std::f32::consts::FRAC_1_SQRT_2;
use tf_backend::{Backend, Round};

/// The model-level tables of the per-layer inputs.
struct Inputs<B: Backend> {
    /// Each layer's columns of `embed_tokens_per_layer` `[vocab, width]`.
    tables: Vec<B::Mat>,
    /// Each layer's rows of `per_layer_model_projection` `[width, hidden]`.
    projs: Vec<B::Mat>,
    /// `per_layer_projection_norm` times `2^-0.5` (the sum's scale, moved into both terms).
    norm: B::Vec,
    /// The tables' scale: `sqrt(width) * 2^-0.5`.
    scale: f32,
    /// The norm's epsilon times `hidden`: the projection's `hidden^-0.5` factor moved inside it
    /// (`rms_norm(c y, eps) = rms_norm(y, eps / c^2)`).
    eps: f32,
}

/// One layer's gate of its per-layer input into the residual stream.
struct Gate<B: Backend> {
    /// `per_layer_input_gate` `[width, hidden]`.
    gate: B::Mat,
    /// `per_layer_projection` `[hidden, width]`.
    proj: B::Mat,
    /// `post_per_layer_input_norm` `[hidden]`.
    norm: B::Vec,
}

/// Per-layer inputs with their gates, and each layer's scalar, where the spec has them.
pub(crate) struct PerLayer<B: Backend> {
    inputs: Option<Inputs<B>>,
    /// One per layer with per-layer inputs, else none.
    gates: Vec<Gate<B>>,
    /// One per layer with `layer_scalar`, else none.
    scalars: Vec<f32>,
}

impl<B: Backend> PerLayer<B> {
    /// Loads the tables, gates and scalars the spec names; `None` when it names none.
    pub(crate) fn load(s: &ModelSpec, ld: &Loader<'_, B>) -> Result<Option<PerLayer<B>>, ModelError> {
        if s.per_layer_input.is_none() && !s.layer_scalar {
            return Ok(None);
        }
        let (hidden, layers) = (s.hidden_size, s.num_layers);
        let prefix = |i: usize| format!("{}{i}.", s.names.layers);
        let (inputs, gates) = match s.per_layer_input {
            None => (None, Vec::new()),
            Some(p) => {
                let (w, all) = (p.width, p.width * layers);
                let table = "model.embed_tokens_per_layer.weight";
                let proj = "model.per_layer_model_projection.weight";
                let tables =
                    (0..layers).map(|i| ld.mat_cols(table, p.vocab, all, i * w, w)).collect::<Result<_, _>>()?;
                let projs = (0..layers)
                    .map(|i| ld.mat_rows(proj, all, hidden, &(i * w..(i + 1) * w).collect::<Vec<_>>()))
                    .collect::<Result<_, _>>()?;
                let norm: Vec<f32> = ld
                    .host_values("model.per_layer_projection_norm.weight", &[w])?
                    .iter()
                    .map(|v| v * FRAC_1_SQRT_2)
                    .collect();
                let inputs = Inputs {
                    tables,
                    projs,
                    norm: ld.backend_vec(&norm),
                    scale: (w as f32).sqrt() * FRAC_1_SQRT_2,
                    eps: s.rms_norm_eps * hidden as f32,
                };
                let gates = (0..layers)
                    .map(|i| {
                        let p = prefix(i);
                        Ok(Gate {
                            gate: ld.mat(&format!("{p}per_layer_input_gate.weight"), w, hidden)?,
                            proj: ld.mat(&format!("{p}per_layer_projection.weight"), hidden, w)?,
                            norm: ld.vec(&format!("{p}post_per_layer_input_norm.weight"), hidden)?,
                        })
                    })
                    .collect::<Result<_, ModelError>>()?;
                (Some(inputs), gates)
            }
        };
        let scalars = match s.layer_scalar {
            false => Vec::new(),
            true => (0..layers)
                .map(|i| Ok(ld.host_values(&format!("{}layer_scalar", prefix(i)), &[1])?[0]))
                .collect::<Result<_, ModelError>>()?,
        };
        Ok(Some(PerLayer { inputs, gates, scalars }))
    }

    /// Each layer's input `(tokens, width)` for round `r` whose scaled token embedding is `h`:
    /// `(norm(proj(h) / sqrt(hidden)) + table[id] * sqrt(width)) / sqrt(2)`; none without tables.
    pub(crate) fn inputs(&self, b: &B, r: &Round<'_, B::Held>, h: &B::Act) -> Vec<B::Act> {
        let Some(p) = &self.inputs else { return Vec::new() };
        p.tables
            .iter()
            .zip(&p.projs)
            .map(|(table, proj)| {
                let t = match r.held {
                    Some(held) => b.embed_held(table, held, r.ids, p.scale),
                    None => b.embed(table, r.ids, p.scale),
                };
                let mut x = b.rms_norm(&b.matmul(h, proj), &p.norm, p.eps, false);
                b.add_assign(&mut x, &t);
                x
            })
            .collect()
    }

    /// After layer `i` of the residual stream `h`: `h += norm(proj(act(gate(h)) * input))`, then
    /// `h *= layer_scalar`.
    pub(crate) fn after(&self, b: &B, s: &ModelSpec, i: usize, h: &mut B::Act, inputs: &[B::Act]) {
        if let (Some(g), Some(input)) = (self.gates.get(i), inputs.get(i)) {
            let y = b.glu(&b.matmul(h, &g.gate), input, s.act);
            let y = b.rms_norm(&b.matmul(&y, &g.proj), &g.norm, s.rms_norm_eps, false);
            b.add_assign(h, &y);
        }
        if let Some(&c) = self.scalars.get(i) {
            b.scale(h, c);
        }
    }
}
