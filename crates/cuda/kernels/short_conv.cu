// LFM2's double-gated short convolution (tf-backend short_conv.rs): in-projection rows
// [B, C, x] (each ch wide) to y = C * conv(B * x), the conv continued from each sequence's
// window of its last K - 1 values of B * x (a slot's first (K - 1) * ch floats, oldest row first;
// read only for a sequence past position 0). A round's sequences come as int4 {q_start, q_len,
// start_pos, slot}. Every product and sum is rounded on its own (__fmul_rn / __fadd_rn), taps in
// rising order from 0 and the bias after them: the reference's arithmetic, so its bits, whatever
// the round's batching or chunking.

// The conv's input at index i of the sequence's inputs (the window's K - 1 rows, then B * x of
// the round's rows), channel c.
__device__ __forceinline__ float short_conv_input(const float* __restrict__ bcx, const float* __restrict__ win,
                                                  int4 s, int i, int width, int ch, int c) {
    if (i >= width) {
        const float* row = bcx + (size_t)(s.x + i - width) * 3 * ch;
        return __fmul_rn(row[c], row[2 * ch + c]);
    }
    return s.z > 0 ? win[(size_t)i * ch + c] : 0.f;
}

// One thread an output (channel, row) (grid (ceil(ch / blockDim), rows up to 65535, striding);
// row_seq[r] is row r's index into seqs, -1 for a row of no sequence (output 0).
extern "C" __global__ void short_conv_out(const float* __restrict__ bcx, const float* __restrict__ w,
                                          const float* __restrict__ bias, float* __restrict__ y,
                                          const float* __restrict__ state, const int4* __restrict__ seqs,
                                          const int* __restrict__ row_seq, int rows, int ch, int k,
                                          long long slot_len) {
    tf_pdl_enter();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ch) return;
    int width = k - 1;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        int si = row_seq[r];
        if (si < 0 || seqs[si].w < 0) {  // no sequence, or a recorded round's pad row
            y[(size_t)r * ch + c] = 0.f;
            continue;
        }
        int4 s = seqs[si];
        const float* win = state + (size_t)s.w * slot_len;
        int t = r - s.x;
        float acc = 0.f;
        for (int j = 0; j < k; ++j)
            acc = __fadd_rn(acc, __fmul_rn(w[(size_t)c * k + j], short_conv_input(bcx, win, s, t + j, width, ch, c)));
        if (bias) acc = __fadd_rn(acc, bias[c]);
        y[(size_t)r * ch + c] = __fmul_rn(bcx[(size_t)r * 3 * ch + ch + c], acc);
    }
}

// One thread a channel of one sequence (grid (ceil(ch / blockDim), sequences)), after
// short_conv_out: the window becomes the last K - 1 inputs. Row j takes input q_len + j, which is
// never a window row already overwritten (q_len + j >= j, rows written in rising order).
extern "C" __global__ void short_conv_window(const float* __restrict__ bcx, float* __restrict__ state,
                                             const int4* __restrict__ seqs, int ch, int k, long long slot_len) {
    tf_pdl_enter();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ch) return;
    int4 s = seqs[blockIdx.y];
    if (s.w < 0) return;
    float* win = state + (size_t)s.w * slot_len;
    int width = k - 1;
    for (int j = 0; j < width; ++j) win[(size_t)j * ch + c] = short_conv_input(bcx, win, s, s.y + j, width, ch, c);
}
