/* tests/test_plan_auto.c — the one-call planners, remat_plan_auto and
 * remat_checkpoint_budget: per op by default (remat_profile_ops +
 * remat_plan_create_ops), whole blocks with remat_profile_options.blocks_only.
 * On a chain of transformer blocks with dropout: predicted peak <= budget,
 * measured peak <= budget + the chain-share model's known slack, gradients
 * bitwise those of no checkpointing; the budget call's cache profiles once
 * and runs the same op-level plan every step. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/planner.h"
#include "support/models.h"
#include "support/rt.h"

#define N 4
#define DIM 32
#define HEADS 2
#define SEQ 16
#define BATCH 16
#define MAX_GRADS (1 + N * RT_MAX_PARAMS)

typedef struct chain {
    rt_tblock blk[N];
    remat_stage stages[N];
    remat_tensor *params[N * RT_MAX_PARAMS];
    int n_params;
    remat_tensor *x;
} chain;

static void chain_init(chain *c) {
    c->n_params = 0;
    for (int k = 0; k < N; k++) {
        rt_tblock_init(&c->blk[k], DIM, HEADS, SEQ, 0.1, REMAT_F32, 30u + (unsigned)k);
        c->stages[k] = (remat_stage){rt_tblock_fn, &c->blk[k]};
        c->n_params += rt_tblock_params(&c->blk[k], c->params + c->n_params);
    }
    int64_t xs[3] = {BATCH, SEQ, DIM};
    c->x = rt_rand(3, xs, REMAT_F32, -1, 1, 5);
    RT_OK(remat_set_requires_grad(c->x, true));
}

static void chain_free(chain *c) {
    for (int k = 0; k < N; k++) rt_tblock_free(&c->blk[k]);
    remat_release(c->x);
}

static int calls(const chain *c) {
    int n = 0;
    for (int k = 0; k < N; k++) n += c->blk[k].calls;
    return n;
}

/* How a step runs the chain. */
typedef struct how {
    const remat_plan *plan;              /* remat_plan_run */
    bool budget_call;                    /* else remat_checkpoint_budget_ex with: */
    size_t budget;                       /*   this budget */
    const remat_profile_options *cb_opt; /*   and these options */
} how;

/* One step (.grad cleared first, the same seed every time, loss = sum(y)):
 * returns the allocator peak above the bytes live when the chain starts;
 * grads (if not NULL) receive x's and the parameters' .grad. */
static size_t step(chain *c, const how *h, remat_tensor **grads) {
    rt_zero_grads(c->n_params, c->params);
    RT_OK(remat_set_grad(c->x, NULL));
    remat_manual_seed(77);
    size_t base = rt_device_current_bytes();
    rt_device_reset_peak();
    remat_tensor *y = NULL, *loss = NULL;
    if (h && h->plan) {
        RT_OK(remat_plan_run(h->plan, c->stages, c->x, &y));
    } else if (h && h->budget_call) {
        RT_OK(remat_checkpoint_budget_ex(&y, N, c->stages, h->budget, c->x, h->cb_opt));
    } else {
        remat_tensor *cur = remat_retain(c->x);
        for (int k = 0; k < N; k++) {
            remat_tensor *nx = NULL;
            RT_OK(rt_tblock_fn(&c->blk[k], &cur, 1, &nx, 1));
            remat_release(cur);
            cur = nx;
        }
        y = cur;
    }
    RT_OK(remat_sum_all(&loss, y));
    remat_release(y);
    RT_OK(remat_backward_scalar(loss));
    remat_release(loss);
    size_t peak = rt_device_stats().peak_bytes - base;
    if (grads) {
        grads[0] = remat_retain(remat_tensor_grad(c->x));
        for (int i = 0; i < c->n_params; i++)
            grads[1 + i] = remat_retain(remat_tensor_grad(c->params[i]));
    }
    return peak;
}

static void assert_same_grads(chain *c, remat_tensor **got, remat_tensor **ref, const char *what,
                              size_t budget) {
    for (int i = 0; i <= c->n_params; i++) {
        cr_assert(rt_bitwise_equal(got[i], ref[i]), "%s, budget %zu: gradient %d differs", what,
                  budget, i);
        remat_release(got[i]);
    }
}

/* What the chain-share model leaves out (include/remat/planner.h, test_planner's
 * executed_peak_within_budget): the parameters' gradient buffers the engine keeps
 * until the end of backward, and a quarter of an activation for the loss and the
 * engine's bookkeeping. */
static size_t slack(const chain *c) {
    return rt_bytes(c->n_params, c->params) + (size_t)BATCH * SEQ * DIM * sizeof(float) / 4;
}

static int kept_ops(const remat_plan *p) {
    int n = 0;
    for (int k = 0; k < p->n_stages; k++)
        for (int i = 0; p->stages[k].keep && i < p->stages[k].n_ops; i++)
            n += p->stages[k].keep[i] != REMAT_OP_RECOMPUTE;
    return n;
}

/* remat_plan_auto plans per op: budgets from the minimum to store-all give plans
 * whose checkpointed stages keep some of their ops (REMAT_PLAN_OPS), that fit,
 * and that give the gradients of no checkpointing; blocks_only gives the
 * block-level plans of remat_plan_create, without keep sets. */
Test(plan_auto, plans_per_op_by_default) {
    chain c;
    chain_init(&c);
    remat_tensor *ref[MAX_GRADS], *got[MAX_GRADS];
    step(&c, NULL, NULL); /* warm-up */
    step(&c, NULL, ref);
    const remat_profile_options po = {.runs = 1}, blocks = {.runs = 1, .blocks_only = true};
    remat_plan *sa = NULL;
    RT_OK(remat_plan_auto(&sa, N, c.stages, c.x, SIZE_MAX, &po));
    cr_assert(sa->has_profile);
    size_t lo = sa->min_budget_bytes, top = sa->peak_store_all;
    remat_plan_free(sa);
    cr_assert_lt(lo, top);
    int partial = 0;
    for (int b = 0; b < 6; b++) {
        size_t budget = lo + (top - lo) * (size_t)b / 6;
        remat_plan *p = NULL, *pb = NULL;
        RT_OK(remat_plan_auto(&p, N, c.stages, c.x, budget, &po));
        cr_assert_leq(p->peak_bytes, budget);
        cr_assert_eq(p->budget_bytes, budget);
        partial += p->kind == REMAT_PLAN_OPS && kept_ops(p) > 0;
        const how h = {.plan = p};
        size_t peak = step(&c, &h, got);
        if (getenv("PLAN_AUTO_VERBOSE")) {
            fprintf(stderr, "budget %zu: kind %d, predicted %zu, measured %zu (+ slack %zu)\n",
                    budget, (int)p->kind, p->peak_bytes, peak, slack(&c));
            remat_plan_explain(p, NULL, 0, 0, stderr);
        }
        cr_assert_leq(peak, budget + slack(&c), "budget %zu: measured %zu, predicted %zu", budget,
                      peak, p->peak_bytes);
        assert_same_grads(&c, got, ref, "remat_plan_auto", budget);
        /* the block-level plan the call gave before op-level planning */
        RT_OK(remat_plan_auto(&pb, N, c.stages, c.x, budget, &blocks));
        cr_assert_neq(pb->kind, REMAT_PLAN_OPS);
        cr_assert_eq(kept_ops(pb), 0);
        for (int k = 0; k < N; k++) cr_assert_null(pb->stages[k].keep);
        cr_assert_leq(pb->peak_bytes, budget);
        remat_plan_free(p);
        remat_plan_free(pb);
    }
    cr_assert_gt(partial, 0, "some budget must keep part of a block");
    /* errors: below the minimum, with the minimum named; out NULLed */
    remat_plan *p = (remat_plan *)0x1;
    RT_FAILS(remat_plan_auto(&p, N, c.stages, c.x, lo - 1, &po), REMAT_EINVAL, "minimum");
    cr_assert_null(p);
    cr_assert(strstr(remat_last_error(), "remat_plan_auto"), "%s", remat_last_error());
    for (int i = 0; i <= c.n_params; i++) remat_release(ref[i]);
    chain_free(&c);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* remat_checkpoint_budget profiles the stages and their ops on its first call
 * (more stage runs than a blocks_only profile), then runs the cached op-level plan
 * every step: the same stage calls each time, measured peak within the budget's
 * slack, gradients bitwise those of no checkpointing. Options key the cache apart;
 * remat_checkpoint_budget_clear drops it. */
Test(plan_auto, checkpoint_budget_caches_op_level_plans) {
    chain c;
    chain_init(&c);
    remat_tensor *ref[MAX_GRADS], *got[MAX_GRADS];
    step(&c, NULL, NULL);
    step(&c, NULL, ref);
    remat_plan *sa = NULL;
    RT_OK(remat_plan_auto(&sa, N, c.stages, c.x, SIZE_MAX, &(remat_profile_options){.runs = 1}));
    size_t budget = sa->min_budget_bytes + (sa->peak_store_all - sa->min_budget_bytes) / 3;
    remat_plan_free(sa);

    const how dflt = {.budget_call = true, .budget = budget, .cb_opt = NULL};
    int n_calls[3];
    for (int rep = 0; rep < 3; rep++) {
        int before = calls(&c);
        size_t peak = step(&c, &dflt, got);
        n_calls[rep] = calls(&c) - before;
        if (rep > 0) /* the first step also profiles */
            cr_assert_leq(peak, budget + slack(&c), "step %d: measured %zu, budget %zu", rep, peak,
                          budget);
        assert_same_grads(&c, got, ref, "remat_checkpoint_budget", budget);
    }
    cr_assert_eq(n_calls[1], n_calls[2], "the cached plan runs the same stages every step");
    cr_assert_gt(n_calls[0], n_calls[1], "the first call profiles");
    const int op_profiling = n_calls[0] - n_calls[1];

    /* whole blocks: a plan of its own (no op profile: fewer stage runs to make it) */
    const remat_profile_options blocks = {.blocks_only = true};
    const how hb = {.budget_call = true, .budget = budget, .cb_opt = &blocks};
    int before = calls(&c);
    step(&c, &hb, got);
    int first_b = calls(&c) - before;
    assert_same_grads(&c, got, ref, "remat_checkpoint_budget_ex (blocks_only)", budget);
    before = calls(&c);
    step(&c, &hb, got);
    int profiling_b = first_b - (calls(&c) - before);
    assert_same_grads(&c, got, ref, "remat_checkpoint_budget_ex (blocks_only)", budget);
    if (getenv("PLAN_AUTO_VERBOSE"))
        fprintf(stderr, "profiling: %d stage runs (stages + ops), %d (stages only)\n", op_profiling,
                profiling_b);
    cr_assert_gt(profiling_b, 0);
    cr_assert_gt(op_profiling, profiling_b, "the default profiles the ops too (%d vs %d runs)",
                 op_profiling, profiling_b);
    /* the default's plan is still cached beside it */
    before = calls(&c);
    step(&c, &dflt, got);
    cr_assert_eq(calls(&c) - before, n_calls[1]);
    assert_same_grads(&c, got, ref, "remat_checkpoint_budget after blocks_only", budget);
    /* cleared: profiled again */
    remat_checkpoint_budget_clear();
    before = calls(&c);
    step(&c, &dflt, got);
    cr_assert_geq(calls(&c) - before, op_profiling + N);
    assert_same_grads(&c, got, ref, "remat_checkpoint_budget after clear", budget);
    remat_checkpoint_budget_clear();

    /* errors leave nothing cached and NULL the output */
    remat_tensor *y = (remat_tensor *)0x1;
    RT_FAILS(remat_checkpoint_budget(&y, N, c.stages, 1, c.x), REMAT_EINVAL, "minimum");
    cr_assert_null(y);
    const remat_profile_options bad = {.runs = -1};
    RT_FAILS(remat_checkpoint_budget_ex(&y, N, c.stages, budget, c.x, &bad), REMAT_EINVAL, "runs");
    cr_assert_null(y);
    for (int i = 0; i <= c.n_params; i++) remat_release(ref[i]);
    chain_free(&c);
    cr_assert_eq(remat_live_tensors(), 0);
}
