// Lab-only (scripts/device/gemm_lab.cu, built with -DTF_ONE_CHAIN): a one-chain GEMV on wgmma, kept
// for the order experiment in results/NOTES.md; not part of the engine's kernels.
//
// Few-row y = x @ W^T (m <= 64 tokens) on wgmma: a block is one warpgroup and takes 64 rows of
// W (four 16-row tiles, one per warp, as the register A operand) for all of K, one accumulator
// per output element walking the k tiles in order (gemm.cu's reduction order), x as the B operand
// (N = 8 * NT tokens, rows past m read as zeros). Thread 0 streams each stage's W tiles (bulk
// copies, U k tiles per row tile) and x (tensor-map boxes of 64 k x N tokens) into a ring of
// GV_STAGES stages; the warpgroup chains U wgmmas per stage.

#define GV_STAGES 4

#ifdef TF_WGMMA
// d += a * B for one k step, B 16 x 8 tokens.
__device__ __forceinline__ void wgmma_n8(float* d, uint4 a, u64 desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3"
        "}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
// d += a * B for one k step, B 16 x 16 tokens.
__device__ __forceinline__ void wgmma_n16(float* d, uint4 a, u64 desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7"
        "}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
// d += a * B for one k step, B 16 x 32 tokens.
__device__ __forceinline__ void wgmma_n32(float* d, uint4 a, u64 desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
        "}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
// d += a * B for one k step, B 16 x 64 tokens.
__device__ __forceinline__ void wgmma_n64(float* d, uint4 a, u64 desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"
        "%27,%28,%29,%30,%31"
        "}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}

template <int NT>
__device__ __forceinline__ void wgmma_nt(float* d, uint4 a, u64 desc) {
    if constexpr (NT == 1) wgmma_n8(d, a, desc);
    else if constexpr (NT == 2) wgmma_n16(d, a, desc);
    else if constexpr (NT == 4) wgmma_n32(d, a, desc);
    else wgmma_n64(d, a, desc);
}
#endif

// Bytes of one ring stage: x boxes (U / 4 of N tokens x 128 bytes), then 4 row tiles x U k tiles.
#define GV_SB(NT, U) ((U) / 4 * 8 * (NT) * 128 + 4 * (U) * 512)

template <int NT, int U>
__device__ __forceinline__ void gemv_wg_body(const unsigned char* __restrict__ w, float* __restrict__ y, int n,
                                             int ntiles, int blk, const TmaDesc* xmap, int m, int kt) {
#ifdef TF_WGMMA
    constexpr int N = 8 * NT, XB = U / 4 * N * 128, SB = GV_SB(NT, U), NA = N / 2;
    extern __shared__ __align__(1024) unsigned char gv_raw[];
    __shared__ __align__(8) u64 full[GV_STAGES];
    const u32 ring = (smem_addr(gv_raw) + 1023) & ~1023u;
    unsigned char* ring_ptr = gv_raw + (ring - smem_addr(gv_raw));
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int tile0 = blk * 4, rts = min(4, ntiles - tile0);
    const int nst = (kt + U - 1) / U;
    if (tid == 0) {
        for (int s = 0; s < GV_STAGES; ++s) mbar_init(&full[s], 1);
        mbar_fence_init();
    }
    __syncthreads();
    auto issue = [&](int s) {  // thread 0
        const int slot = s % GV_STAGES, j0 = s * U, nj = min(U, kt - j0), nbox = (nj + 3) / 4;
        mbar_expect(&full[slot], nbox * N * 128 + rts * nj * 512);
        for (int b = 0; b < nbox; ++b) tma_load_2d(ring + slot * SB + b * N * 128, xmap, (j0 + 4 * b) * 16, 0, &full[slot]);
        for (int rt = 0; rt < rts; ++rt)
            bulk_g2s(ring_ptr + slot * SB + XB + rt * U * 512, w + ((size_t)(tile0 + rt) * kt + j0) * 512, nj * 512,
                     &full[slot]);
    };
    if (tid == 0)
        for (int s = 0; s < GV_STAGES && s < nst; ++s) issue(s);
    float acc[NA];
#pragma unroll
    for (int i = 0; i < NA; ++i) acc[i] = 0.f;
    for (int s = 0; s < nst; ++s) {
        const int slot = s % GV_STAGES, nj = min(U, kt - s * U);
        mbar_wait(&full[slot], (s / GV_STAGES) & 1);
        const uint4* as = (const uint4*)(ring_ptr + slot * SB + XB + warp * U * 512) + lane;
        uint4 a[U];
#pragma unroll
        for (int u = 0; u < U; ++u) a[u] = as[u * 32];
#pragma unroll
        for (int u = 0; u < U; ++u) asm volatile("" : "+r"(a[u].x), "+r"(a[u].y), "+r"(a[u].z), "+r"(a[u].w)::"memory");
#pragma unroll
        for (int i = 0; i < NA; ++i) asm volatile("" : "+f"(acc[i])::"memory");
        wg_fence();
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (u < nj) wgmma_nt<NT>(acc, a[u], wg_desc_sw128(ring + slot * SB + (u / 4) * N * 128 + (u % 4) * 32));
        wg_commit();
        wg_wait<0>();
#pragma unroll
        for (int i = 0; i < NA; ++i) asm volatile("" : "+f"(acc[i])::"memory");
        __syncthreads();  // the slot's fragments are read and its wgmmas retired: refill it
        if (tid == 0 && s + GV_STAGES < nst) issue(s + GV_STAGES);
    }
    const int g = lane >> 2, c = lane & 3, rowb = (tile0 + warp) * 16 + g;
#pragma unroll
    for (int i = 0; i < NA; ++i) {
        int row = rowb + ((i >> 1) & 1) * 8, tok = (i >> 2) * 8 + 2 * c + (i & 1);
        if (row < n && tok < m) y[(size_t)tok * n + row] = acc[i];
    }
#endif
}

// Up to three weights sharing x (q/k/v, gate/up): blocks [0, nb0) take W0, then W1, then W2.
#define GEMV_WG_KERNEL(NT, U)                                                                                      \
    extern "C" __global__ void __launch_bounds__(128) gemv_wg_n##NT(                                               \
        const unsigned char* __restrict__ w0, float* __restrict__ y0, int n0, int nt0, int nb0,                    \
        const unsigned char* __restrict__ w1, float* __restrict__ y1, int n1, int nt1, int nb1,                    \
        const unsigned char* __restrict__ w2, float* __restrict__ y2, int n2, int nt2,                             \
        const __grid_constant__ TmaDesc xmap, int m, int kt) {                                                     \
        tf_pdl_enter();                                                                                            \
        int b = blockIdx.x;                                                                                        \
        if (b < nb0)                                                                                               \
            gemv_wg_body<NT, U>(w0, y0, n0, nt0, b, &xmap, m, kt);                                                 \
        else if (b < nb0 + nb1)                                                                                    \
            gemv_wg_body<NT, U>(w1, y1, n1, nt1, b - nb0, &xmap, m, kt);                                           \
        else                                                                                                       \
            gemv_wg_body<NT, U>(w2, y2, n2, nt2, b - nb0 - nb1, &xmap, m, kt);                                     \
    }
GEMV_WG_KERNEL(1, 16)
GEMV_WG_KERNEL(2, 16)
GEMV_WG_KERNEL(4, 16)
GEMV_WG_KERNEL(8, 8)
