// y = x @ W^T with W bf16 in the packed fragment layout, x bf16 (row stride kp), y f32.
//
// Packed layout: W [N, K] is cut into 16x16 tiles (i = n / 16, j = k / 16), tile (i, j) stored at
// ((i * KT + j) * 32 + lane) * 8: each lane's 16 bytes are exactly its A fragment of
// mma.m16n8k16 (rows g, g + 8 and k 2c.., 2c + 8.. with g = lane / 4, c = lane % 4).
//
// Exactness: every output element y[t, n] is one accumulator, starting at zero, that walks the
// k tiles j = 0 .. KT-1 in order through the same MMA instruction with W as the A operand and x
// as B. The GEMV (few rows, bandwidth bound) and the tiled GEMM (many rows) both do exactly that,
// so a row's result does not depend on how many rows share the call or which kernel ran.

#define GEMV_WARPS 2
#define GEMV_STAGES 8
#define GEMV_U 4

// Few rows (M <= 8 * NT): each warp streams one 16-row tile of W through a cp.async ring.
template <int NT>
__device__ __forceinline__ void gemv_body(const uint4* __restrict__ w, const u16* __restrict__ x, float* __restrict__ y,
                                          int m, int n, int ntiles, int kt, int kp) {
    __shared__ __align__(16) uint4 ring[GEMV_WARPS][GEMV_STAGES][GEMV_U][32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int tile = blockIdx.x * GEMV_WARPS + warp;
    if (tile >= ntiles) return;
    int g = lane >> 2, c = lane & 3;
    const uint4* src = w + (size_t)tile * kt * 32 + lane;
    int nst = (kt + GEMV_U - 1) / GEMV_U;
#pragma unroll
    for (int s = 0; s < GEMV_STAGES - 1; ++s) {
        if (s < nst) {
#pragma unroll
            for (int u = 0; u < GEMV_U; ++u) {
                int j = s * GEMV_U + u;
                if (j < kt) cp_async16(&ring[warp][s][u][lane], src + (size_t)j * 32, 16);
            }
        }
        cp_commit();
    }
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    // Rows of x this lane feeds as B columns.
    const u32* xrow[NT];
    bool xok[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        int tok = t * 8 + g;
        xok[t] = tok < m;
        xrow[t] = (const u32*)(x + (size_t)(xok[t] ? tok : 0) * kp) + c;
    }
    for (int s = 0; s < nst; ++s) {
        int sn = s + GEMV_STAGES - 1;
        if (sn < nst) {
#pragma unroll
            for (int u = 0; u < GEMV_U; ++u) {
                int j = sn * GEMV_U + u;
                if (j < kt) cp_async16(&ring[warp][sn % GEMV_STAGES][u][lane], src + (size_t)j * 32, 16);
            }
        }
        cp_commit();
        u32 b[GEMV_U][NT][2];
#pragma unroll
        for (int u = 0; u < GEMV_U; ++u) {
            int j = s * GEMV_U + u;
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                bool ok = xok[t] && j < kt;
                b[u][t][0] = ok ? ldg_u32(xrow[t] + j * 8) : 0u;
                b[u][t][1] = ok ? ldg_u32(xrow[t] + j * 8 + 4) : 0u;
            }
        }
        cp_wait<GEMV_STAGES - 1>();
#pragma unroll
        for (int u = 0; u < GEMV_U; ++u) {
            int j = s * GEMV_U + u;
            if (j < kt) {
                uint4 a = ring[warp][s % GEMV_STAGES][u][lane];
#pragma unroll
                for (int t = 0; t < NT; ++t) mma_bf16(acc[t], a.x, a.y, a.z, a.w, b[u][t][0], b[u][t][1]);
            }
        }
    }
    int row0 = tile * 16 + g, row1 = row0 + 8;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        int t0 = t * 8 + 2 * c, t1 = t0 + 1;
        if (t0 < m && row0 < n) y[(size_t)t0 * n + row0] = acc[t][0];
        if (t1 < m && row0 < n) y[(size_t)t1 * n + row0] = acc[t][1];
        if (t0 < m && row1 < n) y[(size_t)t0 * n + row1] = acc[t][2];
        if (t1 < m && row1 < n) y[(size_t)t1 * n + row1] = acc[t][3];
    }
}

#define GEMV_KERNEL(NT)                                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS) gemv_bf16_n##NT(                              \
        const uint4* __restrict__ w, const u16* __restrict__ x, float* __restrict__ y, int m, int n, int ntiles, \
        int kt, int kp) {                                                                                        \
        gemv_body<NT>(w, x, y, m, n, ntiles, kt, kp);                                                            \
    }
GEMV_KERNEL(1)
GEMV_KERNEL(2)
GEMV_KERNEL(4)
GEMV_KERNEL(8)

// Many rows: CTA tile 128 weight rows x 128 tokens x 32 k, 8 warps (2 along W rows x 4 along
// tokens), each warp 64 x 32: 4 A tiles (W, from the packed layout) x 4 B tiles (x, ldmatrix).
#define GM_BN 128
#define GM_BM 128
#define GM_STAGES 4
#define GM_XSTRIDE 40  // u16 per x row in shared memory: 32 + 8 padding (80 bytes, conflict-free)
#define GM_SMEM (GM_STAGES * (8 * 2 * 32 * 16 + GM_BM * GM_XSTRIDE * 2))

extern "C" __global__ void __launch_bounds__(256) gemm_bf16(const uint4* __restrict__ w, const u16* __restrict__ x,
                                                            float* __restrict__ y, int m, int n, int ntiles, int kt,
                                                            int kp) {
    extern __shared__ __align__(16) unsigned char smem[];
    uint4* ws = (uint4*)smem;                                    // [stage][8 row tiles][2 k tiles][32 lanes]
    u16* xs = (u16*)(smem + GM_STAGES * 8 * 2 * 32 * 16);       // [stage][128 tokens][GM_XSTRIDE]
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int wn = warp & 1, wm = warp >> 1;  // warp's 64-row slice of W and 32-token slice of x
    int tile0 = blockIdx.x * 8;        // first 16-row tile of W
    int tok0 = blockIdx.y * GM_BM;
    int nkb = (kt + 1) / 2;            // 32-wide k blocks

    auto load = [&](int kb, int slot) {
        // W: 8 row tiles x 2 k tiles x 32 lanes of 16 bytes = 512 chunks, 2 per thread.
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            int ch = tid + q * 256;
            int rt = ch >> 6, kk = (ch >> 5) & 1, ln = ch & 31;
            int i = tile0 + rt, j = kb * 2 + kk;
            bool ok = i < ntiles && j < kt;
            const uint4* s = w + (((size_t)(ok ? i : 0) * kt + (ok ? j : 0)) * 32 + ln);
            cp_async16(&ws[((slot * 8 + rt) * 2 + kk) * 32 + ln], s, ok ? 16 : 0);
        }
        // x: 128 tokens x 4 chunks of 8 values.
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            int ch = tid + q * 256;
            int r = ch >> 2, part = ch & 3;
            int tok = tok0 + r, k = kb * 32 + part * 8;
            bool ok = tok < m && k < kp;
            const u16* s = x + (size_t)(ok ? tok : 0) * kp + (ok ? k : 0);
            cp_async16(&xs[(slot * GM_BM + r) * GM_XSTRIDE + part * 8], s, ok ? 16 : 0);
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) acc[a][b][0] = acc[a][b][1] = acc[a][b][2] = acc[a][b][3] = 0.f;

#pragma unroll
    for (int s = 0; s < GM_STAGES - 1; ++s) {
        if (s < nkb) load(s, s);
        cp_commit();
    }
    for (int kb = 0; kb < nkb; ++kb) {
        cp_wait<GM_STAGES - 2>();
        __syncthreads();
        int kn = kb + GM_STAGES - 1;
        if (kn < nkb) load(kn, kn % GM_STAGES);
        cp_commit();
        int slot = kb % GM_STAGES;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
            if (kb * 2 + kk < kt) {
                uint4 a[4];
#pragma unroll
                for (int mt = 0; mt < 4; ++mt) a[mt] = ws[((slot * 8 + wn * 4 + mt) * 2 + kk) * 32 + lane];
                u32 b[4][2];
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    int tokr = wm * 32 + (p * 2 + (lane >> 4)) * 8 + (lane & 7);
                    int kc = kk * 16 + ((lane >> 3) & 1) * 8;
                    ldsm_x4(b[2 * p][0], b[2 * p][1], b[2 * p + 1][0], b[2 * p + 1][1],
                            &xs[(slot * GM_BM + tokr) * GM_XSTRIDE + kc]);
                }
#pragma unroll
                for (int mt = 0; mt < 4; ++mt)
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt)
                        mma_bf16(acc[mt][nt], a[mt].x, a[mt].y, a[mt].z, a[mt].w, b[nt][0], b[nt][1]);
            }
        }
    }
    cp_wait<0>();
    int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
        int row0 = (tile0 + wn * 4 + mt) * 16 + g, row1 = row0 + 8;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            int t0 = tok0 + wm * 32 + nt * 8 + 2 * c, t1 = t0 + 1;
            if (t0 < m && row0 < n) y[(size_t)t0 * n + row0] = acc[mt][nt][0];
            if (t1 < m && row0 < n) y[(size_t)t1 * n + row0] = acc[mt][nt][1];
            if (t0 < m && row1 < n) y[(size_t)t0 * n + row1] = acc[mt][nt][2];
            if (t1 < m && row1 < n) y[(size_t)t1 * n + row1] = acc[mt][nt][3];
        }
    }
}

// f32 / f16 weights (small checkpoints): one thread per output, one f32 FMA chain over k in order.
extern "C" __global__ void gemm_simt(const float* __restrict__ x, const void* __restrict__ w, int f16, float* __restrict__ y,
                                     int m, int n, int k) {
    size_t total = (size_t)m * n;
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(o / n), r = (int)(o % n);
        const float* xr = x + (size_t)t * k;
        float acc = 0.f;
        if (f16) {
            const u16* wr = (const u16*)w + (size_t)r * k;
            for (int i = 0; i < k; ++i) acc = fmaf(xr[i], h2f(wr[i]), acc);
        } else {
            const float* wr = (const float*)w + (size_t)r * k;
            for (int i = 0; i < k; ++i) acc = fmaf(xr[i], wr[i], acc);
        }
        y[o] = acc;
    }
}
