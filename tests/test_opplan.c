/* tests/test_opplan.c — the op-level planner (remat_profile_ops,
 * remat_plan_create_ops, remat_plan_run of op-level plans): the profile of
 * a transformer chain, the solver against an exhaustive search, monotonicity
 * in the budget, and executed plans: whole-step measured peak <= budget and
 * gradients bitwise those of no checkpointing. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/planner.h"
#include "remat/timing.h"
#include "support/models.h"
#include "support/rt.h"

/* ---- hand-made profiles ------------------------------------------------------------------ */
static uint64_t g_rng;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint64_t)(hi - lo + 1)); }

/* run_peak for about half the stages (the others unmeasured, as a hand-made profile), from
 * a stream of its own so that the main one draws what it drew before: what the ops kept so
 * far hold, a little more, and now and then a lot more (a big temporary). */
static void random_run_peaks(remat_op_profile *o) {
    uint64_t r = g_rng ^ 0x2545f4914f6cdd1dull;
    for (int k = 0; k < o->n_stages; k++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        if (r % 2) continue;
        remat_stage_ops *so = &o->stages[k];
        size_t cum = 0;
        for (int i = 0; i < so->n_ops; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            cum += so->ops[i].cache_bytes;
            so->ops[i].run_peak = cum + (size_t)(r % 5) * 512 + (r % 7 == 0 ? 24 * 1024 : 0);
        }
    }
}

/* A chain of L stages with n_ops ops each (sizes in KiB steps), plus a head; half its stages
 * with run_peak. */
static void random_profiles(int L, int n_ops, remat_profile **prof, remat_op_profile **ops,
                            remat_step_profile *step) {
    RT_OK(remat_profile_create(prof, L));
    remat_op_profile *o = calloc(1, sizeof *o);
    o->n_stages = L;
    o->stages = calloc((size_t)L, sizeof *o->stages);
    size_t x = (size_t)rnd_in(1, 8) * 1024;
    for (int k = 0; k < L; k++) {
        remat_stage_profile *s = &(*prof)->stages[k];
        s->input_bytes = x;
        s->output_bytes = (size_t)rnd_in(1, 8) * 1024;
        x = s->output_bytes;
        s->saved_bytes = (size_t)rnd_in(0, 16) * 1024;
        s->fwd_peak = s->output_bytes + s->saved_bytes + (size_t)rnd_in(0, 4) * 1024;
        s->fwd_peak_nosave = s->output_bytes + (size_t)rnd_in(0, 4) * 1024;
        s->bwd_peak = (size_t)rnd_in(0, 8) * 1024;
        s->grad_bytes = (size_t)rnd_in(0, 4) * 1024;
        s->fwd_time = rnd_in(1, 10) * 1e-3;
        s->bwd_time = rnd_in(1, 20) * 1e-3;
        remat_stage_ops *so = &o->stages[k];
        so->n_ops = n_ops;
        so->same_as = k;
        so->ops = calloc((size_t)n_ops, sizeof *so->ops);
        for (int i = 0; i < n_ops; i++) {
            remat_op_profile_entry *e = &so->ops[i];
            snprintf(e->name, sizeof e->name, "remat_op%d", i);
            e->time = rnd_in(0, 10) * 1e-4;
            e->cache_bytes = (size_t)rnd_in(0, 6) * 1024;
            e->cacheable = rnd_in(0, 5) != 0;
        }
    }
    o->runs = 1;
    random_run_peaks(o);
    *ops = o;
    if (step) {
        memset(step, 0, sizeof *step);
        step->fixed_bytes = (size_t)rnd_in(0, 32) * 1024;
        step->head.input_bytes = x;
        step->head.output_bytes = 8;
        step->head.saved_bytes = x;
        step->head.fwd_peak = x + 8;
        step->head.fwd_peak_nosave = 8;
        step->head.bwd_peak = x;
        step->head.fwd_time = 1e-3;
        step->head.bwd_time = 1e-3;
        step->tail_peak = 1024;
    }
}

/* ---- brute force over plan space (a): each stage stored or checkpointed keeping a subset --- */
typedef struct bf_best {
    double time;
    uint64_t peak;
} bf_best;

static uint64_t umax(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* The recomputation bound of a checkpointed stage (docs/planner.md "The model"), from its
 * definition: the largest, over the ops a recomputation runs, of the op's run_peak (a bf16
 * keep's: plus its bf16 half, the copy converted back) and the cache of the ops after it
 * (kept or offloaded: cache_bytes; bf16: cache_bytes - bf16_bytes / 2). way[i]: 0
 * recomputed, 1 kept, 2 offloaded or (lossy) kept as bf16. UINT64_MAX: no run_peak. */
static uint64_t bf_rec_bound(const remat_stage_ops *so, const int *way, bool lossy) {
    bool live = false;
    for (int i = 0; i < so->n_ops; i++) live = live || so->ops[i].run_peak > 0;
    if (!live) return UINT64_MAX;
    uint64_t best = 0;
    for (int i = 0; i < so->n_ops; i++) {
        const remat_op_profile_entry *e = &so->ops[i];
        if (e->recompute_free) continue;
        uint64_t v = e->run_peak + (lossy && way[i] == 2 ? e->bf16_bytes / 2 : 0);
        for (int j = i + 1; j < so->n_ops; j++)
            if (way[j])
                v +=
                    so->ops[j].cache_bytes - (lossy && way[j] == 2 ? so->ops[j].bf16_bytes / 2 : 0);
        best = umax(best, v);
    }
    return best;
}
static uint64_t umin(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* The model of docs/planner.md, op-level section, in bytes. */
static void bf_eval(const remat_profile *p, const remat_op_profile *o, const remat_step_profile *st,
                    const int *choice, uint64_t *peak, double *time) {
    int L = p->n_stages, LL = L + (st ? 1 : 0);
    uint64_t off = 0, pk = 0, gsum = 0;
    double tm = 0;
    uint64_t g[64] = {0};
    for (int k = 0; k < LL; k++) {
        const remat_stage_profile *s = k < L ? &p->stages[k] : &st->head;
        g[k] = st ? s->grad_bytes : 0;
        gsum += g[k];
    }
    for (int k = 0; k < LL; k++) {
        const remat_stage_profile *s = k < L ? &p->stages[k] : &st->head;
        uint64_t later = 0;
        for (int j = k + 1; j < LL; j++) later += g[j];
        uint64_t abar = s->output_bytes + s->saved_bytes;
        uint64_t fpa = umax(s->fwd_peak, abar), fpn = umax(s->fwd_peak_nosave, s->output_bytes);
        if (k >= L || choice[k] < 0) {
            pk = umax(pk, off + fpa);
            pk = umax(pk, off + s->output_bytes + abar + s->bwd_peak + later);
            off += abar;
            tm += s->fwd_time + s->bwd_time;
        } else {
            const remat_stage_ops *so = &o->stages[k];
            double sum = 0, saved = 0;
            uint64_t c = 0;
            int way[64] = {0};
            for (int i = 0; i < so->n_ops; i++) sum += so->ops[i].time;
            for (int i = 0; i < so->n_ops; i++)
                if ((choice[k] >> i) & 1) {
                    c += so->ops[i].cache_bytes;
                    saved += so->ops[i].time;
                    way[i] = 1;
                }
            double rt = sum > 0 ? s->fwd_time - saved * (s->fwd_time / sum) : s->fwd_time;
            uint64_t rec = umin(fpa + c, bf_rec_bound(so, way, false));
            pk = umax(pk, off + fpn + c);
            pk = umax(pk, off + later +
                              umax(s->output_bytes + rec, s->output_bytes + abar + s->bwd_peak));
            off += s->output_bytes + c;
            tm += s->fwd_time + (rt > 0 ? rt : 0) + s->bwd_time;
        }
    }
    if (st) pk = st->fixed_bytes + umax(pk, gsum + p->stages[0].input_bytes + st->tail_peak);
    *peak = pk;
    *time = tm;
}

/* Least time over plan space (a) with peak <= budget (INFINITY if none). */
static double bf_min_time(const remat_profile *p, const remat_op_profile *o,
                          const remat_step_profile *st, uint64_t budget) {
    int L = p->n_stages, n_ops = o->stages[0].n_ops;
    int per = 1 + (1 << n_ops); /* store, or a subset of cacheable ops */
    int total = 1;
    for (int k = 0; k < L; k++) total *= per;
    double best = INFINITY;
    int choice[8];
    for (int code = 0; code < total; code++) {
        int c = code;
        bool valid = true;
        for (int k = 0; k < L; k++) {
            int v = c % per;
            c /= per;
            choice[k] = v - 1;
            if (v > 0)
                for (int i = 0; i < n_ops; i++)
                    if (((choice[k] >> i) & 1) && !o->stages[k].ops[i].cacheable) valid = false;
        }
        if (!valid) continue;
        uint64_t pk;
        double tm;
        bf_eval(p, o, st, choice, &pk, &tm);
        if (pk <= budget && tm < best) best = tm;
    }
    return best;
}

Test(opplan, solver_matches_exhaustive_search) {
    g_rng = 0x9e3779b97f4a7c15ull;
    int n_checked = 0, n_ops_plans = 0;
    for (int trial = 0; trial < 30; trial++) {
        remat_profile *prof = NULL;
        remat_op_profile *ops = NULL;
        remat_step_profile step;
        bool whole = trial % 2;
        random_profiles(3, 4, &prof, &ops, &step);
        remat_plan *sa = NULL;
        RT_OK(remat_plan_create_ops(&sa, prof, ops, whole ? &step : NULL, SIZE_MAX, NULL));
        size_t top = sa->peak_store_all, lo = sa->min_budget_bytes;
        remat_plan_free(sa);
        for (int b = 0; b <= 6; b++) {
            size_t budget = lo + (top - lo) * (size_t)b / 6;
            remat_plan *plan = NULL;
            RT_OK(remat_plan_create_ops(&plan, prof, ops, whole ? &step : NULL, budget, NULL));
            cr_assert_leq(plan->peak_bytes, budget, "trial %d: predicted peak above the budget",
                          trial);
            /* exact on the grid: no plan of space (a) that fits with a margin of the
             * rounding (a slot per stage and per term) is faster */
            uint64_t margin = (uint64_t)plan->slot_bytes * 12;
            double slack_best = budget > margin
                                    ? bf_min_time(prof, ops, whole ? &step : NULL, budget - margin)
                                    : INFINITY;
            cr_assert_leq(plan->time, slack_best + 1e-12,
                          "trial %d budget %zu: %g s, but a plan of %g s fits", trial, budget,
                          plan->time, slack_best);
            if (plan->kind == REMAT_PLAN_OPS) {
                /* and no plan of space (a) beats it in bytes */
                double exact_best = bf_min_time(prof, ops, whole ? &step : NULL, budget);
                cr_assert_geq(plan->time, exact_best - 1e-12, "trial %d: below the optimum", trial);
                /* the plan's own prediction is the brute-force model's */
                int choice[8];
                for (int k = 0; k < 3; k++) {
                    choice[k] = -1;
                    if (plan->stages[k].action == REMAT_STAGE_CHECKPOINT) {
                        choice[k] = 0;
                        for (int i = 0; plan->stages[k].keep && i < 4; i++)
                            if (plan->stages[k].keep[i]) choice[k] |= 1 << i;
                    }
                }
                uint64_t pk;
                double tm;
                bf_eval(prof, ops, whole ? &step : NULL, choice, &pk, &tm);
                cr_assert_eq(pk, plan->peak_bytes, "trial %d: peak %" PRIu64 " vs %zu", trial, pk,
                             plan->peak_bytes);
                cr_assert_float_eq(tm, plan->time, 1e-12);
                n_ops_plans++;
            }
            n_checked++;
            remat_plan_free(plan);
        }
        remat_plan_free(NULL);
        remat_profile_free(prof);
        remat_op_profile_free(ops);
    }
    cr_assert_geq(n_ops_plans, n_checked / 3, "op-level plans should win often (%d of %d)",
                  n_ops_plans, n_checked);
}

/* ---- the extended spaces: offload (a device with transfer ops) or lossy keeps ---------------- */
/* What a code's digit 2 means: an op offloaded to host memory (docs/planner.md, "Offload")
 * or kept as bf16 ("Lossy compression"). */
typedef enum { BF_OFFLOAD, BF_LOSSY } bf_mode;

/* The model of space (a) extended by digit 2: code[k] -1 stores stage k, else its base-3
 * digits say per op recompute (0), keep (1), offload or keep as bf16 (2).
 *   Offload: the offloaded bytes leave the device with the forward, cost one copy each way
 *   at `rate` bytes a second (the way out hidden behind the stage's forward), and every
 *   peak from the first stage that offloads holds `reserve` for the prefetch.
 *   Lossy: a bf16 keep holds cache_bytes - bf16_bytes / 2 from the forward to the
 *   recomputation, its f32 half is back at the forward's end and in the recomputation,
 *   with the stage's largest half as a reserve, and costs two conversions of bf16_bytes at
 *   `rate` bytes a second. */
static void bf_eval_ext(bf_mode mode, const remat_profile *p, const remat_op_profile *o,
                        const remat_step_profile *st, const int *code, uint64_t reserve,
                        double rate, uint64_t *peak, double *time) {
    int L = p->n_stages, LL = L + (st ? 1 : 0);
    bool any_off = false;
    for (int k = 0; mode == BF_OFFLOAD && k < L; k++)
        for (int i = 0, v = code[k]; code[k] >= 0 && i < o->stages[k].n_ops; i++, v /= 3)
            any_off = any_off || v % 3 == 2;
    uint64_t R = any_off ? reserve : 0, off = 0, pk = 0, gsum = 0, g[64] = {0};
    double tm = 0;
    for (int k = 0; k < LL; k++) {
        g[k] = st ? (k < L ? p->stages[k].grad_bytes : st->head.grad_bytes) : 0;
        gsum += g[k];
    }
    for (int k = 0; k < LL; k++) {
        const remat_stage_profile *s = k < L ? &p->stages[k] : &st->head;
        uint64_t later = 0;
        for (int j = k + 1; j < LL; j++) later += g[j];
        uint64_t abar = s->output_bytes + s->saved_bytes, x = s->output_bytes;
        uint64_t fpa = umax(s->fwd_peak, abar), fpn = umax(s->fwd_peak_nosave, x);
        if (k < L && code[k] == -2) { /* stored as bf16: the measured figures */
            const remat_stage_ops *so = &o->stages[k];
            uint64_t keep = x + so->store_bf16_saved;
            pk = umax(pk, off + umax(so->store_bf16_fwd_peak, keep));
            pk = umax(pk, off + x + keep + so->store_bf16_bwd_peak + later + R);
            off += keep;
            tm += s->fwd_time + s->bwd_time + 2.0 * (double)so->store_bf16_bytes / rate;
            continue;
        }
        if (k >= L || code[k] < 0) {
            pk = umax(pk, off + fpa);
            pk = umax(pk, off + x + abar + s->bwd_peak + later + R);
            off += abar;
            tm += s->fwd_time + s->bwd_time;
            continue;
        }
        const remat_stage_ops *so = &o->stages[k];
        double sum = 0, saved = 0, extra_time = 0;
        uint64_t c = 0, extra = 0, half = 0; /* extra: offloaded bytes, or bf16 keeps' f32 */
        bool any = false;
        int way[64] = {0};
        for (int i = 0; i < so->n_ops; i++) {
            sum += so->ops[i].time;
            if (so->ops[i].cacheable) half = umax(half, so->ops[i].bf16_bytes / 2);
        }
        for (int i = 0, v = code[k]; i < so->n_ops; i++, v /= 3) {
            const remat_op_profile_entry *e = &so->ops[i];
            if (v % 3 == 1) c += e->cache_bytes;
            if (v % 3 == 2 && mode == BF_OFFLOAD) extra += e->cache_bytes;
            if (v % 3 == 2 && mode == BF_LOSSY) {
                c += e->cache_bytes - e->bf16_bytes / 2;
                extra += e->bf16_bytes / 2;
                extra_time += 2.0 * (double)e->bf16_bytes / rate;
            }
            any = any || v % 3 == 2;
            way[i] = v % 3;
            if (v % 3) saved += e->time;
        }
        if (mode == BF_LOSSY && any) extra += half;
        if (mode == BF_OFFLOAD && extra) {
            double one = (double)extra / rate, d2h = one - s->fwd_time;
            extra_time = (d2h > 0 ? d2h : 0) + one;
        }
        double rt = sum > 0 ? s->fwd_time - saved * (s->fwd_time / sum) : s->fwd_time;
        pk = umax(pk, off + fpn + c + extra);
        uint64_t rec = umin(fpa + c + extra, bf_rec_bound(so, way, mode == BF_LOSSY));
        pk = umax(pk, off + later + R + umax(x + rec, x + abar + s->bwd_peak));
        off += x + c;
        tm += s->fwd_time + (rt > 0 ? rt : 0) + extra_time + s->bwd_time;
    }
    if (st) pk = st->fixed_bytes + umax(pk, gsum + p->stages[0].input_bytes + st->tail_peak);
    *peak = pk;
    *time = tm;
}

/* Least time over every plan of the extended space that fits the budget (digit 2 only
 * on ops that allow it: offloadable ones, or any cacheable one for bf16). */
static double bf_min_time_ext(bf_mode mode, const remat_profile *p, const remat_op_profile *o,
                              const remat_step_profile *st, uint64_t reserve, double rate,
                              uint64_t budget) {
    int L = p->n_stages, n_ops = o->stages[0].n_ops, per3 = 1;
    for (int i = 0; i < n_ops; i++) per3 *= 3;
    /* lossy: code -2 stores the stage as bf16, where the profile measured it */
    const int low = mode == BF_LOSSY ? 2 : 1;
    int per = low + per3, total = 1;
    for (int k = 0; k < L; k++) total *= per;
    double best = INFINITY;
    int code[8];
    for (int cd = 0; cd < total; cd++) {
        bool valid = true;
        for (int k = 0, c = cd; k < L; k++, c /= per) {
            code[k] = c % per - low;
            if (code[k] == -2 && !o->stages[k].store_bf16_bytes) valid = false;
            for (int i = 0, v = code[k]; code[k] >= 0 && i < n_ops; i++, v /= 3) {
                const remat_op_profile_entry *e = &o->stages[k].ops[i];
                if ((v % 3 && !e->cacheable) ||
                    (v % 3 == 2 && mode == BF_OFFLOAD && !e->offloadable))
                    valid = false;
            }
        }
        if (!valid) continue;
        uint64_t pk;
        double tm;
        bf_eval_ext(mode, p, o, st, code, reserve, rate, &pk, &tm);
        if (pk <= budget && tm < best) best = tm;
    }
    return best;
}

/* A plan's codes in the extended space (keep sets of its checkpointed stages; offload and
 * bf16 keeps are digit 2); the number of ops with digit 2. */
static int plan_codes(const remat_plan *plan, int L, int n_ops, int *code) {
    int n2 = 0;
    for (int k = 0; k < L; k++) {
        const remat_plan_stage *ps = &plan->stages[k];
        code[k] = ps->store_bf16 ? -2 : -1;
        if (ps->action != REMAT_STAGE_CHECKPOINT) continue;
        code[k] = 0;
        for (int i = n_ops - 1; i >= 0; i--) {
            int v = ps->keep ? ps->keep[i] : 0;
            int d = v == REMAT_OP_OFFLOAD || v == REMAT_OP_KEEP_BF16 ? 2 : v;
            code[k] = code[k] * 3 + d;
            n2 += d == 2;
        }
    }
    return n2;
}

/* Small temporaries: forward peaks at the stage's bytes kept, no backward scratch, 16 KiB
 * more saved; the bytes kept across stages then bind. */
static void small_temporaries(remat_profile *prof) {
    for (int k = 0; k < prof->n_stages; k++) {
        remat_stage_profile *sp = &prof->stages[k];
        sp->fwd_peak_nosave = sp->output_bytes;
        sp->bwd_peak = 0;
        sp->saved_bytes += 16 * 1024;
        sp->fwd_peak = sp->output_bytes + sp->saved_bytes;
    }
}

enum { OFF_L = 4, OFF_OPS = 2 };

Test(opplan, offload_matches_exhaustive_search) {
    g_rng = 0x5851f42d4c957f2dull;
    int n_off_plans = 0, n_checked = 0;
    for (int trial = 0; trial < 48; trial++) {
        remat_profile *prof = NULL;
        remat_op_profile *ops = NULL;
        remat_step_profile step;
        bool whole = trial % 2;
        random_profiles(OFF_L, OFF_OPS, &prof, &ops, &step);
        if (trial % 4 != 3) {
            small_temporaries(prof);
            for (int k = 0; k < OFF_L; k++)
                for (int i = 0; i < OFF_OPS; i++) /* ops of similar size: a small reserve */
                    ops->stages[k].ops[i].cache_bytes = (size_t)rnd_in(2, 3) * 1024;
        }
        uint64_t a = 0, b2 = 0;
        for (int k = 0; k < OFF_L; k++)
            for (int i = 0; i < OFF_OPS; i++) {
                remat_op_profile_entry *e = &ops->stages[k].ops[i];
                e->offloadable = rnd_in(0, 2) != 0;
                if (!e->offloadable || !e->cacheable) continue;
                if (e->cache_bytes > a) b2 = a, a = e->cache_bytes;
                else if (e->cache_bytes > b2) b2 = e->cache_bytes;
            }
        /* from copies hidden behind compute to copies that cost more than recomputing */
        ops->host_bytes_per_s = trial % 3 == 0 ? 1e9 : trial % 3 == 1 ? 2e7 : 2e6;
        remat_plan *sa = NULL;
        const remat_plan_options po = {.offload = true};
        RT_OK(remat_plan_create_ops(&sa, prof, ops, whole ? &step : NULL, SIZE_MAX, &po));
        size_t top = sa->peak_store_all, lo = sa->min_budget_bytes;
        remat_plan_free(sa);
        for (int bi = 0; bi <= 6; bi++) {
            size_t budget = lo + (top - lo) * (size_t)bi / 6;
            remat_plan *plan = NULL;
            RT_OK(remat_plan_create_ops(&plan, prof, ops, whole ? &step : NULL, budget, &po));
            cr_assert_leq(plan->peak_bytes, budget);
            uint64_t margin = (uint64_t)plan->slot_bytes * 12;
            double slack = budget > margin
                               ? bf_min_time_ext(BF_OFFLOAD, prof, ops, whole ? &step : NULL,
                                                 a + b2, ops->host_bytes_per_s, budget - margin)
                               : INFINITY;
            cr_assert_leq(plan->time, slack + 1e-12, "trial %d budget %zu: %g s, but %g s fits",
                          trial, budget, plan->time, slack);
            if (plan->kind == REMAT_PLAN_OPS) {
                double exact = bf_min_time_ext(BF_OFFLOAD, prof, ops, whole ? &step : NULL, a + b2,
                                               ops->host_bytes_per_s, budget);
                cr_assert_geq(plan->time, exact - 1e-12, "trial %d: below the optimum", trial);
                int code[OFF_L];
                const bool offl = plan_codes(plan, OFF_L, OFF_OPS, code) > 0;
                uint64_t pk;
                double tm;
                bf_eval_ext(BF_OFFLOAD, prof, ops, whole ? &step : NULL, code, a + b2,
                            ops->host_bytes_per_s, &pk, &tm);
                cr_assert_eq(pk, plan->peak_bytes, "trial %d: peak %" PRIu64 " vs %zu", trial, pk,
                             plan->peak_bytes);
                cr_assert_float_eq(tm, plan->time, 1e-12);
                n_off_plans += offl;
            }
            n_checked++;
            remat_plan_free(plan);
        }
        remat_profile_free(prof);
        remat_op_profile_free(ops);
    }
    /* offload pays where the bytes kept across stages bind and the prefetch reserve is
     * small (11 of the 336 plans); offload_beats_recompute_under_a_tight_budget has a
     * chain where it must */
    cr_assert_geq(n_off_plans, 8, "offloading plans: %d of %d", n_off_plans, n_checked);
}

/* Four stages of 1 KiB inputs that save 16 KiB, each with four 2 KiB ops making its
 * whole forward. At 36 KiB no plan without offload keeps enough to avoid recomputing about
 * a stage's forward; offloading the ops costs a 4 KiB prefetch reserve (the two largest
 * offloadable ops) and fits. Cheap copies: the plan offloads and is faster than the best
 * plan without offload; dear copies: it recomputes instead. */
Test(opplan, offload_beats_recompute_under_a_tight_budget) {
    enum { L = 4, N = 4 };
    const size_t K = 1024;
    remat_profile *prof = NULL;
    RT_OK(remat_profile_create(&prof, L));
    remat_op_profile o = {.n_stages = L, .runs = 1};
    remat_stage_ops so[L];
    remat_op_profile_entry op[N];
    for (int i = 0; i < N; i++)
        op[i] = (remat_op_profile_entry){.name = "remat_op",
                                         .time = 2.5e-3,
                                         .cache_bytes = 2 * K,
                                         .cacheable = true,
                                         .offloadable = true};
    o.stages = so;
    for (int k = 0; k < L; k++) {
        remat_stage_profile *sp = &prof->stages[k];
        sp->input_bytes = sp->output_bytes = K;
        sp->saved_bytes = 16 * K;
        sp->fwd_peak = 17 * K;
        sp->fwd_peak_nosave = K;
        sp->fwd_time = sp->bwd_time = 10e-3;
        so[k] = (remat_stage_ops){.n_ops = N, .ops = op, .same_as = 0};
    }
    size_t budget = 36 * K;
    o.host_bytes_per_s = 1e12;
    remat_plan *cheap = NULL, *dear = NULL, *off_not_allowed = NULL;
    const remat_plan_options po = {.offload = true};
    RT_OK(remat_plan_create_ops(&cheap, prof, &o, NULL, budget, &po));
    /* offload is opt-in: without remat_plan_options.offload, keep or recompute only */
    RT_OK(remat_plan_create_ops(&off_not_allowed, prof, &o, NULL, budget, NULL));
    o.host_bytes_per_s = 1e3;
    RT_OK(remat_plan_create_ops(&dear, prof, &o, NULL, budget, &po));
    if (getenv("OPPLAN_VERBOSE")) remat_plan_print(cheap, stderr), remat_plan_print(dear, stderr);
    int off = 0, off_dear = 0, off_na = 0;
    for (int k = 0; k < L; k++)
        for (int i = 0; i < N; i++) {
            off += cheap->stages[k].keep && cheap->stages[k].keep[i] == REMAT_OP_OFFLOAD;
            off_dear += dear->stages[k].keep && dear->stages[k].keep[i] == REMAT_OP_OFFLOAD;
            off_na += off_not_allowed->stages[k].keep &&
                      off_not_allowed->stages[k].keep[i] == REMAT_OP_OFFLOAD;
        }
    cr_assert_gt(off, 0, "cheap copies: nothing offloaded");
    cr_assert_eq(off_na, 0, "offload not allowed: %d ops offloaded", off_na);
    cr_assert_float_eq(off_not_allowed->time, dear->time, 1e-12, "the same plan as dear copies");
    remat_plan_free(off_not_allowed);
    cr_assert_eq(off_dear, 0, "dear copies: %d ops offloaded", off_dear);
    cr_assert_leq(cheap->peak_bytes, budget);
    cr_assert_leq(dear->peak_bytes, budget);
    cr_assert_lt(cheap->time, dear->time - 5e-3, "offload %g s, recompute %g s", cheap->time,
                 dear->time);
    char st[256];
    RT_OK(remat_plan_structure(cheap, st, sizeof st, NULL));
    cr_assert(strstr(st, ", offloads "), "%s", st);
    remat_plan_free(cheap);
    remat_plan_free(dear);
    remat_profile_free(prof);
}

/* ---- lossy keeps (bf16) --------------------------------------------------------------------- */
static int lossy_ops(const remat_plan *plan) {
    int n = 0;
    for (int k = 0; k < plan->n_stages; k++)
        for (int i = 0; plan->stages[k].keep && i < plan->stages[k].n_ops; i++)
            n += plan->stages[k].keep[i] == REMAT_OP_KEEP_BF16;
    return n;
}

/* Stored stages the plan keeps as bf16. */
static int bf16_stores(const remat_plan *plan) {
    int n = 0;
    for (int k = 0; k < plan->n_stages; k++) n += plan->stages[k].store_bf16;
    return n;
}

/* Plans and times identical, keep sets included. */
static void assert_same_plan(const remat_plan *a, const remat_plan *b) {
    cr_assert_eq(a->kind, b->kind);
    cr_assert_eq(a->peak_bytes, b->peak_bytes);
    cr_assert(a->time == b->time, "%.17g vs %.17g", a->time, b->time);
    cr_assert_eq(a->n_nodes, b->n_nodes);
    for (int k = 0; k < a->n_stages; k++) {
        cr_assert_eq(a->stages[k].action, b->stages[k].action);
        cr_assert_eq(a->stages[k].store_bf16, b->stages[k].store_bf16);
        cr_assert_eq(!a->stages[k].keep, !b->stages[k].keep);
        if (a->stages[k].keep)
            cr_assert(!memcmp(a->stages[k].keep, b->stages[k].keep, (size_t)a->stages[k].n_ops));
    }
}

enum { LZ_L = 3, LZ_OPS = 3 };

/* Stored as bf16, as remat_profile_ops would measure it, on some stages (a quarter left
 * unmeasured): z f32 bytes of what the stage saves converted, half of them kept, the forward
 * peak lower by less than that (a transient of up to 2 KiB), the backward's scratch up to
 * 1 KiB more (the conversions back). */
static void random_store_bf16(const remat_profile *prof, remat_op_profile *ops) {
    for (int k = 0; k < prof->n_stages; k++) {
        const remat_stage_profile *s = &prof->stages[k];
        remat_stage_ops *so = &ops->stages[k];
        if (rnd_in(0, 3) == 0 || s->saved_bytes < 1024) continue;
        size_t z = (size_t)rnd_in(1, (int)(s->saved_bytes / 1024)) * 1024;
        so->store_bf16_bytes = z;
        so->store_bf16_saved = s->saved_bytes - z / 2;
        so->store_bf16_fwd_peak = s->fwd_peak - z / 2 + (size_t)rnd_in(0, 4) * 512;
        so->store_bf16_bwd_peak = s->bwd_peak + (size_t)rnd_in(0, 2) * 512;
    }
}

/* 24 random chains, 7 budgets each, against every plan of space (a) with bf16 keeps (and,
 * with stores, stages stored as bf16). */
static void lossy_search(bool stores, int *n_lossy_plans, int *n_store_plans) {
    int n_checked = 0;
    *n_lossy_plans = *n_store_plans = 0;
    for (int trial = 0; trial < 24; trial++) {
        remat_profile *prof = NULL;
        remat_op_profile *ops = NULL;
        remat_step_profile step;
        bool whole = trial % 2;
        random_profiles(LZ_L, LZ_OPS, &prof, &ops, &step);
        if (trial % 4 != 3) small_temporaries(prof);
        for (int k = 0; k < LZ_L; k++)
            for (int i = 0; i < LZ_OPS; i++) {
                remat_op_profile_entry *e = &ops->stages[k].ops[i];
                e->bf16_bytes = (size_t)rnd_in(0, (int)(e->cache_bytes / 1024)) * 1024;
            }
        if (stores) random_store_bf16(prof, ops);
        /* from conversions nearly free to conversions dearer than recomputing */
        ops->cast_bytes_per_s = trial % 3 == 0 ? 1e12 : trial % 3 == 1 ? 2e7 : 2e6;
        const remat_plan_options exact = {0}, lossy = {.lossy = true};
        remat_plan *sa = NULL;
        RT_OK(remat_plan_create_ops(&sa, prof, ops, whole ? &step : NULL, SIZE_MAX, &lossy));
        size_t top = sa->peak_store_all, lo = sa->min_budget_bytes;
        cr_assert_eq(lossy_ops(sa) + bf16_stores(sa), 0, "store-all fits: nothing to compress");
        remat_plan_free(sa);
        for (int bi = 0; bi <= 6; bi++) {
            size_t budget = lo + (top - lo) * (size_t)bi / 6;
            remat_plan *plan = NULL, *plain = NULL, *none = NULL;
            RT_OK(remat_plan_create_ops(&plan, prof, ops, whole ? &step : NULL, budget, &lossy));
            RT_OK(remat_plan_create_ops(&plain, prof, ops, whole ? &step : NULL, budget, &exact));
            RT_OK(remat_plan_create_ops(&none, prof, ops, whole ? &step : NULL, budget, NULL));
            /* lossy off: exactly the plan of no options */
            assert_same_plan(plain, none);
            cr_assert_eq(lossy_ops(plain) + bf16_stores(plain), 0);
            cr_assert_leq(plan->peak_bytes, budget);
            /* lossy only where it helps: never slower, and strictly faster when it compresses */
            cr_assert_leq(plan->time, plain->time);
            if (lossy_ops(plan) || bf16_stores(plan))
                cr_assert_lt(plan->time, plain->time, "trial %d: compresses without gain", trial);
            uint64_t margin = (uint64_t)plan->slot_bytes * 12;
            double slack = budget > margin
                               ? bf_min_time_ext(BF_LOSSY, prof, ops, whole ? &step : NULL, 0,
                                                 ops->cast_bytes_per_s, budget - margin)
                               : INFINITY;
            cr_assert_leq(plan->time, slack + 1e-12, "trial %d budget %zu: %g s, but %g s fits",
                          trial, budget, plan->time, slack);
            if (plan->kind == REMAT_PLAN_OPS) {
                double best = bf_min_time_ext(BF_LOSSY, prof, ops, whole ? &step : NULL, 0,
                                              ops->cast_bytes_per_s, budget);
                cr_assert_geq(plan->time, best - 1e-12, "trial %d: below the optimum", trial);
                int code[LZ_L];
                plan_codes(plan, LZ_L, LZ_OPS, code);
                uint64_t pk;
                double tm;
                bf_eval_ext(BF_LOSSY, prof, ops, whole ? &step : NULL, code, 0,
                            ops->cast_bytes_per_s, &pk, &tm);
                cr_assert_eq(pk, plan->peak_bytes, "trial %d: peak %" PRIu64 " vs %zu", trial, pk,
                             plan->peak_bytes);
                cr_assert_float_eq(tm, plan->time, 1e-12);
                *n_lossy_plans += lossy_ops(plan) > 0;
                *n_store_plans += bf16_stores(plan) > 0;
            }
            n_checked++;
            remat_plan_free(plan);
            remat_plan_free(plain);
            remat_plan_free(none);
        }
        remat_profile_free(prof);
        remat_op_profile_free(ops);
    }
    if (getenv("OPPLAN_VERBOSE"))
        fprintf(stderr, "%d plans: %d keep ops as bf16, %d store stages as bf16\n", n_checked,
                *n_lossy_plans, *n_store_plans);
}

Test(opplan, lossy_matches_exhaustive_search) {
    g_rng = 0x2545f4914f6cdd1dull;
    int n_lossy, n_stores;
    lossy_search(false, &n_lossy, &n_stores);
    cr_assert_geq(n_lossy, 8, "compressing plans: %d", n_lossy);
    cr_assert_eq(n_stores, 0, "no stage measured stored as bf16");
}

/* The same with stages measured stored as bf16 (remat_stage_ops.store_bf16_*): the solver's
 * plans are the exhaustive optimum of the space with that variant, its model's peak and
 * time those of the plan, and some plans store a stage as bf16. */
Test(opplan, stored_bf16_matches_exhaustive_search) {
    g_rng = 0x9e3779b97f4a7c15ull;
    int n_lossy, n_stores;
    lossy_search(true, &n_lossy, &n_stores);
    cr_assert_geq(n_stores, 4, "plans storing a stage as bf16: %d", n_stores);
}

/* Four stages of 1 KiB inputs that save 16 KiB, each with four 2 KiB f32 ops making its
 * whole forward (the offload chain above). At 30 KiB keeping ops in f32 leaves most of each
 * forward to recompute; bf16 keeps (1 KiB each, 1 KiB of reserve) fit more of them. Cheap
 * conversions: the plan keeps some as bf16 and is faster; dear ones: it does not. */
Test(opplan, lossy_chosen_where_it_helps) {
    enum { L = 4, N = 4 };
    const size_t K = 1024;
    remat_profile *prof = NULL;
    RT_OK(remat_profile_create(&prof, L));
    remat_op_profile o = {.n_stages = L, .runs = 1};
    remat_stage_ops so[L];
    remat_op_profile_entry op[N];
    for (int i = 0; i < N; i++)
        op[i] = (remat_op_profile_entry){.name = "remat_op",
                                         .time = 2.5e-3,
                                         .cache_bytes = 2 * K,
                                         .bf16_bytes = 2 * K,
                                         .cacheable = true};
    o.stages = so;
    for (int k = 0; k < L; k++) {
        remat_stage_profile *sp = &prof->stages[k];
        sp->input_bytes = sp->output_bytes = K;
        sp->saved_bytes = 16 * K;
        sp->fwd_peak = 17 * K;
        sp->fwd_peak_nosave = K;
        sp->fwd_time = sp->bwd_time = 10e-3;
        so[k] = (remat_stage_ops){.n_ops = N, .ops = op, .same_as = 0};
    }
    const remat_plan_options lossy = {.lossy = true};
    remat_plan *exact = NULL, *cheap = NULL, *dear = NULL, *roomy = NULL;
    size_t budget = 30 * K;
    RT_OK(remat_plan_create_ops(&exact, prof, &o, NULL, budget, NULL));
    o.cast_bytes_per_s = 1e12;
    RT_OK(remat_plan_create_ops(&cheap, prof, &o, NULL, budget, &lossy));
    /* enough room to keep every op in f32: bf16 would only add conversions */
    RT_OK(remat_plan_create_ops(&roomy, prof, &o, NULL, SIZE_MAX, &lossy));
    o.cast_bytes_per_s = 1e5;
    RT_OK(remat_plan_create_ops(&dear, prof, &o, NULL, budget, &lossy));
    if (getenv("OPPLAN_VERBOSE")) {
        remat_plan_explain(exact, &o, 0, 0, stderr);
        remat_plan_explain(cheap, &o, 0, 0, stderr);
    }
    cr_assert_gt(lossy_ops(cheap), 0, "cheap conversions: nothing kept as bf16");
    cr_assert_leq(cheap->peak_bytes, budget);
    cr_assert_lt(cheap->time, exact->time - 2e-3, "bf16 %g s, exact %g s", cheap->time,
                 exact->time);
    cr_assert_eq(lossy_ops(dear), 0, "dear conversions: %d kept as bf16", lossy_ops(dear));
    cr_assert_float_eq(dear->time, exact->time, 1e-12);
    cr_assert_eq(lossy_ops(roomy), 0);
    char st[256];
    RT_OK(remat_plan_structure(cheap, st, sizeof st, NULL));
    cr_assert(strstr(st, " as bf16)"), "%s", st);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    remat_plan_explain(cheap, &o, 0, 0, f);
    fclose(f);
    cr_assert(strstr(buf, "kept bf16:  op") && strstr(buf, "as bf16 (lossy"), "%s", buf);
    free(buf);
    remat_plan_free(exact);
    remat_plan_free(cheap);
    remat_plan_free(dear);
    remat_plan_free(roomy);
    remat_profile_free(prof);
}

/* recompute_free ops (after early stop) are never kept and their time is
 * never paid: at every budget no plan keeps the free op, no plan is slower
 * than with the op marked a recomputed one, and every checkpointed stage
 * recomputes at most its forward less the free op's share. */
Test(opplan, recompute_free_ops_are_never_kept_nor_paid) {
    enum { L = 4, N = 3 };
    const size_t K = 1024;
    remat_profile *prof = NULL;
    RT_OK(remat_profile_create(&prof, L));
    remat_op_profile o = {.n_stages = L, .runs = 1};
    remat_stage_ops so[L];
    /* two ops that save, then one a recomputation never runs (dear and small: kept, it
     * would look like the best buy) */
    remat_op_profile_entry op[N] = {
        {.name = "remat_a", .time = 2e-3, .cache_bytes = 4 * K, .cacheable = true, .n_saved = 1},
        {.name = "remat_b", .time = 2e-3, .cache_bytes = 4 * K, .cacheable = true, .n_saved = 1},
        {.name = "remat_c", .time = 5e-3, .cache_bytes = K, .cacheable = true}};
    o.stages = so;
    for (int k = 0; k < L; k++) {
        remat_stage_profile *sp = &prof->stages[k];
        sp->input_bytes = sp->output_bytes = K;
        sp->saved_bytes = 8 * K;
        sp->fwd_peak = 10 * K;
        sp->fwd_peak_nosave = 2 * K;
        sp->fwd_time = 9e-3; /* the ops' sum: scale 1 */
        sp->bwd_time = 10e-3;
        so[k] = (remat_stage_ops){.n_ops = N, .ops = op, .same_as = 0};
    }
    size_t min = 0;
    RT_OK(remat_plan_min_budget(prof, &min));
    const size_t top = 4 * 11 * K;
    int keeps = 0;
    for (int b = 0; b <= 24; b++) {
        size_t budget = min + (top - min) * (size_t)b / 24;
        remat_plan *with = NULL, *without = NULL;
        op[2].recompute_free = false;
        RT_OK(remat_plan_create_ops(&without, prof, &o, NULL, budget, NULL));
        op[2].recompute_free = true;
        RT_OK(remat_plan_create_ops(&with, prof, &o, NULL, budget, NULL));
        cr_assert_leq(with->peak_bytes, budget);
        cr_assert_leq(with->time, without->time + 1e-12, "budget %zu: %g s free, %g s not", budget,
                      with->time, without->time);
        for (int k = 0; k < L; k++) {
            const remat_plan_stage *st = &with->stages[k];
            if (!st->keep) continue;
            cr_assert_neq(st->keep[2], REMAT_OP_KEEP, "budget %zu: stage %d keeps the free op",
                          budget, k);
            keeps += st->keep[0] == REMAT_OP_KEEP || st->keep[1] == REMAT_OP_KEEP;
            cr_assert_leq(st->recompute_time, 4e-3 + 1e-12, "stage %d recomputes %g s", k,
                          st->recompute_time);
        }
        remat_plan_free(with);
        remat_plan_free(without);
    }
    cr_assert_gt(keeps, 0, "some plan keeps part of a stage");
    remat_profile_free(prof);
}

/* A plan's time as the model charges it: every stage's forward once per run, its backward
 * once, less what each checkpoint's recomputation skips after its last save (the
 * recompute_free time of the last stage it recomputes). */
static double tree_time(const remat_plan *p, const remat_profile *prof, const double *ufree) {
    double t = 0;
    for (int k = 0; k < p->n_stages; k++)
        t += p->stages[k].n_forward * prof->stages[k].fwd_time + prof->stages[k].bwd_time;
    for (int i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].op == REMAT_PLAN_CHECKPOINT) t -= ufree[p->nodes[i].last];
    return t;
}

/* The block-level plans (rotor's, alone or as candidates of the op-level planner) charge a
 * checkpoint's recomputation its forward less the recompute_free ops of the last stage it
 * recomputes, once remat_profile_apply_ops has told the profile (or the op-level planner
 * has the op profile); nested plans included. */
Test(opplan, block_level_plans_charge_what_early_stop_runs) {
    enum { L = 6, N = 3 };
    const size_t K = 1024;
    remat_profile *prof = NULL;
    RT_OK(remat_profile_create(&prof, L));
    remat_op_profile o = {.n_stages = L, .runs = 1};
    remat_stage_ops so[L];
    remat_op_profile_entry op[N] = {
        {.name = "remat_a", .time = 2e-3, .cache_bytes = 4 * K, .cacheable = true, .n_saved = 1},
        {.name = "remat_b", .time = 2e-3, .cache_bytes = 4 * K, .cacheable = true, .n_saved = 1},
        {.name = "remat_c",
         .time = 4e-3,
         .cache_bytes = K,
         .cacheable = true,
         .recompute_free = true}};
    o.stages = so;
    for (int k = 0; k < L; k++) {
        remat_stage_profile *sp = &prof->stages[k];
        sp->input_bytes = sp->output_bytes = K;
        sp->saved_bytes = 8 * K;
        sp->fwd_peak = 10 * K;
        sp->fwd_peak_nosave = 2 * K;
        sp->fwd_time = 16e-3; /* twice the ops' sum: the free op's share is 8 ms */
        sp->bwd_time = 20e-3;
        so[k] = (remat_stage_ops){.n_ops = N, .ops = op, .same_as = 0};
    }
    const double zero[L] = {0}, free8[L] = {8e-3, 8e-3, 8e-3, 8e-3, 8e-3, 8e-3};
    RT_FAILS(remat_profile_apply_ops(NULL, &o), REMAT_EINVAL, "NULL");
    o.n_stages = L - 1;
    RT_FAILS(remat_profile_apply_ops(prof, &o), REMAT_EINVAL, "stages");
    o.n_stages = L;
    size_t min = 0;
    RT_OK(remat_plan_min_budget(prof, &min));
    const size_t top = L * 11 * K;
    int nested = 0, rotor_in_ops = 0;
    for (int b = 0; b <= 20; b++) {
        size_t budget = min + (top - min) * (size_t)b / 20;
        remat_plan *before = NULL, *after = NULL, *joint = NULL;
        for (int k = 0; k < L; k++) prof->stages[k].recompute_free_time = 0;
        RT_OK(remat_plan_create(&before, prof, budget));
        cr_assert_float_eq(before->time, tree_time(before, prof, zero), 1e-12);
        RT_OK(remat_profile_apply_ops(prof, &o));
        for (int k = 0; k < L; k++)
            cr_assert_float_eq(prof->stages[k].recompute_free_time, 8e-3, 1e-15);
        RT_OK(remat_plan_create(&after, prof, budget));
        cr_assert_float_eq(after->time, tree_time(after, prof, free8), 1e-12, "budget %zu: %g",
                           budget, after->time);
        cr_assert_leq(after->time, before->time + 1e-12);
        if (after->n_recomputed > 0) cr_assert_lt(after->time, tree_time(after, prof, zero));
        for (int i = 0; i < after->n_nodes; i++) nested += after->nodes[i].depth > 1;
        /* the op-level planner's rotor candidates, from the op profile alone */
        for (int k = 0; k < L; k++) prof->stages[k].recompute_free_time = 0;
        RT_OK(remat_plan_create_ops(&joint, prof, &o, NULL, budget, NULL));
        if (joint->kind != REMAT_PLAN_OPS) {
            rotor_in_ops++;
            cr_assert_float_eq(joint->time, tree_time(joint, prof, free8), 1e-12);
        }
        remat_plan_free(before);
        remat_plan_free(after);
        remat_plan_free(joint);
    }
    cr_assert_gt(nested, 0, "some plan nests checkpoints");
    cr_assert_gt(rotor_in_ops, 0, "some op-level answer is a block-level plan");
    remat_profile_free(prof);
}

/* Stages the op profile finds repeating one another are one computation: their times are
 * pooled (medians), so a loaded machine's noise in the block profile does not make the
 * planners treat identical blocks differently. A chain of six identical blocks profiled
 * with noisy times plans exactly as the same chain with every block at the medians. */
Test(opplan, repeated_stages_share_their_times) {
    enum { L = 6, N = 4 };
    const size_t K = 1024;
    /* medians 11 and 21 ms, each the mean of two equal middle values: exact in binary */
    const double fwd[L] = {9e-3, 14e-3, 7e-3, 11e-3, 11e-3, 13e-3},
                 bwd[L] = {21e-3, 31e-3, 16e-3, 21e-3, 27e-3, 18e-3};
    remat_profile *noisy = NULL, *flat = NULL;
    RT_OK(remat_profile_create(&noisy, L));
    RT_OK(remat_profile_create(&flat, L));
    remat_op_profile o = {.n_stages = L, .runs = 1};
    remat_stage_ops so[L];
    remat_op_profile_entry op[N] = {
        {.name = "remat_a", .time = 3e-3, .cache_bytes = 4 * K, .cacheable = true, .n_saved = 1},
        {.name = "remat_b", .time = 1e-3, .cache_bytes = 4 * K, .cacheable = true, .n_saved = 1},
        {.name = "remat_c", .time = 4e-3, .cache_bytes = 2 * K, .cacheable = true, .n_saved = 1},
        {.name = "remat_d",
         .time = 2e-3,
         .cache_bytes = K,
         .cacheable = true,
         .recompute_free = true}};
    o.stages = so;
    for (int k = 0; k < L; k++) {
        remat_stage_profile sp = {.input_bytes = K,
                                  .output_bytes = K,
                                  .saved_bytes = 10 * K,
                                  .fwd_peak = 12 * K,
                                  .fwd_peak_nosave = 2 * K};
        noisy->stages[k] = flat->stages[k] = sp;
        noisy->stages[k].fwd_time = fwd[k];
        noisy->stages[k].bwd_time = bwd[k];
        flat->stages[k].fwd_time = 11e-3;
        flat->stages[k].bwd_time = 21e-3;
        so[k] = (remat_stage_ops){.n_ops = N, .ops = op, .same_as = 0};
    }
    size_t min = 0;
    RT_OK(remat_plan_min_budget(flat, &min));
    const size_t top = L * 13 * K;
    int differs = 0;
    for (int b = 0; b <= 16; b++) {
        size_t budget = min + (top - min) * (size_t)b / 16;
        remat_plan *pn = NULL, *pf = NULL, *raw = NULL;
        RT_OK(remat_plan_create_ops(&pn, noisy, &o, NULL, budget, NULL));
        RT_OK(remat_plan_create_ops(&pf, flat, &o, NULL, budget, NULL));
        cr_assert_float_eq(pn->time, pf->time, 1e-12, "budget %zu: %g vs %g s", budget, pn->time,
                           pf->time);
        cr_assert_eq(pn->peak_bytes, pf->peak_bytes);
        for (int k = 0; k < L; k++) {
            cr_assert_eq(pn->stages[k].action, pf->stages[k].action, "budget %zu stage %d", budget,
                         k);
            for (int i = 0; pf->stages[k].keep && i < N; i++)
                cr_assert_eq(pn->stages[k].keep[i], pf->stages[k].keep[i]);
        }
        /* unpooled, the noise changes the block-level plans somewhere */
        RT_OK(remat_plan_create(&raw, noisy, budget));
        remat_plan *rf = NULL;
        RT_OK(remat_plan_create(&rf, flat, budget));
        for (int k = 0; k < L; k++) differs += raw->stages[k].action != rf->stages[k].action;
        remat_plan_free(pn);
        remat_plan_free(pf);
        remat_plan_free(raw);
        remat_plan_free(rf);
    }
    cr_assert_gt(differs, 0, "the noise must matter to an unpooled plan");
    /* remat_profile_apply_ops writes the medians (and the free time) into the profile */
    RT_OK(remat_profile_apply_ops(noisy, &o));
    for (int k = 0; k < L; k++) {
        cr_assert_float_eq(noisy->stages[k].fwd_time, 11e-3, 1e-15);
        cr_assert_float_eq(noisy->stages[k].bwd_time, 21e-3, 1e-15);
        cr_assert_float_eq(noisy->stages[k].recompute_free_time, 2.2e-3, 1e-15, "%g",
                           noisy->stages[k].recompute_free_time);
    }
    /* a stage that is no repeat keeps its own times */
    so[3].same_as = 3;
    noisy->stages[3].fwd_time = 99e-3;
    RT_OK(remat_profile_apply_ops(noisy, &o));
    cr_assert_float_eq(noisy->stages[3].fwd_time, 99e-3, 1e-15);
    remat_profile_free(noisy);
    remat_profile_free(flat);
}

Test(opplan, monotone_in_the_budget) {
    g_rng = 12345;
    /* a coarse grid keeps the test fast; the grid is what the property is about */
    remat_plan_options po = {.mem_slots = 300, .offload = true, .lossy = true};
    for (int trial = 0; trial < 4; trial++) {
        remat_profile *prof = NULL;
        remat_op_profile *ops = NULL;
        remat_step_profile step;
        random_profiles(12, 12, &prof, &ops, &step);
        if (trial >= 2) { /* a device with transfer ops: offload is a choice too, and bf16 */
            for (int k = 0; k < 12; k++)
                for (int i = 0; i < 12; i++) {
                    remat_op_profile_entry *e = &ops->stages[k].ops[i];
                    e->offloadable = rnd_in(0, 1);
                    e->bf16_bytes = (size_t)rnd_in(0, (int)(e->cache_bytes / 1024)) * 1024;
                }
            ops->host_bytes_per_s = 5e7;
            ops->cast_bytes_per_s = 1e8;
        }
        const remat_step_profile *sp = trial % 2 ? &step : NULL;
        remat_plan *sa = NULL;
        RT_OK(remat_plan_create_ops(&sa, prof, ops, sp, SIZE_MAX, &po));
        size_t top = sa->peak_store_all + 4096, lo = sa->min_budget_bytes;
        remat_plan_free(sa);
        double prev_time = INFINITY;
        int n = 80;
        for (int b = 0; b <= n; b++) {
            size_t budget = lo + (top - lo) * (size_t)b / (size_t)n;
            remat_plan *plan = NULL;
            RT_OK(remat_plan_create_ops(&plan, prof, ops, sp, budget, &po));
            cr_assert_leq(plan->peak_bytes, budget);
            cr_assert_leq(plan->time, prev_time, "trial %d: budget %zu gives %g s > %g s", trial,
                          budget, plan->time, prev_time);
            prev_time = plan->time;
            remat_plan_free(plan);
        }
        /* below the minimum: a clear error naming it */
        remat_plan *plan = NULL;
        cr_assert_eq(remat_plan_create_ops(&plan, prof, ops, sp, lo - 1, &po), REMAT_EINVAL);
        cr_assert_null(plan);
        cr_assert(strstr(remat_last_error(), sp ? "below the smallest" : "below the minimum"), "%s",
                  remat_last_error());
        remat_profile_free(prof);
        remat_op_profile_free(ops);
    }
}

/* The op-level planner is never slower than the block-level one on the same model:
 * remat_plan_create's plans (and remat_plan_create_step's), on each of its grids, are
 * among its candidates, on the profile remat_profile_apply_ops makes. Before, its rotor
 * candidates ran on one coarse grid fixed by the profile and lost to remat_plan_create's
 * budget-scaled and refined grids near the minimum (up to 1.39x slower on such chains).
 * Budgets dense just above the minimum, then across the range; monotone in both. */
Test(opplan, never_slower_than_the_block_level_planner) {
    g_rng = 4242;
    const remat_plan_options po = {.mem_slots = 300};
    int faster = 0;
    for (int trial = 0; trial < 8; trial++) {
        remat_profile *prof = NULL;
        remat_op_profile *ops = NULL;
        remat_step_profile step;
        random_profiles(10, 6, &prof, &ops, &step);
        for (int k = 0; k < 10; k++) ops->stages[k].ops[5].recompute_free = rnd_in(0, 1);
        RT_OK(remat_profile_apply_ops(prof, ops));
        const remat_step_profile *sp = trial % 2 ? &step : NULL;
        remat_plan *sa = NULL;
        RT_OK(remat_plan_create_ops(&sa, prof, ops, sp, SIZE_MAX, &po));
        size_t lo = sa->min_budget_bytes, top = sa->peak_store_all;
        remat_plan_free(sa);
        for (int sweep = 0; sweep < 2; sweep++) {
            size_t hi = sweep ? top : lo + lo / 16;
            double prev = INFINITY;
            for (int b = 0; b <= 60; b++) {
                size_t budget = lo + (hi - lo) * (size_t)b / 60;
                remat_plan *op = NULL, *bl = NULL;
                RT_OK(remat_plan_create_ops(&op, prof, ops, sp, budget, &po));
                if (sp) RT_OK(remat_plan_create_step(&bl, prof, sp, budget, &po));
                else RT_OK(remat_plan_create_ex(&bl, prof, budget, &po));
                cr_assert_leq(op->peak_bytes, budget);
                cr_assert_leq(op->time, bl->time,
                              "trial %d budget %zu: op-level %.9g s (kind %d), block-level %.9g s "
                              "(kind %d)",
                              trial, budget, op->time, (int)op->kind, bl->time, (int)bl->kind);
                cr_assert_leq(op->time, prev, "trial %d budget %zu: slower than a smaller one",
                              trial, budget);
                prev = op->time;
                faster += op->time < bl->time * (1 - 1e-9);
                remat_plan_free(op);
                remat_plan_free(bl);
            }
        }
        remat_profile_free(prof);
        remat_op_profile_free(ops);
    }
    cr_assert_gt(faster, 0, "keep sets must win somewhere");
}

Test(opplan, bad_arguments) {
    g_rng = 7;
    remat_profile *prof = NULL;
    remat_op_profile *ops = NULL;
    random_profiles(3, 2, &prof, &ops, NULL);
    remat_plan *plan = NULL;
    cr_assert_eq(remat_plan_create_ops(NULL, prof, ops, NULL, 1 << 20, NULL), REMAT_EINVAL);
    cr_assert_eq(remat_plan_create_ops(&plan, prof, NULL, NULL, 1 << 20, NULL), REMAT_EINVAL);
    ops->n_stages = 2;
    cr_assert_eq(remat_plan_create_ops(&plan, prof, ops, NULL, 1 << 20, NULL), REMAT_EINVAL);
    cr_assert(strstr(remat_last_error(), "stages"), "%s", remat_last_error());
    ops->n_stages = 3;
    cr_assert_null(plan);
    remat_op_profile *op2 = NULL;
    cr_assert_eq(remat_profile_ops(&op2, 0, NULL, NULL, NULL), REMAT_EINVAL);
    remat_op_profile_free(NULL);
    remat_op_profile_print(NULL, stderr);
    remat_plan_explain(NULL, NULL, 0, 0, stderr);
    remat_profile_free(prof);
    remat_op_profile_free(ops);
}

/* ---- a transformer chain, run ---------------------------------------------------------------- */
#define TB_N 4
#define TB_DIM 32
#define TB_HEADS 2
#define TB_SEQ 16
#define TB_BATCH 4

typedef struct tchain {
    rt_tblock blk[TB_N];
    remat_stage stages[TB_N];
    remat_tensor *params[TB_N * RT_MAX_PARAMS];
    int n_params;
    remat_tensor *x;
} tchain;

static void tchain_init(tchain *c, double p_drop) {
    c->n_params = 0;
    for (int k = 0; k < TB_N; k++) {
        rt_tblock_init(&c->blk[k], TB_DIM, TB_HEADS, TB_SEQ, p_drop, REMAT_F32, 10u + (unsigned)k);
        c->stages[k] = (remat_stage){rt_tblock_fn, &c->blk[k]};
        c->n_params += rt_tblock_params(&c->blk[k], c->params + c->n_params);
    }
    int64_t xs[3] = {TB_BATCH, TB_SEQ, TB_DIM};
    c->x = rt_rand(3, xs, REMAT_F32, -1, 1, 3);
    RT_OK(remat_set_requires_grad(c->x, true));
}

static void tchain_free(tchain *c) {
    for (int k = 0; k < TB_N; k++) rt_tblock_free(&c->blk[k]);
    remat_release(c->x);
}

/* One step under plan (NULL: no checkpointing); .grad cleared first (the
 * step makes them, as the whole-step model counts). Returns the step's
 * allocator peak (absolute bytes); grads (if non-NULL) receive x's and the
 * parameters' .grad. */
static size_t run_step(tchain *c, const remat_plan *plan, remat_tensor **grads) {
    rt_zero_grads(c->n_params, c->params);
    RT_OK(remat_set_grad(c->x, NULL));
    remat_manual_seed(77);
    rt_device_reset_peak();
    remat_tensor *y = NULL, *loss = NULL;
    if (plan) {
        RT_OK(remat_plan_run(plan, c->stages, c->x, &y));
    } else {
        y = rt_stages_run(c->stages, TB_N, c->x);
    }
    RT_OK(rt_sum_sq_loss(NULL, &y, 1, &loss, 1));
    remat_release(y);
    RT_OK(remat_backward_scalar(loss));
    remat_release(loss);
    size_t peak = rt_device_stats().peak_bytes;
    if (grads) {
        grads[0] = remat_retain(remat_tensor_grad(c->x));
        for (int i = 0; i < c->n_params; i++)
            grads[1 + i] = remat_retain(remat_tensor_grad(c->params[i]));
    }
    return peak;
}

/* The executed-plan tests' start: the chain made (dropout p), a warm-up step (caches,
 * first touch), none's gradients into ref (skipped when NULL), .grad cleared, then the
 * chain's whole-step and op profiles with fixed = what is live when the chain starts.
 * Returns none's step peak (0 without ref). */
static size_t profiled_chain(tchain *c, double p, remat_tensor **ref, remat_step_profile *step,
                             remat_profile **prof, remat_op_profile **ops) {
    tchain_init(c, p);
    run_step(c, NULL, NULL);
    size_t peak_none = ref ? run_step(c, NULL, ref) : 0;
    rt_zero_grads(c->n_params, c->params);
    RT_OK(remat_set_grad(c->x, NULL));
    *step = (remat_step_profile){.fixed_bytes = rt_device_current_bytes()};
    *prof = NULL;
    *ops = NULL;
    rt_profile_chain(prof, ops, step, TB_N, c->stages, c->x, rt_sum_sq_loss);
    return peak_none;
}

/* Ends what profiled_chain began: the ng reference gradients in ref (malloc'd, as is got,
 * whose tensors the test released), the profiles, the chain; then nothing may be left. */
static void profiled_chain_end(tchain *c, remat_tensor **ref, remat_tensor **got, int ng,
                               remat_profile *prof, remat_op_profile *ops) {
    for (int i = 0; ref && i < ng; i++) remat_release(ref[i]);
    free(ref);
    free(got);
    remat_profile_free(prof);
    remat_op_profile_free(ops);
    tchain_free(c);
    cr_assert_eq(remat_live_tensors(), 0);
}

static bool some_op(const remat_stage_ops *so, const char *name) {
    for (int i = 0; i < so->n_ops; i++)
        if (!strcmp(so->ops[i].name, name)) return true;
    return false;
}

Test(opplan, profile_of_a_transformer_chain) {
    tchain c;
    tchain_init(&c, 0.1);
    remat_op_profile *ops = NULL;
    remat_profile_options po = {.runs = 1};
    RT_OK(remat_profile_ops(&ops, TB_N, c.stages, c.x, &po));
    cr_assert_eq(ops->n_stages, TB_N);
    const remat_stage_ops *s0 = &ops->stages[0];
    cr_assert_geq(s0->n_ops, 10);
    cr_assert(some_op(s0, "remat_linear") && some_op(s0, "remat_layer_norm") &&
              some_op(s0, "remat_dropout"));
    for (int k = 1; k < TB_N; k++)
        cr_assert_eq(ops->stages[k].same_as, 0, "stage %d is a repeat of stage 0", k);
    size_t lean = 0, cached = 0;
    int views = 0, zero_cost = 0;
    for (int i = 0; i < s0->n_ops; i++) {
        const remat_op_profile_entry *e = &s0->ops[i];
        lean += e->lean_bytes;
        cached += e->cache_bytes;
        views += e->n_saved_views;
        zero_cost += e->cacheable && e->cache_bytes == 0;
        cr_assert_geq(e->time, 0);
        if (remat_tensor_device(c.x).type == REMAT_CPU) cr_assert(!e->offloadable);
        if (!strcmp(e->name, "remat_linear")) cr_assert_gt(e->cache_bytes, 0);
        if (!strcmp(e->name, "remat_dropout")) cr_assert_gt(e->lean_bytes, 0, "a 1-bit mask");
    }
    cr_assert_gt(lean, 0);
    cr_assert_gt(views, 0, "linear saves its input: a view of nothing new");
    cr_assert_gt(zero_cost, 0, "reshape/transpose outputs are views: keeping them costs nothing");
    cr_assert_gt(cached, 0);
    /* the profile left gradients alone */
    for (int i = 0; i < c.n_params; i++) cr_assert_null(remat_tensor_grad(c.params[i]));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    remat_op_profile_print(ops, f);
    fclose(f);
    cr_assert(strstr(buf, "4 stages like it"), "%s", buf);
    free(buf);
    remat_op_profile_free(ops);
    tchain_free(&c);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* The profile's recompute_free against what a recomputation runs: early
 * stop ends it at a block's last save. Without dropout the block's last
 * saving op is the MLP's down projection, which saves its input and weight
 * before its kernel: neither it nor the residual add after it runs again.
 * With dropout after it, the dropout's mask (saved after its kernel) is the
 * last save, so the projection runs again. Checked against the recompute
 * phase's matmul calls of a step with every block checkpointed. */
static void free_ops_match_the_recomputation(double p_drop, int want_free_linears) {
    tchain c;
    tchain_init(&c, p_drop);
    remat_op_profile *ops = NULL;
    remat_profile_options po = {.runs = 1};
    RT_OK(remat_profile_ops(&ops, TB_N, c.stages, c.x, &po));
    const remat_stage_ops *s0 = &ops->stages[0];
    int last_save = -1, linears = 0, free_linears = 0;
    for (int i = 0; i < s0->n_ops; i++)
        if (s0->ops[i].n_saved > 0) last_save = i;
    for (int i = 0; i < s0->n_ops; i++) {
        const remat_op_profile_entry *e = &s0->ops[i];
        if (!strcmp(e->name, "remat_linear")) linears++, free_linears += e->recompute_free;
        if (i < last_save)
            cr_assert(!e->recompute_free, "op %d %s before the last save", i, e->name);
        if (i > last_save) cr_assert(e->recompute_free, "op %d %s after the last save", i, e->name);
    }
    cr_assert_eq(free_linears, want_free_linears, "p_drop %g", p_drop);
    cr_assert_lt(last_save, s0->n_ops - 1, "the residual add saves nothing");
    void *uds[TB_N];
    for (int k = 0; k < TB_N; k++) uds[k] = &c.blk[k];
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    rt_grads g = {0};
    RT_OK(remat_timing_begin());
    rt_run_blocks(5, TB_N, rt_tblock_fn, uds, c.params, c.n_params, c.x, &o, &g);
    remat_timing *t = NULL;
    RT_OK(remat_timing_end(&t));
    int64_t rec = 0;
    for (int i = 0; i < remat_timing_count(t); i++) {
        const remat_timing_row *r = remat_timing_row_at(t, i);
        if (r->phase == REMAT_PHASE_RECOMPUTE && !strcmp(r->op, "remat_linear") &&
            !strcmp(r->kernel, "matmul"))
            rec += r->calls;
    }
    cr_assert_eq(rec, (int64_t)TB_N * (linears - free_linears),
                 "p_drop %g: %" PRId64 " linears recomputed, the profile says %d a block", p_drop,
                 rec, linears - free_linears);
    remat_timing_free(t);
    rt_grads_free(&g);
    remat_op_profile_free(ops);
    tchain_free(&c);
}

Test(opplan, recompute_free_is_what_early_stop_skips) {
    free_ops_match_the_recomputation(0.0, 1);
    free_ops_match_the_recomputation(0.1, 0);
}

Test(opplan, executed_plans_fit_the_step_budget_with_bitwise_gradients) {
    tchain c;
    remat_tensor **ref = calloc(1 + TB_N * RT_MAX_PARAMS, sizeof *ref),
                 **got = calloc(1 + TB_N * RT_MAX_PARAMS, sizeof *got);
    remat_step_profile step;
    remat_profile *prof;
    remat_op_profile *ops;
    size_t peak_none = profiled_chain(&c, 0.1, ref, &step, &prof, &ops);
    int ng = 1 + c.n_params;

    size_t lo, top;
    rt_plan_budget_range(prof, ops, &step, NULL, &lo, &top);
    cr_assert_geq(top, peak_none, "the store-all prediction bounds the plain step (%zu < %zu)", top,
                  peak_none);
    int partial = 0, n = 8;
    double prev_time = INFINITY;
    for (int b = 0; b <= n; b++) {
        size_t budget = lo + (top - lo) * (size_t)b / (size_t)n;
        remat_plan *plan = NULL;
        RT_OK(remat_plan_create_ops(&plan, prof, ops, &step, budget, NULL));
        cr_assert_leq(plan->time, prev_time);
        prev_time = plan->time;
        for (int k = 0; k < TB_N; k++) {
            const remat_plan_stage *st = &plan->stages[k];
            if (!st->keep) continue;
            int kept = 0;
            for (int i = 0; i < st->n_ops; i++) kept += st->keep[i];
            partial += kept > 0 && kept < st->n_ops;
        }
        size_t peak = run_step(&c, plan, got);
        if (getenv("OPPLAN_VERBOSE")) {
            fprintf(stderr, "budget %zu predicted %zu measured %zu kind %d time %.3f ms\n", budget,
                    plan->peak_bytes, peak, (int)plan->kind, plan->time * 1e3);
            remat_plan_explain(plan, ops, peak, 0, stderr);
        }
        cr_assert_leq(peak, budget,
                      "budget %zu: measured step peak %zu above it (predicted %zu, kind %d)",
                      budget, peak, plan->peak_bytes, (int)plan->kind);
        for (int i = 0; i < ng; i++) {
            cr_assert(rt_bitwise_equal(got[i], ref[i]), "budget %zu: gradient %d differs", budget,
                      i);
            remat_release(got[i]);
        }
        remat_plan_free(plan);
    }
    cr_assert_gt(partial, 0, "some plan keeps part of a block");
    profiled_chain_end(&c, ref, got, ng, prof, ops);
}

/* Lossy plans, run: the transformer chain with every op 1 ms (fixed times, so the choices
 * do not depend on this machine's) and conversions nearly free, 9 whole-step budgets from
 * the minimum to store-all. Measured step peak <= predicted <= budget; plans without bf16
 * keeps (or stages stored as bf16) give the gradients of no checkpointing bitwise, plans
 * with them within
 * LOSSY_TOL of the largest value of each gradient (docs/planner.md "Lossy compression"). */
#define LOSSY_TOL (1.0 / 64)

static double rel_err(const remat_tensor *a, const remat_tensor *ref) {
    double *x = rt_values(a), *y = rt_values(ref), top = 0, diff = 0;
    int64_t n = remat_numel(ref);
    for (int64_t i = 0; i < n; i++) {
        top = fmax(top, fabs(y[i]));
        diff = fmax(diff, fabs(x[i] - y[i]));
    }
    free(x);
    free(y);
    return top > 0 ? diff / top : diff;
}

Test(opplan, executed_lossy_plans_fit_and_stay_close) {
    tchain c;
    remat_tensor **ref = calloc(1 + TB_N * RT_MAX_PARAMS, sizeof *ref),
                 **got = calloc(1 + TB_N * RT_MAX_PARAMS, sizeof *got);
    remat_step_profile step;
    remat_profile *prof;
    remat_op_profile *ops;
    profiled_chain(&c, 0.1, ref, &step, &prof, &ops);
    int ng = 1 + c.n_params;
    size_t z = 0; /* on every device: the fenced test device converts as the cpu does */
    for (int i = 0; i < ops->stages[0].n_ops; i++) z += ops->stages[0].ops[i].bf16_bytes;
    cr_assert_gt(z, 0, "the linears' f32 outputs may be kept as bf16");
    cr_assert_gt(ops->cast_bytes_per_s, 0, "measured");
    rt_fix_op_times(prof, ops, &step);
    ops->cast_bytes_per_s = 1e13;
    const remat_plan_options lossy = {.lossy = true};
    remat_plan *sa = NULL;
    RT_OK(remat_plan_create_ops(&sa, prof, ops, &step, SIZE_MAX, &lossy));
    size_t top = sa->peak_store_all, lo = sa->min_budget_bytes;
    remat_plan_free(sa);
    int n = 8, compressing = 0;
    double prev = INFINITY, worst = 0;
    for (int b = 0; b <= n; b++) {
        size_t budget = lo + (top - lo) * (size_t)b / (size_t)n;
        remat_plan *plan = NULL;
        RT_OK(remat_plan_create_ops(&plan, prof, ops, &step, budget, &lossy));
        cr_assert_leq(plan->peak_bytes, budget);
        cr_assert_leq(plan->time, prev, "budget %zu: slower than a smaller budget", budget);
        prev = plan->time;
        int nz = lossy_ops(plan) + bf16_stores(plan);
        compressing += nz > 0;
        size_t peak = run_step(&c, plan, got);
        if (getenv("OPPLAN_VERBOSE")) {
            fprintf(stderr, "budget %zu predicted %zu measured %zu bf16 ops %d\n", budget,
                    plan->peak_bytes, peak, nz);
            remat_plan_explain(plan, ops, peak, 0, stderr);
        }
        cr_assert_leq(peak, plan->peak_bytes, "budget %zu: measured %zu above the prediction %zu",
                      budget, peak, plan->peak_bytes);
        for (int i = 0; i < ng; i++) {
            if (nz) {
                double e = rel_err(got[i], ref[i]);
                worst = fmax(worst, e);
                cr_assert_leq(e, LOSSY_TOL, "budget %zu: gradient %d off by %g of its largest",
                              budget, i, e);
            } else {
                cr_assert(rt_bitwise_equal(got[i], ref[i]), "budget %zu: gradient %d", budget, i);
            }
            remat_release(got[i]);
        }
        remat_plan_free(plan);
    }
    if (getenv("OPPLAN_VERBOSE")) fprintf(stderr, "worst relative gradient error %g\n", worst);
    cr_assert_gt(compressing, 0, "no budget made the plan keep bf16");
    profiled_chain_end(&c, ref, got, ng, prof, ops);
}

/* Stored stages kept as bf16, run: the transformer chain (dropout, fixed op times,
 * conversions nearly free), the profile measuring each block stored under the bf16 hooks;
 * 17 whole-step budgets from the minimum to store-all. Some plan stores a stage as bf16
 * (the last block, stored by every plan near the minimum, holds the step's peak), and
 * every plan that does is strictly faster than the exact plan at its budget; measured step
 * peak <= predicted <= budget; gradients within LOSSY_TOL where something is bf16, bitwise
 * none's otherwise; time monotone; with lossy off no stage is stored as bf16 and the plan
 * is that of no options. --explain names the stages; a stage marked stored as bf16 inside
 * a checkpoint is refused. */
static void assert_refused(tchain *c, const remat_plan *plan, const char *const *says, int n);

Test(opplan, executed_plans_store_stages_as_bf16) {
    tchain c;
    remat_tensor **ref = calloc(1 + TB_N * RT_MAX_PARAMS, sizeof *ref),
                 **got = calloc(1 + TB_N * RT_MAX_PARAMS, sizeof *got);
    remat_step_profile step;
    remat_profile *prof;
    remat_op_profile *ops;
    profiled_chain(&c, 0.1, ref, &step, &prof, &ops);
    int ng = 1 + c.n_params;
    for (int k = 0; k < TB_N; k++) {
        const remat_stage_ops *so = &ops->stages[k];
        cr_assert_gt(so->store_bf16_bytes, 0, "stage %d: the linears' inputs are f32 saves", k);
        cr_assert_lt(so->store_bf16_saved, prof->stages[k].saved_bytes,
                     "stage %d stored as bf16 keeps less: %zu vs %zu", k, so->store_bf16_saved,
                     prof->stages[k].saved_bytes);
    }
    rt_fix_op_times(prof, ops, &step);
    ops->cast_bytes_per_s = 1e13;
    const remat_plan_options lossy = {.lossy = true}, exact = {0};
    remat_plan *sa = NULL;
    RT_OK(remat_plan_create_ops(&sa, prof, ops, &step, SIZE_MAX, &lossy));
    size_t top = sa->peak_store_all, lo = sa->min_budget_bytes;
    cr_assert_eq(bf16_stores(sa), 0, "everything fits: nothing stored as bf16");
    remat_plan_free(sa);
    int n = 16, storing = 0;
    double prev = INFINITY, worst = 0;
    remat_plan *kept = NULL; /* a plan storing a stage as bf16 */
    for (int b = 0; b <= n; b++) {
        size_t budget = lo + (top - lo) * (size_t)b / (size_t)n;
        remat_plan *plan = NULL, *plain = NULL, *none = NULL;
        RT_OK(remat_plan_create_ops(&plan, prof, ops, &step, budget, &lossy));
        RT_OK(remat_plan_create_ops(&plain, prof, ops, &step, budget, &exact));
        RT_OK(remat_plan_create_ops(&none, prof, ops, &step, budget, NULL));
        assert_same_plan(plain, none);
        cr_assert_eq(bf16_stores(plain), 0);
        cr_assert_leq(plan->peak_bytes, budget);
        cr_assert_leq(plan->time, prev, "budget %zu: slower than a smaller budget", budget);
        prev = plan->time;
        int nz = lossy_ops(plan), ns = bf16_stores(plan);
        if (ns)
            cr_assert_lt(plan->time, plain->time, "budget %zu: stores bf16 for nothing", budget);
        storing += ns > 0;
        size_t peak = run_step(&c, plan, got);
        if (getenv("OPPLAN_VERBOSE")) {
            fprintf(stderr, "budget %zu predicted %zu measured %zu bf16 ops %d stored bf16 %d\n",
                    budget, plan->peak_bytes, peak, nz, ns);
            remat_plan_explain(plan, ops, peak, 0, stderr);
        }
        cr_assert_leq(peak, plan->peak_bytes, "budget %zu: measured %zu above the prediction %zu",
                      budget, peak, plan->peak_bytes);
        for (int i = 0; i < ng; i++) {
            if (nz || ns) {
                double e = rel_err(got[i], ref[i]);
                worst = fmax(worst, e);
                cr_assert_leq(e, LOSSY_TOL, "budget %zu: gradient %d off by %g of its largest",
                              budget, i, e);
            } else {
                cr_assert(rt_bitwise_equal(got[i], ref[i]), "budget %zu: gradient %d", budget, i);
            }
            remat_release(got[i]);
        }
        /* the plain plan runs bitwise */
        run_step(&c, plain, got);
        for (int i = 0; i < ng; i++) {
            cr_assert(rt_bitwise_equal(got[i], ref[i]), "budget %zu: exact gradient %d", budget, i);
            remat_release(got[i]);
        }
        remat_plan_free(plain);
        remat_plan_free(none);
        if (ns && !kept) kept = plan;
        else remat_plan_free(plan);
    }
    if (getenv("OPPLAN_VERBOSE")) fprintf(stderr, "worst relative gradient error %g\n", worst);
    cr_assert_gt(storing, 0, "no budget made the plan store a stage as bf16");
    /* what --explain and the structure say */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    remat_plan_explain(kept, ops, 0, 0, f);
    remat_plan_print(kept, f);
    fclose(f);
    cr_assert(strstr(buf, "stored as bf16 (lossy:") && strstr(buf, " bf16") &&
                  strstr(buf, "kept as bf16 (lossy:"),
              "%s", buf);
    free(buf);
    /* marked on a stage inside a checkpoint: refused before anything runs */
    int k = 0;
    while (k < TB_N && kept->stages[k].action != REMAT_STAGE_CHECKPOINT) k++;
    cr_assert_lt(k, TB_N, "a plan storing a stage as bf16 checkpoints another");
    kept->stages[k].store_bf16 = true;
    char says[48];
    snprintf(says, sizeof says, "stage %d is marked stored as bf16", k);
    const char *msg[] = {"remat_plan_run", says};
    assert_refused(&c, kept, msg, 2);
    remat_plan_free(kept);
    profiled_chain_end(&c, ref, got, ng, prof, ops);
}

/* ---- stored stages as bf16 under the caller's own saved-tensor hooks --------------------- */
/* A caller's hooks that keep each save as it is and count what they see. */
typedef struct user_hooks {
    int packs, bf16, unpacks, frees;
} user_hooks;

static void *uh_pack(void *ud, remat_tensor *t) {
    user_hooks *u = ud;
    u->packs++;
    u->bf16 += remat_tensor_dtype(t) == REMAT_BF16;
    return remat_retain(t);
}
static remat_status uh_unpack(void *ud, void *handle, remat_tensor **out) {
    ((user_hooks *)ud)->unpacks++;
    *out = remat_retain(handle);
    return REMAT_OK;
}
static void uh_free(void *ud, void *handle) {
    ((user_hooks *)ud)->frees++;
    remat_release(handle);
}

/* run_step under the caller's hooks u, pushed around the whole step. */
static void run_step_hooked(tchain *c, const remat_plan *plan, user_hooks *u, remat_tensor **g) {
    *u = (user_hooks){0};
    remat_saved_hooks h = {uh_pack, uh_unpack, uh_free, u};
    RT_OK(remat_saved_hooks_push(&h));
    run_step(c, plan, g);
    RT_OK(remat_saved_hooks_pop());
    cr_assert_eq(u->frees, u->packs, "every handle of the caller's hooks freed");
}

/* The plan run inside the caller's own non-reentrant checkpoint. */
typedef struct plan_in_ckpt {
    const remat_plan *plan;
    tchain *c;
} plan_in_ckpt;
static int plan_ckpt_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out,
                        int n_out) {
    (void)n_in, (void)n_out;
    plan_in_ckpt *p = ud;
    return remat_plan_run(p->plan, p->c->stages, in[0], &out[0]);
}

/* One step with the plan inside remat_checkpoint; *after_fwd: the bytes live once its
 * forward has run (before the loss). Gradients into g. */
static void run_step_in_checkpoint(tchain *c, const remat_plan *plan, size_t *after_fwd,
                                   remat_tensor **g) {
    rt_zero_grads(c->n_params, c->params);
    RT_OK(remat_set_grad(c->x, NULL));
    remat_manual_seed(77);
    size_t before = rt_device_current_bytes();
    plan_in_ckpt pc = {plan, c};
    remat_checkpoint_options o = {.use_reentrant = REMAT_OPT_FALSE};
    remat_tensor *y = NULL, *loss = NULL;
    RT_OK(remat_checkpoint(plan_ckpt_fn, &pc, 1, &c->x, 1, &y, &o));
    *after_fwd = rt_device_current_bytes() - before;
    RT_OK(rt_sum_sq_loss(NULL, &y, 1, &loss, 1));
    remat_release(y);
    RT_OK(remat_backward_scalar(loss));
    remat_release(loss);
    g[0] = remat_retain(remat_tensor_grad(c->x));
    for (int i = 0; i < c->n_params; i++) g[1 + i] = remat_retain(remat_tensor_grad(c->params[i]));
}

/* A stage the plan stores as bf16 runs its forward under the planner's bf16 hooks; a
 * caller who runs the step under saved-tensor hooks of their own (offload, compression, a
 * checkpoint around the plan) must still see every save of that stage: the planner's hooks
 * hand what they store (the bf16 copy, or the save as it is) to the caller's, and get it
 * back from them (docs/planner.md "Lossy compression"). Here: the store-all plan with stages
 * 1 and 3 marked stored as bf16, run under counting hooks that keep each save as it is —
 * they see as many saves as under the plan storing everything in f32, some of them bf16
 * copies, unpack as many, and the gradients are bitwise those of the same plan without the
 * caller's hooks; inside the caller's non-reentrant checkpoint the stage's saves become the
 * checkpoint's placeholders (the forward leaves exactly the bytes the f32 plan leaves, none
 * of the bf16 copies) and the recomputed gradients are again bitwise the same. Before the
 * hooks composed, the bf16 stages' saves bypassed the caller's hooks (fewer packs) and
 * their bf16 copies stayed alive inside the caller's checkpoint. */
Test(opplan, stored_bf16_stages_pass_saves_through_the_callers_hooks) {
    tchain c;
    remat_step_profile step;
    remat_profile *prof;
    remat_op_profile *ops;
    profiled_chain(&c, 0.1, NULL, &step, &prof, &ops);
    int ng = 1 + c.n_params;
    remat_tensor **ref = calloc((size_t)ng, sizeof *ref), **got = calloc((size_t)ng, sizeof *got);
    remat_plan *f32 = NULL, *z = NULL;
    RT_OK(remat_plan_create_ops(&f32, prof, ops, &step, SIZE_MAX, NULL));
    RT_OK(remat_plan_create_ops(&z, prof, ops, &step, SIZE_MAX, NULL));
    for (int k = 0; k < TB_N; k++)
        cr_assert_eq(z->stages[k].action, REMAT_STAGE_STORE, "store-all stores stage %d", k);
    z->stages[1].store_bf16 = z->stages[3].store_bf16 = true;

    run_step(&c, z, ref); /* no hooks of the caller's */
    user_hooks u32, uz;
    run_step_hooked(&c, f32, &u32, got);
    for (int i = 0; i < ng; i++) remat_release(got[i]);
    run_step_hooked(&c, z, &uz, got);
    if (getenv("OPPLAN_VERBOSE"))
        fprintf(stderr,
                "caller's hooks: f32 plan %d packs, %d unpacks; bf16 plan %d packs (%d bf16), %d "
                "unpacks\n",
                u32.packs, u32.unpacks, uz.packs, uz.bf16, uz.unpacks);
    cr_assert_gt(u32.packs, 0);
    cr_assert_eq(u32.bf16, 0);
    cr_assert_eq(uz.packs, u32.packs, "the caller's hooks saw %d saves, %d under the f32 plan",
                 uz.packs, u32.packs);
    cr_assert_gt(uz.bf16, 0, "the stages stored as bf16 hand their bf16 copies on");
    cr_assert_eq(uz.unpacks, u32.unpacks);
    for (int i = 0; i < ng; i++) {
        cr_assert(rt_bitwise_equal(got[i], ref[i]), "gradient %d differs under the caller's hooks",
                  i);
        remat_release(got[i]);
    }

    /* inside the caller's checkpoint */
    size_t live32 = 0, livez = 0;
    run_step_in_checkpoint(&c, f32, &live32, got);
    for (int i = 0; i < ng; i++) remat_release(got[i]);
    run_step_in_checkpoint(&c, z, &livez, got);
    if (getenv("OPPLAN_VERBOSE"))
        fprintf(stderr, "inside a checkpoint: %zu bytes live after the forward (f32 plan %zu)\n",
                livez, live32);
    cr_assert_eq(livez, live32, "after the forward: %zu bytes live, the f32 plan %zu", livez,
                 live32);
    for (int i = 0; i < ng; i++) {
        cr_assert(rt_bitwise_equal(got[i], ref[i]), "gradient %d differs inside a checkpoint", i);
        remat_release(got[i]);
    }
    remat_plan_free(f32);
    remat_plan_free(z);
    profiled_chain_end(&c, ref, got, ng, prof, ops);
}

/* ---- keep sets only where the model has them --------------------------------------------- */
/* plan's top level [ckpt 0-0: 0] [ckpt 1-1: 1] ... rewritten as [ckpt 0-1: [ckpt 0-0: 0] 1] ...,
 * stage 0's keep set left in place */
static void nest_first_two(remat_plan *p) {
    remat_plan_node *nd = malloc(sizeof *nd * (size_t)(p->n_stages + 2));
    cr_assert(nd);
    int n = 0;
    nd[n++] = (remat_plan_node){REMAT_PLAN_CHECKPOINT, 0, 1, 0, -1};
    nd[n++] = (remat_plan_node){REMAT_PLAN_CHECKPOINT, 0, 0, 1, 0};
    nd[n++] = (remat_plan_node){REMAT_PLAN_STORE, 0, 0, 2, 1};
    nd[n++] = (remat_plan_node){REMAT_PLAN_STORE, 1, 1, 1, 0};
    for (int k = 2; k < p->n_stages; k++)
        nd[n++] = (remat_plan_node){REMAT_PLAN_STORE, k, k, 0, -1};
    free(p->nodes);
    p->nodes = nd;
    p->n_nodes = n;
    for (int k = 1; k < p->n_stages; k++) {
        free(p->stages[k].keep);
        p->stages[k].keep = NULL;
        p->stages[k].store_bf16 = false;
    }
}

static void assert_refused(tchain *c, const remat_plan *plan, const char *const *says, int n) {
    remat_tensor *y = c->x; /* not a reference: NULLed on failure */
    cr_assert_eq(remat_plan_run(plan, c->stages, c->x, &y), REMAT_EINVAL);
    cr_assert_null(y);
    const char *e = remat_last_error();
    if (getenv("OPPLAN_VERBOSE")) fprintf(stderr, "%s\n", e);
    for (int i = 0; i < n; i++) cr_assert(strstr(e, says[i]), "\"%s\" not in: %s", says[i], e);
}

/* Op-level keep sets, exact or lossy, run only on a stage checkpointed alone at the top
 * level (docs/planner.md): nested inside a checkpointed segment (where the stage's region
 * would hold its kept tensors from the segment's first forward and cache them again in the
 * segment's recomputation, outside every budget) or on a stored stage, remat_plan_run
 * refuses the plan, naming the stage, and runs nothing; a nested stage whose keep set keeps
 * nothing runs. */
Test(opplan, keep_sets_nested_or_stored_are_refused) {
    tchain c;
    remat_step_profile step;
    remat_profile *prof;
    remat_op_profile *ops;
    profiled_chain(&c, 0.1, NULL, &step, &prof, &ops);
    rt_fix_op_times(prof, ops, &step);
    ops->cast_bytes_per_s = 1e13;
    for (int lossy = 0; lossy <= 1; lossy++) {
        const remat_plan_options opt = {.lossy = lossy};
        remat_plan *plan = NULL;
        RT_OK(remat_plan_create_ops(&plan, prof, ops, &step, SIZE_MAX, &opt));
        size_t top = plan->peak_store_all, lo = plan->min_budget_bytes;
        /* a budget where stage 0 is checkpointed keeping some ops (some as bf16 when lossy;
         * which budgets do depends on the profile) */
        int kept = 0, z = 0;
        for (int t = 0; t < 23 && !(kept > 0 && (z > 0) == (lossy != 0)); t++) {
            const int d = 1 + (t + 7) % 23; /* a third of the way first */
            remat_plan_free(plan);
            plan = NULL;
            RT_OK(remat_plan_create_ops(&plan, prof, ops, &step, lo + (top - lo) * (size_t)d / 24,
                                        &opt));
            const remat_plan_stage *s0 = &plan->stages[0];
            kept = z = 0;
            for (int i = 0; s0->keep && i < s0->n_ops; i++) {
                kept += s0->keep[i] != REMAT_OP_RECOMPUTE;
                z += s0->keep[i] == REMAT_OP_KEEP_BF16;
            }
        }
        cr_assert(kept > 0 && (z > 0) == (lossy != 0), "stage 0 keeps %d ops, %d as bf16", kept, z);
        cr_assert_eq(plan->nodes[0].op, REMAT_PLAN_CHECKPOINT);
        cr_assert_eq(plan->nodes[0].last, 0);
        run_step(&c, plan, NULL); /* at the top level it runs */
        nest_first_two(plan);
        char n0[64], zz[64];
        snprintf(n0, sizeof n0, "stage 0 keeps %d ops", kept);
        snprintf(zz, sizeof zz, "(%d of them as bf16)", z);
        const char *says[] = {"remat_plan_run", n0,
                              "checkpointed segment of stages 0-0, itself nested", "stages[0].keep",
                              zz};
        assert_refused(&c, plan, says, lossy ? 5 : 4);
        if (!lossy) cr_assert_null(strstr(remat_last_error(), "bf16"));
        /* a multi-stage segment around a kept stage: refused too (it was ignored) */
        plan->nodes[1] = (remat_plan_node){REMAT_PLAN_STORE, 0, 0, 1, 0};
        memmove(&plan->nodes[2], &plan->nodes[3],
                sizeof *plan->nodes * (size_t)(plan->n_nodes - 3));
        plan->n_nodes--;
        const char *seg[] = {n0, "checkpointed segment of stages 0-1:"};
        assert_refused(&c, plan, seg, 2);
        /* a stored stage with a keep set */
        plan->nodes[0] = (remat_plan_node){REMAT_PLAN_STORE, 0, 0, 0, -1};
        plan->nodes[1] = (remat_plan_node){REMAT_PLAN_STORE, 1, 1, 0, -1};
        for (int i = 2; i < plan->n_nodes; i++)
            plan->nodes[i].depth = 0, plan->nodes[i].parent = -1;
        const char *st[] = {"stage 0 is stored"};
        assert_refused(&c, plan, st, 1);
        /* a keep set that keeps nothing is a plain checkpoint wherever it is */
        memset(plan->stages[0].keep, REMAT_OP_RECOMPUTE, (size_t)plan->stages[0].n_ops);
        nest_first_two(plan);
        remat_tensor *g[1 + TB_N * RT_MAX_PARAMS];
        run_step(&c, plan, g);
        for (int i = 0; i <= c.n_params; i++) remat_release(g[i]);
        remat_plan_free(plan);
    }
    remat_profile_free(prof);
    remat_op_profile_free(ops);
    tchain_free(&c);
    cr_assert_eq(remat_live_tensors(), 0);
}

/* ---- a stage with an in-place op ----------------------------------------------------------- */
typedef struct ip_stage {
    remat_tensor *w1, *w2;
} ip_stage;

/* y = w2 · (gelu(w1 · x) += x) : the add modifies gelu's output in place */
static int ip_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    (void)n_in, (void)n_out;
    ip_stage *s = ud;
    remat_tensor *h = NULL, *g = NULL;
    int rc = remat_linear(&h, in[0], s->w1, NULL);
    if (!rc) rc = remat_gelu(&g, h, REMAT_GELU_TANH);
    if (!rc) rc = remat_add_(g, in[0], 1.0);
    if (!rc) rc = remat_linear(&out[0], g, s->w2, NULL);
    remat_release(h);
    remat_release(g);
    return rc;
}

Test(opplan, nothing_before_an_in_place_op_is_kept) {
    enum { N = 3, W = 24, R = 64 };
    ip_stage st[N];
    remat_stage stages[N];
    remat_tensor *params[2 * N];
    for (int k = 0; k < N; k++) {
        int64_t ws[2] = {W, W};
        st[k].w1 = rt_rand(2, ws, REMAT_F32, -0.3, 0.3, 40u + (unsigned)k);
        st[k].w2 = rt_rand(2, ws, REMAT_F32, -0.3, 0.3, 50u + (unsigned)k);
        RT_OK(remat_set_requires_grad(st[k].w1, true));
        RT_OK(remat_set_requires_grad(st[k].w2, true));
        params[2 * k] = st[k].w1, params[2 * k + 1] = st[k].w2;
        stages[k] = (remat_stage){ip_fn, &st[k]};
    }
    int64_t xs[2] = {R, W};
    remat_tensor *x = rt_rand(2, xs, REMAT_F32, -1, 1, 9);
    RT_OK(remat_set_requires_grad(x, true));
    remat_op_profile *ops = NULL;
    remat_profile *prof = NULL;
    remat_profile_options po = {.runs = 1};
    RT_OK(remat_profile_ops(&ops, N, stages, x, &po));
    RT_OK(remat_profile_stages(&prof, N, stages, x, &po));
    const remat_stage_ops *s0 = &ops->stages[0];
    cr_assert_eq(s0->n_ops, 4);
    cr_assert_str_eq(s0->ops[2].name, "remat_add_");
    cr_assert(!s0->ops[0].cacheable && !s0->ops[1].cacheable && !s0->ops[2].cacheable);
    cr_assert(s0->ops[3].cacheable, "the linear after it may be kept");
    /* every plan runs and gives the gradients of no checkpointing */
    remat_tensor *ref[2 * N + 1], *got[2 * N + 1];
    for (int pass = 0; pass < 2; pass++) {
        remat_plan *sa = NULL;
        RT_OK(remat_plan_create_ops(&sa, prof, ops, NULL, SIZE_MAX, NULL));
        size_t lo = sa->min_budget_bytes, hi = sa->peak_store_all;
        remat_plan_free(sa);
        for (int b = 0; b <= (pass ? 4 : 0); b++) {
            remat_plan *plan = NULL;
            if (pass)
                RT_OK(remat_plan_create_ops(&plan, prof, ops, NULL, lo + (hi - lo) * (size_t)b / 4,
                                            NULL));
            rt_zero_grads(2 * N, params);
            RT_OK(remat_set_grad(x, NULL));
            remat_tensor *y = NULL, *loss = NULL;
            if (plan) RT_OK(remat_plan_run(plan, stages, x, &y));
            else {
                remat_tensor *cur = remat_retain(x);
                for (int k = 0; k < N; k++) {
                    remat_tensor *nx = NULL;
                    RT_OK(ip_fn(&st[k], &cur, 1, &nx, 1));
                    remat_release(cur);
                    cur = nx;
                }
                y = cur;
            }
            RT_OK(rt_sum_sq_loss(NULL, &y, 1, &loss, 1));
            RT_OK(remat_backward_scalar(loss));
            remat_release(loss);
            remat_release(y);
            remat_tensor **dst = pass ? got : ref;
            dst[0] = remat_retain(remat_tensor_grad(x));
            for (int i = 0; i < 2 * N; i++) dst[1 + i] = remat_retain(remat_tensor_grad(params[i]));
            if (pass) {
                for (int i = 0; i <= 2 * N; i++) {
                    cr_assert(rt_bitwise_equal(got[i], ref[i]), "budget %d: gradient %d", b, i);
                    remat_release(got[i]);
                }
            }
            remat_plan_free(plan);
        }
    }
    for (int i = 0; i <= 2 * N; i++) remat_release(ref[i]);
    for (int i = 0; i < 2 * N; i++) remat_release(params[i]);
    remat_release(x);
    remat_profile_free(prof);
    remat_op_profile_free(ops);
    cr_assert_eq(remat_live_tensors(), 0);
}
