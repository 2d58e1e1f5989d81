// Prefill attention on Hopper's warpgroup MMA (sm_90a), head width 128: attention.cu's kernel with
// its MMAs moved to wgmma, in the same reduction order, so a row gets the same bits from either.
//
// A CTA takes one work item (a run of query tokens of one sequence) and one KV head, as
// attention.cu's eight-warp CTAs do: 128 rows of (token, query head), 64 per consumer warpgroup.
// A producer warp (of a warpgroup that hands its registers to the consumers) copies each 64-key block's K and V rows from the paged pool by tensor map (one
// box per run of contiguous pool slots, keys past the sequence read as zeros) into a ring of
// stages; full/empty mbarriers hand stages over, so the consumers never wait on one another.
// Per block a warpgroup computes S = Q K^T with eight m64n64k16 steps (Q and K in shared memory,
// d in 16-wide steps from 0, as attn_scores' chain), then attention.cu's mask and online-softmax
// step on the accumulators (wgmma's accumulator layout is mma.sync's, warp by warp), then
// O += P V with four m64n128k16 steps (P from registers as attn_pv's A fragments, V in shared
// memory read transposed), keys in 16-wide steps as attn_pv's chain. Chunks fold as there.
//
// Shared memory: Q [2 warpgroups][2 d-halves][64 rows][128 B], then AW_STAGES stages of
// K [2 d-halves][64 keys][128 B] and V likewise, all in the 128-byte swizzle; then the folded
// chunks, [2 warpgroups][64 values][128 threads] f32 (each thread's own column).

#define AW_STAGES 3
#define AW_Q_BYTES (2 * 2 * 64 * 128)
#define AW_STAGE_BYTES (2 * 2 * 64 * 128)
#define AW_FOLD_BYTES (2 * 64 * 128 * 4)
#define AW_SMEM (AW_Q_BYTES + AW_STAGES * AW_STAGE_BYTES + AW_FOLD_BYTES + 1024)

#ifdef TF_WGMMA
// Shared-memory matrix descriptor in the 128-byte swizzle with explicit leading and stride
// byte offsets (K-major operands ignore the leading one).
__device__ __forceinline__ u64 aw_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) | ((u64)1 << 62);
}
// One tensor-map copy of the 3-D box at (c0 innermost, c1, c2), counted on `bar`.
__device__ __forceinline__ void tma_load_3d(u32 dst, const TmaDesc* map, int c0, int c1, int c2, u64* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
        : "memory");
}
// d (+)= Q K^T for one 16-wide d step: A 64 rows x 16 d, B 64 keys x 16 d, both K-major in shared
// memory; the first step (accumulate 0) starts from zero without writing d first, which would
// serialize the wgmmas in flight.
__device__ __forceinline__ void wgmma_ss_n64(float* d, u64 adesc, u64 bdesc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        WG_REGS32
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : WG_D32(d)
        : "l"(adesc), "l"(bdesc), "r"(accumulate));
}
// d += P V for one 16-key step: A 64 rows x 16 keys from registers (mma.sync's A fragments), B 16
// keys x 128 d in shared memory with d contiguous (read transposed).
__device__ __forceinline__ void wgmma_rs_n128_t(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u64 bdesc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        WG_REGS64
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : WG_D64(d)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(bdesc), "r"(1));
}
#endif

// kmap / vmap: the K and V pools as [slots][kv heads][128] bf16 in boxes of 64 d x 1 head x `run`
// slots (run: min(block_size, 64); block_size a multiple of 8 that divides 64 or is a multiple of
// it). nslots: the pools' slot count (a box at it reads zeros).
extern "C" __global__ void __launch_bounds__(384, 1)
    attention_wg_d128(const float* __restrict__ q, const __grid_constant__ TmaDesc kmap,
                      const __grid_constant__ TmaDesc vmap, const u32* __restrict__ seqs,
                      const u32* __restrict__ items, const u32* __restrict__ bts, float* __restrict__ out,
                      u16* __restrict__ outb, int num_heads, int num_kv_heads, int block_size, float scale,
                      int window, float softcap, int kp, int nslots) {
    tf_pdl_enter();
#ifdef TF_WGMMA
    constexpr int D = 128;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    __shared__ __align__(8) u64 full[AW_STAGES], empty[AW_STAGES];
    const u32 qsm = (smem_addr(smem_raw) + 1023) & ~1023u;
    const u32 ring = qsm + AW_Q_BYTES;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
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
    const int b0 = lo / KB, b1 = last_pos / KB;
    if (tid == 0) {
        for (int s = 0; s < AW_STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 256);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (tid >= 256) {  // producer warpgroup: gives its registers to the consumers; one warp copies
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid >= 288) return;
        if (lane == 0) {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((u64)&kmap) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((u64)&vmap) : "memory");
        }
        // Lane j copies run j of each block; its pool slot for the next block is read while this
        // block's stage is awaited.
        const int run = min(block_size, KB), nruns = KB / run;
        auto first_slot = [&](int b) {
            const int p = b * KB + lane * run;
            return lane < nruns && p < kv_len ? (int)(bt[p / block_size] * (u32)block_size) + p % block_size : nslots;
        };
        int s_next = first_slot(b0);
        for (int b = b0, i = 0; b <= b1; ++b, ++i) {
            const int s0 = s_next;
            if (b < b1) s_next = first_slot(b + 1);
            const int slot = i % AW_STAGES;
            if (i >= AW_STAGES) mbar_wait(&empty[slot], ((i / AW_STAGES) - 1) & 1);
            const u32 base = ring + slot * AW_STAGE_BYTES;
            if (lane == 0) mbar_expect(&full[slot], AW_STAGE_BYTES);
            __syncwarp();
            if (lane < nruns) {
                const u32 dst = base + lane * run * 128;
                tma_load_3d(dst, &kmap, 0, kvh, s0, &full[slot]);
                tma_load_3d(dst + 8192, &kmap, 64, kvh, s0, &full[slot]);
                tma_load_3d(dst + 16384, &vmap, 0, kvh, s0, &full[slot]);
                tma_load_3d(dst + 24576, &vmap, 64, kvh, s0, &full[slot]);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    // This thread's two rows (g and g + 8 of its warp's 16) and the warpgroup's Q rows in bf16.
    const int g = lane >> 2, c = lane & 3;
    int rrow[2], rpos[2], rlo[2], rhead[2];
    bool ract[2];
    size_t rq[2], routb[2];
    attn_rows<D>(rrow, rpos, rlo, rhead, ract, rq, routb, wg * 64 + warp * 16 + g, tok0, ntok, group, kvh, q_start,
                 start_pos, window, qw, kp);
    const u32 qw_base = qsm + wg * 16384;
    for (int ch = tid & 127; ch < 64 * 16; ch += 128) {
        // 16-byte chunk `ch`: row r of the warpgroup, d = 8 (ch % 16) .. + 8
        const int r = ch >> 4, part = ch & 15, cr = wg * 64 + r;
        const int tok = tok0 + cr / group, head = kvh * group + cr % group;
        u32 v[4] = {0u, 0u, 0u, 0u};
        if (cr < ntok * group) {
            const float4* src = (const float4*)(q + (size_t)(q_start + tok) * qw + (size_t)head * D + part * 8);
            float4 x0 = src[0], x1 = src[1];
            v[0] = pack_bf2(x0.x, x0.y);
            v[1] = pack_bf2(x0.z, x0.w);
            v[2] = pack_bf2(x1.x, x1.y);
            v[3] = pack_bf2(x1.z, x1.w);
        }
        const u32 dst = qw_base + (part >> 3) * 8192 + r * 128 + (((part & 7) ^ (r & 7)) << 4);
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
                     : "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");

    float oacc[64], sa[32], sb[32];
#pragma unroll
    for (int i = 0; i < 64; ++i) oacc[i] = 0.f;
    float(&o)[D / 8][4] = *reinterpret_cast<float(*)[D / 8][4]>(oacc);
    float mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.f, 0.f};
    float macc[2] = {NEG_INF, NEG_INF}, lacc[2] = {0.f, 0.f};
    bool have_acc = false;
    const AttnAccSmem<D> acc{(float*)(smem_raw + (qsm - smem_addr(smem_raw)) + AW_Q_BYTES + AW_STAGES * AW_STAGE_BYTES) +
                             wg * 64 * 128 + (tid & 127)};
    // Blocks every row of the CTA sees whole take no mask: keys up to the first token's position,
    // from the last token's window start.
    const int full_hi = first_pos, full_lo = window > 0 ? max(0, last_pos + 1 - window) : 0;

    // Stage i's block b: wait for its copies, zero V rows past the sequence, issue S = Q K^T.
    auto scores = [&](float(&sacc)[32], int b, int i) {
        const int slot = i % AW_STAGES;
        mbar_wait(&full[slot], (i / AW_STAGES) & 1);
        const u32 kbase = ring + slot * AW_STAGE_BYTES, vbase = kbase + 16384;
        if ((b + 1) * KB > kv_len) {
            // Keys past the sequence in its last pool block hold stale values: zero their V rows
            // (as attention.cu's copies do), so 0 * stale cannot be NaN. Each warpgroup writes
            // the zeros itself before its own reads.
            const int k0 = max(0, kv_len - b * KB);
            for (int e = (tid & 127) + k0 * 16; e < KB * 16; e += 128) {
                const int kr = e >> 4, part = e & 15;
                const u32 dst = vbase + (part >> 3) * 8192 + kr * 128 + ((part & 7) << 4);
                asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst), "r"(0u) : "memory");
            }
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
        }
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 off = (kk >> 2) * 8192 + (kk & 3) * 32;
            wgmma_ss_n64(sacc, aw_desc(qw_base + off, 16, 1024), aw_desc(kbase + off, 16, 1024), kk > 0);
        }
        wg_commit();
    };
    // Block b (stage i) with its scores in scur: S of block b + 1 goes to the tensor cores first,
    // then P V of block b - 1 retires (its stage is released, a chunk it ended is folded), this
    // block's softmax step runs, and its P V is issued (more: whether a block b + 1 exists).
    auto step = [&](bool more, float(&scur)[32], float(&snext)[32], int b, int i) {
        if (more) {
            scores(snext, b + 1, i + 1);
            wg_wait<1>();
        } else {
            wg_wait<0>();
        }
        wg_pin<64>(oacc);
        if (i > 0) {
            mbar_arrive(&empty[(i - 1) % AW_STAGES]);
            if (b % CPB == 0) attn_chunk_end<D>(o, mrow, lrow, macc, lacc, have_acc, false, acc, ract);
        }
        // The softmax works on a copy: writing scur itself (the next S's accumulators) while a
        // wgmma is in flight would make ptxas serialize the wgmmas.
        float s[8][4];
#pragma unroll
        for (int e = 0; e < 32; ++e) s[e >> 2][e & 3] = scur[e];
        float bmax[2], alpha[2], muse[2];
        if (b * KB + KB - 1 <= full_hi && b * KB >= full_lo) attn_scale(s, bmax, scale, softcap);
        else attn_mask(s, bmax, b, c, ract, rpos, rlo, scale, softcap);
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
        // O += P V: keys in 16-wide steps.
        const u32 vbase = ring + (i % AW_STAGES) * AW_STAGE_BYTES + 16384;
        wg_pin<64>(oacc);
        wg_fence();
#pragma unroll
        for (int kc2 = 0; kc2 < KB / 16; ++kc2)
            wgmma_rs_n128_t(oacc, pa[2 * kc2][0], pa[2 * kc2][1], pa[2 * kc2 + 1][0], pa[2 * kc2 + 1][1],
                            aw_desc(vbase + kc2 * 2048, 8192, 1024));
        wg_commit();
        if (more) {
            wg_wait<1>();  // S of block b + 1 (P V of block b may still run)
            wg_pin<32>(snext);
        }
    };

    scores(sa, b0, 0);
    wg_wait<0>();
    wg_pin<32>(sa);
    // Each call site passes a constant `more`, so every step compiles without a branch on it.
    const bool next = true, none = false;
    int b = b0, i = 0;
    for (; b + 1 < b1; b += 2, i += 2) {
        step(next, sa, sb, b, i);
        step(next, sb, sa, b + 1, i + 1);
    }
    if (b < b1) {
        step(next, sa, sb, b, i);
        step(none, sb, sa, b + 1, i + 1);
    } else {
        step(none, sa, sb, b, i);
    }
    wg_wait<0>();
    wg_pin<64>(oacc);
    attn_chunk_end<D>(o, mrow, lrow, macc, lacc, have_acc, true, acc, ract);
    attn_finish<D>(o, lacc, out, outb, rq, routb, ract, c);
#endif
}
