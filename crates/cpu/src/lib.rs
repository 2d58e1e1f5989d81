//! The fast CPU backend: AVX2+FMA kernels chosen at run time (portable fallback), rayon over a
//! pool the backend owns, and one reduction order per output element, so every op is batch
//! invariant bit for bit (docs/architecture.md, the four promises). Host types are the reference backend's.

mod act_fn;
mod attention;
mod block_sparse;
mod fp8;
mod gdn;
mod heads;
mod kv;
mod matmul;
mod moe;
mod mxfp4;
mod ops;
mod picked;
mod quant;
mod sample;
mod simd;
mod sparse;
mod ssd;
#[cfg(test)]
mod testutil;

pub use kv::{CpuKv, HalfKv, KV_DTYPES, KvElem};
pub use quant::{IntDot, QuantActs};
pub use simd::Simd;

use rayon::{ThreadPool, ThreadPoolBuilder};
use tf_backend::{
    Activation, AttnMeta, AttnParams, Backend, BackendError, Candidates, Experts, Fp8Scales, HostMat, HostState,
    HostTensor, KvShape, MoeParams, Rope, RowQuery, StateShape, on_host,
};
use tf_core::DType;
use tf_formats::TensorView;

/// The fast CPU implementation of [`Backend`], over the reference backend's host types.
pub struct CpuBackend {
    pool: std::sync::Arc<ThreadPool>,
    simd: Simd,
    int_dot: IntDot,
    quant_acts: QuantActs,
    kv_dtype: DType,
}

/// Construction options of [`CpuBackend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Instruction set; refused where the CPU lacks it.
    pub simd: Simd,
    /// Instructions of the int8 path's integer dot products; refused where the CPU lacks them,
    /// and anything but portable unless `simd` is AVX2.
    pub int_dot: IntDot,
    /// How activations meet block-quantized weights.
    pub quant_acts: QuantActs,
    /// What the KV pools hold: f32 (the reference's values), bf16 or f16 (half the memory; each
    /// value rounded to nearest when written), q8_0 or q4_0 (ggml's blocks; each row quantized
    /// when written). One of [`KV_DTYPES`].
    pub kv_dtype: DType,
}

impl CpuOptions {
    /// `threads` workers, the best instruction sets of this CPU, the default quantized numerics.
    pub fn new(threads: usize) -> CpuOptions {
        CpuOptions {
            threads,
            simd: Simd::detect(),
            int_dot: IntDot::detect(),
            quant_acts: QuantActs::default(),
            kv_dtype: DType::F32,
        }
    }
}

impl CpuBackend {
    /// A backend on `threads` worker threads with the best instruction set this CPU has.
    pub fn new(threads: usize) -> Result<CpuBackend, BackendError> {
        CpuBackend::with_options(CpuOptions::new(threads))
    }

    /// A backend on `threads` worker threads with `simd` (and the best integer dot products it
    /// allows), refused where the CPU lacks it.
    pub fn with_simd(threads: usize, simd: Simd) -> Result<CpuBackend, BackendError> {
        let int_dot = if simd == Simd::Portable { IntDot::Portable } else { IntDot::detect() };
        CpuBackend::with_options(CpuOptions { simd, int_dot, ..CpuOptions::new(threads) })
    }

    /// A backend with every option given.
    pub fn with_options(o: CpuOptions) -> Result<CpuBackend, BackendError> {
        if o.threads == 0 {
            return Err(BackendError::Unsupported("cpu backend: threads must be at least 1".into()));
        }
        if !o.simd.available() {
            return Err(BackendError::Unsupported(format!("cpu backend: this CPU lacks {}", o.simd.name())));
        }
        if !o.int_dot.available() {
            return Err(BackendError::Unsupported(format!("cpu backend: this CPU lacks {}", o.int_dot.name())));
        }
        if o.int_dot != IntDot::Portable && o.simd != Simd::Avx2 {
            let d = o.int_dot.name();
            return Err(BackendError::Unsupported(format!("cpu backend: {d} dot products need the avx2 kernels")));
        }
        if !KV_DTYPES.contains(&o.kv_dtype) {
            let msg = format!("cpu backend: a KV cache of {} (expected f32, bf16, f16, q8_0 or q4_0)", o.kv_dtype);
            return Err(BackendError::Unsupported(msg));
        }
        let pool = ThreadPoolBuilder::new()
            .num_threads(o.threads)
            .thread_name(|i| format!("tf-cpu-{i}"))
            .build()
            .map_err(|e| BackendError::Device(format!("cpu backend: thread pool: {e}")))?;
        let pool = std::sync::Arc::new(pool);
        Ok(CpuBackend { pool, simd: o.simd, int_dot: o.int_dot, quant_acts: o.quant_acts, kv_dtype: o.kv_dtype })
    }

    /// Worker threads in the pool.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// The instruction set in use.
    pub fn simd(&self) -> Simd {
        self.simd
    }

    /// The integer dot products of the int8 path.
    pub fn int_dot(&self) -> IntDot {
        self.int_dot
    }

    /// How activations meet block-quantized weights.
    pub fn quant_acts(&self) -> QuantActs {
        self.quant_acts
    }
}

impl Backend for CpuBackend {
    type Act = HostTensor;
    type Mat = HostMat;
    type Vec = Vec<f32>;
    type Kv = CpuKv;
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

    fn sample_candidates(&self, x: &mut HostTensor, rows: &[usize], queries: &[RowQuery]) -> Vec<Candidates> {
        self.pool.install(|| sample::sample_candidates(x, rows, queries))
    }

    /// `cpu/` and the instruction sets: `cpu/avx2`, `cpu/avx2+avx512-vnni` (the int8 path's dot
    /// products where they differ), `cpu/portable`.
    fn name(&self) -> String {
        let (s, d) = (self.simd.name(), self.int_dot.name());
        if s == d || self.int_dot == IntDot::Portable { format!("cpu/{s}") } else { format!("cpu/{s}+{d}") }
    }

    fn mat(&self, t: &TensorView) -> Result<HostMat, BackendError> {
        HostMat::from_view(t)
    }

    fn mat_fp8(&self, t: &TensorView, scales: &Fp8Scales) -> Result<HostMat, BackendError> {
        HostMat::from_fp8(t, scales)
    }

    fn vec(&self, v: &[f32]) -> Vec<f32> {
        v.to_vec()
    }

    fn vec_values(&self, v: &Vec<f32>) -> Vec<f32> {
        v.clone()
    }

    fn causal_conv1d(
        &self,
        x: &HostTensor,
        p: &tf_backend::Conv1d<'_, Vec<f32>>,
        st: &mut HostState,
        meta: &AttnMeta,
    ) -> HostTensor {
        gdn::causal_conv1d(&self.pool, x, p.weight, p.bias.map(|b| &b[..]), p.kernel, p.silu, st, meta)
    }

    fn gated_delta_rule(
        &self,
        qkv: &HostTensor,
        a: &HostTensor,
        b: &HostTensor,
        p: &tf_backend::Gdn<'_, Vec<f32>>,
        st: &mut HostState,
        meta: &AttnMeta,
    ) -> HostTensor {
        let sh = tf_backend::gdn::GdnShape::of(p);
        gdn::gated_delta_rule(&self.pool, sh, qkv, a, b, p.a_log, p.dt_bias, p.state_offset, st, meta)
    }

    fn rms_norm_gated(&self, x: &HostTensor, z: &HostTensor, w: &Vec<f32>, eps: f32) -> HostTensor {
        gdn::rms_norm_gated(&self.pool, x, z, w, eps)
    }

    fn ssd_scan(
        &self,
        xbc: &HostTensor,
        dt: &HostTensor,
        p: &tf_backend::Ssd<'_, Vec<f32>>,
        st: &mut HostState,
        meta: &AttnMeta,
    ) -> HostTensor {
        let sh = tf_backend::ssd::SsdShape::of(p);
        ssd::ssd_scan(&self.pool, sh, xbc, dt, p.a_log, p.d, p.dt_bias, p.state_offset, st, meta)
    }

    fn rms_norm_gated_grouped(
        &self,
        x: &HostTensor,
        z: &HostTensor,
        w: &Vec<f32>,
        group: usize,
        eps: f32,
    ) -> HostTensor {
        ssd::rms_norm_gated_grouped(&self.pool, x, z, w, group, eps)
    }

    fn mul_sigmoid(&self, x: &mut HostTensor, gate: &HostTensor) {
        tf_backend::gdn::mul_sigmoid(&mut x.data, &gate.data);
    }

    fn kv(&self, shape: KvShape) -> Result<CpuKv, BackendError> {
        CpuKv::new(shape, self.kv_dtype)
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
        assert_eq!(data.len(), rows * cols, "upload: {} values for {rows}x{cols}", data.len());
        HostTensor { data: data.to_vec(), rows, cols }
    }

    fn download(&self, x: &HostTensor) -> Vec<f32> {
        x.data.clone()
    }

    fn shape(&self, x: &HostTensor) -> (usize, usize) {
        (x.rows, x.cols)
    }

    fn embed(&self, table: &HostMat, ids: &[u32], scale: f32) -> HostTensor {
        ops::embed(self, table, ids, scale)
    }

    fn matmul(&self, x: &HostTensor, w: &HostMat) -> HostTensor {
        match w.dtype {
            tf_core::DType::Quant(_) => quant::matmul(&self.pool, self.simd, self.int_dot, self.quant_acts, x, w),
            tf_core::DType::F8E4M3 | tf_core::DType::Mxfp4 => fp8::matmul(&self.pool, self.simd, x, w),
            _ => matmul::matmul(&self.pool, self.simd, x, w),
        }
    }

    /// Quantized weights share one quantization of `x` (its rows made once for all of them).
    fn matmul_many(&self, x: &HostTensor, ws: &[&HostMat]) -> Vec<HostTensor> {
        if ws.iter().all(|w| matches!(w.dtype, tf_core::DType::Quant(_))) {
            return quant::matmul_many(&self.pool, self.simd, self.int_dot, self.quant_acts, x, ws);
        }
        ws.iter().map(|w| self.matmul(x, w)).collect()
    }

    fn rms_norm(&self, x: &HostTensor, w: &Vec<f32>, eps: f32, one_plus: bool) -> HostTensor {
        ops::rms_norm(self, x, w, eps, one_plus)
    }

    fn add_assign(&self, x: &mut HostTensor, y: &HostTensor) {
        ops::add_assign(self, x, y)
    }

    fn rope(&self, x: &mut HostTensor, positions: &[u32], head_dim: usize, rope: &Rope) {
        ops::rope(self, x, positions, head_dim, rope)
    }

    fn glu(&self, gate: &HostTensor, up: &HostTensor, act: Activation) -> HostTensor {
        ops::glu(self, gate, up, act)
    }

    fn attention(
        &self,
        q: &HostTensor,
        k: &HostTensor,
        v: &HostTensor,
        kv: &mut CpuKv,
        meta: &AttnMeta,
        p: &AttnParams,
    ) -> HostTensor {
        attention::attention(self, q, k, v, kv, meta, p)
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
        kv: &mut CpuKv,
        meta: &AttnMeta,
        p: &AttnParams,
        sinks: &[f32],
    ) -> HostTensor {
        attention::attention_sinks(self, q, k, v, kv, meta, p, sinks)
    }

    fn check_attention_cached(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn attention_cached(&self, q: &HostTensor, kv: &CpuKv, meta: &AttnMeta, p: &AttnParams) -> HostTensor {
        attention::attention_cached(self, q, kv, meta, p)
    }

    fn index_blocks(
        &self,
        q: &HostTensor,
        k: &HostTensor,
        kv: &mut CpuKv,
        meta: &AttnMeta,
        p: &tf_backend::IndexParams,
    ) -> tf_backend::BlockPicks {
        if let CpuKv::F32(pool) = kv {
            return block_sparse::index_blocks(self, q, k, pool, meta, p);
        }
        let k = on_host::rounded_tensor(k.clone(), self.kv_dtype);
        on_host::with_blocks(self, kv, meta, |pool, local| block_sparse::index_blocks(self, q, &k, pool, local, p))
    }

    fn attention_blocks(
        &self,
        q: &HostTensor,
        k: &HostTensor,
        v: &HostTensor,
        kv: &mut CpuKv,
        meta: &AttnMeta,
        p: &AttnParams,
        picks: &tf_backend::BlockPicks,
    ) -> HostTensor {
        if let CpuKv::F32(pool) = kv {
            return block_sparse::attention_blocks(self, q, k, v, pool, meta, p, picks);
        }
        let (k, v) =
            (on_host::rounded_tensor(k.clone(), self.kv_dtype), on_host::rounded_tensor(v.clone(), self.kv_dtype));
        on_host::with_blocks(self, kv, meta, |pool, local| {
            block_sparse::attention_blocks(self, q, &k, &v, pool, local, p, picks)
        })
    }

    fn matmul_picked(&self, x: &HostTensor, w: &HostMat, picks: &[Vec<u32>]) -> Option<Vec<Vec<f32>>> {
        Some(picked::matmul_picked(&self.pool, x, w, picks))
    }

    fn head_copy(&self, w: &tf_backend::HeadWeights<'_>) -> Option<Vec<f32>> {
        Some(heads::transposed(w))
    }

    fn head_matmul(&self, x: &HostTensor, w: &tf_backend::HeadWeights<'_>, copy: Option<&Vec<f32>>) -> HostTensor {
        heads::head_matmul(&self.pool, x, w, copy.map(Vec::as_slice))
    }

    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    fn home(&self) -> Option<tf_backend::Home> {
        let pool = self.pool.clone();
        Some(std::sync::Arc::new(move |f: &mut (dyn FnMut() + Send)| pool.install(f)))
    }

    fn sparse_attention(
        &self,
        q: &HostTensor,
        index_q: &HostTensor,
        index_w: &HostTensor,
        rows: &HostTensor,
        kv: &mut CpuKv,
        meta: &AttnMeta,
        p: &AttnParams,
        ix: &tf_backend::DsaParams,
    ) -> HostTensor {
        if let CpuKv::F32(pool) = kv {
            return sparse::sparse_attention(self, q, index_q, index_w, rows, pool, meta, p, ix);
        }
        let rows = on_host::rounded_tensor(rows.clone(), self.kv_dtype);
        on_host::with_blocks(self, kv, meta, |pool, local| {
            sparse::sparse_attention(self, q, index_q, index_w, &rows, pool, local, p, ix)
        })
    }

    fn select_rows(&self, x: &HostTensor, rows: &[usize]) -> HostTensor {
        ops::select_rows(x, rows)
    }

    fn softcap(&self, x: &mut HostTensor, cap: f32) {
        ops::softcap(self, x, cap)
    }

    fn moe(
        &self,
        x: &HostTensor,
        router_logits: &HostTensor,
        experts: &Experts<HostMat, Vec<f32>>,
        p: &MoeParams,
    ) -> HostTensor {
        moe::moe(self, x, router_logits, experts, p)
    }

    fn kv_dtype(&self) -> DType {
        self.kv_dtype
    }

    fn read_kv_blocks(&self, kv: &CpuKv, blocks: &[u32]) -> Vec<u8> {
        kv.read_blocks(blocks)
    }

    fn write_kv_blocks(&self, kv: &mut CpuKv, blocks: &[u32], bytes: &[u8]) {
        kv.write_blocks(blocks, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_runs_on_the_backends_own_threads() {
        let one = CpuBackend::new(1).unwrap();
        assert_eq!(one.install(rayon::current_num_threads), 1);
        let two = CpuBackend::new(2).unwrap();
        assert_eq!(two.install(rayon::current_num_threads), 2);
    }

    #[test]
    fn a_loop_sent_home_runs_on_a_pool_thread_and_its_parallel_ops_inline() {
        for threads in [1, 2] {
            let b = CpuBackend::new(threads).unwrap();
            let home = b.home().expect("the CPU backend has threads of its own");
            let (mut on_pool, mut width, mut sum) = (false, 0, 0.0f32);
            home(&mut || {
                on_pool = rayon::current_thread_index().is_some();
                width = rayon::current_num_threads();
                // A matmul started from the loop (nested install, then the pool's tasks).
                let x = HostTensor { data: vec![1.0; 4 * 64], rows: 4, cols: 64 };
                let w = crate::testutil::mat(tf_core::DType::F32, 300, 64, &[0.5; 64 * 300]);
                sum = b.matmul(&x, &w).data.iter().sum();
            });
            assert!(on_pool && width == threads, "{threads} threads");
            assert_eq!(sum, 4.0 * 300.0 * 32.0);
        }
    }

    #[test]
    fn construction_checks_its_options() {
        assert!(CpuBackend::new(0).is_err());
        let b = CpuBackend::new(3).expect("three threads");
        assert_eq!(b.threads(), 3);
        assert_eq!(b.simd(), Simd::detect());
        assert!(CpuBackend::with_simd(1, Simd::Portable).is_ok());
        assert_eq!(CpuBackend::with_simd(1, Simd::Avx2).is_ok(), Simd::Avx2.available());
        assert_eq!(b.quant_acts(), QuantActs::Int8);
        let f = CpuBackend::with_options(CpuOptions { quant_acts: QuantActs::F32, ..CpuOptions::new(1) });
        assert_eq!(f.expect("f32 acts").quant_acts(), QuantActs::F32);
        assert_eq!(b.int_dot(), IntDot::detect());
        let portable = CpuBackend::with_simd(1, Simd::Portable).expect("portable");
        assert_eq!((portable.int_dot(), portable.name().as_str()), (IntDot::Portable, "cpu/portable"));
        if IntDot::Mixed.available() {
            assert_eq!(b.name(), "cpu/avx2+mixed-vnni", "the per-shape VNNI mix is the default where there is VNNI");
        } else if IntDot::Avx2.available() {
            assert_eq!(b.name(), "cpu/avx2", "AVX2's dots are the default without VNNI");
        }
        if IntDot::Avx512Vnni.available() {
            let o = CpuOptions { int_dot: IntDot::Avx512Vnni, ..CpuOptions::new(1) };
            assert_eq!(CpuBackend::with_options(o).expect("vnni").name(), "cpu/avx2+avx512-vnni");
        }
        let mixed = CpuOptions { simd: Simd::Portable, int_dot: IntDot::Avx2, ..CpuOptions::new(1) };
        let e = CpuBackend::with_options(mixed).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("avx2 dot products need the avx2 kernels"), "{e}");
    }
}
