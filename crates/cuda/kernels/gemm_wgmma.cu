// Many-row y = x @ W^T on Hopper's warpgroup MMA (wgmma, sm_90a), in the reduction order of
// gemm.cu: per output element, each K segment (`gemm_seg_len`) is one accumulator that starts at
// zero and takes the segment's 16-wide k steps in order; segment sums are added left to right into
// a total that starts at zero. wgmma m64nNk16 with W as the register A operand (the packed
// fragment layout is exactly wgmma's register layout for A, warp w of the warpgroup holding rows
// 16w..16w+15) computes each k step as mma.sync m16n8k16 does (scripts/device/gemm_lab.cu and
// tests/ops.rs check the kernels agree bit for bit), so rows do not depend on which kernel ran.
//
// CTA tile: 128 weight rows (two consumer warpgroups of 64) x 128 tokens x 64 k per stage, in a
// ring of WG_STAGES stages fed by a producer warp: W by bulk copies in its packed layout (each
// lane's 16 bytes of a k tile are its A fragment; a row tile's 4 k tiles are 2 KB contiguous), x
// by one tensor-map copy per stage into the 128-byte-swizzled K-major layout wgmma reads (tokens
// and k past the ends read as zeros). Full/empty mbarriers hand stages between producer and
// consumers; each consumer keeps one wgmma group in flight while it loads the next fragments.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TF_WGMMA 1
#endif

#define WG_BN 128                         // tokens per CTA
#define WG_TILES 8                        // 16-row W tiles per CTA
#define WG_STAGES 6
#define WG_A_BYTES (WG_TILES * 4 * 512)   // W per stage: 8 row tiles x 4 k tiles x 512 bytes
#define WG_B_BYTES (WG_BN * 64 * 2)       // x per stage: BN tokens x 64 k x 2 bytes
#define WG_STAGE_BYTES (WG_A_BYTES + WG_B_BYTES)
#define WG_SMEM (WG_STAGES * WG_STAGE_BYTES + 1024)  // plus room to align the ring to 1 KB
#define WG_ACC (WG_BN / 2)                // accumulators per thread
#define WG_THREADS 288                    // two consumer warpgroups and the producer warp

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
// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) with the bulk copy engine and
// counts them on `bar`.
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, u32 bytes, u64* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}
// Shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle (rows of 128 bytes,
// 8-row groups 1024 bytes apart); `p` is the tile's 1 KB aligned base plus 32 bytes per k step.
__device__ __forceinline__ u64 wg_desc_sw128(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
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
// Keeps the compiler from moving accumulator reads or writes across an in-flight wgmma.
__device__ __forceinline__ void wg_pin(float* d) {
#pragma unroll
    for (int i = 0; i < WG_ACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void wg_pin_a(uint4* a) {
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[i].x), "+r"(a[i].y), "+r"(a[i].z), "+r"(a[i].w)::"memory");
}

// d += a * B for one k step: a 64x16 W slice in registers, B 16 x 128 tokens from shared memory.
__device__ __forceinline__ void wgmma_n128(float* d, uint4 a, u64 desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"
        "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,"
        "%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
        "}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}

#endif

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
    gemm_wgmma(const unsigned char* __restrict__ w, const __grid_constant__ TmaDesc xmap, float* __restrict__ y, int m,
               int n, int ntiles, int kt) {
    tf_pdl_enter();
#ifdef TF_WGMMA
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    __shared__ __align__(8) u64 full[WG_STAGES], empty[WG_STAGES];
    const u32 ring = (smem_addr(smem_raw) + 1023) & ~1023u;  // [stage][x 32 KB | W 16 KB]
    unsigned char* ring_ptr = smem_raw + (ring - smem_addr(smem_raw));
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int tile0 = blockIdx.x * WG_TILES, tok0 = blockIdx.y * WG_BN;
    const int nkb = (kt + 3) / 4;  // 64-wide k blocks
    if (tid == 0) {
        for (int s = 0; s < WG_STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 256);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (tid >= 256) {  // producer warp: lane 0 issues every copy
        if (lane != 0) return;
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((u64)&xmap) : "memory");
        const int rts = min(WG_TILES, ntiles - tile0);
        for (int kb = 0; kb < nkb; ++kb) {
            const int slot = kb % WG_STAGES, nj = min(4, kt - kb * 4);
            if (kb >= WG_STAGES) mbar_wait(&empty[slot], ((kb / WG_STAGES) - 1) & 1);
            const u32 base = ring + slot * WG_STAGE_BYTES;
            mbar_expect(&full[slot], WG_B_BYTES + rts * nj * 512);
            tma_load_2d(base, &xmap, kb * 64, tok0, &full[slot]);
            for (int rt = 0; rt < rts; ++rt)
                bulk_g2s(ring_ptr + slot * WG_STAGE_BYTES + WG_B_BYTES + rt * 2048,
                         w + ((size_t)(tile0 + rt) * kt + kb * 4) * 512, nj * 512, &full[slot]);
        }
        return;
    }

    float acc[WG_ACC], tot[WG_ACC];
#pragma unroll
    for (int i = 0; i < WG_ACC; ++i) acc[i] = tot[i] = 0.f;
    const int seg_len = gemm_seg_len(kt);
    // One k block: wait for its stage, load this block's A fragments into `cur` while the
    // previous block's group (reading `prev`) may still run, then release the previous stage.
    auto step = [&](int kb, uint4* cur, uint4* prev) {
        const int slot = kb % WG_STAGES;
        mbar_wait(&full[slot], (kb / WG_STAGES) & 1);
        const u32 base = ring + slot * WG_STAGE_BYTES;
        const uint4* as = (const uint4*)(ring_ptr + slot * WG_STAGE_BYTES + WG_B_BYTES) + (wg * 4 + warp) * 4 * 32 + lane;
        const int steps = min(4, kt - kb * 4);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) cur[kk] = as[kk * 32];
        wg_pin_a(cur);  // the fragments are in registers before the first fence
        bool fresh = true;  // accumulators were written by other instructions: fence first
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            if (kk < steps) {
                if (fresh) {
                    wg_pin(acc);
                    wg_fence();
                    fresh = false;
                }
                wgmma_n128(acc, cur[kk], wg_desc_sw128(base + kk * 32));
                const int j = kb * 4 + kk + 1;
                if (j % seg_len == 0 || j == kt) {  // segment end: retire, fold, restart
                    wg_commit();
                    wg_wait<0>();
                    wg_pin(acc);
#pragma unroll
                    for (int i = 0; i < WG_ACC; ++i) {
                        tot[i] = __fadd_rn(tot[i], acc[i]);
                        acc[i] = 0.f;
                    }
                    fresh = true;
                }
            }
        }
        if (!fresh) wg_commit();
        wg_wait<1>();
        if (kb > 0) mbar_arrive(&empty[(kb - 1) % WG_STAGES]);
        wg_pin_a(prev);  // `prev` stays live until its group retired, so `cur` got other registers
    };
    uint4 a0[4], a1[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) a0[kk] = a1[kk] = make_uint4(0, 0, 0, 0);
    for (int kb = 0; kb < nkb; kb += 2) {
        step(kb, a0, a1);
        if (kb + 1 < nkb) step(kb + 1, a1, a0);
    }
    wg_wait<0>();
    wg_pin(acc);
    // Accumulator i of lane (g, c) in warp `warp`: row 16 warp + g + 8 (i / 2 % 2), token 8 (i / 4) + 2c + i % 2.
    const int g = lane >> 2, c = lane & 3;
    const int rowb = (tile0 + wg * 4 + warp) * 16 + g;
#pragma unroll
    for (int i = 0; i < WG_ACC; ++i) {
        int row = rowb + ((i >> 1) & 1) * 8, tok = tok0 + (i >> 2) * 8 + 2 * c + (i & 1);
        if (row < n && tok < m) y[(size_t)tok * n + row] = tot[i];
    }
#endif
}
