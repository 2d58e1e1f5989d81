// GPU-machine lab for the matmul kernels, built there with nvcc (scripts/device/lab.sh):
// checks that gemm_wgmma equals gemm_bf16 (and the GEMV) bit for bit on random data across
// shapes, then times gemm_bf16, gemm_wgmma and cuBLAS for a qwen3-8b prefill's shapes and the
// GEMV for its decode shapes (weights rotated through more than L2 holds), against the measured
// copy bandwidth. Built with -DTF_ONE_CHAIN every kernel uses the one-chain order (one K
// segment). results/NOTES.md has what was tried and found.
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.cuh"
#include "ops.cu"
#include "gemm.cu"
#include "gemm_wgmma.cu"
#include "gemv_tma.cu"

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e = (x);                                                                   \
        if (e != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));  \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static int padded(int k) { return (k + 15) / 16 * 16; }
// Whether gemm_wgmma takes a weight of kt k tiles: whole 64-wide k blocks, K segments ending on them.
static bool wgmma_fits(int kt) {  // ops.rs / tma.rs wgmma_fits
    int nseg = std::min(8, std::max(1, kt / 32)), len = ((kt + nseg - 1) / nseg + 1) & ~1;
    return kt % 4 == 0 && (len % 4 == 0 || len >= kt);
}

struct Weight {
    u16* packed;
    int n, k, ntiles, kt;
};

static Weight make_weight(int n, int k, u32 seed) {
    Weight w{nullptr, n, k, (n + 15) / 16, (k + 15) / 16};
    u16* raw;
    CK(cudaMalloc(&raw, (size_t)n * k * 2));
    fill_random_bf16<<<1024, 256>>>(raw, (size_t)n * k, seed);
    CK(cudaMalloc(&w.packed, (size_t)w.ntiles * w.kt * 512));
    pad_bf16<<<1024, 256>>>(raw, w.packed, n, k, w.ntiles, w.kt);
    CK(cudaDeviceSynchronize());
    CK(cudaFree(raw));
    return w;
}

static u16* make_x(int m, int k, u32 seed) {
    int kp = padded(k);
    u16* x;
    CK(cudaMalloc(&x, (size_t)m * kp * 2));
    CK(cudaMemset(x, 0, (size_t)m * kp * 2));
    std::vector<u16> h((size_t)m * kp, 0);
    u32 s = seed;
    for (int r = 0; r < m; ++r)
        for (int c = 0; c < k; ++c) {
            s = s * 1664525u + 1013904223u;
            float f = ((s >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * ((r % 7) + 1);
            u32 u;
            memcpy(&u, &f, 4);
            h[(size_t)r * kp + c] = (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
    CK(cudaMemcpy(x, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    return x;
}

static void run_gemm_bf16(const Weight& w, const u16* x, float* y, int m) {
    dim3 grid((w.ntiles + 7) / 8, (m + 127) / 128);
    gemm_bf16<<<grid, 256, GM_SMEM>>>(w.packed, x, y, m, w.n, w.ntiles, w.kt, padded(w.k));
}
// The tensor map gemm_wgmma reads x through (ops.rs builds the same): [m, kp] bf16, 64 x 256 boxes,
// 128-byte swizzle, zeros past the ends.
static TmaDesc x_map(const u16* x, int m, int kp, int box_rows = WG_BN) {
    CUtensorMap map;
    cuuint64_t dims[2] = {(cuuint64_t)kp, (cuuint64_t)m};
    cuuint64_t strides[1] = {(cuuint64_t)kp * 2};
    cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
    cuuint32_t es[2] = {1, 1};
    CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void*)x, dims, strides, box, es,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", (int)r);
        exit(1);
    }
    TmaDesc d;
    memcpy(&d, &map, sizeof d);
    return d;
}

static void run_gemm_wgmma(const Weight& w, const TmaDesc& map, float* y, int m) {
    dim3 grid((w.ntiles * 16 + WG_ROWS - 1) / WG_ROWS, (m + WG_BN - 1) / WG_BN);
    TmaDesc wm = x_map(w.packed, w.ntiles * 16, w.kt * 16);
    gemm_wgmma<<<grid, WG_THREADS, WG_SMEM>>>(wm, wm, wm, map, y, y, y, w.n, 0, 0, grid.x, 0, m, w.kt, nullptr, 0);
}
static int gemv_smem_n1() { return GEMV_W * 4 * (16 + 8 * 1) * GEMV_XS(4) + GEMV_W * 1 * 4 * 32 * 4; }
static int gemv_smem_n8() { return GEMV_W * 3 * (16 + 8 * 8) * GEMV_XS(2) + GEMV_W * 8 * 4 * 32 * 4; }
static void run_gemv(const Weight& w, const u16* x, float* y, int m) {
    if (m <= 8)
        gemv_bf16_n1<<<w.ntiles, 32 * GEMV_W, gemv_smem_n1()>>>(w.packed, y, w.n, w.ntiles, nullptr,
                                                                 nullptr, 0, 0, nullptr, nullptr, 0, x, m, w.kt,
                                                                 padded(w.k));
    else
        gemv_bf16_n8<<<w.ntiles, 32 * GEMV_W, gemv_smem_n8()>>>(w.packed, y, w.n, w.ntiles, nullptr,
                                                                 nullptr, 0, 0, nullptr, nullptr, 0, x, m, w.kt,
                                                                 padded(w.k));
}

// The TMA GEMV (ops.rs gemv_tma): one block per SM at most, x map in boxes of 8 NT rows.
static int g_sms = 132;
static void run_gemv_tma(const TmaDesc& wm, const TmaDesc& xm, const Weight& w, float* y, int m) {
    int grid = std::min(w.ntiles, g_sms);
    if (m <= 8)
        gemv_tma_n1<<<grid, 32 * GT_W, GtCfg<1>::SMEM>>>(wm, wm, wm, y, y, y, w.n, 0, 0, w.ntiles, 0, w.ntiles, xm, m, w.kt);
    else if (m <= 16)
        gemv_tma_n2<<<grid, 32 * GT_W, GtCfg<2>::SMEM>>>(wm, wm, wm, y, y, y, w.n, 0, 0, w.ntiles, 0, w.ntiles, xm, m, w.kt);
    else
        gemv_tma_n4<<<grid, 32 * GT_W, GtCfg<4>::SMEM>>>(wm, wm, wm, y, y, y, w.n, 0, 0, w.ntiles, 0, w.ntiles, xm, m, w.kt);
}
static int tma_box(int m) { return m <= 8 ? 8 : m <= 16 ? 16 : 32; }
static size_t compare(const float* a, const float* b, size_t n, double* maxdiff) {
    std::vector<float> ha(n), hb(n);
    CK(cudaMemcpy(ha.data(), a, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), b, n * 4, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    *maxdiff = 0;
    for (size_t i = 0; i < n; ++i) {
        if (memcmp(&ha[i], &hb[i], 4) != 0) ++bad;
        double d = fabs((double)ha[i] - hb[i]);
        if (!(d <= *maxdiff)) *maxdiff = d;
    }
    return bad;
}

template <class F>
static float time_ms(F f, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    f(0);
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int r = 0; r < reps; ++r) {
        CK(cudaEventRecord(a));
        f(r);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main() {
    CK(cudaFuncSetAttribute(gemm_bf16, cudaFuncAttributeMaxDynamicSharedMemorySize, GM_SMEM));
    CK(cudaFuncSetAttribute(gemm_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM));

    CK(cudaFuncSetAttribute(gemv_bf16_n1, cudaFuncAttributeMaxDynamicSharedMemorySize, gemv_smem_n1()));
    CK(cudaFuncSetAttribute(gemv_bf16_n8, cudaFuncAttributeMaxDynamicSharedMemorySize, gemv_smem_n8()));
    CK(cudaFuncSetAttribute(gemv_tma_n1, cudaFuncAttributeMaxDynamicSharedMemorySize, GtCfg<1>::SMEM));
    CK(cudaFuncSetAttribute(gemv_tma_n2, cudaFuncAttributeMaxDynamicSharedMemorySize, GtCfg<2>::SMEM));
    CK(cudaFuncSetAttribute(gemv_tma_n4, cudaFuncAttributeMaxDynamicSharedMemorySize, GtCfg<4>::SMEM));
    CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
    cublasHandle_t h;
    cublasCreate(&h);

    // Copy bandwidth: 4 GiB device to device, bytes read + written.
    size_t cb = (size_t)4 << 30;
    void *ca, *cbuf;
    CK(cudaMalloc(&ca, cb));
    CK(cudaMalloc(&cbuf, cb));
    CK(cudaMemset(ca, 1, cb));
    float copy_ms = time_ms([&](int) { CK(cudaMemcpyAsync(cbuf, ca, cb, cudaMemcpyDeviceToDevice)); }, 10);
    double copy_gbs = 2.0 * cb / (copy_ms * 1e-3) / 1e9;
    printf("copy: %.0f GB/s\n", copy_gbs);
    CK(cudaFree(ca));
    CK(cudaFree(cbuf));

    // Exactness: gemm_wgmma and the GEMV equal gemm_bf16 bit for bit.
    int shapes[][3] = {{1, 256, 4096},   {7, 1000, 1040},   {13, 4096, 4096},  {30, 200, 12288}, {64, 152, 128},
                       {130, 200, 4096}, {300, 4096, 592},  {1000, 1000, 1040}, {513, 1024, 1024},
                       {256, 4096, 12288}, {4096, 4096, 4096}, {129, 48, 80},   {2, 48, 80}};
    int fails = 0;
    for (auto& s : shapes) {
        int m = s[0], n = s[1], k = s[2];
        Weight w = make_weight(n, k, 17 + n + k);
        u16* x = make_x(m, k, 5 + m);
        float *y1, *y2, *y3;
        CK(cudaMalloc(&y1, (size_t)m * n * 4));
        CK(cudaMalloc(&y2, (size_t)m * n * 4));
        CK(cudaMalloc(&y3, (size_t)m * n * 4));
        CK(cudaMemset(y2, 0xff, (size_t)m * n * 4));  // poison: every element must be written
        run_gemm_bf16(w, x, y1, m);
        bool fits = wgmma_fits(w.kt);
        if (fits) run_gemm_wgmma(w, x_map(x, m, padded(k)), y2, m);
        else run_gemm_bf16(w, x, y2, m);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        double md;
        size_t bad = compare(y1, y2, (size_t)m * n, &md);
        size_t bad3 = 0;
        double md3 = 0;
        if (m <= 64) {
            run_gemv(w, x, y3, m);
            CK(cudaDeviceSynchronize());
            bad3 = compare(y1, y3, (size_t)m * n, &md3);
        }
        if (m <= 32) {
            CK(cudaMemset(y3, 0xff, (size_t)m * n * 4));
            run_gemv_tma(x_map(w.packed, w.ntiles * 16, w.kt * 16, 16), x_map(x, m, padded(k), tma_box(m)), w, y3, m);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            size_t b4 = compare(y1, y3, (size_t)m * n, &md3);
            printf("exact m=%d n=%d k=%d: gemv_tma vs gemm_bf16 %zu differ%s\n", m, n, k, b4, b4 ? " FAIL" : "");
            fails += b4 != 0;
        }
        printf("exact m=%d n=%d k=%d: wgmma%s vs gemm_bf16 %zu differ (max %.3g)%s gemv %zu differ\n", m, n, k,
               fits ? "" : " (n/a)", bad, md, bad || bad3 ? " FAIL" : "", bad3);
        fails += bad != 0 || bad3 != 0;
        CK(cudaFree(y1));
        CK(cudaFree(y2));
        CK(cudaFree(y3));
        CK(cudaFree(x));
        CK(cudaFree(w.packed));
    }

    // Prefill speed: qwen3-8b shapes at 4096 tokens.
    int pm = 4096;
    int pshapes[][2] = {{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}};
    printf("%-14s %10s %10s %10s\n", "prefill NxK", "gemm_bf16", "wgmma", "cublas");
    for (auto& s : pshapes) {
        int n = s[0], k = s[1];
        Weight w = make_weight(n, k, 3);
        u16* x = make_x(pm, k, 9);
        float* y;
        CK(cudaMalloc(&y, (size_t)pm * n * 4));
        u16 *wr;
        CK(cudaMalloc(&wr, (size_t)n * k * 2));
        fill_random_bf16<<<1024, 256>>>(wr, (size_t)n * k, 4);
        double flop = 2.0 * pm * n * k;
        float t1 = time_ms([&](int) { run_gemm_bf16(w, x, y, pm); }, 10);
        TmaDesc xm = x_map(x, pm, padded(k));
        float t2 = time_ms([&](int) { run_gemm_wgmma(w, xm, y, pm); }, 10);

        float one = 1.f, zero = 0.f;
        float t3 = time_ms(
            [&](int) {
                cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, pm, k, &one, wr, CUDA_R_16BF, k, x, CUDA_R_16BF, k, &zero,
                             y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            },
            10);
        printf("%6dx%-7d %7.0f TF %7.0f TF %7.0f TF\n", n, k, flop / t1 / 1e9, flop / t2 / 1e9, flop / t3 / 1e9);
        CK(cudaFree(y));
        CK(cudaFree(x));
        CK(cudaFree(wr));
        CK(cudaFree(w.packed));
    }
    float one = 1.f, zero = 0.f;
    {
        int n = 8192;
        u16 *a, *b;
        float* c;
        CK(cudaMalloc(&a, (size_t)n * n * 2));
        CK(cudaMalloc(&b, (size_t)n * n * 2));
        CK(cudaMalloc(&c, (size_t)n * n * 2));
        fill_random_bf16<<<1024, 256>>>(a, (size_t)n * n, 1);
        fill_random_bf16<<<1024, 256>>>(b, (size_t)n * n, 2);
        float t = time_ms(
            [&](int) {
                cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &zero,
                             c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            },
            10);
        printf("cublas 8192^3 bf16: %.0f TFLOP/s\n", 2.0 * n * n * n / t / 1e9);
    }

    // Decode speed on qwen3-8b shapes, weights rotated over copies (more than L2 holds). Each
    // figure is the median over 15 runs of 8 back-to-back launches (a decode round's steady state).
    int dshapes[][2] = {{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}, {151936, 4096}};
    printf("%-14s %4s %9s %8s %9s %8s %9s\n", "decode NxK", "m", "gemv us", "of copy", "tma us", "of copy", "wgmma us");
    for (auto& s : dshapes) {
        int n = s[0], k = s[1];
        int copies = std::max(2, (int)(1024.0 * (1 << 20) / ((double)n * k * 2)));
        copies = std::min(copies, 16);
        std::vector<Weight> ws;
        std::vector<TmaDesc> wms;
        for (int c = 0; c < copies; ++c) {
            ws.push_back(make_weight(n, k, 100 + c));
            wms.push_back(x_map(ws.back().packed, ws.back().ntiles * 16, ws.back().kt * 16, 16));
        }
        for (int m : {1, 8, 16, 32, 64}) {
            u16* x = make_x(m, k, 1);
            float* y;
            CK(cudaMalloc(&y, (size_t)m * n * 4));
            const int B = 8;
            float t = time_ms([&](int r) { for (int i = 0; i < B; ++i) run_gemv(ws[(r * B + i) % copies], x, y, m); }, 15) / B;
            TmaDesc xm = x_map(x, m, padded(k));
            float tw = time_ms([&](int r) { for (int i = 0; i < B; ++i) run_gemm_wgmma(ws[(r * B + i) % copies], xm, y, m); }, 15) / B;
            float tt = 0;
            if (m <= 32) {
                TmaDesc xt = x_map(x, m, padded(k), tma_box(m));
                tt = time_ms([&](int r) { for (int i = 0; i < B; ++i) { int c = (r * B + i) % copies; run_gemv_tma(wms[c], xt, ws[c], y, m); } }, 15) / B;
            }
            double b = (double)n * k * 2 / 1e6 / copy_gbs;  // ms at copy bandwidth
            printf("%6dx%-7d %4d %9.1f %8.3f %9.1f %8.3f %9.1f\n", n, k, m, t * 1e3, b / t, tt * 1e3, tt > 0 ? b / tt : 0.0, tw * 1e3);
            CK(cudaFree(y));
            CK(cudaFree(x));
        }
        for (auto& w : ws) CK(cudaFree(w.packed));
    }
    printf("exactness: %s\n", fails ? "FAILED" : "all equal");
    return fails ? 1 : 0;
}

