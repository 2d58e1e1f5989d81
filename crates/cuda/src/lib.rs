//! The CUDA backend: every `Backend` op as a kernel of our own (CUDA C under `kernels/`, compiled
//! by NVRTC for the device at start and cached on disk), bf16 weights kept as bf16 and multiplied
//! on the tensor cores with f32 accumulation (FP8 weights kept as codes and scales, multiplied as
//! their bf16 rounding: fp8.rs), a bf16 paged KV cache, f32 activations.
//!
//! Exactness (docs/architecture.md): each kernel fixes the reduction order of every output
//! element independently of how many rows share the call, so concurrent == solo, drafted ==
//! undrafted and chunked == whole, bit for bit; fused ops equal their unfused definitions bit for
//! bit (tests/ops.rs). docs/cuda.md describes each kernel and why it is built as it is;
//! docs/perf.md what was measured against it.
//!
//! Decode rounds (one new token a sequence; models with recurrent layers too) are recorded as
//! CUDA graphs per shape and replayed with the round's inputs uploaded into the recording
//! (graph.rs); `CudaOptions::no_graphs` runs them op by op. `CudaOptions::trace` builds the kernels with a
//! per-warp timeline of chosen rounds written to a file (trace.rs); without it the kernels' code
//! is unchanged. The library reads no environment: the caller fills [`CudaOptions`].
//!
//! Layers: each file imports only from lower layers (scripts/cuda_layers.py checks every
//! `crate::` import against this table, and that no cycle remains).
//!
//! ```text
//! 0  error, options, smem, tma, attn_meta, graph_pad   errors, start options, launch sizes,
//!                                                      tensor maps, host-side metadata layouts
//! 0  fp8_host                                          FP8 weights' bf16 values (the definition)
//! 1  nvrtc                                             compiling kernels/*.cu
//! 2  device                                            context, streams, module, launches, memory
//! 3  tensor, trace, capture                            device buffers, the kernel timeline, a
//!                                                      graph capture's inputs
//! 4  ctx                                               what every kernel launcher works on
//! 5  ops, state                                        norms, RoPE, embedding, elementwise, argmax;
//!                                                      per-sequence state pools
//! 5  fp8                                               FP8 weights: upload, FP8 GEMV, bf16 scratch
//! 6  matmul, attention, sample, logprob, held, gdn, ssd, short_conv  GEMV/GEMM, paged attention,
//!                                                      sampling, log-probabilities, ids held on
//!                                                      the device, recurrent state ops (conv,
//!                                                      delta rule, Mamba2's SSD scan and gated
//!                                                      norm, LFM2's short conv)
//! 6  attention_mla                                     attention over a latent (MLA) KV pool
//! 6  heads                                             MLA's per-head products and concatenation
//! 6  exchange                                          tensor-parallel ranks' sums between devices
//! 7  moe, draw                                         mixture of experts (over matmul); sampled
//!                                                      rows drawn on the device (over sample)
//! 8  graph                                             decode rounds recorded and replayed
//! 9  lib                                               CudaBackend: the Backend impl, on a Ctx
//! 10 limits                                            copy and GEMM ceilings, on a backend
//! ```
//!
//! cudarc loads the driver at run time: this crate builds and its tests run (skipping) on
//! machines without CUDA.

mod attention;
mod attention_mla;
mod attn_meta;
mod capture;
mod ctx;
mod device;
mod draw;
mod error;
mod exchange;
mod fp8;
mod fp8_host;
mod gdn;
mod graph;
mod graph_pad;
mod heads;
mod held;
pub mod limits;
mod logprob;
mod matmul;
mod moe;
mod nvrtc;
mod ops;
mod options;
mod sample;
mod short_conv;
mod smem;
mod ssd;
mod state;
mod tensor;
mod tma;
mod trace;

pub use error::CudaError;
pub use fp8_host::{dequantize_bf16 as fp8_dequantize_bf16, fp8_bf16};
pub use held::CudaHeld;
pub use options::{CudaOptions, SplitRule, TraceMark, TraceRounds};
pub use state::CudaState;
pub use tensor::{CudaAct, CudaKv, CudaMat, CudaVec};

use ctx::Ctx;
use device::Device;
use tf_backend::{
    Activation, AttnMeta, AttnParams, Backend, BackendError, Candidates, Experts, KvShape, LogprobQuery, MoeParams,
    QkNorm, Rope, RowLogprobs, RowQuery, StateShape,
};
use tf_formats::TensorView;

/// Whether a CUDA driver library can be loaded on this machine (no device needed).
pub fn driver_present() -> bool {
    // SAFETY: only probes whether the shared library can be opened.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The CUDA version the loaded driver supports, as (major, minor); `None` without a driver.
pub fn driver_version() -> Option<(i32, i32)> {
    if !driver_present() {
        return None;
    }
    let mut v: std::ffi::c_int = 0;
    // SAFETY: the library is present (checked above); the call writes one int through a live pointer.
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    (r == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some((v / 1000, v % 1000 / 10))
}

/// The CUDA implementation of [`Backend`] on one GPU.
pub struct CudaBackend {
    /// The device and what the kernel launchers share (ctx.rs).
    ctx: Ctx,
    trace: Option<trace::Trace>,
    /// Decode rounds recorded as CUDA graphs and replayed (graph.rs).
    graphs: graph::Graphs,
    /// The last `fresh_id` handed out.
    ids: std::sync::atomic::AtomicU64,
    /// Pinned buffers for held ids' copies to the host (held.rs).
    held_spare: held::Spare,
    /// Whether a tensor-parallel group's sums stay on the host (`CudaOptions::tp_host_sums`).
    tp_host_sums: bool,
    /// Whether decode rounds may be recorded as graphs (`!CudaOptions::no_graphs`).
    graphs_on: bool,
    /// This rank's place in its tensor-parallel group's exchange, once joined (exchange.rs).
    joined: std::sync::Mutex<Option<exchange::Joined>>,
}

impl CudaBackend {
    /// GPU `ordinal` with default options (no kernel cache, no include path).
    pub fn new(ordinal: usize) -> Result<CudaBackend, CudaError> {
        CudaBackend::with_options(ordinal, &CudaOptions::default())
    }

    /// GPU `ordinal` with `opts`.
    pub fn with_options(ordinal: usize, opts: &CudaOptions) -> Result<CudaBackend, CudaError> {
        let dev = Device::new(ordinal, opts)?;
        let out = opts.trace_out.clone().unwrap_or_else(|| "trace.tsv".into());
        let trace = opts.trace.map(|r| trace::Trace::new(&dev, r, out));
        Ok(CudaBackend {
            ctx: Ctx::new(dev, opts),
            trace,
            graphs: graph::Graphs::new(
                !opts.no_graphs,
                opts.graph_log,
                opts.graph_rows.unwrap_or(graph::DEFAULT_MAX_ROWS),
                !opts.no_graph_pad,
            ),
            ids: Default::default(),
            held_spare: Default::default(),
            tp_host_sums: opts.tp_host_sums,
            graphs_on: !opts.no_graphs,
            joined: Default::default(),
        })
    }

    /// The GPU's name as the driver reports it.
    pub fn device_name(&self) -> &str {
        &self.ctx.dev.name
    }

    /// Streaming multiprocessors on the GPU.
    pub fn num_sms(&self) -> usize {
        self.ctx.dev.num_sms
    }

    /// Mixture of experts over experts held in any container (`experts(e)`: gate, up, down;
    /// the gate is not read unless `gated`), with the router's choice `bias`.
    pub fn moe_by<'a>(
        &self,
        x: &CudaAct,
        router_logits: &CudaAct,
        bias: Option<&CudaVec>,
        gated: bool,
        experts: impl Fn(usize) -> [&'a CudaMat; 3],
        p: &MoeParams,
    ) -> CudaAct {
        moe::moe_by(&self.ctx, x, router_logits, bias, gated, experts, p)
    }

    /// Decode rounds captured into CUDA graphs and rounds replayed from them so far (graph.rs).
    pub fn graph_counts(&self) -> (usize, usize) {
        *self.graphs.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until all queued device work is done.
    pub fn synchronize(&self) {
        self.ctx.dev.synchronize()
    }

    /// Counts a picked-token round for the kernel timeline (trace.rs), if one is recorded.
    fn round_done(&self) {
        if let Some(t) = &self.trace {
            t.round_done(&self.ctx.dev);
        }
    }
}

impl Backend for CudaBackend {
    type Act = CudaAct;
    type Mat = CudaMat;
    type Vec = CudaVec;
    type Kv = CudaKv;
    type State = CudaState;
    type Held = CudaHeld;

    fn name(&self) -> String {
        format!("cuda:{}", self.ctx.dev.ordinal)
    }

    fn memory_info(&self) -> Option<(u64, u64)> {
        self.ctx.dev.ctx.mem_get_info().ok().map(|(free, total)| (free as u64, total as u64))
    }

    fn mat(&self, t: &TensorView) -> Result<CudaMat, BackendError> {
        ops::mat(&self.ctx, t)
    }

    fn mat_f32(&self, t: &TensorView) -> Result<CudaMat, BackendError> {
        ops::mat_f32(&self.ctx, t)
    }

    fn mat_fp8(&self, t: &TensorView, scales: &tf_backend::Fp8Scales) -> Result<CudaMat, BackendError> {
        fp8::mat_fp8(&self.ctx, t, scales)
    }

    fn vec(&self, v: &[f32]) -> CudaVec {
        CudaVec { data: self.ctx.dev.upload(v), len: v.len() }
    }

    fn vec_values(&self, v: &CudaVec) -> Vec<f32> {
        self.ctx.dev.download(&v.data, v.len)
    }

    fn kv(&self, shape: KvShape) -> Result<CudaKv, BackendError> {
        ops::kv(&self.ctx, shape)
    }

    fn state(&self, shape: StateShape) -> Result<CudaState, BackendError> {
        state::alloc(&self.ctx, shape)
    }

    fn read_state(&self, st: &CudaState, slots: &[u32]) -> Vec<u8> {
        state::read(&self.ctx, st, slots)
    }

    fn write_state(&self, st: &mut CudaState, slots: &[u32], bytes: &[u8]) {
        state::write(&self.ctx, st, slots, bytes)
    }

    fn copy_state(&self, st: &mut CudaState, from: u32, to: u32) {
        state::copy(&self.ctx, st, from, to)
    }

    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> CudaAct {
        assert_eq!(data.len(), rows * cols, "upload: {} values for {rows}x{cols}", data.len());
        CudaAct::new(self.ctx.dev.upload(data), rows, cols)
    }

    fn download(&self, x: &CudaAct) -> Vec<f32> {
        self.ctx.dev.download(x.data(&self.ctx.dev), x.len())
    }

    fn shape(&self, x: &CudaAct) -> (usize, usize) {
        (x.rows, x.cols)
    }

    fn embed(&self, table: &CudaMat, ids: &[u32], scale: f32) -> CudaAct {
        ops::embed(&self.ctx, table, ids, scale)
    }

    fn embed_held(&self, table: &CudaMat, held: &CudaHeld, rows: &[u32], scale: f32) -> CudaAct {
        held::embed_held(&self.ctx, table, held, rows, scale)
    }

    fn matmul(&self, x: &CudaAct, w: &CudaMat) -> CudaAct {
        matmul::matmul(&self.ctx, x, w)
    }

    fn matmul_many(&self, x: &CudaAct, ws: &[&CudaMat]) -> Vec<CudaAct> {
        matmul::matmul_many(&self.ctx, x, ws)
    }

    fn matmul_add(&self, x: &CudaAct, w: &CudaMat, h: &mut CudaAct) {
        matmul::matmul_add(&self.ctx, x, w, h)
    }

    fn norm_matmul_many(&self, x: &CudaAct, nw: &CudaVec, eps: f32, one_plus: bool, ws: &[&CudaMat]) -> Vec<CudaAct> {
        matmul::norm_matmul_many(&self.ctx, x, nw, eps, one_plus, ws)
    }

    fn rms_norm(&self, x: &CudaAct, w: &CudaVec, eps: f32, one_plus: bool) -> CudaAct {
        ops::rms_norm(&self.ctx, x, w, eps, one_plus)
    }

    fn add_assign(&self, x: &mut CudaAct, y: &CudaAct) {
        ops::add_assign(&self.ctx, x, y)
    }

    fn add_rms_norm(&self, x: &mut CudaAct, y: &CudaAct, w: &CudaVec, eps: f32, one_plus: bool) -> CudaAct {
        ops::add_rms_norm(&self.ctx, x, y, w, eps, one_plus)
    }

    fn rope(&self, x: &mut CudaAct, positions: &[u32], head_dim: usize, rope: &Rope) {
        ops::rope(&self.ctx, x, positions, head_dim, rope)
    }

    fn qk_norm_rope(
        &self,
        q: &mut CudaAct,
        k: &mut CudaAct,
        norms: Option<QkNorm<'_, CudaVec>>,
        positions: &[u32],
        head_dim: usize,
        rope: &Rope,
    ) {
        ops::qk_norm_rope(&self.ctx, q, k, norms, positions, head_dim, rope)
    }

    fn glu(&self, gate: &CudaAct, up: &CudaAct, act: Activation) -> CudaAct {
        ops::glu(&self.ctx, gate, up, act)
    }

    fn glu_clamped(&self, gate: &CudaAct, up: &CudaAct, act: Activation, limit: f32) -> CudaAct {
        ops::glu_clamped(&self.ctx, gate, up, act, limit)
    }

    fn scale(&self, x: &mut CudaAct, c: f32) {
        ops::scale(&self.ctx, x, c)
    }

    fn mat_gate_up(&self, gate: &TensorView, up: &TensorView) -> Result<Option<CudaMat>, BackendError> {
        ops::mat_gate_up(&self.ctx, gate, up)
    }

    fn glu_packed(&self, y: &CudaAct, act: Activation) -> CudaAct {
        ops::glu_packed(&self.ctx, y, act)
    }

    fn matmul_glu(&self, x: &CudaAct, gu: &CudaMat, act: Activation) -> CudaAct {
        matmul::matmul_glu(&self.ctx, x, gu, act)
    }

    fn norm_matmul_glu(
        &self,
        x: &CudaAct,
        nw: &CudaVec,
        eps: f32,
        one_plus: bool,
        gu: &CudaMat,
        act: Activation,
    ) -> CudaAct {
        matmul::norm_matmul_glu(&self.ctx, x, nw, eps, one_plus, gu, act)
    }

    fn attention(
        &self,
        q: &CudaAct,
        k: &CudaAct,
        v: &CudaAct,
        kv: &mut CudaKv,
        meta: &AttnMeta,
        p: &AttnParams,
    ) -> CudaAct {
        match kv.shape.latent {
            true => attention_mla::attention(&self.ctx, q, k, kv, meta, p),
            false => attention::attention(&self.ctx, q, k, v, kv, meta, p),
        }
    }

    /// Attention sinks run the trait's host default (tf_backend on_host.rs `attention_sinks`):
    /// the round's K/V blocks read back, the reference attention, the output uploaded.
    fn check_attention_sinks(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// Experts with biases take the host-driven expert path, each bias added after its matmul
    /// (moe.rs `with_biases`).
    fn check_expert_biases(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn check_attention_cached(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn head_copy(&self, w: &tf_backend::HeadWeights<'_>) -> Option<CudaVec> {
        Some(self.vec(w.host))
    }

    fn head_matmul(&self, x: &CudaAct, w: &tf_backend::HeadWeights<'_>, copy: Option<&CudaVec>) -> CudaAct {
        match copy {
            Some(v) => heads::head_matmul(&self.ctx, x, v, w.heads, w.out),
            None => {
                let y = tf_backend::heads::head_matmul(&self.download(x), x.rows, w);
                self.upload(&y, x.rows, w.heads * w.out)
            }
        }
    }

    fn concat_heads(&self, a: &CudaAct, b: &CudaAct, heads: usize) -> CudaAct {
        heads::concat_heads(&self.ctx, a, b, heads)
    }

    fn new_exchange(&self, size: usize) -> Option<tf_backend::Exchange> {
        (!self.tp_host_sums && size > 1)
            .then(|| std::sync::Arc::new(exchange::Exchange::new(size)) as tf_backend::Exchange)
    }

    fn join_exchange(&self, ex: &tf_backend::Exchange, rank: usize) -> Result<(), BackendError> {
        if self.graphs_on {
            return Err(BackendError::Unsupported(
                "a tensor-parallel rank on CUDA decodes op by op: start it with CUDA graphs off".into(),
            ));
        }
        let Ok(ex) = ex.clone().downcast::<exchange::Exchange>() else {
            return Err(BackendError::Unsupported("another backend's exchange".into()));
        };
        let joined = exchange::join(&self.ctx, ex, rank)?;
        *self.joined.lock().unwrap_or_else(|p| p.into_inner()) = Some(joined);
        Ok(())
    }

    fn all_reduce_on_device(&self, x: &mut CudaAct, barrier: &mut dyn FnMut() -> bool) -> Option<Result<(), String>> {
        let mut joined = self.joined.lock().unwrap_or_else(|p| p.into_inner());
        let j = joined.as_mut()?;
        Some(exchange::all_reduce(&self.ctx, j, x, barrier))
    }

    fn gather_cols_on_device(
        &self,
        x: &CudaAct,
        total: usize,
        barrier: &mut dyn FnMut() -> bool,
    ) -> Option<Result<Option<CudaAct>, String>> {
        let mut joined = self.joined.lock().unwrap_or_else(|p| p.into_inner());
        let j = joined.as_mut()?;
        Some(exchange::gather_cols(&self.ctx, j, x, total, barrier))
    }

    fn attention_cached(&self, q: &CudaAct, kv: &CudaKv, meta: &AttnMeta, p: &AttnParams) -> CudaAct {
        match kv.shape.latent {
            true => attention_mla::attention_cached(&self.ctx, q, kv, meta, p),
            false => attention::attention_cached(&self.ctx, q, kv, meta, p),
        }
    }

    fn select_rows(&self, x: &CudaAct, rows: &[usize]) -> CudaAct {
        ops::select_rows(&self.ctx, x, rows)
    }

    fn softcap(&self, x: &mut CudaAct, cap: f32) {
        ops::softcap(&self.ctx, x, cap)
    }

    fn add_bias(&self, x: &mut CudaAct, bias: &CudaVec) {
        ops::add_bias(&self.ctx, x, bias)
    }

    fn add_sigmoid_scaled(&self, x: &mut CudaAct, y: &CudaAct, g: &CudaAct) {
        ops::add_sigmoid_scaled(&self.ctx, x, y, g)
    }

    fn causal_conv1d(
        &self,
        x: &CudaAct,
        p: &tf_backend::Conv1d<'_, CudaVec>,
        st: &mut CudaState,
        meta: &AttnMeta,
    ) -> CudaAct {
        if gdn::conv_fits(p.kernel) {
            return gdn::causal_conv1d(&self.ctx, x, p, st, meta);
        }
        let (rows, ch) = (x.rows, x.cols);
        let (w, bias) = (self.vec_values(p.weight), p.bias.map(|v| self.vec_values(v)));
        let xs = self.download(x);
        let y = tf_backend::on_host::with_slots(self, st, meta, |hs, m| {
            tf_backend::conv::causal_conv1d(&xs, ch, &w, bias.as_deref(), p.kernel, p.silu, hs, m)
        });
        self.upload(&y, rows, ch)
    }

    fn gated_delta_rule(
        &self,
        qkv: &CudaAct,
        a: &CudaAct,
        b: &CudaAct,
        p: &tf_backend::Gdn<'_, CudaVec>,
        st: &mut CudaState,
        meta: &AttnMeta,
    ) -> CudaAct {
        if gdn::rule_fits(p) {
            return gdn::gated_delta_rule(&self.ctx, qkv, a, b, p, st, meta);
        }
        let sh = tf_backend::gdn::GdnShape::of(p);
        let (a_log, dt) = (self.vec_values(p.a_log), self.vec_values(p.dt_bias));
        let (q, av, bv) = (self.download(qkv), self.download(a), self.download(b));
        let y = tf_backend::on_host::with_slots(self, st, meta, |hs, m| {
            tf_backend::gdn::gated_delta_rule(sh, &q, &av, &bv, &a_log, &dt, p.state_offset, hs, m)
        });
        self.upload(&y, qkv.rows, sh.hv * sh.dv)
    }

    fn rms_norm_gated(&self, x: &CudaAct, z: &CudaAct, w: &CudaVec, eps: f32) -> CudaAct {
        gdn::rms_norm_gated(&self.ctx, x, z, w, eps)
    }

    fn mul_sigmoid(&self, x: &mut CudaAct, gate: &CudaAct) {
        gdn::mul_sigmoid(&self.ctx, x, gate)
    }

    fn ssd_scan(
        &self,
        xbc: &CudaAct,
        dt: &CudaAct,
        p: &tf_backend::Ssd<'_, CudaVec>,
        st: &mut CudaState,
        meta: &AttnMeta,
    ) -> CudaAct {
        if ssd::scan_fits(p) {
            return ssd::ssd_scan(&self.ctx, xbc, dt, p, st, meta);
        }
        let sh = tf_backend::ssd::SsdShape::of(p);
        let heads = [self.vec_values(p.a_log), self.vec_values(p.d), self.vec_values(p.dt_bias)].concat();
        let (x, d) = (self.download(xbc), self.download(dt));
        let y = tf_backend::on_host::with_slots(self, st, meta, |hs, m| {
            tf_backend::ssd::ssd_scan(sh, &x, &d, &heads, p.state_offset, hs, m)
        });
        self.upload(&y, xbc.rows, sh.h * sh.p)
    }

    fn rms_norm_gated_grouped(&self, x: &CudaAct, z: &CudaAct, w: &CudaVec, group: usize, eps: f32) -> CudaAct {
        ssd::rms_norm_gated_grouped(&self.ctx, x, z, w, group, eps)
    }

    fn short_conv(
        &self,
        bcx: &CudaAct,
        p: &tf_backend::ShortConv<'_, CudaVec>,
        st: &mut CudaState,
        meta: &AttnMeta,
    ) -> CudaAct {
        short_conv::short_conv(&self.ctx, bcx, p, st, meta)
    }

    fn moe(&self, x: &CudaAct, router_logits: &CudaAct, experts: &Experts<CudaMat, CudaVec>, p: &MoeParams) -> CudaAct {
        moe::moe(&self.ctx, x, router_logits, experts, p)
    }

    fn activate(&self, x: &CudaAct, act: Activation) -> CudaAct {
        ops::activate(&self.ctx, x, act)
    }

    fn kv_dtype(&self) -> tf_core::DType {
        tf_core::DType::BF16
    }

    fn read_kv_blocks(&self, kv: &CudaKv, blocks: &[u32]) -> Vec<u8> {
        ops::read_kv_blocks(&self.ctx, kv, blocks)
    }

    fn write_kv_blocks(&self, kv: &mut CudaKv, blocks: &[u32], bytes: &[u8]) {
        ops::write_kv_blocks(&self.ctx, kv, blocks, bytes)
    }

    fn fresh_id(&self) -> u64 {
        1 + self.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    fn forward_round(
        &self,
        round: &tf_backend::Round<'_, CudaHeld>,
        kv: &mut [CudaKv],
        f: &mut tf_backend::RoundFn<'_, CudaKv, CudaAct, CudaHeld>,
    ) -> CudaAct {
        graph::forward_round(&self.ctx, &self.graphs, round, kv, f)
    }

    fn argmax_rows(&self, x: &CudaAct) -> Vec<u32> {
        let ids = ops::argmax_rows(&self.ctx, x);
        self.round_done();
        ids
    }

    fn argmax_rows_in_round(&self, x: &CudaAct) -> Vec<u32> {
        ops::argmax_rows(&self.ctx, x)
    }

    fn argmax_rows_held(&self, x: &CudaAct) -> CudaHeld {
        held::argmax_rows_held(&self.ctx, &self.held_spare, x)
    }

    fn held_ids(&self, h: &CudaHeld) -> Vec<u32> {
        let ids = held::held_ids(h);
        // Known ids were sampled from candidates, whose download ended their round.
        if !h.is_known() {
            self.round_done();
        }
        ids
    }

    fn hold_ids(&self, ids: &[u32]) -> CudaHeld {
        held::hold_ids(&self.ctx, &self.held_spare, ids)
    }

    fn candidate_capacity(&self) -> Option<usize> {
        // The engine's rows are drawn (draw.rs): a row the device leaves to the host costs that
        // row's download only.
        None
    }

    fn logprobs(&self, x: &CudaAct, queries: &[LogprobQuery]) -> Vec<RowLogprobs> {
        logprob::logprobs(&self.ctx, x, queries)
    }

    fn sample_candidates(&self, x: &mut CudaAct, rows: &[usize], queries: &[RowQuery]) -> Vec<Candidates> {
        let c = if queries.iter().all(draw::drawable) {
            draw::draw(&self.ctx, x, rows, queries)
        } else {
            sample::sample_candidates(&self.ctx, x, rows, queries)
        };
        self.round_done();
        c
    }
}
