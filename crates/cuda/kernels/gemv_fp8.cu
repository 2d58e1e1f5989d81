// Few-row y = x @ W^T (M <= 8 NT rows) over an FP8 weight (fp8.cu's layout), reading one byte a
// weight: gemm.cu's GEMV_KERNEL with W's codes streamed instead of bf16, each A fragment made in
// registers by fp8x2_bf16x2 (the bf16 weight's very values) before the same MMA. The same
// segments (gemm_seg_len), the same chain per segment, the same fold in order: each output has
// the bits of the bf16 GEMV (and so of every bf16 matmul kernel) over the dequantized weight.
//
// A block takes one 16-row tile of W; warp w streams segment w's codes and x through a private
// cp.async ring of ST stages of U k tiles (16 rows of U * 16 code bytes, then the x rows, each
// padded by 16 bytes). The lane (g, c) reads the codes of its fragment (rows g and g + 8, k 2c,
// 2c + 1, 2c + 8, 2c + 9 of each k tile) and takes the scales of its two rows' blocks: a 16-wide
// k tile lies in one block column (bw a multiple of 16, or one block column: matmul.rs checks),
// so a scale is read from global memory only where the segment's walk enters a new column.
// One launch serves up to three weights of the same x, as gemm.cu's GEMV does.

#define GF_WS(U) ((U) * 16 + 16)  // bytes of one W row in a stage (U k tiles of codes, padded)

// PACK (moe.cu): the block takes GEMV_W / nseg tiles from tile * (GEMV_W / nseg) on, nseg warps
// each, as gemm.cu's gemv_body does; the same sums in the same order.
template <int NT, int U, int ST, bool PACK = false>
__device__ __forceinline__ void gemv_fp8_body(const unsigned char* __restrict__ w, const float* __restrict__ sc,
                                              float* __restrict__ y, int n, int tile, int bh, int bt, int gr, int gc,
                                              const u16* __restrict__ x, int m, int kt, int kp, int add) {
    constexpr int XROWS = 8 * NT;
    constexpr int WBYTES = 16 * GF_WS(U);
    constexpr int SBYTES = WBYTES + XROWS * GEMV_XS(U);
    extern __shared__ __align__(16) unsigned char gf_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, c = lane & 3;
    float* part = (float*)(gf_smem + GEMV_W * ST * SBYTES);  // [segment][NT][4][32 lanes]
    unsigned char* ring = gf_smem + warp * ST * SBYTES;
    const int len = gemm_seg_len(kt);
    const int nseg = (kt + len - 1) / len;
    int seg = warp;
    bool active = warp < nseg;
    if constexpr (PACK) {
        const int per = GEMV_W / nseg;
        seg = warp % nseg;
        tile = tile * per + warp / nseg;
        active = warp < per * nseg && tile * 16 < n;
    }
    const int j0 = seg * len, j1 = min(j0 + len, kt);
    float old[NT][4];
    if (active) {
        const unsigned char* src = w + (size_t)tile * 16 * kp;
        const int nst = (j1 - j0 + U - 1) / U;
        const int xrows = min(m, XROWS);
        auto issue_w = [&](int s) {  // codes: no earlier kernel writes them
            unsigned char* ws = ring + (s % ST) * SBYTES;
            for (int ch = lane; ch < 16 * U; ch += 32) {
                const int r = ch / U, part = ch % U, j = j0 + s * U + part;
                if (j < j1) cp_async16(ws + r * GF_WS(U) + part * 16, src + (size_t)r * kp + j * 16, 16);
            }
        };
        auto issue_x = [&](int s) {
            unsigned char* xs = ring + (s % ST) * SBYTES + WBYTES;
            for (int ch = lane; ch < xrows * 2 * U; ch += 32) {
                int r = ch / (2 * U), part = ch % (2 * U);
                int j = j0 + s * U + part / 2;
                bool ok = j < j1;
                const u16* xsrc = x + (size_t)r * kp + (ok ? (size_t)j * 16 + (part & 1) * 8 : 0);
                cp_async16(xs + r * GEMV_XS(U) + part * 16, xsrc, ok ? 16 : 0);
            }
        };
#pragma unroll
        for (int s = 0; s < ST - 1; ++s)
            if (s < nst) issue_w(s);
        tf_pdl_wait();
#pragma unroll
        for (int s = 0; s < ST - 1; ++s) {
            if (s < nst) issue_x(s);
            cp_commit();
        }
        if (seg == 0) gemv_load_old<NT>(y, old, tile, n, m, g, c, add);
        // This lane's two rows' scale rows, the block column of the segment's walk and its
        // scales, and the next column's (loaded a column ahead, off the MMA chain's path).
        const float* s0p = sc + (size_t)min((tile * 16 + g) / bh, gr - 1) * gc;
        const float* s1p = sc + (size_t)min((tile * 16 + g + 8) / bh, gr - 1) * gc;
        int cb = j0 / bt, jn = (cb + 1) * bt;
        float s0 = __ldg(s0p + min(cb, gc - 1)), s1 = __ldg(s1p + min(cb, gc - 1));
        float n0 = __ldg(s0p + min(cb + 1, gc - 1)), n1 = __ldg(s1p + min(cb + 1, gc - 1));
        float acc[NT][4];
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
        bool xok[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) xok[t] = t * 8 + g < m;
        for (int s = 0; s < nst; ++s) {
            __syncwarp();  // every lane is done reading the slot the next issue refills
            if (s + ST - 1 < nst) {
                issue_w(s + ST - 1);
                issue_x(s + ST - 1);
            }
            cp_commit();
            cp_wait<ST - 1>();
            __syncwarp();  // codes and x rows copied by other lanes are visible
            const unsigned char* base = ring + (s % ST) * SBYTES;
            const unsigned char* r0 = base + g * GF_WS(U) + 2 * c;
            const unsigned char* r1 = r0 + 8 * GF_WS(U);
            const unsigned char* xs = base + WBYTES;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int j = j0 + s * U + u;
                if (j < j1) {
                    if (j >= jn) {  // the walk enters the next block column
                        ++cb;
                        jn += bt;
                        s0 = n0;
                        s1 = n1;
                        n0 = __ldg(s0p + min(cb + 1, gc - 1));
                        n1 = __ldg(s1p + min(cb + 1, gc - 1));
                    }
                    const u32 a0 = fp8x2_bf16x2(*(const u16*)(r0 + u * 16), s0);
                    const u32 a1 = fp8x2_bf16x2(*(const u16*)(r1 + u * 16), s1);
                    const u32 a2 = fp8x2_bf16x2(*(const u16*)(r0 + u * 16 + 8), s0);
                    const u32 a3 = fp8x2_bf16x2(*(const u16*)(r1 + u * 16 + 8), s1);
#pragma unroll
                    for (int t = 0; t < NT; ++t) {
                        const unsigned char* xr = xs + (t * 8 + g) * GEMV_XS(U) + u * 32 + 4 * c;
                        const u32 b0 = xok[t] ? *(const u32*)xr : 0u;
                        const u32 b1 = xok[t] ? *(const u32*)(xr + 16) : 0u;
                        mma_bf16(acc[t], a0, a1, a2, a3, b0, b1);
                    }
                }
            }
        }
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) part[((warp * NT + t) * 4 + e) * 32 + lane] = acc[t][e];
    }
    __syncthreads();
    // The tile's first warp folds its segments (warp 0 without PACK).
    int first = 0;
    if constexpr (PACK) {
        if (!active || seg != 0) return;
        first = warp;
    } else {
        if (warp != 0) return;
    }
    float tot[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) tot[t][0] = tot[t][1] = tot[t][2] = tot[t][3] = 0.f;
    for (int sg = 0; sg < nseg; ++sg)
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                tot[t][e] = __fadd_rn(tot[t][e], part[(((first + sg) * NT + t) * 4 + e) * 32 + lane]);
    gemv_store<NT>(y, tot, old, tile, n, m, g, c, add);
}

// NT row groups of 8, U k tiles a stage, ST stages (smem.rs `gemv_fp8_stages`, `gemv_fp8_smem`);
// up to three weights of the same x (q/k/v, gate/up), block b taking tile b of their tiles in
// turn (nt0, nt1, the rest). Per weight: codes, scales, y, rows, block height, k tiles a block
// column holds (bw / 16; kt where there is one block column), the scale grid.
#define GEMV_FP8_KERNEL(NT, U, ST)                                                                                   \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_W) gemv_fp8_n##NT(                                       \
        const unsigned char* __restrict__ w0, const float* __restrict__ s0, float* __restrict__ y0, int n0,         \
        int bh0, int bt0, int gr0, int gc0, int nt0, const unsigned char* __restrict__ w1,                          \
        const float* __restrict__ s1, float* __restrict__ y1, int n1, int bh1, int bt1, int gr1, int gc1, int nt1, \
        const unsigned char* __restrict__ w2, const float* __restrict__ s2, float* __restrict__ y2, int n2,         \
        int bh2, int bt2, int gr2, int gc2, const u16* __restrict__ x, int m, int kt, int kp, int add) {            \
        tf_pdl_launch();                                                                                             \
        const int b = blockIdx.x;                                                                                    \
        if (b < nt0)                                                                                                 \
            gemv_fp8_body<NT, U, ST>(w0, s0, y0, n0, b, bh0, bt0, gr0, gc0, x, m, kt, kp, add);                      \
        else if (b < nt0 + nt1)                                                                                      \
            gemv_fp8_body<NT, U, ST>(w1, s1, y1, n1, b - nt0, bh1, bt1, gr1, gc1, x, m, kt, kp, add);                \
        else                                                                                                         \
            gemv_fp8_body<NT, U, ST>(w2, s2, y2, n2, b - nt0 - nt1, bh2, bt2, gr2, gc2, x, m, kt, kp, add);          \
    }
GEMV_FP8_KERNEL(1, 4, 4)
GEMV_FP8_KERNEL(2, 4, 4)
GEMV_FP8_KERNEL(4, 4, 3)
GEMV_FP8_KERNEL(8, 2, 3)
