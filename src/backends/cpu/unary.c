/* src/backends/cpu/unary.c — cpu kernels of the elementwise unary ops
 * (src/ops/unary.c): y = f(x; p), the fused backward dx = g * f'(s) and
 * relu's 1-bit mask.
 *
 * Operands are contiguous; the kernels are flat loops the compiler
 * vectorises, split across OpenMP threads. The f32 exp, tanh and GELUs are
 * the vectorisable ones of vmath.h. */
#include <math.h>
#include <string.h>

#include "clones.h"
#include "cpu.h"
#include "vmath.h"

#define K_SQRT_2_OVER_PI 0.7978845608028654
#define K_INV_SQRT_2 0.7071067811865476
#define K_INV_SQRT_2PI 0.3989422804014327

/* GELU (erf form) in f64: x * Phi(x) and its derivative Phi(x) + x * pdf(x),
 * with libm's erfc and exp (the f32 ones, rm_gelu_erff_v and
 * rm_gelu_erff_grad_v, are in vmath.h: one shared exp, vectorised).
 * Phi = 0.5 * erfc(-x / sqrt 2) stays accurate in the left tail, where
 * 0.5 * (1 + erf) cancels to 0 below x ~ -8. */
static inline double phi_d(double x) { return 0.5 * erfc(-x * K_INV_SQRT_2); }
static inline double gelu_erf_d(double x) { return x * phi_d(x); }
static inline double gelu_erf_grad_d(double x) {
    return phi_d(x) + x * (K_INV_SQRT_2PI * exp(-0.5 * x * x));
}
/* GELU (tanh form) in f64: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
 * and its derivative (the f32 ones, through sigmoid(2u), are in vmath.h). */
static inline double gelu_tanh_d(double v) {
    double in = K_SQRT_2_OVER_PI * (v + 0.044715 * v * v * v);
    return 0.5 * v * (1.0 + tanh(in));
}
static inline double gelu_tanh_grad_d(double v) {
    double in = K_SQRT_2_OVER_PI * (v + 0.044715 * v * v * v);
    double th = tanh(in);
    double din = K_SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * v * v);
    return 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * din;
}

/* One case of the switches below: OUT[i] = EXPR for every i < n, split
 * across threads past 32768 elements; the _SIMD one, for cheap EXPRs, also
 * vectorised and split past 65536. */
#define UN_EACH(OUT, EXPR)                                                                         \
    _Pragma("omp parallel for if (n > 32768)") for (int64_t i = 0; i < n; i++) OUT[i] = EXPR
#define UN_EACH_SIMD(OUT, EXPR)                                                                    \
    _Pragma("omp parallel for simd if (n > 65536)") for (int64_t i = 0; i < n; i++) OUT[i] = EXPR

/* y = f(x); p = scalar parameter. GELU / GELU_T are the erf- and tanh-form GELUs. */
#define UNARY_FWD(T, EXPF, LOGF, SQRTF, TANHF, GELU, GELU_T, POWF)                                 \
    RM_CPU_CLONES static void fwd_##T(rm_unary_op op, const T *restrict x, T *restrict y,          \
                                      int64_t n, T p) {                                            \
        switch (op) {                                                                              \
        case RM_U_NEG: UN_EACH_SIMD(y, -x[i]); break;                                              \
        case RM_U_EXP: UN_EACH(y, EXPF(x[i])); break;                                              \
        case RM_U_LOG: UN_EACH(y, LOGF(x[i])); break;                                              \
        case RM_U_SQRT: UN_EACH_SIMD(y, SQRTF(x[i])); break;                                       \
        case RM_U_TANH: UN_EACH(y, TANHF(x[i])); break;                                            \
        case RM_U_SIGMOID: UN_EACH(y, (T)1 / ((T)1 + EXPF(-x[i]))); break;                         \
        case RM_U_RELU: UN_EACH_SIMD(y, x[i] > 0 ? x[i] : (T)0); break;                            \
        case RM_U_GELU_ERF: UN_EACH(y, GELU(x[i])); break;                                         \
        case RM_U_GELU_TANH: UN_EACH(y, GELU_T(x[i])); break;                                      \
        case RM_U_POW: UN_EACH(y, POWF(x[i], p)); break;                                           \
        case RM_U_ADD: UN_EACH_SIMD(y, x[i] + p); break;                                           \
        case RM_U_MUL: UN_EACH_SIMD(y, x[i] * p); break;                                           \
        case RM_U_RSUB: UN_EACH_SIMD(y, p - x[i]); break;                                          \
        }                                                                                          \
    }

/* dx = g * f'(s) where s is the saved x or y (see k_uinfo); GELU_GRAD and
 * GELU_T_GRAD are the erf- and tanh-form GELUs' derivatives. */
#define UNARY_BWD_SWITCH(T, GELU_GRAD, GELU_T_GRAD, POWF)                                          \
    switch (op) {                                                                                  \
    case RM_U_NEG:                                                                                 \
        for (int64_t i = 0; i < n; i++) dx[i] = -g[i];                                             \
        break;                                                                                     \
    case RM_U_EXP: UN_EACH_SIMD(dx, g[i] * s[i]); break;                                           \
    case RM_U_LOG: UN_EACH_SIMD(dx, g[i] / s[i]); break;                                           \
    case RM_U_SQRT: UN_EACH_SIMD(dx, g[i] / ((T)2 * s[i])); break;                                 \
    case RM_U_TANH: UN_EACH_SIMD(dx, g[i] * ((T)1 - s[i] * s[i])); break;                          \
    case RM_U_SIGMOID: UN_EACH_SIMD(dx, g[i] * s[i] * ((T)1 - s[i])); break;                       \
    case RM_U_RELU: UN_EACH_SIMD(dx, s[i] > 0 ? g[i] : (T)0); break;                               \
    case RM_U_GELU_ERF: UN_EACH(dx, g[i] * GELU_GRAD(s[i])); break;                                \
    case RM_U_GELU_TANH: UN_EACH(dx, g[i] * GELU_T_GRAD(s[i])); break;                             \
    case RM_U_POW: UN_EACH(dx, p == (T)0 ? (T)0 : g[i] * p * POWF(s[i], p - (T)1)); break;         \
    case RM_U_ADD:                                                                                 \
        if ((const T *)dx != g) memcpy(dx, g, (size_t)n * sizeof(T));                              \
        break;                                                                                     \
    case RM_U_MUL: UN_EACH_SIMD(dx, g[i] * p); break;                                              \
    case RM_U_RSUB:                                                                                \
        for (int64_t i = 0; i < n; i++) dx[i] = -g[i];                                             \
        break;                                                                                     \
    }

/* bwd_inplace writes dx over g (the backward's dying gradient, src/ops/unary.c):
 * g is dx there (a pointer based on the restrict one, so restrict holds), each
 * element read before it is written, by the same expressions as bwd's. */
#define UNARY_BWD(T, GELU_GRAD, GELU_T_GRAD, POWF)                                                 \
    RM_CPU_CLONES static void bwd_##T(rm_unary_op op, const T *restrict g, const T *restrict s,    \
                                      T *restrict dx, int64_t n, T p) {                            \
        UNARY_BWD_SWITCH(T, GELU_GRAD, GELU_T_GRAD, POWF);                                         \
    }                                                                                              \
    RM_CPU_CLONES static void bwd_inplace_##T(rm_unary_op op, T *restrict dx, const T *restrict s, \
                                              int64_t n, T p) {                                    \
        const T *g = dx;                                                                           \
        UNARY_BWD_SWITCH(T, GELU_GRAD, GELU_T_GRAD, POWF);                                         \
    }

UNARY_FWD(float, rm_expf_v, logf, sqrtf, rm_tanhf_v, rm_gelu_erff_v, rm_gelu_tanhf_v, powf)
UNARY_FWD(double, exp, log, sqrt, tanh, gelu_erf_d, gelu_tanh_d, pow)
UNARY_BWD(float, rm_gelu_erff_grad_v, rm_gelu_tanhf_grad_v, powf)
UNARY_BWD(double, gelu_erf_grad_d, gelu_tanh_grad_d, pow)

/* Bit-packed relu mask: bit i of m (byte i / 8, bit i % 8) is y[i] > 0. */
#define RELU_MASK(T, IT)                                                                           \
    static void relu_mask_##T(const T *restrict y, uint8_t *restrict m, int64_t n) {               \
        int64_t nb = n / 8;                                                                        \
        _Pragma("omp parallel for if (n > 65536)") for (int64_t b = 0; b < nb; b++) {              \
            const T *p = y + 8 * b;                                                                \
            unsigned v = 0;                                                                        \
            for (int k = 0; k < 8; k++) v |= (unsigned)(p[k] > 0) << k;                            \
            m[b] = (uint8_t)v;                                                                     \
        }                                                                                          \
        if (nb * 8 < n) {                                                                          \
            unsigned v = 0;                                                                        \
            for (int64_t i = nb * 8; i < n; i++) v |= (unsigned)(y[i] > 0) << (i - nb * 8);        \
            m[nb] = (uint8_t)v;                                                                    \
        }                                                                                          \
    }                                                                                              \
    /* dx = bit i ? g : 0 — the same values as (y > 0 ? g : 0) */                                \
    static void relu_mask_bwd_##T(const T *restrict g, const uint8_t *restrict m, T *restrict dx,  \
                                  int64_t n) {                                                     \
        /* whole bytes with constant shifts (vectorises), then the tail */                         \
        int64_t nb = n / 8;                                                                        \
        _Pragma("omp parallel for if (n > 65536)") for (int64_t b = 0; b < nb; b++) {              \
            /* select through bit masks: exact (+0.0 where dropped), and it vectorises */          \
            unsigned v = m[b];                                                                     \
            IT gb[8], keep[8];                                                                     \
            memcpy(gb, g + 8 * b, sizeof gb);                                                      \
            for (int k = 0; k < 8; k++) keep[k] = (IT)0 - (IT)((v >> k) & 1u);                     \
            for (int k = 0; k < 8; k++) gb[k] &= keep[k];                                          \
            memcpy(dx + 8 * b, gb, sizeof gb);                                                     \
        }                                                                                          \
        for (int64_t i = nb * 8; i < n; i++) dx[i] = (m[i >> 3] >> (i & 7)) & 1u ? g[i] : (T)0;    \
    }
RELU_MASK(float, uint32_t)
RELU_MASK(double, uint64_t)

/* ---- the kernels (rm_kernel_fn) ------------------------------------------------------ */
#define UNARY_KERNELS(T, SUFFIX)                                                                   \
    remat_status rm_cpu_unary_##SUFFIX(const rm_kargs *k) {                                        \
        const rm_unary_params *p = k->params;                                                      \
        fwd_##T(p->op, rm_ptr(k->in[0]), rm_ptr(k->out[0]), remat_numel(k->out[0]), (T)p->p);      \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_unary_bwd_##SUFFIX(const rm_kargs *k) {                                    \
        const rm_unary_params *p = k->params;                                                      \
        const T *g = rm_ptr(k->in[0]), *s = k->in[1] ? rm_ptr(k->in[1]) : NULL;                    \
        T *dx = rm_ptr(k->out[0]);                                                                 \
        int64_t n = remat_numel(k->out[0]);                                                        \
        if ((const T *)dx == g) bwd_inplace_##T(p->op, dx, s, n, (T)p->p);                         \
        else bwd_##T(p->op, g, s, dx, n, (T)p->p);                                                 \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_relu_mask_##SUFFIX(const rm_kargs *k) {                                    \
        relu_mask_##T(rm_ptr(k->in[0]), rm_ptr(k->out[0]), remat_numel(k->in[0]));                 \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_relu_mask_bwd_##SUFFIX(const rm_kargs *k) {                                \
        relu_mask_bwd_##T(rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->out[0]),                   \
                          remat_numel(k->out[0]));                                                 \
        return REMAT_OK;                                                                           \
    }
UNARY_KERNELS(float, f32)
UNARY_KERNELS(double, f64)
