/* tests/dist/dist_check.c — the data-parallel tests, run by CTest under
 * `mpirun -np 2` and `-np 3` (tests/dist/run.sh). Every rank runs every
 * check; a check fails on all ranks if it fails on one (the failure count
 * is all-reduced), and the program exits non-zero then.
 *
 *   dist_check all     the checks below
 *   dist_check hang    rank 1 stops answering: the others must fail with
 *                      "no answer from rank 1" within the 2 s timeout
 *   dist_check kill    rank 1 is killed mid-backward (mpirun must end the job)
 *   dist_check error   rank 1's backward fails: the others must name it
 *
 * Parameters in device memory run on "fenced" (tests/support/fenced.h), with and without
 * its fake transfer ops (tests/support/transfer_log.h).
 *
 * The model: x -> linear(w_in) -> L residual blocks -> * s -> mse. Each
 * block is h + linear2(gelu(linear1(layer_norm(h) * s))), with dropout
 * optional. The parameter s is shared by every block and used outside
 * them too: under reentrant checkpointing it receives L + 1 separate
 * accumulations per backward (one per recomputed block), the case that
 * makes PyTorch's DDP mark a variable ready twice. */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../support/by_hand.h"
#include "../support/fenced.h"
#include "../support/transfer_log.h"
#include "remat/remat.h"

#define D 16
#define L 4
#define B 12 /* global batch: divisible by 1, 2, 3 and 4 */

static remat_dist *pg;
static int rank, world;
static int failures;
static remat_dtype g_dtype = REMAT_F32; /* of the model and data (ZeRO-1's f64 check) */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __func__, __LINE__);                    \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " [%s]\n", remat_last_error());                                        \
        }                                                                                          \
    } while (0)
#define OK(expr)                                                                                   \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        CHECK(rc_ == REMAT_OK, "%s returned %s", #expr, remat_err_name(rc_));                      \
    } while (0)

/* ---- the model ----------------------------------------------------------------------------- */
typedef struct model model;
typedef struct blk {
    model *m;
    int i;
} blk;
/* Two blocks, each checkpointed inside (nested checkpoints). */
typedef struct pair_ud {
    blk b[2];
    int reentrant;
} pair_ud;

struct model {
    blk bl[L]; /* user_data of the checkpointed blocks: lives with the model */
    pair_ud pr[L / 2];
    remat_tensor *w_in, *s;
    remat_tensor *ln_w[L], *ln_b[L], *w1[L], *b1[L], *w2[L], *b2[L];
    remat_tensor *params[2 + 6 * L + 1]; /* + 1: check_zero adds one */
    int n;
    double p_drop;
};

static remat_tensor *param(model *m, int ndim, const int64_t *shape, double std, double mean) {
    remat_tensor *t = NULL;
    if (remat_rand_normal(&t, ndim, shape, mean, std, g_dtype, REMAT_DEVICE_CPU) ||
        remat_set_requires_grad(t, true)) {
        fprintf(stderr, "rank %d: cannot make a parameter: %s\n", rank, remat_last_error());
        exit(2);
    }
    m->params[m->n++] = t;
    return t;
}

static void model_init(model *m, uint64_t seed, double p_drop) {
    memset(m, 0, sizeof *m);
    m->p_drop = p_drop;
    remat_manual_seed(seed);
    int64_t dd[2] = {D, D}, d1[1] = {D};
    m->w_in = param(m, 2, dd, 0.3, 0);
    m->s = param(m, 1, d1, 0.1, 1.0);
    for (int i = 0; i < L; i++) {
        m->ln_w[i] = param(m, 1, d1, 0.1, 1.0);
        m->ln_b[i] = param(m, 1, d1, 0.1, 0);
        m->w1[i] = param(m, 2, dd, 0.25, 0);
        m->b1[i] = param(m, 1, d1, 0.1, 0);
        m->w2[i] = param(m, 2, dd, 0.25, 0);
        m->b2[i] = param(m, 1, d1, 0.1, 0);
    }
}

static void model_free(model *m) {
    for (int i = 0; i < m->n; i++) remat_release(m->params[i]);
    m->n = 0;
}

static void zero_grads(model *m) {
    for (int i = 0; i < m->n; i++) remat_set_grad(m->params[i], NULL);
}

static int block_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    blk *b = ud;
    model *m = b->m;
    int i = b->i;
    remat_scope *sc;
    remat_tensor *h, *t;
    int rc = remat_scope_begin(&sc);
    if (!rc) rc = remat_layer_norm(&h, in[0], 1, m->ln_w[i], m->ln_b[i], 1e-5);
    if (!rc) rc = remat_mul(&h, h, m->s);
    if (!rc) rc = remat_linear(&h, h, m->w1[i], m->b1[i]);
    if (!rc) rc = remat_gelu(&h, h, REMAT_GELU_TANH);
    if (!rc && m->p_drop > 0) rc = remat_dropout(&h, h, m->p_drop, true);
    if (!rc) rc = remat_linear(&h, h, m->w2[i], m->b2[i]);
    if (!rc) rc = remat_add(&t, in[0], h);
    if (!rc) out[0] = remat_scope_keep(t);
    remat_scope_end(sc);
    return rc;
}

static int pair_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    pair_ud *p = ud;
    remat_checkpoint_options o = {.use_reentrant = p->reentrant ? REMAT_OPT_TRUE : REMAT_OPT_FALSE};
    remat_tensor *mid = NULL;
    int rc = remat_checkpoint(block_fn, &p->b[0], 1, in, 1, &mid, &o);
    if (!rc) rc = remat_checkpoint(block_fn, &p->b[1], 1, &mid, 1, out, &o);
    remat_release(mid);
    return rc;
}

/* The user's own reentrant-style custom function (tests/support/by_hand.h): y = x * s in forward
 * (grad off), recomputed with grad on in backward, whose nested pass
 * accumulates into s — nothing the graph walk can see (the DDP learns). */
static bool g_by_hand_tail; /* forward ends with it instead of remat_mul */

/* h * s, through the custom function when g_by_hand_tail is set. */
static int tail(remat_tensor **out, remat_tensor *h, remat_tensor *s) {
    if (!g_by_hand_tail) return remat_mul(out, h, s);
    return remat_function_apply(&rt_by_hand_mul, s, 1, &h, 1, out);
}

enum mode {
    M_NONE,
    M_REENTRANT,
    M_NONREENTRANT,
    M_NESTED,
    M_NESTED_REENTRANT,
    M_SELECTIVE,
    M_PLANNER,
    N_MODES
};
static const char *mode_name[N_MODES] = {
    "none", "reentrant", "non-reentrant", "nested", "nested-reentrant", "selective", "planner"};

/* Loss of the model on rows [r0, r1) of the global batch (x, y). */
static int forward(model *m, int mode, remat_tensor *x, remat_tensor *y, int64_t r0, int64_t r1,
                   remat_tensor **loss) {
    remat_scope *sc;
    remat_tensor *xs, *ys, *h, *t;
    blk *bl = m->bl;
    pair_ud *pr = m->pr;
    for (int i = 0; i < L; i++) bl[i] = (blk){m, i};
    int rc = remat_scope_begin(&sc);
    if (!rc) rc = remat_slice(&xs, x, 0, r0, r1, 1);
    if (!rc) rc = remat_slice(&ys, y, 0, r0, r1, 1);
    if (!rc) rc = remat_linear(&h, xs, m->w_in, NULL);
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    remat_sac_config cfg = {0};
    remat_policy *pol = NULL;
    remat_plan *plan = NULL;
    if (!rc && mode == M_SELECTIVE) {
        rc = remat_policy_dots_saveable(&pol);
        cfg.policy = pol;
        o.context_fn = remat_sac_context_fn;
        o.context_fn_data = &cfg;
    }
    if (!rc && (mode == M_REENTRANT)) o.use_reentrant = REMAT_OPT_TRUE;
    if (!rc && mode == M_PLANNER) {
        remat_stage st[L];
        for (int i = 0; i < L; i++) st[i] = (remat_stage){block_fn, &bl[i]};
        rc = remat_plan_revolve(&plan, NULL, L, 2);
        if (!rc) rc = remat_plan_run(plan, st, h, &h);
    } else if (!rc && (mode == M_NESTED || mode == M_NESTED_REENTRANT)) {
        o.use_reentrant = mode == M_NESTED_REENTRANT ? REMAT_OPT_TRUE : REMAT_OPT_FALSE;
        for (int i = 0; !rc && i < L / 2; i++) {
            pr[i] = (pair_ud){{bl[2 * i], bl[2 * i + 1]}, mode == M_NESTED_REENTRANT};
            rc = remat_checkpoint(pair_fn, &pr[i], 1, &h, 1, &t, &o);
            if (!rc) h = t;
        }
    } else {
        remat_tensor *plain[L] = {0}; /* block_fn's outputs are the caller's */
        for (int i = 0; !rc && i < L; i++) {
            if (mode == M_NONE) rc = block_fn(&bl[i], &h, 1, &plain[i], 1), t = plain[i];
            else rc = remat_checkpoint(block_fn, &bl[i], 1, &h, 1, &t, &o);
            if (!rc) h = t; /* (the checkpoint hands its output to the scope) */
        }
        if (!rc) rc = tail(&h, h, m->s);
        for (int i = 0; i < L; i++) remat_release(plain[i]);
        if (!rc) rc = remat_mse_loss(&t, h, ys);
        if (!rc) *loss = remat_scope_keep(t);
        remat_scope_end(sc);
        remat_policy_release(pol);
        remat_plan_free(plan);
        return rc;
    }
    if (!rc) rc = tail(&h, h, m->s);
    if (!rc) rc = remat_mse_loss(&t, h, ys);
    if (!rc) *loss = remat_scope_keep(t);
    remat_scope_end(sc);
    remat_policy_release(pol);
    remat_plan_free(plan);
    return rc;
}

static void make_data(uint64_t seed, remat_tensor **x, remat_tensor **y) {
    int64_t sh[2] = {B, D};
    remat_manual_seed(seed);
    if (remat_rand_normal(x, 2, sh, 0, 1, g_dtype, REMAT_DEVICE_CPU) ||
        remat_rand_normal(y, 2, sh, 0, 1, g_dtype, REMAT_DEVICE_CPU)) {
        fprintf(stderr, "rank %d: data: %s\n", rank, remat_last_error());
        exit(2);
    }
}

static void shard(int64_t *r0, int64_t *r1) { remat_dist_shard(pg, B, r0, r1); }

static bool bitwise_equal(remat_tensor *a, remat_tensor *b) {
    if (!a || !b) return a == b;
    if (remat_numel(a) != remat_numel(b)) return false;
    if (remat_tensor_dtype(a) != remat_tensor_dtype(b)) return false;
    return !memcmp(remat_data(a), remat_data(b),
                   (size_t)remat_numel(a) * remat_dtype_size(remat_tensor_dtype(a)));
}

/* Element e of a f32 or f64 tensor. */
static double at(remat_tensor *t, int64_t e) {
    return remat_tensor_dtype(t) == REMAT_F64 ? ((const double *)remat_data(t))[e]
                                              : ((const float *)remat_data(t))[e];
}

/* Worst relative difference between the parameters of two models
 * (|a - b| / (|a| + 1e-3)), folded into *worst. */
static void param_diff(const model *a, const model *b, double *worst) {
    for (int i = 0; i < a->n; i++)
        for (int64_t e = 0; e < remat_numel(a->params[i]); e++) {
            double x = at(a->params[i], e), y = at(b->params[i], e);
            double d = fabs(x - y) / (fabs(x) + 1e-3);
            if (!(d <= *worst)) *worst = d; /* NaN counts */
        }
}

static void sgd(model *m, double lr) {
    bool prev = remat_no_grad_begin();
    for (int i = 0; i < m->n; i++) {
        remat_tensor *g = remat_tensor_grad(m->params[i]);
        if (g) OK(remat_add_(m->params[i], g, -lr));
    }
    remat_grad_mode_restore(prev);
}

/* ---- checks --------------------------------------------------------------------------------- */
static void check_collectives(void) {
    CHECK(remat_dist_available(), "built without MPI");
    CHECK(world == remat_dist_world_size(pg) && world >= 2, "world size %d", world);
    remat_tensor *t = NULL;
    int64_t n = 5;
    OK(remat_full(&t, 1, &n, rank + 1, REMAT_F32, REMAT_DEVICE_CPU));
    OK(remat_dist_all_reduce(pg, t, REMAT_REDUCE_SUM));
    double v = 0;
    remat_item_at(t, 4, &v);
    CHECK(v == world * (world + 1) / 2.0, "sum %g", v);
    remat_release(t);
    OK(remat_full(&t, 1, &n, rank + 1, REMAT_F32, REMAT_DEVICE_CPU));
    OK(remat_dist_all_reduce(pg, t, REMAT_REDUCE_MEAN));
    remat_item_at(t, 0, &v);
    CHECK(fabs(v - (world + 1) / 2.0) < 1e-6, "mean %g", v);
    remat_release(t);
    OK(remat_full(&t, 1, &n, rank, REMAT_F64, REMAT_DEVICE_CPU));
    OK(remat_dist_all_reduce(pg, t, REMAT_REDUCE_MAX));
    remat_item_at(t, 2, &v);
    CHECK(v == world - 1, "max %g", v);
    remat_release(t);
    OK(remat_full(&t, 1, &n, rank == 1 ? 42 : -1, REMAT_F32, REMAT_DEVICE_CPU));
    OK(remat_dist_broadcast(pg, t, 1));
    remat_item_at(t, 3, &v);
    CHECK(v == 42, "broadcast %g", v);
    bool same = false;
    OK(remat_dist_check_identical(pg, 1, &t, &same));
    CHECK(same, "identical after broadcast");
    float *d = remat_data(t);
    if (rank == world - 1) d[0] += 1;
    OK(remat_dist_check_identical(pg, 1, &t, &same));
    CHECK(!same, "a changed element is seen");
    CHECK(remat_dist_broadcast(pg, t, world) == REMAT_EINVAL, "root out of range");
    remat_release(t);
    double st[2] = {rank, 1};
    OK(remat_dist_all_reduce_f64(pg, st, 2, REMAT_REDUCE_SUM));
    CHECK(st[1] == world, "f64 sum %g", st[1]);
    OK(remat_dist_barrier(pg));
    /* shards tile [0, n) */
    for (int64_t m = 0; m < 8; m++) {
        int64_t b, e;
        remat_dist_shard(pg, m, &b, &e);
        double cnt[1] = {(double)(e - b)};
        OK(remat_dist_all_reduce_f64(pg, cnt, 1, REMAT_REDUCE_SUM));
        CHECK(cnt[0] == (double)m && e - b <= m / world + 1, "shard of %lld", (long long)m);
    }
    CHECK(remat_dist_rank_seed(pg, 7) == 7 || rank != 0, "rank 0 keeps the seed");
}

/* Per-parameter ready counts of one backward. */
typedef struct ready_log {
    int count[2 + 6 * L];
    int in_backward;
} ready_log;
static void on_ready(void *ud, int i) {
    ready_log *r = ud;
    r->count[i]++;
    r->in_backward += remat_in_backward();
}

/* Gradients under every checkpoint mode equal those of none, bitwise; the
 * ready event fires exactly once per parameter per backward. */
static void check_modes(void) {
    model m;
    model_init(&m, 1, 0.1);
    ready_log log;
    remat_ddp *ddp = NULL;
    remat_ddp_options o = {.bucket_bytes = 2048, .on_ready = on_ready, .on_ready_data = &log};
    OK(remat_ddp_create(&ddp, pg, m.n, m.params, &o));
    if (!ddp) return;
    CHECK(remat_ddp_bucket_of(ddp, m.n - 1) == 0 && remat_ddp_bucket_of(ddp, 0) > 0,
          "buckets in reverse registration order");
    remat_tensor *x, *y;
    make_data(99, &x, &y);
    int64_t r0, r1;
    shard(&r0, &r1);
    remat_tensor *ref[2 + 6 * L] = {0};
    for (int mode = 0; mode < N_MODES; mode++) {
        for (int rep = 0; rep < 2; rep++) {
            zero_grads(&m);
            memset(&log, 0, sizeof log);
            remat_manual_seed(remat_dist_rank_seed(pg, 5)); /* same masks in every mode */
            remat_tensor *loss = NULL;
            OK(forward(&m, mode, x, y, r0, r1, &loss));
            OK(remat_ddp_backward(ddp, loss));
            remat_release(loss);
            remat_ddp_stats st;
            remat_ddp_get_stats(ddp, &st);
            int once = 0;
            for (int i = 0; i < m.n; i++) once += log.count[i] == 1;
            CHECK(once == m.n && st.n_ready_events == m.n,
                  "%s: %d of %d parameters got exactly one ready event (%lld events)",
                  mode_name[mode], once, m.n, (long long)st.n_ready_events);
            if (mode == M_REENTRANT || mode == M_NESTED_REENTRANT)
                CHECK(st.n_accumulations > m.n,
                      "%s: the shared parameter is accumulated once per "
                      "recomputed block (%lld accumulations)",
                      mode_name[mode], (long long)st.n_accumulations);
            if (mode != M_NONE && rep == 1) {
                CHECK(!st.learning && st.n_rereduced == 0, "%s: second backward learned (%d)",
                      mode_name[mode], st.n_rereduced);
                CHECK(log.in_backward == m.n, "%s: %d of %d ready events during backward",
                      mode_name[mode], log.in_backward, m.n);
            }
            CHECK(st.n_rereduced == 0,
                  "%s (backward %d): %d buckets reduced again: the "
                  "counts read before the pass were wrong",
                  mode_name[mode], rep, st.n_rereduced);
            for (int i = 0; i < m.n; i++) {
                remat_tensor *g = remat_tensor_grad(m.params[i]);
                if (mode == M_NONE && rep == 0) {
                    ref[i] = NULL;
                    if (g) OK(remat_clone(&ref[i], g));
                } else {
                    CHECK(bitwise_equal(g, ref[i]),
                          "%s (backward %d): gradient %d differs from "
                          "none's",
                          mode_name[mode], rep, i);
                }
            }
            bool same = false;
            OK(remat_dist_check_identical(pg, 1, &m.params[1], &same));
        }
    }
    for (int i = 0; i < m.n; i++) remat_release(ref[i]);
    remat_release(x);
    remat_release(y);
    remat_ddp_free(ddp);
    model_free(&m);
}

/* 2 ranks x B/2 vs 1 rank x B: losses within 1e-5 relative for 20 steps;
 * parameters bitwise identical across ranks after every step. */
static void check_vs_single(void) {
    model m, ref;
    model_init(&ref, 3, 0);
    model_init(&m, 3, 0);
    /* other ranks start elsewhere: remat_ddp_create must copy rank 0's */
    if (rank) {
        bool prev = remat_no_grad_begin();
        for (int i = 0; i < m.n; i++) remat_mul_scalar_(m.params[i], 1.0 + 0.5 * rank);
        remat_grad_mode_restore(prev);
    }
    remat_ddp *ddp = NULL;
    OK(remat_ddp_create(&ddp, pg, m.n, m.params, NULL));
    if (!ddp) return;
    bool same = false;
    OK(remat_dist_check_identical(pg, m.n, m.params, &same));
    CHECK(same, "parameters identical after create");
    for (int i = 0; i < m.n; i++)
        CHECK(bitwise_equal(m.params[i], ref.params[i]), "param %d is rank 0's", i);
    int64_t r0, r1;
    shard(&r0, &r1);
    double worst = 0;
    for (int step = 0; step < 20; step++) {
        remat_tensor *x, *y, *loss = NULL, *rloss = NULL;
        make_data(1000 + (uint64_t)step, &x, &y);
        zero_grads(&m);
        zero_grads(&ref);
        OK(forward(&m, step % 2 ? M_REENTRANT : M_NONREENTRANT, x, y, r0, r1, &loss));
        double l = 0, lr = 0;
        if (loss) remat_item(loss, &l);
        OK(remat_ddp_backward(ddp, loss));
        OK(remat_dist_all_reduce_f64(pg, &l, 1, REMAT_REDUCE_MEAN));
        OK(forward(&ref, M_NONE, x, y, 0, B, &rloss));
        if (rloss) remat_item(rloss, &lr);
        OK(remat_backward_scalar(rloss));
        double rel = fabs(l - lr) / fabs(lr);
        if (rel > worst) worst = rel;
        CHECK(rel <= 1e-5, "step %d: loss %.9g vs single-process %.9g", step, l, lr);
        sgd(&m, 0.05);
        sgd(&ref, 0.05);
        OK(remat_dist_check_identical(pg, m.n, m.params, &same));
        CHECK(same, "step %d: parameters differ across ranks", step);
        remat_release(loss);
        remat_release(rloss);
        remat_release(x);
        remat_release(y);
    }
    if (rank == 0) printf("  vs single process: worst relative loss difference %.2e\n", worst);
    remat_ddp_free(ddp);
    model_free(&m);
    model_free(&ref);
}

/* Own dropout stream per rank; parameters still identical after steps. */
static void check_dropout_streams(void) {
    remat_manual_seed(remat_dist_rank_seed(pg, 11));
    remat_tensor *ones = NULL, *dr = NULL;
    int64_t n = 256;
    OK(remat_full(&ones, 1, &n, 1, REMAT_F32, REMAT_DEVICE_CPU));
    OK(remat_dropout(&dr, ones, 0.5, true));
    bool same = true;
    if (dr) OK(remat_dist_check_identical(pg, 1, &dr, &same));
    CHECK(!same, "ranks drew the same dropout mask");
    remat_release(ones);
    remat_release(dr);
    model m;
    model_init(&m, 4, 0.2);
    remat_ddp *ddp = NULL;
    OK(remat_ddp_create(&ddp, pg, m.n, m.params, NULL));
    if (!ddp) return;
    remat_tensor *x, *y;
    make_data(5, &x, &y);
    int64_t r0, r1;
    shard(&r0, &r1);
    remat_manual_seed(remat_dist_rank_seed(pg, 11));
    for (int step = 0; step < 5; step++) {
        remat_tensor *loss = NULL;
        zero_grads(&m);
        OK(forward(&m, M_NONREENTRANT, x, y, r0, r1, &loss));
        OK(remat_ddp_backward(ddp, loss));
        remat_release(loss);
        sgd(&m, 0.05);
        OK(remat_dist_check_identical(pg, m.n, m.params, &same));
        CHECK(same, "dropout step %d: parameters differ across ranks", step);
    }
    remat_release(x);
    remat_release(y);
    remat_ddp_free(ddp);
    model_free(&m);
}

/* no_sync: micro-batch 1 without communication, micro-batch 2 synchronised
 * = the mean over ranks of the summed local gradients. */
static void check_no_sync(void) {
    model m, ref;
    model_init(&m, 6, 0);
    model_init(&ref, 6, 0);
    remat_ddp *ddp = NULL;
    OK(remat_ddp_create(&ddp, pg, m.n, m.params, NULL));
    if (!ddp) return;
    remat_tensor *x, *y;
    make_data(8, &x, &y);
    int64_t r0, r1;
    shard(&r0, &r1);
    int64_t mid = r0 + (r1 - r0) / 2;
    remat_tensor *l1 = NULL, *l2 = NULL, *q1 = NULL, *q2 = NULL;
    remat_ddp_set_sync(ddp, false);
    OK(forward(&m, M_REENTRANT, x, y, r0, mid, &l1));
    OK(remat_ddp_backward(ddp, l1));
    remat_ddp_stats st;
    remat_ddp_set_sync(ddp, true);
    OK(forward(&m, M_REENTRANT, x, y, mid, r1, &l2));
    OK(remat_ddp_backward(ddp, l2));
    remat_ddp_get_stats(ddp, &st);
    CHECK(st.n_ready_events == m.n, "one ready event per parameter after no_sync");
    OK(forward(&ref, M_NONE, x, y, r0, mid, &q1));
    OK(remat_backward_scalar(q1));
    OK(forward(&ref, M_NONE, x, y, mid, r1, &q2));
    OK(remat_backward_scalar(q2));
    for (int i = 0; i < ref.n; i++) {
        remat_tensor *g = remat_tensor_grad(ref.params[i]);
        OK(remat_dist_all_reduce(pg, g, REMAT_REDUCE_MEAN));
        remat_tensor *a = remat_tensor_grad(m.params[i]);
        const float *pa = remat_data(a), *pb = remat_data(g);
        double err = 0;
        for (int64_t e = 0; e < remat_numel(g); e++) {
            double d = fabs((double)pa[e] - pb[e]) / (fabs(pb[e]) + 1e-6);
            if (d > err) err = d;
        }
        CHECK(err < 1e-5, "no_sync: gradient %d differs by %g", i, err);
    }
    remat_release(l1);
    remat_release(l2);
    remat_release(q1);
    remat_release(q2);
    remat_release(x);
    remat_release(y);
    remat_ddp_free(ddp);
    model_free(&m);
    model_free(&ref);
}

/* Unused parameters: used on rank 0 only → mean over ranks everywhere;
 * unused on every rank → .grad stays NULL everywhere. */
static void check_unused(void) {
    remat_tensor *p[3] = {0};
    int64_t n = 4;
    for (int i = 0; i < 3; i++) {
        OK(remat_full(&p[i], 1, &n, 1 + i, REMAT_F32, REMAT_DEVICE_CPU));
        OK(remat_set_requires_grad(p[i], true));
    }
    remat_ddp *ddp = NULL;
    OK(remat_ddp_create(&ddp, pg, 3, p, NULL));
    if (!ddp) return;
    for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < 3; i++) remat_set_grad(p[i], NULL);
        remat_tensor *a = NULL, *s = NULL;
        OK(rank == 0 ? remat_mul(&a, p[0], p[1]) : remat_mul_scalar(&a, p[0], 3.0));
        OK(remat_sum(&s, a, 0, NULL, false));
        OK(remat_ddp_backward(ddp, s));
        remat_tensor *g0 = remat_tensor_grad(p[0]), *g1 = remat_tensor_grad(p[1]);
        double v0 = 0, v1 = 0;
        if (g0) remat_item_at(g0, 0, &v0);
        if (g1) remat_item_at(g1, 0, &v1);
        /* rank 0: d/dp0 = p1 = 2, others 3; d/dp1 = p0 = 1 on rank 0 only */
        double want0 = (2.0 + 3.0 * (world - 1)) / world;
        CHECK(fabs(v0 - want0) < 1e-6, "used everywhere: %g, want %g", v0, want0);
        CHECK(g1 && fabs(v1 - 1.0 / world) < 1e-6, "used on rank 0 only: %g", v1);
        CHECK(remat_tensor_grad(p[2]) == NULL, "unused everywhere keeps no .grad");
        remat_release(a);
        remat_release(s);
    }
    remat_ddp_free(ddp);
    for (int i = 0; i < 3; i++) remat_release(p[i]);
}

/* Mismatched parameter lists are caught at set-up, on every rank. */
static void check_mismatch(void) {
    remat_tensor *p[2] = {0};
    int64_t sh[2] = {3, rank == 1 ? 5 : 4}, n1 = 2;
    OK(remat_zeros(&p[0], 1, &n1, REMAT_F32, REMAT_DEVICE_CPU));
    OK(remat_zeros(&p[1], 2, sh, REMAT_F32, REMAT_DEVICE_CPU));
    for (int i = 0; i < 2; i++) remat_set_requires_grad(p[i], true);
    remat_ddp *ddp = NULL;
    int rc = remat_ddp_create(&ddp, pg, 2, p, NULL);
    CHECK(rc == REMAT_EINVAL && strstr(remat_last_error(), "parameter 1 is [3, 5] f32 on rank 1"),
          "shape mismatch: %s", remat_err_name(rc));
    rc = remat_ddp_create(&ddp, pg, rank == 1 ? 1 : 2, p, NULL);
    CHECK(rc == REMAT_EINVAL && strstr(remat_last_error(), "rank 1 registers 1 parameters"),
          "count mismatch: %s", remat_err_name(rc));
    /* bad arguments on one rank: the others get its message */
    remat_tensor *bad[2] = {p[0], rank == 1 ? NULL : p[1]};
    rc = remat_ddp_create(&ddp, pg, 2, bad, NULL);
    CHECK(rc != REMAT_OK && (rank == 1 ? strstr(remat_last_error(), "parameter 1 is NULL") != NULL
                                       : strstr(remat_last_error(), "rank 1 failed") != NULL),
          "bad argument on rank 1: %s", remat_err_name(rc));
    CHECK(ddp == NULL, "no ddp on failure");
    remat_release(p[0]);
    remat_release(p[1]);
}

/* A rank whose backward fails: the others are told, naming it; the group
 * stays usable. */
static void check_error_reported(void) {
    remat_tensor *p = NULL, *s = NULL, *c = NULL;
    int64_t n = 4;
    OK(remat_full(&p, 1, &n, 1, REMAT_F32, REMAT_DEVICE_CPU));
    OK(remat_set_requires_grad(p, true));
    remat_ddp *ddp = NULL;
    OK(remat_ddp_create(&ddp, pg, 1, &p, NULL));
    if (!ddp) return;
    OK(remat_sum(&s, p, 0, NULL, false));
    OK(remat_scalar(&c, 1.0, REMAT_F32)); /* does not require grad */
    int rc = remat_ddp_backward(ddp, rank == 1 ? c : s);
    if (rank == 1)
        CHECK(rc == REMAT_ENOGRAD, "the failing rank keeps its error: %s", remat_err_name(rc));
    else
        CHECK(rc == REMAT_EIO && strstr(remat_last_error(), "rank 1 failed (REMAT_ENOGRAD)"),
              "others name rank 1: %s", remat_err_name(rc));
    remat_release(s);
    OK(remat_sum(&s, p, 0, NULL, false));
    OK(remat_ddp_backward(ddp, s));
    remat_release(s);
    remat_release(c);
    remat_ddp_free(ddp);
    remat_release(p);
}

/* ZeRO-1: optimizer state per rank = 1/world of the unsharded (exact
 * allocator bytes); the trajectory equals DDP + the library's AdamW within
 * 1e-6; parameters bitwise identical across ranks after every step. */
/* ZeRO-1 against DDP + remat_optim over the same model, in g_dtype. */
static void check_zero(void) {
    model a, b;
    model_init(&a, 21, 0);
    model_init(&b, 21, 0);
    /* one more small parameter each: 2580 elements, divisible by 1..6 */
    int64_t four = 4;
    for (model *m = &a; m; m = m == &a ? &b : NULL) {
        remat_tensor *t = NULL;
        OK(remat_full(&t, 1, &four, 0.5, g_dtype, REMAT_DEVICE_CPU));
        OK(remat_set_requires_grad(t, true));
        m->params[m->n++] = t;
    }
    int64_t total = 0;
    for (int i = 0; i < a.n; i++) total += remat_numel(a.params[i]);
    CHECK(total % 6 == 0, "test model has %lld elements", (long long)total);
    remat_optim_options o;
    OK(remat_optim_options_init(&o, REMAT_OPTIM_ADAMW));
    o.lr = 1e-2;
    o.beta2 = 0.95;
    o.weight_decay = 0.1;
    o.clip_norm = 0.5;
    o.schedule = (remat_lr_schedule){REMAT_LR_WARMUP_COSINE, 2, 10, 1e-3};
    /* plain: DDP + remat_optim (matrices decay, vectors do not) */
    remat_tensor *dec[2 + 6 * L + 1], *nodec[2 + 6 * L + 1];
    double wd[2 + 6 * L + 1];
    int nd = 0, nn = 0;
    for (int i = 0; i < a.n; i++) {
        bool matrix = remat_ndim(a.params[i]) == 2;
        wd[i] = matrix ? o.weight_decay : 0.0;
        if (matrix) dec[nd++] = a.params[i];
        else nodec[nn++] = a.params[i];
    }
    remat_ddp *ddp = NULL;
    remat_optimizer *opt = NULL;
    OK(remat_ddp_create(&ddp, pg, a.n, a.params, NULL));
    OK(remat_optim_create(&opt, &o, dec, nd));
    OK(remat_optim_add_group(opt, nodec, nn, 0.0));
    size_t before = remat_cpu_current_bytes();
    remat_zero *z = NULL;
    OK(remat_zero_create(&z, pg, b.n, b.params, wd, &o, NULL));
    size_t grew = remat_cpu_current_bytes() - before;
    if (!ddp || !opt || !z) return;
    size_t unsharded = remat_optim_state_bytes(opt);
    CHECK(unsharded == 2 * remat_dtype_size(g_dtype) * (size_t)total, "unsharded AdamW state %zu",
          unsharded);
    CHECK(remat_zero_state_bytes(z) * (size_t)world == unsharded,
          "ZeRO state %zu bytes per rank, unsharded %zu, world %d", remat_zero_state_bytes(z),
          unsharded, world);
    CHECK(grew == remat_zero_state_bytes(z) + remat_zero_buffer_bytes(z),
          "allocator grew %zu at create = state %zu + buffers %zu", grew, remat_zero_state_bytes(z),
          remat_zero_buffer_bytes(z));
    if (rank == 0)
        printf("  ZeRO-1 (%s): optimizer state %zu bytes per rank, unsharded %zu (1/%d)\n",
               remat_dtype_name(g_dtype), remat_zero_state_bytes(z), unsharded, world);
    int64_t r0, r1;
    shard(&r0, &r1);
    double worst = 0;
    for (int step = 0; step < 10; step++) {
        remat_tensor *x, *y, *la = NULL, *lb = NULL;
        make_data(300 + (uint64_t)step, &x, &y);
        OK(forward(&a, M_NONREENTRANT, x, y, r0, r1, &la));
        OK(remat_ddp_backward(ddp, la));
        OK(remat_optim_step(opt, NULL));
        OK(forward(&b, step % 2 ? M_REENTRANT : M_NONREENTRANT, x, y, r0, r1, &lb));
        OK(remat_zero_backward(z, lb));
        OK(remat_zero_step(z, NULL));
        param_diff(&a, &b, &worst);
        CHECK(worst <= 1e-6, "step %d: ZeRO-1 differs from DDP + AdamW by %g", step, worst);
        bool same = false;
        OK(remat_dist_check_identical(pg, b.n, b.params, &same));
        CHECK(same, "step %d: ZeRO-1 parameters differ across ranks", step);
        CHECK(remat_tensor_grad(b.params[0]) == NULL, "step drops the gradients");
        remat_release(la);
        remat_release(lb);
        remat_release(x);
        remat_release(y);
    }
    CHECK(remat_zero_updates(z) == 10, "updates %lld", (long long)remat_zero_updates(z));
    if (rank == 0)
        printf("  ZeRO-1 vs DDP + AdamW (%s): worst relative parameter difference %.2e\n",
               remat_dtype_name(g_dtype), worst);
    remat_zero_free(z);
    remat_optim_free(opt);
    remat_ddp_free(ddp);
    model_free(&a);
    model_free(&b);
}

static void check_zero_f64(void) {
    g_dtype = REMAT_F64;
    check_zero();
    g_dtype = REMAT_F32;
}

/* Overlap from the first backward: a fresh DDP knows the counts before
 * the pass under every checkpoint mode — the graph shows the accumulations,
 * and a reentrant checkpoint's forward recorded those of its nested pass
 * (the shared parameter s is accumulated once per recomputed block and once
 * outside) — so every ready event fires during the backward and every
 * bucket starts before it ends; still exactly one ready event per
 * parameter, no re-reduction. */
static void check_first_step_overlap(void) {
    for (int mode = 0; mode < N_MODES; mode++) {
        model m;
        model_init(&m, 3, 0);
        ready_log log;
        memset(&log, 0, sizeof log);
        remat_ddp *ddp = NULL;
        remat_ddp_options o = {.bucket_bytes = 2048, .on_ready = on_ready, .on_ready_data = &log};
        OK(remat_ddp_create(&ddp, pg, m.n, m.params, &o));
        remat_tensor *x, *y, *loss = NULL;
        make_data(77, &x, &y);
        int64_t r0, r1;
        shard(&r0, &r1);
        OK(forward(&m, mode, x, y, r0, r1, &loss));
        if (ddp) OK(remat_ddp_backward(ddp, loss));
        remat_ddp_stats st;
        remat_ddp_get_stats(ddp, &st);
        int once = 0;
        for (int i = 0; i < m.n; i++) once += log.count[i] == 1;
        CHECK(once == m.n && st.n_ready_events == m.n,
              "%s: %d of %d parameters got exactly one "
              "ready event",
              mode_name[mode], once, m.n);
        CHECK(st.n_done_in_backward >= 0 && st.n_done_in_backward <= st.n_buckets,
              "%s: %d of %d buckets done in backward", mode_name[mode], st.n_done_in_backward,
              st.n_buckets);
        CHECK(!st.learning && st.graph_counts && st.n_rereduced == 0,
              "%s: first backward: learning %d, graph counts %d, %d re-reduced", mode_name[mode],
              st.learning, st.graph_counts, st.n_rereduced);
        CHECK(log.in_backward == m.n, "%s: %d of %d ready events during the first backward",
              mode_name[mode], log.in_backward, m.n);
        CHECK(st.n_buckets >= 3 && st.n_launched_in_backward == st.n_buckets,
              "%s: %d of %d buckets started before the first backward ended", mode_name[mode],
              st.n_launched_in_backward, st.n_buckets);
        remat_release(loss);
        remat_release(x);
        remat_release(y);
        remat_ddp_free(ddp);
        model_free(&m);
    }
}

/* A custom function of the user's that runs its own pass hides it from the
 * graph: the DDP falls back on the counts of the previous backward. After
 * a backward without it (s counted once) the first one with it re-reduces
 * s's bucket (s grew after it was sent) and gets the gradients right; the
 * next one has learned: no re-reduction, every bucket during backward. A
 * fresh DDP's first such backward starts every bucket at its end. Exactly
 * one ready event per parameter each time. */
static void check_opaque_learns(void) {
    model m;
    model_init(&m, 5, 0);
    remat_tensor *x, *y;
    make_data(55, &x, &y);
    int64_t r0, r1;
    shard(&r0, &r1);
    remat_tensor *ref[2 + 6 * L] = {0};
    for (int fresh = 0; fresh < 2; fresh++) {
        ready_log log;
        remat_ddp *ddp = NULL;
        remat_ddp_options o = {.bucket_bytes = 2048, .on_ready = on_ready, .on_ready_data = &log};
        OK(remat_ddp_create(&ddp, pg, m.n, m.params, &o));
        if (!ddp) break;
        for (int rep = 0; rep < 3; rep++) {
            bool by_hand = fresh || rep > 0;
            zero_grads(&m);
            memset(&log, 0, sizeof log);
            remat_tensor *loss = NULL;
            g_by_hand_tail = by_hand;
            OK(forward(&m, M_NONE, x, y, r0, r1, &loss));
            g_by_hand_tail = false;
            OK(remat_ddp_backward(ddp, loss));
            remat_release(loss);
            remat_ddp_stats st;
            remat_ddp_get_stats(ddp, &st);
            int once = 0;
            for (int i = 0; i < m.n; i++) once += log.count[i] == 1;
            CHECK(once == m.n, "fresh %d, backward %d: %d of %d parameters got one ready event",
                  fresh, rep, once, m.n);
            CHECK(st.graph_counts == !by_hand, "fresh %d, backward %d: graph counts %d", fresh, rep,
                  st.graph_counts);
            if (!fresh && rep == 1)
                CHECK(st.n_rereduced > 0 && st.n_launched_in_backward == st.n_buckets,
                      "after a backward without it: s's bucket reduced again (%d re-reduced, "
                      "%d of %d started in backward)",
                      st.n_rereduced, st.n_launched_in_backward, st.n_buckets);
            if (fresh && rep == 0)
                CHECK(st.learning && st.n_launched_in_backward == 0,
                      "a fresh DDP's first opaque backward learns (%d started in backward)",
                      st.n_launched_in_backward);
            if (rep == 2)
                CHECK(!st.learning && st.n_rereduced == 0 &&
                          st.n_launched_in_backward == st.n_buckets && log.in_backward == m.n,
                      "fresh %d: learned: %d re-reduced, %d of %d started in backward", fresh,
                      st.n_rereduced, st.n_launched_in_backward, st.n_buckets);
            for (int i = 0; i < m.n; i++) {
                remat_tensor *g = remat_tensor_grad(m.params[i]);
                if (!fresh && rep == 0) {
                    OK(remat_clone(&ref[i], g));
                    continue;
                }
                /* s's gradient is summed in another order: equal up to rounding */
                double worst = 0;
                for (int64_t e = 0; e < remat_numel(g); e++) {
                    double d = fabs(at(g, e) - at(ref[i], e)) / (fabs(at(ref[i], e)) + 1e-3);
                    if (!(d <= worst)) worst = d;
                }
                CHECK(worst <= 1e-5, "fresh %d, backward %d: gradient %d differs by %g", fresh, rep,
                      i, worst);
            }
        }
        remat_ddp_free(ddp);
    }
    for (int i = 0; i < m.n; i++) remat_release(ref[i]);
    remat_release(x);
    remat_release(y);
    model_free(&m);
}

/* After a synchronised backward each .grad is a view into its bucket's
 * buffer (no copy after the all-reduce): parameters next to each other in
 * a bucket have their gradients next to each other in memory. Gradients
 * the user still holds after dropping .grad are never written by the next
 * backward (the bucket took a fresh buffer). */
static void check_grad_views(void) {
    model m;
    model_init(&m, 9, 0);
    remat_ddp *ddp = NULL;
    remat_ddp_options o = {.bucket_bytes = 2048};
    OK(remat_ddp_create(&ddp, pg, m.n, m.params, &o));
    if (!ddp) return;
    int64_t r0, r1;
    shard(&r0, &r1);
    remat_tensor *held[2 + 6 * L] = {0}, *copy[2 + 6 * L] = {0}, *x, *y, *loss = NULL;
    make_data(91, &x, &y);
    OK(forward(&m, M_NONE, x, y, r0, r1, &loss));
    OK(remat_ddp_backward(ddp, loss));
    remat_release(loss);
    int adjacent = 0, pairs = 0;
    for (int i = 1; i < m.n; i++) {
        if (remat_ddp_bucket_of(ddp, i) != remat_ddp_bucket_of(ddp, i - 1)) continue;
        pairs++;
        /* reverse registration order: parameter i comes first in the bucket */
        const char *a = remat_data(remat_tensor_grad(m.params[i]));
        const char *b = remat_data(remat_tensor_grad(m.params[i - 1]));
        adjacent += b == a + remat_numel(m.params[i]) * (int64_t)remat_dtype_size(g_dtype);
    }
    CHECK(pairs > 0 && adjacent == pairs,
          "%d of %d neighbours' gradients are adjacent in the "
          "bucket",
          adjacent, pairs);
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < m.n; i++) {
            held[i] = remat_retain(remat_tensor_grad(m.params[i]));
            OK(remat_clone(&copy[i], held[i]));
        }
        zero_grads(&m);
        remat_release(x);
        remat_release(y);
        make_data(92 + (uint64_t)step, &x, &y);
        OK(forward(&m, M_NONE, x, y, r0, r1, &loss));
        OK(remat_ddp_backward(ddp, loss));
        remat_release(loss);
        int intact = 0;
        for (int i = 0; i < m.n; i++) intact += bitwise_equal(held[i], copy[i]);
        CHECK(intact == m.n, "step %d: %d of %d held gradients intact after the next backward",
              step, intact, m.n);
        for (int i = 0; i < m.n; i++) {
            remat_release(held[i]);
            remat_release(copy[i]);
        }
    }
    remat_release(x);
    remat_release(y);
    remat_ddp_free(ddp);
    model_free(&m);
}

/* Gradient accumulation over 2 micro-batches (each rank's shard split in
 * halves) against one batch of both: DDP with no_sync before the last
 * micro-batch + remat_optim (accum_steps 2), and ZeRO-1 with accum_steps 2,
 * follow DDP + remat_optim without accumulation for 5 steps: the loss
 * (mean over the micro-batches) within 1e-6 relative, the parameters
 * within 1e-6 absolute; each update costs exactly one collective per
 * bucket. AdamW runs with eps 1e-4 here, not its default 1e-8: it divides
 * by sqrt(v) + eps, and where a gradient is a sum that cancels to near 0
 * the float rounding of another summation order (micro-batches, or another
 * GEMM kernel: ONEDNN_MAX_CPU_ISA=AVX2 gave 1.1e-6 with the default eps
 * after the GELU kernels changed their last bits) moves an update by a
 * sizeable part of lr. With eps 1e-4 an update moves by at most lr times
 * the gradient's rounding over eps, so the bound tests the accumulation,
 * not one kernel's arithmetic. */
static void check_accum(void) {
    model ref, a, zm;
    model_init(&ref, 31, 0);
    model_init(&a, 31, 0);
    model_init(&zm, 31, 0);
    remat_optim_options o;
    OK(remat_optim_options_init(&o, REMAT_OPTIM_ADAMW));
    o.lr = 1e-3;
    o.eps = 1e-4; /* see above */
    o.clip_norm = 0.5;
    remat_ddp_options dopt = {.bucket_bytes = 2048}; /* several buckets */
    remat_ddp *dref = NULL, *da = NULL;
    remat_optimizer *oref = NULL, *oa = NULL;
    remat_zero *z = NULL;
    OK(remat_ddp_create(&dref, pg, ref.n, ref.params, &dopt));
    OK(remat_ddp_create(&da, pg, a.n, a.params, &dopt));
    OK(remat_optim_create(&oref, &o, ref.params, ref.n));
    remat_optim_options oacc = o;
    oacc.accum_steps = 2;
    OK(remat_optim_create(&oa, &oacc, a.params, a.n));
    OK(remat_zero_create(&z, pg, zm.n, zm.params, NULL, &oacc, &dopt));
    if (!dref || !da || !oref || !oa || !z) return;
    remat_ddp_stats st;
    remat_ddp_get_stats(da, &st);
    const int nb = st.n_buckets;
    CHECK(nb >= 3, "only %d buckets", nb);
    int64_t r0, r1;
    shard(&r0, &r1);
    const int64_t mid = r0 + (r1 - r0) / 2; /* equal halves: B / world is even for 1..3 */
    double worst = 0, worst_loss = 0;
    for (int step = 0; step < 5; step++) {
        remat_tensor *x, *y, *l = NULL;
        double lref = 0, lacc = 0;
        make_data(500 + (uint64_t)step, &x, &y);
        OK(forward(&ref, M_NONE, x, y, r0, r1, &l));
        if (l) OK(remat_item(l, &lref));
        OK(remat_ddp_backward(dref, l));
        OK(remat_optim_step(oref, NULL));
        remat_release(l);
        remat_ddp_stats s0, s1;
        remat_ddp_get_stats(da, &s0);
        for (int j = 0; j < 2; j++) {
            bool last = j == 1, updated = false;
            remat_ddp_set_sync(da, last);
            OK(forward(&a, j ? M_REENTRANT : M_NONE, x, y, j ? mid : r0, j ? r1 : mid, &l));
            double lj = 0;
            if (l) OK(remat_item(l, &lj));
            lacc += lj / 2;
            OK(remat_ddp_backward(da, l));
            OK(remat_optim_step(oa, &updated));
            CHECK(updated == last, "DDP accum: micro-batch %d updated %d", j, updated);
            remat_release(l);
        }
        remat_ddp_get_stats(da, &s1);
        CHECK(s1.n_collectives - s0.n_collectives == nb,
              "DDP accum: %lld collectives in a step, "
              "%d buckets",
              (long long)(s1.n_collectives - s0.n_collectives), nb);
        remat_ddp_get_stats(remat_zero_ddp(z), &s0);
        for (int j = 0; j < 2; j++) {
            bool updated = false;
            OK(forward(&zm, j ? M_NONREENTRANT : M_REENTRANT, x, y, j ? mid : r0, j ? r1 : mid,
                       &l));
            OK(remat_zero_backward(z, l));
            OK(remat_zero_step(z, &updated));
            CHECK(updated == (j == 1), "ZeRO accum: micro-batch %d updated %d", j, updated);
            remat_release(l);
        }
        remat_ddp_get_stats(remat_zero_ddp(z), &s1);
        CHECK(s1.n_collectives - s0.n_collectives == nb,
              "ZeRO accum: %lld collectives in a step, "
              "%d buckets",
              (long long)(s1.n_collectives - s0.n_collectives), nb);
        CHECK(s1.n_sync_backwards - s0.n_sync_backwards == 1,
              "ZeRO accum: %lld synchronised "
              "backwards in a step",
              (long long)(s1.n_sync_backwards - s0.n_sync_backwards));
        double dl = fabs(lref - lacc) / fabs(lref);
        if (dl > worst_loss) worst_loss = dl;
        CHECK(dl <= 1e-6, "step %d: accumulated loss %.9g, one batch %.9g", step, lacc, lref);
        for (int i = 0; i < ref.n; i++)
            for (int64_t e = 0; e < remat_numel(ref.params[i]); e++) {
                double d = fabs(at(ref.params[i], e) - at(a.params[i], e));
                double dz = fabs(at(ref.params[i], e) - at(zm.params[i], e));
                if (!(d <= worst)) worst = d;
                if (!(dz <= worst)) worst = dz;
            }
        CHECK(worst <= 1e-6, "step %d: accumulation differs from one batch by %g", step, worst);
        bool same = false;
        OK(remat_dist_check_identical(pg, zm.n, zm.params, &same));
        CHECK(same, "step %d: ZeRO accum parameters differ across ranks", step);
        remat_release(x);
        remat_release(y);
    }
    if (rank == 0)
        printf("  accumulation (2 micro-batches, %d buckets: %d collectives per step) vs one "
               "batch: loss %.2e relative, parameters %.2e absolute\n",
               nb, nb, worst_loss, worst);
    remat_zero_free(z);
    remat_optim_free(oref);
    remat_optim_free(oa);
    remat_ddp_free(dref);
    remat_ddp_free(da);
    model_free(&ref);
    model_free(&a);
    model_free(&zm);
}

/* The sharded state as a whole: ZeRO-1 for 3 steps, gathered into a plain
 * AdamW on rank 0 and broadcast (as a file read on every rank would give
 * it), loaded into a fresh ZeRO-1 (resume under ZeRO) and into a plain
 * optimizer (resume without ZeRO): 3 more steps of each equal 6 steps of
 * the uninterrupted ZeRO-1 run bitwise. And the other way: a plain
 * optimizer's state loaded into ZeRO-1 continues it bitwise. */
static void check_zero_state(void) {
    model u, r, p;
    model_init(&u, 41, 0);
    model_init(&r, 41, 0);
    model_init(&p, 41, 0);
    remat_optim_options o;
    OK(remat_optim_options_init(&o, REMAT_OPTIM_ADAMW));
    o.lr = 1e-2;
    o.clip_norm = 0.5;
    remat_ddp_options dopt = {.bucket_bytes = 2048};
    remat_zero *zu = NULL, *zr = NULL, *zr2 = NULL;
    remat_ddp *dp = NULL;
    remat_optimizer *whole = NULL, *op = NULL;
    OK(remat_zero_create(&zu, pg, u.n, u.params, NULL, &o, &dopt));
    OK(remat_zero_create(&zr, pg, r.n, r.params, NULL, &o, &dopt));
    OK(remat_ddp_create(&dp, pg, p.n, p.params, &dopt));
    OK(remat_optim_create(&whole, &o, r.params, r.n));
    OK(remat_optim_create(&op, &o, p.params, p.n));
    if (!zu || !zr || !dp || !whole || !op) return;
    int64_t r0, r1;
    shard(&r0, &r1);
    for (int step = 0; step < 6; step++) {
        remat_tensor *x, *y, *l = NULL;
        make_data(700 + (uint64_t)step, &x, &y);
        OK(forward(&u, M_NONE, x, y, r0, r1, &l));
        OK(remat_zero_backward(zu, l));
        OK(remat_zero_step(zu, NULL));
        remat_release(l);
        if (step < 3) { /* the interrupted run: ZeRO-1 too */
            OK(forward(&r, M_NONE, x, y, r0, r1, &l));
            OK(remat_zero_backward(zr, l));
            OK(remat_zero_step(zr, NULL));
            remat_release(l);
        }
        if (step == 2) {
            /* "save" on rank 0, "read" everywhere; parameters are as r's */
            OK(remat_zero_gather_state(zr, 0, rank == 0 ? whole : NULL));
            for (int i = 0; i < r.n; i++)
                for (int sl = 0; sl < 2; sl++)
                    OK(remat_dist_broadcast(pg, remat_optim_state(whole, i, (remat_optim_slot)sl),
                                            0));
            double upd = (double)remat_optim_updates(whole);
            OK(remat_dist_all_reduce_f64(pg, &upd, 1, REMAT_REDUCE_MAX));
            CHECK(upd == 3, "gathered update count %g", upd);
            OK(remat_optim_set_updates(whole, (int64_t)upd));
            bool prev = remat_no_grad_begin();
            for (int i = 0; i < r.n; i++) {
                OK(remat_copy_(p.params[i], r.params[i]));
                for (int sl = 0; sl < 2; sl++)
                    OK(remat_copy_(remat_optim_state(op, i, (remat_optim_slot)sl),
                                   remat_optim_state(whole, i, (remat_optim_slot)sl)));
            }
            remat_grad_mode_restore(prev);
            OK(remat_optim_set_updates(op, 3));
            /* a fresh ZeRO-1 (another layout: one bucket) resumes from it */
            remat_zero_free(zr);
            zr = NULL;
            OK(remat_zero_create(&zr2, pg, r.n, r.params, NULL, &o, NULL));
            if (zr2) OK(remat_zero_load_state(zr2, whole));
            CHECK(remat_zero_updates(zr2) == 3, "loaded update count");
        }
        if (step >= 3 && zr2) {
            OK(forward(&r, M_NONE, x, y, r0, r1, &l));
            OK(remat_zero_backward(zr2, l));
            OK(remat_zero_step(zr2, NULL));
            remat_release(l);
            OK(forward(&p, M_NONE, x, y, r0, r1, &l));
            OK(remat_ddp_backward(dp, l));
            OK(remat_optim_step(op, NULL));
            remat_release(l);
        }
        remat_release(x);
        remat_release(y);
    }
    for (int i = 0; i < u.n; i++) {
        CHECK(bitwise_equal(u.params[i], r.params[i]),
              "ZeRO resumed under ZeRO: parameter %d "
              "differs from the uninterrupted run",
              i);
        CHECK(bitwise_equal(u.params[i], p.params[i]),
              "ZeRO resumed without ZeRO: parameter %d "
              "differs from the uninterrupted run",
              i);
    }
    /* and back: the plain optimizer's state (6 updates) into ZeRO-1, gathered again */
    remat_optimizer *again = NULL;
    OK(remat_optim_create(&again, &o, p.params, p.n));
    remat_zero *zp = NULL;
    OK(remat_zero_create(&zp, pg, p.n, p.params, NULL, &o, &dopt));
    if (zp && again) {
        OK(remat_zero_load_state(zp, op));
        OK(remat_zero_gather_state(zp, world - 1, rank == world - 1 ? again : NULL));
        for (int i = 0; rank == world - 1 && i < p.n; i++)
            for (int sl = 0; sl < 2; sl++)
                CHECK(bitwise_equal(remat_optim_state(op, i, (remat_optim_slot)sl),
                                    remat_optim_state(again, i, (remat_optim_slot)sl)),
                      "state of parameter %d slot %d: load then gather changed it", i, sl);
        CHECK(rank != world - 1 || remat_optim_updates(again) == 6, "update count");
    }
    /* a root that passes no optimizer still takes part, then fails */
    int rc = remat_zero_gather_state(zu, 0, NULL);
    CHECK((rank == 0) == (rc == REMAT_EINVAL),
          "gather with no optimizer on the root: %s on rank %d", remat_err_name(rc), rank);
    remat_optim_free(again);
    remat_zero_free(zp);
    remat_zero_free(zu);
    remat_zero_free(zr2);
    remat_ddp_free(dp);
    remat_optim_free(whole);
    remat_optim_free(op);
    model_free(&u);
    model_free(&r);
    model_free(&p);
}

/* ---- fault modes: rank 1 stops answering / is killed ------------------------------------- */
/* ---- parameters in device memory ---------------------------------------------------------------
 * On "fenced" (tests/support/fenced.h: memory the host cannot touch, the cuda device's
 * stand-in; its kernels are the cpu's, so its arithmetic is the cpu's bit for bit) the
 * collectives and DDP must stage through host memory: any host read or write of device
 * memory faults. */
static remat_device fenced_dev(void) { return (remat_device){rt_fenced_type(), 0}; }

/* A copy of t on device d, a leaf that requires grad when t does. */
static remat_tensor *on_device(remat_tensor *t, remat_device d) {
    remat_tensor *c = NULL;
    bool prev = remat_no_grad_begin();
    int rc = remat_to_device(&c, t, d);
    remat_grad_mode_restore(prev);
    if (!rc && remat_requires_grad(t)) rc = remat_set_requires_grad(c, true);
    if (rc) {
        fprintf(stderr, "rank %d: cannot copy to the device: %s\n", rank, remat_last_error());
        exit(2);
    }
    return c;
}

/* dst := src's parameters on device d (the order model_init makes them in). */
static void model_on_device(model *dst, const model *src, remat_device d) {
    memset(dst, 0, sizeof *dst);
    dst->p_drop = src->p_drop;
    for (int i = 0; i < src->n; i++) dst->params[dst->n++] = on_device(src->params[i], d);
    remat_tensor **p = dst->params;
    dst->w_in = *p++;
    dst->s = *p++;
    for (int i = 0; i < L; i++) {
        dst->ln_w[i] = *p++;
        dst->ln_b[i] = *p++;
        dst->w1[i] = *p++;
        dst->b1[i] = *p++;
        dst->w2[i] = *p++;
        dst->b2[i] = *p++;
    }
}

/* Whether device tensor a holds bitwise host tensor b's bytes (NULL only as NULL). */
static bool device_equal(remat_tensor *a, remat_tensor *b) {
    if (!a || !b) return a == b;
    int64_t n = remat_numel(b);
    size_t es = remat_dtype_size(remat_tensor_dtype(b));
    if (remat_numel(a) != n || remat_tensor_dtype(a) != remat_tensor_dtype(b)) return false;
    void *h = malloc((size_t)n * es + 1);
    bool eq = h && remat_copy_to_buffer(a, remat_tensor_dtype(a), h, n) == REMAT_OK &&
              !memcmp(h, remat_data(b), (size_t)n * es);
    free(h);
    return eq;
}

/* Broadcast, all-reduce and the identity check of fenced tensors: the cpu's results. */
static void check_device_collectives(void) {
    remat_device d = fenced_dev();
    CHECK(d.type > 0, "no fenced device");
    if (d.type <= 0) return;
    int64_t n = 5;
    remat_tensor *h = NULL, *t = NULL;
    OK(remat_full(&h, 1, &n, rank + 1, REMAT_F32, REMAT_DEVICE_CPU));
    t = on_device(h, d);
    OK(remat_dist_all_reduce(pg, t, REMAT_REDUCE_SUM));
    OK(remat_dist_all_reduce(pg, h, REMAT_REDUCE_SUM));
    CHECK(device_equal(t, h), "device sum is the cpu's");
    OK(remat_dist_all_reduce(pg, t, REMAT_REDUCE_MEAN));
    OK(remat_dist_all_reduce(pg, h, REMAT_REDUCE_MEAN));
    CHECK(device_equal(t, h), "device mean is the cpu's");
    remat_release(t);
    remat_release(h);
    OK(remat_full(&h, 1, &n, rank == 1 ? 42 : -1, REMAT_F64, REMAT_DEVICE_CPU));
    t = on_device(h, d);
    OK(remat_dist_broadcast(pg, t, 1));
    remat_tensor *one = NULL;
    OK(remat_full(&one, 1, &n, 42, REMAT_F64, REMAT_DEVICE_CPU));
    CHECK(device_equal(t, one), "device broadcast from rank 1");
    remat_release(one);
    bool same = false;
    OK(remat_dist_check_identical(pg, 1, &t, &same));
    CHECK(same, "device tensors identical after broadcast");
    remat_release(t);
    t = on_device(h, d); /* each rank's own: 42 on rank 1, -1 elsewhere */
    OK(remat_dist_check_identical(pg, 1, &t, &same));
    CHECK(!same, "different device tensors are seen to differ");
    remat_release(t);
    remat_release(h);
}

/* MPI_Iallreduce as MPI's, through the profiling interface (PMPI), counting the starts
 * whose buffer a copy to the host still in flight writes into (transfer_log.h's deferred
 * copies): DDP must start a bucket only once its slots' copies are in. */
static int g_iallreduce_starts, g_early_starts;
int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                   MPI_Comm comm, MPI_Request *request) {
    int size = 0;
    MPI_Type_size(datatype, &size);
    g_iallreduce_starts++;
    g_early_starts += rt_transfer_pending_into(recvbuf, (size_t)count * (size_t)size);
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}

/* What DDP over device parameters did in its backwards (remat_ddp_backward only). */
typedef struct ddp_counts {
    long sync_d2h, sync_h2d;   /* synchronous copies (host waits for the device) not the fake's */
    long async_d2h, async_h2d; /* copies through the transfer ops */
    long host_waits;           /* the host waiting for one of those */
    int early_starts, starts;  /* bucket all-reduces started with copies in flight / at all */
    int launched_in_backward;  /* buckets started before the local backward ended */
    int rereduced;             /* buckets reduced again (late gradients) */
} ddp_counts;

/* remat_ddp_backward(ddp, loss), adding what it did to *c. */
static int counted_backward(remat_ddp *ddp, remat_tensor *loss, ddp_counts *c) {
    long d2h = rt_fenced_copies(REMAT_COPY_DEVICE_TO_HOST);
    long h2d = rt_fenced_copies(REMAT_COPY_HOST_TO_DEVICE);
    rt_transfer_log x = rt_xfer;
    int early = g_early_starts, starts = g_iallreduce_starts;
    int rc = remat_ddp_backward(ddp, loss);
    long a_d2h = rt_xfer.n_d2h - x.n_d2h, a_h2d = rt_xfer.n_h2d - x.n_h2d;
    /* each of the fake's copies moved its bytes through the fenced copy once */
    c->sync_d2h += rt_fenced_copies(REMAT_COPY_DEVICE_TO_HOST) - d2h - a_d2h;
    c->sync_h2d += rt_fenced_copies(REMAT_COPY_HOST_TO_DEVICE) - h2d - a_h2d;
    c->async_d2h += a_d2h;
    c->async_h2d += a_h2d;
    c->host_waits += rt_xfer.n_host_waits - x.n_host_waits;
    c->early_starts += g_early_starts - early;
    c->starts += g_iallreduce_starts - starts;
    remat_ddp_stats st;
    remat_ddp_get_stats(ddp, &st);
    c->launched_in_backward += st.n_launched_in_backward;
    c->rereduced += st.n_rereduced;
    return rc;
}

/* DDP over parameters in device memory follows DDP over the same parameters on the cpu
 * bit for bit: rank 0's values broadcast at create, every gradient after each backward
 * (checkpointed, reentrant and not, buckets small enough that several hold both
 * launched-in-backward and late parameters), the parameters after each SGD step, for
 * DEVICE_STEPS steps; .grad stays on the device. The last step ends with the user's custom
 * function (by_hand.h) after one without it: s grows after it was sent, its bucket is
 * reduced again. What the device DDP's backwards did goes to *c. */
#define DEVICE_STEPS 8
static void device_ddp_steps(ddp_counts *c) {
    remat_device d = fenced_dev();
    model m, dm;
    model_init(&m, 21, 0);
    if (rank) { /* other ranks start elsewhere: create must copy rank 0's */
        bool prev = remat_no_grad_begin();
        for (int i = 0; i < m.n; i++) remat_mul_scalar_(m.params[i], 1.0 + 0.25 * rank);
        remat_grad_mode_restore(prev);
    }
    model_on_device(&dm, &m, d);
    remat_ddp *ddp = NULL, *dddp = NULL;
    remat_ddp_options o = {.bucket_bytes = 3000};
    OK(remat_ddp_create(&ddp, pg, m.n, m.params, &o));
    OK(remat_ddp_create(&dddp, pg, dm.n, dm.params, &o));
    if (!ddp || !dddp) {
        remat_ddp_free(ddp);
        remat_ddp_free(dddp);
        model_free(&m);
        model_free(&dm);
        return;
    }
    int same_params = 0;
    for (int i = 0; i < m.n; i++) same_params += device_equal(dm.params[i], m.params[i]);
    CHECK(same_params == m.n, "%d of %d device parameters are rank 0's after create", same_params,
          m.n);
    int64_t r0, r1;
    shard(&r0, &r1);
    for (int step = 0; step < DEVICE_STEPS; step++) {
        remat_tensor *x, *y, *dx, *dy, *loss = NULL, *dloss = NULL;
        make_data(300 + (uint64_t)step, &x, &y);
        dx = on_device(x, d);
        dy = on_device(y, d);
        zero_grads(&m);
        zero_grads(&dm);
        int mode = step >= 6       ? M_NONE
                   : step % 3 == 0 ? M_NONE
                   : step % 3 == 1 ? M_REENTRANT
                                   : M_NONREENTRANT;
        g_by_hand_tail = step == DEVICE_STEPS - 1;
        OK(forward(&m, mode, x, y, r0, r1, &loss));
        OK(forward(&dm, mode, dx, dy, r0, r1, &dloss));
        g_by_hand_tail = false;
        OK(remat_ddp_backward(ddp, loss));
        OK(counted_backward(dddp, dloss, c));
        int same_grads = 0, on_dev = 0;
        for (int i = 0; i < m.n; i++) {
            remat_tensor *g = remat_tensor_grad(dm.params[i]);
            same_grads += device_equal(g, remat_tensor_grad(m.params[i]));
            on_dev += g && remat_tensor_device(g).type == d.type;
        }
        CHECK(same_grads == m.n && on_dev == m.n,
              "step %d (%s): %d of %d device gradients are the cpu's, %d on the device", step,
              mode_name[mode], same_grads, m.n, on_dev);
        sgd(&m, 0.05);
        sgd(&dm, 0.05);
        bool same = false;
        OK(remat_dist_check_identical(pg, dm.n, dm.params, &same));
        CHECK(same, "step %d: device parameters differ across ranks", step);
        remat_release(loss);
        remat_release(dloss);
        remat_release(x);
        remat_release(y);
        remat_release(dx);
        remat_release(dy);
    }
    same_params = 0;
    for (int i = 0; i < m.n; i++) same_params += device_equal(dm.params[i], m.params[i]);
    CHECK(same_params == m.n, "%d of %d device parameters are the cpu's after %d steps",
          same_params, m.n, DEVICE_STEPS);
    remat_ddp_free(ddp);
    remat_ddp_free(dddp);
    model_free(&m);
    model_free(&dm);
}

/* Rank 1's second gradient copy to the host fails (arm(n): the nth copy from now fails;
 * arm(0) disarms): the step fails on every rank — rank 1 with the copy's error, naming
 * the parameter and saying `says`, the others naming rank 1 — instead of reducing the
 * zeros its slot holds as if they were its gradient; and the next step works. */
static void check_failed_copy(remat_device d, void (*arm)(long nth), const char *says) {
    model m, dm;
    model_init(&m, 5, 0);
    model_on_device(&dm, &m, d);
    remat_ddp *ddp = NULL;
    remat_ddp_options o = {.bucket_bytes = 3000};
    OK(remat_ddp_create(&ddp, pg, dm.n, dm.params, &o));
    remat_tensor *x, *y, *dx, *dy;
    make_data(77, &x, &y);
    dx = on_device(x, d);
    dy = on_device(y, d);
    int64_t r0, r1;
    shard(&r0, &r1);
    for (int step = 0; ddp && step < 2; step++) {
        remat_tensor *loss = NULL;
        zero_grads(&dm);
        OK(forward(&dm, M_REENTRANT, dx, dy, r0, r1, &loss));
        arm(step == 0 && rank == 1 ? 2 : 0);
        int rc = remat_ddp_backward(ddp, loss);
        const char *msg = remat_last_error();
        if (step == 1)
            CHECK(rc == REMAT_OK, "the step after a failed copy: %s", remat_err_name(rc));
        else if (rank == 1)
            CHECK(rc == REMAT_EDEVICE && strstr(msg, "copying the gradient of parameter") &&
                      strstr(msg, says),
                  "the rank whose copy failed says so: %s: %s", remat_err_name(rc), msg);
        else
            CHECK(rc == REMAT_EIO && strstr(msg, "rank 1 failed (REMAT_EDEVICE)") &&
                      strstr(msg, "copying the gradient of parameter"),
                  "the others name rank 1 and the copy: %s: %s", remat_err_name(rc), msg);
        remat_clear_error();
        remat_release(loss);
    }
    arm(0);
    remat_ddp_free(ddp);
    remat_release(x);
    remat_release(y);
    remat_release(dx);
    remat_release(dy);
    model_free(&m);
    model_free(&dm);
}

static void arm_fenced_failure(long nth) { rt_fenced_fail_copy(REMAT_COPY_DEVICE_TO_HOST, nth); }
static void arm_xfer_failure(long nth) { rt_xfer.fail_at = nth ? rt_xfer.n_copies + nth : 0; }

/* Without transfer ops: each gradient copied synchronously, both ways (one host wait per
 * parameter and direction). ZeRO-1 refuses device parameters by name. */
static void check_device_ddp(void) {
    remat_device d = fenced_dev();
    if (d.type <= 0) return; /* check_device_collectives said so */
    ddp_counts c = {0};
    device_ddp_steps(&c);
    const int n = 2 + 6 * L, steps = DEVICE_STEPS;
    CHECK(c.async_d2h == 0 && c.async_h2d == 0 && c.early_starts == 0,
          "no transfer ops, yet %ld + %ld copies through them, %d early starts", c.async_d2h,
          c.async_h2d, c.early_starts);
    CHECK(c.sync_d2h >= (long)n * steps && c.sync_h2d >= (long)n * steps,
          "%ld / %ld synchronous copies to / from the host in %d steps of %d parameters",
          c.sync_d2h, c.sync_h2d, steps, n);
    if (rank == 0 && getenv("DIST_CHECK_COUNTS"))
        printf("device ddp, sync copies: %ld D2H + %ld H2D synchronous in %d steps; %d of %d "
               "bucket starts in backward\n",
               c.sync_d2h, c.sync_h2d, steps, c.launched_in_backward, c.starts);
    check_failed_copy(d, arm_fenced_failure, "device copy failed");
    remat_zero *z = NULL;
    remat_optim_options oo;
    OK(remat_optim_options_init(&oo, REMAT_OPTIM_ADAMW));
    model dm, m;
    model_init(&m, 21, 0);
    model_on_device(&dm, &m, d);
    int rc = remat_zero_create(&z, pg, dm.n, dm.params, NULL, &oo, NULL);
    CHECK(rc == REMAT_EINVAL && !z && strstr(remat_last_error(), "device memory"),
          "ZeRO-1 on device parameters: %s", remat_err_name(rc));
    remat_clear_error();
    remat_zero_free(z);
    model_free(&m);
    model_free(&dm);
}

/* With transfer ops whose copies complete late (deferred: a slot holds NaNs until its
 * copy's event completes, after 3 polls): the same bits as the cpu's (device_ddp_steps); no
 * bucket starts while a copy into it is in flight; every gradient goes to the host and back
 * through the ops, none synchronously; every event and pinned buffer is freed. Then a
 * failed copy on rank 1 fails the step on every rank, naming rank 1, and the next step
 * works. */
static void check_device_ddp_async(void) {
    remat_device d = fenced_dev();
    if (d.type <= 0) return; /* check_device_collectives said so */
    int rc = rt_transfer_log_install(true, 3);
    CHECK(rc == REMAT_OK, "registering the fake transfer ops: %s", remat_err_name(rc));
    if (rc) return;
    rt_xfer.deferred = true;
    ddp_counts c = {0};
    device_ddp_steps(&c);
    const int n = 2 + 6 * L, steps = DEVICE_STEPS;
    CHECK(c.early_starts == 0, "%d of %d bucket all-reduces started with copies in flight",
          c.early_starts, c.starts);
    CHECK(c.async_d2h >= (long)n * steps && c.async_h2d >= (long)n * steps,
          "%ld / %ld copies to / from the host through the ops in %d steps of %d parameters",
          c.async_d2h, c.async_h2d, steps, n);
    CHECK(c.sync_d2h == 0 && c.sync_h2d == 0, "%ld / %ld synchronous copies to / from the host",
          c.sync_d2h, c.sync_h2d);
    /* the copies complete in order (one side stream): at most one wait for each bucket
     * started at the end of the local backward or reduced again, and one for the copies
     * back of each step */
    CHECK(c.host_waits <= c.starts - c.launched_in_backward + steps,
          "%ld host waits for %ld copies in %d steps (%d of %d bucket starts in backward)",
          c.host_waits, c.async_d2h + c.async_h2d, steps, c.launched_in_backward, c.starts);
    CHECK(c.launched_in_backward > 0, "no bucket started before the end of a local backward");
    CHECK(c.rereduced > 0, "no bucket reduced again (the last step's late gradient)");
    CHECK(rt_xfer.n_events_live == 0 && rt_xfer.n_host_live == 0 && rt_xfer.n_freed_early == 0 &&
              rt_xfer.n_bad_waits == 0,
          "%d events and %d pinned buffers live, %d events freed before done, %d bad waits",
          rt_xfer.n_events_live, rt_xfer.n_host_live, rt_xfer.n_freed_early, rt_xfer.n_bad_waits);
    if (rank == 0 && getenv("DIST_CHECK_COUNTS"))
        printf("device ddp, async copies: %ld D2H + %ld H2D queued, %ld host waits, %ld D2H + "
               "%ld H2D synchronous in %d steps; %d of %d bucket starts in backward, %d "
               "reduced again\n",
               c.async_d2h, c.async_h2d, c.host_waits, c.sync_d2h, c.sync_h2d, steps,
               c.launched_in_backward, c.starts, c.rereduced);

    check_failed_copy(d, arm_xfer_failure, "failed (as asked)");
    CHECK(rt_xfer.n_events_live == 0 && rt_xfer.n_host_live == 0,
          "%d events and %d pinned buffers live after the failed copy", rt_xfer.n_events_live,
          rt_xfer.n_host_live);
    OK(rt_transfer_log_install(false, 0));
}

static void on_ready_kill(void *ud, int i) {
    (void)ud;
    if (rank == 1 && i == 0) raise(SIGKILL);
}

static int fault(const char *what) {
    model m;
    model_init(&m, 1, 0);
    remat_ddp *ddp = NULL;
    remat_ddp_options o = {.bucket_bytes = 1024};
    if (!strcmp(what, "kill")) o.on_ready = on_ready_kill;
    int rc = remat_ddp_create(&ddp, pg, m.n, m.params, &o);
    remat_tensor *x, *y;
    make_data(2, &x, &y);
    int64_t r0, r1;
    shard(&r0, &r1);
    for (int step = 0; !rc && step < 3; step++) {
        remat_tensor *loss = NULL;
        zero_grads(&m);
        if (step == 2 && rank == 1 && !strcmp(what, "hang")) sleep(30);
        rc = forward(&m, M_REENTRANT, x, y, r0, r1, &loss);
        bool err = step == 2 && rank == 1 && !strcmp(what, "error");
        if (!rc) rc = remat_ddp_backward(ddp, err ? x : loss); /* x needs no grad: fails */
        remat_release(loss);
    }
    fprintf(stderr, "rank %d: %s\n", rank, rc ? remat_last_error() : "finished");
    if (rc) {
        /* the others may be printing the same failure: MPI_Abort would cut them off */
        usleep(300000);
        remat_dist_abort(pg, 3);
    }
    remat_release(x);
    remat_release(y);
    remat_ddp_free(ddp);
    model_free(&m);
    return rc;
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "all";
    /* hang checks the 2 s timeout itself; in kill and error mode rank 1's failure must
     * arrive first, and a slow rank 1 (sanitizers, a loaded machine) could take 2 s to get
     * there: rank 0 would give up waiting and never name it */
    remat_dist_options o = {.timeout_s = !strcmp(what, "hang")  ? 2.0
                                         : !strcmp(what, "all") ? 60.0
                                                                : 10.0};
    int rc = remat_dist_init(&pg, &o);
    if (rc) {
        fprintf(stderr, "dist_check: %s\n", remat_last_error());
        return 2;
    }
    rank = remat_dist_rank(pg);
    world = remat_dist_world_size(pg);
    if (strcmp(what, "all")) {
        rc = fault(what);
        remat_dist_finalize(pg);
        return rc ? 3 : 0;
    }
    struct {
        const char *name;
        void (*fn)(void);
    } checks[] = {
        {"collectives", check_collectives},
        {"checkpoint_modes_bitwise_and_ready_once", check_modes},
        {"vs_single_process_20_steps", check_vs_single},
        {"dropout_streams", check_dropout_streams},
        {"no_sync", check_no_sync},
        {"unused_parameters", check_unused},
        {"mismatch_at_setup", check_mismatch},
        {"failed_rank_named", check_error_reported},
        {"zero1_state_bytes_and_trajectory", check_zero},
        {"zero1_f64", check_zero_f64},
        {"overlap_from_the_first_backward", check_first_step_overlap},
        {"opaque_custom_function_learns", check_opaque_learns},
        {"grads_are_bucket_views", check_grad_views},
        {"accumulation_no_sync_one_collective_per_bucket", check_accum},
        {"zero1_state_gather_load_resume_bitwise", check_zero_state},
        {"device_collectives_through_host", check_device_collectives},
        {"device_ddp_bitwise_the_cpus", check_device_ddp},
        {"device_ddp_async_copies_bitwise_the_cpus", check_device_ddp_async},
    };
    int total = 0;
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        failures = 0;
        checks[i].fn();
        double f = failures;
        remat_dist_all_reduce_f64(pg, &f, 1, REMAT_REDUCE_SUM);
        if (rank == 0) printf("%s %s (np %d)\n", f ? "FAIL" : "ok  ", checks[i].name, world);
        if (getenv("DIST_CHECK_LIVE")) printf("live %lld\n", (long long)remat_live_tensors());
        total += f > 0;
    }
    if (rank == 0) fflush(stdout);
    int64_t live = remat_live_tensors();
    if (live) fprintf(stderr, "rank %d: %lld tensors leaked\n", rank, (long long)live);
    remat_dist_finalize(pg);
    return total || live ? 1 : 0;
}
