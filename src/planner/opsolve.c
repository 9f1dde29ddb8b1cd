/*
 * src/planner/opsolve.c — the op-level planner: for each saved tensor of
 * each stage keep, recompute or offload, jointly with which stages are checkpointed,
 * for a (whole-step) peak budget.
 *
 * Plan space (a): every stage of the chain is stored, or checkpointed on its
 * own with a selective checkpoint keeping a subset S of its cacheable ops
 * (S empty: a plain checkpoint). With C(S) the bytes the kept ops hold and
 * T(S) the forward time they account for (with the time of the ops a
 * recomputation never runs, recompute_free: early stop), a checkpointed stage s
 *   - peaks at off + fpn[s] + C in its forward (the kept ops' storage
 *     is at most C above what a forward keeping nothing holds);
 *   - keeps x[s+1] + C until its recomputation;
 *   - peaks at off + grads(s+1..) + max(x[s+1] + R(S),
 *     x[s+1] + abar[s] + bp[s]) in its recomputation and backward (after it
 *     the stage holds what a stored stage holds), R(S) the recomputation's
 *     own bound: min(fpa[s] + C, A(S)), A(S) = the largest, over the ops the
 *     recomputation runs (recompute_free ones do not), of the op's run_peak
 *     (what the profiling forward, which keeps every op, held while it ran)
 *     plus the cache bytes of the kept ops after it (the recomputation adopts
 *     a kept op's cache when it reaches it: its bytes are in run_peak from
 *     there on, not twice); without run_peak (a hand-made profile) fpa + C;
 *   - costs uf + (uf - T) + ub.
 * A stored stage is rotor's F_all (src/planner/model.c). off is what the
 * earlier stages keep. Per stage, only the Pareto set of (C, T) over all
 * subsets matters (a point with more bytes and no more time saved is never
 * better in any term above); with run_peak the points are (C, A, T), A
 * built op by op in the stage's order (A' = max(A, run_peak) for an op left
 * out, max(A + c, run_peak) for one kept: every earlier op has it still
 * ahead), each term growing with C and A, so dropping dominated points stays
 * exact; it is computed exactly (Nemhauser–Ullmann: merge the set with
 * itself shifted by each op, drop dominated points).
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
 * Lossy keeps (opts->lossy, ops with bf16_bytes: their contiguous f32 tensors):
 * an op kept as bf16 holds its cache_bytes less h = bf16_bytes / 2 from the
 * forward to the recomputation; its f32 is there until the forward ends and
 * again in the recomputation (U = the sum of h, plus the stage's largest h
 * for the one tensor converting), so both peaks count C + O + U; its time
 * saved is the op's less two conversions of bf16_bytes at cast_bytes_per_s.
 * Pareto sets of (C, O, U, time saved), one more DP and candidate (and one
 * with offload and lossy keeps together when both are allowed). In those DPs a stage the
 * op profile measured stored as bf16 (remat_stage_ops.store_bf16_*: a stored forward under
 * the bf16 saved-tensor hooks remat_plan_run puts around it, and its backward) has a third
 * option besides stored and checkpointed: stored as bf16, keeping x[s+1] + the measured
 * saved bytes, peaking at the measured forward and backward peaks (the conversions'
 * transients in them), for two conversions of its converted bytes at cast_bytes_per_s.
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
    uint64_t c;  /* cache bytes kept on the device (bf16 keeps: their bf16 bytes) */
    uint64_t o;  /* cache bytes offloaded to host memory */
    uint64_t u;  /* bf16 keeps: what their f32 adds back in the recomputation (and while the
                   forward converts them), the stage's conversion reserve included */
    double t;    /* forward time it saves (kept, offloaded, bf16 ops), less the conversions' */
    double cast; /* seconds of the bf16 conversions (there and back) */
    uint64_t z;  /* f32 bytes stored as bf16 */
    uint64_t a;  /* the recomputation bound A over the ops so far (UINT64_MAX: the stage has
                    no run_peak, the bound is fpa + C + O + U) */
    int set;     /* index of its op sets (kept, offloaded, bf16) in the stage's set table */
} front_pt;

/* Pareto set of one distinct stage. */
typedef struct stage_front {
    int n;
    front_pt *pts; /* c ascending, t strictly ascending */
    int words;     /* uint64 words per op set; a point's sets are 3 * words: kept, offloaded,
                      kept as bf16 */
    uint64_t *sets;
    int n_sets, cap_sets;
    bool exact;
    bool live; /* the profile measured run_peak: the points carry the recomputation bound */
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
    if (x->o != y->o) return (x->o > y->o) - (x->o < y->o); /* then fewer offloaded bytes */
    if (x->u != y->u) return (x->u > y->u) - (x->u < y->u);
    return (x->a > y->a) - (x->a < y->a);
}

/* How an op joins a point's sets. */
enum { WAY_KEEP = 0, WAY_OFFLOAD = 1, WAY_BF16 = 2, N_WAYS = 3 };

/* New op sets: a copy of `from`'s (or empty) with add_op joining the way's set. */
static int new_set(stage_front *f, int from, int add_op, int way) {
    size_t w = N_WAYS * (size_t)f->words;
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
    if (add_op >= 0) dst[way * f->words + add_op / 64] |= (uint64_t)1 << (add_op % 64);
    return f->n_sets++;
}

/* Keeps the points of tmp[0..m) (sorted by cmp_pt) that no other dominates: one with no
 * more bytes kept, offloaded or added back, no higher recomputation bound and no less time
 * saved. Returns their count. */
static int prune(front_pt *tmp, int m, bool multi) {
    int n = 0;
    double best = -INFINITY;
    for (int j = 0; j < m; j++) {
        if (!multi) { /* o and u are 0 and a the same everywhere: a sweep over c */
            if (!(tmp[j].t > best)) continue;
            best = tmp[j].t;
            tmp[n++] = tmp[j];
            continue;
        }
        bool dominated = false;
        for (int q = 0; q < n && !dominated; q++)
            dominated = tmp[q].t >= tmp[j].t && tmp[q].o <= tmp[j].o && tmp[q].u <= tmp[j].u &&
                        tmp[q].a <= tmp[j].a;
        if (!dominated) tmp[n++] = tmp[j];
    }
    return n;
}

/* What build_front may choose besides keep and recompute. */
typedef struct front_cfg {
    bool offload;   /* ops marked offloadable */
    bool lossy;     /* ops with bf16_bytes: kept as bf16 */
    double cast_bw; /* f32 bytes per second of one conversion */
} front_cfg;

/* Exact Pareto set of (bytes kept, bytes offloaded, bytes added back, time saved) over
 * the ways to keep, offload (ops marked offloadable, when fc->offload), keep as bf16
 * (ops with bf16_bytes, when fc->lossy) or recompute the stage's cacheable ops; times
 * scaled by `scale`. A bf16 keep of op i holds cache_bytes - h (h = bf16_bytes / 2)
 * from the forward to the recomputation, adds h back there, costs two conversions of
 * bf16_bytes, and the first bf16 keep of a point adds the stage's conversion reserve
 * (its largest h: the one tensor that is both f32 and bf16 while it converts). */
/* An op the plan may keep, offload or keep as bf16: cacheable, and run by a
 * recomputation (a recompute_free op, after early stop, gains nothing kept). */
static bool choosable(const remat_op_profile_entry *e) {
    return e->cacheable && !e->recompute_free;
}

/* The stage's conversion reserve: its largest choosable op's bf16 half. */
static uint64_t bf16_reserve(const remat_stage_ops *so) {
    uint64_t r = 0;
    for (int i = 0; i < so->n_ops; i++)
        if (choosable(&so->ops[i]) && so->ops[i].bf16_bytes / 2 > r) r = so->ops[i].bf16_bytes / 2;
    return r;
}

/* One op joining point q (the j-th of n) each way it may: appended to tmp at *m. */
typedef struct op_way {
    uint64_t bytes; /* cache_bytes */
    double t;       /* its scaled forward time */
    bool off;       /* may be offloaded */
    uint64_t zb;    /* its bf16_bytes (f32) */
    uint64_t h;     /* bf16 keep: zb / 2 (0: not a way) */
    double cast;    /* bf16 keep: the conversions' seconds */
    uint64_t reserve;
    uint64_t peak; /* its run_peak */
} op_way;

/* q with op j (of n) taken the way `way`, t seconds more. */
static front_pt with_way(const front_pt *q, int way, int n, int j, double t) {
    front_pt p = *q;
    p.t += t;
    p.set = -1 - (way * n + j);
    return p;
}

/* The recomputation bound after an op whose run_peak is `peak`, with `ahead` bytes of it
 * in the cache until the recomputation reaches it (0: recomputed) and `conv` more while it
 * is served (a bf16 keep: the bf16 copy of the tensor being converted back). */
static uint64_t bound_after(uint64_t a, uint64_t ahead, uint64_t peak, uint64_t conv) {
    if (a == UINT64_MAX) return a; /* no run_peak: not used */
    uint64_t x = a + ahead, y = peak + conv;
    return x > y ? x : y;
}

static void add_ways(front_pt *tmp, int *m, const front_pt *q, int j, int n, const op_way *w) {
    front_pt r = *q;
    r.a = bound_after(q->a, 0, w->peak, 0);
    tmp[(*m)++] = r;
    front_pt k = with_way(q, WAY_KEEP, n, j, w->t);
    k.c += w->bytes;
    k.a = bound_after(q->a, w->bytes, w->peak, 0);
    tmp[(*m)++] = k;
    if (w->off) { /* back on the device before the recomputation: as a kept op */
        front_pt p = with_way(q, WAY_OFFLOAD, n, j, w->t);
        p.o += w->bytes;
        p.a = bound_after(q->a, w->bytes, w->peak, 0);
        tmp[(*m)++] = p;
    }
    if (w->h) {
        front_pt z = with_way(q, WAY_BF16, n, j, w->t - w->cast);
        z.c += w->bytes - w->h;
        z.u += w->h + (q->z ? 0 : w->reserve);
        z.cast += w->cast;
        z.z += w->zb;
        z.a = bound_after(q->a, w->bytes - w->h, w->peak, w->h);
        tmp[(*m)++] = z;
    }
}

/* The point that keeps nothing: it saves the time of the ops a recomputation never runs,
 * and its recomputation bound starts at 0 where the profile measured run_peak (UINT64_MAX,
 * unused, where it did not). */
static front_pt first_point(const remat_stage_ops *so, double scale, int set) {
    double t_free = 0;
    bool live = false;
    for (int i = 0; i < so->n_ops; i++) {
        if (so->ops[i].recompute_free && so->ops[i].time > 0) t_free += so->ops[i].time * scale;
        live = live || so->ops[i].run_peak > 0;
    }
    return (front_pt){.t = t_free, .a = live ? 0 : UINT64_MAX, .set = set};
}

/* An op every recomputation runs and no point keeps: each point's bound sees its peak. */
static void raise_bounds(stage_front *f, uint64_t peak) {
    for (int j = 0; j < f->n; j++) f->pts[j].a = bound_after(f->pts[j].a, 0, peak, 0);
}

static remat_status build_front(stage_front *f, const remat_stage_ops *so, double scale,
                                const front_cfg *fc) {
    bool offload = fc->offload, lossy = fc->lossy;
    uint64_t reserve = lossy ? bf16_reserve(so) : 0;
    memset(f, 0, sizeof *f);
    f->exact = true;
    f->words = (so->n_ops + 63) / 64;
    if (f->words == 0) f->words = 1;
    int cap = 16;
    f->pts = malloc((size_t)cap * sizeof *f->pts);
    int s0 = f->pts ? new_set(f, -1, -1, WAY_KEEP) : -1;
    if (s0 < 0) return REMAT_ENOMEM;
    f->pts[0] = first_point(so, scale, s0);
    f->live = f->pts[0].a != UINT64_MAX;
    f->n = 1;
    front_pt *tmp = NULL;
    for (int i = 0; i < so->n_ops; i++) {
        const remat_op_profile_entry *e = &so->ops[i];
        double ti = e->time * scale;
        if (e->recompute_free) continue;  /* not run: no bound, nothing to choose */
        if (!choosable(e) || !(ti > 0)) { /* run, never kept */
            raise_bounds(f, e->run_peak);
            continue;
        }
        op_way w = {e->cache_bytes,
                    ti,
                    offload && e->offloadable,
                    e->bf16_bytes,
                    lossy ? e->bf16_bytes / 2 : 0,
                    0,
                    reserve,
                    e->run_peak};
        if (w.h) w.cast = 2.0 * (double)w.zb / fc->cast_bw; /* there and back */
        /* merge pts with pts + op i each way it may go, then keep the non-dominated
         * points; set -1 - (way * n + j): point j with op i joining way's set */
        front_pt *nt = realloc(tmp, (size_t)(4 * f->n) * sizeof *nt);
        if (!nt) goto oom;
        tmp = nt;
        int m = 0;
        for (int j = 0; j < f->n; j++) add_ways(tmp, &m, &f->pts[j], j, f->n, &w);
        qsort(tmp, (size_t)m, sizeof *tmp, cmp_pt);
        int n = prune(tmp, m, offload || lossy || f->live);
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
                int s = new_set(f, old[src % n_old].set, i, src / n_old);
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

/* How a stage is stored (op_choice.pt, opt_t.pt): in f32, or kept as bf16 (lossy). */
enum { PT_STORE = -1, PT_STORE_BF16 = -2 };

/* One option of one stage, in bytes. */
typedef struct opt_t {
    uint64_t keep, fwd, bwd; /* kept bytes, forward and backward peaks above off */
    double time;
    int pt; /* PT_STORE, PT_STORE_BF16; else the Pareto point */
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
                   m->uf[s] + m->ub[s], PT_STORE};
}

/* Checkpointed keeping p->c bytes and offloading p->o: the offloaded ones are
 * on the device until the stage's forward ends, and back for its
 * recomputation (which holds them as kept ones). bf16 keeps are f32 until
 * the forward ends and again in the recomputation: p->u more there. */
static opt_t opt_ckpt(const pl_model *m, int s, const front_pt *p, int pt, const off_cfg *oc) {
    uint64_t all = p->c + p->o + p->u;
    /* the recomputation: the tighter of the two bounds (p->a: UINT64_MAX when unmeasured) */
    uint64_t rec = m->fpa[s] + all;
    if (p->a < rec) rec = p->a;
    uint64_t bwd = u64max(m->x[s + 1] + rec, m->x[s + 1] + m->abar[s] + m->bp[s]);
    double rt = m->uf[s] - p->t;
    if (rt < 0) rt = 0;
    return (opt_t){m->x[s + 1] + p->c, m->fpn[s] + all,
                   pl_grads(m, s + 1, m->L - 1) + bwd + oc->reserve,
                   m->uf[s] + rt + m->ub[s] + xfer_time(m, s, p->o, oc), pt};
}

/* A stored stage kept as bf16 (lossy; remat_stage_ops.store_bf16_*, measured): it keeps
 * its output and what it saves with the hooks' f32 tensors in bf16, its forward and
 * backward peaks are the measured ones (the conversions' transients in them: the tensor
 * being converted is f32 and bf16 at once), and it costs two conversions of each such
 * tensor at cast_bytes_per_s (to bf16 in the forward, back in the backward). */
typedef struct store_b {
    bool ok;                 /* measured (remat_stage_ops.store_bf16_bytes > 0) */
    uint64_t keep, fwd, bwd; /* kept bytes (output + saved), forward and backward peaks */
    uint64_t z;              /* f32 bytes stored as bf16 */
    double cast;             /* the conversions' seconds */
} store_b;

static opt_t opt_store_bf16(const pl_model *m, int s, const store_b *b, const off_cfg *oc) {
    return (opt_t){b->keep, b->fwd,
                   m->x[s + 1] + b->keep + b->bwd + pl_grads(m, s + 1, m->L - 1) + oc->reserve,
                   m->uf[s] + m->ub[s] + b->cast, PT_STORE_BF16};
}

/* Stage s's options: 0 stored, 1..n its Pareto points (checkpointed), n + 1 stored as bf16
 * (sb non-NULL, where the variant exists); the head has only the first. */
static int n_options(const pl_model *m, const stage_front *const *fronts, const store_b *sb,
                     int s) {
    if (s >= m->n_chain) return 1;
    return 1 + fronts[s]->n + (sb && sb[s].ok);
}
static opt_t option(const pl_model *m, const stage_front *const *fronts, const store_b *sb,
                    const off_cfg *oc, int s, int k) {
    if (k == 0) return opt_store(m, s, oc);
    if (k <= fronts[s]->n) return opt_ckpt(m, s, &fronts[s]->pts[k - 1], k - 1, oc);
    return opt_store_bf16(m, s, &sb[s], oc);
}

static int64_t slots_up(uint64_t v, uint64_t unit) { return (int64_t)(v / unit + (v % unit != 0)); }

/* What the solver chose for each stage of the chain. */
typedef struct op_choice {
    int pt; /* PT_STORE, PT_STORE_BF16, else a Pareto point of the stage's front */
} op_choice;

/* Exact peak (chain share) and time of a choice vector. */
static void eval_choice(const pl_model *m, const stage_front *const *fronts, const store_b *sb,
                        const op_choice *ch, const off_cfg *oc, uint64_t *peak, double *time) {
    uint64_t off = 0, pk = 0;
    double tm = 0;
    for (int s = 0; s < m->L; s++) {
        const int pt = s < m->n_chain ? ch[s].pt : PT_STORE;
        opt_t o = pt >= 0               ? opt_ckpt(m, s, &fronts[s]->pts[pt], pt, oc)
                  : pt == PT_STORE_BF16 ? opt_store_bf16(m, s, &sb[s], oc)
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
static remat_status op_dp(const pl_model *m, const stage_front *const *fronts, const store_b *sb,
                          const off_cfg *oc, uint64_t unit, int64_t M, op_choice *ch, bool *found) {
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
        int n_opt = n_options(m, fronts, sb, s);
        for (int k = 0; k < n_opt; k++) {
            opt_t o = option(m, fronts, sb, oc, s, k);
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
            opt_t o = option(m, fronts, sb, oc, s, k);
            if (s < m->n_chain) ch[s].pt = o.pt;
            off -= slots_up(o.keep, unit);
        }
    }
    free(cost);
    free(choice);
    return REMAT_OK;
}

/* The plan of a choice vector: STORE, or CHECKPOINT(s..s) over STORE s with keep sets. */
static remat_status build_ops_plan(remat_plan **out, const pl_model *m, const remat_op_profile *ops,
                                   const stage_front *const *fronts, const store_b *sb,
                                   const op_choice *ch, const off_cfg *oc, const char *call) {
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
        if (ch[s].pt == PT_STORE_BF16) {
            p->stages[s].store_bf16 = true;
            p->stages[s].bf16_bytes = (size_t)sb[s].z;
            p->stages[s].cast_time = sb[s].cast;
        }
        if (ch[s].pt < 0) continue;
        const stage_front *f = fronts[s];
        const front_pt *pt = &f->pts[ch[s].pt];
        const remat_stage_ops *so = &ops->stages[s];
        remat_plan_stage *st = &p->stages[s];
        st->n_ops = so->n_ops;
        st->keep_bytes = (size_t)pt->c;
        st->offload_bytes = (size_t)pt->o;
        st->offload_time = xfer_time(m, s, pt->o, oc);
        st->bf16_bytes = (size_t)pt->z;
        st->cast_time = pt->cast;
        double rt = m->uf[s] - (pt->t + pt->cast);
        st->recompute_time = rt > 0 ? rt : 0;
        if (so->n_ops == 0) continue;
        st->keep = calloc((size_t)so->n_ops, 1);
        if (!st->keep) {
            remat_plan_free(p);
            *out = NULL;
            return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
        }
        const uint64_t *set = f->sets + (size_t)pt->set * N_WAYS * (size_t)f->words;
        const uint64_t *off = set + (size_t)WAY_OFFLOAD * (size_t)f->words;
        const uint64_t *z = set + (size_t)WAY_BF16 * (size_t)f->words;
        for (int i = 0; i < so->n_ops; i++)
            st->keep[i] = (off[i / 64] >> (i % 64)) & 1   ? REMAT_OP_OFFLOAD
                          : (z[i / 64] >> (i % 64)) & 1   ? REMAT_OP_KEEP_BF16
                          : (set[i / 64] >> (i % 64)) & 1 ? REMAT_OP_KEEP
                                                          : REMAT_OP_RECOMPUTE;
    }
    /* the prefetch reserve belongs to plans that offload something */
    const off_cfg none = {0, 1};
    bool offloads = false;
    for (int s = 0; s < m->n_chain; s++) offloads |= ch[s].pt >= 0 && fronts[s]->pts[ch[s].pt].o;
    uint64_t pk;
    double tm;
    eval_choice(m, fronts, sb, ch, offloads ? oc : &none, &pk, &tm);
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
                                 const stage_front **fronts, const front_cfg *fc,
                                 const char *call) {
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
        if (build_front(&dist[s], so, scale, fc))
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
    int slots;             /* remat_plan_create's (coarsest) slot count */
} op_grid;

static op_grid make_grid(const pl_model *m, uint64_t chain_budget, int slots) {
    op_grid g;
    uint64_t sa = pl_store_all_peak(m);
    int n_slots = slots > 0 ? slots : pl_auto_slots(m);
    g.slots = n_slots;
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

/* remat_plan_create's own plans as candidates: rotor on each of its grids
 * (pl_rotor_level), so that no block-level plan it gives at this budget is
 * faster than the answer. Each grid's plans only get faster with the budget
 * (and the grids tried depend on the model alone), so the answer stays
 * monotone. A grid is skipped when the best candidate so far is already
 * faster than every block-level plan can be (pl_rotor_bound on the coarse
 * grid): the DP of a fine grid costs ~L^3/6 steps per slot. */
static remat_status block_level_candidates(remat_plan **best, const pl_model *m, const op_grid *g,
                                           size_t budget, const char *call) {
    const uint64_t cb = (uint64_t)budget - m->fixed;
    double bound = 0;
    bool any = true;
    /* the bound's table: the coarse grid's slots, a few more where the tail, not the chain,
     * keeps store-all out of the budget */
    if (*best && cb / g->unit_r <= 4 * (uint64_t)g->M_r + 4 &&
        pl_rotor_bound(m, cb, g->unit_r, &bound, &any, call) != REMAT_OK) {
        bound = 0; /* no bound: try every grid */
        any = true;
    }
    if (!any) return REMAT_OK; /* no block-level plan fits */
    for (int k = 0; k < PL_GRID_LEVELS; k++) {
        int64_t sl = (int64_t)g->slots << (2 * k);
        if (k > 0 && !pl_level_fits(m, sl)) break;
        if (*best && (*best)->time < bound * (1 - 1e-9)) break; /* none can be faster */
        pl_builder b = {0};
        bool feasible = false;
        int rr = pl_rotor_level(m, cb, sl, &b, &feasible, call);
        if (rr) { /* too big a table (remat_plan_create fails there too) */
            free(b.nodes);
            break;
        }
        if (!feasible) {
            free(b.nodes);
            continue;
        }
        int rc = fixed_candidate(best, &b, m, REMAT_PLAN_OPTIMAL, budget, call);
        if (rc) return rc;
    }
    return REMAT_OK;
}

/* The op-level DP's plan (a) and rotor's (b), each when one fits its grid. */
static remat_status grid_candidates(remat_plan **best, const pl_model *m,
                                    const remat_op_profile *ops, const stage_front **fronts,
                                    op_choice *ch, const op_grid *g, size_t budget,
                                    const char *call) {
    bool found = false;
    const off_cfg none = {0, 1};
    int rc = op_dp(m, fronts, NULL, &none, g->unit, g->M, ch, &found);
    if (rc) return rm_err(REMAT_ENOMEM, "%s: out of memory for %" PRId64 " slots", call, g->M + 1);
    if (found) {
        remat_plan *p = NULL;
        rc = build_ops_plan(&p, m, ops, fronts, NULL, ch, &none, call);
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
            if (!e->offloadable || !choosable(e)) continue;
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

/* Whether some op of the chain may go the way fc allows (offloadable; bf16 bytes). */
static bool any_op_for(const pl_model *m, const remat_op_profile *ops, bool offload, bool lossy) {
    for (int s = 0; s < m->n_chain; s++)
        for (int i = 0; i < ops->stages[s].n_ops; i++) {
            const remat_op_profile_entry *e = &ops->stages[s].ops[i];
            if (!choosable(e)) continue;
            if (offload && e->offloadable && e->cache_bytes > 0) return true;
            if (lossy && e->bf16_bytes / 2 > 0) return true;
        }
    return false;
}

/* sb[s] for each stage of the chain the op profile measured stored as bf16; whether there
 * is one. */
static bool store_bf16_options(const pl_model *m, const remat_op_profile *ops, double cast_bw,
                               store_b *sb) {
    bool any = false;
    for (int s = 0; s < m->n_chain; s++) {
        const remat_stage_ops *so = &ops->stages[s];
        if (!so->store_bf16_bytes) continue;
        store_b b = {.keep = m->x[s + 1] + so->store_bf16_saved,
                     .bwd = so->store_bf16_bwd_peak,
                     .z = so->store_bf16_bytes,
                     .cast = 2.0 * (double)so->store_bf16_bytes / cast_bw};
        b.fwd = u64max(so->store_bf16_fwd_peak, b.keep);
        b.ok = true; /* the DP takes it only where it makes a plan faster under the budget */
        sb[s] = b;
        any = true;
    }
    return any;
}

/* Plan space (a) with offload (every op the profile marks offloadable may also go to
 * host memory) and/or lossy keeps (ops with bf16 bytes may be kept as bf16). Its own
 * fronts and DP, with the prefetch reserve in every backward peak when offloading; a
 * candidate like the others. Nothing when no op may go the new ways. */
static remat_status extra_candidate(remat_plan **best, const pl_model *m,
                                    const remat_op_profile *ops, op_choice *ch, const op_grid *g,
                                    bool offload, bool lossy, const char *call) {
    const double cast_bw =
        ops->cast_bytes_per_s > 0 ? ops->cast_bytes_per_s : REMAT_CAST_BYTES_PER_S;
    store_b *sb = lossy ? calloc((size_t)m->L, sizeof *sb) : NULL;
    if (lossy && !sb) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    const bool stores = lossy && store_bf16_options(m, ops, cast_bw, sb);
    if ((!any_op_for(m, ops, offload, false) && offload) ||
        (!any_op_for(m, ops, false, lossy) && !stores && lossy)) {
        free(sb);
        return REMAT_OK;
    }
    off_cfg oc = {offload ? offload_reserve(m, ops) : 0,
                  ops->host_bytes_per_s > 0 ? ops->host_bytes_per_s : REMAT_HOST_LINK_BYTES_PER_S};
    front_cfg fc = {offload, lossy, cast_bw};
    stage_front *dist = calloc((size_t)m->n_chain, sizeof *dist);
    const stage_front **fronts = calloc((size_t)m->L, sizeof *fronts);
    int rc = !dist || !fronts ? rm_err(REMAT_ENOMEM, "%s: out of memory", call) : REMAT_OK;
    if (!rc) rc = build_fronts(m, ops, dist, fronts, &fc, call);
    bool found = false;
    if (!rc && op_dp(m, fronts, sb, &oc, g->unit, g->M, ch, &found))
        rc = rm_err(REMAT_ENOMEM, "%s: out of memory for %" PRId64 " slots", call, g->M + 1);
    if (!rc && found) {
        remat_plan *p = NULL;
        rc = build_ops_plan(&p, m, ops, fronts, sb, ch, &oc, call);
        if (!rc) take_better(best, p);
    }
    if (dist)
        for (int s = 0; s < m->n_chain; s++) front_free(&dist[s]);
    free(dist);
    free(fronts);
    free(sb);
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
    /* the op profile says which stages repeat one another (their times pooled) and what a
     * recomputation skips (rotor's candidates too) */
    if (pl_apply_op_times(ops, m.n_chain, m.uf, m.ub, m.ufree)) {
        pl_model_free(&m);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }

    stage_front *dist = calloc((size_t)m.n_chain, sizeof *dist);
    const stage_front **fronts = calloc((size_t)m.L, sizeof *fronts);
    op_choice *ch = calloc((size_t)m.L, sizeof *ch);
    remat_plan *best = NULL;
    pl_builder mb = {0}, sb = {0};
    uint64_t min_total = 0;
    rc = !dist || !fronts || !ch ? rm_err(REMAT_ENOMEM, "%s: out of memory", call) : REMAT_OK;
    const front_cfg plain = {false, false, 1};
    if (!rc) rc = build_fronts(&m, ops, dist, fronts, &plain, call);
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
        /* the ways the options allow: offload, lossy keeps, both */
        const bool off = opts && opts->offload, lossy = opts && opts->lossy;
        if (!rc && off) rc = extra_candidate(&best, &m, ops, ch, &g, true, false, call);
        if (!rc && lossy) rc = extra_candidate(&best, &m, ops, ch, &g, false, true, call);
        if (!rc && off && lossy) rc = extra_candidate(&best, &m, ops, ch, &g, true, true, call);
        /* last: remat_plan_create's plans, where they can still be faster */
        if (!rc) rc = block_level_candidates(&best, &m, &g, budget_bytes, call);
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
