/* tests/test_api_edges.c — public calls the other suites use only
 * indirectly: custom-function ctx queries, backward-pass introspection,
 * graph walking, grad-mode setter, device queries, policy refcounting,
 * and the planner's one-call convenience. */
#include <string.h>

#include "support/models.h"
#include "support/rt.h"

/* ---- custom function ctx queries ----------------------------------------------------------- */
typedef struct probe {
    bool needs[2];
    int n_saved_fwd, n_saved_bwd;
    bool in_bwd_fwd, in_bwd_bwd;
    int bad_index_rc;
} probe;

/* out[0] = a * b (differentiable), out[1] = a + b marked non-differentiable */
static int probe_fwd(remat_function_ctx *ctx, void *ud, remat_tensor *const *in, int n_in,
                     remat_tensor **out, int n_out) {
    probe *p = ud;
    (void)n_in, (void)n_out;
    p->needs[0] = remat_ctx_needs_input_grad(ctx, 0);
    p->needs[1] = remat_ctx_needs_input_grad(ctx, 1);
    p->in_bwd_fwd = remat_in_backward();
    int rc = remat_ctx_save_for_backward(ctx, 2, in);
    if (!rc) p->n_saved_fwd = remat_ctx_num_saved(ctx);
    if (!rc) rc = remat_ctx_mark_non_differentiable(ctx, 1);
    if (!rc) p->bad_index_rc = remat_ctx_mark_non_differentiable(ctx, -1);
    if (!rc) rc = remat_mul(&out[0], in[0], in[1]);
    if (!rc) rc = remat_add(&out[1], in[0], in[1]);
    return rc;
}

static int probe_bwd(remat_function_ctx *ctx, void *ud, remat_tensor *const *gout, int n_out,
                     remat_tensor **gin, int n_in) {
    probe *p = ud;
    (void)n_out, (void)n_in;
    p->n_saved_bwd = remat_ctx_num_saved(ctx);
    p->in_bwd_bwd = remat_in_backward();
    remat_tensor *b = NULL;
    int rc = remat_ctx_saved(ctx, 1, &b);
    if (!rc && remat_ctx_needs_input_grad(ctx, 0)) rc = remat_mul(&gin[0], gout[0], b);
    remat_release(b);
    return rc;
}

Test(api_edges, custom_function_ctx_queries) {
    int64_t sh[] = {3};
    remat_tensor *a = rt_leaf(rt_rand(1, sh, REMAT_F64, -1, 1, 1));
    remat_tensor *b = rt_rand(1, sh, REMAT_F64, -1, 1, 2); /* no grad */
    probe p = {0};
    remat_function_def def = {"ProbeBackward", probe_fwd, probe_bwd, NULL};
    remat_tensor *in[2] = {a, b}, *out[2];
    RT_OK(remat_function_apply(&def, &p, 2, in, 2, out));
    cr_assert(p.needs[0] && !p.needs[1], "needs_input_grad follows requires_grad");
    cr_assert_eq(p.n_saved_fwd, 2);
    cr_assert_eq(p.bad_index_rc, REMAT_EINVAL);
    cr_assert(!p.in_bwd_fwd);
    cr_assert(remat_requires_grad(out[0]));
    cr_assert(!remat_requires_grad(out[1]), "output marked non-differentiable");
    remat_tensor *l;
    RT_OK(remat_sum_all(&l, out[0]));
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(p.n_saved_bwd, 2);
    cr_assert(p.in_bwd_bwd, "remat_in_backward is true inside a backward callback");
    cr_assert(rt_bitwise_equal(remat_tensor_grad(a), b));
    cr_assert(!remat_in_backward());
    remat_release(l);
    remat_release(out[0]);
    remat_release(out[1]);
    remat_release(a);
    remat_release(b);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- backward-pass introspection through a tensor hook ------------------------------------- */
typedef struct seen {
    bool partial;
    uint64_t id;
} seen;

static int record_hook(void *ud, remat_tensor *grad, remat_tensor **rep) {
    (void)grad, (void)rep;
    seen *s = ud;
    s->partial = remat_current_backward_is_partial();
    s->id = remat_current_backward_id();
    return REMAT_OK;
}

Test(api_edges, backward_is_partial_only_for_grad_and_inputs) {
    int64_t sh[] = {2};
    remat_tensor *a = rt_leaf(rt_rand(1, sh, REMAT_F64, -1, 1, 3));
    seen s = {0};
    RT_OK(remat_register_hook(a, record_hook, &s));
    remat_tensor *e, *l, *g;
    RT_OK(remat_exp(&e, a));
    RT_OK(remat_sum_all(&l, e));
    RT_OK(remat_backward(1, &l, NULL, true, 0, NULL));
    cr_assert(!s.partial);
    uint64_t first = s.id;
    cr_assert_neq(first, 0);
    RT_OK(remat_grad(1, &l, NULL, 1, &a, true, false, &g));
    cr_assert(s.partial, "remat_grad is a partial pass");
    cr_assert_neq(s.id, first, "every pass gets its own id");
    RT_OK(remat_backward(1, &l, NULL, false, 1, &a));
    cr_assert(s.partial, "backward with inputs is a partial pass");
    cr_assert_eq(remat_current_backward_id(), 0, "no id outside backward");
    remat_release(g);
    remat_release(l);
    remat_release(e);
    remat_release(a);
}

/* ---- graph walking -------------------------------------------------------------------------- */
Test(api_edges, graph_nodes_and_edges) {
    int64_t sh[] = {2};
    remat_tensor *a = rt_leaf(rt_rand(1, sh, REMAT_F64, -1, 1, 4));
    remat_tensor *c = rt_rand(1, sh, REMAT_F64, -1, 1, 5); /* no grad */
    remat_tensor *m;
    RT_OK(remat_mul(&m, a, c));
    remat_node *n = remat_grad_fn(m);
    cr_assert_str_eq(remat_node_name(n), "MulBackward");
    cr_assert_eq(remat_node_num_next(n), 2);
    cr_assert_str_eq(remat_node_name(remat_node_next(n, 0)), "AccumulateGrad");
    cr_assert_null(remat_node_next(n, 1), "an input without grad has no edge");
    cr_assert_null(remat_node_next(n, 2), "out of range");
    cr_assert_eq(remat_node_num_next(NULL), 0);
    cr_assert_null(remat_node_name(NULL));
    remat_release(m);
    remat_release(c);
    remat_release(a);
}

Test(api_edges, set_grad_enabled_returns_previous_mode) {
    cr_assert(remat_set_grad_enabled(false), "grad mode starts enabled");
    cr_assert(!remat_is_grad_enabled());
    cr_assert(!remat_set_grad_enabled(true));
    cr_assert(remat_is_grad_enabled());
}

/* ---- device queries ------------------------------------------------------------------------- */
Test(api_edges, device_queries) {
    int td = rt_testdev_register();
    RT_OK(remat_device_check(REMAT_DEVICE_CPU));
    RT_OK(remat_device_check((remat_device){td, 1}));
    RT_FAILS(remat_device_check((remat_device){td, 2}), REMAT_EDEVICE, "testdev:2");
    RT_FAILS(remat_device_check((remat_device){REMAT_MAX_DEVICE_TYPES - 1, 0}), REMAT_EDEVICE,
             "unknown device type");
    cr_assert_eq(remat_current_device(REMAT_CPU), 0);
    cr_assert_eq(remat_current_device(td), 0, "no current_device callback → 0");
    cr_assert(remat_device_is_initialized(REMAT_CPU));
    rt_testdev_set_initialized(false);
    cr_assert(!remat_device_is_initialized(td));
    rt_testdev_set_initialized(true);
    cr_assert(remat_device_is_initialized(td));
    cr_assert(!remat_device_is_initialized(REMAT_MAX_DEVICE_TYPES - 1));
}

/* ---- policy refcounting --------------------------------------------------------------------- */
Test(api_edges, policy_retain_keeps_it_alive) {
    remat_policy *p;
    RT_OK(remat_policy_dots_saveable(&p));
    cr_assert_eq(remat_policy_retain(p), p);
    remat_policy_release(p);
    /* still alive: evaluating it must work */
    remat_sac_context ctx = {0};
    cr_assert_eq(remat_policy_eval(p, &ctx, "remat_matmul", 0, NULL), REMAT_MUST_SAVE);
    remat_policy_release(p);
    cr_assert_null(remat_policy_retain(NULL));
    remat_policy_release(NULL);
}

/* ---- planner: profile + plan in one call, run with base options ----------------------------- */
Test(api_edges, plan_auto_and_run_ex) {
    enum { L = 4 };
    rt_mlp_block blk[L];
    remat_stage stages[L];
    remat_tensor *params[L * 4];
    int np = 0;
    for (int i = 0; i < L; i++) {
        rt_mlp_block_init(&blk[i], 16, 32, 0.0, REMAT_F64, 70 + (unsigned)i);
        stages[i] = (remat_stage){rt_mlp_block_fn, &blk[i]};
        np += rt_mlp_block_params(&blk[i], params + np);
    }
    int64_t sh[] = {8, 16};
    remat_tensor *x = rt_leaf(rt_rand(2, sh, REMAT_F64, -1, 1, 9));
    remat_plan *plan = NULL;
    RT_FAILS(remat_plan_auto(&plan, L, stages, x, 1, NULL), REMAT_EINVAL, "minimum");
    cr_assert_null(plan);
    RT_OK(remat_plan_auto(&plan, L, stages, x, (size_t)1 << 30, NULL));
    cr_assert_not_null(plan);
    /* reference: plain forward/backward */
    rt_zero_grads(np, params);
    remat_tensor *h = remat_retain(x), *l;
    for (int i = 0; i < L; i++) {
        remat_tensor *y;
        RT_OK(rt_mlp_block_fn(&blk[i], &h, 1, &y, 1));
        remat_release(h);
        h = y;
    }
    RT_OK(remat_sum_all(&l, h));
    RT_OK(remat_backward_scalar(l));
    remat_tensor *ref = NULL;
    RT_OK(remat_clone(&ref, remat_tensor_grad(params[0])));
    remat_release(l);
    remat_release(h);
    /* the plan, with base options (preserve_rng_state off is allowed) */
    rt_zero_grads(np, params);
    remat_checkpoint_options base = {.preserve_rng_state = REMAT_OPT_FALSE};
    RT_OK(remat_plan_run_ex(plan, stages, x, &h, &base));
    RT_OK(remat_sum_all(&l, h));
    RT_OK(remat_backward_scalar(l));
    cr_assert(rt_bitwise_equal(remat_tensor_grad(params[0]), ref));
    remat_release(l);
    remat_release(h);
    remat_release(ref);
    remat_plan_free(plan);
    remat_release(x);
    for (int i = 0; i < L; i++) rt_mlp_block_free(&blk[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}
