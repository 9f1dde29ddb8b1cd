/*
 * src/planner/solve.c — the optimal schedule under a byte budget: a dynamic
 * program in the style of rotor (Beaumont, Eyraud-Dubois, Herrmann, Joly,
 * Shilova 2019), over sub-chains [s..t] and memory m in slots.
 *
 * C(s, t, m) = least time to run forward and backward of stages s..t with
 * their input kept outside m and the output gradient D(t) inside it:
 *   s == t          uf[s] + ub[s]                      (store, then backward)
 *   store s         uf[s] + ub[s] + C(s+1, t, m - abar[s])
 *   checkpoint j    uf[s..j-1] + C(j, t, m - x[j]) + C(s, j-1, m)
 *                   (run s..j-1 keeping nothing but a_{j-1}; handle j..t;
 *                    then recompute s..j-1 following its own sub-plan)
 * each option subject to the peaks of the steps it adds (see model.c).
 * The peak of a plan is a max of terms each of which the recursion checks
 * against the memory it passes down, so the table is exact for the model
 * at slot granularity; sizes are rounded up to slots, so a plan that fits
 * in slots fits in bytes.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "planner_internal.h"

#define PL_DEFAULT_SLOTS 500 /* least slots of the automatic grid (rotor's default) */
#define PL_MAX_AUTO_SLOTS 4000
/* Largest DP table we are willing to allocate. */
#define PL_MAX_TABLE_BYTES ((size_t)256 << 20)
/* The refined grids (slots << 2, << 4) stay within what the automatic grid
 * allows itself (auto_slots): tables under 64 MiB, ~2e8 steps. */
#define PL_MAX_REFINED_TABLE_BYTES ((size_t)64 << 20)
#define PL_MAX_REFINED_WORK 2e8

remat_status remat_plan_min_budget(const remat_profile *profile, size_t *bytes) {
    static const char *call = "remat_plan_min_budget";
    if (!bytes) return rm_err(REMAT_EINVAL, "%s: bytes is NULL", call);
    *bytes = 0;
    pl_model m;
    int rc = pl_model_init(&m, profile, call);
    if (rc) return rc;
    uint64_t pk;
    rc = pl_min_peak(&m, &pk, NULL, call);
    pl_model_free(&m);
    if (!rc) *bytes = (size_t)pk;
    return rc;
}

/* ---- the slot dynamic program ------------------------------------------------------ */
typedef struct dp_tab {
    int L;
    int64_t M;                     /* memory slots 0..M */
    double *cost;                  /* [pl_tri(s,t) * (M+1) + m] */
    int32_t *choice;               /* -1 infeasible, 0 store, j > s checkpoint s..j-1 */
    int64_t *X, *A, *FA, *FN, *BP; /* model in slots */
    const uint64_t *gp;            /* parameter-gradient prefix sums, bytes */
    uint64_t unit;                 /* bytes per slot */
    bool down;                     /* sizes rounded down: a lower bound, not a plan */
} dp_tab;

/* v bytes in slots: rounded up (a plan that fits in slots fits in bytes) or, for a
 * lower bound, down (every plan that fits in bytes fits in slots); M + 1 when they
 * never fit. */
static inline int64_t dp_slots(const dp_tab *d, uint64_t v) {
    uint64_t q = v / d->unit + (!d->down && v % d->unit != 0);
    return q > (uint64_t)d->M ? d->M + 1 : (int64_t)q;
}

/* Gradients of stages a..b in slots. */
static inline int64_t dp_grads(const dp_tab *d, int a, int b) {
    return a > b ? 0 : dp_slots(d, d->gp[b + 1] - d->gp[a]);
}

static inline size_t cell(const dp_tab *d, int s, int t, int64_t m) {
    return pl_tri(s, t) * (size_t)(d->M + 1) + (size_t)m;
}

/* Segment s..t in m slots with stage s stored (its residuals kept until
 * its backward): sets *best, *ch = 0 when that fits. */
static inline void dp_try_store(const dp_tab *d, const pl_model *md, int s, int t, int64_t m,
                                double *best, int32_t *ch) {
    if (s == t) {
        *best = md->uf[s] + md->ub[s];
        *ch = 0;
    } else if (m >= d->A[s]) {
        size_t r = cell(d, s + 1, t, m - d->A[s]);
        if (d->choice[r] >= 0) {
            *best = md->uf[s] + md->ub[s] + d->cost[r];
            *ch = 0;
        }
    }
}

/* Segment s..t in m slots with s..j-1 checkpointed (j = s+1..t; D: the
 * slots of the segment's output): keeps the cheapest j in *best, *ch. */
static inline void dp_try_checkpoint(const dp_tab *d, const pl_model *md, int s, int t, int64_t m,
                                     int64_t D, double *best, int32_t *ch) {
    double fsum = md->uf[s];
    for (int j = s + 1; j <= t; j++) {
        /* [j..t] first, keeping the checkpoint; then [s..j-1] is recomputed
         * and run backward with the gradients of j..t live */
        int64_t g = dp_grads(d, j, t);
        if (m >= d->X[j] && m >= g) {
            size_t r = cell(d, j, t, m - d->X[j]), l = cell(d, s, j - 1, m - g);
            if (d->choice[r] >= 0 && d->choice[l] >= 0) {
                /* the recomputation of s..j-1 stops at stage j-1's last save */
                double c = fsum + d->cost[r] + d->cost[l] - md->ufree[j - 1];
                if (*ch < 0 || c < *best) {
                    *best = c;
                    *ch = j;
                }
            }
        }
        /* stage j must also run keeping nothing to go further */
        if (j < t && D + d->X[j] + d->FN[j] > m) break;
        fsum += md->uf[j];
    }
}

static void dp_fill(dp_tab *d, const pl_model *md) {
    int L = d->L;
    int64_t M = d->M;
    for (int len = 1; len <= L; len++) {
        for (int s = 0; s + len - 1 < L; s++) {
            int t = s + len - 1;
            int64_t D = t < L - 1 ? d->X[t + 1] : 0;
            int64_t need_store = D + d->FA[s];
            int64_t need_bwd = d->X[s + 1] + d->A[s] + d->BP[s] + dp_grads(d, s + 1, t);
            if (need_bwd > need_store) need_store = need_bwd;
            for (int64_t m = 0; m <= M; m++) {
                double best = 0;
                int32_t ch = -1;
                if (m >= need_store) dp_try_store(d, md, s, t, m, &best, &ch);
                if (s < t && m >= D + d->FN[s]) dp_try_checkpoint(d, md, s, t, m, D, &best, &ch);
                size_t c = cell(d, s, t, m);
                d->cost[c] = best;
                d->choice[c] = ch;
            }
        }
    }
}

static void dp_recon(const dp_tab *d, int s, int t, int64_t m, int depth, int parent,
                     pl_builder *b) {
    while (s <= t && !b->failed) {
        int32_t ch = d->choice[cell(d, s, t, m)];
        if (ch == 0) {
            pl_push(b, REMAT_PLAN_STORE, s, s, depth, parent);
            m -= d->A[s];
            s++;
        } else {
            int p = pl_push(b, REMAT_PLAN_CHECKPOINT, s, ch - 1, depth, parent);
            dp_recon(d, s, ch - 1, m - dp_grads(d, ch, t), depth + 1, p, b);
            m -= d->X[ch];
            s = ch;
        }
    }
}

static void dp_free(dp_tab *d) {
    free(d->cost);
    free(d->choice);
    free(d->X); /* and A, FA, FN, BP: one block */
}

/* The slot DP with M slots of `unit` bytes (M * unit <= the chain's share):
 * *feasible tells whether a plan fits; then *time (if not NULL) is its
 * predicted time and, when b is not NULL, the plan is appended to b. */
static remat_status dp_solve_unit(const pl_model *md, int64_t M, uint64_t unit, bool down,
                                  pl_builder *b, bool *feasible, double *time, const char *call) {
    *feasible = false;
    int L = md->L;
    dp_tab d = {.L = L, .M = M, .gp = md->gp, .unit = unit, .down = down};
    size_t n_tri = pl_tri(0, L);
    size_t cells = n_tri * (size_t)(d.M + 1);
    if (cells / (size_t)(d.M + 1) != n_tri || cells > PL_MAX_TABLE_BYTES / 12)
        return rm_err(REMAT_ENOMEM,
                      "%s: the planning tables for %d stages and %" PRId64
                      " memory slots would take %.0f MiB; use fewer slots (remat_plan_options)",
                      call, L, d.M + 1, PL_MIB((double)n_tri * (double)(d.M + 1) * 12.0));
    d.cost = calloc(cells, sizeof *d.cost);
    d.choice = calloc(cells, sizeof *d.choice);
    d.X = malloc((5 * (size_t)L + 1) * sizeof(int64_t)); /* X[L + 1], then A, FA, FN, BP [L] */
    if (d.X) {
        d.A = d.X + L + 1;
        d.FA = d.A + L;
        d.FN = d.FA + L;
        d.BP = d.FN + L;
    }
    if (!d.cost || !d.choice || !d.X) {
        dp_free(&d);
        return rm_err(REMAT_ENOMEM, "%s: out of memory for the planning tables (%.0f MiB)", call,
                      PL_MIB((double)cells * 12.0));
    }
    for (int k = 0; k <= L; k++) d.X[k] = dp_slots(&d, md->x[k]);
    for (int k = 0; k < L; k++) {
        d.A[k] = dp_slots(&d, md->abar[k]);
        d.FA[k] = dp_slots(&d, md->fpa[k]);
        d.FN[k] = dp_slots(&d, md->fpn[k]);
        d.BP[k] = dp_slots(&d, md->bp[k]);
    }
    dp_fill(&d, md);
    size_t top = cell(&d, 0, L - 1, d.M);
    if (d.choice[top] >= 0) {
        *feasible = true;
        if (time) *time = d.cost[top];
        if (b) dp_recon(&d, 0, L - 1, d.M, 0, -1, b);
    }
    dp_free(&d);
    return REMAT_OK;
}

/* remat_plan_create's grid for a chain share of `budget` bytes: `slots` slots
 * of budget / slots bytes (rounded down, at least 1; fewer slots when the
 * budget has fewer bytes). A larger budget only widens the slots, so every
 * size takes no more of them and the plans that fit can only grow: the
 * predicted time never rises with the budget on one slot count. */
static remat_status dp_solve(const pl_model *md, uint64_t budget, int64_t slots, pl_builder *b,
                             bool *feasible, uint64_t *unit_out, const char *call) {
    uint64_t unit = budget / (uint64_t)slots;
    if (unit == 0) unit = 1;
    int64_t M = (int64_t)(budget / unit) < slots ? (int64_t)(budget / unit) : slots;
    *unit_out = unit;
    return dp_solve_unit(md, M, unit, false, b, feasible, NULL, call);
}

/* A whole-step model's plans end with the head's STORE node (the head is
 * never checkpointed, so it is the last node in pre-order): the plan the
 * user runs covers the chain only. */
static void strip_head(pl_builder *b, const pl_model *m) {
    if (m->n_chain < m->L && b->n > 0 && !b->failed) b->n--;
}

remat_status pl_rotor_on_grid(const pl_model *m, uint64_t chain_budget, uint64_t unit,
                              pl_builder *b, bool *feasible, const char *call) {
    int rc = dp_solve_unit(m, (int64_t)(chain_budget / unit), unit, false, b, feasible, NULL, call);
    if (!rc && *feasible) strip_head(b, m);
    return rc;
}

remat_status pl_rotor_level(const pl_model *m, uint64_t chain_budget, int64_t slots, pl_builder *b,
                            bool *feasible, const char *call) {
    uint64_t unit;
    int rc = dp_solve(m, chain_budget, slots, b, feasible, &unit, call);
    if (!rc && *feasible) strip_head(b, m);
    return rc;
}

remat_status pl_rotor_bound(const pl_model *m, uint64_t chain_budget, uint64_t unit, double *time,
                            bool *feasible, const char *call) {
    *time = 0;
    return dp_solve_unit(m, (int64_t)(chain_budget / unit), unit, true, NULL, feasible, time, call);
}

bool pl_level_fits(const pl_model *m, int64_t slots) {
    double n_tri = (double)m->L * (m->L + 1) / 2, work = n_tri * m->L / 3;
    return n_tri * 12.0 * (double)(slots + 1) <= (double)PL_MAX_REFINED_TABLE_BYTES &&
           work * (double)slots <= PL_MAX_REFINED_WORK;
}

static int auto_slots(const pl_model *m);
int pl_auto_slots(const pl_model *m) { return auto_slots(m); }

static int auto_slots(const pl_model *m) {
    /* A finer grid wastes less of the budget to rounding; keep the tables
     * under 64 MiB and the work under ~2e8 steps. */
    double n_tri = (double)m->L * (m->L + 1) / 2, work = n_tri * m->L / 3;
    double s_mem = (double)(64 << 20) / (n_tri * 12), s_time = 2e8 / work;
    double s = s_mem < s_time ? s_mem : s_time;
    return s > PL_MAX_AUTO_SLOTS  ? PL_MAX_AUTO_SLOTS
           : s < PL_DEFAULT_SLOTS ? PL_DEFAULT_SLOTS
                                  : (int)s;
}

static remat_status create_from_model(remat_plan **out, const pl_model *m, size_t budget_bytes,
                                      int slots, const char *call) {
    if (slots == 0) slots = auto_slots(m);
    uint64_t minpk = 0;
    pl_builder b = {0};
    int rc = pl_min_peak(m, &minpk, &b, call);
    if (rc) goto done;
    uint64_t min_total = pl_total(m, minpk);
    if ((uint64_t)budget_bytes < min_total) {
        if (m->step)
            rc = rm_err(REMAT_EINVAL,
                        "%s: budget %zu bytes (%.2f MiB) is below the smallest whole-step peak "
                        "any plan of this chain of %d stages reaches: %" PRIu64
                        " bytes (%.2f MiB), of which %.2f MiB lie outside the chain (parameters, "
                        "optimizer state, batch)",
                        call, budget_bytes, PL_MIB(budget_bytes), m->n_chain, min_total,
                        PL_MIB(min_total), PL_MIB(m->fixed));
        else
            rc = rm_err(REMAT_EINVAL,
                        "%s: budget %zu bytes (%.2f MiB) is below the minimum this chain of %d "
                        "stages needs: %" PRIu64 " bytes (%.2f MiB)",
                        call, budget_bytes, PL_MIB(budget_bytes), m->n_chain, min_total,
                        PL_MIB(min_total));
        goto done;
    }
    /* the chain's share: what is left beside the fixed bytes */
    uint64_t chain_budget = (uint64_t)budget_bytes - m->fixed;
    remat_plan_kind kind = REMAT_PLAN_MIN_MEMORY;
    uint64_t unit = 0;
    /* Storing everything is optimal whenever it fits: no need for slots
     * (whose rounding could make it look infeasible at the edge). */
    {
        pl_builder sa = {0};
        remat_plan *tmp = NULL;
        rc = pl_build_store_all(&sa, m->n_chain);
        if (!rc) rc = pl_finish(&tmp, &sa, m->n_chain, REMAT_PLAN_OPTIMAL, m, call);
        if (rc) goto done;
        if (tmp->peak_bytes <= budget_bytes) {
            tmp->budget_bytes = budget_bytes;
            tmp->min_budget_bytes = (size_t)min_total;
            free(b.nodes);
            *out = tmp;
            return REMAT_OK;
        }
        remat_plan_free(tmp);
    }
    /* The slot DP; if rounding makes a feasible budget look infeasible,
     * refine the grid (4 and 16 times the slots, while pl_level_fits), then
     * settle for the minimal-peak plan. */
    for (int attempt = 0; attempt < PL_GRID_LEVELS; attempt++) {
        pl_builder opt = {0};
        bool feasible = false;
        int64_t sl = (int64_t)slots << (2 * attempt);
        if (attempt > 0 && !pl_level_fits(m, sl)) break;
        rc = dp_solve(m, chain_budget, sl, &opt, &feasible, &unit, call);
        if (rc) {
            free(opt.nodes);
            if (attempt == 0) goto done;
            rc = REMAT_OK; /* a finer grid does not fit: keep the fallback */
            break;
        }
        if (feasible) {
            free(b.nodes);
            b = opt;
            kind = REMAT_PLAN_OPTIMAL;
            break;
        }
        free(opt.nodes);
    }
    strip_head(&b, m);
    rc = pl_finish(out, &b, m->n_chain, kind, m, call);
    if (!rc) {
        (*out)->budget_bytes = budget_bytes;
        (*out)->slot_bytes = (size_t)unit;
        (*out)->min_budget_bytes = (size_t)min_total;
    }
done:
    free(b.nodes);
    return rc;
}

/* remat_plan_create_ex (step NULL) and remat_plan_create_step. */
static remat_status create_checked(remat_plan **out, const remat_profile *profile,
                                   const remat_step_profile *step, bool with_step,
                                   size_t budget_bytes, const remat_plan_options *opts,
                                   const char *call) {
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    int slots = opts ? opts->mem_slots : 0;
    if (slots < 0) return rm_err(REMAT_EINVAL, "%s: mem_slots must be >= 0, got %d", call, slots);
    pl_model m;
    int rc =
        with_step ? pl_model_init_step(&m, profile, step, call) : pl_model_init(&m, profile, call);
    if (rc) return rc;
    rc = create_from_model(out, &m, budget_bytes, slots, call);
    pl_model_free(&m);
    return rc;
}

remat_status remat_plan_create_ex(remat_plan **out, const remat_profile *profile,
                                  size_t budget_bytes, const remat_plan_options *opts) {
    return create_checked(out, profile, NULL, false, budget_bytes, opts, "remat_plan_create");
}

remat_status remat_plan_create_step(remat_plan **out, const remat_profile *profile,
                                    const remat_step_profile *step, size_t budget_bytes,
                                    const remat_plan_options *opts) {
    return create_checked(out, profile, step, true, budget_bytes, opts, "remat_plan_create_step");
}

remat_status remat_plan_create(remat_plan **out, const remat_profile *profile,
                               size_t budget_bytes) {
    return remat_plan_create_ex(out, profile, budget_bytes, NULL);
}
