// Many-row y = x @ W^T on Hopper's warpgroup MMA (wgmma, sm_90a), in the reduction order of
// gemm.cu: per output element, each K segment (`gemm_seg_len`) is one accumulator that starts at
// zero and takes the segment's 16-wide k steps in order; segment sums are added left to right into
// a total that starts at zero. wgmma m64n128k16 computes each k step as mma.sync m16n8k16 does
// (scripts/device/gemm_lab.cu and tests/ops.rs check the kernels agree bit for bit), so rows do
// not depend on which kernel ran.
//
// CTA tile: 128 weight rows (two consumer warpgroups of 64) x 128 tokens x 64 k per stage, in a
// ring of WG_STAGES stages fed by one producer thread with two tensor-map copies per stage (W rows and
// x rows, each into the 128-byte-swizzled K-major layout wgmma reads from shared memory; rows and
// k past the ends read as zeros). Full/empty mbarriers hand stages between producer and consumers.
// K must be whole 64-wide blocks with segments ending on them (ops.rs sends other shapes to
// gemm_bf16), so each block's four wgmmas are unconditional: nothing for the compiler to
// serialize them on.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TF_WGMMA 1
#endif

#define WG_BN 128                         // tokens per CTA
#define WG_ROWS 128                       // W rows per CTA
#define WG_STAGES 6
#define WG_A_BYTES (WG_ROWS * 64 * 2)     // W per stage: 128 rows x 64 k x 2 bytes
#define WG_B_BYTES (WG_BN * 64 * 2)       // x per stage: 128 tokens x 64 k x 2 bytes
#define WG_STAGE_BYTES (WG_A_BYTES + WG_B_BYTES)
#define WG_SMEM (WG_STAGES * WG_STAGE_BYTES + 1024)  // plus room to align the ring to 1 KB
#define WG_ACC (WG_BN / 2)                // accumulators per thread
#define WG_THREADS 384                    // two consumer warpgroups and the producer warpgroup

// A CUtensorMap, passed by value (the kernels need no CUDA headers).
struct __align__(64) TmaDesc {
    u64 v[16];
};

#ifdef TF_WGMMA
__device__ __forceinline__ void mbar_init(u64* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_expect(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred p;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}
// Shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle (rows of 128 bytes,
// 8-row groups 1024 bytes apart); `p` is the tile's 1 KB aligned base plus 32 bytes per k step.
__device__ __forceinline__ u64 wg_desc_sw128(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// mbar_arrive where `p` holds, predicated rather than branched.
__device__ __forceinline__ void mbar_arrive_if(u64* bar, bool p) {
    asm volatile("{\n.reg .pred q;\nsetp.ne.u32 q, %1, 0;\n@q mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(smem_addr(bar)),
                 "r"((u32)p)
                 : "memory");
}
// One tensor-map copy of the box at (c0 innermost, c1) into shared memory, counted on `bar`.
__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaDesc* map, int c0, int c1, u64* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(smem_addr(bar))
        : "memory");
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Keeps the compiler from moving reads or writes of N accumulators across an in-flight wgmma.
template <int N = WG_ACC>
__device__ __forceinline__ void wg_pin(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}



// The accumulator operands of a wgmma with 32 or 64 f32 registers a thread: the register list
// (operands %0 up) and the read-write constraints on d[0..N).
#define WG_REGS32 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26," \
    "%27,%28,%29,%30,%31"
#define WG_REGS64 \
    WG_REGS32 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51," \
              "%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define WG_D8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                    "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D32(d) WG_D8(d, 0), WG_D8(d, 8), WG_D8(d, 16), WG_D8(d, 24)
#define WG_D64(d) WG_D32(d), WG_D8(d, 32), WG_D8(d, 40), WG_D8(d, 48), WG_D8(d, 56)

// d (+)= A * B for one k step: A 64 W rows x 16 k and B 16 k x 128 tokens, both in shared
// memory; accumulate 0 starts from zero (a segment's first step) without writing d first.
__device__ __forceinline__ void wgmma_ss_n128(float* d, u64 adesc, u64 bdesc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        WG_REGS64
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : WG_D64(d)
        : "l"(adesc), "l"(bdesc), "r"(accumulate));
}
#endif

// One output tile of the persistent loop: tile t of nbx W blocks x gy token tiles x gz segments,
// token tile fastest (tokens_first: the CTAs running at once share a few W blocks, so W streams
// from DRAM about once while x stays in L2), else W block fastest.
struct WgTile {
    int which, wblock, row0, tok0, z;
};

// A grouped launch's experts (gemm_wgmma_grouped): W block bx of token tile `by` reads expert
// tiles[3 by]'s weight maps[which * ne + expert] and its rows [tiles[3 by + 1], tiles[3 by + 2])
// of the gathered x and of y (the tile's other rows are the next expert's: read, never stored).
struct WgGroups {
    const TmaDesc* __restrict__ maps;
    const u32* __restrict__ tiles;
    int ne, ntt;
    const u32* __restrict__ ntt_at;  // the token tiles' count on the device (moe_plan_tiles), or null: ntt
};
__device__ __forceinline__ WgTile wg_tile(int t, int nbx, int gy, int bx0, int bx1, int tokens_first) {
    const int bx = tokens_first ? (t / gy) % nbx : t % nbx, by = tokens_first ? t % gy : (t / nbx) % gy;
    const int z = t / (nbx * gy);
    const int which = bx < bx0 ? 0 : bx < bx0 + bx1 ? 1 : 2;
    const int wblock = which == 0 ? bx : which == 1 ? bx - bx0 : bx - bx0 - bx1;
    return WgTile{which, wblock, wblock * WG_ROWS, by * WG_BN, z};
}

// Up to three weights of the same x in one launch (q/k/v, gate/up): W blocks [0, bx0) are W0's
// 128-row blocks, then bx1 of W1's, then W2's (each into its own y of n columns), nbx in all.
// Persistent: CTA c takes tiles c, c + gridDim.x, ..., so the producer fills the next tile's
// stages while the consumers finish a tile (warpgroup 1 may trail warpgroup 0 by lag_blocks).
// Split mode (nz > 0, few rows: too few CTAs otherwise): tile z computes only K segment z and
// leaves its sum in ws [nz][m][n0 + n1 + n2]; `gemm_fold` adds the segments in order.
// GLU: W0 is a packed gate/up weight (tf_backend gate_up; n0 = 2 inter, no split, no add) and
// the store writes act(gate) * up rounded to bf16 (ops.cu glu_one, the same values as glu_packed
// of the plain output) into ygb [m, inter] (row stride kp) instead of y0.
// GROUPED: the token tiles and each tile's weights come from `grp` (WgGroups); rows are stored
// up to their tile's end rather than m (no split, no add).
template <bool GLU, bool GROUPED = false>
__device__ __forceinline__ void gemm_wgmma_body(const TmaDesc& w0, const TmaDesc& w1, const TmaDesc& w2, const TmaDesc& xmap,
                                                float* __restrict__ y0, float* __restrict__ y1, float* __restrict__ y2,
                                                int n0, int n1, int n2, int bx0, int bx1, int nbx, int m, int kt,
                                                float* __restrict__ ws, int nz, int add, int lag_blocks, int tokens_first,
                                                u16* __restrict__ ygb, int kp, int act, WgGroups grp = WgGroups{}) {
#ifdef TF_WGMMA
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    __shared__ __align__(8) u64 full[WG_STAGES], empty[WG_STAGES], lagbar;
    const u32 ring = (smem_addr(wg_smem) + 1023) & ~1023u;  // [stage][x 16 KB | W 16 KB]
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int seg_len = gemm_seg_len(kt);
    const int gy = GROUPED ? (grp.ntt_at ? (int)*grp.ntt_at : grp.ntt) : (m + WG_BN - 1) / WG_BN;
    const int ntiles = nbx * gy * max(nz, 1);
    // Tile t, and the end of its rows (m, or its expert's last pair).
    auto tile = [&](int t, int& tok_end) {
        WgTile tl = wg_tile(t, nbx, gy, bx0, bx1, tokens_first);
        tok_end = m;
        if constexpr (GROUPED) {
            const int by = tl.tok0 / WG_BN;
            tl.z = (int)grp.tiles[3 * by];  // the expert (z is unused: no split)
            tl.tok0 = (int)grp.tiles[3 * by + 1];
            tok_end = (int)grp.tiles[3 * by + 2];
        }
        return tl;
    };
    // 64-wide k blocks [kb0, kb0 + nkb) of a tile: all of K, or segment z in split mode.
    auto kblocks = [&](int z, int& kb0, int& nkb) {
        kb0 = nz > 0 ? z * seg_len / 4 : 0;
        nkb = nz > 0 ? min(seg_len, kt - z * seg_len) / 4 : kt / 4;
    };
    if (tid == 0) {
        for (int s = 0; s < WG_STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 256);
        }
        mbar_init(&lagbar, 128);
        mbar_fence_init();
    }
    __syncthreads();

    if (tid >= 256) {  // producer warpgroup: gives its registers to the consumers; one thread copies
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid != 256) return;
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((u64)&xmap) : "memory");
        int slot = 0, round = 0;
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
            int tok_end;
            const WgTile tl = tile(t, tok_end);
            const TmaDesc* wmap = GROUPED ? &grp.maps[tl.which * grp.ne + tl.z] : tl.which == 0 ? &w0 : tl.which == 1 ? &w1 : &w2;
            int kb0, nkb;
            kblocks(GROUPED ? 0 : tl.z, kb0, nkb);
            for (int kb = 0; kb < nkb; ++kb) {
                if (round > 0) mbar_wait(&empty[slot], (round - 1) & 1);
                const u32 base = ring + slot * WG_STAGE_BYTES;
                mbar_expect(&full[slot], WG_B_BYTES + WG_A_BYTES);
                tma_load_2d(base, &xmap, (kb0 + kb) * 64, tl.tok0, &full[slot]);
                tma_load_2d(base + WG_B_BYTES, wmap, (kb0 + kb) * 64, tl.row0, &full[slot]);
                if (++slot == WG_STAGES) {
                    slot = 0;
                    ++round;
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");

    float acc[WG_ACC], tot[WG_ACC];
    // Per k block no division: the ring slot and its phase advance by counters, descriptors by
    // adding to the encoded start address (16-byte units: a stage is WG_STAGE_BYTES / 16, a k step
    // 2), and a segment ends every `bps` blocks (kb0 starts one) or at the tile's last block. A
    // segment that is not whole 64-wide blocks is all of K (tma::wgmma_fits), so it ends last.
    const int bps = seg_len % 4 == 0 ? seg_len / 4 : kt;
    const u64 dx0 = wg_desc_sw128(ring), dw0 = wg_desc_sw128(ring + WG_B_BYTES + wg * 64 * 128);
    int slot = 0;
    u32 phase = 0;
    u32 nlag = 0;  // lagged tiles so far: lagbar's completed phases
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
        int tok_end;
        const WgTile tl = tile(t, tok_end);
        int kb0, nkb;
        kblocks(GROUPED ? 0 : tl.z, kb0, nkb);
        // Warpgroup 1 may run lag_blocks (at most 4) behind warpgroup 0, so their segment-end drains (and
        // epilogues) fall at different times and the other keeps the tensor cores busy: it waits
        // for warpgroup 0's arrivals on `lagbar` after that one's first lag_blocks blocks of the tile.
        // Warpgroup 0 runs at most WG_STAGES blocks ahead of warpgroup 1 (the ring), so it cannot
        // finish the next tile's first lag blocks before warpgroup 1 has waited for this tile's
        // when nkb + lag > WG_STAGES; shorter tiles run unlagged (`lagbar`'s phases would alias).
        const bool lagged = lag_blocks > 0 && lag_blocks <= 4 && nkb >= lag_blocks && nkb + lag_blocks > WG_STAGES;
        const int lag = lagged ? lag_blocks : 0;
        // Warpgroup 0 waits on the phase before (complete): the same code for both, no branch on
        // the warpgroup (a divergent path would serialize the wgmmas).
        mbar_wait(&lagbar, (nlag & 1) ^ (wg == 0 || lag == 0 ? 1u : 0u));
        nlag += lag > 0;
#pragma unroll
        for (int i = 0; i < WG_ACC; ++i) tot[i] = 0.f;
        int in_seg = 0;
        for (int kb = 0; kb < nkb; ++kb) {
            mbar_wait(&full[slot], phase);
            const u64 soff = (u64)(slot * (WG_STAGE_BYTES >> 4));
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
                wgmma_ss_n128(acc, dw0 + soff + 2 * kk, dx0 + soff + 2 * kk, in_seg > 0 || kk > 0);
            wg_commit();
            // Segment end: retire and fold; the next segment's first step starts from zero, so acc
            // is never written here (a write would make ptxas wait on every block).
            if (++in_seg == bps || kb + 1 == nkb) {
                in_seg = 0;
                wg_wait<0>();
                wg_pin(acc);
#pragma unroll
                for (int i = 0; i < WG_ACC; ++i) tot[i] = __fadd_rn(tot[i], acc[i]);
            } else {
                wg_wait<1>();  // the previous block's group retired: its stage is free
            }
            if (kb > 0) mbar_arrive(&empty[slot == 0 ? WG_STAGES - 1 : slot - 1]);
            mbar_arrive_if(&lagbar, wg == 0 && kb + 1 == lag);
            if (++slot == WG_STAGES) {
                slot = 0;
                phase ^= 1;
            }
        }
        wg_wait<0>();  // retired already (the last block ends a segment); says so to ptxas
        wg_pin(acc);
        mbar_arrive(&empty[slot == 0 ? WG_STAGES - 1 : slot - 1]);  // the tile's last stage

        float* __restrict__ y = tl.which == 0 ? y0 : tl.which == 1 ? y1 : y2;
        const int n = tl.which == 0 ? n0 : tl.which == 1 ? n1 : n2;
        // Accumulator i of lane (g, c) in warp `warp`: row 16 warp + g + 8 (i / 2 % 2), token 8 (i / 4) + 2c + i % 2.
        const int g = lane >> 2, c = lane & 3;
        if constexpr (GLU) {
            // Rows 16 q + g (gate) and 16 q + g + 8 (up) of the packed weight: output column 8 q + g.
            // Value j is accumulators i = 4 (j / 2) + j % 2 (gate) and i + 2 (up), token
            // 8 (j / 2) + 2c + j % 2. All are made before any store, so their dependent chains
            // (exponential, division) overlap; made one by one under a bounds branch each they
            // cost the CTA about 3 us a tile (H200, 4096-token prefill).
            const int inter = n0 / 2, col = (tl.row0 + wg * 64 + warp * 16) / 2 + g;
            float o[WG_ACC / 2];
#pragma unroll
            for (int j = 0; j < WG_ACC / 2; ++j) o[j] = glu_one(tot[(j >> 1) * 4 + (j & 1)], tot[(j >> 1) * 4 + (j & 1) + 2], act);
            // A whole token tile stores unguarded from one base (token 2c of the tile; value j
            // 8 (j / 2) + j % 2 rows further), else value by value under the bounds test.
            u16* __restrict__ base = ygb + (size_t)(tl.tok0 + 2 * c) * kp + col;
            if (col < inter && tl.tok0 + WG_BN <= m) {
#pragma unroll
                for (int j = 0; j < WG_ACC / 2; ++j) base[(size_t)((j >> 1) * 8 + (j & 1)) * kp] = f2bf(o[j]);
            } else {
#pragma unroll
                for (int j = 0; j < WG_ACC / 2; ++j) {
                    const int t = (j >> 1) * 8 + (j & 1);
                    if (col < inter && tl.tok0 + 2 * c + t < m) base[(size_t)t * kp] = f2bf(o[j]);
                }
            }
            continue;
        }
        const int rowb = tl.row0 + wg * 64 + warp * 16 + g;
        // Split mode: this segment's sum (0 + s, what the fold starts from) at column `col0 + row`.
        const int ntot = n0 + n1 + n2, col0 = tl.which == 0 ? 0 : tl.which == 1 ? n0 : n0 + n1;
        // With add, every old y value is loaded (into the spent accumulators) before any store, so
        // the loads overlap instead of each waiting behind the previous store.
        if (add && nz == 0) {
#pragma unroll
            for (int i = 0; i < WG_ACC; ++i) {
                int row = rowb + ((i >> 1) & 1) * 8, tok = tl.tok0 + (i >> 2) * 8 + 2 * c + (i & 1);
                acc[i] = row < n && tok < tok_end ? y[(size_t)tok * n + row] : 0.f;
            }
        }
#pragma unroll
        for (int i = 0; i < WG_ACC; ++i) {
            int row = rowb + ((i >> 1) & 1) * 8, tok = tl.tok0 + (i >> 2) * 8 + 2 * c + (i & 1);
            if (row < n && tok < tok_end) {
                if (nz > 0) ws[((size_t)tl.z * m + tok) * ntot + col0 + row] = tot[i];
                else y[(size_t)tok * n + row] = add ? __fadd_rn(acc[i], tot[i]) : tot[i];
            }
        }
    }
#endif
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
    gemm_wgmma(const __grid_constant__ TmaDesc w0, const __grid_constant__ TmaDesc w1, const __grid_constant__ TmaDesc w2,
               const __grid_constant__ TmaDesc xmap, float* __restrict__ y0, float* __restrict__ y1,
               float* __restrict__ y2, int n0, int n1, int n2, int bx0, int bx1, int nbx, int m, int kt,
               float* __restrict__ ws, int nz, int add, int lag_blocks, int tokens_first) {
    tf_pdl_enter();
    gemm_wgmma_body<false>(w0, w1, w2, xmap, y0, y1, y2, n0, n1, n2, bx0, bx1, nbx, m, kt, ws, nz, add, lag_blocks,
                           tokens_first, nullptr, 0, 0);
}

// Grouped GEMM over experts (moe/grouped.rs): ntt token tiles (or *ntt_at where it is not null)
// of the expert-sorted gathered x (`tiles`: [expert, first row, end row] each), each against nb
// 128-row blocks of its expert's
// weights of `kinds` kinds (1 or 2: gate and up in one launch), maps [kind][ne] in global memory;
// kind j's rows into yj [rows, n]. Every output element takes gemm_wgmma's reduction order.
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
    gemm_wgmma_grouped(const TmaDesc* __restrict__ maps, const u32* __restrict__ tiles, int ne, int ntt,
                       const u32* __restrict__ ntt_at, const __grid_constant__ TmaDesc xmap, float* __restrict__ y0, float* __restrict__ y1, int n,
                       int nb, int kinds, int kt, int lag_blocks, int tokens_first) {
    tf_pdl_enter();
    gemm_wgmma_body<false, true>(xmap, xmap, xmap, xmap, y0, y1, y1, n, n, n, nb, kinds > 1 ? nb : 0, nb * kinds, 0, kt,
                                 nullptr, 0, 0, lag_blocks, tokens_first, nullptr, 0, 0, WgGroups{maps, tiles, ne, ntt, ntt_at});
}

// The packed gate/up matmul with the gated activation in its store (gemm_wgmma_body GLU): gu has
// n = 2 inter rows in nb 128-row blocks; yb [m, inter] bf16 (row stride kp).
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
    gemm_wgmma_glu(const __grid_constant__ TmaDesc gu, const __grid_constant__ TmaDesc xmap, u16* __restrict__ yb, int n,
                   int nb, int m, int kt, int kp, int act, int lag_blocks, int tokens_first) {
    tf_pdl_enter();
    gemm_wgmma_body<true>(gu, gu, gu, xmap, nullptr, nullptr, nullptr, n, 0, 0, nb, 0, nb, m, kt, nullptr, 0, 0, lag_blocks,
                          tokens_first, yb, kp, act);
}

// Split mode's fold: y = ((0 + s0) + s1) + ... over the nz segment sums, exactly the register
// fold of the unsplit kernel; element e of [m][n0 + n1 + n2] goes to the weight its column is in.
extern "C" __global__ void gemm_fold(const float* __restrict__ ws, float* __restrict__ y0, float* __restrict__ y1,
                                     float* __restrict__ y2, int n0, int n1, int n2, int m, int nz, int add) {
    tf_pdl_enter();
    const int ntot = n0 + n1 + n2;
    const size_t total = (size_t)m * ntot;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        float t = 0.f;
        for (int z = 0; z < nz; ++z) t = __fadd_rn(t, ws[(size_t)z * total + e]);
        const int tok = (int)(e / ntot), col = (int)(e % ntot);
        if (col < n0) gemm_store(y0 + (size_t)tok * n0 + col, t, add);
        else if (col < n0 + n1) gemm_store(y1 + (size_t)tok * n1 + col - n0, t, add);
        else gemm_store(y2 + (size_t)tok * n2 + col - n0 - n1, t, add);
    }
}
