/* tests/test_ops_llama.c — the ops Llama needs beyond GPT's: remat_silu, remat_rms_norm and
 * remat_rope. Hand-computed values, the identities a model relies on (rope with positions is
 * a slice of rope over the longer sequence: a KV cache gets the same rotations; rms_norm
 * without a weight has mean square 1), thread-count independence, bf16 (silu and rope in
 * their input's dtype, rms_norm in the f32 autocast category with an f32 rstd kept for a
 * bf16 input) and argument errors. PyTorch fixtures (tests/test_fixtures.c), f64 gradchecks
 * and checkpoint bitwise equality (the registry tests there) and gradgradchecks
 * (tests/test_double_backward.c) cover every op too. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/autocast.h"
#include "support/rt.h"

/* ---- silu ---------------------------------------------------------------------------------- */
Test(llama_ops, silu_values_and_derivative) {
    static const double xv[5] = {-30.0, -1.5, 0.0, 0.75, 25.0};
    remat_tensor *x = rt_leaf(rt_tensor(1, (int64_t[]){5}, REMAT_F64, xv)), *y = NULL, *g = NULL;
    remat_tensor *ones = rt_tensor(1, (int64_t[]){5}, REMAT_F64, (double[]){1, 1, 1, 1, 1});
    RT_OK(remat_silu(&y, x));
    RT_OK(remat_grad(1, &y, &ones, 1, &x, false, false, &g));
    double *yv = rt_values(y), *gv = rt_values(g);
    for (int i = 0; i < 5; i++) {
        double s = 1.0 / (1.0 + exp(-xv[i]));
        cr_assert(fabs(yv[i] - xv[i] * s) <= 1e-15 * (1 + fabs(yv[i])), "silu(%g) = %.17g", xv[i],
                  yv[i]);
        double d = s * (1.0 + xv[i] * (1.0 - s));
        cr_assert(fabs(gv[i] - d) <= 1e-15 * (1 + fabs(d)), "silu'(%g) = %.17g", xv[i], gv[i]);
    }
    free(yv), free(gv);
    remat_release(x), remat_release(y), remat_release(g), remat_release(ones);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* bf16 silu runs in bf16 (no autocast category): its output is the f32 silu of the widened
 * input, rounded */
Test(llama_ops, silu_bf16_is_the_f32_silu_rounded) {
    remat_tensor *x32 = rt_rand(2, (int64_t[]){3, 70000}, REMAT_F32, -8, 8, 5);
    remat_tensor *xb = NULL, *xw = NULL, *yb = NULL, *y32 = NULL, *yr = NULL;
    RT_OK(remat_to_dtype(&xb, x32, REMAT_BF16));
    RT_OK(remat_to_dtype(&xw, xb, REMAT_F32));
    RT_OK(remat_silu(&yb, xb));
    cr_assert_eq(remat_tensor_dtype(yb), REMAT_BF16);
    RT_OK(remat_silu(&y32, xw));
    RT_OK(remat_to_dtype(&yr, y32, REMAT_BF16));
    cr_assert(rt_bitwise_equal(yb, yr), "bf16 silu differs from the rounded f32 silu");
    remat_release(x32), remat_release(xb), remat_release(xw), remat_release(yb);
    remat_release(y32), remat_release(yr);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- rms_norm ------------------------------------------------------------------------------ */
Test(llama_ops, rms_norm_values) {
    static const double xv[6] = {1, 2, 3, -4, 0.5, 0}, wv[3] = {1, 0.5, 2};
    remat_tensor *x = rt_tensor(2, (int64_t[]){2, 3}, REMAT_F64, xv);
    remat_tensor *w = rt_tensor(1, (int64_t[]){3}, REMAT_F64, wv), *y = NULL;
    RT_OK(remat_rms_norm(&y, x, 1, w, 1e-6));
    double *yv = rt_values(y);
    for (int r = 0; r < 2; r++) {
        double ms = 0;
        for (int c = 0; c < 3; c++) ms += xv[r * 3 + c] * xv[r * 3 + c] / 3;
        for (int c = 0; c < 3; c++) {
            double want = xv[r * 3 + c] / sqrt(ms + 1e-6) * wv[c];
            cr_assert(fabs(yv[r * 3 + c] - want) <= 1e-14, "row %d col %d: %.17g, want %.17g", r,
                      c, yv[r * 3 + c], want);
        }
    }
    free(yv);
    remat_release(y);
    /* no weight, two normalised dims: the mean square over both is 1 (eps 0) */
    RT_OK(remat_rms_norm(&y, x, 2, NULL, 0));
    yv = rt_values(y);
    double ms = 0;
    for (int i = 0; i < 6; i++) ms += yv[i] * yv[i] / 6;
    cr_assert(fabs(ms - 1) < 1e-14, "mean square %.17g", ms);
    free(yv);
    remat_release(x), remat_release(w), remat_release(y);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int rms_fn(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    return remat_rms_norm(out, in[0], 2, n > 1 ? in[1] : NULL, 1e-3);
}

Test(llama_ops, rms_norm_gradcheck_strided_and_many_chunks) {
    /* x a transposed view, two normalised dims, a weight; then enough rows for several
     * column-sum chunks of the weight's gradient */
    remat_tensor *base = rt_leaf(rt_rand(3, (int64_t[]){5, 2, 3}, REMAT_F64, -2, 2, 11));
    remat_tensor *x = NULL;
    RT_OK(remat_transpose(&x, base, 0, 2)); /* (3, 2, 5) */
    remat_tensor *w = rt_leaf(rt_rand(2, (int64_t[]){2, 5}, REMAT_F64, 0.5, 1.5, 12));
    remat_tensor *in[2] = {x, w};
    RT_GRADCHECK(rms_fn, NULL, 2, in);
    RT_GRADCHECK(rms_fn, NULL, 1, in);
    remat_release(x), remat_release(base), remat_release(w);
    remat_tensor *x2 = rt_leaf(rt_rand(3, (int64_t[]){70, 2, 3}, REMAT_F64, -2, 2, 13));
    remat_tensor *w2 = rt_leaf(rt_rand(2, (int64_t[]){2, 3}, REMAT_F64, 0.5, 1.5, 14));
    remat_tensor *in2[2] = {x2, w2};
    RT_GRADCHECK(rms_fn, NULL, 2, in2);
    remat_release(x2), remat_release(w2);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(llama_ops, rms_norm_independent_of_thread_count) {
    int64_t s[2] = {1000, 200}, c = 200;
    remat_dtype dts[2] = {REMAT_F32, REMAT_F64};
    for (int d = 0; d < 2; d++) {
        remat_tensor *x = rt_leaf(rt_rand(2, s, dts[d], -2, 2, 71));
        remat_tensor *w = rt_leaf(rt_rand(1, &c, dts[d], 0.5, 1.5, 72));
        remat_tensor *g = rt_rand(2, s, dts[d], -1, 1, 74);
        remat_tensor *y[2], *gr[2][2], *ins[2] = {x, w};
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            RT_OK(remat_rms_norm(&y[t], x, 1, w, 1e-5));
            RT_OK(remat_grad(1, &y[t], &g, 2, ins, false, false, gr[t]));
        }
        omp_set_num_threads(2);
        cr_assert(rt_bitwise_equal(y[0], y[1]), "rms_norm forward depends on the thread count");
        for (int i = 0; i < 2; i++)
            cr_assert(rt_bitwise_equal(gr[0][i], gr[1][i]),
                      "rms_norm gradient %d depends on the thread count", i);
        for (int t = 0; t < 2; t++) {
            remat_release(y[t]);
            for (int i = 0; i < 2; i++) remat_release(gr[t][i]);
        }
        remat_release(x), remat_release(w), remat_release(g);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* bf16: under autocast the op runs in f32 (an f32 output, the input's gradient in bf16);
 * without it, a bf16 output within bf16 rounding of the f32 op on the same values */
Test(llama_ops, rms_norm_bf16) {
    remat_tensor *x32 = rt_rand(2, (int64_t[]){4, 96}, REMAT_F32, -2, 2, 21);
    remat_tensor *w = rt_leaf(rt_rand(1, (int64_t[]){96}, REMAT_F32, 0.5, 1.5, 22));
    remat_tensor *xb = NULL, *xw = NULL, *y = NULL, *ref = NULL, *yw = NULL;
    RT_OK(remat_to_dtype(&xb, x32, REMAT_BF16));
    RT_OK(remat_set_requires_grad(xb, true));
    RT_OK(remat_to_dtype(&xw, xb, REMAT_F32));
    RT_OK(remat_rms_norm(&ref, xw, 1, w, 1e-6));
    remat_autocast_state prev;
    RT_OK(remat_autocast_begin(&prev, REMAT_CPU, REMAT_BF16, true));
    int rc = remat_rms_norm(&y, xb, 1, w, 1e-6);
    remat_autocast_end(&prev);
    RT_OK(rc);
    cr_assert_eq(remat_tensor_dtype(y), REMAT_F32, "autocast: rms_norm is in the f32 category");
    cr_assert(rt_bitwise_equal(y, ref), "autocast rms_norm differs from the f32 op");
    remat_tensor *s = NULL;
    RT_OK(remat_sum_all(&s, y));
    RT_OK(remat_backward_scalar(s));
    cr_assert_eq(remat_tensor_dtype(remat_tensor_grad(xb)), REMAT_BF16);
    remat_release(y), remat_release(s);
    /* plain bf16, weight in bf16 too */
    remat_tensor *wb = NULL;
    RT_OK(remat_to_dtype(&wb, w, REMAT_BF16));
    RT_OK(remat_rms_norm(&y, xb, 1, wb, 1e-6));
    cr_assert_eq(remat_tensor_dtype(y), REMAT_BF16);
    RT_OK(remat_to_dtype(&yw, y, REMAT_F32));
    rt_assert_close(yw, ref, 1e-2, 1e-2, "bf16 rms_norm");
    remat_release(x32), remat_release(w), remat_release(xb), remat_release(xw);
    remat_release(y), remat_release(ref), remat_release(yw), remat_release(wb);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(llama_ops, rms_norm_errors) {
    remat_tensor *x = rt_rand(2, (int64_t[]){2, 3}, REMAT_F32, -1, 1, 1), *y = NULL;
    remat_tensor *w4 = rt_rand(1, (int64_t[]){4}, REMAT_F32, -1, 1, 2);
    remat_tensor *w64 = rt_rand(1, (int64_t[]){3}, REMAT_F64, -1, 1, 2);
    remat_tensor *xi = rt_tensor(1, (int64_t[]){3}, REMAT_I64, (double[]){1, 2, 3});
    RT_FAILS(remat_rms_norm(&y, x, 0, NULL, 1e-5), REMAT_EINVAL, "remat_rms_norm: n_norm 0");
    RT_FAILS(remat_rms_norm(&y, x, 3, NULL, 1e-5), REMAT_EINVAL, "n_norm 3");
    RT_FAILS(remat_rms_norm(&y, x, 1, w4, 1e-5), REMAT_ESHAPE, "remat_rms_norm: weight");
    RT_FAILS(remat_rms_norm(&y, x, 1, w64, 1e-5), REMAT_EDTYPE, "remat_rms_norm");
    RT_FAILS(remat_rms_norm(&y, x, 1, NULL, -1), REMAT_EINVAL, "eps");
    RT_FAILS(remat_rms_norm(&y, x, 1, NULL, INFINITY), REMAT_EINVAL, "eps");
    RT_FAILS(remat_rms_norm(&y, xi, 1, NULL, 1e-5), REMAT_EDTYPE, "x");
    RT_FAILS(remat_rms_norm(&y, NULL, 1, NULL, 1e-5), REMAT_EINVAL, "remat_rms_norm");
    cr_assert_null(y);
    remat_release(x), remat_release(w4), remat_release(w64), remat_release(xi);
    cr_assert_eq(remat_live_tensors(), 0);
}
