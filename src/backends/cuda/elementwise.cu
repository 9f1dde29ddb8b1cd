/* src/backends/cuda/elementwise.cu — CUDA kernels of the elementwise family
 * (src/core/kernels/elementwise.h): the unary ops and their fused
 * backward, relu's bit mask, the broadcasting elementwise engine, and the
 * shape family's strided copy.
 *
 * The formulas are the cpu kernels' (src/backends/cpu/unary.c,
 * elementwise.c), case for case, including their conventions at the edges:
 * pow's derivative is 0 where the exponent is 0, d(x^e)/de is 0 at x = 0
 * with e >= 0, GELU's Phi is 0.5 * erfc(-x / sqrt 2) (accurate in the left
 * tail). Every kernel is a grid-stride loop over 64-bit flat indices; the
 * engine and the copy decompose the index over the host's coalesced plan
 * (kplan.h), with a flat fast path when the plan is one dim. */
#include "elementwise.h"

#include "core/kernels/elementwise.h"
#include "kcommon.cuh"

#define RMK_THREADS 256

/* ---- unary ------------------------------------------------------------------------------ */
#define K_SQRT_2_OVER_PI 0.7978845608028654
#define K_INV_SQRT_2 0.7071067811865476
#define K_INV_SQRT_2PI 0.3989422804014327

template <typename T> __device__ __forceinline__ T phi(T x) {
    return (T)0.5 * rmk_erfc(-x * (T)K_INV_SQRT_2);
}
template <typename T> __device__ __forceinline__ T gelu_tanh_u(T v) {
    return (T)K_SQRT_2_OVER_PI * (v + (T)0.044715 * v * v * v);
}

/* y = f(x; p) */
template <typename T, int OP> __device__ __forceinline__ T unary_f(T x, T p) {
    switch (OP) {
    case RM_U_NEG: return -x;
    case RM_U_EXP: return rmk_exp(x);
    case RM_U_LOG: return rmk_log(x);
    case RM_U_SQRT: return rmk_sqrt(x);
    case RM_U_TANH: return rmk_tanh(x);
    case RM_U_SIGMOID: return (T)1 / ((T)1 + rmk_exp(-x));
    case RM_U_RELU: return !(x <= 0) ? x : (T)0; /* NaN stays NaN, as in PyTorch */
    case RM_U_GELU_ERF: return x * phi(x);
    case RM_U_GELU_TANH: return (T)0.5 * x * ((T)1 + rmk_tanh(gelu_tanh_u(x)));
    case RM_U_SILU: return x / ((T)1 + rmk_exp(-x));
    case RM_U_POW: return rmk_pow(x, p);
    case RM_U_ADD: return x + p;
    case RM_U_MUL: return x * p;
    default: return p - x; /* RM_U_RSUB */
    }
}

/* dx = g * f'(s), s the saved x or y as the op saves it (cpu unary.c) */
template <typename T, int OP> __device__ __forceinline__ T unary_df(T g, T s, T p) {
    switch (OP) {
    case RM_U_NEG: return -g;
    case RM_U_EXP: return g * s;                  /* s = y */
    case RM_U_LOG: return g / s;                  /* s = x */
    case RM_U_SQRT: return g / ((T)2 * s);        /* s = y */
    case RM_U_TANH: return g * ((T)1 - s * s);    /* s = y */
    case RM_U_SIGMOID: return g * s * ((T)1 - s); /* s = y */
    case RM_U_RELU: return s > 0 ? g : (T)0;      /* s = y */
    case RM_U_GELU_ERF:                           /* s = x */
        return g * (phi(s) + s * ((T)K_INV_SQRT_2PI * rmk_exp((T)-0.5 * s * s)));
    case RM_U_GELU_TANH: { /* s = x */
        T th = rmk_tanh(gelu_tanh_u(s));
        T din = (T)K_SQRT_2_OVER_PI * ((T)1 + (T)3 * (T)0.044715 * s * s);
        return g * ((T)0.5 * ((T)1 + th) + (T)0.5 * s * ((T)1 - th * th) * din);
    }
    case RM_U_SILU: { /* s = x */
        T sg = (T)1 / ((T)1 + rmk_exp(-s));
        return g * (sg * ((T)1 + s * ((T)1 - sg)));
    }
    case RM_U_POW: return p == (T)0 ? (T)0 : g * p * rmk_pow(s, p - (T)1); /* s = x */
    case RM_U_ADD: return g;
    case RM_U_MUL: return g * p;
    default: return -g; /* RM_U_RSUB */
    }
}

/* S: the storage type (float, double, rmk_bf16); T: what it computes in (bf16: f32, each
 * result rounded once, as the cpu's bf16 unary kernels) */
template <typename S, int OP, typename T = typename rmk_compute<S>::type>
__global__ void unary_kernel(const S *__restrict__ x, S *__restrict__ y, int64_t n, T p) {
    RMK_GRID_LOOP(i, n) rmk_put(y + i, unary_f<T, OP>(rmk_ld(x[i]), p));
}
template <typename S, int OP, typename T = typename rmk_compute<S>::type>
__global__ void unary_bwd_kernel(const S *__restrict__ g, const S *__restrict__ s,
                                 S *__restrict__ dx, int64_t n, T p) {
    RMK_GRID_LOOP(i, n) rmk_put(dx + i, unary_df<T, OP>(rmk_ld(g[i]), s ? rmk_ld(s[i]) : (T)0, p));
}

/* The same over packs (kcommon.cuh): x, y, g, s 16-byte aligned (s may be NULL). */
template <typename S, int OP, typename T = typename rmk_compute<S>::type>
__global__ void unary_pack_kernel(const S *__restrict__ x, S *__restrict__ y, int64_t n, T p) {
    RMK_PACK_LOOP(v, n) {
        rmk_pack<S> a, b;
        a.load(x, v);
#pragma unroll
        for (int e = 0; e < RMK_PACK; e++) rmk_put(&b.e[e], unary_f<T, OP>(rmk_ld(a.e[e]), p));
        b.store(y, v);
    }
    RMK_PACK_TAIL(i, n) rmk_put(y + i, unary_f<T, OP>(rmk_ld(x[i]), p));
}
template <typename S, int OP, typename T = typename rmk_compute<S>::type>
__global__ void unary_bwd_pack_kernel(const S *__restrict__ g, const S *__restrict__ s,
                                      S *__restrict__ dx, int64_t n, T p) {
    RMK_PACK_LOOP(v, n) {
        rmk_pack<S> a, b, d;
        a.load(g, v);
        if (s) b.load(s, v);
#pragma unroll
        for (int e = 0; e < RMK_PACK; e++)
            rmk_put(&d.e[e], unary_df<T, OP>(rmk_ld(a.e[e]), s ? rmk_ld(b.e[e]) : (T)0, p));
        d.store(dx, v);
    }
    RMK_PACK_TAIL(i, n) rmk_put(dx + i, unary_df<T, OP>(rmk_ld(g[i]), s ? rmk_ld(s[i]) : (T)0, p));
}

/* clang-format cannot settle on one layout for an X-macro list: */
/* clang-format off */
/* Calls X(op) for every rm_unary_op (inside a switch). */
#define RMK_UNARY_CASES(X)                                                                         \
    X(RM_U_NEG)                                                                                    \
    X(RM_U_EXP) X(RM_U_LOG) X(RM_U_SQRT) X(RM_U_TANH) X(RM_U_SIGMOID) X(RM_U_RELU)                 \
        X(RM_U_GELU_ERF) X(RM_U_GELU_TANH) X(RM_U_SILU) X(RM_U_POW) X(RM_U_ADD) X(RM_U_MUL) X(RM_U_RSUB)
/* clang-format on */

template <typename S>
static cudaError_t unary_t(int op, double p, const void *x, void *y, int64_t n, cudaStream_t s) {
    typedef typename rmk_compute<S>::type T;
    if (n <= 0) return cudaSuccess;
    const bool pack = rmk_aligned16(x) && rmk_aligned16(y);
    const unsigned nb = pack ? rmk_pack_blocks(n, RMK_THREADS) : rmk_blocks(n, RMK_THREADS);
    switch (op) {
#define X(OP)                                                                                      \
    case OP:                                                                                       \
        if (pack)                                                                                  \
            unary_pack_kernel<S, OP><<<nb, RMK_THREADS, 0, s>>>((const S *)x, (S *)y, n, (T)p);    \
        else unary_kernel<S, OP><<<nb, RMK_THREADS, 0, s>>>((const S *)x, (S *)y, n, (T)p);        \
        break;
        RMK_UNARY_CASES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename S>
static cudaError_t unary_bwd_t(int op, double p, const void *g, const void *sv, void *dx, int64_t n,
                               cudaStream_t s) {
    typedef typename rmk_compute<S>::type T;
    if (n <= 0) return cudaSuccess;
    const bool pack = rmk_aligned16(g) && rmk_aligned16(sv) && rmk_aligned16(dx);
    const unsigned nb = pack ? rmk_pack_blocks(n, RMK_THREADS) : rmk_blocks(n, RMK_THREADS);
    switch (op) {
#define X(OP)                                                                                      \
    case OP:                                                                                       \
        if (pack)                                                                                  \
            unary_bwd_pack_kernel<S, OP>                                                           \
                <<<nb, RMK_THREADS, 0, s>>>((const S *)g, (const S *)sv, (S *)dx, n, (T)p);        \
        else                                                                                       \
            unary_bwd_kernel<S, OP>                                                                \
                <<<nb, RMK_THREADS, 0, s>>>((const S *)g, (const S *)sv, (S *)dx, n, (T)p);        \
        break;
        RMK_UNARY_CASES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- bias + GELU (RM_K_BIAS_GELU, _BWD) -------------------------------------------------
 * s = x + b[j] in the compute type (bf16 x: rounded to bf16, as a bf16 add, whatever b's
 * storage: bf16 or f32), then the unary kernels' GELU of s and its derivative. One thread
 * per element over a grid of (column blocks, rows): no 64-bit division per element. */
template <typename S, typename T> __device__ __forceinline__ T bg_sum(S x, T b) {
    return rmk_ld(x) + b;
}
__device__ __forceinline__ float bg_sum(rmk_bf16 x, float b) {
    return rmk_bf16_to_f32(rmk_f32_to_bf16(rmk_ld(x) + b));
}

template <typename S, typename B, int OP, typename T = typename rmk_compute<S>::type>
__global__ void bias_gelu_kernel(const S *__restrict__ x, const B *__restrict__ b,
                                 S *__restrict__ y, int64_t rows, int64_t n) {
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
             j += (int64_t)gridDim.x * blockDim.x)
            rmk_put(y + r * n + j, unary_f<T, OP>(bg_sum(x[r * n + j], (T)rmk_ld(b[j])), (T)0));
}

/* g and dx may be one buffer (each element read before it is written) */
template <typename S, typename B, int OP, typename T = typename rmk_compute<S>::type>
__global__ void bias_gelu_bwd_kernel(const S *g, const S *__restrict__ x, const B *__restrict__ b,
                                     S *dx, int64_t rows, int64_t n) {
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
             j += (int64_t)gridDim.x * blockDim.x) {
            const int64_t i = r * n + j;
            rmk_put(dx + i, unary_df<T, OP>(rmk_ld(g[i]), bg_sum(x[i], (T)rmk_ld(b[j])), (T)0));
        }
}

static dim3 bg_grid(int64_t rows, int64_t n) {
    unsigned bx = rmk_blocks(n, RMK_THREADS);
    return dim3(bx < 65535 ? bx : 65535, (unsigned)(rows < 65535 ? rows : 65535));
}

template <typename S, typename B>
static cudaError_t bias_gelu_t(int op, bool bwd, const void *g, const void *x, const void *b,
                               void *y, int64_t rows, int64_t n, cudaStream_t s) {
    if (rows <= 0 || n <= 0) return cudaSuccess;
    dim3 grid = bg_grid(rows, n);
    const S *xs = (const S *)x;
    const B *bs = (const B *)b;
    if (op == RM_U_GELU_ERF && !bwd)
        bias_gelu_kernel<S, B, RM_U_GELU_ERF><<<grid, RMK_THREADS, 0, s>>>(xs, bs, (S *)y, rows, n);
    else if (op == RM_U_GELU_TANH && !bwd)
        bias_gelu_kernel<S, B, RM_U_GELU_TANH>
            <<<grid, RMK_THREADS, 0, s>>>(xs, bs, (S *)y, rows, n);
    else if (op == RM_U_GELU_ERF)
        bias_gelu_bwd_kernel<S, B, RM_U_GELU_ERF>
            <<<grid, RMK_THREADS, 0, s>>>((const S *)g, xs, bs, (S *)y, rows, n);
    else if (op == RM_U_GELU_TANH)
        bias_gelu_bwd_kernel<S, B, RM_U_GELU_TANH>
            <<<grid, RMK_THREADS, 0, s>>>((const S *)g, xs, bs, (S *)y, rows, n);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

static cudaError_t bias_gelu_any(int dt, int bdt, int op, bool bwd, const void *g, const void *x,
                                 const void *b, void *y, int64_t rows, int64_t n, cudaStream_t s) {
    if (dt == 0 && bdt == 0) return bias_gelu_t<float, float>(op, bwd, g, x, b, y, rows, n, s);
    if (dt == 1 && bdt == 1) return bias_gelu_t<double, double>(op, bwd, g, x, b, y, rows, n, s);
    if (dt == 4 && bdt == 4)
        return bias_gelu_t<rmk_bf16, rmk_bf16>(op, bwd, g, x, b, y, rows, n, s);
    if (dt == 4 && bdt == 0) return bias_gelu_t<rmk_bf16, float>(op, bwd, g, x, b, y, rows, n, s);
    return cudaErrorInvalidValue;
}

/* ---- bit masks ----------------------------------------------------------------------------- */
/* One thread per mask byte: 8 elements (fewer in the last byte). */
template <typename S>
__global__ void relu_mask_kernel(const S *__restrict__ y, uint8_t *__restrict__ m, int64_t n) {
    int64_t nbytes = (n + 7) / 8;
    RMK_GRID_LOOP(b, nbytes) {
        unsigned v = 0;
        for (int k = 0; k < 8 && 8 * b + k < n; k++) v |= (unsigned)(rmk_ld(y[8 * b + k]) > 0) << k;
        m[b] = (uint8_t)v;
    }
}
/* dx = bit ? g : 0 (a select, as cpu: +0.0 where dropped) */
template <typename S>
__global__ void relu_mask_bwd_kernel(const S *__restrict__ g, const uint8_t *__restrict__ m,
                                     S *__restrict__ dx, int64_t n) {
    typedef typename rmk_compute<S>::type T;
    RMK_GRID_LOOP(i, n) rmk_put(dx + i, (m[i >> 3] >> (i & 7)) & 1u ? rmk_ld(g[i]) : (T)0);
}
/* ---- the elementwise engine ---------------------------------------------------------------- */
template <typename T, int OP> __device__ __forceinline__ T ew_f(T a, T b, T c, T p) {
    switch (OP) {
    case RM_EW_FILL: return p;
    case RM_EW_SCALE: return a * p;
    case RM_EW_RELU: return !(a <= 0) ? a : (T)0; /* NaN stays NaN (P) */
    case RM_EW_ADD: return a + b;
    case RM_EW_SUB: return a - b;
    case RM_EW_MUL: return a * b;
    case RM_EW_DIV: return a / b;
    case RM_EW_POW: return rmk_pow(a, b);
    case RM_EW_AXPY: return a + p * b;
    case RM_EW_RELU_BWD: return b > 0 ? a : (T)0;
    case RM_EW_DIV_GB: return -a * b / (c * c);
    case RM_EW_POW_GA: return c == (T)0 ? (T)0 : a * c * rmk_pow(b, c - (T)1);
    default: /* RM_EW_POW_GB */
        return (b == (T)0 && c >= (T)0) ? (T)0 : a * rmk_pow(b, c) * rmk_log(b);
    }
}

/* Operands the op reads (cpu elementwise.c's k_arity). */
__host__ __device__ constexpr int ew_arity(int op) {
    return op == RM_EW_FILL                                                   ? 0
           : (op == RM_EW_SCALE || op == RM_EW_RELU)                          ? 1
           : (op == RM_EW_DIV_GB || op == RM_EW_POW_GA || op == RM_EW_POW_GB) ? 3
                                                                              : 2;
}

/* FLAT: the plan is one dim (offsets i * stride); else decompose i. */
template <typename S, int OP, bool FLAT, typename T = typename rmk_compute<S>::type>
__global__ void ew_kernel(const __grid_constant__ rmk_plan pl, S *y, const S *a, const S *b,
                          const S *c, int64_t n, T p) {
    constexpr int ar = ew_arity(OP);
    RMK_GRID_LOOP(i, n) {
        int64_t off[RMK_MAX_OPS];
        if (FLAT) {
            for (int k = 0; k < RMK_MAX_OPS; k++) off[k] = i * pl.st[k][0];
        } else {
            rmk_plan_offsets(&pl, i, off);
        }
        T av = ar > 0 ? rmk_ld(a[off[1]]) : (T)0;
        T bv = ar > 1 ? rmk_ld(b[off[2]]) : (T)0;
        T cv = ar > 2 ? rmk_ld(c[off[3]]) : (T)0;
        rmk_put(y + off[0], ew_f<T, OP>(av, bv, cv, p));
    }
}

/* The flat plan over packs: y and every operand read contiguous (stride 1, 16-byte
 * aligned) or one broadcast value (stride 0). */
template <typename S, int OP, typename T = typename rmk_compute<S>::type>
__global__ void ew_pack_kernel(const __grid_constant__ rmk_plan pl, S *y, const S *a, const S *b,
                               const S *c, int64_t n, T p) {
    constexpr int ar = ew_arity(OP);
    const bool sa = pl.st[1][0] == 0, sb = pl.st[2][0] == 0, sc = pl.st[3][0] == 0;
    const T a0 = ar > 0 && sa ? rmk_ld(a[0]) : (T)0, b0 = ar > 1 && sb ? rmk_ld(b[0]) : (T)0,
            c0 = ar > 2 && sc ? rmk_ld(c[0]) : (T)0;
    RMK_PACK_LOOP(v, n) {
        rmk_pack<S> pa, pb, pc, py;
        if (ar > 0 && !sa) pa.load(a, v);
        if (ar > 1 && !sb) pb.load(b, v);
        if (ar > 2 && !sc) pc.load(c, v);
#pragma unroll
        for (int e = 0; e < RMK_PACK; e++) {
            const T av = ar > 0 ? (sa ? a0 : rmk_ld(pa.e[e])) : (T)0;
            const T bv = ar > 1 ? (sb ? b0 : rmk_ld(pb.e[e])) : (T)0;
            const T cv = ar > 2 ? (sc ? c0 : rmk_ld(pc.e[e])) : (T)0;
            rmk_put(&py.e[e], ew_f<T, OP>(av, bv, cv, p));
        }
        py.store(y, v);
    }
    RMK_PACK_TAIL(i, n) {
        const T av = ar > 0 ? (sa ? a0 : rmk_ld(a[i])) : (T)0;
        const T bv = ar > 1 ? (sb ? b0 : rmk_ld(b[i])) : (T)0;
        const T cv = ar > 2 ? (sc ? c0 : rmk_ld(c[i])) : (T)0;
        rmk_put(y + i, ew_f<T, OP>(av, bv, cv, p));
    }
}

/* Whether a one-dim plan can run packed: y contiguous, each operand the op reads
 * contiguous or broadcast, the contiguous ones 16-byte aligned. */
static bool ew_packable(const rmk_plan *pl, int ar, const void *y, const void *a, const void *b,
                        const void *c) {
    if (pl->nd != 1 || pl->st[0][0] != 1 || !rmk_aligned16(y)) return false;
    const void *in[3] = {a, b, c};
    for (int k = 0; k < ar; k++) {
        const int64_t st = pl->st[k + 1][0];
        if (!(st == 0 || (st == 1 && rmk_aligned16(in[k])))) return false;
    }
    return true;
}

/* clang-format cannot settle on one layout for an X-macro list: */
/* clang-format off */
#define RMK_EW_CASES(X)                                                                            \
    X(RM_EW_FILL)                                                                                  \
    X(RM_EW_SCALE) X(RM_EW_RELU) X(RM_EW_ADD) X(RM_EW_SUB) X(RM_EW_MUL) X(RM_EW_DIV) X(RM_EW_POW)  \
        X(RM_EW_AXPY) X(RM_EW_RELU_BWD) X(RM_EW_DIV_GB) X(RM_EW_POW_GA) X(RM_EW_POW_GB)
/* clang-format on */

template <typename S>
static cudaError_t ew_t(int op, double p, const rmk_plan *pl, void *y, const void *a, const void *b,
                        const void *c, cudaStream_t s) {
    typedef typename rmk_compute<S>::type T;
    int64_t n = 1;
    for (int d = 0; d < pl->nd; d++) n *= pl->shape[d];
    unsigned nb = rmk_blocks(n, RMK_THREADS);
    if (nb == 0) return cudaSuccess;
    bool flat = pl->nd == 1;
    switch (op) {
#define X(OP)                                                                                      \
    case OP:                                                                                       \
        if (ew_packable(pl, ew_arity(OP), y, a, b, c))                                             \
            ew_pack_kernel<S, OP><<<rmk_pack_blocks(n, RMK_THREADS), RMK_THREADS, 0, s>>>(         \
                *pl, (S *)y, (const S *)a, (const S *)b, (const S *)c, n, (T)p);                   \
        else if (flat)                                                                             \
            ew_kernel<S, OP, true><<<nb, RMK_THREADS, 0, s>>>(                                     \
                *pl, (S *)y, (const S *)a, (const S *)b, (const S *)c, n, (T)p);                   \
        else                                                                                       \
            ew_kernel<S, OP, false><<<nb, RMK_THREADS, 0, s>>>(                                    \
                *pl, (S *)y, (const S *)a, (const S *)b, (const S *)c, n, (T)p);                   \
        break;
        RMK_EW_CASES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- strided copy -------------------------------------------------------------------------- */
template <typename U, bool FLAT>
__global__ void copy_kernel(const __grid_constant__ rmk_plan pl, U *dst, const U *src, int64_t n) {
    RMK_GRID_LOOP(i, n) {
        if (FLAT) {
            dst[i * pl.st[0][0]] = src[i * pl.st[1][0]];
        } else {
            int64_t off[RMK_MAX_OPS];
            rmk_plan_offsets(&pl, i, off);
            dst[off[0]] = src[off[1]];
        }
    }
}

template <typename U>
static cudaError_t copy_t(const rmk_plan *pl, void *dst, const void *src, cudaStream_t s) {
    int64_t n = 1;
    for (int d = 0; d < pl->nd; d++) n *= pl->shape[d];
    unsigned nb = rmk_blocks(n, RMK_THREADS);
    if (nb == 0) return cudaSuccess;
    if (pl->nd == 1 && pl->st[0][0] == 1 && pl->st[1][0] == 1)
        return cudaMemcpyAsync(dst, src, (size_t)n * sizeof(U), cudaMemcpyDeviceToDevice, s);
    if (pl->nd == 1)
        copy_kernel<U, true><<<nb, RMK_THREADS, 0, s>>>(*pl, (U *)dst, (const U *)src, n);
    else copy_kernel<U, false><<<nb, RMK_THREADS, 0, s>>>(*pl, (U *)dst, (const U *)src, n);
    return cudaGetLastError();
}

/* ---- launchers ----------------------------------------------------------------------------- */
/* dt: 0 f32, 1 f64, 4 bf16 (remat's codes) */
#define RMK_BY_DTYPE(dt, F)                                                                        \
    ((dt) == 0 ? F(float) : (dt) == 1 ? F(double) : (dt) == 4 ? F(rmk_bf16) : cudaErrorInvalidValue)

extern "C" cudaError_t rmk_unary(int dt, int op, double p, const void *x, void *y, int64_t n,
                                 cudaStream_t s) {
#define F(S) unary_t<S>(op, p, x, y, n, s)
    return RMK_BY_DTYPE(dt, F);
#undef F
}

extern "C" cudaError_t rmk_unary_bwd(int dt, int op, double p, const void *g, const void *sv,
                                     void *dx, int64_t n, cudaStream_t s) {
#define F(S) unary_bwd_t<S>(op, p, g, sv, dx, n, s)
    return RMK_BY_DTYPE(dt, F);
#undef F
}

extern "C" cudaError_t rmk_bias_gelu(int dt, int bdt, int op, const void *x, const void *b, void *y,
                                     int64_t rows, int64_t n, cudaStream_t s) {
    return bias_gelu_any(dt, bdt, op, false, NULL, x, b, y, rows, n, s);
}

extern "C" cudaError_t rmk_bias_gelu_bwd(int dt, int bdt, int op, const void *g, const void *x,
                                         const void *b, void *dx, int64_t rows, int64_t n,
                                         cudaStream_t s) {
    return bias_gelu_any(dt, bdt, op, true, g, x, b, dx, rows, n, s);
}

template <typename S>
static cudaError_t relu_mask_t(const void *y, uint8_t *m, int64_t n, cudaStream_t s) {
    unsigned nb = rmk_blocks((n + 7) / 8, RMK_THREADS);
    if (nb == 0) return cudaSuccess;
    relu_mask_kernel<S><<<nb, RMK_THREADS, 0, s>>>((const S *)y, m, n);
    return cudaGetLastError();
}

extern "C" cudaError_t rmk_relu_mask(int dt, const void *y, uint8_t *m, int64_t n, cudaStream_t s) {
#define F(S) relu_mask_t<S>(y, m, n, s)
    return RMK_BY_DTYPE(dt, F);
#undef F
}

template <typename S>
static cudaError_t relu_mask_bwd_t(const void *g, const uint8_t *m, void *dx, int64_t n,
                                   cudaStream_t s) {
    unsigned nb = rmk_blocks(n, RMK_THREADS);
    if (nb == 0) return cudaSuccess;
    relu_mask_bwd_kernel<S><<<nb, RMK_THREADS, 0, s>>>((const S *)g, m, (S *)dx, n);
    return cudaGetLastError();
}

extern "C" cudaError_t rmk_relu_mask_bwd(int dt, const void *g, const uint8_t *m, void *dx,
                                         int64_t n, cudaStream_t s) {
#define F(S) relu_mask_bwd_t<S>(g, m, dx, n, s)
    return RMK_BY_DTYPE(dt, F);
#undef F
}

extern "C" cudaError_t rmk_elementwise(int dt, int op, double p, const rmk_plan *plan, void *y,
                                       const void *a, const void *b, const void *c,
                                       cudaStream_t s) {
#define F(S) ew_t<S>(op, p, plan, y, a, b, c, s)
    return RMK_BY_DTYPE(dt, F);
#undef F
}

extern "C" cudaError_t rmk_copy_strided(size_t es, const rmk_plan *plan, void *dst, const void *src,
                                        cudaStream_t s) {
    switch (es) {
    case 1: return copy_t<uint8_t>(plan, dst, src, s);
    case 2: return copy_t<uint16_t>(plan, dst, src, s);
    case 4: return copy_t<uint32_t>(plan, dst, src, s);
    case 8: return copy_t<unsigned long long>(plan, dst, src, s);
    default: return cudaErrorInvalidValue;
    }
}
