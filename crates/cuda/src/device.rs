//! The device: context, stream, the compiled kernel module, and raw kernel launches.

use crate::error::{CudaError, drv, must};
use crate::nvrtc;
use crate::options::CudaOptions;
use crate::smem::{
    ATTENTION_WG_SMEM, GEMM_SMEM, MAX_SMEM, MLA_SMEM, WGMMA_SMEM, attention_smem, attention_split_smem, gemv_fp8_smem,
    gemv_smem, gemv_tma_smem,
};
use cudarc::driver::sys::{CUfunction_attribute, CUmemPool_attribute};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr, result, sys,
};
use cudarc::nvrtc::Ptx;
use std::sync::Arc;

/// Dynamic shared memory small decode kernels launch with on Hopper (`Device::pad_smem`): with a
/// TMA GEMV block's 198-206 KB it is more than an SM's 228 KB.
const SMALL_PAD: u32 = 40 * 1024;

/// One kernel argument.
#[derive(Clone, Copy)]
pub(crate) enum Arg {
    /// A device pointer.
    P(u64),
    /// An `int`.
    I(i32),
    /// A `float`.
    F(f32),
    /// A `size_t`.
    Z(usize),
    /// A 128-byte `CUtensorMap`, passed by value.
    M([u64; 16]),
}

macro_rules! kernels {
    ($($name:ident),* $(,)?) => {
        /// Every kernel of the module, looked up once.
        pub(crate) struct Kernels { $(pub(crate) $name: CudaFunction,)* }
        impl Kernels {
            fn load(m: &Arc<CudaModule>) -> Result<Kernels, CudaError> {
                Ok(Kernels { $($name: drv(m.load_function(stringify!($name)), "loading a kernel")?,)* })
            }
        }
    };
}

kernels!(
    tp_sum,
    tp_interleave,
    head_matmul,
    concat_heads,
    pad_bf16,
    pack_gate_up_bf16,
    pad_fp8,
    fp8_to_bf16,
    embed_fp8,
    embed,
    rms_norm,
    rms_norm_q4,
    rms_norm_q4_bf16,
    rms_norm_j4,
    add_rms_norm,
    add_rms_norm_q4,
    add_rms_norm_j4,
    add_inplace,
    rope,
    qk_norm_rope,
    glu,
    glu_clamped,
    scale_inplace,
    glu_packed,
    widen_bf16,
    select_rows,
    select_rows_bf16,
    softcap,
    add_bias,
    add_sigmoid_scaled,
    to_bf16,
    fill_zero_u16,
    scatter_add,
    kv_write,
    fill_random_bf16,
    argmax_partial,
    argmax_combine,
    gather_ids,
    sample_edits,
    sample_max_partial,
    sample_select,
    sample_topk,
    sample_mass,
    sample_draw,
    logprob_partial,
    logprob_combine,
    gemv_bf16_n1,
    gemv_bf16_n2,
    gemv_bf16_n4,
    gemv_bf16_n8,
    gemv_fp8_n1,
    gemv_fp8_n2,
    gemv_fp8_n4,
    gemv_fp8_n8,
    gemv_tma_n1,
    gemv_tma_n2,
    gemv_tma_n4,
    gemv_tma_xr,
    gemv_tma_xr_glu,
    gemv_tma_glu_n1,
    gemv_tma_glu_n2,
    gemv_tma_glu_n4,
    moe_route,
    moe_plan,
    moe_plan_tiles,
    moe_gemv_n1,
    moe_gemv_n2,
    moe_gemv_n4,
    moe_gemv_n8,
    moe_gemv_fp8_n1,
    moe_gemv_fp8_n2,
    moe_gemv_fp8_n4,
    moe_gemv_fp8_n8,
    moe_combine,
    gemm_bf16,
    gemm_wgmma,
    gemm_wgmma_glu,
    gemm_wgmma_grouped,
    gemm_fold,
    gemm_simt_e1,
    gemm_simt_e4,
    attention_d16,
    attention_d32,
    attention_d64,
    attention_d128,
    attention_d256,
    attention_split_d64,
    attention_split_d128,
    attention_wg_d128,
    attention_combine,
    attention_mla,
    attention_mla_combine,
    kv_write_latent,
    conv1d_state,
    gdn_rule_d16,
    gdn_rule_d32,
    gdn_rule_d64,
    gdn_rule_d128,
    rms_norm_gated,
    mul_sigmoid,
    ssd_scan_n16,
    ssd_scan_n32,
    ssd_scan_n64,
    ssd_scan_n128,
    rms_norm_gated_grouped,
    short_conv_out,
    short_conv_window,
);

/// A started device.
pub struct Device {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    /// Copies off the compute stream's path, ordered against it by events: `to_host` takes
    /// picked ids to the host (held.rs), `to_device` a recorded round's inputs to the device
    /// (graph.rs), each while the compute stream goes on.
    pub(crate) to_host: Arc<CudaStream>,
    pub(crate) to_device: Arc<CudaStream>,
    pub(crate) k: Kernels,
    module: Arc<CudaModule>,
    pub(crate) ordinal: usize,
    pub(crate) num_sms: usize,
    pub(crate) name: String,
    /// Whether the kernels were built for sm_90a, so `gemm_wgmma` has a body.
    pub(crate) wgmma: bool,
    /// Whether launches allow programmatic dependent launch (sm_90 and later).
    pdl: bool,
    /// The next launch waits for everything before it to finish before it starts (no early
    /// start): set after a kernel whose output the next kernels read before their launch wait
    /// (a weight made in a scratch, which the GEMVs prefetch: fp8.rs).
    serial_next: std::sync::atomic::AtomicBool,
    /// Small kernels (q/k norm + RoPE, the decode norm, the gated activation) launched with
    /// `SMALL_PAD` bytes of dynamic shared memory (unused) in one-row rounds on Hopper
    /// (`small_smem`): an early-launched block then cannot sit beside a one-row TMA GEMV block
    /// (about 200 KB) and waits for one to leave, where sharing its SM made that GEMV block end
    /// late (H200, docs/perf.md). Empty elsewhere. Scheduling only, the same bits.
    padded: Vec<usize>,
    /// While a round is captured into a graph (graph.rs): where its allocations go.
    staged: std::sync::Mutex<Option<Capture>>,
    /// The memory pool captured rounds allocate from (made at the first capture).
    graph_pool: std::sync::OnceLock<Pool>,
}

/// A capture in progress: allocations and frees go to the graph pool on a side stream, so the
/// graph holds no memory nodes (they would end its programmatic dependencies) and none of its
/// buffers comes from the ordinary pool; `clean` turns false when an op does what a recording
/// cannot stand for (an upload or a download inside the round).
struct Capture {
    side: Arc<CudaStream>,
    pool: sys::CUmemoryPool,
    clean: bool,
    /// Pinned copies of what an op uploaded anyway (the capture is then dropped).
    pinned: Vec<cudarc::driver::PinnedHostSlice<u8>>,
}

/// A memory pool handle.
struct Pool(sys::CUmemoryPool);

// SAFETY: a pool handle may be used from any thread (the driver synchronizes it).
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}
// SAFETY: the pool handle inside is used only under the `staged` lock.
unsafe impl Send for Capture {}

impl Drop for Device {
    /// Destroys the graph pool, if one was made: the driver releases it once the recordings'
    /// buffers (dropped after the device, with the backend's recordings) are freed.
    fn drop(&mut self) {
        if let Some(pool) = self.graph_pool.take() {
            // Best effort on the way out: a failure only leaves the pool reserved, as before.
            let _ = self.ctx.bind_to_thread();
            // SAFETY: a pool this device made and no one destroyed; allocations still out of it
            // stay valid until freed (the driver defers the release to then).
            let _ = unsafe { sys::cuMemPoolDestroy(pool.0) };
        }
    }
}

impl Device {
    /// Opens GPU `ordinal`, compiles (or loads from cache) the kernels for its architecture.
    pub fn new(ordinal: usize, opts: &CudaOptions) -> Result<Device, CudaError> {
        // SAFETY: only probes whether the shared library can be opened.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaError::NoDriver);
        }
        drv(result::init(), "cuInit")?;
        let count = drv(CudaContext::device_count(), "counting devices")? as usize;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        if let Some(dir) = &opts.include_dir
            && !dir.is_dir()
        {
            return Err(CudaError::NoHeaders(dir.clone()));
        }
        let ctx = drv(CudaContext::new(ordinal), "creating the context")?;
        // One stream, ordered by construction: no per-buffer events (also required for graphs).
        // SAFETY: called before anything is allocated on this context.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = drv(ctx.compute_capability(), "reading the compute capability")?;
        if major < 8 {
            return Err(CudaError::OldDevice { ordinal, major, minor });
        }
        let stream = drv(ctx.new_stream(), "creating a stream")?;
        let to_host = drv(ctx.new_stream(), "creating a stream")?;
        let to_device = drv(ctx.new_stream(), "creating a stream")?;
        keep_pool_memory(&ctx)?;
        // sm_90a: Hopper's warpgroup MMA (wgmma) only exists in the arch-specific target.
        let wgmma = (major, minor) == (9, 0);
        let arch = if wgmma { "sm_90a".to_string() } else { format!("sm_{major}{minor}") };
        let trace = opts.trace.map(|_| opts.trace_mark);
        let cubin = nvrtc::compile(&arch, opts.include_dir.as_deref(), opts.cache_dir.as_deref(), trace)?;
        let module = drv(ctx.load_module(Ptx::from_binary(cubin)), "loading the kernel module")?;
        let k = Kernels::load(&module)?;
        let big = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        drv(k.gemm_bf16.set_attribute(big, GEMM_SMEM as i32), "raising the GEMM's shared memory")?;
        if wgmma {
            for f in [&k.gemm_wgmma, &k.gemm_wgmma_glu, &k.gemm_wgmma_grouped] {
                drv(f.set_attribute(big, WGMMA_SMEM as i32), "raising the wgmma GEMM's shared memory")?;
            }
            drv(
                k.attention_wg_d128.set_attribute(big, ATTENTION_WG_SMEM as i32),
                "raising wgmma attention's shared memory",
            )?;
            for (f, nt) in [
                (&k.gemv_tma_n1, 1),
                (&k.gemv_tma_n2, 2),
                (&k.gemv_tma_n4, 4),
                (&k.gemv_tma_glu_n1, 1),
                (&k.gemv_tma_glu_n2, 2),
                (&k.gemv_tma_glu_n4, 4),
            ] {
                drv(f.set_attribute(big, gemv_tma_smem(nt) as i32), "raising the TMA GEMV's shared memory")?;
            }
            for f in [&k.gemv_tma_xr, &k.gemv_tma_xr_glu] {
                drv(f.set_attribute(big, MAX_SMEM as i32), "raising the one-row TMA GEMV's shared memory")?;
            }
        }
        for (f, nt) in [
            (&k.gemv_bf16_n1, 1),
            (&k.gemv_bf16_n2, 2),
            (&k.gemv_bf16_n4, 4),
            (&k.gemv_bf16_n8, 8),
            (&k.moe_gemv_n1, 1),
            (&k.moe_gemv_n2, 2),
            (&k.moe_gemv_n4, 4),
            (&k.moe_gemv_n8, 8),
        ] {
            drv(f.set_attribute(big, gemv_smem(nt) as i32), "raising the GEMV's shared memory")?;
        }
        for (f, nt) in [
            (&k.gemv_fp8_n1, 1),
            (&k.gemv_fp8_n2, 2),
            (&k.gemv_fp8_n4, 4),
            (&k.gemv_fp8_n8, 8),
            (&k.moe_gemv_fp8_n1, 1),
            (&k.moe_gemv_fp8_n2, 2),
            (&k.moe_gemv_fp8_n4, 4),
            (&k.moe_gemv_fp8_n8, 8),
        ] {
            drv(f.set_attribute(big, gemv_fp8_smem(nt) as i32), "raising the FP8 GEMV's shared memory")?;
        }
        for (f, d) in [(&k.attention_d128, 128), (&k.attention_d256, 256)] {
            drv(f.set_attribute(big, attention_smem(d) as i32), "raising attention's shared memory")?;
        }
        for (f, d) in [(&k.attention_split_d64, 64), (&k.attention_split_d128, 128)] {
            drv(f.set_attribute(big, attention_split_smem(d) as i32), "raising split attention's shared memory")?;
        }
        drv(k.attention_mla.set_attribute(big, MLA_SMEM as i32), "raising latent attention's shared memory")?;
        let num_sms = drv(
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            "reading the SM count",
        )? as usize;
        let name = drv(ctx.name(), "reading the device name")?;
        let small = [&k.qk_norm_rope, &k.rms_norm_j4, &k.glu_packed];
        let padded = if wgmma { small.iter().map(|f| f.cu_function() as usize).collect() } else { Vec::new() };
        Ok(Device {
            padded,
            ctx,
            stream,
            to_host,
            to_device,
            k,
            module,
            ordinal,
            num_sms,
            name,
            wgmma,
            pdl: major >= 9 && !opts.no_pdl,
            serial_next: std::sync::atomic::AtomicBool::new(false),
            staged: Default::default(),
            graph_pool: Default::default(),
        })
    }

    /// Dynamic shared memory for small kernel `f` (which needs none) over `rows` rows: the
    /// padding in one-row rounds where `padded` names it, else none.
    pub(crate) fn small_smem(&self, f: &CudaFunction, rows: usize) -> u32 {
        if rows == 1 && self.padded.contains(&(f.cu_function() as usize)) { SMALL_PAD } else { 0 }
    }

    /// Writes `bytes` to the start of the module's global `name` (in stream order).
    pub(crate) fn set_global(&self, name: &str, bytes: &[u8]) {
        let mut g = must(self.module.get_global(name, &self.stream), "finding a module global");
        must(self.stream.memcpy_htod(bytes, &mut g), "writing a module global");
    }

    /// The first `n` bytes of the module's global `name` (waits for the stream).
    pub(crate) fn get_global(&self, name: &str, n: usize) -> Vec<u8> {
        let g = must(self.module.get_global(name, &self.stream), "finding a module global");
        let mut out = vec![0u8; n.min(g.len())];
        must(self.stream.memcpy_dtoh(&g.slice(..out.len()), &mut out), "reading a module global");
        out
    }

    /// Allocates `n` elements (at least one), contents undefined.
    pub(crate) fn alloc<T: DeviceRepr>(&self, n: usize) -> CudaSlice<T> {
        let staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = staged.as_ref() {
            let mut p: sys::CUdeviceptr = 0;
            let bytes = n.max(1) * std::mem::size_of::<T>();
            // SAFETY: an out-parameter of the documented type; the pool and stream are live.
            let r = unsafe { sys::cuMemAllocFromPoolAsync(&mut p, bytes, c.pool, c.side.cu_stream()).result() };
            must(r, "allocating device memory for a recorded round");
            // SAFETY: `p` is a fresh allocation of `n.max(1)` elements, freed on the side stream on drop.
            return unsafe { c.side.upgrade_device_ptr::<T>(p, n.max(1)) };
        }
        drop(staged);
        // SAFETY: every kernel writes what it allocates before it is read.
        must(unsafe { self.stream.alloc::<T>(n.max(1)) }, "allocating device memory")
    }

    /// Allocates `n` zeroed elements.
    pub(crate) fn zeros<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(&self, n: usize) -> CudaSlice<T> {
        let mut d = self.alloc::<T>(n);
        must(self.stream.memset_zeros(&mut d), "zeroing device memory");
        d
    }

    /// Copies host data to a new device buffer.
    pub(crate) fn upload<T: DeviceRepr>(&self, data: &[T]) -> CudaSlice<T> {
        let mut d = self.alloc::<T>(data.len());
        if data.is_empty() {
            return d;
        }
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = staged.as_mut() {
            // A capture cannot copy from pageable memory: stage it, and drop the capture.
            c.clean = false;
            let keep = &mut c.pinned;
            let n = std::mem::size_of_val(data);
            // SAFETY: filled below before any copy reads it.
            let mut pin = must(unsafe { self.ctx.alloc_pinned::<u8>(n) }, "allocating pinned memory");
            let host = must(pin.as_mut_slice(), "mapping pinned memory");
            // SAFETY: `data` is `n` initialized bytes; DeviceRepr types are plain data.
            host.copy_from_slice(unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, n) });
            // SAFETY: the pinned buffer lives until the capture ends (its graph is never launched).
            let r = unsafe { result::memcpy_htod_async(ptr(&d, &self.stream), host, self.stream.cu_stream()) };
            must(r, "copying to the device");
            keep.push(pin);
            return d;
        }
        must(self.stream.memcpy_htod(data, &mut d.slice_mut(..data.len())), "copying to the device");
        d
    }

    /// Starts capturing the compute stream into a graph (graph.rs); false when it cannot.
    pub(crate) fn begin_capture(&self) -> bool {
        let pool = match self.graph_pool.get() {
            Some(p) => p.0,
            None => match graph_pool(&self.ctx) {
                Ok(p) => self.graph_pool.get_or_init(|| Pool(p)).0,
                Err(_) => return false,
            },
        };
        let Ok(side) = self.ctx.new_stream() else { return false };
        *self.staged.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Capture { side, pool, clean: true, pinned: Vec::new() });
        if self.stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).is_err() {
            drop(self.end_capture_mode());
            return false;
        }
        true
    }

    /// Leaves capture mode (the caller ends the stream's capture, then drops what this returns:
    /// pinned buffers freed while the stream still captures broke the process on the H200):
    /// whether the round stayed within what a recording stands for, and the pinned buffers.
    pub(crate) fn end_capture_mode(&self) -> (bool, Vec<cudarc::driver::PinnedHostSlice<u8>>) {
        let c = self.staged.lock().unwrap_or_else(|p| p.into_inner()).take();
        c.map_or((false, Vec::new()), |c| (c.clean, c.pinned))
    }

    /// Whether a capture is open.
    pub(crate) fn capturing(&self) -> bool {
        self.staged.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Whether a capture is open, marking it spoiled if so: an op whose result a recording cannot
    /// stand for (a download would fail: it returns zeros; a kernel reading a cached upload of
    /// this round's host values would read the recording round's on every replay).
    pub(crate) fn spoil_capture(&self) -> bool {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        staged.as_mut().map(|c| c.clean = false).is_some()
    }

    /// Copies a device buffer's first `n` elements back (waits for the stream).
    pub(crate) fn download<T: DeviceRepr + Default + Clone>(&self, src: &CudaSlice<T>, n: usize) -> Vec<T> {
        let mut out = vec![T::default(); n];
        if n > 0 && !self.spoil_capture() {
            must(self.stream.memcpy_dtoh(&src.slice(..n), &mut out), "copying from the device");
        }
        out
    }

    /// Launches `f` on the backend's stream.
    pub(crate) fn launch(&self, f: &CudaFunction, grid: (u32, u32, u32), block: u32, smem: u32, args: &[Arg]) {
        let mut vals: Vec<[u64; 16]> = args
            .iter()
            .map(|a| {
                let mut v = [0u64; 16];
                match *a {
                    Arg::P(p) => v[0] = p,
                    Arg::I(i) => v[0] = i as u32 as u64,
                    Arg::F(f) => v[0] = f.to_bits() as u64,
                    Arg::Z(z) => v[0] = z as u64,
                    Arg::M(m) => v = m,
                }
                v
            })
            .collect();
        let mut ptrs: Vec<*mut std::ffi::c_void> = vals.iter_mut().map(|v| v.as_mut_ptr() as *mut _).collect();
        must(self.ctx.bind_to_thread(), "binding the context");
        let serial = self.serial_next.swap(false, std::sync::atomic::Ordering::Relaxed);
        if !self.pdl || serial {
            // SAFETY: each pointer addresses a value of the kernel parameter's size at its start
            // (little-endian 128-byte slots), the arguments match the kernel signatures in kernels/*.cu.
            let r = unsafe {
                result::launch_kernel(f.cu_function(), grid, (block, 1, 1), smem, self.stream.cu_stream(), &mut ptrs)
            };
            return must(r, "launching a kernel");
        }
        // Every kernel starts with `tf_pdl_enter` (kernels/common.cuh): it may be scheduled while
        // the previous kernel runs, and waits for it before touching memory.
        // SAFETY: a zeroed attribute is a valid value of the union; only the member named by `id` is set.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let cfg = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: smem,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: as above for the parameters; `cfg` and `attr` outlive the call.
        let r = unsafe { sys::cuLaunchKernelEx(&cfg, f.cu_function(), ptrs.as_mut_ptr(), std::ptr::null_mut()) };
        must(r.result(), "launching a kernel");
    }

    /// Makes the next launch start only once every kernel queued before it has finished: the
    /// kernels that prefetch weights before their launch wait (the GEMVs) may then read a weight
    /// the kernel just queued writes.
    pub(crate) fn serialize_next(&self) {
        self.serial_next.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits for all queued work.
    pub fn synchronize(&self) {
        must(self.stream.synchronize(), "synchronizing");
    }
}

/// The raw address of a buffer (single stream, no event tracking: nothing to record).
pub(crate) fn ptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

/// Blocks for a grid-stride loop over `n` elements.
pub(crate) fn grid_for(n: usize, block: u32) -> u32 {
    (n.div_ceil(block as usize)).clamp(1, 65535 * 4) as u32
}

/// A memory pool of the device that keeps what is freed (graph.rs: a recording's buffers stay
/// mapped while it lives).
fn graph_pool(ctx: &Arc<CudaContext>) -> Result<sys::CUmemoryPool, CudaError> {
    // SAFETY: zeroed pool properties are valid (no export handles); the fields set are documented.
    let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ctx.ordinal() as i32;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: an out-parameter and properties of the documented types.
    drv(unsafe { sys::cuMemPoolCreate(&mut pool, &props) }.result(), "creating a memory pool")?;
    keep_freed(pool)?;
    Ok(pool)
}

/// Keeps freed memory in the stream-ordered pool instead of returning it at every synchronize.
fn keep_pool_memory(ctx: &Arc<CudaContext>) -> Result<(), CudaError> {
    if !ctx.has_async_alloc() {
        return Ok(());
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: an out-parameter of the documented type.
    let r = unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) };
    drv(r.result(), "getting the memory pool")?;
    keep_freed(pool)
}

/// Sets `pool`'s release threshold to the most: what is freed stays mapped for reuse.
fn keep_freed(pool: sys::CUmemoryPool) -> Result<(), CudaError> {
    let mut threshold: u64 = u64::MAX;
    let attr = CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    // SAFETY: a live pool and an attribute value of the documented type.
    let r = unsafe { sys::cuMemPoolSetAttribute(pool, attr, &mut threshold as *mut u64 as *mut _) };
    drv(r.result(), "setting the pool's release threshold")
}
