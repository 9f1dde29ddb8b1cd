/* tests/test_ops_nn.c — softmax, log_softmax, layer_norm, dropout,
 * embedding, cross_entropy and mse_loss: hand-computed values, invariants
 * (rows sum to 1, normalised mean/var), dropout's RNG contract (seeded,
 * thread-count independent, skip mode advances the generator), f64
 * gradchecks (strided inputs, middle dims) and argument errors. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "support/rt.h"

static void assert_values(const remat_tensor *t, int n, const double *expect, double tol,
                          const char *what) {
    cr_assert_eq(remat_numel(t), n, "%s: numel %lld, expected %d", what, (long long)remat_numel(t),
                 n);
    double *v = rt_values(t);
    for (int i = 0; i < n; i++)
        cr_assert(fabs(v[i] - expect[i]) <= tol * (1 + fabs(expect[i])),
                  "%s: element %d is %.10g, expected %.10g", what, i, v[i], expect[i]);
    free(v);
}

static remat_tensor *i64_tensor(int nd, const int64_t *shape, const double *v) {
    return rt_tensor(nd, shape, REMAT_I64, v);
}

#define GRADCHECK_CASE(fn, ud, n, ins, what)                                                       \
    do {                                                                                           \
        char m_[2048];                                                                             \
        cr_assert(rt_gradcheck((fn), (ud), (n), (ins), 1e-6, 1e-5, 1e-4, m_, sizeof m_),           \
                  "gradcheck %s: %s", (what), m_);                                                 \
    } while (0)

/* ---- softmax / log_softmax ---------------------------------------------------------------- */
Test(nn, softmax_hand_computed) {
    int64_t s[2] = {2, 3};
    double v[6] = {1, 2, 3, 1000, 1001, 1002}; /* second row: stability */
    remat_tensor *a = rt_tensor(2, s, REMAT_F64, v), *y = NULL, *ly = NULL;
    RT_OK(remat_softmax(&y, a, -1));
    double z = exp(1) + exp(2) + exp(3);
    double e[6] = {exp(1) / z, exp(2) / z, exp(3) / z, exp(1) / z, exp(2) / z, exp(3) / z};
    assert_values(y, 6, e, 1e-14, "softmax");
    RT_OK(remat_log_softmax(&ly, a, 1));
    double le[6];
    for (int i = 0; i < 6; i++) le[i] = log(e[i]);
    assert_values(ly, 6, le, 1e-13, "log_softmax");
    remat_release(y);
    remat_release(ly);
    /* over dim 0: columns */
    RT_OK(remat_softmax(&y, a, 0));
    double *c = rt_values(y);
    for (int j = 0; j < 3; j++) {
        cr_assert(fabs(c[j]) < 1e-300 || c[j] < 1e-100, "tiny column entry, got %g", c[j]);
        cr_assert(fabs(c[3 + j] - 1) < 1e-15, "column %d: %g", j, c[3 + j]);
    }
    free(c);
    remat_release(y);
    remat_release(a);
    /* -inf entries get probability 0, a row of all -inf does not produce inf - inf */
    double vi[3] = {-INFINITY, 0, 0};
    int64_t s3 = 3;
    a = rt_tensor(1, &s3, REMAT_F32, vi);
    RT_OK(remat_softmax(&y, a, 0));
    assert_values(y, 3, (double[]){0, 0.5, 0.5}, 1e-7, "softmax with -inf");
    remat_release(y);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(nn, softmax_rows_sum_to_one_any_dim) {
    int64_t s[3] = {5, 37, 70};
    for (int dt = 0; dt < 2; dt++) {
        remat_tensor *a = rt_rand(3, s, dt ? REMAT_F64 : REMAT_F32, -8, 8, 5);
        for (int dim = -3; dim < 3; dim++) {
            remat_tensor *y = NULL, *ly = NULL, *sm = NULL, *ey = NULL;
            RT_OK(remat_softmax(&y, a, dim));
            RT_OK(remat_sum(&sm, y, 1, &dim, false));
            double *v = rt_values(sm);
            for (int64_t i = 0; i < remat_numel(sm); i++)
                cr_assert(fabs(v[i] - 1) < (dt ? 1e-12 : 1e-5), "dim %d: row %lld sums to %.9g",
                          dim, (long long)i, v[i]);
            free(v);
            /* exp(log_softmax) == softmax */
            RT_OK(remat_log_softmax(&ly, a, dim));
            RT_OK(remat_exp(&ey, ly));
            rt_assert_close(ey, y, dt ? 1e-13 : 1e-6, 1e-5, "exp(log_softmax) vs softmax");
            remat_release(y);
            remat_release(ly);
            remat_release(sm);
            remat_release(ey);
        }
        remat_release(a);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The f32 kernels use their own vectorised exp: compare with f64 over wide
 * rows and a wide input range (including underflow to subnormals / 0). */
Test(nn, f32_softmax_and_cross_entropy_match_f64) {
    int64_t s[2] = {8, 5000}, n8 = 8;
    remat_tensor *x64 = rt_rand(2, s, REMAT_F64, -60, 60, 4), *x32 = NULL;
    RT_OK(remat_to_dtype(&x32, x64, REMAT_F32));
    remat_tensor *x32d = NULL; /* the f32 values, in f64, for a fair reference */
    RT_OK(remat_to_dtype(&x32d, x32, REMAT_F64));
    for (int op = 0; op < 2; op++) {
        remat_tensor *a = NULL, *b = NULL, *b32 = NULL;
        RT_OK(op ? remat_log_softmax(&a, x32, 1) : remat_softmax(&a, x32, 1));
        RT_OK(op ? remat_log_softmax(&b, x32d, 1) : remat_softmax(&b, x32d, 1));
        RT_OK(remat_to_dtype(&b32, b, REMAT_F32));
        /* softmax: relative error (rounding x - max in f32 alone gives up to ~4e-6 at
         * |x - max| ~ 100); probabilities below 1e-30 only need to be tiny */
        double *va = rt_values(a), *vb = rt_values(b);
        for (int64_t i = 0; i < 8 * 5000; i++) {
            double tol = op ? 2e-6 * (1 + fabs(vb[i])) : (vb[i] < 1e-30 ? 1e-30 : 1.5e-5 * vb[i]);
            cr_assert(fabs(va[i] - vb[i]) <= tol, "%s elem %lld: %.9g vs %.9g",
                      op ? "log_softmax" : "softmax", (long long)i, va[i], vb[i]);
        }
        free(va);
        free(vb);
        remat_release(a);
        remat_release(b);
        remat_release(b32);
    }
    remat_tensor *t = i64_tensor(1, &n8, (double[]){0, 4999, 17, 2500, 3, 3, 100, 4000});
    remat_tensor *l32 = NULL, *l64 = NULL;
    RT_OK(remat_cross_entropy(&l32, x32, t, -100));
    RT_OK(remat_cross_entropy(&l64, x32d, t, -100));
    double v32, v64;
    RT_OK(remat_item(l32, &v32));
    RT_OK(remat_item(l64, &v64));
    cr_assert(fabs(v32 - v64) <= 1e-5 * fabs(v64), "cross_entropy f32 %.9g vs f64 %.9g", v32, v64);
    remat_release(l32);
    remat_release(l64);
    remat_release(t);
    remat_release(x32d);
    remat_release(x32);
    remat_release(x64);
    cr_assert_eq(remat_live_tensors(), 0);
}

typedef struct dim_args {
    int op; /* 0 softmax, 1 log_softmax */
    int dim;
    bool transpose;
} dim_args;

static int call_softmax(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    dim_args *d = ud;
    remat_tensor *x = in[0], *t = NULL;
    if (d->transpose) {
        int rc = remat_transpose(&t, x, 0, 1);
        if (rc) return rc;
        x = t;
    }
    int rc = d->op ? remat_log_softmax(out, x, d->dim) : remat_softmax(out, x, d->dim);
    remat_release(t);
    return rc;
}

Test(nn, gradcheck_softmax_log_softmax) {
    int64_t s[3] = {3, 4, 5};
    for (int op = 0; op < 2; op++)
        for (int dim = -1; dim < 3; dim++)
            for (int tr = 0; tr < 2; tr++) {
                dim_args d = {op, dim, tr};
                remat_tensor *a = rt_leaf(rt_rand(3, s, REMAT_F64, -2, 2, (unsigned)(dim + 5)));
                char what[64];
                snprintf(what, sizeof what, "%s dim %d transpose %d",
                         op ? "log_softmax" : "softmax", dim, tr);
                GRADCHECK_CASE(call_softmax, &d, 1, &a, what);
                remat_release(a);
            }
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(nn, softmax_errors) {
    int64_t s[2] = {2, 3};
    remat_tensor *a = rt_rand(2, s, REMAT_F32, -1, 1, 1), *y = NULL, *i = NULL;
    RT_FAILS(remat_softmax(&y, a, 2), REMAT_EINVAL, "remat_softmax: dim 2 out of range");
    RT_FAILS(remat_log_softmax(&y, a, -3), REMAT_EINVAL, "remat_log_softmax");
    RT_FAILS(remat_softmax(&y, NULL, 0), REMAT_EINVAL, "remat_softmax");
    RT_FAILS(remat_softmax(NULL, a, 0), REMAT_EINVAL, "remat_softmax");
    RT_OK(remat_arange(&i, 3));
    RT_FAILS(remat_log_softmax(&y, i, 0), REMAT_EDTYPE, "remat_log_softmax");
    cr_assert_null(y);
    remat_release(i);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- gelu (erf) f32 kernels ---------------------------------------------------------------
 * The f32 forward and backward (vectorised Phi through erfcx, one shared exp)
 * against f64 over a dense range: relative accuracy in the left tail where
 * x * Phi(x) is tiny, absolute near the zero of the derivative. */
Test(nn, gelu_erf_f32_accuracy) {
    int64_t n = 48001;
    double *xv = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) xv[i] = -12.0 + 24.0 * (double)i / (double)(n - 1);
    remat_tensor *x32 = rt_leaf(rt_tensor(1, &n, REMAT_F32, xv)), *y32 = NULL, *g32 = NULL;
    free(xv);
    remat_tensor *ones = NULL;
    RT_OK(remat_full(&ones, 1, &n, 1.0, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_gelu(&y32, x32, REMAT_GELU_ERF));
    RT_OK(remat_grad(1, &y32, &ones, 1, &x32, false, false, &g32));
    double *x = rt_values(x32), *y = rt_values(y32), *g = rt_values(g32);
    for (int64_t i = 0; i < n; i++) {
        double phi = 0.5 * erfc(-x[i] / sqrt(2.0)); /* f64 reference, no cancellation */
        double ye = x[i] * phi, ge = phi + x[i] * exp(-0.5 * x[i] * x[i]) / sqrt(2 * M_PI);
        /* relative in the forward (x^2 rounds in f32: exp(-x^2/2) is off by x^2 * 2^-25) */
        double rtol = 1e-6 + 6e-8 * x[i] * x[i];
        cr_assert(fabs(y[i] - ye) <= rtol * fabs(ye), "gelu(%.9g) = %.9g, expected %.9g", x[i],
                  y[i], ye);
        cr_assert(fabs(g[i] - ge) <= 1e-6 * fabs(ge) + 3e-7, "gelu'(%.9g) = %.9g, expected %.9g",
                  x[i], g[i], ge);
    }
    free(x);
    free(y);
    free(g);
    /* special values: NaN stays NaN, +inf -> inf, 0 -> 0, the far left tail -> 0 */
    int64_t k = 4;
    double sv[4] = {NAN, INFINITY, 0.0, -30.0};
    remat_tensor *s = rt_tensor(1, &k, REMAT_F32, sv), *ys = NULL;
    RT_OK(remat_gelu(&ys, s, REMAT_GELU_ERF));
    double *yv = rt_values(ys);
    cr_assert(isnan(yv[0]) && yv[1] == INFINITY && yv[2] == 0.0 && yv[3] == 0.0,
              "gelu specials: %g %g %g %g", yv[0], yv[1], yv[2], yv[3]);
    free(yv);
    remat_tensor *rl[] = {x32, y32, g32, ones, s, ys};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The f32 tanh-form GELU (computed as x * sigmoid(2u)) and its derivative
 * against long double references of the tanh formula, written in the
 * sigmoid form where 1 + tanh(u) would cancel. */
Test(nn, gelu_tanh_f32_accuracy) {
    int64_t n = 48001;
    double *xv = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) xv[i] = -12.0 + 24.0 * (double)i / (double)(n - 1);
    remat_tensor *x32 = rt_leaf(rt_tensor(1, &n, REMAT_F32, xv)), *y32 = NULL, *g32 = NULL;
    free(xv);
    remat_tensor *ones = NULL;
    RT_OK(remat_full(&ones, 1, &n, 1.0, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_gelu(&y32, x32, REMAT_GELU_TANH));
    RT_OK(remat_grad(1, &y32, &ones, 1, &x32, false, false, &g32));
    double *x = rt_values(x32), *y = rt_values(y32), *g = rt_values(g32);
    for (int64_t i = 0; i < n; i++) {
        long double v = x[i], k = 0.7978845608028654L;
        long double u = k * (v + 0.044715L * v * v * v), du = k * (1 + 3 * 0.044715L * v * v);
        long double s = 1 / (1 + expl(-2 * u)); /* 0.5 (1 + tanh u) */
        double ye = (double)(v * s), ge = (double)(s + 2 * v * s * (1 - s) * du);
        /* relative in the forward: u's rounding is amplified by exp(-2u) in the left tail */
        double rtol = 1e-6 + 5e-7 * fabs((double)u);
        /* (exp is clamped at exp(88): a floor of ~1e-38 * |x| in the far left tail) */
        cr_assert(fabs(y[i] - ye) <= rtol * fabs(ye) + 1e-36,
                  "gelu_tanh(%.9g) = %.9g, expected %.9g", x[i], y[i], ye);
        cr_assert(fabs(g[i] - ge) <= 1e-6 * fabs(ge) + 3e-7,
                  "gelu_tanh'(%.9g) = %.9g, expected %.9g", x[i], g[i], ge);
    }
    free(x);
    free(y);
    free(g);
    /* special values and the ends of the exp's range (past 88 the result is x * 0, below
     * -87 the exp is clamped): NaN stays NaN, -inf gives NaN (as PyTorch), the far tails
     * 0 and x; the derivative 0 and 1 there */
    int64_t k = 8;
    double sv[8] = {NAN, INFINITY, 0.0, -INFINITY, -30.0, 30.0, -1e30, 1e30};
    remat_tensor *sp = rt_leaf(rt_tensor(1, &k, REMAT_F32, sv)), *ys = NULL, *gs = NULL;
    remat_tensor *ones8 = NULL;
    RT_OK(remat_full(&ones8, 1, &k, 1.0, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_gelu(&ys, sp, REMAT_GELU_TANH));
    RT_OK(remat_grad(1, &ys, &ones8, 1, &sp, false, false, &gs));
    double *yv = rt_values(ys), *gv = rt_values(gs);
    cr_assert(isnan(yv[0]) && yv[1] == INFINITY && yv[2] == 0.0 && isnan(yv[3]) && yv[4] == 0.0 &&
                  yv[5] == 30.0 && yv[6] == 0.0 && yv[7] == 1e30f,
              "gelu_tanh specials: %g %g %g %g %g %g %g %g", yv[0], yv[1], yv[2], yv[3], yv[4],
              yv[5], yv[6], yv[7]);
    cr_assert(isnan(gv[0]) && gv[2] == 0.5 && gv[4] == 0.0 && gv[5] == 1.0,
              "gelu_tanh' specials: %g %g %g %g", gv[0], gv[2], gv[4], gv[5]);
    free(yv);
    free(gv);
    remat_tensor *rl[] = {x32, y32, g32, ones, sp, ys, gs, ones8};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- layer_norm ----------------------------------------------------------------------------- */
Test(nn, layer_norm_values) {
    int64_t s[2] = {2, 3};
    double v[6] = {1, 2, 3, -2, 0, 8};
    int64_t c3 = 3;
    remat_tensor *x = rt_tensor(2, s, REMAT_F64, v);
    remat_tensor *w = rt_tensor(1, &c3, REMAT_F64, (double[]){1, 2, 3});
    remat_tensor *b = rt_tensor(1, &c3, REMAT_F64, (double[]){0, 1, -1});
    remat_tensor *y = NULL;
    RT_OK(remat_layer_norm(&y, x, 1, w, b, 1e-5));
    double e[6];
    for (int r = 0; r < 2; r++) {
        double m = (v[3 * r] + v[3 * r + 1] + v[3 * r + 2]) / 3, var = 0;
        for (int c = 0; c < 3; c++) var += (v[3 * r + c] - m) * (v[3 * r + c] - m);
        var /= 3;
        double ws[3] = {1, 2, 3}, bs[3] = {0, 1, -1};
        for (int c = 0; c < 3; c++)
            e[3 * r + c] = (v[3 * r + c] - m) / sqrt(var + 1e-5) * ws[c] + bs[c];
    }
    assert_values(y, 6, e, 1e-12, "layer_norm");
    remat_release(y);
    remat_release(x);
    remat_release(w);
    remat_release(b);
    /* no affine params: mean ~0, var ~1 per row, over the last 2 dims */
    int64_t s3[3] = {4, 16, 32};
    for (int dt = 0; dt < 2; dt++) {
        x = rt_rand(3, s3, dt ? REMAT_F64 : REMAT_F32, -3, 7, 9);
        RT_OK(remat_layer_norm(&y, x, 2, NULL, NULL, 1e-5));
        double *o = rt_values(y);
        for (int r = 0; r < 4; r++) {
            double m = 0, q = 0;
            for (int i = 0; i < 512; i++) m += o[r * 512 + i];
            m /= 512;
            for (int i = 0; i < 512; i++) q += (o[r * 512 + i] - m) * (o[r * 512 + i] - m);
            q /= 512;
            cr_assert(fabs(m) < 1e-5, "row %d mean %g", r, m);
            cr_assert(fabs(q - 1) < 1e-3, "row %d var %g", r, q);
        }
        free(o);
        remat_release(y);
        remat_release(x);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

typedef struct ln_args {
    int n_norm;
    bool use_w, use_b, transpose;
} ln_args;

static int call_ln(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    ln_args *a = ud;
    remat_tensor *x = in[0], *t = NULL;
    if (a->transpose) {
        int rc = remat_transpose(&t, x, 0, 1);
        if (rc) return rc;
        x = t;
    }
    int rc =
        remat_layer_norm(out, x, a->n_norm, a->use_w ? in[1] : NULL, a->use_b ? in[2] : NULL, 1e-5);
    remat_release(t);
    return rc;
}

Test(nn, gradcheck_layer_norm) {
    int64_t s[3] = {3, 4, 5};
    ln_args cases[] = {
        {1, true, true, false},  {1, false, false, false}, {1, true, false, false},
        {1, false, true, false}, {2, true, true, false},   {1, true, true, true},
        {3, true, true, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ln_args *c = &cases[k];
        int nn = c->n_norm;
        int64_t xs[3] = {s[0], s[1], s[2]};
        if (c->transpose) { /* x is transposed inside f: its last dims are (3, 5) */
            xs[0] = 4;
            xs[1] = 3;
        }
        remat_tensor *x = rt_leaf(rt_rand(3, xs, REMAT_F64, -2, 2, (unsigned)k + 1));
        const int64_t *ns = c->transpose ? (int64_t[]){5} : s + 3 - nn;
        remat_tensor *w = rt_leaf(rt_rand(nn, ns, REMAT_F64, 0.5, 1.5, (unsigned)k + 20));
        remat_tensor *b = rt_leaf(rt_rand(nn, ns, REMAT_F64, -1, 1, (unsigned)k + 40));
        remat_tensor *ins[3] = {x, w, b};
        char what[64];
        snprintf(what, sizeof what, "layer_norm case %zu", k);
        GRADCHECK_CASE(call_ln, c, 3, ins, what);
        remat_release(x);
        remat_release(w);
        remat_release(b);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* llm.c-style (N, C) layer norm in f32 agrees with the f64 result. */
Test(nn, layer_norm_f32_matches_f64) {
    int64_t s[2] = {64, 768}, c = 768;
    remat_tensor *x64 = rt_leaf(rt_rand(2, s, REMAT_F64, -2, 2, 3));
    remat_tensor *w64 = rt_leaf(rt_rand(1, &c, REMAT_F64, 0.5, 1.5, 4));
    remat_tensor *b64 = rt_leaf(rt_rand(1, &c, REMAT_F64, -1, 1, 5));
    remat_tensor *x32 = NULL, *w32 = NULL, *b32 = NULL;
    RT_OK(remat_to_dtype(&x32, x64, REMAT_F32));
    RT_OK(remat_to_dtype(&w32, w64, REMAT_F32));
    RT_OK(remat_to_dtype(&b32, b64, REMAT_F32));
    remat_tensor *xs[2] = {x32, x64}, *ws[2] = {w32, w64}, *bs[2] = {b32, b64};
    remat_tensor *y[2], *l[2], *g[2][3];
    for (int k = 0; k < 2; k++) {
        remat_tensor *ys = NULL;
        RT_OK(remat_layer_norm(&y[k], xs[k], 1, ws[k], bs[k], 1e-5));
        RT_OK(remat_mul(&ys, y[k], y[k]));
        RT_OK(remat_sum_all(&l[k], ys));
        remat_tensor *in[3] = {x64, w64, b64};
        RT_OK(remat_grad(1, &l[k], NULL, 3, in, false, false, g[k]));
        remat_release(ys);
    }
    rt_assert_close(y[0], y[1], 1e-5, 1e-4, "layer_norm f32 vs f64");
    for (int i = 0; i < 3; i++) rt_assert_close(g[0][i], g[1][i], 1e-3, 1e-3, "grads f32 vs f64");
    for (int k = 0; k < 2; k++) {
        remat_release(y[k]);
        remat_release(l[k]);
        for (int i = 0; i < 3; i++) remat_release(g[k][i]);
    }
    remat_release(x32);
    remat_release(w32);
    remat_release(b32);
    remat_release(x64);
    remat_release(w64);
    remat_release(b64);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Naive f64 layer norm over the last dim of x (N, C) and its backward for
 * the upstream gradient g: y, dx, dw, db (w, b may be NULL: ones, zeros). */
static void ln_reference(const double *x, const double *w, const double *b, const double *g,
                         int64_t N, int64_t C, double eps, double *y, double *dx, double *dw,
                         double *db) {
    for (int64_t c = 0; c < C; c++) dw[c] = db[c] = 0;
    for (int64_t n = 0; n < N; n++) {
        const double *xn = x + n * C, *gn = g + n * C;
        double m = 0, v = 0, s1 = 0, s2 = 0;
        for (int64_t c = 0; c < C; c++) m += xn[c];
        m /= (double)C;
        for (int64_t c = 0; c < C; c++) v += (xn[c] - m) * (xn[c] - m);
        double rs = 1.0 / sqrt(v / (double)C + eps);
        for (int64_t c = 0; c < C; c++) {
            double nv = (xn[c] - m) * rs, wv = w ? w[c] : 1.0;
            y[n * C + c] = nv * wv + (b ? b[c] : 0.0);
            s1 += wv * gn[c];
            s2 += wv * gn[c] * nv;
            dw[c] += nv * gn[c];
            db[c] += gn[c];
        }
        for (int64_t c = 0; c < C; c++) {
            double nv = (xn[c] - m) * rs, wv = w ? w[c] : 1.0;
            dx[n * C + c] = (wv * gn[c] - s1 / (double)C - nv * s2 / (double)C) * rs;
        }
    }
}

/* Max |got - want| / (atol + rtol |want|) over n elements (<= 1: within tolerance). */
static double worst_ratio(const remat_tensor *got, const double *want, int64_t n, double atol,
                          double rtol) {
    cr_assert_eq(remat_numel(got), n);
    double *v = rt_values(got), worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = fabs(v[i] - want[i]) / (atol + rtol * fabs(want[i]));
        if (!(r <= worst)) worst = r; /* NaN sticks */
    }
    free(v);
    return worst;
}

/* f32 layer norm forward and backward (dx, dweight, dbias) against a naive f64
 * reference on shapes that exercise every kernel path: several backward row
 * chunks with a short last one, a single row, widths that are not a multiple
 * of the lane count (16), with and without weight/bias, and rows with a
 * large common offset (the mean is taken of shifted data). */
Test(nn, layer_norm_f32_against_reference_odd_shapes) {
    struct {
        int64_t N, C;
        bool use_w, use_b;
        double offset;
    } cases[] = {
        {300, 37, true, true, 0},    {130, 16, true, false, 0}, {65, 5, false, true, 0},
        {200, 100, false, false, 0}, {1, 1000, true, true, 0},  {129, 48, true, true, 1000},
        {64, 33, true, true, -300},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int64_t N = cases[k].N, C = cases[k].C, s[2] = {N, C};
        remat_tensor *x64 = rt_rand(2, s, REMAT_F64, -2, 2, (unsigned)k + 7);
        if (cases[k].offset != 0) {
            remat_tensor *t = NULL;
            RT_OK(remat_add_scalar(&t, x64, cases[k].offset));
            remat_release(x64);
            x64 = t;
        }
        remat_tensor *w64 = rt_rand(1, &C, REMAT_F64, 0.5, 1.5, (unsigned)k + 8);
        remat_tensor *b64 = rt_rand(1, &C, REMAT_F64, -1, 1, (unsigned)k + 9);
        remat_tensor *g64 = rt_rand(2, s, REMAT_F64, -1, 1, (unsigned)k + 10);
        remat_tensor *x = NULL, *w = NULL, *b = NULL, *g = NULL;
        RT_OK(remat_to_dtype(&x, x64, REMAT_F32));
        RT_OK(remat_to_dtype(&w, w64, REMAT_F32));
        RT_OK(remat_to_dtype(&b, b64, REMAT_F32));
        RT_OK(remat_to_dtype(&g, g64, REMAT_F32));
        /* the reference runs on the f32 values, widened */
        remat_tensor *xr = NULL, *wr = NULL, *br = NULL, *gr = NULL;
        RT_OK(remat_to_dtype(&xr, x, REMAT_F64));
        RT_OK(remat_to_dtype(&wr, w, REMAT_F64));
        RT_OK(remat_to_dtype(&br, b, REMAT_F64));
        RT_OK(remat_to_dtype(&gr, g, REMAT_F64));
        double *xv = rt_values(xr), *wv = rt_values(wr), *bv = rt_values(br), *gv = rt_values(gr);
        double *ye = malloc(sizeof(double) * (size_t)(2 * N * C + 2 * C));
        double *dxe = ye + N * C, *dwe = dxe + N * C, *dbe = dwe + C;
        bool uw = cases[k].use_w, ub = cases[k].use_b;
        ln_reference(xv, uw ? wv : NULL, ub ? bv : NULL, gv, N, C, 1e-5, ye, dxe, dwe, dbe);
        rt_leaf(x);
        if (uw) rt_leaf(w);
        if (ub) rt_leaf(b);
        remat_tensor *y = NULL, *gin[3] = {NULL, NULL, NULL};
        RT_OK(remat_layer_norm(&y, x, 1, uw ? w : NULL, ub ? b : NULL, 1e-5));
        /* gradients for x, then weight and bias where used */
        int nin = 1 + (uw ? 1 : 0) + (ub ? 1 : 0);
        remat_tensor *ins[3] = {x, uw ? w : b, b};
        RT_OK(remat_grad(1, &y, &g, nin, ins, false, false, gin));
        /* with an offset, the f32 mean itself is rounded (to ulp(offset) / 2) */
        double at = 1e-5 + 2e-7 * fabs(cases[k].offset);
        double tol_y = worst_ratio(y, ye, N * C, at, 1e-4);
        double tol_dx = worst_ratio(gin[0], dxe, N * C, 10 * at, 1e-4);
        cr_assert(tol_y <= 1, "case %zu: y off by %.3g x tolerance", k, tol_y);
        cr_assert(tol_dx <= 1, "case %zu: dx off by %.3g x tolerance", k, tol_dx);
        int gi = 1;
        if (uw) {
            /* the rounded means' errors add up over the rows */
            double r = worst_ratio(gin[gi++], dwe, C, 1e-4 + 4 * at * sqrt((double)N), 1e-4);
            cr_assert(r <= 1, "case %zu: dweight off by %.3g x tolerance", k, r);
        }
        if (ub) {
            double r = worst_ratio(gin[gi++], dbe, C, 1e-4, 1e-4);
            cr_assert(r <= 1, "case %zu: dbias off by %.3g x tolerance", k, r);
        }
        free(xv);
        free(wv);
        free(bv);
        free(gv);
        free(ye);
        remat_tensor *rl[] = {x64, w64, b64, g64, x, w,      b,      g,
                              xr,  wr,  br,  gr,  y, gin[0], gin[1], gin[2]};
        for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* f64 gradcheck on shapes with several backward row chunks and a lane tail. */
Test(nn, gradcheck_layer_norm_multi_chunk) {
    int64_t s[2] = {130, 19}, c = 19;
    ln_args a = {1, true, true, false};
    remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F64, -2, 2, 61));
    remat_tensor *w = rt_leaf(rt_rand(1, &c, REMAT_F64, 0.5, 1.5, 62));
    remat_tensor *b = rt_leaf(rt_rand(1, &c, REMAT_F64, -1, 1, 63));
    remat_tensor *ins[3] = {x, w, b};
    GRADCHECK_CASE(call_ln, &a, 3, ins, "layer_norm 130 x 19");
    remat_release(x);
    remat_release(w);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Forward and every gradient are bitwise the same on 1 and 2 threads
 * (checkpoint recomputation relies on it). */
Test(nn, layer_norm_independent_of_thread_count) {
    int64_t s[2] = {1000, 200}, c = 200;
    remat_dtype dts[2] = {REMAT_F32, REMAT_F64};
    for (int d = 0; d < 2; d++) {
        remat_tensor *x = rt_leaf(rt_rand(2, s, dts[d], -2, 2, 71));
        remat_tensor *w = rt_leaf(rt_rand(1, &c, dts[d], 0.5, 1.5, 72));
        remat_tensor *b = rt_leaf(rt_rand(1, &c, dts[d], -1, 1, 73));
        remat_tensor *g = rt_rand(2, s, dts[d], -1, 1, 74);
        remat_tensor *y[2], *gr[2][3], *ins[3] = {x, w, b};
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            RT_OK(remat_layer_norm(&y[t], x, 1, w, b, 1e-5));
            RT_OK(remat_grad(1, &y[t], &g, 3, ins, false, false, gr[t]));
        }
        omp_set_num_threads(2);
        cr_assert(rt_bitwise_equal(y[0], y[1]), "layer_norm forward depends on the thread count");
        for (int i = 0; i < 3; i++)
            cr_assert(rt_bitwise_equal(gr[0][i], gr[1][i]),
                      "layer_norm gradient %d depends on the thread count", i);
        for (int t = 0; t < 2; t++) {
            remat_release(y[t]);
            for (int i = 0; i < 3; i++) remat_release(gr[t][i]);
        }
        remat_release(x);
        remat_release(w);
        remat_release(b);
        remat_release(g);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(nn, layer_norm_errors) {
    int64_t s[2] = {2, 3}, c3 = 3, c4 = 4;
    remat_tensor *x = rt_rand(2, s, REMAT_F32, -1, 1, 1), *y = NULL;
    remat_tensor *w4 = rt_rand(1, &c4, REMAT_F32, -1, 1, 2);
    remat_tensor *w64 = rt_rand(1, &c3, REMAT_F64, -1, 1, 2);
    RT_FAILS(remat_layer_norm(&y, x, 0, NULL, NULL, 1e-5), REMAT_EINVAL,
             "remat_layer_norm: n_norm");
    RT_FAILS(remat_layer_norm(&y, x, 3, NULL, NULL, 1e-5), REMAT_EINVAL, "n_norm 3");
    RT_FAILS(remat_layer_norm(&y, x, 1, w4, NULL, 1e-5), REMAT_ESHAPE, "remat_layer_norm: weight");
    RT_FAILS(remat_layer_norm(&y, x, 1, NULL, w4, 1e-5), REMAT_ESHAPE, "bias");
    RT_FAILS(remat_layer_norm(&y, x, 1, w64, NULL, 1e-5), REMAT_EDTYPE, "remat_layer_norm");
    RT_FAILS(remat_layer_norm(&y, x, 1, NULL, NULL, -1), REMAT_EINVAL, "eps");
    RT_FAILS(remat_layer_norm(&y, NULL, 1, NULL, NULL, 1e-5), REMAT_EINVAL, "remat_layer_norm");
    cr_assert_null(y);
    remat_release(x);
    remat_release(w4);
    remat_release(w64);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- dropout -------------------------------------------------------------------------------- */
Test(nn, dropout_statistics_and_scaling) {
    int64_t n = 1 << 20;
    remat_tensor *x = NULL, *y = NULL;
    RT_OK(remat_full(&x, 1, &n, 2.0, REMAT_F32, REMAT_DEVICE_CPU));
    double ps[3] = {0.1, 0.5, 0.9};
    for (int k = 0; k < 3; k++) {
        remat_manual_seed(42);
        RT_OK(remat_dropout(&y, x, ps[k], true));
        double *v = rt_values(y);
        int64_t zeros = 0;
        float kept = (float)(2.0 * (double)(float)(1.0 / (1.0 - ps[k])));
        for (int64_t i = 0; i < n; i++) {
            if (v[i] == 0) zeros++;
            else
                cr_assert_eq((float)v[i], kept, "p %g: kept value %g, expected %g", ps[k], v[i],
                             (double)kept);
        }
        double frac = (double)zeros / (double)n;
        cr_assert(fabs(frac - ps[k]) < 0.005, "p %g: fraction of zeros %g", ps[k], frac);
        free(v);
        remat_release_p(&y);
    }
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(nn, dropout_seeded_masks) {
    int64_t s[2] = {50, 40};
    remat_tensor *x = rt_rand(2, s, REMAT_F64, 1, 2, 1), *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    remat_manual_seed(7);
    RT_OK(remat_dropout(&a, x, 0.3, true));
    RT_OK(remat_dropout(&d, x, 0.3, true)); /* the generator advanced: a new mask */
    remat_manual_seed(7);
    RT_OK(remat_dropout(&b, x, 0.3, true));
    remat_manual_seed(8);
    RT_OK(remat_dropout(&c, x, 0.3, true));
    cr_assert(rt_bitwise_equal(a, b), "same seed must give the same mask");
    cr_assert(!rt_bitwise_equal(a, c), "different seeds must give different masks");
    cr_assert(!rt_bitwise_equal(a, d), "consecutive calls must give different masks");
    remat_release(a);
    remat_release(b);
    remat_release(c);
    remat_release(d);
    /* a strided input uses the same mask positions as its contiguous copy */
    remat_tensor *t = NULL, *tc = NULL;
    RT_OK(remat_transpose(&t, x, 0, 1));
    RT_OK(remat_contiguous(&tc, t));
    remat_manual_seed(3);
    RT_OK(remat_dropout(&a, t, 0.5, true));
    remat_manual_seed(3);
    RT_OK(remat_dropout(&b, tc, 0.5, true));
    cr_assert(rt_bitwise_equal(a, b), "strided input: mask differs from contiguous copy");
    remat_release(a);
    remat_release(b);
    remat_release(t);
    remat_release(tc);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The documented contract: element i (row-major) is kept iff
 * rm_u32_to_unit(word i%4 of Philox block counter + i/4) >= p, with the
 * counter reserved from the device generator. */
Test(nn, dropout_mask_follows_the_philox_contract) {
    int64_t n = 1003;
    remat_tensor *x = NULL, *y = NULL;
    RT_OK(remat_full(&x, 1, &n, 1.0, REMAT_F64, REMAT_DEVICE_CPU));
    double ps[3] = {0.3, 0.5, 1.0 / 3.0};
    for (int k = 0; k < 3; k++) {
        remat_manual_seed(77 + (uint64_t)k);
        uint32_t key[2];
        uint64_t ctr;
        RT_OK(rm_rng_reserve(REMAT_DEVICE_CPU, 0, key, &ctr)); /* peek: reserves nothing */
        RT_OK(remat_dropout(&y, x, ps[k], true));
        double *v = rt_values(y);
        for (int64_t i = 0; i < n; i++) {
            uint32_t r[4];
            rm_philox_block(key, ctr + (uint64_t)(i / 4), r);
            bool keep = rm_u32_to_unit(r[i % 4]) >= ps[k];
            cr_assert_eq(v[i] != 0, keep, "p %g element %lld: kept %d, contract says %d", ps[k],
                         (long long)i, v[i] != 0, keep);
        }
        free(v);
        remat_release_p(&y);
    }
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(nn, dropout_mask_independent_of_thread_count) {
    int64_t n = 300001; /* not a multiple of 4, above the parallel threshold */
    remat_tensor *x = rt_rand(1, &n, REMAT_F32, -1, 1, 2), *y[2] = {NULL, NULL};
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        remat_manual_seed(1234);
        RT_OK(remat_dropout(&y[t], x, 0.25, true));
    }
    omp_set_num_threads(2);
    cr_assert(rt_bitwise_equal(y[0], y[1]), "dropout mask depends on the thread count");
    remat_release(y[0]);
    remat_release(y[1]);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(nn, dropout_identity_and_edge_p) {
    int64_t s[2] = {3, 4};
    remat_tensor *x = rt_rand(2, s, REMAT_F32, -1, 1, 2), *y = NULL;
    uint8_t st0[REMAT_RNG_STATE_BYTES], st1[REMAT_RNG_STATE_BYTES];
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, st0));
    RT_OK(remat_dropout(&y, x, 0.5, false)); /* eval mode */
    cr_assert(rt_bitwise_equal(x, y), "eval-mode dropout must be the identity");
    cr_assert(remat_shares_storage(x, y));
    remat_release_p(&y);
    RT_OK(remat_dropout(&y, x, 0.0, true));
    cr_assert(rt_bitwise_equal(x, y), "p = 0 must be the identity");
    remat_release_p(&y);
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, st1));
    cr_assert(memcmp(st0, st1, sizeof st0) == 0, "identity dropout must not draw random numbers");
    RT_OK(remat_dropout(&y, x, 1.0, true));
    assert_values(y, 12, (double[12]){0}, 0, "p = 1 zeroes everything");
    remat_release_p(&y);
    RT_FAILS(remat_dropout(&y, x, -0.1, true), REMAT_EINVAL, "remat_dropout");
    RT_FAILS(remat_dropout(&y, x, 1.5, true), REMAT_EINVAL, "p must be in [0, 1]");
    RT_FAILS(remat_dropout(&y, x, NAN, false), REMAT_EINVAL, "remat_dropout");
    RT_FAILS(remat_dropout(&y, NULL, 0.5, true), REMAT_EINVAL, "remat_dropout");
    RT_FAILS(remat_dropout(NULL, x, 0.5, true), REMAT_EINVAL, "remat_dropout");
    cr_assert_null(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* In skip mode (early-stopped recomputation) dropout makes no data but
 * advances the generator exactly as a real call does. */
Test(nn, dropout_skip_mode_advances_rng) {
    int64_t s[2] = {7, 9};
    remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F32, -1, 1, 2)), *y = NULL, *z = NULL;
    uint8_t real[REMAT_RNG_STATE_BYTES], skip[REMAT_RNG_STATE_BYTES];
    remat_manual_seed(5);
    RT_OK(remat_dropout(&y, x, 0.3, true));
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, real));
    remat_release_p(&y);
    remat_manual_seed(5);
    bool prev = rm_set_skip_mode(true);
    int rc = remat_dropout(&y, x, 0.3, true);
    rm_set_skip_mode(prev);
    RT_OK(rc);
    cr_assert_null(remat_data(y));
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, skip));
    cr_assert(memcmp(real, skip, sizeof real) == 0, "skip mode must advance the RNG identically");
    /* and the next real draw matches */
    RT_OK(remat_dropout(&z, x, 0.3, true));
    remat_tensor *z2 = NULL, *y2 = NULL;
    remat_manual_seed(5);
    RT_OK(remat_dropout(&y2, x, 0.3, true));
    RT_OK(remat_dropout(&z2, x, 0.3, true));
    cr_assert(rt_bitwise_equal(z, z2));
    remat_release(y);
    remat_release(z);
    remat_release(y2);
    remat_release(z2);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int call_dropout(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    (void)ud;
    remat_manual_seed(99); /* the same mask on every evaluation */
    remat_tensor *t = NULL;
    int rc = remat_transpose(&t, in[0], 0, 1);
    if (rc) return rc;
    rc = remat_dropout(out, t, 0.4, true);
    remat_release(t);
    return rc;
}

Test(nn, dropout_gradcheck_and_mask_grad) {
    int64_t s[2] = {6, 5};
    remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F64, -1, 1, 2));
    GRADCHECK_CASE(call_dropout, NULL, 1, &x, "dropout");
    /* the grad is exactly the mask 0 or 1/(1-p) */
    remat_tensor *y = NULL, *l = NULL;
    remat_manual_seed(11);
    RT_OK(remat_dropout(&y, x, 0.25, true));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "DropoutBackward");
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    double *g = rt_values(remat_tensor_grad(x)), *yv = rt_values(y), *xv = rt_values(x);
    for (int i = 0; i < 30; i++) {
        double m = yv[i] == 0 ? 0 : 1 / 0.75;
        cr_assert(fabs(g[i] - m) < 1e-15, "elem %d: grad %g vs mask %g", i, g[i], m);
        if (m) cr_assert(fabs(yv[i] - xv[i] / 0.75) < 1e-15);
    }
    free(g);
    free(yv);
    free(xv);
    remat_release(y);
    remat_release(l);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- embedding ----------------------------------------------------------------------------- */
Test(nn, embedding_forward_and_repeated_index_grad) {
    int64_t ws[2] = {4, 3};
    double wv[12] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
    remat_tensor *w = rt_leaf(rt_tensor(2, ws, REMAT_F32, wv));
    int64_t is[2] = {2, 3};
    remat_tensor *idx = i64_tensor(2, is, (double[]){3, 1, 3, 0, 3, 1});
    remat_tensor *y = NULL, *l = NULL;
    RT_OK(remat_embedding(&y, w, idx));
    cr_assert_eq(remat_ndim(y), 3);
    cr_assert_eq(remat_size(y, 0), 2);
    cr_assert_eq(remat_size(y, 1), 3);
    cr_assert_eq(remat_size(y, 2), 3);
    assert_values(y, 18,
                  (double[]){30, 31, 32, 10, 11, 12, 30, 31, 32, 0, 1, 2, 30, 31, 32, 10, 11, 12},
                  0, "embedding");
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    assert_values(remat_tensor_grad(w), 12, (double[]){1, 1, 1, 2, 2, 2, 0, 0, 0, 3, 3, 3}, 0,
                  "embedding grad accumulates repeated indices");
    remat_release(l);
    remat_release(y);
    remat_release(idx);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int call_embedding(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    return remat_embedding(out, in[0], (remat_tensor *)ud);
}

Test(nn, gradcheck_embedding) {
    int64_t ws[2] = {5, 4}, is[2] = {3, 2};
    remat_tensor *w = rt_leaf(rt_rand(2, ws, REMAT_F64, -1, 1, 3));
    remat_tensor *idx = i64_tensor(2, is, (double[]){4, 0, 4, 2, 2, 4});
    GRADCHECK_CASE(call_embedding, idx, 1, &w, "embedding");
    /* a transposed weight (strided) */
    remat_tensor *idx1 = i64_tensor(1, (int64_t[]){4}, (double[]){1, 1, 0, 3});
    remat_tensor *wt = NULL, *y = NULL, *wc = NULL, *yc = NULL;
    RT_OK(remat_transpose(&wt, w, 0, 1)); /* (4, 5) */
    RT_OK(remat_contiguous(&wc, wt));
    RT_OK(remat_embedding(&y, wt, idx1));
    RT_OK(remat_embedding(&yc, wc, idx1));
    cr_assert(rt_bitwise_equal(y, yc));
    remat_release(y);
    remat_release(yc);
    remat_release(wc);
    remat_release(wt);
    remat_release(idx1);
    remat_release(idx);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(nn, embedding_errors) {
    int64_t ws[2] = {4, 3}, is[1] = {3};
    remat_tensor *w = rt_rand(2, ws, REMAT_F32, -1, 1, 1), *y = NULL;
    remat_tensor *bad = i64_tensor(1, is, (double[]){0, 4, 1});
    remat_tensor *neg = i64_tensor(1, is, (double[]){0, -1, 1});
    remat_tensor *fidx = rt_tensor(1, is, REMAT_F32, (double[]){0, 1, 2});
    RT_FAILS(remat_embedding(&y, w, bad), REMAT_EINVAL, "remat_embedding: index out of range");
    cr_assert(strstr(remat_last_error(), "indices[1]") && strstr(remat_last_error(), "= 4"),
              "message should name the position and value: %s", remat_last_error());
    RT_FAILS(remat_embedding(&y, w, neg), REMAT_EINVAL, "= -1");
    RT_FAILS(remat_embedding(&y, w, fidx), REMAT_EDTYPE, "remat_embedding");
    RT_FAILS(remat_embedding(&y, fidx, bad), REMAT_ESHAPE, "remat_embedding");
    RT_FAILS(remat_embedding(&y, NULL, bad), REMAT_EINVAL, "remat_embedding");
    RT_FAILS(remat_embedding(&y, w, NULL), REMAT_EINVAL, "remat_embedding");
    RT_FAILS(remat_embedding(&y, bad, bad), REMAT_EDTYPE, "remat_embedding");
    cr_assert_null(y);
    remat_release(w);
    remat_release(bad);
    remat_release(neg);
    remat_release(fidx);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- cross_entropy --------------------------------------------------------------------------- */
Test(nn, cross_entropy_values_and_ignore_index) {
    int64_t s[2] = {3, 3}, n3 = 3;
    double v[9] = {1, 2, 3, 0, 0, 0, 5, 1, -1};
    remat_tensor *x = rt_tensor(2, s, REMAT_F64, v), *y = NULL;
    remat_tensor *t = i64_tensor(1, &n3, (double[]){2, 1, 0});
    RT_OK(remat_cross_entropy(&y, x, t, -100));
    double l0 = log(exp(1) + exp(2) + exp(3)) - 3, l1 = log(3.0),
           l2 = log(exp(5) + exp(1) + exp(-1)) - 5;
    assert_values(y, 1, (double[]){(l0 + l1 + l2) / 3}, 1e-14, "cross_entropy");
    cr_assert_eq(remat_ndim(y), 0);
    remat_release_p(&y);
    remat_tensor *ti = i64_tensor(1, &n3, (double[]){2, -100, 0});
    RT_OK(remat_cross_entropy(&y, x, ti, -100));
    assert_values(y, 1, (double[]){(l0 + l2) / 2}, 1e-14, "cross_entropy with ignore_index");
    remat_release_p(&y);
    /* a custom ignore_index inside the class range */
    RT_OK(remat_cross_entropy(&y, x, t, 1));
    assert_values(y, 1, (double[]){(l0 + l2) / 2}, 1e-14, "cross_entropy ignore_index 1");
    remat_release_p(&y);
    /* every target ignored: NaN (as PyTorch's mean over zero elements) */
    remat_tensor *ta = i64_tensor(1, &n3, (double[]){-100, -100, -100});
    RT_OK(remat_cross_entropy(&y, x, ta, -100));
    double nv;
    RT_OK(remat_item(y, &nv));
    cr_assert(isnan(nv));
    remat_release_p(&y);
    remat_release(ta);
    /* grad of the ignored row is zero, others are (softmax - onehot)/count */
    rt_leaf(x);
    RT_OK(remat_cross_entropy(&y, x, ti, -100));
    RT_OK(remat_backward_scalar(y));
    double *g = rt_values(remat_tensor_grad(x));
    for (int c = 0; c < 3; c++) cr_assert_eq(g[3 + c], 0.0, "ignored row grad %g", g[3 + c]);
    double z = exp(1) + exp(2) + exp(3);
    cr_assert(fabs(g[2] - (exp(3) / z - 1) / 2) < 1e-15);
    cr_assert(fabs(g[0] - exp(1) / z / 2) < 1e-15);
    free(g);
    remat_release(y);
    remat_release(ti);
    remat_release(t);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

typedef struct ce_args {
    remat_tensor *targets;
    bool transpose;
} ce_args;

static int call_ce(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    ce_args *a = ud;
    remat_tensor *x = in[0], *t = NULL;
    if (a->transpose) {
        int rc = remat_transpose(&t, x, 0, 1);
        if (rc) return rc;
        x = t;
    }
    int rc = remat_cross_entropy(out, x, a->targets, -100);
    remat_release(t);
    return rc;
}

Test(nn, gradcheck_cross_entropy) {
    int64_t s[2] = {5, 4}, n5 = 5;
    remat_tensor *t = i64_tensor(1, &n5, (double[]){3, -100, 0, 3, 1});
    for (int tr = 0; tr < 2; tr++) {
        int64_t xs[2] = {tr ? 4 : 5, tr ? 5 : 4};
        remat_tensor *x = rt_leaf(rt_rand(2, xs, REMAT_F64, -3, 3, 5));
        ce_args a = {t, tr};
        GRADCHECK_CASE(call_ce, &a, 1, &x, tr ? "cross_entropy strided" : "cross_entropy");
        remat_release(x);
    }
    (void)s;
    /* f32 large logits stay finite */
    int64_t s2[2] = {2, 3}, n2 = 2;
    remat_tensor *x = rt_tensor(2, s2, REMAT_F32, (double[]){1000, 0, -1000, 50, 80, 60});
    remat_tensor *t2 = i64_tensor(1, &n2, (double[]){0, 1}), *y = NULL;
    RT_OK(remat_cross_entropy(&y, x, t2, -100));
    double v;
    RT_OK(remat_item(y, &v));
    cr_assert(isfinite(v) && v >= 0 && v < 1e-6, "large logits: loss %g", v);
    remat_release(y);
    remat_release(t2);
    remat_release(x);
    remat_release(t);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(nn, cross_entropy_errors) {
    int64_t s[2] = {3, 4}, n3 = 3, n2 = 2;
    remat_tensor *x = rt_rand(2, s, REMAT_F32, -1, 1, 1), *y = NULL;
    remat_tensor *bad = i64_tensor(1, &n3, (double[]){0, 4, 1});
    remat_tensor *neg = i64_tensor(1, &n3, (double[]){0, 1, -2});
    remat_tensor *short_t = i64_tensor(1, &n2, (double[]){0, 1});
    remat_tensor *ft = rt_tensor(1, &n3, REMAT_F32, (double[]){0, 1, 2});
    RT_FAILS(remat_cross_entropy(&y, x, bad, -100), REMAT_EINVAL,
             "remat_cross_entropy: target out of range");
    cr_assert(strstr(remat_last_error(), "targets[1] = 4"), "%s", remat_last_error());
    RT_FAILS(remat_cross_entropy(&y, x, neg, -100), REMAT_EINVAL, "targets[2] = -2");
    RT_FAILS(remat_cross_entropy(&y, x, short_t, -100), REMAT_ESHAPE, "remat_cross_entropy");
    RT_FAILS(remat_cross_entropy(&y, x, ft, -100), REMAT_EDTYPE, "remat_cross_entropy");
    RT_FAILS(remat_cross_entropy(&y, ft, bad, -100), REMAT_ESHAPE, "remat_cross_entropy");
    RT_FAILS(remat_cross_entropy(&y, NULL, bad, -100), REMAT_EINVAL, "remat_cross_entropy");
    RT_FAILS(remat_cross_entropy(&y, x, NULL, -100), REMAT_EINVAL, "remat_cross_entropy");
    cr_assert_null(y);
    remat_release(x);
    remat_release(bad);
    remat_release(neg);
    remat_release(short_t);
    remat_release(ft);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- mse_loss -------------------------------------------------------------------------------- */
static int call_mse(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    (void)ud;
    return remat_mse_loss(out, in[0], in[1]);
}

Test(nn, mse_loss) {
    int64_t s[2] = {2, 2};
    remat_tensor *a = rt_tensor(2, s, REMAT_F32, (double[]){1, 2, 3, 4});
    remat_tensor *b = rt_tensor(2, s, REMAT_F32, (double[]){0, 2, 5, 1});
    remat_tensor *y = NULL;
    RT_OK(remat_mse_loss(&y, a, b));
    assert_values(y, 1, (double[]){(1 + 0 + 4 + 9) / 4.0}, 1e-7, "mse");
    cr_assert_eq(remat_ndim(y), 0);
    remat_release_p(&y);
    remat_release(a);
    remat_release(b);
    /* gradcheck, one side strided */
    int64_t s3[2] = {3, 4}, s3t[2] = {4, 3};
    remat_tensor *x = rt_leaf(rt_rand(2, s3, REMAT_F64, -1, 1, 1));
    remat_tensor *z0 = rt_leaf(rt_rand(2, s3t, REMAT_F64, -1, 1, 2)), *z = NULL;
    RT_OK(remat_transpose(&z, z0, 0, 1));
    remat_tensor *ins[2] = {x, z};
    GRADCHECK_CASE(call_mse, NULL, 2, ins, "mse_loss");
    /* errors */
    remat_tensor *w = rt_rand(2, s3t, REMAT_F64, -1, 1, 3), *f = NULL;
    RT_FAILS(remat_mse_loss(&y, x, w), REMAT_ESHAPE, "remat_mse_loss");
    RT_OK(remat_to_dtype(&f, z, REMAT_F32));
    RT_FAILS(remat_mse_loss(&y, x, f), REMAT_EDTYPE, "remat_mse_loss");
    RT_FAILS(remat_mse_loss(&y, NULL, x), REMAT_EINVAL, "remat_mse_loss");
    RT_FAILS(remat_mse_loss(NULL, x, x), REMAT_EINVAL, "remat_mse_loss");
    cr_assert_null(y);
    remat_release(f);
    remat_release(w);
    remat_release(z);
    remat_release(z0);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- devices ---------------------------------------------------------------------------------- */
/* Mixed devices fail with REMAT_EDEVICE; a host-addressable device runs the
 * cpu kernels, keeps outputs on its device and draws dropout masks from its
 * own generator. */
Test(nn, device_checks_and_second_device) {
    int ty = rt_testdev_register();
    remat_device td = {ty, 1};
    int64_t s[2] = {4, 6}, c6 = 6, n4 = 4;
    remat_tensor *a = NULL, *b = NULL, *w = NULL, *y = NULL, *idx = NULL, *t = NULL;
    RT_OK(remat_rand_uniform(&a, 2, s, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_rand_uniform(&b, 2, s, -1, 1, REMAT_F32, td));
    RT_OK(remat_rand_uniform(&w, 1, &c6, -1, 1, REMAT_F32, td));
    RT_FAILS(remat_mse_loss(&y, a, b), REMAT_EDEVICE, "remat_mse_loss");
    RT_FAILS(remat_layer_norm(&y, a, 1, w, NULL, 1e-5), REMAT_EDEVICE, "remat_layer_norm");
    RT_FAILS(remat_layer_norm(&y, a, 1, NULL, w, 1e-5), REMAT_EDEVICE, "remat_layer_norm");
    idx = i64_tensor(1, &n4, (double[]){0, 1, 2, 3});
    RT_FAILS(remat_embedding(&y, b, idx), REMAT_EDEVICE, "remat_embedding");
    RT_FAILS(remat_cross_entropy(&y, b, idx, -100), REMAT_EDEVICE, "remat_cross_entropy");
    cr_assert_null(y);
    /* on the second device: outputs stay there */
    RT_OK(remat_layer_norm(&y, b, 1, w, w, 1e-5));
    cr_assert_eq(remat_tensor_device(y).type, ty);
    cr_assert_eq(remat_tensor_device(y).index, 1);
    remat_release_p(&y);
    int d0 = 0;
    RT_OK(remat_sum(&y, b, 1, &d0, false));
    cr_assert_eq(remat_tensor_device(y).type, ty);
    remat_release_p(&y);
    RT_OK(remat_softmax(&y, b, 0));
    cr_assert_eq(remat_tensor_device(y).type, ty);
    remat_release_p(&y);
    RT_OK(remat_to_device(&t, idx, td));
    RT_OK(remat_cross_entropy(&y, b, t, -100));
    cr_assert_eq(remat_tensor_device(y).type, ty);
    remat_release_p(&y);
    /* dropout draws from the generator of b's device, not the cpu one */
    uint8_t c0[REMAT_RNG_STATE_BYTES], c1[REMAT_RNG_STATE_BYTES];
    remat_tensor *d1 = NULL, *d2 = NULL;
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, c0));
    RT_OK(remat_device_manual_seed(td, 5));
    RT_OK(remat_dropout(&d1, b, 0.5, true));
    RT_OK(remat_device_manual_seed(td, 5));
    RT_OK(remat_dropout(&d2, b, 0.5, true));
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, c1));
    cr_assert(memcmp(c0, c1, sizeof c0) == 0, "dropout on testdev moved the cpu generator");
    cr_assert(rt_bitwise_equal(d1, d2));
    cr_assert_eq(remat_tensor_device(d1).type, ty);
    remat_release(d1);
    remat_release(d2);
    remat_release(t);
    remat_release(idx);
    remat_release(a);
    remat_release(b);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Skip mode (early-stopped recomputation): every op computes shapes, makes
 * meta outputs without data, and still records its node. */
Test(nn, skip_mode_all_ops) {
    int64_t s[2] = {4, 6}, c6 = 6, n4 = 4;
    remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F32, -1, 1, 1));
    remat_tensor *w = rt_leaf(rt_rand(1, &c6, REMAT_F32, -1, 1, 2));
    remat_tensor *idx = i64_tensor(1, &n4, (double[]){0, 5, 2, -100});
    remat_tensor *out[7] = {NULL};
    bool prev = rm_set_skip_mode(true);
    int rc[7];
    rc[0] = remat_softmax(&out[0], x, 0);
    rc[1] = remat_log_softmax(&out[1], x, 1);
    rc[2] = remat_layer_norm(&out[2], x, 1, w, w, 1e-5);
    rc[3] = remat_embedding(&out[3], x, (remat_tensor *)NULL);
    rc[4] = remat_cross_entropy(&out[4], x, idx, -100);
    rc[5] = remat_mse_loss(&out[5], x, x);
    rc[6] = remat_max(&out[6], NULL, x, 1, true);
    rm_set_skip_mode(prev);
    cr_assert_eq(rc[3], REMAT_EINVAL); /* validation still runs */
    for (int i = 0; i < 7; i++) {
        if (i == 3) continue;
        RT_OK(rc[i]);
        cr_assert_null(remat_data(out[i]), "op %d made data in skip mode", i);
        cr_assert(remat_requires_grad(out[i]), "op %d recorded no node", i);
    }
    cr_assert_eq(remat_ndim(out[4]), 0);
    cr_assert_eq(remat_size(out[6], 1), 1);
    for (int i = 0; i < 7; i++) remat_release(out[i]);
    remat_release(x);
    remat_release(w);
    remat_release(idx);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* What checkpoint recomputation relies on: restoring the RNG state (not just
 * the seed: the offset too) reproduces the mask bitwise. */
Test(nn, dropout_reproduces_after_rng_state_restore) {
    int64_t n = 100003;
    remat_tensor *x = rt_rand(1, &n, REMAT_F32, -1, 1, 3), *a = NULL, *b = NULL, *tmp = NULL;
    remat_manual_seed(2024);
    RT_OK(remat_dropout(&tmp, x, 0.2, true)); /* move the offset away from 0 */
    uint8_t st[REMAT_RNG_STATE_BYTES];
    RT_OK(remat_rng_get_state(REMAT_DEVICE_CPU, st));
    omp_set_num_threads(2);
    RT_OK(remat_dropout(&a, x, 0.2, true));
    RT_OK(remat_rng_set_state(REMAT_DEVICE_CPU, st));
    omp_set_num_threads(1);
    RT_OK(remat_dropout(&b, x, 0.2, true));
    omp_set_num_threads(2);
    cr_assert(rt_bitwise_equal(a, b), "mask not reproduced after RNG state restore");
    cr_assert(!rt_bitwise_equal(a, tmp), "the first call should have used other numbers");
    remat_release(a);
    remat_release(b);
    remat_release(tmp);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}
