/* src/backends/cuda/kcommon.cuh — device helpers the kernel families share
 * (w17k's .cu files): grid-stride loops, warp and block reductions, the
 * NaN-propagating max, and per-type math (f32 / f64 overloads).
 *
 * Reductions combine partial results in a fixed tree (shuffle xor, then one
 * warp over the warps' results): for a given launch shape the order of the
 * additions is fixed, so results are bitwise reproducible run to run (no
 * atomics on floating-point values anywhere in these kernels). */
#ifndef REMAT_CUDA_KCOMMON_CUH
#define REMAT_CUDA_KCOMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kplan.h"

/* for (i = global thread; i < n; i += grid stride), 64-bit indices */
#define RMK_GRID_LOOP(i, n)                                                                        \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- per-type math -------------------------------------------------------------------- */
__device__ __forceinline__ float rmk_exp(float x) { return expf(x); }
__device__ __forceinline__ double rmk_exp(double x) { return exp(x); }
__device__ __forceinline__ float rmk_log(float x) { return logf(x); }
__device__ __forceinline__ double rmk_log(double x) { return log(x); }
__device__ __forceinline__ float rmk_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double rmk_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float rmk_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double rmk_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float rmk_erfc(float x) { return erfcf(x); }
__device__ __forceinline__ double rmk_erfc(double x) { return erfc(x); }
__device__ __forceinline__ float rmk_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double rmk_pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float rmk_fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double rmk_fma(double a, double b, double c) { return fma(a, b, c); }

/* ---- storage types ---------------------------------------------------------------------- */
/* A bf16 element as stored (remat's REMAT_BF16: the upper half of an f32). Kernels that
 * take bf16 storage compute in f32: rmk_ld widens an element, rmk_put rounds a result
 * to nearest, ties to even, a NaN staying a quiet NaN — the cpu's rm_f32_to_bf16 and
 * select.cu's converting copy, bit for bit. For f32 and f64 both are plain accesses. */
struct rmk_bf16 {
    unsigned short bits;
};
__device__ __forceinline__ float rmk_bf16_to_f32(unsigned short h) {
    return __uint_as_float((unsigned int)h << 16);
}
__device__ __forceinline__ unsigned short rmk_f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu))
        return (unsigned short)((u >> 16) | 0x0040u); /* NaN: keep it a (quiet) NaN */
    unsigned int lsb = (u >> 16) & 1u;
    return (unsigned short)((u + 0x7FFFu + lsb) >> 16);
}
__device__ __forceinline__ float rmk_ld(float x) { return x; }
__device__ __forceinline__ double rmk_ld(double x) { return x; }
__device__ __forceinline__ float rmk_ld(rmk_bf16 x) { return rmk_bf16_to_f32(x.bits); }
__device__ __forceinline__ void rmk_put(float *p, float v) { *p = v; }
__device__ __forceinline__ void rmk_put(double *p, double v) { *p = v; }
__device__ __forceinline__ void rmk_put(rmk_bf16 *p, float v) { p->bits = rmk_f32_to_bf16(v); }
/* The type a storage type computes in (f32 for bf16). */
template <typename S> struct rmk_compute { typedef S type; };
template <> struct rmk_compute<rmk_bf16> { typedef float type; };

/* ---- packs: 8 contiguous elements moved as 16-byte loads and stores ------------------------
 * A memory-bound kernel that moves 2 or 4 bytes per thread keeps too few bytes in flight to
 * reach the GPU's bandwidth (window 4 measured ~1 TB/s of 4.8); a thread that moves a pack
 * keeps 16-64 bytes in flight. Elements are computed one by one as before, so a packed
 * kernel's results are bitwise those of the one-element kernel. Packs need their pointers
 * 16-byte aligned (rmk_aligned16; the caching allocator's blocks are) and element index a
 * multiple of RMK_PACK. */
#define RMK_PACK 8
template <typename S> struct rmk_pack {
    static_assert(sizeof(S) % 2 == 0, "packs of 2-, 4- and 8-byte elements");
    union {
        uint4 u[sizeof(S) / 2];
        S e[RMK_PACK];
    };
    __device__ __forceinline__ void load(const S *p, int64_t pack) {
        const uint4 *q = (const uint4 *)p + pack * (int64_t)(sizeof(S) / 2);
#pragma unroll
        for (int k = 0; k < (int)(sizeof(S) / 2); k++) u[k] = q[k];
    }
    __device__ __forceinline__ void store(S *p, int64_t pack) const {
        uint4 *q = (uint4 *)p + pack * (int64_t)(sizeof(S) / 2);
#pragma unroll
        for (int k = 0; k < (int)(sizeof(S) / 2); k++) q[k] = u[k];
    }
};
static inline bool rmk_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The packed kernels' grid: blocks for n / RMK_PACK packs, at least one for the tail. */
static inline unsigned rmk_pack_blocks(int64_t n, int threads) {
    int64_t np = n / RMK_PACK, tail = n - np * RMK_PACK;
    return rmk_blocks(np > tail ? np : tail, threads);
}
/* for (pack = global thread; pack < n / RMK_PACK; pack += grid stride) */
#define RMK_PACK_LOOP(v, n) RMK_GRID_LOOP(v, (n) / RMK_PACK)
/* the tail's element of this thread (n % RMK_PACK elements, the first threads): i < n */
#define RMK_PACK_TAIL(i, n)                                                                        \
    for (int64_t i = (n) / RMK_PACK * RMK_PACK + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;   \
         i < (n); i = (n))

/* max where a NaN wins (the row max of softmax / cross_entropy: a NaN
 * anywhere makes the row NaN, as on cpu and in PyTorch) */
template <typename T> __device__ __forceinline__ T rmk_nanmax(T a, T b) {
    return (a != a || a > b) ? a : b;
}

/* ---- reductions ------------------------------------------------------------------------ */
/* Sum / max within aligned groups of `width` lanes (a power of two <= 32). */
template <typename T> __device__ __forceinline__ T rmk_group_sum(T v, int width) {
    for (int o = width / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, width);
    return v;
}
template <typename T> __device__ __forceinline__ T rmk_group_max(T v, int width) {
    for (int o = width / 2; o > 0; o >>= 1)
        v = rmk_nanmax(v, __shfl_xor_sync(0xffffffffu, v, o, width));
    return v;
}
/* ... over the whole warp (width 32: the shuffles' default) */
template <typename T> __device__ __forceinline__ T rmk_warp_sum(T v) {
    return rmk_group_sum(v, 32);
}
template <typename T> __device__ __forceinline__ T rmk_warp_max(T v) {
    return rmk_group_max(v, 32);
}

/* Block-wide sum (MAX false) / max: every thread gets the result. blockDim.x is a
 * multiple of 32 (<= 1024); `sh` is 32 elements of shared scratch, reusable
 * after the call returns (it ends with a barrier). */
template <typename T, bool MAX> __device__ __forceinline__ T rmk_warp_reduce(T v) {
    if constexpr (MAX) return rmk_warp_max(v);
    else return rmk_warp_sum(v);
}
template <typename T, bool MAX> __device__ T rmk_block_reduce(T v, T *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = rmk_warp_reduce<T, MAX>(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    T none;
    if constexpr (MAX) none = (T)-INFINITY;
    else none = (T)0;
    T r = lane < nw ? sh[lane] : none;
    r = rmk_warp_reduce<T, MAX>(r);
    __syncthreads();
    return r;
}
template <typename T> __device__ T rmk_block_sum(T v, T *sh) {
    return rmk_block_reduce<T, false>(v, sh);
}
template <typename T> __device__ T rmk_block_max(T v, T *sh) {
    return rmk_block_reduce<T, true>(v, sh);
}

/* The accumulator type of long sums: f32 data sums in double (no long f32
 * running sums; H100's f64 rate makes this nearly free for memory-bound
 * reductions), f64 in double. */
template <typename T> struct rmk_acc { typedef double type; };

#endif /* REMAT_CUDA_KCOMMON_CUH */
