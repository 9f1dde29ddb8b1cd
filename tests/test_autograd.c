/* tests/test_autograd.c — the engine: backward vs grad, retain_graph, version
 * errors, hooks, saved-tensor hooks, custom functions, grad mode. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "support/rt.h"

/* REMAT_TEST_DEVICE=fenced|cuda (make test-fenced, make test-cuda) puts the tensors that the
 * rt helpers make on that device (tests/support/rt.h) */
RT_ON_TEST_DEVICE

static remat_tensor *leaf(int ndim, const int64_t *shape, unsigned seed) {
    remat_tensor *t = rt_rand(ndim, shape, REMAT_F64, -1, 1, seed);
    RT_OK(remat_set_requires_grad(t, true));
    return t;
}

/* loss = sum(exp(a * b) + a) */
static remat_tensor *small_graph(remat_tensor *a, remat_tensor *b) {
    remat_tensor *m, *e, *s, *l;
    RT_OK(remat_mul(&m, a, b));
    RT_OK(remat_exp(&e, m));
    RT_OK(remat_add(&s, e, a));
    RT_OK(remat_sum_all(&l, s));
    remat_release(m);
    remat_release(e);
    remat_release(s);
    return l;
}

Test(autograd, grad_agrees_with_backward_and_leaves_grad_alone) {
    int64_t sh[] = {3, 4};
    remat_tensor *a = leaf(2, sh, 1), *b = leaf(2, sh, 2);
    remat_tensor *l = small_graph(a, b);
    remat_tensor *g[2];
    remat_tensor *in[2] = {a, b};
    RT_OK(remat_grad(1, &l, NULL, 2, in, true, false, g));
    cr_assert_null(remat_tensor_grad(a), "remat_grad must not touch .grad");
    cr_assert_null(remat_tensor_grad(b));
    RT_OK(remat_backward(1, &l, NULL, false, 0, NULL));
    cr_assert(rt_bitwise_equal(g[0], remat_tensor_grad(a)));
    cr_assert(rt_bitwise_equal(g[1], remat_tensor_grad(b)));
    /* analytic: d/da = b*exp(ab) + 1 */
    double av = rt_item_at(a, 5), bv = rt_item_at(b, 5), gv = rt_item_at(g[0], 5);
    cr_assert_float_eq(gv, bv * exp(av * bv) + 1, 1e-12);
    remat_release(g[0]);
    remat_release(g[1]);
    remat_release(l);
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(autograd, grad_subset_of_inputs) {
    int64_t sh[] = {2, 2};
    remat_tensor *a = leaf(2, sh, 1), *b = leaf(2, sh, 2);
    remat_tensor *l = small_graph(a, b);
    remat_tensor *gb;
    RT_OK(remat_grad(1, &l, NULL, 1, &b, false, false, &gb));
    cr_assert_not_null(gb);
    cr_assert_null(remat_tensor_grad(a));
    remat_release(gb);
    remat_release(l);
    remat_release(a);
    remat_release(b);
}

Test(autograd, backward_twice_without_retain_graph_fails) {
    int64_t sh[] = {2};
    remat_tensor *a = leaf(1, sh, 3), *b = leaf(1, sh, 4);
    remat_tensor *l = small_graph(a, b);
    RT_OK(remat_backward(1, &l, NULL, false, 0, NULL));
    RT_FAILS(remat_backward(1, &l, NULL, false, 0, NULL), REMAT_ESTATE, "second time");
    remat_release(l);
    remat_release(a);
    remat_release(b);
}

Test(autograd, retain_graph_allows_second_backward_and_accumulates) {
    int64_t sh[] = {2};
    remat_tensor *a = leaf(1, sh, 3), *b = leaf(1, sh, 4);
    remat_tensor *l = small_graph(a, b);
    RT_OK(remat_backward(1, &l, NULL, true, 0, NULL));
    double g1 = rt_item_at(remat_tensor_grad(a), 0);
    RT_OK(remat_backward(1, &l, NULL, false, 0, NULL));
    double g2 = rt_item_at(remat_tensor_grad(a), 0);
    cr_assert_float_eq(g2, 2 * g1, 1e-12);
    remat_release(l);
    remat_release(a);
    remat_release(b);
}

Test(autograd, backward_with_inputs_only_accumulates_those) {
    int64_t sh[] = {2};
    remat_tensor *a = leaf(1, sh, 3), *b = leaf(1, sh, 4);
    remat_tensor *l = small_graph(a, b);
    RT_OK(remat_backward(1, &l, NULL, false, 1, &a));
    cr_assert_not_null(remat_tensor_grad(a));
    cr_assert_null(remat_tensor_grad(b));
    remat_release(l);
    remat_release(a);
    remat_release(b);
}

Test(autograd, in_place_modification_of_saved_tensor_is_detected) {
    int64_t sh[] = {3};
    remat_tensor *a = leaf(1, sh, 1);
    remat_tensor *x, *y, *l;
    RT_OK(remat_mul_scalar(&x, a, 2.0)); /* x is a non-leaf */
    RT_OK(remat_exp(&y, x));             /* saves its output y */
    RT_OK(remat_sum_all(&l, y));
    bool prev = remat_no_grad_begin();
    RT_OK(remat_mul_scalar_(y, 3.0));
    remat_grad_mode_restore(prev);
    RT_FAILS(remat_backward_scalar(l), REMAT_EVERSION, "modified by an in-place operation");
    remat_release(l);
    remat_release(y);
    remat_release(x);
    remat_release(a);
}

Test(autograd, errors_for_tensors_without_grad) {
    int64_t sh[] = {2};
    remat_tensor *a = rt_rand(1, sh, REMAT_F32, 0, 1, 1);
    remat_tensor *l;
    RT_OK(remat_sum_all(&l, a));
    RT_FAILS(remat_backward_scalar(l), REMAT_ENOGRAD, "does not require grad");
    remat_tensor *g;
    remat_tensor *b = leaf(1, sh, 2);
    remat_tensor *lb;
    RT_OK(remat_sum_all(&lb, b));
    RT_FAILS(remat_grad(1, &lb, NULL, 1, &a, false, false, &g), REMAT_ENOGRAD, "input 0");
    /* non-scalar root without grad_outputs */
    remat_tensor *e;
    RT_OK(remat_exp(&e, b));
    RT_FAILS(remat_backward(1, &e, NULL, false, 0, NULL), REMAT_EINVAL, "one-element");
    /* grad_output shape mismatch */
    int64_t sh3[] = {3};
    remat_tensor *go = rt_rand(1, sh3, REMAT_F64, 0, 1, 3);
    RT_FAILS(remat_backward(1, &e, &go, false, 0, NULL), REMAT_ESHAPE, "grad_output 0");
    RT_FAILS(remat_backward(0, NULL, NULL, false, 0, NULL), REMAT_EINVAL, NULL);
    /* unused input */
    remat_tensor *c = leaf(1, sh, 9);
    RT_FAILS(remat_grad(1, &lb, NULL, 1, &c, true, false, &g), REMAT_EINVAL, "allow_unused");
    RT_OK(remat_grad(1, &lb, NULL, 1, &c, true, true, &g));
    cr_assert_null(g);
    /* i64 cannot require grad; non-leaf requires_grad cannot be turned off */
    remat_tensor *idx;
    RT_OK(remat_arange(&idx, 3));
    RT_FAILS(remat_set_requires_grad(idx, true), REMAT_EINVAL, "floating point");
    RT_FAILS(remat_set_requires_grad(e, false), REMAT_EINVAL, "not a leaf");
    remat_release(idx);
    remat_release(go);
    remat_release(e);
    remat_release(c);
    remat_release(lb);
    remat_release(b);
    remat_release(l);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- hooks ------------------------------------------------------------------------------- */
static int g_hook_calls;
static int double_hook(void *ud, remat_tensor *grad, remat_tensor **rep) {
    (void)ud;
    g_hook_calls++;
    return remat_mul_scalar(rep, grad, 2.0);
}

Test(autograd, tensor_hooks_on_leaf_and_non_leaf) {
    int64_t sh[] = {3};
    remat_tensor *a = leaf(1, sh, 1);
    remat_tensor *x, *l;
    RT_OK(remat_mul_scalar(&x, a, 3.0));
    RT_OK(remat_register_hook(x, double_hook, NULL)); /* non-leaf */
    RT_OK(remat_register_hook(a, double_hook, NULL)); /* leaf */
    RT_OK(remat_sum_all(&l, x));
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(g_hook_calls, 2);
    double g = rt_item_at(remat_tensor_grad(a), 0);
    cr_assert_float_eq(g, 12.0, 1e-12); /* 1 *2 (x hook) *3 (mul) *2 (leaf hook) */
    remat_tensor *nog = rt_rand(1, sh, REMAT_F32, 0, 1, 2);
    RT_FAILS(remat_register_hook(nog, double_hook, NULL), REMAT_ENOGRAD, NULL);
    remat_release(nog);
    remat_release(l);
    remat_release(x);
    remat_release(a);
}

/* ---- saved-tensor hooks ------------------------------------------------------------------ */
typedef struct hook_counts {
    int packs, unpacks, frees;
} hook_counts;

static void *count_pack(void *ud, remat_tensor *t) {
    ((hook_counts *)ud)->packs++;
    return remat_retain(t);
}
static int count_unpack(void *ud, void *h, remat_tensor **out) {
    ((hook_counts *)ud)->unpacks++;
    *out = remat_retain(h);
    return REMAT_OK;
}
static void count_free(void *ud, void *h) {
    ((hook_counts *)ud)->frees++;
    remat_release(h);
}

Test(autograd, saved_tensor_hooks_called_once_per_save_and_use) {
    int64_t sh[] = {4};
    remat_tensor *a = leaf(1, sh, 1), *b = leaf(1, sh, 2);
    hook_counts hc = {0};
    remat_saved_hooks h = {count_pack, count_unpack, count_free, &hc};
    RT_OK(remat_saved_hooks_push(&h));
    remat_tensor *m, *e, *l;
    RT_OK(remat_mul(&m, a, b)); /* saves a and b */
    RT_OK(remat_exp(&e, m));    /* saves e */
    RT_OK(remat_saved_hooks_pop());
    RT_OK(remat_sum_all(&l, e)); /* outside hooks: not counted */
    cr_assert_eq(hc.packs, 3);
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(hc.unpacks, 3);
    cr_assert_eq(hc.frees, 3, "graph release must free every handle");
    RT_FAILS(remat_saved_hooks_pop(), REMAT_ESTATE, NULL);
    remat_release(l);
    remat_release(e);
    remat_release(m);
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(autograd, saved_hooks_can_be_disabled) {
    int64_t sh[] = {4};
    remat_tensor *a = leaf(1, sh, 1);
    hook_counts hc = {0};
    remat_saved_hooks h = {count_pack, count_unpack, count_free, &hc};
    RT_OK(remat_saved_hooks_push(&h));
    RT_OK(remat_saved_hooks_push_disabled());
    remat_tensor *e;
    RT_OK(remat_exp(&e, a));
    RT_OK(remat_saved_hooks_pop());
    RT_OK(remat_saved_hooks_pop());
    cr_assert_eq(hc.packs, 0);
    cr_assert_eq(remat_saved_hooks_depth(), 0);
    remat_release(e);
    remat_release(a);
}

/* ---- custom functions -------------------------------------------------------------------- */
/* y = x^3 with a hand-written backward 3 x^2 g; counts calls */
static int g_fwd_calls, g_bwd_calls;
static int cube_fwd(remat_function_ctx *ctx, void *ud, remat_tensor *const *in, int n_in,
                    remat_tensor **out, int n_out) {
    (void)ud;
    (void)n_in;
    (void)n_out;
    g_fwd_calls++;
    cr_assert(!remat_is_grad_enabled(), "forward must run with grad mode off");
    int rc = remat_ctx_save_for_backward(ctx, 1, in);
    if (rc) return rc;
    return remat_pow_scalar(&out[0], in[0], 3.0);
}
static int cube_bwd(remat_function_ctx *ctx, void *ud, remat_tensor *const *gout, int n_out,
                    remat_tensor **gin, int n_in) {
    (void)ud;
    (void)n_out;
    (void)n_in;
    g_bwd_calls++;
    remat_tensor *x, *x2, *t;
    int rc = remat_ctx_saved(ctx, 0, &x);
    if (rc) return rc;
    rc = remat_mul(&x2, x, x);
    remat_release(x);
    if (rc) return rc;
    rc = remat_mul_scalar(&t, x2, 3.0);
    remat_release(x2);
    if (rc) return rc;
    rc = remat_mul(&gin[0], t, gout[0]);
    remat_release(t);
    return rc;
}

Test(autograd, custom_function_end_to_end) {
    int64_t sh[] = {5};
    remat_tensor *x = leaf(1, sh, 1);
    remat_function_def def = {"CubeBackward", cube_fwd, cube_bwd, NULL};
    remat_tensor *y, *l;
    RT_OK(remat_function_apply(&def, NULL, 1, &x, 1, &y));
    cr_assert(remat_requires_grad(y));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(y)), "CubeBackward");
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(g_fwd_calls, 1);
    cr_assert_eq(g_bwd_calls, 1);
    for (int i = 0; i < 5; i++) {
        double xv = rt_item_at(x, i), gv = rt_item_at(remat_tensor_grad(x), i);
        cr_assert_float_eq(gv, 3 * xv * xv, 1e-12);
    }
    remat_release(l);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

static int fail_bwd(remat_function_ctx *ctx, void *ud, remat_tensor *const *gout, int n_out,
                    remat_tensor **gin, int n_in) {
    (void)ctx;
    (void)ud;
    (void)gout;
    (void)n_out;
    (void)gin;
    (void)n_in;
    return remat_set_error(REMAT_ECALLBACK, "my backward refuses");
}

Test(autograd, custom_function_errors_propagate) {
    int64_t sh[] = {2};
    remat_tensor *x = leaf(1, sh, 1);
    remat_function_def def = {"Failing", cube_fwd, fail_bwd, NULL};
    remat_tensor *y, *l;
    RT_OK(remat_function_apply(&def, NULL, 1, &x, 1, &y));
    RT_OK(remat_sum_all(&l, y));
    RT_FAILS(remat_backward_scalar(l), REMAT_ECALLBACK, "my backward refuses");
    remat_function_def bad = {"Bad", NULL, fail_bwd, NULL};
    RT_FAILS(remat_function_apply(&bad, NULL, 1, &x, 1, &y), REMAT_EINVAL, "forward");
    remat_release(l);
    remat_release(y);
    remat_release(x);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(autograd, custom_function_without_grad_records_nothing) {
    int64_t sh[] = {2};
    remat_tensor *x = rt_rand(1, sh, REMAT_F64, 0, 1, 1);
    remat_function_def def = {"CubeBackward", cube_fwd, cube_bwd, NULL};
    remat_tensor *y;
    RT_OK(remat_function_apply(&def, NULL, 1, &x, 1, &y));
    cr_assert(!remat_requires_grad(y));
    cr_assert_null(remat_grad_fn(y));
    remat_release(y);
    remat_release(x);
}

/* ---- grad mode is thread-local ------------------------------------------------------------ */
static void *thread_grad_mode(void *arg) {
    (void)arg;
    return (void *)(intptr_t)remat_is_grad_enabled();
}

Test(autograd, grad_mode_is_thread_local) {
    bool prev = remat_no_grad_begin();
    cr_assert(!remat_is_grad_enabled());
    pthread_t th;
    void *res;
    pthread_create(&th, NULL, thread_grad_mode, NULL);
    pthread_join(th, &res);
    cr_assert_eq((intptr_t)res, 1, "another thread must still have grad enabled");
    int64_t sh[] = {2};
    remat_tensor *a = leaf(1, sh, 1), *e;
    RT_OK(remat_exp(&e, a));
    cr_assert(!remat_requires_grad(e), "no graph under no_grad");
    bool p2 = remat_enable_grad_begin();
    remat_tensor *e2;
    RT_OK(remat_exp(&e2, a));
    cr_assert(remat_requires_grad(e2));
    remat_grad_mode_restore(p2);
    remat_grad_mode_restore(prev);
    cr_assert(remat_is_grad_enabled());
    remat_release(e);
    remat_release(e2);
    remat_release(a);
}

Test(autograd, long_chain_releases_without_recursion) {
    int64_t sh[] = {1};
    remat_tensor *a = leaf(1, sh, 1);
    remat_tensor *x = remat_retain(a);
    for (int i = 0; i < 100000; i++) {
        remat_tensor *y;
        RT_OK(remat_mul_scalar(&y, x, 1.0));
        remat_release(x);
        x = y;
    }
    remat_release(x); /* frees a 100000-node chain */
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(autograd, scope_collects_temporaries) {
    int64_t sh[] = {3};
    remat_tensor *a = leaf(1, sh, 1);
    remat_scope *s;
    RT_OK(remat_scope_begin(&s));
    remat_tensor *m, *l;
    RT_OK(remat_mul(&m, a, a));
    RT_OK(remat_sum_all(&l, m));
    RT_OK(remat_backward_scalar(l));
    remat_tensor *kept = remat_scope_keep(m);
    RT_OK(remat_scope_end(s));
    cr_assert_eq(remat_live_tensors(), 3, "a, a.grad and the kept tensor remain");
    remat_release(kept);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}
