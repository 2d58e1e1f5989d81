// kernels/heads.cu's head_matmul on the host (crates/cuda/src/heads/emulated.rs builds and feeds
// it): the grid walked one block after another, a block's threads as OS threads
// (scripts/draw_emu/emu.h: barriers emulated), shared memory static storage.
// stdin (LE): i32 rows, heads, out, cols; f32 x[rows * heads * cols]; f32 w[heads * out * cols].
// stdout (LE): f32 y[rows * heads * out].
#include "../draw_emu/emu.h"
#include <cstdio>
#include "../../crates/cuda/kernels/heads.cu"

// Runs `body` for every block of `grid`, one block after another, each by `threads` OS threads
// that meet at a barrier between blocks (so a block's shared memory is not reused while it runs).
template <class F>
static void walk(dim3 grid, unsigned threads, F body) {
    gridDim = grid;
    blockDim = dim3{threads, 1, 1};
    std::barrier<> bar(threads);
    g_bar = &bar;
    std::vector<WarpX> warps((threads + 31) / 32);
    g_warps = warps.data();
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            threadIdx = dim3{t, 0, 0};
            for (unsigned z = 0; z < grid.z; ++z)
                for (unsigned y = 0; y < grid.y; ++y)
                    for (unsigned x = 0; x < grid.x; ++x) {
                        blockIdx = dim3{x, y, z};
                        body();
                        bar.arrive_and_wait();
                    }
        });
    for (auto& t : ts) t.join();
}

static bool get(void* p, size_t n) { return fread(p, 1, n, stdin) == n; }

int main() {
    int h[4];
    if (!get(h, sizeof h)) return 1;
    const int rows = h[0], heads = h[1], out = h[2], cols = h[3];
    std::vector<float> x((size_t)rows * heads * cols), w((size_t)heads * out * cols);
    if (!get(x.data(), x.size() * 4) || !get(w.data(), w.size() * 4)) return 1;
    std::vector<float> y((size_t)rows * heads * out, NAN);
    const dim3 grid{(unsigned)((out + HM_T - 1) / HM_T), (unsigned)((rows + HM_T - 1) / HM_T), (unsigned)heads};
    if (rows > 0 && out > 0)
        walk(grid, HM_THREADS, [&] { head_matmul(x.data(), w.data(), y.data(), rows, heads, out, cols); });
    fwrite(y.data(), 4, y.size(), stdout);
    return 0;
}
