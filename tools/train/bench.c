/*
 * tools/train/bench.c — `remat bench`: one model, several strategies, side by side.
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

#include "cli/term.h"
#include "cli/util.h"
#include "dist.h"
#include "grad_meter.h"
#include "hf_run.h"
#include "io/data.h"
#include "io/hf_dir.h"
#include "io/json.h"
#include "io/outputs.h"
#include "models.h"
#include "profile.h"
#include "report/alloc_trace.h"
#include "report/svg.h"
#include "step.h"

typedef struct result {
    double *times;
    double *cpu_times; /* the process's CPU seconds over the same steps (all threads) */
    double step_ms, overhead;
    double ms_min, ms_q1, ms_q3, ms_max; /* spread of the timed repetitions */
    bool noise; /* its IQR overlaps the reference's: the time ratio is within noise */
    size_t peak, baseline, rss_growth;
    bool has_act;        /* grad_at_peak is known (the meter saw the allocator's peak) */
    size_t grad_at_peak; /* parameter-gradient bytes live at the peak (grad_meter.h) */
    bool has_heap;       /* run with bench/preload/heap_peak.c: heap_growth is measured */
    size_t heap_growth;  /* the C heap's peak over the step - its bytes at the start */
    double loss;
    bool grads_equal, loss_equal;
    double max_diff;
    int64_t recomputed;
    remat_sac_stats sac; /* selective: the measured step's counters */
    trace tr;
    double comm_s, exposed_s; /* under mpirun: sums over the timed repetitions */
    int comm_n;
    prof_result prof; /* --profile */
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
    remat_profile *prof;                        /* NULL: no strategy needed the planner */
    remat_op_profile *ops;                      /* budget= (op level): the blocks' ops */
    remat_profile *hprof;                       /* budget= (op level): the half-block chain */
    remat_op_profile *hops;                     /* and its ops (model_profile_halves) */
    remat_step_profile step;                    /* the step around the chain (model_profile_step) */
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

/* "GPT", "MLP", or a Hugging Face model's family. */
static const char *model_name(const model *m) {
    return m->kind == MODEL_GPT     ? "GPT"
           : m->kind == MODEL_MLP   ? "MLP"
           : m->kind == MODEL_LLAMA ? "Llama"
                                    : hf_family_name(remat_model_get_config(m->lib)->family);
}

/* Everything bench prints to stdout fits 100 columns (a long strategy name
 * widens its table), so that the header is two lines. */
static void print_header(FILE *f, const config *c, const model *m, int threads) {
    if (m->kind == MODEL_HF)
        term_printf(
            f,
            "remat bench: %s from %s,\n  %d layers, width %d, %d heads, context %d, batch %d "
            "(%.2fM parameters), no dropout,\n  %d threads, %d reps\n",
            model_name(m), c->init_from, m->layers, m->width, m->heads, m->context, c->batch,
            (double)m->n_weights / 1e6, threads, c->reps);
    else if (m->kind == MODEL_GPT || m->kind == MODEL_LLAMA)
        term_printf(f,
                    "remat bench: %s, %d layers, width %d, %d heads, context %d, batch %d "
                    "(%.2fM parameters),\n  %s attention, %d threads, %d reps\n",
                    model_name(m), m->layers, m->width, m->heads, m->context, c->batch,
                    (double)m->n_weights / 1e6, m->attn_ops ? "composed" : "fused", threads,
                    c->reps);
    else
        term_printf(
            f,
            "remat bench: MLP, %d layers, width %d, batch %d (%.2fM parameters), %d threads, "
            "%d reps\n",
            m->layers, m->width, c->batch, (double)m->n_weights / 1e6, threads, c->reps);
}

/* Step bytes minus the parameter gradients live at the step's allocator
 * peak (docs/autocast.md "Memory"). */
static size_t activation_bytes(const result *r) { return r->peak - r->baseline - r->grad_at_peak; }

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
    printf("\nplans (recomputed: block forwards run again in the backward):\n");
    if (step)
        printf("  budget= bounds the whole step's allocator peak, parameters and gradients\n"
               "  included: feasible from %.2f MiB, %.2f MiB without checkpointing\n",
               (double)pl->min_budget / M, (double)pl->store_all / M);
    if (blocks)
        printf("  blocks-budget= bounds what the %d blocks add: feasible from %.2f MiB,\n"
               "  %.2f MiB without checkpointing\n",
               pl->prof ? pl->prof->n_stages : 0, (double)pl->blocks_min_budget / M,
               (double)pl->blocks_store_all / M);
    for (int i = 0; i < c->n_strategies; i++) {
        const strategy *s = &c->strategies[i];
        if (s->kind != STRAT_BUDGET || !s->plan) continue;
        const remat_plan *p = s->plan;
        /* the structure on a line of its own, cut at 100 columns ("..."; the
         * JSON has it whole) */
        char st[100 - (int)sizeof "    structure: " + 2], pre[48] = "";
        if (s->split > 0) /* stage numbers: the first blocks whole, then two per block */
            snprintf(pre, sizeof pre, "(the last %d block%s in halves) ", s->split,
                     s->split == 1 ? "" : "s");
        remat_plan_structure(p, st, sizeof st - strlen(pre), NULL); /* "" on failure */
        /* budget=: the step's peak; blocks-budget=: what the step adds
         * (the blocks' share plus the head's, measured as one) */
        double measured = s->blocks_only ? (double)(r[i].peak - r[i].baseline) : (double)r[i].peak;
        printf("  %-18s budget %7.2f MiB, %s %6.2f predicted, %6.2f measured; %" PRId64
               " recomputed\n    structure: %s%s\n",
               s->name, (double)p->budget_bytes / M, s->blocks_only ? "blocks" : "peak  ",
               (double)p->peak_bytes / M, measured / M, p->n_recomputed, pre, st);
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
            printf("\nselective policies (one step, all blocks; cached = kept from the forward\n"
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
    /* the name column: 14 wide, wider for long names (selective=names:...):
     * 100 columns in all up to 21 (LD_PRELOAD's heap+ column adds 7) */
    int w = 14;
    for (int i = 0; i < c->n_strategies; i++) {
        int l = (int)strlen(c->strategies[i].name);
        if (l > w) w = l;
    }
    bool heap = c->n_strategies > 0 && r[0].has_heap;
    printf("%-*s %7s %12s %6s %6s %6s %7s %6s %6s%s  %s\n", w, "strategy", "step ms", "IQR ms",
           "time", "peak", "step", "memory", "act", "RSS+", heap ? "  heap+" : "", "gradients");
    bool any_noise = false;
    for (int i = 0; i < c->n_strategies; i++) {
        char pk[32], st[32], act[32] = "?", rss[32], tm[32], mem[32], hp[48] = "";
        mib(pk, sizeof pk, (double)r[i].peak);
        mib(st, sizeof st, (double)(r[i].peak - r[i].baseline));
        if (r[i].has_act) mib(act, sizeof act, (double)activation_bytes(&r[i]));
        mib(rss, sizeof rss, (double)r[i].rss_growth);
        if (heap) {
            char v[32];
            mib(v, sizeof v, (double)r[i].heap_growth);
            snprintf(hp, sizeof hp, " %6s", v);
        }
        /* "~": the interquartile ranges overlap, the ratio is within the noise */
        snprintf(tm, sizeof tm, "%s%.2fx", i != ref && r[i].noise ? "~" : "", r[i].overhead);
        any_noise |= i != ref && r[i].noise;
        char range[48];
        snprintf(range, sizeof range, "%.1f-%.1f", r[i].ms_q1, r[i].ms_q3);
        double base = (double)(r[ref].peak - r[ref].baseline);
        snprintf(mem, sizeof mem, "%.2fx",
                 base > 0 ? (double)(r[i].peak - r[i].baseline) / base : 0);
        char gr[64];
        if (i == ref && c->strategies[i].kind == STRAT_NONE) snprintf(gr, sizeof gr, "reference");
        else if (r[i].grads_equal) snprintf(gr, sizeof gr, "bitwise equal");
        else if (strategy_plan_lossy(&c->strategies[i]))
            snprintf(gr, sizeof gr, "lossy, bf16 keeps (max |diff| %.3g)", r[i].max_diff);
        else snprintf(gr, sizeof gr, "DIFFER (max |diff| %.3g)", r[i].max_diff);
        printf("%-*s %7.1f %12s %6s %6s %6s %7s %6s %6s%s  %s\n", w, c->strategies[i].name,
               r[i].step_ms, range, tm, pk, st, mem, act, rss, hp, gr);
    }
    print_plans(c, r, pl);
    print_selective(c, r);
    printf("\n"
           "  step ms   median of the timed repetitions; IQR: their middle half (quartiles)\n"
           "  time      step time / step time of %s (the recompute overhead)%s\n"
           "  peak      MiB: remat allocator peak during the step (parameters included)\n"
           "  step      MiB the step adds over the memory held before it (activations, grads)\n"
           "  memory    step / step of %s\n"
           "  act       activation MiB: step minus the parameter gradients live at the step's\n"
           "            peak (f32 master weights' gradients are results, not activations)\n"
           "  RSS+      MiB the process's resident memory grew by during the step\n",
           c->strategies[ref].name,
           any_noise ? ";\n            ~ within noise: the two IQRs overlap (more --reps may "
                       "separate them)"
                     : "",
           c->strategies[ref].name);
    if (heap)
        printf("  heap+     MiB: peak of the C heap (every malloc: remat, oneDNN, libc) over the\n"
               "            step minus its bytes at the start (bench/preload/heap_peak.c)\n");
}

static void print_csv(const config *c, result *r) {
    printf("strategy,step_ms,step_ms_min,step_ms_max,overhead,peak_alloc_bytes,baseline_bytes,step_"
           "alloc_bytes,"
           "rss_growth_bytes,recomputed_blocks,grads_bitwise_equal,grads_max_abs_diff,"
           "budget_bytes,plan_peak_bytes,activation_bytes,heap_growth_bytes\n");
    for (int i = 0; i < c->n_strategies; i++) {
        const remat_plan *p = c->strategies[i].plan;
        printf("%s,%.4f,%.4f,%.4f,%.4f,%zu,%zu,%zu,%zu,%" PRId64 ",%s,%.9g,", c->strategies[i].name,
               r[i].step_ms, r[i].ms_min, r[i].ms_max, r[i].overhead, r[i].peak, r[i].baseline,
               r[i].peak - r[i].baseline, r[i].rss_growth, r[i].recomputed,
               r[i].grads_equal ? "true" : "false", r[i].max_diff);
        if (p) printf("%zu,%zu,", p->budget_bytes, p->peak_bytes);
        else printf(",,");
        if (r[i].has_act) printf("%zu,", activation_bytes(&r[i]));
        else printf(",");
        if (r[i].has_heap) printf("%zu\n", r[i].heap_growth);
        else printf("\n");
    }
}

/* One strategy's object in bench --json's "strategies". */
static void json_result(json *j, const config *c, int i, const result *r, bool is_ref,
                        const prof_floors *fl) {
    const strategy *s = &c->strategies[i];
    json_object(j, NULL);
    json_str(j, "strategy", s->name);
    json_fixed(j, "step_ms", r->step_ms, 4);
    json_fixed(j, "overhead", r->overhead, 4);
    json_uint(j, "peak_alloc_bytes", r->peak);
    json_uint(j, "baseline_bytes", r->baseline);
    json_uint(j, "step_alloc_bytes", r->peak - r->baseline);
    if (r->has_act) {
        json_uint(j, "grad_bytes_at_peak", r->grad_at_peak);
        json_uint(j, "activation_bytes", activation_bytes(r));
    }
    json_uint(j, "rss_growth_bytes", r->rss_growth);
    json_int(j, "recomputed_blocks", r->recomputed);
    json_num(j, "loss", r->loss);
    json_bool(j, "grads_bitwise_equal", r->grads_equal);
    json_num(j, "grads_max_abs_diff", r->max_diff);
    json_fixed(j, "step_ms_min", r->ms_min, 4);
    json_fixed(j, "step_ms_q1", r->ms_q1, 4);
    json_fixed(j, "step_ms_q3", r->ms_q3, 4);
    json_fixed(j, "step_ms_max", r->ms_max, 4);
    json_bool(j, "time_within_noise", !is_ref && r->noise);
    json_array(j, "step_ms_all");
    for (int k = 0; k < c->reps; k++) json_fixed(j, NULL, r->times[k] * 1e3, 4);
    json_end(j);
    /* CPU time of the process over each step (every thread): on a shared machine the
     * ratio of these is the steadier measure of recomputation's cost */
    json_fixed(j, "step_cpu_ms", 1e3 * util_median(r->cpu_times, c->reps), 4);
    json_array(j, "step_cpu_ms_all");
    for (int k = 0; k < c->reps; k++) json_fixed(j, NULL, r->cpu_times[k] * 1e3, 4);
    json_end(j);
    if (r->comm_n) { /* under mpirun */
        double cm = r->comm_s / r->comm_n, ex = r->exposed_s / r->comm_n;
        json_fixed(j, "comm_ms", 1e3 * cm, 4);
        json_fixed(j, "comm_exposed_ms", 1e3 * ex, 4);
        json_fixed(j, "comm_hidden_fraction", cm > 0 ? 1 - (ex < cm ? ex / cm : 1) : 0, 4);
    }
    if (r->has_heap) json_uint(j, "heap_growth_bytes", r->heap_growth);
    else json_null(j, "heap_growth_bytes");
    if (s->kind == STRAT_SELECTIVE) {
        json_str(j, "sac_policy", s->policy);
        json_int(j, "sac_ops_forward", r->sac.ops_forward);
        json_int(j, "sac_ops_cached", r->sac.ops_cached);
        json_int(j, "sac_bytes_cached", r->sac.bytes_cached);
        json_int(j, "sac_ops_recomputed", r->sac.ops_recomputed);
        json_int(j, "sac_ops_from_cache", r->sac.ops_from_cache);
    }
    const remat_plan *p = s->plan;
    if (p) {
        char st[1024];
        remat_plan_structure(p, st, sizeof st, NULL); /* "" on failure */
        json_uint(j, "budget_bytes", p->budget_bytes);
        json_uint(j, "plan_peak_bytes", p->peak_bytes);
        json_fixed(j, "plan_step_ms", p->time * 1e3, 4);
        json_int(j, "plan_recomputed_blocks", p->n_recomputed);
        json_int(j, "plan_split", s->split); /* the last blocks run in halves */
        json_str(j, "plan_structure", st);
    }
    if (r->prof.t) prof_json(j, "profile", &r->prof, r->step_ms, fl);
    json_end(j);
}

static void print_json(const config *c, const model *m, int threads, result *r,
                       const prof_floors *fl, const planner_info *pl, int world, int refi) {
    util_str out = {0};
    json j;
    json_start(&j, &out);
    json_object(&j, NULL);
    json_str(&j, "command", "bench");
    model_json(&j, m, c->batch);
    json_str(&j, "attention", m->attn_ops ? "ops" : "fused");
    json_int(&j, "threads", threads);
    json_int(&j, "reps", c->reps);
    json_int(&j, "world_size", world);
    json_array(&j, "strategies");
    for (int i = 0; i < c->n_strategies; i++) json_result(&j, c, i, &r[i], i == refi, fl);
    json_end(&j);
    if (pl->prof) {
        json_object(&j, "planner");
        json_uint(&j, "min_budget_bytes", pl->min_budget);
        json_uint(&j, "store_all_bytes", pl->store_all);
        json_uint(&j, "blocks_min_budget_bytes", pl->blocks_min_budget);
        json_uint(&j, "blocks_store_all_bytes", pl->blocks_store_all);
        json_uint(&j, "step_fixed_bytes", pl->step.fixed_bytes);
        json_fixed(&j, "profile_s", pl->profile_s, 3);
        json_end(&j);
    }
    if (c->profile) prof_json_floors(&j, "profile_floors", fl);
    json_uint(&j, "peak_rss_bytes", util_peak_rss_bytes());
    json_end(&j);
    if (!out.oom) puts(out.s);
    util_str_free(&out);
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
 * planner's minimum to the step's store-all peak, each planned per op
 * (budget=) and by whole blocks (budget=...:blocks-only). */
static void sweep_budgets(config *c, const planner_info *pl) {
    for (int k = 0; k < c->sweep; k++) {
        double f = (double)k / (double)(c->sweep - 1);
        strategy s;
        uint64_t bytes =
            (uint64_t)((double)pl->min_budget + f * (double)(pl->store_all - pl->min_budget));
        strategy_budget_bytes(&s, bytes, false);
        add_strategy(c, &s);
        /* the block-level planner at the same budget: its curve beside the op-level one */
        s.block_level = true;
        strategy_name(&s);
        add_strategy(c, &s);
    }
}

/* Whether some strategy plans per op over half blocks too (strategy_wants_halves: a
 * budget= below the whole blocks' smallest plan, or :halves; or the sweep, whose op-level
 * curve reaches below it) and the model has them. */
static bool wants_halves(const config *c, const model *m, const planner_info *pl) {
    bool any = c->sweep > 0;
    for (int i = 0; i < c->n_strategies; i++)
        any = any || strategy_wants_halves(&c->strategies[i], pl->prof, &pl->step);
    return any && model_has_halves(m);
}

/* Profiles the chain once and plans every budget strategy. */
static int plan_budgets(config *c, model *m, const batch *b, planner_info *pl, bool log) {
    bool need = c->sweep > 0;
    for (int i = 0; i < c->n_strategies; i++) need = need || c->strategies[i].kind == STRAT_BUDGET;
    if (!need) return REMAT_OK;
    if (log)
        term_printf(stderr, "  profiling the %d block%s for the planner...\n", m->layers,
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
        term_printf(stderr, "profile of the %d block%s (%.2f s):\n", m->layers,
                    m->layers == 1 ? "" : "s", pl->profile_s);
        term_buf tb;
        remat_profile_print(pl->prof, term_buf_open(&tb, stderr));
        term_buf_close(&tb, stderr);
    }
    if (c->sweep) sweep_budgets(c, pl);
    bool want_ops = false;
    for (int i = 0; i < c->n_strategies; i++)
        want_ops = want_ops || strategy_wants_ops(&c->strategies[i]);
    if (want_ops) {
        step_malloc_mode(false);
        rc = model_profile_ops(m, b, &pl->ops);
        step_malloc_mode(true);
        if (!rc) rc = remat_profile_apply_ops(pl->prof, pl->ops);
        if (!rc && wants_halves(c, m, pl)) {
            step_malloc_mode(false);
            rc = model_profile_halves(m, b, false, &pl->hprof, &pl->hops);
            step_malloc_mode(true);
            if (!rc) strategy_calibrate_halves(pl->hprof, pl->hops, pl->prof, pl->ops);
        }
        if (rc) return rc;
        if (c->verbose) {
            term_buf tb;
            remat_op_profile_print(pl->ops, term_buf_open(&tb, stderr));
            term_buf_close(&tb, stderr);
        }
    }
    const remat_plan_options po = {.offload = c->plan_offload, .lossy = c->plan_lossy};
    for (int i = 0; i < c->n_strategies; i++) {
        strategy *s = &c->strategies[i];
        if (s->kind != STRAT_BUDGET) continue;
        const strategy_halves hv = {pl->hprof, pl->hops};
        rc = strategy_plan(s, pl->prof, &pl->step, pl->ops, &po, &hv);
        if (rc && c->default_strategies && s->budget < pl->min_budget) {
            /* the default list's budget=50% does not fit every model: leave it out */
            if (log)
                term_printf(stderr,
                            "  (%s left out: below the planner's minimum for this model, "
                            "%.2f MiB)\n",
                            s->name, (double)pl->min_budget / 1048576.0);
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
            term_printf(stderr, "  %s\n", warn);
        if (c->verbose) {
            term_printf(stderr, "%s:\n", s->name);
            term_buf tb;
            remat_plan_print(s->plan, term_buf_open(&tb, stderr));
            term_buf_close(&tb, stderr);
        }
    }
    return REMAT_OK;
}

static pareto_kind kind_of(const strategy *s) {
    switch (s->kind) {
    case STRAT_NONE: return PARETO_NONE;
    case STRAT_SEQUENTIAL: return PARETO_UNIFORM;
    case STRAT_BUDGET: return s->block_level ? PARETO_BLOCKS : PARETO_PLANNED;
    default: return PARETO_OTHER;
    }
}

static bool write_pareto(const char *file, const config *c, const model *m, const result *r,
                         const planner_info *pl) {
    const int n = c->n_strategies;
    pareto_point *pts = calloc((size_t)n, sizeof *pts);
    if (!pts) return false;
    int differ = 0, lossy = 0;
    for (int i = 0; i < n; i++) {
        const strategy *s = &c->strategies[i];
        pts[i].label = s->name;
        pts[i].kind = kind_of(s);
        pts[i].segments = s->segments;
        pts[i].budget_bytes = s->plan ? (double)s->plan->budget_bytes : 0;
        pts[i].step_ms = r[i].step_ms;
        pts[i].peak_bytes = (double)r[i].peak;
        pts[i].baseline_bytes = (double)r[i].baseline;
        differ += !r[i].grads_equal && !strategy_plan_lossy(s);
        lossy += strategy_plan_lossy(s);
    }
    const char *grads = differ  ? "SOME GRADIENTS DIFFER from none"
                        : lossy ? "gradients bitwise equal to none but for bf16 keeps (lossy)"
                                : "every gradient bitwise equal to none";
    char title[256], sub[512];
    snprintf(title, sizeof title, "remat: %s, %d layers, width %d: step time vs memory",
             model_name(m), m->layers, m->width);
    if (pl->prof)
        snprintf(sub, sizeof sub,
                 "planner budgets bound the whole step's peak: feasible from %.2f MiB, %.2f MiB "
                 "without checkpointing; %s",
                 (double)pl->min_budget / 1048576.0, (double)pl->store_all / 1048576.0, grads);
    else snprintf(sub, sizeof sub, "%s", grads);
    bool ok = svg_pareto(file, title, sub, n, pts);
    free(pts);
    return ok;
}

/* One bench run: what its phases share. */
typedef struct bench_run {
    config *c;
    model m;
    task tk;
    batch b; /* the one batch every step runs on */
    planner_info pl;
    float **ref;           /* the reference gradients (strategy none) */
    remat_tensor **params; /* the model's parameters (grad_meter) */
    double ref_loss;
    result *r; /* one per strategy */
    int n;     /* strategies */
    hf_dir hf; /* --init-from's directory */
    int refi;  /* the reference strategy (none) */
    int threads;
    prog_dist pd;
    bool log;       /* progress on stderr */
    prof_floors fl; /* --profile: the device's measured rates */
} bench_run;

/* Model, task, batch and data parallelism. */
static int bench_setup(bench_run *br, bool is_default) {
    config *c = br->c;
    int rc;
    if (c->init_from) { /* a Hugging Face model: its shape, then the sweep over its layers */
        if ((rc = hf_dir_open(&br->hf, c->init_from, "--init-from"))) return rc;
        if ((rc = hf_apply_config(c, &br->hf))) return rc;
    }
    if (c->sweep) sweep_uniform(c);
    if ((rc = task_init(&br->tk, c))) return rc;
    br->tk.row0 = (int64_t)br->pd.rank * c->batch;
    if ((rc = model_init(&br->m, c, c->seed))) return rc;
    if (c->init_from) {
        /* dropout off: every strategy's step draws no masks, so the gradients compare */
        model_set_training(&br->m, false);
        if ((rc = hf_check_flags(c, br->m.lib, true))) return rc;
    }
    if ((rc = prog_dist_attach(&br->pd, &br->m, c->bucket_mib, 1))) return rc;
    if ((rc = task_batch(&br->tk, 0, &br->b))) return rc;
    if (is_default && br->log)
        term_printf(stderr,
                    "remat: no command given, so here is `remat bench` on a small GPT: the same\n"
                    "training step under each checkpointing strategy (see `remat --help`).\n");
    if (br->log) print_header(stderr, c, &br->m, br->threads);
    return REMAT_OK;
}

/* Warm-up step with the reference gradients (RSS tracking from here to the
 * end of the memory measurements), then the planner's profile and plans
 * (budget strategies, the sweep), then room for the results. */
static int bench_plan(bench_run *br) {
    config *c = br->c;
    step_malloc_mode(true);
    strategy none;
    strategy_parse("none", false, &none, NULL, 0);
    if (br->log) fprintf(stderr, "  warm-up step (reference gradients)...\n");
    model_zero_grad(&br->m);
    int rc = step_run(&br->m, &none, &br->b, NULL, NULL, NULL, &br->ref_loss);
    if (rc) return rc;
    br->ref = grab_grads(&br->m);
    if (!br->ref) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    br->params = calloc((size_t)br->m.n_params + 1, sizeof *br->params);
    if (!br->params) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; i < br->m.n_params; i++) br->params[i] = br->m.params[i].t;
    if ((rc = plan_budgets(c, &br->m, &br->b, &br->pl, br->log))) return rc;
    br->n = c->n_strategies > 0 ? c->n_strategies : 0;
    br->r = calloc((size_t)br->n + 1, sizeof *br->r);
    if (!br->r) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; i < br->n; i++) {
        br->r[i].times = calloc((size_t)c->reps, sizeof(double));
        br->r[i].cpu_times = calloc((size_t)c->reps, sizeof(double));
        if (!br->r[i].times || !br->r[i].cpu_times)
            return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    }
    return REMAT_OK;
}

/* One measured step per strategy: peak, RSS growth, trace, gradients. */
static int bench_measure_memory(bench_run *br) {
    config *c = br->c;
    for (int i = 0; i < br->n; i++) {
        result *r = &br->r[i];
        if (br->log) fprintf(stderr, "  measuring memory: %s\n", c->strategies[i].name);
        model_zero_grad(&br->m);
        /* free heap memory left resident by earlier work (steps, the planner's
         * profile) would be reused without a page fault and hide part of this
         * step from RSS+ (small blocks sit below live ones, where glibc's
         * trimming of the heap top does not reach): hand it back first */
        step_malloc_mode(true);
        remat_alloc_reset_peak(c->device);
        r->baseline = util_current_bytes(c->device);
        grad_meter gm;
        grad_meter_begin(&gm, c->device, br->params, br->m.n_params);
        trace_begin(&r->tr, true);
        c->strategies[i].sac_stats = &r->sac; /* selective: what its regions cached */
        int rc = step_run(&br->m, &c->strategies[i], &br->b, NULL, &r->tr, NULL, &r->loss);
        c->strategies[i].sac_stats = NULL;
        trace_end(&r->tr);
        grad_meter_end(&gm);
        grad_meter_free(&gm);
        if (rc) return rc;
        r->peak = util_peak_bytes(c->device);
        /* the meter's peak is the allocator's unless something allocated
         * from another thread (then the figure is left out) */
        r->has_act = !gm.oom && gm.peak_bytes == r->peak && gm.start_bytes == r->baseline;
        r->grad_at_peak = gm.grad_at_peak;
        r->rss_growth = r->tr.peak_rss > r->tr.start_rss ? r->tr.peak_rss - r->tr.start_rss : 0;
        r->has_heap = r->tr.heap;
        r->heap_growth = r->tr.heap_growth;
        r->recomputed = r->tr.n_recomputed_blocks;
        /* bitwise (a NaN equals its own bits; -0 differs from +0): the runs promise the
         * same bytes, not only equal values */
        /* NOLINTNEXTLINE(bugprone-suspicious-memory-comparison) */
        r->loss_equal = memcmp(&r->loss, &br->ref_loss, sizeof br->ref_loss) == 0;
        r->grads_equal = compare_grads(&br->m, br->ref, &r->max_diff) && r->loss_equal;
    }
    return REMAT_OK;
}

/* Timed, interleaved repetitions, with malloc in its fast setting. */
static int bench_time_steps(bench_run *br) {
    config *c = br->c;
    step_malloc_mode(false);
    const bool tty = util_isatty(stderr);
    for (int rep = 0; rep < c->reps; rep++) {
        if (br->log)
            fprintf(stderr, "%s  timing: repetition %d/%d%s", tty ? "\r" : "", rep + 1, c->reps,
                    tty ? "" : "\n");
        for (int k = 0; k < br->n; k++) {
            int i = (rep + k) % br->n;
            result *r = &br->r[i];
            double loss;
            model_zero_grad(&br->m);
            double t0 = util_now(), c0 = util_cpu_now();
            int rc = step_run(&br->m, &c->strategies[i], &br->b, NULL, NULL, NULL, &loss);
            r->times[rep] = util_now() - t0;
            r->cpu_times[rep] = util_cpu_now() - c0;
            if (rc) return rc;
            prog_dist d1 = br->pd; /* this step's communication figures */
            d1.comm_s = d1.exposed_s = d1.backward_s = 0;
            d1.n_steps = 0;
            prog_dist_after_step(&d1);
            r->comm_s += d1.comm_s;
            r->exposed_s += d1.exposed_s;
            r->comm_n += d1.n_steps;
        }
    }
    if (br->log && tty) fprintf(stderr, "\n");
    model_zero_grad(&br->m);
    return REMAT_OK;
}

/* Medians, spreads, ratios to the reference; memory as the max over ranks. */
static int bench_summarize(bench_run *br) {
    config *c = br->c;
    result *r = br->r;
    const int n = br->n;
    br->refi = 0;
    for (int i = 0; i < n; i++)
        if (c->strategies[i].kind == STRAT_NONE) {
            br->refi = i;
            break;
        }
    const int refi = br->refi;
    for (int i = 0; i < n; i++) r[i].step_ms = 1e3 * util_median(r[i].times, c->reps);
    for (int i = 0; br->pd.pg && i < n; i++) { /* memory: the max over ranks */
        double pk[2] = {(double)r[i].peak, (double)r[i].rss_growth};
        int rc = prog_dist_max(&br->pd, pk, 2);
        if (rc) return rc;
        if ((size_t)pk[0] != r[i].peak) r[i].has_act = false; /* another rank's peak */
        r[i].peak = (size_t)pk[0];
        r[i].rss_growth = (size_t)pk[1];
    }
    for (int i = 0; i < n; i++)
        r[i].overhead = r[refi].step_ms > 0 ? r[i].step_ms / r[refi].step_ms : 0;
    for (int i = 0; i < n; i++) spread(r[i].times, c->reps, &r[i]);
    for (int i = 0; i < n; i++)
        r[i].noise = r[i].ms_q1 <= r[refi].ms_q3 && r[refi].ms_q1 <= r[i].ms_q3;
    return REMAT_OK;
}

/* --profile: the device's floors, then N steps per strategy with every kernel timed
 * (after the timed repetitions: the timer's events never touch them). */
static int bench_profile(bench_run *br) {
    config *c = br->c;
    if (!c->profile) return REMAT_OK;
    if (br->log) fprintf(stderr, "  profiling: floors (copy, GEMM)\n");
    step_malloc_mode(false);
    int rc = prof_measure_floors(c->device, c->autocast, &br->fl);
    for (int i = 0; !rc && i < br->n; i++) {
        if (br->log)
            fprintf(stderr, "  profiling: %s, %d step%s\n", c->strategies[i].name, c->profile,
                    c->profile == 1 ? "" : "s");
        rc = prof_run(&br->m, &c->strategies[i], &br->b, c->profile, &br->r[i].prof);
    }
    return rc;
}

/* The table, CSV or JSON (rank 0 reports for the job), and the ranks'
 * all-reduce figures under mpirun. */
static void bench_report(const bench_run *br) {
    const config *c = br->c;
    const result *r = br->r;
    if (br->pd.rank > 0) return;
    if (c->json)
        print_json(c, &br->m, br->threads, br->r, &br->fl, &br->pl, br->pd.world, br->refi);
    else if (c->csv) print_csv(c, br->r);
    else print_table(c, &br->m, br->threads, br->r, br->refi, &br->pl);
    for (int i = 0; c->profile && !c->json && !c->csv && i < br->n; i++)
        prof_print(stdout, c->strategies[i].name, &r[i].prof, r[i].step_ms, &br->fl, 40);
    if (br->pd.pg && !c->json && !c->csv) {
        printf("\n%d ranks (mpirun), batch %d per rank; memory: the max over ranks\n", br->pd.world,
               c->batch);
        printf("strategy                all-reduce ms   after backward ms   hidden\n");
        for (int i = 0; i < br->n; i++) {
            if (!r[i].comm_n) continue;
            double cm = 1e3 * r[i].comm_s / r[i].comm_n, ex = 1e3 * r[i].exposed_s / r[i].comm_n;
            printf("%-22s %14.2f %19.2f %7.0f%%\n", c->strategies[i].name, cm, ex,
                   cm > 0 ? 100 * (1 - (ex < cm ? ex / cm : 1)) : 0);
        }
    }
}

/* The SVG plots and traces asked for (--out DIR, --svg, --svg-pareto,
 * --trace; pareto.svg into DIR or ./out when the planner ran), and the
 * default run's closing hint. */
/* Where bench_write_plots says what it wrote (a blank line before the first). */
typedef struct wrote_log {
    FILE *msg;
    bool header;
} wrote_log;

/* "wrote PATH" when ok, else REMAT_EIO "cannot write PATH". */
static int wrote(wrote_log *w, bool ok, const char *path) {
    if (!ok) return remat_set_error(REMAT_EIO, "cannot write %s", path);
    if (!w->header) fprintf(w->msg, "\n");
    w->header = true;
    fprintf(w->msg, "wrote %s\n", path);
    return REMAT_OK;
}

/* --out DIR's files: tradeoff.svg (title: the plot's), timeline.svg, trace.json. */
static int write_out_dir(wrote_log *w, const bench_run *br, char *title, size_t n_title,
                         const char *ac, const trace **ts, const char **labels,
                         const tradeoff_point *pts) {
    const config *c = br->c;
    const model *mm = &br->m;
    char path[4096];
    int rc = REMAT_OK;
    if (join(path, sizeof path, c->out_dir, "tradeoff.svg"))
        rc = wrote(w, svg_tradeoff(path, title, br->n, pts), path);
    if (!rc && join(path, sizeof path, c->out_dir, "timeline.svg")) {
        snprintf(title, n_title, "remat: memory during one training step, %s, %d layers%s",
                 model_name(mm), mm->layers, ac);
        rc = wrote(w, svg_timeline(path, title, br->n, ts, labels), path);
    }
    if (!rc && join(path, sizeof path, c->out_dir, "trace.json"))
        rc = wrote(w, trace_write_chrome(path, br->n, ts, labels), path);
    return rc;
}

static int bench_write_plots(bench_run *br, bool is_default) {
    config *c = br->c;
    const model *mm = &br->m;
    result *r = br->r;
    const int n = br->n;
    int rc = REMAT_OK;
    const trace **ts = calloc((size_t)n + 1, sizeof *ts);
    const char **labels = calloc((size_t)n + 1, sizeof *labels);
    tradeoff_point *pts = calloc((size_t)n + 1, sizeof *pts);
    if (!ts || !labels || !pts) {
        free(ts);
        free(labels);
        free(pts);
        return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    }
    for (int i = 0; i < n; i++) {
        ts[i] = &r[i].tr;
        labels[i] = c->strategies[i].name;
        pts[i] = (tradeoff_point){c->strategies[i].name, r[i].step_ms, (double)r[i].peak,
                                  (double)r[i].baseline};
    }
    char title[256];
    /* the dtype the activations are kept in is part of what the bytes mean */
    const char *ac = c->autocast ? ", bf16 autocast" : "";
    snprintf(title, sizeof title, "remat: %s, %d layers, width %d%s: memory vs time per strategy",
             model_name(mm), mm->layers, mm->width, ac);
    char path[4096];
    wrote_log w = {(c->json || c->csv) ? stderr : stdout, false};
    const char *pareto_dir = c->out_dir ? c->out_dir : (c->sweep ? "out" : NULL);
    if (!br->pl.prof) pareto_dir = NULL;
    if (c->out_dir && !util_mkdir_p(c->out_dir))
        rc = remat_set_error(REMAT_EIO, "--out %s: cannot create the directory", c->out_dir);
    else if (c->out_dir) rc = write_out_dir(&w, br, title, sizeof title, ac, ts, labels, pts);
    if (!rc && pareto_dir && !util_mkdir_p(pareto_dir))
        rc = remat_set_error(REMAT_EIO, "cannot create the directory %s", pareto_dir);
    else if (!rc && pareto_dir && join(path, sizeof path, pareto_dir, "pareto.svg"))
        rc = wrote(&w, write_pareto(path, c, mm, r, &br->pl), path);
    if (!rc && c->svg_pareto)
        rc = wrote(&w, write_pareto(c->svg_pareto, c, mm, r, &br->pl), c->svg_pareto);
    if (!rc && c->svg) rc = wrote(&w, svg_tradeoff(c->svg, title, n, pts), c->svg);
    if (!rc && c->trace) rc = wrote(&w, trace_write_chrome(c->trace, n, ts, labels), c->trace);
    if (!rc && is_default && !c->json && !c->csv && br->pd.rank == 0)
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
    return rc;
}

static void bench_free(bench_run *br) {
    free_grads(br->ref, br->m.n_params);
    free(br->params);
    for (int i = 0; br->r && i < br->n; i++) {
        free(br->r[i].times);
        free(br->r[i].cpu_times);
        trace_free(&br->r[i].tr);
        prof_result_free(&br->r[i].prof);
    }
    free(br->r);
    for (int i = 0; i < br->c->n_strategies; i++) strategy_free(&br->c->strategies[i]);
    remat_profile_free(br->pl.prof);
    remat_op_profile_free(br->pl.ops);
    remat_profile_free(br->pl.hprof);
    remat_op_profile_free(br->pl.hops);
    batch_free(&br->b);
    model_free(&br->m);
    task_free(&br->tk);
    hf_dir_free(&br->hf);
    br->c->hf = NULL;
}

int cmd_bench(config *c, bool is_default) {
    trace_device(c->device);
    bench_run br;
    memset(&br, 0, sizeof br);
    br.c = c;
    br.log = !c->quiet;
    br.threads = step_setup_process(c->threads);
    int rc = prog_dist_init(&br.pd, c); /* under mpirun: rank 0 prints */
    /* under mpirun: the same configuration on every rank, before anything collective */
    if (!rc) rc = prog_dist_agree(&br.pd, c, true);
    if (!rc) rc = outputs_check(c, CMD_BENCH); /* before the measuring (rank 0's files) */
    if (!rc) rc = bench_setup(&br, is_default);
    if (!rc) rc = bench_plan(&br);
    if (!rc) rc = bench_measure_memory(&br);
    if (!rc) rc = bench_time_steps(&br);
    if (!rc) rc = bench_summarize(&br);
    if (!rc) rc = bench_profile(&br);
    if (!rc) bench_report(&br);
    if (!rc) rc = bench_write_plots(&br, is_default);
    if (rc) {
        if (!br.pd.shared_error || br.pd.rank == 0) /* every rank's: rank 0 says it once */
            term_printf(stderr, "\nremat bench: %s\n", remat_last_error());
    } else {
        for (int i = 0; i < br.n; i++)
            if (!br.r[i].grads_equal && !strategy_plan_lossy(&c->strategies[i])) {
                fprintf(stderr,
                        "remat bench: gradients of %s differ from the un-checkpointed "
                        "ones\n",
                        c->strategies[i].name);
                rc = REMAT_EDETERMINISM;
                break;
            }
    }
    bench_free(&br);
    if (prog_dist_end(&br.pd, rc ? 1 : 0)) { /* with rc under mpirun: ends every rank */
        if (!rc) term_printf(stderr, "remat bench: %s\n", remat_last_error()); /* else printed */
        return 1;
    }
    return rc ? 1 : 0;
}
