/*
 * src/planner/opsolve.c — the op-level planner: for each saved tensor of
 * each stage keep, recompute or offload, jointly with which stages are checkpointed,
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
 * Offload (opts->offload, ops the profile marks offloadable: a device with transfer ops):
 * an op may also go to host memory, O bytes beside C. The stage's forward
 * peaks at off + fpn + C + O (remat_plan_run waits for the copies when the
 * stage ends), it keeps x[s+1] + C, its recomputation holds C + O as a
 * keeping stage would, the copies cost max(0, O/bw - uf) + O/bw, and every
 * backward peak of a plan that offloads gets the prefetch reserve (the two
 * largest offloadable ops). The Pareto sets are then of (C, O, time saved);
 * a second DP over them is one more candidate.
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
    uint64_t c; /* cache bytes kept on the device */
    uint64_t o; /* cache bytes offloaded to host memory */
    double t;   /* forward time it saves (kept and offloaded ops) */
    int set;    /* index of its op sets (kept, offloaded) in the stage's set table */
} front_pt;

/* Pareto set of one distinct stage. */
typedef struct stage_front {
    int n;
    front_pt *pts; /* c ascending, t strictly ascending */
    int words;     /* uint64 words per op set; a point's sets are 2 * words: kept, then
                      offloaded */
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
    if (x->t != y->t) return (x->t < y->t) - (x->t > y->t); /* larger t first */
    return (x->o > y->o) - (x->o < y->o);                   /* then fewer offloaded bytes */
}

/* A new pair of op sets: a copy of `from`'s (or empty) with add_op kept (offload false)
 * or offloaded. */
static int new_set(stage_front *f, int from, int add_op, bool offload) {
    size_t w = 2 * (size_t)f->words;
    if (f->n_sets == f->cap_sets) {
        int cap = f->cap_sets ? 2 * f->cap_sets : 64;
        uint64_t *s = realloc(f->sets, (size_t)cap * w * sizeof *s);
        if (!s) return -1;
        f->sets = s;
        f->cap_sets = cap;
    }
    uint64_t *dst = f->sets + (size_t)f->n_sets * w;
    if (from >= 0) memcpy(dst, f->sets + (size_t)from * w, w * 8);
    else memset(dst, 0, w * 8);
    if (add_op >= 0) dst[(offload ? f->words : 0) + add_op / 64] |= (uint64_t)1 << (add_op % 64);
    return f->n_sets++;
}

/* Keeps the points of tmp[0..m) (sorted by cmp_pt) that no other dominates: one with no
 * more bytes kept, no more offloaded and no less time saved. Returns their count. */
static int prune(front_pt *tmp, int m, bool offload) {
    int n = 0;
    double best = -1;
    for (int j = 0; j < m; j++) {
        if (!offload) { /* o is 0 everywhere: a sweep over c */
            if (!(tmp[j].t > best)) continue;
            best = tmp[j].t;
            tmp[n++] = tmp[j];
            continue;
        }
        bool dominated = false;
        for (int q = 0; q < n && !dominated; q++)
            dominated = tmp[q].t >= tmp[j].t && tmp[q].o <= tmp[j].o;
        if (!dominated) tmp[n++] = tmp[j];
    }
    return n;
}

/* Exact Pareto set of (bytes kept, bytes offloaded, time saved) over the
 * ways to keep, offload (ops marked offloadable, when `offload`) or
 * recompute the stage's cacheable ops; times scaled by `scale`. */
static remat_status build_front(stage_front *f, const remat_stage_ops *so, double scale,
                                bool offload) {
    memset(f, 0, sizeof *f);
    f->exact = true;
    f->words = (so->n_ops + 63) / 64;
    if (f->words == 0) f->words = 1;
    int cap = 16;
    f->pts = malloc((size_t)cap * sizeof *f->pts);
    int s0 = f->pts ? new_set(f, -1, -1, false) : -1;
    if (s0 < 0) return REMAT_ENOMEM;
    f->pts[0] = (front_pt){0, 0, 0, s0};
    f->n = 1;
    front_pt *tmp = NULL;
    for (int i = 0; i < so->n_ops; i++) {
        const remat_op_profile_entry *e = &so->ops[i];
        double ti = e->time * scale;
        if (!e->cacheable || !(ti > 0)) continue;
        bool off = offload && e->offloadable;
        /* merge pts with pts + op i kept (and pts + op i offloaded), then keep the
         * non-dominated points; set -1 - j: point j kept, -1 - (n + j): offloaded */
        int ways = off ? 3 : 2;
        front_pt *nt = realloc(tmp, (size_t)(ways * f->n) * sizeof *nt);
        if (!nt) goto oom;
        tmp = nt;
        for (int j = 0; j < f->n; j++) {
            const front_pt *q = &f->pts[j];
            tmp[j] = *q;
            tmp[f->n + j] = (front_pt){q->c + e->cache_bytes, q->o, q->t + ti, -1 - j};
            if (off)
                tmp[2 * f->n + j] =
                    (front_pt){q->c, q->o + e->cache_bytes, q->t + ti, -1 - (f->n + j)};
        }
        int m = ways * f->n;
        qsort(tmp, (size_t)m, sizeof *tmp, cmp_pt);
        int n = prune(tmp, m, offload);
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
                int src = -1 - tmp[j].set, n_old = f->n;
                int s = new_set(f, old[src % n_old].set, i, src >= n_old);
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

/* Offload in the model: `reserve` is added to every backward peak of a plan
 * that offloads (the offload code prefetches up to REMAT_OFFLOAD_PREFETCH
 * entries packed earlier while it brings a stage's back: at most the two
 * largest offloadable ops' bytes), bw the host link's bytes per second. */
typedef struct off_cfg {
    uint64_t reserve;
    double bw;
} off_cfg;

/* Seconds the copies of o offloaded bytes add to a step: the copy to the
 * host runs beside the rest of the stage's forward (remat_plan_run waits
 * for it when the stage ends), the copy back is counted in full (the
 * prefetch often hides it; the model does not count on that). */
static double xfer_time(const pl_model *m, int s, uint64_t o, const off_cfg *oc) {
    if (!o) return 0;
    double one_way = (double)o / oc->bw, d2h = one_way - m->uf[s];
    return (d2h > 0 ? d2h : 0) + one_way;
}

static opt_t opt_store(const pl_model *m, int s, const off_cfg *oc) {
    return (opt_t){m->abar[s], m->fpa[s],
                   m->x[s + 1] + m->abar[s] + m->bp[s] + pl_grads(m, s + 1, m->L - 1) + oc->reserve,
                   m->uf[s] + m->ub[s], -1};
}

/* Checkpointed keeping p->c bytes and offloading p->o: the offloaded ones are
 * on the device until the stage's forward ends, and back for its
 * recomputation (which holds them as kept ones). */
static opt_t opt_ckpt(const pl_model *m, int s, const front_pt *p, int pt, const off_cfg *oc) {
    uint64_t bwd =
        u64max(m->x[s + 1] + m->fpa[s] + p->c + p->o, m->x[s + 1] + m->abar[s] + m->bp[s]);
    double rt = m->uf[s] - p->t;
    if (rt < 0) rt = 0;
    return (opt_t){m->x[s + 1] + p->c, m->fpn[s] + p->c + p->o,
                   pl_grads(m, s + 1, m->L - 1) + bwd + oc->reserve,
                   m->uf[s] + rt + m->ub[s] + xfer_time(m, s, p->o, oc), pt};
}

static int64_t slots_up(uint64_t v, uint64_t unit) { return (int64_t)(v / unit + (v % unit != 0)); }

/* What the solver chose for each stage of the chain. */
typedef struct op_choice {
    int pt; /* -1 store, else a Pareto point of the stage's front */
} op_choice;

/* Exact peak (chain share) and time of a choice vector. */
static void eval_choice(const pl_model *m, const stage_front *const *fronts, const op_choice *ch,
                        const off_cfg *oc, uint64_t *peak, double *time) {
    uint64_t off = 0, pk = 0;
    double tm = 0;
    for (int s = 0; s < m->L; s++) {
        opt_t o = s < m->n_chain && ch[s].pt >= 0
                      ? opt_ckpt(m, s, &fronts[s]->pts[ch[s].pt], ch[s].pt, oc)
                      : opt_store(m, s, oc);
        pk = u64max(pk, off + u64max(o.fwd, o.bwd));
        off += o.keep;
        tm += o.time;
    }
    *peak = pk;
    *time = tm;
}

/* DP over stages on a grid of `unit` bytes, M slots. *found false when no
 * plan fits. */
static remat_status op_dp(const pl_model *m, const stage_front *const *fronts, const off_cfg *oc,
                          uint64_t unit, int64_t M, op_choice *ch, bool *found) {
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
            opt_t o =
                k == 0 ? opt_store(m, s, oc) : opt_ckpt(m, s, &fronts[s]->pts[k - 1], k - 1, oc);
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
            opt_t o =
                k == 0 ? opt_store(m, s, oc) : opt_ckpt(m, s, &fronts[s]->pts[k - 1], k - 1, oc);
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
                                   const off_cfg *oc, const char *call) {
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
        st->offload_bytes = (size_t)pt->o;
        st->offload_time = xfer_time(m, s, pt->o, oc);
        double rt = m->uf[s] - pt->t;
        st->recompute_time = rt > 0 ? rt : 0;
        if (so->n_ops == 0) continue;
        st->keep = calloc((size_t)so->n_ops, 1);
        if (!st->keep) {
            remat_plan_free(p);
            *out = NULL;
            return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
        }
        const uint64_t *set = f->sets + (size_t)pt->set * 2 * (size_t)f->words;
        const uint64_t *off = set + f->words;
        for (int i = 0; i < so->n_ops; i++)
            st->keep[i] = (off[i / 64] >> (i % 64)) & 1   ? REMAT_OP_OFFLOAD
                          : (set[i / 64] >> (i % 64)) & 1 ? REMAT_OP_KEEP
                                                          : REMAT_OP_RECOMPUTE;
    }
    /* the prefetch reserve belongs to plans that offload something */
    const off_cfg none = {0, 1};
    bool offloads = false;
    for (int s = 0; s < m->n_chain; s++) offloads |= ch[s].pt >= 0 && fronts[s]->pts[ch[s].pt].o;
    uint64_t pk;
    double tm;
    eval_choice(m, fronts, ch, offloads ? oc : &none, &pk, &tm);
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
                                 const stage_front **fronts, bool offload, const char *call) {
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
        if (build_front(&dist[s], so, scale, offload))
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
    const off_cfg none = {0, 1};
    int rc = op_dp(m, fronts, &none, g->unit, g->M, ch, &found);
    if (rc) return rm_err(REMAT_ENOMEM, "%s: out of memory for %" PRId64 " slots", call, g->M + 1);
    if (found) {
        remat_plan *p = NULL;
        rc = build_ops_plan(&p, m, ops, fronts, ch, &none, call);
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

/* The prefetch reserve: the REMAT_OFFLOAD_PREFETCH (2) largest offloadable
 * ops' bytes; 0 when no op may be offloaded. */
static uint64_t offload_reserve(const pl_model *m, const remat_op_profile *ops) {
    uint64_t a = 0, b = 0; /* a >= b */
    for (int s = 0; s < m->n_chain; s++)
        for (int i = 0; i < ops->stages[s].n_ops; i++) {
            const remat_op_profile_entry *e = &ops->stages[s].ops[i];
            if (!e->offloadable || !e->cacheable) continue;
            uint64_t v = e->cache_bytes;
            if (v > a) {
                b = a;
                a = v;
            } else if (v > b) {
                b = v;
            }
        }
    return a + b;
}

/* Plan space (a) with offload: every op the profile marks offloadable may
 * also go to host memory. Its own fronts and DP, with the prefetch reserve
 * in every backward peak; a candidate like the others. */
static remat_status offload_candidate(remat_plan **best, const pl_model *m,
                                      const remat_op_profile *ops, op_choice *ch, const op_grid *g,
                                      const char *call) {
    off_cfg oc = {offload_reserve(m, ops),
                  ops->host_bytes_per_s > 0 ? ops->host_bytes_per_s : REMAT_HOST_LINK_BYTES_PER_S};
    bool any = false;
    for (int s = 0; s < m->n_chain && !any; s++)
        for (int i = 0; i < ops->stages[s].n_ops && !any; i++)
            any = ops->stages[s].ops[i].offloadable && ops->stages[s].ops[i].cacheable &&
                  ops->stages[s].ops[i].cache_bytes > 0;
    if (!any) return REMAT_OK;
    stage_front *dist = calloc((size_t)m->n_chain, sizeof *dist);
    const stage_front **fronts = calloc((size_t)m->L, sizeof *fronts);
    int rc = !dist || !fronts ? rm_err(REMAT_ENOMEM, "%s: out of memory", call) : REMAT_OK;
    if (!rc) rc = build_fronts(m, ops, dist, fronts, true, call);
    bool found = false;
    if (!rc && op_dp(m, fronts, &oc, g->unit, g->M, ch, &found))
        rc = rm_err(REMAT_ENOMEM, "%s: out of memory for %" PRId64 " slots", call, g->M + 1);
    if (!rc && found) {
        remat_plan *p = NULL;
        rc = build_ops_plan(&p, m, ops, fronts, ch, &oc, call);
        if (!rc) take_better(best, p);
    }
    if (dist)
        for (int s = 0; s < m->n_chain; s++) front_free(&dist[s]);
    free(dist);
    free(fronts);
    return rc;
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
    if (!rc) rc = build_fronts(&m, ops, dist, fronts, false, call);
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
        if (!rc && opts && opts->offload) rc = offload_candidate(&best, &m, ops, ch, &g, call);
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
