// Lab: the cost of one kernel-to-kernel dependency on the device, three ways (built there by
// nvcc: `nvcc -O3 -arch=sm_90a sync_lab.cu -o sync_lab -lcuda`). A chain alternates a wide
// kernel (132 blocks streaming a few MB, like a GEMV) and a narrow one (1 block, like a norm):
//   plain: ordinary launches (the stream orders them);
//   pdl:   programmatic dependent launch, griddepcontrol.launch_dependents then .wait;
//   flag:  launched as pdl, but each block signals a counter when done (bar.sync, then one
//          red.release.gpu) and the next kernel's thread 0 spins on ld.acquire.gpu until the
//          counter reaches the blocks of every kernel before it (a launch argument);
//   gplain, gpdl: the plain and pdl chains captured once into a CUDA graph and replayed (no host
//          launch cost inside the timed region).
// Prints microseconds a kernel for each mode and work size.
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>

typedef unsigned int u32;

__device__ __forceinline__ void sig(u32* ctr) {
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(ctr) : "memory");
}

__device__ __forceinline__ void wait(const u32* ctr, u32 target, int mode) {
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    if (mode == 1 || target == 0) {
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
        return;
    }
    if (mode == 2) {
        if (threadIdx.x == 0) {
            u32 v;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(ctr) : "memory");
            } while ((int)(v - target) < 0);
        }
        __syncthreads();
    }
}

// 132 blocks: each reads `words` float4 of W and x, writes one float a thread.
__global__ void wide(const float4* __restrict__ w, const float* x, float* y, int words, u32* ctr, u32 target, int mode) {
    wait(ctr, target, mode);
    float s = 0.f;
    const float4* p = w + (size_t)blockIdx.x * words;
    for (int i = threadIdx.x; i < words; i += blockDim.x) {
        float4 v = p[i];
        s += v.x + v.y + v.z + v.w;
    }
    s *= x[threadIdx.x];
    y[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (mode == 2) sig(ctr);
}

// 1 block of 1024: sums y (132 x 256) into x (256).
__global__ void narrow(const float* y, float* x, int n, u32* ctr, u32 target, int mode) {
    wait(ctr, target, mode);
    __shared__ float red[1024];
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += y[i];
    red[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x < 256) x[threadIdx.x] = 1e-3f * (red[threadIdx.x] + red[threadIdx.x + 256] + red[threadIdx.x + 512] + red[threadIdx.x + 768]) + 1.f;
    if (mode == 2) sig(ctr);
}

static void launch(void* f, int grid, int block, void** args, int pdl, cudaStream_t st) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    cfg.stream = st;
    cudaError_t e = cudaLaunchKernelExC(&cfg, f, args);
    if (e != cudaSuccess) {
        printf("launch: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}

int main() {
    const int G = 132, NK = 400;
    float4* w;
    float *x, *y;
    u32* ctr;
    cudaMalloc(&w, (size_t)G * 65536 * 16);
    cudaMalloc(&x, 1024 * 4);
    cudaMalloc(&y, G * 256 * 4);
    cudaMalloc(&ctr, 4);
    cudaMemset(w, 0, (size_t)G * 65536 * 16);
    cudaMemset(x, 0, 4096);
    cudaMemset(ctr, 0, 4);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    const char* names[5] = {"plain", "pdl", "flag", "gplain", "gpdl"};
    printf("%-6s %8s %10s %10s\n", "mode", "KB/blk", "us/pair", "us/kernel");
    for (int words : {0, 256, 4096, 16384}) {
        for (int rep = 0; rep < 2; ++rep) {
            for (int m5 = 0; m5 < 5; ++m5) {
                int mode = m5 < 3 ? m5 : m5 - 3;
                bool graph = m5 >= 3;
                u32 done = 0;
                cudaMemset(ctr, 0, 4);
                cudaDeviceSynchronize();
                cudaGraphExec_t ge = nullptr;
                if (graph) cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
                else cudaEventRecord(a, st);
                for (int k = 0; k < NK; ++k) {
                    u32 t0 = k == 0 ? 0u : done;
                    int n = G * 256;
                    void* a1[] = {&w, &x, &y, &words, &ctr, &t0, &mode};
                    launch((void*)wide, G, 256, a1, mode > 0, st);
                    done += G;
                    u32 t1 = done;
                    void* a2[] = {&y, &x, &n, &ctr, &t1, &mode};
                    launch((void*)narrow, 1, 1024, a2, mode > 0, st);
                    done += 1;
                }
                if (graph) {
                    cudaGraph_t g;
                    cudaError_t ce = cudaStreamEndCapture(st, &g);
                    if (ce == cudaSuccess) ce = cudaGraphInstantiate(&ge, g, 0);
                    if (ce != cudaSuccess) {
                        printf("graph: %s\n", cudaGetErrorString(ce));
                        exit(1);
                    }
                    cudaGraphUpload(ge, st);
                    cudaGraphLaunch(ge, st);
                    cudaStreamSynchronize(st);
                    cudaEventRecord(a, st);
                    cudaGraphLaunch(ge, st);
                    cudaGraphDestroy(g);
                }
                cudaEventRecord(b, st);
                cudaEventSynchronize(b);
                if (ge) cudaGraphExecDestroy(ge);
                float ms;
                cudaEventElapsedTime(&ms, a, b);
                if (rep == 1)
                    printf("%-6s %8d %10.3f %10.3f\n", names[m5], words * 16 / 1024, 1e3f * ms / NK,
                           1e3f * ms / NK / 2);
            }
        }
    }
    cudaError_t e = cudaDeviceSynchronize();
    printf("status: %s\n", cudaGetErrorString(e));
    return 0;
}
