// Few-row y = x @ W^T on Hopper (decode: up to 32 rows of x), in gemm.cu's reduction order and
// with its MMA instruction, so rows give the same bits as in the other matmul kernels.
//
// Persistent blocks (at most one per SM) each take a contiguous run of 16-row W tiles (of up to
// three weights sharing x). Warp w of a block owns K segment w (`gemm_seg_len`) of every tile in
// the run and streams it through a private ring of GT_ST stages: a stage is one tensor-map copy of
// 16 W rows x 64 k and one of the 8 NT x rows x 64 k, both in the 128-byte swizzle (conflict-free
// ldmatrix and B reads), issued by the warp's lane 0 and counted on one mbarrier. The ring runs on
// across tile boundaries, so a block ramps up once per launch, not once per tile; the first
// stages' weights stream in before the programmatic-dependent-launch wait. At each tile's end the
// warps leave their segment sums in shared memory (double buffered) and warp 0 folds them in order.
//
// Fused variants (matmul.rs `gemv_tma`), the same bits as the kernels they replace:
// - NORM (up to 8 rows, K <= 4096): x is the f32 residual stream; each block makes its RMSNorm
//   itself, in rms_norm's virtual-thread sum order (ops.cu `rms_norm_body`), into a bf16 copy of
//   all of x in shared memory laid out as the x boxes would be, so no norm kernel runs between
//   the matmuls and no block waits for one.
// - GLU (a packed gate/up weight, tf_backend `gate_up`): a tile's rows are gate (g) and up (g + 8)
//   of the same 8 outputs, so warp 0's fold stores act(gate) * up rounded to bf16 (ops.cu
//   `glu_packed`'s values), and the product is never written.

#define GT_W 8  // warps per block: one per K segment

// Stages per warp ring for NT groups of 8 x rows: about 192 KB of ring in all.
// NORM: the ring holds W boxes only, and x (up to GT_NORM_K columns) is staged once.
#define GT_NORM_K 4096
template <int NT, bool NORM = false>
struct GtCfg {
    static constexpr int XBYTES = NT * 8 * 128;                    // x box: 8 NT rows x 64 k
    static constexpr int SBYTES = NORM ? 2048 : 2048 + XBYTES;     // W box (16 rows x 64 k), x box
    static constexpr int ST = NT == 1 ? 8 : NT == 2 ? 6 : 4;
    static constexpr int XSTAGE = NORM ? GT_NORM_K / 64 * XBYTES : 0;  // all of x, in x boxes
    static constexpr int PART = NT * 4 * 32;                       // floats of one warp's segment sums
    // ring (1 KB aligned), staged x, then 2 x GT_W partial sums, then the barriers
    static constexpr int SMEM = 1024 + GT_W * ST * SBYTES + XSTAGE + 2 * GT_W * PART * 4 + GT_W * ST * 8;
};

// The fused variants' extra inputs: the f32 rows and norm of NORM, the bf16 output of GLU.
struct GtFused {
    const float* xf;
    const float* nw;
    int cols, virt, one_plus;
    float eps;
    u16* yb;
    int kpo, act;
};

// NORM: the m rows of xf normed into the staged x boxes at xs (row r, column i: box i / 64, the
// 16-byte chunk (i % 64) / 8 swizzled by r & 7), in rms_norm_body's order for `virt` virtual
// threads: virtual thread t = threadIdx.x + 256 q holds values t + j virt (j < jn <= 4), its sum
// of squares meets its virtual warp's by warp_sum, and the virt / 32 warp sums add in order. The
// norm weights are read before the launch wait; rows run one after another.
template <int NT>
__device__ __forceinline__ void gt_norm_rows(const GtFused& f, unsigned char* xs, int m) {
    __shared__ float gt_scratch[2][32];
    const int tid = threadIdx.x, lane = tid & 31, V = f.virt, cols = f.cols;
    const int jn = (cols + V - 1) / V;
    float sc[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int t = tid + q * 256, i = t + j * V;
            sc[q][j] = t < V && j < jn && i < cols ? (f.one_plus ? 1.0f + f.nw[i] : f.nw[i]) : 0.f;
        }
    tf_pdl_wait();
    for (int r = 0; r < m; ++r) {
        const float* x = f.xf + (size_t)r * cols;
        float v[4][4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int t = tid + q * 256, i = t + j * V;
                v[q][j] = t < V && j < jn && i < cols ? x[i] : 0.f;
            }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            if (tid + q * 256 >= V) break;  // whole virtual warps (V is a multiple of 32)
            float ss = 0.f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (j >= jn) break;
                ss += v[q][j] * v[q][j];
            }
            ss = warp_sum(ss);
            if (lane == 0) gt_scratch[r & 1][(tid >> 5) + q * 8] = ss;
        }
        __syncthreads();
        float t = 0.f;
#pragma unroll
        for (int i = 0; i < 32; ++i) t += i < (V >> 5) ? gt_scratch[r & 1][i] : 0.f;
        const float inv = 1.0f / sqrtf(t / (float)cols + f.eps);
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int tt = tid + q * 256, i = tt + j * V;
                if (tt < V && j < jn && i < cols) {
                    const float o = v[q][j] * inv * sc[q][j];
                    const int cc = i & 63;
                    u16* dst = (u16*)(xs + (i >> 6) * (NT * 8 * 128) + r * 128 + (((cc >> 3) ^ (r & 7)) << 4)) + (cc & 7);
                    *dst = f2bf(o);
                }
            }
    }
    __syncthreads();
    tf_trace_mark();
}

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

template <int NT, bool NORM = false, bool GLU = false>
__device__ __forceinline__ void gemv_tma_body(const TmaDesc* w0, const TmaDesc* w1, const TmaDesc* w2, float* y0,
                                              float* y1, float* y2, int n0, int n1, int n2, int nt0, int nt1,
                                              int ntot, const TmaDesc* xmap, int m, int kt, int add,
                                              u32* ctr, const GtFused* fu = nullptr) {
    typedef GtCfg<NT, NORM> C;
    extern __shared__ __align__(1024) unsigned char gt_smem[];
    unsigned char* ring_p = (unsigned char*)(((size_t)gt_smem + 1023) & ~(size_t)1023);
    unsigned char* xstage = ring_p + GT_W * C::ST * C::SBYTES;                   // NORM: all of x
    float* part = (float*)(ring_p + GT_W * C::ST * C::SBYTES + C::XSTAGE);  // [2][GT_W][NT][4][32]
    u64* bars = (u64*)(part + 2 * GT_W * C::PART);               // [GT_W][ST]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, c = lane & 3;
    const int G = gridDim.x, b = blockIdx.x;
    const int len = gemm_seg_len(kt);
    const int nseg = (kt + len - 1) / len;
    const int j0 = warp * len, j1 = min(j0 + len, kt);
    const int nb = warp < nseg ? (j1 - j0 + 3) / 4 : 0;  // 64-wide boxes per tile of this segment
    u64* full = bars + warp * C::ST;
    const u32 ring = smem_addr(ring_p) + warp * C::ST * C::SBYTES;
    if (lane == 0) {
        for (int s = 0; s < C::ST; ++s) mbar_init(&full[s], 1);
        mbar_fence_init();
    }
    // The block's tiles by sequence index s: claimed in order from this launch's counter (a block
    // that starts late, its SM held by a small kernel, or streams slowly takes fewer), or the
    // static run st0 + s < st1 when ctr is null. A tile is computed the same way whichever block
    // takes it. gt_ids is a ring of the next claimed tiles, gt_end the first index without one. A
    // warp's ring reaches at most `ahead` indices past the tile it computes: thread 0 claims
    // indices 0 ..= ahead up front and index s + ahead + 1 during tile s (the atomic's latency
    // hides under the tile), publishing it before the tile's closing barrier.
    // The counter is a 64-bit word, zero at the start: claims add to its low half, and each block
    // adds to its high half once it has seen a failing claim (it claims no more then); the block
    // that completes the high half sets the word back to zero for the launch that reuses it.
    __shared__ int gt_ids[16];
    __shared__ int gt_end;
    u64* word = (u64*)ctr;
    const int nb_min = (kt - (nseg - 1) * len + 3) / 4;  // the last segment's boxes
    const int ahead = min(14, 1 + (C::ST - 2) / nb_min);
    const int st0 = (int)((long long)b * ntot / G), st1 = (int)((long long)(b + 1) * ntot / G);
    u64 done_old = 0;
    bool done = false;
    // Thread 0: the result v of the claim for index s.
    auto publish = [&](int s, u64 v) {
        const int t = word != nullptr ? ((u32)v < (u32)ntot ? (int)(u32)v : -1) : (st0 + s < st1 ? st0 + s : -1);
        if (t >= 0) {
            gt_ids[s & 15] = t;
        } else if (gt_end > s) {
            gt_end = s;
            if (word != nullptr) done_old = atomicAdd(word, 1ull << 32), done = true;
        }
    };
    if (threadIdx.x == 0) {
        gt_end = 1 << 30;
        u64 v[15];
#pragma unroll
        for (int s = 0; s < 15; ++s)
            if (s <= ahead) v[s] = word != nullptr ? atomicAdd(word, 1ull) : 0ull;
#pragma unroll
        for (int s = 0; s < 15; ++s)
            if (s <= ahead) publish(s, v[s]);
    }
    __syncthreads();
    // The producer (lane 0) issues stage pq: tile gt_ids[ps], box pbx of the segment.
    int pq = 0, ps = 0, pbx = 0;
    auto issue_w = [&]() {
        const int t = gt_ids[ps & 15], kc = (j0 + pbx * 4) * 16;
        const TmaDesc* map = t < nt0 ? w0 : t < nt0 + nt1 ? w1 : w2;
        const int row = (t < nt0 ? t : t < nt0 + nt1 ? t - nt0 : t - nt0 - nt1) * 16;
        const int slot = pq % C::ST;
        mbar_expect(&full[slot], C::SBYTES);
        tma_load_2d(ring + slot * C::SBYTES, map, kc, row, &full[slot]);
    };
    auto issue_x = [&](int q, int box) {
        const int slot = q % C::ST;
        tma_load_2d(ring + slot * C::SBYTES + 2048, xmap, (j0 + box * 4) * 16, 0, &full[slot]);
    };
    auto advance = [&]() {
        ++pq;
        if (++pbx == nb) pbx = 0, ++ps;
    };
    if (lane == 0 && nb > 0) {
        while (pq < C::ST - 1 && ps < gt_end) issue_w(), advance();
    }
    if constexpr (NORM) {
        gt_norm_rows<NT>(*fu, xstage, m);  // waits for the launch first
    } else {
        tf_pdl_wait();
        if (lane == 0) {
            for (int q = 0; q < pq; ++q) issue_x(q, q % nb);
        }
    }
    float acc[NT][4];
    int q = 0;
    float old[NT][4];  // warp 0: y's values of tile t before the add
    for (int s = 0; s < gt_end; ++s) {
        const int t = gt_ids[s & 15];
        u64 pend = 0;  // thread 0: the claim for index s + ahead + 1, published at the tile's end
        const bool claiming = threadIdx.x == 0 && word != nullptr && gt_end > s + ahead + 1;
        if (claiming) pend = atomicAdd(word, 1ull);
#pragma unroll
        for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
        if (warp == 0 && add) {
            const float* y = t < nt0 ? y0 : t < nt0 + nt1 ? y1 : y2;
            const int n = t < nt0 ? n0 : t < nt0 + nt1 ? n1 : n2;
            gemv_load_old<NT>(y, old, t < nt0 ? t : t < nt0 + nt1 ? t - nt0 : t - nt0 - nt1, n, m, g, c, add);
        }
        for (int i = 0; i < nb; ++i, ++q) {
            if (lane == 0 && ps < gt_end) {  // refill the slot the previous stage freed
                issue_w();
                if constexpr (!NORM) issue_x(pq, pbx);
                advance();
            }
            const int slot = q % C::ST;
            mbar_wait(&full[slot], (q / C::ST) & 1);
            const u32 wb = ring + slot * C::SBYTES;
            // NORM: segments start at whole boxes (matmul.rs checks), so the box is j0 / 4 + i.
            const u32 xb = NORM ? smem_addr(xstage) + (j0 / 4 + i) * C::XBYTES : wb + 2048;
            // A whole box (the usual case) loads all its fragments before the first MMA, with no
            // branch between them; a segment's last box may hold fewer k tiles.
            if (j0 + i * 4 + 4 <= j1) {
                gt_box<NT, 4>(acc, wb, xb, lane, g, c);
            } else {
#pragma unroll
                for (int u = 0; u < 4; ++u)
                    if (j0 + i * 4 + u < j1) gt_box<NT, 1>(acc, wb, xb, lane, g, c, u);
            }
            __syncwarp();  // every lane is done with the slot before lane 0 refills it
        }
        // Tile done: segment sums to shared memory, then warp 0 folds them in segment order.
        float* pb = part + (s & 1) * GT_W * C::PART;
#pragma unroll
        for (int tt = 0; tt < NT; ++tt)
#pragma unroll
            for (int e = 0; e < 4; ++e) pb[((warp * NT + tt) * 4 + e) * 32 + lane] = acc[tt][e];
        if (claiming || (threadIdx.x == 0 && word == nullptr)) publish(s + ahead + 1, pend);
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
                // Rows g (gate) and g + 8 (up) of the tile are output 8 tile + g.
                const int col = tile * 8 + g;
#pragma unroll
                for (int tt = 0; tt < NT; ++tt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int xr = tt * 8 + 2 * c + e;
                        if (xr < m && col < n / 2)
                            fu->yb[(size_t)xr * fu->kpo + col] = f2bf(glu_one(tot[tt][e], tot[tt][e + 2], fu->act));
                    }
            } else {
                gemv_store<NT>(y, tot, old, tile, n, m, g, c, add);
            }
        }
    }
    if (done && (done_old >> 32) == (u64)(G - 1)) atomicExch(word, 0ull);  // the last block done
}
#endif

// NT groups of 8 x rows; up to three weights (maps w0..w2 with nt0, nt1, ntot - nt0 - nt1 tiles).
#define GEMV_TMA_KERNEL(NT)                                                                                        \
    extern "C" __global__ void __launch_bounds__(32 * GT_W, 1) gemv_tma_n##NT(                                    \
        const __grid_constant__ TmaDesc w0, const __grid_constant__ TmaDesc w1, const __grid_constant__ TmaDesc w2, \
        float* __restrict__ y0, float* __restrict__ y1, float* __restrict__ y2, int n0, int n1, int n2, int nt0,  \
        int nt1, int ntot, const __grid_constant__ TmaDesc xmap, int m, int kt, int add, u32* ctr) {               \
        tf_pdl_launch();                                                                                           \
        GEMV_TMA_BODY(NT)                                                                                          \
    }
#ifdef TF_WGMMA
#define GEMV_TMA_BODY(NT) gemv_tma_body<NT>(&w0, &w1, &w2, y0, y1, y2, n0, n1, n2, nt0, nt1, ntot, &xmap, m, kt, add, ctr);
#else
#define GEMV_TMA_BODY(NT) tf_pdl_wait();
#endif
GEMV_TMA_KERNEL(1)
GEMV_TMA_KERNEL(2)
GEMV_TMA_KERNEL(4)

// The fused variants (NORM and/or GLU): the plain kernel's arguments, then GtFused's fields.
#define GEMV_TMA_FUSED(NAME, NT, NORM, GLU)                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * GT_W, 1) NAME(                                              \
        const __grid_constant__ TmaDesc w0, const __grid_constant__ TmaDesc w1, const __grid_constant__ TmaDesc w2, \
        float* __restrict__ y0, float* __restrict__ y1, float* __restrict__ y2, int n0, int n1, int n2, int nt0,  \
        int nt1, int ntot, const __grid_constant__ TmaDesc xmap, int m, int kt, int add, u32* ctr, const float* xf, \
        const float* nw, int cols, int virt, float eps, int one_plus, u16* yb, int kpo, int act) {                \
        tf_pdl_launch();                                                                                           \
        GEMV_TMA_FUSED_BODY(NT, NORM, GLU)                                                                         \
    }
#ifdef TF_WGMMA
#define GEMV_TMA_FUSED_BODY(NT, NORM, GLU)                                                                     \
    const GtFused fu = {xf, nw, cols, virt, one_plus, eps, yb, kpo, act};                                      \
    gemv_tma_body<NT, NORM, GLU>(&w0, &w1, &w2, y0, y1, y2, n0, n1, n2, nt0, nt1, ntot, &xmap, m, kt, add, ctr, &fu);
#else
#define GEMV_TMA_FUSED_BODY(NT, NORM, GLU) tf_pdl_wait();
#endif
GEMV_TMA_FUSED(gemv_tma_norm_n1, 1, true, false)
GEMV_TMA_FUSED(gemv_tma_norm_glu_n1, 1, true, true)
GEMV_TMA_FUSED(gemv_tma_glu_n1, 1, false, true)
GEMV_TMA_FUSED(gemv_tma_glu_n2, 2, false, true)
GEMV_TMA_FUSED(gemv_tma_glu_n4, 4, false, true)
