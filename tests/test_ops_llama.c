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
            cr_assert(fabs(yv[r * 3 + c] - want) <= 1e-14, "row %d col %d: %.17g, want %.17g", r, c,
                      yv[r * 3 + c], want);
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

/* ---- rope ---------------------------------------------------------------------------------- */
/* Hand-computed: D = 4, so pairs (0, 2) and (1, 3) turn by pos and pos / sqrt(theta). */
Test(llama_ops, rope_values) {
    static const double xv[8] = {1, 2, 3, 4, -1, 0.5, 2, -3};
    const double theta = 100.0;
    remat_tensor *x = rt_tensor(4, (int64_t[]){1, 1, 2, 4}, REMAT_F64, xv), *y = NULL;
    remat_tensor *pos = rt_tensor(1, (int64_t[]){2}, REMAT_I64, (double[]){3, 11});
    RT_OK(remat_rope(&y, x, pos, theta));
    double *yv = rt_values(y);
    const double p[2] = {3, 11}, f[2] = {1.0, 1.0 / sqrt(theta)};
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 2; i++) {
            double a = p[t] * f[i], u = xv[t * 4 + i], v = xv[t * 4 + i + 2];
            double w0 = u * cos(a) - v * sin(a), w1 = v * cos(a) + u * sin(a);
            cr_assert(fabs(yv[t * 4 + i] - w0) < 1e-14 && fabs(yv[t * 4 + i + 2] - w1) < 1e-14,
                      "t %d pair %d: (%.17g, %.17g), want (%.17g, %.17g)", t, i, yv[t * 4 + i],
                      yv[t * 4 + i + 2], w0, w1);
        }
    free(yv);
    remat_release(x), remat_release(y), remat_release(pos);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* A KV cache: rope over positions [5, 8) of a sequence is rows 5..7 of rope over the whole
 * sequence, bitwise; NULL positions are 0..T-1. */
Test(llama_ops, rope_positions_are_a_slice_of_the_sequence) {
    remat_dtype dts[3] = {REMAT_F32, REMAT_F64, REMAT_BF16};
    for (int d = 0; d < 3; d++) {
        remat_tensor *x32 = rt_rand(4, (int64_t[]){2, 3, 9, 8}, REMAT_F32, -2, 2, 31);
        remat_tensor *x = NULL, *full = NULL, *part = NULL, *xs = NULL, *want = NULL, *y0 = NULL;
        RT_OK(remat_to_dtype(&x, x32, dts[d]));
        remat_tensor *pos = rt_tensor(1, (int64_t[]){3}, REMAT_I64, (double[]){5, 6, 7});
        remat_tensor *all =
            rt_tensor(1, (int64_t[]){9}, REMAT_I64, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8});
        RT_OK(remat_rope(&full, x, NULL, 10000.0));
        RT_OK(remat_rope(&y0, x, all, 10000.0));
        cr_assert(rt_bitwise_equal(full, y0), "NULL positions differ from 0..T-1");
        RT_OK(remat_slice(&xs, x, 2, 5, 8, 1));
        RT_OK(remat_rope(&part, xs, pos, 10000.0));
        RT_OK(remat_slice(&want, full, 2, 5, 8, 1));
        remat_tensor *wc = NULL;
        RT_OK(remat_contiguous(&wc, want));
        cr_assert(rt_bitwise_equal(part, wc), "dtype %d: positions 5..7 differ from the slice", d);
        remat_release(x32), remat_release(x), remat_release(full), remat_release(part);
        remat_release(xs), remat_release(want), remat_release(wc), remat_release(pos);
        remat_release(all), remat_release(y0);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The default positions' tables are cached process-wide (src/backends/cpu/rope.c): 16 keys
 * (theta, T, D, dtype), more than the cache has slots and each differing from another in one
 * field, twice, give bitwise what explicit positions 0..T-1 (never cached) give, forward
 * and backward. */
Test(llama_ops, rope_table_cache_matches_explicit_positions) {
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < 16; k++) {
            const int64_t T = k & 2 ? 6 : 5, D = k & 4 ? 8 : 4;
            const double theta = k & 1 ? 137.0 : 100.0;
            remat_dtype dt = k & 8 ? REMAT_F64 : REMAT_F32;
            remat_tensor *x = rt_leaf(rt_rand(3, (int64_t[]){2, T, D}, dt, -2, 2, 70 + k));
            double *pv = malloc(sizeof(double) * (size_t)T);
            for (int64_t t = 0; t < T; t++) pv[t] = (double)t;
            remat_tensor *pos = rt_tensor(1, (int64_t[]){T}, REMAT_I64, pv);
            remat_tensor *y[2], *g[2];
            for (int w = 0; w < 2; w++) {
                RT_OK(remat_rope(&y[w], x, w ? pos : NULL, theta));
                RT_OK(remat_grad(1, &y[w], &x, 1, &x, false, false, &g[w]));
            }
            cr_assert(rt_bitwise_equal(y[0], y[1]), "pass %d key %d: cached table differs", pass,
                      k);
            cr_assert(rt_bitwise_equal(g[0], g[1]), "pass %d key %d: cached backward differs", pass,
                      k);
            for (int w = 0; w < 2; w++) remat_release(y[w]), remat_release(g[w]);
            remat_release(x), remat_release(pos), free(pv);
        }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The rotation keeps every pair's norm, and its gradient is the inverse rotation: rope's
 * backward of rope(x) gives x back. */
Test(llama_ops, rope_is_a_rotation) {
    remat_tensor *x = rt_leaf(rt_rand(3, (int64_t[]){2, 6, 10}, REMAT_F64, -2, 2, 41));
    remat_tensor *y = NULL, *g = NULL;
    RT_OK(remat_rope(&y, x, NULL, 500.0));
    double *xv = rt_values(x), *yv = rt_values(y);
    for (int r = 0; r < 12; r++)
        for (int i = 0; i < 5; i++) {
            double a = hypot(xv[r * 10 + i], xv[r * 10 + i + 5]);
            double b = hypot(yv[r * 10 + i], yv[r * 10 + i + 5]);
            cr_assert(fabs(a - b) < 1e-13, "row %d pair %d: norm %.17g became %.17g", r, i, a, b);
        }
    RT_OK(remat_grad(1, &y, &y, 1, &x, false, false, &g)); /* R^T (R x) = x */
    rt_assert_close(g, x, 1e-13, 1e-13, "the gradient is the inverse rotation");
    free(xv), free(yv);
    remat_release(x), remat_release(y), remat_release(g);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int rope_fn(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    return remat_rope(out, in[0], ud, 30.0);
}

Test(llama_ops, rope_gradcheck_views_and_threads) {
    /* a transposed (B, H, T, D) view of a (B, T, H, D) projection, as a model makes it */
    remat_tensor *base = rt_leaf(rt_rand(4, (int64_t[]){2, 5, 3, 6}, REMAT_F64, -2, 2, 51));
    remat_tensor *x = NULL;
    RT_OK(remat_transpose(&x, base, 1, 2));
    remat_tensor *pos = rt_tensor(1, (int64_t[]){5}, REMAT_I64, (double[]){9, 2, 4, 0, 1000});
    RT_GRADCHECK(rope_fn, pos, 1, &x);
    RT_GRADCHECK(rope_fn, NULL, 1, &x);
    remat_release(x), remat_release(base), remat_release(pos);
    /* large enough for threads: 1 and 2 threads give the same bits */
    remat_tensor *big = rt_leaf(rt_rand(4, (int64_t[]){2, 8, 64, 64}, REMAT_F32, -2, 2, 52));
    remat_tensor *y[2], *g[2];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        RT_OK(remat_rope(&y[t], big, NULL, 10000.0));
        RT_OK(remat_grad(1, &y[t], &big, 1, &big, false, false, &g[t]));
    }
    omp_set_num_threads(2);
    cr_assert(rt_bitwise_equal(y[0], y[1]) && rt_bitwise_equal(g[0], g[1]),
              "rope depends on the thread count");
    for (int t = 0; t < 2; t++) remat_release(y[t]), remat_release(g[t]);
    remat_release(big);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* bf16 rope runs in bf16 (no autocast category): the f32 rotation of the widened values with
 * f32 cosines and sines, rounded once */
Test(llama_ops, rope_bf16) {
    remat_tensor *x32 = rt_rand(4, (int64_t[]){1, 2, 7, 16}, REMAT_F32, -2, 2, 61);
    remat_tensor *xb = NULL, *xw = NULL, *yb = NULL, *y32 = NULL, *yr = NULL;
    RT_OK(remat_to_dtype(&xb, x32, REMAT_BF16));
    RT_OK(remat_to_dtype(&xw, xb, REMAT_F32));
    RT_OK(remat_rope(&yb, xb, NULL, 10000.0));
    cr_assert_eq(remat_tensor_dtype(yb), REMAT_BF16);
    RT_OK(remat_rope(&y32, xw, NULL, 10000.0));
    RT_OK(remat_to_dtype(&yr, y32, REMAT_BF16));
    cr_assert(rt_bitwise_equal(yb, yr), "bf16 rope differs from the rounded f32 rope");
    remat_release(x32), remat_release(xb), remat_release(xw), remat_release(yb);
    remat_release(y32), remat_release(yr);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(llama_ops, rope_errors) {
    remat_tensor *x = rt_rand(4, (int64_t[]){1, 2, 3, 4}, REMAT_F32, -1, 1, 1), *y = NULL;
    remat_tensor *odd = rt_rand(3, (int64_t[]){2, 3, 5}, REMAT_F32, -1, 1, 2);
    remat_tensor *vec = rt_rand(1, (int64_t[]){4}, REMAT_F32, -1, 1, 3);
    remat_tensor *p2 = rt_tensor(1, (int64_t[]){2}, REMAT_I64, (double[]){0, 1});
    remat_tensor *pf = rt_rand(1, (int64_t[]){3}, REMAT_F32, 0, 3, 4);
    remat_tensor *xi = rt_tensor(2, (int64_t[]){3, 4}, REMAT_I64, (double[12]){0});
    RT_FAILS(remat_rope(&y, odd, NULL, 1e4), REMAT_ESHAPE, "D even");
    RT_FAILS(remat_rope(&y, vec, NULL, 1e4), REMAT_ESHAPE, "remat_rope: x must be (..., T, D)");
    RT_FAILS(remat_rope(&y, x, p2, 1e4), REMAT_ESHAPE, "positions");
    RT_FAILS(remat_rope(&y, x, pf, 1e4), REMAT_EDTYPE, "positions");
    RT_FAILS(remat_rope(&y, x, NULL, 0), REMAT_EINVAL, "theta");
    RT_FAILS(remat_rope(&y, x, NULL, NAN), REMAT_EINVAL, "theta");
    RT_FAILS(remat_rope(&y, xi, NULL, 1e4), REMAT_EDTYPE, "x");
    RT_FAILS(remat_rope(&y, NULL, NULL, 1e4), REMAT_EINVAL, "remat_rope");
    cr_assert_null(y);
    remat_release(x), remat_release(odd), remat_release(vec), remat_release(p2);
    remat_release(pf), remat_release(xi);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- grouped-query attention in bf16 --------------------------------------------------------
 * With bf16 GEMMs where the CPU has them and without (REMAT_NO_BF16: per-entry widened f32):
 * within bf16 rounding of the f64 attention of the same values (bounds as the MHA ones of
 * tests/test_autocast.c), and the same bits at 1 and 2 threads (a kv head's query heads add
 * to its dK and dV in turn, on one thread). Tq spans two query blocks. */
static double rel_err(remat_tensor *got, remat_tensor *want) {
    remat_tensor *g64 = NULL;
    RT_OK(remat_to_dtype(&g64, got, REMAT_F64));
    double scale = 0, *w = rt_values(want);
    for (int64_t i = 0; i < remat_numel(want); i++) scale = fmax(scale, fabs(w[i]));
    free(w);
    double e = rt_max_abs_diff(g64, want) / scale;
    remat_release(g64);
    return e;
}

static void gqa_run(remat_tensor *const *in, remat_tensor *w, remat_tensor **out) {
    RT_OK(remat_attention(&out[0], in[0], in[1], in[2], true, 0));
    RT_OK(remat_grad(1, &out[0], &w, 3, in, false, false, out + 1));
}

Test(llama_ops, gqa_attention_bf16) {
    const int64_t sq[4] = {2, 6, 70, 16}, skv[4] = {2, 2, 70, 16};
    remat_tensor *in[3], *in64[3], *w = NULL, *w64 = NULL, *ref[4];
    for (int i = 0; i < 3; i++) {
        remat_tensor *x = rt_rand(4, i ? skv : sq, REMAT_F32, -2, 2, 80 + (unsigned)i);
        RT_OK(remat_to_dtype(&in[i], x, REMAT_BF16));
        RT_OK(remat_to_dtype(&in64[i], in[i], REMAT_F64));
        RT_OK(remat_set_requires_grad(in[i], true));
        RT_OK(remat_set_requires_grad(in64[i], true));
        remat_release(x);
    }
    remat_tensor *wx = rt_rand(4, sq, REMAT_F32, -1, 1, 89);
    RT_OK(remat_to_dtype(&w, wx, REMAT_BF16));
    RT_OK(remat_to_dtype(&w64, w, REMAT_F64));
    remat_release(wx);
    gqa_run(in64, w64, ref);
    const double bound[4] = {6e-3, 7e-3, 7e-3, 6e-3};
    static const char *const what[4] = {"y", "dq", "dk", "dv"};
    for (int nobf = 0; nobf < 2; nobf++) {
        if (nobf) setenv("REMAT_NO_BF16", "1", 1);
        remat_tensor *r[2][4];
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            gqa_run(in, w, r[t]);
        }
        omp_set_num_threads(2);
        for (int i = 0; i < 4; i++) {
            cr_assert(rt_bitwise_equal(r[0][i], r[1][i]),
                      "%s (REMAT_NO_BF16=%d) depends on the "
                      "thread count",
                      what[i], nobf);
            double e = rel_err(r[0][i], ref[i]);
            cr_assert(e <= bound[i], "%s (REMAT_NO_BF16=%d): error %g > %g", what[i], nobf, e,
                      bound[i]);
            remat_release(r[0][i]), remat_release(r[1][i]);
        }
        unsetenv("REMAT_NO_BF16");
    }
    for (int i = 0; i < 3; i++) remat_release(in[i]), remat_release(in64[i]);
    for (int i = 0; i < 4; i++) remat_release(ref[i]);
    remat_release(w), remat_release(w64);
    cr_assert_eq(remat_live_tensors(), 0);
}
