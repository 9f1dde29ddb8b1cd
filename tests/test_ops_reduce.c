/* tests/test_ops_reduce.c — sum, mean, sum_all and max: hand-computed
 * values, every dim combination against a naive reference, keepdim both
 * ways, negative and middle dims, strided inputs, f32 accuracy of the
 * cascade sum, thread-count independence, f64 gradchecks, skip mode and
 * argument errors. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#include "autograd/graph.h"
#include "support/rt.h"

/* REMAT_TEST_DEVICE=fenced|cuda (make test-fenced, make test-cuda) puts the tensors that the
 * rt helpers make on that device (tests/support/rt.h) */
RT_ON_TEST_DEVICE

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

static void assert_shape(const remat_tensor *t, int ndim, const int64_t *shape, const char *what) {
    cr_assert_eq(remat_ndim(t), ndim, "%s: ndim %d, expected %d", what, remat_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        cr_assert_eq(remat_size(t, d), shape[d], "%s: dim %d is %lld, expected %lld", what, d,
                     (long long)remat_size(t, d), (long long)shape[d]);
}

/* Naive reference: sum (or mean) of a's values over mask, result in
 * row-major order of the kept dims. */
static double *ref_reduce(const remat_tensor *a, const bool *mask, bool mean, int64_t *n_out) {
    int nd = remat_ndim(a);
    const int64_t *sh = remat_shape(a);
    double *v = rt_values(a);
    int64_t no = 1, cnt = 1;
    for (int d = 0; d < nd; d++) {
        if (mask[d]) cnt *= sh[d];
        else no *= sh[d];
    }
    double *r = calloc((size_t)(no ? no : 1), sizeof(double));
    int64_t n = remat_numel(a);
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, o = 0, mul = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t id = rem % sh[d];
            rem /= sh[d];
            if (!mask[d]) {
                o += id * mul;
                mul *= sh[d];
            }
        }
        r[o] += v[i];
    }
    if (mean)
        for (int64_t o = 0; o < no; o++) r[o] /= (double)cnt;
    free(v);
    *n_out = no;
    return r;
}

/* ---- forward values ---------------------------------------------------------------------- */
Test(reduce, sum_hand_computed) {
    int64_t s[2] = {2, 3};
    double v[6] = {1, 2, 3, 4, 5, 6};
    remat_tensor *a = rt_tensor(2, s, REMAT_F32, v), *y = NULL;
    int d0 = 0, d1 = 1, dm1 = -1;
    RT_OK(remat_sum(&y, a, 1, &d0, false));
    assert_values(y, 3, (double[]){5, 7, 9}, 0, "sum dim 0");
    assert_shape(y, 1, (int64_t[]){3}, "sum dim 0");
    remat_release_p(&y);
    RT_OK(remat_sum(&y, a, 1, &d1, false));
    assert_values(y, 2, (double[]){6, 15}, 0, "sum dim 1");
    remat_release_p(&y);
    RT_OK(remat_sum(&y, a, 1, &dm1, true));
    assert_shape(y, 2, (int64_t[]){2, 1}, "sum dim -1 keepdim");
    assert_values(y, 2, (double[]){6, 15}, 0, "sum dim -1 keepdim");
    remat_release_p(&y);
    RT_OK(remat_sum(&y, a, 0, NULL, false));
    assert_shape(y, 0, NULL, "sum all");
    assert_values(y, 1, (double[]){21}, 0, "sum all");
    remat_release_p(&y);
    RT_OK(remat_sum(&y, a, 0, NULL, true));
    assert_shape(y, 2, (int64_t[]){1, 1}, "sum all keepdim");
    remat_release_p(&y);
    RT_OK(remat_sum_all(&y, a));
    assert_shape(y, 0, NULL, "sum_all");
    assert_values(y, 1, (double[]){21}, 0, "sum_all");
    remat_release_p(&y);
    RT_OK(remat_mean(&y, a, 0, NULL, false));
    assert_values(y, 1, (double[]){3.5}, 0, "mean all");
    remat_release_p(&y);
    RT_OK(remat_mean(&y, a, 1, &d0, true));
    assert_shape(y, 2, (int64_t[]){1, 3}, "mean dim 0 keepdim");
    assert_values(y, 3, (double[]){2.5, 3.5, 4.5}, 0, "mean dim 0 keepdim");
    remat_release_p(&y);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Every subset of dims of a 4-dim tensor, keepdim both ways, sum and mean,
 * f32 and f64, with negative spellings for odd subsets. */
Test(reduce, all_dim_subsets_match_reference) {
    int64_t s[4] = {3, 4, 5, 6};
    for (int dt = 0; dt < 2; dt++) {
        remat_dtype dtype = dt ? REMAT_F64 : REMAT_F32;
        remat_tensor *a = rt_rand(4, s, dtype, -1, 1, 7);
        for (int m = 1; m < 16; m++) {
            int dims[4], nd = 0;
            bool mask[4];
            for (int d = 0; d < 4; d++) {
                mask[d] = (m >> d) & 1;
                if (mask[d]) dims[nd++] = (m & 1) ? d - 4 : d;
            }
            for (int mean = 0; mean < 2; mean++) {
                int64_t no;
                double *ref = ref_reduce(a, mask, mean, &no);
                for (int kd = 0; kd < 2; kd++) {
                    remat_tensor *y = NULL;
                    RT_OK((mean ? remat_mean : remat_sum)(&y, a, nd, dims, kd));
                    int64_t es[4];
                    int en = 0;
                    for (int d = 0; d < 4; d++) {
                        if (!mask[d]) es[en++] = s[d];
                        else if (kd) es[en++] = 1;
                    }
                    char what[64];
                    snprintf(what, sizeof what, "%s mask %d keepdim %d %s", mean ? "mean" : "sum",
                             m, kd, dt ? "f64" : "f32");
                    assert_shape(y, en, es, what);
                    assert_values(y, (int)no, ref, dt ? 1e-12 : 2e-6, what);
                    remat_release(y);
                }
                free(ref);
            }
        }
        remat_release(a);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(reduce, strided_input) {
    int64_t s[3] = {4, 5, 6};
    remat_tensor *a = rt_rand(3, s, REMAT_F64, -1, 1, 3), *t = NULL, *y = NULL, *c = NULL,
                 *yc = NULL;
    RT_OK(remat_transpose(&t, a, 0, 2)); /* (6, 5, 4), non-contiguous */
    cr_assert(!remat_is_contiguous(t));
    RT_OK(remat_contiguous(&c, t));
    int dims[2] = {1, -1};
    RT_OK(remat_sum(&y, t, 2, dims, false));
    RT_OK(remat_sum(&yc, c, 2, dims, false));
    assert_shape(y, 1, (int64_t[]){6}, "strided sum");
    rt_assert_close(y, yc, 1e-12, 1e-12, "strided vs contiguous sum");
    remat_release(y);
    remat_release(yc);
    RT_OK(remat_max(&y, NULL, t, 1, false));
    RT_OK(remat_max(&yc, NULL, c, 1, false));
    cr_assert(rt_bitwise_equal(y, yc), "strided max differs");
    remat_release(y);
    remat_release(yc);
    remat_release(c);
    remat_release(t);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(reduce, zero_dim_and_empty) {
    remat_tensor *s = NULL, *y = NULL, *idx = NULL;
    RT_OK(remat_scalar(&s, 2.5, REMAT_F64));
    int d0 = 0, dm1 = -1;
    RT_OK(remat_sum(&y, s, 1, &d0, true));
    assert_shape(y, 0, NULL, "sum of 0-dim");
    assert_values(y, 1, (double[]){2.5}, 0, "sum of 0-dim");
    remat_release_p(&y);
    RT_OK(remat_max(&y, &idx, s, -1, false));
    assert_values(y, 1, (double[]){2.5}, 0, "max of 0-dim");
    assert_values(idx, 1, (double[]){0}, 0, "argmax of 0-dim");
    remat_release_p(&y);
    remat_release_p(&idx);
    RT_FAILS(remat_sum(&y, s, 1, (int[]){1}, false), REMAT_EINVAL, "remat_sum");
    remat_release(s);

    int64_t es[2] = {0, 3};
    remat_tensor *e = NULL;
    RT_OK(remat_zeros(&e, 2, es, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_sum(&y, e, 1, &d0, false));
    assert_values(y, 3, (double[]){0, 0, 0}, 0, "sum over empty dim");
    remat_release_p(&y);
    RT_OK(remat_mean(&y, e, 1, &d0, false));
    double *v = rt_values(y);
    cr_assert(isnan(v[0]), "mean over an empty dim is NaN, got %g", v[0]);
    free(v);
    remat_release_p(&y);
    RT_OK(remat_sum(&y, e, 1, &dm1, false));
    assert_shape(y, 1, (int64_t[]){0}, "sum of (0,3) over dim 1");
    remat_release_p(&y);
    RT_FAILS(remat_max(&y, NULL, e, 0, false), REMAT_ESHAPE, "remat_max");
    remat_release(e);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The cascade sum keeps f32 sums of many small values accurate, where a
 * running f32 sum would drift by ~1e-3 relative. */
Test(reduce, f32_sum_is_accurate) {
    int64_t n = 1 << 22;
    remat_tensor *a = NULL, *y = NULL;
    RT_OK(remat_full(&a, 1, &n, 0.1, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_sum_all(&y, a));
    double v, exact = (double)0.1f * (double)n;
    RT_OK(remat_item(y, &v));
    cr_assert(fabs(v - exact) / exact < 1e-5, "f32 sum %.9g vs exact %.9g", v, exact);
    remat_release(y);
    remat_release(a);
    /* column reduction (N, C) -> (C) over many rows */
    int64_t s2[2] = {200000, 3};
    RT_OK(remat_full(&a, 2, s2, 0.1, REMAT_F32, REMAT_DEVICE_CPU));
    int d0 = 0;
    RT_OK(remat_sum(&y, a, 1, &d0, false));
    exact = (double)0.1f * 200000.0;
    double *c = rt_values(y);
    for (int j = 0; j < 3; j++)
        cr_assert(fabs(c[j] - exact) / exact < 1e-5, "column %d: %.9g vs %.9g", j, c[j], exact);
    free(c);
    remat_release(y);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Same bits with 1 and 2 OpenMP threads, for the parallel paths (long
 * rows, many rows, column blocks, middle dims) and max. */
Test(reduce, results_independent_of_thread_count) {
    struct {
        int nd;
        int64_t s[3];
        int n_dims;
        int dims[2];
    } cases[] = {
        {1, {1 << 20}, 0, {0}},        /* sum_all: chunked long row */
        {2, {4096, 768}, 1, {-1}},     /* rows */
        {2, {4096, 768}, 1, {0}},      /* (N, C) -> (C) */
        {3, {64, 300, 40}, 1, {1}},    /* middle dim */
        {3, {64, 300, 40}, 2, {0, 2}}, /* two separate groups */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        remat_tensor *a = rt_rand(cases[k].nd, cases[k].s, REMAT_F32, -1, 1, (unsigned)k + 1);
        remat_tensor *y[2] = {NULL, NULL}, *m[2] = {NULL, NULL}, *ix[2] = {NULL, NULL};
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            RT_OK(remat_sum(&y[t], a, cases[k].n_dims, cases[k].dims, false));
            RT_OK(remat_max(&m[t], &ix[t], a, cases[k].dims[0], false));
        }
        cr_assert(rt_bitwise_equal(y[0], y[1]), "case %zu: sum differs between 1 and 2 threads", k);
        cr_assert(rt_bitwise_equal(m[0], m[1]), "case %zu: max differs", k);
        cr_assert(rt_bitwise_equal(ix[0], ix[1]), "case %zu: argmax differs", k);
        /* and the f32 result is close to an f64 reference */
        bool mask[3] = {false, false, false};
        if (cases[k].n_dims == 0) mask[0] = true;
        for (int j = 0; j < cases[k].n_dims; j++) {
            int d = cases[k].dims[j];
            mask[d < 0 ? d + cases[k].nd : d] = true;
        }
        int64_t no;
        double *ref = ref_reduce(a, mask, false, &no);
        double *got = rt_values(y[0]);
        for (int64_t i = 0; i < no; i++)
            cr_assert(fabs(got[i] - ref[i]) < 1e-3, "case %zu elem %lld: %g vs %g", k, (long long)i,
                      got[i], ref[i]);
        free(ref);
        free(got);
        for (int t = 0; t < 2; t++) {
            remat_release(y[t]);
            remat_release(m[t]);
            remat_release(ix[t]);
        }
        remat_release(a);
    }
    omp_set_num_threads(2);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(reduce, max_values_indices_ties_and_nan) {
    int64_t s[2] = {2, 4};
    double v[8] = {1, 5, 5, 2, /**/ -1, -3, -1, -2};
    remat_tensor *a = rt_tensor(2, s, REMAT_F64, v), *y = NULL, *ix = NULL;
    RT_OK(remat_max(&y, &ix, a, 1, false));
    assert_values(y, 2, (double[]){5, -1}, 0, "max dim 1");
    assert_values(ix, 2, (double[]){1, 0}, 0, "argmax dim 1 (first of ties)");
    cr_assert_eq(remat_tensor_dtype(ix), REMAT_I64);
    remat_release_p(&y);
    remat_release_p(&ix);
    RT_OK(remat_max(&y, &ix, a, -2, true));
    assert_shape(y, 2, (int64_t[]){1, 4}, "max dim -2 keepdim");
    assert_shape(ix, 2, (int64_t[]){1, 4}, "argmax dim -2 keepdim");
    assert_values(y, 4, (double[]){1, 5, 5, 2}, 0, "max dim 0");
    assert_values(ix, 4, (double[]){0, 0, 0, 0}, 0, "argmax dim 0");
    remat_release_p(&y);
    remat_release_p(&ix);
    /* gradient goes to the first maximal element only */
    rt_leaf(a);
    RT_OK(remat_max(&y, NULL, a, 1, false));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "MaxBackward");
    remat_tensor *l = NULL;
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    assert_values(remat_tensor_grad(a), 8, (double[]){0, 1, 0, 0, 1, 0, 0, 0}, 0, "max grad");
    remat_release(l);
    remat_release(y);
    remat_release(a);
    /* NaN is the maximum, as in PyTorch */
    double vn[4] = {1, NAN, 3, NAN};
    int64_t s4 = 4;
    a = rt_tensor(1, &s4, REMAT_F32, vn);
    RT_OK(remat_max(&y, &ix, a, 0, false));
    double mv;
    RT_OK(remat_item(y, &mv));
    cr_assert(isnan(mv), "max with NaN should be NaN, got %g", mv);
    assert_values(ix, 1, (double[]){1}, 0, "argmax of the first NaN");
    remat_release(y);
    remat_release(ix);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Long rows take the lane-parallel path: ties, NaN and -0 must still
 * follow the first-maximal rule. */
Test(reduce, max_long_rows_match_scalar_rule) {
    int64_t s[2] = {4, 1001};
    double *v = malloc(sizeof(double) * 4 * 1001);
    for (int i = 0; i < 4 * 1001; i++) v[i] = sin(i * 0.37) * 10 - 20;
    v[0 * 1001 + 500] = 7; /* row 0: tie at 500 and 700 */
    v[0 * 1001 + 700] = 7;
    v[1 * 1001 + 1000] = 50; /* row 1: max in the scalar tail */
    v[2 * 1001 + 300] = NAN; /* row 2: first NaN wins */
    v[2 * 1001 + 800] = NAN;
    v[2 * 1001 + 10] = 100;
    for (int i = 0; i < 1001; i++) v[3 * 1001 + i] = 0; /* row 3: zeros */
    v[3 * 1001 + 3] = -0.0;
    v[3 * 1001 + 0] = -1;
    for (int dt = 0; dt < 2; dt++) {
        remat_tensor *a = rt_tensor(2, s, dt ? REMAT_F64 : REMAT_F32, v), *y = NULL, *ix = NULL;
        RT_OK(remat_max(&y, &ix, a, 1, false));
        double *yv = rt_values(y), *iv = rt_values(ix);
        cr_assert_eq(yv[0], 7);
        cr_assert_eq(iv[0], 500);
        cr_assert_eq(yv[1], 50);
        cr_assert_eq(iv[1], 1000);
        cr_assert(isnan(yv[2]));
        cr_assert_eq(iv[2], 300);
        cr_assert_eq(yv[3], 0);
        cr_assert_eq(iv[3], 1);
        free(yv);
        free(iv);
        remat_release(y);
        remat_release(ix);
        remat_release(a);
    }
    free(v);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- gradchecks ------------------------------------------------------------------------------ */
typedef struct red_args {
    int kind; /* 0 sum, 1 mean, 2 max, 3 sum_all */
    int n_dims;
    int dims[4];
    bool keepdim;
    bool transpose; /* feed a transposed (non-contiguous) view */
} red_args;

static int call_red(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    red_args *r = ud;
    remat_tensor *x = in[0], *t = NULL;
    if (r->transpose) {
        int rc = remat_transpose(&t, x, 0, -1);
        if (rc) return rc;
        x = t;
    }
    int rc;
    switch (r->kind) {
    case 0: rc = remat_sum(out, x, r->n_dims, r->dims, r->keepdim); break;
    case 1: rc = remat_mean(out, x, r->n_dims, r->dims, r->keepdim); break;
    case 2: rc = remat_max(out, NULL, x, r->dims[0], r->keepdim); break;
    default: rc = remat_sum_all(out, x); break;
    }
    remat_release(t);
    return rc;
}

Test(reduce, gradcheck_sum_mean_max) {
    int64_t s[3] = {3, 4, 5};
    red_args cases[] = {
        {0, 1, {1}, false, false},    {0, 1, {1}, true, false},  {0, 2, {0, 2}, false, false},
        {0, 2, {-1, 0}, true, false}, {0, 0, {0}, false, false}, {0, 1, {-1}, false, true},
        {0, 2, {1, 2}, true, true},   {1, 1, {1}, false, false}, {1, 2, {0, -1}, true, false},
        {1, 0, {0}, true, true},      {1, 1, {0}, false, true},  {2, 1, {1}, false, false},
        {2, 1, {-1}, true, false},    {2, 1, {0}, false, true},  {2, 1, {-2}, true, true},
        {3, 0, {0}, false, false},    {3, 0, {0}, false, true},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        remat_tensor *a = rt_leaf(rt_rand(3, s, REMAT_F64, -2, 2, (unsigned)k + 11));
        char msg[2048];
        cr_assert(rt_gradcheck(call_red, &cases[k], 1, &a, 1e-6, 1e-5, 1e-4, msg, sizeof msg),
                  "case %zu (kind %d): %s", k, cases[k].kind, msg);
        remat_release(a);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* sum's backward is what rm_sum_to uses for broadcast grads: a grad that
 * flows through a broadcasting add must come back summed. */
Test(reduce, backward_through_broadcast) {
    int64_t sa[2] = {4, 3}, sb[1] = {3};
    remat_tensor *a = rt_leaf(rt_rand(2, sa, REMAT_F64, -1, 1, 1));
    remat_tensor *b = rt_leaf(rt_rand(1, sb, REMAT_F64, -1, 1, 2));
    remat_tensor *c = NULL, *l = NULL;
    RT_OK(remat_add(&c, a, b));
    RT_OK(remat_sum_all(&l, c));
    RT_OK(remat_backward_scalar(l));
    assert_values(remat_tensor_grad(b), 3, (double[]){4, 4, 4}, 0, "grad of broadcast b");
    remat_release(l);
    remat_release(c);
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Skip mode (early-stopped recomputation): shapes are computed, no data. */
Test(reduce, skip_mode_makes_meta_outputs) {
    int64_t s[2] = {3, 4};
    remat_tensor *a = rt_leaf(rt_rand(2, s, REMAT_F32, -1, 1, 1)), *y = NULL, *ix = NULL;
    bool prev = rm_set_skip_mode(true);
    int d = 1;
    int rc1 = remat_sum(&y, a, 1, &d, true);
    int rc2 = remat_max(&ix, NULL, a, 0, false);
    rm_set_skip_mode(prev);
    RT_OK(rc1);
    RT_OK(rc2);
    cr_assert(!rt_has_data(y));
    assert_shape(y, 2, (int64_t[]){3, 1}, "skip-mode sum");
    assert_shape(ix, 1, (int64_t[]){4}, "skip-mode max");
    remat_release(y);
    remat_release(ix);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- errors ------------------------------------------------------------------------------------ */
Test(reduce, errors) {
    int64_t s[2] = {2, 3};
    remat_tensor *a = rt_rand(2, s, REMAT_F32, -1, 1, 1), *y = (remat_tensor *)&y, *ix = NULL;
    int bad = 2, dup[2] = {1, -1}, neg = -3;
    RT_FAILS(remat_sum(NULL, a, 0, NULL, false), REMAT_EINVAL, "remat_sum");
    RT_FAILS(remat_sum(&y, NULL, 0, NULL, false), REMAT_EINVAL, "remat_sum");
    cr_assert_null(y);
    RT_FAILS(remat_sum(&y, a, 1, &bad, false), REMAT_EINVAL, "remat_sum: dim 2 out of range");
    RT_FAILS(remat_sum(&y, a, 1, &neg, false), REMAT_EINVAL, "remat_sum");
    RT_FAILS(remat_sum(&y, a, 2, dup, false), REMAT_EINVAL, "more than once");
    RT_FAILS(remat_sum(&y, a, -1, dup, false), REMAT_EINVAL, "n_dims");
    RT_FAILS(remat_mean(&y, a, 1, &bad, true), REMAT_EINVAL, "remat_mean");
    RT_FAILS(remat_sum_all(&y, NULL), REMAT_EINVAL, "remat_sum_all");
    RT_FAILS(remat_max(&y, &ix, a, 2, false), REMAT_EINVAL, "remat_max");
    cr_assert_null(y);
    cr_assert_null(ix);
    RT_FAILS(remat_max(NULL, &ix, a, 0, false), REMAT_EINVAL, "remat_max");
    RT_FAILS(remat_max(&y, &ix, NULL, 0, false), REMAT_EINVAL, "remat_max");
    remat_tensor *i64 = NULL;
    RT_OK(remat_arange(&i64, 5));
    RT_FAILS(remat_sum(&y, i64, 0, NULL, false), REMAT_EDTYPE, "remat_sum");
    RT_FAILS(remat_max(&y, NULL, i64, 0, false), REMAT_EDTYPE, "remat_max");
    remat_release(i64);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}
