/* tests/test_ops_add_layer_norm.c — remat_add_layer_norm, the residual add
 * fused with the layer norm after it: f64 gradchecks through either output
 * and both (affine or not, 1 and 2 normalised dims, a transposed x), values
 * and gradients bitwise those of remat_add then remat_layer_norm (f32, f64,
 * an f32 x with a bf16 r), thread-count independence, argument errors. The
 * PyTorch fixtures are in test_fixtures (family layer_norm). */
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "support/rt.h"

typedef struct aln_args {
    int n_norm;
    bool affine, transpose;
    int which; /* 0: sum, 1: y, 2: sum * 0.75 + y */
} aln_args;

static int call_aln(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    const aln_args *a = ud;
    remat_tensor *x = in[0], *t = NULL, *s = NULL, *y = NULL, *u = NULL;
    int rc = REMAT_OK;
    if (a->transpose) {
        rc = remat_transpose(&t, x, 0, 1);
        x = t;
    }
    if (!rc)
        rc = remat_add_layer_norm(&s, &y, x, in[1], a->n_norm, a->affine ? in[2] : NULL,
                                  a->affine ? in[3] : NULL, 1e-5);
    if (!rc && a->which == 0) *out = remat_retain(s);
    if (!rc && a->which == 1) *out = remat_retain(y);
    if (!rc && a->which == 2) rc = remat_mul_scalar(&u, s, 0.75);
    if (!rc && a->which == 2) rc = remat_add(out, u, y);
    remat_release(t), remat_release(s), remat_release(y), remat_release(u);
    return rc;
}

Test(add_layer_norm, gradcheck_f64) {
    const aln_args cases[] = {{1, true, false, 2}, {1, false, false, 2}, {2, true, false, 2},
                              {1, true, true, 2},  {1, true, false, 0},  {1, true, false, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const aln_args *c = &cases[k];
        int64_t xs[3] = {3, 4, 5}, rs[3] = {3, 4, 5};
        if (c->transpose) xs[0] = 4, xs[1] = 3; /* x is transposed inside f: (3, 4, 5) */
        const int64_t *ns = rs + 3 - c->n_norm;
        remat_tensor *x = rt_leaf(rt_rand(3, xs, REMAT_F64, -2, 2, (unsigned)k + 1));
        remat_tensor *r = rt_leaf(rt_rand(3, rs, REMAT_F64, -2, 2, (unsigned)k + 10));
        remat_tensor *w = rt_leaf(rt_rand(c->n_norm, ns, REMAT_F64, 0.5, 1.5, (unsigned)k + 20));
        remat_tensor *b = rt_leaf(rt_rand(c->n_norm, ns, REMAT_F64, -1, 1, (unsigned)k + 30));
        remat_tensor *ins[4] = {x, r, w, b};
        char m[2048];
        cr_assert(rt_gradcheck(call_aln, (void *)c, 4, ins, 1e-6, 1e-5, 1e-4, m, sizeof m),
                  "gradcheck case %zu: %s", k, m);
        remat_release(x), remat_release(r), remat_release(w), remat_release(b);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* sum, y and the gradients of x, r, weight and bias for upstream gradients gs (of sum) and
 * gy (of y): fused against remat_add then remat_layer_norm, bitwise. */
static void compare(remat_tensor *x, remat_tensor *r, remat_tensor *w, remat_tensor *b,
                    remat_tensor *gs, remat_tensor *gy, const char *what) {
    remat_tensor *s[2], *y[2], *gr[2][4], *ins[4] = {x, r, w, b};
    RT_OK(remat_add_layer_norm(&s[0], &y[0], x, r, 1, w, b, 1e-5));
    RT_OK(remat_add(&s[1], x, r));
    RT_OK(remat_layer_norm(&y[1], s[1], 1, w, b, 1e-5));
    for (int i = 0; i < 2; i++) {
        remat_tensor *outs[2] = {s[i], y[i]}, *gouts[2] = {gs, gy};
        RT_OK(remat_grad(2, outs, gouts, 4, ins, false, false, gr[i]));
    }
    cr_assert(rt_bitwise_equal(s[0], s[1]), "%s: the sum differs from remat_add's", what);
    cr_assert(rt_bitwise_equal(y[0], y[1]), "%s: y differs from remat_layer_norm's", what);
    const char *names[4] = {"x", "r", "weight", "bias"};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(remat_tensor_dtype(gr[0][i]), remat_tensor_dtype(gr[1][i]),
                     "%s: %s's gradient dtype", what, names[i]);
        cr_assert(rt_bitwise_equal(gr[0][i], gr[1][i]), "%s: %s's gradient differs", what,
                  names[i]);
    }
    for (int i = 0; i < 2; i++) {
        remat_release(s[i]), remat_release(y[i]);
        for (int j = 0; j < 4; j++) remat_release(gr[i][j]);
    }
}

Test(add_layer_norm, equals_add_then_layer_norm) {
    const int64_t cs[3] = {5, 384, 1000}; /* a lane tail; the GPT's width; wide rows */
    for (int k = 0; k < 3; k++) {
        int64_t sh[2] = {96, cs[k]}, c = cs[k];
        const remat_dtype dts[2] = {REMAT_F32, REMAT_F64};
        for (int d = 0; d < 3; d++) {
            remat_dtype dt = d == 2 ? REMAT_F32 : dts[d];
            remat_tensor *x = rt_leaf(rt_rand(2, sh, dt, -2, 2, 1));
            remat_tensor *r = rt_rand(2, sh, dt, -2, 2, 2);
            if (d == 2) { /* an f32 x with a bf16 r (autocast's residual branch) */
                remat_tensor *t = NULL;
                RT_OK(remat_to_dtype(&t, r, REMAT_BF16));
                remat_release(r), r = t;
            }
            rt_leaf(r);
            remat_tensor *w = rt_leaf(rt_rand(1, &c, dt, 0.5, 1.5, 3));
            remat_tensor *b = rt_leaf(rt_rand(1, &c, dt, -1, 1, 4));
            remat_tensor *gs = rt_rand(2, sh, dt, -1, 1, 5), *gy = rt_rand(2, sh, dt, -1, 1, 6);
            char what[64];
            snprintf(what, sizeof what, "%s C=%lld",
                     d == 0   ? "f32"
                     : d == 1 ? "f64"
                              : "f32+bf16",
                     (long long)c);
            compare(x, r, w, b, gs, gy, what);
            remat_release(x), remat_release(r), remat_release(w), remat_release(b);
            remat_release(gs), remat_release(gy);
        }
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The same bits on 1 and 2 threads (checkpoint recomputation relies on it). */
Test(add_layer_norm, independent_of_thread_count) {
    int64_t sh[2] = {1000, 200}, c = 200;
    remat_tensor *x = rt_leaf(rt_rand(2, sh, REMAT_F32, -2, 2, 7));
    remat_tensor *r = rt_leaf(rt_rand(2, sh, REMAT_F32, -2, 2, 8));
    remat_tensor *w = rt_leaf(rt_rand(1, &c, REMAT_F32, 0.5, 1.5, 9));
    remat_tensor *b = rt_leaf(rt_rand(1, &c, REMAT_F32, -1, 1, 10));
    remat_tensor *gs = rt_rand(2, sh, REMAT_F32, -1, 1, 11),
                 *gy = rt_rand(2, sh, REMAT_F32, -1, 1, 12);
    remat_tensor *s[2], *y[2], *gr[2][4], *ins[4] = {x, r, w, b};
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        RT_OK(remat_add_layer_norm(&s[t], &y[t], x, r, 1, w, b, 1e-5));
        remat_tensor *outs[2] = {s[t], y[t]}, *gouts[2] = {gs, gy};
        RT_OK(remat_grad(2, outs, gouts, 4, ins, false, false, gr[t]));
    }
    omp_set_num_threads(2);
    cr_assert(rt_bitwise_equal(s[0], s[1]) && rt_bitwise_equal(y[0], y[1]),
              "the forward depends on the thread count");
    for (int i = 0; i < 4; i++)
        cr_assert(rt_bitwise_equal(gr[0][i], gr[1][i]), "gradient %d depends on the thread count",
                  i);
    for (int t = 0; t < 2; t++) {
        remat_release(s[t]), remat_release(y[t]);
        for (int i = 0; i < 4; i++) remat_release(gr[t][i]);
    }
    remat_release(x), remat_release(r), remat_release(w), remat_release(b);
    remat_release(gs), remat_release(gy);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(add_layer_norm, errors) {
    int64_t s[2] = {2, 3}, s2[2] = {1, 3}, c3 = 3, c4 = 4;
    remat_tensor *x = rt_rand(2, s, REMAT_F32, -1, 1, 1), *sum = NULL, *y = NULL;
    remat_tensor *r = rt_rand(2, s, REMAT_F32, -1, 1, 2), *rb = rt_rand(2, s2, REMAT_F32, -1, 1, 3);
    remat_tensor *r64 = rt_rand(2, s, REMAT_F64, -1, 1, 4),
                 *w4 = rt_rand(1, &c4, REMAT_F32, -1, 1, 5);
    remat_tensor *w64 = rt_rand(1, &c3, REMAT_F64, -1, 1, 6);
    RT_FAILS(remat_add_layer_norm(&sum, &y, x, rb, 1, NULL, NULL, 1e-5), REMAT_ESHAPE,
             "no broadcasting");
    RT_FAILS(remat_add_layer_norm(&sum, &y, x, r64, 1, NULL, NULL, 1e-5), REMAT_EDTYPE,
             "r must have x's dtype");
    RT_FAILS(remat_add_layer_norm(&sum, &y, x, r, 1, w4, NULL, 1e-5), REMAT_ESHAPE, "weight");
    RT_FAILS(remat_add_layer_norm(&sum, &y, x, r, 1, w64, NULL, 1e-5), REMAT_EDTYPE,
             "remat_add_layer_norm");
    RT_FAILS(remat_add_layer_norm(&sum, &y, x, r, 3, NULL, NULL, 1e-5), REMAT_EINVAL, "n_norm");
    RT_FAILS(remat_add_layer_norm(&sum, &y, x, r, 1, NULL, NULL, -1), REMAT_EINVAL, "eps");
    RT_FAILS(remat_add_layer_norm(&sum, &y, x, NULL, 1, NULL, NULL, 1e-5), REMAT_EINVAL,
             "remat_add_layer_norm");
    RT_FAILS(remat_add_layer_norm(NULL, &y, x, r, 1, NULL, NULL, 1e-5), REMAT_EINVAL,
             "must not be NULL");
    cr_assert_null(sum);
    cr_assert_null(y);
    remat_release(x), remat_release(r), remat_release(rb), remat_release(r64);
    remat_release(w4), remat_release(w64);
    cr_assert_eq(remat_live_tensors(), 0);
}
