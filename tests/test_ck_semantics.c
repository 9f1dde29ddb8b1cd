/* tests/test_ck_semantics.c — issue 14 items 12 and 13: checkpoint
 * conformance details where remat used to differ from PyTorch.
 *  12. checkpoint_sequential with more segments than stages is refused
 *      (it used to be accepted and checkpoint nothing).
 *  13. In an early-stopped recomputation, a stateful selective policy is
 *      not asked about the op whose saved inputs complete the
 *      recomputation (PyTorch saves an op's inputs before its policy sees it, and
 *      stops there). */
#include <string.h>

#include "support/models.h"
#include "support/rt.h"

/* REMAT_TEST_DEVICE=fenced|cuda (make test-fenced, make test-cuda) puts the tensors that the
 * rt helpers make on that device (tests/support/rt.h) */
RT_ON_TEST_DEVICE

Test(ck_semantics, sequential_more_segments_than_stages_refused) {
    rt_mlp_block b;
    rt_mlp_block_init(&b, 8, 16, 0.0, REMAT_F32, 1);
    remat_stage st[3] = {{rt_mlp_block_fn, &b}, {rt_mlp_block_fn, &b}, {rt_mlp_block_fn, &b}};
    int64_t sh[] = {2, 8};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 2), *y = NULL;
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    RT_FAILS(remat_checkpoint_sequential(&y, 3, st, 4, x, &o), REMAT_EINVAL, "segments");
    cr_assert_null(y);
    RT_OK(remat_checkpoint_sequential(&y, 3, st, 3, x, &o)); /* as many: fine */
    remat_release(y);
    remat_release(x);
    rt_mlp_block_free(&b);
}

typedef struct counting {
    int forward, recompute;
    char ops[16][32];
    int n_ops;
} counting;

static remat_checkpoint_policy count_policy(const remat_sac_context *ctx, const char *op, int n,
                                            remat_tensor *const *in, void *st) {
    (void)n, (void)in;
    counting *c = st;
    if (ctx->is_recompute) {
        c->recompute++;
        if (c->n_ops < 16) snprintf(c->ops[c->n_ops++], sizeof c->ops[0], "%s", op);
    } else {
        c->forward++;
    }
    return REMAT_PREFER_RECOMPUTE;
}

typedef struct mlp2 {
    remat_tensor *w1, *w2;
} mlp2;

/* out = linear(gelu(linear(x, w1)), w2): linear saves its inputs first,
 * so the second linear's saves complete the recomputation. */
static int mlp2_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    mlp2 *m = ud;
    remat_tensor *h = NULL, *g = NULL;
    int rc = remat_linear(&h, in[0], m->w1, NULL);
    if (!rc) rc = remat_gelu(&g, h, REMAT_GELU_TANH);
    if (!rc) rc = remat_linear(&out[0], g, m->w2, NULL);
    remat_release(h);
    remat_release(g);
    return rc;
}

Test(ck_semantics, policy_not_asked_about_the_op_that_completes_recomputation) {
    int64_t sw[] = {8, 8}, sx[] = {4, 8};
    mlp2 m = {rt_leaf(rt_rand(2, sw, REMAT_F32, -0.5, 0.5, 1)),
              rt_leaf(rt_rand(2, sw, REMAT_F32, -0.5, 0.5, 2))};
    remat_tensor *x = rt_rand(2, sx, REMAT_F32, -1, 1, 3), *y = NULL, *l = NULL;
    counting c = {0};
    remat_policy *pol = NULL;
    RT_OK(remat_policy_from_fn(&pol, count_policy, &c, NULL));
    remat_sac_config cfg = {.policy = pol};
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    o.context_fn = remat_sac_context_fn;
    o.context_fn_data = &cfg;
    RT_OK(remat_checkpoint(mlp2_fn, &m, 1, &x, 1, &y, &o));
    cr_assert_eq(c.forward, 3);
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    /* PyTorch: linear and gelu are asked; the second linear's input saves fill
     * the last placeholders before its policy call, and PyTorch stops there */
    cr_assert_eq(c.recompute, 2, "policy asked %d times in recomputation (last: %s)", c.recompute,
                 c.n_ops ? c.ops[c.n_ops - 1] : "-");
    cr_assert_str_eq(c.ops[1], "remat_gelu");
    remat_release(l);
    remat_release(y);
    remat_release(x);
    remat_release(m.w1);
    remat_release(m.w2);
    remat_policy_release(pol);
}
