/*
 * src/planner/profile.c — measures the stages of a chain for the planner.
 *
 * Every stage runs on the output of the previous one, three ways per run:
 *   1. forward with grad (what a stored stage does): time, peak, and the
 *      bytes that stay live afterwards besides the output (saved tensors);
 *   2. backward of that forward from a gradient of ones, through
 *      remat_grad over the stage input and every leaf the stage reaches
 *      (its parameters), so that weight gradients are computed as in
 *      training but no .grad is touched: time and peak;
 *   3. forward with saved-tensor hooks that keep nothing (what a stage
 *      inside a checkpointed segment does on its first run): peak.
 * Bytes come from this thread's allocation meter on the input's device
 * (rm_meter_*: what this thread allocates and frees, not other threads,
 * and the process-wide counters are untouched); times from the monotonic
 * clock, median over the timed runs; peaks are the maximum over runs.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

#include "autograd/graph.h"
#include "planner_internal.h"

#define PL_DEFAULT_RUNS 3

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pl_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

remat_status remat_profile_create(remat_profile **out, int n_stages) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_profile_create: out is NULL");
    *out = NULL;
    if (n_stages < 1)
        return rm_err(REMAT_EINVAL, "remat_profile_create: n_stages must be >= 1, got %d",
                      n_stages);
    remat_profile *p = calloc(1, sizeof *p);
    if (p) p->stages = calloc((size_t)n_stages, sizeof *p->stages);
    if (!p || !p->stages) {
        free(p);
        return rm_err(REMAT_ENOMEM, "remat_profile_create: out of memory for %d stages", n_stages);
    }
    p->n_stages = n_stages;
    *out = p;
    return REMAT_OK;
}

void remat_profile_free(remat_profile *p) {
    if (!p) return;
    free(p->stages);
    free(p);
}

/* ---- saved-tensor hooks that keep nothing ---------------------------------------- */
static char g_dropped; /* handle of a dropped tensor */
static void *drop_pack(void *ud, remat_tensor *t) {
    (void)ud;
    (void)t;
    return &g_dropped;
}
static remat_status drop_unpack(void *ud, void *handle, remat_tensor **out) {
    (void)ud;
    (void)handle;
    *out = NULL;
    return rm_err(REMAT_ESTATE, "remat_profile_stages: internal: a dropped tensor was unpacked");
}

/* ---- leaves reached from a graph ---------------------------------------------------- */
typedef struct ptr_set {
    void **v;
    int n, cap;
} ptr_set;

static bool set_has(const ptr_set *s, const void *p) {
    for (int i = 0; i < s->n; i++)
        if (s->v[i] == p) return true;
    return false;
}

static remat_status set_add(ptr_set *s, void *p) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 32;
        void **nv = realloc(s->v, (size_t)cap * sizeof *nv);
        if (!nv) return REMAT_ENOMEM;
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = p;
    return REMAT_OK;
}

/* Collects into `leaves` every leaf tensor (AccumulateGrad) reachable from
 * root, except `skip`. Iterative walk with an explicit stack. */
static remat_status collect_leaves(remat_node *root, const remat_tensor *skip, ptr_set *leaves) {
    ptr_set seen = {0}, stack = {0};
    int rc = REMAT_OK;
    if (root) rc = set_add(&stack, root);
    if (!rc && root) rc = set_add(&seen, root);
    while (!rc && stack.n > 0) {
        remat_node *n = stack.v[--stack.n];
        if (n->leaf && n->leaf != skip && !set_has(leaves, n->leaf)) rc = set_add(leaves, n->leaf);
        for (int i = 0; !rc && i < remat_node_num_next(n); i++) {
            remat_node *c = remat_node_next(n, i);
            if (c && !set_has(&seen, c)) {
                rc = set_add(&seen, c);
                if (!rc) rc = set_add(&stack, c);
            }
        }
    }
    free(seen.v);
    free(stack.v);
    return rc;
}

/* ---- one stage --------------------------------------------------------------------------- */
typedef struct stage_meas {
    pl_store_meas st; /* 1. and 2. */
    size_t fpn;
} stage_meas;

/* Measured with this thread's allocation meter (rm_meter_*), so other
 * threads allocating meanwhile change nothing, and the process-wide peak
 * the user may be watching is left alone. */
static int64_t meter_begin(void) {
    rm_meter_mark_peak();
    return rm_meter_current();
}
static size_t peak_above(int64_t base) {
    int64_t p = rm_meter_peak();
    return p > base ? (size_t)(p - base) : 0;
}

static remat_status call_stage(const remat_stage *st, remat_tensor *in, remat_tensor **y) {
    *y = NULL;
    int rc = st->fn(st->user_data, &in, 1, y, 1);
    if (rc) {
        rm_release(*y);
        *y = NULL;
        return rc;
    }
    if (!*y) return rm_err(REMAT_EINVAL, "the stage returned no tensor");
    rm_adopt(*y);
    return REMAT_OK;
}

/* 1. a storing forward (under hooks when given), 2. its backward. */
remat_status pl_measure_store(const remat_stage *st, remat_tensor *a,
                              const remat_saved_hooks *hooks, pl_store_meas *m) {
    remat_tensor *y = NULL, *g = NULL, **grads = NULL;
    ptr_set leaves = {0};
    int rc;

    /* 1. storing forward */
    int64_t before = meter_begin();
    double t0 = now_s();
    rc = hooks ? remat_saved_hooks_push(hooks) : REMAT_OK;
    if (rc) return rc;
    rc = call_stage(st, a, &y);
    if (hooks) remat_saved_hooks_pop();
    double t1 = now_s();
    if (rc) goto out;
    m->tf = t1 - t0;
    m->fpa = peak_above(before);
    int64_t after = rm_meter_current();
    size_t stored = after > before ? (size_t)(after - before) : 0;
    m->out_bytes = remat_shares_storage(y, a) ? 0 : remat_storage_nbytes(y);
    m->saved = stored > m->out_bytes ? stored - m->out_bytes : 0;

    /* 2. backward (parameters included, .grad untouched) */
    m->tb = 0;
    m->bp = 0;
    m->grads = 0;
    if (remat_requires_grad(y) && remat_grad_fn(y)) {
        if (remat_requires_grad(a)) rc = set_add(&leaves, a);
        if (!rc) rc = collect_leaves(remat_grad_fn(y), a, &leaves);
        if (rc) {
            rc = rm_err(REMAT_ENOMEM, "out of memory");
            goto out;
        }
        rc = remat_full(&g, remat_ndim(y), remat_shape(y), 1.0, remat_tensor_dtype(y),
                        remat_tensor_device(y));
        if (rc) goto out;
        if (leaves.n > 0) {
            grads = calloc((size_t)leaves.n, sizeof *grads);
            if (!grads) {
                rc = rm_err(REMAT_ENOMEM, "out of memory");
                goto out;
            }
            int64_t before_b = meter_begin();
            double t2 = now_s();
            rc = remat_grad(1, &y, &g, leaves.n, (remat_tensor *const *)leaves.v, false, true,
                            grads);
            double t3 = now_s();
            if (rc) goto out;
            m->tb = t3 - t2;
            m->bp = peak_above(before_b);
            /* the parameters' gradients (not the input's): .grad in training */
            for (int i = 0; i < leaves.n; i++)
                if (leaves.v[i] != a && grads[i]) m->grads += remat_storage_nbytes(grads[i]);
        }
    }
out:
    if (grads)
        for (int i = 0; i < leaves.n; i++) rm_release(grads[i]);
    free(grads);
    free(leaves.v);
    rm_release(g);
    rm_release(y);
    return rc;
}

/* Runs stage st once on `a` the three ways; *next (if non-NULL) receives a
 * detached copy of the output. */
static remat_status measure_once(const remat_stage *st, remat_tensor *a, stage_meas *m,
                                 remat_tensor **next) {
    int rc = pl_measure_store(st, a, NULL, &m->st);
    if (rc) return rc;

    /* 3. forward keeping nothing (as inside a checkpoint) */
    remat_tensor *y = NULL;
    remat_saved_hooks drop = {drop_pack, drop_unpack, NULL, NULL};
    rc = remat_saved_hooks_push(&drop);
    if (rc) return rc;
    int64_t before = meter_begin();
    rc = call_stage(st, a, &y);
    remat_saved_hooks_pop();
    if (rc) return rc;
    m->fpn = peak_above(before);
    if (next) {
        rc = remat_detach(next, y);
        if (!rc && remat_tensor_dtype(*next) != REMAT_I64)
            rc = remat_set_requires_grad(*next, true);
        if (rc) rm_release_p(next);
    }
    rm_release(y);
    return rc;
}

/* Measures stage k on `a`: warm untimed runs, then `runs` timed ones
 * (times in tf/tb, medians into *sp, peaks the largest seen). *next
 * receives the last run's detached output. */
static remat_status profile_stage(const remat_stage *st, remat_tensor *a, int warm, int runs,
                                  double *tf, double *tb, remat_stage_profile *sp,
                                  remat_tensor **next) {
    sp->input_bytes = remat_storage_nbytes(a);
    for (int r = 0; r < warm + runs; r++) {
        stage_meas m = {0};
        bool last = r == warm + runs - 1;
        int rc = measure_once(st, a, &m, last ? next : NULL);
        if (rc) return rc;
        if (r >= warm) {
            tf[r - warm] = m.st.tf;
            tb[r - warm] = m.st.tb;
        }
        if (m.st.out_bytes > sp->output_bytes) sp->output_bytes = m.st.out_bytes;
        if (m.st.saved > sp->saved_bytes) sp->saved_bytes = m.st.saved;
        if (m.st.fpa > sp->fwd_peak) sp->fwd_peak = m.st.fpa;
        if (m.fpn > sp->fwd_peak_nosave) sp->fwd_peak_nosave = m.fpn;
        if (m.st.bp > sp->bwd_peak) sp->bwd_peak = m.st.bp;
        if (m.st.grads > sp->grad_bytes) sp->grad_bytes = m.st.grads;
    }
    sp->fwd_time = pl_median(tf, runs);
    sp->bwd_time = pl_median(tb, runs);
    return REMAT_OK;
}

remat_status pl_check_profile_args(const char *call, int n_stages, const remat_stage *stages,
                                   const remat_tensor *input, const remat_profile_options *opts,
                                   int default_runs, int *runs, int *warm) {
    if (!stages) return rm_err(REMAT_EINVAL, "%s: stages is NULL", call);
    if (!input) return rm_err(REMAT_EINVAL, "%s: input is NULL", call);
    if (n_stages < 1)
        return rm_err(REMAT_EINVAL, "%s: n_stages must be >= 1, got %d", call, n_stages);
    for (int k = 0; k < n_stages; k++)
        if (!stages[k].fn) return rm_err(REMAT_EINVAL, "%s: stages[%d].fn is NULL", call, k);
    if (opts && opts->runs < 0)
        return rm_err(REMAT_EINVAL, "%s: runs must be >= 0, got %d", call, opts->runs);
    *runs = opts && opts->runs > 0 ? opts->runs : default_runs;
    *warm = opts && opts->no_warmup ? 0 : 1;
    return REMAT_OK;
}

remat_status pl_walk_stages(const char *call, remat_tensor *input, int n_stages,
                            const pl_stage_walk *w) {
    remat_device dev = remat_tensor_device(input);
    remat_rng_fork fork;
    int rc = remat_rng_fork_begin(&fork, dev.type == REMAT_CPU ? 0 : 1, &dev);
    if (rc) return rm_err_prefix(rc, call);
    void *scope = rm_scope_suspend();
    bool prev_grad = remat_enable_grad_begin();
    if (w->begin) w->begin(w->ud, dev);

    remat_tensor *a = NULL;
    rc = remat_detach(&a, input);
    if (!rc && remat_tensor_dtype(a) != REMAT_I64) rc = remat_set_requires_grad(a, true);
    for (int k = 0; !rc && k < n_stages; k++) {
        remat_tensor *next = NULL;
        rc = w->stage(w->ud, k, a, &next);
        if (rc) {
            char where[64];
            snprintf(where, sizeof where, "%s: stage %d", call, k);
            rm_err_prefix(rc, where);
            rm_release(next);
            break;
        }
        rm_release(a);
        a = next;
    }
    rm_release(a);

    if (w->end) w->end(w->ud);
    remat_grad_mode_restore(prev_grad);
    rm_scope_resume(scope);
    int rc2 = remat_rng_fork_end(&fork);
    if (!rc && rc2) rc = rm_err_prefix(rc2, call);
    return rc;
}

/* remat_profile_stages' walk: each stage measured into p, the allocation
 * meter of the input's device running throughout. */
typedef struct stages_walk {
    const remat_stage *stages;
    remat_profile *p;
    int warm, runs;
    double *tf, *tb; /* runs timings each */
    rm_meter prev_meter;
} stages_walk;

static remat_status walk_stage(void *ud, int k, remat_tensor *a, remat_tensor **next) {
    stages_walk *w = ud;
    return profile_stage(&w->stages[k], a, w->warm, w->runs, w->tf, w->tb, &w->p->stages[k], next);
}
static void walk_begin(void *ud, remat_device dev) {
    rm_meter_start(dev, &((stages_walk *)ud)->prev_meter);
}
static void walk_end(void *ud) { rm_meter_stop(&((stages_walk *)ud)->prev_meter); }

remat_status remat_profile_stages(remat_profile **out, int n_stages, const remat_stage *stages,
                                  remat_tensor *input, const remat_profile_options *opts) {
    static const char *call = "remat_profile_stages";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    int runs = 0, warm = 0;
    int rc =
        pl_check_profile_args(call, n_stages, stages, input, opts, PL_DEFAULT_RUNS, &runs, &warm);
    if (rc) return rc;

    remat_profile *p = NULL;
    rc = remat_profile_create(&p, n_stages);
    if (rc) return rm_err_prefix(rc, call);
    p->runs = runs;
    double *tf = malloc((size_t)runs * sizeof *tf), *tb = malloc((size_t)runs * sizeof *tb);
    if (!tf || !tb) {
        free(tf);
        free(tb);
        remat_profile_free(p);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }

    stages_walk sw = {.stages = stages, .p = p, .warm = warm, .runs = runs, .tf = tf, .tb = tb};
    pl_stage_walk w = {walk_stage, walk_begin, walk_end, &sw};
    rc = pl_walk_stages(call, input, n_stages, &w);
    free(tf);
    free(tb);
    if (rc) {
        remat_profile_free(p);
        return rc;
    }
    *out = p;
    return REMAT_OK;
}
