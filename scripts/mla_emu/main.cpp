// kernels/attention_mla.cu on the host (crates/cuda/src/attention_mla/emulated.rs builds and feeds
// it): kv_write_latent, attention_mla and, in split mode, attention_mla_combine, each grid walked
// one CTA after another, a CTA's threads as OS threads (scripts/draw_emu/emu.h: barriers and warp
// shuffles emulated), dynamic shared memory one static array.
// stdin (LE): i32 rows, heads, d, ht, nz, per_item, block_size, pool_slots, meta_len, items_off,
// slots_off, bt_off, num_items, kp; f32 scale; u32 meta[meta_len]; f32 q[rows * heads * d];
// f32 latent[rows * d]; u16 pool[pool_slots * d].
// stdout (LE): f32 out[rows * heads * d], u16 outb[rows * kp], u16 pool[pool_slots * d].
#include "../draw_emu/walk.h"
#include <cstdio>
#undef __shared__
#define __shared__
#define __align__(x)
struct float2 {
    float x, y;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline void __syncwarp() { g_warps[threadIdx.x >> 5].b.arrive_and_wait(); }
inline float bf2f(u16 h) { return __uint_as_float(((u32)h) << 16); }
inline u16 f2bf(float x) {
    u32 u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}
inline u32 pack_bf2(float lo, float hi) { return (u32)f2bf(lo) | ((u32)f2bf(hi) << 16); }
alignas(16) unsigned char ml_smem[256 * 1024];
#include "../../crates/cuda/kernels/attention_mla.cu"

static bool get(void* p, size_t n) { return fread(p, 1, n, stdin) == n; }

int main() {
    int h[14];
    float scale;
    if (!get(h, sizeof h) || !get(&scale, 4)) return 1;
    const int rows = h[0], heads = h[1], d = h[2], ht = h[3], nz = h[4], per_item = h[5], block_size = h[6];
    const int pool_slots = h[7], meta_len = h[8], items_off = h[9], slots_off = h[10], bt_off = h[11];
    const int num_items = h[12], kp = h[13];
    std::vector<u32> meta(meta_len);
    std::vector<float> q((size_t)rows * heads * d), lat((size_t)rows * d);
    std::vector<u16> pool((size_t)pool_slots * d);
    if (!get(meta.data(), meta.size() * 4) || !get(q.data(), q.size() * 4) || !get(lat.data(), lat.size() * 4) ||
        !get(pool.data(), pool.size() * 2))
        return 1;
    std::vector<float> out(q.size(), NAN), ws(nz > 0 ? (size_t)rows * heads * nz * (d + 2) : 1, NAN);
    std::vector<u16> outb((size_t)rows * kp, 0xffff);
    const u32 *m = meta.data(), *items = m + items_off, *slots = m + slots_off, *bts = m + bt_off;
    if (rows > 0)
        walk(dim3{(unsigned)rows, 1, 1}, 128, [&] { kv_write_latent(lat.data(), slots, pool.data(), d); });
    const unsigned ctas = (unsigned)(num_items * per_item), tiles = (unsigned)((heads + ht - 1) / ht);
    walk(dim3{ctas, tiles, (unsigned)(nz > 0 ? nz : 1)}, ML_THREADS, [&] {
        attention_mla(q.data(), pool.data(), m, items, bts, out.data(), outb.data(), ws.data(), nz, per_item, heads, ht, d,
                      block_size, scale, kp);
    });
    if (nz > 0)
        walk(dim3{ctas, (unsigned)heads, 1}, 64, [&] {
            attention_mla_combine(ws.data(), m, items, out.data(), outb.data(), nz, per_item, heads, d, kp);
        });
    fwrite(out.data(), 4, out.size(), stdout);
    fwrite(outb.data(), 2, outb.size(), stdout);
    fwrite(pool.data(), 2, pool.size(), stdout);
    return 0;
}
