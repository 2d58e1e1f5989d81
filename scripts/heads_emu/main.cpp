// kernels/heads.cu's head_matmul on the host (crates/cuda/src/heads/emulated.rs builds and feeds
// it): the grid walked one block after another, a block's threads as OS threads
// (scripts/draw_emu/emu.h: barriers emulated), shared memory static storage.
// stdin (LE): i32 rows, heads, out, cols; f32 x[rows * heads * cols]; f32 w[heads * out * cols].
// stdout (LE): f32 y[rows * heads * out].
#include "../draw_emu/walk.h"
#include <cstdio>
#include "../../crates/cuda/kernels/heads.cu"

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
