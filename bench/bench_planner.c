/* bench/bench_planner.c — the budget planner against PyTorch's uniform segments.
 *
 * Model: L blocks of Linear(D -> D) + GELU(tanh) + LayerNorm(D) on a batch
 * of B rows (f32), loss = sum(output). One training step = forward, loss,
 * backward (parameter gradients accumulate into existing .grad).
 *
 * Strategies, each run `reps` steps (median time; peak = max over steps of
 * the allocator's peak above the bytes live when the step starts):
 *   none          no checkpointing
 *   uniform S     remat_checkpoint_sequential with S segments (S around
 *                 sqrt(L)), non-reentrant
 *   plan/block    remat_plan_create on the L block stages, budget = the
 *                 measured peak of uniform S, run with remat_plan_run
 *   plan/op       the same on 3L op stages (linear | gelu | layer_norm):
 *                 the planner may keep a linear's output and recompute only
 *                 the cheap GELU and LayerNorm
 * then a Pareto sweep: planned schedules over budgets from the smallest
 * feasible to "store everything", next to uniform segments S = 1..L.
 *
 * Parameter gradients: a hook on every parameter adds the incoming gradient
 * into .grad right away and hands the engine a 0-dim zero instead, so the
 * full-size gradient buffer dies at once (the engine otherwise keeps every
 * leaf's gradient buffer until the end of the backward pass, which adds up
 * to the size of all parameters on top of every strategy). --no-hook turns
 * this off.
 *
 *   bench_planner [--blocks L] [--batch B] [--dim D] [--reps R] [--segments S]
 *                 [--profile-runs P] [--sweep N] [--no-sweep] [--no-hook]
 *                 [--pyramid] [--print-plans]
 * --pyramid makes the chain heterogeneous: block widths cycle through
 * D/2, D, 2D, D (so sizes differ 4x and GEMM costs 4x between blocks).
 * Defaults: L 32, B 256, D 1024, 5 reps, S = round(sqrt(L)), 5 profile runs,
 * a sweep of 8 budgets (3 reps each). On a shared machine run it with
 * OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1: spinning OpenMP threads that
 * lose their core make 2-thread timings swing by 10x.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "remat/checkpoint.h"
#include "remat/planner.h"
#include "remat/remat.h"

#define MIB(b) ((double)(b) / (1024.0 * 1024.0))

/* ---- the model ----------------------------------------------------------------------------- */
typedef struct block {
    remat_tensor *w, *b, *g, *beta;
} block;

static int block_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    block *p = ud;
    remat_tensor *h = NULL, *a = NULL;
    int rc = remat_linear(&h, in[0], p->w, p->b);
    if (!rc) rc = remat_gelu(&a, h, REMAT_GELU_TANH);
    if (!rc) rc = remat_layer_norm(&out[0], a, 1, p->g, p->beta, 1e-5);
    remat_release(h);
    remat_release(a);
    return rc;
}
static int linear_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    block *p = ud;
    return remat_linear(&out[0], in[0], p->w, p->b);
}
static int gelu_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud;
    (void)n_in;
    (void)n_out;
    return remat_gelu(&out[0], in[0], REMAT_GELU_TANH);
}
static int ln_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    block *p = ud;
    return remat_layer_norm(&out[0], in[0], 1, p->g, p->beta, 1e-5);
}

static remat_tensor *g_zero; /* 0-dim zero handed back by the accumulate hook */

/* Accumulates the gradient into .grad now and lets the engine drop it. */
static int accumulate_hook(void *ud, remat_tensor *grad, remat_tensor **replacement) {
    remat_tensor *p = ud;
    remat_tensor *acc = remat_tensor_grad(p);
    if (!acc) return REMAT_OK; /* first step: let the engine create .grad */
    int rc = remat_add_(acc, grad, 1.0);
    if (rc) return rc;
    *replacement = remat_retain(g_zero);
    return REMAT_OK;
}

static remat_tensor *param(int ndim, const int64_t *shape, double lo, double hi, bool hook) {
    remat_tensor *t;
    CHECK(remat_rand_uniform(&t, ndim, shape, lo, hi, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_set_requires_grad(t, true));
    if (hook) CHECK(remat_register_hook(t, accumulate_hook, t));
    return t;
}

/* ---- strategies ------------------------------------------------------------------------------- */
typedef struct runner {
    int kind; /* 0: checkpoint_sequential, 1: plan */
    int segments;
    const remat_plan *plan;
    const remat_stage *stages;
    int n_stages;
} runner;

typedef struct result {
    double time; /* median seconds per step */
    double best; /* fastest step (the machine may be shared: noise only adds) */
    size_t peak; /* max peak above the step's start */
} result;

static remat_tensor *g_x;

static double one_step(const runner *r, size_t *peak) {
    static const remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    remat_tensor *y = NULL, *loss = NULL;
    size_t base = remat_cpu_current_bytes();
    CHECK(remat_alloc_reset_peak(REMAT_DEVICE_CPU));
    double t0 = now();
    if (r->kind == 0)
        CHECK(remat_checkpoint_sequential(&y, r->n_stages, r->stages, r->segments, g_x, &o));
    else CHECK(remat_plan_run(r->plan, r->stages, g_x, &y));
    CHECK(remat_sum_all(&loss, y));
    CHECK(remat_backward_scalar(loss));
    remat_release(loss);
    remat_release(y);
    double t = now() - t0;
    *peak = remat_cpu_peak_bytes() - base;
    return t;
}

/* Runs n strategies `reps` times each, interleaved (A B C A B C ...) so
 * that load changes on a shared machine hit all of them alike. */
static void measure_many(const runner *r, int n, int reps, result *res) {
    double *t = calloc((size_t)n * (size_t)reps, sizeof *t);
    for (int i = 0; i < n; i++) res[i] = (result){0, 0, 0};
    for (int k = 0; k < reps; k++)
        for (int i = 0; i < n; i++) {
            size_t pk;
            t[i * reps + k] = one_step(&r[i], &pk);
            if (pk > res[i].peak) res[i].peak = pk;
        }
    for (int i = 0; i < n; i++) {
        double *v = t + (ptrdiff_t)i * reps;
        qsort(v, (size_t)reps, sizeof *v, cmp_d);
        res[i].time = reps % 2 ? v[reps / 2] : 0.5 * (v[reps / 2 - 1] + v[reps / 2]);
        res[i].best = v[0];
    }
    free(t);
}

static result measure(const runner *r, int reps) {
    result res;
    measure_many(r, 1, reps, &res);
    return res;
}

static void header(void) {
    printf("  %-24s %9s %9s %8s %10s %10s %9s %6s\n", "strategy", "med ms", "min ms", "vs none",
           "peak MiB", "pred MiB", "pred ms", "recomp");
}

static void row(const char *name, result r, const remat_plan *pred, result ref) {
    printf("  %-24s %9.1f %9.1f %+7.1f%% %10.2f", name, r.time * 1e3, r.best * 1e3,
           (r.time / ref.time - 1.0) * 100.0, MIB(r.peak));
    if (pred)
        printf(" %10.2f %9.1f %6lld", MIB(pred->peak_bytes), pred->time * 1e3,
               (long long)pred->n_recomputed);
    printf("\n");
}

static void versus(const char *name, result a, result u) {
    printf("  %s vs uniform: %+.1f%% median step time (%+.1f%% fastest step) at %+.1f%% peak\n",
           name, (a.time / u.time - 1) * 100, (a.best / u.best - 1) * 100,
           ((double)a.peak / (double)u.peak - 1) * 100);
}

/* What main measured and built, for the comparisons below. */
typedef struct setup {
    int L, segs, reps;
    bool print_plans;
    remat_profile *pb, *po; /* block and op profiles */
    const remat_stage *sb, *so;
} setup;

/* The headline comparison at the uniform schedule's peak: variant 0 takes its measured
 * peak as the budget, variant 1 its peak as the planner's model predicts it. */
static void headline(const setup *s, int variant, runner none, runner uni, result r_uni0,
                     const remat_plan *p_none, const remat_plan *p_uni) {
    char name[64];
    /* (a) budget = the uniform schedule's measured peak;
     * (b) budget = its peak as the planner's model predicts it */
    size_t budget = variant == 0 ? r_uni0.peak : p_uni->peak_bytes;
    double t0 = now();
    remat_plan *plan_b = NULL, *plan_o = NULL;
    CHECK(remat_plan_create(&plan_b, s->pb, budget));
    double t_plan_b = now() - t0;
    t0 = now();
    CHECK(remat_plan_create(&plan_o, s->po, budget));
    double t_plan_o = now() - t0;
    runner rs[4] = {none, uni, {1, 0, plan_b, s->sb, s->L}, {1, 0, plan_o, s->so, 3 * s->L}};
    result r[4];
    measure_many(rs, 4, s->reps, r);
    printf("\n(%c) budget = %s peak of uniform %d segments = %.2f MiB "
           "(planning: %.3f s block, %.3f s op)\n",
           'a' + variant, variant == 0 ? "measured" : "model-predicted", s->segs, MIB(budget),
           t_plan_b, t_plan_o);
    header();
    row("none", r[0], p_none, r[0]);
    snprintf(name, sizeof name, "uniform %d segments", s->segs);
    row(name, r[1], p_uni, r[0]);
    row("plan/block", r[2], plan_b, r[0]);
    row("plan/op", r[3], plan_o, r[0]);
    versus("plan/block", r[2], r[1]);
    versus("plan/op", r[3], r[1]);
    if (variant == 0) {
        /* the uniform schedule priced with the op profile, for an
         * apples-to-apples prediction next to plan/op */
        double tu = 0;
        int size = s->L / s->segs;
        for (int k = 0; k < 3 * s->L; k++) {
            const remat_stage_profile *sp = &s->po->stages[k];
            tu += sp->fwd_time + sp->bwd_time;
            if (k / 3 < size * (s->segs - 1)) tu += sp->fwd_time;
        }
        printf("  predicted with the op profile: uniform %.1f ms, plan/op %.1f ms (%+.1f%%)\n",
               tu * 1e3, plan_o->time * 1e3, (plan_o->time / tu - 1) * 100);
    }
    if (s->print_plans) {
        remat_plan_print(plan_b, stdout);
        remat_plan_print(plan_o, stdout);
    }
    remat_plan_free(plan_b);
    remat_plan_free(plan_o);
}

/* The Pareto sweep: plans at sweep + 1 budgets from the least either profile allows to the
 * store-all peak, and the uniform segmentations, all measured interleaved. */
static void pareto_sweep(const setup *s, int sweep) {
    size_t mb_b, mb_o;
    CHECK(remat_plan_min_budget(s->pb, &mb_b));
    CHECK(remat_plan_min_budget(s->po, &mb_o));
    remat_plan *sa_o = NULL;
    CHECK(remat_plan_sequential(&sa_o, s->po, 0, 1));
    size_t lo = mb_o < mb_b ? mb_o : mb_b, hi = sa_o->peak_bytes;
    enum { MAXP = 64 };
    runner rs[MAXP];
    remat_plan *pl[MAXP];
    char label[MAXP][32];
    size_t bud[MAXP];
    int n = 0;
    for (int i = 0; i <= sweep && n + 2 <= MAXP; i++) {
        size_t b = lo + (size_t)((double)(hi - lo) * i / sweep);
        for (int g = 0; g < 2; g++) {
            if (b < (g ? mb_o : mb_b)) continue;
            CHECK(remat_plan_create(&pl[n], g ? s->po : s->pb, b));
            rs[n] = (runner){1, 0, pl[n], g ? s->so : s->sb, g ? 3 * s->L : s->L};
            snprintf(label[n], sizeof label[n], "%s", g ? "plan/op" : "plan/block");
            bud[n++] = b;
        }
    }
    int seglist[] = {1, 2, 3, 4, 5, 6, 8, 11, 16, 32};
    for (size_t i = 0; i < sizeof seglist / sizeof *seglist && n < MAXP; i++) {
        int sg = seglist[i];
        if (sg > s->L) break;
        CHECK(remat_plan_sequential(&pl[n], s->pb, 0, sg));
        rs[n] = (runner){0, sg, NULL, s->sb, s->L};
        snprintf(label[n], sizeof label[n], "uniform %d", sg);
        bud[n++] = 0;
    }
    result *r = calloc((size_t)n, sizeof *r);
    measure_many(rs, n, s->reps > 3 ? 3 : s->reps, r);
    printf("\nPareto sweep (time vs peak), budgets from %.2f to %.2f MiB, measured "
           "interleaved\n",
           MIB(lo), MIB(hi));
    printf("  %-10s %10s %9s %9s %10s %10s %9s\n", "strategy", "budget", "med ms", "min ms",
           "peak MiB", "pred MiB", "pred ms");
    for (int i = 0; i < n; i++) {
        char bs[16] = "-";
        if (bud[i]) snprintf(bs, sizeof bs, "%.2f", MIB(bud[i]));
        printf("  %-10s %10s %9.1f %9.1f %10.2f %10.2f %9.1f\n", label[i], bs, r[i].time * 1e3,
               r[i].best * 1e3, MIB(r[i].peak), MIB(pl[i]->peak_bytes), pl[i]->time * 1e3);
        remat_plan_free(pl[i]);
    }
    free(r);
    remat_plan_free(sa_o);
}

int main(int argc, char **argv) {
    int L = 32, B = 256, D = 1024, reps = 5, segs = 0, sweep = 8, prof_runs = 5;
    bool hook = true, print_plans = false, pyramid = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--blocks") && v) L = atoi(v), i++;
        else if (!strcmp(a, "--batch") && v) B = atoi(v), i++;
        else if (!strcmp(a, "--dim") && v) D = atoi(v), i++;
        else if (!strcmp(a, "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(a, "--profile-runs") && v) prof_runs = atoi(v), i++;
        else if (!strcmp(a, "--segments") && v) segs = atoi(v), i++;
        else if (!strcmp(a, "--sweep") && v) sweep = atoi(v), i++;
        else if (!strcmp(a, "--no-sweep")) sweep = 0;
        else if (!strcmp(a, "--no-hook")) hook = false;
        else if (!strcmp(a, "--pyramid")) pyramid = true;
        else if (!strcmp(a, "--print-plans")) print_plans = true;
        else {
            fprintf(stderr,
                    "usage: %s [--blocks L] [--batch B] [--dim D] [--reps R] "
                    "[--segments S] [--profile-runs P] [--sweep N] [--no-sweep] "
                    "[--no-hook] [--pyramid] [--print-plans]\n",
                    argv[0]);
            return 2;
        }
    }
    if (L < 1 || B < 1 || D < 1 || reps < 1) return 2;
    if (segs < 1) segs = (int)lround(sqrt((double)L));

    remat_manual_seed(1);
    CHECK(remat_scalar(&g_zero, 0.0, REMAT_F32));
    block *blk = calloc((size_t)L, sizeof *blk);
    remat_stage *sb = calloc((size_t)L, sizeof *sb), *so = calloc((size_t)3 * L, sizeof *so);
    /* widths: D everywhere, or the pyramid D/2, D, 2D, D, D/2, ... */
    static const double pyr[4] = {0.5, 1.0, 2.0, 1.0};
    int *width = calloc((size_t)L + 1, sizeof *width);
    size_t n_params = 0;
    for (int k = 0; k <= L; k++) width[k] = pyramid ? (int)(D * pyr[k % 4]) : D;
    for (int k = 0; k < L; k++) {
        int64_t ws[2] = {width[k + 1], width[k]}, vs[1] = {width[k + 1]};
        double bound = 1.0 / sqrt((double)width[k]);
        n_params += (size_t)width[k + 1] * ((size_t)width[k] + 3);
        blk[k].w = param(2, ws, -bound, bound, hook);
        blk[k].b = param(1, vs, -bound, bound, hook);
        blk[k].g = param(1, vs, 0.9, 1.1, hook);
        blk[k].beta = param(1, vs, -0.1, 0.1, hook);
        sb[k] = (remat_stage){block_fn, &blk[k]};
        so[(ptrdiff_t)3 * k] = (remat_stage){linear_fn, &blk[k]};
        so[3 * k + 1] = (remat_stage){gelu_fn, NULL};
        so[3 * k + 2] = (remat_stage){ln_fn, &blk[k]};
    }
    int64_t xs[2] = {B, width[0]};
    CHECK(remat_rand_normal(&g_x, 2, xs, 0, 1, REMAT_F32, REMAT_DEVICE_CPU));

    if (pyramid)
        printf("bench_planner: %d blocks of Linear+GELU+LayerNorm with widths %d, %d, %d, %d, ... "
               "(pyramid), batch %d, f32, gemm %s, %d reps, parameter-gradient hook %s\n",
               L, width[0], width[1], width[2], width[3], B, remat_gemm_backend(), reps,
               hook ? "on" : "off");
    else
        printf("bench_planner: %d blocks of Linear(%d->%d)+GELU+LayerNorm, batch %d, f32, "
               "gemm %s, %d reps, parameter-gradient hook %s\n",
               L, D, D, B, remat_gemm_backend(), reps, hook ? "on" : "off");
    printf("  one activation of width %d: %.2f MiB; parameters %.1f MiB\n", D,
           MIB((size_t)B * D * 4), MIB(n_params * 4));

    /* warm-up step: creates every .grad (outside all budgets) */
    runner none = {0, 1, NULL, sb, L};
    measure(&none, 1);

    double t0 = now();
    remat_profile *pb = NULL, *po = NULL;
    remat_profile_options popt = {.runs = prof_runs};
    CHECK(remat_profile_stages(&pb, L, sb, g_x, &popt));
    double t_prof_b = now() - t0;
    t0 = now();
    CHECK(remat_profile_stages(&po, 3 * L, so, g_x, &popt));
    double t_prof_o = now() - t0;
    printf("  profiling: %d block stages %.2f s, %d op stages %.2f s\n", L, t_prof_b, 3 * L,
           t_prof_o);
    if (print_plans) remat_profile_print(pb, stdout);

    /* ---- headline: planned vs uniform at the uniform schedule's peak ---- */
    remat_plan *p_none = NULL, *p_uni = NULL;
    CHECK(remat_plan_sequential(&p_none, pb, 0, 1));
    CHECK(remat_plan_sequential(&p_uni, pb, 0, segs));
    runner uni = {0, segs, NULL, sb, L};
    result r_uni0 = measure(&uni, 1); /* its measured peak is the budget */
    setup st = {L, segs, reps, print_plans, pb, po, sb, so};
    for (int variant = 0; variant < 2; variant++)
        headline(&st, variant, none, uni, r_uni0, p_none, p_uni);

    if (sweep > 0) pareto_sweep(&st, sweep);

    remat_plan_free(p_none);
    remat_plan_free(p_uni);
    remat_profile_free(pb);
    remat_profile_free(po);
    for (int k = 0; k < L; k++) {
        remat_release(blk[k].w);
        remat_release(blk[k].b);
        remat_release(blk[k].g);
        remat_release(blk[k].beta);
    }
    remat_release(g_x);
    remat_release(g_zero);
    free(blk);
    free(width);
    free(sb);
    free(so);
    return 0;
}
