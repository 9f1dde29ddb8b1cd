/* tests/test_tensor_views.c — tensor basics (creation, metadata, data access,
 * names, describe, scopes, leak counter) and view semantics (shared storage,
 * shared version counter, views in skip mode). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h" /* rm_set_skip_mode, for the skip-mode view test */
#include "support/rt.h"

static void end_check(void) {
    cr_assert_eq(remat_live_tensors(), 0, "%lld tensors leaked", (long long)remat_live_tensors());
}

/* ---- creation and metadata ------------------------------------------------------ */
Test(tensor_basics, empty_zeros_full_metadata) {
    int64_t sh[] = {2, 3, 4};
    remat_tensor *e, *z, *f;
    RT_OK(remat_empty(&e, 3, sh, REMAT_F32, REMAT_DEVICE_CPU));
    cr_assert_eq(remat_ndim(e), 3);
    cr_assert_eq(remat_numel(e), 24);
    cr_assert_eq(remat_size(e, 0), 2);
    cr_assert_eq(remat_size(e, -1), 4);
    cr_assert_eq(remat_size(e, 3), -1);
    cr_assert_eq(remat_size(e, -4), -1);
    int64_t st[] = {12, 4, 1};
    for (int d = 0; d < 3; d++) {
        cr_assert_eq(remat_shape(e)[d], sh[d]);
        cr_assert_eq(remat_strides(e)[d], st[d]);
    }
    cr_assert_eq(remat_tensor_dtype(e), REMAT_F32);
    cr_assert_eq(remat_tensor_device(e).type, REMAT_CPU);
    cr_assert(remat_is_contiguous(e));
    cr_assert_eq(remat_storage_nbytes(e), 24 * 4);
    cr_assert(!remat_requires_grad(e));
    cr_assert(remat_is_leaf(e));
    cr_assert_null(remat_grad_fn(e));
    cr_assert_null(remat_tensor_grad(e));
    cr_assert_null(remat_name(e));
    cr_assert_eq(remat_version(e), 0u);
    RT_OK(remat_zeros(&z, 3, sh, REMAT_F64, REMAT_DEVICE_CPU));
    cr_assert_eq(remat_storage_nbytes(z), 24 * 8);
    for (int i = 0; i < 24; i++) cr_assert_eq(((double *)remat_data(z))[i], 0.0);
    RT_OK(remat_full(&f, 2, sh, -1.5, REMAT_F32, REMAT_DEVICE_CPU));
    for (int i = 0; i < 6; i++) cr_assert_eq(((float *)remat_data(f))[i], -1.5f);
    remat_tensor *fi;
    RT_OK(remat_full(&fi, 1, sh, 7, REMAT_I64, REMAT_DEVICE_CPU));
    cr_assert_eq(((int64_t *)remat_data(fi))[1], 7);
    cr_assert_eq(remat_dtype_size(REMAT_F32), 4u);
    cr_assert_eq(remat_dtype_size(REMAT_I64), 8u);
    cr_assert_str_eq(remat_dtype_name(REMAT_F64), "f64");
    cr_assert_eq(remat_live_tensors(), 4);
    remat_release(fi);
    remat_release(f);
    remat_release(z);
    remat_release(e);
    end_check();
}

Test(tensor_basics, from_data_arange_scalar) {
    int64_t sh[] = {2, 2};
    double v[] = {1, 2, 3, 4};
    remat_tensor *a, *r, *s;
    RT_OK(remat_from_data(&a, 2, sh, REMAT_F64, v));
    cr_assert_neq(remat_data(a), (void *)v, "from_data copies");
    v[0] = 100;
    double x;
    RT_OK(remat_item_at(a, 0, &x));
    cr_assert_eq(x, 1.0);
    RT_OK(remat_item_at(a, 3, &x));
    cr_assert_eq(x, 4.0);
    RT_OK(remat_arange(&r, 5));
    cr_assert_eq(remat_tensor_dtype(r), REMAT_I64);
    cr_assert_eq(remat_ndim(r), 1);
    for (int i = 0; i < 5; i++) cr_assert_eq(((int64_t *)remat_data(r))[i], i);
    RT_OK(remat_scalar(&s, 2.5, REMAT_F32));
    cr_assert_eq(remat_ndim(s), 0);
    cr_assert_eq(remat_numel(s), 1);
    cr_assert(remat_is_contiguous(s));
    RT_OK(remat_item(s, &x));
    cr_assert_eq(x, 2.5);
    remat_tensor *r0;
    RT_OK(remat_arange(&r0, 0));
    cr_assert_eq(remat_numel(r0), 0);
    remat_release(r0);
    remat_tensor *bad = (remat_tensor *)1;
    RT_FAILS(remat_arange(&bad, -1), REMAT_EINVAL, "remat_arange");
    cr_assert_null(bad);
    RT_FAILS(remat_from_data(&bad, 2, sh, REMAT_F64, NULL), REMAT_EINVAL, "remat_from_data");
    remat_release(s);
    remat_release(r);
    remat_release(a);
    end_check();
}

Test(tensor_basics, eight_dims_and_limits) {
    int64_t sh[9] = {2, 1, 2, 1, 2, 1, 2, 3, 1};
    remat_tensor *t = NULL;
    RT_OK(remat_zeros(&t, 8, sh, REMAT_F32, REMAT_DEVICE_CPU));
    cr_assert_eq(remat_ndim(t), 8);
    cr_assert_eq(remat_numel(t), 48);
    cr_assert_eq(remat_strides(t)[0], 24);
    /* views of an 8-dim tensor */
    remat_tensor *p, *r;
    int perm[] = {7, 6, 5, 4, 3, 2, 1, 0};
    RT_OK(remat_permute(&p, t, 8, perm));
    cr_assert_eq(remat_size(p, 0), 3);
    int64_t flat[] = {-1};
    RT_OK(remat_reshape(&r, p, 1, flat));
    cr_assert_eq(remat_numel(r), 48);
    remat_release(r);
    remat_release(p);
    remat_release(t);
    remat_tensor *bad = (remat_tensor *)1;
    RT_FAILS(remat_zeros(&bad, 9, sh, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, "remat_zeros");
    cr_assert_null(bad);
    RT_FAILS(remat_empty(&bad, 9, sh, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, "remat_empty");
    RT_FAILS(remat_empty(&bad, -1, sh, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, "remat_empty");
    int64_t neg[] = {2, -3};
    RT_FAILS(remat_empty(&bad, 2, neg, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, "negative");
    RT_FAILS(remat_full(&bad, 2, neg, 1, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, "remat_full");
    RT_FAILS(remat_empty(&bad, 2, NULL, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, "remat_empty");
    RT_FAILS(remat_empty(&bad, 1, sh, REMAT_F32, ((remat_device){5, 0})), REMAT_EDEVICE, NULL);
    RT_FAILS(remat_empty(NULL, 1, sh, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, "remat_empty");
    int64_t zero[] = {0, 5};
    RT_OK(remat_empty(&bad, 2, zero, REMAT_F32, REMAT_DEVICE_CPU));
    cr_assert_eq(remat_numel(bad), 0);
    remat_release(bad);
    end_check();
}

Test(tensor_basics, item_and_item_at) {
    int64_t sh[] = {2, 3};
    double v[] = {0, 1, 2, 3, 4, 5};
    remat_tensor *a = rt_tensor(2, sh, REMAT_F32, v), *t;
    double x = -1;
    RT_FAILS(remat_item(a, &x), REMAT_ESHAPE, "remat_item");
    RT_FAILS(remat_item_at(a, 6, &x), REMAT_EINVAL, "remat_item_at");
    RT_FAILS(remat_item_at(a, -1, &x), REMAT_EINVAL, "remat_item_at");
    RT_FAILS(remat_item_at(NULL, 0, &x), REMAT_EINVAL, "remat_item_at");
    RT_FAILS(remat_item_at(a, 0, NULL), REMAT_EINVAL, "remat_item_at");
    cr_assert_eq(x, -1.0, "failed calls leave the value alone");
    /* item_at indexes row-major through strides */
    RT_OK(remat_transpose(&t, a, 0, 1));
    RT_OK(remat_item_at(t, 1, &x)); /* t[0][1] = a[1][0] */
    cr_assert_eq(x, 3.0);
    remat_tensor *one;
    int64_t ones[] = {1, 1, 1};
    RT_OK(remat_full(&one, 3, ones, 9, REMAT_I64, REMAT_DEVICE_CPU));
    RT_OK(remat_item(one, &x));
    cr_assert_eq(x, 9.0);
    remat_release(one);
    remat_release(t);
    remat_release(a);
    end_check();
}

Test(tensor_basics, describe_and_names) {
    int64_t sh[] = {2, 3};
    remat_tensor *a;
    RT_OK(remat_zeros(&a, 2, sh, REMAT_F32, REMAT_DEVICE_CPU));
    char buf[128];
    cr_assert_str_eq(remat_describe(a, buf, sizeof buf), "[2, 3] f32");
    RT_OK(remat_set_name(a, "act"));
    cr_assert_str_eq(remat_name(a), "act");
    cr_assert(strstr(remat_describe(a, buf, sizeof buf), "act"), "%s", buf);
    cr_assert(strstr(buf, "[2, 3]"));
    RT_OK(remat_set_name(a, NULL));
    cr_assert_null(remat_name(a));
    cr_assert_str_eq(remat_describe(a, buf, sizeof buf), "[2, 3] f32");
    /* small buffers are truncated but terminated */
    char small[5];
    remat_describe(a, small, sizeof small);
    cr_assert_eq(strlen(small), 4u);
    cr_assert_str_eq(remat_describe(NULL, buf, sizeof buf), "NULL");
    remat_tensor *s;
    RT_OK(remat_scalar(&s, 1, REMAT_F64));
    cr_assert_str_eq(remat_describe(s, buf, sizeof buf), "[] f64");
    RT_FAILS(remat_set_name(NULL, "x"), REMAT_EINVAL, "remat_set_name");
    /* errors mention names */
    RT_OK(remat_set_name(a, "weights"));
    double x;
    RT_FAILS(remat_item(a, &x), REMAT_ESHAPE, "weights");
    remat_release(s);
    remat_release(a);
    end_check();
}

/* ---- scopes ------------------------------------------------------------------------------ */
Test(tensor_scopes, end_releases_everything) {
    remat_scope *s;
    RT_OK(remat_scope_begin(&s));
    int64_t sh[] = {4, 4};
    remat_tensor *a, *b, *c;
    RT_OK(remat_zeros(&a, 2, sh, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_transpose(&b, a, 0, 1));
    RT_OK(remat_contiguous(&c, b));
    cr_assert_eq(remat_live_tensors(), 3);
    RT_OK(remat_scope_end(s));
    end_check();
    RT_OK(remat_scope_end(NULL));
}

Test(tensor_scopes, keep_moves_one_out) {
    remat_scope *s;
    RT_OK(remat_scope_begin(&s));
    int64_t sh[] = {3};
    remat_tensor *a, *b, *kept;
    RT_OK(remat_zeros(&a, 1, sh, REMAT_F64, REMAT_DEVICE_CPU));
    RT_OK(remat_unsqueeze(&b, a, 0));
    kept = remat_scope_keep(b);
    cr_assert_eq(kept, b);
    RT_OK(remat_scope_end(s));
    /* b survives (and keeps a's storage alive through the view); a's tensor is gone */
    cr_assert_eq(remat_live_tensors(), 1);
    double x;
    RT_OK(remat_item_at(kept, 2, &x));
    cr_assert_eq(x, 0.0);
    /* keep of a tensor no scope holds: a warning, and no reference added
     * (issue 32: it was a reference the caller had to release twice) */
    remat_tensor *again = remat_scope_keep(kept);
    cr_assert_eq(again, kept);
    cr_assert(strstr(remat_last_error(), "remat_scope_keep"), "%s", remat_last_error());
    remat_release(kept);
    cr_assert_null(remat_scope_keep(NULL));
    end_check();
}

Test(tensor_scopes, nested_and_order) {
    remat_scope *outer, *inner;
    int64_t sh[] = {2};
    remat_tensor *a, *b, *kept;
    RT_OK(remat_scope_begin(&outer));
    RT_OK(remat_zeros(&a, 1, sh, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_scope_begin(&inner));
    RT_OK(remat_full(&b, 1, sh, 1, REMAT_F32, REMAT_DEVICE_CPU));
    /* ending the outer scope first is refused and closes nothing */
    RT_FAILS(remat_scope_end(outer), REMAT_ESTATE, "remat_scope_end");
    cr_assert_eq(remat_live_tensors(), 2);
    /* keep b from the inner scope: it then belongs to the caller */
    kept = remat_scope_keep(b);
    RT_OK(remat_scope_end(inner));
    cr_assert_eq(remat_live_tensors(), 2, "a belongs to the outer scope, b was kept");
    RT_OK(remat_scope_end(outer));
    cr_assert_eq(remat_live_tensors(), 1);
    remat_release(kept);
    end_check();
    /* tensors made with no scope open are the caller's */
    RT_OK(remat_zeros(&a, 1, sh, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_scope_begin(&outer));
    RT_OK(remat_scope_end(outer));
    cr_assert_eq(remat_live_tensors(), 1);
    remat_release(a);
    end_check();
}

Test(tensor_scopes, scope_end_with_graph) {
    remat_scope *s;
    RT_OK(remat_scope_begin(&s));
    int64_t sh[] = {2, 3};
    remat_tensor *x = rt_rand(2, sh, REMAT_F64, -1, 1, 1); /* caller-owned (rt_tensor) */
    remat_scope_keep(x); /* rt_rand made it inside the scope: take it out */
    RT_OK(remat_set_requires_grad(x, true));
    remat_tensor *t, *r;
    RT_OK(remat_transpose(&t, x, 0, 1));
    int64_t flat[] = {6};
    RT_OK(remat_reshape(&r, t, 1, flat));
    RT_OK(remat_scope_end(s));
    cr_assert_eq(remat_live_tensors(), 1);
    remat_release(x);
    end_check();
}

/* ---- views ----------------------------------------------------------------------------------- */
Test(tensor_views, write_through_and_shares_storage) {
    int64_t sh[] = {3, 4};
    remat_tensor *a, *t, *s, *other;
    RT_OK(remat_zeros(&a, 2, sh, REMAT_F64, REMAT_DEVICE_CPU));
    RT_OK(remat_zeros(&other, 2, sh, REMAT_F64, REMAT_DEVICE_CPU));
    RT_OK(remat_transpose(&t, a, 0, 1));
    RT_OK(remat_slice(&s, t, 0, 1, 3, 1)); /* t[1:3] = columns 1, 2 of a */
    cr_assert(remat_shares_storage(a, t));
    cr_assert(remat_shares_storage(a, s));
    cr_assert(!remat_shares_storage(a, other));
    cr_assert(!remat_shares_storage(a, NULL));
    cr_assert_eq(remat_storage_nbytes(s), remat_storage_nbytes(a));
    /* write through the base, read through the view */
    ((double *)remat_data(a))[1 * 4 + 2] = 5.0; /* a[1][2] = s[1][1] */
    double x;
    RT_OK(remat_item_at(s, 1 * 3 + 1, &x));
    cr_assert_eq(x, 5.0);
    /* write through the view (element s[0][2] = a[2][1]), read through the base */
    double *sp = remat_data(s);
    sp[0 * remat_strides(s)[0] + 2 * remat_strides(s)[1]] = -3.0;
    RT_OK(remat_item_at(a, 2 * 4 + 1, &x));
    cr_assert_eq(x, -3.0);
    /* views stay valid after the base is released */
    remat_release(a);
    remat_release(t);
    RT_OK(remat_item_at(s, 2, &x));
    cr_assert_eq(x, -3.0);
    /* a view of a detached tensor shares storage too */
    remat_tensor *d;
    RT_OK(remat_detach(&d, s));
    cr_assert(remat_shares_storage(d, s));
    remat_release(d);
    remat_release(s);
    remat_release(other);
    end_check();
}

Test(tensor_views, version_counter_is_shared) {
    int64_t sh[] = {2, 3};
    remat_tensor *a, *v, *e;
    RT_OK(remat_full(&a, 2, sh, 2.0, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_slice(&v, a, 1, 0, 2, 1));
    int64_t es[] = {4, 2, 3};
    RT_OK(remat_expand(&e, a, 3, es));
    uint64_t v0 = remat_version(a);
    cr_assert_eq(remat_version(v), v0);
    RT_OK(remat_zero_(v)); /* in place on a view */
    cr_assert_gt(remat_version(a), v0, "an in-place op on a view bumps the base's version");
    cr_assert_eq(remat_version(a), remat_version(v));
    cr_assert_eq(remat_version(e), remat_version(a));
    double x;
    RT_OK(remat_item_at(a, 1, &x));
    cr_assert_eq(x, 0.0, "zero_ on the view wrote into the base");
    RT_OK(remat_item_at(a, 2, &x));
    cr_assert_eq(x, 2.0, "outside the view untouched");
    /* a view taken later starts at the same (current) version */
    remat_tensor *late;
    RT_OK(remat_unsqueeze(&late, a, 0));
    cr_assert_eq(remat_version(late), remat_version(a));
    remat_release(late);
    remat_release(e);
    remat_release(v);
    remat_release(a);
    end_check();
}

/* A saved tensor modified in place through a view: the version check fires. */
Test(tensor_views, inplace_through_view_invalidates_saved) {
    int64_t sh[] = {2, 2};
    remat_tensor *x = rt_rand(2, sh, REMAT_F64, 0.5, 1, 3), *xx, *y, *v;
    RT_OK(remat_set_requires_grad(x, true));
    RT_OK(remat_mul_scalar(&xx, x, 2.0)); /* non-leaf */
    RT_OK(remat_exp(&y, xx));             /* saves its output y */
    bool prev = remat_no_grad_begin();
    RT_OK(remat_slice(&v, y, 0, 0, 1, 1));
    RT_OK(remat_zero_(v));
    remat_grad_mode_restore(prev);
    int64_t os[] = {2, 2};
    remat_tensor *go;
    RT_OK(remat_full(&go, 2, os, 1, REMAT_F64, REMAT_DEVICE_CPU));
    RT_FAILS(remat_backward(1, &y, &go, false, 0, NULL), REMAT_EVERSION, "version");
    remat_release(go);
    remat_release(v);
    remat_release(y);
    remat_release(xx);
    remat_release(x);
    end_check();
}

Test(tensor_views, views_in_skip_mode_allocate_nothing) {
    int64_t sh[] = {4, 6};
    bool prev = rm_set_skip_mode(true);
    remat_tensor *m;
    /* an op output in skip mode is a meta tensor */
    remat_tensor *base = rt_rand(2, sh, REMAT_F32, -1, 1, 4);
    RT_OK(remat_exp(&m, base));
    cr_assert_null(remat_data(m));
    remat_alloc_stats before, after;
    RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &before));
    remat_tensor *t, *s, *r, *e;
    RT_OK(remat_transpose(&t, m, 0, 1));
    RT_OK(remat_slice(&s, t, 0, 1, 5, 2));
    int64_t ns[] = {-1};
    RT_OK(remat_reshape(&r, s, 1, ns)); /* needs a copy: still allocates nothing */
    int64_t es[] = {3, 4, 6};
    RT_OK(remat_expand(&e, m, 3, es));
    RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &after));
    cr_assert_eq(after.n_allocs, before.n_allocs, "views/copies in skip mode must not allocate");
    cr_assert_eq(remat_numel(r), 8);
    cr_assert_null(remat_data(r));
    cr_assert_eq(remat_size(s, 0), 2);
    rm_set_skip_mode(prev);
    remat_release(e);
    remat_release(r);
    remat_release(s);
    remat_release(t);
    remat_release(m);
    remat_release(base);
    end_check();
}
