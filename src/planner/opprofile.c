/*
 * src/planner/opprofile.c — the op-level profile: every op of every stage,
 * measured through the same selective-checkpoint machinery that will run
 * the plan, so that op indices are those a policy sees (ctx->op_index).
 *
 * Each stage runs inside a non-reentrant checkpoint whose selective
 * context keeps every op (MUST_SAVE). The policy is called when an op
 * starts: at that moment the clock and the region's bytes_cached counter
 * close the previous op (an op is cached when it ends, so the counter's
 * growth between two policy calls is exactly what keeping the earlier op
 * costs), and this thread's allocation meter closes its peak (run_peak: the
 * peak from one policy call to the next, above what was live before the
 * stage). A save observer, active on this thread only, attributes every
 * tensor saved for backward to the running op. The forward is then dropped
 * (no backward runs): nothing about the user's tensors changes.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/graph.h"
#include "core/core.h"
#include "ops/registry.h"
#include "planner_internal.h"
#include "remat/checkpoint.h"
#include "remat/compress.h"
#include "remat/selective.h"

#define OP_DEFAULT_RUNS 3
#define OP_MAX_INPUTS 8

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One run of one stage: per op, where it started and what it saved. */
typedef struct op_run {
    int n, cap;
    remat_op_profile_entry *ops; /* name, save figures (times and bytes filled at the end) */
    double *t0;                  /* clock when the op's policy call came */
    int64_t *c0;                 /* bytes_cached then */
    int64_t *z0;                 /* bytes_cached_bf16 then */
    remat_sac_stats stats;
    int64_t base; /* the meter's bytes before the stage ran */
    int n_in;
    remat_tensor *in[OP_MAX_INPUTS]; /* the running op's inputs (borrowed during the op) */
    bool oom;
} op_run;

static RM_TLS op_run *tls_run; /* the run whose saves this thread's observer records */
static remat_save_observer_fn g_prev_obs;
static void *g_prev_obs_ud;

static bool shares_input(const op_run *r, const remat_tensor *t) {
    for (int i = 0; i < r->n_in; i++)
        if (r->in[i] && remat_shares_storage(r->in[i], t)) return true;
    return false;
}

static void save_observer(void *ud, const char *op, remat_tensor *t) {
    (void)ud;
    op_run *r = tls_run;
    if (r && r->n > 0 && t) {
        remat_op_profile_entry *e = &r->ops[r->n - 1];
        remat_dtype dt = remat_tensor_dtype(t);
        size_t bytes = (size_t)remat_numel(t) * remat_dtype_size(dt);
        size_t sto = remat_storage_nbytes(t);
        e->n_saved++;
        e->saved_bytes += bytes;
        if (shares_input(r, t) || sto > bytes) e->n_saved_views++;
        if (dt == REMAT_U8 || dt == REMAT_I64) e->lean_bytes += bytes;
        else if (dt == REMAT_F32) e->lossy_bytes += bytes;
        if (remat_tensor_device(t).type != REMAT_CPU) e->offloadable = true;
    }
    if (g_prev_obs) g_prev_obs(g_prev_obs_ud, op, t);
}

static size_t peak_above(const op_run *r) {
    int64_t p = rm_meter_peak() - r->base;
    return p > 0 ? (size_t)p : 0;
}

static remat_checkpoint_policy record_policy(const remat_sac_context *ctx, const char *op,
                                             int n_inputs, remat_tensor *const *inputs,
                                             void *user_state) {
    op_run *r = user_state;
    if (ctx->is_recompute) return REMAT_MUST_SAVE; /* no backward runs: never reached */
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 32;
        remat_op_profile_entry *o = realloc(r->ops, (size_t)cap * sizeof *o);
        if (o) r->ops = o;
        double *t = o ? realloc(r->t0, (size_t)cap * sizeof *t) : NULL;
        if (t) r->t0 = t;
        int64_t *c = t ? realloc(r->c0, (size_t)cap * sizeof *c) : NULL;
        if (c) r->c0 = c;
        int64_t *z = c ? realloc(r->z0, (size_t)cap * sizeof *z) : NULL;
        if (z) r->z0 = z;
        if (!z) {
            r->oom = true;
            return REMAT_MUST_SAVE;
        }
        r->cap = cap;
    }
    remat_op_profile_entry *e = &r->ops[r->n];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", op ? op : "?");
    size_t len = strlen(e->name);
    e->cacheable = !(len > 0 && e->name[len - 1] == '_') && strcmp(e->name, "remat_tag") != 0;
    r->n_in = n_inputs < OP_MAX_INPUTS ? n_inputs : OP_MAX_INPUTS;
    for (int i = 0; i < r->n_in; i++) r->in[i] = inputs[i];
    r->c0[r->n] = r->stats.bytes_cached;
    r->z0[r->n] = r->stats.bytes_cached_bf16;
    /* the previous op's window closes: its peak (outputs, temporaries, and everything the
     * forward holds by then), and the next window starts at what is live now */
    if (r->n > 0) r->ops[r->n - 1].run_peak = peak_above(r);
    rm_meter_mark_peak();
    r->t0[r->n] = now_s();
    r->n++;
    return REMAT_MUST_SAVE;
}

/* The checkpointed function: the stage, then the clock that closes its last op. */
typedef struct wrap {
    const remat_stage *st;
    op_run *r;
    double t_end;
} wrap;

static remat_status wrapped_stage(void *ud, remat_tensor *const *inputs, int n_inputs,
                                  remat_tensor **outputs, int n_outputs) {
    wrap *w = ud;
    int rc = w->st->fn(w->st->user_data, inputs, n_inputs, outputs, n_outputs);
    w->t_end = now_s();
    if (w->r->n > 0) w->r->ops[w->r->n - 1].run_peak = peak_above(w->r);
    return rc;
}

static void run_free(op_run *r) {
    free(r->ops);
    free(r->t0);
    free(r->c0);
    free(r->z0);
    memset(r, 0, sizeof *r);
}

/* One run of stage st on a: fills r (times into t[i] = duration of op i).
 * *next (if non-NULL) receives a detached copy of the output. */
static remat_status run_once(const remat_stage *st, remat_tensor *a, op_run *r, double **dur,
                             remat_tensor **next) {
    remat_policy *pol = NULL;
    int rc = remat_policy_from_fn(&pol, record_policy, r, NULL);
    if (rc) return rc;
    remat_sac_config cfg = {.policy = pol, .stats = &r->stats};
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE,
                                  .context_fn = remat_sac_context_fn,
                                  .context_fn_data = &cfg};
    wrap w = {st, r, 0};
    remat_tensor *y = NULL;
    r->base = rm_meter_current();
    tls_run = r;
    rc = remat_checkpoint(wrapped_stage, &w, 1, &a, 1, &y, &o);
    tls_run = NULL;
    int64_t c_end = r->stats.bytes_cached, z_end = r->stats.bytes_cached_bf16;
    if (!rc && r->oom) rc = rm_err(REMAT_ENOMEM, "out of memory recording the ops");
    if (!rc && !y) rc = rm_err(REMAT_EINVAL, "the stage returned no tensor");
    if (!rc && r->n > 0) {
        *dur = malloc((size_t)r->n * sizeof **dur);
        if (!*dur) rc = rm_err(REMAT_ENOMEM, "out of memory");
    }
    if (!rc) {
        for (int i = 0; i < r->n; i++) {
            double te = i + 1 < r->n ? r->t0[i + 1] : w.t_end;
            int64_t ce = i + 1 < r->n ? r->c0[i + 1] : c_end;
            (*dur)[i] = te > r->t0[i] ? te - r->t0[i] : 0;
            r->ops[i].cache_bytes = ce > r->c0[i] ? (size_t)(ce - r->c0[i]) : 0;
            int64_t ze = i + 1 < r->n ? r->z0[i + 1] : z_end;
            r->ops[i].bf16_bytes = ze > r->z0[i] ? (size_t)(ze - r->z0[i]) : 0;
        }
    }
    if (!rc && next) {
        rc = remat_detach(next, y);
        if (!rc && remat_tensor_dtype(*next) != REMAT_I64)
            rc = remat_set_requires_grad(*next, true);
        if (rc) rm_release_p(next);
    }
    rm_release(y);
    remat_policy_release(pol);
    return rc;
}

/* Same ops, same bytes: the stage is a repeat of an earlier measured one. */
static bool same_ops(const remat_stage_ops *a, const op_run *r) {
    if (a->n_ops != r->n) return false;
    for (int i = 0; i < r->n; i++) {
        const remat_op_profile_entry *x = &a->ops[i], *y = &r->ops[i];
        if (strcmp(x->name, y->name) != 0 || x->cache_bytes != y->cache_bytes ||
            x->saved_bytes != y->saved_bytes || x->n_saved != y->n_saved)
            return false;
    }
    return true;
}

/* Whether op `name` saves only before its kernel runs (RM_OPF_SAVE_EARLY and
 * no output among its saves): when its saves are a recomputation's last,
 * early stop comes before its kernel. Unknown ops: no. */
static bool saves_only_early(const char *name) {
    const rm_op_desc *d = rm_op_desc_at(rm_op_find(name));
    if (!d || !(d->flags & RM_OPF_SAVE_EARLY)) return false;
    for (int s = 0; s < d->n_saved; s++)
        if (d->saves[s].kind == RM_SAVE_OUTPUT) return false;
    return true;
}

/* recompute_free: with early stop on (remat_checkpoint's default, which
 * remat_plan_run's checkpoints keep), the recomputation stops at the
 * stage's last save; the ops after the last op that saves anything run in
 * skip mode (no kernel), and so does that op when its saves all come
 * before its kernel. */
static void mark_recompute_free(remat_stage_ops *so) {
    if (remat_get_checkpoint_early_stop() == REMAT_OPT_FALSE) return;
    int last = -1;
    for (int i = 0; i < so->n_ops; i++)
        if (so->ops[i].n_saved > 0) last = i;
    for (int i = last + 1; i < so->n_ops; i++) so->ops[i].recompute_free = true;
    if (last >= 0) so->ops[last].recompute_free = saves_only_early(so->ops[last].name);
}

/* The stage stored as bf16 (remat_stage_ops.store_bf16_*): one stored forward under the
 * hooks remat_plan_run would put around it, and its backward, measured as
 * remat_profile_stages measures a stored stage. Only where some op saves f32 tensors (the
 * hooks have nothing else to convert); the fields stay 0 when nothing was converted. */
static remat_status measure_store_bf16(remat_stage_ops *so, const remat_stage *st,
                                       remat_tensor *a) {
    bool any = false;
    for (int i = 0; i < so->n_ops; i++) any = any || so->ops[i].lossy_bytes > 0;
    if (!any) return REMAT_OK;
    pl_store_bf16 c;
    remat_saved_hooks h = pl_store_bf16_hooks(&c, a);
    pl_store_meas m = {0};
    int rc = pl_measure_store(st, a, &h, &m);
    if (rc || !c.bytes) return rc;
    so->store_bf16_bytes = c.bytes;
    so->store_bf16_saved = m.saved;
    so->store_bf16_fwd_peak = m.fpa;
    so->store_bf16_bwd_peak = m.bp;
    return REMAT_OK;
}

/* Measures stage k: the first run finds its ops; if an earlier stage
 * matches, its times are copied, else warm + runs more runs give medians. */
static remat_status profile_stage_ops(remat_op_profile *p, const remat_stage *st, int k,
                                      remat_tensor *a, int warm, int runs, remat_tensor **next) {
    op_run first = {0};
    double *dur = NULL;
    int rc = run_once(st, a, &first, &dur, next);
    remat_stage_ops *so = &p->stages[k];
    if (rc) goto out;
    so->n_ops = first.n;
    so->same_as = k;
    so->ops = calloc((size_t)(first.n > 0 ? first.n : 1), sizeof *so->ops);
    if (!so->ops) {
        rc = rm_err(REMAT_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(so->ops, first.ops, (size_t)first.n * sizeof *so->ops);
    /* An in-place op may modify what an earlier op returned; a kept output
     * that was modified fails the recomputation (REMAT_EVERSION). Which
     * earlier output it modifies is not known here: conservatively, nothing
     * before the stage's last in-place op is kept. */
    int last_inplace = -1;
    for (int i = 0; i < first.n; i++) {
        size_t len = strlen(so->ops[i].name);
        if (len > 0 && so->ops[i].name[len - 1] == '_') last_inplace = i;
    }
    for (int i = 0; i < last_inplace; i++) so->ops[i].cacheable = false;
    mark_recompute_free(so);
    for (int j = 0; j < k; j++) {
        const remat_stage_ops *sj = &p->stages[j];
        if (sj->same_as == j && same_ops(sj, &first)) {
            for (int i = 0; i < first.n; i++) so->ops[i].time = sj->ops[i].time;
            so->same_as = j;
            so->store_bf16_bytes = sj->store_bf16_bytes;
            so->store_bf16_saved = sj->store_bf16_saved;
            so->store_bf16_fwd_peak = sj->store_bf16_fwd_peak;
            so->store_bf16_bwd_peak = sj->store_bf16_bwd_peak;
            goto out;
        }
    }
    /* a distinct stage: the first run was a warm-up when one is asked for */
    double *samples = calloc((size_t)(first.n > 0 ? first.n : 1) * (size_t)runs, sizeof *samples);
    if (!samples) {
        rc = rm_err(REMAT_ENOMEM, "out of memory");
        goto out;
    }
    int taken = 0;
    if (!warm) {
        for (int i = 0; i < first.n; i++) samples[(size_t)i * (size_t)runs] = dur[i];
        taken = 1;
    }
    for (; !rc && taken < runs; taken++) {
        op_run r = {0};
        double *d = NULL;
        rc = run_once(st, a, &r, &d, NULL);
        if (!rc && r.n != first.n)
            rc = rm_err(REMAT_EDETERMINISM,
                        "the stage called %d ops in one run and %d in another: op-level "
                        "planning needs a stage that calls the same ops every time",
                        first.n, r.n);
        for (int i = 0; !rc && i < first.n; i++) {
            samples[(size_t)i * (size_t)runs + taken] = d[i];
            /* the recomputation bound holds for every run: the largest peak seen */
            if (r.ops[i].run_peak > so->ops[i].run_peak) so->ops[i].run_peak = r.ops[i].run_peak;
        }
        free(d);
        run_free(&r);
    }
    for (int i = 0; !rc && i < first.n; i++) {
        so->ops[i].time = pl_median(&samples[(size_t)i * (size_t)runs], runs);
    }
    free(samples);
    if (!rc) rc = measure_store_bf16(so, st, a);
out:
    free(dur);
    run_free(&first);
    return rc;
}

/* remat_profile_ops' walk: each stage's ops measured into p, the save
 * observer installed throughout. */
typedef struct ops_walk {
    const remat_stage *stages;
    remat_op_profile *p;
    int warm, runs;
    rm_meter prev_meter; /* this thread's allocation meter, for measure_store_bf16 */
} ops_walk;

static remat_status walk_stage(void *ud, int k, remat_tensor *a, remat_tensor **next) {
    ops_walk *w = ud;
    return profile_stage_ops(w->p, &w->stages[k], k, a, w->warm, w->runs, next);
}
static void walk_begin(void *ud, remat_device dev) {
    rm_meter_start(dev, &((ops_walk *)ud)->prev_meter);
    rm_save_observer_get(&g_prev_obs, &g_prev_obs_ud);
    remat_set_save_observer(save_observer, NULL);
}
static void walk_end(void *ud) {
    remat_set_save_observer(g_prev_obs, g_prev_obs_ud);
    rm_meter_stop(&((ops_walk *)ud)->prev_meter);
}

/* ops->cast_bytes_per_s: f32 bytes per second of remat_to_bf16 and remat_bf16_to_f32 (their
 * mean) on a tensor the size of the largest op's bf16_bytes (at most 16 MiB), median of runs;
 * left 0 (the default) when no op has such bytes. */
static remat_status measure_cast(remat_op_profile *p, int runs) {
    size_t most = 0;
    for (int k = 0; k < p->n_stages; k++)
        for (int i = 0; i < p->stages[k].n_ops; i++)
            if (p->stages[k].ops[i].bf16_bytes > most) most = p->stages[k].ops[i].bf16_bytes;
    if (most > ((size_t)16 << 20)) most = (size_t)16 << 20;
    int64_t n = (int64_t)(most / sizeof(float));
    if (n < 1) return REMAT_OK;
    void *scope = rm_scope_suspend();
    remat_tensor *x = NULL;
    bool skip = rm_set_skip_mode(false);
    int rc = rm_new_output(&x, 1, &n, REMAT_F32, REMAT_DEVICE_CPU);
    rm_set_skip_mode(skip);
    double *v = rc ? NULL : calloc((size_t)runs, sizeof *v);
    if (!rc && !v) rc = rm_err(REMAT_ENOMEM, "out of memory");
    if (!rc) memset(rm_ptr(x), 0, (size_t)n * sizeof(float));
    for (int j = 0; !rc && j <= runs; j++) { /* j == 0: warm-up */
        remat_tensor *h = NULL, *back = NULL;
        double t0 = now_s();
        rc = remat_to_bf16(&h, x);
        if (!rc) rc = remat_bf16_to_f32(&back, h);
        double dt = now_s() - t0;
        rm_release(h);
        rm_release(back);
        if (j > 0) v[j - 1] = dt;
    }
    if (!rc) {
        double med = pl_median(v, runs);
        if (med > 0) p->cast_bytes_per_s = 2.0 * (double)n * sizeof(float) / med;
    }
    free(v);
    rm_release(x);
    rm_scope_resume(scope);
    return rc;
}

/* Stages that repeat one another share one Pareto set in the solver, built from the first
 * one's ops: each op's run_peak becomes the largest any of them measured, so that the
 * recomputation bound holds for every one. */
static void share_run_peaks(remat_op_profile *p) {
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < p->n_stages; k++) {
            remat_stage_ops *so = &p->stages[k], *src = &p->stages[so->same_as];
            if (so->same_as == k || src->n_ops != so->n_ops) continue;
            for (int i = 0; i < so->n_ops; i++) {
                size_t *a = &src->ops[i].run_peak, *b = &so->ops[i].run_peak;
                if (pass == 0 && *b > *a) *a = *b; /* first the group's largest */
                if (pass == 1) *b = *a;            /* then every member gets it */
            }
        }
}

remat_status remat_profile_ops(remat_op_profile **out, int n_stages, const remat_stage *stages,
                               remat_tensor *input, const remat_profile_options *opts) {
    static const char *call = "remat_profile_ops";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    ops_walk ow = {.stages = stages};
    int rc = pl_check_profile_args(call, n_stages, stages, input, opts, OP_DEFAULT_RUNS, &ow.runs,
                                   &ow.warm);
    if (rc) return rc;

    remat_op_profile *p = malloc(sizeof *p);
    remat_stage_ops *so = calloc((size_t)n_stages, sizeof *so);
    if (!p || !so) {
        free(p);
        free(so);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    *p = (remat_op_profile){.n_stages = n_stages, .stages = so, .runs = ow.runs};
    ow.p = p;
    pl_stage_walk w = {walk_stage, walk_begin, walk_end, &ow};
    rc = pl_walk_stages(call, input, n_stages, &w);
    if (!rc) share_run_peaks(p);
    if (!rc) rc = measure_cast(p, ow.runs);
    if (rc) {
        remat_op_profile_free(p);
        return rc;
    }
    *out = p;
    return REMAT_OK;
}

/* The forward seconds of so's recompute_free ops, op times scaled to add up to fwd_time
 * (0 when the ops have no time). */
static double stage_free_time(const remat_stage_ops *so, double fwd_time) {
    double sum = 0, fr = 0;
    for (int i = 0; i < so->n_ops; i++) {
        double t = so->ops[i].time > 0 ? so->ops[i].time : 0;
        sum += t;
        if (so->ops[i].recompute_free) fr += t;
    }
    return sum > 0 ? fr * (fwd_time / sum) : 0;
}

/* Each group of stages that repeat one another (same_as, same op count): fwd[] and bwd[]
 * become the group's medians. v, member: n entries of scratch. */
static void pool_repeats(const remat_op_profile *ops, int n, double *fwd, double *bwd, double *v,
                         int *member) {
    for (int j = 0; j < n; j++) {
        if (ops->stages[j].same_as != j) continue;
        int m = 0; /* stage j and the stages that repeat it */
        for (int k = j; k < n; k++)
            if (ops->stages[k].same_as == j && ops->stages[k].n_ops == ops->stages[j].n_ops)
                member[m++] = k;
        if (m < 2) continue;
        for (int t = 0; t < 2; t++) {
            double *x = t ? bwd : fwd;
            for (int i = 0; i < m; i++) v[i] = x[member[i]];
            double med = pl_median(v, m);
            for (int i = 0; i < m; i++) x[member[i]] = med;
        }
    }
}

remat_status pl_apply_op_times(const remat_op_profile *ops, int n, double *fwd, double *bwd,
                               double *free_time) {
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    int *member = malloc((size_t)(n > 0 ? n : 1) * sizeof *member);
    if (v && member) pool_repeats(ops, n, fwd, bwd, v, member);
    bool ok = v && member;
    free(v);
    free(member);
    if (!ok) return REMAT_ENOMEM;
    for (int k = 0; k < n; k++) free_time[k] = stage_free_time(&ops->stages[k], fwd[k]);
    return REMAT_OK;
}

remat_status remat_profile_apply_ops(remat_profile *profile, const remat_op_profile *ops) {
    static const char *call = "remat_profile_apply_ops";
    if (!profile || !profile->stages || !ops || !ops->stages)
        return rm_err(REMAT_EINVAL, "%s: profile or ops is NULL", call);
    int n = profile->n_stages;
    if (ops->n_stages != n)
        return rm_err(REMAT_EINVAL, "%s: the op profile has %d stages, the profile %d", call,
                      ops->n_stages, n);
    double *t = malloc(3 * (size_t)n * sizeof *t); /* fwd, bwd, free time */
    if (!t) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int k = 0; k < n; k++) {
        t[k] = profile->stages[k].fwd_time;
        t[n + k] = profile->stages[k].bwd_time;
    }
    if (pl_apply_op_times(ops, n, t, t + n, t + 2 * (size_t)n)) {
        free(t);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    for (int k = 0; k < n; k++) {
        remat_stage_profile *s = &profile->stages[k];
        s->fwd_time = t[k];
        s->bwd_time = t[n + k];
        s->recompute_free_time = t[2 * (size_t)n + (size_t)k];
    }
    free(t);
    return REMAT_OK;
}

void remat_op_profile_free(remat_op_profile *p) {
    if (!p) return;
    for (int k = 0; p->stages && k < p->n_stages; k++) free(p->stages[k].ops);
    free(p->stages);
    free(p);
}

void remat_op_profile_print(const remat_op_profile *p, FILE *f) {
    if (!p || !f || !p->stages) return;
    fprintf(f, "op profile: %d stages (median of %d runs per distinct stage)", p->n_stages,
            p->runs);
    if (p->cast_bytes_per_s > 0)
        fprintf(f, "; f32 <-> bf16 conversions %.2f GB/s of f32", p->cast_bytes_per_s / 1e9);
    fputc('\n', f);
    for (int k = 0; k < p->n_stages; k++) {
        const remat_stage_ops *s = &p->stages[k];
        if (s->same_as != k) continue;
        int first = k, last = k, count = 0;
        for (int j = k; j < p->n_stages; j++)
            if (p->stages[j].same_as == k) last = j, count++;
        fprintf(f, "  stage %d (%d stage%s like it, %d-%d): %d ops\n", first, count,
                count == 1 ? "" : "s", first, last, s->n_ops);
        if (s->store_bf16_bytes)
            fprintf(f,
                    "    stored as bf16: %.2f MiB of saved f32 converted; saves %.2f MiB, "
                    "forward peak %.2f MiB, backward peak %.2f MiB\n",
                    PL_MIB(s->store_bf16_bytes), PL_MIB(s->store_bf16_saved),
                    PL_MIB(s->store_bf16_fwd_peak), PL_MIB(s->store_bf16_bwd_peak));
        fprintf(f, "    %3s %-24s %8s %10s %5s %10s %10s %10s %s\n", "op", "name", "ms", "keep KiB",
                "saves", "saved KiB", "lean KiB", "bf16 KiB", "notes");
        for (int i = 0; i < s->n_ops; i++) {
            const remat_op_profile_entry *e = &s->ops[i];
            fprintf(f, "    %3d %-24s %8.3f %10.1f %2d/%-2d %10.1f %10.1f %10.1f %s%s\n", i,
                    e->name, e->time * 1e3, (double)e->cache_bytes / 1024.0, e->n_saved,
                    e->n_saved_views, (double)e->saved_bytes / 1024.0,
                    (double)e->lean_bytes / 1024.0, (double)e->bf16_bytes / 1024.0,
                    e->recompute_free ? "not rerun (early stop)"
                    : e->cacheable    ? ""
                                      : "always recomputed",
                    e->offloadable ? " offloadable" : "");
        }
    }
}
