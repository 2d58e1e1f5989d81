// Mamba2 kernels (tf-backend ssd.rs): the SSD scan over each sequence's [H, P, N] state, token by
// token, and the grouped gated RMSNorm after it. A round's sequences come as int4 {q_start,
// q_len, start_pos, slot}; a slot is read only for a sequence past position 0. Each output
// element is computed by one thread in a fixed order (the state index n rising), with no fused
// multiply-adds, so a round split anywhere or batched with other sequences gives the same bits.

// One block a (head, sequence) (grid (H, sequences)), one thread a head row p < P holding
// s[h, p, :] in registers; per token thread 0 makes dt and its decay, the block loads B and C.
template <int N>
__device__ __forceinline__ void ssd_scan_body(const float* __restrict__ xbc, const float* __restrict__ dt,
                                              const float* __restrict__ a_log, const float* __restrict__ dskip,
                                              const float* __restrict__ dt_bias, float* __restrict__ y,
                                              float* __restrict__ state, const int4* __restrict__ seqs, int nh,
                                              int hp, int ng, long long slot_len, long long state_offset,
                                              float dt_min, float dt_max) {
    __shared__ float bs[N], cs[N], red[2];
    tf_pdl_enter();
    int h = blockIdx.x, p = threadIdx.x;
    int4 s = seqs[blockIdx.y];  // q_start, q_len, start_pos, slot
    if (s.w < 0) return;  // a recorded round's pad row: no state, its outputs stay 0
    int grp = h / (nh / ng);
    size_t inner = (size_t)nh * hp, cols = inner + (size_t)2 * ng * N;
    float* S = state + (size_t)s.w * slot_len + state_offset + ((size_t)h * hp + p) * N;
    bool on = p < hp;
    float st[N];
#pragma unroll
    for (int n = 0; n < N; ++n) st[n] = (on && s.z > 0) ? S[n] : 0.f;
    float a = -expf(a_log[h]), dd = dskip[h], db = dt_bias[h];
    for (int t = 0; t < s.y; ++t) {
        size_t r = (size_t)(s.x + t);
        const float* row = xbc + r * cols;
        for (int i = threadIdx.x; i < N; i += blockDim.x) {
            bs[i] = row[inner + (size_t)grp * N + i];
            cs[i] = row[inner + (size_t)(ng + grp) * N + i];
        }
        if (threadIdx.x == 0) {
            float v = __fadd_rn(dt[r * nh + h], db);
            float sp = v > 20.f ? v : log1pf(expf(v));
            sp = fminf(fmaxf(sp, dt_min), dt_max);
            red[0] = sp;
            red[1] = expf(__fmul_rn(sp, a));
        }
        __syncthreads();
        float dtv = red[0], da = red[1];
        if (on) {
            float x = row[(size_t)h * hp + p];
            float acc = 0.f;
#pragma unroll
            for (int n = 0; n < N; ++n) {
                st[n] = __fadd_rn(__fmul_rn(st[n], da), __fmul_rn(__fmul_rn(dtv, bs[n]), x));
                acc = __fadd_rn(acc, __fmul_rn(st[n], cs[n]));
            }
            y[r * inner + (size_t)h * hp + p] = __fadd_rn(acc, __fmul_rn(dd, x));
        }
        __syncthreads();
    }
    if (on) {
#pragma unroll
        for (int n = 0; n < N; ++n) S[n] = st[n];
    }
}

#define SSD_SCAN(N)                                                                                               \
    extern "C" __global__ void ssd_scan_n##N(const float* xbc, const float* dt, const float* a_log,               \
                                             const float* dskip, const float* dt_bias, float* y, float* state,    \
                                             const int4* seqs, int nh, int hp, int ng, long long slot_len,        \
                                             long long state_offset, float dt_min, float dt_max) {                \
        ssd_scan_body<N>(xbc, dt, a_log, dskip, dt_bias, y, state, seqs, nh, hp, ng, slot_len, state_offset,      \
                         dt_min, dt_max);                                                                         \
    }
SSD_SCAN(16)
SSD_SCAN(32)
SSD_SCAN(64)
SSD_SCAN(128)

// Mamba2's gated RMSNorm: v = x * silu(z), each group of d values of a row normed, times w
// (cols long): one warp a group, the squares summed by the warp in a fixed tree.
extern "C" __global__ void rms_norm_gated_grouped(const float* __restrict__ x, const float* __restrict__ z,
                                                  const float* __restrict__ w, float* __restrict__ y, int groups,
                                                  int d, int cols, float eps) {
    tf_pdl_enter();
    int g = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (g >= groups) return;
    size_t base = (size_t)g * d;
    const float* ws = w + (size_t)(g % (cols / d)) * d;
    float ss = 0.f;
    for (int i = lane; i < d; i += 32) {
        float zv = z[base + i];
        float v = __fmul_rn(x[base + i], zv / (1.f + expf(-zv)));
        ss = __fadd_rn(ss, __fmul_rn(v, v));
    }
    ss = warp_sum(ss);
    float inv = 1.f / sqrtf(ss / (float)d + eps);
    for (int i = lane; i < d; i += 32) {
        float zv = z[base + i];
        float v = __fmul_rn(x[base + i], zv / (1.f + expf(-zv)));
        y[base + i] = __fmul_rn(__fmul_rn(v, inv), ws[i]);
    }
}
