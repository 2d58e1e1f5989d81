// Paged causal attention with GQA, sliding windows and soft-capping (flash-attention style on the
// bf16 tensor cores, f32 softmax state).
//
// A CTA takes one work item (a run of query tokens of one sequence) and one KV head; its rows are
// (token, query head of that KV head's group) pairs, 16 per warp. Keys are walked in blocks of 64
// aligned to absolute positions, the same blocks in the same order for every query whatever else
// shares its CTA or round; blocks a row cannot see are exact no-ops for that row (all scores
// -inf: rescale by 1, add 0). So a query's output is bit-identical across batching and chunking.
//
// meta (u32): seqs [q_start, q_len, start_pos, bt_off] x num_seqs, items [seq, tok0, ntok],
// block tables at bt_off.

#define KB 64

template <int D>
__device__ __forceinline__ void attention_body(const float* __restrict__ q, const u16* __restrict__ kc,
                                               const u16* __restrict__ vc, const u32* __restrict__ seqs,
                                               const u32* __restrict__ items, const u32* __restrict__ bts,
                                               float* __restrict__ out, u16* __restrict__ outb, int num_heads,
                                               int num_kv_heads, int block_size, float scale, int window,
                                               float softcap, int kp) {
    constexpr int RS = D + 8;  // u16 per key row in shared memory (16 bytes of padding)
    extern __shared__ __align__(16) unsigned char attn_smem[];
    u16* ks = (u16*)attn_smem;
    u16* vs = ks + KB * RS;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, nthreads = blockDim.x;
    const int g = lane >> 2, c = lane & 3;
    const u32* it = items + 3 * blockIdx.x;
    const int sq = it[0], tok0 = it[1], ntok = it[2];
    const u32* sm = seqs + 4 * sq;
    const int q_start = sm[0], q_len = sm[1], start_pos = sm[2];
    const u32* bt = bts + sm[3];
    const int kvh = blockIdx.y, group = num_heads / num_kv_heads;
    const int qw = num_heads * D;
    const int kv_len = start_pos + q_len;

    // This thread's two rows (g and g + 8 of the warp's 16).
    int rrow[2], rpos[2], rlo[2];
    bool ract[2];
    size_t rq[2], rout[2], routb[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int r = warp * 16 + g + 8 * h;
        int tok = tok0 + r / group, head = kvh * group + r % group;
        ract[h] = r < ntok * group;
        rrow[h] = q_start + (ract[h] ? tok : tok0);
        rpos[h] = start_pos + (ract[h] ? tok : tok0);
        rlo[h] = window > 0 ? max(0, rpos[h] + 1 - window) : 0;
        rq[h] = (size_t)rrow[h] * qw + (size_t)head * D;
        rout[h] = rq[h];
        routb[h] = (size_t)rrow[h] * kp + (size_t)head * D;
    }
    // Q fragments (A operand), rounded to bf16.
    u32 qa[D / 16][4];
#pragma unroll
    for (int kc2 = 0; kc2 < D / 16; ++kc2) {
        int d0 = kc2 * 16 + 2 * c;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float* p = q + rq[h];
            qa[kc2][h] = ract[h] ? pack_bf2(p[d0], p[d0 + 1]) : 0u;
            qa[kc2][2 + h] = ract[h] ? pack_bf2(p[d0 + 8], p[d0 + 9]) : 0u;
        }
    }
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.f, 0.f};

    const int first_pos = start_pos + tok0, last_pos = start_pos + tok0 + ntok - 1;
    const int lo = window > 0 ? max(0, first_pos + 1 - window) : 0;
    for (int b = lo / KB; b <= last_pos / KB; ++b) {
        __syncthreads();
        // Gather 64 keys and values of this KV head from the paged pool.
        for (int ch = tid; ch < KB * (D / 8); ch += nthreads) {
            int kr = ch / (D / 8), part = ch % (D / 8);
            int p = b * KB + kr;
            bool ok = p < kv_len;
            size_t src = 0;
            if (ok) {
                size_t slot = (size_t)bt[p / block_size] * block_size + p % block_size;
                src = (slot * num_kv_heads + kvh) * D + part * 8;
            }
            cp_async16(&ks[kr * RS + part * 8], kc + src, ok ? 16 : 0);
            cp_async16(&vs[kr * RS + part * 8], vc + src, ok ? 16 : 0);
        }
        cp_commit();
        cp_wait<0>();
        __syncthreads();

        // Scores: 16 rows x 64 keys per warp.
        float s[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
            for (int kc2 = 0; kc2 < D / 16; ++kc2) {
                u32 b0, b1;
                ldsm_x2(b0, b1, &ks[(nt * 8 + (lane & 7)) * RS + kc2 * 16 + ((lane >> 3) & 1) * 8]);
                mma_bf16(s[nt], qa[kc2][0], qa[kc2][1], qa[kc2][2], qa[kc2][3], b0, b1);
            }
        }
        float bmax[2] = {NEG_INF, NEG_INF};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int h = e >> 1;
                int p = b * KB + nt * 8 + 2 * c + (e & 1);
                float v = s[nt][e] * scale;
                if (softcap > 0.f) v = softcap * tanhf(v / softcap);
                bool ok = ract[h] && p <= rpos[h] && p >= rlo[h];
                v = ok ? v : NEG_INF;
                s[nt][e] = v;
                bmax[h] = fmaxf(bmax[h], v);
            }
        float alpha[2], muse[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            bmax[h] = fmaxf(bmax[h], __shfl_xor_sync(0xffffffffu, bmax[h], 1));
            bmax[h] = fmaxf(bmax[h], __shfl_xor_sync(0xffffffffu, bmax[h], 2));
            float mn = fmaxf(mrow[h], bmax[h]);
            muse[h] = mn == NEG_INF ? 0.f : mn;
            alpha[h] = expf(mrow[h] - muse[h]);
            mrow[h] = mn;
        }
        // Probabilities rounded to bf16 (what the PV product uses); row sums in a fixed order.
        u32 pa[8][2];
        float rs[2] = {0.f, 0.f};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                u16 p0 = f2bf(expf(s[nt][2 * h] - muse[h])), p1 = f2bf(expf(s[nt][2 * h + 1] - muse[h]));
                rs[h] += bf2f(p0);
                rs[h] += bf2f(p1);
                pa[nt][h] = (u32)p0 | ((u32)p1 << 16);
            }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 1);
            rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 2);
            lrow[h] = lrow[h] * alpha[h] + rs[h];
        }
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            o[dt][0] *= alpha[0];
            o[dt][1] *= alpha[0];
            o[dt][2] *= alpha[1];
            o[dt][3] *= alpha[1];
        }
        // O += P V.
#pragma unroll
        for (int kc2 = 0; kc2 < KB / 16; ++kc2) {
            u32 a0 = pa[2 * kc2][0], a1 = pa[2 * kc2][1], a2 = pa[2 * kc2 + 1][0], a3 = pa[2 * kc2 + 1][1];
#pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {
                u32 b0, b1, b2, b3;
                int key = kc2 * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
                int d = (dt + (lane >> 4)) * 8;
                ldsm_x4_t(b0, b1, b2, b3, &vs[key * RS + d]);
                mma_bf16(o[dt], a0, a1, a2, a3, b0, b1);
                mma_bf16(o[dt + 1], a0, a1, a2, a3, b2, b3);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (!ract[h]) continue;
        float inv = 1.0f / lrow[h];
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            int d = dt * 8 + 2 * c;
            float v0 = o[dt][2 * h] * inv, v1 = o[dt][2 * h + 1] * inv;
            out[rout[h] + d] = v0;
            out[rout[h] + d + 1] = v1;
            outb[routb[h] + d] = f2bf(v0);
            outb[routb[h] + d + 1] = f2bf(v1);
        }
    }
}

#define ATTN_KERNEL(D)                                                                                                \
    extern "C" __global__ void __launch_bounds__(128) attention_d##D(                                                \
        const float* __restrict__ q, const u16* __restrict__ kc, const u16* __restrict__ vc,                         \
        const u32* __restrict__ seqs, const u32* __restrict__ items, const u32* __restrict__ bts,                    \
        float* __restrict__ out, u16* __restrict__ outb, int num_heads, int num_kv_heads, int block_size,           \
        float scale, int window, float softcap, int kp) {                                                             \
        attention_body<D>(q, kc, vc, seqs, items, bts, out, outb, num_heads, num_kv_heads, block_size, scale, window, \
                          softcap, kp);                                                                               \
    }
ATTN_KERNEL(16)
ATTN_KERNEL(32)
ATTN_KERNEL(64)
ATTN_KERNEL(128)
ATTN_KERNEL(256)
