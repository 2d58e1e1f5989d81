// One-row y = x @ W^T (decode at batch 1) in gemm.cu's reduction order with its MMA instruction,
// so the row gets the same bits as in every other matmul kernel.
//
// As in gemm.cu's few-row GEMV, warp w of a block streams K segment w of a 16-row W tile (of up to
// three weights sharing x) through a private cp.async ring, and warp 0 folds the segment sums in
// order. Here blocks are persistent (three an SM) and x is staged once a block instead of per
// stage, so the rings carry W only. x is either copied (bf16, from global memory) or, with
// NQ > 0, made here as the RMSNorm of an f32 row in rms_norm_body's sum order (ops.cu: NQ virtual
// threads a thread), which takes the norm kernel and its launch off the decode round's critical
// path. With add the results are added into y (y += x W^T: the residual add fused; the same f32
// addition as add_inplace). Not launched by the backend: on the H200 it ran slower than gemm.cu's
// few-row GEMV plus a norm kernel (docs/perf.md); kept in the module until a build without it is
// measured (its removal changes the module's PTX).

#define M1_U 4                  // k tiles per stage
#define M1_WS (M1_U * 32 + 16)  // bytes per W row per stage (16 of padding: conflict-free ldmatrix)

// The RMSNorm of the f32 row xf (cols values, weights nw) into the bf16 row xs (kp values, zero
// padded), in the order of `virt` virtual threads (ops.rs `norm_threads`): real thread r plays
// virtual threads r + 256 q (q < NQ), which hold values t, t + virt, ... (rms_norm_body, J = 16 / NQ).
template <int NQ>
__device__ __forceinline__ void m1_norm(const float* __restrict__ xf, const float* __restrict__ nw, u16* xs, int cols,
                                        int kp, float eps, int one_plus, int virt) {
    constexpr int J = 16 / NQ;
    __shared__ float scratch[32];
    const int lane = threadIdx.x & 31, V = virt;
    const int jn = (cols + V - 1) / V;
    float v[NQ][J], sc[NQ][J];
#pragma unroll
    for (int q = 0; q < NQ; ++q)
#pragma unroll
        for (int j = 0; j < J; ++j) {
            if (j >= jn) break;
            const int t = threadIdx.x + q * 256, i = t + j * V;
            sc[q][j] = t < V && i < cols ? (one_plus ? 1.0f + nw[i] : nw[i]) : 0.f;
        }
    tf_pdl_wait();
#pragma unroll
    for (int q = 0; q < NQ; ++q)
#pragma unroll
        for (int j = 0; j < J; ++j) {
            if (j >= jn) break;
            const int t = threadIdx.x + q * 256, i = t + j * V;
            v[q][j] = t < V && i < cols ? xf[i] : 0.f;
        }
#pragma unroll
    for (int q = 0; q < NQ; ++q) {
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            if (j >= jn) break;
            ss += v[q][j] * v[q][j];
        }
        ss = warp_sum(ss);
        const int vw = (threadIdx.x >> 5) + q * 8;  // this virtual warp
        if (lane == 0 && vw < 32) scratch[vw] = ss;
    }
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) t += i < (V >> 5) ? scratch[i] : 0.f;
    float inv = 1.0f / sqrtf(t / (float)cols + eps);
#pragma unroll
    for (int q = 0; q < NQ; ++q)
#pragma unroll
        for (int j = 0; j < J; ++j) {
            if (j >= jn) break;
            const int tv = threadIdx.x + q * 256, i = tv + j * V;
            if (tv < V && i < cols) {
                float o = v[q][j] * inv * sc[q][j];
                xs[i] = f2bf(o);
            }
        }
    for (int i = cols + threadIdx.x; i < kp; i += blockDim.x) xs[i] = 0;
}

template <int ST, int NQ>
__device__ __forceinline__ void gemv_m1_body(const u16* __restrict__ w0, float* __restrict__ y0, int n0, int nt0,
                                             const u16* __restrict__ w1, float* __restrict__ y1, int n1, int nt1,
                                             const u16* __restrict__ w2, float* __restrict__ y2, int n2, int ntot,
                                             const u16* __restrict__ xb, const float* __restrict__ xf,
                                             const float* __restrict__ nw, int cols, int kt, int kp, float eps,
                                             int one_plus, int virt, int add) {
    constexpr int SB = 16 * M1_WS;  // bytes of one stage
    extern __shared__ __align__(16) unsigned char m1_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, c = lane & 3;
    unsigned char* ring = m1_smem + warp * ST * SB;
    u16* xs = (u16*)(m1_smem + GEMV_W * ST * SB);
    float* part = (float*)(xs + kp);  // [tile parity][segment][row g, row g + 8][32 lanes]
    const int G = gridDim.x, b = blockIdx.x;
    const int t0 = (int)((long long)b * ntot / G), t1 = (int)((long long)(b + 1) * ntot / G);
    const int len = gemm_seg_len(kt);
    const int nseg = (kt + len - 1) / len;
    const int j0 = warp * len, j1 = min(j0 + len, kt);
    const int nst = warp < nseg ? (j1 - j0 + M1_U - 1) / M1_U : 0;  // stages of one tile
    const int total = nst * (t1 - t0);                               // stages this warp streams
    // Stage q: tile t0 + q / nst, stage q % nst of this warp's segment.
    auto issue = [&](int q) {
        const int t = t0 + q / nst, s = q % nst;
        const u16* w = t < nt0 ? w0 : t < nt0 + nt1 ? w1 : w2;
        const int tile = t < nt0 ? t : t < nt0 + nt1 ? t - nt0 : t - nt0 - nt1;
        const u16* src = w + (size_t)tile * 16 * kp;
        unsigned char* ws = ring + (q % ST) * SB;
#pragma unroll
        for (int ch = lane; ch < 32 * M1_U; ch += 32) {
            const int r = ch / (2 * M1_U), pc = ch % (2 * M1_U);
            const int j = j0 + s * M1_U + pc / 2;
            if (j < j1) cp_async16(ws + r * M1_WS + pc * 16, src + (size_t)r * kp + j * 16 + (pc & 1) * 8, 16);
        }
    };
    // The first stages' weights stream in while the previous kernel finishes (programmatic
    // dependent launch); one commit group per stage.
#pragma unroll
    for (int q = 0; q < ST - 1; ++q) {
        if (q < total) issue(q);
        cp_commit();
    }
    if (NQ > 0) {
        m1_norm<(NQ > 0 ? NQ : 1)>(xf, nw, xs, cols, kp, eps, one_plus, virt);
    } else {
        tf_pdl_wait();
        for (int i = threadIdx.x; i < kp / 8; i += blockDim.x) ((uint4*)xs)[i] = ((const uint4*)xb)[i];
    }
    __syncthreads();
    const bool xl = g == 0;  // x is the MMA's column 0: lanes 0-3 hold its B values
    int q = 0;
    for (int t = t0; t < t1; ++t) {
        float a4[4] = {0.f, 0.f, 0.f, 0.f};
        for (int s = 0; s < nst; ++s, ++q) {
            __syncwarp();  // every lane is done reading the slot the next issue refills
            if (q + ST - 1 < total) issue(q + ST - 1);
            cp_commit();
            cp_wait<ST - 1>();
            __syncwarp();  // W rows copied by other lanes are visible
            const unsigned char* wrow = ring + (q % ST) * SB + (lane & 15) * M1_WS + (lane >> 4) * 16;
#pragma unroll
            for (int u = 0; u < M1_U; ++u) {
                const int j = j0 + s * M1_U + u;
                if (j < j1) {
                    uint4 a;
                    ldsm_x4(a.x, a.y, a.z, a.w, wrow + u * 32);
                    const u16* xr = xs + j * 16 + 2 * c;
                    u32 b0 = xl ? *(const u32*)xr : 0u;
                    u32 b1 = xl ? *(const u32*)(xr + 8) : 0u;
                    mma_bf16(a4, a.x, a.y, a.z, a.w, b0, b1);
                }
            }
        }
        // Tile done: segment sums to shared memory (double buffered), warp 0 folds them in order.
        float* pb = part + (t & 1) * GEMV_W * 64;
        if (warp < nseg) {
            pb[(warp * 2) * 32 + lane] = a4[0];
            pb[(warp * 2 + 1) * 32 + lane] = a4[2];
        }
        __syncthreads();
        if (warp == 0 && c == 0) {
            float* y = t < nt0 ? y0 : t < nt0 + nt1 ? y1 : y2;
            const int n = t < nt0 ? n0 : t < nt0 + nt1 ? n1 : n2;
            const int tile = t < nt0 ? t : t < nt0 + nt1 ? t - nt0 : t - nt0 - nt1;
            const int row0 = tile * 16 + g, row1 = row0 + 8;
            const float p0 = add && row0 < n ? y[row0] : 0.f, p1 = add && row1 < n ? y[row1] : 0.f;
            float s0 = 0.f, s1 = 0.f;
            for (int sg = 0; sg < nseg; ++sg) {
                s0 = __fadd_rn(s0, pb[(sg * 2) * 32 + lane]);
                s1 = __fadd_rn(s1, pb[(sg * 2 + 1) * 32 + lane]);
            }
            if (row0 < n) y[row0] = add ? __fadd_rn(p0, s0) : s0;
            if (row1 < n) y[row1] = add ? __fadd_rn(p1, s1) : s1;
        }
    }
}

// ST stages a ring, NQ virtual norm threads a thread (0: x copied); up to three (W, y, n, ntiles)
// over ntot tiles in all. Persistent: block b takes a contiguous run of the tiles, so x is staged
// (and the norm made) once a block, and each warp's ring runs on across the tiles.
#define GEMV_M1_KERNEL(NAME, ST, NQ)                                                                               \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_W, 3) NAME(                                             \
        const u16* __restrict__ w0, float* __restrict__ y0, int n0, int nt0, const u16* __restrict__ w1,           \
        float* __restrict__ y1, int n1, int nt1, const u16* __restrict__ w2, float* __restrict__ y2, int n2,       \
        int ntot, const u16* __restrict__ xb, const float* __restrict__ xf, const float* __restrict__ nw, int cols, \
        int kt, int kp, float eps, int one_plus, int virt, int add) {                                              \
        tf_pdl_launch();                                                                                           \
        gemv_m1_body<ST, NQ>(w0, y0, n0, nt0, w1, y1, n1, nt1, w2, y2, n2, ntot, xb, xf, nw, cols, kt, kp, eps,     \
                             one_plus, virt, add);                                                                 \
    }
GEMV_M1_KERNEL(gemv_m1_s3, 3, 0)
GEMV_M1_KERNEL(gemv_m1_s4, 4, 0)
GEMV_M1_KERNEL(gemv_m1_norm1, 3, 1)
GEMV_M1_KERNEL(gemv_m1_norm2, 3, 2)
GEMV_M1_KERNEL(gemv_m1_norm4, 3, 4)
