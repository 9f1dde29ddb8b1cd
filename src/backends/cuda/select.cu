/* src/backends/cuda/select.cu — CUDA kernels of the shape family's
 * selection, zeroing and converting copy (cpu: src/backends/cpu/select.c,
 * copy.c and rm_copy_into in src/core/tensor.c):
 *   y = cond != 0 ? A : B   (masked_fill, where, their backward; a NaN cond is true)
 *   y := 0                  (through y's strides, bit pattern 0)
 *   y := convert(x)         (broadcast, both any strides, any pair of dtypes)
 * Conversions are the cpu's: plain casts between f32, f64 and i64 except
 * float -> i64, which truncates toward zero with NaN -> 0 and saturation;
 * the storage-only dtypes go through double (u8 clamps to [0, 255], NaN ->
 * 0; bf16 rounds to nearest even from f32, NaN stays a quiet NaN). */
#include "select.h"

#include "kcommon.cuh"

#define RMK_THREADS 256

/* remat dtype codes (remat/tensor.h) */
enum { DT_F32 = 0, DT_F64 = 1, DT_I64 = 2, DT_U8 = 3, DT_BF16 = 4 };

/* ---- select -------------------------------------------------------------------------------- */
/* plan operands: 0 y, 1 cond, 2 A, 3 B; a missing A / B is the scalar va / vb */
template <typename T, typename CT>
__global__ void select_kernel(const __grid_constant__ rmk_plan pl, T *y, const CT *cond, const T *a,
                              T va, const T *b, T vb, int64_t n) {
    RMK_GRID_LOOP(i, n) {
        int64_t off[RMK_MAX_OPS];
        rmk_plan_offsets(&pl, i, off);
        const bool c = cond[off[1]] != 0;
        y[off[0]] = c ? (a ? a[off[2]] : va) : (b ? b[off[3]] : vb);
    }
}

template <typename T, typename CT>
static cudaError_t select_t(const rmk_plan *pl, void *y, const void *cond, const void *a, double va,
                            const void *b, double vb, int64_t n, cudaStream_t s) {
    select_kernel<T, CT><<<rmk_blocks(n, RMK_THREADS), RMK_THREADS, 0, s>>>(
        *pl, (T *)y, (const CT *)cond, (const T *)a, (T)va, (const T *)b, (T)vb, n);
    return cudaGetLastError();
}

extern "C" cudaError_t rmk_select(int ydt, int cdt, const rmk_plan *plan, void *y, const void *cond,
                                  const void *a, double va, const void *b, double vb,
                                  cudaStream_t s) {
    int64_t n = 1;
    for (int d = 0; d < plan->nd; d++) n *= plan->shape[d];
    if (n == 0) return cudaSuccess;
#define SEL_CT(T)                                                                                  \
    switch (cdt) {                                                                                 \
    case DT_F32: return select_t<T, float>(plan, y, cond, a, va, b, vb, n, s);                     \
    case DT_F64: return select_t<T, double>(plan, y, cond, a, va, b, vb, n, s);                    \
    case DT_I64: return select_t<T, long long>(plan, y, cond, a, va, b, vb, n, s);                 \
    case DT_U8: return select_t<T, unsigned char>(plan, y, cond, a, va, b, vb, n, s);              \
    default: return cudaErrorInvalidValue;                                                         \
    }
    if (ydt == DT_F32) SEL_CT(float)
    if (ydt == DT_F64) SEL_CT(double)
#undef SEL_CT
    return cudaErrorInvalidValue;
}

/* ---- zero ---------------------------------------------------------------------------------- */
template <typename U>
__global__ void zero_kernel(const __grid_constant__ rmk_plan pl, U *y, int64_t n) {
    RMK_GRID_LOOP(i, n) {
        int64_t off[RMK_MAX_OPS];
        rmk_plan_offsets(&pl, i, off);
        y[off[0]] = 0;
    }
}

extern "C" cudaError_t rmk_zero(size_t es, const rmk_plan *plan, void *y, cudaStream_t s) {
    int64_t n = 1;
    for (int d = 0; d < plan->nd; d++) n *= plan->shape[d];
    if (n == 0) return cudaSuccess;
    if (plan->nd == 1 && plan->st[0][0] == 1) return cudaMemsetAsync(y, 0, (size_t)n * es, s);
    unsigned nb = rmk_blocks(n, RMK_THREADS);
    switch (es) {
    case 1:
        zero_kernel<unsigned char><<<nb, RMK_THREADS, 0, s>>>(*plan, (unsigned char *)y, n);
        break;
    case 2:
        zero_kernel<unsigned short><<<nb, RMK_THREADS, 0, s>>>(*plan, (unsigned short *)y, n);
        break;
    case 4:
        zero_kernel<unsigned int><<<nb, RMK_THREADS, 0, s>>>(*plan, (unsigned int *)y, n);
        break;
    case 8:
        zero_kernel<unsigned long long>
            <<<nb, RMK_THREADS, 0, s>>>(*plan, (unsigned long long *)y, n);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- converting copy ----------------------------------------------------------------------- */
__device__ __forceinline__ long long f64_to_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    if (v < -9223372036854775808.0) return INT64_MIN;
    return (long long)v;
}
/* kcommon.cuh's conversions (the bf16 kernels' rmk_ld / rmk_put use the same) */
__device__ __forceinline__ unsigned short f32_to_bf16(float f) { return rmk_f32_to_bf16(f); }
__device__ __forceinline__ float bf16_to_f32(unsigned short h) { return rmk_bf16_to_f32(h); }

/* The storage types of the dtype codes. */
template <int DT> struct st_of;
template <> struct st_of<DT_F32> { typedef float type; };
template <> struct st_of<DT_F64> { typedef double type; };
template <> struct st_of<DT_I64> { typedef long long type; };
template <> struct st_of<DT_U8> { typedef unsigned char type; };
template <> struct st_of<DT_BF16> { typedef unsigned short type; };

/* x of dtype XD as the value the cpu converts from: a direct cast between
 * f32, f64, i64 (float -> i64 saturating), else through double. */
template <int YD, int XD>
__device__ __forceinline__ typename st_of<YD>::type convert(typename st_of<XD>::type x) {
    typedef typename st_of<YD>::type Y;
    const bool direct = YD <= DT_I64 && XD <= DT_I64;
    if (direct) {
        if (YD == DT_I64 && XD != DT_I64) return (Y)f64_to_i64((double)x);
        return (Y)x;
    }
    double v;
    if (XD == DT_BF16) v = (double)bf16_to_f32((unsigned short)x);
    else v = (double)x;
    switch (YD) {
    case DT_F32: return (Y)(float)v;
    case DT_F64: return (Y)v;
    case DT_I64: return (Y)f64_to_i64(v);
    case DT_U8: return (Y)(unsigned char)(v > 0 ? (v < 255 ? v : 255) : 0);
    default: return (Y)f32_to_bf16((float)v);
    }
}

template <int YD, int XD>
__global__ void convert_kernel(const __grid_constant__ rmk_plan pl, typename st_of<YD>::type *y,
                               const typename st_of<XD>::type *x, int64_t n) {
    RMK_GRID_LOOP(i, n) {
        int64_t off[RMK_MAX_OPS];
        rmk_plan_offsets(&pl, i, off);
        y[off[0]] = convert<YD, XD>(x[off[1]]);
    }
}

/* Contiguous y and x, over packs (kcommon.cuh): the casts autocast inserts. */
template <int YD, int XD>
__global__ void convert_pack_kernel(typename st_of<YD>::type *__restrict__ y,
                                    const typename st_of<XD>::type *__restrict__ x, int64_t n) {
    typedef typename st_of<YD>::type Y;
    typedef typename st_of<XD>::type X;
    RMK_PACK_LOOP(v, n) {
        rmk_pack<X> a;
        rmk_pack<Y> b;
        a.load(x, v);
#pragma unroll
        for (int e = 0; e < RMK_PACK; e++) b.e[e] = convert<YD, XD>(a.e[e]);
        b.store(y, v);
    }
    RMK_PACK_TAIL(i, n) y[i] = convert<YD, XD>(x[i]);
}

template <int YD, int XD>
static cudaError_t convert_t(const rmk_plan *pl, void *y, const void *x, int64_t n,
                             cudaStream_t s) {
    typedef typename st_of<YD>::type Y;
    typedef typename st_of<XD>::type X;
    if constexpr (YD != DT_U8 && XD != DT_U8) { /* packs of 2-, 4-, 8-byte elements */
        if (pl->nd == 1 && pl->st[0][0] == 1 && pl->st[1][0] == 1 && rmk_aligned16(y) &&
            rmk_aligned16(x)) {
            convert_pack_kernel<YD, XD>
                <<<rmk_pack_blocks(n, RMK_THREADS), RMK_THREADS, 0, s>>>((Y *)y, (const X *)x, n);
            return cudaGetLastError();
        }
    }
    convert_kernel<YD, XD>
        <<<rmk_blocks(n, RMK_THREADS), RMK_THREADS, 0, s>>>(*pl, (Y *)y, (const X *)x, n);
    return cudaGetLastError();
}

template <int YD>
static cudaError_t convert_from(int xdt, const rmk_plan *pl, void *y, const void *x, int64_t n,
                                cudaStream_t s) {
    switch (xdt) {
    case DT_F32: return convert_t<YD, DT_F32>(pl, y, x, n, s);
    case DT_F64: return convert_t<YD, DT_F64>(pl, y, x, n, s);
    case DT_I64: return convert_t<YD, DT_I64>(pl, y, x, n, s);
    case DT_U8: return convert_t<YD, DT_U8>(pl, y, x, n, s);
    case DT_BF16: return convert_t<YD, DT_BF16>(pl, y, x, n, s);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t rmk_convert(int ydt, int xdt, const rmk_plan *plan, void *y, const void *x,
                                   cudaStream_t s) {
    int64_t n = 1;
    for (int d = 0; d < plan->nd; d++) n *= plan->shape[d];
    if (n == 0) return cudaSuccess;
    switch (ydt) {
    case DT_F32: return convert_from<DT_F32>(xdt, plan, y, x, n, s);
    case DT_F64: return convert_from<DT_F64>(xdt, plan, y, x, n, s);
    case DT_I64: return convert_from<DT_I64>(xdt, plan, y, x, n, s);
    case DT_U8: return convert_from<DT_U8>(xdt, plan, y, x, n, s);
    case DT_BF16: return convert_from<DT_BF16>(xdt, plan, y, x, n, s);
    default: return cudaErrorInvalidValue;
    }
}
