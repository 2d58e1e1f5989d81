// Log-probabilities of raw logits rows (tf_backend logprobs.rs, launched by logprob.rs): per
// listed row its log-sum-exp in f64 and its most likely columns (ties: the lower column; NaN
// ranks as -inf; +0 above -0), plus the raw values at asked columns. A row is cut into fixed
// slices of LP_SLICE columns (whatever else is in the round); each slice's maximum, its sum of
// exp(x - max) and its top columns come from one block, then one block a row combines the
// slices in slice order. So a row's numbers depend on the row alone.

#define LP_SLICE 2048
// Threads of both kernels; LP_SLICE / LP_THREADS values a thread.
#define LP_THREADS 256
#define LP_PER (LP_SLICE / LP_THREADS)
// One query as logprob.rs packs it, LQ_WORDS words: row, top_n, first asked id, asked ids.
#define LQ_WORDS 4
// Most top columns a row may ask for (logprob.rs `TOP_MAX`).
#define LP_TOP_MAX 32

// A value and its column as one key: larger keys rank first. The float's total order (NaN
// taken as -inf) in the high word, the column's complement in the low word (lower columns
// first); never 0, which marks "none".
__device__ __forceinline__ u64 lp_key(float v, u32 col) {
    u32 u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = 0xff800000u;
    const u32 k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((u64)k << 32) | (u64)(~col);
}

__device__ __forceinline__ u64 lp_warp_max(u64 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const u64 w = __shfl_xor_sync(0xffffffffu, v, o);
        if (w > v) v = w;
    }
    return v;
}

// The block's largest key (every thread gets it); `sk` holds a key a warp.
__device__ __forceinline__ u64 lp_block_max(u64 v, u64* sk) {
    v = lp_warp_max(v);
    if ((threadIdx.x & 31) == 0) sk[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sk[0];
    for (int w = 1; w < LP_THREADS / 32; ++w)
        if (sk[w] > v) v = sk[w];
    __syncthreads();
    return v;
}

// Fixed-order block sum of doubles (every thread gets it); `sd` holds one a warp.
__device__ __forceinline__ double lp_block_sum(double v, double* sd) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sd[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sd[0];
    for (int w = 1; w < LP_THREADS / 32; ++w) v += sd[w];
    __syncthreads();
    return v;
}

// Block x of query y (queries past gridDim.y in steps of it): slice x of the query's row leaves
// its maximum (NaN left out; -inf when none) at pm[y * parts + x], its sum of exp(x - max) in
// f64 (0 when the maximum is -inf) at ps[...], and its `k` largest keys, largest first (0 past
// the slice's columns) at ptop[(y * parts + x) * k ...].
extern "C" __global__ void __launch_bounds__(LP_THREADS)
    logprob_partial(const float* __restrict__ x, const u32* __restrict__ qs, float* __restrict__ pm, double* __restrict__ ps,
                    u64* __restrict__ ptop, int n, int cols, int k) {
    tf_pdl_enter();
    __shared__ u64 sk[LP_THREADS / 32];
    __shared__ double sd[LP_THREADS / 32];
    __shared__ float sm[32];
    const int parts = gridDim.x, lo = blockIdx.x * LP_SLICE;
    for (int y = blockIdx.y; y < n; y += gridDim.y) {
        const float* row = x + (size_t)qs[(size_t)y * LQ_WORDS] * cols;
        float v[LP_PER];
        float m = NEG_INF;
#pragma unroll
        for (int j = 0; j < LP_PER; ++j) {
            const int c = lo + j * LP_THREADS + threadIdx.x;
            v[j] = c < cols ? row[c] : __int_as_float(0x7fffffff);  // NaN: left out of both
            if (v[j] > m) m = v[j];
        }
        m = sample_block_max(m, sm);  // an order-free max: NaN is never taken
        double s = 0.0;
        if (m > NEG_INF) {
            const double m64 = (double)m;
#pragma unroll
            for (int j = 0; j < LP_PER; ++j)
                if (v[j] == v[j]) s += exp((double)v[j] - m64);
        }
        s = lp_block_sum(s, sd);
        const size_t p = (size_t)y * parts + blockIdx.x;
        if (threadIdx.x == 0) pm[p] = m, ps[p] = m > NEG_INF ? s : 0.0;
        // The k largest keys, one block-wide max a round, each below the last.
        u64 keys[LP_PER];
#pragma unroll
        for (int j = 0; j < LP_PER; ++j) {
            const int c = lo + j * LP_THREADS + threadIdx.x;
            keys[j] = c < cols ? lp_key(v[j], (u32)c) : 0ull;
        }
        u64 last = ~0ull;
        for (int r = 0; r < k; ++r) {
            u64 best = 0;
#pragma unroll
            for (int j = 0; j < LP_PER; ++j)
                if (keys[j] < last && keys[j] > best) best = keys[j];
            best = lp_block_max(best, sk);
            if (threadIdx.x == 0) ptop[p * k + r] = best;
            last = best ? best : 1ull;  // none left: every later round finds none too
        }
    }
}

// Block y of the queries (past gridDim.x in steps of it) combines its row's `parts` slices in
// slice order into out[y * (2 + 2k) ...]: the log-sum-exp as a double's two words, then the k
// largest columns with their raw values (column ~0 past the row), and the raw values at the
// query's asked ids (-inf past the row) at out[n * (2 + 2k) + first asked id ...].
extern "C" __global__ void __launch_bounds__(LP_THREADS)
    logprob_combine(const float* __restrict__ x, const u32* __restrict__ qs, const u32* __restrict__ ids,
                    const float* __restrict__ pm, const double* __restrict__ ps, const u64* __restrict__ ptop,
                    u32* __restrict__ out, int n, int cols, int parts, int k) {
    tf_pdl_enter();
    __shared__ u64 sk[LP_THREADS / 32];
    for (int y = blockIdx.x; y < n; y += gridDim.x) {
        const u32* q = qs + (size_t)y * LQ_WORDS;
        const float* row = x + (size_t)q[0] * cols;
        u32* o = out + (size_t)y * (2 + 2 * k);
        const float* pmy = pm + (size_t)y * parts;
        const double* psy = ps + (size_t)y * parts;
        if (threadIdx.x == 0) {
            float mf = NEG_INF;
            for (int p = 0; p < parts; ++p)
                if (pmy[p] > mf) mf = pmy[p];
            double lse = (double)mf;
            if (mf > NEG_INF && mf < __int_as_float(0x7f800000)) {
                double sum = 0.0;
                for (int p = 0; p < parts; ++p)
                    if (pmy[p] > NEG_INF) sum += psy[p] * exp((double)pmy[p] - (double)mf);
                lse = (double)mf + log(sum);
            }
            const u64 bits = (u64)__double_as_longlong(lse);
            o[0] = (u32)bits;
            o[1] = (u32)(bits >> 32);
        }
        const u64* keys = ptop + (size_t)y * parts * k;
        const int total = parts * k;
        u64 last = ~0ull;
        for (int r = 0; r < k; ++r) {
            u64 best = 0;
            for (int i = threadIdx.x; i < total; i += LP_THREADS) {
                const u64 key = keys[i];
                if (key < last && key > best) best = key;
            }
            best = lp_block_max(best, sk);
            if (threadIdx.x == 0) {
                const u32 col = best ? ~(u32)best : 0xffffffffu;
                o[2 + 2 * r] = col;
                o[3 + 2 * r] = best ? __float_as_uint(row[col]) : 0u;
            }
            last = best ? best : 1ull;
        }
        u32* asked = out + (size_t)n * (2 + 2 * k) + q[2];
        for (u32 i = threadIdx.x; i < q[3]; i += LP_THREADS) {
            const u32 id = ids[q[2] + i];
            asked[i] = id < (u32)cols ? __float_as_uint(row[id]) : 0xff800000u;
        }
    }
}
