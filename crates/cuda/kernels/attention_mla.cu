// Paged causal attention over a latent KV pool (multi-head latent attention in its absorbed form,
// crates/models/src/blocks/mla.rs): one KV head whose row is the latent [c_kv | k_pe], shared by
// every query head, its values the same row (the pool keeps K alone). Widths: any even D whose
// tile fits shared memory (DeepSeek V3 / GLM-5: 512 + 64 = 576; the fixtures: 32 + 16 = 48).
//
// A CTA takes one query token of a work item (attn_meta.rs items) and a tile of up to ML_HT query
// heads, and reads each 32-key block of the token's causal keys once for all of them. Per block:
// the scores (a thread a (head, key) pair: one FMA chain over the width, in order), the
// online-softmax step (a warp a head, lane j key j: max and sum by a fixed butterfly), then
// O += P V (a thread a pair of a head's output values: one FMA chain over the block's keys, in
// order), O in shared memory in f32. Queries and probabilities stay f32; keys are the pool's bf16.
//
// Reduction order, fixed by absolute key position only (as attention.cu's): keys fall in chunks
// of ML_CH keys; each chunk's state (max m, sum l, unnormalised o) is built over its blocks
// starting empty, the chunks' states are folded left to right (ml_merge), then o / l. A CTA
// either folds all its token's chunks itself, or (split mode: few rows, long contexts) builds one
// chunk and leaves the fold to attention_mla_combine, the same fold on the same values. So a
// row's output is bit-identical across batching, chunked prefill, head tiling, split or not.
//
// meta (u32): seqs [q_start, q_len, start_pos, bt_off] x num_seqs, items [seq, tok0, ntok],
// block tables at bt_off.

#define ML_KB 32               // keys per block: one warp's lanes
#define ML_CH 256              // keys per chunk (attention.cu's CH, attn_meta.rs's CHUNK)
#define ML_CPB (ML_CH / ML_KB) // blocks per chunk
#define ML_HT 16               // most query heads a CTA takes
#define ML_THREADS 256         // threads a CTA: 8 warps, each the softmax of ML_HT / 8 heads

// Scales of two softmax states (max ma, mp) merged: the merged max m and each side's factor.
__device__ __forceinline__ void ml_merge_scales(float ma, float mp, float& m, float& sa, float& sp) {
    m = fmaxf(ma, mp);
    float mu = m == NEG_INF ? 0.f : m;
    sa = expf(ma - mu);
    sp = expf(mp - mu);
}
// One merged value (o or l): a * sa + p * sp with one fixed rounding sequence.
__device__ __forceinline__ float ml_merge(float a, float sa, float p, float sp) {
    return __fmaf_rn(a, sa, __fmul_rn(p, sp));
}
// The largest value of the warp's lanes (max is exact in any order).
__device__ __forceinline__ float ml_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// The sum of the warp's lanes by a fixed butterfly (every lane gets the same bits).
__device__ __forceinline__ float ml_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Shared memory of a CTA with `ht` heads of width d (smem.rs `attention_mla_smem` mirrors it):
// the tile's queries and chunk outputs [ht][d] f32 each, probabilities [ht][ML_KB] f32, per-head
// state [5][ML_HT] f32 (chunk max, chunk sum, folded max, folded sum, the block's rescale), the
// key block [ML_KB][d + 2] bf16 (an odd word stride when d % 4 == 0: no bank conflicts), then the
// block's pool slots [ML_KB] u32.
struct MlSmem {
    float *qs, *os, *ps, *mc, *lc, *ma, *la, *al;
    u16* ks;
    u32* kslot;
    __device__ __forceinline__ MlSmem(unsigned char* base, int ht, int d) {
        qs = (float*)base;
        os = qs + ht * d;
        ps = os + ht * d;
        mc = ps + ht * ML_KB;
        lc = mc + ML_HT;
        ma = lc + ML_HT;
        la = ma + ML_HT;
        al = la + ML_HT;
        ks = (u16*)(al + ML_HT);
        kslot = (u32*)(ks + ML_KB * (d + 2));
    }
};

// grid: (items x per_item tokens, head tiles, split chunks or 1); block ML_THREADS.
extern "C" __global__ void __launch_bounds__(ML_THREADS) attention_mla(
    const float* __restrict__ q, const u16* __restrict__ kc, const u32* __restrict__ seqs,
    const u32* __restrict__ items, const u32* __restrict__ bts, float* __restrict__ out, u16* __restrict__ outb,
    float* __restrict__ ws, int nz, int per_item, int num_heads, int ht, int d, int block_size, float scale, int kp) {
    tf_pdl_enter();
    extern __shared__ __align__(16) unsigned char ml_smem[];
    const MlSmem s(ml_smem, ht, d);
    u32* kslot = s.kslot;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, hw = d / 2, rw = hw + 1;
    const u32* it = items + 3 * (blockIdx.x / per_item);
    const int t = blockIdx.x % per_item, sq = it[0], tok0 = it[1], ntok = it[2];
    if (t >= ntok) return;
    const u32* sm = seqs + 4 * sq;
    const int row = sm[0] + tok0 + t, pos = sm[2] + tok0 + t;
    const u32* bt = bts + sm[3];
    const int h0 = blockIdx.y * ht, nh = min(ht, num_heads - h0);
    const size_t qrow = (size_t)row * num_heads * d + (size_t)h0 * d;
    int b0 = 0, b1 = pos / ML_KB;
    if (nz > 0) {  // split mode: this CTA builds chunk blockIdx.z only
        if ((int)blockIdx.z > pos / ML_CH) return;
        b0 = blockIdx.z * ML_CPB;
        b1 = min(b1, b0 + ML_CPB - 1);
    }
    const u32* ks32 = (const u32*)s.ks;
    const float2* qs2 = (const float2*)s.qs;
    float2* os2 = (float2*)s.os;

    for (int i = tid; i < nh * d; i += ML_THREADS) {
        s.qs[i] = q[qrow + i];
        s.os[i] = 0.f;
    }
    if (tid < ML_HT) {
        s.mc[tid] = s.ma[tid] = NEG_INF;
        s.lc[tid] = s.la[tid] = 0.f;
    }
    for (int b = b0; b <= b1; ++b) {
        // The block's keys (zeros past the token: they are masked, and no stale value may reach P V).
        if (tid < ML_KB) {
            int p = b * ML_KB + tid;
            kslot[tid] = p <= pos ? bt[p / block_size] * (u32)block_size + (u32)(p % block_size) : 0xffffffffu;
        }
        __syncthreads();
        for (int i = tid; i < ML_KB * hw; i += ML_THREADS) {
            int kr = i / hw, w = i % hw;
            u32 slot = kslot[kr];
            ((u32*)s.ks)[kr * rw + w] = slot != 0xffffffffu ? ((const u32*)(kc + (size_t)slot * d))[w] : 0u;
        }
        __syncthreads();

        // Scores and the online-softmax step: warp w takes heads w, w + 8, ..., lane j key j.
        for (int h = warp; h < nh; h += ML_THREADS / 32) {
            float acc = 0.f;
            const float2* qh = qs2 + h * hw;
            const u32* kr = ks32 + lane * rw;
            for (int w = 0; w < hw; ++w) {
                float2 qv = qh[w];
                u32 kv = kr[w];
                acc = __fmaf_rn(qv.x, bf2f((u16)(kv & 0xffffu)), acc);
                acc = __fmaf_rn(qv.y, bf2f((u16)(kv >> 16)), acc);
            }
            const float sc = b * ML_KB + lane <= pos ? __fmul_rn(acc, scale) : NEG_INF;
            const float m = s.mc[h], mn = fmaxf(m, ml_warp_max(sc));
            const float muse = mn == NEG_INF ? 0.f : mn;
            const float pj = expf(sc - muse);
            s.ps[h * ML_KB + lane] = pj;
            const float rs = ml_warp_sum(pj);
            __syncwarp();
            if (lane == 0) {
                const float alpha = expf(m - muse);
                s.mc[h] = mn;
                s.lc[h] = __fmaf_rn(s.lc[h], alpha, rs);
                s.al[h] = alpha;
            }
        }
        __syncthreads();

        // O = O * alpha + P V, a thread a pair of one head's values, keys in order.
        for (int i = tid; i < nh * hw; i += ML_THREADS) {
            const int h = i / hw, w = i % hw;
            const float alpha = s.al[h];
            const float* ph = s.ps + h * ML_KB;
            float2 o = os2[i];
            o.x = __fmul_rn(o.x, alpha);
            o.y = __fmul_rn(o.y, alpha);
#pragma unroll 8
            for (int j = 0; j < ML_KB; ++j) {
                const float pj = ph[j];
                const u32 kv = ks32[j * rw + w];
                o.x = __fmaf_rn(pj, bf2f((u16)(kv & 0xffffu)), o.x);
                o.y = __fmaf_rn(pj, bf2f((u16)(kv >> 16)), o.y);
            }
            os2[i] = o;
        }
        __syncthreads();

        // Chunk end (a block that ends a chunk, or the last): fold the chunk into the
        // accumulator (parked in `out`, this thread's own values), left to right.
        const bool last = b == b1;
        if (nz == 0 && (last || (b + 1) % ML_CPB == 0)) {
            const bool have_acc = b >= ML_CPB;
            for (int i = tid; i < nh * hw; i += ML_THREADS) {
                const int h = i / hw, w = i % hw;
                float m, sa, sp;
                ml_merge_scales(s.ma[h], s.mc[h], m, sa, sp);
                float2* acc = (float2*)(out + qrow + (size_t)h * d) + w;
                const float2 a = have_acc ? *acc : make_float2(0.f, 0.f), oc = os2[i];
                float2 o = make_float2(ml_merge(a.x, sa, oc.x, sp), ml_merge(a.y, sa, oc.y, sp));
                if (last) {
                    const float inv = 1.0f / ml_merge(s.la[h], sa, s.lc[h], sp);
                    o = make_float2(o.x * inv, o.y * inv);
                    *(u32*)(outb + (size_t)row * kp + (size_t)(h0 + h) * d + 2 * w) = pack_bf2(o.x, o.y);
                } else {
                    os2[i] = make_float2(0.f, 0.f);
                }
                *acc = o;
            }
            __syncthreads();
            if (!last && tid < nh) {
                float m, sa, sp;
                ml_merge_scales(s.ma[tid], s.mc[tid], m, sa, sp);
                s.la[tid] = ml_merge(s.la[tid], sa, s.lc[tid], sp);
                s.ma[tid] = m;
                s.mc[tid] = NEG_INF;
                s.lc[tid] = 0.f;
            }
            __syncthreads();
        }
    }
    if (nz > 0) {
        // Split mode: this chunk's state (o unnormalised, m, l) for attention_mla_combine (chunks
        // past the token have no CTA: they returned above, and the combine stops before them).
        for (int i = tid; i < nh * hw; i += ML_THREADS) {
            const int h = i / hw, w = i % hw;
            float* st = ws + (((size_t)row * num_heads + h0 + h) * nz + blockIdx.z) * (d + 2);
            *(float2*)(st + 2 * w) = os2[i];
            if (w == 0) {
                st[d] = s.mc[h];
                st[d + 1] = s.lc[h];
            }
        }
    }
}

// Split mode's fold: a block per (token, query head), a thread per value; folds the token's
// chunks left to right as attention_mla does in one CTA, then divides by l.
extern "C" __global__ void attention_mla_combine(const float* __restrict__ ws, const u32* __restrict__ seqs,
                                                 const u32* __restrict__ items, float* __restrict__ out,
                                                 u16* __restrict__ outb, int nz, int per_item, int num_heads, int d,
                                                 int kp) {
    tf_pdl_enter();
    const u32* it = items + 3 * (blockIdx.x / per_item);
    const int t = blockIdx.x % per_item, sq = it[0], tok0 = it[1], ntok = it[2];
    if (t >= ntok) return;
    const u32* sm = seqs + 4 * sq;
    const int row = sm[0] + tok0 + t, pos = sm[2] + tok0 + t, head = blockIdx.y;
    const float* st0 = ws + ((size_t)row * num_heads + head) * nz * (d + 2);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float m = NEG_INF, l = 0.f, o = 0.f;
        const float* st = st0;
        for (int z = 0; z <= pos / ML_CH; ++z, st += d + 2) {
            float mn, sa, sp;
            ml_merge_scales(m, st[d], mn, sa, sp);
            o = ml_merge(o, sa, st[i], sp);
            l = ml_merge(l, sa, st[d + 1], sp);
            m = mn;
        }
        const float v = o * (1.0f / l);
        out[(size_t)row * num_heads * d + (size_t)head * d + i] = v;
        outb[(size_t)row * kp + (size_t)head * d + i] = f2bf(v);
    }
}

// The round's latent rows into their pool slots (K alone: the pool's values are its keys).
extern "C" __global__ void kv_write_latent(const float* __restrict__ k, const u32* __restrict__ slots,
                                           u16* __restrict__ kc, int width) {
    tf_pdl_enter();
    const int r = blockIdx.x;
    const size_t dst = (size_t)slots[r] * width;
    for (int c = threadIdx.x; c < width; c += blockDim.x) kc[dst + c] = f2bf(k[(size_t)r * width + c]);
}
