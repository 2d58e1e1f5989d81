// Lab: what cold instruction fetch costs a small kernel on the device (built there by nvcc:
// `nvcc -O3 -arch=sm_90a icache_lab.cu -o icache_lab`; run `./icache_lab`). Session 12's
// question: the decode round's small kernels are large (attention_split_d128 4629 SASS lines,
// rms_norm 2117, qk_norm_rope 1693) and between their launches the GEMVs stream gigabytes through
// L2, so their code may come from DRAM each layer.
//
// A "code" kernel runs U straight-line units of 8 independent FMAs (8 instructions, 128 bytes:
// one instruction-cache line a unit) on 8 blocks of 128 threads (decode attention's CTAs at batch
// 1), timed inside by %globaltimer from the first unit to the last. Each size has three
// instances (SALT) with different constants, so different code. States:
//   first: an instance's first launch (its code never fetched);
//   warm:  the same instance again, right after;
//   l2:    the same instance after a kernel that streams 512 MB on every SM (the GEMVs' effect
//          on L2: its code is evicted from L2, perhaps still in the SMs' instruction caches);
//   other: a second instance's first launch after the stream (code in neither).
// Prints microseconds (median over the blocks) and nanoseconds per KB of code, a row per size.
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

typedef unsigned long long u64;

__device__ __forceinline__ u64 now() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// U units of 8 independent FMA chains; SALT changes the constants (so the code) per instance.
template <int U, int SALT>
__global__ void __launch_bounds__(128) code(const float* __restrict__ in, float* __restrict__ out, u64* __restrict__ t) {
    float a = in[0] + SALT, b = in[1] - SALT;
    float x0 = in[2 + (threadIdx.x & 7)], x1 = x0 + 1.f, x2 = x0 + 2.f, x3 = x0 + 3.f;
    float x4 = x0 + 4.f, x5 = x0 + 5.f, x6 = x0 + 6.f, x7 = x0 + 7.f;
    __syncthreads();
    const u64 t0 = now();
#pragma unroll
    for (int u = 0; u < U; ++u) {
        x0 = fmaf(x0, a, b);
        x1 = fmaf(x1, a, b + 1.f * SALT);
        x2 = fmaf(x2, a, b);
        x3 = fmaf(x3, a, b);
        x4 = fmaf(x4, a, b);
        x5 = fmaf(x5, a, b);
        x6 = fmaf(x6, a, b);
        x7 = fmaf(x7, a, b);
    }
    __syncthreads();
    const u64 t1 = now();
    out[blockIdx.x * blockDim.x + threadIdx.x] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
    if (threadIdx.x == 0) t[blockIdx.x] = t1 - t0;
}

// Every SM reads `n` float4 (L2 turned over many times), one sum a thread written.
__global__ void stream(const float4* __restrict__ w, size_t n, float* __restrict__ y) {
    float s = 0.f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = __ldcs(w + i);
        s += v.x + v.y + v.z + v.w;
    }
    y[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = s;
}

#define CK(x)                                                                  \
    do {                                                                       \
        cudaError_t e = (x);                                                   \
        if (e != cudaSuccess) {                                                \
            fprintf(stderr, "%s: %s (line %d)\n", #x, cudaGetErrorString(e), __LINE__); \
            return 1;                                                          \
        }                                                                      \
    } while (0)

struct Bufs {
    float *in, *out, *sy;
    float4* sw;
    size_t sn;
    u64* t;
    int sms;
};

typedef void (*CodeFn)(const float*, float*, u64*);

// Median over the 8 blocks of one launch of f, in microseconds (-1 on error).
static double run(CodeFn f, const Bufs& b) {
    f<<<8, 128>>>(b.in, b.out, b.t);
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
    u64 h[8];
    if (cudaMemcpy(h, b.t, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
    std::vector<u64> v(h, h + 8);
    std::sort(v.begin(), v.end());
    return (v[3] + v[4]) / 2.0 / 1000.0;
}

static int flush(const Bufs& b) {
    stream<<<b.sms, 1024>>>(b.sw, b.sn, b.sy);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}

template <int U>
static int size_row(const Bufs& b) {
    const double first = run(code<U, 0>, b);
    const double warm = run(code<U, 0>, b);
    if (flush(b)) return 1;
    const double l2 = run(code<U, 0>, b);
    if (flush(b)) return 1;
    const double other = run(code<U, 1>, b);
    if (flush(b)) return 1;
    const double other2 = run(code<U, 2>, b);
    const double kb = U * 128 / 1024.0;
    printf("%6d %8.0f | %8.2f %8.2f %8.2f %8.2f %8.2f | %8.0f %8.0f\n", U, kb, first, warm, l2, other, other2,
           (l2 - warm) * 1000 / kb, (other - warm) * 1000 / kb);
    return 0;
}

int main() {
    Bufs b;
    CK(cudaDeviceGetAttribute(&b.sms, cudaDevAttrMultiProcessorCount, 0));
    b.sn = (512ull << 20) / sizeof(float4);
    CK(cudaMalloc(&b.sw, b.sn * sizeof(float4)));
    CK(cudaMemset(b.sw, 0, b.sn * sizeof(float4)));
    CK(cudaMalloc(&b.sy, (size_t)b.sms * 1024 * sizeof(float)));
    CK(cudaMalloc(&b.in, 16 * sizeof(float)));
    CK(cudaMemset(b.in, 0, 16 * sizeof(float)));
    CK(cudaMalloc(&b.out, 8 * 128 * sizeof(float)));
    CK(cudaMalloc(&b.t, 8 * sizeof(u64)));
    if (flush(b)) return 1;  // the first launch's own start-up out of the way
    printf("units   KB code |    first     warm       l2    other   other2 |  l2 ns/KB other ns/KB  (us, median of 8 blocks)\n");
    if (size_row<16>(b) || size_row<64>(b) || size_row<256>(b) || size_row<1024>(b) || size_row<2048>(b)) {
        fprintf(stderr, "a launch failed: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    return 0;
}
