// Element-wise and row-wise kernels: embedding gather, RMSNorm, residual add, RoPE, gated
// activations, row selection, soft-capping, bf16 conversion, MoE scatter, KV-cache writes.
// Every output element is computed by one thread (or one block with a fixed-order reduction),
// so results do not depend on how many rows share a launch.

// A bf16 [n, k] weight copied into the matmul layout (gemm.cu): rows and columns zero-padded to
// [nt * 16, kt * 16].
extern "C" __global__ void pad_bf16(const u16* __restrict__ src, u16* __restrict__ dst, int n, int k, int nt, int kt) {
    tf_pdl_enter();
    size_t kp = (size_t)kt * 16, total = (size_t)nt * 16 * kp;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < total; p += (size_t)gridDim.x * blockDim.x) {
        size_t row = p / kp, col = p % kp;
        dst[p] = (row < (size_t)n && col < (size_t)k) ? src[row * k + col] : (u16)0;
    }
}

// A gate and an up bf16 [n, k] weight packed into one matmul weight of 2n rows (tf_backend
// gate_up, n a multiple of 8): packed row 16 q + r is gate row 8 q + r for r < 8, else up row
// 8 q + r - 8; columns zero-padded to kt * 16.
extern "C" __global__ void pack_gate_up_bf16(const u16* __restrict__ g, const u16* __restrict__ u, u16* __restrict__ dst,
                                             int n, int k, int kt) {
    tf_pdl_enter();
    size_t kp = (size_t)kt * 16, total = (size_t)2 * n * kp;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < total; p += (size_t)gridDim.x * blockDim.x) {
        size_t row = p / kp, col = p % kp, src = row / 16 * 8 + row % 8;
        const u16* from = row % 16 < 8 ? g : u;
        dst[p] = col < (size_t)k ? from[src * k + col] : (u16)0;
    }
}

#define EMBED_J 16
// out[r, :] = table[ids[r], :] * scale. dtype: 0 padded bf16 (row stride 16 kt), 1 f16, 2 f32.
extern "C" __global__ void embed(const void* __restrict__ table, int dtype, int kt, const u32* __restrict__ ids, int k,
                                 float scale, float* __restrict__ out) {
    tf_pdl_enter();
    int r = blockIdx.x;
    u32 id = ids[r];
    // EMBED_J values a thread loaded before any is stored: one memory round trip for a 4096-wide
    // row on 256 threads, not sixteen (the H200 timeline had a decode round's embed at 10 us).
    for (int c0 = threadIdx.x; c0 < k; c0 += EMBED_J * blockDim.x) {
        float w[EMBED_J];
#pragma unroll
        for (int j = 0; j < EMBED_J; ++j) {
            const int c = c0 + j * blockDim.x;
            if (c >= k) w[j] = 0.f;
            else if (dtype == 0) w[j] = bf2f(((const u16*)table)[(size_t)id * kt * 16 + c]);
            else if (dtype == 1) w[j] = h2f(((const u16*)table)[(size_t)id * k + c]);
            else w[j] = ((const float*)table)[(size_t)id * k + c];
        }
#pragma unroll
        for (int j = 0; j < EMBED_J; ++j) {
            const int c = c0 + j * blockDim.x;
            if (c < k) out[(size_t)r * k + c] = w[j] * scale;
        }
    }
}

// RMSNorm over consecutive groups of `group` values (one block per group). Also writes the bf16
// copy (row stride kp) that matmuls read.
// The sum order is that of a block of V = Q blockDim.x "virtual" threads (ops.rs `norm_threads`
// picks V from the group size alone): virtual thread t sums values t, t + V, ... in order, each
// virtual warp's 32 sums meet by warp_sum, then the V / 32 warp sums are added in order. A real
// thread plays virtual threads threadIdx.x + q blockDim.x (q < Q); its lanes are theirs, so the
// butterflies are the same. Q = 1 for few rows (decode: the block fills one SM's threads), up to 4
// for many (prefill: four blocks share an SM); the bits do not depend on Q.
// Values are loaded at once (up to RMS_J a thread, in registers), so a long row is not a chain of
// dependent global-memory round trips; the norm weights are read before the programmatic-
// dependent-launch wait (no kernel writes them). With ADD, the residual a is first added into x
// in place (x += a, then normalise x: the same values as add_inplace followed by rms_norm).
// F32 = false writes only the bf16 copy (rows normed for matmuls only).
#define RMS_J 16
// JT > 0 caps the values a virtual thread holds in registers (the `_j4` kernels below).
template <bool ADD, int Q, bool F32 = true, int JT = 0>
__device__ __forceinline__ void rms_norm_body(float* __restrict__ x, const float* __restrict__ a,
                                              const float* __restrict__ w, float* __restrict__ y,
                                              u16* __restrict__ yb, int cols, int group, int kp, float eps,
                                              int one_plus) {
    constexpr int J = JT > 0 ? JT : RMS_J / Q;  // values per virtual thread
    __shared__ float scratch[32];
    const size_t base = (size_t)blockIdx.x * group;
    // A group lies inside one row (group divides cols): its bf16 copy starts at ybase.
    const size_t brow = base / cols, ybase = brow * kp + (base - brow * cols);
    const int R = blockDim.x, V = R * Q, lane = threadIdx.x & 31;
    if (group <= J * V) {
        const int jn = (group + V - 1) / V;  // values a virtual thread holds (the rest are zeros)
        float v[Q][J], sc[Q][J];
#pragma unroll
        for (int q = 0; q < Q; ++q)
#pragma unroll
            for (int j = 0; j < J; ++j) {
                if (j >= jn) break;
                int i = threadIdx.x + q * R + j * V;
                sc[q][j] = i < group ? (one_plus ? 1.0f + w[i] : w[i]) : 0.f;
            }
        tf_pdl_wait();
#pragma unroll
        for (int q = 0; q < Q; ++q)
#pragma unroll
            for (int j = 0; j < J; ++j) {
                if (j >= jn) break;
                int i = threadIdx.x + q * R + j * V;
                v[q][j] = i < group ? (ADD ? x[base + i] + a[base + i] : x[base + i]) : 0.f;
            }
        if (ADD) {
#pragma unroll
            for (int q = 0; q < Q; ++q)
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    if (j >= jn) break;
                    int i = threadIdx.x + q * R + j * V;
                    if (i < group) x[base + i] = v[q][j];
                }
        }
#pragma unroll
        for (int q = 0; q < Q; ++q) {
            float ss = 0.f;
#pragma unroll
            for (int j = 0; j < J; ++j) {
                if (j >= jn) break;
                ss += v[q][j] * v[q][j];
            }
            ss = warp_sum(ss);
            if (lane == 0) scratch[(threadIdx.x >> 5) + q * (R >> 5)] = ss;
        }
        __syncthreads();
        // The warp sums in order (zeros past the last warp change nothing); the loads are
        // independent, so only the additions chain.
        float t = 0.f;
#pragma unroll
        for (int i = 0; i < 32; ++i) t += i < (V >> 5) ? scratch[i] : 0.f;
        float inv = 1.0f / sqrtf(t / (float)group + eps);
#pragma unroll
        for (int q = 0; q < Q; ++q)
#pragma unroll
            for (int j = 0; j < J; ++j) {
                if (j >= jn) break;
                int i = threadIdx.x + q * R + j * V;
                if (i < group) {
                    float o = v[q][j] * inv * sc[q][j];
                    if (F32) y[base + i] = o;
                    yb[ybase + i] = f2bf(o);
                }
            }
        return;
    }
    // Longer groups (Q = 1 only): two passes over global memory, same per-thread order.
    tf_pdl_wait();
    float ss = 0.f;
    for (int i = threadIdx.x; i < group; i += R) {
        float v = ADD ? x[base + i] + a[base + i] : x[base + i];
        if (ADD) x[base + i] = v;
        ss += v * v;
    }
    __syncthreads();  // the in-place sums are visible to the second pass
    float inv = 1.0f / sqrtf(block_sum(ss, scratch) / (float)group + eps);
    for (int i = threadIdx.x; i < group; i += R) {
        float s = one_plus ? 1.0f + w[i] : w[i];
        float v = x[base + i] * inv * s;
        if (F32) y[base + i] = v;
        yb[ybase + i] = f2bf(v);
    }
}

// rms_norm / add_rms_norm with at most four values a thread in registers (groups of up to 4
// blockDim.x values; ops.rs picks them for those): rms_norm_body's code, so the same bits, in 28-32
// registers a thread against its 58 with sixteen. Few rows (decode) run them: the 1024-thread
// block fits beside a TMA GEMV block of the matmul before it instead of waiting for an SM of its
// own, so the next GEMV's last block is not held back by it (H200, qwen3-8b batch-1 decode 1.024
// at prompt 128, 1.026 at 4096).
extern "C" __global__ void __launch_bounds__(1024) rms_norm_j4(const float* __restrict__ x, const float* __restrict__ w,
                                                               float* __restrict__ y, u16* __restrict__ yb, int cols,
                                                               int group, int kp, float eps, int one_plus) {
    tf_pdl_launch();
    rms_norm_body<false, 1, true, 4>((float*)x, nullptr, w, y, yb, cols, group, kp, eps, one_plus);
}
extern "C" __global__ void __launch_bounds__(1024) add_rms_norm_j4(float* __restrict__ x, const float* __restrict__ a,
                                                                   const float* __restrict__ w, float* __restrict__ y,
                                                                   u16* __restrict__ yb, int cols, int group, int kp,
                                                                   float eps, int one_plus) {
    tf_pdl_launch();
    rms_norm_body<true, 1, true, 4>(x, a, w, y, yb, cols, group, kp, eps, one_plus);
}

// One virtual thread a thread (few rows), and four (many rows: `_q4`, blocks of V / 4 threads).
extern "C" __global__ void __launch_bounds__(1024) rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                    u16* __restrict__ yb, int cols, int group, int kp, float eps, int one_plus) {
    tf_pdl_launch();
    rms_norm_body<false, 1>((float*)x, nullptr, w, y, yb, cols, group, kp, eps, one_plus);
}
extern "C" __global__ void __launch_bounds__(256) rms_norm_q4(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                    u16* __restrict__ yb, int cols, int group, int kp, float eps, int one_plus) {
    tf_pdl_launch();
    rms_norm_body<false, 4>((float*)x, nullptr, w, y, yb, cols, group, kp, eps, one_plus);
}

// rms_norm_q4 writing only the bf16 copy (y unused): many rows normed for matmuls only.
extern "C" __global__ void __launch_bounds__(256) rms_norm_q4_bf16(const float* __restrict__ x, const float* __restrict__ w,
                                                                   float* __restrict__ y, u16* __restrict__ yb, int cols,
                                                                   int group, int kp, float eps, int one_plus) {
    tf_pdl_launch();
    rms_norm_body<false, 4, false>((float*)x, nullptr, w, y, yb, cols, group, kp, eps, one_plus);
}

extern "C" __global__ void __launch_bounds__(1024) add_rms_norm(float* __restrict__ x, const float* __restrict__ a, const float* __restrict__ w,
                                        float* __restrict__ y, u16* __restrict__ yb, int cols, int group, int kp,
                                        float eps, int one_plus) {
    tf_pdl_launch();
    rms_norm_body<true, 1>(x, a, w, y, yb, cols, group, kp, eps, one_plus);
}
extern "C" __global__ void __launch_bounds__(256) add_rms_norm_q4(float* __restrict__ x, const float* __restrict__ a, const float* __restrict__ w,
                                        float* __restrict__ y, u16* __restrict__ yb, int cols, int group, int kp,
                                        float eps, int one_plus) {
    tf_pdl_launch();
    rms_norm_body<true, 4>(x, a, w, y, yb, cols, group, kp, eps, one_plus);
}

extern "C" __global__ void add_inplace(float* __restrict__ x, const float* __restrict__ y, size_t n) {
    tf_pdl_enter();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] += y[i];
}

// One rotated pair (rotate-half RoPE) in two steps, the rotation at a position and its
// application: both rope kernels use them (qk_norm_rope makes the rotations before its launch
// wait), so they agree bit for bit. The rotation at `pos`: cosine and sine, scaled.
__device__ __forceinline__ void rope_rot(float& c, float& s, u32 pos, float inv_freq, float attn_scaling) {
    float angle = (float)pos * inv_freq;
    c = cosf(angle) * attn_scaling;
    s = sinf(angle) * attn_scaling;
}
// Rotates the pair (x1, x2) by (c, s).
__device__ __forceinline__ void rope_apply(float& x1, float& x2, float c, float s) {
    float a = x1, b = x2;
    x1 = a * c - b * s;
    x2 = b * c + a * s;
}
// Both steps for one pair.
__device__ __forceinline__ void rope_pair(float& x1, float& x2, u32 pos, float inv_freq, float attn_scaling) {
    float c, s;
    rope_rot(c, s, pos, inv_freq, attn_scaling);
    rope_apply(x1, x2, c, s);
}

// Rotate-half RoPE in place: one thread per (row, head, pair).
extern "C" __global__ void rope(float* __restrict__ x, const u32* __restrict__ pos, const float* __restrict__ inv_freq,
                                int rows, int cols, int head_dim, int half, float attn_scaling) {
    tf_pdl_enter();
    int heads = cols / head_dim;
    size_t total = (size_t)rows * heads * half;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(t % half);
        size_t rh = t / half;
        int h = (int)(rh % heads), r = (int)(rh / heads);
        float* p = x + (size_t)r * cols + (size_t)h * head_dim;
        rope_pair(p[i], p[i + half], pos[r], inv_freq[i], attn_scaling);
    }
}

// Per-head RMSNorm (when qn, kn are given) then RoPE of q and k in place, one warp per (row,
// head), four warps a block, each taking `hpw` heads of its row in turn: head h = 4 (hpw
// blockIdx.y + i) + warp is q head h when h < nq, else k head h - nq. The norm sums in exactly
// rms_norm's order for a group of head_dim (block of `nthr` threads: thread t sums t, t + nthr,
// ..., warps folded in order), so the result equals rms_norm then rope bit for bit. A warp makes
// its row's rotations once for all its heads (prefill: sinf/cosf of every head was most of the
// kernel) and loads the next head's row while it works on one. head_dim <= 256.
extern "C" __global__ void __launch_bounds__(128) qk_norm_rope(float* __restrict__ q, float* __restrict__ k,
                                                             const float* __restrict__ qn, const float* __restrict__ kn,
                                                             const u32* __restrict__ pos,
                                                             const float* __restrict__ inv_freq, int nq, int nk,
                                                             int head_dim, int half, float attn_scaling, float eps,
                                                             int one_plus, int nthr, int hpw) {
    tf_pdl_launch();
    __shared__ float vs[4][256], wsc[2][256];
    const int lane = threadIdx.x & 31, r = blockIdx.x, warp = threadIdx.x >> 5;
    const int h0 = blockIdx.y * 4 * hpw + warp;
    float* v = vs[warp];
    auto row = [&](int hh) {
        return hh < nq ? q + ((size_t)r * nq + hh) * head_dim : k + ((size_t)r * nk + (hh - nq)) * head_dim;
    };
    // Norm weights, positions and so the rotations are constants of the round (positions are
    // uploaded before its first kernel): made before the wait, the weights into shared memory.
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        wsc[0][i] = qn != nullptr ? (one_plus ? 1.0f + qn[i] : qn[i]) : 0.f;
        wsc[1][i] = kn != nullptr ? (one_plus ? 1.0f + kn[i] : kn[i]) : 0.f;
    }
    float rc[4], rs[4];
    const u32 p = pos[r];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        int i = lane + 32 * j;
        rope_rot(rc[j], rs[j], p, i < half ? inv_freq[i] : 0.f, attn_scaling);
    }
    __syncthreads();
    tf_trace_mark();  // the trace build's pre-wait chain ends here (a no-op otherwise)
    tf_pdl_wait();
    float nx[8];  // the next head's row: lane + 32 j
    auto load = [&](int hh) {
        const float* x = row(hh);
#pragma unroll
        for (int j = 0; j < 8; ++j) nx[j] = lane + 32 * j < head_dim ? x[lane + 32 * j] : 0.f;
    };
    if (h0 < nq + nk) load(h0);
    for (int it = 0; it < hpw; ++it) {
        const int hh = h0 + 4 * it;
        if (hh >= nq + nk) break;
        const bool isq = hh < nq;
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if (lane + 32 * j < head_dim) v[lane + 32 * j] = nx[j];
        __syncwarp();
        if (it + 1 < hpw && hh + 4 < nq + nk) load(hh + 4);
        if ((isq ? qn : kn) != nullptr) {
            float t = 0.f;
            for (int vw = 0; vw < nthr / 32; ++vw) {  // rms_norm's warps, in order
                float ss = 0.f;
                for (int i = vw * 32 + lane; i < head_dim; i += nthr) ss += v[i] * v[i];
                t += warp_sum(ss);
            }
            float inv = 1.0f / sqrtf(t / (float)head_dim + eps);
            __syncwarp();
            const float* sc = wsc[isq ? 0 : 1];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                int i = lane + 32 * j;
                if (i < head_dim) v[i] = v[i] * inv * sc[i];
            }
            __syncwarp();
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            int i = lane + 32 * j;
            if (i < half) rope_apply(v[i], v[i + half], rc[j], rs[j]);
        }
        __syncwarp();
        float* x = row(hh);
        for (int i = lane; i < head_dim; i += 32) x[i] = v[i];
        __syncwarp();
    }
}

// The clamped SwiGLU's (MiniMax M3's, GPT-OSS's) sigmoid gain and clamp: tf_backend
// SWIGLU_OAI_ALPHA and SWIGLU_OAI_LIMIT.
#define SWIGLU_OAI_ALPHA 1.702f
#define SWIGLU_OAI_LIMIT 7.0f

// The clamped SwiGLU's gate: g = min(v, limit), then g * (1 / (1 + exp(-(g * alpha)))), as
// tf_backend reference.rs `activate` makes it: each operation rounded on its own (no fused
// multiply-add), the reciprocal correctly rounded, fminf's NaN rule Rust's f32::min's.
__device__ __forceinline__ float swiglu_oai_gate(float v) {
    const float g = fminf(v, SWIGLU_OAI_LIMIT);
    return __fmul_rn(g, __frcp_rn(__fadd_rn(1.0f, expf(-__fmul_rn(g, SWIGLU_OAI_ALPHA)))));
}

// act(v) for one element; act 0 SiLU, 1 GELU (tanh), 2 relu(v)^2, 3 the clamped SwiGLU's gate
// (swiglu_oai_gate). SiLU divides with __fdividef (within 2 ulp; no slow-path branch, so a
// store loop's values overlap: gemm_wgmma.cu's GLU store).
__device__ __forceinline__ float act_one(float v, int act) {
    float a;
    if (act == 0) {
        a = __fdividef(v, 1.0f + expf(-v));
    } else if (act == 1) {
        const float c = 0.7978845608028654f;
        a = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
    } else if (act == 3) {
        a = swiglu_oai_gate(v);
    } else {
        const float r = fmaxf(v, 0.f);
        a = __fmul_rn(r, r);
    }
    return a;
}

// act(g) * u for one element (act_one's codes); for act 3 act(g) * (clamp(u, -limit, limit) + 1),
// reference.rs `glu_one`: Rust's clamp keeps a NaN, so the comparisons are written out.
__device__ __forceinline__ float glu_one(float v, float u, int act) {
    if (act == 3) {
        const float c = u < -SWIGLU_OAI_LIMIT ? -SWIGLU_OAI_LIMIT : (u > SWIGLU_OAI_LIMIT ? SWIGLU_OAI_LIMIT : u);
        return __fmul_rn(swiglu_oai_gate(v), __fadd_rn(c, 1.0f));
    }
    return act_one(v, act) * u;
}

// min(act(g), limit) * clamp(u, -limit, limit) for one element (a clamped SwiGLU, Step's
// swiglu_limits): tf_backend reference.rs `glu_clamped`'s operations in its order, f32 min/max
// (a NaN operand gives the other, as Rust's f32::min / max do) and one rounded product.
__device__ __forceinline__ float glu_clamped_one(float v, float u, int act, float limit) {
    return __fmul_rn(fminf(act_one(v, act), limit), fminf(fmaxf(u, -limit), limit));
}

// y = act(gate) * up, or act(gate) alone where u is null (an MLP without a gate: Backend
// activate; act_one, not glu_one with an up of 1, which act 3 would offset); also writes the
// bf16 copy (row stride kp). With cols a multiple of 4 each thread takes 4 consecutive values of
// a row (16-byte loads and stores), else one.
extern "C" __global__ void glu(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ y,
                               u16* __restrict__ yb, int rows, int cols, int kp, int act) {
    tf_pdl_enter();
    size_t n = (size_t)rows * cols;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    if (cols % 4 == 0) {
        for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < n / 4; q += stride) {
            float4 gv = ((const float4*)g)[q], o;
            if (u) {
                float4 uv = ((const float4*)u)[q];
                o = make_float4(glu_one(gv.x, uv.x, act), glu_one(gv.y, uv.y, act), glu_one(gv.z, uv.z, act),
                                glu_one(gv.w, uv.w, act));
            } else {
                o = make_float4(act_one(gv.x, act), act_one(gv.y, act), act_one(gv.z, act), act_one(gv.w, act));
            }
            ((float4*)y)[q] = o;
            size_t i = q * 4;
            uint2 b = make_uint2(pack_bf2(o.x, o.y), pack_bf2(o.z, o.w));
            *(uint2*)(yb + (i / cols) * kp + i % cols) = b;
        }
        return;
    }
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float o = u ? glu_one(g[i], u[i], act) : act_one(g[i], act);
        y[i] = o;
        yb[(i / cols) * kp + i % cols] = f2bf(o);
    }
}

// y = glu_clamped_one(gate, up) elementwise over [rows, cols], also written as the bf16 copy
// (row stride kp) the down projection reads: one value a thread.
extern "C" __global__ void glu_clamped(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ y,
                                       u16* __restrict__ yb, int rows, int cols, int kp, int act, float limit) {
    tf_pdl_enter();
    const size_t n = (size_t)rows * cols, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float o = glu_clamped_one(g[i], u[i], act, limit);
        y[i] = o;
        yb[(i / cols) * kp + i % cols] = f2bf(o);
    }
}

// x *= c elementwise (Gemma 4's layer_scalar): one rounded product a value.
extern "C" __global__ void scale_inplace(float* __restrict__ x, size_t n, float c) {
    tf_pdl_enter();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], c);
}

// Column of output column j's gate value in a packed gate/up matmul output row (its up value is
// 8 columns further): 16 (j / 8) + j % 8.
__device__ __forceinline__ int gate_up_col(int j) { return (j >> 3) * 16 + (j & 7); }

// yb = act(gate) * up rounded to bf16 (row stride kp; the values feed the down projection only)
// from a packed gate/up matmul output p [rows, 2 cols] (cols a multiple of 8): each thread takes
// 4 consecutive values of a row, which lie in one 8-column group (16-byte loads).
extern "C" __global__ void glu_packed(const float* __restrict__ p, u16* __restrict__ yb, int rows, int cols, int kp,
                                      int act) {
    tf_pdl_enter();
    const size_t n4 = (size_t)rows * cols / 4, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < n4; q += stride) {
        const size_t i = q * 4, r = i / cols;
        const int j = (int)(i % cols);
        const float* row = p + r * 2 * cols;
        float4 gv = *(const float4*)(row + gate_up_col(j)), uv = *(const float4*)(row + gate_up_col(j) + 8);
        float4 o = make_float4(glu_one(gv.x, uv.x, act), glu_one(gv.y, uv.y, act), glu_one(gv.z, uv.z, act),
                               glu_one(gv.w, uv.w, act));
        *(uint2*)(yb + r * kp + j) = make_uint2(pack_bf2(o.x, o.y), pack_bf2(o.z, o.w));
    }
}

// y [rows, cols] f32 = the bf16 values x (row stride kp), widened.
extern "C" __global__ void widen_bf16(const u16* __restrict__ x, float* __restrict__ y, int rows, int cols, int kp) {
    tf_pdl_enter();
    const size_t n = (size_t)rows * cols;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = bf2f(x[(i / cols) * kp + i % cols]);
}

// y[r] = x[rows[r]]: block (r, q) copies columns [1024 q, 1024 q + 1024) of row r, each thread
// its four columns loaded before any is stored (one memory round trip, also for a vocabulary row).
// Rows `rows` of a bf16 matrix of row stride kp (a multiple of 8), padding included: y[r] =
// x[rows[r]], 16 bytes a thread (the grouped expert GEMM's gathered rows, moe/grouped.rs).
extern "C" __global__ void select_rows_bf16(const u16* __restrict__ x, const u32* __restrict__ rows, u16* __restrict__ y,
                                            int n_rows, int kp) {
    tf_pdl_enter();
    const int r = blockIdx.x;
    const uint4* __restrict__ src = reinterpret_cast<const uint4*>(x + (size_t)rows[r] * kp);
    uint4* __restrict__ dst = reinterpret_cast<uint4*>(y + (size_t)r * kp);
    for (int c = threadIdx.x; c < kp / 8; c += blockDim.x) dst[c] = src[c];
}

extern "C" __global__ void select_rows(const float* __restrict__ x, const u32* __restrict__ rows, float* __restrict__ y,
                                       int n_rows, int cols) {
    tf_pdl_enter();
    const int r = blockIdx.x, c0 = blockIdx.y * 1024 + threadIdx.x;
    const float* src = x + (size_t)rows[r] * cols;
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = c0 + 256 * j < cols ? src[c0 + 256 * j] : 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j)
        if (c0 + 256 * j < cols) y[(size_t)r * cols + c0 + 256 * j] = v[j];
}

// x[r][c] += bias[c] over x [n / cols, cols] (a projection's bias).
extern "C" __global__ void add_bias(float* __restrict__ x, const float* __restrict__ bias, size_t n, int cols) {
    tf_pdl_enter();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fadd_rn(x[i], bias[i % cols]);
}

// x[r][c] += sigmoid(g[r]) * y[r][c] (a gated shared expert's sum; g is [rows, 1]).
extern "C" __global__ void add_sigmoid_scaled(float* __restrict__ x, const float* __restrict__ y,
                                              const float* __restrict__ g, size_t n, int cols) {
    tf_pdl_enter();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float s = __fdiv_rn(1.f, __fadd_rn(1.f, expf(-g[i / cols])));
        x[i] = __fadd_rn(x[i], __fmul_rn(s, y[i]));
    }
}

extern "C" __global__ void softcap(float* __restrict__ x, size_t n, float cap) {
    tf_pdl_enter();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

// f32 [rows, cols] -> bf16 [rows, kp], zero padding past cols.
extern "C" __global__ void to_bf16(const float* __restrict__ x, u16* __restrict__ y, int rows, int cols, int kp) {
    tf_pdl_enter();
    size_t n = (size_t)rows * kp;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / kp, c = i % kp;
        y[i] = c < (size_t)cols ? f2bf(x[r * cols + c]) : (u16)0;
    }
}

extern "C" __global__ void fill_zero_u16(u16* __restrict__ y, size_t n) {
    tf_pdl_enter();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] = 0;
}

// out[rows[i], :] += w[i] * y[i, :] as one fused multiply-add (moe.cu `moe_combine` adds the
// same way), each row at most once per launch.
extern "C" __global__ void scatter_add(float* __restrict__ out, const float* __restrict__ y, const u32* __restrict__ rows,
                                       const float* __restrict__ w, int cols) {
    tf_pdl_enter();
    int i = blockIdx.x;
    float s = w[i];
    float* o = out + (size_t)rows[i] * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = __fmaf_rn(s, y[(size_t)i * cols + c], o[c]);
}

// Writes this round's K and V rows (f32) into their pool slots as bf16.
extern "C" __global__ void kv_write(const float* __restrict__ k, const float* __restrict__ v, const u32* __restrict__ slots,
                                    u16* __restrict__ kc, u16* __restrict__ vc, int width) {
    tf_pdl_enter();
    int r = blockIdx.x;
    size_t dst = (size_t)slots[r] * width;
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        kc[dst + c] = f2bf(k[(size_t)r * width + c]);
        vc[dst + c] = f2bf(v[(size_t)r * width + c]);
    }
}

// Deterministic pseudo-random bf16 in [-1, 1) for measuring the GEMM peak on non-zero data.
extern "C" __global__ void fill_random_bf16(u16* __restrict__ y, size_t n, u32 seed) {
    tf_pdl_enter();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        u32 h = (u32)i * 2654435761u ^ seed;
        h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
        y[i] = f2bf((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

// Columns c, c + step, ... c + 15 step of `row` (NEG_INF from `hi` on), all loaded before any is
// used: one memory round trip for sixteen values (argmax_partial, sample.cu).
__device__ __forceinline__ void load16(const float* __restrict__ row, int c, int hi, int step, float (&v)[16]) {
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = j * step < hi - c ? row[c + j * step] : NEG_INF;
}

// Greedy argmax over (value, column) pairs: the larger value wins, the lower column on ties, and
// NaN never (only `v > best` takes a value), so any split of a row gives the same column.
__device__ __forceinline__ void argmax_take(float& bv, int& bi, float ov, int oi) {
    if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
}
__device__ __forceinline__ void warp_argmax(float& bv, int& bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        argmax_take(bv, bi, ov, oi);
    }
}

// Block x of row y (rows past gridDim.y in steps of it) leaves the first largest value of columns
// [x * slice, (x + 1) * slice) and its column at pv/pi[y * gridDim.x + x] (NEG_INF and 0x7fffffff
// when none is above NEG_INF). A row is split over blocks so that its loads are in flight on many
// SMs at once; argmax_combine folds the partials.
extern "C" __global__ void __launch_bounds__(128) argmax_partial(const float* __restrict__ x, float* __restrict__ pv,
                                                                 int* __restrict__ pi, int rows, int cols, int slice) {
    tf_pdl_enter();
    __shared__ float sv[32];
    __shared__ int si[32];
    const int lo = blockIdx.x * slice, hi = lo + min(slice, cols - lo), step = blockDim.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const float* row = x + (size_t)r * cols;
        float bv = NEG_INF;
        int bi = 0x7fffffff;
        // A thread scans columns lo + threadIdx.x, + blockDim.x, ... in order, 16 loaded before
        // any is compared (one memory round trip per 16 values); past `hi` a load is NEG_INF,
        // which never wins.
        for (int c = lo + threadIdx.x; c < hi; c += 16 * step) {
            float v[16];
            load16(row, c, hi, step, v);
#pragma unroll
            for (int j = 0; j < 16; ++j)
                if (v[j] > bv) bv = v[j], bi = c + j * step;
        }
        warp_argmax(bv, bi);
        if (lane == 0) sv[warp] = bv, si[warp] = bi;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < (int)(blockDim.x >> 5); ++w) argmax_take(bv, bi, sv[w], si[w]);
            const size_t p = (size_t)r * gridDim.x + blockIdx.x;
            pv[p] = bv;
            pi[p] = bi;
        }
        __syncthreads();  // sv/si are read before the next row writes them
    }
}

// out[r] = the column of the first largest value of row r, from its `parts` partials of
// argmax_partial (0 when no value is above NEG_INF); one warp per row.
extern "C" __global__ void __launch_bounds__(32) argmax_combine(const float* __restrict__ pv, const int* __restrict__ pi,
                                                                u32* __restrict__ out, int parts) {
    tf_pdl_enter();
    const size_t base = (size_t)blockIdx.x * parts;
    float bv = NEG_INF;
    int bi = 0x7fffffff;
    for (int p = threadIdx.x; p < parts; p += 32) argmax_take(bv, bi, pv[base + p], pi[base + p]);
    warp_argmax(bv, bi);
    if (threadIdx.x == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0u : (u32)bi;
}

// ids[i] = held[ids[i]] for i < n: a round's token ids from the row indices the host wrote where
// they go and the ids an earlier round picked on the device (held.rs; the engine queues a round
// before the ids of the one before it reach the host).
extern "C" __global__ void __launch_bounds__(128) gather_ids(u32* __restrict__ ids, const u32* __restrict__ held, int n) {
    tf_pdl_enter();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) ids[i] = held[ids[i]];
}

// Tensor-parallel sum (exchange.rs): out[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ...,
// the ranks' rows `n` apart, added in rank order with rounded adds (the host group's bits).
extern "C" __global__ void tp_sum(const float* __restrict__ parts, float* __restrict__ out, int n, int ranks) {
    tf_pdl_enter();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float s = parts[i];
        for (int r = 1; r < ranks; ++r) s = __fadd_rn(s, parts[(long long)r * n + i]);
        out[i] = s;
    }
}

// Tensor-parallel gather of the vocabulary-parallel head's logits (exchange.rs): out `[rows,
// total]` from the ranks' rows side by side in g, rank r's `[rows, width_r]` at `rows * first_r`
// (parts: {first column, width} per rank, in rank order).
extern "C" __global__ void tp_interleave(const float* __restrict__ g, float* __restrict__ out, int rows, int total,
                                         const int* __restrict__ parts, int ranks) {
    tf_pdl_enter();
    const long long n = (long long)rows * total;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n; t += (long long)gridDim.x * blockDim.x) {
        const int row = (int)(t / total), c = (int)(t % total);
        int r = 0;
        while (r + 1 < ranks && parts[2 * (r + 1)] <= c) ++r;
        const int first = parts[2 * r], w = parts[2 * r + 1];
        out[t] = g[(long long)rows * first + (long long)row * w + (c - first)];
    }
}
