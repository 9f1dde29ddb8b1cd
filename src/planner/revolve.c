/*
 * src/planner/revolve.c — Revolve's binomial checkpointing for uniform
 * chains (Griewank 1992; Griewank & Walther, "Algorithm 799: revolve",
 * 2000).
 *
 * To reverse l steps with c checkpoints (the stored input counts as one),
 * the least number of forward steps recomputed is
 *     t(l, c) = r*l - beta(c+1, r-1),   beta(c, r) = (c+r)! / (c! r!),
 * with r the smallest integer such that beta(c, r) >= l. It satisfies the
 * recursion t(l, c) = min_{0<m<l} m + t(l-m, c-1) + t(m, c), t(1, c) = 0:
 * advance m steps from the checkpoint, store the state reached, reverse the
 * remaining l-m steps with one checkpoint less, then the first m again.
 * As a plan: [checkpoint s..s+m-1 with sub-plan (m, c)] followed by the
 * plan of (l-m, c-1) at the same level; a single step is a stored stage.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "core/core.h"
#include "planner_internal.h"

#define RV_MAX_STEPS ((int64_t)INT32_MAX)

/* beta(c, r) = C(c + r, r), saturating at UINT64_MAX. */
static uint64_t beta(int64_t c, int64_t r) {
    if (r < 0 || c < 0) return 0;
    uint64_t v = 1;
    for (int64_t i = 1; i <= r; i++) {
        /* v = C(c+i-1, i-1) -> C(c+i, i) = v * (c+i) / i, exact in integers */
        uint64_t mul = (uint64_t)(c + i);
        if (v > UINT64_MAX / mul) return UINT64_MAX;
        v = v * mul / (uint64_t)i;
    }
    return v;
}

/* t(l, c) by the closed form; -1 if infeasible (c == 0, l > 1). */
static int64_t rv_cost(int64_t l, int64_t c) {
    if (l <= 1) return 0;
    if (c <= 0) return -1;
    if (c == 1) return l * (l - 1) / 2;
    if (c >= l - 1) return l - 1; /* every state fits: one sweep */
    int64_t r = 0;
    while (beta(c, r) < (uint64_t)l) r++;
    return r * l - (int64_t)beta(c + 1, r - 1);
}

remat_status remat_revolve_cost(int64_t steps, int64_t checkpoints, int64_t *recomputations) {
    static const char *call = "remat_revolve_cost";
    if (!recomputations) return rm_err(REMAT_EINVAL, "%s: recomputations is NULL", call);
    *recomputations = 0;
    if (steps < 1 || steps > RV_MAX_STEPS)
        return rm_err(REMAT_EINVAL, "%s: steps must be in [1, %" PRId64 "], got %" PRId64, call,
                      RV_MAX_STEPS, steps);
    if (checkpoints < 0 || (checkpoints < 1 && steps > 1))
        return rm_err(REMAT_EINVAL,
                      "%s: %" PRId64 " steps need at least 1 checkpoint, got %" PRId64, call, steps,
                      checkpoints);
    if (checkpoints > steps) checkpoints = steps; /* more cannot help */
    int64_t r = 0;
    if (checkpoints >= 2 && checkpoints < steps - 1) {
        while (beta(checkpoints, r) < (uint64_t)steps) r++;
        if (beta(checkpoints + 1, r - 1) == UINT64_MAX)
            return rm_err(REMAT_EUNSUPPORTED, "%s: overflow for %" PRId64 " steps", call, steps);
    }
    *recomputations = rv_cost(steps, checkpoints);
    return REMAT_OK;
}

/* Table of t(l', c') for l' <= L, c' <= C. */
typedef struct rv_tab {
    int L, C;
    int64_t *t;
} rv_tab;
static inline int64_t rv_t(const rv_tab *tb, int l, int c) {
    return tb->t[(size_t)l * (size_t)(tb->C + 1) + (size_t)c];
}

static void rv_build(const rv_tab *tb, int s, int t, int c, int depth, int parent, pl_builder *b) {
    while (s <= t && !b->failed) {
        int l = t - s + 1;
        if (l == 1) {
            pl_push(b, REMAT_PLAN_STORE, s, s, depth, parent);
            return;
        }
        int64_t want = rv_t(tb, l, c);
        int best = -1;
        /* Any split reaching the optimum; the largest advance first keeps
         * the nesting shallow on the right-hand side. */
        for (int m = l - 1; m >= 1; m--) {
            int64_t a = rv_t(tb, l - m, c - 1), bb = rv_t(tb, m, c);
            if (a < 0 || bb < 0) continue;
            if (m + a + bb == want) {
                best = m;
                break;
            }
        }
        if (best < 0) { /* cannot happen: the closed form satisfies the recursion */
            b->failed = 1;
            return;
        }
        int p = pl_push(b, REMAT_PLAN_CHECKPOINT, s, s + best - 1, depth, parent);
        rv_build(tb, s, s + best - 1, c, depth + 1, p, b);
        s += best;
        c -= 1;
    }
}

remat_status remat_plan_revolve(remat_plan **out, const remat_profile *profile, int n_stages,
                                int checkpoints) {
    static const char *call = "remat_plan_revolve";
    int L = 0;
    pl_count count = {"checkpoints", " (the input is one)", checkpoints};
    int rc = pl_plan_begin(out, profile, n_stages, &count, call, &L);
    if (rc) return rc;
    int C = checkpoints > L ? L : checkpoints;
    rv_tab tb = {L, C, NULL};
    size_t n = ((size_t)L + 1) * ((size_t)C + 1);
    if (n > ((size_t)1 << 27))
        return rm_err(REMAT_ENOMEM, "%s: %d stages with %d checkpoints is too large a table", call,
                      L, C);
    tb.t = malloc(n * sizeof *tb.t);
    if (!tb.t) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int l = 0; l <= L; l++)
        for (int c = 0; c <= C; c++) tb.t[(size_t)l * (size_t)(C + 1) + (size_t)c] = rv_cost(l, c);
    pl_builder b = {0};
    rv_build(&tb, 0, L - 1, C, 0, -1, &b);
    free(tb.t);
    return pl_finish_shaped(out, &b, L, REMAT_PLAN_REVOLVE, profile, checkpoints, call);
}
