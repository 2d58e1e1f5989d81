// Shared helpers for every TensorFold kernel: bf16/f16 conversions (no CUDA headers needed),
// warp reductions, and the PTX wrappers for cp.async, ldmatrix and the bf16 tensor-core MMA.
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define NEG_INF __int_as_float(0xff800000)

// f32 -> bf16, round to nearest even (NaN stays NaN).
__device__ __forceinline__ u16 f2bf(float x) {
    u32 u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}
__device__ __forceinline__ float bf2f(u16 h) { return __uint_as_float(((u32)h) << 16); }
__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u32 pack_bf2(float lo, float hi) { return (u32)f2bf(lo) | ((u32)f2bf(hi) << 16); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Fixed-order block sum (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = 0.f;
    for (int i = 0; i < nw; ++i) t += scratch[i];
    return t;
}

// Programmatic dependent launch (Hopper): every kernel first lets the next kernel in the stream
// be scheduled, then waits until the previous one has finished and its writes are visible. So
// the next launch's setup overlaps this kernel while stream order is kept exactly; without the
// launch attribute (or before sm_90) both are no-ops.
// Kernels that can start on inputs no earlier kernel writes (weights) split the two: launch,
// prefetch, then wait before the first read of an activation or any write.
__device__ __forceinline__ void tf_pdl_launch_() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void tf_pdl_wait_() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void tf_pdl_enter_() {
    tf_pdl_launch_();
    tf_pdl_wait_();
}

#ifdef TF_TRACE
// Kernel timeline in place (trace.rs, `TF_TRACE`; only in a build made for it): lane 0 of every
// warp records the global timer when the kernel starts (its first statement, before the launch
// wait), when its launch wait returns, at an optional mark (tf_trace_mark) and when the warp
// leaves the kernel's scope, with the kernel's name and position, into a per-SM run of the buffer.
struct TfTraceRec {
    u64 t0, t1;
    u32 block, warp_sm, grid, dwait, dmark;  // dwait, dmark: ns after t0 (0: none)
    char name[20];
};
__device__ TfTraceRec* tf_trace_buf;
__device__ u32 tf_trace_per_sm;
__device__ u32 tf_trace_n[256];
__shared__ u64 tf_trace_wait[32], tf_trace_mk[32];
__device__ __forceinline__ u64 tf_now() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void tf_trace_mark() {
    if ((threadIdx.x & 31) == 0) tf_trace_mk[threadIdx.x >> 5] = tf_now();
}
struct TfTrace {
    const char* name;
    u64 t0;
    __device__ __forceinline__ explicit TfTrace(const char* n) : name(n), t0(tf_now()) {
        if ((threadIdx.x & 31) == 0) tf_trace_wait[threadIdx.x >> 5] = tf_trace_mk[threadIdx.x >> 5] = 0;
    }
    __device__ __forceinline__ ~TfTrace() {
        if ((threadIdx.x & 31) != 0 || tf_trace_buf == nullptr) return;
        const u64 t1 = tf_now(), tw = tf_trace_wait[threadIdx.x >> 5], tm = tf_trace_mk[threadIdx.x >> 5];
        u32 sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        sm &= 255;
        const u32 i = atomicAdd(&tf_trace_n[sm], 1u);
        if (i >= tf_trace_per_sm) return;
        TfTraceRec& r = tf_trace_buf[(size_t)sm * tf_trace_per_sm + i];
        r.t0 = t0;
        r.t1 = t1;
        r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        r.warp_sm = (threadIdx.x >> 5) | (sm << 16);
        r.grid = gridDim.x * gridDim.y * gridDim.z;
        r.dwait = tw ? (u32)(tw - t0) : 0u;
        r.dmark = tm ? (u32)(tm - t0) : 0u;
        int k = 0;
        for (; k < 19 && name[k] != 0; ++k) r.name[k] = name[k];
        for (; k < 20; ++k) r.name[k] = 0;
    }
};
#define tf_pdl_launch()                  \
    TfTrace tf_trace_scope_(__func__); \
    tf_pdl_launch_()
#define tf_pdl_enter()                   \
    TfTrace tf_trace_scope_(__func__); \
    tf_pdl_enter_()
#define tf_pdl_wait()                                                             \
    do {                                                                          \
        tf_pdl_wait_();                                                           \
        if ((threadIdx.x & 31) == 0) tf_trace_wait[threadIdx.x >> 5] = tf_now(); \
    } while (0)
#else
#define tf_pdl_launch() tf_pdl_launch_()
#define tf_pdl_enter() tf_pdl_enter_()
#define tf_pdl_wait() tf_pdl_wait_()
__device__ __forceinline__ void tf_trace_mark() {}
#endif

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// 16-byte async copy global -> shared; `bytes` < 16 zero-fills the rest (0 fills all).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldsm_x2(u32& r0, u32& r1, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4(u32& r0, u32& r1, u32& r2, u32& r3, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(u32& r0, u32& r1, u32& r2, u32& r3, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_addr(p)));
}

// d += a * b for one m16n8k16 tile (bf16 inputs, f32 accumulate). Every kernel that multiplies
// bf16 weights goes through this one instruction with K walked in the same order, so an output
// element's value does not depend on which kernel or tile computed it.
__device__ __forceinline__ void mma_bf16(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 ldg_u32(const u32* p) {
    u32 v;
    asm volatile("ld.global.nc.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
}
