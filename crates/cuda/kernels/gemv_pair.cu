// Two one-row GEMVs with an RMSNorm between, in one grid (batch-1 decode: o then gate/up, down
// then the next layer's q/k/v). Phase A adds xa @ Wa^T into h (gemv_tma_xr's bits, residual add
// in the store); every block then counts itself done on `sync` and waits until the whole grid has
// (blocks are one an SM and all resident: a grid of at most the SM count, whose dependents launch
// only once every block has started); each block norms h itself into shared memory in
// rms_norm_body's order (the bf16 row rms_norm_j4 writes) and runs phase B, xb @ Wb^T for up to
// three weights (gemv_tma_xr's bits for that row). The W ring runs on across the phase boundary:
// phase B's first stages stream in while phase A's last tiles finish and the grid waits for its
// slowest block, where two kernels would leave DRAM idle from the first GEMV's drain to the second
// one's launch wait.
#ifdef TF_WGMMA
// The sum over `group` values of h in rms_norm_body's order for V = 256 Q virtual threads (jn <= 4
// values each, Q <= 4), scaled by w (or 1 + w), as bf16 into xs (k tiles of 16 zero-padded to kt).
__device__ __forceinline__ void pair_norm(const float* __restrict__ h, const float* __restrict__ w, u16* xs, int group,
                                          int V, int kt, float eps, int one_plus, float* scratch) {
    const int R = 256, Q = V / R, lane = threadIdx.x & 31;
    const int jn = (group + V - 1) / V;
    float v[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int i = threadIdx.x + q * R + j * V;
            v[q][j] = q < Q && j < jn && i < group ? __ldcg(h + i) : 0.f;
        }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        if (q >= Q) break;
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (j >= jn) break;
            ss += v[q][j] * v[q][j];
        }
        ss = warp_sum(ss);
        if (lane == 0) scratch[(threadIdx.x >> 5) + q * (R >> 5)] = ss;
    }
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) t += i < (V >> 5) ? scratch[i] : 0.f;
    float inv = 1.0f / sqrtf(t / (float)group + eps);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        if (q >= Q) break;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (j >= jn) break;
            const int i = threadIdx.x + q * R + j * V;
            if (i < group) {
                const float s = one_plus ? 1.0f + w[i] : w[i];
                xs[i] = f2bf(v[q][j] * inv * s);
            }
        }
    }
    for (int i = group + threadIdx.x; i < kt * 16; i += R) xs[i] = 0;
}

extern "C" __global__ void __launch_bounds__(32 * GT_W, 1) gemv_pair_xr(
    const __grid_constant__ TmaDesc wa, float* __restrict__ h, int na, int nta, const u16* __restrict__ xg, int kta,
    const __grid_constant__ TmaDesc w0, const __grid_constant__ TmaDesc w1, const __grid_constant__ TmaDesc w2,
    float* __restrict__ y0, float* __restrict__ y1, float* __restrict__ y2, int n0, int n1, int n2, int nt0, int nt1,
    int ntb, int ktb, const float* __restrict__ nw, int group, int V, float eps, int one_plus, u64* sync, int pre_in, int lab) {
    tf_pdl_launch();
    typedef GtCfg<1, true> C;
    extern __shared__ __align__(1024) unsigned char gp_smem[];
    unsigned char* ring_p = (unsigned char*)(((size_t)gp_smem + 1023) & ~(size_t)1023);
    float* part = (float*)(ring_p + GT_W * C::ST * C::SBYTES);  // [2][GT_W][4][32]
    u64* bars = (u64*)(part + 2 * GT_W * C::PART);               // [GT_W][ST], then a barrier a warp
    float* scratch = (float*)(bars + GT_W * C::ST + GT_W);       // 32 warp sums of the norm
    u16* xa_s = (u16*)(scratch + 32);                            // the phase-A row (kta * 16), then phase B's
    u16* xb_s = xa_s + kta * 16;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c = lane & 3;
    const int G = gridDim.x, b = blockIdx.x;
    // Static runs for each phase, the longer ones to the lower block indices (gemv_tma_body).
    const int qa = nta / G, ra = nta - qa * G, qb = ntb / G, rb = ntb - qb * G;
    const int ta0 = b * qa + min(b, ra), ta1 = ta0 + qa + (b < ra ? 1 : 0);
    const int tb0 = b * qb + min(b, rb), tb1 = tb0 + qb + (b < rb ? 1 : 0);
    const int lena = gemm_seg_len(kta), lenb = gemm_seg_len(ktb);
    const int nsega = (kta + lena - 1) / lena, nsegb = (ktb + lenb - 1) / lenb;
    const int j0a = warp * lena, j1a = min(j0a + lena, kta), j0b = warp * lenb, j1b = min(j0b + lenb, ktb);
    const int nba = warp < nsega ? (j1a - j0a + 3) / 4 : 0, nbb = warp < nsegb ? (j1b - j0b + 3) / 4 : 0;
    const int tota = nba * (ta1 - ta0), total = tota + nbb * (tb1 - tb0);
    u64* full = bars + warp * C::ST;
    u64* xbar = bars + GT_W * C::ST + warp;
    const u32 ring = smem_addr(ring_p) + warp * C::ST * C::SBYTES;
    if (lane == 0) {
        for (int s = 0; s < C::ST; ++s) mbar_init(&full[s], 1);
        mbar_init(xbar, 1);
        mbar_fence_init();
    }
    __syncwarp();
    // Stage q: phase A's tile ta0 + q / nba, box q % nba, then phase B's.
    auto issue_w = [&](int q) {
        const TmaDesc* map;
        int row, kc;
        if (q < tota) {
            map = &wa;
            row = (ta0 + q / nba) * 16;
            kc = (j0a + (q % nba) * 4) * 16;
        } else {
            const int p = q - tota, t = tb0 + p / nbb;
            map = t < nt0 ? &w0 : t < nt0 + nt1 ? &w1 : &w2;
            row = (t < nt0 ? t : t < nt0 + nt1 ? t - nt0 : t - nt0 - nt1) * 16;
            kc = (j0b + (p % nbb) * 4) * 16;
        }
        const int slot = q % C::ST;
        mbar_expect(&full[slot], C::SBYTES);
        tma_load_2d(ring + slot * C::SBYTES, map, kc, row, &full[slot]);
    };
    const int pre = min(pre_in, C::ST - 1);
    if (lane == 0)
        for (int q = 0; q < pre && q < total; ++q) issue_w(q);
    tf_pdl_wait();
    if (lane == 0) {
        if (nba > 0) {
            mbar_expect(xbar, (j1a - j0a) * 32);
            bulk_load(smem_addr(xa_s) + j0a * 32, xg + j0a * 16, (j1a - j0a) * 32, xbar);
        }
        for (int q = pre; q < C::ST - 1 && q < total; ++q) issue_w(q);
    }
    if (nba > 0) mbar_wait(xbar, 0);
    int q = 0;
    float acc[1][4], old[1][4];
    // One phase's tiles [t0, t1): segment j0.. j1 of each in nb boxes, x row xs (shared), folded in
    // nseg segments by warp 0 into y (tile numbers through the weights' tile counts).
    auto tiles = [&](int t0, int t1, int nb, int j0, int j1, int nseg, const u16* xs, int add, int phase) {
        for (int t = t0; t < t1; ++t) {
            acc[0][0] = acc[0][1] = acc[0][2] = acc[0][3] = 0.f;
            float* y;
            int n, tile;
            if (phase == 0) {
                y = h, n = na, tile = t;
            } else {
                y = t < nt0 ? y0 : t < nt0 + nt1 ? y1 : y2;
                n = t < nt0 ? n0 : t < nt0 + nt1 ? n1 : n2;
                tile = t < nt0 ? t : t < nt0 + nt1 ? t - nt0 : t - nt0 - nt1;
            }
            if (warp == 0 && add) gemv_load_old<1>(y, old, tile, n, 1, lane >> 2, c, add);
            for (int i = 0; i < nb; ++i, ++q) {
                if (lane == 0 && q + C::ST - 1 < total) issue_w(q + C::ST - 1);
                const int slot = q % C::ST;
                mbar_wait(&full[slot], (q / C::ST) & 1);
                const u32 wb = ring + slot * C::SBYTES, xsa = smem_addr(xs) + (j0 + i * 4) * 32;
                if (j0 + i * 4 + 4 <= j1) {
                    gt_box_xr<4>(acc, wb, xsa, lane, c);
                } else {
#pragma unroll
                    for (int u = 0; u < 4; ++u)
                        if (j0 + i * 4 + u < j1) gt_box_xr<1>(acc, wb, xsa, lane, c, u);
                }
                __syncwarp();
            }
            float* pb = part + (t & 1) * GT_W * C::PART;
#pragma unroll
            for (int e = 0; e < 4; ++e) pb[(warp * 4 + e) * 32 + lane] = acc[0][e];
            __syncthreads();
            if (warp == 0) {
                float tot[1][4] = {{0.f, 0.f, 0.f, 0.f}};
                for (int sg = 0; sg < nseg; ++sg)
#pragma unroll
                    for (int e = 0; e < 4; ++e) tot[0][e] = __fadd_rn(tot[0][e], pb[(sg * 4 + e) * 32 + lane]);
                gemv_store<1>(y, tot, old, tile, n, 1, lane >> 2, c, add);
            }
        }
    };
    tiles(ta0, ta1, nba, j0a, j1a, nsega, xa_s, 1, 0);
    if ((lab & 3) == 2) tf_trace_mark();
    // Phase A done here: every lane's stores ordered before warp 0's arrival, then the wait for
    // the grid (the counter only grows: a launch's target is the next multiple of the grid).
    if (warp == 0) {
        __threadfence();
        __syncwarp();
        if (lane == 0) {
            const u64 ticket = atomicAdd(sync, 1ull);
            const u64 goal = (ticket / G + 1) * G;
            u64 seen;
            do {
                asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(seen) : "l"(sync) : "memory");
            } while (seen < goal && !(lab & 4));
        }
    }
    __syncthreads();
    if ((lab & 3) == 0) tf_trace_mark();
    if (!(lab & 8)) pair_norm(h, nw, xb_s, group, V, ktb, eps, one_plus, scratch);
    __syncthreads();
    if ((lab & 3) == 1) tf_trace_mark();
    tiles(tb0, tb1, nbb, j0b, j1b, nsegb, xb_s, 0, 1);
}
#endif
