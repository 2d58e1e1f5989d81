//! The fixed set of operations model families are written against, and the scalar reference
//! implementation that defines them (candle-style: slow spec beside fast impls, tested alike).

pub mod attn;
pub mod candidates;
pub mod collective;
pub mod conv;
pub mod dsa;
pub mod fast_exp;
pub mod fp8;
pub mod gate_up;
pub mod gdn;
pub mod heads;
pub mod host;
pub mod layer_norm;
pub mod logprobs;
pub mod mask;
pub mod on_host;
pub mod race;
pub mod reference;
pub mod rng;
pub mod rng_lanes;
pub mod rope;
pub mod router;
pub mod short_conv;
pub mod sparse;
pub mod ssd;
pub mod state;
pub mod thread_group;
pub mod top_p;
pub mod top_p_row;

pub use attn::{AttnMeta, AttnParams, KvShape, SeqAttn};
pub use candidates::{Candidates, LogitEdit, RaceKey, RowQuery};
pub use collective::{Collective, Exchange, GroupError};
pub use conv::Conv1d;
pub use dsa::{DsaParams, SparseQueries};
pub use fp8::Fp8Scales;
pub use gdn::Gdn;
pub use heads::HeadWeights;
pub use host::{HostKv, HostMat, HostTensor};
pub use logprobs::{LogprobQuery, RowLogprobs};
pub use mask::TokenMask;
pub use reference::RefBackend;
pub use rope::Rope;
pub use router::{MoeParams, MoeScoring};
pub use short_conv::ShortConv;
pub use sparse::{BlockPicks, IndexParams};
pub use ssd::Ssd;
pub use state::{HostState, StateShape};
pub use thread_group::ThreadGroup;

use tf_formats::TensorView;
use thiserror::Error;

/// A backend could not take a weight or allocate.
#[derive(Debug, Error)]
pub enum BackendError {
    /// The weight's dtype or rank is not supported by this backend.
    #[error("{0}")]
    Unsupported(String),
    /// The device failed.
    #[error("device error: {0}")]
    Device(String),
}

/// Activation of an MLP: gated (`act(gate) * up`), or on its own where experts have no gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SiLU (Llama, Qwen).
    Silu,
    /// GELU, tanh approximation (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
    /// `relu(x)^2` (Nemotron-H's `relu2`).
    Relu2,
    /// GPT-OSS's clamped SwiGLU, as MiniMax M3 has it: the gate clamped above at
    /// [`SWIGLU_OAI_LIMIT`], `g * sigmoid(SWIGLU_OAI_ALPHA * g)`, times the up value clamped into
    /// `±SWIGLU_OAI_LIMIT` plus one ([`reference::glu_one`]).
    SwigluOai,
}

/// The sigmoid gain of [`Activation::SwigluOai`] (`swiglu_alpha`).
pub const SWIGLU_OAI_ALPHA: f32 = 1.702;
/// The clamp of [`Activation::SwigluOai`]'s gate and up values (`swiglu_limit`).
pub const SWIGLU_OAI_LIMIT: f32 = 7.0;

/// Per-head norms of queries and keys (Qwen3, Gemma 3).
pub struct QkNorm<'a, V> {
    /// Query norm scales, `head_dim` long.
    pub q: &'a V,
    /// Key norm scales, `head_dim` long.
    pub k: &'a V,
    /// Epsilon of the norm.
    pub eps: f32,
    /// Scale by `1 + w` instead of `w`.
    pub one_plus: bool,
}

impl<V> Clone for QkNorm<'_, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V> Copy for QkNorm<'_, V> {}

/// One layer's routed experts: gate, up and down projections per expert, and the router's
/// per-expert choice bias (router.rs).
pub struct Experts<M, V> {
    /// `[moe_intermediate, hidden]` per expert; empty where experts have no gate (an expert is
    /// then `down(act(up(x)))`, Nemotron-H).
    pub gate: Vec<M>,
    /// `[moe_intermediate, hidden]` per expert.
    pub up: Vec<M>,
    /// `[hidden, moe_intermediate]` per expert.
    pub down: Vec<M>,
    /// Added to the scores for choosing experts only (`e_score_correction_bias`, LFM2's
    /// `expert_bias`), one value per expert.
    pub choice_bias: Option<V>,
    /// Biases added after each expert's projections (gpt-oss), where the experts have them.
    pub biases: Option<ExpertBiases<V>>,
    /// The router's index of the first expert held (`gate`, `up`, `down` hold experts
    /// `first..first + up.len()`): 0, or under expert parallelism this rank's first. A token's
    /// chosen experts outside them add nothing here (another rank adds them).
    pub first: usize,
}

/// Per expert, the biases added after its gate, up and down projections (gpt-oss's
/// `gate_up_proj_bias`, `down_proj_bias`); empty `gate` where the experts have no gate.
pub struct ExpertBiases<V> {
    /// `[moe_intermediate]` per expert.
    pub gate: Vec<V>,
    /// `[moe_intermediate]` per expert.
    pub up: Vec<V>,
    /// `[hidden]` per expert.
    pub down: Vec<V>,
}

impl<M, V> Experts<M, V> {
    /// The router's indices of the experts held.
    pub fn held(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.up.len()
    }
}

/// The refusal of an op backend `name` has no kernel for: `what` (ending in "has" / "have")
/// names it.
fn no_kernel(what: &str, name: &str) -> BackendError {
    BackendError::Unsupported(format!("{what} no {name} kernel yet: run it with --device cpu"))
}

/// The operations a model family may use. Activations are `[rows, cols]` row-major f32 (or the
/// device's equivalent); every op computes each output row from its own input row(s) with a
/// reduction order that does not depend on how many rows share the call (batch invariance).
pub trait Backend: Send + Sync {
    /// An activation matrix `[rows, cols]`.
    type Act: Send;
    /// A weight matrix `[out, in]` in its storage type.
    type Mat: Send + Sync;
    /// A weight vector (norm scales), f32.
    type Vec: Send + Sync;
    /// One layer's paged KV cache.
    type Kv: Send;
    /// One layer's pool of fixed-size per-sequence state slots (state.rs).
    type State: Send;
    /// Token ids a round picked, kept where it picked them ([`Backend::argmax_rows_held`]), so
    /// a later round can embed them before they reach the host.
    type Held: Send;

    /// Short name for logs (`cpu`, `ref`, `cuda:0`).
    fn name(&self) -> String;
    /// Takes a 2-D weight `[out, in]`.
    fn mat(&self, t: &TensorView) -> Result<Self::Mat, BackendError>;
    /// Takes a 2-D weight that its matmuls read in f32 with f32 activations (an MoE router:
    /// transformers routes in f32, and an expert choice must not turn on rounding); the default
    /// is [`Backend::mat`], whose matmuls are f32 on the host backends.
    fn mat_f32(&self, t: &TensorView) -> Result<Self::Mat, BackendError> {
        self.mat(t)
    }
    /// Takes a 2-D FP8 E4M3 weight `[out, in]` with its block scales (the weight is each code
    /// times its block's scale); the default refuses it by name.
    fn mat_fp8(&self, t: &TensorView, scales: &Fp8Scales) -> Result<Self::Mat, BackendError> {
        let _ = scales;
        let msg = format!(
            "{}: FP8 weights run on the cpu, ref and cuda backends; {} does not take them yet",
            t.name,
            self.name()
        );
        Err(BackendError::Unsupported(msg))
    }
    /// Takes a weight vector.
    fn vec(&self, v: &[f32]) -> Self::Vec;
    /// Allocates one layer's KV pool.
    fn kv(&self, shape: KvShape) -> Result<Self::Kv, BackendError>;
    /// Allocates one layer's zeroed state pool.
    fn state(&self, shape: StateShape) -> Result<Self::State, BackendError>;
    /// `slots`' values one after another, as little-endian f32 bytes ([`HostState::read_slots`]).
    fn read_state(&self, st: &Self::State, slots: &[u32]) -> Vec<u8>;
    /// Writes bytes laid out as [`Backend::read_state`] gives them into `slots`.
    fn write_state(&self, st: &mut Self::State, slots: &[u32], bytes: &[u8]);
    /// Copies slot `from` over slot `to` (a snapshot, or its restore).
    fn copy_state(&self, st: &mut Self::State, from: u32, to: u32) {
        let bytes = self.read_state(st, &[from]);
        self.write_state(st, &[to], &bytes);
    }
    /// Host data `[rows, cols]` into an activation.
    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> Self::Act;
    /// An activation back to the host, row-major.
    fn download(&self, x: &Self::Act) -> Vec<f32>;
    /// `(rows, cols)` of an activation.
    fn shape(&self, x: &Self::Act) -> (usize, usize);

    /// Rows of the embedding table `[vocab, hidden]` for `ids`, times `scale`.
    fn embed(&self, table: &Self::Mat, ids: &[u32], scale: f32) -> Self::Act;
    /// [`Backend::embed`] of the ids `held[rows[i]]` (`rows` index the round `held` came from):
    /// the same values; a device reads them where they are instead of waiting for the host.
    fn embed_held(&self, table: &Self::Mat, held: &Self::Held, rows: &[u32], scale: f32) -> Self::Act {
        let all = self.held_ids(held);
        let ids: Vec<u32> = rows.iter().map(|&r| all.get(r as usize).copied().unwrap_or_default()).collect();
        self.embed(table, &ids, scale)
    }
    /// `x @ w^T`: `[rows, in] x [out, in] -> [rows, out]`.
    fn matmul(&self, x: &Self::Act, w: &Self::Mat) -> Self::Act;
    /// `x @ w^T` for each weight of `ws` (q/k/v, gate/up): the same results as one `matmul` per
    /// weight; a backend may run them in one launch.
    fn matmul_many(&self, x: &Self::Act, ws: &[&Self::Mat]) -> Vec<Self::Act> {
        ws.iter().map(|w| self.matmul(x, w)).collect()
    }
    /// `h += x @ w^T` (a residual add of a projection): the same values as `matmul` followed by
    /// `add_assign`; a backend may add in the matmul's store.
    fn matmul_add(&self, x: &Self::Act, w: &Self::Mat, h: &mut Self::Act) {
        let y = self.matmul(x, w);
        self.add_assign(h, &y);
    }
    /// `matmul_many(rms_norm(x, nw), ws)`: the same values; a backend may make the norm inside
    /// the matmul (the normed rows are not returned).
    fn norm_matmul_many(
        &self,
        x: &Self::Act,
        nw: &Self::Vec,
        eps: f32,
        one_plus: bool,
        ws: &[&Self::Mat],
    ) -> Vec<Self::Act> {
        let n = self.rms_norm(x, nw, eps, one_plus);
        self.matmul_many(&n, ws)
    }
    /// RMSNorm over each consecutive group of `w.len()` values; scale `w` or `1 + w`.
    fn rms_norm(&self, x: &Self::Act, w: &Self::Vec, eps: f32, one_plus: bool) -> Self::Act;
    /// `x += y`.
    fn add_assign(&self, x: &mut Self::Act, y: &Self::Act);
    /// `x += y`, then RMSNorm of each whole row of `x` (the residual add fused with the next
    /// norm): the same values as `add_assign` followed by `rms_norm`.
    fn add_rms_norm(&self, x: &mut Self::Act, y: &Self::Act, w: &Self::Vec, eps: f32, one_plus: bool) -> Self::Act {
        self.add_assign(x, y);
        self.rms_norm(x, w, eps, one_plus)
    }
    /// Rotary embedding in place over every head of width `head_dim` of each row.
    fn rope(&self, x: &mut Self::Act, positions: &[u32], head_dim: usize, rope: &Rope);
    /// Per-head RMSNorm of `q` and `k` (when `norms` is given), then rotary embedding of both at
    /// `positions`: the same values as `rms_norm` of each followed by `rope` of each.
    fn qk_norm_rope(
        &self,
        q: &mut Self::Act,
        k: &mut Self::Act,
        norms: Option<QkNorm<'_, Self::Vec>>,
        positions: &[u32],
        head_dim: usize,
        rope: &Rope,
    ) {
        if let Some(n) = norms {
            *q = self.rms_norm(q, n.q, n.eps, n.one_plus);
            *k = self.rms_norm(k, n.k, n.eps, n.one_plus);
        }
        self.rope(q, positions, head_dim, rope);
        self.rope(k, positions, head_dim, rope);
    }
    /// `act(x)`, elementwise (an MLP or expert without a gate); the default runs on the host.
    fn activate(&self, x: &Self::Act, act: Activation) -> Self::Act {
        let (rows, cols) = self.shape(x);
        let y: Vec<f32> = self.download(x).into_iter().map(|v| reference::activate(v, act)).collect();
        self.upload(&y, rows, cols)
    }
    /// `act(gate) * up`, elementwise.
    fn glu(&self, gate: &Self::Act, up: &Self::Act, act: Activation) -> Self::Act;
    /// `min(act(gate), limit) * clamp(up, -limit, limit)`, elementwise (Step's `swiglu_limits`;
    /// `limit` above 0); the default runs on the host ([`reference::glu_clamped`]).
    fn glu_clamped(&self, gate: &Self::Act, up: &Self::Act, act: Activation, limit: f32) -> Self::Act {
        let (rows, cols) = self.shape(gate);
        let (g, u) = (self.download(gate), self.download(up));
        let y: Vec<f32> = g.iter().zip(&u).map(|(&g, &u)| reference::glu_clamped(g, u, act, limit)).collect();
        self.upload(&y, rows, cols)
    }
    /// A gate and an up weight (`[inter, in]` each) as one packed weight ([`gate_up`]'s row
    /// order), or `None` where this backend keeps them apart (the default).
    fn mat_gate_up(&self, gate: &TensorView, up: &TensorView) -> Result<Option<Self::Mat>, BackendError> {
        let _ = (gate, up);
        Ok(None)
    }
    /// `act(gate) * up` of a packed gate/up matmul output `[rows, 2 * inter]`: the values of
    /// `glu` of the unpacked halves, which a backend may hold rounded to the type its matmuls
    /// read (CUDA: bf16), as they feed the down projection (this default unpacks on the host).
    fn glu_packed(&self, y: &Self::Act, act: Activation) -> Self::Act {
        let (rows, cols) = self.shape(y);
        let inter = cols / 2;
        let (gate, up) = gate_up::unpack(&self.download(y), rows, inter);
        self.glu(&self.upload(&gate, rows, inter), &self.upload(&up, rows, inter), act)
    }
    /// `glu_packed(matmul(x, gu))`: the same values (bits); a backend may apply the activation
    /// in the matmul's store.
    fn matmul_glu(&self, x: &Self::Act, gu: &Self::Mat, act: Activation) -> Self::Act {
        self.glu_packed(&self.matmul(x, gu), act)
    }
    /// `matmul_glu(rms_norm(x, nw), gu)`: the same values.
    fn norm_matmul_glu(
        &self,
        x: &Self::Act,
        nw: &Self::Vec,
        eps: f32,
        one_plus: bool,
        gu: &Self::Mat,
        act: Activation,
    ) -> Self::Act {
        self.matmul_glu(&self.rms_norm(x, nw, eps, one_plus), gu, act)
    }
    /// Writes this round's K/V rows into the pool, then attends (causal, paged).
    fn attention(
        &self,
        q: &Self::Act,
        k: &Self::Act,
        v: &Self::Act,
        kv: &mut Self::Kv,
        meta: &AttnMeta,
        p: &AttnParams,
    ) -> Self::Act;
    /// Attention of `q` over K/V already in `kv`, writing none: row `i` of each sequence sees the
    /// positions `[window_start(start_pos + i), start_pos + i]` of its block table, as
    /// [`Backend::attention`] would after writing them (a drafter reading the target's pools: the
    /// Gemma 4 assistant). Runs only where [`Backend::check_attention_cached`] passed.
    fn attention_cached(&self, q: &Self::Act, kv: &Self::Kv, meta: &AttnMeta, p: &AttnParams) -> Self::Act {
        let _ = (q, kv, meta, p);
        unreachable!("attention_cached runs only where check_attention_cached passed")
    }
    /// [`Backend::attention`] where each query head `h`'s softmax also counts a sink logit
    /// `sinks[h]` with no value (gpt-oss): the weights are `exp(s_j) / (sum_j exp(s_j) +
    /// exp(sinks[h]))`. Runs only where [`Backend::check_attention_sinks`] passed. The default
    /// runs the reference attention on the host over the round's blocks
    /// ([`on_host::attention_sinks`]).
    #[allow(clippy::too_many_arguments)]
    fn attention_sinks(
        &self,
        q: &Self::Act,
        k: &Self::Act,
        v: &Self::Act,
        kv: &mut Self::Kv,
        meta: &AttnMeta,
        p: &AttnParams,
        sinks: &[f32],
    ) -> Self::Act {
        on_host::attention_sinks(self, q, k, v, kv, meta, p, sinks)
    }
    /// Refuses experts with biases ([`Experts::biases`]) where this backend's `moe` does not add
    /// them: the default refuses by name; the host backends add them.
    fn check_expert_biases(&self) -> Result<(), BackendError> {
        Err(no_kernel("experts with biases (gpt-oss) have", &self.name()))
    }
    /// Refuses attention sinks ([`Backend::attention_sinks`]) where this backend does not run
    /// them: the default refuses by name; the host backends run them, and a backend may take the
    /// host default by accepting them here.
    fn check_attention_sinks(&self) -> Result<(), BackendError> {
        Err(no_kernel("attention sinks (gpt-oss) have", &self.name()))
    }
    /// Refuses attention over K/V another model wrote ([`Backend::attention_cached`]) where this
    /// backend has no kernel for it: the default refuses by name; the host backends run it.
    fn check_attention_cached(&self) -> Result<(), BackendError> {
        Err(no_kernel("attention over the target's KV pools (the Gemma 4 assistant drafter) has", &self.name()))
    }
    /// Writes this round's indexer keys `k` `[rows, head_dim]` into their slots of the
    /// indexer-key pool `kv` where `p` says, then chooses each row's key blocks from its indexer
    /// queries `q` `[rows, heads * head_dim]` (sparse.rs `pick_blocks`). The default runs
    /// sparse.rs on the host over the round's blocks ([`on_host::with_blocks`]).
    fn index_blocks(
        &self,
        q: &Self::Act,
        k: &Self::Act,
        kv: &mut Self::Kv,
        meta: &AttnMeta,
        p: &IndexParams,
    ) -> BlockPicks {
        let q = on_host::host_tensor(self, q);
        let k = on_host::rounded_tensor(on_host::host_tensor(self, k), self.kv_dtype());
        on_host::with_blocks(self, kv, meta, |pool, local| {
            sparse::write_index_keys(&k, pool, local, p);
            sparse::pick_blocks(&q, pool, local, p)
        })
    }
    /// [`Backend::attention`] where each query head sees only the keys of its indexer head's
    /// picked blocks (sparse.rs `attention_blocks`). The default runs sparse.rs on the host over
    /// the round's blocks ([`on_host::with_blocks`]): the pool's values in f32, the output
    /// uploaded.
    #[allow(clippy::too_many_arguments)]
    fn attention_blocks(
        &self,
        q: &Self::Act,
        k: &Self::Act,
        v: &Self::Act,
        kv: &mut Self::Kv,
        meta: &AttnMeta,
        p: &AttnParams,
        picks: &BlockPicks,
    ) -> Self::Act {
        let dtype = self.kv_dtype();
        let qh = on_host::host_tensor(self, q);
        let kh = on_host::rounded_tensor(on_host::host_tensor(self, k), dtype);
        let vh = on_host::rounded_tensor(on_host::host_tensor(self, v), dtype);
        let out = on_host::with_blocks(self, kv, meta, |pool, local| {
            sparse::attention_blocks(&qh, &kh, &vh, pool, local, p, picks)
        });
        self.upload(&out.data, out.rows, out.cols)
    }
    /// LFM2's double-gated short conv (short_conv.rs) of in-projection rows `bcx` `[rows, 3 * ch]`
    /// into `[rows, ch]`, each sequence's conv window in its slot of `st` (`meta.state_slots`):
    /// the reference's values. This default runs the reference on the host.
    fn short_conv(
        &self,
        bcx: &Self::Act,
        conv: &ShortConv<'_, Self::Vec>,
        st: &mut Self::State,
        meta: &AttnMeta,
    ) -> Self::Act {
        let (rows, cols) = self.shape(bcx);
        let (ch, width) = (cols / 3, conv.kernel.saturating_sub(1));
        let slots = &meta.state_slots[..meta.state_slots.len().min(meta.seqs.len())];
        let (mut host, local) = short_conv::host_slots(&self.read_state(st, slots), meta, ch, width);
        let x = self.download(bcx);
        let y = short_conv::short_conv(&x, ch, conv.host_weight, conv.host_bias, conv.kernel, &mut host, &local);
        self.write_state(st, slots, &host.data.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        self.upload(&y, rows, ch)
    }
    /// The listed rows of `x`, in order.
    fn select_rows(&self, x: &Self::Act, rows: &[usize]) -> Self::Act;
    /// `cap * tanh(x / cap)` in place.
    fn softcap(&self, x: &mut Self::Act, cap: f32);
    /// The values of a weight vector on the host (what the state ops' host-run defaults read).
    fn vec_values(&self, v: &Self::Vec) -> Vec<f32>;
    /// Depthwise causal conv1d of `x` `[rows, channels]` over each sequence's rows, its window in
    /// the first values of the sequence's slot of `st` (conv.rs; this default runs it on the host).
    fn causal_conv1d(
        &self,
        x: &Self::Act,
        p: &Conv1d<'_, Self::Vec>,
        st: &mut Self::State,
        meta: &AttnMeta,
    ) -> Self::Act {
        let (rows, ch) = self.shape(x);
        let (w, bias) = (self.vec_values(p.weight), p.bias.map(|b| self.vec_values(b)));
        let xs = self.download(x);
        let y = on_host::with_slots(self, st, meta, |hs, m| {
            conv::causal_conv1d(&xs, ch, &w, bias.as_deref(), p.kernel, p.silu, hs, m)
        });
        self.upload(&y, rows, ch)
    }
    /// The gated delta rule over each sequence's rows of `qkv` `[rows, 2 Hk Dk + Hv Dv]` with `a`,
    /// `b` `[rows, Hv]`, its state in the sequence's slot of `st`: `[rows, Hv Dv]` (gdn.rs; this
    /// default runs it on the host).
    fn gated_delta_rule(
        &self,
        qkv: &Self::Act,
        a: &Self::Act,
        b: &Self::Act,
        p: &Gdn<'_, Self::Vec>,
        st: &mut Self::State,
        meta: &AttnMeta,
    ) -> Self::Act {
        let sh = gdn::GdnShape::of(p);
        let (rows, _) = self.shape(qkv);
        let (a_log, dt) = (self.vec_values(p.a_log), self.vec_values(p.dt_bias));
        let (q, av, bv) = (self.download(qkv), self.download(a), self.download(b));
        let y = on_host::with_slots(self, st, meta, |hs, m| {
            gdn::gated_delta_rule(sh, &q, &av, &bv, &a_log, &dt, p.state_offset, hs, m)
        });
        self.upload(&y, rows, sh.hv * sh.dv)
    }
    /// Gated RMSNorm over each group of `w.len()` values: `norm(x) * w * silu(z)` (gdn.rs).
    fn rms_norm_gated(&self, x: &Self::Act, z: &Self::Act, w: &Self::Vec, eps: f32) -> Self::Act {
        let (rows, cols) = self.shape(x);
        let y = gdn::rms_norm_gated(&self.download(x), &self.download(z), &self.vec_values(w), eps);
        self.upload(&y, rows, cols)
    }
    /// Mamba2's SSD scan over each sequence's rows of `xbc` `[rows, H P + 2 G N]` (the conv's
    /// output after SiLU) with `dt` `[rows, H]`, its state in the sequence's slot of `st`:
    /// `[rows, H P]` before the gated norm (ssd.rs; this default runs it on the host).
    fn ssd_scan(
        &self,
        xbc: &Self::Act,
        dt: &Self::Act,
        p: &Ssd<'_, Self::Vec>,
        st: &mut Self::State,
        meta: &AttnMeta,
    ) -> Self::Act {
        let sh = ssd::SsdShape::of(p);
        let (rows, _) = self.shape(xbc);
        let heads = [self.vec_values(p.a_log), self.vec_values(p.d), self.vec_values(p.dt_bias)].concat();
        let (x, d) = (self.download(xbc), self.download(dt));
        let y = on_host::with_slots(self, st, meta, |hs, m| ssd::ssd_scan(sh, &x, &d, &heads, p.state_offset, hs, m));
        self.upload(&y, rows, sh.h * sh.p)
    }
    /// Mamba2's gated RMSNorm: `x * silu(z)` normed over each group of `group` values, times
    /// `w` (`[cols]`) (ssd.rs).
    fn rms_norm_gated_grouped(&self, x: &Self::Act, z: &Self::Act, w: &Self::Vec, group: usize, eps: f32) -> Self::Act {
        let (rows, cols) = self.shape(x);
        let y = ssd::rms_norm_gated_grouped(&self.download(x), &self.download(z), &self.vec_values(w), group, eps);
        self.upload(&y, rows, cols)
    }
    /// `x[r][c] += bias[c]` for every row (a projection's bias: GLM-4.5's q/k/v); the default
    /// runs on the host.
    fn add_bias(&self, x: &mut Self::Act, bias: &Self::Vec) {
        let (rows, cols) = self.shape(x);
        let (mut v, b) = (self.download(x), self.vec_values(bias));
        for row in v.chunks_exact_mut(cols.max(1)) {
            row.iter_mut().zip(&b).for_each(|(x, b)| *x += b);
        }
        *x = self.upload(&v, rows, cols);
    }
    /// Per row `r` of `x`, its products with the rows `picks[r]` of `w` (a head's logits over a
    /// few of its tokens: the Gemma 4 assistant's ordered head), where this backend makes them
    /// for less than the whole product (the CPU: those rows alone, each read once); `None` (the
    /// default): the caller multiplies by the whole of `w`.
    fn matmul_picked(&self, x: &Self::Act, w: &Self::Mat, picks: &[Vec<u32>]) -> Option<Vec<Vec<f32>>> {
        let _ = (x, w, picks);
        None
    }
    /// This backend's own copy of per-head weights `w`, laid out as its [`Backend::head_matmul`]
    /// reads them (CUDA: on the device; the CPU: transposed per head); `None` (the default):
    /// `w` serves as it is.
    fn head_copy(&self, w: &HeadWeights<'_>) -> Option<Self::Vec> {
        let _ = w;
        None
    }
    /// `x` `[rows, heads * cols]` times a matrix per head (heads.rs `head_matmul`: MLA's absorbed
    /// weights), read from `copy` (`w`'s [`Backend::head_copy`]) where given; the default runs
    /// on the host.
    fn head_matmul(&self, x: &Self::Act, w: &HeadWeights<'_>, copy: Option<&Self::Vec>) -> Self::Act {
        let _ = copy;
        let rows = self.shape(x).0;
        let y = heads::head_matmul(&self.download(x), rows, w);
        self.upload(&y, rows, w.heads * w.out)
    }
    /// Each row's heads of `a` then `b` side by side (heads.rs `concat_heads`); the default runs
    /// on the host.
    fn concat_heads(&self, a: &Self::Act, b: &Self::Act, heads: usize) -> Self::Act {
        let ((rows, ca), (_, cb)) = (self.shape(a), self.shape(b));
        let y = heads::concat_heads(&self.download(a), &self.download(b), rows, heads);
        self.upload(&y, rows, ca + cb)
    }
    /// LayerNorm with bias over each group of `w.len()` values (layer_norm.rs); the default runs
    /// on the host.
    fn layer_norm(&self, x: &Self::Act, w: &Self::Vec, b: &Self::Vec, eps: f32) -> Self::Act {
        let (rows, cols) = self.shape(x);
        let y = layer_norm::layer_norm(&self.download(x), &self.vec_values(w), &self.vec_values(b), eps);
        self.upload(&y, rows, cols)
    }
    /// DeepSeek sparse attention (dsa.rs): writes this round's slot rows `rows` (`[rows, latent +
    /// index key]`) into the latent pool `kv`, then for each query keeps the `ix.topk` causal keys
    /// of the best index scores (`index_q` `[rows, H * D]`, `index_w` `[rows, H]`) and attends
    /// over their latent rows alone with `q` (`[rows, heads * latent]`, `p.head_dim` the latent
    /// width): `[rows, heads * latent]`. The default runs dsa.rs on the host over the round's
    /// blocks ([`on_host::with_blocks`]: f32, bf16 or f16 pools; a latent pool takes back its K half).
    #[allow(clippy::too_many_arguments)]
    fn sparse_attention(
        &self,
        q: &Self::Act,
        index_q: &Self::Act,
        index_w: &Self::Act,
        rows: &Self::Act,
        kv: &mut Self::Kv,
        meta: &AttnMeta,
        p: &AttnParams,
        ix: &DsaParams,
    ) -> Self::Act {
        let (n, width) = (self.shape(q).0, self.shape(rows).1);
        let slots = on_host::rounded(&self.download(rows), self.kv_dtype());
        let (qv, iq, iw) = (self.download(q), self.download(index_q), self.download(index_w));
        let out = on_host::with_blocks(self, kv, meta, |pool, local| {
            dsa::write_rows(&slots, &mut pool.k, width, local);
            let x = SparseQueries { q: &qv, index_q: &iq, index_w: &iw };
            dsa::sparse_attention(&x, &pool.k, width, local, p, ix)
        });
        self.upload(&out, n, p.num_heads * p.head_dim)
    }
    /// `x *= c` elementwise (Gemma 4's `layer_scalar`); the default runs on the host.
    fn scale(&self, x: &mut Self::Act, c: f32) {
        let (rows, cols) = self.shape(x);
        let v: Vec<f32> = self.download(x).into_iter().map(|v| v * c).collect();
        *x = self.upload(&v, rows, cols);
    }
    /// `x *= sigmoid(gate)` elementwise (gated attention's output gate).
    fn mul_sigmoid(&self, x: &mut Self::Act, gate: &Self::Act) {
        let (rows, cols) = self.shape(x);
        let mut v = self.download(x);
        gdn::mul_sigmoid(&mut v, &self.download(gate));
        *x = self.upload(&v, rows, cols);
    }
    /// Mixture of experts: route each row by `router_logits` `[rows, experts]` (router.rs
    /// `route`), run its experts, and sum their outputs times their weights in an order fixed
    /// by the row's own routing (batch invariance).
    fn moe(
        &self,
        x: &Self::Act,
        router_logits: &Self::Act,
        experts: &Experts<Self::Mat, Self::Vec>,
        p: &MoeParams,
    ) -> Self::Act;
    /// `x += sigmoid(g) * y`, where `g` is `[rows, 1]` (a gated shared expert's sum,
    /// Qwen3-Next): `sigmoid(g) = 1 / (1 + exp(-g))`, one multiply and one add per element.
    fn add_sigmoid_scaled(&self, x: &mut Self::Act, y: &Self::Act, g: &Self::Act) {
        let (rows, cols) = self.shape(x);
        let (mut xs, ys, gs) = (self.download(x), self.download(y), self.download(g));
        for (r, gv) in gs.iter().enumerate().take(rows) {
            let s = 1.0 / (1.0 + (-gv).exp());
            for c in 0..cols {
                xs[r * cols + c] += s * ys[r * cols + c];
            }
        }
        *x = self.upload(&xs, rows, cols);
    }
    /// A device exchange for a tensor-parallel group of `size` ranks on backends of this kind,
    /// which each rank then joins ([`Backend::join_exchange`]) so that the group's sums run on
    /// the devices ([`Backend::all_reduce_on_device`]); `None` (the default): the group sums
    /// through the host.
    fn new_exchange(&self, size: usize) -> Option<Exchange> {
        let _ = size;
        None
    }
    /// Joins `ex` (made by [`Backend::new_exchange`] on rank 0's backend) as rank `rank`.
    fn join_exchange(&self, ex: &Exchange, rank: usize) -> Result<(), BackendError> {
        let _ = (ex, rank);
        Err(BackendError::Unsupported(format!("{} backends sum on the host", self.name())))
    }
    /// `x` summed over the joined group's ranks on the device in rank order
    /// (`((x0 + x1) + x2) + ...`, the bits of [`Collective::all_reduce`]'s sum); `barrier` waits
    /// for every rank (false: the group broke). `None` where this backend joined no exchange (the
    /// caller sums through the host); `Some(Err)` when the ranks' rows disagree or the group broke.
    fn all_reduce_on_device(&self, x: &mut Self::Act, barrier: &mut dyn FnMut() -> bool) -> Option<Result<(), String>> {
        let _ = (x, barrier);
        None
    }
    /// On rank 0 of a joined group, each row of every rank's `x` side by side in rank order
    /// (`total` columns: the vocabulary-parallel head's logits), `Some(Ok(Some(_)))`; on the
    /// others `Some(Ok(None))` (they keep `x`); `barrier` as in
    /// [`Backend::all_reduce_on_device`]. `None` where this backend joined no exchange.
    fn gather_cols_on_device(
        &self,
        x: &Self::Act,
        total: usize,
        barrier: &mut dyn FnMut() -> bool,
    ) -> Option<Result<Option<Self::Act>, String>> {
        let _ = (x, total, barrier);
        None
    }
    /// Where a long-lived loop that drives this backend (an engine's) runs: on one of the
    /// backend's own threads where it has them (the CPU backend's pool), so the parallel ops it
    /// starts need no hand-off between threads; `None` (the default) runs it on the caller's.
    fn home(&self) -> Option<Home> {
        None
    }
    /// Runs `f` where the host work it spreads over threads (rayon) shares this backend's own
    /// threads: the CPU backend's pool, so a server given `--threads N` keeps to N; other
    /// backends run it on the caller's (rayon's global pool).
    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        f()
    }

    /// Element type of the KV pool (what a saved session stores).
    fn kv_dtype(&self) -> tf_core::DType;
    /// Raw little-endian bytes of `blocks` of one layer's pool: all their K, then all their V.
    fn read_kv_blocks(&self, kv: &Self::Kv, blocks: &[u32]) -> Vec<u8>;
    /// Writes bytes laid out as [`Backend::read_kv_blocks`] gives them into `blocks`.
    fn write_kv_blocks(&self, kv: &mut Self::Kv, blocks: &[u32], bytes: &[u8]);
    /// Per row of `x`, the column of its largest value (the first one on ties; rows without
    /// NaNs). Only the indices cross to the host on devices that compute it in place.
    fn argmax_rows(&self, x: &Self::Act) -> Vec<u32> {
        let (_, cols) = self.shape(x);
        let data = self.download(x);
        data.chunks(cols.max(1)).map(|row| host::argmax(row) as u32).collect()
    }
    /// [`Backend::argmax_rows`] for a step inside a round (a drafter's): the same ids, and no
    /// round ends here for the backend's tracing.
    fn argmax_rows_in_round(&self, x: &Self::Act) -> Vec<u32> {
        self.argmax_rows(x)
    }
    /// [`Backend::argmax_rows`] without waiting for it: the ids stay where they were picked and
    /// their copy to the host is queued. [`Backend::held_ids`] reads them; a later round may
    /// embed them first ([`Round::held`]), so the device need not idle while the host looks.
    fn argmax_rows_held(&self, x: &Self::Act) -> Self::Held;
    /// The ids of `h` on the host, as [`Backend::argmax_rows`] gives them (waits for their copy).
    fn held_ids(&self, h: &Self::Held) -> Vec<u32>;
    /// Ids picked on the host (a sampled round's tokens) held as [`Backend::argmax_rows_held`]
    /// holds the device's, so the next round can be queued on them the same way;
    /// [`Backend::held_ids`] gives them back at once.
    fn hold_ids(&self, ids: &[u32]) -> Self::Held;
    /// Per query, the sampling candidates of logits row `rows[i]` of `x` under `queries[i]`
    /// (candidates.rs), each listed row edited in place first. Devices that select in place send
    /// only the candidates to the host; the default downloads the rows.
    fn sample_candidates(&self, x: &mut Self::Act, rows: &[usize], queries: &[RowQuery]) -> Vec<Candidates> {
        let (_, cols) = self.shape(x);
        let data = self.download(x);
        rows.iter()
            .zip(queries)
            .map(|(&r, q)| candidates::candidates(&mut data[r * cols..(r + 1) * cols].to_vec(), q))
            .collect()
    }
    /// Per query, what the log-softmax of raw logits row `q.row` of `x` needs (logprobs.rs).
    /// Devices that compute it in place send only those numbers; the default downloads the rows.
    fn logprobs(&self, x: &Self::Act, queries: &[LogprobQuery]) -> Vec<RowLogprobs> {
        let (_, cols) = self.shape(x);
        let data = self.download(x);
        queries.iter().map(|q| logprobs::row_logprobs(&data[q.row * cols..(q.row + 1) * cols], q)).collect()
    }
    /// Candidates a row may have before [`Backend::sample_candidates`] downloads it whole
    /// (`None`: every row is read where it is, so a wide row costs nothing more).
    fn candidate_capacity(&self) -> Option<usize> {
        None
    }
    /// Device memory `(free, total)` in bytes, where the backend has memory of its own (`None`
    /// on the host): what sizes the KV cache by default.
    fn memory_info(&self) -> Option<(u64, u64)> {
        None
    }
    /// A number no earlier call on this backend returned (0 where recordings are not kept): a
    /// loaded model's identity in [`Round::model`].
    fn fresh_id(&self) -> u64 {
        0
    }
    /// Runs `f`, the part of a round's forward that reads the host only through the round it is
    /// handed (the decoder's embedding and layers), over `kv`; a backend may instead replay a
    /// recording of an earlier round of the same shape with this round's inputs (CUDA graphs),
    /// or hand `f` the round with rows appended that touch no sequence's cache; either way the
    /// result has `round`'s rows with the values `f(round)` gives. The default runs `f(round)`.
    fn forward_round(
        &self,
        round: &Round<'_, Self::Held>,
        kv: &mut [Self::Kv],
        f: &mut RoundFn<'_, Self::Kv, Self::Act, Self::Held>,
    ) -> Self::Act {
        f(round, kv)
    }
}

/// A backend's own threads, as [`Backend::home`] hands them out: runs the loop it is given on
/// one of them and returns when the loop does.
pub type Home = std::sync::Arc<dyn Fn(&mut (dyn FnMut() + Send)) + Send + Sync>;

/// The part of a round's forward a backend may record ([`Backend::forward_round`]): it runs over
/// the round it is handed and the KV pools.
pub type RoundFn<'a, Kv, Act, H = ()> = dyn FnMut(&Round<'_, H>, &mut [Kv]) -> Act + 'a;

/// What a round's forward reads from the host, for [`Backend::forward_round`]: a backend that
/// replays recordings keys them on it and uploads these inputs before a replay.
pub struct Round<'a, H = ()> {
    /// Whether the forward's ops depend on the host only through these inputs (no sliding
    /// windows; an op that reads the host anyway must spoil a recording), so a recording may
    /// stand for it.
    pub replayable: bool,
    /// The model ([`Backend::fresh_id`] at its load) and how many of its layers run.
    pub model: [u64; 2],
    /// Token ids in row order; with `held`, each row's index into the ids held there.
    pub ids: &'a [u32],
    /// Ids an earlier round picked, held by the backend: row `i`'s token is `held[ids[i]]`.
    pub held: Option<&'a H>,
    /// Absolute position of each row.
    pub positions: &'a [u32],
    /// Sequences, positions and KV slots.
    pub meta: &'a AttnMeta,
    /// Query heads per KV head.
    pub group: usize,
}
