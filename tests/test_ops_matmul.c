/* tests/test_ops_matmul.c — matmul (every torch.matmul shape case, batch
 * broadcasting, strided operands), linear (with and without bias, 1-D / 2-D
 * / 3-D x), the GEMM layer against the built-in kernel, what backward saves,
 * empty sizes, skip mode, and argument errors. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/gemm.h"
#include "core/core.h"
#include "core/kernels.h"
#include "remat/autocast.h"
#include "support/rt.h"

/* REMAT_TEST_DEVICE=fenced|cuda (make test-fenced, make test-cuda) puts the tensors that the
 * rt helpers make on that device (tests/support/rt.h) */
RT_ON_TEST_DEVICE

static void assert_shape(const remat_tensor *t, int nd, const int64_t *shape, const char *what) {
    cr_assert_eq(remat_ndim(t), nd, "%s: ndim %d, expected %d", what, remat_ndim(t), nd);
    for (int d = 0; d < nd; d++)
        cr_assert_eq(remat_size(t, d), shape[d], "%s: dim %d is %lld, expected %lld", what, d,
                     (long long)remat_size(t, d), (long long)shape[d]);
}

static void assert_values(const remat_tensor *t, const double *expect, double tol,
                          const char *what) {
    double *v = rt_values(t);
    for (int64_t i = 0; i < remat_numel(t); i++)
        cr_assert(fabs(v[i] - expect[i]) <= tol * (1 + fabs(expect[i])),
                  "%s element %lld: %.10g vs expected %.10g", what, (long long)i, v[i], expect[i]);
    free(v);
}

/* Independent reference for torch.matmul: promote 1-D operands, broadcast
 * batch dims, triple loop in double. Returns the output's values row-major
 * (malloc'ed); the flat order is the same with or without the promoted dims. */
static double *ref_matmul(const remat_tensor *a, const remat_tensor *b) {
    int nda = remat_ndim(a), ndb = remat_ndim(b);
    int64_t sa[REMAT_MAX_DIMS + 1], sb[REMAT_MAX_DIMS + 1];
    int pa = 0, pb = 0;
    if (nda == 1) sa[pa++] = 1;
    for (int d = 0; d < nda; d++) sa[pa++] = remat_size(a, d);
    for (int d = 0; d < ndb; d++) sb[pb++] = remat_size(b, d);
    if (ndb == 1) sb[pb++] = 1;
    int64_t M = sa[pa - 2], K = sa[pa - 1], N = sb[pb - 1];
    cr_assert_eq(sb[pb - 2], K);
    int na = pa - 2, nbb = pb - 2, nb = na > nbb ? na : nbb;
    int64_t bs[REMAT_MAX_DIMS], nbatch = 1;
    for (int d = 0; d < nb; d++) {
        int ia = d - (nb - na), ib = d - (nb - nbb);
        int64_t x = ia >= 0 ? sa[ia] : 1, y = ib >= 0 ? sb[ib] : 1;
        bs[d] = x == 1 ? y : x;
        nbatch *= bs[d];
    }
    double *va = rt_values(a), *vb = rt_values(b);
    int64_t no = nbatch * M * N;
    double *o = calloc((size_t)(no > 0 ? no : 1), sizeof(double));
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t idx[REMAT_MAX_DIMS], r = bi;
        for (int d = nb - 1; d >= 0; d--) {
            idx[d] = r % bs[d];
            r /= bs[d];
        }
        int64_t oa = 0, ob = 0;
        for (int d = 0; d < na; d++) oa = oa * sa[d] + (sa[d] == 1 ? 0 : idx[d + nb - na]);
        for (int d = 0; d < nbb; d++) ob = ob * sb[d] + (sb[d] == 1 ? 0 : idx[d + nb - nbb]);
        const double *A = va + oa * M * K, *B = vb + ob * K * N;
        double *C = o + bi * M * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
                C[i * N + j] = s;
            }
    }
    free(va);
    free(vb);
    return o;
}

static int f_matmul(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    return remat_matmul(out, in[0], in[1]);
}

static int f_linear(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    return remat_linear(out, in[0], in[1], n > 2 ? in[2] : NULL);
}

/* ---- forward values ------------------------------------------------------------------------ */

Test(ops_matmul, values_2d_by_hand) {
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++) {
        remat_tensor *a = rt_tensor(2, (int64_t[]){2, 3}, dt, (double[]){1, 2, 3, 4, 5, 6});
        remat_tensor *b = rt_tensor(2, (int64_t[]){3, 2}, dt, (double[]){7, 8, 9, 10, 11, 12});
        remat_tensor *y;
        RT_OK(remat_matmul(&y, a, b));
        assert_shape(y, 2, (int64_t[]){2, 2}, "2x3 @ 3x2");
        cr_assert_eq(remat_tensor_dtype(y), (remat_dtype)dt);
        assert_values(y, (double[]){58, 64, 139, 154}, 0, "2x3 @ 3x2");
        remat_release(y);
        remat_release(a);
        remat_release(b);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_matmul, values_vectors_by_hand) {
    remat_tensor *u = rt_tensor(1, (int64_t[]){3}, REMAT_F64, (double[]){1, 2, 3});
    remat_tensor *v = rt_tensor(1, (int64_t[]){3}, REMAT_F64, (double[]){4, 5, 6});
    remat_tensor *m = rt_tensor(2, (int64_t[]){2, 3}, REMAT_F64, (double[]){1, 2, 3, 4, 5, 6});
    remat_tensor *w = rt_tensor(1, (int64_t[]){2}, REMAT_F64, (double[]){1, 2});
    remat_tensor *y;
    /* 1-D · 1-D: a 0-dim dot product */
    RT_OK(remat_matmul(&y, u, v));
    cr_assert_eq(remat_ndim(y), 0);
    assert_values(y, (double[]){32}, 0, "dot");
    remat_release(y);
    /* 2-D · 1-D: matrix-vector, the appended dim removed */
    RT_OK(remat_matmul(&y, m, u));
    assert_shape(y, 1, (int64_t[]){2}, "mat @ vec");
    assert_values(y, (double[]){14, 32}, 0, "mat @ vec");
    remat_release(y);
    /* 1-D · 2-D: vector-matrix, the prepended dim removed */
    RT_OK(remat_matmul(&y, w, m));
    assert_shape(y, 1, (int64_t[]){3}, "vec @ mat");
    assert_values(y, (double[]){9, 12, 15}, 0, "vec @ mat");
    remat_release(y);
    remat_release(u);
    remat_release(v);
    remat_release(m);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_matmul, values_batched_by_hand) {
    /* (2, 2, 2) @ (2, 2): the 2-D b is broadcast over the batch */
    remat_tensor *a =
        rt_tensor(3, (int64_t[]){2, 2, 2}, REMAT_F32, (double[]){1, 0, 0, 1, 1, 2, 3, 4});
    remat_tensor *b = rt_tensor(2, (int64_t[]){2, 2}, REMAT_F32, (double[]){5, 6, 7, 8});
    remat_tensor *y;
    RT_OK(remat_matmul(&y, a, b));
    assert_shape(y, 3, (int64_t[]){2, 2, 2}, "batched");
    assert_values(y, (double[]){5, 6, 7, 8, 19, 22, 43, 50}, 0, "batched");
    remat_release(y);
    /* (2) @ (2, 2, 2): a vector against a batch */
    remat_tensor *v = rt_tensor(1, (int64_t[]){2}, REMAT_F32, (double[]){1, 1});
    RT_OK(remat_matmul(&y, v, a));
    assert_shape(y, 2, (int64_t[]){2, 2}, "vec @ batch");
    assert_values(y, (double[]){1, 1, 4, 6}, 0, "vec @ batch");
    remat_release(y);
    RT_OK(remat_matmul(&y, a, v));
    assert_shape(y, 2, (int64_t[]){2, 2}, "batch @ vec");
    assert_values(y, (double[]){1, 1, 3, 7}, 0, "batch @ vec");
    remat_release(y);
    remat_release(v);
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

typedef struct shape_case {
    int nda, ndb;
    int64_t sa[4], sb[4];
    int ndo;
    int64_t so[4];
} shape_case;

static const shape_case k_cases[] = {
    {1, 1, {5}, {5}, 0, {0}},
    {1, 2, {4}, {4, 3}, 1, {3}},
    {2, 1, {3, 4}, {4}, 1, {3}},
    {2, 2, {3, 4}, {4, 5}, 2, {3, 5}},
    {3, 3, {2, 3, 4}, {2, 4, 5}, 3, {2, 3, 5}},
    {4, 3, {2, 1, 3, 4}, {5, 4, 2}, 4, {2, 5, 3, 2}},
    {3, 2, {3, 5, 4}, {4, 2}, 3, {3, 5, 2}},
    {2, 3, {5, 4}, {3, 4, 2}, 3, {3, 5, 2}},
    {1, 3, {4}, {3, 4, 2}, 2, {3, 2}},
    {3, 1, {3, 5, 4}, {4}, 2, {3, 5}},
    {3, 3, {1, 3, 4}, {2, 4, 5}, 3, {2, 3, 5}},
    {4, 4, {2, 1, 3, 4}, {1, 2, 4, 2}, 4, {2, 2, 3, 2}},
};
#define N_CASES ((int)(sizeof k_cases / sizeof k_cases[0]))

Test(ops_matmul, values_every_shape_case_against_reference) {
    for (int dt = REMAT_F32; dt <= REMAT_F64; dt++) {
        for (int c = 0; c < N_CASES; c++) {
            const shape_case *sc = &k_cases[c];
            remat_tensor *a = rt_rand(sc->nda, sc->sa, dt, -1, 1, 10 + c);
            remat_tensor *b = rt_rand(sc->ndb, sc->sb, dt, -1, 1, 50 + c);
            remat_tensor *y;
            RT_OK(remat_matmul(&y, a, b));
            char what[64];
            snprintf(what, sizeof what, "case %d (%s)", c, dt == REMAT_F32 ? "f32" : "f64");
            assert_shape(y, sc->ndo, sc->so, what);
            double *e = ref_matmul(a, b);
            assert_values(y, e, dt == REMAT_F32 ? 1e-5 : 1e-12, what);
            free(e);
            remat_release(y);
            remat_release(a);
            remat_release(b);
        }
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Transposed, sliced and expanded operands: the GEMM takes the first two as
 * they are (transpose flag / leading dimension), the last is copied. */
Test(ops_matmul, values_strided_operands) {
    remat_tensor *base = rt_rand(3, (int64_t[]){2, 5, 4}, REMAT_F64, -1, 1, 3);
    remat_tensor *b = rt_rand(3, (int64_t[]){2, 5, 3}, REMAT_F64, -1, 1, 4);
    remat_tensor *at, *y, *ac;
    /* a = base^T (2, 4, 5), columns contiguous */
    RT_OK(remat_transpose(&at, base, 1, 2));
    cr_assert(!remat_is_contiguous(at));
    RT_OK(remat_matmul(&y, at, b));
    double *e = ref_matmul(at, b);
    assert_values(y, e, 1e-12, "transposed a");
    free(e);
    RT_OK(remat_contiguous(&ac, at));
    remat_tensor *y2;
    RT_OK(remat_matmul(&y2, ac, b));
    cr_assert_lt(rt_max_abs_diff(y, y2), 1e-12);
    remat_release(y);
    remat_release(y2);
    remat_release(ac);

    /* b transposed too: (2, 3, 5)^T */
    remat_tensor *bb = rt_rand(3, (int64_t[]){2, 3, 5}, REMAT_F64, -1, 1, 5);
    remat_tensor *bt;
    RT_OK(remat_transpose(&bt, bb, 1, 2));
    RT_OK(remat_matmul(&y, at, bt));
    e = ref_matmul(at, bt);
    assert_values(y, e, 1e-12, "both transposed");
    free(e);
    remat_release(y);

    /* a column slice (row stride 4 > 2 columns) and a step-2 slice (copied) */
    remat_tensor *sl, *st;
    RT_OK(remat_slice(&sl, base, 2, 1, 3, 1)); /* (2, 5, 2) */
    RT_OK(remat_slice(&st, b, 1, 0, 5, 2));    /* (2, 3, 3) rows 0, 2, 4 */
    remat_tensor *b2 = rt_rand(2, (int64_t[]){2, 3}, REMAT_F64, -1, 1, 6);
    RT_OK(remat_matmul(&y, sl, b2));
    e = ref_matmul(sl, b2);
    assert_values(y, e, 1e-12, "column slice");
    free(e);
    remat_release(y);
    remat_tensor *stt;
    RT_OK(remat_transpose(&stt, st, 0, 2)); /* (3, 3, 2) with odd strides */
    remat_tensor *b3 = rt_rand(1, (int64_t[]){2}, REMAT_F64, -1, 1, 7);
    RT_OK(remat_matmul(&y, stt, b3));
    e = ref_matmul(stt, b3);
    assert_values(y, e, 1e-12, "permuted slice");
    free(e);
    remat_release(y);

    /* an expanded (stride 0) operand */
    remat_tensor *row = rt_rand(2, (int64_t[]){1, 5}, REMAT_F64, -1, 1, 8), *ex;
    RT_OK(remat_expand(&ex, row, 2, (int64_t[]){4, 5}));
    remat_tensor *m = rt_rand(2, (int64_t[]){5, 3}, REMAT_F64, -1, 1, 9);
    RT_OK(remat_matmul(&y, ex, m));
    e = ref_matmul(ex, m);
    assert_values(y, e, 1e-12, "expanded a");
    free(e);
    remat_release(y);
    /* (3, 5) @ ex^T (5, 4): strides (1, 0), neither layout -> copied */
    remat_tensor *mt, *ext;
    RT_OK(remat_transpose(&mt, m, 0, 1));
    RT_OK(remat_transpose(&ext, ex, 0, 1));
    RT_OK(remat_matmul(&y, mt, ext));
    e = ref_matmul(mt, ext);
    assert_values(y, e, 1e-12, "expanded b");
    free(e);
    remat_release(y);
    remat_release(ext);

    remat_tensor *rl[] = {base, b, at, bb, bt, sl, st, b2, stt, b3, row, ex, m, mt};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_matmul, f32_agrees_with_f64_on_blocked_sizes) {
    /* sizes past the kernel's blocks (256) and the OpenMP thresholds */
    const int64_t sa[3] = {3, 67, 300}, sb[2] = {300, 270};
    remat_tensor *a64 = rt_rand(3, sa, REMAT_F64, -1, 1, 21);
    remat_tensor *b64 = rt_rand(2, sb, REMAT_F64, -1, 1, 22);
    remat_tensor *a32, *b32, *y32, *y64, *y32d;
    RT_OK(remat_to_dtype(&a32, a64, REMAT_F32));
    RT_OK(remat_to_dtype(&b32, b64, REMAT_F32));
    RT_OK(remat_matmul(&y64, a64, b64));
    RT_OK(remat_matmul(&y32, a32, b32));
    RT_OK(remat_to_dtype(&y32d, y32, REMAT_F64));
    double *e = ref_matmul(a64, b64);
    assert_values(y64, e, 1e-12, "f64 vs reference");
    free(e);
    rt_assert_close(y32d, y64, 1e-4, 1e-4, "f32 vs f64 matmul");

    /* linear with the same data: x (3, 67, 300), weight (270, 300) */
    remat_tensor *w64 = rt_rand(2, (int64_t[]){270, 300}, REMAT_F64, -1, 1, 23);
    remat_tensor *bias64 = rt_rand(1, (int64_t[]){270}, REMAT_F64, -1, 1, 24);
    remat_tensor *w32, *bias32, *l32, *l64, *l32d;
    RT_OK(remat_to_dtype(&w32, w64, REMAT_F32));
    RT_OK(remat_to_dtype(&bias32, bias64, REMAT_F32));
    RT_OK(remat_linear(&l64, a64, w64, bias64));
    RT_OK(remat_linear(&l32, a32, w32, bias32));
    RT_OK(remat_to_dtype(&l32d, l32, REMAT_F64));
    rt_assert_close(l32d, l64, 1e-4, 1e-4, "f32 vs f64 linear");
    remat_tensor *rl[] = {a64, b64,    a32, b32,    y32, y64, y32d,
                          w64, bias64, w32, bias32, l32, l64, l32d};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_matmul, empty_sizes) {
    /* K = 0: a sum over nothing, zeros */
    remat_tensor *a = rt_rand(2, (int64_t[]){2, 0}, REMAT_F32, -1, 1, 1);
    remat_tensor *b = rt_rand(2, (int64_t[]){0, 3}, REMAT_F32, -1, 1, 2);
    remat_tensor *y;
    RT_OK(remat_matmul(&y, a, b));
    assert_shape(y, 2, (int64_t[]){2, 3}, "K = 0");
    assert_values(y, (double[]){0, 0, 0, 0, 0, 0}, 0, "K = 0");
    remat_release(y);
    /* M = 0 and an empty batch */
    remat_tensor *c = rt_rand(3, (int64_t[]){0, 3, 2}, REMAT_F32, -1, 1, 3);
    remat_tensor *d = rt_rand(2, (int64_t[]){2, 4}, REMAT_F32, -1, 1, 4);
    RT_OK(remat_matmul(&y, c, d));
    assert_shape(y, 3, (int64_t[]){0, 3, 4}, "empty batch");
    remat_release(y);
    /* gradients through K = 0: zeros of the input shapes */
    remat_tensor *a64 = rt_leaf(rt_rand(2, (int64_t[]){2, 0}, REMAT_F64, -1, 1, 5));
    remat_tensor *b64 = rt_leaf(rt_rand(2, (int64_t[]){0, 3}, REMAT_F64, -1, 1, 6));
    remat_tensor *p, *s;
    RT_OK(remat_matmul(&p, a64, b64)); /* (2, 3) zeros */
    RT_OK(remat_sum_all(&s, p));
    RT_OK(remat_backward_scalar(s));
    assert_shape(remat_tensor_grad(a64), 2, (int64_t[]){2, 0}, "grad a");
    assert_shape(remat_tensor_grad(b64), 2, (int64_t[]){0, 3}, "grad b");
    remat_release(s);
    remat_release(p);
    remat_tensor *rl[] = {a, b, c, d, a64, b64};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- gradients ----------------------------------------------------------------------------- */

Test(ops_matmul, gradcheck_every_shape_case) {
    for (int c = 0; c < N_CASES; c++) {
        const shape_case *sc = &k_cases[c];
        remat_tensor *in[2] = {rt_leaf(rt_rand(sc->nda, sc->sa, REMAT_F64, -1, 1, 100 + c)),
                               rt_leaf(rt_rand(sc->ndb, sc->sb, REMAT_F64, -1, 1, 200 + c))};
        char msg[2048];
        cr_assert(rt_gradcheck(f_matmul, NULL, 2, in, 1e-6, 1e-5, 1e-4, msg, sizeof msg),
                  "gradcheck case %d: %s", c, msg);
        /* one input needing grad at a time (the other's gradient is skipped) */
        RT_OK(remat_set_requires_grad(in[1], false));
        cr_assert(rt_gradcheck(f_matmul, NULL, 2, in, 1e-6, 1e-5, 1e-4, msg, sizeof msg),
                  "gradcheck case %d (a only): %s", c, msg);
        RT_OK(remat_set_requires_grad(in[1], true));
        RT_OK(remat_set_requires_grad(in[0], false));
        cr_assert(rt_gradcheck(f_matmul, NULL, 2, in, 1e-6, 1e-5, 1e-4, msg, sizeof msg),
                  "gradcheck case %d (b only): %s", c, msg);
        remat_release(in[0]);
        remat_release(in[1]);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* matmul of transposes of its (contiguous) leaves: a^T @ b^T */
static int f_matmul_tt(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    remat_tensor *at = NULL, *bt = NULL;
    int rc = remat_transpose(&at, in[0], -1, -2);
    if (!rc) rc = remat_transpose(&bt, in[1], -1, -2);
    if (!rc) rc = remat_matmul(out, at, bt);
    remat_release(at);
    remat_release(bt);
    return rc;
}

Test(ops_matmul, gradcheck_transposed_operands) {
    /* transposes made inside the function */
    remat_tensor *in[2] = {rt_leaf(rt_rand(3, (int64_t[]){2, 4, 3}, REMAT_F64, -1, 1, 31)),
                           rt_leaf(rt_rand(2, (int64_t[]){5, 4}, REMAT_F64, -1, 1, 32))};
    RT_GRADCHECK(f_matmul_tt, NULL, 2, in);
    remat_release(in[0]);
    remat_release(in[1]);
    /* non-contiguous views passed as the differentiated inputs */
    remat_tensor *a = rt_leaf(rt_rand(3, (int64_t[]){3, 4, 2}, REMAT_F64, -1, 1, 33));
    remat_tensor *b = rt_leaf(rt_rand(2, (int64_t[]){5, 4}, REMAT_F64, -1, 1, 34));
    remat_tensor *at, *bt;
    RT_OK(remat_transpose(&at, a, 1, 2)); /* (3, 2, 4) */
    RT_OK(remat_transpose(&bt, b, 0, 1)); /* (4, 5) */
    remat_tensor *v[2] = {at, bt};
    RT_GRADCHECK(f_matmul, NULL, 2, v);
    /* a permuted (not just transposed) view: batch dims out of order */
    remat_tensor *p;
    RT_OK(remat_transpose(&p, a, 0, 1)); /* (4, 3, 2) */
    remat_tensor *c = rt_leaf(rt_rand(2, (int64_t[]){2, 3}, REMAT_F64, -1, 1, 35));
    remat_tensor *v2[2] = {p, c};
    RT_GRADCHECK(f_matmul, NULL, 2, v2);
    /* an expanded operand (gradient summed over the repeats) */
    remat_tensor *r = rt_leaf(rt_rand(2, (int64_t[]){1, 4}, REMAT_F64, -1, 1, 36)), *ex;
    RT_OK(remat_expand(&ex, r, 2, (int64_t[]){3, 4}));
    remat_tensor *v3[2] = {ex, bt};
    RT_GRADCHECK(f_matmul, NULL, 2, v3);
    remat_tensor *rl[] = {a, b, at, bt, p, c, r, ex};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The broadcast batch gradient against a hand reduction: for a (2,1,3,4)
 * and b (5,4,2), grad a = sum over the 5 of g · b^T with g = ones. */
Test(ops_matmul, broadcast_batch_gradient_values) {
    remat_tensor *a = rt_leaf(rt_rand(4, (int64_t[]){2, 1, 3, 4}, REMAT_F64, -1, 1, 41));
    remat_tensor *b = rt_leaf(rt_rand(3, (int64_t[]){5, 4, 2}, REMAT_F64, -1, 1, 42));
    remat_tensor *y, *s;
    RT_OK(remat_matmul(&y, a, b));
    RT_OK(remat_sum_all(&s, y));
    RT_OK(remat_backward_scalar(s));
    double *vb = rt_values(b), *va = rt_values(a);
    double *ga = rt_values(remat_tensor_grad(a)), *gb = rt_values(remat_tensor_grad(b));
    /* d/da[i, 0, r, k] = sum_{j<5} sum_n b[j, k, n] (the same for every i, r) */
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < 4; k++) {
                double e = 0;
                for (int j = 0; j < 5; j++)
                    for (int n = 0; n < 2; n++) e += vb[j * 8 + k * 2 + n];
                cr_assert_float_eq(ga[i * 12 + r * 4 + k], e, 1e-12);
            }
    /* d/db[j, k, n] = sum_i sum_r a[i, 0, r, k] (the same for every j, n) */
    for (int j = 0; j < 5; j++)
        for (int k = 0; k < 4; k++)
            for (int n = 0; n < 2; n++) {
                double e = 0;
                for (int i = 0; i < 2; i++)
                    for (int r = 0; r < 3; r++) e += va[i * 12 + r * 4 + k];
                cr_assert_float_eq(gb[j * 8 + k * 2 + n], e, 1e-12);
            }
    free(va);
    free(vb);
    free(ga);
    free(gb);
    remat_release(s);
    remat_release(y);
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- what backward keeps ------------------------------------------------------------------------ */

static int g_saves;
static char g_save_ops[256];
static void count_saves(void *ud, const char *op, remat_tensor *t) {
    (void)ud;
    (void)t;
    g_saves++;
    strncat(g_save_ops, op, sizeof g_save_ops - strlen(g_save_ops) - 2);
    strcat(g_save_ops, " ");
}

Test(ops_matmul, saves_only_what_the_other_gradient_needs) {
    remat_tensor *a = rt_rand(2, (int64_t[]){3, 4}, REMAT_F32, -1, 1, 1);
    remat_tensor *b = rt_rand(2, (int64_t[]){4, 2}, REMAT_F32, -1, 1, 2);
    remat_tensor *bias = rt_rand(1, (int64_t[]){2}, REMAT_F32, -1, 1, 3);
    remat_tensor *w = rt_rand(2, (int64_t[]){2, 4}, REMAT_F32, -1, 1, 4);
    remat_set_save_observer(count_saves, NULL);
    remat_tensor *y;
    struct {
        bool ra, rb;
        int expect;
    } mm[] = {{true, false, 1}, {false, true, 1}, {true, true, 2}, {false, false, 0}};
    for (int i = 0; i < 4; i++) {
        RT_OK(remat_set_requires_grad(a, mm[i].ra));
        RT_OK(remat_set_requires_grad(b, mm[i].rb));
        g_saves = 0;
        RT_OK(remat_matmul(&y, a, b));
        cr_assert_eq(g_saves, mm[i].expect, "matmul case %d saved %d tensors", i, g_saves);
        if (mm[i].ra || mm[i].rb) cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "MmBackward");
        else cr_assert_null(remat_grad_fn(y));
        remat_release(y);
    }
    /* linear: x for dW, weight for dx, nothing for the bias */
    struct {
        bool rx, rw, rb;
        int expect;
    } ln[] = {{false, false, true, 0},
              {true, false, false, 1},
              {false, true, false, 1},
              {true, true, true, 2}};
    for (int i = 0; i < 4; i++) {
        RT_OK(remat_set_requires_grad(a, ln[i].rx));
        RT_OK(remat_set_requires_grad(w, ln[i].rw));
        RT_OK(remat_set_requires_grad(bias, ln[i].rb));
        g_saves = 0;
        RT_OK(remat_linear(&y, a, w, bias));
        cr_assert_eq(g_saves, ln[i].expect, "linear case %d saved %d tensors", i, g_saves);
        cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "LinearBackward");
        remat_release(y);
    }
    remat_set_save_observer(NULL, NULL);
    remat_release(a);
    remat_release(b);
    remat_release(bias);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- linear ----------------------------------------------------------------------------------- */

Test(ops_matmul, linear_values_by_hand) {
    remat_tensor *x = rt_tensor(2, (int64_t[]){2, 3}, REMAT_F32, (double[]){1, 2, 3, 4, 5, 6});
    remat_tensor *w = rt_tensor(2, (int64_t[]){2, 3}, REMAT_F32, (double[]){1, 0, -1, 2, 1, 0});
    remat_tensor *bias = rt_tensor(1, (int64_t[]){2}, REMAT_F32, (double[]){10, 20});
    remat_tensor *y;
    RT_OK(remat_linear(&y, x, w, bias));
    assert_shape(y, 2, (int64_t[]){2, 2}, "linear");
    assert_values(y, (double[]){8, 24, 8, 33}, 0, "linear with bias");
    remat_release(y);
    RT_OK(remat_linear(&y, x, w, NULL));
    assert_values(y, (double[]){-2, 4, -2, 13}, 0, "linear without bias");
    remat_release(y);
    /* 1-D x: (3) -> (2) */
    remat_tensor *v = rt_tensor(1, (int64_t[]){3}, REMAT_F32, (double[]){1, 1, 1});
    RT_OK(remat_linear(&y, v, w, bias));
    assert_shape(y, 1, (int64_t[]){2}, "linear 1-D");
    assert_values(y, (double[]){10, 23}, 0, "linear 1-D");
    remat_release(y);
    /* 3-D x (2, 1, 3) -> (2, 1, 2) */
    remat_tensor *x3;
    RT_OK(remat_reshape(&x3, x, 3, (int64_t[]){2, 1, 3}));
    RT_OK(remat_linear(&y, x3, w, bias));
    assert_shape(y, 3, (int64_t[]){2, 1, 2}, "linear 3-D");
    assert_values(y, (double[]){8, 24, 8, 33}, 0, "linear 3-D");
    remat_release(y);
    /* the gradient by hand: y = sum(linear(x, w, b)) */
    remat_tensor *xl =
        rt_leaf(rt_tensor(2, (int64_t[]){2, 3}, REMAT_F64, (double[]){1, 2, 3, 4, 5, 6}));
    remat_tensor *wl =
        rt_leaf(rt_tensor(2, (int64_t[]){2, 3}, REMAT_F64, (double[]){1, 0, -1, 2, 1, 0}));
    remat_tensor *bl = rt_leaf(rt_tensor(1, (int64_t[]){2}, REMAT_F64, (double[]){10, 20}));
    remat_tensor *s;
    RT_OK(remat_linear(&y, xl, wl, bl));
    RT_OK(remat_sum_all(&s, y));
    RT_OK(remat_backward_scalar(s));
    assert_values(remat_tensor_grad(xl), (double[]){3, 1, -1, 3, 1, -1}, 0, "dx");
    assert_values(remat_tensor_grad(wl), (double[]){5, 7, 9, 5, 7, 9}, 0, "dW");
    assert_values(remat_tensor_grad(bl), (double[]){2, 2}, 0, "db");
    remat_tensor *rl[] = {x, w, bias, v, x3, xl, wl, bl, s, y};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_matmul, linear_matches_matmul_plus_bias) {
    remat_tensor *x = rt_rand(3, (int64_t[]){4, 5, 6}, REMAT_F64, -1, 1, 61);
    remat_tensor *w = rt_rand(2, (int64_t[]){7, 6}, REMAT_F64, -1, 1, 62);
    remat_tensor *bias = rt_rand(1, (int64_t[]){7}, REMAT_F64, -1, 1, 63);
    remat_tensor *wt, *m, *e, *y;
    RT_OK(remat_transpose(&wt, w, 0, 1));
    RT_OK(remat_matmul(&m, x, wt));
    RT_OK(remat_add(&e, m, bias));
    RT_OK(remat_linear(&y, x, w, bias));
    assert_shape(y, 3, (int64_t[]){4, 5, 7}, "linear 3-D");
    cr_assert_lt(rt_max_abs_diff(y, e), 1e-12);
    remat_tensor *rl[] = {x, w, bias, wt, m, e, y};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_matmul, gradcheck_linear) {
    const int64_t xs[4][3] = {{3, 4, 0}, {2, 3, 4}, {4, 0, 0}, {5, 4, 0}};
    const int xnd[4] = {2, 3, 1, 2};
    for (int c = 0; c < 4; c++) {
        remat_tensor *x = rt_leaf(rt_rand(xnd[c], xs[c], REMAT_F64, -1, 1, 70 + c));
        remat_tensor *w = rt_leaf(rt_rand(2, (int64_t[]){3, 4}, REMAT_F64, -1, 1, 80 + c));
        remat_tensor *bias = rt_leaf(rt_rand(1, (int64_t[]){3}, REMAT_F64, -1, 1, 90 + c));
        remat_tensor *in3[3] = {x, w, bias}, *in2[2] = {x, w};
        char msg[2048];
        cr_assert(rt_gradcheck(f_linear, NULL, 3, in3, 1e-6, 1e-5, 1e-4, msg, sizeof msg),
                  "linear case %d with bias: %s", c, msg);
        cr_assert(rt_gradcheck(f_linear, NULL, 2, in2, 1e-6, 1e-5, 1e-4, msg, sizeof msg),
                  "linear case %d without bias: %s", c, msg);
        /* the bias alone, and x alone */
        RT_OK(remat_set_requires_grad(x, false));
        RT_OK(remat_set_requires_grad(w, false));
        cr_assert(rt_gradcheck(f_linear, NULL, 3, in3, 1e-6, 1e-5, 1e-4, msg, sizeof msg),
                  "linear case %d bias only: %s", c, msg);
        RT_OK(remat_set_requires_grad(x, true));
        RT_OK(remat_set_requires_grad(bias, false));
        cr_assert(rt_gradcheck(f_linear, NULL, 3, in3, 1e-6, 1e-5, 1e-4, msg, sizeof msg),
                  "linear case %d x only: %s", c, msg);
        remat_release(x);
        remat_release(w);
        remat_release(bias);
    }
    /* strided x (a permuted 3-D view) and a transposed weight view */
    remat_tensor *xb = rt_leaf(rt_rand(3, (int64_t[]){3, 2, 4}, REMAT_F64, -1, 1, 95));
    remat_tensor *wb = rt_leaf(rt_rand(2, (int64_t[]){4, 5}, REMAT_F64, -1, 1, 96));
    remat_tensor *bias = rt_leaf(rt_rand(1, (int64_t[]){5}, REMAT_F64, -1, 1, 97));
    remat_tensor *xp, *wt, *xt;
    RT_OK(remat_transpose(&xp, xb, 0, 1)); /* (2, 3, 4): batch dims out of order */
    RT_OK(remat_transpose(&wt, wb, 0, 1)); /* (5, 4) with strides (1, 5) */
    RT_OK(remat_transpose(&xt, xb, 1, 2)); /* (3, 4, 2): last dim strided -> copied */
    remat_tensor *in[3] = {xp, wt, bias};
    RT_GRADCHECK(f_linear, NULL, 3, in);
    remat_tensor *w2 = rt_leaf(rt_rand(2, (int64_t[]){3, 2}, REMAT_F64, -1, 1, 98));
    remat_tensor *in2[2] = {xt, w2};
    RT_GRADCHECK(f_linear, NULL, 2, in2);
    remat_tensor *rl[] = {xb, wb, bias, xp, wt, xt, w2};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_matmul, linear_f32_gradients_agree_with_f64) {
    remat_tensor *x64 = rt_leaf(rt_rand(3, (int64_t[]){4, 33, 70}, REMAT_F64, -1, 1, 11));
    remat_tensor *w64 = rt_leaf(rt_rand(2, (int64_t[]){50, 70}, REMAT_F64, -1, 1, 12));
    remat_tensor *b64 = rt_leaf(rt_rand(1, (int64_t[]){50}, REMAT_F64, -1, 1, 13));
    remat_tensor *x32, *w32, *b32;
    RT_OK(remat_to_dtype(&x32, x64, REMAT_F32));
    RT_OK(remat_to_dtype(&w32, w64, REMAT_F32));
    RT_OK(remat_to_dtype(&b32, b64, REMAT_F32));
    remat_tensor *l32 = NULL, *l64 = NULL;
    remat_tensor *x32l, *w32l, *b32l;
    RT_OK(remat_detach(&x32l, x32));
    RT_OK(remat_detach(&w32l, w32));
    RT_OK(remat_detach(&b32l, b32));
    rt_leaf(x32l);
    rt_leaf(w32l);
    rt_leaf(b32l);
    remat_tensor *y32, *y64;
    RT_OK(remat_linear(&y32, x32l, w32l, b32l));
    RT_OK(remat_linear(&y64, x64, w64, b64));
    RT_OK(remat_sum_all(&l32, y32));
    RT_OK(remat_sum_all(&l64, y64));
    RT_OK(remat_backward_scalar(l32));
    RT_OK(remat_backward_scalar(l64));
    remat_tensor *pairs[3][2] = {{x32l, x64}, {w32l, w64}, {b32l, b64}};
    for (int i = 0; i < 3; i++) {
        remat_tensor *g32d;
        RT_OK(remat_to_dtype(&g32d, remat_tensor_grad(pairs[i][0]), REMAT_F64));
        rt_assert_close(g32d, remat_tensor_grad(pairs[i][1]), 1e-4, 1e-4, "f32 vs f64 grad");
        remat_release(g32d);
    }
    remat_tensor *rl[] = {x64, w64, b64, x32, w32, b32, x32l, w32l, b32l, y32, y64, l32, l64};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The bias gradient (column sums of g) on the shapes of each path: narrow
 * (n < 64), streamed row chunks with a partial last chunk, and many chunks
 * (rows above 64 * 1024); f32 against the exact sums of the same values, and
 * bitwise the same on 1 and 2 threads. */
Test(ops_matmul, linear_bias_grad_paths_and_thread_count) {
    struct {
        int64_t rows, n;
    } cases[] = {{300, 10}, {300, 100}, {64, 64}, {1, 70}, {70000, 65}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int64_t rows = cases[k].rows, n = cases[k].n, in_f = 3;
        remat_tensor *x = rt_rand(2, (int64_t[]){rows, in_f}, REMAT_F32, -1, 1, 81);
        remat_tensor *w = rt_rand(2, (int64_t[]){n, in_f}, REMAT_F32, -1, 1, 82);
        remat_tensor *b = rt_leaf(rt_rand(1, &n, REMAT_F32, -1, 1, 83));
        remat_tensor *g = rt_rand(2, (int64_t[]){rows, n}, REMAT_F32, -1, 1, 84);
        remat_tensor *y[2] = {NULL, NULL}, *db[2] = {NULL, NULL};
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            RT_OK(remat_linear(&y[t], x, w, b));
            RT_OK(remat_grad(1, &y[t], &g, 1, &b, false, false, &db[t]));
        }
        omp_set_num_threads(2);
        cr_assert(rt_bitwise_equal(db[0], db[1]),
                  "rows %lld n %lld: bias grad depends on the "
                  "thread count",
                  (long long)rows, (long long)n);
        double *gv = rt_values(g), *dv = rt_values(db[0]);
        for (int64_t j = 0; j < n; j++) {
            double s = 0, sa = 0;
            for (int64_t r = 0; r < rows; r++) {
                s += gv[r * n + j];
                sa += fabs(gv[r * n + j]);
            }
            cr_assert(fabs(dv[j] - s) <= 1e-6 * sa + 1e-6,
                      "rows %lld n %lld column %lld: %.9g "
                      "vs %.9g",
                      (long long)rows, (long long)n, (long long)j, dv[j], s);
        }
        free(gv);
        free(dv);
        remat_tensor *rl[] = {x, w, b, g, y[0], y[1], db[0], db[1]};
        for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- the GEMM layer -------------------------------------------------------------------------- */

Test(ops_matmul, gemm_backend_matches_builtin_kernel) {
    const char *be = remat_gemm_backend();
    cr_assert(!strcmp(be, "openblas") || !strcmp(be, "onednn") || !strcmp(be, "naive"), "%s", be);
    /* odd sizes, every transpose combination, a leading dimension larger
     * than the matrix (a sub-block), alpha/beta, NaN in C with beta = 0 */
    const int64_t M = 37, N = 291, K = 263, pad = 5;
    float *A = malloc(sizeof(float) * (size_t)((M + pad) * (K + pad)));
    float *B = malloc(sizeof(float) * (size_t)((K + pad) * (N + pad)));
    float *C1 = malloc(sizeof(float) * (size_t)(M * (N + pad)));
    float *C2 = malloc(sizeof(float) * (size_t)(M * (N + pad)));
    double *Ad = malloc(sizeof(double) * (size_t)((M + pad) * (K + pad)));
    double *Bd = malloc(sizeof(double) * (size_t)((K + pad) * (N + pad)));
    double *D1 = malloc(sizeof(double) * (size_t)(M * (N + pad)));
    double *D2 = malloc(sizeof(double) * (size_t)(M * (N + pad)));
    for (int64_t i = 0; i < (M + pad) * (K + pad); i++) Ad[i] = A[i] = (float)sin(0.37 * (double)i);
    for (int64_t i = 0; i < (K + pad) * (N + pad); i++) Bd[i] = B[i] = (float)cos(0.11 * (double)i);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int bi = 0; bi < 2; bi++) {
                float beta = bi ? 0.5f : 0.0f;
                int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
                for (int64_t i = 0; i < M * ldc; i++) {
                    C1[i] = C2[i] = bi ? (float)(i % 7) : NAN;
                    D1[i] = D2[i] = bi ? (double)(i % 7) : NAN;
                }
                rm_sgemm(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, beta, C1, ldc);
                rm_sgemm_ref(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, beta, C2, ldc);
                rm_dgemm(ta, tb, M, N, K, 1.5, Ad, lda, Bd, ldb, beta, D1, ldc);
                rm_dgemm_ref(ta, tb, M, N, K, 1.5, Ad, lda, Bd, ldb, beta, D2, ldc);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        float x = C1[i * ldc + j], y = C2[i * ldc + j];
                        cr_assert(fabsf(x - y) <= 1e-3f * (1 + fabsf(y)),
                                  "sgemm ta %d tb %d beta %g [%lld, %lld]: %g vs %g", ta, tb,
                                  (double)beta, (long long)i, (long long)j, (double)x, (double)y);
                        double u = D1[i * ldc + j], w = D2[i * ldc + j];
                        cr_assert(fabs(u - w) <= 1e-11 * (1 + fabs(w)),
                                  "dgemm ta %d tb %d [%lld, %lld]: %g vs %g", ta, tb, (long long)i,
                                  (long long)j, u, w);
                    }
                /* the padding columns of C are not touched */
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = N; j < ldc; j++)
                        if (bi) cr_assert_eq(C1[i * ldc + j], (float)((i * ldc + j) % 7));
                        else cr_assert(isnan(C1[i * ldc + j]));
            }
    /* K = 0 scales C by beta (zero when beta = 0, even over NaN) */
    C1[0] = NAN;
    C1[1] = 4;
    rm_sgemm(false, false, 1, 2, 0, 1.0f, A, 1, B, 2, 0.0f, C1, 2);
    cr_assert(C1[0] == 0 && C1[1] == 0);
    C1[0] = 2;
    rm_sgemm(false, false, 1, 1, 0, 1.0f, A, 1, B, 1, 0.5f, C1, 1);
    cr_assert(C1[0] == 1);
    free(A);
    free(B);
    free(C1);
    free(C2);
    free(Ad);
    free(Bd);
    free(D1);
    free(D2);
}

/* The GEMM layer called from inside an OpenMP parallel region (each thread
 * its own product), in both OpenBLAS threading modes; and a batched matmul
 * of small matrices (run in parallel over the batch) in both modes. */
Test(ops_matmul, gemm_reentrant_and_threading_modes) {
    const int64_t M = 70, N = 90, K = 110;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C = malloc(sizeof(float) * 4 * M * N), *R = malloc(sizeof(float) * M * N);
    for (int64_t i = 0; i < M * K; i++) A[i] = (float)sin((double)i);
    for (int64_t i = 0; i < K * N; i++) B[i] = (float)cos((double)i);
    rm_sgemm_ref(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, R, N);
    const int modes[2] = {RM_GEMM_THREADS_OMP, RM_GEMM_THREADS_NATIVE};
    for (int mi = 0; mi < 2; mi++) {
        rm_gemm_set_threading(modes[mi]);
        cr_assert_eq(rm_gemm_threading(), modes[mi]);
#pragma omp parallel for num_threads(4)
        for (int t = 0; t < 4; t++)
            rm_sgemm(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C + t * M * N, N);
        for (int t = 0; t < 4; t++)
            for (int64_t i = 0; i < M * N; i++)
                cr_assert(fabsf(C[t * M * N + i] - R[i]) <= 1e-4f * (1 + fabsf(R[i])),
                          "mode %d thread %d element %lld", mi, t, (long long)i);
        remat_tensor *a = rt_rand(3, (int64_t[]){16, 5, 6}, REMAT_F32, -1, 1, 1);
        remat_tensor *b = rt_rand(3, (int64_t[]){16, 6, 7}, REMAT_F32, -1, 1, 2);
        remat_tensor *y;
        RT_OK(remat_matmul(&y, a, b));
        double *e = ref_matmul(a, b);
        assert_values(y, e, 1e-5, "small batched");
        free(e);
        remat_release(y);
        remat_release(a);
        remat_release(b);
    }
    rm_gemm_set_threading(RM_GEMM_THREADS_OMP);
    free(A);
    free(B);
    free(C);
    free(R);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- skip mode ------------------------------------------------------------------------------- */

Test(ops_matmul, skip_mode_computes_shapes_only) {
    remat_tensor *a = rt_rand(3, (int64_t[]){2, 3, 4}, REMAT_F32, -1, 1, 1);
    remat_tensor *w = rt_rand(2, (int64_t[]){5, 4}, REMAT_F32, -1, 1, 2);
    bool prev = rm_set_skip_mode(true);
    remat_tensor *y, *z;
    /* shape errors are still found in skip mode */
    RT_FAILS(remat_matmul(&y, a, a), REMAT_ESHAPE, "remat_matmul");
    remat_tensor *wt;
    RT_OK(remat_transpose(&wt, w, 0, 1));
    RT_OK(remat_matmul(&y, a, wt));
    RT_OK(remat_linear(&z, y, wt, NULL));
    rm_set_skip_mode(prev);
    cr_assert(!rt_has_data(y));
    assert_shape(y, 3, (int64_t[]){2, 3, 5}, "skip matmul");
    cr_assert(!rt_has_data(z));
    remat_release(y);
    remat_release(z);
    remat_release(wt);
    remat_release(a);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- errors ------------------------------------------------------------------------------------- */

Test(ops_matmul, errors_name_the_call_and_shapes) {
    remat_tensor *a = rt_rand(2, (int64_t[]){2, 3}, REMAT_F32, -1, 1, 1);
    remat_tensor *b = rt_rand(2, (int64_t[]){4, 5}, REMAT_F32, -1, 1, 2);
    remat_tensor *b64 = rt_rand(2, (int64_t[]){3, 5}, REMAT_F64, -1, 1, 3);
    remat_tensor *s = rt_rand(0, NULL, REMAT_F32, -1, 1, 4);
    remat_tensor *i64 = rt_tensor(2, (int64_t[]){3, 2}, REMAT_I64, (double[]){1, 2, 3, 4, 5, 6});
    remat_tensor *y = (remat_tensor *)&y; /* must be set to NULL on error */
    RT_FAILS(remat_matmul(&y, a, b), REMAT_ESHAPE,
             "remat_matmul: cannot multiply a [2, 3] by b [4, 5] (inner sizes 3 and 4 differ)");
    cr_assert_null(y);
    RT_FAILS(remat_matmul(&y, a, s), REMAT_ESHAPE,
             "remat_matmul: both arguments must be at least 1-D");
    cr_assert(strstr(remat_last_error(), "a [2, 3]") && strstr(remat_last_error(), "b []"), "%s",
              remat_last_error());
    RT_FAILS(remat_matmul(&y, s, a), REMAT_ESHAPE, "at least 1-D");
    RT_FAILS(remat_matmul(&y, a, b64), REMAT_EDTYPE, "remat_matmul");
    cr_assert(strstr(remat_last_error(), "[2, 3] f32") && strstr(remat_last_error(), "[3, 5] f64"),
              "%s", remat_last_error());
    RT_FAILS(remat_matmul(&y, a, i64), REMAT_EDTYPE, "remat_matmul");
    RT_FAILS(remat_matmul(&y, NULL, b), REMAT_EINVAL, "remat_matmul");
    RT_FAILS(remat_matmul(&y, a, NULL), REMAT_EINVAL, "remat_matmul");
    RT_FAILS(remat_matmul(NULL, a, b), REMAT_EINVAL, "remat_matmul");
    /* 1-D operands and batch dims */
    remat_tensor *v4 = rt_rand(1, (int64_t[]){4}, REMAT_F32, -1, 1, 5);
    RT_FAILS(remat_matmul(&y, a, v4), REMAT_ESHAPE,
             "remat_matmul: cannot multiply a [2, 3] by b [4] (inner sizes 3 and 4 differ)");
    remat_tensor *p = rt_rand(3, (int64_t[]){2, 2, 3}, REMAT_F32, -1, 1, 6);
    remat_tensor *q = rt_rand(3, (int64_t[]){3, 3, 2}, REMAT_F32, -1, 1, 7);
    RT_FAILS(remat_matmul(&y, p, q), REMAT_ESHAPE,
             "remat_matmul: batch dims of a [2, 2, 3] and b [3, 3, 2] cannot be broadcast");

    /* linear */
    remat_tensor *w = rt_rand(2, (int64_t[]){4, 5}, REMAT_F32, -1, 1, 8);
    remat_tensor *bias = rt_rand(1, (int64_t[]){3}, REMAT_F32, -1, 1, 9);
    RT_FAILS(remat_linear(&y, a, w, NULL), REMAT_ESHAPE,
             "remat_linear: cannot multiply x [2, 3] by weight [4, 5] transposed");
    cr_assert_null(y);
    remat_tensor *w3 = rt_rand(2, (int64_t[]){4, 3}, REMAT_F32, -1, 1, 10);
    RT_FAILS(remat_linear(&y, a, w3, bias), REMAT_ESHAPE,
             "remat_linear: bias [3] does not match weight [4, 3] (expected [4])");
    RT_FAILS(remat_linear(&y, a, v4, NULL), REMAT_ESHAPE, "remat_linear: weight must be 2-D");
    RT_FAILS(remat_linear(&y, s, w3, NULL), REMAT_ESHAPE,
             "remat_linear: x must have at least 1 dim");
    RT_FAILS(remat_linear(&y, NULL, w3, NULL), REMAT_EINVAL, "remat_linear");
    RT_FAILS(remat_linear(&y, a, NULL, NULL), REMAT_EINVAL, "remat_linear");
    RT_FAILS(remat_linear(NULL, a, w3, NULL), REMAT_EINVAL, "remat_linear");
    remat_tensor *w64;
    RT_OK(remat_to_dtype(&w64, w3, REMAT_F64));
    RT_FAILS(remat_linear(&y, a, w64, NULL), REMAT_EDTYPE, "remat_linear");
    remat_tensor *bias64 = rt_rand(1, (int64_t[]){4}, REMAT_F64, -1, 1, 11);
    RT_FAILS(remat_linear(&y, a, w3, bias64), REMAT_EDTYPE, "remat_linear");
    cr_assert_null(y);

    remat_tensor *rl[] = {a, b, b64, s, i64, v4, p, q, w, bias, w3, w64, bias64};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_matmul, device_mismatch) {
    if (rt_tensor_device().type != REMAT_CPU)
        cr_skip_test("cpu and testdev tensors by design; the test device is %s",
                     rt_tensor_device_str());
    int type = rt_testdev_register();
    remat_tensor *a = rt_rand(2, (int64_t[]){2, 3}, REMAT_F32, -1, 1, 1);
    remat_tensor *b = rt_rand(2, (int64_t[]){3, 2}, REMAT_F32, -1, 1, 2);
    remat_tensor *bd, *y;
    RT_OK(remat_to_device(&bd, b, (remat_device){type, 0}));
    RT_FAILS(remat_matmul(&y, a, bd), REMAT_EDEVICE, "remat_matmul");
    RT_FAILS(remat_linear(&y, a, bd, NULL), REMAT_EDEVICE, "remat_linear");
    /* both on testdev (host-addressable): the CPU kernels run there */
    remat_tensor *ad;
    RT_OK(remat_to_device(&ad, a, (remat_device){type, 0}));
    RT_OK(remat_matmul(&y, ad, bd));
    cr_assert_eq(remat_tensor_device(y).type, type);
    remat_tensor *yc;
    RT_OK(remat_matmul(&yc, a, b));
    cr_assert_lt(rt_max_abs_diff(y, yc), 1e-6);
    remat_release(y);
    remat_release(yc);
    remat_release(a);
    remat_release(b);
    remat_release(ad);
    remat_release(bd);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Linear's dx under cpu autocast (bf16 x and g, the f32 weight kept): its
 * GEMM rounds the weight in column panels (RM_MM_PANEL, up to K =
 * out_features 384: GPT's fc2 and proj) rather than into one rounded copy.
 * The old path's result, the bf16 GEMM of g and the whole rounded weight, at
 * 1, 2 and 3 threads (a panel of B shared by the threads), odd sizes,
 * weights over the panel budget; above K 384 the
 * weight is rounded whole (oneDNN's sums there depend on N). "The same" is
 * up to f32 summation order (rt_assert_same_gemm): with oneDNN on AVX512_BF16
 * the panels give the whole copy's bits, but the order a GEMM sums in is the
 * kernel's (AMX; the f32 route of a CPU without bf16 GEMMs), and a panel's
 * N is not the whole GEMM's. A weight rounded otherwise than rm_f32_to_bf16,
 * or a panel put in the wrong columns, is still far outside it. */
Test(ops_matmul, linear_bf16_panels_match_whole_rounded_weight) {
    if (rt_tensor_device().type != REMAT_CPU)
        cr_skip_test("the cpu kernel's weight panels under cpu autocast; the test device is %s",
                     rt_tensor_device_str());
    const int64_t shapes[][3] = {
        {300, 384, 1001}, {257, 383, 1537}, {64, 100, 3000}, {96, 1536, 384}, {129, 1152, 385}};
    int prev = omp_get_max_threads();
    for (int th = 1; th <= 3; th++) {
        omp_set_num_threads(th);
        for (int s = 0; s < 5; s++) {
            int64_t R = shapes[s][0], O = shapes[s][1], I = shapes[s][2];
            int64_t sx[] = {R, I}, sw[] = {O, I}, sg[] = {R, O};
            remat_tensor *xf = rt_rand(2, sx, REMAT_F32, -1, 1, 3), *xb = NULL, *gb = NULL;
            remat_tensor *w = rt_rand(2, sw, REMAT_F32, -1, 1, 4), *gf = NULL, *wb = NULL;
            gf = rt_rand(2, sg, REMAT_F32, -1, 1, 5);
            RT_OK(remat_to_dtype(&xb, xf, REMAT_BF16));
            RT_OK(remat_to_dtype(&gb, gf, REMAT_BF16));
            RT_OK(remat_to_dtype(&wb, w, REMAT_BF16));
            remat_tensor *x = rt_leaf(xb), *y = NULL, *ref = NULL;
            RT_OK(remat_set_requires_grad(w, true));
            remat_autocast_state ac;
            RT_OK(remat_autocast_begin(&ac, REMAT_CPU, REMAT_BF16, true));
            RT_OK(remat_linear(&y, x, w, NULL));
            remat_autocast_end(&ac);
            RT_OK(remat_backward(1, &y, &gb, false, 0, NULL));
            RT_OK(remat_matmul(&ref, gb, wb));
            char what[96];
            snprintf(what, sizeof what, "%d threads, x (%lld, %lld), w (%lld, %lld)", th,
                     (long long)R, (long long)I, (long long)O, (long long)I);
            remat_tensor *sum = rt_abs_product_bf16(gb, 1.0, wb, 1.0);
            rt_assert_same_gemm(x->grad, ref, sum, true, what);
            remat_release(sum);
            remat_release(ref), remat_release(y), remat_release(x), remat_release(w);
            remat_release(xf), remat_release(gf), remat_release(gb), remat_release(wb);
        }
    }
    omp_set_num_threads(prev);
    cr_assert_eq(remat_live_tensors(), 0);
}
