/* tests/test_ops_shape.c — shape ops (reshape/view, transpose/permute, slice,
 * expand, (un)squeeze, contiguous), cat/split and copies (clone, to_dtype,
 * to_device): forward values, view semantics, f64 gradient checks and the
 * error cases; then the paths of the kernels that views feed: the strided
 * copy (rows, tiled transpose, strided, broadcast; serial and OpenMP
 * sizes), the slice-backward scatter, and the selection kernel of
 * masked_fill / where (packed broadcast masks, unit-stride and strided
 * loops), each against an element-by-element reference. (Split's
 * SplitBackward node: tests/test_split_backward.c.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/rt.h"

/* ---- helpers ------------------------------------------------------------------ */
static void expect_values(const remat_tensor *t, int64_t n, const double *want, const char *what) {
    cr_assert_eq(remat_numel(t), n, "%s: numel %lld, expected %lld", what,
                 (long long)remat_numel(t), (long long)n);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    RT_OK(remat_copy_to_buffer(t, REMAT_F64, v, n));
    for (int64_t i = 0; i < n; i++)
        cr_assert(v[i] == want[i], "%s: element %lld is %g, expected %g", what, (long long)i, v[i],
                  want[i]);
    free(v);
}

static void expect_shape(const remat_tensor *t, int ndim, const int64_t *shape, const char *what) {
    cr_assert_eq(remat_ndim(t), ndim, "%s: ndim %d, expected %d", what, remat_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        cr_assert_eq(remat_size(t, d), shape[d], "%s: dim %d is %lld, expected %lld", what, d,
                     (long long)remat_size(t, d), (long long)shape[d]);
}

static void expect_strides(const remat_tensor *t, const int64_t *strides, const char *what) {
    for (int d = 0; d < remat_ndim(t); d++)
        cr_assert_eq(remat_strides(t)[d], strides[d], "%s: stride %d is %lld, expected %lld", what,
                     d, (long long)remat_strides(t)[d], (long long)strides[d]);
}

/* 0, 1, 2, ... as f64 (or dtype) */
static remat_tensor *iota(int ndim, const int64_t *shape, remat_dtype dtype) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = (double)i;
    remat_tensor *t = rt_tensor(ndim, shape, dtype, v);
    free(v);
    return t;
}

static remat_tensor *leaf(int ndim, const int64_t *shape, unsigned seed) {
    remat_tensor *t = rt_rand(ndim, shape, REMAT_F64, -1, 1, seed);
    RT_OK(remat_set_requires_grad(t, true));
    return t;
}

/* A leaf that is a non-contiguous view: transpose(base, 0, 1) made without
 * grad, then marked as requiring grad. */
static remat_tensor *transposed_leaf(int64_t rows, int64_t cols, unsigned seed) {
    int64_t sh[] = {cols, rows};
    remat_tensor *base = rt_rand(2, sh, REMAT_F64, -1, 1, seed), *t;
    RT_OK(remat_transpose(&t, base, 0, 1));
    remat_release(base);
    RT_OK(remat_set_requires_grad(t, true));
    cr_assert(!remat_is_contiguous(t));
    return t;
}

static void end_check(void) {
    cr_assert_eq(remat_live_tensors(), 0, "%lld tensors leaked", (long long)remat_live_tensors());
}

/* ---- reshape / view ----------------------------------------------------------------- */
Test(shape_reshape, view_shares_storage_and_infers_minus_one) {
    int64_t sh[] = {2, 3, 4};
    remat_tensor *a = iota(3, sh, REMAT_F32), *v;
    int64_t ns[] = {4, -1};
    RT_OK(remat_view(&v, a, 2, ns));
    int64_t want[] = {4, 6};
    expect_shape(v, 2, want, "view");
    cr_assert(remat_shares_storage(a, v));
    cr_assert(remat_is_contiguous(v));
    cr_assert_eq(remat_data(v), remat_data(a));
    /* write through the view, read through the base */
    ((float *)remat_data(v))[7] = 100.f;
    double x;
    RT_OK(remat_item_at(a, 7, &x));
    cr_assert_eq(x, 100.0);
    /* -1 first, scalar view of a one-element tensor */
    int64_t ns2[] = {-1, 2, 2};
    remat_tensor *v2;
    RT_OK(remat_reshape(&v2, a, 3, ns2));
    int64_t want2[] = {6, 2, 2};
    expect_shape(v2, 3, want2, "reshape -1");
    cr_assert(remat_shares_storage(a, v2), "reshape of a contiguous tensor must be a view");
    remat_tensor *one, *s;
    int64_t one_sh[] = {1, 1};
    double ov = 3.5;
    one = rt_tensor(2, one_sh, REMAT_F64, &ov);
    RT_OK(remat_view(&s, one, 0, NULL));
    cr_assert_eq(remat_ndim(s), 0);
    RT_OK(remat_item(s, &x));
    cr_assert_eq(x, 3.5);
    remat_release(s);
    remat_release(one);
    remat_release(v2);
    remat_release(v);
    remat_release(a);
    end_check();
}

Test(shape_reshape, view_of_noncontiguous_when_possible) {
    int64_t sh[] = {2, 3, 4};
    remat_tensor *a = iota(3, sh, REMAT_F64), *t, *v;
    RT_OK(remat_transpose(&t, a, 0, 1)); /* (3, 2, 4) strides (4, 12, 1) */
    int64_t ts[] = {4, 12, 1};
    expect_strides(t, ts, "transpose");
    /* splitting the contiguous last dim is possible */
    int64_t ns[] = {3, 2, 2, 2};
    RT_OK(remat_view(&v, t, 4, ns));
    int64_t vs[] = {4, 12, 2, 1};
    expect_strides(v, vs, "split view");
    cr_assert(remat_shares_storage(v, a));
    /* values follow t's row-major order */
    double tv[24], vv[24];
    RT_OK(remat_copy_to_buffer(t, REMAT_F64, tv, 24));
    RT_OK(remat_copy_to_buffer(v, REMAT_F64, vv, 24));
    cr_assert(memcmp(tv, vv, sizeof tv) == 0);
    remat_release(v);
    /* merging dims 1 and 2 of t ((2, 4) with strides (12, 1)) is not */
    int64_t ms[] = {3, 8};
    int rc = remat_view(&v, t, 2, ms);
    cr_assert_eq(rc, REMAT_ESHAPE, "dims 1,2 of the transpose are not mergeable (stride 12 vs 4)");
    cr_assert_null(v);
    cr_assert(strstr(remat_last_error(), "remat_view") != NULL, "%s", remat_last_error());
    cr_assert(strstr(remat_last_error(), "remat_reshape") != NULL, "%s", remat_last_error());
    /* merging (3, 2) with strides (4, 12): impossible */
    int64_t bad[] = {6, 4};
    RT_FAILS(remat_view(&v, t, 2, bad), REMAT_ESHAPE, "remat_view");
    /* a sliced tensor (step 2 on dim 1): split dim 0, add size-1 dims */
    int64_t s2[] = {4, 6};
    remat_tensor *b = iota(2, s2, REMAT_F64), *sl, *w;
    RT_OK(remat_slice(&sl, b, 1, 0, 6, 2)); /* (4, 3) strides (6, 2) */
    int64_t ws[] = {2, 2, 1, 3};
    RT_OK(remat_view(&w, sl, 4, ws));
    int64_t wst[] = {12, 6, 6, 2};
    expect_strides(w, wst, "view of slice");
    double want[12] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22};
    expect_values(w, 12, want, "view of slice");
    remat_release(w);
    /* rows 6 apart, columns 2 apart, 3 columns: (4, 3) flattens as one stride-2 run */
    int64_t flat[] = {12};
    RT_OK(remat_view(&w, sl, 1, flat));
    int64_t fst[] = {2};
    expect_strides(w, fst, "flat view of slice");
    expect_values(w, 12, want, "flat view of slice");
    remat_release(w);
    remat_release(sl);
    /* 2 columns 2 apart in rows 6 apart: not one run */
    RT_OK(remat_slice(&sl, b, 1, 0, 4, 2));
    int64_t flat8[] = {8};
    RT_FAILS(remat_view(&w, sl, 1, flat8), REMAT_ESHAPE, "remat_reshape");
    remat_release(sl);
    remat_release(b);
    remat_release(t);
    remat_release(a);
    end_check();
}

Test(shape_reshape, reshape_of_transposed_copies) {
    int64_t sh[] = {2, 3};
    remat_tensor *a = iota(2, sh, REMAT_F64), *t, *r;
    RT_OK(remat_transpose(&t, a, 0, 1));
    int64_t ns[] = {6};
    RT_OK(remat_reshape(&r, t, 1, ns));
    cr_assert(!remat_shares_storage(r, a), "reshape of a transpose must copy");
    cr_assert(remat_is_contiguous(r));
    double want[] = {0, 3, 1, 4, 2, 5};
    expect_values(r, 6, want, "reshape(transpose)");
    /* the copy is independent of a */
    ((double *)remat_data(a))[0] = 42;
    double x;
    RT_OK(remat_item_at(r, 0, &x));
    cr_assert_eq(x, 0.0);
    remat_release(r);
    remat_release(t);
    remat_release(a);
    end_check();
}

Test(shape_reshape, zero_element_shapes) {
    int64_t sh[] = {0, 4};
    remat_tensor *a, *v;
    RT_OK(remat_zeros(&a, 2, sh, REMAT_F32, REMAT_DEVICE_CPU));
    int64_t ns[] = {2, 0, 3};
    RT_FAILS(remat_reshape(&v, a, 3, (int64_t[]){2, 0, -1}), REMAT_ESHAPE, "remat_reshape");
    RT_OK(remat_reshape(&v, a, 3, ns));
    expect_shape(v, 3, ns, "empty reshape");
    remat_release(v);
    remat_release(a);
    end_check();
}

Test(shape_reshape, errors_name_the_call) {
    int64_t sh[] = {3, 4};
    remat_tensor *a = iota(2, sh, REMAT_F32), *v = (remat_tensor *)1;
    int64_t bad[] = {5, 3};
    RT_FAILS(remat_reshape(&v, a, 2, bad), REMAT_ESHAPE, "remat_reshape");
    cr_assert_null(v);
    cr_assert(strstr(remat_last_error(), "[5, 3]") && strstr(remat_last_error(), "[3, 4]"),
              "message must show both shapes: %s", remat_last_error());
    RT_FAILS(remat_view(&v, a, 2, bad), REMAT_ESHAPE, "remat_view");
    int64_t two[] = {-1, -1};
    RT_FAILS(remat_view(&v, a, 2, two), REMAT_EINVAL, "only one");
    int64_t neg[] = {-2, -6};
    RT_FAILS(remat_view(&v, a, 2, neg), REMAT_EINVAL, "remat_view");
    int64_t inf[] = {5, -1};
    RT_FAILS(remat_view(&v, a, 2, inf), REMAT_ESHAPE, "remat_view");
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 12};
    RT_FAILS(remat_reshape(&v, a, 9, nine), REMAT_EINVAL, "remat_reshape");
    RT_FAILS(remat_reshape(&v, a, 2, NULL), REMAT_EINVAL, "remat_reshape");
    RT_FAILS(remat_reshape(&v, NULL, 2, sh), REMAT_EINVAL, "remat_reshape");
    RT_FAILS(remat_view(NULL, a, 2, sh), REMAT_EINVAL, "remat_view");
    cr_assert_eq(remat_version(a), 0u);
    remat_release(a);
    end_check();
}

static int f_reshape_t(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    int64_t ns[] = {2, -1};
    return remat_reshape(out, in[0], 2, ns);
}

static int f_view3(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    int64_t ns[] = {3, 1, 4};
    return remat_view(out, in[0], 3, ns);
}

Test(shape_reshape, gradcheck) {
    remat_tensor *t = transposed_leaf(3, 4, 1); /* (3, 4) non-contiguous: reshape copies */
    RT_GRADCHECK(f_reshape_t, NULL, 1, &t);
    RT_GRADCHECK(f_view3, NULL, 1, &t); /* (3, 4) strides (1, 3) → (3, 1, 4) is a view */
    remat_release(t);
    int64_t sh[] = {4, 3};
    remat_tensor *a = leaf(2, sh, 2);
    RT_GRADCHECK(f_reshape_t, NULL, 1, &a);
    RT_GRADCHECK(f_view3, NULL, 1, &a);
    /* the graph node names the op */
    remat_tensor *v;
    int64_t ns[] = {12};
    RT_OK(remat_view(&v, a, 1, ns));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(v)), "ViewBackward");
    remat_release(v);
    remat_release(a);
    end_check();
}

/* ---- transpose / permute ---------------------------------------------------------- */
Test(shape_transpose, values_strides_and_negative_dims) {
    int64_t sh[] = {2, 3, 4};
    remat_tensor *a = iota(3, sh, REMAT_F32), *t;
    RT_OK(remat_transpose(&t, a, -1, 0)); /* (4, 3, 2) */
    int64_t want[] = {4, 3, 2}, ws[] = {1, 4, 12};
    expect_shape(t, 3, want, "transpose");
    expect_strides(t, ws, "transpose");
    cr_assert(remat_shares_storage(t, a));
    double x;
    RT_OK(remat_item_at(t, 1 * 6 + 2 * 2 + 1, &x)); /* t[1][2][1] = a[1][2][1] */
    cr_assert_eq(x, 1 * 12 + 2 * 4 + 1);
    remat_tensor *same;
    RT_OK(remat_transpose(&same, a, 1, 1));
    cr_assert(remat_is_contiguous(same));
    remat_release(same);
    RT_FAILS(remat_transpose(&same, a, 0, 3), REMAT_EINVAL, "remat_transpose");
    RT_FAILS(remat_transpose(&same, a, -4, 0), REMAT_EINVAL, "remat_transpose");
    RT_FAILS(remat_transpose(&same, NULL, 0, 1), REMAT_EINVAL, "remat_transpose");
    cr_assert_null(same);
    remat_release(t);
    remat_release(a);
    end_check();
}

Test(shape_transpose, permute_3d) {
    int64_t sh[] = {2, 3, 4};
    remat_tensor *a = iota(3, sh, REMAT_F64), *p;
    int perm[] = {2, 0, 1};
    RT_OK(remat_permute(&p, a, 3, perm)); /* (4, 2, 3) */
    int64_t want[] = {4, 2, 3}, ws[] = {1, 12, 4};
    expect_shape(p, 3, want, "permute");
    expect_strides(p, ws, "permute");
    double vals[24];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 3; k++) vals[i * 6 + j * 3 + k] = j * 12 + k * 4 + i;
    expect_values(p, 24, vals, "permute");
    remat_release(p);
    int neg[] = {-1, -3, -2};
    RT_OK(remat_permute(&p, a, 3, neg));
    expect_shape(p, 3, want, "permute negative");
    remat_release(p);
    int dup[] = {0, 0, 1};
    RT_FAILS(remat_permute(&p, a, 3, dup), REMAT_EINVAL, "remat_permute");
    cr_assert(strstr(remat_last_error(), "permutation"), "%s", remat_last_error());
    int oob[] = {0, 1, 3};
    RT_FAILS(remat_permute(&p, a, 3, oob), REMAT_EINVAL, "remat_permute");
    RT_FAILS(remat_permute(&p, a, 2, perm), REMAT_EINVAL, "remat_permute");
    RT_FAILS(remat_permute(&p, a, 3, NULL), REMAT_EINVAL, "remat_permute");
    cr_assert_null(p);
    remat_release(a);
    end_check();
}

static int f_transpose(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    return remat_transpose(out, in[0], 0, -1);
}

static int f_permute(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    int perm[] = {1, 2, 0};
    return remat_permute(out, in[0], 3, perm);
}

/* permute then a copy through reshape, times itself: the grad flowing back
 * through permute is non-trivial */
static int f_permute_mul(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    int perm[] = {2, 0, 1};
    remat_tensor *p, *r;
    int rc = remat_permute(&p, in[0], 3, perm);
    if (rc) return rc;
    int64_t ns[] = {-1};
    rc = remat_reshape(&r, p, 1, ns);
    remat_release(p);
    if (rc) return rc;
    rc = remat_mul(out, r, r);
    remat_release(r);
    return rc;
}

Test(shape_transpose, gradcheck) {
    remat_tensor *t = transposed_leaf(3, 2, 3);
    RT_GRADCHECK(f_transpose, NULL, 1, &t);
    remat_release(t);
    int64_t sh[] = {2, 3, 4};
    remat_tensor *a = leaf(3, sh, 4);
    RT_GRADCHECK(f_transpose, NULL, 1, &a);
    RT_GRADCHECK(f_permute, NULL, 1, &a);
    RT_GRADCHECK(f_permute_mul, NULL, 1, &a);
    remat_release(a);
    end_check();
}

/* ---- slice ------------------------------------------------------------------------------ */
Test(shape_slice, python_semantics) {
    int64_t sh[] = {10};
    remat_tensor *a = iota(1, sh, REMAT_F64), *s;
    RT_OK(remat_slice(&s, a, 0, 2, 8, 3));
    double w1[] = {2, 5};
    expect_values(s, 2, w1, "2:8:3");
    cr_assert(remat_shares_storage(s, a));
    remat_release(s);
    RT_OK(remat_slice(&s, a, 0, -3, INT64_MAX, 1));
    double w2[] = {7, 8, 9};
    expect_values(s, 3, w2, "-3:");
    remat_release(s);
    RT_OK(remat_slice(&s, a, -1, -100, -8, 1)); /* clamped start */
    double w3[] = {0, 1};
    expect_values(s, 2, w3, "-100:-8");
    remat_release(s);
    RT_OK(remat_slice(&s, a, 0, 7, 3, 1)); /* empty */
    cr_assert_eq(remat_numel(s), 0);
    remat_release(s);
    RT_OK(remat_slice(&s, a, 0, 12, 20, 1)); /* past the end: empty */
    cr_assert_eq(remat_numel(s), 0);
    remat_release(s);
    RT_FAILS(remat_slice(&s, a, 0, 0, 5, 0), REMAT_EINVAL, "remat_slice");
    RT_FAILS(remat_slice(&s, a, 0, 0, 5, -1), REMAT_EINVAL, "step");
    RT_FAILS(remat_slice(&s, a, 1, 0, 5, 1), REMAT_EINVAL, "remat_slice");
    RT_FAILS(remat_slice(&s, NULL, 0, 0, 5, 1), REMAT_EINVAL, "remat_slice");
    remat_tensor *sc;
    RT_OK(remat_scalar(&sc, 1.0, REMAT_F64));
    RT_FAILS(remat_slice(&s, sc, 0, 0, 1, 1), REMAT_EINVAL, "0-dim");
    cr_assert_null(s);
    remat_release(sc);
    remat_release(a);
    end_check();
}

Test(shape_slice, two_dims_and_writes_through) {
    int64_t sh[] = {3, 4};
    remat_tensor *a = iota(2, sh, REMAT_F32), *s;
    RT_OK(remat_slice(&s, a, 1, 1, 4, 2)); /* columns 1, 3 */
    int64_t want[] = {3, 2}, ws[] = {4, 2};
    expect_shape(s, 2, want, "slice");
    expect_strides(s, ws, "slice");
    double v[] = {1, 3, 5, 7, 9, 11};
    expect_values(s, 6, v, "slice");
    ((float *)remat_data(s))[1 * 4 + 1 * 2] = -1.f; /* s[1][1] = a[1][3] */
    double x;
    RT_OK(remat_item_at(a, 7, &x));
    cr_assert_eq(x, -1.0);
    remat_release(s);
    remat_release(a);
    end_check();
}

typedef struct slice_args {
    int dim;
    int64_t start, end, step;
} slice_args;

static int f_slice(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    slice_args *s = ud;
    return remat_slice(out, in[0], s->dim, s->start, s->end, s->step);
}

Test(shape_slice, gradcheck) {
    int64_t sh[] = {4, 5};
    remat_tensor *a = leaf(2, sh, 5);
    slice_args s1 = {1, 1, 5, 2};
    RT_GRADCHECK(f_slice, &s1, 1, &a);
    slice_args s2 = {0, -3, -1, 1};
    RT_GRADCHECK(f_slice, &s2, 1, &a);
    remat_release(a);
    remat_tensor *t = transposed_leaf(5, 4, 6); /* non-contiguous input */
    slice_args s3 = {0, 0, 5, 3};
    RT_GRADCHECK(f_slice, &s3, 1, &t);
    /* the grad of the unsliced rows is zero */
    remat_tensor *y, *g = NULL;
    RT_OK(remat_slice(&y, t, 0, 1, 2, 1));
    int64_t gs[] = {1, 4};
    remat_tensor *go;
    RT_OK(remat_full(&go, 2, gs, 1.0, REMAT_F64, REMAT_DEVICE_CPU));
    RT_OK(remat_grad(1, &y, &go, 1, &t, false, false, &g));
    double want[20] = {0};
    for (int j = 0; j < 4; j++) want[4 + j] = 1;
    expect_values(g, 20, want, "slice grad");
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "SliceBackward");
    remat_release(g);
    remat_release(go);
    remat_release(y);
    remat_release(t);
    end_check();
}

/* ---- expand ------------------------------------------------------------------------------ */
Test(shape_expand, values_and_zero_strides) {
    int64_t sh[] = {3, 1};
    remat_tensor *a = iota(2, sh, REMAT_F64), *e;
    int64_t ns[] = {2, -1, 4};
    RT_OK(remat_expand(&e, a, 3, ns));
    int64_t want[] = {2, 3, 4}, ws[] = {0, 1, 0};
    expect_shape(e, 3, want, "expand");
    expect_strides(e, ws, "expand");
    cr_assert(remat_shares_storage(e, a));
    double v[24];
    for (int i = 0; i < 24; i++) v[i] = (i / 4) % 3;
    expect_values(e, 24, v, "expand");
    remat_release(e);
    int64_t same[] = {3, 1};
    RT_OK(remat_expand(&e, a, 2, same));
    expect_shape(e, 2, same, "expand to own shape");
    remat_release(e);
    int64_t bad[] = {4, 4};
    RT_FAILS(remat_expand(&e, a, 2, bad), REMAT_ESHAPE, "remat_expand");
    int64_t lead[] = {-1, 3, 4};
    RT_FAILS(remat_expand(&e, a, 3, lead), REMAT_EINVAL, "remat_expand");
    int64_t fewer[] = {3};
    RT_FAILS(remat_expand(&e, a, 1, fewer), REMAT_EINVAL, "remat_expand");
    RT_FAILS(remat_expand(&e, NULL, 1, fewer), REMAT_EINVAL, "remat_expand");
    cr_assert_null(e);
    remat_release(a);
    end_check();
}

static int f_expand(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    int64_t ns[] = {2, 3, 4};
    return remat_expand(out, in[0], 3, ns);
}

/* expand then a contiguous copy and mul: exercises the strided grad path */
static int f_expand_mul(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    int64_t ns[] = {2, 3, 4};
    remat_tensor *e, *c;
    int rc = remat_expand(&e, in[0], 3, ns);
    if (rc) return rc;
    rc = remat_contiguous(&c, e);
    remat_release(e);
    if (rc) return rc;
    rc = remat_mul(out, c, c);
    remat_release(c);
    return rc;
}

Test(shape_expand, gradcheck) {
    int64_t sh[] = {3, 1};
    remat_tensor *a = leaf(2, sh, 7);
    RT_GRADCHECK(f_expand, NULL, 1, &a);
    RT_GRADCHECK(f_expand_mul, NULL, 1, &a);
    remat_release(a);
    int64_t sh1[] = {1, 4};
    remat_tensor *b = leaf(2, sh1, 8);
    RT_GRADCHECK(f_expand, NULL, 1, &b);
    remat_release(b);
    end_check();
}

/* ---- squeeze / unsqueeze -------------------------------------------------------------- */
Test(shape_squeeze, shapes_and_errors) {
    int64_t sh[] = {2, 1, 3};
    remat_tensor *a = iota(3, sh, REMAT_F32), *s, *u;
    RT_OK(remat_squeeze(&s, a, 1));
    int64_t w1[] = {2, 3};
    expect_shape(s, 2, w1, "squeeze");
    cr_assert(remat_shares_storage(s, a));
    RT_OK(remat_unsqueeze(&u, s, -1));
    int64_t w2[] = {2, 3, 1};
    expect_shape(u, 3, w2, "unsqueeze(-1)");
    cr_assert(remat_is_contiguous(u));
    remat_release(u);
    RT_OK(remat_unsqueeze(&u, s, 0));
    int64_t w3[] = {1, 2, 3};
    expect_shape(u, 3, w3, "unsqueeze(0)");
    remat_release(u);
    remat_release(s);
    /* squeezing a dim of size != 1 gives an unchanged view */
    RT_OK(remat_squeeze(&s, a, 0));
    expect_shape(s, 3, sh, "squeeze non-1");
    cr_assert(remat_shares_storage(s, a));
    remat_release(s);
    RT_FAILS(remat_squeeze(&s, a, 3), REMAT_EINVAL, "remat_squeeze");
    RT_FAILS(remat_unsqueeze(&u, a, 4), REMAT_EINVAL, "remat_unsqueeze");
    RT_FAILS(remat_unsqueeze(&u, a, -5), REMAT_EINVAL, "remat_unsqueeze");
    RT_FAILS(remat_squeeze(&s, NULL, 0), REMAT_EINVAL, "remat_squeeze");
    int64_t eight[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    remat_tensor *big;
    RT_OK(remat_zeros(&big, 8, eight, REMAT_F32, REMAT_DEVICE_CPU));
    RT_FAILS(remat_unsqueeze(&u, big, 0), REMAT_EINVAL, "remat_unsqueeze");
    cr_assert_null(u);
    remat_release(big);
    /* 0-dim: unsqueeze to [1], squeeze back */
    remat_tensor *sc;
    RT_OK(remat_scalar(&sc, 2.0, REMAT_F64));
    RT_OK(remat_unsqueeze(&u, sc, 0));
    cr_assert_eq(remat_ndim(u), 1);
    RT_OK(remat_squeeze(&s, u, 0));
    cr_assert_eq(remat_ndim(s), 0);
    remat_release(s);
    remat_release(u);
    remat_release(sc);
    remat_release(a);
    end_check();
}

static int f_unsq_sq(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    remat_tensor *u, *s;
    int rc = remat_unsqueeze(&u, in[0], 1);
    if (rc) return rc;
    rc = remat_squeeze(&s, u, 0); /* size 3: unchanged */
    remat_release(u);
    if (rc) return rc;
    rc = remat_mul(out, s, s);
    remat_release(s);
    return rc;
}

static int f_squeeze(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    return remat_squeeze(out, in[0], 1);
}

Test(shape_squeeze, gradcheck) {
    remat_tensor *t = transposed_leaf(3, 4, 9);
    RT_GRADCHECK(f_unsq_sq, NULL, 1, &t);
    remat_release(t);
    int64_t sh[] = {3, 1, 2};
    remat_tensor *a = leaf(3, sh, 10);
    RT_GRADCHECK(f_squeeze, NULL, 1, &a);
    remat_release(a);
    end_check();
}

/* ---- contiguous ----------------------------------------------------------------------- */
Test(shape_contiguous, reference_or_copy) {
    int64_t sh[] = {2, 3};
    remat_tensor *a = iota(2, sh, REMAT_F64), *c, *t, *c2;
    RT_OK(remat_contiguous(&c, a));
    cr_assert_eq(c, a, "contiguous of a contiguous tensor is the tensor itself");
    remat_release(c);
    RT_OK(remat_transpose(&t, a, 0, 1));
    RT_OK(remat_contiguous(&c2, t));
    cr_assert_neq(c2, t);
    cr_assert(remat_is_contiguous(c2));
    cr_assert(!remat_shares_storage(c2, a));
    double v[] = {0, 3, 1, 4, 2, 5};
    expect_values(c2, 6, v, "contiguous");
    remat_release(c2);
    RT_FAILS(remat_contiguous(&c, NULL), REMAT_EINVAL, "remat_contiguous");
    remat_release(t);
    remat_release(a);
    end_check();
}

static int f_contig(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    remat_tensor *c;
    int rc = remat_contiguous(&c, in[0]);
    if (rc) return rc;
    rc = remat_mul(out, c, in[0]);
    remat_release(c);
    return rc;
}

Test(shape_contiguous, gradcheck) {
    remat_tensor *t = transposed_leaf(2, 5, 11);
    RT_GRADCHECK(f_contig, NULL, 1, &t);
    remat_release(t);
    int64_t sh[] = {4};
    remat_tensor *a = leaf(1, sh, 12);
    RT_GRADCHECK(f_contig, NULL, 1, &a);
    remat_release(a);
    end_check();
}

/* ---- cat / split ---------------------------------------------------------------------------- */
Test(shape_cat, three_tensors_middle_dim) {
    int64_t s0[] = {2, 1, 2}, s1[] = {2, 2, 2}, s2[] = {2, 3, 2};
    double v0[] = {0, 1, 2, 3};
    double v1[] = {10, 11, 12, 13, 14, 15, 16, 17};
    double v2[] = {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    remat_tensor *in[3] = {rt_tensor(3, s0, REMAT_F32, v0), rt_tensor(3, s1, REMAT_F32, v1),
                           rt_tensor(3, s2, REMAT_F32, v2)};
    remat_tensor *c;
    RT_OK(remat_cat(&c, 3, in, 1));
    int64_t want[] = {2, 6, 2};
    expect_shape(c, 3, want, "cat");
    double w[] = {0, 1, 10, 11, 12, 13, 20, 21, 22, 23, 24, 25,
                  2, 3, 14, 15, 16, 17, 26, 27, 28, 29, 30, 31};
    expect_values(c, 24, w, "cat");
    remat_release(c);
    /* negative dim, a non-contiguous input */
    remat_tensor *t, *in2[2];
    int64_t sq[] = {2, 2};
    double q[] = {1, 2, 3, 4};
    remat_tensor *sqt = rt_tensor(2, sq, REMAT_F32, q);
    RT_OK(remat_transpose(&t, sqt, 0, 1));
    in2[0] = t;
    in2[1] = sqt;
    RT_OK(remat_cat(&c, 2, in2, -2));
    double w2[] = {1, 3, 2, 4, 1, 2, 3, 4};
    expect_values(c, 8, w2, "cat of transpose");
    remat_release(c);
    remat_release(t);
    remat_release(sqt);
    for (int i = 0; i < 3; i++) remat_release(in[i]);
    end_check();
}

Test(shape_cat, errors) {
    int64_t s0[] = {2, 3}, s1[] = {3, 3}, s2[] = {2, 3, 1};
    remat_tensor *a = iota(2, s0, REMAT_F32), *b = iota(2, s1, REMAT_F32);
    remat_tensor *c3 = iota(3, s2, REMAT_F32), *d = iota(2, s0, REMAT_F64), *c;
    remat_tensor *ab[2] = {a, b};
    RT_FAILS(remat_cat(&c, 2, ab, 1), REMAT_ESHAPE, "remat_cat");
    cr_assert(strstr(remat_last_error(), "[3, 3]"), "%s", remat_last_error());
    RT_OK(remat_cat(&c, 2, ab, 0)); /* matching along dim 0 */
    remat_release(c);
    remat_tensor *a3[2] = {a, c3};
    RT_FAILS(remat_cat(&c, 2, a3, 0), REMAT_ESHAPE, "remat_cat");
    remat_tensor *ad[2] = {a, d};
    RT_FAILS(remat_cat(&c, 2, ad, 0), REMAT_EDTYPE, "remat_cat");
    remat_tensor *an[2] = {a, NULL};
    RT_FAILS(remat_cat(&c, 2, an, 0), REMAT_EINVAL, "tensors[1]");
    RT_FAILS(remat_cat(&c, 0, ab, 0), REMAT_EINVAL, "remat_cat");
    RT_FAILS(remat_cat(&c, 2, NULL, 0), REMAT_EINVAL, "remat_cat");
    RT_FAILS(remat_cat(&c, 2, ab, 2), REMAT_EINVAL, "remat_cat");
    RT_FAILS(remat_cat(NULL, 2, ab, 0), REMAT_EINVAL, "remat_cat");
    remat_tensor *sc;
    RT_OK(remat_scalar(&sc, 1.0, REMAT_F32));
    RT_FAILS(remat_cat(&c, 1, &sc, 0), REMAT_EINVAL, "remat_cat");
    cr_assert_null(c);
    int td = rt_testdev_register();
    remat_tensor *on_dev;
    RT_OK(remat_to_device(&on_dev, b, (remat_device){td, 0}));
    remat_tensor *adev[2] = {a, on_dev};
    RT_FAILS(remat_cat(&c, 2, adev, 0), REMAT_EDEVICE, "remat_cat");
    remat_release(on_dev);
    remat_release(sc);
    remat_release(a);
    remat_release(b);
    remat_release(c3);
    remat_release(d);
    end_check();
}

static int f_cat3(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    return remat_cat(out, n, in, 1);
}

Test(shape_cat, gradcheck) {
    int64_t s0[] = {2, 1, 3}, s2[] = {2, 2, 3};
    remat_tensor *in[3];
    in[0] = leaf(3, s0, 13);
    /* the middle input is a non-contiguous (2, 3, 3) view that does not need grad
     * in one check and needs it in the other */
    int64_t sb[] = {2, 3, 3};
    remat_tensor *base = rt_rand(3, sb, REMAT_F64, -1, 1, 14);
    RT_OK(remat_transpose(&in[1], base, 1, 2));
    remat_release(base);
    in[2] = leaf(3, s2, 15);
    RT_GRADCHECK(f_cat3, NULL, 3, in);
    RT_OK(remat_set_requires_grad(in[1], true));
    RT_GRADCHECK(f_cat3, NULL, 3, in);
    remat_tensor *c;
    RT_OK(remat_cat(&c, 3, in, 1));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(c)), "CatBackward");
    remat_release(c);
    for (int i = 0; i < 3; i++) remat_release(in[i]);
    end_check();
}

Test(shape_split, remainder_and_views) {
    int64_t sh[] = {7, 2};
    remat_tensor *a = iota(2, sh, REMAT_F64), *outs[4];
    int n = -1;
    RT_OK(remat_split(outs, 4, &n, a, 3, 0));
    cr_assert_eq(n, 3);
    cr_assert_null(outs[3]);
    int64_t sz[] = {3, 3, 1};
    for (int i = 0; i < 3; i++) {
        int64_t want[] = {sz[i], 2};
        expect_shape(outs[i], 2, want, "split piece");
        cr_assert(remat_shares_storage(outs[i], a));
    }
    double w2[] = {12, 13};
    expect_values(outs[2], 2, w2, "last piece");
    for (int i = 0; i < 3; i++) remat_release(outs[i]);
    /* exact division along dim -1 */
    RT_OK(remat_split(outs, 4, &n, a, 1, -1));
    cr_assert_eq(n, 2);
    double c1[] = {1, 3, 5, 7, 9, 11, 13};
    expect_values(outs[1], 7, c1, "column 1");
    for (int i = 0; i < 2; i++) remat_release(outs[i]);
    /* split_size larger than the dim: one piece */
    RT_OK(remat_split(outs, 1, &n, a, 100, 0));
    cr_assert_eq(n, 1);
    cr_assert_eq(remat_numel(outs[0]), 14);
    remat_release(outs[0]);
    RT_FAILS(remat_split(outs, 2, &n, a, 3, 0), REMAT_EINVAL, "max_out");
    cr_assert_eq(n, 0);
    cr_assert_null(outs[0]);
    RT_FAILS(remat_split(outs, 4, &n, a, 0, 0), REMAT_EINVAL, "remat_split");
    RT_FAILS(remat_split(outs, 4, &n, a, 2, 2), REMAT_EINVAL, "remat_split");
    RT_FAILS(remat_split(outs, 4, &n, NULL, 2, 0), REMAT_EINVAL, "remat_split");
    RT_FAILS(remat_split(NULL, 4, &n, a, 2, 0), REMAT_EINVAL, "remat_split");
    RT_FAILS(remat_split(outs, 4, NULL, a, 2, 0), REMAT_EINVAL, "remat_split");
    remat_release(a);
    end_check();
}

/* split into (2, 2, 1) rows and put them back in another order, dropping
 * the middle piece: its rows get a zero grad */
static int f_split(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    remat_tensor *p[4];
    int np;
    int rc = remat_split(p, 4, &np, in[0], 2, 0);
    if (rc) return rc;
    remat_tensor *sq;
    rc = remat_mul(&sq, p[0], p[0]);
    if (rc == REMAT_OK) {
        remat_tensor *parts[2] = {p[2], sq};
        rc = remat_cat(out, 2, parts, 0);
        remat_release(sq);
    }
    for (int i = 0; i < np; i++) remat_release(p[i]);
    return rc;
}

Test(shape_split, gradcheck) {
    int64_t sh[] = {5, 3};
    remat_tensor *a = leaf(2, sh, 16);
    RT_GRADCHECK(f_split, NULL, 1, &a);
    remat_release(a);
    remat_tensor *t = transposed_leaf(5, 3, 17);
    RT_GRADCHECK(f_split, NULL, 1, &t);
    remat_release(t);
    end_check();
}

/* ---- copies ---------------------------------------------------------------------------------- */
static int f_clone(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)ud;
    (void)n;
    remat_tensor *c;
    int rc = remat_clone(&c, in[0]);
    if (rc) return rc;
    rc = remat_mul(out, c, c);
    remat_release(c);
    return rc;
}

Test(shape_copy, clone) {
    remat_tensor *t = transposed_leaf(3, 2, 18), *c;
    RT_OK(remat_clone(&c, t));
    cr_assert(!remat_shares_storage(c, t));
    cr_assert(remat_is_contiguous(c));
    cr_assert_eq(rt_max_abs_diff(c, t), 0.0);
    cr_assert_str_eq(remat_node_name(remat_grad_fn(c)), "CloneBackward");
    remat_release(c);
    RT_GRADCHECK(f_clone, NULL, 1, &t);
    RT_FAILS(remat_clone(&c, NULL), REMAT_EINVAL, "remat_clone");
    RT_FAILS(remat_clone(NULL, t), REMAT_EINVAL, "remat_clone");
    remat_release(t);
    end_check();
}

Test(shape_copy, to_dtype_values_and_grads) {
    int64_t sh[] = {2, 3};
    double v[] = {1.25, -2.5, 3.75, 1e10, -0.5, 7};
    remat_tensor *x = rt_tensor(2, sh, REMAT_F64, v), *y, *g = NULL;
    RT_OK(remat_set_requires_grad(x, true));
    RT_OK(remat_to_dtype(&y, x, REMAT_F32));
    cr_assert_eq(remat_tensor_dtype(y), REMAT_F32);
    expect_values(y, 6, v, "to f32");
    cr_assert(remat_requires_grad(y));
    double gv[] = {1, 2, 3, 4, 5, 6.5};
    remat_tensor *go = rt_tensor(2, sh, REMAT_F32, gv);
    RT_OK(remat_grad(1, &y, &go, 1, &x, false, false, &g));
    cr_assert_eq(remat_tensor_dtype(g), REMAT_F64, "grad must come back as f64");
    expect_values(g, 6, gv, "to f32 grad");
    remat_release(g);
    remat_release(go);
    remat_release(y);
    /* f32 leaf -> f64 -> back through a f64 grad */
    remat_tensor *xf = rt_tensor(2, sh, REMAT_F32, v), *yd;
    RT_OK(remat_set_requires_grad(xf, true));
    RT_OK(remat_to_dtype(&yd, xf, REMAT_F64));
    remat_tensor *god = rt_tensor(2, sh, REMAT_F64, gv);
    RT_OK(remat_backward(1, &yd, &god, false, 0, NULL));
    cr_assert_eq(remat_tensor_dtype(remat_tensor_grad(xf)), REMAT_F32);
    expect_values(remat_tensor_grad(xf), 6, gv, "to f64 grad");
    remat_release(god);
    remat_release(yd);
    remat_release(xf);
    /* to i64: truncates, not differentiable */
    remat_tensor *yi;
    RT_OK(remat_to_dtype(&yi, x, REMAT_I64));
    cr_assert(!remat_requires_grad(yi));
    double vi[] = {1, -2, 3, 1e10, 0, 7};
    expect_values(yi, 6, vi, "to i64");
    remat_tensor *back;
    RT_OK(remat_to_dtype(&back, yi, REMAT_F32));
    expect_values(back, 6, vi, "i64 to f32");
    remat_release(back);
    remat_release(yi);
    /* same dtype: a copy */
    remat_tensor *same;
    RT_OK(remat_to_dtype(&same, x, REMAT_F64));
    cr_assert(!remat_shares_storage(same, x));
    remat_release(same);
    RT_FAILS(remat_to_dtype(&same, x, (remat_dtype)7), REMAT_EDTYPE, "remat_to_dtype");
    RT_FAILS(remat_to_dtype(&same, NULL, REMAT_F32), REMAT_EINVAL, "remat_to_dtype");
    cr_assert_null(same);
    remat_release(x);
    end_check();
}

Test(shape_copy, to_device_round_trip_with_grads) {
    int td = rt_testdev_register();
    remat_device dev0 = {td, 0}, dev1 = {td, 1};
    remat_tensor *x = transposed_leaf(3, 4, 19), *y, *y1, *z;
    RT_OK(remat_to_device(&y, x, dev0));
    cr_assert_eq(remat_tensor_device(y).type, td);
    cr_assert(remat_is_contiguous(y));
    cr_assert(remat_requires_grad(y));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "ToCopyBackward");
    RT_OK(remat_to_device(&y1, y, dev1)); /* device to device */
    cr_assert_eq(remat_tensor_device(y1).index, 1);
    RT_OK(remat_to_device(&z, y1, REMAT_DEVICE_CPU));
    cr_assert_eq(remat_tensor_device(z).type, REMAT_CPU);
    cr_assert_eq(rt_max_abs_diff(z, x), 0.0);
    /* same device: the same tensor */
    remat_tensor *same;
    RT_OK(remat_to_device(&same, y, dev0));
    cr_assert_eq(same, y);
    remat_release(same);
    /* grads flow back to the cpu leaf */
    double gv[12];
    for (int i = 0; i < 12; i++) gv[i] = i * 0.5 - 1;
    int64_t sh[] = {3, 4};
    remat_tensor *go = rt_tensor(2, sh, REMAT_F64, gv);
    RT_OK(remat_backward(1, &z, &go, false, 0, NULL));
    remat_tensor *g = remat_tensor_grad(x);
    cr_assert_not_null(g);
    cr_assert_eq(remat_tensor_device(g).type, REMAT_CPU);
    expect_values(g, 12, gv, "to_device grad");
    remat_release(go);
    remat_release(z);
    remat_release(y1);
    remat_release(y);
    RT_FAILS(remat_to_device(&y, x, ((remat_device){td, 5})), REMAT_EDEVICE, "remat_to_device");
    RT_FAILS(remat_to_device(&y, x, ((remat_device){7, 0})), REMAT_EDEVICE, "remat_to_device");
    RT_FAILS(remat_to_device(&y, NULL, dev0), REMAT_EINVAL, "remat_to_device");
    cr_assert_null(y);
    remat_release(x);
    end_check();
}

static int f_to_dev(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    remat_device *dev = ud;
    remat_tensor *y, *m;
    int rc = remat_to_device(&y, in[0], *dev);
    if (rc) return rc;
    rc = remat_to_device(&m, y, REMAT_DEVICE_CPU);
    remat_release(y);
    if (rc) return rc;
    rc = remat_mul(out, m, in[0]);
    remat_release(m);
    return rc;
}

Test(shape_copy, to_device_gradcheck) {
    int td = rt_testdev_register();
    remat_device dev = {td, 1};
    remat_tensor *t = transposed_leaf(2, 3, 20);
    RT_GRADCHECK(f_to_dev, &dev, 1, &t);
    remat_release(t);
    end_check();
}

/* A device type the CPU cannot read: memory comes from malloc but remat
 * must only touch it through the copy callback. */
static long g_nohost_copies;
static void *nh_alloc(void *ud, int index, size_t n) {
    (void)ud;
    (void)index;
    return malloc(n ? n : 1);
}
static void nh_free(void *ud, int index, void *p, size_t n) {
    (void)ud;
    (void)index;
    (void)n;
    free(p);
}
static int nh_copy(void *ud, int index, void *dst, const void *src, size_t n, remat_copy_kind k) {
    (void)ud;
    (void)index;
    (void)k;
    g_nohost_copies++;
    memcpy(dst, src, n);
    return REMAT_OK;
}
static int nh_count(void *ud) {
    (void)ud;
    return 1;
}

Test(shape_copy, to_device_not_host_addressable) {
    remat_device_type_def def = {0};
    def.name = "nohost";
    def.host_addressable = false;
    def.alloc = nh_alloc;
    def.free = nh_free;
    def.copy = nh_copy;
    def.device_count = nh_count;
    int id;
    RT_OK(remat_register_device_type(&def, &id));
    remat_device dev = {id, 0};
    int64_t sh[] = {3, 4};
    remat_tensor *x = iota(2, sh, REMAT_F64), *y, *yt, *ys, *z;
    RT_OK(remat_set_requires_grad(x, true));
    RT_OK(remat_to_device(&y, x, dev));
    cr_assert_null(remat_data(y), "no host pointer for a non-host-addressable device");
    /* views work on any device; moving a strided one stages through the host */
    RT_OK(remat_transpose(&yt, y, 0, 1));
    RT_OK(remat_slice(&ys, yt, 0, 1, 4, 2)); /* (2, 3): columns 1, 3 of x, transposed */
    long before = g_nohost_copies;
    RT_OK(remat_to_device(&z, ys, REMAT_DEVICE_CPU));
    cr_assert_gt(g_nohost_copies, before);
    double want[] = {1, 5, 9, 3, 7, 11};
    expect_values(z, 6, want, "staged move");
    /* kernels refuse it with a clear error */
    remat_tensor *c;
    RT_FAILS(remat_contiguous(&c, yt), REMAT_EDEVICE, "remat_contiguous");
    /* a conversion on the device is its COPY_INTO kernel's (this type registered none) */
    RT_FAILS(remat_to_dtype(&c, y, REMAT_F32), REMAT_EUNSUPPORTED,
             "remat_to_dtype: copy: no copy kernel for device 'nohost' and dtype f32");
    /* clone works (device to device copy) */
    RT_OK(remat_clone(&c, ys));
    remat_tensor *zc;
    RT_OK(remat_to_device(&zc, c, REMAT_DEVICE_CPU));
    expect_values(zc, 6, want, "clone on device");
    remat_release(zc);
    remat_release(c);
    /* grads flow back through the device (remat has no kernels there, but
     * moves and views need none): x -> dev -> transpose -> cpu */
    remat_tensor *zt, *go, *g = NULL;
    RT_OK(remat_to_device(&zt, yt, REMAT_DEVICE_CPU));
    double gv[12];
    for (int i = 0; i < 12; i++) gv[i] = i + 1;
    int64_t gs[] = {4, 3};
    go = rt_tensor(2, gs, REMAT_F64, gv);
    RT_OK(remat_grad(1, &zt, &go, 1, &x, false, false, &g));
    cr_assert_eq(remat_tensor_device(g).type, REMAT_CPU);
    double gw[12]; /* the grad of x is go transposed */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) gw[i * 4 + j] = gv[j * 3 + i];
    expect_values(g, 12, gw, "grad through the nohost device");
    remat_release(zt);
    remat_release(g);
    remat_release(go);
    remat_release(z);
    remat_release(ys);
    remat_release(yt);
    remat_release(y);
    remat_release(x);
    end_check();
}

/* ---- copy kernel paths ------------------------------------------------------------------ */
/* t's values (f32, f64 or i64) read one by one through its strides. */
static double *strided_ref(const remat_tensor *t) {
    int nd = remat_ndim(t);
    int64_t n = remat_numel(t), idx[REMAT_MAX_DIMS] = {0};
    const int64_t *st = remat_strides(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    const char *p = remat_data(t);
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < nd; d++) off += idx[d] * st[d];
        switch (remat_tensor_dtype(t)) {
        case REMAT_F32: v[i] = ((const float *)(const void *)p)[off]; break;
        case REMAT_F64: v[i] = ((const double *)(const void *)p)[off]; break;
        default: v[i] = (double)((const int64_t *)(const void *)p)[off]; break;
        }
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < remat_size(t, d)) break;
            idx[d] = 0;
        }
    }
    return v;
}

/* contiguous(view) and reshape(view) hold exactly the view's values. */
static void check_copy_of(remat_tensor *view, const char *what) {
    double *want = strided_ref(view);
    int64_t n = remat_numel(view);
    remat_tensor *c = NULL, *r = NULL;
    RT_OK(remat_contiguous(&c, view));
    /* (a 0-element result may report non-contiguous strides: tensor.c) */
    if (n > 0) cr_assert(remat_is_contiguous(c), "%s", what);
    cr_assert_eq(remat_tensor_dtype(c), remat_tensor_dtype(view));
    double *got = rt_values(c);
    for (int64_t i = 0; i < n; i++)
        cr_assert(got[i] == want[i], "%s: element %lld is %g, expected %g", what, (long long)i,
                  got[i], want[i]);
    free(got);
    int64_t flat = -1;
    RT_OK(remat_reshape(&r, view, 1, &flat));
    got = rt_values(r);
    for (int64_t i = 0; i < n; i++)
        cr_assert(got[i] == want[i], "%s (reshape): element %lld", what, (long long)i);
    free(got);
    free(want);
    remat_release(c);
    remat_release(r);
}

Test(shape_copy_kernel, layouts_and_dtypes) {
    remat_dtype dts[] = {REMAT_F32, REMAT_F64, REMAT_I64};
    /* small (serial) and large (> 32768 elements: the OpenMP split) */
    int64_t small[] = {3, 5, 19, 37}, large[] = {4, 6, 45, 70};
    for (int di = 0; di < 3; di++) {
        for (int si = 0; si < 2; si++) {
            const int64_t *sh = si ? large : small;
            remat_tensor *b = iota(4, sh, dts[di]), *v = NULL, *w = NULL;
            char what[120];
            /* tiled transpose of the last two dims, with tile remainders */
            RT_OK(remat_transpose(&v, b, 2, 3));
            snprintf(what, sizeof what, "dtype %d size %d transpose(2,3)", di, si);
            check_copy_of(v, what);
            remat_release(v);
            /* (B, H, T, D) -> (B, T, H, D): rows of D */
            RT_OK(remat_transpose(&v, b, 1, 2));
            snprintf(what, sizeof what, "dtype %d size %d transpose(1,2)", di, si);
            check_copy_of(v, what);
            /* and its last two dims transposed too: src stride 1 on dim 2 */
            RT_OK(remat_transpose(&w, v, 2, 3));
            snprintf(what, sizeof what, "dtype %d size %d transpose(1,2)(2,3)", di, si);
            check_copy_of(w, what);
            remat_release(w);
            remat_release(v);
            /* a full reversal of the dims */
            RT_OK(remat_permute(&v, b, 4, (int[]){3, 2, 1, 0}));
            snprintf(what, sizeof what, "dtype %d size %d permute(3,2,1,0)", di, si);
            check_copy_of(v, what);
            remat_release(v);
            /* strided rows: a step-3 slice of the last dim, then a column
             * window of a middle dim */
            RT_OK(remat_slice(&v, b, 3, 1, INT64_MAX, 3));
            snprintf(what, sizeof what, "dtype %d size %d step slice", di, si);
            check_copy_of(v, what);
            remat_release(v);
            RT_OK(remat_slice(&v, b, 2, 2, sh[2] - 1, 1));
            RT_OK(remat_transpose(&w, v, 0, 3));
            snprintf(what, sizeof what, "dtype %d size %d window transposed", di, si);
            check_copy_of(w, what);
            remat_release(w);
            remat_release(v);
            /* broadcast: an expanded row and an expanded column */
            RT_OK(remat_slice(&v, b, 0, 0, 1, 1));
            RT_OK(remat_expand(&w, v, 4, (int64_t[]){5, -1, -1, -1}));
            snprintf(what, sizeof what, "dtype %d size %d expand dim 0", di, si);
            check_copy_of(w, what);
            remat_release(w);
            remat_release(v);
            RT_OK(remat_slice(&v, b, 3, 4, 5, 1));
            RT_OK(remat_expand(&w, v, 4, (int64_t[]){-1, -1, -1, 33}));
            snprintf(what, sizeof what, "dtype %d size %d expand last dim", di, si);
            check_copy_of(w, what);
            remat_release(w);
            remat_release(v);
            remat_release(b);
        }
    }
    /* one element, and zero elements */
    int64_t one[] = {1, 1}, none[] = {0, 4};
    remat_tensor *b = iota(2, one, REMAT_F32), *v;
    RT_OK(remat_transpose(&v, b, 0, 1));
    check_copy_of(v, "one element");
    remat_release(v);
    remat_release(b);
    b = iota(2, none, REMAT_F64);
    RT_OK(remat_transpose(&v, b, 0, 1));
    check_copy_of(v, "zero elements");
    remat_release(v);
    remat_release(b);
    end_check();
}

/* The copy is bit-for-bit: NaN payloads, -0 and infinities survive. */
Test(shape_copy_kernel, bitwise_specials) {
    int64_t sh[] = {9, 40};
    remat_tensor *b = iota(2, sh, REMAT_F32), *t, *c;
    float *p = remat_data(b);
    uint32_t payload = 0x7fa12345u;
    memcpy(&p[3], &payload, sizeof payload);
    p[4] = -0.0f;
    p[5] = -INFINITY;
    RT_OK(remat_transpose(&t, b, 0, 1));
    RT_OK(remat_contiguous(&c, t));
    const float *q = remat_data(c);
    uint32_t got;
    memcpy(&got, &q[3 * 9], sizeof got); /* b[0][3] is c[3][0] */
    cr_assert_eq(got, payload);
    cr_assert(signbit(q[4 * 9]) && q[4 * 9] == 0.0f);
    cr_assert(isinf(q[5 * 9]) && q[5 * 9] < 0);
    remat_release(c);
    remat_release(t);
    remat_release(b);
    end_check();
}

/* Slice backward writes the gradient into the slice and zeros exactly the
 * complement, for steps, offsets, empty slices and large (parallel) sizes. */
Test(shape_copy_kernel, slice_backward_scatter) {
    struct {
        int64_t rows, cols;
        int dim;
        int64_t start, end, step;
    } cs[] = {
        {7, 11, 1, 2, 9, 1},      {7, 11, 1, 1, 11, 3},     {7, 11, 0, 0, 7, 2},
        {7, 11, 0, 5, 6, 1},      {7, 11, 1, 4, 4, 1},      {300, 150, 1, 10, 140, 1},
        {300, 150, 0, 3, 290, 4}, {300, 150, 1, 0, 150, 7},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int64_t sh[] = {cs[k].rows, cs[k].cols};
        remat_tensor *a = rt_rand(2, sh, REMAT_F32, -1, 1, (unsigned)k + 40), *y, *g, *ga;
        RT_OK(remat_set_requires_grad(a, true));
        RT_OK(remat_slice(&y, a, cs[k].dim, cs[k].start, cs[k].end, cs[k].step));
        g = rt_rand(remat_ndim(y), remat_shape(y), REMAT_F32, 1, 2, (unsigned)k + 80);
        RT_OK(remat_grad(1, &y, &g, 1, &a, false, false, &ga));
        double *vg = rt_values(g), *va = rt_values(ga);
        int64_t gc = remat_size(y, 1);
        for (int64_t i = 0; i < sh[0]; i++) {
            for (int64_t j = 0; j < sh[1]; j++) {
                int64_t x = cs[k].dim == 0 ? i : j;
                int64_t lim = cs[k].end < sh[cs[k].dim] ? cs[k].end : sh[cs[k].dim];
                bool in = x >= cs[k].start && x < lim && (x - cs[k].start) % cs[k].step == 0;
                double want = 0;
                if (in) {
                    int64_t gi = cs[k].dim == 0 ? (i - cs[k].start) / cs[k].step : i;
                    int64_t gj = cs[k].dim == 1 ? (j - cs[k].start) / cs[k].step : j;
                    want = vg[gi * gc + gj];
                }
                cr_assert(va[i * sh[1] + j] == want, "case %zu: grad[%lld][%lld] is %g, want %g", k,
                          (long long)i, (long long)j, va[i * sh[1] + j], want);
            }
        }
        free(vg);
        free(va);
        remat_release(ga);
        remat_release(g);
        remat_release(y);
        remat_release(a);
    }
    end_check();
}

/* ---- selection kernel paths (masked_fill / where) ----------------------------------------- */
/* y[b][r][c] against a[b][r][c] and mask[(b)][r][c] */
static void check_fill(const remat_tensor *y, const remat_tensor *a, const double *mask,
                       int64_t mask_period, double value, const char *what) {
    int64_t n = remat_numel(y);
    double *vy = rt_values(y), *va = rt_values(a);
    for (int64_t i = 0; i < n; i++) {
        double m = mask[i % mask_period];
        double want = (m != 0 || isnan(m)) ? value : va[i];
        cr_assert(vy[i] == want || (isnan(vy[i]) && isnan(want)),
                  "%s: element %lld is %g, expected %g", what, (long long)i, vy[i], want);
    }
    free(vy);
    free(va);
}

Test(shape_select_kernel, masked_fill_mask_kinds) {
    const int64_t B = 3, H = 4, T = 45; /* 24300 elements: serial; x4 below: parallel */
    remat_dtype mdts[] = {REMAT_I64, REMAT_F32, REMAT_F64};
    for (int big = 0; big < 2; big++) {
        int64_t Bb = big ? 4 * B : B;
        int64_t s[] = {Bb, H, T, T}, sm[] = {T, T};
        for (int di = 0; di < 3; di++) {
            double *mv = malloc(sizeof(double) * (size_t)(T * T));
            for (int64_t i = 0; i < T * T; i++)
                mv[i] =
                    (i % 7 == 3) ? (mdts[di] == REMAT_I64 ? 5 : NAN) : (i / T < i % T ? -2.0 : 0.0);
            remat_tensor *m = rt_tensor(2, sm, mdts[di], mv);
            for (int fd = 0; fd < 2; fd++) {
                remat_dtype dt = fd ? REMAT_F64 : REMAT_F32;
                remat_tensor *x = rt_rand(4, s, dt, -1, 1, 7), *y, *xt;
                char what[100];
                snprintf(what, sizeof what, "big %d mask dtype %d x dtype %d", big, di, fd);
                RT_OK(remat_masked_fill(&y, x, m, -7.25));
                check_fill(y, x, mv, T * T, -7.25, what);
                remat_release(y);
                /* the backward: the gradient where the mask is false */
                RT_OK(remat_set_requires_grad(x, true));
                RT_OK(remat_masked_fill(&y, x, m, -7.25));
                remat_tensor *g = rt_rand(4, s, dt, 1, 2, 8), *gx;
                RT_OK(remat_grad(1, &y, &g, 1, &x, false, false, &gx));
                check_fill(gx, g, mv, T * T, 0.0, what);
                remat_release(gx);
                remat_release(g);
                remat_release(y);
                /* a strided input: the strided loop */
                RT_OK(remat_transpose(&xt, x, 0, 1));
                remat_tensor *mt;
                RT_OK(remat_masked_fill(&y, xt, m, 1.5));
                RT_OK(remat_contiguous(&mt, xt));
                check_fill(y, mt, mv, T * T, 1.5, what);
                remat_release(mt);
                remat_release(y);
                remat_release(xt);
                remat_release(x);
            }
            remat_release(m);
            free(mv);
        }
    }
    end_check();
}

/* Masks broadcast along other dims: (B, 1, T, T) (the packed mask has
 * non-zero outer strides), (1, T) rows, a (T, 1) column, a full-shape mask
 * (not packed) and a 0-dim one. */
Test(shape_select_kernel, masked_fill_broadcast_shapes) {
    const int64_t B = 2, H = 3, T = 20;
    int64_t s[] = {B, H, T, T};
    remat_tensor *x = rt_rand(4, s, REMAT_F32, -1, 1, 9);
    double *vx = rt_values(x);
    struct {
        int nd;
        int64_t sh[4];
    } ms[] = {{4, {B, 1, T, T}}, {2, {1, T}}, {2, {T, 1}}, {4, {B, H, T, T}}, {0, {0}}};
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
        int64_t nm = 1;
        for (int d = 0; d < ms[k].nd; d++) nm *= ms[k].sh[d];
        double *mv = malloc(sizeof(double) * (size_t)nm);
        for (int64_t i = 0; i < nm; i++) mv[i] = (i * 5 + 1) % 3 == 0;
        remat_tensor *m = rt_tensor(ms[k].nd, ms[k].sh, REMAT_I64, mv), *y;
        RT_OK(remat_masked_fill(&y, x, m, 9.0));
        double *vy = rt_values(y);
        for (int64_t i = 0; i < B * H * T * T; i++) {
            int64_t b = i / (H * T * T), h = i / (T * T) % H, r = i / T % T, c = i % T;
            int64_t mi = 0;
            switch (k) {
            case 0: mi = (b * T + r) * T + c; break;
            case 1: mi = c; break;
            case 2: mi = r; break;
            case 3: mi = ((b * H + h) * T + r) * T + c; break;
            default: mi = 0; break;
            }
            double want = mv[mi] != 0 ? 9.0 : vx[i];
            cr_assert(vy[i] == want, "mask %zu element %lld: %g, expected %g", k, (long long)i,
                      vy[i], want);
        }
        free(vy);
        free(mv);
        remat_release(y);
        remat_release(m);
    }
    free(vx);
    remat_release(x);
    end_check();
}

/* where: both tensors full (unit loop), a broadcast tensor operand (stride 0
 * in the inner loop) and the backward's "g where true, 0 elsewhere". */
Test(shape_select_kernel, where_paths) {
    const int64_t R = 40, C = 900; /* 36000: the parallel path */
    int64_t s[] = {R, C}, sc[] = {C}, s1[] = {R, 1};
    double *cv = malloc(sizeof(double) * (size_t)C);
    for (int64_t j = 0; j < C; j++) cv[j] = j % 4 == 1 ? 0.0 : (j % 5 ? 1.0 : -0.5);
    remat_tensor *cond = rt_tensor(1, sc, REMAT_F32, cv);
    remat_tensor *a = rt_leaf(rt_rand(2, s, REMAT_F64, -1, 1, 10));
    remat_tensor *b = rt_leaf(rt_rand(2, s1, REMAT_F64, -1, 1, 11)); /* (R, 1) */
    remat_tensor *y, *g = rt_rand(2, s, REMAT_F64, 1, 2, 12);
    RT_OK(remat_where(&y, cond, a, b));
    double *va = rt_values(a), *vb = rt_values(b), *vy = rt_values(y), *vg = rt_values(g);
    for (int64_t i = 0; i < R * C; i++)
        cr_assert(vy[i] == (cv[i % C] != 0 ? va[i] : vb[i / C]), "element %lld", (long long)i);
    remat_tensor *ins[2] = {a, b}, *gs[2] = {NULL, NULL};
    RT_OK(remat_grad(1, &y, &g, 2, ins, false, false, gs));
    double *ga = rt_values(gs[0]), *gb = rt_values(gs[1]);
    for (int64_t r = 0; r < R; r++) {
        double sum = 0;
        for (int64_t j = 0; j < C; j++) {
            double gij = vg[r * C + j];
            cr_assert(ga[r * C + j] == (cv[j] != 0 ? gij : 0.0));
            if (cv[j] == 0) sum += gij;
        }
        cr_assert(fabs(gb[r] - sum) <= 1e-12 * fabs(sum) + 1e-12, "row %lld", (long long)r);
    }
    free(ga);
    free(gb);
    free(va);
    free(vb);
    free(vy);
    free(vg);
    free(cv);
    for (int i = 0; i < 2; i++) remat_release(gs[i]);
    remat_release(y);
    remat_release(g);
    remat_release(a);
    remat_release(b);
    remat_release(cond);
    end_check();
}
