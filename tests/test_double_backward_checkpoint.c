/*
 * tests/test_double_backward_checkpoint.c — create_graph through
 * checkpoints (issue 18): a gradient penalty (grad of grad) through three
 * levels of nested non-reentrant checkpoints, with early stop on and off,
 * with selective checkpointing, with saved-tensor hooks, is bitwise the
 * un-checkpointed one; the reentrant variant refuses; custom functions with
 * a differentiable backward.
 */
#include <string.h>

#include "core/core.h"
#include "support/rt.h"

/* REMAT_TEST_DEVICE=fenced|cuda (make test-fenced, make test-cuda) puts the tensors that the
 * rt helpers make on that device (tests/support/rt.h) */
RT_ON_TEST_DEVICE

enum { LEVELS = 3, D = 3, B = 2 };

/* Level i (0 = outermost): h = tanh(x W_i^T + b_i); level < 2 wraps the
 * next level (checkpointed or not) and returns gelu(next(h)) * x + h. */
typedef struct model model;
typedef struct level {
    model *m;
    int i;
} level;
struct model {
    remat_tensor *w[LEVELS], *b[LEVELS];
    level lv[LEVELS]; /* each level's user_data: lives as long as the model */
    bool ck;          /* checkpoint each level */
    remat_checkpoint_context_fn context_fn;
    void *context_data;
    remat_tristate early_stop;
};

static int level_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out);

static int run_level(level *l, remat_tensor *x, remat_tensor **out) {
    model *m = l->m;
    if (!m->ck) return level_fn(l, &x, 1, out, 1);
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE,
                                  .context_fn = m->context_fn,
                                  .context_fn_data = m->context_data,
                                  .early_stop = m->early_stop};
    return remat_checkpoint(level_fn, l, 1, &x, 1, out, &o);
}

static int level_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    level *lv = ud;
    model *m = lv->m;
    const int i = lv->i;
    remat_tensor *x = in[0], *l = NULL, *h = NULL, *nx = NULL, *g = NULL, *gx = NULL;
    int rc = remat_linear(&l, x, m->w[i], m->b[i]);
    if (!rc) rc = remat_tanh(&h, l);
    if (!rc && i + 1 < LEVELS) {
        rc = run_level(lv + 1, h, &nx);
        if (!rc) rc = remat_gelu(&g, nx, REMAT_GELU_TANH);
        if (!rc) rc = remat_mul(&gx, g, x);
        if (!rc) rc = remat_add(&out[0], gx, h);
    } else if (!rc) {
        out[0] = remat_retain(h);
    }
    remat_release(l), remat_release(h), remat_release(nx), remat_release(g), remat_release(gx);
    return rc;
}

static void model_init(model *m) {
    memset(m, 0, sizeof *m);
    const int64_t ws[2] = {D, D}, bs[1] = {D};
    for (int i = 0; i < LEVELS; i++) {
        m->w[i] = rt_leaf(rt_rand(2, ws, REMAT_F64, -0.8, 0.8, 10 + (unsigned)i));
        m->b[i] = rt_leaf(rt_rand(1, bs, REMAT_F64, -0.5, 0.5, 20 + (unsigned)i));
        m->lv[i] = (level){m, i};
    }
}

static void model_free(model *m) {
    for (int i = 0; i < LEVELS; i++) remat_release(m->w[i]), remat_release(m->b[i]);
}

/* The gradient penalty: L = sum(y^2), gx = dL/dx (create_graph), P = sum(gx^2) + L;
 * backward of P into the parameters' and x's .grad (grad of grad). Returns
 * the 2 * LEVELS + 1 gradients (new references), W's, b's, then x's. */
static void penalty_grads(model *m, remat_tensor **grads) {
    const int64_t xs[2] = {B, D};
    remat_tensor *x = rt_leaf(rt_rand(2, xs, REMAT_F64, -1, 1, 3)), *y = NULL, *sq = NULL,
                 *L = NULL, *gx = NULL, *g2 = NULL, *P0 = NULL, *P = NULL;
    RT_OK(run_level(&m->lv[0], x, &y));
    RT_OK(remat_mul(&sq, y, y));
    RT_OK(remat_sum_all(&L, sq));
    const remat_backward_options o = {.create_graph = true};
    RT_OK(remat_grad_ex(1, &L, NULL, 1, &x, &o, &gx));
    cr_assert(gx->requires_grad, "the gradient has no graph");
    RT_OK(remat_mul(&g2, gx, gx));
    RT_OK(remat_sum_all(&P0, g2));
    RT_OK(remat_add(&P, P0, L));
    for (int i = 0; i < LEVELS; i++) remat_set_grad(m->w[i], NULL), remat_set_grad(m->b[i], NULL);
    RT_OK(remat_backward_scalar(P));
    for (int i = 0; i < LEVELS; i++) {
        grads[i] = remat_retain(remat_tensor_grad(m->w[i]));
        grads[LEVELS + i] = remat_retain(remat_tensor_grad(m->b[i]));
        cr_assert(grads[i] && grads[LEVELS + i], "level %d got no gradient", i);
    }
    grads[2 * LEVELS] = remat_retain(remat_tensor_grad(x));
    remat_release(x), remat_release(y), remat_release(sq), remat_release(L), remat_release(gx);
    remat_release(g2), remat_release(P0), remat_release(P);
}

static void assert_same_grads(remat_tensor **a, remat_tensor **b, const char *what) {
    for (int i = 0; i <= 2 * LEVELS; i++)
        cr_assert(rt_bitwise_equal(a[i], b[i]),
                  "%s: gradient %d differs from the "
                  "un-checkpointed one (max |diff| %g)",
                  what, i, rt_max_abs_diff(a[i], b[i]));
}

static void release_grads(remat_tensor **g) {
    for (int i = 0; i <= 2 * LEVELS; i++) remat_release(g[i]);
}

Test(double_backward_checkpoint, nested_3_levels_bitwise_early_stop_on_and_off) {
    model m;
    model_init(&m);
    remat_tensor *ref[2 * LEVELS + 1], *got[2 * LEVELS + 1];
    penalty_grads(&m, ref);
    const remat_tristate modes[2] = {REMAT_OPT_TRUE, REMAT_OPT_FALSE};
    for (int k = 0; k < 2; k++) {
        m.ck = true;
        m.early_stop = modes[k];
        penalty_grads(&m, got);
        assert_same_grads(got, ref, k == 0 ? "early stop on" : "early stop off");
        release_grads(got);
        m.ck = false;
    }
    release_grads(ref);
    model_free(&m);
}

Test(double_backward_checkpoint, selective_policies_bitwise) {
    model m;
    model_init(&m);
    remat_tensor *ref[2 * LEVELS + 1], *got[2 * LEVELS + 1];
    penalty_grads(&m, ref);
    remat_policy *pols[2] = {NULL, NULL};
    RT_OK(remat_policy_dots_saveable(&pols[0]));
    RT_OK(remat_policy_nothing_saveable(&pols[1]));
    for (int k = 0; k < 2; k++) {
        remat_sac_config cfg = {.policy = pols[k]};
        m.ck = true;
        m.context_fn = remat_sac_context_fn;
        m.context_data = &cfg;
        penalty_grads(&m, got);
        assert_same_grads(got, ref, k == 0 ? "dots saveable" : "nothing saveable");
        release_grads(got);
    }
    remat_policy_release(pols[0]);
    remat_policy_release(pols[1]);
    release_grads(ref);
    model_free(&m);
}

/* The gradient penalty of the same model with an offload hook pair around
 * the forward (cpu tensors are kept as they are: exact): bitwise the same. */
Test(double_backward_checkpoint, offload_hooks_support_create_graph) {
    model m;
    model_init(&m);
    remat_tensor *ref[2 * LEVELS + 1], *got[2 * LEVELS + 1];
    penalty_grads(&m, ref);
    remat_saved_hooks h;
    remat_offload_saved_hooks(&h);
    RT_OK(remat_saved_hooks_push(&h));
    m.ck = true;
    penalty_grads(&m, got);
    RT_OK(remat_saved_hooks_pop());
    assert_same_grads(got, ref, "offload hooks");
    release_grads(got);
    release_grads(ref);
    model_free(&m);
}

static int tanh_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    return remat_tanh(&out[0], in[0]);
}

Test(double_backward_checkpoint, reentrant_refuses_create_graph) {
    const int64_t s[1] = {3};
    remat_tensor *x = rt_leaf(rt_rand(1, s, REMAT_F64, -1, 1, 1)), *y = NULL, *sum = NULL,
                 *g = NULL;
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_TRUE};
    RT_OK(remat_checkpoint(tanh_fn, NULL, 1, &x, 1, &y, &o));
    RT_OK(remat_sum_all(&sum, y));
    const remat_backward_options bo = {.create_graph = true};
    RT_FAILS(remat_backward_ex(1, &sum, NULL, 0, NULL, &bo), REMAT_EUNSUPPORTED,
             "use_reentrant=true");
    remat_release(x), remat_release(y), remat_release(sum), remat_release(g);
}

/* ---- custom functions --------------------------------------------------------------------- */
/* y = x^3 with a backward written with remat ops: 3 x^2 g. */
static remat_status cube_fwd(remat_function_ctx *ctx, void *ud, remat_tensor *const *in, int n_in,
                             remat_tensor **out, int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    RT_OK(remat_ctx_save_for_backward(ctx, 1, in));
    return remat_pow_scalar(&out[0], in[0], 3.0);
}
static remat_status cube_bwd(remat_function_ctx *ctx, void *ud, remat_tensor *const *gout,
                             int n_out, remat_tensor **gin, int n_in) {
    (void)ud, (void)n_out, (void)n_in;
    remat_tensor *x = NULL, *x2 = NULL, *t = NULL;
    int rc = remat_ctx_saved(ctx, 0, &x);
    if (!rc) rc = remat_mul(&x2, x, x);
    if (!rc) rc = remat_mul_scalar(&t, x2, 3.0);
    if (!rc) rc = remat_mul(&gin[0], t, gout[0]);
    remat_release(x), remat_release(x2), remat_release(t);
    return rc;
}

Test(double_backward_checkpoint, custom_function_backward_is_differentiable) {
    const double xv[2] = {0.5, -2.0};
    const int64_t s[1] = {2};
    remat_tensor *x = rt_leaf(rt_tensor(1, s, REMAT_F64, xv)), *y = NULL, *sum = NULL, *g = NULL,
                 *gs = NULL, *h = NULL;
    const remat_function_def def = {
        .name = "CubeBackward", .forward = cube_fwd, .backward = cube_bwd};
    RT_OK(remat_function_apply(&def, NULL, 1, &x, 1, &y));
    RT_OK(remat_sum_all(&sum, y));
    const remat_backward_options o = {.create_graph = true};
    RT_OK(remat_grad_ex(1, &sum, NULL, 1, &x, &o, &g)); /* 3 x^2 */
    cr_assert(g->requires_grad, "the user backward ran without grad mode");
    RT_OK(remat_sum_all(&gs, g));
    RT_OK(remat_grad(1, &gs, NULL, 1, &x, false, false, &h)); /* 6 x */
    double *hv = rt_values(h);
    cr_assert_float_eq(hv[0], 3.0, 1e-12);
    cr_assert_float_eq(hv[1], -12.0, 1e-12);
    free(hv);
    remat_release(x), remat_release(y), remat_release(sum), remat_release(g);
    remat_release(gs), remat_release(h);
}

/* Third order on x^3 through the engine: d3/dx3 sum(x^3) = 6. */
Test(double_backward_checkpoint, third_order) {
    const double xv[1] = {0.7};
    const int64_t s[1] = {1};
    remat_tensor *x = rt_leaf(rt_tensor(1, s, REMAT_F64, xv)), *y = NULL, *cur = NULL;
    RT_OK(remat_pow_scalar(&y, x, 3.0));
    RT_OK(remat_sum_all(&cur, y));
    const remat_backward_options o = {.create_graph = true};
    double want[3] = {3 * 0.49, 6 * 0.7, 6};
    for (int k = 0; k < 3; k++) {
        remat_tensor *g = NULL, *gs = NULL;
        RT_OK(remat_grad_ex(1, &cur, NULL, 1, &x, &o, &g));
        RT_OK(remat_sum_all(&gs, g));
        double *v = rt_values(g);
        cr_assert_float_eq(v[0], want[k], 1e-12, "order %d: %g", k + 1, v[0]);
        free(v);
        remat_release(g);
        remat_release(cur);
        cur = gs;
    }
    remat_release(x), remat_release(y), remat_release(cur);
}

/* create_graph off: the first-order gradient has no graph; retain_graph
 * follows create_graph unless set. */
Test(double_backward_checkpoint, options_defaults) {
    const int64_t s[1] = {2};
    remat_tensor *x = rt_leaf(rt_rand(1, s, REMAT_F64, -1, 1, 2)), *y = NULL, *sum = NULL,
                 *g = NULL;
    RT_OK(remat_exp(&y, x));
    RT_OK(remat_sum_all(&sum, y));
    RT_OK(remat_grad_ex(1, &sum, NULL, 1, &x, NULL, &g));
    cr_assert(!g->requires_grad);
    remat_release_p(&g);
    /* the graph was freed (retain_graph = create_graph = false) */
    RT_FAILS(remat_grad_ex(1, &sum, NULL, 1, &x, NULL, &g), REMAT_ESTATE, "second time");
    remat_release(y), remat_release(sum);
    RT_OK(remat_exp(&y, x));
    RT_OK(remat_sum_all(&sum, y));
    const remat_backward_options cg = {.create_graph = true};
    RT_OK(remat_grad_ex(1, &sum, NULL, 1, &x, &cg, &g)); /* retains the graph */
    remat_release_p(&g);
    RT_OK(remat_grad_ex(1, &sum, NULL, 1, &x, &cg, &g));
    remat_release_p(&g);
    const remat_backward_options bad = {.retain_graph = (remat_tristate)5};
    RT_FAILS(remat_grad_ex(1, &sum, NULL, 1, &x, &bad, &g), REMAT_EINVAL, "retain_graph");
    /* backward_ex with create_graph: .grad has a graph */
    RT_OK(remat_backward_ex(1, &sum, NULL, 0, NULL, &cg));
    cr_assert(remat_tensor_grad(x)->requires_grad, ".grad lacks its graph");
    remat_release(x), remat_release(y), remat_release(sum);
}

/* ---- planner plans ------------------------------------------------------------------------ */
enum { STAGES = 6 };
static remat_tensor *g_sw[STAGES];

static int stage_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    remat_tensor *l = NULL;
    int rc = remat_linear(&l, in[0], g_sw[(int)(intptr_t)ud], NULL);
    if (!rc) rc = remat_tanh(&out[0], l);
    remat_release(l);
    return rc;
}

/* grad of sum(dL/dx ^ 2) wrt every weight, with L = sum(chain(x)^2), the
 * chain run by plan (NULL: plainly). */
static void plan_penalty(const remat_plan *plan, remat_tensor **grads) {
    remat_stage st[STAGES];
    for (int i = 0; i < STAGES; i++) st[i] = (remat_stage){stage_fn, (void *)(intptr_t)i};
    const int64_t xs[2] = {B, D};
    remat_tensor *x = rt_leaf(rt_rand(2, xs, REMAT_F64, -1, 1, 4)), *y = NULL, *sq = NULL,
                 *L = NULL, *gx = NULL, *g2 = NULL, *P = NULL;
    if (plan) {
        RT_OK(remat_plan_run(plan, st, x, &y));
    } else {
        y = remat_retain(x);
        for (int i = 0; i < STAGES; i++) {
            remat_tensor *nx = NULL;
            RT_OK(stage_fn(st[i].user_data, &y, 1, &nx, 1));
            remat_release(y);
            y = nx;
        }
    }
    RT_OK(remat_mul(&sq, y, y));
    RT_OK(remat_sum_all(&L, sq));
    const remat_backward_options o = {.create_graph = true};
    RT_OK(remat_grad_ex(1, &L, NULL, 1, &x, &o, &gx));
    RT_OK(remat_mul(&g2, gx, gx));
    RT_OK(remat_sum_all(&P, g2));
    RT_OK(remat_grad(1, &P, NULL, STAGES, g_sw, false, false, grads));
    remat_release(x), remat_release(y), remat_release(sq), remat_release(L), remat_release(gx);
    remat_release(g2), remat_release(P);
}

Test(double_backward_checkpoint, planner_plans_bitwise) {
    const int64_t ws[2] = {D, D};
    for (int i = 0; i < STAGES; i++)
        g_sw[i] = rt_leaf(rt_rand(2, ws, REMAT_F64, -0.9, 0.9, 40 + (unsigned)i));
    remat_tensor *ref[STAGES], *got[STAGES];
    plan_penalty(NULL, ref);
    remat_plan *plans[2] = {NULL, NULL};
    RT_OK(remat_plan_revolve(&plans[0], NULL, STAGES, 2)); /* nested segments */
    RT_OK(remat_plan_sequential(&plans[1], NULL, STAGES, 3));
    for (int k = 0; k < 2; k++) {
        plan_penalty(plans[k], got);
        for (int i = 0; i < STAGES; i++) {
            cr_assert(rt_bitwise_equal(got[i], ref[i]),
                      "plan %d: weight %d's gradient differs "
                      "(max |diff| %g)",
                      k, i, rt_max_abs_diff(got[i], ref[i]));
            remat_release(got[i]);
        }
        remat_plan_free(plans[k]);
    }
    for (int i = 0; i < STAGES; i++) remat_release(ref[i]), remat_release(g_sw[i]);
}
