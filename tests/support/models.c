/* tests/support/models.c — see models.h. */
#include "models.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

static remat_tensor *param(int ndim, const int64_t *shape, double bound, remat_dtype dtype,
                           unsigned seed) {
    remat_tensor *t = rt_rand(ndim, shape, dtype, -bound, bound, seed);
    int rc = remat_set_requires_grad(t, true);
    cr_assert_eq(rc, REMAT_OK, "param: %s", remat_last_error());
    return t;
}

static remat_tensor *constant(int ndim, const int64_t *shape, double v, remat_dtype dtype) {
    remat_tensor *t = NULL;
    int rc = remat_full(&t, ndim, shape, v, dtype, REMAT_DEVICE_CPU);
    cr_assert_eq(rc, REMAT_OK, "constant: %s", remat_last_error());
    t = rt_to_test_device(t);
    rc = remat_set_requires_grad(t, true);
    cr_assert_eq(rc, REMAT_OK, "constant: %s", remat_last_error());
    return t;
}

/* ---- MLP block -------------------------------------------------------------------- */
void rt_mlp_block_init(rt_mlp_block *b, int dim, int hidden, double p_drop, remat_dtype dtype,
                       unsigned seed) {
    b->dim = dim;
    b->hidden = hidden;
    b->p_drop = p_drop;
    b->gelu = REMAT_GELU_TANH;
    b->calls = 0;
    int64_t s1[] = {hidden, dim}, s2[] = {dim, hidden}, sh[] = {hidden}, sd[] = {dim};
    b->w1 = param(2, s1, 1.0 / sqrt(dim), dtype, seed * 4 + 1);
    b->b1 = param(1, sh, 1.0 / sqrt(dim), dtype, seed * 4 + 2);
    b->w2 = param(2, s2, 1.0 / sqrt(hidden), dtype, seed * 4 + 3);
    b->b2 = param(1, sd, 1.0 / sqrt(hidden), dtype, seed * 4 + 4);
}

void rt_mlp_block_free(rt_mlp_block *b) {
    remat_release_p(&b->w1);
    remat_release_p(&b->b1);
    remat_release_p(&b->w2);
    remat_release_p(&b->b2);
}

int rt_mlp_block_params(rt_mlp_block *b, remat_tensor **p) {
    p[0] = b->w1;
    p[1] = b->b1;
    p[2] = b->w2;
    p[3] = b->b2;
    return 4;
}

int rt_mlp_block_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    rt_mlp_block *b = ud;
    if (n_in != 1 || n_out != 1 || !in[0])
        return remat_set_error(REMAT_EINVAL, "rt_mlp_block_fn: one input, one output");
    b->calls++;
    remat_scope *s;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h = NULL, *g = NULL, *d = NULL, *y = NULL, *r = NULL;
    rc = remat_linear(&h, in[0], b->w1, b->b1);
    if (!rc) rc = remat_gelu(&g, h, b->gelu);
    d = g;
    if (!rc && b->p_drop > 0) rc = remat_dropout(&d, g, b->p_drop, true);
    if (!rc) rc = remat_linear(&y, d, b->w2, b->b2);
    if (!rc) rc = remat_add(&r, in[0], y);
    if (!rc) out[0] = remat_scope_keep(r);
    remat_scope_end(s);
    return rc;
}

/* ---- transformer block: models/gpt_block.c ------------------------------------------ */
void rt_tblock_init(rt_tblock *b, int dim, int heads, int seq, double p_drop, remat_dtype dtype,
                    unsigned seed) {
    b->dim = dim;
    b->heads = heads;
    b->seq = seq;
    b->p_drop = p_drop;
    b->tagged = false;
    b->calls = 0;
    /* uniform in +-1/sqrt(fan_in), each from its own seed; norms 1 and 0 */
    gpt_weight_spec sp[GPT_BLOCK_N_WEIGHTS];
    gpt_block_weight_specs(dim, sp);
    unsigned k = seed * 16;
    for (int i = 0; i < GPT_BLOCK_N_WEIGHTS; i++) {
        remat_tensor **slot = gpt_block_weight_slot(&b->w, i);
        if (sp[i].kind == GPT_W_GAIN || sp[i].kind == GPT_W_SHIFT)
            *slot = constant(sp[i].ndim, sp[i].shape, sp[i].kind == GPT_W_GAIN, dtype);
        else *slot = param(sp[i].ndim, sp[i].shape, 1.0 / sqrt((double)sp[i].fan_in), dtype, ++k);
    }
    remat_tensor *m = NULL;
    int rc = gpt_causal_mask(&m, seq, REMAT_DEVICE_CPU);
    cr_assert_eq(rc, REMAT_OK, "mask: %s", remat_last_error());
    b->mask = rt_to_test_device(m);
}

void rt_tblock_free(rt_tblock *b) {
    gpt_block_weights_release(&b->w);
    remat_release_p(&b->mask);
}

int rt_tblock_params(rt_tblock *b, remat_tensor **p) { return gpt_block_weights_list(&b->w, p); }

int rt_tblock_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    rt_tblock *b = ud;
    if (n_in != 1 || n_out != 1 || !in[0] || remat_ndim(in[0]) != 3)
        return remat_set_error(REMAT_EINVAL, "rt_tblock_fn: one (B, T, D) input, one output");
    b->calls++;
    gpt_block_config cfg = {.heads = b->heads,
                            .mask = b->mask,
                            .p_drop = b->p_drop,
                            .gelu = REMAT_GELU_ERF,
                            .tags = b->tagged};
    return gpt_block_forward(&b->w, &cfg, in[0], &out[0]);
}

int rt_sum_sq_loss(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud, (void)n_in, (void)n_out;
    remat_tensor *sq = NULL;
    int rc = remat_mul(&sq, in[0], in[0]);
    if (!rc) rc = remat_sum_all(&out[0], sq);
    remat_release(sq);
    return rc;
}

remat_tensor *rt_stages_run(const remat_stage *st, int n, remat_tensor *x) {
    remat_tensor *cur = remat_retain(x);
    for (int k = 0; k < n; k++) {
        remat_tensor *nx = NULL;
        RT_OK(st[k].fn(st[k].user_data, &cur, 1, &nx, 1));
        remat_release(cur);
        cur = nx;
    }
    return cur;
}

void rt_zero_grads(int n, remat_tensor *const *params) {
    for (int i = 0; i < n; i++) remat_set_grad(params[i], NULL);
}

size_t rt_bytes(int n, remat_tensor *const *tensors) {
    size_t s = 0;
    for (int i = 0; i < n; i++) s += remat_storage_nbytes(tensors[i]);
    return s;
}

/* ---- running a stack of blocks ------------------------------------------------------------ */
void rt_grads_free(rt_grads *g) {
    for (int i = 0; i < g->n; i++) remat_release(g->g[i]);
    remat_release(g->out);
    memset(g, 0, sizeof *g);
}

void rt_run_blocks(uint64_t seed, int n, remat_checkpoint_fn fn, void **uds, remat_tensor **params,
                   int n_params, remat_tensor *x, const remat_checkpoint_options *o,
                   rt_grads *out) {
    remat_manual_seed(seed);
    rt_zero_grads(n_params, params);
    rt_zero_grads(1, &x);
    remat_tensor *h = remat_retain(x);
    for (int i = 0; i < n; i++) {
        remat_tensor *y = NULL;
        if (o) RT_OK(remat_checkpoint(fn, uds[i], 1, &h, 1, &y, o));
        else RT_OK(fn(uds[i], &h, 1, &y, 1));
        remat_release(h);
        h = y;
    }
    remat_tensor *l;
    RT_OK(remat_sum_all(&l, h));
    RT_OK(remat_backward_scalar(l));
    remat_release(l);
    out->out = h;
    out->n = 0;
    out->g[out->n++] = remat_retain(remat_tensor_grad(x));
    for (int i = 0; i < n_params; i++)
        out->g[out->n++] = remat_retain(remat_tensor_grad(params[i]));
}

void rt_assert_same_grads(const rt_grads *a, const rt_grads *b, const char *what) {
    cr_assert_eq(a->n, b->n);
    cr_assert(rt_bitwise_equal(a->out, b->out), "%s: outputs differ", what);
    for (int i = 0; i < a->n; i++) {
        cr_assert_not_null(a->g[i], "%s: gradient %d missing", what, i);
        cr_assert_not_null(b->g[i], "%s: gradient %d missing", what, i);
        cr_assert(rt_bitwise_equal(a->g[i], b->g[i]), "%s: gradient %d differs (max |d| %g)", what,
                  i, rt_max_abs_diff(a->g[i], b->g[i]));
    }
}

rt_net2 rt_net2_make(void) {
    int64_t sx[] = {16, 8}, sw1[] = {32, 8}, sb1[] = {32}, sw2[] = {4, 32}, st[] = {16, 4};
    rt_net2 n = {rt_rand(2, sx, REMAT_F32, -1, 1, 1), rt_rand(2, sw1, REMAT_F32, -0.3, 0.3, 2),
                 rt_rand(1, sb1, REMAT_F32, -0.1, 0.1, 3), rt_rand(2, sw2, REMAT_F32, -0.3, 0.3, 4),
                 rt_rand(2, st, REMAT_F32, -1, 1, 5)};
    remat_tensor *leaves[] = {n.x, n.w1, n.b1, n.w2};
    for (int i = 0; i < 4; i++) RT_OK(remat_set_requires_grad(leaves[i], true));
    return n;
}

void rt_net2_free(rt_net2 *n) {
    remat_tensor *all[] = {n->x, n->w1, n->b1, n->w2, n->t};
    for (int i = 0; i < 5; i++) remat_release(all[i]);
}

void rt_profile_chain(remat_profile **prof, remat_op_profile **ops, remat_step_profile *step, int n,
                      const remat_stage *stages, remat_tensor *x, remat_checkpoint_fn head) {
    remat_profile_options po = {.runs = 1};
    RT_OK(remat_profile_stages(prof, n, stages, x, &po));
    RT_OK(remat_profile_ops(ops, n, stages, x, &po));
    remat_profile *hp = NULL;
    remat_stage hs = {head, NULL};
    RT_OK(remat_profile_stages(&hp, 1, &hs, x, &po));
    step->head = hp->stages[0];
    remat_profile_free(hp);
}

void rt_fix_op_times(remat_profile *prof, remat_op_profile *ops, remat_step_profile *step) {
    for (int s = 0; s < ops->n_stages; s++) {
        double t = 0;
        for (int i = 0; i < ops->stages[s].n_ops; i++) t += ops->stages[s].ops[i].time = 1e-3;
        prof->stages[s].fwd_time = t;
        prof->stages[s].bwd_time = 2 * t;
    }
    step->head.fwd_time = 1e-3;
    step->head.bwd_time = 2e-3;
}

void rt_plan_budget_range(const remat_profile *prof, const remat_op_profile *ops,
                          const remat_step_profile *step, const remat_plan_options *opts,
                          size_t *lo, size_t *top) {
    remat_plan *sa = NULL;
    RT_OK(remat_plan_create_ops(&sa, prof, ops, step, SIZE_MAX, opts));
    *top = sa->peak_store_all;
    *lo = sa->min_budget_bytes;
    remat_plan_free(sa);
}
