// Drawing sampled rows where the logits are (tf_backend candidates.rs module docs, launched by
// draw.rs): one block of SD_THREADS threads a row applies the row's mask (ids outside it -inf),
// finds its largest value, and for a greedy row (no race key) sends its first largest id; for a
// keyed row it applies top-k, top-p and min-p exactly as the host's filters do (engine
// sampler/filter.rs), runs the Gumbel race over the survivors with its own noise and sends the
// survivors whose score lies within the host's margin of its best (candidates.rs
// `race_margin`): the host races those few with its exact noise. A row the block cannot settle
// exactly is sent to the host whole (count SD_HOST): a non-finite maximum, a top-p cut whose
// mass lies within the band the two sums' roundings allow (tf_backend top_p.rs
// MASS_TOLERANCE), a boundary region past SD_LIST ids, or more than SD_NEAR finalists.
//
// Values are the host's single IEEE operations (the _rn intrinsics); top-k's k-th key is found
// by radix selection over rank keys, its ties kept by lowest id; top-p's cut by a histogram of
// weights over the distance below the maximum, then the boundary region sorted by (key, id) and
// summed in that order (the histogram spans the window, or the row's spread below its maximum
// when narrower); min-p compares x - max with ln(min_p) (one f32 subtraction, the logarithm made
// by the host).

// Threads of a draw block (one row each).
#define SD_THREADS 1024
// Buckets of top-p's weight histogram over [0, window] below the maximum.
#define SD_BUCKETS 2048
// Ids of top-p's boundary region a block sorts in shared memory (SD_THREADS * 4).
#define SD_LIST 4096
// Finalists a row may send (draw.rs NEAR).
#define SD_NEAR 16
// Words of a row's answer: its count, then (id, value bits) pairs.
#define SD_OUT (1 + 2 * SD_NEAR)
// A row's count when the host must draw it from the whole row.
#define SD_HOST 0xffffffffu
// Query flag bits beyond sample.cu's: a race key (the row is sampled), min-p on, a mask.
#define SD_KEYED 8u
#define SD_MIN_P 16u
#define SD_MASK 32u
// Relative band around a top-p target that holds the host's sums (top_p.rs MASS_TOLERANCE).
#define SD_TOL (1.0 / 1073741824.0)

// The scaled value a rank key stands for (the inverse of sample_rank_key for non-NaN values).
__device__ __forceinline__ float sd_key_value(u32 key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Values of ids c .. c + 3 of `row` (-inf past `cols` and outside the mask when one is given:
// bit id % 32 of word id / 32, ids past `mwords` words masked).
__device__ __forceinline__ void sd_load4(const float* __restrict__ row, const u32* __restrict__ mask, u32 mwords, int c,
                                         int cols, float (&v)[4]) {
    u32 w = 0xffffffffu;
    if (mask != nullptr) w = (u32)(c >> 5) < mwords ? mask[c >> 5] : 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int id = c + j;
        v[j] = id < cols ? row[id] : NEG_INF;
        if (!((w >> ((u32)id & 31u)) & 1u)) v[j] = NEG_INF;
    }
}

// Calls f(c, v) for every group of four ids c .. c + 3 of the row this thread takes (groups
// blockDim.x apart), U groups' loads in flight before any is used (the race's passes take two:
// their registers go to the noise).
template <int U = 4, class F>
__device__ __forceinline__ void sd_each(const float* __restrict__ row, const u32* __restrict__ mask, u32 mwords,
                                        int cols, F f) {
    const int stride = 4 * (int)blockDim.x;
    for (int base = 4 * (int)threadIdx.x; base < cols; base += U * stride) {
        float v[U][4];
#pragma unroll
        for (int u = 0; u < U; ++u) sd_load4(row, mask, mwords, base + u * stride, cols, v[u]);
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (base + u * stride < cols) f(base + u * stride, v[u]);
    }
}

// Exclusive prefix of each thread's `v` in thread order, the block's total in *total (s_d holds
// 33 doubles). Every thread must call it.
__device__ __forceinline__ double sd_scan_d(double v, double* s_d, double* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    double inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const double t = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += t;
    }
    __syncthreads();  // s_d's last readers are done
    if (lane == 31) s_d[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const double w = lane < nw ? s_d[lane] : 0.0;
        double wi = w;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const double t = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o) wi += t;
        }
        if (lane < nw) s_d[lane] = wi - w;
        if (lane == 31) s_d[32] = wi;
    }
    __syncthreads();
    *total = s_d[32];
    return s_d[warp] + (inc - v);
}

// sd_scan_d for counts (s_u holds 33 words).
__device__ __forceinline__ u32 sd_scan_u(u32 v, u32* s_u, u32* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    u32 inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const u32 t = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += t;
    }
    __syncthreads();
    if (lane == 31) s_u[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const u32 w = lane < nw ? s_u[lane] : 0u;
        u32 wi = w;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const u32 t = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o) wi += t;
        }
        if (lane < nw) s_u[lane] = wi - w;
        if (lane == 31) s_u[32] = wi;
    }
    __syncthreads();
    *total = s_u[32];
    return s_u[warp] + (inc - v);
}

// Sorts buf[0, count) (count <= SD_LIST) most likely first: larger (key << 32 | ~id), so larger
// key, then lower id; bitonic over the next power of two, padded with zeros (below every pair).
// Every thread must call it; buf's writes are ordered before it by the caller's barrier.
__device__ __forceinline__ void sd_sort(unsigned long long* buf, u32 count) {
    u32 size = 2u;
    while (size < count) size <<= 1;
    for (u32 i = count + threadIdx.x; i < size; i += blockDim.x) buf[i] = 0ull;
    __syncthreads();
    for (u32 kk = 2u; kk <= size; kk <<= 1) {
        for (u32 j = kk >> 1; j > 0u; j >>= 1) {
            for (u32 i = threadIdx.x; i < size; i += blockDim.x) {
                const u32 ixj = i ^ j;
                if (ixj > i) {
                    const unsigned long long x = buf[i], y = buf[ixj];
                    const bool desc = (i & kk) == 0u;
                    if (desc ? x < y : x > y) buf[i] = y, buf[ixj] = x;
                }
            }
            __syncthreads();
        }
    }
}

// A region entry: the rank key above, the id's complement below (sd_sort's order).
__device__ __forceinline__ unsigned long long sd_entry(float s, u32 id) {
    return ((unsigned long long)sample_rank_key(s) << 32) | (u32)~id;
}

// Race score of scaled value `s` whose Philox word is `bits` (sample.cu sample_race's steps).
__device__ __forceinline__ float sd_score(float s, u32 bits) {
    const float u = __fmul_rn(__fadd_rn(__uint2float_rn(bits >> 9), 0.5f), 1.0f / 8388608.0f);
    return __fadd_rn(s, -logf(-logf(u)));
}

// What survives a keyed row's filters, once found: the window, top-k's k-th key (0: off) and
// its ties below tie_lim, top-p's cut element (key, id) (key 0: off), min-p's floor.
struct SdCut {
    float thr, smax, floor;
    bool min_p;
    u32 kth, tie_lim, pkey, pid;
};

__device__ __forceinline__ bool sd_survives(const SdCut& k, float s, u32 id) {
    if (!(s >= k.thr)) return false;
    const u32 key = sample_rank_key(s);
    if (k.kth != 0u && !(key > k.kth || (key == k.kth && id < k.tie_lim))) return false;
    if (!(key > k.pkey || (key == k.pkey && id <= k.pid))) return false;
    return !k.min_p || __fsub_rn(s, k.smax) >= k.floor;
}

// Block y (rows past gridDim.x in steps of it) draws query y's row of x [*, cols] (edited
// already) and leaves its answer at out[y * SD_OUT]: the count, then (id, value bits) pairs in
// any order (the edited logits, unscaled), or SD_HOST. `masks` holds the masks' words (query
// words 14, 15: offset and length).
extern "C" __global__ void __launch_bounds__(SD_THREADS) sample_draw(const float* __restrict__ x,
                                                                     const u32* __restrict__ qs,
                                                                     const u32* __restrict__ masks,
                                                                     u32* __restrict__ out, int n, int cols) {
    tf_pdl_enter();
    __shared__ unsigned long long s_buf[SD_LIST];  // top-k's and top-p's histograms, then the region
    __shared__ double s_d[33];
    __shared__ u32 s_u[33];
    __shared__ float s_f[32];
    __shared__ int s_i[32];
    __shared__ u32 s_k[8];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int y = blockIdx.x; y < n; y += gridDim.x) {
        const u32* q = qs + (size_t)y * SQ_WORDS;
        const u32 flags = q[1];
        const float* row = x + (size_t)q[0] * cols;
        const u32* mask = (flags & SD_MASK) ? masks + q[14] : nullptr;
        const u32 mwords = q[15];
        u32* o = out + (size_t)y * SD_OUT;
        // The first largest value (NaN never taken), and the smallest value above -inf (as the
        // largest negated), which bounds top-p's histogram.
        float bv = NEG_INF, neg_min = NEG_INF;
        int bi = 0x7fffffff;
        sd_each(row, mask, mwords, cols, [&](int c, const float(&v)[4]) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                argmax_take(bv, bi, v[j], c + j);
                if (v[j] != NEG_INF && -v[j] > neg_min) neg_min = -v[j];
            }
        });
        __syncthreads();  // the previous row's last reads of s_f are done
        neg_min = sample_block_max(neg_min, s_f);
        warp_argmax(bv, bi);
        __syncthreads();  // sample_block_max's reads of s_f are done
        if (lane == 0) s_f[warp] = bv, s_i[warp] = bi;
        __syncthreads();
        bv = s_f[0], bi = s_i[0];
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w) argmax_take(bv, bi, s_f[w], s_i[w]);
        const bool keyed = flags & SD_KEYED;
        const float smax = sample_scaled(q, bv);
        if (!sample_finite(smax)) {
            if (tid == 0) o[0] = SD_HOST;
            continue;
        }
        if (!keyed) {
            if (tid == 0) o[0] = 1u, o[1] = (u32)bi, o[2] = __float_as_uint(bv);
            continue;
        }
        SdCut k;
        k.smax = smax;
        k.thr = __fsub_rn(smax, __uint_as_float(q[3]));
        k.min_p = flags & SD_MIN_P;
        k.floor = __uint_as_float(q[13]);
        k.kth = 0u, k.tie_lim = 0xffffffffu, k.pkey = 0u, k.pid = 0u;
        bool host = false;
        // Top-k's and top-p's histograms: SD_BUCKETS buckets over the distance below the maximum,
        // spanning the window, or the row's whole spread below its maximum when that is narrower
        // (a flat row's ids would crowd a few buckets of the window). A larger value never lands
        // in a later bucket.
        const float window = __uint_as_float(q[3]);
        const float spread = __fsub_rn(smax, sample_scaled(q, -neg_min));
        const float span = spread > 0.0f && spread < window ? spread : window;
        const float scale = __fdiv_rn((float)SD_BUCKETS, span);
        auto bucket = [&](float s) {
            const float d = __fsub_rn(smax, s);
            return min(SD_BUCKETS - 1, (int)__fmul_rn(d, scale));
        };
        const u32 top_k = q[7];
        bool radix = false;
        if (top_k > 0u) {
            // The window's counts by bucket find the bucket holding the top_k-th id (ties to the
            // lower id: sd_sort's order); that bucket's ids, sorted, name it exactly.
            u32* hc = (u32*)s_buf;
            __syncthreads();  // earlier reads of s_buf and s_k are done
            for (int i = tid; i < SD_BUCKETS; i += blockDim.x) hc[i] = 0u;
            __syncthreads();
            sd_each(row, mask, mwords, cols, [&](int c, const float(&v)[4]) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float s = sample_scaled(q, v[j]);
                    if (s >= k.thr) atomicAdd(&hc[bucket(s)], 1u);
                }
            });
            __syncthreads();
            if (warp == 0) {
                const int per = SD_BUCKETS / 32, b0 = lane * per;
                u32 sum = 0u;
                for (int b = b0; b < b0 + per; ++b) sum += hc[b];
                u32 inc = sum;
#pragma unroll
                for (int off = 1; off < 32; off <<= 1) {
                    const u32 t = __shfl_up_sync(0xffffffffu, inc, off);
                    if (lane >= off) inc += t;
                }
                u32 cum = inc - sum, found = SD_BUCKETS, before = 0u;
                for (int b = b0; b < b0 + per; ++b) {
                    if (cum + hc[b] >= top_k) {
                        found = (u32)b, before = cum;
                        break;
                    }
                    cum += hc[b];
                }
                const u32 total = __reduce_add_sync(0xffffffffu, sum);
                const u32 first = __reduce_min_sync(0xffffffffu, found);
                if (found == first && found < SD_BUCKETS) s_k[5] = found, s_k[6] = before, s_k[7] = hc[found];
                if (lane == 0) s_k[3] = total;
            }
            __syncthreads();
            const u32 total = s_k[3];
            if (total > top_k) {
                const u32 kb = s_k[5], before = s_k[6], count = s_k[7];
                if (count > SD_LIST) {
                    radix = true;  // a tie too wide to sort here
                } else {
                    __syncthreads();  // the histogram is read; the bucket's ids take its place
                    if (tid == 0) s_k[0] = 0u;
                    __syncthreads();
                    sd_each(row, mask, mwords, cols, [&](int c, const float(&v)[4]) {
#pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            const float s = sample_scaled(q, v[j]);
                            if (s >= k.thr && (u32)bucket(s) == kb) s_buf[atomicAdd(&s_k[0], 1u)] = sd_entry(s, (u32)(c + j));
                        }
                    });
                    __syncthreads();
                    sd_sort(s_buf, count);
                    const unsigned long long e = s_buf[top_k - before - 1u];
                    k.kth = (u32)(e >> 32);
                    k.tie_lim = ~(u32)e + 1u;
                }
            }
        }
        if (radix) {
            // Radix selection of the top_k-th largest window key, 8 bits a pass from the top.
            u32* hist = (u32*)s_buf;
            u32 prefix = 0u, pmask = 0u, left = top_k, ties = 0u;
            bool done = false;
            for (int shift = 24; shift >= 0; shift -= 8) {
                __syncthreads();  // the previous pass's (or row's) reads of hist and s_k are done
                for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0u;
                __syncthreads();
                sd_each(row, mask, mwords, cols, [&](int c, const float(&v)[4]) {
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float s = sample_scaled(q, v[j]);
                        const u32 key = sample_rank_key(s);
                        if (s >= k.thr && (key & pmask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
                    }
                });
                __syncthreads();
                if (tid == 0) {
                    u32 cum = 0u;
                    int d = 255;
                    for (; d >= 0; --d) {
                        if (cum + hist[d] >= left) break;
                        cum += hist[d];
                    }
                    s_k[0] = d < 0 ? 1u : 0u;  // the window holds fewer than top_k: keep it all
                    s_k[1] = d < 0 ? 0u : (u32)d;
                    s_k[2] = left - cum;
                    s_k[3] = d < 0 ? 0u : hist[d];
                }
                __syncthreads();
                done = s_k[0] != 0u;
                left = s_k[2], ties = s_k[3];
                if (done) break;
                prefix |= s_k[1] << shift;
                pmask |= 255u << shift;
            }
            if (!done) {
                k.kth = prefix;
                if (left < ties) {
                    // Only the `left` lowest ids of the k-th key's ties stay: contiguous chunks of
                    // ids a thread, counted, then the chunk holding the left-th walked again.
                    const int chunk = (cols + (int)blockDim.x - 1) / (int)blockDim.x;
                    const int lo = tid * chunk, hi = min(cols, lo + chunk);
                    const bool masked = mask != nullptr;
                    auto tie = [&](int c) {
                        float v = row[c];
                        if (masked && !((((u32)(c >> 5) < mwords ? mask[c >> 5] : 0u) >> ((u32)c & 31u)) & 1u))
                            v = NEG_INF;
                        const float s = sample_scaled(q, v);
                        return s >= k.thr && sample_rank_key(s) == k.kth;
                    };
                    u32 cnt = 0u;
                    for (int c = lo; c < hi; ++c) cnt += tie(c) ? 1u : 0u;
                    u32 total;
                    const u32 ex = sd_scan_u(cnt, s_u, &total);
                    if (ex < left && left <= ex + cnt) {
                        u32 r = left - ex;
                        for (int c = lo; c < hi; ++c)
                            if (tie(c) && --r == 0u) {
                                s_k[4] = (u32)c + 1u;
                                break;
                            }
                    }
                    __syncthreads();
                    k.tie_lim = s_k[4];
                }
            }
        }
        const float top_p = __uint_as_float(q[12]);
        if (top_p < 1.0f) {
            // The pool: the window's top-k survivors. Its total weight exp(s - max) (f64), and a
            // histogram of weights (f32, only to find the boundary) over the distance below max.
            float* hm = (float*)s_buf;
            u32* hc = (u32*)s_buf + SD_BUCKETS;
            __syncthreads();  // earlier reads of s_buf are done
            for (int i = tid; i < SD_BUCKETS; i += blockDim.x) hm[i] = 0.0f, hc[i] = 0u;
            __syncthreads();
            SdCut pool = k;
            pool.min_p = false;  // min-p comes after top-p
            double mine = 0.0;
            sd_each(row, mask, mwords, cols, [&](int c, const float(&v)[4]) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float s = sample_scaled(q, v[j]);
                    if (!sd_survives(pool, s, (u32)(c + j))) continue;
                    const double w = exp((double)__fsub_rn(s, smax));
                    mine += w;
                    const int b = bucket(s);
                    atomicAdd(&hm[b], (float)w);
                    atomicAdd(&hc[b], 1u);
                }
            });
            double total;
            sd_scan_d(mine, s_d, &total);
            const double target = (double)top_p * total;
            const double lo = target * (1.0 - SD_TOL), hi = target * (1.0 + SD_TOL);
            // The region that must hold the cut: from the first bucket whose running mass reaches
            // the target less 2^-12 of it (past the f32 histogram's worst roundings, about 1e-4
            // of the running mass for 1500 ids a bucket) to the first reaching it plus as much.
            // Warp 0, 64 buckets a lane.
            if (warp == 0) {
                const int per = SD_BUCKETS / 32, b0 = lane * per;
                double sum = 0.0;
                for (int b = b0; b < b0 + per; ++b) sum += (double)hm[b];
                double ex = sum;
#pragma unroll
                for (int off = 1; off < 32; off <<= 1) {
                    const double t = __shfl_up_sync(0xffffffffu, ex, off);
                    if (lane >= off) ex += t;
                }
                ex -= sum;
                const double ta = target * (1.0 - 1.0 / 4096.0), tb = target * (1.0 + 1.0 / 4096.0);
                u32 ba = SD_BUCKETS - 1, bb = SD_BUCKETS - 1;
                double cum = ex;
                for (int b = b0; b < b0 + per; ++b) {
                    cum += (double)hm[b];
                    if (cum >= ta && ba == SD_BUCKETS - 1) ba = (u32)b;
                    if (cum >= tb) {
                        bb = (u32)b;
                        break;
                    }
                }
                ba = __reduce_min_sync(0xffffffffu, ba);
                bb = __reduce_min_sync(0xffffffffu, bb);
                if (ba > bb) ba = bb;
                u32 count = 0u;
                for (int b = b0; b < b0 + per; ++b)
                    if ((u32)b >= ba && (u32)b <= bb) count += hc[b];
                count = __reduce_add_sync(0xffffffffu, count);
                if (lane == 0) s_k[5] = ba, s_k[6] = bb, s_k[7] = count;
            }
            __syncthreads();
            const u32 ba = s_k[5], bb = s_k[6], count = s_k[7];
            if (count == 0u || count > SD_LIST) {
                host = true;
            } else {
                // The pool's mass above the region, and the region's (key, id) pairs.
                __syncthreads();  // the histogram is read; the region takes its place
                if (tid == 0) s_k[0] = 0u;
                __syncthreads();
                double above = 0.0;
                sd_each(row, mask, mwords, cols, [&](int c, const float(&v)[4]) {
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float s = sample_scaled(q, v[j]);
                        if (!sd_survives(pool, s, (u32)(c + j))) continue;
                        const u32 b = (u32)bucket(s);
                        if (b < ba) {
                            above += exp((double)__fsub_rn(s, smax));
                        } else if (b <= bb) {
                            const u32 at = atomicAdd(&s_k[0], 1u);
                            if (at < SD_LIST)
                                s_buf[at] = sd_entry(s, (u32)(c + j));
                        }
                    }
                });
                double p_above;
                sd_scan_d(above, s_d, &p_above);  // its barriers also order the region's writes
                sd_sort(s_buf, count);
                // Prefix masses in that order: four a thread, then the first to reach the band.
                double w4[4], part = 0.0;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const u32 i = 4u * (u32)tid + (u32)j;
                    w4[j] = 0.0;
                    if (i < count) w4[j] = exp((double)__fsub_rn(sd_key_value((u32)(s_buf[i] >> 32)), smax));
                    part += w4[j];
                }
                double region;
                const double before = sd_scan_d(part, s_d, &region);
                if (tid == 0) s_k[1] = 0xffffffffu;
                __syncthreads();
                double run = 0.0;
                u32 first = 0xffffffffu;
                bool clear = false;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const u32 i = 4u * (u32)tid + (u32)j;
                    run += w4[j];
                    const double mass = p_above + (before + run);
                    if (i < count && first == 0xffffffffu && mass >= lo) first = i, clear = mass >= hi;
                }
                if (first != 0xffffffffu) atomicMin(&s_k[1], first);
                __syncthreads();
                const u32 at = s_k[1];
                if (tid == 0) s_k[2] = 0u;
                __syncthreads();
                if (first != 0xffffffffu && first == at && clear) s_k[2] = 1u;
                __syncthreads();
                if (at == 0xffffffffu || !(p_above < lo) || s_k[2] == 0u) {
                    host = true;
                } else {
                    k.pkey = (u32)(s_buf[at] >> 32);
                    k.pid = ~(u32)s_buf[at];
                }
            }
        }
        if (host) {
            if (tid == 0) o[0] = SD_HOST;
            continue;
        }
        // The race over the survivors: each thread keeps its three best scores (the ids and
        // values of two), the block its best; a thread's two within the margin of it are the
        // finalists, unless some thread's third is too: then a second pass gathers them all.
        const u32 k0 = q[8], k1 = q[9], p0 = q[10], p1 = q[11];
        float b1 = NEG_INF, b2 = NEG_INF, b3 = NEG_INF, v1 = 0.0f, v2 = 0.0f;
        u32 i1 = 0u, i2 = 0u;
        sd_each<2>(row, mask, mwords, cols, [&](int c, const float(&v)[4]) {
            float s[4];
            bool in[4], any = false;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                s[j] = sample_scaled(q, v[j]);
                in[j] = sd_survives(k, s[j], (u32)(c + j));
                any |= in[j];
            }
            if (!any) return;
            const uint4 w = sample_philox(make_uint4((u32)c >> 2, 0u, p0, p1), k0, k1);
            const u32 bits[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (!in[j]) continue;
                const float r = sd_score(s[j], bits[j]);
                if (!(r > b3)) continue;
                if (r > b2) {
                    b3 = b2;
                    if (r > b1) {
                        b2 = b1, i2 = i1, v2 = v1;
                        b1 = r, i1 = (u32)(c + j), v1 = v[j];
                    } else {
                        b2 = r, i2 = (u32)(c + j), v2 = v[j];
                    }
                } else {
                    b3 = r;
                }
            }
        });
        __syncthreads();  // s_k's last readers are done
        if (tid == 0) s_k[0] = 0u, s_k[1] = 0u;
        const float best = sample_block_max(b1, s_f);
        const float floor = __fsub_rn(best, sample_race_margin(best));
        auto keep = [&](u32 id, float v) {
            const u32 at = atomicAdd(&s_k[0], 1u);
            if (at < SD_NEAR) o[1 + 2 * at] = id, o[2 + 2 * at] = __float_as_uint(v);
        };
        if (b1 >= floor) keep(i1, v1);
        if (b2 >= floor) keep(i2, v2);
        if (b3 >= floor) s_k[1] = 1u;
        __syncthreads();
        if (s_k[1] != 0u) {
            __syncthreads();  // every thread has read the flag
            if (tid == 0) s_k[0] = 0u;
            __syncthreads();
            sd_each<2>(row, mask, mwords, cols, [&](int c, const float(&v)[4]) {
                float s[4];
                bool in[4], any = false;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    s[j] = sample_scaled(q, v[j]);
                    in[j] = __fadd_rn(s[j], SQ_GUMBEL_BOUND) >= floor && sd_survives(k, s[j], (u32)(c + j));
                    any |= in[j];
                }
                if (!any) return;
                const uint4 w = sample_philox(make_uint4((u32)c >> 2, 0u, p0, p1), k0, k1);
                const u32 bits[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (in[j] && sd_score(s[j], bits[j]) >= floor) keep((u32)(c + j), v[j]);
            });
        }
        __syncthreads();
        if (tid == 0) o[0] = s_k[0] <= SD_NEAR && s_k[0] > 0u ? s_k[0] : SD_HOST;
    }
}
