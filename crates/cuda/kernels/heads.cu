// Multi-head latent attention's per-head ops (heads.rs): the absorbed W_UK / W_UV products and
// the per-head concatenation.

#define HM_T 64   // outputs and rows a block takes
#define HM_K 16   // input columns staged at a time
#define HM_THREADS 256

// MLA's per-head matmul (tf-backend heads.rs): y[r][h * out + o] = sum_i x[r][h * cols + i] *
// w[h * out + o][i], each sum left to right over i of rounded products with rounded adds: the
// host reference's bits, whatever the round's rows. Block (ot, rt, h) takes outputs ot * 64 ...
// and rows rt * 64 ... of head h, each of its 256 threads 4 rows x 4 outputs; x's and w's
// columns are staged 16 at a time in shared memory, column-major (each thread's 4 + 4 values of
// a column at once), so a weight value is read once for 64 rows.
extern "C" __global__ void __launch_bounds__(HM_THREADS) head_matmul(const float* __restrict__ x,
                                                                     const float* __restrict__ w,
                                                                     float* __restrict__ y, int rows, int heads,
                                                                     int out, int cols) {
    tf_pdl_enter();
    __shared__ float xs[HM_K][HM_T + 1], ws[HM_K][HM_T + 1];
    const int h = blockIdx.z, o0 = blockIdx.x * HM_T, r0 = blockIdx.y * HM_T;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    float acc[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < cols; k0 += HM_K) {
        for (int e = threadIdx.x; e < HM_T * HM_K; e += HM_THREADS) {
            const int t = e / HM_K, k = e % HM_K, kk = k0 + k;
            const int r = r0 + t, o = o0 + t;
            xs[k][t] = r < rows && kk < cols ? x[((long long)r * heads + h) * cols + kk] : 0.0f;
            ws[k][t] = o < out && kk < cols ? w[((long long)h * out + o) * cols + kk] : 0.0f;
        }
        __syncthreads();
        const int kn = min(HM_K, cols - k0);
        for (int k = 0; k < kn; ++k) {
            float a[4], b[4];
            for (int i = 0; i < 4; ++i) a[i] = xs[k][ty * 4 + i], b[i] = ws[k][tx * 4 + i];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(a[i], b[j]));
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            const int r = r0 + ty * 4 + i, o = o0 + tx * 4 + j;
            if (r < rows && o < out) y[(long long)r * heads * out + (long long)h * out + o] = acc[i][j];
        }
}

// Each row's heads of a (`wa` wide) then b (`wb` wide) side by side (tf-backend heads.rs
// concat_heads): `[rows, heads * (wa + wb)]`.
extern "C" __global__ void concat_heads(const float* __restrict__ a, const float* __restrict__ b,
                                        float* __restrict__ y, long long n, int wa, int wb) {
    tf_pdl_enter();
    const int w = wa + wb;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n; t += (long long)gridDim.x * blockDim.x) {
        const long long rh = t / w;
        const int c = (int)(t % w);
        y[t] = c < wa ? a[rh * wa + c] : b[rh * wb + (c - wa)];
    }
}
