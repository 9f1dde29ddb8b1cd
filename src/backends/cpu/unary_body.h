/* src/backends/cpu/unary_body.h — the unary kernels (see unary.c), written once and
 * compiled once per stored type: unary.c includes this file with UN_NAME the type's name
 * (float, double, bf16), T the stored type, C the one the math runs in, LD(v) and ST(v)
 * the element conversions and UN_IT an unsigned integer of T's size (f32 and f64 give
 * only T, UN_IT and UN_SFX); the math, UN_EXP ... UN_POW, is unary.c's. Each function is
 * named UN_FN(name): name_float, name_double, name_bf16. The kernels (rm_kernel_fn) come
 * with UN_SFX (f32, f64; bf16's are in unary.c). No include guard: included once per
 * type. */
#include "tmpl.h"

/* f32 and f64 store what they compute: by default the math runs in T, unconverted */
#ifndef UN_NAME
#define UN_NAME T
#define C T
#define LD(v) (v)
#define ST(v) (v)
#define UN_COPY_IS_MEMCPY 1
#endif
#define UN_FN(name) RM_TCAT(name, UN_NAME)

/* y = f(x); p = scalar parameter. Each case is one parallel region over fixed ranges (the
 * simd ones, for cheap expressions, also vectorised): an element's value never depends on
 * the thread count. */
RM_CPU_CLONES static void UN_FN(fwd)(rm_unary_op op, const T *restrict x, T *restrict y, int64_t n,
                                     C p) {
    switch (op) {
    case RM_U_NEG: UN_EACH_SIMD(y, ST(-LD(x[i]))); break;
    case RM_U_EXP: UN_EACH(y, ST(UN_EXP(LD(x[i])))); break;
    case RM_U_LOG: UN_EACH(y, ST(UN_LOG(LD(x[i])))); break;
    case RM_U_SQRT: UN_EACH_SIMD(y, ST(UN_SQRT(LD(x[i])))); break;
    case RM_U_TANH: UN_EACH(y, ST(UN_TANH(LD(x[i])))); break;
    case RM_U_SIGMOID: UN_EACH(y, ST((C)1 / ((C)1 + UN_EXP(-LD(x[i]))))); break;
    case RM_U_RELU: UN_EACH_SIMD(y, ST(!(LD(x[i]) <= 0) ? LD(x[i]) : (C)0)); break;
    case RM_U_GELU_ERF: UN_EACH(y, ST(UN_GELU(LD(x[i])))); break;
    case RM_U_GELU_TANH: UN_EACH(y, ST(UN_GELU_T(LD(x[i])))); break;
    case RM_U_SILU: UN_EACH(y, ST(LD(x[i]) / ((C)1 + UN_EXP(-LD(x[i]))))); break;
    case RM_U_POW: UN_EACH(y, ST(UN_POW(LD(x[i]), p))); break;
    case RM_U_ADD: UN_EACH_SIMD(y, ST(LD(x[i]) + p)); break;
    case RM_U_MUL: UN_EACH_SIMD(y, ST(LD(x[i]) * p)); break;
    case RM_U_RSUB: UN_EACH_SIMD(y, ST(p - LD(x[i]))); break;
    }
}

/* dx = g * f'(s) (unary_bwd_cases.h, the body of both). bwd_inplace writes dx over g (the
 * backward's dying gradient, src/ops/unary.c): g is dx there (a pointer based on the
 * restrict one, so restrict holds), each element read before it is written, by the same
 * expressions as bwd's. */
RM_CPU_CLONES static void UN_FN(bwd)(rm_unary_op op, const T *restrict g, const T *restrict s,
                                     T *restrict dx, int64_t n, C p){
#include "unary_bwd_cases.h"
} RM_CPU_CLONES static void UN_FN(bwd_inplace)(rm_unary_op op, T *restrict dx, const T *restrict s,
                                               int64_t n, C p) {
    const T *g = dx;
#include "unary_bwd_cases.h"
}

/* Bit-packed relu mask: bit i of m (byte i / 8, bit i %% 8) is y[i] > 0. */
RM_CPU_CLONES static void UN_FN(relu_mask)(const T *restrict y, uint8_t *restrict m, int64_t n) {
    int64_t nb = n / 8;
#pragma omp parallel for if (n > 65536)
    for (int64_t b = 0; b < nb; b++) {
        const T *p = y + 8 * b;
        unsigned v = 0;
        for (int k = 0; k < 8; k++) v |= (unsigned)(LD(p[k]) > 0) << k;
        m[b] = (uint8_t)v;
    }
    if (nb * 8 < n) {
        unsigned v = 0;
        for (int64_t i = nb * 8; i < n; i++) v |= (unsigned)(LD(y[i]) > 0) << (i - nb * 8);
        m[nb] = (uint8_t)v;
    }
}
/* dx = bit i ? g : 0 — the same values as (y > 0 ? g : 0) */
RM_CPU_CLONES static void UN_FN(relu_mask_bwd)(const T *restrict g, const uint8_t *restrict m,
                                               T *restrict dx, int64_t n) {
    /* whole bytes with constant shifts (vectorises), then the tail */
    int64_t nb = n / 8;
#pragma omp parallel for if (n > 65536)
    for (int64_t b = 0; b < nb; b++) {
        /* select through bit masks: exact (+0.0 where dropped), and it vectorises */
        unsigned v = m[b];
        UN_IT gb[8], keep[8];
        memcpy(gb, g + 8 * b, sizeof gb);
        for (int k = 0; k < 8; k++) keep[k] = (UN_IT)0 - (UN_IT)((v >> k) & 1u);
        for (int k = 0; k < 8; k++) gb[k] = ST(LD(gb[k] & keep[k]));
        memcpy(dx + 8 * b, gb, sizeof gb);
    }
    for (int64_t i = nb * 8; i < n; i++) dx[i] = (m[i >> 3] >> (i & 7)) & 1u ? ST(LD(g[i])) : (T)0;
}

#ifdef UN_SFX /* ---- the kernels (rm_kernel_fn) ---- */
remat_status RM_TCAT(rm_cpu_unary, UN_SFX)(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    UN_FN(fwd)(p->op, rm_ptr(k->in[0]), rm_ptr(k->out[0]), remat_numel(k->out[0]), (T)p->p);
    return REMAT_OK;
}
remat_status RM_TCAT(rm_cpu_unary_bwd, UN_SFX)(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    const T *g = rm_ptr(k->in[0]), *s = k->in[1] ? rm_ptr(k->in[1]) : NULL;
    T *dx = rm_ptr(k->out[0]);
    int64_t n = remat_numel(k->out[0]);
    if ((const T *)dx == g) UN_FN(bwd_inplace)(p->op, dx, s, n, (T)p->p);
    else UN_FN(bwd)(p->op, g, s, dx, n, (T)p->p);
    return REMAT_OK;
}
remat_status RM_TCAT(rm_cpu_relu_mask, UN_SFX)(const rm_kargs *k) {
    UN_FN(relu_mask)(rm_ptr(k->in[0]), rm_ptr(k->out[0]), remat_numel(k->in[0]));
    return REMAT_OK;
}
remat_status RM_TCAT(rm_cpu_relu_mask_bwd, UN_SFX)(const rm_kargs *k) {
    UN_FN(relu_mask_bwd)
    (rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->out[0]), remat_numel(k->out[0]));
    return REMAT_OK;
}
#endif

#undef UN_FN
#undef UN_NAME
#undef T
#undef C
#undef LD
#undef ST
#undef UN_IT
#undef UN_COPY_IS_MEMCPY
#undef UN_SFX
