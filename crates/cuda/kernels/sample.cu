// Sampling candidates (tf_backend candidates.rs, launched by sample.rs): the listed logits rows
// are edited in place, then each keeps the columns whose scaled value lies within the window of
// its largest scaled value. Every value is made by the host's single IEEE operations in the
// host's order (the _rn intrinsics: no contraction into FMAs), so the set and its values are the
// host's bit for bit; a row's maximum is an order-free max (NaN never taken, only `v > m`), so
// any split of the row over blocks gives the same threshold. Narrower rules where a filter allows:
// a plain race keeps the ids near its best race score (sample_race, within the host's margin),
// top-k the window's ids at or above its k-th key (sample_topk, the host's set bit for bit), top-p
// the window's top that its masses say the cut needs (sample_mass; the host settles the cut).

// One query as sample.rs packs it, SQ_WORDS words: row, flags (bit 0: a temperature is given,
// bit 1: a race key, bit 2: top-p may narrow the window), temperature, window, repetition,
// frequency and presence penalties (floats as their bits), top_k (0: off), the race key (seed and
// position, low words first), top_p, three spare words.
#define SQ_WORDS 16
// Per top-p row, SM_WORDS doubles of window mass: SM_STEPS masses of the columns within
// 1, 2, 4, ... 2^(SM_STEPS - 1) scaled logits of the maximum, then the whole window's, then one
// spare; and SM_STEPS counts (u32) of those columns.
#define SM_WORDS 8
#define SM_STEPS 6
// One edit, SE_WORDS words: query, id, bias, count, flags (bit 0: a bias, bit 1: seen).
#define SE_WORDS 5
// A row's count when its scaled maximum is not finite (every column is then a candidate).
#define SQ_FLAGGED 0xffffffffu

__device__ __forceinline__ bool sample_finite(float v) { return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u; }

// `v` as the window measures it: divided by the temperature when one is given.
__device__ __forceinline__ float sample_scaled(const u32* q, float v) {
    return (q[1] & 1u) ? __fdiv_rn(v, __uint_as_float(q[2])) : v;
}

// Philox4x32-10 (tf_backend rng.rs, which has Random123's known answers).
__device__ __forceinline__ uint4 sample_philox(uint4 c, u32 k0, u32 k1) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
        const u32 h0 = __umulhi(0xD2511F53u, c.x), l0 = 0xD2511F53u * c.x;
        const u32 h1 = __umulhi(0xCD9E8D57u, c.z), l1 = 0xCD9E8D57u * c.z;
        c = make_uint4(h1 ^ c.y ^ k0, l1, h0 ^ c.w ^ k1, l0);
    }
    return c;
}

// Id `id`'s race score for scaled value `s` under query q's key (candidates.rs `race_score`): the
// uniform is rng.rs's bit for bit (integer steps, then exact float ones); the logarithms are
// CUDA's logf (within 1 ulp), which the host's margin allows for.
__device__ __forceinline__ float sample_race(const u32* q, float s, u32 id) {
    const uint4 w = sample_philox(make_uint4(id >> 2, 0u, q[10], q[11]), q[8], q[9]);
    const u32 bits = (id & 3u) == 0u ? w.x : (id & 3u) == 1u ? w.y : (id & 3u) == 2u ? w.z : w.w;
    const float u = __fmul_rn(__fadd_rn(__uint2float_rn(bits >> 9), 0.5f), 1.0f / 8388608.0f);
    return __fadd_rn(s, -logf(-logf(u)));
}

// A bound above every Gumbel draw (rng.rs GUMBEL_BOUND): a scaled value this far below the best
// score cannot reach it, so its noise is not drawn (rounding is monotone, so fl(s + bound) below
// the best means fl(s + noise) is too).
#define SQ_GUMBEL_BOUND 17.0f

// What a query ranks column `id`'s edited value `v` by: its race score when the query has a key
// (NEG_INF when it cannot reach `floor`), otherwise the value itself (scaled later, monotone).
__device__ __forceinline__ float sample_rank(const u32* q, float v, u32 id, float floor) {
    if (!(q[1] & 2u)) return v;
    const float s = sample_scaled(q, v);
    return __fadd_rn(s, SQ_GUMBEL_BOUND) >= floor ? sample_race(q, s, id) : NEG_INF;
}

// How far below the best race score a candidate may lie (candidates.rs `race_margin`).
__device__ __forceinline__ float sample_race_margin(float best) {
    const float m = fabsf(best);
    return __fmul_rn(m > 1.0f ? m : 1.0f, 1.0f / 4096.0f);
}

// The larger of a block's per-thread maxima (128 threads); every thread gets it.
__device__ __forceinline__ float sample_block_max(float m, float* sm) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, m, o);
        if (v > m) m = v;
    }
    if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = m;
    __syncthreads();
    m = sm[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w)
        if (sm[w] > m) m = sm[w];
    __syncthreads();  // sm is read before the next row writes it
    return m;
}

// Applies edit i of `edits` to its query's row of x [*, cols], in place (RowQuery::edited); ids
// past the row are left alone. At most one edit per id and row: no two threads share a value.
extern "C" __global__ void sample_edits(float* __restrict__ x, const u32* __restrict__ qs, const u32* __restrict__ edits,
                                        int n_edits, int cols) {
    tf_pdl_enter();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_edits; i += gridDim.x * blockDim.x) {
        const u32* e = edits + (size_t)i * SE_WORDS;
        const u32 id = e[1], count = e[3], flags = e[4];
        if (id >= (u32)cols) continue;
        const u32* q = qs + (size_t)e[0] * SQ_WORDS;
        const float r = __uint_as_float(q[4]), f = __uint_as_float(q[5]), p = __uint_as_float(q[6]);
        float* at = x + (size_t)q[0] * cols + id;
        float v = *at;
        if (flags & 1u) v = __fadd_rn(v, __uint_as_float(e[2]));
        if ((flags & 2u) && r != 1.0f) v = v > 0.0f ? __fdiv_rn(v, r) : __fmul_rn(v, r);
        if (count > 0u && (f != 0.0f || p != 0.0f)) {
            v = __fsub_rn(v, __fmul_rn(f, __uint2float_rn(count)));
            v = __fsub_rn(v, p);
        }
        *at = v;
    }
}

// Block x of query y (queries past gridDim.y in steps of it) leaves the largest value (race
// score, for a query with a race key) of columns [x * slice, (x + 1) * slice) of the query's row
// at pmax[y * gridDim.x + x] (NEG_INF when none is above it). 128 threads, 16 loads each in
// flight before any is compared.
extern "C" __global__ void __launch_bounds__(128) sample_max_partial(const float* __restrict__ x, const u32* __restrict__ qs,
                                                                     float* __restrict__ pmax, int n, int cols, int slice) {
    tf_pdl_enter();
    __shared__ float sm[32];
    const int lo = blockIdx.x * slice, hi = lo + min(slice, cols - lo), step = blockDim.x;
    for (int y = blockIdx.y; y < n; y += gridDim.y) {
        const u32* q = qs + (size_t)y * SQ_WORDS;
        const float* row = x + (size_t)q[0] * cols;
        float m = NEG_INF;
        for (int c = lo + threadIdx.x; c < hi; c += 16 * step) {
            float v[16];
            load16(row, c, hi, step, v);
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const float r = sample_rank(q, v[j], (u32)(c + j * step), m);
                if (r > m) m = r;
            }
        }
        m = sample_block_max(m, sm);
        if (threadIdx.x == 0) pmax[(size_t)y * gridDim.x + blockIdx.x] = m;
    }
}

// A scaled value's key in the filters' total order (candidates.rs `rank_key`): NaN lowest, -0
// below +0, larger values larger keys.
__device__ __forceinline__ u32 sample_rank_key(float s) {
    const u32 b = s != s ? 0xff800000u : __float_as_uint(s);
    return (b >> 31) ? ~b : (b | 0x80000000u);
}

// Block y (queries past gridDim.x in steps of it) finds, for a query with top_k = k > 0 whose
// scaled maximum is finite, the k-th largest key (sample_rank_key) among the window's columns
// (scaled value >= maximum minus window) by radix selection, 8 bits a pass from the top, and
// leaves it at kth[y]; kth stays 0 (below every key) when the window holds k columns or fewer.
// kth starts zeroed. candidates.rs `keep_top_k` is the host's rule.
extern "C" __global__ void __launch_bounds__(1024) sample_topk(const float* __restrict__ x, const u32* __restrict__ qs,
                                                               const float* __restrict__ pmax, u32* __restrict__ kth,
                                                               int n, int cols, int parts) {
    tf_pdl_enter();
    __shared__ u32 hist[256];
    __shared__ u32 s_digit, s_left, s_done;
    __shared__ float sm[32];
    for (int y = blockIdx.x; y < n; y += gridDim.x) {
        const u32* q = qs + (size_t)y * SQ_WORDS;
        const u32 k = q[7];
        if (k == 0u) continue;
        float m = NEG_INF;
        for (int p = threadIdx.x; p < parts; p += blockDim.x) {
            const float v = pmax[(size_t)y * parts + p];
            if (v > m) m = v;
        }
        m = sample_block_max(m, sm);
        const float smax = sample_scaled(q, m);
        if (!sample_finite(smax)) continue;
        const float thr = __fsub_rn(smax, __uint_as_float(q[3]));
        const float* row = x + (size_t)q[0] * cols;
        u32 prefix = 0u, mask = 0u;
        if (threadIdx.x == 0) s_left = k, s_done = 0u;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0u;
            __syncthreads();
            // 16 loads a thread in flight before any is counted (one at a time, the passes
            // waited on the row's latency, not its bandwidth).
            for (int c = threadIdx.x; c < cols; c += 16 * blockDim.x) {
                float v[16];
                load16(row, c, cols, blockDim.x, v);
#pragma unroll
                for (int j = 0; j < 16; ++j) {
                    const float s = sample_scaled(q, v[j]);
                    const u32 key = sample_rank_key(s);
                    if (s >= thr && (key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
                }
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                // The digit holding the left-th largest key of those matching the prefix.
                u32 cum = 0u;
                const u32 left = s_left;
                int d = 255;
                for (; d >= 0; --d) {
                    if (cum + hist[d] >= left) break;
                    cum += hist[d];
                }
                if (d < 0) s_done = 1u, d = 0;  // the window holds fewer than k: keep it all
                s_digit = (u32)d;
                s_left = left - cum;
            }
            __syncthreads();
            if (s_done) break;
            prefix |= s_digit << shift;
            mask |= 255u << shift;
        }
        if (threadIdx.x == 0 && !s_done) kth[y] = prefix;
        __syncthreads();  // the shared state is read before the next query resets it
    }
}

// Block x of query y (queries past gridDim.y in steps of it), for a top-p row (flag bit 2) whose
// scaled maximum is finite, adds its slice's window weights exp(s - max) (the host's f32
// difference, then a double exponential) to the row's masses (SM_WORDS doubles at mass + y *
// SM_WORDS, counts at cnt + y * SM_STEPS; both start zeroed). The sums only steer: the host
// settles top-p's cut with the total within a band (tf_backend top_p.rs), so their order is free.
extern "C" __global__ void __launch_bounds__(128) sample_mass(const float* __restrict__ x, const u32* __restrict__ qs,
                                                              const float* __restrict__ pmax, double* __restrict__ mass,
                                                              u32* __restrict__ cnt, int n, int cols, int slice, int parts) {
    tf_pdl_enter();
    __shared__ float sm[32];
    __shared__ double s_m[4][SM_STEPS + 1];
    __shared__ u32 s_c[4][SM_STEPS];
    const int lo = blockIdx.x * slice, hi = lo + min(slice, cols - lo), step = blockDim.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int y = blockIdx.y; y < n; y += gridDim.y) {
        const u32* q = qs + (size_t)y * SQ_WORDS;
        if (!(q[1] & 4u)) continue;
        float m = NEG_INF;
        for (int p = threadIdx.x; p < parts; p += step) {
            const float v = pmax[(size_t)y * parts + p];
            if (v > m) m = v;
        }
        m = sample_block_max(m, sm);
        const float smax = sample_scaled(q, m);
        if (!sample_finite(smax)) continue;
        const float thr = __fsub_rn(smax, __uint_as_float(q[3]));
        const float* row = x + (size_t)q[0] * cols;
        double lm[SM_STEPS + 1];
        u32 lc[SM_STEPS];
#pragma unroll
        for (int j = 0; j < SM_STEPS; ++j) lm[j] = 0.0, lc[j] = 0u;
        lm[SM_STEPS] = 0.0;
        for (int c = lo + threadIdx.x; c < hi; c += 16 * step) {
            float v[16];
            load16(row, c, hi, step, v);
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const float s = sample_scaled(q, v[i]);
                if (!(s >= thr)) continue;
                const double w = exp((double)__fsub_rn(s, smax));
                const float d = __fsub_rn(smax, s);
                lm[SM_STEPS] += w;
#pragma unroll
                for (int j = 0; j < SM_STEPS; ++j)
                    if (d < (float)(1 << j)) lm[j] += w, ++lc[j];
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
            for (int j = 0; j <= SM_STEPS; ++j) lm[j] += __shfl_xor_sync(0xffffffffu, lm[j], o);
#pragma unroll
            for (int j = 0; j < SM_STEPS; ++j) lc[j] += __shfl_xor_sync(0xffffffffu, lc[j], o);
        }
        if (lane == 0) {
#pragma unroll
            for (int j = 0; j <= SM_STEPS; ++j) s_m[warp][j] = lm[j];
#pragma unroll
            for (int j = 0; j < SM_STEPS; ++j) s_c[warp][j] = lc[j];
        }
        __syncthreads();
        if (threadIdx.x <= SM_STEPS) {
            double t = 0.0;
            for (int w = 0; w < (int)(blockDim.x >> 5); ++w) t += s_m[w][threadIdx.x];
            atomicAdd(&mass[(size_t)y * SM_WORDS + threadIdx.x], t);
            if (threadIdx.x < SM_STEPS) {
                u32 k = 0u;
                for (int w = 0; w < (int)(blockDim.x >> 5); ++w) k += s_c[w][threadIdx.x];
                atomicAdd(&cnt[(size_t)y * SM_STEPS + threadIdx.x], k);
            }
        }
        __syncthreads();  // the shared sums are read before the next row's
    }
}

// The scaled reach below the maximum that a top-p row's candidates need (sample_mass's sums): the
// first step whose mass reaches top_p of the window's (with room for the sums' roundings) within
// `cap` columns, or the window when none does (the host then settles or falls back).
__device__ __forceinline__ float sample_top_p_reach(const u32* q, const double* mass, const u32* cnt, int cap) {
    const float window = __uint_as_float(q[3]);
    const double target = (double)__uint_as_float(q[12]) * mass[SM_STEPS] * (1.0 + 1.0 / 1048576.0);
#pragma unroll
    for (int j = 0; j < SM_STEPS; ++j)
        if (mass[j] >= target && cnt[j] <= (u32)cap) return fminf((float)(1 << j), window);
    return window;
}

// Candidates a block stages in shared memory before it reserves their slots; a block whose
// slice holds more sends its row to the host (its count pushed past any capacity).
#define SQ_STAGE 2048

// Block x of query y folds the row's `parts` partial maxima, and when the scaled maximum is
// finite stages every column of its slice whose scaled value is >= that maximum minus the window
// (with a race key: whose race score is >= the best minus the race margin; with top_k: and
// whose key is at least the row's kth, sample_topk; a top-p row: within the reach its masses
// give, sample_top_p_reach) in shared memory (ranked by a shared-memory counter), then reserves them with one atomic on
// the row's count counts[y] (on past `cap`) and, for those within the row's first `cap`, one on
// the shared list's counter counts[n]; they go to `out` three words each: query, column, value
// (the edited logit, unscaled). A row whose scaled maximum is not finite gets counts[y] =
// SQ_FLAGGED. counts starts zeroed; the order of a row's candidates is arbitrary (the host sorts
// them).
extern "C" __global__ void __launch_bounds__(128) sample_select(const float* __restrict__ x, const u32* __restrict__ qs,
                                                                const float* __restrict__ pmax, u32* __restrict__ counts,
                                                                u32* __restrict__ out, int n, int cols, int slice, int parts,
                                                                int cap, const u32* __restrict__ kth,
                                                                const double* __restrict__ mass,
                                                                const u32* __restrict__ cnt) {
    tf_pdl_enter();
    __shared__ float sm[32];
    __shared__ u32 s_id[SQ_STAGE], s_val[SQ_STAGE];
    __shared__ u32 s_n, s_keep, s_slot;
    const int lo = blockIdx.x * slice, hi = lo + min(slice, cols - lo), step = blockDim.x;
    const int lane = threadIdx.x & 31;
    const u32 below = (1u << lane) - 1u;
    for (int y = blockIdx.y; y < n; y += gridDim.y) {
        const u32* q = qs + (size_t)y * SQ_WORDS;
        float m = NEG_INF;
        for (int p = threadIdx.x; p < parts; p += step) {
            const float v = pmax[(size_t)y * parts + p];
            if (v > m) m = v;
        }
        if (threadIdx.x == 0) s_n = 0;
        m = sample_block_max(m, sm);  // its barriers also order s_n's reset before any use
        const bool race = q[1] & 2u;
        const float smax = race ? m : sample_scaled(q, m);
        if (!sample_finite(smax)) {
            if (blockIdx.x == 0 && threadIdx.x == 0) counts[y] = SQ_FLAGGED;
            continue;
        }
        const float reach = race                ? sample_race_margin(smax)
                            : (q[1] & 4u) && mass ? sample_top_p_reach(q, mass + (size_t)y * SM_WORDS,
                                                                       cnt + (size_t)y * SM_STEPS, cap)
                                                  : __uint_as_float(q[3]);
        const float thr = __fsub_rn(smax, reach);
        const u32 kmin = kth != nullptr ? kth[y] : 0u;  // top-k's k-th key (0: off)
        const float* row = x + (size_t)q[0] * cols;
        // The trip count is the block's (not the thread's), so every lane reaches each ballot.
        for (int base = lo; base < hi; base += 16 * step) {
            const int c = base + threadIdx.x;
            float v[16];
            load16(row, c, hi, step, v);
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const float r = race ? sample_rank(q, v[j], (u32)(c + j * step), thr) : sample_scaled(q, v[j]);
                const bool take = j * step < hi - c && r >= thr && (race || sample_rank_key(r) >= kmin);
                const u32 mask = __ballot_sync(0xffffffffu, take);
                if (mask == 0u) continue;
                const int lead = __ffs(mask) - 1;
                u32 at = 0;
                if (lane == lead) at = atomicAdd(&s_n, (u32)__popc(mask));
                at = __shfl_sync(0xffffffffu, at, lead) + (u32)__popc(mask & below);
                if (take && at < SQ_STAGE) {
                    s_id[at] = (u32)(c + j * step);
                    s_val[at] = __float_as_uint(v[j]);
                }
            }
        }
        __syncthreads();
        const u32 local = s_n;
        if (threadIdx.x == 0) {
            s_keep = 0;
            if (local > 0) {
                // A slice too rich to stage sends its row past any capacity (to the host).
                const u32 add = local <= SQ_STAGE ? local : local + (u32)cap + 1u;
                const u32 before = atomicAdd(&counts[y], add);
                const u32 room = before < (u32)cap ? (u32)cap - before : 0u;
                s_keep = local <= SQ_STAGE ? min(local, room) : 0u;
                if (s_keep > 0) s_slot = atomicAdd(&counts[n], s_keep);
            }
        }
        __syncthreads();
        const u32 keep = s_keep;
        for (u32 i = threadIdx.x; i < keep; i += step) {
            u32* o = out + (size_t)(s_slot + i) * 3;
            o[0] = (u32)y;
            o[1] = s_id[i];
            o[2] = s_val[i];
        }
        __syncthreads();  // the stage is read before the next row refills it
    }
}
