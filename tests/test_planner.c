/* tests/test_planner.c — the budget planner: the dynamic program against an
 * exhaustive search, Revolve's closed form against its recursion, the
 * printers, and executing plans (gradients bitwise equal to running without
 * checkpoints, peak within the budget). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/planner.h"
#include "support/rt.h"

/* REMAT_TEST_DEVICE=cuda runs these tests on the GPU (tests/support/rt.h) */
RT_ON_TEST_DEVICE

/* ---- a private deterministic RNG ------------------------------------------------------ */
static uint64_t g_rng;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint64_t)(hi - lo + 1)); }

/* Six equal stages (forward 1, backward 2, 10 bytes in and out, 20 saved, forward peaks 30
 * with saving and 10 without): their minimal-memory plan nests checkpoints. */
static remat_profile *six_equal_stages(void) {
    remat_profile *p = NULL;
    RT_OK(remat_profile_create(&p, 6));
    for (int k = 0; k < 6; k++)
        p->stages[k] = (remat_stage_profile){.fwd_time = 1,
                                             .bwd_time = 2,
                                             .input_bytes = 10,
                                             .output_bytes = 10,
                                             .saved_bytes = 20,
                                             .fwd_peak = 30,
                                             .fwd_peak_nosave = 10};
    return p;
}

/* A random chain with small integer sizes (bytes) and times: every sum is
 * exact in double, so the DP and the search can be compared with ==. */
static remat_profile *random_chain(int L) {
    remat_profile *p = NULL;
    RT_OK(remat_profile_create(&p, L));
    size_t in = (size_t)rnd_in(1, 6);
    for (int k = 0; k < L; k++) {
        remat_stage_profile *s = &p->stages[k];
        s->input_bytes = in;
        /* wide ranges so that every constraint of the model binds somewhere */
        s->output_bytes = (size_t)rnd_in(1, 8);
        s->saved_bytes = (size_t)rnd_in(0, 8);
        s->fwd_peak = s->output_bytes + s->saved_bytes + (size_t)rnd_in(0, 6);
        s->fwd_peak_nosave = s->output_bytes + (size_t)rnd_in(0, 9);
        s->bwd_peak = (size_t)rnd_in(0, 8);
        s->fwd_time = rnd_in(1, 10);
        s->bwd_time = rnd_in(1, 20);
        /* what a recomputation skips when the stage is its last (early stop): none of the
         * forward for about a third of the stages, part or all of it for the others */
        s->recompute_free_time = rnd_in(0, 2) ? rnd_in(0, (int)s->fwd_time) : 0;
        in = s->output_bytes;
    }
    return p;
}

/* ---- exhaustive search ----------------------------------------------------------------------
 * Every plan the grammar allows for stages [s..t]: "store s, then a plan of
 * [s+1..t]" or "checkpoint [s..j-1] with a plan of it as children, then a
 * plan of [j..t]"; a single stage is stored. Plans are node lists with
 * parents relative to the list (-1 = enclosing). */
#define MAXL 8
#define MAXN (2 * MAXL)
typedef struct tplan {
    int n;
    remat_plan_node v[MAXN];
} tplan;
typedef struct tlist {
    int n, cap;
    tplan *v;
} tlist;

static void tl_push(tlist *l, const tplan *p) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
        cr_assert(l->v);
    }
    l->v[l->n++] = *p;
}

/* Appends src to dst, src's top-level nodes under `parent` at `depth`. */
static void append(tplan *dst, const tplan *src, int parent, int depth) {
    int base = dst->n;
    for (int i = 0; i < src->n; i++) {
        remat_plan_node nd = src->v[i];
        nd.parent = nd.parent < 0 ? parent : nd.parent + base;
        nd.depth += depth;
        dst->v[dst->n++] = nd;
    }
}

static tlist g_memo[MAXL][MAXL];

static const tlist *gen(int s, int t) {
    tlist *out = &g_memo[s][t];
    if (out->n) return out;
    tplan p = {0};
    if (s == t) {
        p.v[p.n++] = (remat_plan_node){REMAT_PLAN_STORE, s, s, 0, -1};
        tl_push(out, &p);
        return out;
    }
    const tlist *rest = gen(s + 1, t);
    for (int r = 0; r < rest->n; r++) {
        p.n = 0;
        p.v[p.n++] = (remat_plan_node){REMAT_PLAN_STORE, s, s, 0, -1};
        append(&p, &rest->v[r], -1, 0);
        tl_push(out, &p);
    }
    for (int j = s + 1; j <= t; j++) {
        const tlist *kids = gen(s, j - 1), *tail = gen(j, t);
        for (int a = 0; a < kids->n; a++)
            for (int b = 0; b < tail->n; b++) {
                p.n = 0;
                p.v[p.n++] = (remat_plan_node){REMAT_PLAN_CHECKPOINT, s, j - 1, 0, -1};
                append(&p, &kids->v[a], 0, 1);
                append(&p, &tail->v[b], -1, 0);
                tl_push(out, &p);
            }
    }
    return out;
}

static void memo_clear(void) {
    for (int s = 0; s < MAXL; s++)
        for (int t = 0; t < MAXL; t++) {
            free(g_memo[s][t].v);
            memset(&g_memo[s][t], 0, sizeof g_memo[s][t]);
        }
}

/* ---- an event-by-event simulation of the model ----------------------------------------------
 * Walks the plan as the executor runs it (forward, recomputation and
 * backward in rotor's order) and tracks the live bytes: what each step
 * allocates and frees, and the temporary peaks on top. */
typedef struct sim {
    const remat_profile *p;
    const remat_plan_node *nodes;
    int n_nodes;
    int next[MAXN * 64];
    int64_t cur, peak;
    double time;
} sim;

static int64_t X(const sim *S, int k) { /* input bytes of stage k; X(L) = chain output */
    return k == 0 ? (int64_t)S->p->stages[0].input_bytes
                  : (int64_t)S->p->stages[k - 1].output_bytes;
}
static int64_t ABAR(const sim *S, int k) {
    return (int64_t)(S->p->stages[k].output_bytes + S->p->stages[k].saved_bytes);
}
static void bump(sim *S, int64_t extra) {
    if (S->cur + extra > S->peak) S->peak = S->cur + extra;
}

/* Runs the sibling list from node i covering stages up to t. Entry: the
 * level's input is live; if t is not the last stage, so is the gradient of
 * a_t. Exit: that gradient is replaced by the gradient of the input. */
static void sim_level(sim *S, int i, int t) {
    const remat_plan_node *nd = &S->nodes[i];
    int L = S->p->n_stages, s = nd->first;
    const remat_stage_profile *ps = &S->p->stages[s];
    if (nd->op == REMAT_PLAN_STORE) {
        bump(S, (int64_t)ps->fwd_peak);
        S->cur += ABAR(S, s);
        S->time += ps->fwd_time;
        if (s == t) {
            if (t == L - 1) S->cur += X(S, L); /* the loss creates the output gradient */
        } else {
            sim_level(S, S->next[i], t);
        }
        bump(S, (int64_t)ps->bwd_peak);
        S->cur -= ABAR(S, s) + X(S, s + 1);
        S->cur += X(S, s) + (int64_t)ps->grad_bytes; /* parameter gradients stay */
        S->time += ps->bwd_time;
    } else {
        int e = nd->last;
        for (int k = s; k <= e; k++) {
            bump(S, (int64_t)S->p->stages[k].fwd_peak_nosave);
            S->cur += X(S, k + 1);
            if (k > s) S->cur -= X(S, k); /* not the checkpoint: dropped */
            S->time += S->p->stages[k].fwd_time;
        }
        cr_assert(e < t, "the grammar never ends a level with a checkpoint");
        sim_level(S, S->next[i], t); /* leaves the gradient of a_e */
        S->cur -= X(S, e + 1);       /* the checkpoint a_e is released */
        sim_level(S, i + 1, e);      /* recompute + backward of the segment */
        /* the recomputation stopped at its last save: stage e, stored there (the grammar
         * ends every level with a stored stage), never ran its recompute_free ops */
        S->time -= S->p->stages[e].recompute_free_time;
    }
}

static void sim_run(sim *S, const remat_profile *p, const remat_plan_node *nodes, int n) {
    S->p = p;
    S->nodes = nodes;
    S->n_nodes = n;
    cr_assert(n <= (int)(sizeof S->next / sizeof S->next[0]));
    for (int i = n - 1; i >= 0; i--) {
        int j = i + 1;
        if (nodes[i].op == REMAT_PLAN_CHECKPOINT)
            while (j < n && nodes[j].parent == i) j = S->next[j];
        S->next[i] = j;
    }
    S->cur = S->peak = 0;
    S->time = 0;
    sim_level(S, 0, p->n_stages - 1);
    int64_t grads = 0;
    for (int k = 0; k < p->n_stages; k++) grads += (int64_t)p->stages[k].grad_bytes;
    cr_assert_eq(S->cur, X(S, 0) + grads,
                 "simulation must end with the input gradient and the parameter gradients live");
}

Test(planner, dp_equals_exhaustive_search) {
    g_rng = 0x9E3779B97F4A7C15ull;
    int checked_feasible = 0, checked_infeasible = 0;
    for (int iter = 0; iter < 2000; iter++) {
        int L = 1 + iter % MAXL;
        remat_profile *p = random_chain(L);
        const tlist *all = gen(0, L - 1);
        /* peaks and times of every plan */
        int64_t minpk = INT64_MAX, maxpk = 0;
        int64_t *pk = malloc((size_t)all->n * sizeof *pk);
        double *tm = malloc((size_t)all->n * sizeof *tm);
        for (int i = 0; i < all->n; i++) {
            sim S;
            sim_run(&S, p, all->v[i].v, all->v[i].n);
            pk[i] = S.peak;
            tm[i] = S.time;
            if (S.peak < minpk) minpk = S.peak;
            if (S.peak > maxpk) maxpk = S.peak;
        }
        size_t mb = 0;
        RT_OK(remat_plan_min_budget(p, &mb));
        cr_assert_eq((int64_t)mb, minpk, "L=%d: min budget %zu, search %" PRId64, L, mb, minpk);

        for (int b = 0; b < 6; b++) {
            int64_t budget = rnd_in((int)minpk - 2, (int)maxpk + 1);
            if (budget < 1) budget = 1;
            double best = -1;
            for (int i = 0; i < all->n; i++)
                if (pk[i] <= budget && (best < 0 || tm[i] < best)) best = tm[i];
            remat_plan_options o = {.mem_slots = (int)budget}; /* 1 byte per slot: exact */
            remat_plan *plan = NULL;
            int rc = remat_plan_create_ex(&plan, p, (size_t)budget, &o);
            if (best < 0) {
                char num[32];
                snprintf(num, sizeof num, "%" PRId64 " bytes", minpk);
                RT_FAILS(rc, REMAT_EINVAL, num);
                cr_assert(strstr(remat_last_error(), "MiB"), "%s", remat_last_error());
                cr_assert_null(plan);
                checked_infeasible++;
                continue;
            }
            cr_assert_eq(rc, REMAT_OK, "L=%d budget %" PRId64 ": %s", L, budget,
                         remat_last_error());
            cr_assert_eq(plan->kind, REMAT_PLAN_OPTIMAL);
            cr_assert_eq(plan->time, best, "L=%d budget %" PRId64 ": DP %g, search %g", L, budget,
                         plan->time, best);
            sim S;
            sim_run(&S, p, plan->nodes, plan->n_nodes);
            cr_assert_leq(S.peak, budget, "L=%d: plan peak %" PRId64 " > budget %" PRId64, L,
                          S.peak, budget);
            cr_assert_eq(S.time, plan->time);
            cr_assert_eq((int64_t)plan->peak_bytes, S.peak, "model peak %zu, simulated %" PRId64,
                         plan->peak_bytes, S.peak);
            cr_assert_eq((int64_t)plan->min_budget_bytes, minpk);
            remat_plan_free(plan);
            checked_feasible++;
        }
        free(pk);
        free(tm);
        remat_profile_free(p);
        memo_clear();
    }
    cr_assert_gt(checked_feasible, 8000);
    cr_assert_gt(checked_infeasible, 100);
}

/* Whole-step budgets: the chain followed by a head (always stored), with
 * parameter gradients that appear in each stage's backward and stay, fixed
 * bytes, and the backward before the chain. The DP over the chain must give
 * the fastest plan whose simulated step peak fits, exactly as a search over
 * every plan of chain + head finds it. */
Test(planner, step_budget_equals_exhaustive_search) {
    g_rng = 0x2545F4914F6CDD1Dull;
    int feasible = 0, infeasible = 0;
    for (int iter = 0; iter < 1200; iter++) {
        int L = 1 + iter % (MAXL - 1);
        remat_profile *ext = random_chain(L + 1); /* stage L plays the head */
        for (int k = 0; k <= L; k++) ext->stages[k].grad_bytes = (size_t)rnd_in(0, 5);
        remat_step_profile step = {.fixed_bytes = (size_t)rnd_in(0, 30),
                                   .head = ext->stages[L],
                                   .tail_peak = (size_t)rnd_in(0, 12)};
        remat_profile chain = {.n_stages = L, .stages = ext->stages, .runs = 0};
        int64_t grads = 0;
        for (int k = 0; k <= L; k++) grads += (int64_t)ext->stages[k].grad_bytes;
        int64_t tail = (int64_t)ext->stages[0].input_bytes + grads + (int64_t)step.tail_peak;
        const tlist *all = gen(0, L);
        int64_t minpk = INT64_MAX, maxpk = 0;
        int64_t *pk = malloc((size_t)all->n * sizeof *pk);
        double *tm = malloc((size_t)all->n * sizeof *tm);
        for (int i = 0; i < all->n; i++) {
            const tplan *tp = &all->v[i];
            cr_assert(tp->v[tp->n - 1].op == REMAT_PLAN_STORE && tp->v[tp->n - 1].first == L &&
                          tp->v[tp->n - 1].depth == 0,
                      "the grammar never checkpoints the last stage");
            sim S;
            sim_run(&S, ext, tp->v, tp->n);
            pk[i] = (int64_t)step.fixed_bytes + (S.peak > tail ? S.peak : tail);
            tm[i] = S.time;
            if (pk[i] < minpk) minpk = pk[i];
            if (pk[i] > maxpk) maxpk = pk[i];
        }
        for (int b = 0; b < 5; b++) {
            int64_t budget = rnd_in((int)minpk - 2, (int)maxpk + 1);
            if (budget < 1) budget = 1;
            double best = -1;
            for (int i = 0; i < all->n; i++)
                if (pk[i] <= budget && (best < 0 || tm[i] < best)) best = tm[i];
            remat_plan_options o = {.mem_slots = (int)budget}; /* 1 byte per slot at most */
            remat_plan *plan = NULL;
            int rc = remat_plan_create_step(&plan, &chain, &step, (size_t)budget, &o);
            if (best < 0) {
                char num[32];
                snprintf(num, sizeof num, "%" PRId64 " bytes", minpk);
                RT_FAILS(rc, REMAT_EINVAL, num);
                cr_assert(strstr(remat_last_error(), "outside the chain"), "%s",
                          remat_last_error());
                cr_assert_null(plan);
                infeasible++;
                continue;
            }
            cr_assert_eq(rc, REMAT_OK, "L=%d budget %" PRId64 ": %s", L, budget,
                         remat_last_error());
            cr_assert(plan->whole_step);
            cr_assert_eq(plan->n_stages, L);
            cr_assert_eq(plan->time, best, "L=%d budget %" PRId64 ": DP %g, search %g", L, budget,
                         plan->time, best);
            tplan run = {0}; /* the plan as it runs: the chain, then the head */
            memcpy(run.v, plan->nodes, (size_t)plan->n_nodes * sizeof *run.v);
            run.n = plan->n_nodes;
            run.v[run.n++] = (remat_plan_node){REMAT_PLAN_STORE, L, L, 0, -1};
            sim S;
            sim_run(&S, ext, run.v, run.n);
            int64_t total = (int64_t)step.fixed_bytes + (S.peak > tail ? S.peak : tail);
            cr_assert_leq(total, budget);
            cr_assert_eq((int64_t)plan->peak_bytes, total, "model %zu, simulated %" PRId64,
                         plan->peak_bytes, total);
            cr_assert_eq((int64_t)plan->min_budget_bytes, minpk);
            remat_plan_free(plan);
            feasible++;
        }
        free(pk);
        free(tm);
        remat_profile_free(ext);
        memo_clear();
    }
    cr_assert_gt(feasible, 4000);
    cr_assert_gt(infeasible, 50);
}

/* With the default slot grid (sizes rounded up) the plan still fits the
 * budget and is never better than the exact optimum. */
Test(planner, slot_rounding_is_conservative) {
    g_rng = 12345;
    for (int iter = 0; iter < 60; iter++) {
        int L = 2 + iter % 7;
        remat_profile *p = random_chain(L);
        for (int k = 0; k < L; k++) { /* scale to awkward byte counts */
            remat_stage_profile *s = &p->stages[k];
            s->input_bytes = s->input_bytes * 1000003;
            s->output_bytes *= 1000003;
            s->saved_bytes *= 999983;
            s->fwd_peak = s->output_bytes + s->saved_bytes + (size_t)rnd_in(0, 3000000);
            s->fwd_peak_nosave = s->output_bytes + (size_t)rnd_in(0, 3000000);
            s->bwd_peak *= 1000033;
        }
        const tlist *all = gen(0, L - 1);
        int64_t minpk = INT64_MAX, maxpk = 0;
        for (int i = 0; i < all->n; i++) {
            sim S;
            sim_run(&S, p, all->v[i].v, all->v[i].n);
            if (S.peak < minpk) minpk = S.peak;
            if (S.peak > maxpk) maxpk = S.peak;
        }
        int64_t budget = minpk + (int64_t)(rnd() % (uint64_t)(maxpk - minpk + 1));
        double best = -1;
        for (int i = 0; i < all->n; i++) {
            sim S;
            sim_run(&S, p, all->v[i].v, all->v[i].n);
            if (S.peak <= budget && (best < 0 || S.time < best)) best = S.time;
        }
        remat_plan *plan = NULL;
        RT_OK(remat_plan_create(&plan, p, (size_t)budget));
        sim S;
        sim_run(&S, p, plan->nodes, plan->n_nodes);
        cr_assert_leq(S.peak, budget);
        cr_assert_geq(plan->time, best);
        remat_plan_free(plan);
        remat_profile_free(p);
        memo_clear();
    }
}

Test(planner, store_all_when_it_fits) {
    g_rng = 777;
    remat_profile *p = random_chain(6);
    remat_plan *sa = NULL, *plan = NULL;
    RT_OK(remat_plan_sequential(&sa, p, 0, 1)); /* one segment: nothing checkpointed */
    cr_assert_eq(sa->n_recomputed, 0);
    RT_OK(remat_plan_create(&plan, p, sa->peak_bytes));
    cr_assert_eq(plan->n_recomputed, 0);
    cr_assert_eq(plan->time, sa->time);
    cr_assert_eq(plan->time, plan->time_store_all);
    for (int k = 0; k < 6; k++) cr_assert_eq(plan->stages[k].action, REMAT_STAGE_STORE);
    remat_plan_free(plan);
    remat_plan_free(sa);
    remat_profile_free(p);
}

Test(planner, budget_below_minimum_names_it) {
    g_rng = 4242;
    remat_profile *p = random_chain(5);
    for (int k = 0; k < 5; k++) { /* MiB-sized stages */
        p->stages[k].input_bytes <<= 20;
        p->stages[k].output_bytes <<= 20;
        p->stages[k].saved_bytes <<= 20;
        p->stages[k].fwd_peak <<= 20;
        p->stages[k].fwd_peak_nosave <<= 20;
        p->stages[k].bwd_peak <<= 20;
    }
    size_t mb;
    RT_OK(remat_plan_min_budget(p, &mb));
    remat_plan *plan = (remat_plan *)0x1;
    char num[64];
    snprintf(num, sizeof num, "%zu bytes (%.2f MiB)", mb, mb / 1048576.0);
    RT_FAILS(remat_plan_create(&plan, p, mb - 1), REMAT_EINVAL, num);
    cr_assert_null(plan);
    RT_FAILS(remat_plan_create(&plan, p, mb - 1), REMAT_EINVAL, "remat_plan_create");
    RT_FAILS(remat_plan_create(&plan, p, mb - 1), REMAT_EINVAL, "minimum");
    RT_OK(remat_plan_create(&plan, p, mb));
    cr_assert_leq(plan->peak_bytes, mb);
    remat_plan_free(plan);
    remat_profile_free(p);
}

Test(planner, bad_arguments) {
    remat_plan *plan = NULL;
    remat_profile *p = NULL;
    RT_FAILS(remat_plan_create(NULL, NULL, 10), REMAT_EINVAL, "remat_plan_create");
    RT_FAILS(remat_plan_create(&plan, NULL, 10), REMAT_EINVAL, "profile");
    RT_FAILS(remat_profile_create(&p, 0), REMAT_EINVAL, "remat_profile_create");
    RT_OK(remat_profile_create(&p, 3));
    p->stages[1].fwd_time = -1;
    RT_FAILS(remat_plan_create(&plan, p, 100), REMAT_EINVAL, "stage 1");
    p->stages[1].fwd_time = 1;
    remat_plan_options o = {.mem_slots = -5};
    RT_FAILS(remat_plan_create_ex(&plan, p, 100, &o), REMAT_EINVAL, "mem_slots");
    RT_FAILS(remat_plan_sequential(&plan, p, 4, 2), REMAT_EINVAL, "does not match");
    RT_FAILS(remat_plan_sequential(&plan, NULL, 4, 0), REMAT_EINVAL, "segments");
    RT_FAILS(remat_plan_revolve(&plan, NULL, 0, 2), REMAT_EINVAL, "n_stages");
    RT_FAILS(remat_plan_revolve(&plan, NULL, 5, 0), REMAT_EINVAL, "checkpoints");
    int64_t t;
    RT_FAILS(remat_revolve_cost(0, 3, &t), REMAT_EINVAL, "remat_revolve_cost");
    RT_FAILS(remat_revolve_cost(5, 0, &t), REMAT_EINVAL, "checkpoint");
    RT_FAILS(remat_revolve_cost(5, 1, NULL), REMAT_EINVAL, "NULL");
    size_t b;
    RT_FAILS(remat_plan_min_budget(NULL, &b), REMAT_EINVAL, "profile");
    RT_FAILS(remat_plan_run(NULL, NULL, NULL, NULL), REMAT_EINVAL, "remat_plan_run");
    remat_tensor *y = (remat_tensor *)0x1;
    RT_FAILS(remat_plan_run(NULL, NULL, NULL, &y), REMAT_EINVAL, "plan");
    cr_assert_null(y);
    remat_profile *q = (remat_profile *)0x1;
    RT_FAILS(remat_profile_stages(&q, 1, NULL, NULL, NULL), REMAT_EINVAL, "remat_profile_stages");
    cr_assert_null(q);
    /* NULL-safe destructors and printers */
    remat_plan_free(NULL);
    remat_profile_free(NULL);
    remat_plan_print(NULL, stdout);
    remat_profile_print(NULL, stdout);
    remat_profile_free(p);
}

Test(planner, parse_bytes) {
    size_t b;
    RT_OK(remat_parse_bytes("1048576", &b));
    cr_assert_eq(b, 1048576u);
    RT_OK(remat_parse_bytes("96MiB", &b));
    cr_assert_eq(b, 96u << 20);
    RT_OK(remat_parse_bytes("1.5G", &b));
    cr_assert_eq(b, 3u << 29);
    RT_OK(remat_parse_bytes(" 512 kb ", &b));
    cr_assert_eq(b, 512u << 10);
    RT_OK(remat_parse_bytes("2GB", &b));
    cr_assert_eq(b, (size_t)2 << 30);
    RT_OK(remat_parse_bytes("100B", &b));
    cr_assert_eq(b, 100u);
    RT_FAILS(remat_parse_bytes("lots", &b), REMAT_EFORMAT, "remat_parse_bytes");
    RT_FAILS(remat_parse_bytes("12 parsecs", &b), REMAT_EFORMAT, "unit");
    RT_FAILS(remat_parse_bytes("-3M", &b), REMAT_EFORMAT, NULL);
    RT_FAILS(remat_parse_bytes(NULL, &b), REMAT_EINVAL, NULL);
}

/* ---- Revolve ---------------------------------------------------------------------------------- */
static int64_t rv_memo[64][10];
/* t(l, c) = min_{0<m<l} m + t(l-m, c-1) + t(m, c); t(1, c) = 0; no state: infeasible. */
static int64_t rv_brute(int l, int c) {
    if (l == 1) return 0;
    if (c == 0) return -1;
    if (rv_memo[l][c]) return rv_memo[l][c] - 1;
    int64_t best = -1;
    for (int m = 1; m < l; m++) {
        int64_t a = rv_brute(l - m, c - 1), b = rv_brute(m, c);
        if (a < 0 || b < 0) continue;
        if (best < 0 || m + a + b < best) best = m + a + b;
    }
    rv_memo[l][c] = best + 1;
    return best;
}

Test(planner, revolve_closed_form) {
    int64_t t;
    RT_OK(remat_revolve_cost(10, 3, &t)); /* r = 2: beta(3,2) = 10; 2*10 - beta(4,1) = 15 */
    cr_assert_eq(t, 15);
    RT_OK(remat_revolve_cost(1, 0, &t));
    cr_assert_eq(t, 0);
    for (int l = 1; l < 64; l++) {
        RT_OK(remat_revolve_cost(l, 1, &t));
        cr_assert_eq(t, (int64_t)l * (l - 1) / 2);
        for (int c = 1; c < 10; c++) {
            RT_OK(remat_revolve_cost(l, c, &t));
            cr_assert_eq(t, rv_brute(l, c),
                         "t(%d, %d): closed form %" PRId64 ", recursion %" PRId64, l, c, t,
                         rv_brute(l, c));
        }
    }
    /* large: grows like l * log(l) for fixed c, within range */
    /* large: r = 8 (beta(20,8) = 3108105 >= 1e6), t = 8e6 - beta(21,7) = 8e6 - 1184040 */
    RT_OK(remat_revolve_cost(1000000, 20, &t));
    cr_assert_eq(t, 8000000 - 1184040);
}

Test(planner, revolve_plan_recomputes_closed_form) {
    for (int l = 1; l <= 40; l++) {
        for (int c = 1; c <= 6; c++) {
            remat_plan *plan = NULL;
            RT_OK(remat_plan_revolve(&plan, NULL, l, c));
            int64_t t;
            RT_OK(remat_revolve_cost(l, c, &t));
            cr_assert_eq(plan->n_recomputed, t,
                         "l=%d c=%d: plan recomputes %" PRId64 ", closed form %" PRId64, l, c,
                         plan->n_recomputed, t);
            cr_assert_eq(plan->kind, REMAT_PLAN_REVOLVE);
            /* at most c states live at once: count checkpoints along the
             * top-level path (each top-level segment stores one state) */
            int top_ckpts = 0;
            for (int i = 0; i < plan->n_nodes; i++)
                if (plan->nodes[i].parent == -1 && plan->nodes[i].op == REMAT_PLAN_CHECKPOINT)
                    top_ckpts++;
            cr_assert_leq(top_ckpts, c);
            remat_plan_free(plan);
        }
    }
}

Test(planner, sequential_plan_and_printer) {
    remat_plan *plan = NULL;
    RT_OK(remat_plan_sequential(&plan, NULL, 10, 3));
    /* PyTorch: chunks of 10/3 = 3, the first 2 checkpointed, stages 6..9 stored */
    const remat_stage_action want[10] = {REMAT_STAGE_CHECKPOINT, REMAT_STAGE_RECOMPUTE,
                                         REMAT_STAGE_RECOMPUTE,  REMAT_STAGE_CHECKPOINT,
                                         REMAT_STAGE_RECOMPUTE,  REMAT_STAGE_RECOMPUTE,
                                         REMAT_STAGE_STORE,      REMAT_STAGE_STORE,
                                         REMAT_STAGE_STORE,      REMAT_STAGE_STORE};
    for (int k = 0; k < 10; k++) {
        cr_assert_eq(plan->stages[k].action, want[k], "stage %d", k);
        cr_assert_eq(plan->stages[k].n_forward, k < 6 ? 2 : 1);
    }
    cr_assert_eq(plan->n_recomputed, 6);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    remat_plan_print(plan, f);
    fclose(f);
    cr_assert(strstr(buf, "structure: [ckpt 0-2: 0-2] [ckpt 3-5: 3-5] 6-9"), "%s", buf);
    cr_assert(strstr(buf, "checkpoint_sequential"), "%s", buf);
    free(buf);
    remat_plan_free(plan);

    /* a nested optimal plan prints its nesting */
    remat_profile *p = six_equal_stages();
    size_t mb;
    RT_OK(remat_plan_min_budget(p, &mb));
    RT_OK(remat_plan_create(&plan, p, mb));
    buf = NULL;
    f = open_memstream(&buf, &len);
    remat_plan_print(plan, f);
    remat_profile_print(p, f);
    fclose(f);
    cr_assert(strstr(buf, "[ckpt 0-"), "%s", buf);
    cr_assert(strstr(buf, "predicted peak"), "%s", buf);
    cr_assert(strstr(buf, "hand-made"), "%s", buf);
    free(buf);
    int maxd = 0;
    for (int i = 0; i < plan->n_nodes; i++)
        if (plan->nodes[i].depth > maxd) maxd = plan->nodes[i].depth;
    cr_assert_geq(maxd, 2, "the minimal-memory plan of 6 stages nests checkpoints");
    remat_plan_free(plan);
    remat_profile_free(p);
}

/* remat_plan_structure: the line remat_plan_print shows, into a caller's
 * buffer, with the whole length and a visible cut (the remat program's bench
 * table and JSON take it from here). */
Test(planner, structure_text_fits_its_buffer_and_says_its_length) {
    remat_plan *plan = NULL;
    RT_OK(remat_plan_sequential(&plan, NULL, 10, 4));
    const char *want = "[ckpt 0-1: 0-1] [ckpt 2-3: 2-3] [ckpt 4-5: 4-5] 6-9"; /* chunks of 10/4 */
    char buf[128];
    size_t len = 0;
    RT_OK(remat_plan_structure(plan, buf, sizeof buf, &len));
    cr_assert_str_eq(buf, want);
    cr_assert_eq(len, strlen(want));
    /* the length alone */
    len = 0;
    RT_OK(remat_plan_structure(plan, NULL, 0, &len));
    cr_assert_eq(len, strlen(want));
    /* exactly len + 1 bytes hold it all; one fewer cuts it with "..." */
    char *exact = malloc(len + 1);
    RT_OK(remat_plan_structure(plan, exact, len + 1, NULL));
    cr_assert_str_eq(exact, want);
    RT_OK(remat_plan_structure(plan, exact, len, &len));
    cr_assert_eq(strlen(exact), len - 1);
    cr_assert(!strncmp(exact, want, len - 4) && !strcmp(exact + len - 4, "..."), "%s", exact);
    free(exact);
    char tiny[3] = "xx";
    RT_OK(remat_plan_structure(plan, tiny, sizeof tiny, NULL));
    cr_assert_str_eq(tiny, "[c");
    /* remat_plan_print shows the same text */
    char *out = NULL;
    size_t olen = 0;
    FILE *f = open_memstream(&out, &olen);
    remat_plan_print(plan, f);
    fclose(f);
    char line[160];
    snprintf(line, sizeof line, "  structure: %s\n", want);
    cr_assert(strstr(out, line), "%s", out);
    free(out);
    /* errors: a status and an empty buffer */
    cr_assert_eq(remat_plan_structure(NULL, buf, sizeof buf, &len), REMAT_EINVAL);
    cr_assert_str_eq(buf, "");
    cr_assert_eq(len, 0);
    cr_assert(strstr(remat_last_error(), "remat_plan_structure"), "%s", remat_last_error());
    cr_assert_eq(remat_plan_structure(plan, NULL, 8, NULL), REMAT_EINVAL);
    remat_plan_free(plan);

    /* a nested plan: brackets inside brackets, as remat_plan_print nests them */
    remat_profile *p = six_equal_stages();
    size_t mb;
    RT_OK(remat_plan_min_budget(p, &mb));
    RT_OK(remat_plan_create(&plan, p, mb));
    RT_OK(remat_plan_structure(plan, buf, sizeof buf, &len));
    cr_assert(!strncmp(buf, "[ckpt 0-", 8) && strstr(buf + 1, "[ckpt "), "%s", buf);
    int open = 0, close = 0;
    for (const char *c = buf; *c; c++) open += *c == '[', close += *c == ']';
    cr_assert(open >= 2 && open == close, "%s", buf);
    remat_plan_free(plan);
    remat_profile_free(p);
}

/* ---- executing plans ------------------------------------------------------------------------
 * A chain of linear + gelu stages in f64; gradients of every parameter and
 * of the input through each plan must be bitwise those of running the
 * stages without checkpoints. */
#define NST 6
#define DIM 16
#define BATCH 8

typedef struct lg_stage {
    remat_tensor *w, *b;
} lg_stage;

static int lg_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in;
    (void)n_out;
    lg_stage *s = ud;
    remat_tensor *h = NULL;
    int rc = remat_linear(&h, in[0], s->w, s->b);
    if (!rc) rc = remat_gelu(&out[0], h, REMAT_GELU_TANH);
    remat_release(h);
    return rc;
}

#define CHAIN_MAX 16
typedef struct chain {
    lg_stage st[CHAIN_MAX];
    remat_stage stages[CHAIN_MAX];
    remat_tensor *x;
} chain;

static void chain_init(chain *c, remat_dtype dt, int dim, int batch, int n) {
    for (int k = 0; k < n; k++) {
        int64_t ws[2] = {dim, dim}, bs[1] = {dim};
        c->st[k].w = rt_rand(2, ws, dt, -0.4, 0.4, 100u + (unsigned)k);
        c->st[k].b = rt_rand(1, bs, dt, -0.1, 0.1, 200u + (unsigned)k);
        RT_OK(remat_set_requires_grad(c->st[k].w, true));
        RT_OK(remat_set_requires_grad(c->st[k].b, true));
        c->stages[k] = (remat_stage){lg_fn, &c->st[k]};
    }
    int64_t xs[2] = {batch, dim};
    c->x = rt_rand(2, xs, dt, -1, 1, 7);
    RT_OK(remat_set_requires_grad(c->x, true));
}

static void chain_free(chain *c, int n) {
    for (int k = 0; k < n; k++) {
        remat_release(c->st[k].w);
        remat_release(c->st[k].b);
    }
    remat_release(c->x);
}

static void chain_zero_grads(chain *c, int n) {
    for (int k = 0; k < n; k++) {
        RT_OK(remat_set_grad(c->st[k].w, NULL));
        RT_OK(remat_set_grad(c->st[k].b, NULL));
    }
    RT_OK(remat_set_grad(c->x, NULL));
}

/* loss = sum(y * y) / 2 so that every output element carries its own gradient */
static void backward_from(remat_tensor *y) {
    remat_tensor *sq = NULL, *loss = NULL;
    RT_OK(remat_mul(&sq, y, y));
    RT_OK(remat_sum_all(&loss, sq));
    RT_OK(remat_backward_scalar(loss));
    remat_release(loss);
    remat_release(sq);
}

/* grads[0..2n] = w0, b0, ..., x (new references) */
static void collect(chain *c, int n, remat_tensor **g) {
    for (int k = 0; k < n; k++) {
        g[2 * k] = remat_retain(remat_tensor_grad(c->st[k].w));
        g[2 * k + 1] = remat_retain(remat_tensor_grad(c->st[k].b));
        cr_assert_not_null(g[2 * k]);
    }
    g[2 * n] = remat_retain(remat_tensor_grad(c->x));
    cr_assert_not_null(g[2 * n]);
}

static void run_reference(chain *c, int n, remat_tensor **ref, remat_tensor **yref) {
    remat_tensor *cur = remat_retain(c->x);
    for (int k = 0; k < n; k++) {
        remat_tensor *y = NULL;
        RT_OK(lg_fn(&c->st[k], &cur, 1, &y, 1));
        remat_release(cur);
        cur = y;
    }
    backward_from(cur);
    *yref = cur;
    collect(c, n, ref);
    chain_zero_grads(c, n);
}

static void check_plan(chain *c, int n, const remat_plan *plan, remat_tensor **ref,
                       remat_tensor *yref, const char *what) {
    remat_tensor *y = NULL, *got[2 * NST + 1];
    RT_OK(remat_plan_run(plan, c->stages, c->x, &y));
    cr_assert(rt_bitwise_equal(y, yref), "%s: output differs", what);
    backward_from(y);
    remat_release(y);
    collect(c, n, got);
    for (int i = 0; i <= 2 * n; i++) {
        cr_assert(rt_bitwise_equal(got[i], ref[i]), "%s: gradient %d differs (max diff %g)", what,
                  i, rt_max_abs_diff(got[i], ref[i]));
        remat_release(got[i]);
    }
    chain_zero_grads(c, n);
}

Test(planner, executed_plans_give_bitwise_equal_gradients) {
    chain c;
    chain_init(&c, REMAT_F64, DIM, BATCH, NST);
    remat_tensor *ref[2 * NST + 1], *yref = NULL;
    run_reference(&c, NST, ref, &yref);

    remat_profile *prof = NULL;
    remat_profile_options po = {.runs = 1, .no_warmup = true};
    RT_OK(remat_profile_stages(&prof, NST, c.stages, c.x, &po));
    /* profiling left .grad alone */
    for (int k = 0; k < NST; k++) cr_assert_null(remat_tensor_grad(c.st[k].w));
    cr_assert_null(remat_tensor_grad(c.x));
    size_t mb;
    RT_OK(remat_plan_min_budget(prof, &mb));

    int n_plans = 0, max_depth = 0;
    for (int step = 0; step <= 8; step++) {
        remat_plan *plan = NULL;
        size_t budget = mb + (size_t)((double)(prof->stages[0].output_bytes * 12) * step / 8.0);
        RT_OK(remat_plan_create(&plan, prof, budget));
        for (int i = 0; i < plan->n_nodes; i++)
            if (plan->nodes[i].depth > max_depth) max_depth = plan->nodes[i].depth;
        char what[64];
        snprintf(what, sizeof what, "optimal plan, budget %zu", budget);
        check_plan(&c, NST, plan, ref, yref, what);
        /* the run copies what backward needs: the plan may go before it */
        remat_tensor *y = NULL, *got[2 * NST + 1];
        RT_OK(remat_plan_run(plan, c.stages, c.x, &y));
        remat_plan_free(plan);
        backward_from(y);
        remat_release(y);
        collect(&c, NST, got);
        for (int i = 0; i <= 2 * NST; i++) {
            cr_assert(rt_bitwise_equal(got[i], ref[i]), "%s (plan freed): gradient %d", what, i);
            remat_release(got[i]);
        }
        chain_zero_grads(&c, NST);
        n_plans++;
    }
    cr_assert_geq(max_depth, 1, "some plan must nest checkpoints");
    for (int cks = 1; cks <= 4; cks++) {
        remat_plan *plan = NULL;
        RT_OK(remat_plan_revolve(&plan, prof, 0, cks));
        check_plan(&c, NST, plan, ref, yref, "revolve");
        remat_plan_free(plan);
    }
    for (int seg = 1; seg <= NST; seg++) {
        remat_plan *plan = NULL;
        RT_OK(remat_plan_sequential(&plan, NULL, NST, seg));
        check_plan(&c, NST, plan, ref, yref, "sequential");
        remat_plan_free(plan);
    }
    /* the one-call convenience, twice (the second call reuses the plan) */
    for (int rep = 0; rep < 2; rep++) {
        remat_tensor *y = NULL, *got[2 * NST + 1];
        RT_OK(remat_checkpoint_budget(&y, NST, c.stages, mb, c.x));
        backward_from(y);
        remat_release(y);
        collect(&c, NST, got);
        for (int i = 0; i <= 2 * NST; i++) {
            cr_assert(rt_bitwise_equal(got[i], ref[i]), "budget convenience: gradient %d", i);
            remat_release(got[i]);
        }
        chain_zero_grads(&c, NST);
    }
    remat_checkpoint_budget_clear();
    remat_profile_free(prof);
    for (int i = 0; i <= 2 * NST; i++) remat_release(ref[i]);
    remat_release(yref);
    chain_free(&c, NST);
}

/* Runs under a scope: only the output belongs to it; inputs untouched. */
Test(planner, run_inside_scope_and_errors) {
    chain c;
    chain_init(&c, REMAT_F64, DIM, BATCH, 3);
    remat_plan *plan = NULL;
    RT_OK(remat_plan_revolve(&plan, NULL, 3, 1));
    remat_scope *s = NULL;
    RT_OK(remat_scope_begin(&s));
    remat_tensor *y = NULL, *loss = NULL;
    int64_t live = remat_live_tensors();
    RT_OK(remat_plan_run(plan, c.stages, c.x, &y));
    RT_OK(remat_sum_all(&loss, y));
    RT_OK(remat_backward_scalar(loss));
    RT_OK(remat_scope_end(s)); /* releases y and loss */
    cr_assert_eq(remat_live_tensors(), live + 3 * 2 + 1, "only the new .grad remain");
    cr_assert_not_null(remat_tensor_grad(c.st[0].w));
    chain_zero_grads(&c, 3);
    /* under no_grad the plan just runs the stages (nothing recorded, no leak) */
    bool prev = remat_no_grad_begin();
    remat_tensor *y2 = NULL, *y3 = NULL;
    RT_OK(remat_plan_run(plan, c.stages, c.x, &y2));
    remat_grad_mode_restore(prev);
    RT_OK(remat_plan_run(plan, c.stages, c.x, &y3));
    cr_assert(rt_bitwise_equal(y2, y3));
    cr_assert_not(remat_requires_grad(y2));
    remat_release(y2);
    remat_release(y3);
    /* a stage list with a hole */
    remat_stage bad[3] = {c.stages[0], {NULL, NULL}, c.stages[2]};
    RT_FAILS(remat_plan_run(plan, bad, c.x, &y), REMAT_EINVAL, "stages[1]");
    cr_assert_null(y);
    /* a malformed plan is rejected */
    remat_plan broken = *plan;
    remat_plan_node nodes[8];
    memcpy(nodes, plan->nodes, (size_t)plan->n_nodes * sizeof *nodes);
    broken.nodes = nodes;
    nodes[plan->n_nodes - 1].first = 7;
    nodes[plan->n_nodes - 1].last = 7;
    RT_FAILS(remat_plan_run(&broken, c.stages, c.x, &y), REMAT_EINVAL, "malformed plan");
    cr_assert_null(y);
    remat_plan_free(plan);
    chain_free(&c, 3);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* A stage failing (in forward) is reported with its index. */
static int failing_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)ud;
    (void)in;
    (void)n_in;
    (void)out;
    (void)n_out;
    return remat_set_error(REMAT_ECALLBACK, "boom");
}

Test(planner, failing_stage) {
    chain c;
    chain_init(&c, REMAT_F64, DIM, BATCH, 3);
    remat_stage st[3] = {c.stages[0], {failing_fn, NULL}, c.stages[2]};
    remat_profile *p = (remat_profile *)0x1;
    RT_FAILS(remat_profile_stages(&p, 3, st, c.x, NULL), REMAT_ECALLBACK, "stage 1: boom");
    cr_assert_null(p);
    remat_plan *plan = NULL;
    RT_OK(remat_plan_sequential(&plan, NULL, 3, 1));
    remat_tensor *y = (remat_tensor *)0x1;
    RT_FAILS(remat_plan_run(plan, st, c.x, &y), REMAT_ECALLBACK, "stage 1: boom");
    cr_assert_null(y);
    remat_plan_free(plan);
    chain_free(&c, 3);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The executed plan's allocator peak stays within the budget plus a slack:
 * f32 chain, parameters' .grad allocated beforehand (outside the budget).
 * The slack is a quarter of one activation (what the model does not see:
 * the loss, the engine's bookkeeping) plus the bytes of the parameters'
 * gradients: the autograd engine currently keeps the gradient buffer of
 * every leaf until the end of the backward pass (after accumulating it
 * into .grad), which the model, like PyTorch, assumes freed at once. */
#define PK_N 8
#define PK_DIM 32
#define PK_BATCH 512
Test(planner, executed_peak_within_budget) {
    chain c;
    chain_init(&c, REMAT_F32, PK_DIM, PK_BATCH, PK_N);
    remat_profile *prof = NULL;
    RT_OK(remat_profile_stages(&prof, PK_N, c.stages, c.x, NULL));
    /* warm-up step: allocates every .grad */
    remat_tensor *y = NULL;
    RT_OK(remat_checkpoint_sequential(
        &y, PK_N, c.stages, 1, c.x, &(remat_checkpoint_options){.use_reentrant = REMAT_OPT_FALSE}));
    backward_from(y);
    remat_release(y);
    size_t mb;
    RT_OK(remat_plan_min_budget(prof, &mb));
    remat_plan *sa = NULL;
    RT_OK(remat_plan_sequential(&sa, prof, 0, 1));
    size_t act = prof->stages[0].output_bytes, pgrad = 0;
    for (int k = 0; k < PK_N; k++)
        pgrad += remat_storage_nbytes(c.st[k].w) + remat_storage_nbytes(c.st[k].b);
    size_t slack = act / 4 + pgrad;
    for (int i = 0; i <= 6; i++) {
        size_t budget = mb + (sa->peak_bytes - mb) * (size_t)i / 6;
        remat_plan *plan = NULL;
        RT_OK(remat_plan_create(&plan, prof, budget));
        size_t base = rt_device_current_bytes();
        rt_device_reset_peak();
        RT_OK(remat_plan_run(plan, c.stages, c.x, &y));
        remat_tensor *loss = NULL;
        RT_OK(remat_sum_all(&loss, y));
        RT_OK(remat_backward_scalar(loss));
        remat_release(loss);
        remat_release(y);
        size_t peak = rt_device_stats().peak_bytes - base;
        cr_assert_leq(peak, budget + slack,
                      "budget %zu (+ slack %zu): measured peak %zu, predicted %zu", budget, slack,
                      peak, plan->peak_bytes);
        remat_plan_free(plan);
    }
    remat_plan_free(sa);
    remat_profile_free(prof);
    chain_free(&c, PK_N);
    cr_assert_eq(remat_live_tensors(), 0);
}
