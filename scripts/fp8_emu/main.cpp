// kernels/fp8.cu on the host (crates/cuda/tests/fp8_emu.rs builds and feeds it): the FP8 upload's
// padding, the bf16 weight of the dequantizing path and the embedding rows, each kernel's grid
// walked one thread after another (they have no barriers). The E4M3 decode is fp8.cu's portable
// one (`fp8_f32`, what cards before sm_89 run); the rounding is f2bf's.
// stdin: n k bh bw (i32 LE), the n * k codes, the scales (f32 LE); stdout: the padded bf16
// weight (u16 LE, [16 nt, 16 kt]), then the embedding of every row (f32 LE, scale 0.5).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__
#define tf_pdl_enter()
struct Dim3 {
    unsigned x, y, z;
};
static Dim3 blockIdx, threadIdx, blockDim, gridDim;
struct uint2 {
    u32 x, y;
};
struct uint4 {
    u32 x, y, z, w;
};
static uint4 make_uint4(u32 a, u32 b, u32 c, u32 d) { return uint4{a, b, c, d}; }
static float __uint_as_float(u32 u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float __int_as_float(int i) { return __uint_as_float((u32)i); }
static u32 __float_as_uint(float f) {
    u32 u;
    memcpy(&u, &f, 4);
    return u;
}
static float __fmul_rn(float a, float b) { return a * b; }
static float h2f(u16) { return 0.f; }  // only the sm_89 path uses it
using std::min;
// common.cuh's f32 -> bf16, nearest even.
static u16 f2bf(float x) {
    u32 u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}
#include "../../crates/cuda/kernels/fp8.cu"

// Runs `body` for every thread of a grid, one after another.
template <class F>
static void walk(Dim3 grid, unsigned block, F body) {
    gridDim = grid;
    blockDim = Dim3{block, 1, 1};
    for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x)
            for (unsigned t = 0; t < block; ++t) {
                blockIdx = Dim3{x, y, 0};
                threadIdx = Dim3{t, 0, 0};
                body();
            }
}

static bool get(void* p, size_t n) { return fread(p, 1, n, stdin) == n; }

int main() {
    int hdr[4];
    if (!get(hdr, sizeof hdr)) return 1;
    const int n = hdr[0], k = hdr[1], bh = hdr[2], bw = hdr[3];
    const int nt = (n + 15) / 16, kt = (k + 15) / 16, gr = (n + bh - 1) / bh, gc = (k + bw - 1) / bw;
    std::vector<unsigned char> codes((size_t)n * k), padded((size_t)nt * 16 * kt * 16);
    std::vector<float> scales((size_t)gr * gc);
    if (!get(codes.data(), codes.size()) || !get(scales.data(), scales.size() * 4)) return 1;
    const unsigned B = 256;
    walk(Dim3{(unsigned)((padded.size() + B - 1) / B), 1, 1}, B,
         [&] { pad_fp8(codes.data(), padded.data(), n, k, nt, kt); });
    std::vector<u16> w(padded.size());
    walk(Dim3{(unsigned)((kt * 16 / 8 + B - 1) / B), (unsigned)min(nt * 16, 65535), 1}, B,
         [&] { fp8_to_bf16(padded.data(), scales.data(), w.data(), nt, kt, bh, bw, gr, gc); });
    std::vector<u32> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = (u32)i;
    std::vector<float> emb((size_t)n * k);
    walk(Dim3{(unsigned)n, 1, 1}, B,
         [&] { embed_fp8(padded.data(), scales.data(), kt, bh, bw, gr, gc, ids.data(), k, 0.5f, emb.data()); });
    fwrite(w.data(), 2, w.size(), stdout);
    fwrite(emb.data(), 4, emb.size(), stdout);
    return 0;
}
