/* tests/test_ops_layer_norm_to.c — remat_layer_norm_to and remat_add_layer_norm_to, the
 * norms with the cast to bf16 after them folded into their kernels: values and gradients
 * bitwise those of the norm then remat_to_dtype (weight and bias or not, a lane tail, rows
 * wider than the rounding block, subnormal and non-finite values, an f32 and a bf16 r),
 * second derivatives (create_graph) bitwise too, thread-count independence, the graph one
 * node shorter, the f64 gradcheck of the dtype-keeping form, argument errors. The PyTorch
 * fixtures are in test_autocast_fixtures (layer_norm_to_bf16, add_layer_norm_to_bf16). On a
 * test device (make test-fenced, make test-cuda) the same checks run on its kernels: fused
 * where they write a bf16 y (RM_KF_BF16_Y: fenced's, which are the cpu's, and cuda's), else
 * the norm then the cast, the node the cast's. */
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "core/kernels.h"
#include "support/rt.h"

RT_ON_TEST_DEVICE

/* weight / bias present: bit 0 weight, bit 1 bias */
static void norm_pair(remat_tensor *x, remat_tensor *r, remat_tensor *w, remat_tensor *b,
                      remat_tensor **sum, remat_tensor **y, bool fused) {
    if (r && fused) {
        RT_OK(remat_add_layer_norm_to(&sum[0], &y[0], x, r, 1, w, b, 1e-5, REMAT_BF16));
        return;
    }
    remat_tensor *t = NULL;
    if (r) RT_OK(remat_add_layer_norm(sum, &t, x, r, 1, w, b, 1e-5));
    else if (fused) RT_OK(remat_layer_norm_to(y, x, 1, w, b, 1e-5, REMAT_BF16));
    else RT_OK(remat_layer_norm(&t, x, 1, w, b, 1e-5));
    if (t) {
        RT_OK(remat_to_dtype(y, t, REMAT_BF16));
        remat_release(t);
    }
}

/* y (and the sum) and the gradients of x, r, w, b: fused against the norm then the cast. */
static void compare(remat_tensor *x, remat_tensor *r, remat_tensor *w, remat_tensor *b,
                    remat_tensor *gy, remat_tensor *gs, const char *what) {
    remat_tensor *s[2] = {NULL, NULL}, *y[2] = {NULL, NULL}, *gr[2][4];
    remat_tensor *ins[4] = {x, r, w, b}, *inl[4];
    int n = 0;
    for (int i = 0; i < 4; i++)
        if (ins[i]) inl[n++] = ins[i];
    for (int f = 0; f < 2; f++) {
        norm_pair(x, r, w, b, &s[f], &y[f], f == 0);
        cr_assert_eq(remat_tensor_dtype(y[f]), REMAT_BF16, "%s: y's dtype", what);
        remat_tensor *outs[2] = {y[f], s[f]}, *gouts[2] = {gy, gs};
        RT_OK(remat_grad(r ? 2 : 1, outs, gouts, n, inl, false, false, gr[f]));
    }
    cr_assert(rt_bitwise_equal(y[0], y[1]), "%s: y differs from the norm then the cast", what);
    if (r) cr_assert(rt_bitwise_equal(s[0], s[1]), "%s: the sum differs", what);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(remat_tensor_dtype(gr[0][i]), remat_tensor_dtype(inl[i]),
                     "%s: gradient %d's dtype", what, i);
        cr_assert(rt_bitwise_equal(gr[0][i], gr[1][i]), "%s: gradient %d differs", what, i);
    }
    for (int f = 0; f < 2; f++) {
        remat_release(s[f]), remat_release(y[f]);
        for (int i = 0; i < n; i++) remat_release(gr[f][i]);
    }
}

/* f32 x (N, C) with row 1 holding a NaN and row 2 an infinity when odd is set. */
static remat_tensor *make_x(int64_t N, int64_t C, unsigned seed, bool odd) {
    int64_t sh[2] = {N, C};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -2, 2, seed);
    if (odd) {
        double *v = rt_values(x);
        v[1 * C + 3] = NAN;
        v[2 * C] = INFINITY;
        remat_release(x);
        x = rt_tensor(2, sh, REMAT_F32, v);
        free(v);
    }
    return rt_leaf(x);
}

Test(layer_norm_to, equals_norm_then_cast) {
    /* a lane tail; the GPT's width; more than one rounding block with a tail */
    const int64_t cs[3] = {5, 384, 600};
    for (int k = 0; k < 3; k++) {
        const int64_t c = cs[k], sh[2] = {70, c};
        for (int affine = 0; affine < 4; affine++)
            for (int add = 0; add < 3; add++) { /* no r, an f32 r, a bf16 r */
                remat_tensor *x = make_x(70, c, 1, k == 1 && affine == 3);
                remat_tensor *w = NULL, *b = NULL, *r = NULL;
                if (affine & 1) { /* a few weights make subnormal outputs */
                    remat_tensor *w0 = rt_rand(1, &c, REMAT_F32, 0.5, 1.5, 3);
                    double *v = rt_values(w0);
                    for (int64_t i = 0; i < c; i += 4) v[i] = 3e-39;
                    w = rt_leaf(rt_tensor(1, &c, REMAT_F32, v));
                    free(v), remat_release(w0);
                }
                if (affine & 2) b = rt_leaf(rt_rand(1, &c, REMAT_F32, -1, 1, 4));
                if (add) {
                    r = rt_rand(2, sh, REMAT_F32, -2, 2, 2);
                    if (add == 2) {
                        remat_tensor *t = NULL;
                        RT_OK(remat_to_dtype(&t, r, REMAT_BF16));
                        remat_release(r), r = t;
                    }
                    rt_leaf(r);
                }
                remat_tensor *gy = NULL, *g32 = rt_rand(2, sh, REMAT_F32, -1, 1, 5);
                RT_OK(remat_to_dtype(&gy, g32, REMAT_BF16));
                remat_tensor *gs = add ? rt_rand(2, sh, REMAT_F32, -1, 1, 6) : NULL;
                char what[80];
                snprintf(what, sizeof what, "C=%lld affine=%d r=%s", (long long)c, affine,
                         add == 0   ? "none"
                         : add == 1 ? "f32"
                                    : "bf16");
                compare(x, r, w, b, gy, gs, what);
                remat_release(x), remat_release(r), remat_release(w), remat_release(b);
                remat_release(gy), remat_release(g32), remat_release(gs);
            }
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The cast is gone from the graph: y's grad_fn is the norm's own node (where the kernels
 * write a bf16 y; elsewhere the cast's). */
Test(layer_norm_to, one_node) {
    int64_t sh[2] = {4, 8}, c = 8;
    remat_tensor *x = rt_leaf(rt_rand(2, sh, REMAT_F32, -1, 1, 1)), *y = NULL, *s = NULL;
    /* (the device types registered by now) */
    const bool cpu = rm_kernel_allows(RM_K_LAYER_NORM, rt_tensor_device().type, RM_KF_BF16_Y);
    cr_assert(rm_kernel_allows(RM_K_LAYER_NORM, REMAT_CPU, RM_KF_BF16_Y));
    remat_tensor *w = rt_leaf(rt_rand(1, &c, REMAT_F32, -1, 1, 2));
    RT_OK(remat_layer_norm_to(&y, x, 1, w, NULL, 1e-5, REMAT_BF16));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)),
                     cpu ? "LayerNormBackward" : "ToCopyBackward");
    remat_release(y);
    RT_OK(remat_add_layer_norm_to(&s, &y, x, x, 1, w, NULL, 1e-5, REMAT_BF16));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)),
                     cpu ? "AddLayerNormBackward" : "ToCopyBackward");
    cr_assert_eq(remat_tensor_dtype(s), REMAT_F32);
    remat_release(y), remat_release(s), remat_release(x), remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* create_graph through the fused ops: the gradients and their gradients (of
 * sum(dx * v) + sum(dw) + sum(db)) bitwise those of the norm then the cast. */
Test(layer_norm_to, double_backward_equals_norm_then_cast) {
    int64_t sh[2] = {6, 20}, c = 20;
    for (int add = 0; add < 2; add++) {
        remat_tensor *x = rt_leaf(rt_rand(2, sh, REMAT_F32, -2, 2, 1));
        remat_tensor *r = add ? rt_leaf(rt_rand(2, sh, REMAT_F32, -2, 2, 2)) : NULL;
        remat_tensor *w = rt_leaf(rt_rand(1, &c, REMAT_F32, 0.5, 1.5, 3));
        remat_tensor *b = rt_leaf(rt_rand(1, &c, REMAT_F32, -1, 1, 4));
        remat_tensor *v = rt_rand(2, sh, REMAT_F32, -1, 1, 5),
                     *g32 = rt_rand(2, sh, REMAT_F32, -1, 1, 6);
        remat_tensor *gy = NULL;
        RT_OK(remat_to_dtype(&gy, g32, REMAT_BF16));
        RT_OK(remat_set_requires_grad(gy, true));
        remat_tensor *ins[4] = {x, w, b, gy}, *res[2][4];
        for (int f = 0; f < 2; f++) {
            remat_tensor *s = NULL, *y = NULL, *g1[3], *p = NULL, *l = NULL, *t = NULL, *u = NULL;
            norm_pair(x, r, w, b, &s, &y, f == 0);
            remat_tensor *xs[3] = {x, w, b};
            const remat_backward_options o = {.create_graph = true};
            RT_OK(remat_grad_ex(1, &y, &gy, 3, xs, &o, g1));
            RT_OK(remat_mul(&p, g1[0], v));
            RT_OK(remat_sum_all(&l, p));
            RT_OK(remat_sum_all(&t, g1[1]));
            RT_OK(remat_add(&u, l, t));
            remat_release(l), remat_release(t);
            RT_OK(remat_sum_all(&t, g1[2]));
            RT_OK(remat_add(&l, u, t));
            RT_OK(remat_grad(1, &l, NULL, 4, ins, false, true, res[f]));
            remat_release(s), remat_release(y), remat_release(p), remat_release(l);
            remat_release(t), remat_release(u);
            for (int i = 0; i < 3; i++) remat_release(g1[i]);
        }
        for (int i = 0; i < 4; i++) {
            cr_assert_eq(!res[0][i], !res[1][i], "add=%d: second gradient %d present", add, i);
            if (res[0][i])
                cr_assert(rt_bitwise_equal(res[0][i], res[1][i]),
                          "add=%d: second gradient %d differs", add, i);
            remat_release(res[0][i]), remat_release(res[1][i]);
        }
        remat_release(x), remat_release(r), remat_release(w), remat_release(b);
        remat_release(v), remat_release(g32), remat_release(gy);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The same bits on 1 and 2 threads (checkpoint recomputation relies on it). */
Test(layer_norm_to, independent_of_thread_count) {
    int64_t sh[2] = {1000, 200}, c = 200;
    remat_tensor *x = rt_leaf(rt_rand(2, sh, REMAT_F32, -2, 2, 7));
    remat_tensor *w = rt_leaf(rt_rand(1, &c, REMAT_F32, 0.5, 1.5, 9));
    remat_tensor *b = rt_leaf(rt_rand(1, &c, REMAT_F32, -1, 1, 10));
    remat_tensor *g32 = rt_rand(2, sh, REMAT_F32, -1, 1, 11), *gy = NULL;
    RT_OK(remat_to_dtype(&gy, g32, REMAT_BF16));
    remat_tensor *y[2], *gr[2][3], *ins[3] = {x, w, b};
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        RT_OK(remat_layer_norm_to(&y[t], x, 1, w, b, 1e-5, REMAT_BF16));
        RT_OK(remat_grad(1, &y[t], &gy, 3, ins, false, false, gr[t]));
    }
    omp_set_num_threads(2);
    cr_assert(rt_bitwise_equal(y[0], y[1]), "the forward depends on the thread count");
    for (int i = 0; i < 3; i++)
        cr_assert(rt_bitwise_equal(gr[0][i], gr[1][i]), "gradient %d depends on the thread count",
                  i);
    for (int t = 0; t < 2; t++) {
        remat_release(y[t]);
        for (int i = 0; i < 3; i++) remat_release(gr[t][i]);
    }
    remat_release(x), remat_release(w), remat_release(b), remat_release(g32), remat_release(gy);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int call_to(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    remat_tensor *s = NULL, *y = NULL;
    if (!*(const bool *)ud)
        return remat_layer_norm_to(out, in[0], 1, in[2], in[3], 1e-5, REMAT_F64);
    int rc = remat_add_layer_norm_to(&s, &y, in[0], in[1], 1, in[2], in[3], 1e-5, REMAT_F64);
    if (!rc) rc = remat_add(out, s, y);
    remat_release(s), remat_release(y);
    return rc;
}

/* The dtype-keeping form (f64 in, f64 out) is the norm: its gradients by finite
 * differences. */
Test(layer_norm_to, gradcheck_f64) {
    int64_t sh[2] = {3, 7}, c = 7;
    for (int add = 0; add < 2; add++) {
        remat_tensor *in[4] = {rt_leaf(rt_rand(2, sh, REMAT_F64, -2, 2, 1)),
                               rt_leaf(rt_rand(2, sh, REMAT_F64, -2, 2, 2)),
                               rt_leaf(rt_rand(1, &c, REMAT_F64, 0.5, 1.5, 3)),
                               rt_leaf(rt_rand(1, &c, REMAT_F64, -1, 1, 4))};
        const bool a = add;
        RT_GRADCHECK(call_to, (void *)&a, 4, in);
        for (int i = 0; i < 4; i++) remat_release(in[i]);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(layer_norm_to, errors) {
    int64_t s[2] = {2, 3};
    remat_tensor *x64 = rt_rand(2, s, REMAT_F64, -1, 1, 1), *x = rt_rand(2, s, REMAT_F32, -1, 1, 2);
    remat_tensor *y = NULL, *sum = NULL;
    RT_FAILS(remat_layer_norm_to(&y, x, 1, NULL, NULL, 1e-5, REMAT_I64), REMAT_EDTYPE,
             "dtype must be f32, f64 or bf16");
    RT_FAILS(remat_layer_norm_to(&y, x, 3, NULL, NULL, 1e-5, REMAT_BF16), REMAT_EINVAL, "n_norm");
    RT_FAILS(remat_layer_norm_to(NULL, x, 1, NULL, NULL, 1e-5, REMAT_BF16), REMAT_EINVAL,
             "must not be NULL");
    RT_FAILS(remat_add_layer_norm_to(&sum, &y, x, x, 1, NULL, NULL, 1e-5, REMAT_U8), REMAT_EDTYPE,
             "remat_add_layer_norm_to");
    RT_FAILS(remat_add_layer_norm_to(&sum, NULL, x, x, 1, NULL, NULL, 1e-5, REMAT_BF16),
             REMAT_EINVAL, "must not be NULL");
    cr_assert_null(y);
    cr_assert_null(sum);
    /* an f64 x: the norm in f64, then rounded (the two ops), sum in f64 */
    remat_tensor *t = NULL, *want = NULL;
    RT_OK(remat_add_layer_norm_to(&sum, &y, x64, x64, 1, NULL, NULL, 1e-5, REMAT_BF16));
    cr_assert_eq(remat_tensor_dtype(sum), REMAT_F64);
    RT_OK(remat_layer_norm(&t, sum, 1, NULL, NULL, 1e-5));
    RT_OK(remat_to_dtype(&want, t, REMAT_BF16));
    cr_assert(rt_bitwise_equal(y, want));
    remat_release(y), remat_release(sum), remat_release(want), remat_release(t);
    RT_OK(remat_layer_norm_to(&y, x64, 1, NULL, NULL, 1e-5, REMAT_BF16));
    cr_assert_eq(remat_tensor_dtype(y), REMAT_BF16);
    remat_release(y);
    remat_release(x64), remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}
