/* tests/test_nesting.c — issue 14 item 3: non-reentrant checkpoints nest
 * without a depth limit (the saved-tensor hook stack grows), so the
 * planner's minimum-memory plan for a long chain runs. */
#include <string.h>

#include "support/rt.h"

/* REMAT_TEST_DEVICE=fenced|cuda (make test-fenced, make test-cuda) puts the tensors that the
 * rt helpers make on that device (tests/support/rt.h) */
RT_ON_TEST_DEVICE

typedef struct nest {
    int depth; /* levels still to open below this one */
} nest;

/* out = tanh(x) * 1.5, then the rest of the nest checkpointed inside */
static int nested_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    nest *n = ud;
    remat_tensor *h = NULL, *t = NULL;
    int rc = remat_tanh(&t, in[0]);
    if (!rc) rc = remat_mul_scalar(&h, t, 1.5);
    remat_release(t);
    if (rc) return rc;
    if (n->depth == 0) {
        out[0] = h;
        return REMAT_OK;
    }
    nest *child = n + 1;
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    rc = remat_checkpoint(nested_fn, child, 1, &h, 1, out, &o);
    remat_release(h);
    return rc;
}

static remat_tensor *grad_of(int levels, bool checkpointed) {
    int64_t sh[] = {4};
    remat_tensor *x = rt_leaf(rt_rand(1, sh, REMAT_F64, -1, 1, 7)), *y = NULL, *s = NULL;
    nest *chain = calloc((size_t)levels, sizeof *chain);
    for (int i = 0; i < levels; i++) chain[i].depth = levels - 1 - i;
    if (checkpointed) {
        remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
        RT_OK(remat_checkpoint(nested_fn, chain, 1, &x, 1, &y, &o));
    } else {
        remat_tensor *cur = remat_retain(x);
        for (int i = 0; i < levels; i++) {
            remat_tensor *t = NULL, *h = NULL;
            RT_OK(remat_tanh(&t, cur));
            RT_OK(remat_mul_scalar(&h, t, 1.5));
            remat_release(t);
            remat_release(cur);
            cur = h;
        }
        y = cur;
    }
    RT_OK(remat_sum_all(&s, y));
    RT_OK(remat_backward_scalar(s));
    remat_tensor *g = remat_retain(remat_tensor_grad(x));
    remat_release(s);
    remat_release(y);
    remat_release(x);
    free(chain);
    return g;
}

Test(nesting, two_hundred_nested_non_reentrant_checkpoints) {
    cr_assert_eq(remat_saved_hooks_depth(), 0);
    remat_tensor *g1 = grad_of(200, true), *g0 = grad_of(200, false);
    cr_assert(rt_bitwise_equal(g1, g0), "nested checkpoints change the gradient");
    cr_assert_eq(remat_saved_hooks_depth(), 0);
    remat_release(g1);
    remat_release(g0);
}

static void *pack_never(void *ud, remat_tensor *t) {
    (void)ud, (void)t;
    return NULL;
}
static remat_status unpack_never(void *ud, void *handle, remat_tensor **out) {
    (void)ud, (void)handle, (void)out;
    return REMAT_ECALLBACK;
}

Test(nesting, hook_stack_grows_and_shrinks) {
    remat_saved_hooks h = {pack_never, unpack_never, NULL, NULL}; /* nothing is saved */
    for (int i = 0; i < 300; i++) {
        if (i % 3 == 2) RT_OK(remat_saved_hooks_push_disabled());
        else RT_OK(remat_saved_hooks_push(&h));
    }
    cr_assert_eq(remat_saved_hooks_depth(), 300);
    for (int i = 0; i < 300; i++) RT_OK(remat_saved_hooks_pop());
    RT_FAILS(remat_saved_hooks_pop(), REMAT_ESTATE, NULL);
}

static int stage_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    return remat_tanh(&out[0], in[0]);
}

/* The planner's minimum-memory plan of a 100-stage chain nests checkpoints
 * about as deep as the chain is long. */
Test(nesting, planner_min_memory_plan_of_100_stages_runs) {
    enum { N = 100 };
    remat_profile *p = NULL;
    RT_OK(remat_profile_create(&p, N));
    for (int i = 0; i < N; i++) {
        remat_stage_profile *s = &p->stages[i];
        s->fwd_time = s->bwd_time = 1e-3;
        s->input_bytes = s->output_bytes = 4096;
        s->saved_bytes = 4096;
        s->fwd_peak = 8192;
        s->fwd_peak_nosave = 4096;
        s->bwd_peak = 8192;
    }
    size_t min = 0;
    RT_OK(remat_plan_min_budget(p, &min));
    remat_plan *plan = NULL;
    remat_plan_options po = {.mem_slots = 200};
    RT_OK(remat_plan_create_ex(&plan, p, min, &po));
    remat_stage stages[N];
    for (int i = 0; i < N; i++) stages[i] = (remat_stage){stage_fn, NULL};
    int64_t sh[] = {1024};
    remat_tensor *x = rt_leaf(rt_rand(1, sh, REMAT_F32, -1, 1, 3)), *y = NULL, *s = NULL;
    RT_OK(remat_plan_run(plan, stages, x, &y));
    RT_OK(remat_sum_all(&s, y));
    RT_OK(remat_backward_scalar(s));
    cr_assert_not_null(remat_tensor_grad(x));
    remat_release(s);
    remat_release(y);
    remat_release(x);
    remat_plan_free(plan);
    remat_profile_free(p);
}
