/*
 * src/planner/explain.c — remat_plan_explain: what a plan keeps and
 * recomputes inside each stage, in the words of the op profile, with the
 * prediction beside a measurement when the caller has one (`remat train
 * --explain`).
 */
#include <inttypes.h>
#include <string.h>

#include "core/core.h"
#include "planner_internal.h"

/* An op the recomputation never runs (recompute_free, early stop), listed apart. */
#define OP_NOT_RERUN (-1)

/* What the plan does with op i of a stage (REMAT_OP_*, or OP_NOT_RERUN). */
static int op_action(const remat_plan_stage *st, const remat_stage_ops *so, int i) {
    int a = st->keep ? st->keep[i] : REMAT_OP_RECOMPUTE;
    if (a == REMAT_OP_RECOMPUTE && so && i < so->n_ops && so->ops[i].recompute_free)
        return OP_NOT_RERUN;
    return a;
}

/* "remat_linear x2, remat_gelu" — the ops of stage s the plan gives action
 * `want`, names grouped in order of first appearance. */
static void list_ops(FILE *f, const remat_plan_stage *st, const remat_stage_ops *so, int want) {
    bool any = false;
    for (int i = 0; i < st->n_ops; i++) {
        if (op_action(st, so, i) != want) continue;
        const char *name = so && i < so->n_ops ? so->ops[i].name : NULL;
        /* counted at its first occurrence */
        bool seen = false;
        for (int j = 0; j < i && name && !seen; j++)
            seen = op_action(st, so, j) == want && !strcmp(so->ops[j].name, name);
        if (seen) continue;
        int count = 0;
        for (int j = i; j < st->n_ops; j++)
            if (op_action(st, so, j) == want && (name ? !strcmp(so->ops[j].name, name) : j == i))
                count++;
        const char *shown = name ? (strncmp(name, "remat_", 6) ? name : name + 6) : NULL;
        if (shown) fprintf(f, "%s%s", any ? ", " : "", shown);
        else fprintf(f, "%sop %d", any ? ", " : "", i);
        if (count > 1) fprintf(f, " x%d", count);
        any = true;
    }
    if (!any) fprintf(f, "-");
}

/* A checkpointed stage of an op-level plan: what it keeps (as bf16), offloads, recomputes. */
static void explain_op_stage(FILE *f, const remat_plan_stage *st, const remat_stage_ops *so) {
    int kept = 0, offl = 0, lossy = 0;
    for (int i = 0; i < st->n_ops; i++) {
        kept += st->keep[i] == REMAT_OP_KEEP || st->keep[i] == REMAT_OP_KEEP_BF16;
        offl += st->keep[i] == REMAT_OP_OFFLOAD;
        lossy += st->keep[i] == REMAT_OP_KEEP_BF16;
    }
    fprintf(f, "checkpointed, keeps %d of %d ops (%.2f MiB)", kept, st->n_ops,
            PL_MIB(st->keep_bytes));
    if (lossy)
        fprintf(f,
                ", %d of them as bf16 (lossy: %.2f MiB of f32 in half the bytes, %.3f ms of "
                "conversions)",
                lossy, PL_MIB(st->bf16_bytes), st->cast_time * 1e3);
    if (offl)
        fprintf(f, ", offloads %d (%.2f MiB to host memory, %.3f ms of copies not hidden)", offl,
                PL_MIB(st->offload_bytes), st->offload_time * 1e3);
    fprintf(f, ", recomputes %.3f ms of its forward\n", st->recompute_time * 1e3);
    fprintf(f, "      kept:       ");
    list_ops(f, st, so, REMAT_OP_KEEP);
    if (lossy) {
        fprintf(f, "\n      kept bf16:  ");
        list_ops(f, st, so, REMAT_OP_KEEP_BF16);
    }
    if (offl) {
        fprintf(f, "\n      offloaded:  ");
        list_ops(f, st, so, REMAT_OP_OFFLOAD);
    }
    fprintf(f, "\n      recomputed: ");
    list_ops(f, st, so, REMAT_OP_RECOMPUTE);
    bool not_rerun = false;
    for (int i = 0; so && i < st->n_ops && i < so->n_ops; i++)
        not_rerun |= op_action(st, so, i) == OP_NOT_RERUN;
    if (not_rerun) {
        fprintf(f, "\n      not rerun:  ");
        list_ops(f, st, so, OP_NOT_RERUN);
        fprintf(f, " (after the last save: early stop)");
    }
    fputc('\n', f);
}

void remat_plan_explain(const remat_plan *p, const remat_op_profile *ops, size_t measured_peak,
                        double measured_time, FILE *f) {
    if (!p || !f || !p->stages) return;
    if (ops && ops->n_stages != p->n_stages) ops = NULL;
    fprintf(f, "plan explained (%d stages):\n", p->n_stages);
    for (int k = 0; k < p->n_stages; k++) {
        const remat_plan_stage *st = &p->stages[k];
        const remat_stage_ops *so = ops ? &ops->stages[k] : NULL;
        /* runs of identical lines are folded: stages k..e */
        int e = k;
        while (e + 1 < p->n_stages) {
            const remat_plan_stage *nx = &p->stages[e + 1];
            bool same = nx->action == st->action && nx->n_forward == st->n_forward &&
                        nx->store_bf16 == st->store_bf16 && nx->n_ops == st->n_ops &&
                        nx->keep_bytes == st->keep_bytes && (!st->keep) == (!nx->keep) &&
                        (!st->keep || !memcmp(st->keep, nx->keep, (size_t)st->n_ops)) &&
                        (!ops || ops->stages[e + 1].same_as == so->same_as);
            if (!same) break;
            e++;
        }
        if (e > k) fprintf(f, "  stages %d-%d: ", k, e);
        else fprintf(f, "  stage %d: ", k);
        if (st->action == REMAT_STAGE_STORE && st->store_bf16) {
            fprintf(f,
                    "stored as bf16 (lossy: %.2f MiB of the f32 it saves kept in half the "
                    "bytes, %.3f ms of conversions; no recomputation)\n",
                    PL_MIB(st->bf16_bytes), st->cast_time * 1e3);
        } else if (st->action == REMAT_STAGE_STORE) {
            fprintf(f, "stored (everything it saves is kept; no recomputation)\n");
        } else if (st->action == REMAT_STAGE_RECOMPUTE) {
            fprintf(f, "inside a checkpointed segment (recomputed, %d forward runs)\n",
                    st->n_forward);
        } else if (!st->keep) {
            fprintf(f, "checkpointed: keeps its input, recomputes every op (%d forward runs)\n",
                    st->n_forward);
        } else {
            explain_op_stage(f, st, so);
        }
        k = e;
    }
    if (p->has_profile) {
        fprintf(f, "  predicted: %speak %zu bytes (%.2f MiB; budget %zu), step %.3f ms\n",
                p->whole_step ? "step " : "", p->peak_bytes, PL_MIB(p->peak_bytes), p->budget_bytes,
                p->time * 1e3);
        if (measured_peak > 0) {
            fprintf(f,
                    "  measured:  %speak %zu bytes (%.2f MiB; %+.0f bytes against the prediction)",
                    p->whole_step ? "step " : "", measured_peak, PL_MIB(measured_peak),
                    (double)measured_peak - (double)p->peak_bytes);
            if (measured_time > 0)
                fprintf(f, ", step %.3f ms (%+.1f%%)", measured_time * 1e3,
                        p->time > 0 ? (measured_time / p->time - 1) * 100 : 0.0);
            fputc('\n', f);
        } else if (measured_time > 0) {
            fprintf(f, "  measured:  step %.3f ms (%+.1f%% against the prediction)\n",
                    measured_time * 1e3, p->time > 0 ? (measured_time / p->time - 1) * 100 : 0.0);
        }
    }
}
