//! The mixture-of-experts channel mixer: the router's logits, the routed experts
//! (`Backend::moe`, every router variant of tf_backend router.rs), optional latent projections
//! around them (Nemotron-H) and shared experts added after (GLM / DeepSeek `shared_experts`,
//! Qwen3-Next's sigmoid-gated `shared_expert`, Step's `share_expert` beside the MoE module);
//! experts per expert (`experts.{e}.*`) or stacked (Step's `moe.gate_proj.weight`
//! `[experts, inter, hidden]`); gated activations clamped where the spec says (Step).

use crate::error::ModelError;
use crate::spec::{ModelSpec, MoeSpec};
use crate::weights::{GateUp, Loader};
use tf_backend::{Activation, Backend, ExpertBiases, Experts, MoeParams};
use tf_formats::TensorView;

/// One layer's experts.
pub(crate) struct Moe<B: Backend> {
    router: B::Mat,
    /// Added to the router's logits (gpt-oss's `router.bias`).
    router_bias: Option<B::Vec>,
    experts: Experts<B::Mat, B::Vec>,
    params: MoeParams,
    /// `fc1_latent_proj` and `fc2_latent_proj`.
    latent: Option<(B::Mat, B::Mat)>,
    shared: Option<Shared<B>>,
}

/// The shared experts' MLP and its optional sigmoid gate.
struct Shared<B: Backend> {
    proj: Proj<B::Mat>,
    down: B::Mat,
    gate: Option<B::Mat>,
    /// The clamp of its gated activation.
    clamp: Option<f32>,
}

/// An MLP's input projections: gate and up, or up alone.
enum Proj<M> {
    Gated(GateUp<M>),
    Ungated(M),
}

impl<B: Backend> Moe<B> {
    /// Loads layer `i`'s experts (prefix `p`) as `m` names them.
    pub(crate) fn load(
        s: &ModelSpec,
        m: &MoeSpec,
        ld: &Loader<'_, B>,
        p: &str,
        i: usize,
    ) -> Result<Moe<B>, ModelError> {
        let (hidden, ne, inter) = (s.hidden_size, m.num_experts, m.moe_intermediate_size);
        let module = format!("{p}{}.", m.module);
        let width = m.latent_size.unwrap_or(hidden);
        let [g, u, d] = m.expert_names;
        // The router first: a config whose expert count disagrees is refused naming it.
        // In f32 on every backend, as transformers routes.
        let router = ld.mat_f32(&format!("{module}{}.weight", m.router), ne, hidden)?;
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
        if let Some(bias) = m.choice_bias {
            experts.choice_bias = Some(ld.vec(&format!("{module}{bias}"), ne)?);
        }
        let router_bias = match m.gpt_oss {
            true => Some(ld.vec(&format!("{module}{}.bias", m.router), ne)?),
            false => None,
        };
        if m.gpt_oss {
            ld.backend_ref().check_expert_biases()?;
            load_gpt_oss(&mut experts, ld, &module, [ne, hidden, inter], held.clone(), part.clone())?;
        }
        if !m.stacked && !m.gpt_oss {
            for e in (0..ne).filter(|e| !held.contains(e)) {
                ld.leave_under(&format!("{module}experts.{e}."));
            }
        }
        for e in held.clone().filter(|_| !m.gpt_oss) {
            if m.stacked {
                let name = |w: &str| format!("{module}{w}.weight");
                if m.gated {
                    experts.gate.push(ld.stacked_mat(&name(g), [ne, inter, width], e, part.clone(), None)?);
                }
                experts.up.push(ld.stacked_mat(&name(u), [ne, inter, width], e, part.clone(), None)?);
                experts.down.push(ld.stacked_part(&name(d), [ne, width, inter], e, 0..width, part.clone(), None)?);
                continue;
            }
            let name = |w: &str| format!("{module}experts.{e}.{w}.weight");
            if m.gated {
                experts.gate.push(ld.mat_part_rows(&name(g), inter, width, 1, part.clone())?);
            }
            experts.up.push(ld.mat_part_rows(&name(u), inter, width, 1, part.clone())?);
            experts.down.push(ld.mat_part_cols(&name(d), width, inter, part.clone())?);
        }
        let latent = match m.latent_size {
            Some(l) => Some((
                ld.mat(&format!("{module}fc1_latent_proj.weight"), l, hidden)?,
                ld.mat(&format!("{module}fc2_latent_proj.weight"), hidden, l)?,
            )),
            None => None,
        };
        let shared = match &m.shared {
            Some(sh) => {
                let at = if sh.beside { p } else { &module };
                let name = |w: &str| format!("{at}{}.{w}.weight", sh.module);
                let [g, u, d] = sh.names.unwrap_or(m.expert_names);
                let si = sh.intermediate_size;
                let clamp = s.mlp_clamp(i).filter(|_| m.gated);
                let proj = if m.gated && clamp.is_some() {
                    // Kept apart: the clamped activation runs on the two outputs.
                    let (g, u) = (&name(g), &name(u));
                    Proj::Gated(GateUp::Apart(
                        ld.mat_split_rows(g, si, hidden, 1)?,
                        ld.mat_split_rows(u, si, hidden, 1)?,
                    ))
                } else if m.gated {
                    Proj::Gated(ld.gate_up_split(&name(g), &name(u), si, hidden)?)
                } else {
                    Proj::Ungated(ld.mat_split_rows(&name(u), si, hidden, 1)?)
                };
                let gate = match sh.gate {
                    Some(gw) => Some(ld.mat(&format!("{module}{gw}.weight"), 1, hidden)?),
                    None => None,
                };
                Some(Shared { proj, down: ld.mat_split_cols(&name(d), hidden, si, 1)?, gate, clamp })
            }
            None => None,
        };
        let params = MoeParams { clamp: s.expert_clamp(i).filter(|_| m.gated), ..m.params(s.act) };
        Ok(Moe { router, router_bias, experts, params, latent, shared })
    }

    /// The mixer's output for normed rows `x`: routed experts, then shared experts added.
    pub(crate) fn run(&self, b: &B, x: &B::Act) -> B::Act {
        let mut logits = b.matmul(x, &self.router);
        if let Some(bias) = &self.router_bias {
            b.add_bias(&mut logits, bias);
        }
        let mut y = match &self.latent {
            Some((fc1, fc2)) => b.matmul(&b.moe(&b.matmul(x, fc1), &logits, &self.experts, &self.params), fc2),
            None => b.moe(x, &logits, &self.experts, &self.params),
        };
        if let Some(sh) = &self.shared {
            let a = hidden(b, x, &sh.proj, self.params.act, sh.clamp);
            let o = b.matmul(&a, &sh.down);
            match &sh.gate {
                Some(g) => b.add_sigmoid_scaled(&mut y, &o, &b.matmul(x, g)),
                None => b.add_assign(&mut y, &o),
            }
        }
        y
    }
}

/// gpt-oss's experts `held` (this rank's `part` of each one's intermediate rows) into
/// `experts`: gate and up from the columns of `experts.gate_up_proj` `[n, hidden, 2 inter]`
/// (gate even, up odd), down from `experts.down_proj` `[n, inter, hidden]`, each transposed,
/// with their biases; or, in the release's MXFP4 layout, the same rows of the output-major
/// `_blocks` / `_scales`, decoded exactly into bf16 weights; or split as llama.cpp stores
/// them (a GGUF file): `experts.{e}.{gate,up,down}_proj.weight` output-major in any weight
/// type, MXFP4 held packed, and `experts.{gate,up,down}_proj.bias` `[n, rows]`.
fn load_gpt_oss<B: Backend>(
    experts: &mut Experts<B::Mat, B::Vec>,
    ld: &Loader<'_, B>,
    module: &str,
    [ne, hidden, inter]: [usize; 3],
    held: std::ops::Range<usize>,
    part: std::ops::Range<usize>,
) -> Result<(), ModelError> {
    if ld.has(&format!("{module}experts.0.gate_proj.weight")) {
        return load_gpt_oss_split(experts, ld, module, [ne, hidden, inter], held, part);
    }
    let (gu, dn) = (format!("{module}experts.gate_up_proj"), format!("{module}experts.down_proj"));
    let gu_bias = ld.host_values(&format!("{gu}_bias"), &[ne, 2 * inter])?;
    let dn_bias = ld.host_values(&format!("{dn}_bias"), &[ne, hidden])?;
    let gate_cols: Vec<usize> = part.clone().map(|i| 2 * i).collect();
    let up_cols: Vec<usize> = part.clone().map(|i| 2 * i + 1).collect();
    let all: Vec<usize> = (0..hidden).collect();
    let mut biases = ExpertBiases { gate: Vec::new(), up: Vec::new(), down: Vec::new() };
    // The release's MXFP4 experts (`_blocks` / `_scales`, output-major), else float ones.
    let packed = ld.has(&format!("{gu}_blocks"));
    let mx = |name: &str, rows: usize, cols: usize| -> Result<Option<[TensorView; 2]>, ModelError> {
        if !packed {
            return Ok(None);
        }
        if !cols.is_multiple_of(32) {
            return Err(ModelError::Config {
                file: Default::default(),
                msg: format!("{name}: {cols} inputs are not whole MXFP4 blocks of 32"),
            });
        }
        let g = cols / 32;
        Ok(Some([
            ld.u8_view(&format!("{name}_blocks"), &[ne, rows, g, 16])?,
            ld.u8_view(&format!("{name}_scales"), &[ne, rows, g])?,
        ]))
    };
    let (gu_mx, dn_mx) = (mx(&gu, 2 * inter, hidden)?, mx(&dn, hidden, inter)?);
    for e in held {
        let pick = |cols: &[usize]| cols.iter().map(|&c| gu_bias[e * 2 * inter + c]).collect::<Vec<f32>>();
        match (&gu_mx, &dn_mx) {
            (Some(g), Some(d)) => {
                experts.gate.push(mxfp4_mat(ld, g, [2 * inter, hidden], e, &gate_cols, 0..hidden)?);
                experts.up.push(mxfp4_mat(ld, g, [2 * inter, hidden], e, &up_cols, 0..hidden)?);
                experts.down.push(mxfp4_mat(ld, d, [hidden, inter], e, &all, part.clone())?);
            }
            _ => {
                experts.gate.push(ld.stacked_t(&gu, [ne, hidden, 2 * inter], e, 0..hidden, &gate_cols)?);
                experts.up.push(ld.stacked_t(&gu, [ne, hidden, 2 * inter], e, 0..hidden, &up_cols)?);
                experts.down.push(ld.stacked_t(&dn, [ne, inter, hidden], e, part.clone(), &all)?);
            }
        }
        biases.gate.push(ld.backend_vec(&pick(&gate_cols)));
        biases.up.push(ld.backend_vec(&pick(&up_cols)));
        biases.down.push(ld.backend_vec(&dn_bias[e * hidden..(e + 1) * hidden]));
    }
    experts.biases = Some(biases);
    Ok(())
}

/// [`load_gpt_oss`] of experts split as llama.cpp stores them: each projection's weights per
/// expert (`[rows, cols]`, output-major, as the file's type holds them) and its biases
/// `[experts, rows]`.
fn load_gpt_oss_split<B: Backend>(
    experts: &mut Experts<B::Mat, B::Vec>,
    ld: &Loader<'_, B>,
    module: &str,
    [ne, hidden, inter]: [usize; 3],
    held: std::ops::Range<usize>,
    part: std::ops::Range<usize>,
) -> Result<(), ModelError> {
    let bias = |p: &str, rows: usize| ld.host_values(&format!("{module}experts.{p}.bias"), &[ne, rows]);
    let (gate_b, up_b, down_b) = (bias("gate_proj", inter)?, bias("up_proj", inter)?, bias("down_proj", hidden)?);
    let mut biases = ExpertBiases { gate: Vec::new(), up: Vec::new(), down: Vec::new() };
    for e in held {
        let name = |p: &str| format!("{module}experts.{e}.{p}.weight");
        experts.gate.push(ld.mat_part_rows(&name("gate_proj"), inter, hidden, 1, part.clone())?);
        experts.up.push(ld.mat_part_rows(&name("up_proj"), inter, hidden, 1, part.clone())?);
        experts.down.push(ld.mat_part_cols(&name("down_proj"), hidden, inter, part.clone())?);
        let rows = |b: &[f32], at: usize| ld.backend_vec(&b[at + part.start..at + part.end]);
        biases.gate.push(rows(&gate_b, e * inter));
        biases.up.push(rows(&up_b, e * inter));
        biases.down.push(ld.backend_vec(&down_b[e * hidden..(e + 1) * hidden]));
    }
    experts.biases = Some(biases);
    Ok(())
}

/// Rows `rows` (columns `cols` of each) of expert `e`'s MXFP4 matrix `[rows, cols]` (`blocks`
/// and `scales`, [`crate::mxfp4`]): kept packed where `cols` are whole blocks (repacked into
/// ggml's layout), else decoded exactly into a bf16 weight.
fn mxfp4_mat<B: Backend>(
    ld: &Loader<'_, B>,
    [blocks, scales]: &[TensorView; 2],
    [n_rows, n_cols]: [usize; 2],
    e: usize,
    rows: &[usize],
    cols: std::ops::Range<usize>,
) -> Result<B::Mat, ModelError> {
    let g = n_cols / 32;
    let packed = cols.start.is_multiple_of(32) && cols.len().is_multiple_of(32);
    let (bytes, exps) = (blocks.data.as_bytes(), scales.data.as_bytes());
    let mut row = vec![0f32; n_cols];
    let mut out = Vec::with_capacity(rows.len() * cols.len() * 2);
    for &r in rows {
        let at = e * n_rows + r;
        let (b, s) = (bytes.get(at * g * 16..(at + 1) * g * 16), exps.get(at * g..(at + 1) * g));
        let bad = |msg: String| ModelError::Dtype { file: blocks.file.clone(), tensor: blocks.name.clone(), msg };
        let (Some(b), Some(s)) = (b, s) else { return Err(bad(format!("row {r} of expert {e} is outside the data"))) };
        let at_row = |m: String| bad(format!("expert {e}, row {r}: {m}"));
        if packed {
            // Kept packed: every scale checked, the codes repacked (no decode).
            s.iter().try_for_each(|&x| crate::mxfp4::check_scale(x)).map_err(at_row)?;
            for k in cols.start / 32..cols.end / 32 {
                out.extend(crate::mxfp4::repack(&b[k * 16..(k + 1) * 16], s[k]));
            }
        } else {
            crate::mxfp4::decode_row(b, s, &mut row).map_err(at_row)?;
            out.extend(row[cols.clone()].iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()));
        }
    }
    let view = TensorView {
        name: blocks.name.clone(),
        dtype: if packed { tf_core::DType::Mxfp4 } else { tf_core::DType::BF16 },
        shape: vec![rows.len(), cols.len()],
        data: tf_formats::TensorBytes::from_vec(&out),
        file: blocks.file.clone(),
    };
    Ok(ld.backend_ref().mat(&view)?)
}

/// An MLP's activations before its down projection, the gated one clamped at `clamp` (its
/// projections are then kept apart).
fn hidden<B: Backend>(b: &B, x: &B::Act, proj: &Proj<B::Mat>, act: Activation, clamp: Option<f32>) -> B::Act {
    match proj {
        Proj::Gated(GateUp::Apart(g, u)) => match clamp {
            Some(limit) => b.glu_clamped(&b.matmul(x, g), &b.matmul(x, u), act, limit),
            None => b.glu(&b.matmul(x, g), &b.matmul(x, u), act),
        },
        Proj::Gated(GateUp::Packed(gu)) => b.matmul_glu(x, gu, act),
        Proj::Ungated(u) => b.activate(&b.matmul(x, u), act),
    }
}
