// Few-row y = x @ W^T on Hopper (decode: up to 32 rows of x), in gemm.cu's reduction order and
// with its MMA instruction, so rows give the same bits as in the other matmul kernels.
//
// Persistent blocks (at most one per SM) each take a contiguous run of 16-row W tiles (of up to
// three weights sharing x), the longer runs to the lower block indices. Warp w of a block owns K
// segment w (`gemm_seg_len`) of every tile in
// the run and streams it through a private ring of GT_ST stages: a stage is one tensor-map copy of
// 16 W rows x 64 k and one of the 8 NT x rows x 64 k, both in the 128-byte swizzle (conflict-free
// ldmatrix and B reads), issued by the warp's lane 0 and counted on one mbarrier. The ring runs on
// across tile boundaries, so a block ramps up once per launch, not once per tile; the first
// stages' weights stream in before the programmatic-dependent-launch wait. At each tile's end the
// warps leave their segment sums in shared memory (double buffered) and warp 0 folds them in order.

#define GT_W 8      // warps per block: one per K segment
#define GT_XR_ST 11  // ring stages of the one-row kernel (matmul.rs `gemv_tma_xr_smem`)

// Stages per warp ring for NT groups of 8 x rows: about 192 KB of ring in all. XR (one x row):
// the ring holds W boxes only and the row sits in shared memory after the barriers (one more a
// warp, for its segment of the row), loaded once.
template <int NT, bool XR = false>
struct GtCfg {
    static constexpr int XBYTES = XR ? 0 : NT * 8 * 128;  // x box: 8 NT rows x 64 k
    static constexpr int SBYTES = 2048 + XBYTES;          // W box (16 rows x 64 k) then x box
    static constexpr int ST = XR ? GT_XR_ST : NT == 1 ? 8 : NT == 2 ? 6 : 4;
    static constexpr int PART = NT * 4 * 32;              // floats of one warp's segment sums
    // ring (1 KB aligned), then 2 x GT_W partial sums, then the barriers (XR: then a barrier a
    // warp and the x row, sized on the host by matmul.rs `gemv_tma_xr_smem`)
    static constexpr int SMEM = 1024 + GT_W * ST * SBYTES + 2 * GT_W * PART * 4 + GT_W * ST * 8;
};

#ifdef TF_WGMMA
// K tiles u0 .. u0 + NU - 1 of one stage (W box at wb, x box at xb, both 128-byte swizzled): every
// ldmatrix and x read first, then the MMAs in k order (each row group's chain as before).
template <int NT, int NU>
__device__ __forceinline__ void gt_box(float (&acc)[NT][4], u32 wb, u32 xb, int lane, int g, int c, int u0 = 0) {
    const int r = lane & 15;
    u32 a[NU][4], b[NU][NT][2];
#pragma unroll
    for (int i = 0; i < NU; ++i) {
        const int u = u0 + i;
        const u32 wa = wb + r * 128 + ((((u * 2) + (lane >> 4)) ^ (r & 7)) << 4);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3]) : "r"(wa));
#pragma unroll
        for (int tt = 0; tt < NT; ++tt) {
            const u32 xr = xb + (tt * 8 + g) * 128 + 4 * c;
            asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(b[i][tt][0]) : "r"(xr + (((u * 2) ^ g) << 4)));
            asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(b[i][tt][1]) : "r"(xr + (((u * 2 + 1) ^ g) << 4)));
        }
    }
#pragma unroll
    for (int i = 0; i < NU; ++i)
#pragma unroll
        for (int tt = 0; tt < NT; ++tt) mma_bf16(acc[tt], a[i][0], a[i][1], a[i][2], a[i][3], b[i][tt][0], b[i][tt][1]);
}

// `bytes` (a multiple of 16) from global `src` to shared `dst` (both 16-byte aligned), counted on `bar`.
__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u64* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

// gt_box for one x row held whole in shared memory (xs: the box's first k): every B column is the
// row (a column of the MMA's product depends on its own B column only, so column 0 has gt_box's
// bits for a row of x), read as a broadcast by the lanes of each c.
template <int NU>
__device__ __forceinline__ void gt_box_xr(float (&acc)[1][4], u32 wb, u32 xs, int lane, int c, int u0 = 0) {
    const int r = lane & 15;
    u32 a[NU][4], b[NU][2];
#pragma unroll
    for (int i = 0; i < NU; ++i) {
        const int u = u0 + i;
        const u32 wa = wb + r * 128 + ((((u * 2) + (lane >> 4)) ^ (r & 7)) << 4);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3]) : "r"(wa));
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(b[i][0]) : "r"(xs + u * 32 + 4 * c));
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(b[i][1]) : "r"(xs + u * 32 + 16 + 4 * c));
    }
#pragma unroll
    for (int i = 0; i < NU; ++i) mma_bf16(acc[0], a[i][0], a[i][1], a[i][2], a[i][3], b[i][0], b[i][1]);
}

// GLU (one packed gate/up weight): tile t holds gate columns 8 t .. 8 t + 7 in its rows 0-7 and
// their up values in rows 8-15, so lane (g, c) stores bf16 act(gate) * up of column 8 t + g for
// its x rows to yb (row stride kp), from the sums gemv_store would have written (glu_packed's
// expression and rounding).
template <int NT, bool XR = false, bool GLU = false>
__device__ __forceinline__ void gemv_tma_body(const TmaDesc* w0, const TmaDesc* w1, const TmaDesc* w2, float* y0,
                                              float* y1, float* y2, int n0, int n1, int n2, int nt0, int nt1,
                                              int ntot, const TmaDesc* xmap, int m, int kt, int add, int pre_in,
                                              const u16* xg = nullptr, u16* yb = nullptr, int kp = 0, int act = 0) {
    typedef GtCfg<NT, XR> C;
    extern __shared__ __align__(1024) unsigned char gt_smem[];
    unsigned char* ring_p = (unsigned char*)(((size_t)gt_smem + 1023) & ~(size_t)1023);
    float* part = (float*)(ring_p + GT_W * C::ST * C::SBYTES);  // [2][GT_W][NT][4][32]
    u64* bars = (u64*)(part + 2 * GT_W * C::PART);               // [GT_W][ST]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, c = lane & 3;
    const int G = gridDim.x, b = blockIdx.x;
    // The first ntot % G blocks take one tile more: blocks are placed on SMs in index order, and
    // the last ones wait for SMs that a small kernel before still holds (the norm's one block,
    // decode attention's CTAs), so the late blocks get the shorter runs.
    const int tq = ntot / G, tr = ntot - tq * G;
    const int t0 = b * tq + min(b, tr), t1 = t0 + tq + (b < tr ? 1 : 0);
    const int len = gemm_seg_len(kt);
    const int nseg = (kt + len - 1) / len;
    const int j0 = warp * len, j1 = min(j0 + len, kt);
    const int nb = warp < nseg ? (j1 - j0 + 3) / 4 : 0;  // 64-wide boxes per tile of this segment
    const int total = nb * (t1 - t0);                    // stages this warp streams
    u64* full = bars + warp * C::ST;
    const u32 ring = smem_addr(ring_p) + warp * C::ST * C::SBYTES;
    // XR: one barrier a warp for its x segment after the ring's, then the row (k 0 at xrow).
    u64* xbar = bars + GT_W * C::ST + warp;
    const u32 xrow = XR ? smem_addr(bars + GT_W * C::ST + GT_W) : 0;
    if (lane == 0) {
        for (int s = 0; s < C::ST; ++s) mbar_init(&full[s], 1);
        if constexpr (XR) mbar_init(xbar, 1);
        mbar_fence_init();
    }
    __syncwarp();
    // Stage q: tile t0 + q / nb, box q % nb of the segment.
    auto issue_w = [&](int q) {
        const int t = t0 + q / nb, kc = (j0 + (q % nb) * 4) * 16;
        const TmaDesc* map = t < nt0 ? w0 : t < nt0 + nt1 ? w1 : w2;
        const int row = (t < nt0 ? t : t < nt0 + nt1 ? t - nt0 : t - nt0 - nt1) * 16;
        const int slot = q % C::ST;
        mbar_expect(&full[slot], C::SBYTES);
        tma_load_2d(ring + slot * C::SBYTES, map, kc, row, &full[slot]);
    };
    auto issue_x = [&](int q) {
        if constexpr (!XR) {
            const int slot = q % C::ST;
            tma_load_2d(ring + slot * C::SBYTES + 2048, xmap, (j0 + (q % nb) * 4) * 16, 0, &full[slot]);
        }
    };
    // XR: this warp's segment of the x row (32 bytes a k tile) as one bulk copy.
    auto issue_row = [&]() {
        if constexpr (XR) {
            if (nb > 0) {
                mbar_expect(xbar, (j1 - j0) * 32);
                bulk_load(xrow + j0 * 32, xg + j0 * 16, (j1 - j0) * 32, xbar);
            }
        }
    };
    // Up to `pre` stages of W stream in before the launch wait (the rest of the ring's first
    // stages right after it): loads issued while a small kernel before runs delay its own.
    const int pre = min(pre_in, C::ST - 1);
    constexpr bool one_loop = XR;
    if constexpr (one_loop) {
        // One loop issues every first stage, with the launch wait and then the x row's copy
        // inside it at stage `pre`: the stages after the wait run the very instructions the ones
        // before it ran. With a loop of their own after the wait, blocks on a TPC where decode
        // attention or qk_norm_rope had just run (their code, 74 and 27 KB, evicts the TPC's
        // instructions) fetched that loop's code for 4 us while the W stream waited (docs/perf.md,
        // 2026-12-03: o's x row landed 4.9 us after the wait on those blocks, 0.8 elsewhere;
        // 0.77 on all with the one loop).
#pragma unroll 1
        for (int q = 0; q < C::ST; ++q) {
            if (q == pre) {
                tf_pdl_wait();
                if (lane == 0) issue_row();
            }
            if (lane == 0 && q < C::ST - 1 && q < total) issue_w(q);
        }
    } else {
        if (lane == 0) {
            for (int q = 0; q < pre && q < total; ++q) issue_w(q);
        }
        tf_pdl_wait();
        if (lane == 0) {
            issue_row();  // ahead of the W stages still to issue
            for (int q = 0; q < C::ST - 1 && q < total; ++q) {
                if (q >= pre) issue_w(q);
                issue_x(q);
            }
        }
    }
    if constexpr (XR) {
        if (nb > 0) mbar_wait(xbar, 0);
    }
#ifdef TF_TRACE_MARK_X
    tf_trace_mark();  // trace build, mark X: the x row has landed
#endif
    float acc[NT][4];
    int q = 0;
    float old[NT][4];  // warp 0: y's values of tile t before the add
    for (int t = t0; t < t1; ++t) {
#pragma unroll
        for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
        if (warp == 0 && add) {
            const float* y = t < nt0 ? y0 : t < nt0 + nt1 ? y1 : y2;
            const int n = t < nt0 ? n0 : t < nt0 + nt1 ? n1 : n2;
            gemv_load_old<NT>(y, old, t < nt0 ? t : t < nt0 + nt1 ? t - nt0 : t - nt0 - nt1, n, m, g, c, add);
        }
        for (int i = 0; i < nb; ++i, ++q) {
            if (lane == 0 && q + C::ST - 1 < total) {  // refill the slot the previous stage freed
                issue_w(q + C::ST - 1);
                issue_x(q + C::ST - 1);
            }
            const int slot = q % C::ST;
            mbar_wait(&full[slot], (q / C::ST) & 1);
#if defined(TF_TRACE_MARK_S0)
            if (q == 0) tf_trace_mark();  // trace build, mark S0: the first W stage has landed
#elif defined(TF_TRACE_MARK_SL)
            if (q == nb - 1) tf_trace_mark();  // trace build, mark SL: the first tile's last W stage has landed
#endif
            const u32 wb = ring + slot * C::SBYTES, xb = wb + 2048;
            // A whole box (the usual case) loads all its fragments before the first MMA, with no
            // branch between them; a segment's last box may hold fewer k tiles.
            if constexpr (XR) {
                const u32 xs = xrow + (j0 + i * 4) * 32;
                if (j0 + i * 4 + 4 <= j1) {
                    gt_box_xr<4>(acc, wb, xs, lane, c);
                } else {
#pragma unroll
                    for (int u = 0; u < 4; ++u)
                        if (j0 + i * 4 + u < j1) gt_box_xr<1>(acc, wb, xs, lane, c, u);
                }
            } else if (j0 + i * 4 + 4 <= j1) {
                gt_box<NT, 4>(acc, wb, xb, lane, g, c);
            } else {
#pragma unroll
                for (int u = 0; u < 4; ++u)
                    if (j0 + i * 4 + u < j1) gt_box<NT, 1>(acc, wb, xb, lane, g, c, u);
            }
            __syncwarp();  // every lane is done with the slot before lane 0 refills it
        }
#if !defined(TF_TRACE_MARK_X) && !defined(TF_TRACE_MARK_S0) && !defined(TF_TRACE_MARK_SL)
        if (t == t0) tf_trace_mark();  // the trace build's first tile ends here (a no-op otherwise)
#endif
        // Tile done: segment sums to shared memory, then warp 0 folds them in segment order.
        float* pb = part + (t & 1) * GT_W * C::PART;
#pragma unroll
        for (int tt = 0; tt < NT; ++tt)
#pragma unroll
            for (int e = 0; e < 4; ++e) pb[((warp * NT + tt) * 4 + e) * 32 + lane] = acc[tt][e];
        __syncthreads();
        if (warp == 0) {
            float* y = t < nt0 ? y0 : t < nt0 + nt1 ? y1 : y2;
            const int n = t < nt0 ? n0 : t < nt0 + nt1 ? n1 : n2;
            const int tile = t < nt0 ? t : t < nt0 + nt1 ? t - nt0 : t - nt0 - nt1;
            float tot[NT][4];
#pragma unroll
            for (int tt = 0; tt < NT; ++tt) tot[tt][0] = tot[tt][1] = tot[tt][2] = tot[tt][3] = 0.f;
            for (int sg = 0; sg < nseg; ++sg)
#pragma unroll
                for (int tt = 0; tt < NT; ++tt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        tot[tt][e] = __fadd_rn(tot[tt][e], pb[((sg * NT + tt) * 4 + e) * 32 + lane]);
            if constexpr (GLU) {
#pragma unroll
                for (int tt = 0; tt < NT; ++tt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int xr = tt * 8 + 2 * c + e;
                        if (xr < m) yb[(size_t)xr * kp + tile * 8 + g] = f2bf(glu_one(tot[tt][e], tot[tt][e + 2], act));
                    }
            } else {
                gemv_store<NT>(y, tot, old, tile, n, m, g, c, add);
            }
        }
    }
}
#endif

// NT groups of 8 x rows; up to three weights (maps w0..w2 with nt0, nt1, ntot - nt0 - nt1 tiles).
#define GEMV_TMA_KERNEL(NT)                                                                                        \
    extern "C" __global__ void __launch_bounds__(32 * GT_W, 1) gemv_tma_n##NT(                                    \
        const __grid_constant__ TmaDesc w0, const __grid_constant__ TmaDesc w1, const __grid_constant__ TmaDesc w2, \
        float* __restrict__ y0, float* __restrict__ y1, float* __restrict__ y2, int n0, int n1, int n2, int nt0,  \
        int nt1, int ntot, const __grid_constant__ TmaDesc xmap, int m, int kt, int add, int pre) {                 \
        tf_pdl_launch();                                                                                           \
        GEMV_TMA_BODY(NT)                                                                                          \
    }
#ifdef TF_WGMMA
#define GEMV_TMA_BODY(NT) \
    gemv_tma_body<NT>(&w0, &w1, &w2, y0, y1, y2, n0, n1, n2, nt0, nt1, ntot, &xmap, m, kt, add, pre);
#else
#define GEMV_TMA_BODY(NT) tf_pdl_wait();
#endif
GEMV_TMA_KERNEL(1)
GEMV_TMA_KERNEL(2)
GEMV_TMA_KERNEL(4)

// The same of a packed gate/up weight (w0 only) with the gated activation in the store: yb (bf16,
// row stride kp) = glu_packed(x @ gu^T), the same bits, with no f32 product and no glu launch.
#define GEMV_TMA_GLU_KERNEL(NT)                                                                                    \
    extern "C" __global__ void __launch_bounds__(32 * GT_W, 1) gemv_tma_glu_n##NT(                                \
        const __grid_constant__ TmaDesc w0, const __grid_constant__ TmaDesc w1, const __grid_constant__ TmaDesc w2, \
        float* __restrict__ y0, float* __restrict__ y1, float* __restrict__ y2, int n0, int n1, int n2, int nt0,  \
        int nt1, int ntot, const __grid_constant__ TmaDesc xmap, int m, u16* __restrict__ yb, int kp, int act,    \
        int kt, int add, int pre) {                                                                                \
        tf_pdl_launch();                                                                                           \
        GEMV_TMA_GLU_BODY(NT)                                                                                      \
    }
#ifdef TF_WGMMA
#define GEMV_TMA_GLU_BODY(NT)                                                                                     \
    gemv_tma_body<NT, false, true>(&w0, &w1, &w2, y0, y1, y2, n0, n1, n2, nt0, nt1, ntot, &xmap, m, kt, 0, pre, \
                                   nullptr, yb, kp, act);
#else
#define GEMV_TMA_GLU_BODY(NT) tf_pdl_wait();
#endif
GEMV_TMA_GLU_KERNEL(1)
GEMV_TMA_GLU_KERNEL(2)
GEMV_TMA_GLU_KERNEL(4)

// One x row (batch-1 decode): the ring holds W only, each warp's segment of the row (bf16, `xg`)
// is one bulk copy into shared memory after the launch wait. The same bits as gemv_tma_n1 for that row.
extern "C" __global__ void __launch_bounds__(32 * GT_W, 1) gemv_tma_xr(
    const __grid_constant__ TmaDesc w0, const __grid_constant__ TmaDesc w1, const __grid_constant__ TmaDesc w2,
    float* __restrict__ y0, float* __restrict__ y1, float* __restrict__ y2, int n0, int n1, int n2, int nt0, int nt1,
    int ntot, const u16* __restrict__ xg, int kt, int add, int pre) {
    tf_pdl_launch();
#ifdef TF_WGMMA
    gemv_tma_body<1, true>(&w0, &w1, &w2, y0, y1, y2, n0, n1, n2, nt0, nt1, ntot, nullptr, 1, kt, add, pre, xg);
#else
    tf_pdl_wait();
#endif
}

// gemv_tma_xr of a packed gate/up weight with the gated activation in its store: yb (bf16) =
// glu_packed(x @ gu^T) of one row, the same bits, with no f32 product written and no glu launch.
extern "C" __global__ void __launch_bounds__(32 * GT_W, 1) gemv_tma_xr_glu(
    const __grid_constant__ TmaDesc w0, const __grid_constant__ TmaDesc w1, const __grid_constant__ TmaDesc w2,
    float* __restrict__ y0, float* __restrict__ y1, float* __restrict__ y2, int n0, int n1, int n2, int nt0, int nt1,
    int ntot, const u16* __restrict__ xg, u16* __restrict__ yb, int kp, int act, int kt, int add, int pre) {
    tf_pdl_launch();
#ifdef TF_WGMMA
    gemv_tma_body<1, true, true>(&w0, &w1, &w2, y0, y1, y2, n0, n1, n2, nt0, nt1, ntot, nullptr, 1, kt, 0, pre, xg,
                                 yb, kp, act);
#else
    tf_pdl_wait();
#endif
}
