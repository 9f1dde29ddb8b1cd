/* src/ops/unary.c — elementwise unary ops and scalar variants.
 *
 * Each op is a forward kernel y = f(x) and a fused backward kernel
 * dx = g * f'(.) reading either the saved input x or the saved output y
 * (whichever f' needs; y is preferred as it is often needed anyway).
 * x is made contiguous first; the kernels are flat loops the compiler
 * vectorises, split across OpenMP threads.
 *
 * Lean saves: relu keeps a 1-bit mask (y > 0, packed 8 per byte into a u8
 * tensor) instead of y, so its saved bytes are 1/32 of an f32 output (1/64
 * of f64); the gradient g * [y > 0] is bitwise the same. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "vmath.h"

typedef enum uop {
    U_NEG, U_EXP, U_LOG, U_SQRT, U_TANH, U_SIGMOID, U_RELU, U_GELU_ERF, U_GELU_TANH,
    U_POW, U_ADD, U_MUL, U_RSUB
} uop;

typedef struct uinfo {
    const char *call;   /* public name */
    const char *node;   /* graph node name */
    bool save_out;      /* backward reads y (else x) */
    bool needs_saved;   /* backward reads a saved tensor at all */
} uinfo;

static const uinfo k_uinfo[] = {
    [U_NEG] = {"remat_neg", "NegBackward", false, false},
    [U_EXP] = {"remat_exp", "ExpBackward", true, true},
    [U_LOG] = {"remat_log", "LogBackward", false, true},
    [U_SQRT] = {"remat_sqrt", "SqrtBackward", true, true},
    [U_TANH] = {"remat_tanh", "TanhBackward", true, true},
    [U_SIGMOID] = {"remat_sigmoid", "SigmoidBackward", true, true},
    [U_RELU] = {"remat_relu", "ReluBackward", true, true},
    [U_GELU_ERF] = {"remat_gelu", "GeluBackward", false, true},
    [U_GELU_TANH] = {"remat_gelu", "GeluBackward", false, true},
    [U_POW] = {"remat_pow_scalar", "PowBackward", false, true},
    [U_ADD] = {"remat_add_scalar", "AddBackward", false, false},
    [U_MUL] = {"remat_mul_scalar", "MulBackward", false, false},
    [U_RSUB] = {"remat_rsub_scalar", "RsubBackward", false, false},
};

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

/* y = f(x); p = scalar parameter. GELU / GELU_T are the erf- and tanh-form GELUs. */
#define UNARY_FWD(T, EXPF, LOGF, SQRTF, TANHF, GELU, GELU_T, POWF)                           \
    static void fwd_##T(uop op, const T *restrict x, T *restrict y, int64_t n, T p) {        \
        switch (op) {                                                                        \
        case U_NEG: _Pragma("omp parallel for simd if (n > 65536)")                          \
            for (int64_t i = 0; i < n; i++) y[i] = -x[i]; break;                             \
        case U_EXP: _Pragma("omp parallel for if (n > 32768)")                               \
            for (int64_t i = 0; i < n; i++) y[i] = EXPF(x[i]); break;                        \
        case U_LOG: _Pragma("omp parallel for if (n > 32768)")                               \
            for (int64_t i = 0; i < n; i++) y[i] = LOGF(x[i]); break;                        \
        case U_SQRT: _Pragma("omp parallel for simd if (n > 65536)")                         \
            for (int64_t i = 0; i < n; i++) y[i] = SQRTF(x[i]); break;                       \
        case U_TANH: _Pragma("omp parallel for if (n > 32768)")                              \
            for (int64_t i = 0; i < n; i++) y[i] = TANHF(x[i]); break;                       \
        case U_SIGMOID: _Pragma("omp parallel for if (n > 32768)")                           \
            for (int64_t i = 0; i < n; i++) y[i] = (T)1 / ((T)1 + EXPF(-x[i])); break;       \
        case U_RELU: _Pragma("omp parallel for simd if (n > 65536)")                         \
            for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : (T)0; break;            \
        case U_GELU_ERF: _Pragma("omp parallel for if (n > 32768)")                          \
            for (int64_t i = 0; i < n; i++) y[i] = GELU(x[i]);                               \
            break;                                                                           \
        case U_GELU_TANH: _Pragma("omp parallel for if (n > 32768)")                         \
            for (int64_t i = 0; i < n; i++) y[i] = GELU_T(x[i]);                             \
            break;                                                                           \
        case U_POW: _Pragma("omp parallel for if (n > 32768)")                               \
            for (int64_t i = 0; i < n; i++) y[i] = POWF(x[i], p); break;                     \
        case U_ADD: _Pragma("omp parallel for simd if (n > 65536)")                          \
            for (int64_t i = 0; i < n; i++) y[i] = x[i] + p; break;                          \
        case U_MUL: _Pragma("omp parallel for simd if (n > 65536)")                          \
            for (int64_t i = 0; i < n; i++) y[i] = x[i] * p; break;                          \
        case U_RSUB: _Pragma("omp parallel for simd if (n > 65536)")                         \
            for (int64_t i = 0; i < n; i++) y[i] = p - x[i]; break;                          \
        }                                                                                    \
    }

/* dx = g * f'(s) where s is the saved x or y (see k_uinfo); GELU_GRAD and
 * GELU_T_GRAD are the erf- and tanh-form GELUs' derivatives. */
#define UNARY_BWD(T, GELU_GRAD, GELU_T_GRAD, POWF)                                           \
    static void bwd_##T(uop op, const T *restrict g, const T *restrict s, T *restrict dx,    \
                        int64_t n, T p) {                                                    \
        switch (op) {                                                                        \
        case U_NEG: for (int64_t i = 0; i < n; i++) dx[i] = -g[i]; break;                    \
        case U_EXP: _Pragma("omp parallel for simd if (n > 65536)")                          \
            for (int64_t i = 0; i < n; i++) dx[i] = g[i] * s[i]; break;                      \
        case U_LOG: _Pragma("omp parallel for simd if (n > 65536)")                          \
            for (int64_t i = 0; i < n; i++) dx[i] = g[i] / s[i]; break;                      \
        case U_SQRT: _Pragma("omp parallel for simd if (n > 65536)")                         \
            for (int64_t i = 0; i < n; i++) dx[i] = g[i] / ((T)2 * s[i]); break;             \
        case U_TANH: _Pragma("omp parallel for simd if (n > 65536)")                         \
            for (int64_t i = 0; i < n; i++) dx[i] = g[i] * ((T)1 - s[i] * s[i]); break;      \
        case U_SIGMOID: _Pragma("omp parallel for simd if (n > 65536)")                      \
            for (int64_t i = 0; i < n; i++) dx[i] = g[i] * s[i] * ((T)1 - s[i]); break;      \
        case U_RELU: _Pragma("omp parallel for simd if (n > 65536)")                         \
            for (int64_t i = 0; i < n; i++) dx[i] = s[i] > 0 ? g[i] : (T)0; break;           \
        case U_GELU_ERF: _Pragma("omp parallel for if (n > 32768)")                          \
            for (int64_t i = 0; i < n; i++) dx[i] = g[i] * GELU_GRAD(s[i]);                  \
            break;                                                                           \
        case U_GELU_TANH: _Pragma("omp parallel for if (n > 32768)")                         \
            for (int64_t i = 0; i < n; i++) dx[i] = g[i] * GELU_T_GRAD(s[i]);                \
            break;                                                                           \
        case U_POW: _Pragma("omp parallel for if (n > 32768)")                               \
            for (int64_t i = 0; i < n; i++)                                                  \
                dx[i] = p == (T)0 ? (T)0 : g[i] * p * POWF(s[i], p - (T)1);                  \
            break;                                                                           \
        case U_ADD: memcpy(dx, g, (size_t)n * sizeof(T)); break;                             \
        case U_MUL: _Pragma("omp parallel for simd if (n > 65536)")                          \
            for (int64_t i = 0; i < n; i++) dx[i] = g[i] * p; break;                         \
        case U_RSUB: for (int64_t i = 0; i < n; i++) dx[i] = -g[i]; break;                   \
        }                                                                                    \
    }

UNARY_FWD(float, rm_expf_v, logf, sqrtf, rm_tanhf_v, rm_gelu_erff_v, rm_gelu_tanhf_v, powf)
UNARY_FWD(double, exp, log, sqrt, tanh, gelu_erf_d, gelu_tanh_d, pow)
UNARY_BWD(float, rm_gelu_erff_grad_v, rm_gelu_tanhf_grad_v, powf)
UNARY_BWD(double, gelu_erf_grad_d, gelu_tanh_grad_d, pow)

/* Bit-packed relu mask: bit i of m (byte i / 8, bit i % 8) is y[i] > 0. */
#define RELU_MASK(T, IT)                                                                         \
    static void relu_mask_##T(const T *restrict y, uint8_t *restrict m, int64_t n) {         \
        int64_t nb = n / 8;                                                                  \
        _Pragma("omp parallel for if (n > 65536)")                                           \
        for (int64_t b = 0; b < nb; b++) {                                                   \
            const T *p = y + 8 * b;                                                          \
            unsigned v = 0;                                                                  \
            for (int k = 0; k < 8; k++) v |= (unsigned)(p[k] > 0) << k;                      \
            m[b] = (uint8_t)v;                                                               \
        }                                                                                    \
        if (nb * 8 < n) {                                                                    \
            unsigned v = 0;                                                                  \
            for (int64_t i = nb * 8; i < n; i++) v |= (unsigned)(y[i] > 0) << (i - nb * 8);  \
            m[nb] = (uint8_t)v;                                                              \
        }                                                                                    \
    }                                                                                        \
    /* dx = bit i ? g : 0 — the same values as (y > 0 ? g : 0) */                          \
    static void relu_mask_bwd_##T(const T *restrict g, const uint8_t *restrict m,            \
                                  T *restrict dx, int64_t n) {                               \
        /* whole bytes with constant shifts (vectorises), then the tail */                   \
        int64_t nb = n / 8;                                                                  \
        _Pragma("omp parallel for if (n > 65536)")                                           \
        for (int64_t b = 0; b < nb; b++) {                                                   \
            /* select through bit masks: exact (+0.0 where dropped), and it vectorises */    \
            unsigned v = m[b];                                                               \
            IT gb[8], keep[8];                                                               \
            memcpy(gb, g + 8 * b, sizeof gb);                                                \
            for (int k = 0; k < 8; k++) keep[k] = (IT)0 - (IT)((v >> k) & 1u);               \
            for (int k = 0; k < 8; k++) gb[k] &= keep[k];                                    \
            memcpy(dx + 8 * b, gb, sizeof gb);                                               \
        }                                                                                    \
        for (int64_t i = nb * 8; i < n; i++) dx[i] = (m[i >> 3] >> (i & 7)) & 1u ? g[i] : (T)0; \
    }
RELU_MASK(float, uint32_t)
RELU_MASK(double, uint64_t)

typedef struct uctx {
    uop op;
    double p;
} uctx;

static int unary_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    uctx *c = node->ctx;
    remat_tensor *s = NULL, *g = NULL, *dx = NULL;
    int rc = REMAT_OK;
    if (k_uinfo[c->op].needs_saved) {
        rc = rm_node_unpack(node, 0, &s);
        if (rc) return rc;
        remat_tensor *sc;
        rc = rm_contig(&sc, s);
        remat_release(s);
        s = sc;
        if (rc) return rc;
    }
    rc = rm_contig(&g, gout[0]);
    if (rc) goto out;
    rc = rm_new_output(&dx, g->ndim, g->shape, g->dtype, g->storage->device);
    if (rc) goto out;
    int64_t n = remat_numel(g);
    if (c->op == U_RELU) {
        /* s is the bit mask (u8, ceil(n / 8) bytes) */
        if (!s || s->dtype != REMAT_U8 || remat_numel(s) != (n + 7) / 8) {
            rc = rm_err(REMAT_ESTATE, "%s: the saved relu mask does not match the gradient",
                        node->name);
            goto out;
        }
        if (rm_ptr(dx) && rm_ptr(g) && rm_ptr(s)) {
            if (g->dtype == REMAT_F32) relu_mask_bwd_float(rm_ptr(g), rm_ptr(s), rm_ptr(dx), n);
            else relu_mask_bwd_double(rm_ptr(g), rm_ptr(s), rm_ptr(dx), n);
        }
    } else if (rm_ptr(dx)) {
        if (g->dtype == REMAT_F32)
            bwd_float(c->op, rm_ptr(g), s ? rm_ptr(s) : NULL, rm_ptr(dx), n, (float)c->p);
        else
            bwd_double(c->op, rm_ptr(g), s ? rm_ptr(s) : NULL, rm_ptr(dx), n, c->p);
    }
    gin[0] = dx;
    dx = NULL;
out:
    remat_release(s);
    remat_release(g);
    remat_release(dx);
    return rc;
}

/* Saves relu's bit mask of y into slot 0 (a data-less mask in skip mode). */
static int save_relu_mask(remat_node *node, remat_tensor *y, const char *call) {
    int64_t n = remat_numel(y), nb = (n + 7) / 8;
    remat_tensor *m = NULL;
    int rc = rm_new_output(&m, 1, &nb, REMAT_U8, y->storage->device);
    if (rc) return rm_err_prefix(rc, call);
    if (rm_ptr(m) && rm_ptr(y)) {
        if (y->dtype == REMAT_F32) relu_mask_float(rm_ptr(y), rm_ptr(m), n);
        else relu_mask_double(rm_ptr(y), rm_ptr(m), n);
    }
    rc = rm_op_save(node, 0, m);
    remat_release(m);
    return rc;
}

static int unary_impl(uop op, remat_tensor **out, remat_tensor *a, double p) {
    const char *call = k_uinfo[op].call;
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_float(call, "a", a);
    if (rc) return rc;
    remat_tensor *x = NULL, *y = NULL;
    remat_node *node = NULL;
    const uinfo *ui = &k_uinfo[op];
    /* An op that saves its input makes its node and saves before the kernel
     * (rm_save_before_kernel in internal.h); relu's mask and the saved outputs
     * of exp, tanh, ... can only be saved after it. */
    const bool save_in = ui->needs_saved && !ui->save_out && op != U_RELU;
    if (rm_needs_grad(1, &a)) {
        rc = rm_node_new(&node, ui->node, unary_backward, 1, &a, 1, ui->needs_saved ? 1 : 0);
        if (rc) return rm_err_prefix(rc, call);
        uctx *c = malloc(sizeof *c);
        if (!c) {
            rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            goto fail;
        }
        c->op = op;
        c->p = p;
        rm_node_set_ctx(node, c, NULL);
        if (save_in && (rc = rm_op_save(node, 0, a))) goto fail;
    }
    rc = rm_contig(&x, a);
    if (!rc) rc = rm_new_output(&y, a->ndim, a->shape, a->dtype, a->storage->device);
    if (rc) goto fail;
    int64_t n = remat_numel(a);
    if (rm_ptr(y) && rm_ptr(x)) {
        if (a->dtype == REMAT_F32) fwd_float(op, rm_ptr(x), rm_ptr(y), n, (float)p);
        else fwd_double(op, rm_ptr(x), rm_ptr(y), n, p);
    }
    if (node) {
        rm_node_set_output(node, 0, y);
        if (op == U_RELU) rc = save_relu_mask(node, y, call);
        else if (ui->needs_saved && !save_in) rc = rm_op_save(node, 0, y);
        if (rc) goto fail;
        rm_node_release(node);
    }
    remat_release(x);
    return rm_hand_out(out, y);
fail:
    rm_node_release(node);
    remat_release(x);
    remat_release(y);
    return rm_err_prefix(rc, call);
}

/* The public entry: interception bracket around unary_impl (site: the
 * caller of the public function). */
static int unary_op_named(const char *name, uop op, remat_tensor **out, remat_tensor *a,
                          double p, void *site) {
    remat_tensor *in[1] = {a};
    RM_OP_RUN1_AT(site, name, out, 1, in, NULL, unary_impl(op, out, a, p));
}
static int unary_op(uop op, remat_tensor **out, remat_tensor *a, double p, void *site) {
    return unary_op_named(k_uinfo[op].call, op, out, a, p, site);
}

#define S RM_OP_SITE()
int remat_neg(remat_tensor **out, remat_tensor *a) { return unary_op(U_NEG, out, a, 0, S); }
int remat_exp(remat_tensor **out, remat_tensor *a) { return unary_op(U_EXP, out, a, 0, S); }
int remat_log(remat_tensor **out, remat_tensor *a) { return unary_op(U_LOG, out, a, 0, S); }
int remat_sqrt(remat_tensor **out, remat_tensor *a) { return unary_op(U_SQRT, out, a, 0, S); }
int remat_tanh(remat_tensor **out, remat_tensor *a) { return unary_op(U_TANH, out, a, 0, S); }
int remat_sigmoid(remat_tensor **out, remat_tensor *a) { return unary_op(U_SIGMOID, out, a, 0, S); }
int remat_relu(remat_tensor **out, remat_tensor *a) { return unary_op(U_RELU, out, a, 0, S); }
int remat_gelu(remat_tensor **out, remat_tensor *a, remat_gelu_approx approximate) {
    if (approximate != REMAT_GELU_ERF && approximate != REMAT_GELU_TANH)
        return rm_err(REMAT_EINVAL, "remat_gelu: approximate must be REMAT_GELU_ERF or "
                      "REMAT_GELU_TANH, got %d", (int)approximate);
    return unary_op(approximate == REMAT_GELU_ERF ? U_GELU_ERF : U_GELU_TANH, out, a, 0, S);
}
int remat_pow_scalar(remat_tensor **out, remat_tensor *a, double exponent) {
    return unary_op(U_POW, out, a, exponent, S);
}
int remat_add_scalar(remat_tensor **out, remat_tensor *a, double s) {
    return unary_op(U_ADD, out, a, s, S);
}
int remat_sub_scalar(remat_tensor **out, remat_tensor *a, double s) {
    return unary_op_named("remat_sub_scalar", U_ADD, out, a, -s, S);
}
int remat_rsub_scalar(remat_tensor **out, remat_tensor *a, double s) {
    return unary_op(U_RSUB, out, a, s, S);
}
int remat_mul_scalar(remat_tensor **out, remat_tensor *a, double s) {
    return unary_op(U_MUL, out, a, s, S);
}
int remat_div_scalar(remat_tensor **out, remat_tensor *a, double s) {
    if (s == 0.0) /* as P: x / 0 = inf/nan */
        return unary_op_named("remat_div_scalar", U_MUL, out, a, INFINITY, S);
    return unary_op_named("remat_div_scalar", U_MUL, out, a, 1.0 / s, S);
}
#undef S
