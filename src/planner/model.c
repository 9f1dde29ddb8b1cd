/*
 * src/planner/model.c — the planner's cost/memory model, plan trees
 * (construction, validation, evaluation), the least peak the model allows
 * (which every finished plan reports), the printers and the simple plans
 * (store-all, PyTorch's checkpoint_sequential).
 *
 * Model (bytes; see include/remat/planner.h): processing a sub-chain
 * [s..t] whose input is kept outside, with the output gradient D(t) live:
 *   store s:   max(D + fpa[s], x[s+1] + abar[s] + bp[s], abar[s] + rest)
 *   ckpt s..e: max(D + fpn[s], D + x[k] + fpn[k] for s < k <= e,
 *                  x[e+1] + rest, children processed with D(e))
 * where `rest` is the peak of the siblings that follow. Time: every stage's
 * forward runs 1 + depth times, its backward once.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "planner_internal.h"

/* ---- model ------------------------------------------------------------------------ */
static uint64_t u64max(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Fills stage k of m from one profiled stage (with_grads: its parameter
 * gradients count). */
static remat_status model_stage(pl_model *m, int k, const remat_stage_profile *s, bool with_grads,
                                const char *what, const char *call) {
    if (!(s->fwd_time >= 0) || !(s->bwd_time >= 0) || isinf(s->fwd_time) || isinf(s->bwd_time))
        return rm_err(REMAT_EINVAL, "%s: %s has invalid times (fwd %g s, bwd %g s)", call, what,
                      s->fwd_time, s->bwd_time);
    m->x[k + 1] = s->output_bytes;
    m->abar[k] = (uint64_t)s->output_bytes + s->saved_bytes;
    /* A peak below what the step leaves behind would be a measurement
     * glitch; the model never assumes less than what stays live. */
    m->fpa[k] = u64max(s->fwd_peak, m->abar[k]);
    m->fpn[k] = u64max(s->fwd_peak_nosave, s->output_bytes);
    m->bp[k] = s->bwd_peak;
    m->gp[k + 1] = m->gp[k] + (with_grads ? s->grad_bytes : 0);
    m->uf[k] = s->fwd_time;
    m->ub[k] = s->bwd_time;
    /* a value outside [0, fwd_time] (a hand-made profile) is clamped: the recomputation
     * never runs less than nothing nor more than the forward */
    double fr = s->recompute_free_time;
    m->ufree[k] = fr > 0 && !isinf(fr) ? (fr < s->fwd_time ? fr : s->fwd_time) : 0;
    return REMAT_OK;
}

/* n_extra: stages after the profile's (the head). */
static remat_status model_alloc(pl_model *m, const remat_profile *p, int n_extra,
                                const char *call) {
    memset(m, 0, sizeof *m);
    if (!p) return rm_err(REMAT_EINVAL, "%s: profile is NULL", call);
    if (p->n_stages < 1 || !p->stages)
        return rm_err(REMAT_EINVAL, "%s: profile has no stages (n_stages %d)", call, p->n_stages);
    int L = p->n_stages + n_extra;
    m->L = L;
    m->n_chain = p->n_stages;
    /* One zeroed block holds the nine per-stage arrays, n eight-byte slots each (only x
     * and gp use the last), in the struct's order; pl_model_free frees it through m->x. */
    size_t n = (size_t)L + 1;
    uint64_t *u = calloc(9 * n, sizeof *u);
    if (!u) return rm_err(REMAT_ENOMEM, "%s: out of memory for %d stages", call, L);
    m->x = u, m->abar = u + n, m->fpa = u + 2 * n, m->fpn = u + 3 * n;
    m->bp = u + 4 * n, m->gp = u + 5 * n;
    double *d = (double *)(u + 6 * n);
    m->uf = d, m->ub = d + n, m->ufree = d + 2 * n;
    m->x[0] = p->stages[0].input_bytes;
    return REMAT_OK;
}

static remat_status model_fill(pl_model *m, const remat_profile *p, bool with_grads,
                               const char *call) {
    for (int k = 0; k < p->n_stages; k++) {
        char what[32];
        snprintf(what, sizeof what, "stage %d", k);
        int rc = model_stage(m, k, &p->stages[k], with_grads, what, call);
        if (rc) {
            pl_model_free(m);
            return rc;
        }
    }
    return REMAT_OK;
}

remat_status pl_model_init(pl_model *m, const remat_profile *p, const char *call) {
    int rc = model_alloc(m, p, 0, call);
    return rc ? rc : model_fill(m, p, false, call);
}

remat_status pl_model_init_step(pl_model *m, const remat_profile *p, const remat_step_profile *st,
                                const char *call) {
    if (!st) return rm_err(REMAT_EINVAL, "%s: step is NULL", call);
    int rc = model_alloc(m, p, 1, call);
    if (!rc) rc = model_fill(m, p, true, call);
    if (!rc) rc = model_stage(m, m->L - 1, &st->head, true, "the head", call);
    if (rc) {
        pl_model_free(m);
        return rc;
    }
    m->step = true;
    m->fixed = st->fixed_bytes;
    m->tail = st->tail_peak;
    return REMAT_OK;
}

uint64_t pl_store_all_peak(const pl_model *m) {
    /* top level: no output gradient until the loss */
    uint64_t sa = 0, off = 0;
    for (int k = 0; k < m->L; k++) {
        sa = u64max(sa, off + m->fpa[k]);
        sa = u64max(sa, off + m->x[k + 1] + m->abar[k] + m->bp[k] + pl_grads(m, k + 1, m->L - 1));
        off += m->abar[k];
    }
    return sa;
}

uint64_t pl_total(const pl_model *m, uint64_t chain_peak) {
    if (!m->step) return chain_peak;
    return m->fixed + u64max(chain_peak, pl_grads(m, 0, m->L - 1) + m->x[0] + m->tail);
}

void pl_model_free(pl_model *m) {
    if (!m) return;
    free(m->x); /* the block of all nine arrays (model_alloc) */
    memset(m, 0, sizeof *m);
}

/* ---- builder ---------------------------------------------------------------------- */
int pl_push(pl_builder *b, remat_plan_op op, int first, int last, int depth, int parent) {
    if (b->failed) return -1;
    remat_plan_node *nn = rm_grow(b->nodes, &b->cap, b->n, 16, sizeof *nn);
    if (!nn) {
        b->failed = 1;
        return -1;
    }
    b->nodes = nn;
    b->nodes[b->n] = (remat_plan_node){op, first, last, depth, parent};
    return b->n++;
}

remat_status pl_build_store_all(pl_builder *b, int n_stages) {
    for (int k = 0; k < n_stages; k++) pl_push(b, REMAT_PLAN_STORE, k, k, 0, -1);
    return b->failed ? REMAT_ENOMEM : REMAT_OK;
}

/* next[i]: index just past node i's subtree (nodes are in pre-order). */
static int *subtree_ends(const remat_plan_node *nodes, int n) {
    int *next = malloc((size_t)(n > 0 ? n : 1) * sizeof *next);
    if (!next) return NULL;
    for (int i = n - 1; i >= 0; i--) {
        int j = i + 1;
        if (nodes[i].op == REMAT_PLAN_CHECKPOINT)
            while (j < n && nodes[j].parent == i) j = next[j];
        next[i] = j;
    }
    return next;
}

/* An op-level keep set (plan->stages[k].keep) runs as the selective checkpoint of a stage
 * checkpointed alone at the top level. Anywhere else it is refused rather than ignored or
 * run unmodelled: nested in a checkpointed segment, the stage's selective region caches its
 * kept ops (exact or bf16) in the segment's first forward and holds them through the whole
 * segment until its own backward, and the segment's recomputation runs the stage's
 * checkpoint again with a region of its own; the planner's model counts none of it. */
static remat_status validate_keep(const remat_plan *p, const remat_plan_node *nd,
                                  const char *call) {
    const remat_plan_stage *st = &p->stages[nd->first];
    int kept = 0, lossy = 0;
    for (int i = 0; st->keep && i < st->n_ops; i++) {
        kept += st->keep[i] != REMAT_OP_RECOMPUTE;
        lossy += st->keep[i] == REMAT_OP_KEEP_BF16;
    }
    const remat_plan_node *up = nd->parent >= 0 ? &p->nodes[nd->parent] : NULL;
    if (!kept || (up && up->depth == 0 && up->first == up->last)) return REMAT_OK;
    char what[48] = "";
    if (lossy) snprintf(what, sizeof what, " (%d of them as bf16)", lossy);
    if (!up)
        return rm_err(REMAT_EINVAL,
                      "%s: stage %d is stored (it keeps everything) but its keep set names %d "
                      "ops%s: op-level keep sets apply only to a stage checkpointed alone at the "
                      "top level of the plan",
                      call, nd->first, kept, what);
    return rm_err(REMAT_EINVAL,
                  "%s: stage %d keeps %d ops%s inside the checkpointed segment of stages %d-%d%s: "
                  "op-level keep sets, exact or lossy, apply only to a stage "
                  "checkpointed alone at the top level of the plan (nested, the kept tensors "
                  "would stay from the segment's first forward to the stage's backward, which no "
                  "budget counts); clear "
                  "stages[%d].keep or make the stage a top-level checkpoint",
                  call, nd->first, kept, what, up->first, up->last,
                  up->depth ? ", itself nested in another" : "", nd->first);
}

static remat_status validate_level(const remat_plan *p, const int *next, int i, int end, int s,
                                   int t, int depth, int parent, const char *call) {
    int cur = s;
    if (i >= end)
        return rm_err(REMAT_EINVAL, "%s: plan node %d (checkpoint of stages %d-%d) has no children",
                      call, parent, s, t);
    for (; i < end; i = next[i]) {
        const remat_plan_node *nd = &p->nodes[i];
        if (nd->parent != parent || nd->depth != depth || nd->first != cur ||
            nd->last < nd->first || nd->last > t ||
            (nd->op != REMAT_PLAN_STORE && nd->op != REMAT_PLAN_CHECKPOINT) ||
            (nd->op == REMAT_PLAN_STORE && nd->last != nd->first) || next[i] > end)
            return rm_err(REMAT_EINVAL,
                          "%s: malformed plan: node %d (op %d, stages %d-%d, depth %d, parent %d) "
                          "where stage %d at depth %d under node %d was expected",
                          call, i, (int)nd->op, nd->first, nd->last, nd->depth, nd->parent, cur,
                          depth, parent);
        if (nd->op == REMAT_PLAN_CHECKPOINT) {
            int rc =
                validate_level(p, next, i + 1, next[i], nd->first, nd->last, depth + 1, i, call);
            if (rc) return rc;
        } else {
            int rc = validate_keep(p, nd, call);
            if (!rc && p->stages[nd->first].store_bf16 && depth > 0)
                rc = rm_err(REMAT_EINVAL,
                            "%s: stage %d is marked stored as bf16 (store_bf16) inside a "
                            "checkpointed segment (node %d): only a stage stored at the top "
                            "level of the plan runs under the bf16 hooks",
                            call, nd->first, parent);
            if (rc) return rc;
        }
        cur = nd->last + 1;
    }
    if (cur != t + 1)
        return rm_err(REMAT_EINVAL, "%s: malformed plan: stages %d-%d are not covered", call, cur,
                      t);
    return REMAT_OK;
}

remat_status pl_validate(const remat_plan *plan, const char *call) {
    if (!plan) return rm_err(REMAT_EINVAL, "%s: plan is NULL", call);
    if (plan->n_stages < 1 || plan->n_nodes < 1 || !plan->nodes || !plan->stages)
        return rm_err(REMAT_EINVAL, "%s: plan is empty (%d stages, %d nodes)", call, plan->n_stages,
                      plan->n_nodes);
    int *next = subtree_ends(plan->nodes, plan->n_nodes);
    if (!next) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    int rc = validate_level(plan, next, 0, plan->n_nodes, 0, plan->n_stages - 1, 0, -1, call);
    free(next);
    return rc;
}

/* Peak of the sibling list starting at node i (up to `end`) covering stages
 * up to t, relative to the bytes live when the level starts. */
static uint64_t level_peak(const remat_plan_node *nodes, const int *next, const pl_model *m, int i,
                           int end, int t) {
    uint64_t D = pl_dout(m, t), off = 0, peak = 0;
    for (; i < end; i = next[i]) {
        const remat_plan_node *nd = &nodes[i];
        int s = nd->first;
        if (nd->op == REMAT_PLAN_STORE) {
            peak = u64max(peak, off + D + m->fpa[s]);
            peak = u64max(peak, off + m->x[s + 1] + m->abar[s] + m->bp[s] + pl_grads(m, s + 1, t));
            off += m->abar[s];
        } else {
            int e = nd->last;
            uint64_t f = D + m->fpn[s];
            for (int k = s + 1; k <= e; k++) f = u64max(f, D + m->x[k] + m->fpn[k]);
            peak = u64max(peak, off + f);
            /* its recomputation and backward come after those of the stages
             * behind it, whose parameter gradients are then live */
            peak = u64max(peak, off + pl_grads(m, e + 1, t) +
                                    level_peak(nodes, next, m, i + 1, next[i], e));
            off += m->x[e + 1];
        }
    }
    return peak;
}

int pl_eval(const remat_plan *plan, const pl_model *m, uint64_t *peak, double *time) {
    if (plan->n_stages != m->n_chain) return -1;
    /* a whole-step model ends with the head, stored at the top level */
    int n = plan->n_nodes + (m->L - m->n_chain);
    remat_plan_node *nodes = malloc((size_t)n * sizeof *nodes);
    int *next = NULL;
    if (!nodes) return -1;
    memcpy(nodes, plan->nodes, (size_t)plan->n_nodes * sizeof *nodes);
    for (int k = m->n_chain, i = plan->n_nodes; k < m->L; k++, i++)
        nodes[i] = (remat_plan_node){REMAT_PLAN_STORE, k, k, 0, -1};
    next = subtree_ends(nodes, n);
    if (!next) {
        free(nodes);
        return -1;
    }
    *peak = pl_total(m, level_peak(nodes, next, m, 0, n, m->L - 1));
    free(next);
    free(nodes);
    double tm = 0;
    for (int k = 0; k < m->L; k++)
        tm += (k < m->n_chain ? plan->stages[k].n_forward : 1) * m->uf[k] + m->ub[k];
    /* each checkpoint's recomputation stops at its last save: the last stage it
     * recomputes (stored there: rotor's segments end with a stored stage) skips its
     * recompute_free ops */
    for (int i = 0; i < plan->n_nodes; i++)
        if (plan->nodes[i].op == REMAT_PLAN_CHECKPOINT) tm -= m->ufree[plan->nodes[i].last];
    *time = tm;
    return 0;
}

/* ---- minimal peak (exact bytes) --------------------------------------------------- */
typedef struct mp_tab {
    uint64_t *peak;
    double *time;
    int *choice; /* 0: store s; j > s: checkpoint s..j-1 */
} mp_tab;

static bool better(uint64_t p, double t, uint64_t bp, double bt) {
    return p < bp || (p == bp && t < bt);
}

static void mp_recon(const mp_tab *tb, int s, int t, int depth, int parent, pl_builder *b) {
    while (s <= t && !b->failed) {
        int ch = tb->choice[pl_tri(s, t)];
        if (ch == 0) {
            pl_push(b, REMAT_PLAN_STORE, s, s, depth, parent);
            s++;
        } else {
            int p = pl_push(b, REMAT_PLAN_CHECKPOINT, s, ch - 1, depth, parent);
            mp_recon(tb, s, ch - 1, depth + 1, p, b);
            s = ch;
        }
    }
}

remat_status pl_min_peak(const pl_model *m, uint64_t *peak, pl_builder *b, const char *call) {
    int L = m->L;
    size_t n = pl_tri(0, L);
    mp_tab tb = {calloc(n, sizeof(uint64_t)), calloc(n, sizeof(double)), calloc(n, sizeof(int))};
    if (!tb.peak || !tb.time || !tb.choice) {
        free(tb.peak);
        free(tb.time);
        free(tb.choice);
        return rm_err(REMAT_ENOMEM, "%s: out of memory (%d stages)", call, L);
    }
    for (int len = 1; len <= L; len++) {
        for (int s = 0; s + len - 1 < L; s++) {
            int t = s + len - 1;
            uint64_t D = pl_dout(m, t);
            /* store s */
            uint64_t bpk =
                u64max(D + m->fpa[s], m->x[s + 1] + m->abar[s] + m->bp[s] + pl_grads(m, s + 1, t));
            double btm = m->uf[s] + m->ub[s];
            if (s < t) {
                size_t r = pl_tri(s + 1, t);
                bpk = u64max(bpk, m->abar[s] + tb.peak[r]);
                btm += tb.time[r];
            }
            int bch = 0;
            /* checkpoint s..j-1 */
            uint64_t f = D + m->fpn[s];
            double fsum = m->uf[s];
            for (int j = s + 1; j <= t; j++) {
                size_t r = pl_tri(j, t), l = pl_tri(s, j - 1);
                uint64_t pk =
                    u64max(f, u64max(m->x[j] + tb.peak[r], pl_grads(m, j, t) + tb.peak[l]));
                double tm = fsum + tb.time[r] + tb.time[l] - m->ufree[j - 1];
                if (better(pk, tm, bpk, btm)) {
                    bpk = pk;
                    btm = tm;
                    bch = j;
                }
                f = u64max(f, D + m->x[j] + m->fpn[j]);
                fsum += m->uf[j];
            }
            size_t c = pl_tri(s, t);
            tb.peak[c] = bpk;
            tb.time[c] = btm;
            tb.choice[c] = bch;
        }
    }
    *peak = tb.peak[pl_tri(0, L - 1)];
    if (b) mp_recon(&tb, 0, L - 1, 0, -1, b);
    free(tb.peak);
    free(tb.time);
    free(tb.choice);
    return REMAT_OK;
}

remat_status pl_finish(remat_plan **out, pl_builder *b, int n_stages, remat_plan_kind kind,
                       const pl_model *model, const char *call) {
    *out = NULL;
    if (b->failed) {
        free(b->nodes);
        memset(b, 0, sizeof *b);
        return rm_err(REMAT_ENOMEM, "%s: out of memory building the plan", call);
    }
    remat_plan *p = calloc(1, sizeof *p);
    remat_plan_stage *st = calloc((size_t)n_stages, sizeof *st);
    if (!p || !st) {
        free(p);
        free(st);
        free(b->nodes);
        memset(b, 0, sizeof *b);
        return rm_err(REMAT_ENOMEM, "%s: out of memory building the plan", call);
    }
    p->kind = kind;
    p->n_stages = n_stages;
    p->stages = st;
    p->nodes = b->nodes;
    p->n_nodes = b->n;
    memset(b, 0, sizeof *b);
    for (int i = 0; i < p->n_nodes; i++) {
        const remat_plan_node *nd = &p->nodes[i];
        if (nd->first < 0 || nd->last >= n_stages) continue; /* validate reports it */
        if (nd->op == REMAT_PLAN_STORE) {
            st[nd->first].n_forward = 1 + nd->depth;
            if (nd->depth == 0) st[nd->first].action = REMAT_STAGE_STORE;
        } else if (nd->depth == 0) {
            st[nd->first].action = REMAT_STAGE_CHECKPOINT;
            for (int k = nd->first + 1; k <= nd->last; k++) st[k].action = REMAT_STAGE_RECOMPUTE;
        }
    }
    int rc = pl_validate(p, call);
    if (rc) {
        remat_plan_free(p);
        return rc;
    }
    for (int k = 0; k < n_stages; k++) p->n_recomputed += st[k].n_forward - 1;
    if (model) {
        uint64_t peak;
        double tm;
        if (pl_eval(p, model, &peak, &tm)) {
            remat_plan_free(p);
            return rm_err(REMAT_ENOMEM, "%s: out of memory evaluating the plan", call);
        }
        p->has_profile = true;
        p->whole_step = model->step;
        p->peak_bytes = (size_t)peak;
        p->time = tm;
        p->time_store_all = 0;
        for (int k = 0; k < model->L; k++) p->time_store_all += model->uf[k] + model->ub[k];
        p->peak_store_all = (size_t)pl_total(model, pl_store_all_peak(model));
        uint64_t mn;
        pl_builder tmp = {0};
        if (pl_min_peak(model, &mn, &tmp, call) == REMAT_OK)
            p->min_budget_bytes = (size_t)pl_total(model, mn);
        free(tmp.nodes);
    } else {
        /* Units of one stage forward: every forward run plus one backward
         * per stage counted as one. */
        p->time = (double)n_stages + (double)p->n_recomputed + (double)n_stages;
        p->time_store_all = 2.0 * n_stages;
    }
    *out = p;
    return REMAT_OK;
}

void remat_plan_free(remat_plan *plan) {
    if (!plan) return;
    if (plan->stages)
        for (int k = 0; k < plan->n_stages; k++) free(plan->stages[k].keep);
    free(plan->nodes);
    free(plan->stages);
    free(plan);
}

/* ---- the plans of a fixed shape (PyTorch's checkpoint_sequential, revolve.c) ------------ */
remat_status pl_plan_begin(remat_plan **out, const remat_profile *profile, int n_stages,
                           const pl_count *count, const char *call, int *L) {
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    if (profile) {
        if (profile->n_stages < 1 || !profile->stages)
            return rm_err(REMAT_EINVAL, "%s: profile has no stages", call);
        if (n_stages != 0 && n_stages != profile->n_stages)
            return rm_err(REMAT_EINVAL, "%s: n_stages %d does not match the profile's %d stages",
                          call, n_stages, profile->n_stages);
        *L = profile->n_stages;
    } else if (n_stages < 1) {
        return rm_err(REMAT_EINVAL, "%s: n_stages must be >= 1, got %d", call, n_stages);
    } else {
        *L = n_stages;
    }
    if (count->value < 1)
        return rm_err(REMAT_EINVAL, "%s: %s must be >= 1%s, got %d", call, count->name, count->note,
                      count->value);
    return REMAT_OK;
}

remat_status pl_finish_shaped(remat_plan **out, pl_builder *b, int L, remat_plan_kind kind,
                              const remat_profile *profile, int checkpoints, const char *call) {
    pl_model m, *mp = NULL;
    if (profile) {
        int rc = pl_model_init(&m, profile, call);
        if (rc) {
            free(b->nodes);
            return rc;
        }
        mp = &m;
    }
    int rc = pl_finish(out, b, L, kind, mp, call);
    if (!rc) (*out)->checkpoints = checkpoints;
    if (mp) pl_model_free(mp);
    return rc;
}

remat_status remat_plan_sequential(remat_plan **out, const remat_profile *profile, int n_stages,
                                   int segments) {
    static const char *call = "remat_plan_sequential";
    pl_builder b = {0};
    int L = 0;
    int rc = pl_plan_begin(out, profile, n_stages, &(pl_count){"segments", "", segments}, call, &L);
    if (rc) return rc;
    if (segments > L) segments = L; /* chunks of zero stages mean nothing */
    int size = L / segments, k = 0;
    for (int c = 0; c < segments - 1; c++) {
        int p = pl_push(&b, REMAT_PLAN_CHECKPOINT, k, k + size - 1, 0, -1);
        for (int j = 0; j < size; j++, k++) pl_push(&b, REMAT_PLAN_STORE, k, k, 1, p);
    }
    for (; k < L; k++) pl_push(&b, REMAT_PLAN_STORE, k, k, 0, -1);
    return pl_finish_shaped(out, &b, L, REMAT_PLAN_SEQUENTIAL, profile, segments, call);
}

/* ---- printers ------------------------------------------------------------------- */
void remat_profile_print(const remat_profile *p, FILE *f) {
    if (!p || !f || !p->stages) return;
    fprintf(f, "profile: %d stages%s\n", p->n_stages, p->runs ? "" : " (hand-made)");
    if (p->runs) fprintf(f, "  (median of %d runs)\n", p->runs);
    fprintf(f, "  %5s %9s %9s %9s %9s %9s %9s %9s %9s\n", "stage", "fwd ms", "bwd ms", "in MiB",
            "out MiB", "saved MiB", "fwdpk MiB", "nosv MiB", "bwdpk MiB");
    double tf = 0, tb = 0;
    for (int k = 0; k < p->n_stages; k++) {
        const remat_stage_profile *s = &p->stages[k];
        tf += s->fwd_time;
        tb += s->bwd_time;
        fprintf(f, "  %5d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", k, s->fwd_time * 1e3,
                s->bwd_time * 1e3, PL_MIB(s->input_bytes), PL_MIB(s->output_bytes),
                PL_MIB(s->saved_bytes), PL_MIB(s->fwd_peak), PL_MIB(s->fwd_peak_nosave),
                PL_MIB(s->bwd_peak));
    }
    fprintf(f, "  total %9.3f %9.3f\n", tf * 1e3, tb * 1e3);
}

/* A bounded text buffer: what does not fit is counted, not written. */
typedef struct text_out {
    char *buf;
    size_t n, len; /* capacity; the whole text's length so far */
} text_out;

static void text_add(text_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text_out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = o->len < o->n ? o->buf + o->len : NULL;
    int k = vsnprintf(dst, dst ? o->n - o->len : 0, fmt, ap);
    va_end(ap);
    if (k > 0) o->len += (size_t)k;
}

static void structure_level(text_out *o, const remat_plan *p, const int *next, int i, int end) {
    bool first = true;
    while (i < end) {
        const remat_plan_node *nd = &p->nodes[i];
        if (!first) text_add(o, " ");
        first = false;
        if (nd->op == REMAT_PLAN_STORE) {
            /* compress a run of consecutive stored stages into "a-b" ("a-b bf16": stored as
             * bf16, op-level lossy plans) */
            int j = i, lastk = nd->first;
            const bool z = p->stages[nd->first].store_bf16;
            while (next[j] < end && p->nodes[next[j]].op == REMAT_PLAN_STORE &&
                   p->stages[p->nodes[next[j]].first].store_bf16 == z) {
                j = next[j];
                lastk = p->nodes[j].first;
            }
            if (lastk > nd->first) text_add(o, "%d-%d", nd->first, lastk);
            else text_add(o, "%d", nd->first);
            if (z) text_add(o, " bf16");
            i = next[j];
        } else {
            text_add(o, "[ckpt %d-%d: ", nd->first, nd->last);
            structure_level(o, p, next, i + 1, next[i]);
            /* op-level plans: how many of the stage's ops it keeps */
            const remat_plan_stage *st = &p->stages[nd->first];
            if (nd->first == nd->last && st->keep) {
                int kept = 0, offl = 0, lossy = 0;
                for (int k = 0; k < st->n_ops; k++) {
                    kept += st->keep[k] == REMAT_OP_KEEP || st->keep[k] == REMAT_OP_KEEP_BF16;
                    offl += st->keep[k] == REMAT_OP_OFFLOAD;
                    lossy += st->keep[k] == REMAT_OP_KEEP_BF16;
                }
                text_add(o, " keeps %d/%d ops", kept, st->n_ops);
                if (lossy) text_add(o, " (%d as bf16)", lossy);
                if (offl) text_add(o, ", offloads %d", offl);
            }
            text_add(o, "]");
            i = next[i];
        }
    }
}

remat_status remat_plan_structure(const remat_plan *plan, char *buf, size_t n, size_t *len) {
    if (len) *len = 0;
    if (n && buf) buf[0] = '\0';
    if (!plan || (n && !buf))
        return rm_err(REMAT_EINVAL, "remat_plan_structure: %s is NULL", plan ? "buf" : "plan");
    if (plan->n_nodes < 1 || !plan->nodes) return REMAT_OK;
    int *next = subtree_ends(plan->nodes, plan->n_nodes);
    if (!next) return rm_err(REMAT_ENOMEM, "remat_plan_structure: out of memory");
    text_out o = {buf, n, 0};
    structure_level(&o, plan, next, 0, plan->n_nodes);
    free(next);
    if (o.len >= n && n > 4) memcpy(buf + n - 4, "...", 4); /* cut, visibly */
    if (len) *len = o.len;
    return REMAT_OK;
}

static const char *kind_name(remat_plan_kind k) {
    switch (k) {
    case REMAT_PLAN_OPTIMAL: return "optimal (rotor dynamic program)";
    case REMAT_PLAN_MIN_MEMORY: return "minimal memory (budget too tight for the slot grid)";
    case REMAT_PLAN_SEQUENTIAL: return "uniform segments (checkpoint_sequential)";
    case REMAT_PLAN_REVOLVE: return "Revolve binomial schedule";
    case REMAT_PLAN_OPS: return "op-level (per-op keep/recompute, remat_plan_create_ops)";
    }
    return "?";
}

static const char *action_name(remat_stage_action a) {
    switch (a) {
    case REMAT_STAGE_STORE: return "store";
    case REMAT_STAGE_CHECKPOINT: return "checkpoint";
    case REMAT_STAGE_RECOMPUTE: return "recompute";
    }
    return "?";
}

/* Op-level plans: what the checkpointed stages keep, in one line
 * (remat_plan_explain has the details). */
static void print_op_summary(const remat_plan *p, FILE *f) {
    int kept = 0, offl = 0, lossy = 0, ops = 0, n_st = 0;
    size_t bytes = 0, obytes = 0, zbytes = 0;
    for (int k = 0; k < p->n_stages; k++) {
        const remat_plan_stage *st = &p->stages[k];
        if (st->action != REMAT_STAGE_CHECKPOINT) continue;
        n_st++;
        ops += st->n_ops;
        bytes += st->keep_bytes;
        obytes += st->offload_bytes;
        zbytes += st->bf16_bytes;
        for (int i = 0; st->keep && i < st->n_ops; i++) {
            kept += st->keep[i] == REMAT_OP_KEEP || st->keep[i] == REMAT_OP_KEEP_BF16;
            offl += st->keep[i] == REMAT_OP_OFFLOAD;
            lossy += st->keep[i] == REMAT_OP_KEEP_BF16;
        }
    }
    fprintf(f, "  op level: the %d checkpointed stages keep %d of their %d ops (%.2f MiB)", n_st,
            kept, ops, PL_MIB(bytes));
    if (lossy)
        fprintf(f, ", %d of them as bf16 (lossy: %.2f MiB of f32 in half the bytes)", lossy,
                PL_MIB(zbytes));
    if (offl) fprintf(f, " and offload %d (%.2f MiB)", offl, PL_MIB(obytes));
    int n_sz = 0;
    size_t sz = 0;
    for (int k = 0; k < p->n_stages; k++)
        if (p->stages[k].store_bf16) n_sz++, sz += p->stages[k].bf16_bytes;
    if (n_sz)
        fprintf(f, "; %d stored stage%s kept as bf16 (lossy: %.2f MiB of saved f32 in %s)", n_sz,
                n_sz == 1 ? "" : "s", PL_MIB(sz), "half the bytes");
    fputc('\n', f);
}

void remat_plan_print(const remat_plan *p, FILE *f) {
    if (!p || !f || !p->nodes || !p->stages) return;
    int n_ckpt = 0, maxd = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        if (p->nodes[i].op == REMAT_PLAN_CHECKPOINT) {
            n_ckpt++;
            if (p->nodes[i].depth + 1 > maxd) maxd = p->nodes[i].depth + 1;
        }
    }
    fprintf(f, "remat plan: %s\n", kind_name(p->kind));
    fprintf(f,
            "  %d stages, %d checkpointed segments (nesting depth %d), %" PRId64
            " stage forwards recomputed\n",
            p->n_stages, n_ckpt, maxd, p->n_recomputed);
    if (p->kind == REMAT_PLAN_REVOLVE) fprintf(f, "  checkpoints (c): %d\n", p->checkpoints);
    if (p->kind == REMAT_PLAN_SEQUENTIAL) fprintf(f, "  segments: %d\n", p->checkpoints);
    if (p->has_profile) {
        if (p->kind == REMAT_PLAN_OPTIMAL || p->kind == REMAT_PLAN_MIN_MEMORY ||
            p->kind == REMAT_PLAN_OPS) {
            fprintf(f, "  budget %.2f MiB%s (%zu bytes", PL_MIB(p->budget_bytes),
                    p->whole_step ? " for the whole step" : "", p->budget_bytes);
            if (p->slot_bytes) fprintf(f, ", slots of %zu bytes", p->slot_bytes);
            else fprintf(f, ", everything fits");
            fprintf(f, "), feasible from %.2f MiB\n", PL_MIB(p->min_budget_bytes));
        }
        fprintf(f, "  predicted %speak %.2f MiB (store-all %.2f MiB, minimum %.2f MiB)\n",
                p->whole_step ? "step " : "", PL_MIB(p->peak_bytes), PL_MIB(p->peak_store_all),
                PL_MIB(p->min_budget_bytes));
        double over = p->time_store_all > 0 ? (p->time / p->time_store_all - 1.0) * 100.0 : 0.0;
        fprintf(f, "  predicted step %.3f ms (store-all %.3f ms, %+.1f%%)\n", p->time * 1e3,
                p->time_store_all * 1e3, over);
    } else {
        fprintf(f, "  predicted cost %.0f stage-steps (store-all %.0f)\n", p->time,
                p->time_store_all);
    }
    if (p->kind == REMAT_PLAN_OPS) print_op_summary(p, f);
    size_t len = 0;
    if (remat_plan_structure(p, NULL, 0, &len) == REMAT_OK) {
        char *text = malloc(len + 1);
        if (text && remat_plan_structure(p, text, len + 1, NULL) == REMAT_OK)
            fprintf(f, "  structure: %s\n", text);
        free(text);
    }
    if (p->n_stages <= 32) {
        fprintf(f, "  %5s  %-10s %8s\n", "stage", "action", "fwd runs");
        for (int k = 0; k < p->n_stages; k++) {
            const remat_plan_stage *st = &p->stages[k];
            fprintf(f, "  %5d  %-10s %8d\n", k, action_name(st->action), st->n_forward);
        }
        return;
    }
    /* long chains: one character per stage, 64 per line */
    fprintf(f, "  per stage (S store, C checkpoint = keep input only, digit = forward runs of a "
               "recomputed stage):\n");
    for (int k = 0; k < p->n_stages; k++) {
        if (k % 64 == 0) fprintf(f, "  %5d  ", k);
        const remat_plan_stage *st = &p->stages[k];
        int c = st->action == REMAT_STAGE_STORE        ? 'S'
                : st->action == REMAT_STAGE_CHECKPOINT ? 'C'
                : st->n_forward < 10                   ? '0' + st->n_forward
                                                       : '+';
        fputc(c, f);
        if (k % 64 == 63 || k == p->n_stages - 1) fputc('\n', f);
    }
}
