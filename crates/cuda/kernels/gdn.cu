// Recurrent state kernels (tf-backend conv.rs and gdn.rs): the depthwise causal conv1d over each
// sequence's conv window, Gated DeltaNet's delta rule over its [Hv, Dk, Dv] state, the gated
// RMSNorm and the sigmoid output gate. A round's sequences come as int4 {q_start, q_len,
// start_pos, slot}; a slot is read only for a sequence past position 0, and a sequence of slot -1
// (a recorded round's pad row, graph_pad.rs) has no state: its outputs stay 0. Each output element is
// computed by one thread in a fixed order, token by token in position order, so a round split
// anywhere or batched with other sequences gives the same bits.

#define CONV_MAX_K 8

// One thread a channel of one sequence (grid (ceil(ch / blockDim), sequences)): the window's
// K - 1 past inputs in registers, oldest first; y = act(sum_j w[c, j] x[t - (K-1) + j] + bias).
extern "C" __global__ void conv1d_state(const float* __restrict__ x, const float* __restrict__ w,
                                        const float* __restrict__ bias, float* __restrict__ y,
                                        float* __restrict__ state, const int4* __restrict__ seqs, int ch, int k,
                                        long long slot_len, int silu_out) {
    tf_pdl_enter();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ch) return;
    int4 s = seqs[blockIdx.y];  // q_start, q_len, start_pos, slot
    if (s.w < 0) return;
    float* win = state + (size_t)s.w * slot_len;
    int width = k - 1;
    float hist[CONV_MAX_K], wc[CONV_MAX_K];
#pragma unroll
    for (int j = 0; j < CONV_MAX_K; ++j) {
        wc[j] = j < k ? w[(size_t)c * k + j] : 0.f;
        hist[j] = (j < width && s.z > 0) ? win[(size_t)j * ch + c] : 0.f;
    }
    float bc = bias ? bias[c] : 0.f;
    for (int t = 0; t < s.y; ++t) {
        size_t at = (size_t)(s.x + t) * ch + c;
        float xt = x[at];
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < CONV_MAX_K; ++j) {
            float v = j < width ? hist[j] : xt;
            if (j <= width) acc = __fadd_rn(acc, __fmul_rn(wc[j], v));
        }
        if (bias) acc = __fadd_rn(acc, bc);
        y[at] = silu_out ? acc / (1.f + expf(-acc)) : acc;
#pragma unroll
        for (int j = 0; j + 1 < CONV_MAX_K; ++j)
            if (j + 1 < width) hist[j] = hist[j + 1];
        if (width > 0) {
#pragma unroll
            for (int j = 0; j < CONV_MAX_K; ++j)
                if (j == width - 1) hist[j] = xt;
        }
    }
#pragma unroll
    for (int j = 0; j < CONV_MAX_K; ++j)
        if (j < width) win[(size_t)j * ch + c] = hist[j];
}

// One block a (value head, sequence) (grid (Hv, sequences)), one thread a value column j < Dv
// holding S[:, j] in registers; per token warp 0 makes the q and k norms, the decay and beta.
template <int DK>
__device__ __forceinline__ void gdn_rule_body(const float* __restrict__ qkv, const float* __restrict__ a,
                                              const float* __restrict__ b, const float* __restrict__ a_log,
                                              const float* __restrict__ dt_bias, float* __restrict__ out,
                                              float* __restrict__ state, const int4* __restrict__ seqs, int hk,
                                              int hv, int dv, long long slot_len, long long state_offset,
                                              int tiled) {
    __shared__ float qs[DK], ks[DK], red[4];
    tf_pdl_enter();
    int h = blockIdx.x, j = threadIdx.x, lane = threadIdx.x & 31;
    int4 s = seqs[blockIdx.y];
    if (s.w < 0) return;
    // Value heads grouped by key head (transformers), or tiled over them (llama.cpp's GGUF).
    int kh = tiled ? h % hk : h / (hv / hk);
    size_t cols = (size_t)2 * hk * DK + (size_t)hv * dv;
    float* S = state + (size_t)s.w * slot_len + state_offset + (size_t)h * DK * dv;
    bool on = j < dv;
    float col[DK];
#pragma unroll
    for (int i = 0; i < DK; ++i) col[i] = (on && s.z > 0) ? S[(size_t)i * dv + j] : 0.f;
    float scale = 1.f / sqrtf((float)DK), al = expf(a_log[h]), dtb = dt_bias[h];
    for (int t = 0; t < s.y; ++t) {
        size_t r = (size_t)(s.x + t);
        const float* row = qkv + r * cols;
        for (int i = threadIdx.x; i < DK; i += blockDim.x) {
            qs[i] = row[kh * DK + i];
            ks[i] = row[hk * DK + kh * DK + i];
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            float sq = 0.f, sk = 0.f;
            for (int i = lane; i < DK; i += 32) {
                sq += qs[i] * qs[i];
                sk += ks[i] * ks[i];
            }
            sq = warp_sum(sq);
            sk = warp_sum(sk);
            if (lane == 0) {
                float av = a[r * hv + h] + dtb;
                float sp = av > 20.f ? av : log1pf(expf(av));
                red[0] = 1.f / sqrtf(sq + 1e-6f);
                red[1] = 1.f / sqrtf(sk + 1e-6f);
                red[2] = expf(-al * sp);
                red[3] = 1.f / (1.f + expf(-b[r * hv + h]));
            }
        }
        __syncthreads();
        float iq = red[0], ik = red[1], decay = red[2], beta = red[3];
        if (on) {
            float v = row[(size_t)2 * hk * DK + (size_t)h * dv + j];
            float mem = 0.f;
#pragma unroll
            for (int i = 0; i < DK; ++i) {
                col[i] *= decay;
                mem += col[i] * (ks[i] * ik);
            }
            float u = (v - mem) * beta;
            float o = 0.f;
#pragma unroll
            for (int i = 0; i < DK; ++i) {
                col[i] += (ks[i] * ik) * u;
                o += col[i] * (qs[i] * iq * scale);
            }
            out[r * hv * dv + (size_t)h * dv + j] = o;
        }
        __syncthreads();
    }
    if (on) {
#pragma unroll
        for (int i = 0; i < DK; ++i) S[(size_t)i * dv + j] = col[i];
    }
}

#define GDN_RULE(DK)                                                                                            \
    extern "C" __global__ void gdn_rule_d##DK(const float* qkv, const float* a, const float* b,                 \
                                              const float* a_log, const float* dt_bias, float* out, float* state, \
                                              const int4* seqs, int hk, int hv, int dv, long long slot_len,        \
                                              long long state_offset, int tiled) {                                \
        gdn_rule_body<DK>(qkv, a, b, a_log, dt_bias, out, state, seqs, hk, hv, dv, slot_len, state_offset, tiled); \
    }
GDN_RULE(16)
GDN_RULE(32)
GDN_RULE(64)
GDN_RULE(128)

// norm(x) * w * silu(z) over each group of d values: one warp a group.
extern "C" __global__ void rms_norm_gated(const float* __restrict__ x, const float* __restrict__ z,
                                          const float* __restrict__ w, float* __restrict__ y, int groups, int d,
                                          float eps) {
    tf_pdl_enter();
    int g = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (g >= groups) return;
    const float* xs = x + (size_t)g * d;
    float ss = 0.f;
    for (int i = lane; i < d; i += 32) ss += xs[i] * xs[i];
    ss = warp_sum(ss);
    float inv = 1.f / sqrtf(ss / (float)d + eps);
    for (int i = lane; i < d; i += 32) {
        float zv = z[(size_t)g * d + i];
        y[(size_t)g * d + i] = w[i] * (xs[i] * inv) * (zv / (1.f + expf(-zv)));
    }
}

// x *= sigmoid(g), elementwise.
extern "C" __global__ void mul_sigmoid(float* __restrict__ x, const float* __restrict__ g, size_t n) {
    tf_pdl_enter();
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] *= 1.f / (1.f + expf(-g[i]));
}
