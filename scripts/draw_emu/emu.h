// The CUDA features kernels/draw.cu uses, on the host: a block's threads are OS threads,
// __syncthreads a barrier over them, warp shuffles and reductions an exchange through a
// per-warp slot array between two barriers, shared memory static storage (one block at a time).
// Float operations are single roundings (volatile, -ffp-contract=off), as the _rn intrinsics.
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <thread>
#include <vector>
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(x)
#define __restrict__
#define __shared__ static
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct uint4 { u32 x, y, z, w; };
inline uint4 make_uint4(u32 a, u32 b, u32 c, u32 d) { return uint4{a, b, c, d}; }
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(u32 i) { float f; memcpy(&f, &i, 4); return f; }
inline u32 __float_as_uint(float f) { u32 i; memcpy(&i, &f, 4); return i; }
#define NEG_INF __int_as_float(0xff800000)
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline float __uint2float_rn(u32 u) { return (float)u; }
inline u32 __umulhi(u32 a, u32 b) { return (u32)(((u64)a * b) >> 32); }
using std::min;
inline void tf_pdl_enter() {}
std::barrier<> *g_bar;
inline void __syncthreads() { g_bar->arrive_and_wait(); }
struct WarpX { std::barrier<> b{32}; u64 slot[32]; };
WarpX *g_warps;
template <class T> inline T xch(T v, int src, bool take) {
    WarpX& w = g_warps[threadIdx.x >> 5];
    int lane = threadIdx.x & 31;
    u64 bits = 0; memcpy(&bits, &v, sizeof(T));
    w.slot[lane] = bits;
    w.b.arrive_and_wait();
    u64 got = w.slot[src & 31];
    w.b.arrive_and_wait();
    T r = v;
    if (take) memcpy(&r, &got, sizeof(T));
    return r;
}
template <class T> inline T __shfl_xor_sync(u32, T v, int o) { return xch(v, (int)(threadIdx.x & 31) ^ o, true); }
template <class T> inline T __shfl_up_sync(u32, T v, int o) { int l = threadIdx.x & 31; return xch(v, l >= o ? l - o : l, l >= o); }
inline u32 reduce_generic(u32 v, bool is_min) {
    WarpX& w = g_warps[threadIdx.x >> 5];
    int lane = threadIdx.x & 31;
    w.slot[lane] = v;
    w.b.arrive_and_wait();
    u32 r = is_min ? 0xffffffffu : 0u;
    for (int i = 0; i < 32; ++i) r = is_min ? std::min(r, (u32)w.slot[i]) : r + (u32)w.slot[i];
    w.b.arrive_and_wait();
    return r;
}
inline u32 __reduce_min_sync(u32, u32 v) { return reduce_generic(v, true); }
inline u32 __reduce_add_sync(u32, u32 v) { return reduce_generic(v, false); }
inline u32 atomicAdd(u32* p, u32 v) { return std::atomic_ref<u32>(*p).fetch_add(v); }
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline u32 atomicMin(u32* p, u32 v) { std::atomic_ref<u32> a(*p); u32 o = a.load(); while (v < o && !a.compare_exchange_weak(o, v)) {} return o; }
