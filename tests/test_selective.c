/* tests/test_selective.c — selective activation checkpointing (policies,
 * contexts, the cache and its errors) and named residuals with the JAX
 * presets: policy calls of a stateful policy, SAVE vs RECOMPUTE changing
 * what runs during backward and the allocator numbers, gradients bitwise
 * equal to un-checkpointed runs for every preset (MLP and transformer
 * blocks, with dropout), multi-output and view ops, non-tensor outputs,
 * cache mutation and its opt-out, the extra-backward and missing-op
 * errors, bad arguments, offload to host from the test device, and names
 * on a transformer block. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#include "core/intercept.h"
#include "sac/offload.h"
#include "support/models.h"
#include "support/rt.h"

/* REMAT_TEST_DEVICE=cuda runs these tests on the GPU (tests/support/rt.h) */
RT_ON_TEST_DEVICE

#define SEED 4321

static remat_checkpoint_options sac_opts(remat_sac_config *cfg) {
    remat_checkpoint_options o = {0};
    o.use_reentrant = REMAT_OPT_FALSE;
    o.context_fn = remat_sac_context_fn;
    o.context_fn_data = cfg;
    return o;
}

/* ---- policies: arguments ------------------------------------------------------------------- */
static remat_checkpoint_policy always_save(const remat_sac_context *ctx, const char *op, int n,
                                           remat_tensor *const *in, void *st) {
    (void)ctx, (void)op, (void)n, (void)in, (void)st;
    return REMAT_MUST_SAVE;
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if (!rc) rc = (expr);                                                                      \
    } while (0)

Test(selective, bad_policy_arguments) {
    remat_policy *p = NULL;
    RT_FAILS(remat_policy_from_fn(&p, NULL, NULL, NULL), REMAT_EINVAL, "remat_policy_from_fn");
    cr_assert_null(p);
    RT_FAILS(remat_policy_from_fn(NULL, always_save, NULL, NULL), REMAT_EINVAL, "out");
    RT_FAILS(remat_policy_from_ops(&p, 2, NULL), REMAT_EINVAL, "ops is NULL");
    RT_FAILS(remat_policy_from_ops(&p, -1, NULL), REMAT_EINVAL, "n must be >= 0");
    const char *bad[] = {"remat_linear", NULL};
    RT_FAILS(remat_policy_from_ops(&p, 2, bad), REMAT_EINVAL, "ops[1] is NULL");
    const char *empty[] = {""};
    RT_FAILS(remat_policy_save_only_these_names(&p, 1, empty), REMAT_EINVAL, "empty string");
    RT_FAILS(remat_policy_save_anything_except_these_names(&p, 1, NULL), REMAT_EINVAL,
             "remat_policy_save_anything_except_these_names");
    RT_FAILS(remat_policy_or(&p, NULL, NULL), REMAT_EINVAL, "remat_policy_or");
    cr_assert_null(p);

    remat_checkpoint_contexts pair;
    RT_FAILS(remat_create_selective_checkpoint_contexts(&pair, NULL, false, NULL), REMAT_EINVAL,
             "policy must not be NULL");
    RT_FAILS(remat_create_selective_checkpoint_contexts(NULL, NULL, false, NULL), REMAT_EINVAL,
             "pair");
    RT_FAILS(remat_sac_context_fn(NULL, &pair), REMAT_EINVAL, "remat_sac_config");
    remat_sac_config empty_cfg = {0};
    RT_FAILS(remat_sac_context_fn(&empty_cfg, &pair), REMAT_EINVAL, "no policy");

    /* checkpoint rejects a failing context_fn: the error reaches the caller */
    rt_mlp_block blk;
    rt_mlp_block_init(&blk, 4, 8, 0.0, REMAT_F32, 1);
    int64_t sh[] = {2, 4};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 3), *y = NULL;
    remat_checkpoint_options o = sac_opts(&empty_cfg);
    RT_FAILS(remat_checkpoint(rt_mlp_block_fn, &blk, 1, &x, 1, &y, &o), REMAT_EINVAL, "no policy");
    cr_assert_null(y);
    remat_release(x);
    rt_mlp_block_free(&blk);
    cr_assert_eq(remat_live_tensors(), 0);
}

static remat_checkpoint_policy bad_value(const remat_sac_context *ctx, const char *op, int n,
                                         remat_tensor *const *in, void *st) {
    (void)ctx, (void)n, (void)in, (void)st;
    return strcmp(op, "remat_gelu") == 0 ? (remat_checkpoint_policy)42 : REMAT_PREFER_RECOMPUTE;
}

Test(selective, policy_returning_a_bad_value_fails_the_op) {
    rt_mlp_block blk;
    rt_mlp_block_init(&blk, 4, 8, 0.0, REMAT_F32, 1);
    int64_t sh[] = {2, 4};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 3), *y = NULL;
    RT_OK(remat_set_requires_grad(x, true));
    remat_policy *pol;
    RT_OK(remat_policy_from_fn(&pol, bad_value, NULL, NULL));
    remat_sac_config cfg = {.policy = pol};
    remat_checkpoint_options o = sac_opts(&cfg);
    RT_FAILS(remat_checkpoint(rt_mlp_block_fn, &blk, 1, &x, 1, &y, &o), REMAT_ECALLBACK,
             "returned 42");
    cr_assert(strstr(remat_last_error(), "remat_gelu") != NULL, "%s", remat_last_error());
    cr_assert_null(y);
    cr_assert_eq(rm_op_depth(), 0);
    remat_policy_release(pol);
    remat_release(x);
    rt_mlp_block_free(&blk);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(selective, presets_answer_as_documented) {
    remat_policy *dots, *names, *except, *anyb, *off, *ops, *both, *nothing, *every;
    const char *nm[] = {"qkv", "attn_out"};
    const char *ol[] = {"remat_gelu"};
    RT_OK(remat_policy_dots_saveable(&dots));
    RT_OK(remat_policy_save_only_these_names(&names, 2, nm));
    RT_OK(remat_policy_save_anything_except_these_names(&except, 1, nm));
    RT_OK(remat_policy_save_any_names_but_these(&anyb, 1, nm));
    RT_OK(remat_policy_offload_these_names(&off, 1, nm + 1));
    RT_OK(remat_policy_from_ops(&ops, 1, ol));
    RT_OK(remat_policy_or(&both, dots, names));
    RT_OK(remat_policy_nothing_saveable(&nothing));
    RT_OK(remat_policy_everything_saveable(&every));
    remat_sac_context plain = {false, 0, NULL}, tq = {false, 1, "qkv"}, tz = {true, 2, "zzz"},
                      ta = {false, 3, "attn_out"};
    cr_assert_eq(remat_policy_eval(dots, &plain, "remat_linear", 0, NULL), REMAT_MUST_SAVE);
    cr_assert_eq(remat_policy_eval(dots, &plain, "remat_matmul", 0, NULL), REMAT_MUST_SAVE);
    cr_assert_eq(remat_policy_eval(dots, &plain, "remat_gelu", 0, NULL), REMAT_PREFER_RECOMPUTE);
    cr_assert_eq(remat_policy_eval(names, &tq, "remat_tag", 0, NULL), REMAT_MUST_SAVE);
    cr_assert_eq(remat_policy_eval(names, &tz, "remat_tag", 0, NULL), REMAT_PREFER_RECOMPUTE);
    cr_assert_eq(remat_policy_eval(names, &plain, "remat_linear", 0, NULL), REMAT_PREFER_RECOMPUTE);
    cr_assert_eq(remat_policy_eval(except, &tq, "remat_tag", 0, NULL), REMAT_MUST_RECOMPUTE);
    cr_assert_eq(remat_policy_eval(except, &ta, "remat_tag", 0, NULL), REMAT_PREFER_SAVE);
    cr_assert_eq(remat_policy_eval(except, &plain, "remat_exp", 0, NULL), REMAT_PREFER_SAVE);
    cr_assert_eq(remat_policy_eval(anyb, &tq, "remat_tag", 0, NULL), REMAT_PREFER_RECOMPUTE);
    cr_assert_eq(remat_policy_eval(anyb, &tz, "remat_tag", 0, NULL), REMAT_MUST_SAVE);
    cr_assert_eq(remat_policy_eval(anyb, &plain, "remat_exp", 0, NULL), REMAT_PREFER_RECOMPUTE);
    cr_assert_eq(remat_policy_eval(off, &ta, "remat_tag", 0, NULL), REMAT_MUST_CPU_OFFLOAD);
    cr_assert_eq(remat_policy_eval(ops, &plain, "remat_gelu", 0, NULL), REMAT_MUST_SAVE);
    cr_assert_eq(remat_policy_eval(ops, &plain, "remat_linear", 0, NULL), REMAT_PREFER_RECOMPUTE);
    cr_assert_eq(remat_policy_eval(both, &plain, "remat_linear", 0, NULL), REMAT_MUST_SAVE);
    cr_assert_eq(remat_policy_eval(both, &tq, "remat_tag", 0, NULL), REMAT_MUST_SAVE);
    cr_assert_eq(remat_policy_eval(both, &tz, "remat_tag", 0, NULL), REMAT_PREFER_RECOMPUTE);
    cr_assert_eq(remat_policy_eval(nothing, &plain, "remat_linear", 0, NULL),
                 REMAT_PREFER_RECOMPUTE);
    cr_assert_eq(remat_policy_eval(every, &plain, "remat_exp", 0, NULL), REMAT_PREFER_SAVE);
    cr_assert_str_eq(remat_checkpoint_policy_name(REMAT_MUST_CPU_OFFLOAD), "MUST_CPU_OFFLOAD");
    cr_assert_str_eq(remat_checkpoint_policy_name(17), "?");
    remat_policy *list[] = {dots, names, except, anyb, off, ops, both, nothing, every};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) remat_policy_release(list[i]);
}

/* ---- a stateful policy --------------------------------------------------------------------- */
typedef struct calls {
    int fwd, rec;
    char ops[2][16][32];
    int idx[2][16];
    int linears[2]; /* remat_linear calls per pass */
} calls;

/* Saves every other remat_linear (the first, the third, ...), counting per pass. */
static remat_checkpoint_policy counting(const remat_sac_context *ctx, const char *op, int n,
                                        remat_tensor *const *in, void *st) {
    (void)n, (void)in;
    calls *c = st;
    int pass = ctx->is_recompute ? 1 : 0;
    int k = pass ? c->rec++ : c->fwd++;
    if (k < 16) {
        snprintf(c->ops[pass][k], sizeof c->ops[pass][k], "%s", op);
        c->idx[pass][k] = ctx->op_index;
    }
    if (strcmp(op, "remat_linear") == 0)
        return c->linears[pass]++ % 2 == 0 ? REMAT_MUST_SAVE : REMAT_PREFER_RECOMPUTE;
    return REMAT_PREFER_RECOMPUTE;
}

Test(selective, stateful_policy_calls_and_counts) {
    rt_mlp_block blk;
    rt_mlp_block_init(&blk, 8, 16, 0.0, REMAT_F32, 2);
    int64_t sh[] = {4, 8};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 9), *y = NULL, *l = NULL;
    RT_OK(remat_set_requires_grad(x, true));
    calls c;
    memset(&c, 0, sizeof c);
    remat_policy *pol;
    RT_OK(remat_policy_from_fn(&pol, counting, &c, NULL));
    remat_sac_stats st = {0};
    remat_sac_config cfg = {.policy = pol, .stats = &st};
    remat_checkpoint_options o = sac_opts(&cfg);
    o.early_stop = REMAT_OPT_FALSE; /* the whole function runs again: every op is asked */
    RT_OK(remat_checkpoint(rt_mlp_block_fn, &blk, 1, &x, 1, &y, &o));
    /* the MLP block: linear, gelu, linear, add */
    const char *expect[] = {"remat_linear", "remat_gelu", "remat_linear", "remat_add"};
    cr_assert_eq(c.fwd, 4, "forward policy calls: %d", c.fwd);
    cr_assert_eq(c.rec, 0);
    for (int i = 0; i < 4; i++) {
        cr_assert_str_eq(c.ops[0][i], expect[i]);
        cr_assert_eq(c.idx[0][i], i);
    }
    cr_assert_eq(st.policy_calls_forward, 4);
    cr_assert_eq(st.ops_cached, 1, "only the first linear is cached: %lld",
                 (long long)st.ops_cached);
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(c.rec, 4, "recompute policy calls: %d", c.rec);
    for (int i = 0; i < 4; i++) {
        cr_assert_str_eq(c.ops[1][i], expect[i]);
        cr_assert_eq(c.idx[1][i], i);
    }
    cr_assert_eq(st.policy_calls_recompute, 4);
    cr_assert_eq(st.ops_from_cache, 1);
    cr_assert_eq(st.ops_recomputed, 3);
    cr_assert_eq(blk.calls, 2);
    /* with early stop (the default) the recomputation ends inside the second
     * linear (the last op that saves), while it saves its inputs: as in PyTorch,
     * neither it nor the add after it is asked */
    memset(&c, 0, sizeof c);
    memset(&st, 0, sizeof st);
    remat_release_p(&l);
    remat_release_p(&y);
    o.early_stop = REMAT_OPT_DEFAULT;
    RT_OK(remat_checkpoint(rt_mlp_block_fn, &blk, 1, &x, 1, &y, &o));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(c.fwd, 4);
    cr_assert_eq(c.rec, 2, "early stop: %d recompute calls", c.rec);
    cr_assert_eq(rm_op_depth(), 0);
    remat_release(l);
    remat_release(y);
    remat_release(x);
    remat_policy_release(pol);
    rt_mlp_block_free(&blk);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- early stop inside a served op ------------------------------------------------------ */
/* x*x (saves x twice), exp (saves its output), add (saves nothing): with exp
 * served, the save of exp's cached output fills the checkpoint's last
 * placeholder; the recomputation must stop there, so the add after it runs
 * in skip mode (no data) and its policy is never asked. */
typedef struct stop_fn_state {
    int calls;
    bool had_data[2];
} stop_fn_state;

static int stop_in_served_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                             int n_out) {
    (void)n_in, (void)n_out;
    stop_fn_state *st = ud;
    remat_tensor *a = NULL, *b = NULL;
    int rc = remat_mul(&a, in[0], in[0]);
    if (!rc) rc = remat_exp(&b, a);
    if (!rc) rc = remat_add(&out[0], b, b);
    /* the storage's pointer, not remat_data(): a device that is not host-addressable
     * (the fenced test device) holds real data that remat_data() does not expose */
    if (!rc && st->calls < 2) st->had_data[st->calls] = out[0]->storage->data != NULL;
    st->calls++;
    remat_release(a);
    remat_release(b);
    return rc;
}

Test(selective, early_stop_inside_a_served_op_ends_the_recomputation) {
    int64_t sh[] = {4, 8};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 11), *y = NULL, *l = NULL;
    RT_OK(remat_set_requires_grad(x, true));
    const char *save[] = {"remat_exp"};
    remat_policy *pol;
    RT_OK(remat_policy_from_ops(&pol, 1, save));
    remat_sac_stats st = {0};
    remat_sac_config cfg = {.policy = pol, .stats = &st};
    remat_checkpoint_options o = sac_opts(&cfg);
    stop_fn_state fs = {0};
    RT_OK(remat_checkpoint(stop_in_served_fn, &fs, 1, &x, 1, &y, &o));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(fs.calls, 2);
    cr_assert(fs.had_data[0], "the forward computes");
    cr_assert(!fs.had_data[1], "after the stop inside the served exp, add runs data-less");
    cr_assert_eq(st.policy_calls_forward, 3);
    cr_assert_eq(st.policy_calls_recompute, 2, "add is not asked: %lld",
                 (long long)st.policy_calls_recompute);
    cr_assert_eq(st.ops_from_cache, 1);
    cr_assert_eq(rm_op_depth(), 0);
    cr_assert(!rm_skip_mode(), "skip mode is off once the recomputation is over");
    remat_release(l);
    remat_release(y);
    remat_release(x);
    remat_policy_release(pol);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- SAVE vs RECOMPUTE: what runs in backward, and memory ----------------------------------- */
typedef struct mem_run {
    size_t after_forward; /* test-device bytes held after the forward (inputs and params
                           * excluded) */
    size_t backward_peak; /* peak during backward above the pre-backward level */
    uint64_t backward_allocs;
    int linear_runs, gelu_runs; /* real executions (not in skip mode) during backward */
    remat_sac_stats st;
} mem_run;

/* Op observer (internal hook, also used by checkpoint's debug traces):
 * an op served from the cache is entered in skip mode and computes
 * nothing, so only entries outside skip mode are real executions. */
static void count_runs(void *ud, const char *op) {
    mem_run *m = ud;
    if (rm_skip_mode()) return;
    if (strcmp(op, "remat_linear") == 0) m->linear_runs++;
    if (strcmp(op, "remat_gelu") == 0) m->gelu_runs++;
}

static void measure(remat_policy *pol, rt_mlp_block *blk, int n_blocks, remat_tensor *x,
                    mem_run *m) {
    memset(m, 0, sizeof *m);
    remat_sac_config cfg = {.policy = pol, .stats = &m->st};
    remat_checkpoint_options o = sac_opts(&cfg);
    size_t base = rt_device_current_bytes();
    remat_tensor *h = remat_retain(x);
    for (int i = 0; i < n_blocks; i++) {
        remat_tensor *y = NULL;
        RT_OK(remat_checkpoint(rt_mlp_block_fn, &blk[i], 1, &h, 1, &y, &o));
        remat_release(h);
        h = y;
    }
    remat_tensor *l;
    RT_OK(remat_sum_all(&l, h));
    remat_release(h);
    m->after_forward = rt_device_current_bytes() - base;
    rt_device_reset_peak();
    remat_alloc_stats a0 = rt_device_stats();
    rm_set_op_observer(count_runs, m, NULL, NULL);
    RT_OK(remat_backward_scalar(l));
    rm_set_op_observer(NULL, NULL, NULL, NULL);
    remat_alloc_stats a1 = rt_device_stats();
    m->backward_peak = a1.peak_bytes - a0.current_bytes;
    m->backward_allocs = a1.n_allocs - a0.n_allocs;
    remat_release(l);
}

/* nb MLP blocks (32 -> 128 -> 32, no dropout) with their parameters in params (*np of
 * them), and a (64, 32) input that requires grad: the measure() tests' chain. */
static remat_tensor *mlp_chain_init(rt_mlp_block *blk, int nb, remat_tensor **params, int *np) {
    for (int i = 0; i < nb; i++) {
        rt_mlp_block_init(&blk[i], 32, 128, 0.0, REMAT_F32, 20 + (unsigned)i);
        *np += rt_mlp_block_params(&blk[i], params + *np);
    }
    int64_t sh[] = {64, 32};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 4);
    RT_OK(remat_set_requires_grad(x, true));
    return x;
}

Test(selective, save_versus_recompute_changes_what_runs_and_memory) {
    enum { NB = 3 };
    rt_mlp_block blk[NB];
    remat_tensor *params[NB * 4];
    int np = 0;
    remat_tensor *x = mlp_chain_init(blk, NB, params, &np);
    remat_policy *nothing, *dots, *every;
    RT_OK(remat_policy_nothing_saveable(&nothing));
    RT_OK(remat_policy_dots_saveable(&dots));
    RT_OK(remat_policy_everything_saveable(&every));
    mem_run mn, md, me;
    measure(nothing, blk, NB, x, &mn);
    rt_zero_grads(np, params);
    measure(dots, blk, NB, x, &md);
    rt_zero_grads(np, params);
    measure(every, blk, NB, x, &me);
    rt_zero_grads(np, params);
    /* how often each op really ran during backward (the recomputations) */
    cr_assert_eq(mn.linear_runs, 2 * NB, "nothing saved: %d linear runs", mn.linear_runs);
    cr_assert_eq(mn.gelu_runs, NB);
    /* the second linear of a block is not served: its saved inputs end the
     * recomputation before the policy would see it (as in PyTorch); it is entered
     * outside skip mode but its kernel is skipped (the early stop) */
    cr_assert_eq(md.linear_runs, NB, "dots: %d linear runs", md.linear_runs);
    cr_assert_eq(md.gelu_runs, NB);
    cr_assert_eq(me.linear_runs, NB);
    cr_assert_eq(me.gelu_runs, 0);
    /* what ran during backward: every op recomputed / linears served / all served */
    cr_assert_eq(mn.st.ops_from_cache, 0);
    cr_assert_eq(mn.st.ops_cached, 0);
    cr_assert_eq(md.st.ops_cached, 2 * NB);
    cr_assert_eq(md.st.ops_from_cache, NB);
    cr_assert_eq(me.st.ops_cached, 4 * NB);
    cr_assert(mn.st.ops_recomputed > md.st.ops_recomputed, "%lld vs %lld",
              (long long)mn.st.ops_recomputed, (long long)md.st.ops_recomputed);
    /* the forward keeps more when more is saved ... */
    cr_assert(me.after_forward > md.after_forward && md.after_forward > mn.after_forward,
              "after forward: everything %zu, dots %zu, nothing %zu", me.after_forward,
              md.after_forward, mn.after_forward);
    /* ... by the cached outputs: a linear output is 64 x 128 (or 64 x 32) f32 */
    size_t dots_bytes = (size_t)NB * (64 * 128 + 64 * 32) * 4;
    cr_assert_eq(md.after_forward - mn.after_forward, dots_bytes, "dots keeps %zu, expected %zu",
                 md.after_forward - mn.after_forward, dots_bytes);
    cr_assert_eq((size_t)md.st.bytes_cached, dots_bytes);
    /* ... and backward allocates less: cached ops make no outputs */
    cr_assert(mn.backward_allocs > md.backward_allocs && md.backward_allocs > me.backward_allocs,
              "backward allocations: nothing %llu, dots %llu, everything %llu",
              (unsigned long long)mn.backward_allocs, (unsigned long long)md.backward_allocs,
              (unsigned long long)me.backward_allocs);
    cr_assert(mn.backward_peak >= md.backward_peak, "backward peak: nothing %zu, dots %zu",
              mn.backward_peak, md.backward_peak);
    remat_policy_release(nothing);
    remat_policy_release(dots);
    remat_policy_release(every);
    remat_release(x);
    for (int i = 0; i < NB; i++) rt_mlp_block_free(&blk[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- SAVE_BF16: lossy keeps ------------------------------------------------------------------ */
static remat_checkpoint_policy dots_as_bf16(const remat_sac_context *ctx, const char *op, int n,
                                            remat_tensor *const *in, void *st) {
    (void)ctx, (void)n, (void)in, (void)st;
    return strcmp(op, "remat_linear") == 0 ? REMAT_MUST_SAVE_BF16 : REMAT_PREFER_RECOMPUTE;
}

/* x's and the parameters' .grad after a measure() run, then cleared. */
static void take_grads(remat_tensor *x, int np, remat_tensor **params, remat_tensor **out) {
    out[0] = remat_retain(remat_tensor_grad(x));
    for (int i = 0; i < np; i++) out[1 + i] = remat_retain(remat_tensor_grad(params[i]));
    RT_OK(remat_set_grad(x, NULL));
    rt_zero_grads(np, params);
}

Test(selective, save_bf16_halves_the_cached_f32_and_stays_close) {
    enum { NB = 3 };
    rt_mlp_block blk[NB];
    remat_tensor *params[NB * 4], *g_exact[1 + NB * 4], *g_bf16[1 + NB * 4];
    int np = 0;
    remat_tensor *x = mlp_chain_init(blk, NB, params, &np);
    remat_policy *nothing, *dots, *bf16;
    RT_OK(remat_policy_nothing_saveable(&nothing));
    RT_OK(remat_policy_dots_saveable(&dots));
    RT_OK(remat_policy_from_fn(&bf16, dots_as_bf16, NULL, NULL));
    cr_assert_str_eq(remat_checkpoint_policy_name(REMAT_MUST_SAVE_BF16), "MUST_SAVE_BF16");
    mem_run mn, md, mz;
    measure(nothing, blk, NB, x, &mn);
    RT_OK(remat_set_grad(x, NULL));
    rt_zero_grads(np, params);
    measure(dots, blk, NB, x, &md);
    take_grads(x, np, params, g_exact);
    measure(bf16, blk, NB, x, &mz);
    take_grads(x, np, params, g_bf16);
    size_t dots_bytes = (size_t)NB * (64 * 128 + 64 * 32) * 4;
    cr_assert_eq(mz.st.ops_cached, 2 * NB);
    cr_assert_eq(mz.st.ops_from_cache, NB);
    /* what SAVE_BF16 would store as bf16 is counted whatever the answer; bf16 keeps run on
     * every device (the fenced one and cuda as test devices: the device's converting copy) */
    cr_assert_eq((size_t)md.st.bytes_cached_bf16, dots_bytes);
    cr_assert_eq(md.st.ops_bf16, 0);
    /* half the bytes from the forward to the recomputation */
    cr_assert_eq(mz.st.ops_bf16, 2 * NB);
    cr_assert_eq((size_t)mz.st.bytes_cached, dots_bytes / 2);
    cr_assert_eq(mz.after_forward - mn.after_forward, dots_bytes / 2,
                 "bf16 keeps %zu above nothing, expected %zu", mz.after_forward - mn.after_forward,
                 dots_bytes / 2);
    /* lossy: not bitwise, but within bf16's rounding of the kept values */
    bool all_equal = true;
    for (int i = 0; i <= np; i++) {
        all_equal = all_equal && rt_bitwise_equal(g_bf16[i], g_exact[i]);
        double top = 0, *v = rt_values(g_exact[i]);
        for (int64_t j = 0; j < remat_numel(g_exact[i]); j++) top = fmax(top, fabs(v[j]));
        free(v);
        double diff = rt_max_abs_diff(g_bf16[i], g_exact[i]);
        if (getenv("SAC_VERBOSE")) fprintf(stderr, "grad %d: %g of its largest\n", i, diff / top);
        cr_assert_leq(diff, top / 64, "gradient %d: off by %g, its largest %g", i, diff, top);
    }
    cr_assert(!all_equal, "the gradients went through bf16");
    for (int i = 0; i <= np; i++) {
        remat_release(g_exact[i]);
        remat_release(g_bf16[i]);
    }
    remat_policy_release(nothing);
    remat_policy_release(dots);
    remat_policy_release(bf16);
    remat_release(x);
    for (int i = 0; i < NB; i++) rt_mlp_block_free(&blk[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- every preset gives the un-checkpointed gradients ---------------------------------------- */
static remat_checkpoint_policy save_gelu_softmax(const remat_sac_context *ctx, const char *op,
                                                 int n, remat_tensor *const *in, void *st) {
    (void)ctx, (void)n, (void)in, (void)st;
    return strcmp(op, "remat_softmax") == 0 || strcmp(op, "remat_layer_norm") == 0 ||
                   strcmp(op, "remat_dropout") == 0
               ? REMAT_PREFER_SAVE
               : REMAT_PREFER_RECOMPUTE;
}

Test(selective, every_preset_gives_bitwise_equal_gradients) {
    enum { NB = 2 };
    const char *names[] = {"qkv", "attn_out"};
    const char *more[] = {"mlp_up"};
    const char *ops[] = {"remat_gelu", "remat_matmul", "remat_layer_norm"};
    for (int drop = 0; drop < 2; drop++) {
        rt_tblock b[NB];
        void *uds[NB];
        remat_tensor *params[NB * 12];
        int np = 0;
        for (int i = 0; i < NB; i++) {
            rt_tblock_init(&b[i], 16, 4, 6, drop ? 0.2 : 0.0, REMAT_F32, 30 + (unsigned)i);
            b[i].tagged = true; /* "qkv", "attn_out", "mlp_up" */
            uds[i] = &b[i];
            np += rt_tblock_params(&b[i], params + np);
        }
        int64_t sh[] = {2, 6, 16};
        remat_tensor *x = rt_rand(3, sh, REMAT_F32, -1, 1, 6);
        RT_OK(remat_set_requires_grad(x, true));
        rt_grads ref;
        rt_run_blocks(SEED, NB, rt_tblock_fn, uds, params, np, x, NULL, &ref);
        remat_policy *pols[12];
        const char *what[12];
        int n = 0;
        RT_OK(remat_policy_nothing_saveable(&pols[n]));
        what[n++] = "nothing";
        RT_OK(remat_policy_everything_saveable(&pols[n]));
        what[n++] = "everything";
        RT_OK(remat_policy_dots_saveable(&pols[n]));
        what[n++] = "dots";
        RT_OK(remat_policy_save_only_these_names(&pols[n], 2, names));
        what[n++] = "only names";
        RT_OK(remat_policy_save_anything_except_these_names(&pols[n], 2, names));
        what[n++] = "all but names";
        RT_OK(remat_policy_save_any_names_but_these(&pols[n], 1, more));
        what[n++] = "any names but";
        RT_OK(remat_policy_offload_these_names(&pols[n], 2, names));
        what[n++] = "offload names (cpu)";
        RT_OK(remat_policy_from_ops(&pols[n], 3, ops));
        what[n++] = "op list";
        RT_OK(remat_policy_from_fn(&pols[n], save_gelu_softmax, NULL, NULL));
        what[n++] = "callback";
        RT_OK(remat_policy_or(&pols[n], pols[2], pols[3]));
        what[n++] = "dots or names";
        for (int i = 0; i < n; i++) {
            for (int early = 0; early < 2; early++) {
                remat_sac_stats st = {0};
                remat_sac_config cfg = {.policy = pols[i], .stats = &st};
                remat_checkpoint_options o = sac_opts(&cfg);
                o.early_stop = early ? REMAT_OPT_DEFAULT : REMAT_OPT_FALSE;
                rt_grads got;
                rt_run_blocks(SEED, NB, rt_tblock_fn, uds, params, np, x, &o, &got);
                char msg[96];
                snprintf(msg, sizeof msg, "%s (dropout %d, early stop %d)", what[i], drop, early);
                rt_assert_same_grads(&ref, &got, msg);
                rt_grads_free(&got);
                cr_assert_eq(rm_op_depth(), 0);
                if (i == 0) cr_assert_eq(st.ops_cached, 0);
                else cr_assert(st.ops_cached > 0, "%s cached nothing", msg);
            }
        }
        for (int i = 0; i < n; i++) remat_policy_release(pols[i]);
        rt_grads_free(&ref);
        remat_release(x);
        for (int i = 0; i < NB; i++) rt_tblock_free(&b[i]);
        cr_assert_eq(remat_live_tensors(), 0);
    }
}

/* ---- named residuals on a transformer block -------------------------------------------------- */
Test(selective, names_save_attention_projections_and_recompute_the_rest) {
    rt_tblock b;
    rt_tblock_init(&b, 32, 4, 8, 0.1, REMAT_F32, 40);
    b.tagged = true; /* "qkv", "attn_out", "mlp_up" */
    remat_tensor *params[12];
    int np = rt_tblock_params(&b, params);
    void *ud = &b;
    int64_t sh[] = {2, 8, 32};
    remat_tensor *x = rt_rand(3, sh, REMAT_F32, -1, 1, 8);
    RT_OK(remat_set_requires_grad(x, true));
    rt_grads ref, got;
    rt_run_blocks(SEED, 1, rt_tblock_fn, &ud, params, np, x, NULL, &ref);

    const char *names[] = {"qkv", "attn_out"};
    remat_policy *pol;
    RT_OK(remat_policy_save_only_these_names(&pol, 2, names));
    remat_sac_stats st = {0};
    remat_sac_config cfg = {.policy = pol, .stats = &st};
    remat_checkpoint_options o = sac_opts(&cfg);
    rt_run_blocks(SEED, 1, rt_tblock_fn, &ud, params, np, x, &o, &got);
    rt_assert_same_grads(&ref, &got, "save only qkv and attn_out");
    /* the two projections (the ops producing the tagged tensors) were
     * cached and served; every other op ran again */
    cr_assert_eq(st.ops_cached, 2);
    cr_assert_eq(st.ops_from_cache, 2);
    size_t expect = (size_t)(2 * 8 * 96 + 2 * 8 * 32) * 4; /* qkv (B,T,3D) + proj (B,T,D) */
    cr_assert_eq((size_t)st.bytes_cached, expect, "cached %lld bytes, expected %zu",
                 (long long)st.bytes_cached, expect);
    cr_assert(st.ops_recomputed > 10);
    rt_grads_free(&got);

    /* everything but qkv: the qkv projection is dropped from the cache by its tag */
    remat_policy *pol2;
    RT_OK(remat_policy_save_anything_except_these_names(&pol2, 1, names));
    remat_sac_stats st2 = {0};
    remat_sac_config cfg2 = {.policy = pol2, .stats = &st2};
    remat_checkpoint_options o2 = sac_opts(&cfg2);
    remat_sac_stats st3 = {0};
    remat_policy *every;
    RT_OK(remat_policy_everything_saveable(&every));
    remat_sac_config cfg3 = {.policy = every, .stats = &st3};
    remat_checkpoint_options o3 = sac_opts(&cfg3);
    rt_run_blocks(SEED, 1, rt_tblock_fn, &ud, params, np, x, &o2, &got);
    rt_assert_same_grads(&ref, &got, "save all but qkv");
    rt_grads_free(&got);
    rt_run_blocks(SEED, 1, rt_tblock_fn, &ud, params, np, x, &o3, &got);
    rt_assert_same_grads(&ref, &got, "save everything");
    rt_grads_free(&got);
    cr_assert_eq(st2.ops_cached, st3.ops_cached - 1, "all-but-qkv cached %lld, everything %lld",
                 (long long)st2.ops_cached, (long long)st3.ops_cached);
    cr_assert_eq(st3.bytes_cached - st2.bytes_cached, (int64_t)(2 * 8 * 96 * 4));
    cr_assert(st2.ops_recomputed > st3.ops_recomputed);

    remat_policy_release(pol);
    remat_policy_release(pol2);
    remat_policy_release(every);
    rt_grads_free(&ref);
    remat_release(x);
    rt_tblock_free(&b);
    cr_assert_eq(remat_live_tensors(), 0);
}

Test(selective, tag_is_a_named_identity_view) {
    int64_t sh[] = {2, 3};
    remat_tensor *a = rt_rand(2, sh, REMAT_F64, -1, 1, 1), *t = NULL, *s = NULL;
    RT_OK(remat_set_requires_grad(a, true));
    RT_OK(remat_tag(&t, a, "act"));
    cr_assert_str_eq(remat_name(t), "act");
    cr_assert(remat_shares_storage(t, a));
    cr_assert_str_eq(remat_node_name(remat_grad_fn(t)), "TagBackward");
    RT_OK(remat_sum_all(&s, t));
    RT_OK(remat_backward_scalar(s));
    cr_assert_eq(rt_item_at(remat_tensor_grad(a), 4), 1.0);
    remat_tensor *bad = NULL;
    RT_FAILS(remat_tag(&bad, a, ""), REMAT_EINVAL, "remat_tag");
    RT_FAILS(remat_tag(&bad, a, NULL), REMAT_EINVAL, "non-empty");
    RT_FAILS(remat_tag(&bad, NULL, "x"), REMAT_EINVAL, "remat_tag");
    cr_assert_null(bad);
    remat_release(s);
    remat_release(t);
    remat_release(a);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- multi-output ops, views and non-tensor outputs ------------------------------------------ */
typedef struct multi_ud {
    remat_tensor *w;
    int pieces;  /* a non-tensor result: how many pieces split made */
    double max0; /* a non-tensor result read from the data (forward only) */
} multi_ud;

/* h = x W^T; (a, b) = split(h); (m, idx) = max(a, -1); out0 = m * sum(b), out1 = idx (i64) */
static int multi_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    multi_ud *u = ud;
    if (n_in != 1 || n_out != 3) return remat_set_error(REMAT_EINVAL, "multi_fn");
    remat_scope *s;
    int rc = remat_scope_begin(&s);
    if (rc) return rc;
    remat_tensor *h = NULL, *parts[2] = {NULL, NULL}, *m = NULL, *idx = NULL, *sb = NULL, *y = NULL;
    int n = 0;
    TRY(remat_linear(&h, in[0], u->w, NULL));
    TRY(remat_split(parts, 2, &n, h, 3, -1));
    TRY(remat_max(&m, &idx, parts[0], -1, true));
    TRY(remat_sum(&sb, parts[1], 1, (int[]){-1}, true));
    TRY(remat_mul(&y, m, sb));
    if (!rc) {
        u->pieces = n;
        if (rt_has_data(m)) u->max0 = rt_item_at(m, 0);
        out[0] = remat_scope_keep(y);
        out[1] = remat_scope_keep(idx);
        out[2] = NULL; /* a None output */
    }
    remat_scope_end(s);
    return rc;
}

Test(selective, multi_output_ops_and_non_tensor_outputs) {
    int64_t sw[] = {6, 4}, sx[] = {5, 4};
    multi_ud u = {rt_rand(2, sw, REMAT_F64, -1, 1, 2), 0, 0};
    RT_OK(remat_set_requires_grad(u.w, true));
    remat_tensor *x = rt_rand(2, sx, REMAT_F64, -1, 1, 3);
    RT_OK(remat_set_requires_grad(x, true));
    /* reference */
    remat_tensor *ro[3] = {NULL, NULL, NULL}, *rl = NULL;
    RT_OK(multi_fn(&u, &x, 1, ro, 3));
    RT_OK(remat_sum_all(&rl, ro[0]));
    RT_OK(remat_backward_scalar(rl));
    remat_tensor *gx = remat_retain(remat_tensor_grad(x));
    remat_tensor *gw = remat_retain(remat_tensor_grad(u.w));
    double ref_max0 = u.max0;
    const char *save_ops[] = {"remat_linear", "remat_split", "remat_max", "remat_sum"};
    for (int variant = 0; variant < 2; variant++) {
        rt_zero_grads(1, &x);
        rt_zero_grads(1, &u.w);
        remat_policy *pol;
        if (variant == 0) RT_OK(remat_policy_everything_saveable(&pol));
        else RT_OK(remat_policy_from_ops(&pol, 4, save_ops));
        remat_sac_stats st = {0};
        remat_sac_config cfg = {.policy = pol, .stats = &st};
        remat_checkpoint_options o = sac_opts(&cfg);
        o.early_stop = REMAT_OPT_FALSE;
        remat_tensor *co[3] = {NULL, NULL, NULL}, *cl = NULL;
        u.pieces = 0;
        RT_OK(remat_checkpoint(multi_fn, &u, 1, &x, 3, co, &o));
        cr_assert_eq(u.pieces, 2);
        cr_assert_null(co[2]);
        cr_assert(rt_bitwise_equal(co[0], ro[0]));
        cr_assert(rt_bitwise_equal(co[1], ro[1]), "max indices differ");
        RT_OK(remat_sum_all(&cl, co[0]));
        u.pieces = 0;
        u.max0 = -99;
        RT_OK(remat_backward_scalar(cl));
        /* the recomputation ran the function again: split still reports its
         * pieces, and max (served from the cache) hands back its real values */
        cr_assert_eq(u.pieces, 2);
        cr_assert_eq(u.max0, ref_max0, "served max output: %g vs %g", u.max0, ref_max0);
        cr_assert(st.ops_from_cache >= 4, "%lld ops served", (long long)st.ops_from_cache);
        cr_assert(rt_bitwise_equal(remat_tensor_grad(x), gx), "variant %d: dx differs", variant);
        cr_assert(rt_bitwise_equal(remat_tensor_grad(u.w), gw), "variant %d: dW differs", variant);
        for (int i = 0; i < 3; i++) remat_release(co[i]);
        remat_release(cl);
        remat_policy_release(pol);
    }
    for (int i = 0; i < 3; i++) remat_release(ro[i]);
    remat_release(rl);
    remat_release(gx);
    remat_release(gw);
    remat_release(x);
    remat_release(u.w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- cache mutation -------------------------------------------------------------------------- */
/* y = exp(x W^T); y *= 2 in place; out = y * y */
static int mutating_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    remat_tensor *w = ud;
    (void)n_in, (void)n_out;
    remat_tensor *h = NULL, *y = NULL;
    int rc = remat_linear(&h, in[0], w, NULL);
    TRY(remat_exp(&y, h));
    TRY(remat_mul_scalar_(y, 2.0));
    TRY(remat_mul(&out[0], y, y));
    remat_release(h);
    remat_release(y);
    return rc;
}

Test(selective, mutated_cache_entry_fails_unless_allowed) {
    int64_t sw[] = {3, 4}, sx[] = {2, 4};
    remat_tensor *w = rt_rand(2, sw, REMAT_F32, -0.5, 0.5, 2);
    RT_OK(remat_set_requires_grad(w, true));
    remat_tensor *x = rt_rand(2, sx, REMAT_F32, -1, 1, 3);
    const char *ops[] = {"remat_exp"};
    remat_policy *pol;
    RT_OK(remat_policy_from_ops(&pol, 1, ops));
    for (int allow = 0; allow < 2; allow++) {
        remat_sac_config cfg = {.policy = pol, .allow_cache_entry_mutation = allow};
        remat_checkpoint_options o = sac_opts(&cfg);
        remat_tensor *y = NULL, *l = NULL;
        RT_OK(remat_checkpoint(mutating_fn, w, 1, &x, 1, &y, &o));
        RT_OK(remat_sum_all(&l, y));
        if (!allow) {
            RT_FAILS(remat_backward_scalar(l), REMAT_EVERSION, "has been mutated");
            cr_assert(strstr(remat_last_error(), "remat_exp") != NULL, "%s", remat_last_error());
            cr_assert(strstr(remat_last_error(), "allow_cache_entry_mutation") != NULL);
        } else {
            RT_OK(remat_backward_scalar(l));
            cr_assert_not_null(remat_tensor_grad(w));
        }
        cr_assert_eq(rm_op_depth(), 0);
        remat_release(l);
        remat_release(y);
        rt_zero_grads(1, &w);
    }
    remat_policy_release(pol);
    remat_release(x);
    remat_release(w);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- backward twice, missing ops ------------------------------------------------------------- */
Test(selective, second_backward_over_a_region_is_an_error) {
    rt_mlp_block blk;
    rt_mlp_block_init(&blk, 8, 16, 0.0, REMAT_F32, 5);
    int64_t sh[] = {4, 8};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 9), *y = NULL, *l = NULL;
    RT_OK(remat_set_requires_grad(x, true));
    remat_policy *pol;
    RT_OK(remat_policy_dots_saveable(&pol));
    remat_sac_config cfg = {.policy = pol};
    remat_checkpoint_options o = sac_opts(&cfg);
    RT_OK(remat_checkpoint(rt_mlp_block_fn, &blk, 1, &x, 1, &y, &o));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward(1, &l, NULL, true, 0, NULL));
    RT_FAILS(remat_backward(1, &l, NULL, true, 0, NULL), REMAT_ESTATE, "backward an extra time");
    cr_assert_eq(rm_op_depth(), 0);
    /* a plain checkpoint allows it (every op recomputes) */
    remat_release_p(&l);
    remat_release_p(&y);
    remat_checkpoint_options plain = {.use_reentrant = REMAT_OPT_FALSE};
    RT_OK(remat_checkpoint(rt_mlp_block_fn, &blk, 1, &x, 1, &y, &plain));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward(1, &l, NULL, true, 0, NULL));
    RT_OK(remat_backward(1, &l, NULL, true, 0, NULL));
    remat_release(l);
    remat_release(y);
    remat_release(x);
    remat_policy_release(pol);
    rt_mlp_block_free(&blk);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* Forward: recompute everything. Recomputation: save gelu (never cached). */
static remat_checkpoint_policy flip(const remat_sac_context *ctx, const char *op, int n,
                                    remat_tensor *const *in, void *st) {
    (void)n, (void)in, (void)st;
    if (ctx->is_recompute && strcmp(op, "remat_gelu") == 0) return REMAT_MUST_SAVE;
    return REMAT_PREFER_RECOMPUTE;
}

Test(selective, op_missing_from_the_cache_is_named) {
    rt_mlp_block blk;
    rt_mlp_block_init(&blk, 8, 16, 0.0, REMAT_F32, 5);
    int64_t sh[] = {4, 8};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 9), *y = NULL, *l = NULL;
    RT_OK(remat_set_requires_grad(x, true));
    remat_policy *pol;
    RT_OK(remat_policy_from_fn(&pol, flip, NULL, NULL));
    remat_sac_config cfg = {.policy = pol};
    remat_checkpoint_options o = sac_opts(&cfg);
    RT_OK(remat_checkpoint(rt_mlp_block_fn, &blk, 1, &x, 1, &y, &o));
    RT_OK(remat_sum_all(&l, y));
    RT_FAILS(remat_backward_scalar(l), REMAT_EDETERMINISM, "was not found in the cache");
    cr_assert(strstr(remat_last_error(), "remat_gelu") != NULL, "%s", remat_last_error());
    cr_assert(strstr(remat_last_error(), "op 1") != NULL, "%s", remat_last_error());
    cr_assert_eq(rm_op_depth(), 0);
    remat_release(l);
    remat_release(y);
    remat_release(x);
    remat_policy_release(pol);
    rt_mlp_block_free(&blk);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- offload --------------------------------------------------------------------------------- */
static remat_checkpoint_policy offload_linears(const remat_sac_context *ctx, const char *op, int n,
                                               remat_tensor *const *in, void *st) {
    (void)ctx, (void)n, (void)in, (void)st;
    return strcmp(op, "remat_linear") == 0 ? REMAT_MUST_CPU_OFFLOAD : REMAT_PREFER_RECOMPUTE;
}

/* MLP block on a device other than cpu (the test device, "testdev" when that is cpu):
 * MUST_SAVE keeps the linear outputs on the device; MUST_CPU_OFFLOAD keeps them in host
 * memory instead and brings them back for the recomputation. */
Test(selective, offload_moves_cached_outputs_to_host) {
    remat_device dev = rt_tensor_device();
    if (dev.type == REMAT_CPU) dev = (remat_device){rt_testdev_register(), 0};
    int64_t sw1[] = {64, 16}, sw2[] = {16, 64}, sx[] = {32, 16};
    remat_tensor *w1 = rt_to_device(rt_rand(2, sw1, REMAT_F32, -0.3, 0.3, 1), dev);
    remat_tensor *w2 = rt_to_device(rt_rand(2, sw2, REMAT_F32, -0.3, 0.3, 2), dev);
    remat_tensor *x = rt_to_device(rt_rand(2, sx, REMAT_F32, -1, 1, 3), dev);
    RT_OK(remat_set_requires_grad(w1, true));
    RT_OK(remat_set_requires_grad(w2, true));
    rt_mlp_block blk = {.dim = 16,
                        .hidden = 64,
                        .p_drop = 0,
                        .gelu = REMAT_GELU_TANH,
                        .w1 = w1,
                        .b1 = NULL,
                        .w2 = w2,
                        .b2 = NULL};
    remat_tensor *y = NULL, *l = NULL;
    RT_OK(rt_mlp_block_fn(&blk, &x, 1, &y, 1));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    remat_tensor *g1 = remat_retain(remat_tensor_grad(w1));
    remat_tensor *g2 = remat_retain(remat_tensor_grad(w2));
    remat_release_p(&l);
    remat_release_p(&y);
    int64_t dev_after[2], cpu_after[2];
    remat_sac_stats st[2];
    for (int k = 0; k < 2; k++) {
        rt_zero_grads(1, &w1);
        rt_zero_grads(1, &w2);
        remat_policy *pol;
        const char *ops[] = {"remat_linear"};
        if (k == 0) RT_OK(remat_policy_from_ops(&pol, 1, ops));
        else RT_OK(remat_policy_from_fn(&pol, offload_linears, NULL, NULL));
        memset(&st[k], 0, sizeof st[k]);
        remat_sac_config cfg = {.policy = pol, .stats = &st[k]};
        remat_checkpoint_options o = sac_opts(&cfg);
        remat_alloc_stats d0, c0, d1, c1;
        RT_OK(remat_alloc_stats_get(dev, &d0));
        RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &c0));
        RT_OK(remat_checkpoint(rt_mlp_block_fn, &blk, 1, &x, 1, &y, &o));
        /* with asynchronous copies (cuda's side stream) a tensor's device memory goes back
         * when its copy is done, seen at the next pack or unpack: the last one packed may
         * still hold it here. Wait for them, to count what offloading frees. */
        rm_offload_settle();
        RT_OK(remat_alloc_stats_get(dev, &d1));
        RT_OK(remat_alloc_stats_get(REMAT_DEVICE_CPU, &c1));
        dev_after[k] = (int64_t)d1.current_bytes - (int64_t)d0.current_bytes;
        cpu_after[k] = (int64_t)c1.current_bytes - (int64_t)c0.current_bytes;
        RT_OK(remat_sum_all(&l, y));
        RT_OK(remat_backward_scalar(l));
        cr_assert(rt_bitwise_equal(remat_tensor_grad(w1), g1), "policy %d: dW1 differs", k);
        cr_assert(rt_bitwise_equal(remat_tensor_grad(w2), g2), "policy %d: dW2 differs", k);
        remat_release_p(&l);
        remat_release_p(&y);
        remat_policy_release(pol);
    }
    /* two linear outputs: (32, 64) and (32, 16) f32 */
    int64_t cached = (32 * 64 + 32 * 16) * 4;
    cr_assert_eq(st[0].ops_cached, 2);
    cr_assert_eq(st[0].ops_offloaded, 0);
    cr_assert_eq(st[1].ops_cached, 2);
    cr_assert_eq(st[1].ops_offloaded, 2);
    cr_assert_eq(st[1].ops_from_cache, 1); /* the second linear ends the recomputation */
    cr_assert_eq(dev_after[0] - dev_after[1], cached, "device bytes: save %lld, offload %lld",
                 (long long)dev_after[0], (long long)dev_after[1]);
    cr_assert_eq(cpu_after[1] - cpu_after[0], cached, "host bytes: save %lld, offload %lld",
                 (long long)cpu_after[0], (long long)cpu_after[1]);

    /* on cpu, OFFLOAD is SAVE */
    remat_tensor *xc = NULL, *w1c = NULL, *w2c = NULL;
    RT_OK(remat_to_device(&xc, x, REMAT_DEVICE_CPU));
    remat_tensor *t1 = NULL, *t2 = NULL;
    RT_OK(remat_to_device(&t1, w1, REMAT_DEVICE_CPU));
    RT_OK(remat_to_device(&t2, w2, REMAT_DEVICE_CPU));
    RT_OK(remat_detach(&w1c, t1));
    RT_OK(remat_detach(&w2c, t2));
    RT_OK(remat_set_requires_grad(w1c, true));
    RT_OK(remat_set_requires_grad(w2c, true));
    rt_mlp_block blkc = blk;
    blkc.w1 = w1c;
    blkc.w2 = w2c;
    remat_policy *pol;
    RT_OK(remat_policy_from_fn(&pol, offload_linears, NULL, NULL));
    remat_sac_stats sc = {0};
    remat_sac_config cfg = {.policy = pol, .stats = &sc};
    remat_checkpoint_options o = sac_opts(&cfg);
    RT_OK(remat_checkpoint(rt_mlp_block_fn, &blkc, 1, &xc, 1, &y, &o));
    RT_OK(remat_sum_all(&l, y));
    RT_OK(remat_backward_scalar(l));
    cr_assert_eq(sc.ops_cached, 2);
    cr_assert_eq(sc.ops_offloaded, 0);
    cr_assert_eq(sc.ops_from_cache, 1);
    /* the same gradient as on the test device, up to its GEMMs' summation order (cuBLAS
     * on cuda) */
    rt_assert_close(remat_tensor_grad(w1c), g1, 1e-5, 1e-5, "dW1 on cpu");
    remat_release(l);
    remat_release(y);
    remat_policy_release(pol);
    remat_tensor *rel[] = {g1, g2, x, w1, w2, xc, w1c, w2c, t1, t2};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) remat_release(rel[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- nesting --------------------------------------------------------------------------------- */
typedef struct outer_ud {
    rt_mlp_block *blk;
    remat_sac_config *cfg;
} outer_ud;

/* Two MLP blocks, the second in an inner selective checkpoint. */
static int outer_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    outer_ud *u = ud;
    (void)n_in, (void)n_out;
    remat_tensor *h = NULL;
    int rc = rt_mlp_block_fn(&u->blk[0], in, 1, &h, 1);
    remat_checkpoint_options o = sac_opts(u->cfg);
    TRY(remat_checkpoint(rt_mlp_block_fn, &u->blk[1], 1, &h, 1, out, &o));
    remat_release(h);
    return rc;
}

Test(selective, nested_inside_a_plain_checkpoint) {
    rt_mlp_block blk[2];
    remat_tensor *params[8];
    int np = 0;
    for (int i = 0; i < 2; i++) {
        rt_mlp_block_init(&blk[i], 8, 16, 0.2, REMAT_F32, 50 + (unsigned)i);
        np += rt_mlp_block_params(&blk[i], params + np);
    }
    int64_t sh[] = {4, 8};
    remat_tensor *x = rt_rand(2, sh, REMAT_F32, -1, 1, 9);
    RT_OK(remat_set_requires_grad(x, true));
    remat_policy *pol;
    RT_OK(remat_policy_dots_saveable(&pol));
    remat_sac_stats st = {0};
    remat_sac_config cfg = {.policy = pol, .stats = &st};
    outer_ud u = {blk, &cfg};
    void *ud = &u;
    rt_grads ref, got;
    /* reference: the same function without any checkpoint */
    remat_sac_config none_cfg = cfg;
    (void)none_cfg;
    remat_manual_seed(SEED);
    {
        remat_tensor *h = NULL, *y = NULL, *l = NULL;
        RT_OK(rt_mlp_block_fn(&blk[0], &x, 1, &h, 1));
        RT_OK(rt_mlp_block_fn(&blk[1], &h, 1, &y, 1));
        RT_OK(remat_sum_all(&l, y));
        RT_OK(remat_backward_scalar(l));
        ref.n = 0;
        ref.out = y;
        ref.g[ref.n++] = remat_retain(remat_tensor_grad(x));
        for (int i = 0; i < np; i++) ref.g[ref.n++] = remat_retain(remat_tensor_grad(params[i]));
        remat_release(h);
        remat_release(l);
    }
    remat_checkpoint_options plain = {.use_reentrant = REMAT_OPT_FALSE};
    rt_run_blocks(SEED, 1, outer_fn, &ud, params, np, x, &plain, &got);
    rt_assert_same_grads(&ref, &got, "SAC region inside a plain checkpoint");
    cr_assert(st.ops_from_cache >= 1, "%lld", (long long)st.ops_from_cache);
    rt_grads_free(&got);
    rt_grads_free(&ref);
    remat_policy_release(pol);
    remat_release(x);
    for (int i = 0; i < 2; i++) rt_mlp_block_free(&blk[i]);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- debug traces cover selective regions ---------------------------------------------------- */
typedef struct nd_ud {
    remat_tensor *w;
    int runs;
} nd_ud;

/* forward: exp(linear(x)); recomputation: exp(reshape(linear(x))) — the
 * saved output of exp changes shape */
static int nd_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    nd_ud *u = ud;
    (void)n_in, (void)n_out;
    remat_tensor *h = NULL, *h2 = NULL;
    int rc = remat_linear(&h, in[0], u->w, NULL);
    if (u->runs++ > 0) {
        int64_t sh[] = {remat_size(h, 1), remat_size(h, 0)};
        TRY(remat_reshape(&h2, h, 2, sh));
    } else {
        h2 = remat_retain(h);
    }
    TRY(remat_exp(&out[0], h2));
    remat_release(h);
    remat_release(h2);
    return rc;
}

Test(selective, debug_traces_cover_selective_regions) {
    int64_t sw[] = {3, 4}, sx[] = {2, 4};
    nd_ud u = {rt_rand(2, sw, REMAT_F32, -0.5, 0.5, 2), 0};
    RT_OK(remat_set_requires_grad(u.w, true));
    remat_tensor *x = rt_rand(2, sx, REMAT_F32, -1, 1, 3), *y = NULL, *l = NULL;
    remat_policy *pol;
    RT_OK(remat_policy_dots_saveable(&pol));
    remat_sac_config cfg = {.policy = pol};
    remat_checkpoint_options o = sac_opts(&cfg);
    o.debug = REMAT_OPT_TRUE;
    /* debug + context_fn: a deliberate extension over PyTorch (docs/selective.md) */
    RT_OK(remat_checkpoint(nd_fn, &u, 1, &x, 1, &y, &o));
    RT_OK(remat_sum_all(&l, y));
    RT_FAILS(remat_backward_scalar(l), REMAT_EDETERMINISM, "You are seeing this error");
    const char *rep = remat_checkpoint_debug_report();
    /* the served linear appears in both traces, then the recomputation differs */
    char row[128];
    snprintf(row, sizeof row, "%-32s  %-32s", "remat_linear", "remat_linear");
    cr_assert(strstr(rep, row), "%s", rep);
    cr_assert(strstr(rep, "remat_reshape"), "%s", rep);
    remat_release(l);
    remat_release(y);
    remat_release(x);
    remat_release(u.w);
    remat_policy_release(pol);
    cr_assert_eq(remat_live_tensors(), 0);
}
