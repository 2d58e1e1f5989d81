// Lab: the read-only bandwidth ceiling of the card, against the copy bandwidth the bench's
// roofline uses (bytes read + written). Built there by nvcc:
//   nvcc -O3 -arch=sm_90a read_lab.cu -o read_lab
// Streams a 2 GB buffer with 16-byte loads, UNROLL loads in flight a thread, blocks of 256
// threads at BLOCKS an SM, and prints GB/s read (median of 9) for each setting, then a copy.
// Then the TMA GEMV's address pattern with plain loads (box_kernel): a block an SM takes a
// static run of 16-row tiles, warp w walks K segment w of each tile in boxes of 16 rows x 128
// bytes, U boxes in flight a warp; strided = rows of a [N, K] weight (the layout today),
// contiguous = each box 2 KB of consecutive bytes (a tile-major layout).
#include <cstdio>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>

template <int UNROLL>
__global__ void read_kernel(const uint4* __restrict__ p, size_t n, unsigned* out) {
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) *out = acc;
}

__global__ void copy_kernel(const uint4* __restrict__ p, uint4* __restrict__ q, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        q[i] = __ldcs(p + i);
}

template <bool CONTIG, int U>
__global__ void __launch_bounds__(256, 1) box_kernel(const char* __restrict__ w, int tiles, int nb, unsigned* out) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int G = gridDim.x, b = blockIdx.x;
    const int tq = tiles / G, tr = tiles - tq * G;
    const int t0 = b * tq + min(b, tr), t1 = t0 + tq + (b < tr ? 1 : 0);
    const size_t pitch = (size_t)8 * nb * 128;  // bytes of one W row
    unsigned acc = 0;
    const int total = (t1 - t0) * nb;
    for (int q = 0; q < total; q += U) {
        uint4 v[U][4];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int qq = min(q + u, total - 1);
            const int t = t0 + qq / nb, i = qq % nb;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int idx = j * 32 + lane, r = idx >> 3, c = idx & 7;
                const size_t off = CONTIG ? (((size_t)t * 8 + warp) * nb + i) * 2048 + r * 128 + c * 16
                                          : ((size_t)t * 16 + r) * pitch + ((size_t)warp * nb + i) * 128 + c * 16;
                v[u][j] = __ldcs((const uint4*)(w + off));
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc ^= v[u][j].x ^ v[u][j].y ^ v[u][j].z ^ v[u][j].w;
    }
    if (acc == 0x12345678u) *out = acc;
}

template <typename F>
static float median_ms(F launch) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    launch();
    std::vector<float> t;
    for (int r = 0; r < 9; ++r) {
        cudaEventRecord(a);
        launch();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[4];
}

int main() {
    const size_t bytes = 2ull << 30, n = bytes / 16;
    uint4 *p, *q;
    unsigned* out;
    cudaMalloc(&p, bytes);
    cudaMalloc(&q, bytes);
    cudaMalloc(&out, 4);
    cudaMemset(p, 1, bytes);
    int sms;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    for (int blocks : {1, 2, 4, 8}) {
        const int grid = blocks * sms;
        float m1 = median_ms([&] { read_kernel<1><<<grid, 256>>>(p, n, out); });
        float m4 = median_ms([&] { read_kernel<4><<<grid, 256>>>(p, n, out); });
        float m8 = median_ms([&] { read_kernel<8><<<grid, 256>>>(p, n, out); });
        printf("read  %d blocks/SM: unroll 1 %.0f GB/s, 4 %.0f, 8 %.0f\n", blocks, bytes / m1 / 1e6, bytes / m4 / 1e6,
               bytes / m8 / 1e6);
    }
    float mc = median_ms([&] { copy_kernel<<<4 * sms, 256>>>(p, q, n / 2); });
    float md = median_ms([&] { cudaMemcpyAsync(q, p, bytes / 2, cudaMemcpyDeviceToDevice); });
    printf("copy kernel %.0f GB/s (read + written), cudaMemcpy %.0f GB/s (read + written)\n", bytes / mc / 1e6,
           bytes / md / 1e6);
    for (int nb : {8, 24}) {  // K = 4096 and 12288
        const int tiles = (int)(bytes / ((size_t)16 * 8 * nb * 128));
        for (int grid : {sms, 2 * sms}) {
            float s4 = median_ms([&] { box_kernel<false, 4><<<grid, 256>>>((const char*)p, tiles, nb, out); });
            float c4 = median_ms([&] { box_kernel<true, 4><<<grid, 256>>>((const char*)p, tiles, nb, out); });
            float s8 = median_ms([&] { box_kernel<false, 8><<<grid, 256>>>((const char*)p, tiles, nb, out); });
            float c8 = median_ms([&] { box_kernel<true, 8><<<grid, 256>>>((const char*)p, tiles, nb, out); });
            printf("boxes K=%d, %d blocks: U4 strided %.0f GB/s, contiguous %.0f; U8 strided %.0f, contiguous %.0f\n",
                   nb * 512, grid, bytes / s4 / 1e6, bytes / c4 / 1e6, bytes / s8 / 1e6, bytes / c8 / 1e6);
        }
    }
    printf("%s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
