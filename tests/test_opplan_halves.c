/* tests/test_opplan_halves.c — half-block stages (remat_block_part) under the op-level
 * planner, on the transformer block of models/gpt_block.h with dropout (composed
 * attention, dropout on the probabilities and both residual branches):
 *   - the halves, and any mix of whole blocks then halves, compute the block chain's
 *     output and gradients bit for bit;
 *   - op-level plans over the halves fit the whole-step budget (measured step peak <=
 *     predicted <= budget), are never slower at a larger budget, give none's gradients
 *     bitwise, and reach below the smallest budget any whole-block plan fits. "Measured"
 *     less the loss's gradient (4 bytes here): the whole-step model gives the head's output
 *     gradient no bytes (docs/planner.md, "Known gaps"), and with halves the step's peak
 *     can fall at the head's backward, where that gradient is live;
 *   - spliced profiles (remat_profile_splice, remat_op_profile_splice) renumber same_as,
 *     plan the mixed chain and run it within the budget; their argument errors.
 * The library models' half stages (remat_model_half_stages) are run in test_models. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/planner.h"
#include "support/models.h"
#include "support/rt.h"

#define HB_N 4 /* blocks */
#define HB_DIM 32
#define HB_HEADS 2
#define HB_SEQ 16
#define HB_BATCH 4

typedef struct half_ud {
    rt_tblock *b;
    remat_block_part part;
} half_ud;

/* One block, or one of its halves, of rt_tblock's weights. */
static int half_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    const half_ud *h = ud;
    gpt_block_config cfg = {.heads = h->b->heads,
                            .mask = h->b->mask,
                            .p_drop = h->b->p_drop,
                            .gelu = REMAT_GELU_ERF,
                            .part = h->part};
    return gpt_block_forward(&h->b->w, &cfg, in[0], &out[0]);
}

typedef struct hchain {
    rt_tblock blk[HB_N];
    half_ud whole[HB_N], halves[2 * HB_N];
    remat_stage wst[HB_N], hst[2 * HB_N];
    remat_tensor *params[HB_N * RT_MAX_PARAMS];
    int n_params;
    remat_tensor *x;
} hchain;

static void hchain_init(hchain *c) {
    c->n_params = 0;
    for (int k = 0; k < HB_N; k++) {
        rt_tblock_init(&c->blk[k], HB_DIM, HB_HEADS, HB_SEQ, 0.1, REMAT_F32, 30u + (unsigned)k);
        c->whole[k] = (half_ud){&c->blk[k], REMAT_BLOCK_WHOLE};
        c->wst[k] = (remat_stage){half_fn, &c->whole[k]};
        for (int h = 0; h < 2; h++) {
            c->halves[2 * k + h] = (half_ud){&c->blk[k], h ? REMAT_BLOCK_MLP : REMAT_BLOCK_ATTN};
            c->hst[2 * k + h] = (remat_stage){half_fn, &c->halves[2 * k + h]};
        }
        c->n_params += rt_tblock_params(&c->blk[k], c->params + c->n_params);
    }
    int64_t xs[3] = {HB_BATCH, HB_SEQ, HB_DIM};
    c->x = rt_rand(3, xs, REMAT_F32, -1, 1, 5);
    RT_OK(remat_set_requires_grad(c->x, true));
}

static void hchain_free(hchain *c) {
    for (int k = 0; k < HB_N; k++) rt_tblock_free(&c->blk[k]);
    remat_release(c->x);
}

/* The chain of the first `whole` blocks whole, then the rest in halves, into st. */
static int mixed(const hchain *c, int whole, remat_stage *st) {
    int n = 0;
    for (int k = 0; k < whole; k++) st[n++] = c->wst[k];
    for (int i = 2 * whole; i < 2 * HB_N; i++) st[n++] = c->hst[i];
    return n;
}

/* One step over the n stages, under plan (NULL: no checkpointing), .grad cleared first;
 * returns the step's allocator peak; grads (may be NULL) get .grad of x and every
 * parameter, *y (may be NULL) the chain's output. */
static size_t run_step(hchain *c, int n, const remat_stage *st, const remat_plan *plan,
                       remat_tensor **grads, remat_tensor **out) {
    rt_zero_grads(c->n_params, c->params);
    RT_OK(remat_set_grad(c->x, NULL));
    remat_manual_seed(91);
    rt_device_reset_peak();
    remat_tensor *y = NULL, *loss = NULL;
    if (plan) {
        RT_OK(remat_plan_run(plan, st, c->x, &y));
    } else {
        y = rt_stages_run(st, n, c->x);
    }
    RT_OK(rt_sum_sq_loss(NULL, &y, 1, &loss, 1));
    RT_OK(remat_backward_scalar(loss));
    remat_release(loss);
    size_t peak = rt_device_stats().peak_bytes;
    if (out) *out = y;
    else remat_release(y);
    if (grads) {
        grads[0] = remat_retain(remat_tensor_grad(c->x));
        for (int i = 0; i < c->n_params; i++)
            grads[1 + i] = remat_retain(remat_tensor_grad(c->params[i]));
    }
    return peak;
}

static void release_all(int n, remat_tensor **t) {
    for (int i = 0; i < n; i++) remat_release_p(&t[i]);
}

Test(opplan_halves, halves_compose_to_the_block) {
    hchain c;
    hchain_init(&c);
    const int ng = 1 + c.n_params;
    remat_tensor *ref[1 + HB_N * RT_MAX_PARAMS], *got[1 + HB_N * RT_MAX_PARAMS], *y0, *y1;
    run_step(&c, HB_N, c.wst, NULL, ref, &y0);
    for (int whole = 0; whole < HB_N; whole++) { /* all halves, ..., only the last block */
        remat_stage st[2 * HB_N];
        int n = mixed(&c, whole, st);
        run_step(&c, n, st, NULL, got, &y1);
        cr_assert(rt_bitwise_equal(y1, y0), "%d whole blocks: the output differs", whole);
        for (int i = 0; i < ng; i++)
            cr_assert(rt_bitwise_equal(got[i], ref[i]),
                      "%d whole blocks then halves: gradient %d differs (max diff %g)", whole, i,
                      rt_max_abs_diff(got[i], ref[i]));
        release_all(ng, got);
        remat_release(y1);
    }
    /* what the dropouts drew is part of the bits: without them the output differs */
    for (int k = 0; k < HB_N; k++) c.blk[k].p_drop = 0;
    run_step(&c, 2 * HB_N, c.hst, NULL, NULL, &y1);
    cr_assert(!rt_bitwise_equal(y1, y0), "dropout had no effect: the test would not see it");
    remat_release(y1);
    remat_release(y0);
    release_all(ng, ref);
    hchain_free(&c);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Whether some block's halves are planned differently from each other: one stored and the
 * other checkpointed (what whole-block stages cannot do). */
static bool halves_differ(const remat_plan *p, int first_half) {
    for (int k = first_half; k + 1 < p->n_stages; k += 2) {
        const remat_plan_stage *a = &p->stages[k], *m = &p->stages[k + 1];
        if (a->action != m->action) return true;
    }
    return false;
}

Test(opplan_halves, half_plans_fit_the_step_budget_with_bitwise_gradients) {
    hchain c;
    hchain_init(&c);
    const int ng = 1 + c.n_params;
    remat_tensor *ref[1 + HB_N * RT_MAX_PARAMS], *got[1 + HB_N * RT_MAX_PARAMS];
    run_step(&c, HB_N, c.wst, NULL, NULL, NULL); /* warm-up: caches, first-touch */
    run_step(&c, HB_N, c.wst, NULL, ref, NULL);
    rt_zero_grads(c.n_params, c.params);
    RT_OK(remat_set_grad(c.x, NULL));
    remat_step_profile step = {0};
    step.fixed_bytes = rt_device_current_bytes();
    remat_profile *wprof = NULL, *hprof = NULL;
    remat_op_profile *wops = NULL, *hops = NULL;
    rt_profile_chain(&wprof, &wops, &step, HB_N, c.wst, c.x, rt_sum_sq_loss);
    rt_profile_chain(&hprof, &hops, &step, 2 * HB_N, c.hst, c.x, rt_sum_sq_loss);
    size_t wlo, wtop, lo, top;
    rt_plan_budget_range(wprof, wops, &step, NULL, &wlo, &wtop);
    rt_plan_budget_range(hprof, hops, &step, NULL, &lo, &top);
    const size_t loss_grad = step.head.output_bytes; /* the 0-dim loss: not modelled */
    cr_assert_eq(loss_grad, sizeof(float));
    cr_assert_lt(lo, wlo, "the halves reach below the whole blocks' minimum (%zu, %zu)", lo, wlo);
    int differ = 0, n = 10;
    double prev = INFINITY;
    for (int b = 0; b <= n; b++) {
        size_t budget = lo + (top - lo) * (size_t)b / (size_t)n;
        remat_plan *plan = NULL;
        RT_OK(remat_plan_create_ops(&plan, hprof, hops, &step, budget, NULL));
        cr_assert_leq(plan->peak_bytes, budget);
        cr_assert_leq(plan->time, prev, "budget %zu: slower than at a smaller budget", budget);
        prev = plan->time;
        differ += halves_differ(plan, 0);
        size_t peak = run_step(&c, 2 * HB_N, c.hst, plan, got, NULL);
        if (getenv("OPPLAN_VERBOSE")) {
            fprintf(stderr, "budget %zu predicted %zu measured %zu time %.3f ms\n", budget,
                    plan->peak_bytes, peak, plan->time * 1e3);
            remat_plan_explain(plan, hops, peak, 0, stderr);
        }
        cr_assert_leq(peak - loss_grad, plan->peak_bytes,
                      "budget %zu: measured %zu above the prediction %zu", budget, peak,
                      plan->peak_bytes);
        for (int i = 0; i < ng; i++)
            cr_assert(rt_bitwise_equal(got[i], ref[i]), "budget %zu: gradient %d differs", budget,
                      i);
        release_all(ng, got);
        remat_plan_free(plan);
    }
    cr_assert_gt(differ, 0, "some plan treats a block's two halves differently");
    release_all(ng, ref);
    remat_profile_free(wprof), remat_profile_free(hprof);
    remat_op_profile_free(wops), remat_op_profile_free(hops);
    hchain_free(&c);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(opplan_halves, spliced_profiles_plan_the_mixed_chain) {
    hchain c;
    hchain_init(&c);
    const int ng = 1 + c.n_params, whole = 2;
    remat_tensor *ref[1 + HB_N * RT_MAX_PARAMS], *got[1 + HB_N * RT_MAX_PARAMS];
    run_step(&c, HB_N, c.wst, NULL, NULL, NULL);
    run_step(&c, HB_N, c.wst, NULL, ref, NULL);
    rt_zero_grads(c.n_params, c.params);
    RT_OK(remat_set_grad(c.x, NULL));
    remat_step_profile step = {0};
    step.fixed_bytes = rt_device_current_bytes();
    remat_profile *wprof = NULL, *hprof = NULL, *sp = NULL;
    remat_op_profile *wops = NULL, *hops = NULL, *sops = NULL;
    rt_profile_chain(&wprof, &wops, &step, HB_N, c.wst, c.x, rt_sum_sq_loss);
    rt_profile_chain(&hprof, &hops, &step, 2 * HB_N, c.hst, c.x, rt_sum_sq_loss);
    const int hn = 2 * (HB_N - whole), n = whole + hn;
    RT_OK(remat_profile_splice(&sp, wprof, 0, whole, hprof, 2 * whole, hn));
    RT_OK(remat_op_profile_splice(&sops, wops, 0, whole, hops, 2 * whole, hn));
    cr_assert_eq(sp->n_stages, n);
    cr_assert_eq(sops->n_stages, n);
    /* blocks 0, 1 whole (1 repeats 0), then attention, MLP, attention (repeats 2), MLP (3) */
    const int want_same[] = {0, 0, 2, 3, 2, 3};
    for (int k = 0; k < n; k++) {
        const int src = k < whole ? k : 2 * whole + (k - whole);
        const remat_stage_profile *from = k < whole ? &wprof->stages[src] : &hprof->stages[src];
        const remat_stage_ops *ofrom = k < whole ? &wops->stages[src] : &hops->stages[src];
        cr_assert(!memcmp(&sp->stages[k], from, sizeof *from), "stage %d's profile", k);
        cr_assert_eq(sops->stages[k].n_ops, ofrom->n_ops, "stage %d's ops", k);
        cr_assert(
            !memcmp(sops->stages[k].ops, ofrom->ops, sizeof *ofrom->ops * (size_t)ofrom->n_ops));
        cr_assert_eq(sops->stages[k].same_as, want_same[k], "stage %d repeats %d, not %d", k,
                     sops->stages[k].same_as, want_same[k]);
    }
    size_t lo, top;
    rt_plan_budget_range(sp, sops, &step, NULL, &lo, &top);
    remat_stage st[2 * HB_N];
    cr_assert_eq(mixed(&c, whole, st), n);
    for (int b = 1; b <= 2; b++) {
        size_t budget = lo + (top - lo) * (size_t)b / 4;
        remat_plan *plan = NULL;
        RT_OK(remat_plan_create_ops(&plan, sp, sops, &step, budget, NULL));
        size_t peak = run_step(&c, n, st, plan, got, NULL);
        cr_assert_leq(peak - step.head.output_bytes, plan->peak_bytes,
                      "budget %zu: measured %zu above the prediction %zu", budget, peak,
                      plan->peak_bytes);
        cr_assert_leq(plan->peak_bytes, budget);
        for (int i = 0; i < ng; i++)
            cr_assert(rt_bitwise_equal(got[i], ref[i]), "budget %zu: gradient %d differs", budget,
                      i);
        release_all(ng, got);
        remat_plan_free(plan);
    }
    remat_profile_free(sp);
    remat_op_profile_free(sops);

    /* refusals: ranges outside a chain, no stage, mismatched bytes, NULLs */
    RT_FAILS(remat_profile_splice(&sp, wprof, 1, HB_N, hprof, 0, 1), REMAT_EINVAL,
             "remat_profile_splice");
    cr_assert_null(sp);
    RT_FAILS(remat_op_profile_splice(&sops, wops, 0, 0, hops, 0, 0), REMAT_EINVAL,
             "at least one stage");
    RT_FAILS(remat_op_profile_splice(&sops, wops, 0, 1, hops, 2 * HB_N, 1), REMAT_EINVAL,
             "remat_op_profile_splice");
    cr_assert_null(sops);
    remat_profile *odd = NULL;
    RT_OK(remat_profile_create(&odd, 1));
    odd->stages[0].input_bytes = 1;
    RT_FAILS(remat_profile_splice(&sp, wprof, 0, 1, odd, 0, 1), REMAT_EINVAL, "is not stage 0's");
    RT_FAILS(remat_profile_splice(NULL, wprof, 0, 1, odd, 0, 1), REMAT_EINVAL, "out is NULL");
    RT_FAILS(remat_op_profile_splice(&sops, NULL, 0, 1, hops, 0, 1), REMAT_EINVAL, "NULL");
    remat_profile_free(odd);
    release_all(ng, ref);
    remat_profile_free(wprof), remat_profile_free(hprof);
    remat_op_profile_free(wops), remat_op_profile_free(hops);
    hchain_free(&c);
    cr_assert_eq(remat_live_tensors(), 0);
}
