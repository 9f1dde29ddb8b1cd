/* tests/test_selective_offload.c — selective checkpointing's MUST/PREFER_CPU_OFFLOAD on the
 * offload path of saved tensors (src/sac/offload.c): a region's cached outputs leave the
 * device on the side stream (async D2H, events), come back for the recomputation, the next
 * ones prefetched — also across regions (the region recomputed next). On the fenced device
 * (memory the host cannot touch) with the logging transfer ops that stand in for cuda's
 * (tests/support/transfer_log.h); gradients bitwise equal to no checkpoint and to
 * MUST_SAVE. */
#include <string.h>

#include "core/core.h"
#include "sac/offload.h"
#include "support/fenced.h"
#include "support/models.h"
#include "support/rt.h"
#include "support/transfer_log.h"

enum { BLOCKS = 3, DIM = 8, HIDDEN = 32, ROWS = 6 };

static remat_tensor *to_fenced(remat_tensor *t) {
    remat_tensor *o = NULL;
    RT_OK(remat_to_device(&o, t, (remat_device){rt_fenced_type(), 0}));
    remat_release(t);
    return o;
}

typedef struct net {
    rt_mlp_block blk[BLOCKS];
    remat_tensor *x;
} net;

static void net_make(net *n) {
    for (int b = 0; b < BLOCKS; b++) {
        rt_mlp_block *k = &n->blk[b];
        *k = (rt_mlp_block){.dim = DIM, .hidden = HIDDEN, .gelu = REMAT_GELU_TANH};
        k->w1 = to_fenced(rt_rand(2, (int64_t[]){HIDDEN, DIM}, REMAT_F64, -.4, .4, 10 + b));
        k->b1 = to_fenced(rt_rand(1, (int64_t[]){HIDDEN}, REMAT_F64, -.1, .1, 20 + b));
        k->w2 = to_fenced(rt_rand(2, (int64_t[]){DIM, HIDDEN}, REMAT_F64, -.4, .4, 30 + b));
        RT_OK(remat_set_requires_grad(k->w1, true));
        RT_OK(remat_set_requires_grad(k->b1, true));
        RT_OK(remat_set_requires_grad(k->w2, true));
    }
    n->x = to_fenced(rt_rand(2, (int64_t[]){ROWS, DIM}, REMAT_F64, -1, 1, 3));
}

static void net_free(net *n) {
    for (int b = 0; b < BLOCKS; b++)
        remat_release(n->blk[b].w1), remat_release(n->blk[b].b1), remat_release(n->blk[b].w2);
    remat_release(n->x);
}

/* linears: MUST_CPU_OFFLOAD, gelu: PREFER_CPU_OFFLOAD (state: MUST_SAVE for both instead) */
static remat_checkpoint_policy policy(const remat_sac_context *ctx, const char *op, int n,
                                      remat_tensor *const *in, void *st) {
    (void)ctx, (void)n, (void)in;
    bool save = *(const bool *)st;
    if (strcmp(op, "remat_linear") == 0) return save ? REMAT_MUST_SAVE : REMAT_MUST_CPU_OFFLOAD;
    if (strcmp(op, "remat_gelu") == 0) return save ? REMAT_MUST_SAVE : REMAT_PREFER_CPU_OFFLOAD;
    return REMAT_PREFER_RECOMPUTE;
}

enum { PLAIN, SAVE, OFFLOAD };

/* The block, marking each run (forward or recomputation) in the transfer log with 'R'. */
static int block_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    if (rt_xfer.n_log < RT_XFER_LOG_MAX) rt_xfer.log[rt_xfer.n_log++] = 'R';
    rt_xfer.log[rt_xfer.n_log] = 0;
    return rt_mlp_block_fn(ud, in, n_in, out, n_out);
}

/* One forward (each block checkpointed with the policy unless PLAIN) and backward; the
 * parameters' gradients into g (new references); the device and host bytes the forward
 * left. */
static bool g_settle; /* wait for the copies to the host before measuring (rm_offload_settle) */
static void step(net *n, int mode, remat_sac_stats *st, remat_tensor **g, int64_t *fwd_bytes,
                 int64_t *fwd_host) {
    remat_device d = remat_tensor_device(n->x);
    remat_alloc_stats a0, a1;
    RT_OK(remat_alloc_stats_get(d, &a0));
    const int64_t h0 = (int64_t)remat_cpu_current_bytes();
    bool save = mode == SAVE;
    remat_policy *pol = NULL;
    RT_OK(remat_policy_from_fn(&pol, policy, &save, NULL));
    remat_sac_config cfg = {.policy = pol, .stats = st};
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE,
                                  .context_fn = remat_sac_context_fn,
                                  .context_fn_data = &cfg};
    remat_tensor *h = remat_retain(n->x), *loss = NULL;
    for (int b = 0; b < BLOCKS; b++) {
        remat_tensor *y = NULL;
        if (mode == PLAIN) RT_OK(block_fn(&n->blk[b], &h, 1, &y, 1));
        else RT_OK(remat_checkpoint(block_fn, &n->blk[b], 1, &h, 1, &y, &o));
        remat_release(h);
        h = y;
    }
    RT_OK(remat_sum_all(&loss, h));
    remat_release(h);
    if (g_settle) rm_offload_settle();
    RT_OK(remat_alloc_stats_get(d, &a1));
    *fwd_bytes = (int64_t)a1.current_bytes - (int64_t)a0.current_bytes;
    *fwd_host = (int64_t)remat_cpu_current_bytes() - h0;
    RT_OK(remat_backward(1, &loss, NULL, false, 0, NULL));
    remat_release(loss);
    remat_policy_release(pol);
    for (int b = 0; b < BLOCKS; b++) {
        remat_tensor *p[3] = {n->blk[b].w1, n->blk[b].b1, n->blk[b].w2};
        for (int i = 0; i < 3; i++) {
            g[3 * b + i] = remat_retain(remat_tensor_grad(p[i]));
            RT_OK(remat_set_grad(p[i], NULL));
        }
    }
}

/* polls: done() calls before a copy to the host completes (the device tensor is held
 * until then); ops false: no transfer ops (synchronous copies). */
static void check(bool ops, int polls) {
    rt_transfer_log_register(ops, polls);
    net n;
    net_make(&n);
    remat_tensor *g[3][3 * BLOCKS];
    int64_t bytes[3], host[3];
    remat_sac_stats st[3] = {0};
    long cpu0 = (long)remat_cpu_current_bytes();
    for (int mode = PLAIN; mode <= OFFLOAD; mode++) {
        if (mode == OFFLOAD) rt_transfer_log_register(ops, polls); /* the log of this run */
        step(&n, mode, &st[mode], g[mode], &bytes[mode], &host[mode]);
    }
    for (int i = 0; i < 3 * BLOCKS; i++) {
        cr_assert(g[PLAIN][i], "no gradient %d", i);
        cr_assert(rt_bitwise_equal(g[PLAIN][i], g[SAVE][i]), "MUST_SAVE: gradient %d differs", i);
        cr_assert(rt_bitwise_equal(g[PLAIN][i], g[OFFLOAD][i]), "OFFLOAD: gradient %d differs", i);
        for (int m = 0; m < 3; m++) remat_release(g[m][i]);
    }
    /* per block: the first linear's output (HIDDEN), gelu's (HIDDEN), the second's (DIM) */
    const int per_block = 3;
    const int64_t cached = BLOCKS * (int64_t)(2 * HIDDEN + DIM) * ROWS * (int64_t)sizeof(double);
    cr_assert_eq(st[SAVE].ops_cached, BLOCKS * per_block);
    cr_assert_eq(st[SAVE].ops_offloaded, 0);
    cr_assert_eq(st[OFFLOAD].ops_cached, BLOCKS * per_block);
    cr_assert_eq(st[OFFLOAD].ops_offloaded, BLOCKS * per_block);
    cr_assert_eq(st[OFFLOAD].ops_from_cache, st[SAVE].ops_from_cache);
    if (polls == 0 || g_settle)
        cr_assert_eq(bytes[SAVE] - bytes[OFFLOAD], cached,
                     "device bytes after the forward: MUST_SAVE %lld, OFFLOAD %lld",
                     (long long)bytes[SAVE], (long long)bytes[OFFLOAD]);
    /* the host copies count as host memory, pinned (the transfer ops') or not */
    cr_assert_eq(host[OFFLOAD] - host[SAVE], cached,
                 "host bytes after the forward: MUST_SAVE "
                 "%lld, OFFLOAD %lld",
                 (long long)host[SAVE], (long long)host[OFFLOAD]);
    cr_assert_eq((long)remat_cpu_current_bytes(), cpu0, "host copies freed with the graph");
    if (ops) {
        /* every cached tensor went out once, on the side stream; the served ones came back
         * (2 per block: the second linear's input saves end the recomputation first) and
         * the compute stream waited for each; every event and pinned buffer freed */
        cr_assert_eq(rt_xfer.n_d2h, BLOCKS * per_block, "log %s", rt_xfer.log);
        cr_assert_eq(rt_xfer.n_waits, BLOCKS * 2, "log %s", rt_xfer.log);
        cr_assert_geq(rt_xfer.n_h2d, rt_xfer.n_waits, "log %s", rt_xfer.log);
        cr_assert_eq(rt_xfer.n_events_live, 0);
        cr_assert_eq(rt_xfer.n_host_live, 0);
        const char *lastd = strrchr(rt_xfer.log, 'D'), *firsth = strchr(rt_xfer.log, 'H');
        cr_assert(lastd < firsth, "log %s", rt_xfer.log);
        /* with the copies to the host done at once, the whole story: the forward sends
         * each block's 3 cached tensors out (RDDD); the recomputation of the last block
         * fetches its first entry on demand (HW), the next two start before it goes on
         * (HH), the second is served (W), then the first entry of the block recomputed next
         * starts coming back (H); that block's first entry is then served without a fetch
         * of its own (RW). The second linear's output is fetched but never served: its
         * input's saves end the recomputation first. */
        if (polls == 0) cr_assert_str_eq(rt_xfer.log, "RDDDRDDDRDDDRHWHHWHRWHHWHRWHHW");
    }
    net_free(&n);
    rt_transfer_log_register(false, 0);
}

Test(selective_offload, side_stream_events_and_prefetch) { check(true, 0); }

/* the copies to the host still in flight when the recomputation wants them */
Test(selective_offload, copies_still_in_flight) { check(true, 3); }

Test(selective_offload, synchronous_copies_without_transfer_ops) { check(false, 0); }

/* copies that polling never sees done (as a GPU that lags the host): the device memory of
 * every offloaded tensor is still held after the forward until rm_offload_settle waits */
Test(selective_offload, settle_returns_the_memory_of_copies_in_flight) {
    g_settle = true;
    check(true, 1000);
    g_settle = false;
}
