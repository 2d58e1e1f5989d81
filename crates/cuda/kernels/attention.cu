// Paged causal attention with GQA, sliding windows and soft-capping (flash-attention style on the
// bf16 tensor cores, f32 softmax state).
//
// A CTA takes one work item (a run of query tokens of one sequence) and one KV head; its rows are
// (token, query head of that KV head's group) pairs, 16 per warp. Keys are walked in blocks of 64
// aligned to absolute positions, double buffered through shared memory.
//
// Reduction order, fixed by absolute key position only: keys fall in chunks of CH keys
// ([c * CH, (c + 1) * CH)); each chunk's softmax state (max m, sum l, unnormalised o) is built by
// an online softmax over its 64-key blocks starting empty, and the chunks' states are folded left
// to right by `attn_merge`, then o / l. A CTA either folds all its chunks itself, or (split mode,
// long contexts with few queries) computes one chunk and leaves the fold to `attention_combine`,
// which runs the same fold on the same values. Blocks and chunks a row cannot see are exact no-ops
// (scores -inf: rescale by 1, add 0; merging an empty state changes nothing). So a query's output
// is bit-identical across batching, chunked prefill, split or not.
//
// meta (u32): seqs [q_start, q_len, start_pos, bt_off] x num_seqs, items [seq, tok0, ntok],
// block tables at bt_off.

#define KB 64
#define CH 256              // keys per chunk (a multiple of KB)
#define CPB (CH / KB)       // blocks per chunk

// Scales of two softmax states (max ma, mp) merged: the merged max m and each side's factor.
__device__ __forceinline__ void attn_merge_scales(float ma, float mp, float& m, float& sa, float& sp) {
    m = fmaxf(ma, mp);
    float mu = m == NEG_INF ? 0.f : m;
    sa = expf(ma - mu);
    sp = expf(mp - mu);
}
// One merged value (o or l): a * sa + p * sp with one fixed rounding sequence.
__device__ __forceinline__ float attn_merge(float a, float sa, float p, float sp) {
    return __fmaf_rn(a, sa, __fmul_rn(p, sp));
}

// A thread's two query rows (r0 and r0 + 8 of its CTA's rows): the token's row and position, the
// window's first key, the query head, whether the row exists, where its q and bf16 output start.
template <int D>
__device__ __forceinline__ void attn_rows(int (&rrow)[2], int (&rpos)[2], int (&rlo)[2], int (&rhead)[2],
                                          bool (&ract)[2], size_t (&rq)[2], size_t (&routb)[2], int r0, int tok0,
                                          int ntok, int group, int kvh, int q_start, int start_pos, int window, int qw, int kp) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int r = r0 + 8 * h;
        int tok = tok0 + r / group;
        rhead[h] = kvh * group + r % group;
        ract[h] = r < ntok * group;
        rrow[h] = q_start + (ract[h] ? tok : tok0);
        rpos[h] = start_pos + (ract[h] ? tok : tok0);
        rlo[h] = window > 0 ? max(0, rpos[h] + 1 - window) : 0;
        rq[h] = (size_t)rrow[h] * qw + (size_t)rhead[h] * D;
        routb[h] = (size_t)rrow[h] * kp + (size_t)rhead[h] * D;
    }
}
// The rows' Q fragments (the MMA's A operand), rounded to bf16.
template <int D>
__device__ __forceinline__ void attn_q_frags(u32 (&qa)[D / 16][4], const float* __restrict__ q, const size_t (&rq)[2],
                                             const bool (&ract)[2], int c) {
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
}

// The per-block steps of both attention kernels (this one's loop and attention_split.cu's, which
// repeats them in another schedule): one definition, so the two cannot drift apart. Moving them
// here left every attention kernel's PTX unchanged (scripts/ptx_diff.py).
// Scores of the warp's 16 rows against a block's 64 keys (K rows in shared memory).
template <int D>
__device__ __forceinline__ void attn_scores(float (&s)[8][4], const u32 (&qa)[D / 16][4], const u16* ks, int lane) {
    constexpr int RS = D + 8;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
        s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
        for (int kc2 = 0; kc2 < D / 16; ++kc2) {
            u32 b0r, b1r;
            ldsm_x2(b0r, b1r, &ks[(nt * 8 + (lane & 7)) * RS + kc2 * 16 + ((lane >> 3) & 1) * 8]);
            mma_bf16(s[nt], qa[kc2][0], qa[kc2][1], qa[kc2][2], qa[kc2][3], b0r, b1r);
        }
    }
}

// Scale, soft-cap and mask the scores of block b (keys a row cannot see become -inf); bmax gets
// each row's largest score among this lane's (attn_quad_max then takes it over the row's quad).
__device__ __forceinline__ void attn_mask(float (&s)[8][4], float (&bmax)[2], int b, int c, const bool (&ract)[2],
                                          const int (&rpos)[2], const int (&rlo)[2], float scale, float softcap) {
    bmax[0] = bmax[1] = NEG_INF;
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
}

// attn_mask for a block that every row of the CTA sees whole: scale and soft-cap only, so the same
// values (no key of it is masked for an active row; inactive rows are never stored).
__device__ __forceinline__ void attn_scale(float (&s)[8][4], float (&bmax)[2], float scale, float softcap) {
    bmax[0] = bmax[1] = NEG_INF;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float v = s[nt][e] * scale;
            if (softcap > 0.f) v = softcap * tanhf(v / softcap);
            s[nt][e] = v;
            bmax[e >> 1] = fmaxf(bmax[e >> 1], v);
        }
}

// A row's value (max or sum) over the quad of lanes holding the row, in a fixed order.
__device__ __forceinline__ void attn_quad_max(float& v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ void attn_quad_sum(float& v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
}

// One online-softmax step of a row: the running max m meets the block's bmax; muse is the max
// the block's probabilities are taken against, alpha the factor for the state so far.
__device__ __forceinline__ void attn_step(float& m, float bmax, float& muse, float& alpha) {
    float mn = fmaxf(m, bmax);
    muse = mn == NEG_INF ? 0.f : mn;
    alpha = expf(m - muse);
    m = mn;
}

// 2^x by the special-function unit (ex2.approx: 2 ulp, subnormal results flushed to zero).
__device__ __forceinline__ float attn_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Probabilities rounded to bf16 (what the PV product uses, as A fragments) and this lane's part
// of their row sums, in a fixed order (attn_quad_sum completes them). exp(s - m) is taken as
// 2^(s log2(e) - m log2(e)), one FFMA and one ex2 a probability: the bf16 rounding that follows
// hides ex2.approx's error. Every attention kernel takes its probabilities from here.
__device__ __forceinline__ void attn_probs(const float (&s)[8][4], const float (&muse)[2], u32 (&pa)[8][2],
                                           float (&rs)[2]) {
    const float l2e = 1.4426950408889634f;
    const float nm[2] = {-muse[0] * l2e, -muse[1] * l2e};
    rs[0] = rs[1] = 0.f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float e0 = attn_ex2(__fmaf_rn(s[nt][2 * h], l2e, nm[h]));
            float e1 = attn_ex2(__fmaf_rn(s[nt][2 * h + 1], l2e, nm[h]));
            u32 pk;
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pk) : "f"(e1), "f"(e0));
            rs[h] += __uint_as_float(pk << 16);
            rs[h] += __uint_as_float(pk & 0xffff0000u);
            pa[nt][h] = pk;
        }
}

// o[0..N) (dimension tiles dt0, dt0 + 1, ...) += P V for one 64-key block; N even.
template <int D, int N>
__device__ __forceinline__ void attn_pv(float (&o)[N][4], const u32 (&pa)[8][2], const u16* vs, int dt0, int lane) {
    constexpr int RS = D + 8;
#pragma unroll
    for (int kc2 = 0; kc2 < KB / 16; ++kc2) {
        u32 a0 = pa[2 * kc2][0], a1 = pa[2 * kc2][1], a2 = pa[2 * kc2 + 1][0], a3 = pa[2 * kc2 + 1][1];
#pragma unroll
        for (int dt = 0; dt < N; dt += 2) {
            u32 r0, r1, r2, r3;
            int key = kc2 * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
            int d = (dt0 + dt + (lane >> 4)) * 8;
            ldsm_x4_t(r0, r1, r2, r3, &vs[key * RS + d]);
            mma_bf16(o[dt], a0, a1, a2, a3, r0, r1);
            mma_bf16(o[dt + 1], a0, a1, a2, a3, r2, r3);
        }
    }
}

// Where a CTA parks its rows' folded chunks: this thread's elements of `out` (attention.cu), or
// its own column of shared memory (attention_wg.cu). Element (h, dt, j): row h of the thread's
// two, value 2c + j of dimension tile dt.
struct AttnAccOut {
    float* p;
    size_t r0, r1;
    int c;
    __device__ __forceinline__ float* at(int h, int dt, int j) const { return p + (h ? r1 : r0) + dt * 8 + 2 * c + j; }
};
template <int D>
struct AttnAccSmem {
    float* p;  // [2 * (D / 8) * 2][128] floats, this thread's column
    __device__ __forceinline__ float* at(int h, int dt, int j) const { return p + ((h * (D / 8) + dt) * 2 + j) * 128; }
};

// Chunk end (a block that ends a 256-key chunk, or the last block): fold the chunk's state (o,
// mrow, lrow) into the accumulator (parked at `acc` for o, macc and lacc), left to right; unless
// it was the last block, park the fold and restart the chunk state.
template <int D, class Acc>
__device__ __forceinline__ void attn_chunk_end(float (&o)[D / 8][4], float (&mrow)[2], float (&lrow)[2],
                                               float (&macc)[2], float (&lacc)[2], bool& have_acc, bool last,
                                               const Acc& acc, const bool (&ract)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float m, sa, sp;
        attn_merge_scales(macc[h], mrow[h], m, sa, sp);
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            float a0 = have_acc && ract[h] ? *acc.at(h, dt, 0) : 0.f, a1 = have_acc && ract[h] ? *acc.at(h, dt, 1) : 0.f;
            o[dt][2 * h] = attn_merge(a0, sa, o[dt][2 * h], sp);
            o[dt][2 * h + 1] = attn_merge(a1, sa, o[dt][2 * h + 1], sp);
        }
        lacc[h] = attn_merge(lacc[h], sa, lrow[h], sp);
        macc[h] = m;
    }
    if (!last) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (ract[h]) {
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt) {
                    *acc.at(h, dt, 0) = o[dt][2 * h];
                    *acc.at(h, dt, 1) = o[dt][2 * h + 1];
                }
            }
            mrow[h] = NEG_INF;
            lrow[h] = 0.f;
        }
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
        have_acc = true;
    }
}

// The rows' outputs o / l, in f32 and in bf16.
template <int D>
__device__ __forceinline__ void attn_finish(const float (&o)[D / 8][4], const float (&lacc)[2], float* __restrict__ out,
                                            u16* __restrict__ outb, const size_t (&rq)[2], const size_t (&routb)[2],
                                            const bool (&ract)[2], int c) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (!ract[h]) continue;
        float inv = 1.0f / lacc[h];
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            int d = dt * 8 + 2 * c;
            float v0 = o[dt][2 * h] * inv, v1 = o[dt][2 * h + 1] * inv;
            *(float2*)(out + rq[h] + d) = make_float2(v0, v1);
            *(u32*)(outb + routb[h] + d) = (u32)f2bf(v0) | ((u32)f2bf(v1) << 16);
        }
    }
}

template <int D>
__device__ __forceinline__ void attention_body(const float* __restrict__ q, u16* __restrict__ kc,
                                               u16* __restrict__ vc, const u32* __restrict__ seqs,
                                               const u32* __restrict__ items, const u32* __restrict__ bts,
                                               float* __restrict__ out, u16* __restrict__ outb,
                                               float* __restrict__ ws, int nz, int num_heads, int num_kv_heads,
                                               int block_size, float scale, int window, float softcap, int kp,
                                               const float* __restrict__ knew, const float* __restrict__ vnew,
                                               const u32* __restrict__ slots) {
    constexpr int RS = D + 8;  // u16 per key row in shared memory (16 bytes of padding)
    extern __shared__ __align__(16) unsigned char attn_smem[];
    u16* kst = (u16*)attn_smem;       // [stage][KB][RS]
    u16* vst = kst + 2 * KB * RS;     // [stage][KB][RS]
    __shared__ u32 kslot[2][KB];
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

    const int first_pos = start_pos + tok0, last_pos = start_pos + tok0 + ntok - 1;
    const int lo = window > 0 ? max(0, first_pos + 1 - window) : 0;
    int b0 = lo / KB, b1 = last_pos / KB;
    if (nz > 0) {  // split mode: this CTA takes chunk lo / CH + blockIdx.z only
        int ch = lo / CH + (int)blockIdx.z;
        if (ch > last_pos / CH) return;
        b0 = max(b0, ch * CPB);
        b1 = min(b1, ch * CPB + CPB - 1);
    }

    // Decode rounds (knew given: one new token per sequence) write the token's K/V here instead of
    // in kv_write: only this sequence's CTAs read it, and only the one whose blocks hold it. The
    // barrier in the first load orders these stores before the gathers.
    if (knew != nullptr) {
        const int p = start_pos + tok0, row = q_start + tok0;
        if (p >= b0 * KB && p < (b1 + 1) * KB) {
            const size_t src = (size_t)row * num_kv_heads * D + (size_t)kvh * D;
            const size_t dst = ((size_t)slots[row] * num_kv_heads + kvh) * D;
            for (int i = tid; i < D; i += nthreads) {
                kc[dst + i] = f2bf(knew[src + i]);
                vc[dst + i] = f2bf(vnew[src + i]);
            }
        }
    }

    // This thread's two rows (g and g + 8 of the warp's 16) and their Q fragments.
    int rrow[2], rpos[2], rlo[2], rhead[2];
    bool ract[2];
    size_t rq[2], routb[2];
    attn_rows<D>(rrow, rpos, rlo, rhead, ract, rq, routb, warp * 16 + g, tok0, ntok, group, kvh, q_start, start_pos,
                 window, qw, kp);
    u32 qa[D / 16][4];
    attn_q_frags<D>(qa, q, rq, ract, c);
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.f, 0.f};
    // The fold of finished chunks (its o lives in `out`, this thread's own elements).
    float macc[2] = {NEG_INF, NEG_INF}, lacc[2] = {0.f, 0.f};
    bool have_acc = false;

    // Block b's 64 keys and values into stage st: pool slots first (one table read per key), then
    // the rows by cp.async.
    auto load = [&](int b, int st) {
        for (int kr = tid; kr < KB; kr += nthreads) {
            int p = b * KB + kr;
            kslot[st][kr] = p < kv_len ? bt[p / block_size] * (u32)block_size + (u32)(p % block_size) : 0xffffffffu;
        }
        __syncthreads();
        u16* ks = kst + st * KB * RS;
        u16* vs = vst + st * KB * RS;
        for (int ch = tid; ch < KB * (D / 8); ch += nthreads) {
            int kr = ch / (D / 8), part = ch % (D / 8);
            u32 slot = kslot[st][kr];
            bool ok = slot != 0xffffffffu;
            size_t src = ok ? ((size_t)slot * num_kv_heads + kvh) * D + part * 8 : 0;
            cp_async16(&ks[kr * RS + part * 8], kc + src, ok ? 16 : 0);
            cp_async16(&vs[kr * RS + part * 8], vc + src, ok ? 16 : 0);
        }
        cp_commit();
    };

    if (b0 <= b1) load(b0, 0);
    for (int b = b0, i = 0; b <= b1; ++b, ++i) {
        const int st = i & 1;
        if (b < b1) {
            load(b + 1, st ^ 1);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const u16* ks = kst + st * KB * RS;
        const u16* vs = vst + st * KB * RS;

        // Scores (16 rows x 64 keys a warp), masked; the online-softmax step; P in bf16; O += P V.
        float s[8][4], bmax[2], alpha[2], muse[2];
        attn_scores<D>(s, qa, ks, lane);
        attn_mask(s, bmax, b, c, ract, rpos, rlo, scale, softcap);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            attn_quad_max(bmax[h]);
            attn_step(mrow[h], bmax[h], muse[h], alpha[h]);
        }
        u32 pa[8][2];
        float rs[2];
        attn_probs(s, muse, pa, rs);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            attn_quad_sum(rs[h]);
            lrow[h] = lrow[h] * alpha[h] + rs[h];
        }
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            o[dt][0] *= alpha[0];
            o[dt][1] *= alpha[0];
            o[dt][2] *= alpha[1];
            o[dt][3] *= alpha[1];
        }
        attn_pv<D, D / 8>(o, pa, vs, 0, lane);
        __syncthreads();  // every warp is done with stage st before load(b + 2) refills it

        const bool last = b == b1;
        if (nz == 0 && (last || (b + 1) % CPB == 0))
            attn_chunk_end<D>(o, mrow, lrow, macc, lacc, have_acc, last, AttnAccOut{out, rq[0], rq[1], c}, ract);
    }
    if (nz > 0) {
        // Split mode: leave this chunk's state (o unnormalised, m, l) for attention_combine.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (!ract[h]) continue;
            float* w = ws + (((size_t)rrow[h] * num_heads + rhead[h]) * nz + blockIdx.z) * (D + 2);
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt) {
                int d = dt * 8 + 2 * c;
                w[d] = o[dt][2 * h];
                w[d + 1] = o[dt][2 * h + 1];
            }
            if (c == 0) {
                w[D] = mrow[h];
                w[D + 1] = lrow[h];
            }
        }
        return;
    }
    attn_finish<D>(o, lacc, out, outb, rq, routb, ract, c);
}

#define ATTN_KERNEL(D)                                                                                               \
    extern "C" __global__ void __launch_bounds__(256) attention_d##D(                                               \
        const float* __restrict__ q, u16* __restrict__ kc, u16* __restrict__ vc,                                    \
        const u32* __restrict__ seqs, const u32* __restrict__ items, const u32* __restrict__ bts,                   \
        float* __restrict__ out, u16* __restrict__ outb, float* __restrict__ ws, int nz, int num_heads,             \
        int num_kv_heads, int block_size, float scale, int window, float softcap, int kp,                            \
        const float* __restrict__ knew, const float* __restrict__ vnew, const u32* __restrict__ slots) {             \
        tf_pdl_enter();                                                                                      \
        attention_body<D>(q, kc, vc, seqs, items, bts, out, outb, ws, nz, num_heads, num_kv_heads, block_size,      \
                          scale, window, softcap, kp, knew, vnew, slots);                                            \
    }
ATTN_KERNEL(16)
ATTN_KERNEL(32)
ATTN_KERNEL(64)
ATTN_KERNEL(128)
ATTN_KERNEL(256)

// Split mode's fold: one block per (item, query head), one thread per dimension; folds the
// item's chunks left to right exactly as attention_body does in one CTA, then divides by l.
extern "C" __global__ void attention_combine(const float* __restrict__ ws, const u32* __restrict__ seqs,
                                             const u32* __restrict__ items, float* __restrict__ out,
                                             u16* __restrict__ outb, int nz, int num_heads, int d_head,
                                             int window, int kp) {
    tf_pdl_enter();
    const u32* it = items + 3 * blockIdx.x;
    const int sq = it[0], tok0 = it[1], ntok = it[2];
    const u32* sm = seqs + 4 * sq;
    const int q_start = sm[0], start_pos = sm[2];
    const int head = blockIdx.y, d = threadIdx.x;
    const int first_pos = start_pos + tok0, last_pos = start_pos + tok0 + ntok - 1;
    const int lo = window > 0 ? max(0, first_pos + 1 - window) : 0;
    const int nch = last_pos / CH - lo / CH + 1;
    for (int t = 0; t < ntok; ++t) {
        int row = q_start + tok0 + t;
        const float* w = ws + ((size_t)row * num_heads + head) * nz * (d_head + 2);
        float m = NEG_INF, l = 0.f, o = 0.f;
        for (int z = 0; z < nch; ++z, w += d_head + 2) {
            float mn, sa, sp;
            attn_merge_scales(m, w[d_head], mn, sa, sp);
            o = attn_merge(o, sa, w[d], sp);
            l = attn_merge(l, sa, w[d_head + 1], sp);
            m = mn;
        }
        float v = o * (1.0f / l);
        size_t od = (size_t)row * num_heads * d_head + (size_t)head * d_head + d;
        out[od] = v;
        outb[(size_t)row * kp + (size_t)head * d_head + d] = f2bf(v);
    }
}
