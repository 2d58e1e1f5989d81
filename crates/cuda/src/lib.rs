//! The CUDA backend: every `Backend` op as a kernel of our own (CUDA C under `kernels/`, compiled
//! by NVRTC for the device at start and cached on disk), bf16 weights kept as bf16 and multiplied
//! on the tensor cores with f32 accumulation, a bf16 paged KV cache, f32 activations.
//!
//! Exactness (DESIGN.md principle 3): each kernel fixes the reduction order of every output
//! element independently of how many rows share the call. Matmuls cut K into at most 8 segments
//! whose length depends only on the weight's K; each segment is one MMA chain over its 16-wide k
//! steps, and the segments are summed left to right, whether a GEMV splits them across warps
//! (decode) or a tiled GEMM folds them in registers (prefill: on Hopper the wgmma kernel fed by
//! tensor-map copies, else the mma.sync one; wgmma's k steps give mma.sync's bits) or, for
//! 33-64 rows, leaves each to its own CTA and a fold kernel adds them in the same order. Attention
//! walks keys in 64-key blocks within 256-key chunks aligned to absolute positions and folds the
//! chunks left to right, in one CTA or split across CTAs plus a combine kernel; small decode rounds
//! take a warp-split kernel that holds a whole chunk and runs the same per-block step functions
//! (its four warps score one block each, then each runs the chunk's chain on a quarter of the
//! output dimensions), so its bits are the one-warp kernel's; on Hopper prefill rounds of head
//! width 128 take kernels/attention_wg.cu, the same steps with S and P V on warpgroup MMAs and K/V
//! copied by tensor map (tests/ops.rs checks it against the mma.sync kernel). So concurrent ==
//! solo, drafted == undrafted and chunked == whole, bit for bit. Fused ops (`matmul_many`,
//! `add_rms_norm`, `qk_norm_rope`, `matmul_add`: every matmul kernel can add its result into the
//! residual stream in its store) equal their unfused definitions bit for bit (tests/ops.rs).
//! Sampled rows are edited and their candidates chosen on the device with the host's operations
//! (sample.rs), so only those cross to the host, equal to tf_backend's `candidates` bit for bit.
//!
//! The MLP's gate and up weights are one packed weight (tf_backend `gate_up`: rows interleaved in
//! groups of 8, so each 16-row tile holds gate and up of the same 8 outputs); from 2 to 32 rows
//! the TMA GEMV and from 257 rows the wgmma GEMM apply the gated activation in their store and
//! write only its bf16 rounding (what the down projection reads), else `glu_packed` does so after
//! the matmul: the same bits either way.
//! Such activations hold bf16 only; their f32 values are widened on first use (tensor.rs).
//!
//! On Hopper, 1 to 32 rows (decode batches) take the TMA GEMV: persistent blocks whose warps each
//! stream one K segment through a ring of tensor-map copies that runs on across W tiles; more
//! rows take the wgmma GEMM, also persistent (one CTA an SM over its tiles, token tiles first).
//!
//! Every kernel opens with a programmatic-dependent-launch wait, so on sm_90 the next launch is
//! set up while the previous kernel runs (the GEMV loads its first weights before the wait,
//! `TF_GEMV_PRE` stages a warp, the decode attention gathers its cached keys, qk_norm_rope makes
//! its rotations). Loads issued before a wait slow the kernel still running (they share its DRAM
//! queue), so what goes there is measured, not assumed (scripts/device/results/NOTES.md,
//! session 11).
//!
//! Decode rounds (one new token a sequence, dense models) are recorded as CUDA graphs per shape
//! and replayed with the round's inputs uploaded into the recording (graph.rs): the host then
//! queues a round in tens of microseconds instead of milliseconds, and each dependency between
//! kernels costs about half a microsecond less. `TF_CUDA_GRAPHS=0` runs them op by op.
//!
//! `TF_PROFILE_SKIP` (profile.rs, off unless set) leaves chosen decode ops out, for timing them
//! in place (`scripts/device/skip.sh`); results are then wrong. `TF_LAB_M1` turns on the one-row
//! GEMV of kernels/gemv_m1.cu (x staged once a block, the input RMSNorm made inside it; exact,
//! but slower on the H200 than the few-row GEMV plus a norm kernel, so off by default); its other
//! settings pick kernel variants for timing, all exact (profile.rs `M1Lab`). `TF_TRACE=FROM:TO`
//! (trace.rs) builds the kernels with a per-warp timeline of rounds FROM..TO written to a file
//! (`scripts/device/trace.sh`); without it the kernels' code is unchanged.
//!
//! cudarc loads the driver at run time: this crate builds and its tests run (skipping) on
//! machines without CUDA.

mod attention;
mod device;
mod error;
mod gemv_m1;
mod graph;
mod graph_pad;
mod held;
pub mod limits;
mod logprob;
mod matmul;
mod moe;
mod nvrtc;
mod ops;
mod profile;
mod sample;
mod tensor;
mod tma;
mod trace;

pub use device::CudaOptions;
pub use error::CudaError;
pub use held::CudaHeld;
pub use tensor::{CudaAct, CudaKv, CudaMat, CudaVec};

use device::Device;
use profile::Skip;
use std::sync::Mutex;
use tf_backend::{
    Activation, AttnMeta, AttnParams, Backend, BackendError, Candidates, Experts, KvShape, LogprobQuery, MoeParams,
    QkNorm, Rope, RowLogprobs, RowQuery,
};
use tf_formats::TensorView;

/// Whether a CUDA driver library can be loaded on this machine (no device needed).
pub fn driver_present() -> bool {
    // SAFETY: only probes whether the shared library can be opened.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Host data uploaded once and reused while it is unchanged (positions and attention metadata
/// are the same for every layer of a round).
#[derive(Default)]
struct Caches {
    positions: Option<(Vec<u32>, cudarc::driver::CudaSlice<u32>)>,
    ropes: Vec<(Vec<f32>, cudarc::driver::CudaSlice<f32>)>,
    attn: Option<attention::MetaUpload>,
    /// Resident blocks an SM of a kernel (by name) at a dynamic shared-memory size.
    occupancy: Vec<(&'static str, u32, u32)>,
    /// MoE layers' expert weight addresses on the device, by their host copy (moe.rs).
    experts: std::collections::HashMap<Vec<u64>, std::sync::Arc<cudarc::driver::CudaSlice<u64>>>,
}

/// The CUDA implementation of [`Backend`] on one GPU.
pub struct CudaBackend {
    dev: Device,
    caches: Mutex<Caches>,
    skip: Skip,
    lab: profile::M1Lab,
    /// Stages a TMA GEMV warp loads before its launch wait (profile.rs `gemv_pre_from_env`).
    gemv_pre: usize,
    /// Per-shape TMA GEMV blocks and pre-wait stages (profile.rs `GemvTune`, `TF_GEMV_TUNE`).
    gemv_tune: profile::GemvTune,
    trace: Option<trace::Trace>,
    /// Decode rounds recorded as CUDA graphs and replayed (graph.rs).
    graphs: graph::Graphs,
    /// The last `fresh_id` handed out.
    ids: std::sync::atomic::AtomicU64,
    /// Pinned buffers for held ids' copies to the host (held.rs).
    held_spare: held::Spare,
}

impl CudaBackend {
    /// GPU `ordinal` with default options (no kernel cache, no include path).
    pub fn new(ordinal: usize) -> Result<CudaBackend, CudaError> {
        CudaBackend::with_options(ordinal, &CudaOptions::default())
    }

    /// GPU `ordinal` with `opts`.
    pub fn with_options(ordinal: usize, opts: &CudaOptions) -> Result<CudaBackend, CudaError> {
        let opts = CudaOptions { trace: opts.trace.or_else(trace::from_env), ..opts.clone() };
        let dev = Device::new(ordinal, &opts)?;
        let trace = opts.trace.map(|r| trace::Trace::new(&dev, r));
        Ok(CudaBackend {
            dev,
            trace,
            graphs: graph::Graphs::new(!opts.no_graphs && Skip::from_env().is_none()),
            ids: Default::default(),
            held_spare: Default::default(),
            caches: Mutex::new(Caches::default()),
            skip: Skip::from_env(),
            gemv_pre: profile::gemv_pre_from_env(matmul::GEMV_PRE),
            gemv_tune: profile::GemvTune::from_env(),
            lab: profile::M1Lab::parse(
                &opts.lab_m1.clone().or_else(|| std::env::var("TF_LAB_M1").ok()).unwrap_or_default(),
            ),
        })
    }

    /// The GPU's name as the driver reports it.
    pub fn device_name(&self) -> &str {
        &self.dev.name
    }

    /// Streaming multiprocessors on the GPU.
    pub fn num_sms(&self) -> usize {
        self.dev.num_sms
    }

    /// Mixture of experts over experts held in any container (`experts(e)`: gate, up, down).
    pub fn moe_by<'a>(
        &self,
        x: &CudaAct,
        router_logits: &CudaAct,
        experts: impl Fn(usize) -> [&'a CudaMat; 3],
        p: &MoeParams,
    ) -> CudaAct {
        moe::moe_by(self, x, router_logits, experts, p)
    }

    /// Decode rounds captured into CUDA graphs and rounds replayed from them so far (graph.rs).
    pub fn graph_counts(&self) -> (usize, usize) {
        *self.graphs.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until all queued device work is done.
    pub fn synchronize(&self) {
        self.dev.synchronize()
    }

    /// An unwritten activation (what a skipped op returns, profiling only).
    fn blank(&self, rows: usize, cols: usize) -> CudaAct {
        CudaAct::with_bf16(self.dev.alloc::<f32>(rows * cols), ops::bf16_out(self, rows, cols), rows, cols)
    }

    fn caches(&self) -> std::sync::MutexGuard<'_, Caches> {
        self.caches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets the uploaded positions, metadata and rope tables (after a dropped capture, whose
    /// uploads may have gone to the graph pool).
    fn clear_caches(&self) {
        let mut c = self.caches();
        (c.positions, c.attn) = (None, None);
        c.ropes.clear();
        c.experts.clear();
    }
}

impl Backend for CudaBackend {
    type Act = CudaAct;
    type Mat = CudaMat;
    type Vec = CudaVec;
    type Kv = CudaKv;
    type Held = CudaHeld;

    fn name(&self) -> String {
        format!("cuda:{}", self.dev.ordinal)
    }

    fn mat(&self, t: &TensorView) -> Result<CudaMat, BackendError> {
        ops::mat(self, t)
    }

    fn vec(&self, v: &[f32]) -> CudaVec {
        CudaVec { data: self.dev.upload(v), len: v.len() }
    }

    fn kv(&self, shape: KvShape) -> Result<CudaKv, BackendError> {
        ops::kv(self, shape)
    }

    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> CudaAct {
        assert_eq!(data.len(), rows * cols, "upload: {} values for {rows}x{cols}", data.len());
        CudaAct::new(self.dev.upload(data), rows, cols)
    }

    fn download(&self, x: &CudaAct) -> Vec<f32> {
        self.dev.download(x.data(self), x.len())
    }

    fn shape(&self, x: &CudaAct) -> (usize, usize) {
        (x.rows, x.cols)
    }

    fn embed(&self, table: &CudaMat, ids: &[u32], scale: f32) -> CudaAct {
        ops::embed(self, table, ids, scale)
    }

    fn embed_held(&self, table: &CudaMat, held: &CudaHeld, rows: &[u32], scale: f32) -> CudaAct {
        held::embed_held(self, table, held, rows, scale)
    }

    fn matmul(&self, x: &CudaAct, w: &CudaMat) -> CudaAct {
        if self.skip.skips(Skip::MATMUL, x.rows) && w.shape().0 < 100000 {
            return self.blank(x.rows, w.shape().0);
        }
        matmul::matmul(self, x, w)
    }

    fn matmul_many(&self, x: &CudaAct, ws: &[&CudaMat]) -> Vec<CudaAct> {
        if self.skip.skips(Skip::MATMUL, x.rows) && ws.iter().all(|w| w.shape().0 < 100000) {
            return ws.iter().map(|w| self.blank(x.rows, w.shape().0)).collect();
        }
        matmul::matmul_many(self, x, ws)
    }

    fn matmul_add(&self, x: &CudaAct, w: &CudaMat, h: &mut CudaAct) {
        if self.skip.skips(Skip::MATMUL, x.rows) {
            return;
        }
        matmul::matmul_add(self, x, w, h)
    }

    fn norm_matmul_many(&self, x: &CudaAct, nw: &CudaVec, eps: f32, one_plus: bool, ws: &[&CudaMat]) -> Vec<CudaAct> {
        if self.skip.skips(Skip::MATMUL, x.rows) && ws.iter().all(|w| w.shape().0 < 100000) {
            return ws.iter().map(|w| self.blank(x.rows, w.shape().0)).collect();
        }
        matmul::norm_matmul_many(self, x, nw, eps, one_plus, ws)
    }

    fn rms_norm(&self, x: &CudaAct, w: &CudaVec, eps: f32, one_plus: bool) -> CudaAct {
        ops::rms_norm(self, x, w, eps, one_plus)
    }

    fn add_assign(&self, x: &mut CudaAct, y: &CudaAct) {
        ops::add_assign(self, x, y)
    }

    fn add_rms_norm(&self, x: &mut CudaAct, y: &CudaAct, w: &CudaVec, eps: f32, one_plus: bool) -> CudaAct {
        if self.skip.skips(Skip::ADD_NORM, x.rows) {
            return self.blank(x.rows, x.cols);
        }
        ops::add_rms_norm(self, x, y, w, eps, one_plus)
    }

    fn rope(&self, x: &mut CudaAct, positions: &[u32], head_dim: usize, rope: &Rope) {
        ops::rope(self, x, positions, head_dim, rope)
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
        if self.skip.skips(Skip::QK_ROPE, q.rows) {
            return;
        }
        ops::qk_norm_rope(self, q, k, norms, positions, head_dim, rope)
    }

    fn glu(&self, gate: &CudaAct, up: &CudaAct, act: Activation) -> CudaAct {
        if self.skip.skips(Skip::GLU, gate.rows) {
            return self.blank(gate.rows, gate.cols);
        }
        ops::glu(self, gate, up, act)
    }

    fn mat_gate_up(&self, gate: &TensorView, up: &TensorView) -> Result<Option<CudaMat>, BackendError> {
        ops::mat_gate_up(self, gate, up)
    }

    fn glu_packed(&self, y: &CudaAct, act: Activation) -> CudaAct {
        if self.skip.skips(Skip::GLU, y.rows) {
            return self.blank(y.rows, y.cols / 2);
        }
        ops::glu_packed(self, y, act)
    }

    fn matmul_glu(&self, x: &CudaAct, gu: &CudaMat, act: Activation) -> CudaAct {
        if self.skip.skips(Skip::MATMUL, x.rows) {
            return self.glu_packed(&self.blank(x.rows, gu.shape().0), act);
        }
        matmul::matmul_glu(self, x, gu, act)
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
        if self.skip.skips(Skip::MATMUL, x.rows) {
            return self.glu_packed(&self.blank(x.rows, gu.shape().0), act);
        }
        matmul::norm_matmul_glu(self, x, nw, eps, one_plus, gu, act)
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
        if self.skip.skips(Skip::ATTENTION, q.rows) {
            return self.blank(q.rows, p.num_heads * p.head_dim);
        }
        attention::attention(self, q, k, v, kv, meta, p)
    }

    fn select_rows(&self, x: &CudaAct, rows: &[usize]) -> CudaAct {
        ops::select_rows(self, x, rows)
    }

    fn softcap(&self, x: &mut CudaAct, cap: f32) {
        ops::softcap(self, x, cap)
    }

    fn moe(&self, x: &CudaAct, router_logits: &CudaAct, experts: &Experts<CudaMat>, p: &MoeParams) -> CudaAct {
        moe::moe(self, x, router_logits, experts, p)
    }

    fn kv_dtype(&self) -> tf_core::DType {
        tf_core::DType::BF16
    }

    fn read_kv_blocks(&self, kv: &CudaKv, blocks: &[u32]) -> Vec<u8> {
        ops::read_kv_blocks(self, kv, blocks)
    }

    fn write_kv_blocks(&self, kv: &mut CudaKv, blocks: &[u32], bytes: &[u8]) {
        ops::write_kv_blocks(self, kv, blocks, bytes)
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
        graph::forward_round(self, round, kv, f)
    }

    fn argmax_rows(&self, x: &CudaAct) -> Vec<u32> {
        let ids = ops::argmax_rows(self, x);
        if let Some(t) = &self.trace {
            t.round_done(&self.dev);
        }
        ids
    }

    fn argmax_rows_held(&self, x: &CudaAct) -> CudaHeld {
        held::argmax_rows_held(self, x)
    }

    fn held_ids(&self, h: &CudaHeld) -> Vec<u32> {
        held::held_ids(self, h)
    }

    fn candidate_capacity(&self) -> Option<usize> {
        Some(sample::CAP)
    }

    fn logprobs(&self, x: &CudaAct, queries: &[LogprobQuery]) -> Vec<RowLogprobs> {
        logprob::logprobs(self, x, queries)
    }

    fn sample_candidates(&self, x: &mut CudaAct, rows: &[usize], queries: &[RowQuery]) -> Vec<Candidates> {
        let c = sample::sample_candidates(self, x, rows, queries);
        if let Some(t) = &self.trace {
            t.round_done(&self.dev);
        }
        c
    }
}
