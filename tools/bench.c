/*
 * tools/bench.c — `remat bench`: one model, several strategies, side by side.
 *
 * Method (also in docs/cli.md):
 *  1. One warm-up step without checkpointing (thread pools, BLAS buffers),
 *     whose gradients become the reference.
 *  2. A measured step per strategy, with the memory observer on: allocator
 *     peak (remat_alloc_reset_peak before the step), the allocator level
 *     before the step (parameters, batch), the timeline, and RSS sampled
 *     at every allocator event (/proc/self/statm). ru_maxrss is a process-
 *     wide high-water mark and cannot tell strategies apart in one process;
 *     the growth of current RSS over the step can, because step_malloc_mode
 *     makes glibc return every freed tensor to the OS, and hands back free
 *     heap pages before each measured step (else a strategy measured later
 *     reuses pages an earlier one left resident and reads low). Its
 *     gradients are compared bitwise with the reference.
 *  3. Timed repetitions without observers, interleaved (rep r runs the
 *     strategies starting at r mod n), medians reported.
 * A "step" here is forward + backward; the optimizer update is the same for
 * every strategy and is left out.
 *
 * budget=SIZE strategies and --sweep-budgets need the planner: after the
 * warm-up, the chain of blocks is profiled once (model_profile_chain) and
 * every budget strategy gets its plan from that profile. The sweep adds
 * none, sequential=2..L and budgets from the planner's minimum to the
 * store-all peak, and draws them in pareto.svg.
 */
#include "bench.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "dist.h"
#include "models.h"
#include "step.h"
#include "svg.h"
#include "trace.h"
#include "util.h"

typedef struct result {
    double *times;
    double step_ms, overhead;
    double ms_min, ms_q1, ms_q3, ms_max; /* spread of the timed repetitions */
    bool noise; /* its IQR overlaps the reference's: the time ratio is within noise */
    size_t peak, baseline, rss_growth;
    bool has_heap;      /* run with bench/preload/heap_peak.c: heap_growth is measured */
    size_t heap_growth; /* the C heap's peak over the step - its bytes at the start */
    double loss;
    bool grads_equal, loss_equal;
    double max_diff;
    int64_t recomputed;
    remat_sac_stats sac; /* selective: the measured step's counters */
    trace tr;
    double comm_s, exposed_s; /* under mpirun: sums over the timed repetitions */
    int comm_n;
} result;

/* Copies of every parameter's gradient (the reference). */
static float **grab_grads(const model *m) {
    float **g = calloc((size_t)m->n_params, sizeof *g);
    if (!g) return NULL;
    for (int i = 0; i < m->n_params; i++) {
        remat_tensor *gr = remat_tensor_grad(m->params[i].t);
        int64_t n = remat_numel(m->params[i].t);
        g[i] = malloc(sizeof(float) * (size_t)n);
        if (!g[i]) continue;
        if (!gr || remat_copy_to_buffer(gr, REMAT_F32, g[i], n) != REMAT_OK)
            memset(g[i], 0xFF, sizeof(float) * (size_t)n); /* NaN: never equal */
    }
    return g;
}

static void free_grads(float **g, int n) {
    for (int i = 0; g && i < n; i++) free(g[i]);
    free(g);
}

/* Bitwise comparison of the current grads with ref; max |diff| otherwise. */
static bool compare_grads(const model *m, float **ref, double *max_diff) {
    bool equal = true;
    *max_diff = 0;
    float **cur = grab_grads(m);
    if (!cur) return false;
    for (int i = 0; i < m->n_params; i++) {
        int64_t n = remat_numel(m->params[i].t);
        if (!ref[i] || !cur[i]) {
            equal = false;
            *max_diff = INFINITY;
            continue;
        }
        if (memcmp(ref[i], cur[i], sizeof(float) * (size_t)n) == 0) continue;
        equal = false;
        for (int64_t k = 0; k < n; k++) {
            double d = fabs((double)ref[i][k] - (double)cur[i][k]);
            if (!(d <= *max_diff)) *max_diff = d; /* NaN propagates */
        }
    }
    free_grads(cur, m->n_params);
    return equal;
}

/* The planner's numbers for the chain, shared by every budget strategy. */
typedef struct planner_info {
    remat_profile *prof;     /* NULL: no strategy needed the planner */
    remat_step_profile step; /* the step around the chain (model_profile_step) */
    size_t min_budget, store_all;               /* budget=: the whole step's allocator peak */
    size_t blocks_min_budget, blocks_store_all; /* blocks-budget=: what the blocks add */
    double profile_s;
} planner_info;

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Min, quartiles (linear interpolation) and max of n step times, in ms. */
static void spread(const double *t, int n, result *r) {
    double *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
    if (!v || n < 1) {
        free(v);
        r->ms_min = r->ms_q1 = r->ms_q3 = r->ms_max = r->step_ms;
        return;
    }
    for (int i = 0; i < n; i++) v[i] = 1e3 * t[i];
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    double q[2];
    for (int k = 0; k < 2; k++) {
        double pos = (k ? 0.75 : 0.25) * (n - 1);
        int lo = (int)pos;
        double f = pos - lo;
        q[k] = lo + 1 < n ? v[lo] + f * (v[lo + 1] - v[lo]) : v[lo];
    }
    r->ms_min = v[0];
    r->ms_q1 = q[0];
    r->ms_q3 = q[1];
    r->ms_max = v[n - 1];
    free(v);
}

static void print_header(FILE *f, const config *c, const model *m, int threads) {
    if (m->kind == MODEL_GPT)
        fprintf(f,
                "remat bench: GPT, %d layers, width %d, %d heads, context %d, batch %d "
                "(%.2fM parameters), %s attention, %d threads, %d reps\n",
                m->layers, m->width, m->heads, m->context, c->batch, (double)m->n_weights / 1e6,
                m->attn_ops ? "composed" : "fused", threads, c->reps);
    else
        fprintf(f,
                "remat bench: MLP, %d layers, width %d, batch %d (%.2fM parameters), %d threads, "
                "%d reps\n",
                m->layers, m->width, c->batch, (double)m->n_weights / 1e6, threads, c->reps);
}

static void mib(char *buf, size_t n, double bytes) { snprintf(buf, n, "%.1f", bytes / 1048576.0); }

/* What the planner was given and chose, one line per budget strategy, with
 * its predicted peak next to the measured one. */
static void print_plans(const config *c, const result *r, const planner_info *pl) {
    bool step = false, blocks = false;
    for (int i = 0; i < c->n_strategies; i++) {
        const strategy *s = &c->strategies[i];
        if (s->kind != STRAT_BUDGET || !s->plan) continue;
        step |= !s->blocks_only;
        blocks |= s->blocks_only;
    }
    if (!step && !blocks) return;
    const double M = 1048576.0;
    printf("\nplans (");
    if (step)
        printf("budget= bounds the whole step's allocator peak, parameters and gradients "
               "included: feasible from %.2f MiB, %.2f MiB without checkpointing",
               (double)pl->min_budget / M, (double)pl->store_all / M);
    if (blocks)
        printf("%sblocks-budget= bounds what the %d blocks add: feasible from %.2f MiB, %.2f MiB "
               "without checkpointing",
               step ? ";\n       " : "", pl->prof ? pl->prof->n_stages : 0,
               (double)pl->blocks_min_budget / M, (double)pl->blocks_store_all / M);
    printf("):\n");
    for (int i = 0; i < c->n_strategies; i++) {
        const strategy *s = &c->strategies[i];
        if (s->kind != STRAT_BUDGET || !s->plan) continue;
        const remat_plan *p = s->plan;
        char st[256];
        strategy_plan_structure(p, st, sizeof st);
        /* budget=: the step's peak; blocks-budget=: what the step adds
         * (the blocks' share plus the head's, measured as one) */
        double measured = s->blocks_only ? (double)(r[i].peak - r[i].baseline) : (double)r[i].peak;
        printf("  %-22s budget %8.2f MiB, %s predicted %8.2f measured %8.2f MiB, %3" PRId64
               " block forwards recomputed: %s\n",
               s->name, (double)p->budget_bytes / M, s->blocks_only ? "blocks" : "peak  ",
               (double)p->peak_bytes / M, measured / M, p->n_recomputed, st);
    }
}

/* What each selective policy kept, from the measured step's counters. */
static void print_selective(const config *c, const result *r) {
    bool any = false;
    int w = 22;
    for (int i = 0; i < c->n_strategies; i++) {
        int l = (int)strlen(c->strategies[i].name);
        if (c->strategies[i].kind == STRAT_SELECTIVE && l > w) w = l;
    }
    for (int i = 0; i < c->n_strategies; i++) {
        const strategy *s = &c->strategies[i];
        if (s->kind != STRAT_SELECTIVE) continue;
        if (!any)
            printf("\nselective policies (one step, all blocks; cached = kept from the forward "
                   "instead of recomputed):\n");
        any = true;
        const remat_sac_stats *st = &r[i].sac;
        printf("  %-*s %4" PRId64 " of %4" PRId64 " ops cached (%7.2f MiB), %4" PRId64
               " recomputed\n",
               w, s->name, st->ops_cached, st->ops_forward, (double)st->bytes_cached / 1048576.0,
               st->ops_recomputed);
    }
}

static void print_table(const config *c, const model *m, int threads, result *r, int ref,
                        const planner_info *pl) {
    print_header(stdout, c, m, threads);
    printf("one step = forward + backward; medians of %d interleaved repetitions\n\n", c->reps);
    int w = 24; /* the name column, wider for long names (selective=names:...) */
    for (int i = 0; i < c->n_strategies; i++) {
        int l = (int)strlen(c->strategies[i].name);
        if (l > w) w = l;
    }
    bool heap = c->n_strategies > 0 && r[0].has_heap;
    printf("%-*s %9s %15s %9s %11s %11s %9s %11s%s  %s\n", w, "strategy", "step ms", "IQR ms",
           "time", "peak MiB", "step MiB", "memory", "RSS+ MiB", heap ? "   heap+ MiB" : "",
           "gradients");
    bool any_noise = false;
    for (int i = 0; i < c->n_strategies; i++) {
        char pk[32], st[32], rss[32], tm[32], mem[32], hp[48] = "";
        mib(pk, sizeof pk, (double)r[i].peak);
        mib(st, sizeof st, (double)(r[i].peak - r[i].baseline));
        mib(rss, sizeof rss, (double)r[i].rss_growth);
        if (heap) {
            char v[32];
            mib(v, sizeof v, (double)r[i].heap_growth);
            snprintf(hp, sizeof hp, " %11s", v);
        }
        /* "~": the interquartile ranges overlap, the ratio is within the noise */
        snprintf(tm, sizeof tm, "%s%.2fx", i != ref && r[i].noise ? "~" : "", r[i].overhead);
        any_noise |= i != ref && r[i].noise;
        char range[48];
        snprintf(range, sizeof range, "%.1f-%.1f", r[i].ms_q1, r[i].ms_q3);
        double base = (double)(r[ref].peak - r[ref].baseline);
        snprintf(mem, sizeof mem, "%.2fx", base > 0 ? (double)(r[i].peak - r[i].baseline) / base : 0);
        char gr[64];
        if (i == ref && c->strategies[i].kind == STRAT_NONE)
            snprintf(gr, sizeof gr, "reference");
        else if (r[i].grads_equal)
            snprintf(gr, sizeof gr, "bitwise equal");
        else
            snprintf(gr, sizeof gr, "DIFFER (max |diff| %.3g)", r[i].max_diff);
        printf("%-*s %9.1f %15s %9s %11s %11s %9s %11s%s  %s\n", w, c->strategies[i].name,
               r[i].step_ms, range, tm, pk, st, mem, rss, hp, gr);
    }
    print_plans(c, r, pl);
    print_selective(c, r);
    printf("\n"
           "  step ms   median of the timed repetitions; IQR: their middle half (quartiles)\n"
           "  time      step time / step time of %s (the recompute overhead)%s\n"
           "  peak      remat allocator peak during the step (parameters included)\n"
           "  step      what the step adds over the memory held before it (activations, grads)\n"
           "  memory    step MiB / step MiB of %s\n"
           "  RSS+      growth of the process's resident memory during the step\n",
           c->strategies[ref].name,
           any_noise ? ";\n            ~ within noise: the two IQRs overlap (more --reps may "
                       "separate them)"
                     : "",
           c->strategies[ref].name);
    if (heap)
        printf("  heap+     peak of the C heap (every malloc: remat, oneDNN, libc) over the step\n"
               "            minus its bytes at the start (bench/preload/heap_peak.c)\n");
}

static void print_csv(const config *c, result *r) {
    printf("strategy,step_ms,step_ms_min,step_ms_max,overhead,peak_alloc_bytes,baseline_bytes,step_alloc_bytes,"
           "rss_growth_bytes,recomputed_blocks,grads_bitwise_equal,grads_max_abs_diff,"
           "budget_bytes,plan_peak_bytes,heap_growth_bytes\n");
    for (int i = 0; i < c->n_strategies; i++) {
        const remat_plan *p = c->strategies[i].plan;
        printf("%s,%.4f,%.4f,%.4f,%.4f,%zu,%zu,%zu,%zu,%" PRId64 ",%s,%.9g,", c->strategies[i].name,
               r[i].step_ms, r[i].ms_min, r[i].ms_max, r[i].overhead, r[i].peak, r[i].baseline, r[i].peak - r[i].baseline,
               r[i].rss_growth, r[i].recomputed, r[i].grads_equal ? "true" : "false",
               r[i].max_diff);
        if (p)
            printf("%zu,%zu,", p->budget_bytes, p->peak_bytes);
        else
            printf(",,");
        if (r[i].has_heap)
            printf("%zu\n", r[i].heap_growth);
        else
            printf("\n");
    }
}

static void print_json(const config *c, const model *m, int threads, result *r,
                       const planner_info *pl, int world, int refi) {
    util_str j = {0};
    util_str_printf(&j,
                    "{\"command\":\"bench\",\"model\":\"%s\",\"layers\":%d,\"width\":%d,"
                    "\"heads\":%d,\"context\":%d,\"batch\":%d,\"params\":%" PRId64
                    ",\"attention\":\"%s\",\"threads\":%d,\"reps\":%d,\"world_size\":%d,"
                    "\"strategies\":[",
                    m->kind == MODEL_GPT ? "gpt" : "mlp", m->layers, m->width, m->heads,
                    m->context, c->batch, m->n_weights, m->attn_ops ? "ops" : "fused", threads,
                    c->reps, world);
    for (int i = 0; i < c->n_strategies; i++) {
        util_str_printf(&j, "%s{\"strategy\":\"", i ? "," : "");
        util_str_json_escaped(&j, c->strategies[i].name);
        util_str_printf(&j,
                        "\",\"step_ms\":%.4f,\"overhead\":%.4f,\"peak_alloc_bytes\":%zu,"
                        "\"baseline_bytes\":%zu,\"step_alloc_bytes\":%zu,\"rss_growth_bytes\":%zu,"
                        "\"recomputed_blocks\":%" PRId64 ",\"loss\":%.9g,"
                        "\"grads_bitwise_equal\":%s,\"grads_max_abs_diff\":",
                        r[i].step_ms, r[i].overhead, r[i].peak, r[i].baseline,
                        r[i].peak - r[i].baseline, r[i].rss_growth, r[i].recomputed, r[i].loss,
                        r[i].grads_equal ? "true" : "false");
        if (isfinite(r[i].max_diff))
            util_str_printf(&j, "%.9g,", r[i].max_diff);
        else
            util_str_printf(&j, "null,");
        util_str_printf(&j,
                        "\"step_ms_min\":%.4f,\"step_ms_q1\":%.4f,\"step_ms_q3\":%.4f,"
                        "\"step_ms_max\":%.4f,\"time_within_noise\":%s,\"step_ms_all\":[",
                        r[i].ms_min, r[i].ms_q1, r[i].ms_q3, r[i].ms_max,
                        i != refi && r[i].noise ? "true" : "false");
        for (int k = 0; k < c->reps; k++)
            util_str_printf(&j, "%s%.4f", k ? "," : "", r[i].times[k] * 1e3);
        util_str_printf(&j, "]");
        if (r[i].comm_n) { /* under mpirun */
            double cm = r[i].comm_s / r[i].comm_n, ex = r[i].exposed_s / r[i].comm_n;
            util_str_printf(&j, ",\"comm_ms\":%.4f,\"comm_exposed_ms\":%.4f,"
                                "\"comm_hidden_fraction\":%.4f", 1e3 * cm, 1e3 * ex,
                            cm > 0 ? 1 - (ex < cm ? ex / cm : 1) : 0);
        }
        if (r[i].has_heap)
            util_str_printf(&j, ",\"heap_growth_bytes\":%zu", r[i].heap_growth);
        else
            util_str_printf(&j, ",\"heap_growth_bytes\":null");
        if (c->strategies[i].kind == STRAT_SELECTIVE) {
            const remat_sac_stats *st = &r[i].sac;
            util_str_printf(&j,
                            ",\"sac_policy\":\"%s\",\"sac_ops_forward\":%" PRId64
                            ",\"sac_ops_cached\":%" PRId64 ",\"sac_bytes_cached\":%" PRId64
                            ",\"sac_ops_recomputed\":%" PRId64 ",\"sac_ops_from_cache\":%" PRId64,
                            c->strategies[i].policy, st->ops_forward, st->ops_cached,
                            st->bytes_cached, st->ops_recomputed, st->ops_from_cache);
        }
        const remat_plan *p = c->strategies[i].plan;
        if (p) {
            char st[1024];
            strategy_plan_structure(p, st, sizeof st);
            util_str_printf(&j,
                            ",\"budget_bytes\":%zu,\"plan_peak_bytes\":%zu,"
                            "\"plan_step_ms\":%.4f,\"plan_recomputed_blocks\":%" PRId64
                            ",\"plan_structure\":\"",
                            p->budget_bytes, p->peak_bytes, p->time * 1e3, p->n_recomputed);
            util_str_json_escaped(&j, st);
            util_str_printf(&j, "\"");
        }
        util_str_printf(&j, "}");
    }
    util_str_printf(&j, "]");
    if (pl->prof)
        util_str_printf(&j,
                        ",\"planner\":{\"min_budget_bytes\":%zu,\"store_all_bytes\":%zu,"
                        "\"blocks_min_budget_bytes\":%zu,\"blocks_store_all_bytes\":%zu,"
                        "\"step_fixed_bytes\":%zu,\"profile_s\":%.3f}",
                        pl->min_budget, pl->store_all, pl->blocks_min_budget,
                        pl->blocks_store_all, pl->step.fixed_bytes, pl->profile_s);
    util_str_printf(&j, ",\"peak_rss_bytes\":%zu}\n", util_peak_rss_bytes());
    if (!j.oom) fputs(j.s, stdout);
    util_str_free(&j);
}

static bool join(char *buf, size_t n, const char *dir, const char *file) {
    return (size_t)snprintf(buf, n, "%s/%s", dir, file) < n;
}

/* Appends s to c's list unless a strategy of that name is there. */
static void add_strategy(config *c, const strategy *s) {
    for (int i = 0; i < c->n_strategies; i++)
        if (!strcmp(c->strategies[i].name, s->name)) return;
    if (c->n_strategies < ARGS_MAX_STRATEGIES) c->strategies[c->n_strategies++] = *s;
}

/* --sweep-budgets, before the profile: none first, then the listed
 * strategies, then sequential=N for N in 2..L (at most 24 values of N, spread
 * evenly, when L is larger). */
static void sweep_uniform(config *c) {
    strategy listed[ARGS_MAX_STRATEGIES], s;
    int n = c->n_strategies;
    memcpy(listed, c->strategies, sizeof(strategy) * (size_t)n);
    c->n_strategies = 0;
    strategy_parse("none", false, &s, NULL, 0);
    add_strategy(c, &s);
    for (int i = 0; i < n; i++) add_strategy(c, &listed[i]);
    const int L = c->layers, max_n = 24;
    int prev = 0;
    for (int k = 0; k < max_n && L >= 2; k++) {
        int segs = L - 1 <= max_n ? 2 + k : 2 + (int)lround((double)k * (L - 2) / (max_n - 1));
        if (segs > L) break;
        if (segs == prev) continue;
        prev = segs;
        strategy_parse("sequential=2", false, &s, NULL, 0);
        s.segments = segs;
        strategy_name(&s);
        add_strategy(c, &s);
    }
}

/* --sweep-budgets, after the profile: N whole-step budgets evenly from the
 * planner's minimum to the step's store-all peak. */
static void sweep_budgets(config *c, const planner_info *pl) {
    for (int k = 0; k < c->sweep; k++) {
        double f = (double)k / (double)(c->sweep - 1);
        strategy s;
        strategy_budget_bytes(&s,
                              (uint64_t)((double)pl->min_budget +
                                         f * (double)(pl->store_all - pl->min_budget)),
                              false);
        add_strategy(c, &s);
    }
}

/* Profiles the chain once and plans every budget strategy. */
static int plan_budgets(config *c, model *m, const batch *b, planner_info *pl, bool log) {
    bool need = c->sweep > 0;
    for (int i = 0; i < c->n_strategies; i++) need = need || c->strategies[i].kind == STRAT_BUDGET;
    if (!need) return REMAT_OK;
    if (log) fprintf(stderr, "  profiling the %d block%s for the planner...\n", m->layers,
                     m->layers == 1 ? "" : "s");
    /* malloc in its fast setting: the profile's times are the planner's cost model */
    step_malloc_mode(false);
    double t0 = util_now();
    model_zero_grad(m); /* as every measured step starts: no .grad */
    int rc = model_profile_step(m, b, false, &pl->prof, &pl->step);
    pl->profile_s = util_now() - t0;
    step_malloc_mode(true);
    if (!rc) rc = strategy_step_range(pl->prof, &pl->step, &pl->store_all, &pl->min_budget);
    if (!rc) rc = remat_plan_min_budget(pl->prof, &pl->blocks_min_budget);
    if (!rc) rc = strategy_store_all_bytes(pl->prof, &pl->blocks_store_all);
    if (rc) return rc;
    if (c->verbose) {
        fprintf(stderr, "profile of the %d block%s (%.2f s):\n", m->layers,
                m->layers == 1 ? "" : "s", pl->profile_s);
        remat_profile_print(pl->prof, stderr);
    }
    if (c->sweep) sweep_budgets(c, pl);
    for (int i = 0; i < c->n_strategies; i++) {
        strategy *s = &c->strategies[i];
        if (s->kind != STRAT_BUDGET) continue;
        rc = strategy_plan(s, pl->prof, &pl->step);
        if (rc && c->default_strategies && s->budget < pl->min_budget) {
            /* the default list's budget=50% does not fit every model: leave it out */
            if (log)
                fprintf(stderr, "  (%s left out: below the planner's minimum for this model, "
                                "%.2f MiB)\n", s->name, (double)pl->min_budget / 1048576.0);
            memmove(s, s + 1, sizeof *s * (size_t)(c->n_strategies - i - 1));
            c->n_strategies--;
            i--;
            rc = REMAT_OK;
            continue;
        }
        if (rc) {
            char msg[768]; /* remat_set_error must not read the buffer it writes */
            snprintf(msg, sizeof msg, "%s", remat_last_error());
            remat_set_error(rc, "%s: %s", s->name, msg);
            return rc;
        }
        char warn[320];
        if (log && !c->sweep && strategy_budget_warning(s, warn, sizeof warn))
            fprintf(stderr, "  %s\n", warn);
        if (c->verbose) {
            fprintf(stderr, "%s:\n", s->name);
            remat_plan_print(s->plan, stderr);
        }
    }
    return REMAT_OK;
}

static pareto_kind kind_of(const strategy *s) {
    switch (s->kind) {
    case STRAT_NONE: return PARETO_NONE;
    case STRAT_SEQUENTIAL: return PARETO_UNIFORM;
    case STRAT_BUDGET: return PARETO_PLANNED;
    default: return PARETO_OTHER;
    }
}

static bool write_pareto(const char *file, const config *c, const model *m, const result *r,
                         const planner_info *pl) {
    const int n = c->n_strategies;
    pareto_point *pts = calloc((size_t)n, sizeof *pts);
    if (!pts) return false;
    int differ = 0;
    for (int i = 0; i < n; i++) {
        const strategy *s = &c->strategies[i];
        pts[i].label = s->name;
        pts[i].kind = kind_of(s);
        pts[i].segments = s->segments;
        pts[i].budget_bytes = s->plan ? (double)s->plan->budget_bytes : 0;
        pts[i].step_ms = r[i].step_ms;
        pts[i].peak_bytes = (double)r[i].peak;
        pts[i].baseline_bytes = (double)r[i].baseline;
        differ += !r[i].grads_equal;
    }
    char title[256], sub[512];
    snprintf(title, sizeof title, "remat: %s, %d layers, width %d: step time vs memory",
             m->kind == MODEL_GPT ? "GPT" : "MLP", m->layers, m->width);
    if (pl->prof)
        snprintf(sub, sizeof sub,
                 "planner budgets bound the whole step's peak: feasible from %.2f MiB, %.2f MiB "
                 "without checkpointing; %s",
                 (double)pl->min_budget / 1048576.0, (double)pl->store_all / 1048576.0,
                 differ ? "SOME GRADIENTS DIFFER from none" : "every gradient bitwise equal to none");
    else
        snprintf(sub, sizeof sub, "%s",
                 differ ? "SOME GRADIENTS DIFFER from none" : "every gradient bitwise equal to none");
    bool ok = svg_pareto(file, title, sub, n, pts);
    free(pts);
    return ok;
}

int cmd_bench(config *c, bool is_default) {
    int rc = REMAT_OK;
    trace_device(c->device);
    model m;
    memset(&m, 0, sizeof m);
    task tk;
    memset(&tk, 0, sizeof tk);
    batch b;
    memset(&b, 0, sizeof b);
    planner_info pl;
    memset(&pl, 0, sizeof pl);
    float **ref = NULL;
    result *r = NULL;
    int n = 0;
    int threads = step_setup_process(c->threads);
    prog_dist pd;
    if ((rc = prog_dist_init(&pd, c))) goto done; /* under mpirun: rank 0 prints */
    const bool log = !c->quiet;
    if (c->sweep) sweep_uniform(c);
    if ((rc = task_init(&tk, c))) goto done;
    tk.row0 = (int64_t)pd.rank * c->batch;
    if ((rc = model_init(&m, c, c->seed))) goto done;
    if ((rc = prog_dist_attach(&pd, &m, c->bucket_mib, 1))) goto done;
    if ((rc = task_batch(&tk, 0, &b))) goto done;
    if (is_default && log)
        fprintf(stderr,
                "remat: no command given, so here is `remat bench` on a small GPT: the same\n"
                "training step under each checkpointing strategy (see `remat --help`).\n");
    if (log) print_header(stderr, c, &m, threads);

    /* 1. warm-up + reference gradients (RSS tracking from here to step 2's end) */
    step_malloc_mode(true);
    strategy none;
    strategy_parse("none", false, &none, NULL, 0);
    double ref_loss = 0;
    if (log) fprintf(stderr, "  warm-up step (reference gradients)...\n");
    model_zero_grad(&m);
    if ((rc = step_run(&m, &none, &b, NULL, NULL, NULL, &ref_loss))) goto done;
    ref = grab_grads(&m);
    if (!ref) {
        rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
        goto done;
    }
    /* the planner's profile and plans (budget strategies, the sweep) */
    if ((rc = plan_budgets(c, &m, &b, &pl, log))) goto done;

    n = c->n_strategies > 0 ? c->n_strategies : 0;
    r = calloc((size_t)n + 1, sizeof *r);
    if (!r) {
        rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        r[i].times = calloc((size_t)c->reps, sizeof(double));
        if (!r[i].times) {
            rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
            goto done;
        }
    }

    /* 2. one measured step per strategy */
    for (int i = 0; i < n; i++) {
        if (log) fprintf(stderr, "  measuring memory: %s\n", c->strategies[i].name);
        model_zero_grad(&m);
        /* free heap memory left resident by earlier work (steps, the planner's
         * profile) would be reused without a page fault and hide part of this
         * step from RSS+ (small blocks sit below live ones, where glibc's
         * trimming of the heap top does not reach): hand it back first */
        step_malloc_mode(true);
        remat_alloc_reset_peak(c->device);
        r[i].baseline = util_current_bytes(c->device);
        trace_begin(&r[i].tr, true);
        c->strategies[i].sac_stats = &r[i].sac; /* selective: what its regions cached */
        rc = step_run(&m, &c->strategies[i], &b, NULL, &r[i].tr, NULL, &r[i].loss);
        c->strategies[i].sac_stats = NULL;
        trace_end(&r[i].tr);
        if (rc) goto done;
        r[i].peak = util_peak_bytes(c->device);
        r[i].rss_growth = r[i].tr.peak_rss > r[i].tr.start_rss ? r[i].tr.peak_rss - r[i].tr.start_rss : 0;
        r[i].has_heap = r[i].tr.heap;
        r[i].heap_growth = r[i].tr.heap_growth;
        r[i].recomputed = r[i].tr.n_recomputed_blocks;
        r[i].loss_equal = memcmp(&r[i].loss, &ref_loss, sizeof ref_loss) == 0;
        r[i].grads_equal = compare_grads(&m, ref, &r[i].max_diff) && r[i].loss_equal;
    }

    /* 3. timed, interleaved repetitions, with malloc in its fast setting */
    step_malloc_mode(false);
    const bool tty = util_isatty(stderr);
    for (int rep = 0; rep < c->reps; rep++) {
        if (log)
            fprintf(stderr, "%s  timing: repetition %d/%d%s", tty ? "\r" : "", rep + 1, c->reps,
                    tty ? "" : "\n");
        for (int k = 0; k < n; k++) {
            int i = (rep + k) % n;
            double loss;
            model_zero_grad(&m);
            double t0 = util_now();
            rc = step_run(&m, &c->strategies[i], &b, NULL, NULL, NULL, &loss);
            r[i].times[rep] = util_now() - t0;
            if (rc) goto done;
            prog_dist d1 = pd; /* this step's communication figures */
            d1.comm_s = d1.exposed_s = d1.backward_s = 0;
            d1.n_steps = 0;
            prog_dist_after_step(&d1);
            r[i].comm_s += d1.comm_s;
            r[i].exposed_s += d1.exposed_s;
            r[i].comm_n += d1.n_steps;
        }
    }
    if (log && tty) fprintf(stderr, "\n");
    model_zero_grad(&m);
    int refi = 0;
    for (int i = 0; i < n; i++)
        if (c->strategies[i].kind == STRAT_NONE) {
            refi = i;
            break;
        }
    for (int i = 0; i < n; i++) r[i].step_ms = 1e3 * util_median(r[i].times, c->reps);
    for (int i = 0; pd.pg && i < n; i++) { /* memory: the max over ranks */
        double pk[2] = {(double)r[i].peak, (double)r[i].rss_growth};
        if ((rc = prog_dist_max(&pd, pk, 2))) goto done;
        r[i].peak = (size_t)pk[0];
        r[i].rss_growth = (size_t)pk[1];
    }
    for (int i = 0; i < n; i++) r[i].overhead = r[refi].step_ms > 0 ? r[i].step_ms / r[refi].step_ms : 0;
    for (int i = 0; i < n; i++) spread(r[i].times, c->reps, &r[i]);
    for (int i = 0; i < n; i++)
        r[i].noise = r[i].ms_q1 <= r[refi].ms_q3 && r[refi].ms_q1 <= r[i].ms_q3;

    if (pd.rank > 0)
        ; /* rank 0 reports for the job */
    else if (c->json)
        print_json(c, &m, threads, r, &pl, pd.world, refi);
    else if (c->csv)
        print_csv(c, r);
    else
        print_table(c, &m, threads, r, refi, &pl);
    if (pd.pg && pd.rank == 0 && !c->json && !c->csv) {
        printf("\n%d ranks (mpirun), batch %d per rank; memory: the max over ranks\n", pd.world,
               c->batch);
        printf("strategy                all-reduce ms   after backward ms   hidden\n");
        for (int i = 0; i < n; i++) {
            if (!r[i].comm_n) continue;
            double cm = 1e3 * r[i].comm_s / r[i].comm_n, ex = 1e3 * r[i].exposed_s / r[i].comm_n;
            printf("%-22s %14.2f %19.2f %7.0f%%\n", c->strategies[i].name, cm, ex,
                   cm > 0 ? 100 * (1 - (ex < cm ? ex / cm : 1)) : 0);
        }
    }

    /* plots */
    const trace **ts = calloc((size_t)n, sizeof *ts);
    const char **labels = calloc((size_t)n, sizeof *labels);
    tradeoff_point *pts = calloc((size_t)n, sizeof *pts);
    if (!ts || !labels || !pts) {
        free(ts);
        free(labels);
        free(pts);
        rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        ts[i] = &r[i].tr;
        labels[i] = c->strategies[i].name;
        pts[i] = (tradeoff_point){c->strategies[i].name, r[i].step_ms, (double)r[i].peak,
                                  (double)r[i].baseline};
    }
    char title[256];
    snprintf(title, sizeof title, "remat: %s, %d layers, width %d: memory vs time per strategy",
             m.kind == MODEL_GPT ? "GPT" : "MLP", m.layers, m.width);
    char path[4096];
    FILE *msg = (c->json || c->csv) ? stderr : stdout;
    bool wrote_header = false;
    /* pareto.svg: wherever asked, and into the output directory (--out DIR,
     * else ./out for the sweep) when the planner ran */
    const char *pareto_dir = c->out_dir ? c->out_dir : (c->sweep ? "out" : NULL);
    if (!pl.prof) pareto_dir = NULL;
#define WROTE(p)                                                    \
    do {                                                            \
        if (!wrote_header) fprintf(msg, "\n");                      \
        wrote_header = true;                                        \
        fprintf(msg, "wrote %s\n", p);                              \
    } while (0)
#define FAILW(p) rc = remat_set_error(REMAT_EIO, "cannot write %s", p)
    if (c->out_dir) {
        if (!util_mkdir_p(c->out_dir)) {
            rc = remat_set_error(REMAT_EIO, "--out %s: cannot create the directory", c->out_dir);
        } else {
            if (!rc && join(path, sizeof path, c->out_dir, "tradeoff.svg")) {
                if (svg_tradeoff(path, title, n, pts)) WROTE(path); else FAILW(path);
            }
            if (!rc && join(path, sizeof path, c->out_dir, "timeline.svg")) {
                snprintf(title, sizeof title, "remat: memory during one training step, %s, %d layers",
                         m.kind == MODEL_GPT ? "GPT" : "MLP", m.layers);
                if (svg_timeline(path, title, n, ts, labels)) WROTE(path); else FAILW(path);
            }
            if (!rc && join(path, sizeof path, c->out_dir, "trace.json")) {
                if (trace_write_chrome(path, n, ts, labels)) WROTE(path); else FAILW(path);
            }
        }
    }
    if (!rc && pareto_dir) {
        if (!util_mkdir_p(pareto_dir))
            rc = remat_set_error(REMAT_EIO, "cannot create the directory %s", pareto_dir);
        else if (join(path, sizeof path, pareto_dir, "pareto.svg")) {
            if (write_pareto(path, c, &m, r, &pl)) WROTE(path); else FAILW(path);
        }
    }
    if (!rc && c->svg_pareto) {
        if (write_pareto(c->svg_pareto, c, &m, r, &pl)) WROTE(c->svg_pareto); else FAILW(c->svg_pareto);
    }
    if (!rc && c->svg) {
        if (svg_tradeoff(c->svg, title, n, pts)) WROTE(c->svg); else FAILW(c->svg);
    }
    if (!rc && c->trace) {
        if (trace_write_chrome(c->trace, n, ts, labels)) WROTE(c->trace); else FAILW(c->trace);
    }
#undef WROTE
#undef FAILW
    if (!rc && is_default && !c->json && !c->csv && pd.rank == 0)
        printf("\nOpen %s/timeline.svg to see memory over the step (forward, backward,\n"
               "recompute shaded), %s/tradeoff.svg for memory against time%s%s%s.\n"
               "Try `remat train` to train this kind of model, `remat bench --sweep-budgets`\n"
               "to set the planner against every uniform segmentation, `remat bench --help`\n"
               "for more.\n",
               c->out_dir, c->out_dir, pareto_dir ? "\nand " : "", pareto_dir ? pareto_dir : "",
               pareto_dir ? "/pareto.svg for step time against memory" : "");
    free(ts);
    free(labels);
    free(pts);
    for (int i = 0; !rc && i < n; i++)
        if (!r[i].grads_equal) {
            fprintf(stderr, "remat bench: gradients of %s differ from the un-checkpointed ones\n",
                    c->strategies[i].name);
            rc = REMAT_EDETERMINISM;
        }
    if (rc == REMAT_EDETERMINISM) goto cleanup;

done:
    if (rc) fprintf(stderr, "\nremat bench: %s\n", remat_last_error());
cleanup:
    free_grads(ref, m.n_params);
    for (int i = 0; r && i < n; i++) {
        free(r[i].times);
        trace_free(&r[i].tr);
    }
    free(r);
    for (int i = 0; i < c->n_strategies; i++) strategy_free(&c->strategies[i]);
    remat_profile_free(pl.prof);
    batch_free(&b);
    model_free(&m);
    task_free(&tk);
    if (prog_dist_end(&pd, rc ? 1 : 0)) { /* with rc under mpirun: ends every rank */
        if (!rc) fprintf(stderr, "remat bench: %s\n", remat_last_error()); /* else printed */
        return 1;
    }
    return rc ? 1 : 0;
}
