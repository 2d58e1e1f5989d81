//! The scalar reference backend: the specification of every op, written for clarity, single
//! threaded, with plain left-to-right sums. Fast backends are tested against it.

use crate::attn::{AttnMeta, AttnParams, KvShape};
use crate::host::{HostKv, HostMat, HostTensor};
use crate::rope::Rope;
use crate::state::{HostState, StateShape};
use crate::{Activation, Backend, BackendError, Experts, MoeParams};
use tf_formats::TensorView;

/// Scalar reference implementation on the host.
#[derive(Clone, Copy, Debug, Default)]
pub struct RefBackend;

/// `act(g)`, in f32.
pub fn activate(g: f32, act: Activation) -> f32 {
    match act {
        Activation::Silu => g / (1.0 + (-g).exp()),
        Activation::GeluTanh => {
            let c = (2.0f32 / std::f32::consts::PI).sqrt();
            0.5 * g * (1.0 + (c * (g + 0.044715 * g * g * g)).tanh())
        }
        Activation::Relu2 => {
            let r = g.max(0.0);
            r * r
        }
        Activation::SwigluOai => {
            let g = g.min(crate::SWIGLU_OAI_LIMIT);
            g * (1.0 / (1.0 + (-(g * crate::SWIGLU_OAI_ALPHA)).exp()))
        }
    }
}

/// One value of a gated MLP: `act(g) * u`, or for [`Activation::SwigluOai`] `act(g) * (clamp(u) + 1)`.
pub fn glu_one(g: f32, u: f32, act: Activation) -> f32 {
    match act {
        Activation::SwigluOai => activate(g, act) * (u.clamp(-crate::SWIGLU_OAI_LIMIT, crate::SWIGLU_OAI_LIMIT) + 1.0),
        _ => activate(g, act) * u,
    }
}

/// `min(act(g), limit) * clamp(u, -limit, limit)`, in f32 (a clamped SwiGLU, Step's
/// `swiglu_limits`).
pub fn glu_clamped(g: f32, u: f32, act: Activation, limit: f32) -> f32 {
    activate(g, act).min(limit) * u.max(-limit).min(limit)
}

pub use crate::router::route;

/// Expert `e`'s activations before its down projection: `act(gate(x)) * up(x)` (clamped where
/// `p.clamp` says), or `act(up(x))` where the experts have no gate.
pub fn expert_hidden<B: Backend>(
    b: &B,
    x: &B::Act,
    experts: &Experts<B::Mat, B::Vec>,
    e: usize,
    p: &MoeParams,
) -> B::Act {
    let mut u = b.matmul(x, &experts.up[e]);
    let gate = experts.gate.get(e).map(|g| {
        let mut g = b.matmul(x, g);
        if let Some(bias) = experts.biases.as_ref().and_then(|bs| bs.gate.get(e)) {
            b.add_bias(&mut g, bias);
        }
        g
    });
    if let Some(bias) = &experts.biases {
        b.add_bias(&mut u, &bias.up[e]);
    }
    match (gate, p.clamp) {
        (Some(g), Some(limit)) => b.glu_clamped(&g, &u, p.act, limit),
        (Some(g), None) => b.glu(&g, &u, p.act),
        (None, _) => b.activate(&u, p.act),
    }
}

/// Expert `e`'s output for rows `x`: [`expert_hidden`] through its down projection, plus its
/// down bias where it has one.
pub fn expert_out<B: Backend>(b: &B, x: &B::Act, experts: &Experts<B::Mat, B::Vec>, e: usize, p: &MoeParams) -> B::Act {
    let mut y = b.matmul(&expert_hidden(b, x, experts, e, p), &experts.down[e]);
    if let Some(bias) = &experts.biases {
        b.add_bias(&mut y, &bias.down[e]);
    }
    y
}

/// Writes the round's K/V rows into their slots (K alone in a latent pool).
pub fn write_kv(k: &HostTensor, v: &HostTensor, kv: &mut HostKv, meta: &AttnMeta) {
    let w = kv.slot_width();
    for (row, &slot) in meta.slot_mapping.iter().enumerate() {
        kv.k[slot * w..(slot + 1) * w].copy_from_slice(k.row(row));
        if !kv.shape.latent {
            kv.v[slot * w..(slot + 1) * w].copy_from_slice(v.row(row));
        }
    }
}

/// First key position visible from a query at `pos`.
pub fn window_start(pos: usize, window: Option<usize>) -> usize {
    window.map_or(0, |w| (pos + 1).saturating_sub(w))
}

impl RefBackend {
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }
}

impl Backend for RefBackend {
    type Act = HostTensor;
    type Mat = HostMat;
    type Vec = Vec<f32>;
    type Kv = HostKv;
    type State = HostState;
    type Held = Vec<u32>;

    fn argmax_rows_held(&self, x: &HostTensor) -> Vec<u32> {
        self.argmax_rows(x)
    }

    fn held_ids(&self, h: &Vec<u32>) -> Vec<u32> {
        h.clone()
    }

    fn hold_ids(&self, ids: &[u32]) -> Vec<u32> {
        ids.to_vec()
    }

    fn name(&self) -> String {
        "ref".into()
    }

    fn mat(&self, t: &TensorView) -> Result<HostMat, BackendError> {
        HostMat::from_view(t)
    }

    fn mat_fp8(&self, t: &TensorView, scales: &crate::Fp8Scales) -> Result<HostMat, BackendError> {
        HostMat::from_fp8(t, scales)
    }

    fn vec(&self, v: &[f32]) -> Vec<f32> {
        v.to_vec()
    }

    fn vec_values(&self, v: &Vec<f32>) -> Vec<f32> {
        v.clone()
    }

    fn kv(&self, shape: KvShape) -> Result<HostKv, BackendError> {
        HostKv::new(shape)
    }

    fn state(&self, shape: StateShape) -> Result<HostState, BackendError> {
        HostState::new(shape)
    }

    fn read_state(&self, st: &HostState, slots: &[u32]) -> Vec<u8> {
        st.read_slots(slots)
    }

    fn write_state(&self, st: &mut HostState, slots: &[u32], bytes: &[u8]) {
        st.write_slots(slots, bytes)
    }

    fn copy_state(&self, st: &mut HostState, from: u32, to: u32) {
        st.copy_slot(from, to)
    }

    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> HostTensor {
        HostTensor { data: data.to_vec(), rows, cols }
    }

    fn download(&self, x: &HostTensor) -> Vec<f32> {
        x.data.clone()
    }

    fn shape(&self, x: &HostTensor) -> (usize, usize) {
        (x.rows, x.cols)
    }

    fn embed(&self, table: &HostMat, ids: &[u32], scale: f32) -> HostTensor {
        let mut out = HostTensor::zeros(ids.len(), table.cols);
        for (r, &id) in ids.iter().enumerate() {
            let row = &mut out.data[r * table.cols..(r + 1) * table.cols];
            table.row_f32(id as usize, row);
            row.iter_mut().for_each(|x| *x *= scale);
        }
        out
    }

    fn matmul(&self, x: &HostTensor, w: &HostMat) -> HostTensor {
        let mut out = HostTensor::zeros(x.rows, w.rows);
        let mut wrow = vec![0.0; w.cols];
        for o in 0..w.rows {
            w.row_f32(o, &mut wrow);
            for r in 0..x.rows {
                out.data[r * w.rows + o] = Self::dot(x.row(r), &wrow);
            }
        }
        out
    }

    fn rms_norm(&self, x: &HostTensor, w: &Vec<f32>, eps: f32, one_plus: bool) -> HostTensor {
        let mut out = x.clone();
        for g in out.data.chunks_exact_mut(w.len()) {
            let ms = g.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            for (v, &s) in g.iter_mut().zip(w) {
                *v = *v * inv * if one_plus { 1.0 + s } else { s };
            }
        }
        out
    }

    fn add_assign(&self, x: &mut HostTensor, y: &HostTensor) {
        x.data.iter_mut().zip(&y.data).for_each(|(a, b)| *a += b);
    }

    fn rope(&self, x: &mut HostTensor, positions: &[u32], head_dim: usize, rope: &Rope) {
        let mut buf = Vec::new();
        let cols = x.cols;
        for (r, &pos) in positions.iter().enumerate() {
            for head in x.data[r * cols..(r + 1) * cols].chunks_exact_mut(head_dim) {
                rope.apply(head, pos, &mut buf);
            }
        }
    }

    fn glu(&self, gate: &HostTensor, up: &HostTensor, act: Activation) -> HostTensor {
        let data = gate.data.iter().zip(&up.data).map(|(&g, &u)| glu_one(g, u, act)).collect();
        HostTensor { data, rows: gate.rows, cols: gate.cols }
    }

    fn attention(
        &self,
        q: &HostTensor,
        k: &HostTensor,
        v: &HostTensor,
        kv: &mut HostKv,
        meta: &AttnMeta,
        p: &AttnParams,
    ) -> HostTensor {
        write_kv(k, v, kv, meta);
        self.attention_cached(q, kv, meta, p)
    }

    fn check_attention_cached(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn attention_cached(&self, q: &HostTensor, kv: &HostKv, meta: &AttnMeta, p: &AttnParams) -> HostTensor {
        attend(q, kv, meta, p, None)
    }

    fn check_attention_sinks(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn check_expert_biases(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn attention_sinks(
        &self,
        q: &HostTensor,
        k: &HostTensor,
        v: &HostTensor,
        kv: &mut HostKv,
        meta: &AttnMeta,
        p: &AttnParams,
        sinks: &[f32],
    ) -> HostTensor {
        write_kv(k, v, kv, meta);
        attend(q, kv, meta, p, Some(sinks))
    }

    fn select_rows(&self, x: &HostTensor, rows: &[usize]) -> HostTensor {
        let data = rows.iter().flat_map(|&r| x.row(r).iter().copied()).collect();
        HostTensor { data, rows: rows.len(), cols: x.cols }
    }

    fn softcap(&self, x: &mut HostTensor, cap: f32) {
        x.data.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
    }

    fn moe(
        &self,
        x: &HostTensor,
        router_logits: &HostTensor,
        experts: &Experts<HostMat, Vec<f32>>,
        p: &MoeParams,
    ) -> HostTensor {
        let hidden = x.cols;
        let mut out = HostTensor::zeros(x.rows, hidden);
        for r in 0..x.rows {
            let xr = self.upload(x.row(r), 1, hidden);
            let routes = route(router_logits.row(r), experts.choice_bias.as_deref(), p);
            for (e, weight) in routes.into_iter().filter(|(e, _)| experts.held().contains(e)) {
                let e = e - experts.first;
                let y = expert_out(self, &xr, experts, e, p);
                for (o, v) in out.data[r * hidden..(r + 1) * hidden].iter_mut().zip(&y.data) {
                    *o += weight * v;
                }
            }
        }
        out
    }

    fn kv_dtype(&self) -> tf_core::DType {
        tf_core::DType::F32
    }

    fn read_kv_blocks(&self, kv: &HostKv, blocks: &[u32]) -> Vec<u8> {
        kv.read_blocks(blocks)
    }

    fn write_kv_blocks(&self, kv: &mut HostKv, blocks: &[u32], bytes: &[u8]) {
        kv.write_blocks(blocks, bytes)
    }
}

/// The reference attention over the K/V in `kv` (each query head's softmax also counting
/// `sinks[h]`, where given): scores, their maximum (the sink's among them), `exp`, their sum,
/// then the weighted values, each in key order.
pub(crate) fn attend(
    q: &HostTensor,
    kv: &HostKv,
    meta: &AttnMeta,
    p: &AttnParams,
    sinks: Option<&[f32]>,
) -> HostTensor {
    let (d, w, group) = (p.head_dim, kv.slot_width(), p.num_heads / p.num_kv_heads);
    let mut out = HostTensor::zeros(q.rows, p.num_heads * d);
    for s in &meta.seqs {
        for i in 0..s.q_len {
            let (row, pos) = (s.q_start + i, s.start_pos + i);
            let slots: Vec<usize> = (window_start(pos, p.window)..=pos)
                .map(|j| s.block_table[j / meta.block_size] as usize * meta.block_size + j % meta.block_size)
                .collect();
            for h in 0..p.num_heads {
                let qh = &q.row(row)[h * d..(h + 1) * d];
                let kvh = (h / group) * d;
                let scores: Vec<f32> = slots
                    .iter()
                    .map(|&sl| {
                        let s = RefBackend::dot(qh, &kv.k[sl * w + kvh..sl * w + kvh + d]) * p.scale;
                        p.softcap.map_or(s, |c| c * (s / c).tanh())
                    })
                    .collect();
                let sink = sinks.map(|s| s[h]);
                let max = scores.iter().copied().chain(sink).fold(f32::NEG_INFINITY, f32::max);
                let exps: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f32 = exps.iter().sum::<f32>() + sink.map_or(0.0, |s| (s - max).exp());
                let o = &mut out.data[row * p.num_heads * d + h * d..][..d];
                for (&e, &sl) in exps.iter().zip(&slots) {
                    for (oi, vi) in o.iter_mut().zip(&kv.values()[sl * w + kvh..sl * w + kvh + d]) {
                        *oi += e / sum * vi;
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clamped_swiglu_clamps_the_gate_above_and_the_up_value_both_ways() {
        let act = Activation::SwigluOai;
        let silu_like = |g: f32| g * (1.0 / (1.0 + (-(g * 1.702)).exp()));
        assert_eq!(glu_one(1.0, 2.0, act), silu_like(1.0) * 3.0);
        assert_eq!(glu_one(30.0, 2.0, act), silu_like(7.0) * 3.0, "gate clamped at 7");
        assert_eq!(glu_one(-30.0, 2.0, act), silu_like(-30.0) * 3.0, "no lower clamp on the gate");
        assert_eq!(glu_one(1.0, 9.0, act), silu_like(1.0) * 8.0, "up clamped at 7");
        assert_eq!(glu_one(1.0, -9.0, act), silu_like(1.0) * -6.0, "and at -7");
        assert_eq!(glu_one(1.0, 2.0, Activation::Silu), activate(1.0, Activation::Silu) * 2.0);
    }

    #[test]
    fn clamped_glu_bounds_the_gate_above_and_the_up_both_ways() {
        let silu = |g: f32| activate(g, Activation::Silu);
        // Inside the limit: the plain SwiGLU.
        assert_eq!(glu_clamped(0.5, -0.25, Activation::Silu, 7.0), silu(0.5) * -0.25);
        // The gate's activation is capped, the up clamped to [-limit, limit].
        assert_eq!(glu_clamped(20.0, 30.0, Activation::Silu, 7.0), 7.0 * 7.0);
        assert_eq!(glu_clamped(20.0, -30.0, Activation::Silu, 7.0), 7.0 * -7.0);
        // A negative activation is not raised to -limit (only `max` is applied to the gate).
        assert_eq!(glu_clamped(-20.0, 0.25, Activation::Silu, 0.5), silu(-20.0) * 0.25);
    }
}
