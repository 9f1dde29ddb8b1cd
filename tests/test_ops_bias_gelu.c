/* tests/test_ops_bias_gelu.c — remat_bias_gelu, the fused gelu(x + bias):
 * f64 gradchecks (narrow rows and rows wide enough for the chunked bias
 * gradient, a transposed x), values and gradients against the unfused
 * remat_gelu(remat_add(x, bias)) in f32, f64 and bf16 (with a bf16 and an
 * f32 bias), thread-count independence, and argument errors. The PyTorch
 * fixtures are in test_fixtures (family unary). */
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "support/rt.h"

typedef struct bg_args {
    remat_gelu_approx form;
    bool transpose;
} bg_args;

static int call_bg(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    const bg_args *a = ud;
    remat_tensor *x = in[0], *t = NULL;
    if (a->transpose) {
        int rc = remat_transpose(&t, x, 0, 1);
        if (rc) return rc;
        x = t;
    }
    int rc = remat_bias_gelu(out, x, in[1], a->form);
    remat_release(t);
    return rc;
}

Test(bias_gelu, gradcheck_f64) {
    const int64_t shapes[][3] = {{2, 3, 5}, {3, 4, 70}, {5, 3, 0}};
    for (int s = 0; s < 3; s++)
        for (int f = 0; f < 2; f++) {
            bg_args a = {f ? REMAT_GELU_TANH : REMAT_GELU_ERF, shapes[s][2] == 0};
            int nd = a.transpose ? 2 : 3;
            int64_t n = a.transpose ? shapes[s][0] : shapes[s][2];
            remat_tensor *x = rt_leaf(rt_rand(nd, shapes[s], REMAT_F64, -3, 3, (unsigned)(s + 1)));
            remat_tensor *b = rt_leaf(rt_rand(1, &n, REMAT_F64, -1, 1, (unsigned)(s + 10)));
            remat_tensor *ins[2] = {x, b};
            char m[2048];
            cr_assert(rt_gradcheck(call_bg, &a, 2, ins, 1e-6, 1e-5, 1e-4, m, sizeof m),
                      "gradcheck shape %d form %d: %s", s, f, m);
            remat_release(x);
            remat_release(b);
        }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* y, dx and db of the fused op and of gelu(s) with s given (the unfused sum): y and dx
 * bitwise; db within tol of the sum of the unfused dx over the rows (the fused one sums
 * in the column-sum kernel's order, the unfused through remat_sum). */
static void compare(remat_tensor *x, remat_tensor *b, remat_tensor *s, remat_tensor *g,
                    remat_gelu_approx form, double tol, const char *what) {
    remat_tensor *y = NULL, *ys = NULL, *gr[2] = {NULL, NULL}, *gs = NULL, *ins[2] = {x, b};
    RT_OK(remat_bias_gelu(&y, x, b, form));
    RT_OK(remat_gelu(&ys, s, form));
    cr_assert(rt_bitwise_equal(y, ys), "%s: y differs from gelu(x + bias)", what);
    RT_OK(remat_grad(1, &y, &g, 2, ins, false, false, gr));
    RT_OK(remat_grad(1, &ys, &g, 1, &s, false, false, &gs));
    cr_assert(rt_bitwise_equal(gr[0], gs), "%s: dx differs from gelu's backward", what);
    cr_assert_eq(remat_tensor_dtype(gr[1]), remat_tensor_dtype(b), "%s: db in bias's dtype", what);
    remat_tensor *gsw = NULL, *dbs = NULL;
    const int dim0 = 0;
    RT_OK(remat_to_dtype(&gsw, gs, REMAT_F64));
    RT_OK(remat_sum(&dbs, gsw, 1, &dim0, false));
    remat_tensor *db64 = NULL;
    RT_OK(remat_to_dtype(&db64, gr[1], REMAT_F64));
    rt_assert_close(db64, dbs, tol, tol, what);
    remat_release(y), remat_release(ys), remat_release(gr[0]), remat_release(gr[1]);
    remat_release(gs), remat_release(gsw), remat_release(dbs), remat_release(db64);
}

Test(bias_gelu, equals_the_unfused_ops) {
    /* 2 x 48 rows: narrow (n = 40) and chunked (n = 1536), under and over the bf16 tables' size */
    const int64_t ns[2] = {40, 1536};
    for (int k = 0; k < 2; k++)
        for (int f = 0; f < 2; f++) {
            remat_gelu_approx form = f ? REMAT_GELU_TANH : REMAT_GELU_ERF;
            int64_t sh[2] = {96, ns[k]};
            const remat_dtype dts[2] = {REMAT_F32, REMAT_F64};
            for (int d = 0; d < 2; d++) {
                remat_tensor *x = rt_leaf(rt_rand(2, sh, dts[d], -4, 4, 3));
                remat_tensor *b = rt_leaf(rt_rand(1, &sh[1], dts[d], -1, 1, 4));
                remat_tensor *g = rt_rand(2, sh, dts[d], -1, 1, 5), *s = NULL;
                RT_OK(remat_add(&s, x, b));
                remat_tensor *sl = NULL; /* s as a leaf of its own, for gelu's gradient */
                RT_OK(remat_detach(&sl, s));
                rt_leaf(sl);
                char what[64];
                snprintf(what, sizeof what, "%s n=%lld form %d", d ? "f64" : "f32",
                         (long long)ns[k], f);
                compare(x, b, sl, g, form, d ? 1e-12 : 1e-4, what);
                remat_release(x), remat_release(b), remat_release(g), remat_release(s);
                remat_release(sl);
            }
            /* bf16 x with a bf16 bias, then with an f32 bias: s = x + bias rounded to bf16 */
            for (int bf = 0; bf < 2; bf++) {
                remat_tensor *x32 = rt_rand(2, sh, REMAT_F32, -4, 4, 6), *x = NULL, *b = NULL;
                remat_tensor *b32 = rt_rand(1, &sh[1], REMAT_F32, -1, 1, 7), *g = NULL;
                remat_tensor *g32 = rt_rand(2, sh, REMAT_F32, -1, 1, 8);
                RT_OK(remat_to_dtype(&x, x32, REMAT_BF16));
                RT_OK(remat_to_dtype(&g, g32, REMAT_BF16));
                if (bf) b = remat_retain(b32);
                else RT_OK(remat_to_dtype(&b, b32, REMAT_BF16));
                rt_leaf(x), rt_leaf(b);
                remat_tensor *xw = NULL, *bw = NULL, *sw = NULL, *s = NULL;
                RT_OK(remat_to_dtype(&xw, x, REMAT_F32));
                RT_OK(remat_to_dtype(&bw, b, REMAT_F32));
                RT_OK(remat_add(&sw, xw, bw));
                remat_tensor *swd = NULL;
                RT_OK(remat_detach(&swd, sw));
                RT_OK(remat_to_dtype(&s, swd, REMAT_BF16));
                rt_leaf(s);
                char what[64];
                snprintf(what, sizeof what, "bf16 (%s bias) n=%lld form %d", bf ? "f32" : "bf16",
                         (long long)ns[k], f);
                compare(x, b, s, g, form, bf ? 1e-4 : 0.02, what);
                remat_release(x32), remat_release(x), remat_release(b), remat_release(b32);
                remat_release(g), remat_release(g32), remat_release(xw), remat_release(bw);
                remat_release(sw), remat_release(swd), remat_release(s);
            }
        }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* y, dx and db are the same bits on 1 and 2 threads (checkpoint recomputation relies on it). */
Test(bias_gelu, independent_of_thread_count) {
    int64_t sh[2] = {1000, 200}, n = 200;
    const remat_dtype dts[3] = {REMAT_F32, REMAT_F64, REMAT_BF16};
    for (int d = 0; d < 3; d++) {
        remat_tensor *x =
            rt_leaf(rt_rand(2, sh, dts[d] == REMAT_BF16 ? REMAT_F32 : dts[d], -3, 3, 9));
        remat_tensor *b =
            rt_leaf(rt_rand(1, &n, dts[d] == REMAT_BF16 ? REMAT_F32 : dts[d], -1, 1, 10));
        remat_tensor *g = rt_rand(2, sh, dts[d] == REMAT_BF16 ? REMAT_F32 : dts[d], -1, 1, 11);
        if (dts[d] == REMAT_BF16) { /* bf16 x and g, f32 bias (autocast's) */
            remat_tensor *t = NULL;
            RT_OK(remat_to_dtype(&t, x, REMAT_BF16));
            remat_release(x), x = rt_leaf(t), t = NULL;
            RT_OK(remat_to_dtype(&t, g, REMAT_BF16));
            remat_release(g), g = t;
        }
        remat_tensor *y[2], *gr[2][2], *ins[2] = {x, b};
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            RT_OK(remat_bias_gelu(&y[t], x, b, REMAT_GELU_TANH));
            RT_OK(remat_grad(1, &y[t], &g, 2, ins, false, false, gr[t]));
        }
        omp_set_num_threads(2);
        cr_assert(rt_bitwise_equal(y[0], y[1]), "dtype %d: y depends on the thread count", d);
        for (int i = 0; i < 2; i++)
            cr_assert(rt_bitwise_equal(gr[0][i], gr[1][i]),
                      "dtype %d: gradient %d depends on the thread count", d, i);
        for (int t = 0; t < 2; t++)
            remat_release(y[t]), remat_release(gr[t][0]), remat_release(gr[t][1]);
        remat_release(x), remat_release(b), remat_release(g);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(bias_gelu, errors) {
    int64_t s[2] = {2, 3}, c3 = 3, c4 = 4;
    remat_tensor *x = rt_rand(2, s, REMAT_F32, -1, 1, 1), *y = NULL;
    remat_tensor *b4 = rt_rand(1, &c4, REMAT_F32, -1, 1, 2);
    remat_tensor *b64 = rt_rand(1, &c3, REMAT_F64, -1, 1, 3);
    remat_tensor *b2d = rt_rand(2, s, REMAT_F32, -1, 1, 4);
    RT_FAILS(remat_bias_gelu(&y, x, b4, REMAT_GELU_ERF), REMAT_ESHAPE, "remat_bias_gelu: bias [4]");
    RT_FAILS(remat_bias_gelu(&y, x, b2d, REMAT_GELU_ERF), REMAT_ESHAPE, "1-D");
    RT_FAILS(remat_bias_gelu(&y, x, b64, REMAT_GELU_ERF), REMAT_EDTYPE, "x's dtype f32");
    RT_FAILS(remat_bias_gelu(&y, x, NULL, REMAT_GELU_ERF), REMAT_EINVAL, "remat_bias_gelu");
    RT_FAILS(remat_bias_gelu(&y, x, b64, (remat_gelu_approx)7), REMAT_EINVAL, "approximate");
    cr_assert_null(y);
    remat_release(x), remat_release(b4), remat_release(b64), remat_release(b2d);
    cr_assert_eq(remat_live_tensors(), 0);
}
