//! The mixture-of-experts channel mixer: the router's logits, the routed experts
//! (`Backend::moe`, every router variant of tf_backend router.rs), optional latent projections
//! around them (Nemotron-H) and shared experts added after (GLM / DeepSeek `shared_experts`,
//! Qwen3-Next's sigmoid-gated `shared_expert`).

use crate::error::ModelError;
use crate::spec::{ModelSpec, MoeSpec};
use crate::weights::{GateUp, Loader};
use tf_backend::{Activation, Backend, Experts, MoeParams};

/// One layer's experts.
pub(crate) struct Moe<B: Backend> {
    router: B::Mat,
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
}

/// An MLP's input projections: gate and up, or up alone.
enum Proj<M> {
    Gated(GateUp<M>),
    Ungated(M),
}

impl<B: Backend> Moe<B> {
    /// Loads layer prefix `p`'s experts as `m` names them.
    pub(crate) fn load(s: &ModelSpec, m: &MoeSpec, ld: &Loader<'_, B>, p: &str) -> Result<Moe<B>, ModelError> {
        let (hidden, ne, inter) = (s.hidden_size, m.num_experts, m.moe_intermediate_size);
        let module = format!("{p}{}.", m.module);
        let width = m.latent_size.unwrap_or(hidden);
        let [g, u, d] = m.expert_names;
        // The router first: a config whose expert count disagrees is refused naming it.
        // In f32 on every backend, as transformers routes.
        let router = ld.mat_f32(&format!("{module}{}.weight", m.router), ne, hidden)?;
        let mut experts = Experts { gate: Vec::new(), up: Vec::new(), down: Vec::new(), choice_bias: None };
        if let Some(bias) = m.choice_bias {
            experts.choice_bias = Some(ld.vec(&format!("{module}{bias}"), ne)?);
        }
        for e in 0..ne {
            let name = |w: &str| format!("{module}experts.{e}.{w}.weight");
            if m.gated {
                experts.gate.push(ld.mat(&name(g), inter, width)?);
            }
            experts.up.push(ld.mat(&name(u), inter, width)?);
            experts.down.push(ld.mat(&name(d), width, inter)?);
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
                let name = |w: &str| format!("{module}{}.{w}.weight", sh.module);
                let [g, u, d] = sh.names.unwrap_or(m.expert_names);
                let si = sh.intermediate_size;
                let proj = if m.gated {
                    Proj::Gated(ld.gate_up(&name(g), &name(u), si, hidden)?)
                } else {
                    Proj::Ungated(ld.mat(&name(u), si, hidden)?)
                };
                let gate = match sh.gate {
                    Some(gw) => Some(ld.mat(&format!("{module}{gw}.weight"), 1, hidden)?),
                    None => None,
                };
                Some(Shared { proj, down: ld.mat(&name(d), hidden, si)?, gate })
            }
            None => None,
        };
        Ok(Moe { router, experts, params: m.params(s.act), latent, shared })
    }

    /// The mixer's output for normed rows `x`: routed experts, then shared experts added.
    pub(crate) fn run(&self, b: &B, x: &B::Act) -> B::Act {
        let logits = b.matmul(x, &self.router);
        let mut y = match &self.latent {
            Some((fc1, fc2)) => b.matmul(&b.moe(&b.matmul(x, fc1), &logits, &self.experts, &self.params), fc2),
            None => b.moe(x, &logits, &self.experts, &self.params),
        };
        if let Some(sh) = &self.shared {
            let a = hidden(b, x, &sh.proj, self.params.act);
            let o = b.matmul(&a, &sh.down);
            match &sh.gate {
                Some(g) => b.add_sigmoid_scaled(&mut y, &o, &b.matmul(x, g)),
                None => b.add_assign(&mut y, &o),
            }
        }
        y
    }
}

/// An MLP's activations before its down projection.
fn hidden<B: Backend>(b: &B, x: &B::Act, proj: &Proj<B::Mat>, act: Activation) -> B::Act {
    match proj {
        Proj::Gated(GateUp::Apart(g, u)) => b.glu(&b.matmul(x, g), &b.matmul(x, u), act),
        Proj::Gated(GateUp::Packed(gu)) => b.matmul_glu(x, gu, act),
        Proj::Ungated(u) => b.activate(&b.matmul(x, u), act),
    }
}
