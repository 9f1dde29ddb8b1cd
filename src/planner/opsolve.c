/*
 * src/planner/opsolve.c — the op-level planner: for each saved tensor of
 * each stage keep or recompute, jointly with which stages are checkpointed,
 * for a (whole-step) peak budget.
 *
 * Plan space (a): every stage of the chain is stored, or checkpointed on its
 * own with a selective checkpoint keeping a subset S of its cacheable ops
 * (S empty: a plain checkpoint). With C(S) the bytes the kept ops hold and
 * T(S) the forward time they account for, a checkpointed stage s
 *   - peaks at off + fpn[s] + C in its forward (the kept ops' storage
 *     is at most C above what a forward keeping nothing holds);
 *   - keeps x[s+1] + C until its recomputation;
 *   - peaks at off + grads(s+1..) + max(x[s+1] + fpa[s] + C,
 *     x[s+1] + abar[s] + bp[s]) in its recomputation and backward (the cache
 *     is adopted by the recomputation; after it the stage holds what a
 *     stored stage holds);
 *   - costs uf + (uf - T) + ub.
 * A stored stage is rotor's F_all (src/planner/model.c). off is what the
 * earlier stages keep. Per stage, only the Pareto set of (C, T) over all
 * subsets matters (a point with more bytes and no more time saved is never
 * better in any term above); it is computed exactly (Nemhauser–Ullmann:
 * merge the set with itself shifted by each op, drop dominated points).
 * A dynamic program over the stages with the kept bytes in slots then
 * finds the fastest plan: exact on the grid (sizes rounded up, so a plan
 * that fits in slots fits in bytes).
 *
 * Plan space (b): rotor's nested block schedules (solve.c) and the
 * minimal-peak plan. The answer is the fastest candidate that fits.
 *
 * Monotonicity: the grid's slot size comes from the profile (the
 * store-all peak / pl_auto_slots), never from the budget. A larger budget
 * only adds slots, so each candidate's feasible set grows and the least
 * predicted time can only fall.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "planner_internal.h"

#define OP_MAX_FRONTIER 4096 /* Pareto points per stage before thinning (then not exact) */

typedef struct front_pt {
    uint64_t c; /* cache bytes */
    double t;   /* forward time it saves */
    int set;    /* index of its op set in the stage's set table */
} front_pt;

/* Pareto set of one distinct stage. */
typedef struct stage_front {
    int n;
    front_pt *pts; /* c ascending, t strictly ascending */
    int words;     /* uint64 words per op set */
    uint64_t *sets;
    int n_sets, cap_sets;
    bool exact;
} stage_front;

static void front_free(stage_front *f) {
    free(f->pts);
    free(f->sets);
    memset(f, 0, sizeof *f);
}

static int cmp_pt(const void *a, const void *b) {
    const front_pt *x = a, *y = b;
    if (x->c != y->c) return x->c < y->c ? -1 : 1;
    return (x->t < y->t) - (x->t > y->t); /* larger t first */
}

static int new_set(stage_front *f, int from, int add_op) {
    if (f->n_sets == f->cap_sets) {
        int cap = f->cap_sets ? 2 * f->cap_sets : 64;
        uint64_t *s = realloc(f->sets, (size_t)cap * (size_t)f->words * sizeof *s);
        if (!s) return -1;
        f->sets = s;
        f->cap_sets = cap;
    }
    uint64_t *dst = f->sets + (size_t)f->n_sets * (size_t)f->words;
    if (from >= 0) memcpy(dst, f->sets + (size_t)from * (size_t)f->words, (size_t)f->words * 8);
    else memset(dst, 0, (size_t)f->words * 8);
    if (add_op >= 0) dst[add_op / 64] |= (uint64_t)1 << (add_op % 64);
    return f->n_sets++;
}

/* Exact Pareto set of (bytes kept, time saved) over the subsets of the
 * stage's cacheable ops; times scaled by `scale`. */
static remat_status build_front(stage_front *f, const remat_stage_ops *so, double scale) {
    memset(f, 0, sizeof *f);
    f->exact = true;
    f->words = (so->n_ops + 63) / 64;
    if (f->words == 0) f->words = 1;
    int cap = 16;
    f->pts = malloc((size_t)cap * sizeof *f->pts);
    int s0 = f->pts ? new_set(f, -1, -1) : -1;
    if (s0 < 0) return REMAT_ENOMEM;
    f->pts[0] = (front_pt){0, 0, s0};
    f->n = 1;
    front_pt *tmp = NULL;
    for (int i = 0; i < so->n_ops; i++) {
        const remat_op_profile_entry *e = &so->ops[i];
        double ti = e->time * scale;
        if (!e->cacheable || !(ti > 0)) continue;
        /* merge pts with pts + op i, then keep the non-dominated points */
        front_pt *nt = realloc(tmp, (size_t)(2 * f->n) * sizeof *nt);
        if (!nt) goto oom;
        tmp = nt;
        for (int j = 0; j < f->n; j++) {
            tmp[j] = f->pts[j];
            tmp[f->n + j] = (front_pt){f->pts[j].c + e->cache_bytes, f->pts[j].t + ti, -1 - j};
        }
        int m = 2 * f->n;
        qsort(tmp, (size_t)m, sizeof *tmp, cmp_pt);
        int n = 0;
        double best = -1;
        for (int j = 0; j < m; j++) {
            if (!(tmp[j].t > best)) continue; /* dominated: no less bytes, no more time */
            best = tmp[j].t;
            tmp[n++] = tmp[j];
        }
        if (n > OP_MAX_FRONTIER) {
            /* thin to every other point (keeping both ends): near-optimal only */
            int w = 0;
            for (int j = 0; j < n; j++)
                if (j % 2 == 0 || j == n - 1) tmp[w++] = tmp[j];
            n = w;
            f->exact = false;
        }
        if (n > cap) {
            front_pt *np = realloc(f->pts, (size_t)n * sizeof *np);
            if (!np) goto oom;
            f->pts = np;
            cap = n;
        }
        /* materialise new sets (old indices: -1 - j of the previous list) */
        front_pt *old = malloc((size_t)f->n * sizeof *old);
        if (!old) goto oom;
        memcpy(old, f->pts, (size_t)f->n * sizeof *old);
        for (int j = 0; j < n; j++) {
            if (tmp[j].set < 0) {
                int s = new_set(f, old[-1 - tmp[j].set].set, i);
                if (s < 0) {
                    free(old);
                    goto oom;
                }
                tmp[j].set = s;
            }
            f->pts[j] = tmp[j];
        }
        f->n = n;
        free(old);
    }
    free(tmp);
    return REMAT_OK;
oom:
    free(tmp);
    front_free(f);
    return REMAT_ENOMEM;
}

/* ---- the dynamic program over stages ---------------------------------------------------- */
static uint64_t u64max(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* One option of one stage, in bytes. */
typedef struct opt_t {
    uint64_t keep, fwd, bwd; /* kept bytes, forward and backward peaks above off */
    double time;
    int pt; /* -1: store; else the Pareto point */
} opt_t;

static opt_t opt_store(const pl_model *m, int s) {
    return (opt_t){m->abar[s], m->fpa[s],
                   m->x[s + 1] + m->abar[s] + m->bp[s] + pl_grads(m, s + 1, m->L - 1),
                   m->uf[s] + m->ub[s], -1};
}

static opt_t opt_ckpt(const pl_model *m, int s, const front_pt *p, int pt) {
    uint64_t bwd = u64max(m->x[s + 1] + m->fpa[s] + p->c, m->x[s + 1] + m->abar[s] + m->bp[s]);
    double rt = m->uf[s] - p->t;
    if (rt < 0) rt = 0;
    return (opt_t){m->x[s + 1] + p->c, m->fpn[s] + p->c, pl_grads(m, s + 1, m->L - 1) + bwd,
                   m->uf[s] + rt + m->ub[s], pt};
}

static int64_t slots_up(uint64_t v, uint64_t unit) { return (int64_t)(v / unit + (v % unit != 0)); }

/* What the solver chose for each stage of the chain. */
typedef struct op_choice {
    int pt; /* -1 store, else a Pareto point of the stage's front */
} op_choice;

/* Exact peak (chain share) and time of a choice vector. */
static void eval_choice(const pl_model *m, const stage_front *const *fronts, const op_choice *ch,
                        uint64_t *peak, double *time) {
    uint64_t off = 0, pk = 0;
    double tm = 0;
    for (int s = 0; s < m->L; s++) {
        opt_t o = s < m->n_chain && ch[s].pt >= 0
                      ? opt_ckpt(m, s, &fronts[s]->pts[ch[s].pt], ch[s].pt)
                      : opt_store(m, s);
        pk = u64max(pk, off + u64max(o.fwd, o.bwd));
        off += o.keep;
        tm += o.time;
    }
    *peak = pk;
    *time = tm;
}

/* DP over stages on a grid of `unit` bytes, M slots. *found false when no
 * plan fits. */
static remat_status op_dp(const pl_model *m, const stage_front *const *fronts, uint64_t unit,
                          int64_t M, op_choice *ch, bool *found) {
    *found = false;
    int L = m->L;
    size_t W = (size_t)M + 1;
    double *cost = malloc(2 * W * sizeof *cost);
    int32_t *choice = malloc((size_t)L * W * sizeof *choice);
    if (!cost || !choice) {
        free(cost);
        free(choice);
        return REMAT_ENOMEM;
    }
    double *cur = cost, *nxt = cost + W;
    for (size_t i = 0; i < W; i++) cur[i] = INFINITY;
    cur[0] = 0;
    for (int s = 0; s < L; s++) {
        for (size_t i = 0; i < W; i++) nxt[i] = INFINITY;
        int32_t *chs = choice + (size_t)s * W;
        int n_opt = 1 + (s < m->n_chain ? fronts[s]->n : 0);
        for (int k = 0; k < n_opt; k++) {
            opt_t o = k == 0 ? opt_store(m, s) : opt_ckpt(m, s, &fronts[s]->pts[k - 1], k - 1);
            int64_t keep = slots_up(o.keep, unit), loc = slots_up(u64max(o.fwd, o.bwd), unit);
            int64_t lim = M - (keep > loc ? keep : loc);
            for (int64_t off = 0; off <= lim; off++) {
                if (cur[off] == INFINITY) continue;
                double v = cur[off] + o.time;
                if (v < nxt[off + keep]) {
                    nxt[off + keep] = v;
                    chs[off + keep] = k;
                }
            }
        }
        double *t = cur;
        cur = nxt;
        nxt = t;
    }
    int64_t best = -1;
    for (int64_t off = 0; off <= M; off++)
        if (cur[off] < INFINITY && (best < 0 || cur[off] < cur[best])) best = off;
    if (best >= 0) {
        *found = true;
        int64_t off = best;
        for (int s = L - 1; s >= 0; s--) {
            int k = choice[(size_t)s * W + (size_t)off];
            opt_t o = k == 0 ? opt_store(m, s) : opt_ckpt(m, s, &fronts[s]->pts[k - 1], k - 1);
            if (s < m->n_chain) ch[s].pt = k - 1;
            off -= slots_up(o.keep, unit);
        }
    }
    free(cost);
    free(choice);
    return REMAT_OK;
}

/* The plan of a choice vector: STORE, or CHECKPOINT(s..s) over STORE s with keep sets. */
static remat_status build_ops_plan(remat_plan **out, const pl_model *m, const remat_op_profile *ops,
                                   const stage_front *const *fronts, const op_choice *ch,
                                   const char *call) {
    pl_builder b = {0};
    for (int s = 0; s < m->n_chain; s++) {
        if (ch[s].pt < 0) {
            pl_push(&b, REMAT_PLAN_STORE, s, s, 0, -1);
        } else {
            int p = pl_push(&b, REMAT_PLAN_CHECKPOINT, s, s, 0, -1);
            pl_push(&b, REMAT_PLAN_STORE, s, s, 1, p);
        }
    }
    int rc = pl_finish(out, &b, m->n_chain, REMAT_PLAN_OPS, m, call);
    if (rc) return rc;
    remat_plan *p = *out;
    for (int s = 0; s < m->n_chain; s++) {
        if (ch[s].pt < 0) continue;
        const stage_front *f = fronts[s];
        const front_pt *pt = &f->pts[ch[s].pt];
        const remat_stage_ops *so = &ops->stages[s];
        remat_plan_stage *st = &p->stages[s];
        st->n_ops = so->n_ops;
        st->keep_bytes = (size_t)pt->c;
        double rt = m->uf[s] - pt->t;
        st->recompute_time = rt > 0 ? rt : 0;
        if (so->n_ops == 0) continue;
        st->keep = calloc((size_t)so->n_ops, 1);
        if (!st->keep) {
            remat_plan_free(p);
            *out = NULL;
            return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
        }
        const uint64_t *set = f->sets + (size_t)pt->set * (size_t)f->words;
        for (int i = 0; i < so->n_ops; i++) st->keep[i] = (uint8_t)((set[i / 64] >> (i % 64)) & 1);
    }
    uint64_t pk;
    double tm;
    eval_choice(m, fronts, ch, &pk, &tm);
    p->peak_bytes = (size_t)pl_total(m, pk);
    p->time = tm;
    return REMAT_OK;
}

static remat_status check_ops(const remat_profile *profile, const remat_op_profile *ops,
                              const char *call) {
    if (!ops || !ops->stages) return rm_err(REMAT_EINVAL, "%s: ops is NULL or empty", call);
    if (!profile) return rm_err(REMAT_EINVAL, "%s: profile is NULL", call);
    if (ops->n_stages != profile->n_stages)
        return rm_err(REMAT_EINVAL, "%s: the op profile has %d stages, the profile %d", call,
                      ops->n_stages, profile->n_stages);
    for (int k = 0; k < ops->n_stages; k++) {
        const remat_stage_ops *so = &ops->stages[k];
        if (so->n_ops < 0 || (so->n_ops > 0 && !so->ops) || so->same_as < 0 || so->same_as > k)
            return rm_err(REMAT_EINVAL, "%s: the op profile's stage %d is malformed", call, k);
    }
    return REMAT_OK;
}

/* Keeps cand if it is faster (or as fast with a lower peak) than *best. */
static void take_better(remat_plan **best, remat_plan *cand) {
    if (!cand) return;
    if (!*best || cand->time < (*best)->time ||
        (cand->time == (*best)->time && cand->peak_bytes < (*best)->peak_bytes)) {
        remat_plan_free(*best);
        *best = cand;
    } else {
        remat_plan_free(cand);
    }
}

/* The Pareto set of each distinct stage (op times scaled to the stage's profiled forward). */
static remat_status build_fronts(const pl_model *m, const remat_op_profile *ops, stage_front *dist,
                                 const stage_front **fronts, const char *call) {
    for (int s = 0; s < m->n_chain; s++) {
        const remat_stage_ops *so = &ops->stages[s];
        int src = so->same_as;
        if (src < s && ops->stages[src].n_ops == so->n_ops && m->uf[src] == m->uf[s]) {
            fronts[s] = fronts[src];
            continue;
        }
        double sum = 0;
        for (int i = 0; i < so->n_ops; i++) sum += so->ops[i].time;
        double scale = sum > 0 ? m->uf[s] / sum : 0;
        if (build_front(&dist[s], so, scale))
            return rm_err(REMAT_ENOMEM, "%s: out of memory for the Pareto sets", call);
        fronts[s] = &dist[s];
    }
    return REMAT_OK;
}

/* The smallest feasible budget (rotor's exact minimal peak, whose plan goes
 * to mb); REMAT_EINVAL naming it when budget is below. */
static remat_status check_minimum(const pl_model *m, size_t budget, pl_builder *mb,
                                  uint64_t *min_total, const char *call) {
    uint64_t minpk = 0;
    int rc = pl_min_peak(m, &minpk, mb, call);
    if (rc) return rc;
    *min_total = pl_total(m, minpk);
    if ((uint64_t)budget >= *min_total) return REMAT_OK;
    if (m->step)
        return rm_err(REMAT_EINVAL,
                      "%s: budget %zu bytes (%.2f MiB) is below the smallest whole-step peak "
                      "any plan of this chain of %d stages reaches: %" PRIu64
                      " bytes (%.2f MiB), of which %.2f MiB lie outside the chain (parameters, "
                      "optimizer state, batch)",
                      call, budget, PL_MIB(budget), m->n_chain, *min_total, PL_MIB(*min_total),
                      PL_MIB(m->fixed));
    return rm_err(REMAT_EINVAL,
                  "%s: budget %zu bytes (%.2f MiB) is below the minimum this chain of %d "
                  "stages needs: %" PRIu64 " bytes (%.2f MiB)",
                  call, budget, PL_MIB(budget), m->n_chain, *min_total, PL_MIB(*min_total));
}

/* The grids, fixed by the profile (the store-all peak), never by the budget:
 * the op-level DP's (the automatic slot count) and rotor's (its DP costs
 * L^3/6 steps per slot: coarser for long chains, ~1.2e7 steps at most). */
typedef struct op_grid {
    uint64_t unit, unit_r; /* bytes per slot */
    int64_t M, M_r;        /* slots the chain's share of the budget holds */
} op_grid;

static op_grid make_grid(const pl_model *m, uint64_t chain_budget, int slots) {
    op_grid g;
    uint64_t sa = pl_store_all_peak(m);
    int n_slots = slots > 0 ? slots : pl_auto_slots(m);
    g.unit = (sa + (uint64_t)n_slots - 1) / (uint64_t)n_slots;
    if (g.unit == 0) g.unit = 1;
    g.M = (int64_t)(chain_budget / g.unit);
    if (g.M > (int64_t)n_slots) g.M = n_slots; /* at or above store-all: nothing more to gain */
    double per_slot = (double)m->L * m->L * m->L / 6.0;
    int r_slots = slots > 0 ? slots : (int)(1.2e7 / per_slot);
    if (r_slots > n_slots) r_slots = n_slots;
    if (r_slots < 200) r_slots = 200;
    g.unit_r = (sa + (uint64_t)r_slots - 1) / (uint64_t)r_slots;
    if (g.unit_r == 0) g.unit_r = 1;
    g.M_r = (int64_t)(chain_budget / g.unit_r);
    if (g.M_r > (int64_t)r_slots) g.M_r = r_slots;
    return g;
}

/* A fixed plan (store-all, the minimal-peak plan from b) is a candidate when it fits. */
static remat_status fixed_candidate(remat_plan **best, pl_builder *b, const pl_model *m,
                                    remat_plan_kind kind, size_t budget, const char *call) {
    remat_plan *p = NULL;
    int rc = pl_finish(&p, b, m->n_chain, kind, m, call);
    if (rc) return rc;
    if (p->peak_bytes <= budget) take_better(best, p);
    else remat_plan_free(p);
    return REMAT_OK;
}

/* The op-level DP's plan (a) and rotor's (b), each when one fits its grid. */
static remat_status grid_candidates(remat_plan **best, const pl_model *m,
                                    const remat_op_profile *ops, const stage_front **fronts,
                                    op_choice *ch, const op_grid *g, size_t budget,
                                    const char *call) {
    bool found = false;
    int rc = op_dp(m, fronts, g->unit, g->M, ch, &found);
    if (rc) return rm_err(REMAT_ENOMEM, "%s: out of memory for %" PRId64 " slots", call, g->M + 1);
    if (found) {
        remat_plan *p = NULL;
        rc = build_ops_plan(&p, m, ops, fronts, ch, call);
        if (rc) return rc;
        take_better(best, p);
    }
    pl_builder b = {0};
    bool feasible = false;
    int rr = pl_rotor_on_grid(m, (uint64_t)g->M_r * g->unit_r, g->unit_r, &b, &feasible, call);
    if (!rr && feasible) return fixed_candidate(best, &b, m, REMAT_PLAN_OPTIMAL, budget, call);
    free(b.nodes); /* too big a table: the op-level candidates stand */
    return REMAT_OK;
}

remat_status remat_plan_create_ops(remat_plan **out, const remat_profile *profile,
                                   const remat_op_profile *ops, const remat_step_profile *step,
                                   size_t budget_bytes, const remat_plan_options *opts) {
    static const char *call = "remat_plan_create_ops";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    int rc = check_ops(profile, ops, call);
    if (rc) return rc;
    int slots = opts ? opts->mem_slots : 0;
    if (slots < 0) return rm_err(REMAT_EINVAL, "%s: mem_slots must be >= 0, got %d", call, slots);
    pl_model m;
    rc = step ? pl_model_init_step(&m, profile, step, call) : pl_model_init(&m, profile, call);
    if (rc) return rc;

    stage_front *dist = calloc((size_t)m.n_chain, sizeof *dist);
    const stage_front **fronts = calloc((size_t)m.L, sizeof *fronts);
    op_choice *ch = calloc((size_t)m.L, sizeof *ch);
    remat_plan *best = NULL;
    pl_builder mb = {0}, sb = {0};
    uint64_t min_total = 0;
    rc = !dist || !fronts || !ch ? rm_err(REMAT_ENOMEM, "%s: out of memory", call) : REMAT_OK;
    if (!rc) rc = build_fronts(&m, ops, dist, fronts, call);
    if (!rc) rc = check_minimum(&m, budget_bytes, &mb, &min_total, call);
    op_grid g = {0};
    if (!rc) g = make_grid(&m, (uint64_t)budget_bytes - m.fixed, slots);
    /* store everything, the fastest plan of all, when it fits; else the
     * minimal-peak plan, the op-level DP's and rotor's */
    if (!rc) rc = pl_build_store_all(&sb, m.n_chain);
    if (!rc) rc = fixed_candidate(&best, &sb, &m, REMAT_PLAN_OPS, budget_bytes, call);
    if (!rc && !best) {
        if (m.n_chain < m.L && mb.n > 0) mb.n--; /* the head's node */
        rc = fixed_candidate(&best, &mb, &m, REMAT_PLAN_MIN_MEMORY, budget_bytes, call);
        if (!rc) rc = grid_candidates(&best, &m, ops, fronts, ch, &g, budget_bytes, call);
    }
    if (!rc && !best)
        rc = rm_err(REMAT_EINVAL,
                    "%s: budget %zu bytes (%.2f MiB) fits no plan on the planner's grid of %" PRIu64
                    " bytes per slot (the smallest peak is %.2f MiB)",
                    call, budget_bytes, PL_MIB(budget_bytes), g.unit, PL_MIB(min_total));
    if (!rc) {
        best->budget_bytes = budget_bytes;
        best->min_budget_bytes = (size_t)min_total;
        best->slot_bytes = (size_t)g.unit;
        *out = best;
        best = NULL;
    }
    remat_plan_free(best);
    free(mb.nodes);
    free(sb.nodes);
    if (dist)
        for (int s = 0; s < m.n_chain; s++) front_free(&dist[s]);
    free(dist);
    free(fronts);
    free(ch);
    pl_model_free(&m);
    return rc;
}
