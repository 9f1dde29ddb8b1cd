/* tests/test_ops_binary.c — broadcasting binary ops (add, sub, mul, div, pow)
 * and selection (masked_fill, where): forward values, f64 gradchecks with
 * broadcasting, 0-dim and strided inputs, f32 vs f64, the parallel paths,
 * and argument errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/rt.h"

typedef int (*binfn)(remat_tensor **, remat_tensor *, remat_tensor *);
typedef struct binop {
    const char *name;
    binfn f;
    double (*ref)(double, double);
} binop;

static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }
static double r_pow(double a, double b) { return pow(a, b); }

static const binop k_ops[] = {
    {"remat_add", remat_add, r_add}, {"remat_sub", remat_sub, r_sub},
    {"remat_mul", remat_mul, r_mul}, {"remat_div", remat_div, r_div},
    {"remat_pow", remat_pow, r_pow},
};
#define N_OPS 5

static int call_binop(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    return ((const binop *)ud)->f(out, in[0], in[1]);
}

/* Row-major values of t as doubles (malloc'ed). */
/* Checks out == ref(a, b) elementwise with NumPy broadcasting, computed
 * independently from flat indices. */
static void check_broadcast_values(const binop *op, remat_tensor *a, remat_tensor *b,
                                   remat_tensor *out, double tol) {
    int nd = remat_ndim(out);
    const int64_t *so = remat_shape(out);
    double *va = rt_values(a), *vb = rt_values(b), *vo = rt_values(out);
    int64_t n = remat_numel(out);
    for (int64_t i = 0; i < n; i++) {
        int64_t idx[REMAT_MAX_DIMS], r = i;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = r % so[d];
            r /= so[d];
        }
        int64_t ia = 0, ib = 0;
        for (int d = 0; d < remat_ndim(a); d++) {
            int64_t sz = remat_size(a, d);
            ia = ia * sz + (sz == 1 ? 0 : idx[nd - remat_ndim(a) + d]);
        }
        for (int d = 0; d < remat_ndim(b); d++) {
            int64_t sz = remat_size(b, d);
            ib = ib * sz + (sz == 1 ? 0 : idx[nd - remat_ndim(b) + d]);
        }
        double e = op->ref(va[ia], vb[ib]);
        cr_assert(fabs(vo[i] - e) <= tol * (1 + fabs(e)), "%s element %lld: %g vs expected %g",
                  op->name, (long long)i, vo[i], e);
    }
    free(va);
    free(vb);
    free(vo);
}

/* ---- forward values --------------------------------------------------------------- */
Test(ops_binary, hand_computed_values) {
    int64_t sh[] = {2, 3};
    double av[] = {1, 2, 3, 4, 5, 6}, bv[] = {2, 4, 0.5, -1, 2, 3};
    remat_tensor *a = rt_tensor(2, sh, REMAT_F64, av), *b = rt_tensor(2, sh, REMAT_F64, bv);
    const double want[N_OPS][6] = {
        {3, 6, 3.5, 3, 7, 9},
        {-1, -2, 2.5, 5, 3, 3},
        {2, 8, 1.5, -4, 10, 18},
        {0.5, 0.5, 6, -4, 2.5, 2},
        {1, 16, sqrt(3.0), 0.25, 25, 216},
    };
    for (int k = 0; k < N_OPS; k++) {
        remat_tensor *y;
        RT_OK(k_ops[k].f(&y, a, b));
        cr_assert_eq(remat_ndim(y), 2);
        cr_assert(!remat_requires_grad(y));
        for (int i = 0; i < 6; i++) {
            double v;
            RT_OK(remat_item_at(y, i, &v));
            cr_assert_float_eq(v, want[k][i], 1e-12, "%s[%d] = %g, want %g", k_ops[k].name, i, v,
                               want[k][i]);
        }
        remat_release(y);
    }
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_binary, broadcast_shapes_and_values) {
    struct {
        int nda;
        int64_t sa[4];
        int ndb;
        int64_t sb[4];
        int ndo;
        int64_t so[4];
    } cases[] = {
        {2, {2, 3}, 1, {3}, 2, {2, 3}},
        {1, {3}, 2, {2, 3}, 2, {2, 3}},
        {3, {2, 1, 4}, 2, {3, 1}, 3, {2, 3, 4}},
        {2, {3, 1}, 3, {2, 1, 4}, 3, {2, 3, 4}},
        {0, {0}, 2, {2, 3}, 2, {2, 3}},
        {2, {2, 3}, 0, {0}, 2, {2, 3}},
        {0, {0}, 0, {0}, 0, {0}},
        {2, {4, 1}, 2, {1, 5}, 2, {4, 5}},
        {2, {0, 3}, 1, {3}, 2, {0, 3}},
        {4, {2, 1, 3, 1}, 3, {4, 1, 5}, 4, {2, 4, 3, 5}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        remat_tensor *a = rt_rand(cases[c].nda, cases[c].sa, REMAT_F64, 0.5, 2, 10 + (unsigned)c);
        remat_tensor *b = rt_rand(cases[c].ndb, cases[c].sb, REMAT_F64, 0.5, 2, 20 + (unsigned)c);
        for (int k = 0; k < N_OPS; k++) {
            remat_tensor *y;
            RT_OK(k_ops[k].f(&y, a, b));
            cr_assert_eq(remat_ndim(y), cases[c].ndo, "case %zu", c);
            for (int d = 0; d < cases[c].ndo; d++)
                cr_assert_eq(remat_size(y, d), cases[c].so[d], "case %zu dim %d", c, d);
            check_broadcast_values(&k_ops[k], a, b, y, 1e-12);
            remat_release(y);
        }
        remat_release(a);
        remat_release(b);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Transposed, sliced and expanded inputs go through the strided paths. */
Test(ops_binary, strided_inputs) {
    int64_t sa[] = {3, 2}, sb[] = {2, 6};
    remat_tensor *base_a = rt_rand(2, sa, REMAT_F64, 0.5, 2, 1);
    remat_tensor *base_b = rt_rand(2, sb, REMAT_F64, 0.5, 2, 2);
    remat_tensor *at, *bs, *ac, *bc;
    RT_OK(remat_transpose(&at, base_a, 0, 1));   /* (2, 3), strides (1, 2) */
    RT_OK(remat_slice(&bs, base_b, 1, 1, 6, 2)); /* (2, 3), strides (6, 2) */
    cr_assert(!remat_is_contiguous(at) && !remat_is_contiguous(bs));
    RT_OK(remat_contiguous(&ac, at));
    RT_OK(remat_contiguous(&bc, bs));
    for (int k = 0; k < N_OPS; k++) {
        remat_tensor *y1, *y2;
        RT_OK(k_ops[k].f(&y1, at, bs));
        RT_OK(k_ops[k].f(&y2, ac, bc));
        cr_assert(rt_bitwise_equal(y1, y2), "%s strided vs contiguous", k_ops[k].name);
        remat_release(y1);
        remat_release(y2);
    }
    /* an expanded (stride 0) operand */
    int64_t s1[] = {2, 1}, se[] = {2, 3};
    remat_tensor *col = rt_rand(2, s1, REMAT_F64, 0.5, 2, 3), *ex, *y1, *y2;
    RT_OK(remat_expand(&ex, col, 2, se));
    RT_OK(remat_mul(&y1, at, ex));
    RT_OK(remat_mul(&y2, at, col));
    cr_assert(rt_bitwise_equal(y1, y2));
    remat_release_p(&y1);
    remat_release_p(&y2);
    remat_tensor *list[] = {base_a, base_b, at, bs, ac, bc, col, ex};
    for (size_t i = 0; i < 8; i++) remat_release(list[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Big enough to run on several OpenMP threads, in every path: flat,
 * bias-style row broadcast, scalar, strided and column broadcast. */
Test(ops_binary, large_tensors_all_paths) {
    int64_t sn[] = {300, 257}, sr[] = {257}, sc[] = {300, 1}, st[] = {257, 300};
    remat_tensor *a = rt_rand(2, sn, REMAT_F64, 0.5, 2, 1),
                 *b = rt_rand(2, sn, REMAT_F64, 0.5, 2, 2);
    remat_tensor *row = rt_rand(1, sr, REMAT_F64, 0.5, 2, 3),
                 *colv = rt_rand(2, sc, REMAT_F64, 0.5, 2, 4);
    remat_tensor *s = rt_rand(0, NULL, REMAT_F64, 0.5, 2, 5),
                 *bt = rt_rand(2, st, REMAT_F64, 0.5, 2, 6);
    remat_tensor *tr;
    RT_OK(remat_transpose(&tr, bt, 0, 1));
    remat_tensor *others[] = {b, row, colv, s, tr};
    for (int k = 0; k < N_OPS; k++)
        for (int o = 0; o < 5; o++) {
            remat_tensor *y;
            RT_OK(k_ops[k].f(&y, a, others[o]));
            check_broadcast_values(&k_ops[k], a, others[o], y, 1e-12);
            remat_release(y);
            RT_OK(k_ops[k].f(&y, others[o], a));
            check_broadcast_values(&k_ops[k], others[o], a, y, 1e-12);
            remat_release(y);
        }
    remat_tensor *list[] = {a, b, row, colv, s, bt, tr};
    for (size_t i = 0; i < 7; i++) remat_release(list[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_binary, f32_matches_f64) {
    int64_t sa[] = {4, 1, 37}, sb[] = {5, 37};
    remat_tensor *a64 = rt_rand(3, sa, REMAT_F64, 0.5, 2, 1),
                 *b64 = rt_rand(2, sb, REMAT_F64, -2, 2, 2);
    remat_tensor *a32, *b32;
    RT_OK(remat_to_dtype(&a32, a64, REMAT_F32));
    RT_OK(remat_to_dtype(&b32, b64, REMAT_F32));
    for (int k = 0; k < N_OPS; k++) {
        remat_tensor *y64, *y32;
        RT_OK(k_ops[k].f(&y64, a64, b64));
        RT_OK(k_ops[k].f(&y32, a32, b32));
        cr_assert_eq(remat_tensor_dtype(y32), REMAT_F32);
        rt_assert_close(y32, y64, 1e-5, 1e-5, k_ops[k].name);
        remat_release(y64);
        remat_release(y32);
    }
    remat_release(a64);
    remat_release(b64);
    remat_release(a32);
    remat_release(b32);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- gradients -------------------------------------------------------------------- */
static void gradcheck_shapes(int nda, const int64_t *sa, int ndb, const int64_t *sb) {
    for (int k = 0; k < N_OPS; k++) {
        /* positive bases for pow and divisors away from 0 */
        remat_tensor *a = rt_leaf(rt_rand(nda, sa, REMAT_F64, 0.5, 2, 7));
        remat_tensor *b = rt_leaf(rt_rand(ndb, sb, REMAT_F64, 0.5, 2, 8));
        remat_tensor *in[2] = {a, b};
        RT_GRADCHECK(call_binop, (void *)&k_ops[k], 2, in);
        /* only one input requiring grad */
        RT_OK(remat_set_requires_grad(b, false));
        RT_GRADCHECK(call_binop, (void *)&k_ops[k], 2, in);
        RT_OK(remat_set_requires_grad(b, true));
        RT_OK(remat_set_requires_grad(a, false));
        RT_GRADCHECK(call_binop, (void *)&k_ops[k], 2, in);
        remat_release(a);
        remat_release(b);
    }
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_binary, gradcheck_same_shape) {
    int64_t s[] = {2, 3};
    gradcheck_shapes(2, s, 2, s);
}
Test(ops_binary, gradcheck_row_broadcast) {
    int64_t sa[] = {2, 3}, sb[] = {3};
    gradcheck_shapes(2, sa, 1, sb);
    gradcheck_shapes(1, sb, 2, sa);
}
Test(ops_binary, gradcheck_both_broadcast) {
    int64_t sa[] = {2, 1, 4}, sb[] = {3, 1};
    gradcheck_shapes(3, sa, 2, sb);
    gradcheck_shapes(2, sb, 3, sa);
}
Test(ops_binary, gradcheck_zero_dim) {
    int64_t sa[] = {2, 3};
    gradcheck_shapes(2, sa, 0, NULL);
    gradcheck_shapes(0, NULL, 2, sa);
    gradcheck_shapes(0, NULL, 0, NULL);
}

/* Gradients through non-contiguous views of leaves. */
static int call_binop_on_views(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    remat_tensor *at = NULL, *bs = NULL;
    int rc = remat_transpose(&at, in[0], 0, 1);
    if (!rc) rc = remat_slice(&bs, in[1], 1, 0, 6, 2);
    if (!rc) rc = ((const binop *)ud)->f(out, at, bs);
    remat_release(at);
    remat_release(bs);
    return rc;
}
Test(ops_binary, gradcheck_strided_views) {
    int64_t sa[] = {3, 2}, sb[] = {2, 6};
    for (int k = 0; k < N_OPS; k++) {
        remat_tensor *a = rt_leaf(rt_rand(2, sa, REMAT_F64, 0.5, 2, 9));
        remat_tensor *b = rt_leaf(rt_rand(2, sb, REMAT_F64, 0.5, 2, 10));
        remat_tensor *in[2] = {a, b};
        RT_GRADCHECK(call_binop_on_views, (void *)&k_ops[k], 2, in);
        remat_release(a);
        remat_release(b);
    }
    /* a transposed view passed directly as the differentiated input */
    remat_tensor *a = rt_leaf(rt_rand(2, sa, REMAT_F64, 0.5, 2, 11)), *at;
    int64_t sr[] = {3};
    remat_tensor *r = rt_leaf(rt_rand(1, sr, REMAT_F64, 0.5, 2, 12));
    RT_OK(remat_transpose(&at, a, 0, 1));
    remat_tensor *in[2] = {at, r};
    for (int k = 0; k < N_OPS; k++) RT_GRADCHECK(call_binop, (void *)&k_ops[k], 2, in);
    remat_release(at);
    remat_release(a);
    remat_release(r);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_binary, analytic_broadcast_grads) {
    /* y = a (2,3) * b (3): da = b broadcast, db = column sums of a */
    int64_t sa[] = {2, 3}, sb[] = {3};
    double av[] = {1, 2, 3, 4, 5, 6}, bv[] = {7, 8, 9};
    remat_tensor *a = rt_leaf(rt_tensor(2, sa, REMAT_F64, av)),
                 *b = rt_leaf(rt_tensor(1, sb, REMAT_F64, bv));
    remat_tensor *y, *l;
    RT_OK(remat_mul(&y, a, b));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "MulBackward");
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    remat_tensor *ga = remat_tensor_grad(a), *gb = remat_tensor_grad(b);
    cr_assert_eq(remat_ndim(gb), 1);
    cr_assert_eq(remat_size(gb, 0), 3);
    double v;
    for (int i = 0; i < 6; i++) {
        RT_OK(remat_item_at(ga, i, &v));
        cr_assert_float_eq(v, bv[i % 3], 1e-12);
    }
    for (int j = 0; j < 3; j++) {
        RT_OK(remat_item_at(gb, j, &v));
        cr_assert_float_eq(v, av[j] + av[3 + j], 1e-12);
    }
    remat_release(y);
    remat_release(l);
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_binary, node_names) {
    int64_t s[] = {2};
    remat_tensor *a = rt_leaf(rt_rand(1, s, REMAT_F64, 0.5, 1, 1)),
                 *b = rt_rand(1, s, REMAT_F64, 0.5, 1, 2);
    const char *names[] = {"AddBackward", "SubBackward", "MulBackward", "DivBackward",
                           "PowBackward"};
    for (int k = 0; k < N_OPS; k++) {
        remat_tensor *y;
        RT_OK(k_ops[k].f(&y, a, b));
        cr_assert(remat_requires_grad(y));
        cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), names[k]);
        remat_release(y);
    }
    /* grad mode off: no graph */
    bool prev = remat_no_grad_begin();
    remat_tensor *y;
    RT_OK(remat_add(&y, a, b));
    cr_assert(!remat_requires_grad(y));
    cr_assert_null(remat_grad_fn(y));
    remat_grad_mode_restore(prev);
    remat_release(y);
    remat_release(a);
    remat_release(b);
}

/* The same tensor on both sides: both edges lead to x. */
Test(ops_binary, same_tensor_both_operands) {
    int64_t s[] = {3};
    double xv[] = {1, -2, 3};
    remat_tensor *x = rt_leaf(rt_tensor(1, s, REMAT_F64, xv)), *y, *l;
    RT_OK(remat_mul(&y, x, x));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    double g[3];
    RT_OK(remat_copy_to_buffer(remat_tensor_grad(x), REMAT_F64, g, 3));
    for (int i = 0; i < 3; i++) cr_assert_float_eq(g[i], 2 * xv[i], 1e-12);
    remat_tensor *in[2] = {x, x};
    for (int k = 0; k < N_OPS; k++)
        if (k != 4) RT_GRADCHECK(call_binop, (void *)&k_ops[k], 2, in); /* pow needs x > 0 */
    remat_release(l);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* pow's gradient is 0 (not nan) at base 0 with exponent 0, and the
 * exponent gradient is 0 at base 0. */
Test(ops_binary, pow_gradient_at_zero_base) {
    int64_t s[] = {3};
    double av[] = {0, 0, 2}, bv[] = {0, 2, 3};
    remat_tensor *a = rt_leaf(rt_tensor(1, s, REMAT_F64, av)),
                 *b = rt_leaf(rt_tensor(1, s, REMAT_F64, bv));
    remat_tensor *y, *l, *g[2], *in[2] = {a, b};
    RT_OK(remat_pow(&y, a, b));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_grad(1, &l, NULL, 2, in, false, false, g));
    double ga[3], gb[3];
    RT_OK(remat_copy_to_buffer(g[0], REMAT_F64, ga, 3));
    RT_OK(remat_copy_to_buffer(g[1], REMAT_F64, gb, 3));
    cr_assert_float_eq(ga[0], 0, 0);
    cr_assert_float_eq(ga[1], 0, 0);
    cr_assert_float_eq(ga[2], 3 * 4, 1e-12);
    cr_assert_float_eq(gb[0], 0, 0);
    cr_assert_float_eq(gb[1], 0, 0);
    cr_assert_float_eq(gb[2], 8 * log(2.0), 1e-12);
    remat_release(g[0]);
    remat_release(g[1]);
    remat_release(y);
    remat_release(l);
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Counting pack hook: mul saves only what the needed gradients read. */
static int g_packs;
static void *count_pack(void *ud, remat_tensor *t) {
    (void)ud;
    g_packs++;
    return remat_retain(t);
}
static int count_unpack(void *ud, void *h, remat_tensor **out) {
    (void)ud;
    *out = remat_retain(h);
    return REMAT_OK;
}
static void count_free(void *ud, void *h) {
    (void)ud;
    remat_release(h);
}
Test(ops_binary, saves_only_what_backward_needs) {
    int64_t s[] = {4};
    remat_tensor *a = rt_leaf(rt_rand(1, s, REMAT_F64, 0.5, 1, 1)),
                 *b = rt_rand(1, s, REMAT_F64, 0.5, 1, 2);
    remat_saved_hooks h = {count_pack, count_unpack, count_free, NULL};
    RT_OK(remat_saved_hooks_push(&h));
    struct {
        binfn f;
        int want;
    } cases[] = {{remat_add, 0}, {remat_sub, 0}, {remat_mul, 1}, {remat_div, 1}, {remat_pow, 2}};
    for (int k = 0; k < 5; k++) {
        remat_tensor *y;
        g_packs = 0;
        RT_OK(cases[k].f(&y, a, b));
        cr_assert_eq(g_packs, cases[k].want, "case %d saved %d tensors, expected %d", k, g_packs,
                     cases[k].want);
        remat_release(y);
    }
    RT_OK(remat_saved_hooks_pop());
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- errors --------------------------------------------------------------------------- */
Test(ops_binary, errors) {
    int64_t s23[] = {2, 3}, s4[] = {4};
    remat_tensor *a = rt_rand(2, s23, REMAT_F64, 0, 1, 1), *b = rt_rand(1, s4, REMAT_F64, 0, 1, 2);
    remat_tensor *f = rt_rand(2, s23, REMAT_F32, 0, 1, 3), *i;
    RT_OK(remat_arange(&i, 3));
    remat_tensor *y = (remat_tensor *)&y; /* must be reset to NULL on failure */
    for (int k = 0; k < N_OPS; k++) {
        const char *nm = k_ops[k].name;
        RT_FAILS(k_ops[k].f(NULL, a, a), REMAT_EINVAL, nm);
        RT_FAILS(k_ops[k].f(&y, NULL, a), REMAT_EINVAL, nm);
        cr_assert_null(y);
        y = (remat_tensor *)&y;
        RT_FAILS(k_ops[k].f(&y, a, NULL), REMAT_EINVAL, nm);
        cr_assert_null(y);
        RT_FAILS(k_ops[k].f(&y, a, b), REMAT_ESHAPE, nm);
        cr_assert(strstr(remat_last_error(), "[2, 3]") && strstr(remat_last_error(), "[4]"),
                  "broadcast message lacks shapes: %s", remat_last_error());
        RT_FAILS(k_ops[k].f(&y, a, f), REMAT_EDTYPE, nm);
        RT_FAILS(k_ops[k].f(&y, i, i), REMAT_EDTYPE, nm);
    }
    RT_FAILS(remat_add(&y, a, b), REMAT_ESHAPE, "remat_add");
    remat_release(a);
    remat_release(b);
    remat_release(f);
    remat_release(i);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_binary, device_mismatch) {
    int td = rt_testdev_register();
    int64_t s[] = {2, 2};
    remat_tensor *a = rt_rand(2, s, REMAT_F32, 0, 1, 1), *b, *y = NULL;
    RT_OK(remat_empty(&b, 2, s, REMAT_F32, (remat_device){td, 0}));
    for (int k = 0; k < N_OPS; k++) RT_FAILS(k_ops[k].f(&y, a, b), REMAT_EDEVICE, k_ops[k].name);
    RT_FAILS(remat_where(&y, a, a, b), REMAT_EDEVICE, "remat_where");
    RT_FAILS(remat_masked_fill(&y, a, b, 0), REMAT_EDEVICE, "remat_masked_fill");
    /* both on testdev (host-addressable): works */
    remat_tensor *c;
    RT_OK(remat_zeros(&c, 2, s, REMAT_F32, (remat_device){td, 0}));
    RT_OK(remat_add(&y, b, c));
    cr_assert_eq(remat_tensor_device(y).type, td);
    remat_release(y);
    remat_release(c);
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- masked_fill -------------------------------------------------------------------------- */
static int call_masked_fill(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    return remat_masked_fill(out, in[0], (remat_tensor *)ud, -3.5);
}

Test(ops_select, masked_fill_values_and_grad) {
    int64_t sa[] = {2, 3}, sm[] = {3};
    double av[] = {1, 2, 3, 4, 5, 6}, mv[] = {0, 1, 0};
    remat_tensor *a = rt_leaf(rt_tensor(2, sa, REMAT_F64, av));
    remat_dtype mdt[] = {REMAT_I64, REMAT_F32, REMAT_F64};
    for (int d = 0; d < 3; d++) {
        remat_tensor *m = rt_tensor(1, sm, mdt[d], mv), *y;
        RT_OK(remat_masked_fill(&y, a, m, -3.5));
        double want[] = {1, -3.5, 3, 4, -3.5, 6}, v[6];
        RT_OK(remat_copy_to_buffer(y, REMAT_F64, v, 6));
        for (int i = 0; i < 6; i++) cr_assert_float_eq(v[i], want[i], 0);
        cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "MaskedFillBackward");
        remat_tensor *l, *g;
        RT_OK(remat_sum_all(&l, y));
        RT_OK(remat_grad(1, &l, NULL, 1, &a, false, false, &g));
        RT_OK(remat_copy_to_buffer(g, REMAT_F64, v, 6));
        for (int i = 0; i < 6; i++) cr_assert_float_eq(v[i], i % 3 == 1 ? 0 : 1, 0);
        remat_tensor *in[1] = {a};
        RT_GRADCHECK(call_masked_fill, m, 1, in);
        remat_release(g);
        remat_release(l);
        remat_release(y);
        remat_release(m);
    }
    /* strided a and a full-shape mask */
    int64_t st[] = {3, 2};
    remat_tensor *b = rt_leaf(rt_rand(2, st, REMAT_F64, -1, 1, 3)), *bt, *m;
    RT_OK(remat_transpose(&bt, b, 0, 1));
    double mz[] = {0, 1, 1, 0, 0, 1};
    m = rt_tensor(2, sa, REMAT_I64, mz);
    remat_tensor *in[1] = {bt};
    RT_GRADCHECK(call_masked_fill, m, 1, in);
    remat_release(m);
    remat_release(bt);
    remat_release(b);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Causal-mask shape: (B, H, T, T) filled through a (T, T) mask, on the
 * parallel path, contiguous and through a transposed view. */
Test(ops_select, masked_fill_large_broadcast_mask) {
    const int64_t T = 67;
    int64_t s[] = {2, 5, T, T}, sm[] = {T, T};
    remat_tensor *x = rt_rand(4, s, REMAT_F32, -1, 1, 1), *xt, *m, *y;
    RT_OK(remat_zeros(&m, 2, sm, REMAT_I64, REMAT_DEVICE_CPU));
    int64_t *pm = remat_data(m);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) pm[i * T + j] = j > i;
    RT_OK(remat_transpose(&xt, x, 2, 3));
    remat_tensor *srcs[] = {x, xt};
    for (int v = 0; v < 2; v++) {
        RT_OK(remat_masked_fill(&y, srcs[v], m, -1e9));
        double *vx = rt_values(srcs[v]), *vy = rt_values(y);
        for (int64_t i = 0; i < 10 * T * T; i++) {
            int64_t r = (i / T) % T, c = i % T;
            cr_assert_eq(vy[i], c > r ? (double)-1e9f : vx[i], "view %d element %lld", v,
                         (long long)i);
        }
        free(vx);
        free(vy);
        remat_release(y);
    }
    remat_release(xt);
    remat_release(x);
    remat_release(m);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_select, masked_fill_errors) {
    int64_t sa[] = {2, 3}, sm[] = {2, 3, 1}, s4[] = {4};
    remat_tensor *a = rt_rand(2, sa, REMAT_F32, 0, 1, 1), *y = NULL;
    remat_tensor *big = rt_rand(3, sm, REMAT_F64, 0, 1, 2),
                 *bad = rt_rand(1, s4, REMAT_F64, 0, 1, 3);
    remat_tensor *ia;
    RT_OK(remat_arange(&ia, 3));
    RT_FAILS(remat_masked_fill(NULL, a, a, 0), REMAT_EINVAL, "remat_masked_fill");
    RT_FAILS(remat_masked_fill(&y, NULL, a, 0), REMAT_EINVAL, "remat_masked_fill");
    RT_FAILS(remat_masked_fill(&y, a, NULL, 0), REMAT_EINVAL, "remat_masked_fill");
    RT_FAILS(remat_masked_fill(&y, a, big, 0), REMAT_ESHAPE, "remat_masked_fill");
    RT_FAILS(remat_masked_fill(&y, a, bad, 0), REMAT_ESHAPE, "[4]");
    RT_FAILS(remat_masked_fill(&y, ia, ia, 0), REMAT_EDTYPE, "remat_masked_fill");
    cr_assert_null(y);
    remat_release(a);
    remat_release(big);
    remat_release(bad);
    remat_release(ia);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- where ------------------------------------------------------------------------------------ */
static int call_where(void *ud, remat_tensor *const *in, int n, remat_tensor **out) {
    (void)n;
    return remat_where(out, (remat_tensor *)ud, in[0], in[1]);
}

Test(ops_select, where_values_broadcast_and_grad) {
    int64_t sc[] = {2, 1}, sa[] = {3}, sb[] = {2, 3};
    double cv[] = {1, 0}, av[] = {1, 2, 3}, bv[] = {10, 20, 30, 40, 50, 60};
    remat_tensor *c = rt_tensor(2, sc, REMAT_I64, cv);
    remat_tensor *a = rt_leaf(rt_tensor(1, sa, REMAT_F64, av)),
                 *b = rt_leaf(rt_tensor(2, sb, REMAT_F64, bv));
    remat_tensor *y;
    RT_OK(remat_where(&y, c, a, b));
    cr_assert_eq(remat_ndim(y), 2);
    double v[6], want[] = {1, 2, 3, 40, 50, 60};
    RT_OK(remat_copy_to_buffer(y, REMAT_F64, v, 6));
    for (int i = 0; i < 6; i++) cr_assert_float_eq(v[i], want[i], 0);
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "WhereBackward");
    remat_tensor *l, *g[2], *in[2] = {a, b};
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_grad(1, &l, NULL, 2, in, false, false, g));
    cr_assert_eq(remat_ndim(g[0]), 1);
    RT_OK(remat_copy_to_buffer(g[0], REMAT_F64, v, 3));
    for (int i = 0; i < 3; i++) cr_assert_float_eq(v[i], 1, 0); /* row 0 only */
    RT_OK(remat_copy_to_buffer(g[1], REMAT_F64, v, 6));
    for (int i = 0; i < 6; i++) cr_assert_float_eq(v[i], i < 3 ? 0 : 1, 0);
    RT_GRADCHECK(call_where, c, 2, in);
    /* float condition, 0-dim b, strided a */
    int64_t s3[] = {3, 2};
    double fz[] = {0.5, 0, -2, 0, 1, 0};
    remat_tensor *fc = rt_tensor(2, sb, REMAT_F32, fz);
    remat_tensor *base = rt_leaf(rt_rand(2, s3, REMAT_F64, -1, 1, 6)), *at;
    remat_tensor *s0 = rt_leaf(rt_rand(0, NULL, REMAT_F64, -1, 1, 7));
    RT_OK(remat_transpose(&at, base, 0, 1));
    remat_tensor *in2[2] = {at, s0};
    RT_GRADCHECK(call_where, fc, 2, in2);
    remat_tensor *list[] = {g[0], g[1], l, y, c, a, b, fc, base, s0, at};
    for (size_t i = 0; i < 11; i++) remat_release(list[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_select, where_large_matches_reference) {
    int64_t s[] = {200, 300};
    remat_tensor *c = rt_rand(2, s, REMAT_F64, -1, 1, 1), *a = rt_rand(2, s, REMAT_F32, -1, 1, 2);
    remat_tensor *b = rt_rand(2, s, REMAT_F32, -1, 1, 3), *y;
    RT_OK(remat_where(&y, c, a, b));
    double *vc = rt_values(c), *va = rt_values(a), *vb = rt_values(b), *vy = rt_values(y);
    for (int64_t i = 0; i < 200 * 300; i++)
        cr_assert_eq(vy[i], vc[i] != 0 ? va[i] : vb[i], "element %lld", (long long)i);
    free(vc);
    free(va);
    free(vb);
    free(vy);
    remat_release(y);
    remat_release(a);
    remat_release(b);
    remat_release(c);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(ops_select, where_errors) {
    int64_t s[] = {2, 3}, s4[] = {4};
    remat_tensor *a = rt_rand(2, s, REMAT_F64, 0, 1, 1), *f = rt_rand(2, s, REMAT_F32, 0, 1, 2);
    remat_tensor *c4 = rt_rand(1, s4, REMAT_F64, 0, 1, 3), *y = NULL;
    RT_FAILS(remat_where(NULL, a, a, a), REMAT_EINVAL, "remat_where");
    RT_FAILS(remat_where(&y, NULL, a, a), REMAT_EINVAL, "remat_where");
    RT_FAILS(remat_where(&y, a, NULL, a), REMAT_EINVAL, "remat_where");
    RT_FAILS(remat_where(&y, a, a, NULL), REMAT_EINVAL, "remat_where");
    RT_FAILS(remat_where(&y, a, a, f), REMAT_EDTYPE, "remat_where");
    RT_FAILS(remat_where(&y, c4, a, a), REMAT_ESHAPE, "remat_where");
    cr_assert_null(y);
    remat_release(a);
    remat_release(f);
    remat_release(c4);
    cr_assert_eq(remat_live_tensors(), 0);
}
