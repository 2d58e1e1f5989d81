// FP8 (E4M3, block-scaled) weights: codes one byte a weight, row-major and zero-padded to
// [16 ntiles, 16 kt] like the bf16 weights, and one f32 scale per bh x bw block ([gr, gc],
// row-major; edge blocks may be partial). A weight multiplies as the bf16 weight
// bf16_rn(e4m3(code) * scale): the f32 product, rounded once to nearest even (fp8_host.rs, the
// host's definition; NaN codes give the canonical NaN 0x7fff). Every kernel that reads codes
// converts them here, so the matmuls see the bits the bf16 path sees over that weight.

// The exact f32 value of an E4M3 code: 4 exponent bits (bias 7), 3 mantissa bits, subnormals;
// 0x7f / 0xff are NaN. The code's bits moved into an f32's places make value * 2^-120 (a
// subnormal code a subnormal f32); the product by 2^120 is exact.
__device__ __forceinline__ float fp8_f32(u32 code) {
    if ((code & 0x7fu) == 0x7fu) return __int_as_float(0x7fffffff);
    const float v = __uint_as_float(((code & 0x80u) << 24) | ((code & 0x7fu) << 20));
    return __fmul_rn(v, __int_as_float(0x7b800000));  // 2^120
}

// Two codes (k in the low byte, k + 1 in the high byte) of one block, as the packed bf16 pair an
// MMA fragment register holds (k in the low half).
__device__ __forceinline__ u32 fp8x2_bf16x2(u32 codes, float s) {
    float lo, hi;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    u32 h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((u16)codes));
    lo = h2f((u16)(h2 & 0xffffu));
    hi = h2f((u16)(h2 >> 16));
#else
    lo = fp8_f32(codes & 0xffu);
    hi = fp8_f32((codes >> 8) & 0xffu);
#endif
#ifdef __CUDA_ARCH__
    u32 d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(__fmul_rn(hi, s)), "f"(__fmul_rn(lo, s)));
    return d;
#else  // the host emulation (tests/fp8_emu.rs): the same rounding, in software
    return (u32)f2bf(__fmul_rn(lo, s)) | ((u32)f2bf(__fmul_rn(hi, s)) << 16);
#endif
}

// One code of a block of scale s as bf16 bits (fp8x2_bf16x2's low half for a pair of it).
__device__ __forceinline__ u16 fp8_bf16(u32 code, float s) { return (u16)(fp8x2_bf16x2(code & 0xffu, s) & 0xffffu); }

// The codes [n, k] into the zero-padded [16 nt, 16 kt] layout (rows and columns past them 0).
extern "C" __global__ void pad_fp8(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst, int n, int k,
                                   int nt, int kt) {
    tf_pdl_enter();
    size_t kp = (size_t)kt * 16, total = (size_t)nt * 16 * kp;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < total; p += (size_t)gridDim.x * blockDim.x) {
        size_t row = p / kp, col = p % kp;
        dst[p] = (row < (size_t)n && col < (size_t)k) ? src[row * k + col] : (unsigned char)0;
    }
}

// The bf16 weight of padded codes w ([16 nt, 16 kt], zero codes in the padding give zeros) with
// scales s ([gr, gc] of bh x bw blocks), in the padded bf16 layout the bf16 matmuls read. A
// thread makes 8 consecutive weights of a row (one 8-byte load, one 16-byte store); blockIdx.y
// strides over the rows (fp8.rs launches min(rows, 65535) of them).
extern "C" __global__ void fp8_to_bf16(const unsigned char* __restrict__ w, const float* __restrict__ s,
                                       u16* __restrict__ dst, int nt, int kt, int bh, int bw, int gr, int gc) {
    tf_pdl_enter();
    const int kp = kt * 16, nrows = nt * 16;
    const int col = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (col >= kp) return;
    for (int row = blockIdx.y; row < nrows; row += gridDim.y) {
        const float* srow = s + (size_t)min(row / bh, gr - 1) * gc;
        const uint2 c = *(const uint2*)(w + (size_t)row * kp + col);
        int cb = col / bw, next = (cb + 1) * bw;
        u32 out[4];
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
            u32 h[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                if (col + e + i >= next) {  // a block column starts here
                    ++cb;
                    next += bw;
                }
                const u32 code = ((e + i < 4 ? c.x : c.y) >> (8 * ((e + i) & 3))) & 0xffu;
                h[i] = fp8_bf16(code, srow[min(cb, gc - 1)]);
            }
            out[e / 2] = h[0] | (h[1] << 16);
        }
        *(uint4*)(dst + (size_t)row * kp + col) = make_uint4(out[0], out[1], out[2], out[3]);
    }
}

// out[r, :] = (e4m3(code) * its block's scale) * scale for row ids[r] of an FP8 table (the f32
// values the host backends embed; ops.cu `embed` for the other types).
extern "C" __global__ void embed_fp8(const unsigned char* __restrict__ w, const float* __restrict__ s, int kt, int bh,
                                     int bw, int gr, int gc, const u32* __restrict__ ids, int k, float scale,
                                     float* __restrict__ out) {
    tf_pdl_enter();
    const int r = blockIdx.x;
    const u32 id = ids[r];
    const float* srow = s + (size_t)min((int)(id / (u32)bh), gr - 1) * gc;
    for (int c = threadIdx.x; c < k; c += blockDim.x) {
        const float v = __fmul_rn(fp8_f32(w[(size_t)id * kt * 16 + c]), srow[min(c / bw, gc - 1)]);
        out[(size_t)r * k + c] = __fmul_rn(v, scale);
    }
}
