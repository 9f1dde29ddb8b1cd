/* tests/test_ops_rms_norm_to.c — remat_rms_norm_to, rms_norm with the cast to bf16 after it
 * folded into its kernels (Llama's final norm under autocast): values and gradients bitwise
 * those of remat_rms_norm then remat_to_dtype (a weight or not, a lane tail, rows wider
 * than the rounding block, subnormal and non-finite values), second derivatives
 * (create_graph) bitwise too, thread-count independence, the graph one node shorter, the
 * f64 gradcheck of the dtype-keeping form, argument errors. On a test device (make
 * test-fenced, make test-cuda) the same checks run on its kernels: fused where they write a
 * bf16 y (RM_KF_BF16_Y: fenced's, which are the cpu's), else the norm then the cast. */
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "core/kernels.h"
#include "support/rt.h"

RT_ON_TEST_DEVICE

static void norm_y(remat_tensor *x, remat_tensor *w, remat_tensor **y, bool fused) {
    if (fused) {
        RT_OK(remat_rms_norm_to(y, x, 1, w, 1e-6, REMAT_BF16));
        return;
    }
    remat_tensor *t = NULL;
    RT_OK(remat_rms_norm(&t, x, 1, w, 1e-6));
    RT_OK(remat_to_dtype(y, t, REMAT_BF16));
    remat_release(t);
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

Test(rms_norm_to, equals_norm_then_cast) {
    /* a lane tail; a Llama width; more than one rounding block with a tail */
    const int64_t cs[3] = {5, 512, 600};
    for (int k = 0; k < 3; k++)
        for (int affine = 0; affine < 2; affine++)
            for (int odd = 0; odd < 2; odd++) {
                const int64_t c = cs[k], sh[2] = {70, c};
                remat_tensor *x = make_x(70, c, 1, odd), *w = NULL;
                if (affine) { /* a few weights make subnormal outputs */
                    remat_tensor *w0 = rt_rand(1, &c, REMAT_F32, 0.5, 1.5, 3);
                    double *v = rt_values(w0);
                    for (int64_t i = 0; i < c; i += 4) v[i] = 3e-39;
                    w = rt_leaf(rt_tensor(1, &c, REMAT_F32, v));
                    free(v), remat_release(w0);
                }
                remat_tensor *gy = NULL, *g32 = rt_rand(2, sh, REMAT_F32, -1, 1, 5);
                RT_OK(remat_to_dtype(&gy, g32, REMAT_BF16));
                remat_tensor *y[2], *gr[2][2], *ins[2] = {x, w};
                for (int f = 0; f < 2; f++) {
                    norm_y(x, w, &y[f], f == 0);
                    cr_assert_eq(remat_tensor_dtype(y[f]), REMAT_BF16);
                    RT_OK(remat_grad(1, &y[f], &gy, w ? 2 : 1, ins, false, false, gr[f]));
                }
                cr_assert(rt_bitwise_equal(y[0], y[1]),
                          "C=%lld w=%d odd=%d: y differs from the norm then the cast", (long long)c,
                          affine, odd);
                for (int i = 0; i < (w ? 2 : 1); i++) {
                    cr_assert_eq(remat_tensor_dtype(gr[0][i]), REMAT_F32);
                    cr_assert(rt_bitwise_equal(gr[0][i], gr[1][i]),
                              "C=%lld w=%d odd=%d: gradient %d differs", (long long)c, affine, odd,
                              i);
                }
                for (int f = 0; f < 2; f++) {
                    remat_release(y[f]);
                    for (int i = 0; i < (w ? 2 : 1); i++) remat_release(gr[f][i]);
                }
                remat_release(x), remat_release(w), remat_release(gy), remat_release(g32);
            }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Only dx or only dw wanted. */
Test(rms_norm_to, one_gradient_at_a_time) {
    int64_t sh[2] = {33, 70}, c = 70;
    remat_tensor *x = rt_leaf(rt_rand(2, sh, REMAT_F32, -2, 2, 1));
    remat_tensor *w = rt_leaf(rt_rand(1, &c, REMAT_F32, 0.5, 1.5, 2));
    remat_tensor *g32 = rt_rand(2, sh, REMAT_F32, -1, 1, 3), *gy = NULL;
    RT_OK(remat_to_dtype(&gy, g32, REMAT_BF16));
    for (int which = 0; which < 2; which++) {
        remat_tensor *y[2], *g[2], *in = which ? w : x;
        for (int f = 0; f < 2; f++) {
            norm_y(x, w, &y[f], f == 0);
            RT_OK(remat_grad(1, &y[f], &gy, 1, &in, false, false, &g[f]));
        }
        cr_assert(rt_bitwise_equal(g[0], g[1]), "gradient of %s alone differs", which ? "w" : "x");
        for (int f = 0; f < 2; f++) remat_release(y[f]), remat_release(g[f]);
    }
    remat_release(x), remat_release(w), remat_release(g32), remat_release(gy);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The cast is gone from the graph: y's grad_fn is the norm's own node (where the kernels
 * write a bf16 y; elsewhere the cast's). */
Test(rms_norm_to, one_node) {
    int64_t sh[2] = {4, 8}, c = 8;
    remat_tensor *x = rt_leaf(rt_rand(2, sh, REMAT_F32, -1, 1, 1)), *y = NULL;
    const bool fused = rm_kernel_allows(RM_K_RMS_NORM, rt_tensor_device().type, RM_KF_BF16_Y);
    cr_assert(rm_kernel_allows(RM_K_RMS_NORM, REMAT_CPU, RM_KF_BF16_Y));
    remat_tensor *w = rt_leaf(rt_rand(1, &c, REMAT_F32, -1, 1, 2));
    RT_OK(remat_rms_norm_to(&y, x, 1, w, 1e-6, REMAT_BF16));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)),
                     fused ? "RmsNormBackward" : "ToCopyBackward");
    remat_release(y), remat_release(x), remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* create_graph through the fused op: the gradients and their gradients (of sum(dx * v) +
 * sum(dw)) bitwise those of the norm then the cast. */
Test(rms_norm_to, double_backward_equals_norm_then_cast) {
    int64_t sh[2] = {6, 20}, c = 20;
    remat_tensor *x = rt_leaf(rt_rand(2, sh, REMAT_F32, -2, 2, 1));
    remat_tensor *w = rt_leaf(rt_rand(1, &c, REMAT_F32, 0.5, 1.5, 3));
    remat_tensor *v = rt_rand(2, sh, REMAT_F32, -1, 1, 5),
                 *g32 = rt_rand(2, sh, REMAT_F32, -1, 1, 6);
    remat_tensor *gy = NULL;
    RT_OK(remat_to_dtype(&gy, g32, REMAT_BF16));
    RT_OK(remat_set_requires_grad(gy, true));
    remat_tensor *ins[3] = {x, w, gy}, *res[2][3];
    for (int f = 0; f < 2; f++) {
        remat_tensor *y = NULL, *g1[2], *p = NULL, *l = NULL, *t = NULL, *u = NULL;
        norm_y(x, w, &y, f == 0);
        remat_tensor *xs[2] = {x, w};
        const remat_backward_options o = {.create_graph = true};
        RT_OK(remat_grad_ex(1, &y, &gy, 2, xs, &o, g1));
        RT_OK(remat_mul(&p, g1[0], v));
        RT_OK(remat_sum_all(&l, p));
        RT_OK(remat_sum_all(&t, g1[1]));
        RT_OK(remat_add(&u, l, t));
        RT_OK(remat_grad(1, &u, NULL, 3, ins, false, true, res[f]));
        remat_release(y), remat_release(p), remat_release(l), remat_release(t), remat_release(u);
        for (int i = 0; i < 2; i++) remat_release(g1[i]);
    }
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(!res[0][i], !res[1][i], "second gradient %d present", i);
        if (res[0][i])
            cr_assert(rt_bitwise_equal(res[0][i], res[1][i]), "second gradient %d differs", i);
        remat_release(res[0][i]), remat_release(res[1][i]);
    }
    remat_release(x), remat_release(w), remat_release(v), remat_release(g32), remat_release(gy);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The same bits on 1 and 2 threads (checkpoint recomputation relies on it). */
Test(rms_norm_to, independent_of_thread_count) {
    int64_t sh[2] = {1000, 200}, c = 200;
    remat_tensor *x = rt_leaf(rt_rand(2, sh, REMAT_F32, -2, 2, 7));
    remat_tensor *w = rt_leaf(rt_rand(1, &c, REMAT_F32, 0.5, 1.5, 9));
    remat_tensor *g32 = rt_rand(2, sh, REMAT_F32, -1, 1, 11), *gy = NULL;
    RT_OK(remat_to_dtype(&gy, g32, REMAT_BF16));
    remat_tensor *y[2], *gr[2][2], *ins[2] = {x, w};
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        RT_OK(remat_rms_norm_to(&y[t], x, 1, w, 1e-6, REMAT_BF16));
        RT_OK(remat_grad(1, &y[t], &gy, 2, ins, false, false, gr[t]));
    }
    omp_set_num_threads(2);
    cr_assert(rt_bitwise_equal(y[0], y[1]), "the forward depends on the thread count");
    for (int i = 0; i < 2; i++)
        cr_assert(rt_bitwise_equal(gr[0][i], gr[1][i]), "gradient %d depends on the thread count",
                  i);
    for (int t = 0; t < 2; t++) {
        remat_release(y[t]);
        for (int i = 0; i < 2; i++) remat_release(gr[t][i]);
    }
    remat_release(x), remat_release(w), remat_release(g32), remat_release(gy);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int call_to(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud, (void)n;
    return remat_rms_norm_to(out, in[0], 1, in[1], 1e-6, REMAT_F64);
}

/* The dtype-keeping form (f64 in, f64 out) is the norm: its gradients by finite
 * differences. */
Test(rms_norm_to, gradcheck_f64) {
    int64_t sh[2] = {3, 7}, c = 7;
    remat_tensor *in[2] = {rt_leaf(rt_rand(2, sh, REMAT_F64, -2, 2, 1)),
                           rt_leaf(rt_rand(1, &c, REMAT_F64, 0.5, 1.5, 3))};
    RT_GRADCHECK(call_to, NULL, 2, in);
    for (int i = 0; i < 2; i++) remat_release(in[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(rms_norm_to, errors) {
    int64_t s[2] = {2, 3};
    remat_tensor *x64 = rt_rand(2, s, REMAT_F64, -1, 1, 1), *x = rt_rand(2, s, REMAT_F32, -1, 1, 2);
    remat_tensor *y = NULL;
    RT_FAILS(remat_rms_norm_to(&y, x, 1, NULL, 1e-6, REMAT_I64), REMAT_EDTYPE,
             "dtype must be f32, f64 or bf16");
    RT_FAILS(remat_rms_norm_to(&y, x, 3, NULL, 1e-6, REMAT_BF16), REMAT_EINVAL, "n_norm");
    RT_FAILS(remat_rms_norm_to(&y, x, 1, NULL, -1.0, REMAT_BF16), REMAT_EINVAL, "eps");
    RT_FAILS(remat_rms_norm_to(NULL, x, 1, NULL, 1e-6, REMAT_BF16), REMAT_EINVAL,
             "must not be NULL");
    cr_assert_null(y);
    /* an f64 x: the norm in f64, then rounded (the two ops) */
    remat_tensor *t = NULL, *want = NULL;
    RT_OK(remat_rms_norm_to(&y, x64, 1, NULL, 1e-6, REMAT_BF16));
    RT_OK(remat_rms_norm(&t, x64, 1, NULL, 1e-6));
    RT_OK(remat_to_dtype(&want, t, REMAT_BF16));
    cr_assert_eq(remat_tensor_dtype(y), REMAT_BF16);
    cr_assert(rt_bitwise_equal(y, want));
    remat_release(y), remat_release(want), remat_release(t);
    remat_release(x64), remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}
