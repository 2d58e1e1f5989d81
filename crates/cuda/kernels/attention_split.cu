// Decode attention, warp-split schedule (attention.rs picks it for decode rounds of at most two
// CTAs an SM whose CTAs each hold one 256-key chunk: split mode, or every context in one chunk).
// The CTA's rows (one token's query heads of one KV head, at most 16) fit one warp's MMA tile, so
// instead of one warp walking the chunk's four 64-key blocks while three idle, all four blocks
// are gathered at once (the cached keys before the programmatic-dependent-launch wait), warp w
// scores block w, and then each warp runs the chunk's online-softmax chain over the blocks in
// order on its quarter of the output dimensions. Every value is computed by the same operations
// in the same order as attention.cu's one-warp-per-tile kernel (the per-block steps are
// attention.cu's attn_* functions, which both kernels call; the running max before block j is the
// max of the earlier blocks' maxima), so outputs are bit-identical to it: tests compare decode
// token by token against batched rounds.

// Stages: a whole chunk (CPB blocks). Past them in shared memory: each block's P fragments (per
// lane), maxima and row sums (device.rs `attention_split_smem`).
#define ASPLIT_ST 4

template <int D>
__device__ __forceinline__ void attention_split_body(const float* __restrict__ q, u16* __restrict__ kc,
                                                     u16* __restrict__ vc, const u32* __restrict__ seqs,
                                                     const u32* __restrict__ items, const u32* __restrict__ bts,
                                                     float* __restrict__ out, u16* __restrict__ outb,
                                                     float* __restrict__ ws, int nz, int num_heads,
                                                     int num_kv_heads, int block_size, float scale, int window,
                                                     float softcap, int kp, const float* __restrict__ knew,
                                                     const float* __restrict__ vnew, const u32* __restrict__ slots) {
    constexpr int RS = D + 8;  // u16 per key row in shared memory (16 bytes of padding)
    extern __shared__ __align__(16) unsigned char asplit_smem[];
    u16* kst = (u16*)asplit_smem;          // [stage][KB][RS]
    u16* vst = kst + ASPLIT_ST * KB * RS;  // [stage][KB][RS]
    __shared__ u32 kslot[ASPLIT_ST][KB];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
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
    const int nb = b1 - b0 + 1;  // at most CPB (one chunk)

    // The cached keys are gathered before the wait: every earlier row was written in an earlier
    // round, and each round starts with uploads (token ids, this metadata) that the stream runs
    // only after all earlier kernels. The new token's row (knew, one token a sequence) is skipped
    // and, after the wait, stored into the pool and into shared memory by the CTA holding it.
    const int newp = start_pos + tok0;
    const bool holds_new = knew != nullptr && newp >= b0 * KB && newp < (b1 + 1) * KB;
    for (int j = 0; j < nb; ++j) {
        const int b = b0 + j;
        for (int kr = tid; kr < KB; kr += 128) {
            int p = b * KB + kr;
            kslot[j][kr] = p < kv_len && !(holds_new && p == newp)
                               ? bt[p / block_size] * (u32)block_size + (u32)(p % block_size)
                               : 0xffffffffu;
        }
    }
    __syncthreads();
    for (int j = 0; j < nb; ++j) {
        u16* ks = kst + j * KB * RS;
        u16* vs = vst + j * KB * RS;
        const int skip = holds_new && b0 + j == newp / KB ? newp % KB : -1;
        for (int ch = tid; ch < KB * (D / 8); ch += 128) {
            int kr = ch / (D / 8), part = ch % (D / 8);
            if (kr == skip) continue;
            u32 slot = kslot[j][kr];
            bool ok = slot != 0xffffffffu;
            size_t src = ok ? ((size_t)slot * num_kv_heads + kvh) * D + part * 8 : 0;
            cp_async16(&ks[kr * RS + part * 8], kc + src, ok ? 16 : 0);
            cp_async16(&vs[kr * RS + part * 8], vc + src, ok ? 16 : 0);
        }
    }
    cp_commit();
    tf_trace_mark();  // the trace build's pre-wait chain ends here (a no-op otherwise)
    tf_pdl_wait();
    if (holds_new) {
        const int row = q_start + tok0;
        const size_t src = (size_t)row * num_kv_heads * D + (size_t)kvh * D;
        const size_t dst = ((size_t)slots[row] * num_kv_heads + kvh) * D;
        u16* ks = kst + (newp / KB - b0) * KB * RS + (newp % KB) * RS;
        u16* vs = vst + (newp / KB - b0) * KB * RS + (newp % KB) * RS;
        for (int i = tid; i < D; i += 128) {
            u16 kb = f2bf(knew[src + i]), vb = f2bf(vnew[src + i]);
            kc[dst + i] = kb;
            vc[dst + i] = vb;
            ks[i] = kb;
            vs[i] = vb;
        }
    }

    // This thread's two rows (g and g + 8 of the 16, the same for every warp), their Q fragments.
    int rrow[2], rpos[2], rlo[2], rhead[2];
    bool ract[2];
    size_t rq[2], routb[2];
    attn_rows<D>(rrow, rpos, rlo, rhead, ract, rq, routb, g, tok0, ntok, group, kvh, q_start, start_pos, window, qw,
                 kp);
    u32 qa[D / 16][4];
    attn_q_frags<D>(qa, q, rq, ract, c);

    constexpr int DS = D / 32;  // dimension tiles of a warp's quarter
    u32* psm = (u32*)(asplit_smem + 2 * ASPLIT_ST * KB * RS * 2);  // [block][lane][16]
    float* bmx = (float*)(psm + ASPLIT_ST * 32 * 16);                // [block][16 rows]
    float* rsm = bmx + ASPLIT_ST * 16;                               // [block][16 rows]
    cp_wait<0>();
    __syncthreads();
    float s[8][4], bm[2];
    if (warp < nb) {
        attn_scores<D>(s, qa, kst + warp * KB * RS, lane);
        attn_mask(s, bm, b0 + warp, c, ract, rpos, rlo, scale, softcap);
#pragma unroll
        for (int h = 0; h < 2; ++h) attn_quad_max(bm[h]);
        if (c == 0) {
            bmx[warp * 16 + g] = bm[0];
            bmx[warp * 16 + g + 8] = bm[1];
        }
    }
    __syncthreads();
    if (warp < nb) {
        // The running max before this block is the max over the earlier blocks' maxima.
        float muse[2], alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float m = NEG_INF;
            for (int j = 0; j < warp; ++j) attn_step(m, bmx[j * 16 + g + 8 * h], muse[h], alpha[h]);
            attn_step(m, bm[h], muse[h], alpha[h]);
        }
        u32 pa[8][2];
        float rs[2];
        attn_probs(s, muse, pa, rs);
#pragma unroll
        for (int h = 0; h < 2; ++h) attn_quad_sum(rs[h]);
        uint4* pw = (uint4*)(psm + (warp * 32 + lane) * 16);
#pragma unroll
        for (int i = 0; i < 4; ++i) pw[i] = make_uint4(pa[2 * i][0], pa[2 * i][1], pa[2 * i + 1][0], pa[2 * i + 1][1]);
        if (c == 0) {
            rsm[warp * 16 + g] = rs[0];
            rsm[warp * 16 + g + 8] = rs[1];
        }
    }
    __syncthreads();
    // The chunk's chain over its blocks in order, on this warp's quarter of the dimensions.
    float o[DS][4];
#pragma unroll
    for (int i = 0; i < DS; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.f, 0.f};
    for (int j = 0; j < nb; ++j) {
        float alpha[2], muse[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            attn_step(mrow[h], bmx[j * 16 + g + 8 * h], muse[h], alpha[h]);
            lrow[h] = lrow[h] * alpha[h] + rsm[j * 16 + g + 8 * h];  // attention_body's expression
        }
#pragma unroll
        for (int dt = 0; dt < DS; ++dt) {
            o[dt][0] *= alpha[0];
            o[dt][1] *= alpha[0];
            o[dt][2] *= alpha[1];
            o[dt][3] *= alpha[1];
        }
        u32 pa[8][2];
        const uint4* pr = (const uint4*)(psm + (j * 32 + lane) * 16);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            uint4 v = pr[i];
            pa[2 * i][0] = v.x;
            pa[2 * i][1] = v.y;
            pa[2 * i + 1][0] = v.z;
            pa[2 * i + 1][1] = v.w;
        }
        attn_pv<D, DS>(o, pa, vst + j * KB * RS, warp * DS, lane);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (!ract[h]) continue;
        if (nz > 0) {  // leave the chunk's state for attention_combine
            float* w = ws + (((size_t)rrow[h] * num_heads + rhead[h]) * nz + blockIdx.z) * (D + 2);
#pragma unroll
            for (int dt = 0; dt < DS; ++dt) {
                int d = (warp * DS + dt) * 8 + 2 * c;
                w[d] = o[dt][2 * h];
                w[d + 1] = o[dt][2 * h + 1];
            }
            if (warp == 0 && c == 0) {
                w[D] = mrow[h];
                w[D + 1] = lrow[h];
            }
            continue;
        }
        // The fold into an empty accumulator, then o / l, as the one-warp schedule does.
        float m, sa, sp;
        attn_merge_scales(NEG_INF, mrow[h], m, sa, sp);
        float l = attn_merge(0.f, sa, lrow[h], sp);
        float inv = 1.0f / l;
#pragma unroll
        for (int dt = 0; dt < DS; ++dt) {
            int d = (warp * DS + dt) * 8 + 2 * c;
            float v0 = attn_merge(0.f, sa, o[dt][2 * h], sp) * inv;
            float v1 = attn_merge(0.f, sa, o[dt][2 * h + 1], sp) * inv;
            out[rq[h] + d] = v0;
            out[rq[h] + d + 1] = v1;
            outb[routb[h] + d] = f2bf(v0);
            outb[routb[h] + d + 1] = f2bf(v1);
        }
    }

}

#define ATTN_SPLIT_KERNEL(D)                                                                                         \
    extern "C" __global__ void __launch_bounds__(128) attention_split_d##D(                                          \
        const float* __restrict__ q, u16* __restrict__ kc, u16* __restrict__ vc,                                    \
        const u32* __restrict__ seqs, const u32* __restrict__ items, const u32* __restrict__ bts,                   \
        float* __restrict__ out, u16* __restrict__ outb, float* __restrict__ ws, int nz, int num_heads,             \
        int num_kv_heads, int block_size, float scale, int window, float softcap, int kp,                            \
        const float* __restrict__ knew, const float* __restrict__ vnew, const u32* __restrict__ slots) {             \
        tf_pdl_launch();                                                                                             \
        attention_split_body<D>(q, kc, vc, seqs, items, bts, out, outb, ws, nz, num_heads, num_kv_heads,            \
                                block_size, scale, window, softcap, kp, knew, vnew, slots);                          \
    }
ATTN_SPLIT_KERNEL(64)
ATTN_SPLIT_KERNEL(128)
