// Runs kernels/draw.cu's sample_draw on the host: one block of 1024 emulated threads (emu.h) over
// every row. Usage: emu IN OUT, IN holding n, cols, the packed words' count and the mask region's
// offset (u32 each), the edited rows (f32) and the packed words; OUT gets the n answers.
#include "emu.h"
#include "helpers.h"
#include "../../crates/cuda/kernels/draw.cu"
#include <cstdio>
int main(int argc, char** argv) {
    FILE* f = fopen(argv[1], "rb");
    u32 h[4];
    fread(h, 4, 4, f);  // n, cols, words, mask offset (words)
    u32 n = h[0], cols = h[1], nw = h[2], moff = h[3];
    std::vector<float> x((size_t)n * cols);
    fread(x.data(), 4, x.size(), f);
    std::vector<u32> w(nw + 1);
    fread(w.data(), 4, nw, f);
    fclose(f);
    std::vector<u32> out((size_t)n * SD_OUT, 0xdeadbeefu);
    blockDim.x = SD_THREADS; gridDim.x = 1;
    std::barrier<> bar(SD_THREADS); g_bar = &bar;
    std::vector<WarpX> warps(32); g_warps = warps.data();
    std::vector<std::thread> ts;
    for (u32 t = 0; t < SD_THREADS; ++t)
        ts.emplace_back([&, t] { threadIdx.x = t; blockIdx.x = 0; sample_draw(x.data(), w.data(), w.data() + moff, out.data(), (int)n, (int)cols); });
    for (auto& t : ts) t.join();
    FILE* o = fopen(argv[2], "wb");
    fwrite(out.data(), 4, out.size(), o);
    fclose(o);
}
