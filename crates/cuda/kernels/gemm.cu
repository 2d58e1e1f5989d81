// y = x @ W^T with W bf16 row-major, zero-padded to [16 NT, kp] (kp = 16 KT, the row stride of
// x too), x bf16, y f32. Kernels stage W tiles in shared memory and take each warp's A fragment of
// mma.m16n8k16 (rows g, g + 8 and k 2c.., 2c + 8.. with g = lane / 4, c = lane % 4) by ldmatrix;
// the wgmma GEMM (gemm_wgmma.cu) reads the same rows through a tensor map.
//
// Exactness: the k tiles of a weight fall in at most 8 segments of `gemm_seg_len(KT)` tiles (a
// function of the weight's shape only). Every output element y[t, n] is, for each segment in
// order, one accumulator starting at zero that walks the segment's k tiles in order through the
// same MMA instruction (W as the A operand, x as B), added into a total that starts at zero
// (y = ((0 + s0) + s1) + ...). The GEMV (few rows, bandwidth bound: segments run on different
// warps, so the dependent MMA chain is short) and the tiled GEMM (many rows, segments folded in
// registers as it walks K) both compute exactly that, so a row's result does not depend on how
// many rows share the call or which kernel ran.

// k tiles per segment for a weight of kt k tiles: at most 8 segments of at least 32 tiles, even.
// (TF_ONE_CHAIN, defined only by scripts/device/gemm_lab.cu's experiments: one segment.)
__device__ __forceinline__ int gemm_seg_len(int kt) {
#ifdef TF_ONE_CHAIN
    return kt;
#endif
    int nseg = min(8, max(1, kt / 32));
    int len = (kt + nseg - 1) / nseg;
    return (len + 1) & ~1;
}

// Every matmul kernel's store: y = v, or with add y += v (the residual add fused into the matmul:
// the same f32 addition as add_inplace).
__device__ __forceinline__ void gemm_store(float* y, float v, int add) { *y = add ? __fadd_rn(*y, v) : v; }

// A GEMV's stores of one 16-row tile's sums (lane (g, c): rows g and g + 8, rows of x 8 t + 2c
// and 8 t + 2c + 1). With add, the old values were loaded into `old` by gemv_load_old early (while
// the tile streams), so the fold does not wait on a round trip to memory.
template <int NT>
__device__ __forceinline__ void gemv_load_old(const float* __restrict__ y, float (&old)[NT][4], int tile, int n, int m,
                                              int g, int c, int add) {
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = tile * 16 + g + (e >> 1) * 8, xr = t * 8 + 2 * c + (e & 1);
            old[t][e] = add && xr < m && row < n ? y[(size_t)xr * n + row] : 0.f;
        }
}
template <int NT>
__device__ __forceinline__ void gemv_store(float* __restrict__ y, const float (&tot)[NT][4], const float (&old)[NT][4],
                                           int tile, int n, int m, int g, int c, int add) {
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = tile * 16 + g + (e >> 1) * 8, xr = t * 8 + 2 * c + (e & 1);
            if (xr < m && row < n) y[(size_t)xr * n + row] = add ? __fadd_rn(old[t][e], tot[t][e]) : tot[t][e];
        }
}

// Few rows (M <= 8 * NT): one block of GEMV_W warps per 16-row tile of W; warp w takes segment w
// and streams its k tiles and its slice of x through a private cp.async ring of ST stages of U k
// tiles (16 W rows and each x row, 32 bytes per k tile, rows padded by 16 bytes so ldmatrix and
// the B reads are conflict-free), keeping ST - 1 stages of global reads in flight. Segment sums
// meet in shared memory; warp 0 folds them in order. One launch serves up to three weights of
// the same x (q/k/v, gate/up): block b takes tile b of the concatenated tile lists. ops.rs `gemv_smem` gives each variant's shared memory.
#define GEMV_W 8

// Bytes per x row per stage in shared memory: U * 32 plus 16 of padding (conflict-free B reads).
#define GEMV_XS(U) ((U) * 32 + 16)

// K tiles u0 .. u0 + NU - 1 of one ring stage of U k tiles (this lane's W row at wrow, x rows at
// xs): every ldmatrix and x read first, then the MMAs in k order (each row group's chain as before).
template <int NT, int U, int NU>
__device__ __forceinline__ void gemv_stage(float (&acc)[NT][4], const unsigned char* wrow, const unsigned char* xs,
                                           const bool (&xok)[NT], int g, int c, int u0 = 0) {
    uint4 a[NU];
    u32 b[NU][NT][2];
#pragma unroll
    for (int i = 0; i < NU; ++i) {
        ldsm_x4(a[i].x, a[i].y, a[i].z, a[i].w, wrow + (u0 + i) * 32);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const unsigned char* xr = xs + (t * 8 + g) * GEMV_XS(U) + (u0 + i) * 32 + 4 * c;
            b[i][t][0] = xok[t] ? *(const u32*)xr : 0u;
            b[i][t][1] = xok[t] ? *(const u32*)(xr + 16) : 0u;
        }
    }
#pragma unroll
    for (int i = 0; i < NU; ++i)
#pragma unroll
        for (int t = 0; t < NT; ++t) mma_bf16(acc[t], a[i].x, a[i].y, a[i].z, a[i].w, b[i][t][0], b[i][t][1]);
}

// XR: x rows a stage holds (8 NT; the one-row variants hold one, for calls of one row only).
// PACK (moe.cu): the block takes GEMV_W / nseg tiles from tile * (GEMV_W / nseg) on, nseg warps
// each (a weight with few segments keeps every warp streaming); the same sums in the same order.
template <int NT, int U, int ST, int XR = 8 * NT, bool PACK = false>
__device__ __forceinline__ void gemv_body(const u16* __restrict__ w, float* __restrict__ y, int n, int tile,
                                          const u16* __restrict__ x, int m, int kt, int kp, int add) {
    constexpr int XROWS = XR;
    constexpr int WBYTES = 16 * GEMV_XS(U);  // 16 W rows of U k tiles, padded like x rows
    constexpr int SBYTES = WBYTES + XROWS * GEMV_XS(U);
    extern __shared__ __align__(16) unsigned char gemv_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, c = lane & 3;
    float* part = (float*)(gemv_smem + GEMV_W * ST * SBYTES);  // [segment][NT][4][32 lanes]
    unsigned char* ring = gemv_smem + warp * ST * SBYTES;
    const int len = gemm_seg_len(kt);
    const int nseg = (kt + len - 1) / len;
    // This warp's segment and tile, and whether it has one.
    int seg = warp;
    bool active = true;  // without PACK: warp < nseg, tested where the unpacked body always did
    if constexpr (PACK) {
        const int per = GEMV_W / nseg;
        seg = warp % nseg;
        tile = tile * per + warp / nseg;
        active = warp < per * nseg && tile * 16 < n;
    }
    const int j0 = seg * len, j1 = min(j0 + len, kt);
    float old[NT][4];  // the tile's first warp: y's values before the add
    if (PACK ? active : warp < nseg) {
        const u16* src = w + (size_t)tile * 16 * kp;
        const int nst = (j1 - j0 + U - 1) / U;
        const int xrows = min(m, XROWS);
        auto issue_w = [&](int s) {  // weights: no earlier kernel writes them
            unsigned char* ws = ring + (s % ST) * SBYTES;
            for (int ch = lane; ch < 32 * U; ch += 32) {
                int r = ch / (2 * U), part = ch % (2 * U);
                int j = j0 + s * U + part / 2;
                if (j < j1) cp_async16(ws + r * GEMV_XS(U) + part * 16, src + (size_t)r * kp + j * 16 + (part & 1) * 8, 16);
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
        // The first stages' weights stream in while the previous kernel finishes (programmatic
        // dependent launch); x is read only after it has. Group s then holds stage s's x (and
        // group 0 every prologue stage's W).
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
            __syncwarp();  // x rows copied by other lanes are visible
            const unsigned char* base = ring + (s % ST) * SBYTES;
            const unsigned char* wrow = base + (lane & 15) * GEMV_XS(U) + (lane >> 4) * 16;
            const unsigned char* xs = base + WBYTES;
            // A whole stage (the usual case) loads all its fragments before the first MMA, with
            // no branch between them (not at NT = 8: registers); a segment's last stage may hold
            // fewer k tiles.
            if (NT < 8 && j0 + s * U + U <= j1) {
                gemv_stage<NT, U, U>(acc, wrow, xs, xok, g, c);
            } else {
#pragma unroll
                for (int u = 0; u < U; ++u)
                    if (j0 + s * U + u < j1) gemv_stage<NT, U, 1>(acc, wrow, xs, xok, g, c, u);
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

// NAME: NT row groups of 8, U k tiles per stage, ST stages, XR x rows a stage; up to three
// (W, y, n, ntiles) segments.
#define GEMV_KERNEL_AS(NAME, NT, U, ST, XR)                                                                        \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_W) NAME(                                                \
        const u16* __restrict__ w0, float* __restrict__ y0, int n0, int nt0, const u16* __restrict__ w1,           \
        float* __restrict__ y1, int n1, int nt1, const u16* __restrict__ w2, float* __restrict__ y2, int n2,       \
        const u16* __restrict__ x, int m, int kt, int kp, int add) {                                               \
        tf_pdl_launch();                                                                                           \
        int b = blockIdx.x;                                                                                        \
        if (b < nt0)                                                                                               \
            gemv_body<NT, U, ST, XR>(w0, y0, n0, b, x, m, kt, kp, add);                                            \
        else if (b < nt0 + nt1)                                                                                    \
            gemv_body<NT, U, ST, XR>(w1, y1, n1, b - nt0, x, m, kt, kp, add);                                      \
        else                                                                                                       \
            gemv_body<NT, U, ST, XR>(w2, y2, n2, b - nt0 - nt1, x, m, kt, kp, add);                                \
    }
#define GEMV_KERNEL(NT, U, ST) GEMV_KERNEL_AS(gemv_bf16_n##NT, NT, U, ST, 8 * NT)
GEMV_KERNEL(1, 4, 4)
GEMV_KERNEL(2, 4, 4)
GEMV_KERNEL(4, 4, 3)
GEMV_KERNEL(8, 2, 3)

// One-row variants (not launched by the backend since the TMA GEMV took one-row calls; kept in
// the module until a build without them is measured): one x row a stage, U k tiles a stage, ST
// stages; the same arithmetic as gemv_bf16_n1.
GEMV_KERNEL_AS(gemv_row_u4s4, 1, 4, 4, 1)
GEMV_KERNEL_AS(gemv_row_u4s5, 1, 4, 5, 1)
GEMV_KERNEL_AS(gemv_row_u4s3, 1, 4, 3, 1)
GEMV_KERNEL_AS(gemv_row_u2s4, 1, 2, 4, 1)
GEMV_KERNEL_AS(gemv_row_u2s6, 1, 2, 6, 1)

// Many rows: CTA tile 128 weight rows x 128 tokens x 32 k, 8 warps (2 along W rows x 4 along
// tokens), each warp 64 x 32: 4 A tiles (W) x 4 B tiles (x), both by ldmatrix.
#define GM_BN 128
#define GM_BM 128
#define GM_STAGES 6
#define GM_XSTRIDE 40  // u16 per x row in shared memory: 32 + 8 padding (80 bytes, conflict-free)
#define GM_SMEM (GM_STAGES * (GM_BN + GM_BM) * GM_XSTRIDE * 2)

extern "C" __global__ void __launch_bounds__(256, 1) gemm_bf16(const u16* __restrict__ w, const u16* __restrict__ x,
                                                            float* __restrict__ y, int m, int n, int ntiles, int kt,
                                                            int kp, int add) {
    tf_pdl_enter();
    extern __shared__ __align__(16) unsigned char smem[];
    u16* ws = (u16*)smem;                                        // [stage][128 W rows][GM_XSTRIDE]
    u16* xs = ws + GM_STAGES * GM_BN * GM_XSTRIDE;               // [stage][128 tokens][GM_XSTRIDE]
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int wn = warp & 1, wm = warp >> 1;  // warp's 64-row slice of W and 32-token slice of x
    int tile0 = blockIdx.x * 8;        // first 16-row tile of W
    int tok0 = blockIdx.y * GM_BM;
    int nkb = (kt + 1) / 2;            // 32-wide k blocks

    auto load = [&](int kb, int slot) {
        // W: 128 rows x 4 chunks of 8 values (rows past the padded weight read as zeros).
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            int ch = tid + q * 256;
            int r = ch >> 2, part = ch & 3;
            int row = tile0 * 16 + r, k = kb * 32 + part * 8;
            bool ok = row < ntiles * 16 && k < kp;
            const u16* s = w + (size_t)(ok ? row : 0) * kp + (ok ? k : 0);
            cp_async16(&ws[(slot * GM_BN + r) * GM_XSTRIDE + part * 8], s, ok ? 16 : 0);
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

    float acc[4][4][4], tot[4][4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[a][b][e] = tot[a][b][e] = 0.f;
    const int seg_len = gemm_seg_len(kt);

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
                for (int mt = 0; mt < 4; ++mt) {
                    int wr = (wn * 4 + mt) * 16 + (lane & 15), kc = kk * 16 + (lane >> 4) * 8;
                    ldsm_x4(a[mt].x, a[mt].y, a[mt].z, a[mt].w, &ws[(slot * GM_BN + wr) * GM_XSTRIDE + kc]);
                }
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
        // Segment end (seg_len is even, so segments end on a 32-wide k block): fold and restart.
        int jn = min(kb * 2 + 2, kt);
        if (jn % seg_len == 0 || jn == kt) {
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        tot[a][b][e] = __fadd_rn(tot[a][b][e], acc[a][b][e]);
                        acc[a][b][e] = 0.f;
                    }
        }
    }
    cp_wait<0>();
    int g = lane >> 2, c = lane & 3;
    // Element e of tile (mt, nt): W row row0 (+ 8 for e >= 2), token t0 (+ 1 for odd e).
    auto at = [&](int mt, int nt, int e, int& t, int& r) {
        r = (tile0 + wn * 4 + mt) * 16 + g + (e >> 1) * 8;
        t = tok0 + wm * 32 + nt * 8 + 2 * c + (e & 1);
        return t < m && r < n;
    };
    if (add) {  // old values first (into the spent accumulators), so the loads overlap
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    int t, r;
                    acc[mt][nt][e] = at(mt, nt, e, t, r) ? y[(size_t)t * n + r] : 0.f;
                }
    }
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int t, r;
                if (at(mt, nt, e, t, r))
                    y[(size_t)t * n + r] = add ? __fadd_rn(acc[mt][nt][e], tot[mt][nt][e]) : tot[mt][nt][e];
            }
}

// f32 / f16 weights (MoE routers, small checkpoints): y[t][r] = x[t] . w[r]. Each output is one
// warp's: lane l runs one FMA chain over k's indices 128 c + 4 l + e (c ascending, e = 0..3), then
// the 32 lanes fold by a butterfly (xor 16, 8, 4, 2, 1). That order depends on k alone, never on
// m or the tiling, so a row's bits do not follow the batch, and both variants below give the same
// bits. A warp takes SIMT_ROWS rows and E weight rows; a block BR x BE warps (W rows shared by the
// BR warps of a column, x rows by the BE warps of a row); U chunks of 128 are loaded before their
// FMAs so that many loads are in flight.
#define SIMT_ROWS 4

// Four consecutive values of a row from `base` (zeros past k), as f32.
__device__ __forceinline__ void simt_load4(const void* __restrict__ p, int f16, size_t row, int base, int k, bool vec,
                                           float (&v)[4]) {
    if (vec && base + 3 < k) {
        if (f16) {
            uint2 h = *(const uint2*)((const u16*)p + row * k + base);
            v[0] = h2f((u16)(h.x & 0xffff));
            v[1] = h2f((u16)(h.x >> 16));
            v[2] = h2f((u16)(h.y & 0xffff));
            v[3] = h2f((u16)(h.y >> 16));
        } else {
            float4 f = *(const float4*)((const float*)p + row * k + base);
            v[0] = f.x;
            v[1] = f.y;
            v[2] = f.z;
            v[3] = f.w;
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        int i = base + j;
        v[j] = i < k ? (f16 ? h2f(((const u16*)p)[row * k + i]) : ((const float*)p)[row * k + i]) : 0.f;
    }
}

template <int E, int BR, int BE, int U>
__device__ __forceinline__ void gemm_simt_tile(const float* __restrict__ x, const void* __restrict__ w, int f16,
                                               float* __restrict__ y, int m, int n, int k, int add) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int t0 = ((int)blockIdx.y * BR + warp / BE) * SIMT_ROWS;
    const int o0 = ((int)blockIdx.x * BE + warp % BE) * E;
    if (t0 >= m || o0 >= n) return;
    // Rows past m or n read row 0's values (never stored): no branch in the loop.
    size_t xr[SIMT_ROWS], wr[E];
#pragma unroll
    for (int r = 0; r < SIMT_ROWS; ++r) xr[r] = t0 + r < m ? (size_t)(t0 + r) : 0;
#pragma unroll
    for (int e = 0; e < E; ++e) wr[e] = o0 + e < n ? (size_t)(o0 + e) : 0;
    const bool vec = (k & 3) == 0;
    float acc[SIMT_ROWS][E];
#pragma unroll
    for (int r = 0; r < SIMT_ROWS; ++r)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r][e] = 0.f;
    for (int c0 = 0; c0 * 128 < k; c0 += U) {
        float xv[U][SIMT_ROWS][4], wv[U][E][4];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            int base = (c0 + u) * 128 + 4 * lane;
#pragma unroll
            for (int r = 0; r < SIMT_ROWS; ++r) simt_load4(x, 0, xr[r], base, k, vec, xv[u][r]);
#pragma unroll
            for (int e = 0; e < E; ++e) simt_load4(w, f16, wr[e], base, k, vec, wv[u][e]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            int base = (c0 + u) * 128 + 4 * lane;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (base + j < k) {
#pragma unroll
                    for (int r = 0; r < SIMT_ROWS; ++r)
#pragma unroll
                        for (int e = 0; e < E; ++e) acc[r][e] = fmaf(xv[u][r][j], wv[u][e][j], acc[r][e]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < SIMT_ROWS; ++r)
#pragma unroll
        for (int e = 0; e < E; ++e) {
            float v = acc[r][e];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
            if (lane == 0 && t0 + r < m && o0 + e < n) gemm_store(y + (size_t)(t0 + r) * n + o0 + e, v, add);
        }
}

// Few rows (decode): a warp a weight row, four warps a block, four chunks in flight.
extern "C" __global__ void __launch_bounds__(128) gemm_simt_e1(const float* __restrict__ x, const void* __restrict__ w,
                                                                int f16, float* __restrict__ y, int m, int n, int k,
                                                                int add) {
    tf_pdl_enter();
    gemm_simt_tile<1, 1, 4, 4>(x, w, f16, y, m, n, k, add);
}

// Many rows (prefill): a warp four weight rows, 4 x 4 warps a block (16 rows x 16 weight rows).
extern "C" __global__ void __launch_bounds__(512) gemm_simt_e4(const float* __restrict__ x, const void* __restrict__ w,
                                                                int f16, float* __restrict__ y, int m, int n, int k,
                                                                int add) {
    tf_pdl_enter();
    gemm_simt_tile<4, 4, 4, 2>(x, w, f16, y, m, n, k, add);
}
