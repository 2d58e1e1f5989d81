// Lab: the read-only bandwidth ceiling of the card, against the copy bandwidth the bench's
// roofline uses (bytes read + written). Built there by nvcc:
//   nvcc -O3 -arch=sm_90a read_lab.cu -o read_lab
// Streams a 2 GB buffer with 16-byte loads, UNROLL loads in flight a thread, blocks of 256
// threads at BLOCKS an SM, and prints GB/s read (median of 9) for each setting, then a copy.
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
    printf("%s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
