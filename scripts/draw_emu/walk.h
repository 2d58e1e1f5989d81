// A grid walked on the host for the emulators (scripts/*_emu) over emu.h: one block after
// another, each by `threads` OS threads that meet at a barrier between blocks (so a block's
// shared memory is not reused while it runs).
#pragma once
#include "emu.h"

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
