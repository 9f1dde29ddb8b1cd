/* tests/test_ops_inplace.c — in-place ops (add_, mul_, mul_scalar_, relu_,
 * zero_, copy_): values through strided targets, broadcasting, version
 * counters, leaf/no_grad rules, autograd through in-place ops (rebased
 * history, gradchecks), saved-tensor version errors, and argument errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/rt.h"

static void assert_values(const remat_tensor *t, const double *want, int64_t n, double tol,
                          const char *what) {
    cr_assert_eq(remat_numel(t), n, "%s: numel", what);
    double *v = malloc(sizeof(double) * (size_t)n);
    RT_OK(remat_copy_to_buffer(t, REMAT_F64, v, n));
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(v[i] - want[i]) <= tol, "%s[%lld] = %g, want %g", what, (long long)i, v[i],
                  want[i]);
    free(v);
}

/* ---- values --------------------------------------------------------------------------- */
Test(ops_inplace, add_with_alpha_and_broadcast) {
    int64_t sa[] = {2, 3}, sb[] = {3};
    double av[] = {1, 2, 3, 4, 5, 6}, bv[] = {10, 20, 30};
    remat_dtype dts[] = {REMAT_F32, REMAT_F64};
    for (int d = 0; d < 2; d++) {
        remat_tensor *a = rt_tensor(2, sa, dts[d], av), *b = rt_tensor(1, sb, dts[d], bv);
        uint64_t v0 = remat_version(a);
        RT_OK(remat_add_(a, b, -0.5));
        double want[] = {-4, -8, -12, -1, -5, -9};
        assert_values(a, want, 6, 1e-6, "add_");
        cr_assert_eq(remat_ndim(a), 2, "in-place op must keep a's shape");
        cr_assert_eq(remat_version(a), v0 + 1);
        cr_assert_eq(remat_version(b), 0, "b must not be bumped");
        remat_release(a);
        remat_release(b);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_inplace, every_op_values_and_version) {
    int64_t s[] = {2, 2};
    double av[] = {-1, 2, -3, 4}, bv[] = {2, 3, 4, 5};
    remat_tensor *a = rt_tensor(2, s, REMAT_F64, av), *b = rt_tensor(2, s, REMAT_F64, bv);
    uint64_t v = remat_version(a);
    RT_OK(remat_mul_(a, b));
    double w1[] = {-2, 6, -12, 20};
    assert_values(a, w1, 4, 0, "mul_");
    cr_assert_eq(remat_version(a), ++v);
    RT_OK(remat_mul_scalar_(a, 0.5));
    double w2[] = {-1, 3, -6, 10};
    assert_values(a, w2, 4, 0, "mul_scalar_");
    cr_assert_eq(remat_version(a), ++v);
    RT_OK(remat_relu_(a));
    double w3[] = {0, 3, 0, 10};
    assert_values(a, w3, 4, 0, "relu_");
    cr_assert_eq(remat_version(a), ++v);
    RT_OK(remat_copy_(a, b));
    assert_values(a, bv, 4, 0, "copy_");
    cr_assert_eq(remat_version(a), ++v);
    RT_OK(remat_zero_(a));
    double w4[] = {0, 0, 0, 0};
    assert_values(a, w4, 4, 0, "zero_");
    cr_assert_eq(remat_version(a), ++v);
    RT_OK(remat_add_(a, b, 2));
    cr_assert_eq(remat_version(a), ++v);
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_inplace, copy_broadcasts_and_converts) {
    int64_t s[] = {2, 3}, sr[] = {3};
    double rv[] = {1.5, -2.25, 3};
    remat_tensor *a = rt_rand(2, s, REMAT_F32, 0, 1, 1), *r64 = rt_tensor(1, sr, REMAT_F64, rv);
    RT_OK(remat_copy_(a, r64));
    double want[] = {1.5, -2.25, 3, 1.5, -2.25, 3};
    assert_values(a, want, 6, 0, "copy_ f64 -> f32 broadcast");
    cr_assert_eq(remat_tensor_dtype(a), REMAT_F32);
    /* i64 source and i64 target */
    remat_tensor *i3, *i6;
    RT_OK(remat_arange(&i3, 3));
    RT_OK(remat_copy_(a, i3));
    double w2[] = {0, 1, 2, 0, 1, 2};
    assert_values(a, w2, 6, 0, "copy_ i64 -> f32");
    RT_OK(remat_zeros(&i6, 2, s, REMAT_I64, REMAT_DEVICE_CPU));
    RT_OK(remat_copy_(i6, r64));
    double w3[] = {1, -2, 3, 1, -2, 3};
    assert_values(i6, w3, 6, 0, "copy_ f64 -> i64 truncates");
    remat_tensor *i6t;
    RT_OK(remat_transpose(&i6t, i6, 0, 1));
    RT_OK(remat_zero_(i6t)); /* strided i64 */
    double w4[] = {0, 0, 0, 0, 0, 0};
    assert_values(i6, w4, 6, 0, "zero_ i64");
    remat_release(i6t);
    remat_release(a);
    remat_release(r64);
    remat_release(i3);
    remat_release(i6);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Targets that are non-contiguous views write through to the base. */
Test(ops_inplace, strided_targets_write_through) {
    int64_t s[] = {3, 2}, sr[] = {3};
    double bv[] = {1, 2, 3, 4, 5, 6}, rv[] = {10, 20, 30};
    remat_tensor *base = rt_tensor(2, s, REMAT_F64, bv), *t, *r = rt_tensor(1, sr, REMAT_F64, rv);
    RT_OK(remat_transpose(&t, base, 0, 1)); /* (2, 3): [[1,3,5],[2,4,6]] */
    uint64_t v0 = remat_version(base);
    RT_OK(remat_add_(t, r, 1));
    double w1[] = {11, 12, 23, 24, 35, 36};
    assert_values(base, w1, 6, 0, "add_ through a transpose");
    cr_assert_eq(remat_version(base), v0 + 1, "the version counter is shared with the base");
    RT_OK(remat_mul_scalar_(t, 2));
    RT_OK(remat_mul_(t, r));
    /* t[i][j] = base[j][i]; r broadcast over rows of t → scales base row j by r[j] */
    double w2[6];
    for (int i = 0; i < 6; i++) w2[i] = w1[i] * 2 * rv[i / 2];
    assert_values(base, w2, 6, 1e-9, "mul_ through a transpose");
    /* a slice: every other column of a (2, 4) tensor */
    int64_t s24[] = {2, 4};
    remat_tensor *m = rt_rand(2, s24, REMAT_F64, -1, 1, 3), *col;
    double before[8], after[8];
    RT_OK(remat_copy_to_buffer(m, REMAT_F64, before, 8));
    RT_OK(remat_slice(&col, m, 1, 1, 4, 2));
    RT_OK(remat_relu_(col));
    RT_OK(remat_copy_to_buffer(m, REMAT_F64, after, 8));
    for (int i = 0; i < 8; i++)
        cr_assert_float_eq(after[i], i % 2 == 1 ? fmax(before[i], 0) : before[i], 0, "elem %d", i);
    RT_OK(remat_zero_(col));
    RT_OK(remat_copy_to_buffer(m, REMAT_F64, after, 8));
    for (int i = 0; i < 8; i++)
        cr_assert_float_eq(after[i], i % 2 == 1 ? 0 : before[i], 0, "elem %d", i);
    remat_release(col);
    remat_release(m);
    remat_release(t);
    remat_release(base);
    remat_release(r);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_inplace, zero_dim_target) {
    remat_tensor *a, *b, *v1;
    RT_OK(remat_scalar(&a, 2.0, REMAT_F64));
    RT_OK(remat_scalar(&b, 3.0, REMAT_F64));
    RT_OK(remat_add_(a, b, 2));
    RT_OK(remat_mul_(a, b));
    double v;
    RT_OK(remat_item(a, &v));
    cr_assert_float_eq(v, 24, 0);
    int64_t s1[] = {1};
    RT_OK(remat_zeros(&v1, 1, s1, REMAT_F64, REMAT_DEVICE_CPU));
    RT_FAILS(remat_add_(a, v1, 1), REMAT_ESHAPE, "remat_add_"); /* would make a 1-dim */
    RT_OK(remat_add_(v1, a, 1));                                /* 0-dim broadcasts */
    RT_OK(remat_item(v1, &v));
    cr_assert_float_eq(v, 24, 0);
    remat_release(a);
    remat_release(b);
    remat_release(v1);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* In-place ops on strided targets inside an open scope (no temporaries may
 * leak into or be double-released by the scope). */
Test(ops_inplace, inside_scope) {
    int64_t s[] = {3, 2};
    remat_tensor *base = rt_rand(2, s, REMAT_F64, -1, 1, 1);
    remat_scope *sc;
    RT_OK(remat_scope_begin(&sc));
    remat_tensor *t;
    RT_OK(remat_transpose(&t, base, 0, 1));
    RT_OK(remat_zero_(t));
    RT_OK(remat_add_(t, t, 1));
    RT_OK(remat_mul_(t, t));
    RT_OK(remat_scope_end(sc));
    double z[] = {0, 0, 0, 0, 0, 0};
    assert_values(base, z, 6, 0, "zeroed");
    remat_release(base);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Operands sharing memory with the target: exact alias and overlapping view. */
Test(ops_inplace, aliasing_operands) {
    int64_t s[] = {3, 3};
    double v[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    remat_tensor *a = rt_tensor(2, s, REMAT_F64, v), *at;
    RT_OK(remat_add_(a, a, 1));
    double w1[9];
    for (int i = 0; i < 9; i++) w1[i] = 2 * v[i];
    assert_values(a, w1, 9, 0, "a += a");
    /* a += a^T must read the original values of a, not half-updated ones */
    RT_OK(remat_transpose(&at, a, 0, 1));
    RT_OK(remat_add_(a, at, 1));
    double w2[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) w2[i * 3 + j] = w1[i * 3 + j] + w1[j * 3 + i];
    assert_values(a, w2, 9, 0, "a += a^T");
    remat_release(at);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Big tensors (several OpenMP threads) on a strided target. */
Test(ops_inplace, large_strided_add_) {
    int64_t s[] = {300, 200}, sr[] = {300};
    remat_tensor *base = rt_rand(2, s, REMAT_F32, -1, 1, 1), *t,
                 *r = rt_rand(1, sr, REMAT_F32, -1, 1, 2);
    float *before = malloc(sizeof(float) * 60000), *after = malloc(sizeof(float) * 60000);
    float rv[300];
    RT_OK(remat_copy_to_buffer(base, REMAT_F32, before, 60000));
    RT_OK(remat_copy_to_buffer(r, REMAT_F32, rv, 300));
    RT_OK(remat_transpose(&t, base, 0, 1)); /* (200, 300) */
    RT_OK(remat_add_(t, r, 3));
    RT_OK(remat_copy_to_buffer(base, REMAT_F32, after, 60000));
    for (int i = 0; i < 300; i++)
        for (int j = 0; j < 200; j++)
            cr_assert_float_eq(after[i * 200 + j], before[i * 200 + j] + 3.0f * rv[i], 1e-6);
    free(before);
    free(after);
    remat_release(t);
    remat_release(base);
    remat_release(r);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- leaf / grad-mode rules ------------------------------------------------------------------ */
Test(ops_inplace, leaf_requiring_grad_rejected_under_grad_mode) {
    int64_t s[] = {2};
    double wv[] = {1, 2}, gv[] = {0.5, 0.5};
    remat_tensor *w = rt_leaf(rt_tensor(1, s, REMAT_F64, wv)), *g = rt_tensor(1, s, REMAT_F64, gv);
    uint64_t v0 = remat_version(w);
    RT_FAILS(remat_add_(w, g, -0.1), REMAT_ESTATE, "remat_add_");
    RT_FAILS(remat_mul_(w, g), REMAT_ESTATE, "remat_mul_");
    RT_FAILS(remat_mul_scalar_(w, 2), REMAT_ESTATE, "remat_mul_scalar_");
    RT_FAILS(remat_relu_(w), REMAT_ESTATE, "remat_relu_");
    RT_FAILS(remat_zero_(w), REMAT_ESTATE, "remat_zero_");
    RT_FAILS(remat_copy_(w, g), REMAT_ESTATE, "remat_copy_");
    cr_assert_eq(remat_version(w), v0, "a failed in-place op must not bump the version");
    assert_values(w, wv, 2, 0, "unchanged");
    /* the SGD update under no_grad */
    bool prev = remat_no_grad_begin();
    RT_OK(remat_add_(w, g, -0.1));
    remat_grad_mode_restore(prev);
    double want[] = {0.95, 1.95};
    assert_values(w, want, 2, 1e-12, "sgd step");
    cr_assert(remat_is_leaf(w) && remat_requires_grad(w), "w stays a leaf requiring grad");
    cr_assert_null(remat_grad_fn(w));
    cr_assert_eq(remat_version(w), v0 + 1);
    remat_release(w);
    remat_release(g);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Training-loop shape: backward twice accumulates .grad through remat_add_,
 * then an SGD step and zeroing the grad. */
Test(ops_inplace, grad_accumulation_and_sgd_step) {
    int64_t s[] = {3};
    double wv[] = {1, 2, 3};
    remat_tensor *w = rt_leaf(rt_tensor(1, s, REMAT_F64, wv));
    for (int it = 0; it < 2; it++) {
        remat_tensor *y, *l;
        RT_OK(remat_mul(&y, w, w));
        RT_OK(remat_sum_all(&l, y));
        RT_OK(remat_backward_scalar(l));
        remat_release(y);
        remat_release(l);
    }
    double g2[] = {4, 8, 12};
    assert_values(remat_tensor_grad(w), g2, 3, 1e-12, "accumulated grad");
    bool prev = remat_no_grad_begin();
    RT_OK(remat_add_(w, remat_tensor_grad(w), -0.25));
    RT_OK(remat_zero_(remat_tensor_grad(w)));
    remat_grad_mode_restore(prev);
    double w1[] = {0, 0, 0};
    assert_values(w, w1, 3, 1e-12, "after step");
    assert_values(remat_tensor_grad(w), w1, 3, 0, "zeroed grad");
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- autograd through in-place ops --------------------------------------------------------- */
Test(ops_inplace, add_rebases_history) {
    int64_t s[] = {2, 3}, sr[] = {3};
    remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F64, -1, 1, 1)),
                 *w = rt_leaf(rt_rand(1, sr, REMAT_F64, -1, 1, 2));
    remat_tensor *y, *l;
    RT_OK(remat_mul_scalar(&y, x, 2));
    remat_node *old = remat_grad_fn(y);
    RT_OK(remat_add_(y, w, 3));
    cr_assert_neq(remat_grad_fn(y), old, "add_ must rebase y's history");
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "AddBackward");
    cr_assert_eq(remat_node_next(remat_grad_fn(y), 0), old, "input 0 is y's old history");
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    double gx[] = {2, 2, 2, 2, 2, 2}, gw[] = {6, 6, 6};
    assert_values(remat_tensor_grad(x), gx, 6, 1e-12, "dx");
    assert_values(remat_tensor_grad(w), gw, 3, 1e-12, "dw = alpha * rows");
    remat_release(l);
    remat_release(y);
    remat_release(x);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* A non-grad tensor modified in place by one that requires grad joins the graph. */
Test(ops_inplace, non_grad_target_gets_history) {
    int64_t s[] = {2};
    remat_tensor *buf, *w = rt_leaf(rt_rand(1, s, REMAT_F64, -1, 1, 1)), *l;
    RT_OK(remat_zeros(&buf, 1, s, REMAT_F64, REMAT_DEVICE_CPU));
    RT_OK(remat_copy_(buf, w));
    cr_assert(remat_requires_grad(buf));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(buf)), "CopyBackward");
    RT_OK(remat_sum_all(&l, buf));
    RT_OK(remat_backward_scalar(l));
    double one[] = {1, 1};
    assert_values(remat_tensor_grad(w), one, 2, 0, "copy_ passes the gradient to src");
    remat_release(l);
    remat_release(buf);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* f(inputs) = (x * 1) <op>_ ...: gradchecks of each in-place op. */
typedef enum { G_ADD, G_MUL, G_MUL_SELF, G_MULS, G_RELU, G_ZERO, G_COPY, G_COPY_F32 } gkind;
static int call_inplace(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    gkind k = *(const gkind *)ud;
    remat_tensor *t = NULL;
    int rc = remat_mul_scalar(&t, in[0], 1.0); /* a non-leaf target */
    if (rc) return rc;
    switch (k) {
    case G_ADD: rc = remat_add_(t, in[1], -1.5); break;
    case G_MUL: rc = remat_mul_(t, in[1]); break;
    case G_MUL_SELF: rc = remat_mul_(t, t); break;
    case G_MULS: rc = remat_mul_scalar_(t, 3); break;
    case G_RELU: rc = remat_relu_(t); break;
    case G_ZERO:
        rc = remat_zero_(t);
        if (!rc) rc = remat_add_(t, in[0], 1); /* keep the output connected */
        break;
    case G_COPY: rc = remat_copy_(t, in[1]); break;
    case G_COPY_F32: {
        remat_tensor *s32 = NULL;
        rc = remat_to_dtype(&s32, in[1], REMAT_F32);
        if (!rc) rc = remat_copy_(t, s32);
        remat_release(s32);
        break;
    }
    }
    if (rc) {
        remat_release(t);
        return rc;
    }
    *out = t;
    return REMAT_OK;
}

Test(ops_inplace, gradchecks) {
    int64_t s[] = {2, 3}, sr[] = {3}, sc[] = {2, 1};
    gkind kinds[] = {G_ADD, G_MUL, G_MUL_SELF, G_MULS, G_RELU, G_ZERO, G_COPY};
    const int64_t *bshapes[] = {s, sr, sc};
    int bnd[] = {2, 1, 2};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int bs = 0; bs < 3; bs++) {
            remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F64, -1, 1, 1 + (unsigned)k));
            remat_tensor *b =
                rt_leaf(rt_rand(bnd[bs], bshapes[bs], REMAT_F64, -1, 1, 50 + (unsigned)bs));
            remat_tensor *in[2] = {x, b};
            char msg[2048];
            bool ok =
                rt_gradcheck(call_inplace, &kinds[k], 2, in, 1e-6, 1e-5, 1e-4, msg, sizeof msg);
            cr_assert(ok, "in-place kind %zu, b shape %d: %s", k, bs, msg);
            /* only one side requiring grad */
            RT_OK(remat_set_requires_grad(b, false));
            ok = rt_gradcheck(call_inplace, &kinds[k], 2, in, 1e-6, 1e-5, 1e-4, msg, sizeof msg);
            cr_assert(ok, "in-place kind %zu (b no grad): %s", k, msg);
            remat_release(x);
            remat_release(b);
        }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* copy_ from an f32 source: the source's gradient comes back in f32. */
Test(ops_inplace, copy_grad_converted_to_src_dtype) {
    int64_t s[] = {2, 2};
    remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F64, -1, 1, 1)),
                 *src = rt_leaf(rt_rand(2, s, REMAT_F32, -1, 1, 2));
    remat_tensor *t, *l;
    RT_OK(remat_mul_scalar(&t, x, 1));
    RT_OK(remat_copy_(t, src));
    RT_OK(remat_sum_all(&l, t));
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(remat_tensor_dtype(remat_tensor_grad(src)), REMAT_F32);
    double one[] = {1, 1, 1, 1}, zero[] = {0, 0, 0, 0};
    assert_values(remat_tensor_grad(src), one, 4, 0, "dsrc");
    assert_values(remat_tensor_grad(x), zero, 4, 0, "dx (overwritten)");
    remat_release(l);
    remat_release(t);
    remat_release(x);
    remat_release(src);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_inplace, view_requiring_grad_is_unsupported) {
    int64_t s[] = {2, 3}, sr[] = {3};
    remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F64, -1, 1, 1)), *h, *v;
    remat_tensor *b = rt_rand(1, sr, REMAT_F64, -1, 1, 2);
    RT_OK(remat_mul_scalar(&h, x, 2));
    RT_OK(remat_transpose(&v, h, 0, 1));
    uint64_t v0 = remat_version(h);
    RT_FAILS(remat_relu_(v), REMAT_EUNSUPPORTED, "view");
    RT_FAILS(remat_mul_scalar_(v, 2), REMAT_EUNSUPPORTED, "out-of-place");
    cr_assert_eq(remat_version(h), v0, "nothing modified");
    /* under no_grad it is plain data modification */
    bool prev = remat_no_grad_begin();
    RT_OK(remat_mul_scalar_(v, 1));
    remat_grad_mode_restore(prev);
    remat_release(v);
    remat_release(h);
    remat_release(x);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_inplace, saved_tensor_modified_is_detected) {
    int64_t s[] = {2, 2};
    remat_tensor *x = rt_leaf(rt_rand(2, s, REMAT_F64, -1, 1, 1)),
                 *w = rt_leaf(rt_rand(2, s, REMAT_F64, -1, 1, 2));
    remat_tensor *one, *h, *y, *l;
    RT_OK(remat_scalar(&one, 1.0, REMAT_F64));
    RT_OK(remat_mul_scalar(&h, x, 1)); /* non-leaf */
    RT_OK(remat_mul(&y, h, w));        /* saves h for dw */
    RT_OK(remat_add_(h, one, 1));
    RT_OK(remat_sum_all(&l, y));
    RT_FAILS(remat_backward_scalar(l), REMAT_EVERSION, "modified by an in-place operation");
    remat_release(l);
    remat_release(y);
    remat_release(h);
    remat_release(one);
    remat_release(x);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* relu_ saves its result; modifying it afterwards is caught too. */
Test(ops_inplace, relu_result_modified_is_detected) {
    int64_t s[] = {3};
    remat_tensor *x = rt_leaf(rt_rand(1, s, REMAT_F64, -1, 1, 1)), *h, *l;
    RT_OK(remat_mul_scalar(&h, x, 1));
    RT_OK(remat_relu_(h));
    RT_OK(remat_mul_scalar_(h, 2));
    RT_OK(remat_sum_all(&l, h));
    RT_FAILS(remat_backward_scalar(l), REMAT_EVERSION, "modified by an in-place operation");
    remat_release(l);
    remat_release(h);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- errors ---------------------------------------------------------------------------------- */
Test(ops_inplace, errors) {
    int64_t s[] = {2, 3}, s4[] = {4}, s23x[] = {2, 2, 3};
    remat_tensor *a = rt_rand(2, s, REMAT_F64, -1, 1, 1), *b4 = rt_rand(1, s4, REMAT_F64, 0, 1, 2);
    remat_tensor *big = rt_rand(3, s23x, REMAT_F64, 0, 1, 3),
                 *f = rt_rand(2, s, REMAT_F32, 0, 1, 4);
    remat_tensor *i;
    RT_OK(remat_arange(&i, 3));
    uint64_t v0 = remat_version(a);
    RT_FAILS(remat_add_(NULL, a, 1), REMAT_EINVAL, "remat_add_");
    RT_FAILS(remat_add_(a, NULL, 1), REMAT_EINVAL, "remat_add_");
    RT_FAILS(remat_mul_(NULL, a), REMAT_EINVAL, "remat_mul_");
    RT_FAILS(remat_mul_(a, NULL), REMAT_EINVAL, "remat_mul_");
    RT_FAILS(remat_mul_scalar_(NULL, 1), REMAT_EINVAL, "remat_mul_scalar_");
    RT_FAILS(remat_relu_(NULL), REMAT_EINVAL, "remat_relu_");
    RT_FAILS(remat_zero_(NULL), REMAT_EINVAL, "remat_zero_");
    RT_FAILS(remat_copy_(NULL, a), REMAT_EINVAL, "remat_copy_");
    RT_FAILS(remat_copy_(a, NULL), REMAT_EINVAL, "remat_copy_");
    RT_FAILS(remat_add_(a, b4, 1), REMAT_ESHAPE, "remat_add_");
    /* b may not grow a */
    RT_FAILS(remat_add_(a, big, 1), REMAT_ESHAPE, "cannot change");
    RT_FAILS(remat_mul_(a, big), REMAT_ESHAPE, "remat_mul_");
    RT_FAILS(remat_copy_(a, big), REMAT_ESHAPE, "remat_copy_");
    RT_FAILS(remat_add_(a, f, 1), REMAT_EDTYPE, "remat_add_");
    RT_FAILS(remat_mul_(a, f), REMAT_EDTYPE, "remat_mul_");
    RT_FAILS(remat_relu_(i), REMAT_EDTYPE, "remat_relu_");
    RT_FAILS(remat_mul_scalar_(i, 2), REMAT_EDTYPE, "remat_mul_scalar_");
    cr_assert_eq(remat_version(a), v0, "failed calls leave a alone");
    /* device mismatch */
    int td = rt_testdev_register();
    remat_tensor *d;
    RT_OK(remat_zeros(&d, 2, s, REMAT_F64, (remat_device){td, 0}));
    RT_FAILS(remat_add_(a, d, 1), REMAT_EDEVICE, "remat_add_");
    RT_FAILS(remat_copy_(a, d), REMAT_EDEVICE, "remat_copy_");
    RT_OK(remat_add_(d, d, 1)); /* same (host-addressable) device */
    /* an expanded view cannot be written in place */
    int64_t s1[] = {2, 1};
    remat_tensor *col = rt_rand(2, s1, REMAT_F64, 0, 1, 5), *ex;
    RT_OK(remat_expand(&ex, col, 2, s));
    RT_FAILS(remat_add_(ex, a, 1), REMAT_EUNSUPPORTED, "remat_add_");
    remat_tensor *list[] = {a, b4, big, f, i, d, col, ex};
    for (size_t k = 0; k < 8; k++) remat_release(list[k]);
    cr_assert_eq(remat_live_tensors(), 0);
}
