// Mixture of experts on the device (moe.rs). Routing runs here for every round, so a token's
// experts and weights are the same bits whichever path runs them: rounds of few rows stay on the
// device (plan, gather, grouped GEMVs over every chosen expert, combine: no host
// round trip, so they can be recorded as graphs); rounds of many rows download only the routing
// and run each expert through the ordinary matmuls. The grouped GEMV is the few-row GEMV's body
// (gemm.cu `gemv_body`) over an expert's rows, so an expert's output row has the bits the
// ordinary matmul gives it; both paths add a row's experts in increasing expert order with one
// fused multiply-add each (scatter_add, moe_combine).

// Most experts a model may have on the device path (one plan thread each).
#define MOE_MAX_EXPERTS 1024
// Most experts a token may choose.
#define MOE_MAX_TOPK 32

// A float's total order as an unsigned key (f32::total_cmp).
__device__ __forceinline__ u32 moe_total_key(float v) {
    const u32 u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Rows a routing block takes (a warp each).
#define MOE_ROUTE_ROWS 4

// Most expert groups a group-limited router may have (a lane each).
#define MOE_MAX_GROUPS 32

// Warp r of the block takes row blockIdx.x * MOE_ROUTE_ROWS + r (the steps of tf_backend's
// router.rs `route`): scores of the row's `ne` router logits, softmax (the max; expf of each
// difference; their sum, each lane over experts lane, lane + 32, ... in order, then the lanes in
// a fixed shuffle tree; each divided by the sum) or sigmoid (`sig`: 1 / (1 + expf(-l))); choice
// values = scores + bias (when bias is not null); with `ng` > 1 groups, lane g ranks group g by
// its best plus second best choice value and the `tg` best groups (ties: the lower group) stay
// choosable; the `k` largest choosable choice values by total order (ties: the lower index),
// largest first; weights = their scores, divided by (their sum in that order + eps) when `norm`,
// then times `scale`. ids/w: [rows, k].
extern "C" __global__ void __launch_bounds__(32 * MOE_ROUTE_ROWS)
    moe_route(const float* __restrict__ logits, u32* __restrict__ ids, float* __restrict__ w, int rows, int ne, int k,
              int norm, const float* __restrict__ bias, int sig, int ng, int tg, float eps, float scale) {
    tf_pdl_enter();
    __shared__ float s_p[MOE_ROUTE_ROWS][MOE_MAX_EXPERTS];
    __shared__ float s_c[MOE_ROUTE_ROWS][MOE_MAX_EXPERTS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r = blockIdx.x * MOE_ROUTE_ROWS + warp;
    if (r >= rows) return;
    const float* l = logits + (size_t)r * ne;
    float* p = s_p[warp];
    float* c = s_c[warp];
    if (sig) {
        for (int e = lane; e < ne; e += 32) p[e] = __fdiv_rn(1.f, __fadd_rn(1.f, expf(-l[e])));
    } else {
        float mx = NEG_INF;
        for (int e = lane; e < ne; e += 32) mx = fmaxf(mx, l[e]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.f;
        for (int e = lane; e < ne; e += 32) {
            p[e] = expf(__fsub_rn(l[e], mx));
            sum = __fadd_rn(sum, p[e]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
        for (int e = lane; e < ne; e += 32) p[e] = __fdiv_rn(p[e], sum);
    }
    for (int e = lane; e < ne; e += 32) c[e] = bias ? __fadd_rn(p[e], bias[e]) : p[e];
    __syncwarp();
    if (ng > 1) {
        // Lane g: its group's score (best two, in id order); then the tg best groups' lanes.
        const int size = ne / ng;
        u64 gkey = 0;
        if (lane < ng) {
            float first = NEG_INF, second = NEG_INF;
            for (int e = lane * size; e < (lane + 1) * size; ++e) {
                const float v = c[e];
                if (moe_total_key(v) > moe_total_key(first)) {
                    second = first;
                    first = v;
                } else if (moe_total_key(v) > moe_total_key(second)) {
                    second = v;
                }
            }
            gkey = ((u64)moe_total_key(__fadd_rn(first, second)) << 32) | (u64)(~(u32)lane);
        }
        bool keep = false;
        u64 last = ~0ull;
        for (int j = 0; j < tg; ++j) {
            u64 best = lane < ng && gkey < last ? gkey : 0;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const u64 other = __shfl_xor_sync(0xffffffffu, best, o);
                if (other > best) best = other;
            }
            last = best;
            keep |= lane < ng && gkey == best;
        }
        const u32 kept = __ballot_sync(0xffffffffu, keep);
        __syncwarp();
        for (int e = lane; e < ne; e += 32)
            if (!((kept >> (e / size)) & 1u)) c[e] = NEG_INF;
        __syncwarp();
    }
    u64 last = ~0ull;
    float total = 0.f, my_p = 0.f;
    u32 my_e = 0;
    for (int j = 0; j < k; ++j) {
        u64 best = 0;
        for (int e = lane; e < ne; e += 32) {
            const u64 key = ((u64)moe_total_key(c[e]) << 32) | (u64)(~(u32)e);
            if (key < last && key > best) best = key;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const u64 other = __shfl_xor_sync(0xffffffffu, best, o);
            if (other > best) best = other;
        }
        last = best;
        const u32 e = ~(u32)best;
        __syncwarp();
        const float pe = p[e];
        total = __fadd_rn(total, pe);
        if (lane == j) my_e = e, my_p = pe;
    }
    if (lane < k) {
        ids[(size_t)r * k + lane] = my_e;
        const float wt = norm ? __fdiv_rn(my_p, __fadd_rn(total, eps)) : my_p;
        w[(size_t)r * k + lane] = __fmul_rn(wt, scale);
    }
}

// One block, a thread an expert: the `pairs` = rows * k routed (row, expert) pairs sorted by
// expert, then row. offsets[e] .. offsets[e + 1] are expert e's pairs; pair_row their rows;
// pos[p] where pair p (= row * k + j) went; active[0 .. *n_active] the experts with pairs,
// increasing.
extern "C" __global__ void moe_plan(const u32* __restrict__ ids, int pairs, int ne, int k, u32* __restrict__ offsets,
                                    u32* __restrict__ active, u32* __restrict__ n_active, u32* __restrict__ pair_row,
                                    u32* __restrict__ pos) {
    tf_pdl_enter();
    __shared__ u32 s_count[MOE_MAX_EXPERTS], s_start[MOE_MAX_EXPERTS];
    const int e = threadIdx.x;
    u32 c = 0;
    if (e < ne)
        for (int p = 0; p < pairs; ++p) c += ids[p] == (u32)e;
    if (e < ne) s_count[e] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 run = 0, na = 0;
        for (int i = 0; i < ne; ++i) {
            s_start[i] = run;
            offsets[i] = run;
            if (s_count[i]) active[na++] = (u32)i;
            run += s_count[i];
        }
        offsets[ne] = run;
        *n_active = na;
    }
    __syncthreads();
    if (e < ne && c) {
        u32 at = s_start[e];
        for (int p = 0; p < pairs; ++p)
            if (ids[p] == (u32)e) {
                pair_row[at] = (u32)(p / k);
                pos[p] = at++;
            }
    }
}

// Most pairs moe_plan_tiles takes (their ids staged in shared memory).
#define MOE_PLAN_PAIRS 8192
// Threads moe_plan_tiles is launched with (moe/grouped.rs): the (run, expert) counters it keeps.
#define MOE_PLAN_THREADS 1024

// The grouped wgmma GEMM's plan on the device (moe/grouped.rs; one block, ids staged in dynamic
// shared memory): the pairs sorted by expert, then pair order, as moe_plan sorts them (pair_row
// and pos alike), and the 128-pair token tiles of each expert's pairs, [expert, first, end]
// each in expert order, their count at *ntt. The pairs are cut into `runs` equal runs (as many as
// MOE_PLAN_THREADS / ne) and thread t counts, then places, the pairs of expert t % ne in run
// t / ne: each run's pairs of an expert follow the earlier runs' ones, so the order is the stable
// sort's whatever the number of runs, and a warp's lanes (consecutive experts of one run) read
// one id at a time.
extern "C" __global__ void moe_plan_tiles(const u32* __restrict__ ids, int pairs, int ne, int k,
                                          u32* __restrict__ pair_row, u32* __restrict__ pos, u32* __restrict__ tiles,
                                          u32* __restrict__ ntt) {
    tf_pdl_enter();
    extern __shared__ u32 s_ids[];
    __shared__ u32 s_run[MOE_PLAN_THREADS], s_start[MOE_MAX_EXPERTS + 1], s_tile[MOE_MAX_EXPERTS];
    const int runs = ne < MOE_PLAN_THREADS ? MOE_PLAN_THREADS / ne : 1;
    const int len = (pairs + runs - 1) / runs;
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) s_ids[p] = ids[p];
    __syncthreads();
    // Each (run, expert)'s pairs.
    for (int t = threadIdx.x; t < runs * ne; t += blockDim.x) {
        const u32 e = (u32)(t % ne);
        const int p0 = (t / ne) * len, p1 = min(pairs, p0 + len);
        u32 c = 0;
        for (int p = p0; p < p1; ++p) c += s_ids[p] == e;
        s_run[t] = c;
    }
    __syncthreads();
    // Each run's first place among its expert's pairs; the expert's count in s_start.
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
        u32 at = 0;
        for (int r = 0; r < runs; ++r) {
            const u32 c = s_run[r * ne + e];
            s_run[r * ne + e] = at;
            at += c;
        }
        s_start[e] = at;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 run = 0, t = 0;
        for (int e = 0; e < ne; ++e) {
            const u32 c = s_start[e];
            s_start[e] = run;
            s_tile[e] = t;
            run += c;
            t += (c + 127) / 128;
        }
        s_start[ne] = run;
        *ntt = t;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < runs * ne; t += blockDim.x) {
        const u32 e = (u32)(t % ne);
        const int p0 = (t / ne) * len, p1 = min(pairs, p0 + len);
        u32 at = s_start[e] + s_run[t];
        for (int p = p0; p < p1; ++p)
            if (s_ids[p] == e) {
                pair_row[at] = (u32)(p / k);
                pos[p] = at++;
            }
    }
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
        const u32 start = s_start[e];
        const u32 c = s_start[e + 1] - start;
        for (u32 j = 0; j < (c + 127) / 128; ++j) {
            u32* t = tiles + 3 * (s_tile[e] + j);
            t[0] = (u32)e;
            t[1] = start + 128 * j;
            t[2] = start + c;
        }
    }
}

// The few-row GEMV over every active expert: block (x, a) takes tile group x % nblk (gemv_body
// with PACK: GEMV_W / segments 16-row tiles) of weight x / nblk (ws[(x / nblk) * ne + e]: gate
// and up share a launch; every weight of a kind has one shape) of active expert a = e, for that
// expert's pairs (x rows and y rows offsets[e] .. offsets[e + 1] of the sorted pairs, at most
// 8 NT of them), into y0 or y1.
#define MOE_GEMV_KERNEL(NT, U, ST)                                                                                 \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_W)                                                      \
        moe_gemv_n##NT(const u64* __restrict__ ws, int ne, float* __restrict__ y0, float* __restrict__ y1, int n,  \
                       int nblk, const u16* __restrict__ x,    const u32* __restrict__ offsets,                     \
                       const u32* __restrict__ active, const u32* __restrict__ n_active, int kt, int kp) {        \
        tf_pdl_launch();                                                                                           \
        tf_pdl_wait(); /* the plan is read before any weight: idle experts stream nothing */                       \
        if (blockIdx.y >= *n_active) return;                                                                       \
        const int which = blockIdx.x / nblk, tile = blockIdx.x % nblk;                                             \
        const u32 e = active[blockIdx.y], start = offsets[e];                                                      \
        const int m = (int)(offsets[e + 1] - start);                                                               \
        float* y = which ? y1 : y0;                                                                                \
        gemv_body<NT, U, ST, 8 * NT, true>((const u16*)ws[(size_t)which * ne + e], y + (size_t)start * n, n, tile, \
                                           x + (size_t)start * kp, m, kt, kp, 0);                                  \
    }
MOE_GEMV_KERNEL(1, 4, 4)
MOE_GEMV_KERNEL(2, 4, 4)
MOE_GEMV_KERNEL(4, 4, 3)
MOE_GEMV_KERNEL(8, 2, 3)

// moe_gemv over FP8 experts (gemv_fp8.cu's body, tiles packed as moe_gemv's): ws the codes' and ss
// the scales' addresses of the kind (gate and up share a launch, `ne` each), every weight of a
// kind one shape and one block layout (bh, bt, gr, gc as gemv_fp8_n* takes them).
#define MOE_GEMV_FP8_KERNEL(NT, U, ST)                                                                              \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_W) moe_gemv_fp8_n##NT(                                  \
        const u64* __restrict__ ws, const u64* __restrict__ ss, int ne, float* __restrict__ y0,                     \
        float* __restrict__ y1, int n, int nblk, int bh, int bt, int gr, int gc, const u16* __restrict__ x,         \
        const u32* __restrict__ offsets, const u32* __restrict__ active, const u32* __restrict__ n_active, int kt, \
        int kp) {                                                                                                   \
        tf_pdl_launch();                                                                                            \
        tf_pdl_wait(); /* the plan is read before any weight: idle experts stream nothing */                        \
        if (blockIdx.y >= *n_active) return;                                                                        \
        const int which = blockIdx.x / nblk, tile = blockIdx.x % nblk;                                              \
        const u32 e = active[blockIdx.y], start = offsets[e];                                                       \
        const int m = (int)(offsets[e + 1] - start);                                                                \
        float* y = which ? y1 : y0;                                                                                 \
        const size_t i = (size_t)which * ne + e;                                                                    \
        gemv_fp8_body<NT, U, ST, true>((const unsigned char*)ws[i], (const float*)ss[i], y + (size_t)start * n, n,  \
                                       tile, bh, bt, gr, gc, x + (size_t)start * kp, m, kt, kp, 0);                 \
    }
MOE_GEMV_FP8_KERNEL(1, 4, 4)
MOE_GEMV_FP8_KERNEL(2, 4, 4)
MOE_GEMV_FP8_KERNEL(4, 4, 3)
MOE_GEMV_FP8_KERNEL(8, 2, 3)

// Block (r, c): columns c * blockDim.x.. of row r of the output: the sum over the row's k experts (ids, w: the routing, [rows,
// k]), in increasing expert order, of weight * that pair's row of y (row pos[r * k + j]; one fused
// multiply-add each, from zero: scatter_add's sum).
extern "C" __global__ void moe_combine(const float* __restrict__ y, const u32* __restrict__ ids,
                                       const float* __restrict__ w, const u32* __restrict__ pos, float* __restrict__ out,
                                       int k, int cols) {
    tf_pdl_enter();
    __shared__ u32 s_pos[MOE_MAX_TOPK];
    __shared__ float s_w[MOE_MAX_TOPK];
    const int r = blockIdx.x;
    if (threadIdx.x == 0) {
        u32 e_of[MOE_MAX_TOPK];
        for (int j = 0; j < k; ++j) {
            // Insertion by expert id (a row's experts are distinct).
            const size_t p = (size_t)r * k + j;
            int at = j;
            while (at > 0 && e_of[at - 1] > ids[p]) {
                e_of[at] = e_of[at - 1];
                s_pos[at] = s_pos[at - 1];
                s_w[at] = s_w[at - 1];
                --at;
            }
            e_of[at] = ids[p];
            s_pos[at] = pos[p];
            s_w[at] = w[p];
        }
    }
    __syncthreads();
    for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < cols; c += gridDim.y * blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < k; ++j) acc = __fmaf_rn(s_w[j], y[(size_t)s_pos[j] * cols + c], acc);
        out[(size_t)r * cols + c] = acc;
    }
}
