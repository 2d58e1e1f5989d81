// kernels/ops.cu's gated activations (`glu`, `glu_packed`, the clamped `glu_clamped`) and
// `scale_inplace` on the host (crates/cuda/tests/ops_emu.rs writes their source, cut out of
// ops.cu and common.cuh, to ops_emu.h and builds this with g++): each grid walked one thread
// after another (no barriers). The CUDA intrinsics are their exact host operations:
// `__fdividef` and `__frcp_rn` correctly rounded divisions, `__fmul_rn` / `__fadd_rn` a product
// and a sum; expf, tanhf, fminf and fmaxf are the C library's.
// stdin: rows cols kp act (i32 LE), limit c (f32 LE), the gate then the up values (f32 LE,
// rows * cols each); stdout: glu_clamped's y (f32 LE, rows * cols) and its bf16 copy (u16 LE,
// rows * kp, columns past cols left at 0xffff), the gate values times c (f32 LE), glu's y and
// bf16 copy, glu's y without an up operand (act alone), then, where cols is a multiple of 8,
// glu_packed's bf16 output over the gate and up values packed as a gate/up matmul writes them.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

typedef unsigned short u16;
typedef unsigned int u32;
#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__
#define tf_pdl_enter()
struct Dim3 {
    unsigned x, y, z;
};
static Dim3 blockIdx, threadIdx, blockDim, gridDim;
static inline u32 __float_as_uint(float x) {
    u32 u;
    std::memcpy(&u, &x, 4);
    return u;
}
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
struct float4 {
    float x, y, z, w;
};
struct uint2 {
    u32 x, y;
};
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline uint2 make_uint2(u32 x, u32 y) { return {x, y}; }

#include "ops_emu.h"

template <class F>
static void walk(unsigned grid, unsigned block, F f) {
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < grid; ++b)
        for (unsigned t = 0; t < block; ++t) {
            blockIdx = {b, 0, 0};
            threadIdx = {t, 0, 0};
            f();
        }
}

template <class T>
static bool read(std::vector<T>& v) {
    return std::fread(v.data(), sizeof(T), v.size(), stdin) == v.size();
}

int main() {
    std::vector<int> dims(4);
    std::vector<float> lc(2);
    if (!read(dims) || !read(lc)) return 2;
    const int rows = dims[0], cols = dims[1], kp = dims[2], act = dims[3];
    const size_t n = (size_t)rows * cols;
    std::vector<float> g(n), u(n), y(n);
    if (!read(g) || !read(u)) return 2;
    std::vector<u16> yb((size_t)rows * kp, 0xffff);
    // A grid smaller than the values, so every thread takes several (the grid-stride loop).
    walk(3, 64, [&] { glu_clamped(g.data(), u.data(), y.data(), yb.data(), rows, cols, kp, act, lc[0]); });
    std::vector<float> s = g;
    walk(2, 32, [&] { scale_inplace(s.data(), n, lc[1]); });
    std::fwrite(y.data(), 4, n, stdout);
    std::fwrite(yb.data(), 2, yb.size(), stdout);
    std::fwrite(s.data(), 4, n, stdout);
    std::vector<float> y2(n), y3(n);
    std::vector<u16> yb2((size_t)rows * kp, 0xffff), yb3((size_t)rows * kp, 0xffff);
    walk(3, 64, [&] { glu(g.data(), u.data(), y2.data(), yb2.data(), rows, cols, kp, act); });
    walk(2, 64, [&] { glu(g.data(), nullptr, y3.data(), yb3.data(), rows, cols, kp, act); });
    std::fwrite(y2.data(), 4, n, stdout);
    std::fwrite(yb2.data(), 2, yb2.size(), stdout);
    std::fwrite(y3.data(), 4, n, stdout);
    if (cols % 8 == 0) {
        // Row r of the packed product: gate of column j at gate_up_col(j), its up 8 further.
        std::vector<float> p(2 * n);
        for (size_t i = 0; i < n; ++i) {
            const size_t r = i / cols;
            const int j = (int)(i % cols);
            p[r * 2 * cols + gate_up_col(j)] = g[i];
            p[r * 2 * cols + gate_up_col(j) + 8] = u[i];
        }
        std::vector<u16> yb4((size_t)rows * kp, 0xffff);
        walk(2, 32, [&] { glu_packed(p.data(), yb4.data(), rows, cols, kp, act); });
        std::fwrite(yb4.data(), 2, yb4.size(), stdout);
    }
    return 0;
}
