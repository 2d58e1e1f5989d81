// Folded norms (matmul.rs `Scale`, fold.rs): an RMSNorm whose scales were folded into the columns
// of the bf16 weights it feeds is applied as one f32 product by the row's inverse root at the
// matmul's store: y = (x @ (W diag s)^T) * inv, with x the residual row rounded to bf16. Every
// kernel that makes `inv` calls rms_part and rms_inv_of below, in the same order, so the scale
// has the same bits wherever it is made (the stats kernel for many rows, the TMA GEMV itself at
// one row); every store multiplies by it once (__fmul_rn), so rows agree across the matmuls.

// A row's inverse root is made by a block of RS_T threads: thread t sums the squares of values
// t, t + RS_T, ... in order (RS_J loaded at once), warp_sum joins a warp's 32 sums, and the
// RS_T / 32 warp sums are added in order.
#define RS_T 256
#define RS_J 16

// This thread's values i0, i0 + RS_T, ... of row x (zeros past `cols`).
__device__ __forceinline__ void rms_load(float (&v)[RS_J], const float* __restrict__ x, int cols, int i0) {
#pragma unroll
    for (int j = 0; j < RS_J; ++j) {
        const int i = i0 + j * RS_T;
        v[j] = i < cols ? x[i] : 0.f;
    }
}

// ss plus the squares of v in order.
__device__ __forceinline__ float rms_squares(const float (&v)[RS_J], float ss) {
#pragma unroll
    for (int j = 0; j < RS_J; ++j) ss = __fmaf_rn(v[j], v[j], ss);
    return ss;
}

// This thread's warp's sum of squares of row x (every lane gets it). Up to RS_T * RS_J values a
// row it is warp_sum(rms_squares(v, 0)) of rms_load(v, x, cols, threadIdx.x).
__device__ __forceinline__ float rms_part(const float* __restrict__ x, int cols) {
    float ss = 0.f;
    for (int i0 = threadIdx.x; i0 < cols; i0 += RS_T * RS_J) {
        float v[RS_J];
        rms_load(v, x, cols, i0);
        ss = rms_squares(v, ss);
    }
    return warp_sum(ss);
}

// The inverse root 1 / sqrt(mean + eps) from the warp sums `red` of a row of `cols` values.
__device__ __forceinline__ float rms_inv_of(const float* red, int cols, float eps) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < RS_T / 32; ++w) t = __fadd_rn(t, red[w]);
    return __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(t, (float)cols), eps)));
}

// One block of RS_T threads a row: rs[row] = the row's inverse root; with yb, also the row
// rounded to bf16 (row stride kp, padding zero), the input the folded matmuls read.
extern "C" __global__ void __launch_bounds__(RS_T) rms_inv_rows(const float* __restrict__ x, float* __restrict__ rs,
                                                                u16* __restrict__ yb, int cols, int kp, float eps) {
    tf_pdl_enter();
    __shared__ float red[RS_T / 32];
    const float* row = x + (size_t)blockIdx.x * cols;
    const float ss = rms_part(row, cols);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    if (yb) {
        for (int i = threadIdx.x; i < kp; i += RS_T) yb[(size_t)blockIdx.x * kp + i] = i < cols ? f2bf(row[i]) : 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) rs[blockIdx.x] = rms_inv_of(red, cols, eps);
}

// Folds norm scales into a padded bf16 weight (row stride kp, `rows` padded rows) in place:
// w[r][k] = bf16(w[r][k] * s_k), s_k = nw[k] (1 + nw[k] with one_plus); padding stays zero.
extern "C" __global__ void fold_norm_bf16(u16* __restrict__ w, const float* __restrict__ nw, int rows, int cols,
                                          int kp, int one_plus) {
    tf_pdl_enter();
    const size_t total = (size_t)rows * kp;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int k = (int)(i % kp);
        if (k < cols) {
            const float s = one_plus ? __fadd_rn(1.0f, nw[k]) : nw[k];
            w[i] = f2bf(__fmul_rn(bf2f(w[i]), s));
        }
    }
}

// y[row][:] *= rs[row] (`cols` values a row): the store's product for matmuls without it.
extern "C" __global__ void scale_rows(float* __restrict__ y, const float* __restrict__ rs, int cols, size_t n) {
    tf_pdl_enter();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fmul_rn(y[i], rs[i / cols]);
}
