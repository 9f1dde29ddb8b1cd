/* tools/report/train_report.c — what `remat train` prints at the end: --report's
 * residual reports, the summary table or the --json object, and the
 * message of a run a signal stopped. */
#include "train/train_run.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/term.h"
#include "cli/util.h"
#include "io/json.h"

/* --report: the residual reports of the run's first step. */
static int print_reports(FILE *f, const config *c, const step_report *rep, int64_t step,
                         const remat_sac_stats *sac) {
    term_printf(f, "\nresidual report of step %" PRId64 " (strategy %s), forward:\n", step,
                c->strat.name);
    int rc = remat_residual_report_print(rep->forward, f);
    if (rc) return rc;
    remat_residual_totals t;
    memset(&t, 0, sizeof t);
    remat_residual_report_totals(rep->forward, &t);
    char kb[32], cb[32];
    util_fmt_bytes((double)t.kept_bytes, kb, sizeof kb);
    if (c->strat.kind == STRAT_NONE)
        term_printf(f, "the forward keeps %s for backward (the graph's saves)\n", kb);
    else if (sac)
        term_printf(f,
                    "the forward keeps %s for backward (the graph's saves, block inputs included) "
                    "+ %s in the selective cache (%" PRId64 " ops); 'h' entries went to "
                    "checkpoints and are recomputed or served from the cache\n",
                    kb, util_fmt_bytes((double)sac->bytes_cached, cb, sizeof cb), sac->ops_cached);
    else
        term_printf(f,
                    "the forward keeps %s for backward (the graph's saves, checkpoint inputs "
                    "included); 'h' entries went to checkpoints and are recomputed\n",
                    kb);
    if (remat_residual_report_count(rep->backward) > 0) {
        term_printf(f,
                    "\nresidual report of step %" PRId64
                    ", backward (saved while recomputing checkpointed blocks):\n",
                    step);
        rc = remat_residual_report_print(rep->backward, f);
    } else {
        term_printf(f, "\nnothing was saved during backward (no block was recomputed)\n");
    }
    return rc;
}

static void json_totals(json *j, const char *key, const remat_residual_report *r) {
    remat_residual_totals t;
    memset(&t, 0, sizeof t);
    remat_residual_report_totals(r, &t);
    json_object(j, key);
    json_int(j, "count", t.count);
    json_uint(j, "bytes", t.bytes);
    json_uint(j, "unique_bytes", t.unique_bytes);
    json_uint(j, "kept_bytes", t.kept_bytes);
    json_end(j);
}

static uint32_t float_bits(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* A run a signal stopped: where it stands and how to resume. */
void train_report_stopped(const train_run *tr) {
    const config *c = tr->c;
    const char *sig = tr->stopped == SIGINT ? "SIGINT" : "SIGTERM";
    if (c->save)
        term_printf(stderr,
                    "remat train: stopped by %s after step %" PRId64 " of %ld; saved %s.\n"
                    "  resume with the same flags plus --resume %s (--steps %ld counts from "
                    "the start)\n",
                    sig, tr->done_steps, c->steps, c->save, c->save, c->steps);
    else
        term_printf(stderr,
                    "remat train: stopped by %s after step %" PRId64 " of %ld; nothing saved "
                    "(run with --save FILE to keep an interrupted run)\n",
                    sig, tr->done_steps, c->steps);
}

/* The run's totals, measured once for both report forms (peaks: max over ranks). */
typedef struct train_totals {
    double step_ms, tok_s, last;
    size_t peak_alloc, peak_rss;
    double hidden, comm_ms, exposed_ms; /* under mpirun */
} train_totals;

static int train_totals_get(train_run *tr, train_totals *t) {
    const config *c = tr->c;
    const prog_dist *pd = &tr->pd;
    t->step_ms = 1e3 * util_median(tr->times, (int)tr->n_steps);
    t->tok_s = tr->train_time > 0 ? (double)tr->tokens / tr->train_time : 0;
    t->last = tr->n_steps ? tr->losses[tr->n_steps - 1] : NAN;
    t->peak_alloc = util_peak_bytes(c->device);
    t->peak_rss = util_peak_rss_bytes();
    if (tr->run_peak > t->peak_alloc) t->peak_alloc = tr->run_peak;
    double peaks[2] = {(double)t->peak_alloc, (double)t->peak_rss};
    int rc = prog_dist_max(&tr->pd, peaks, 2);
    t->peak_alloc = (size_t)peaks[0];
    t->peak_rss = (size_t)peaks[1];
    t->hidden = prog_dist_hidden_fraction(pd);
    t->comm_ms = pd->n_steps ? 1e3 * pd->comm_s / pd->n_steps : 0;
    t->exposed_ms = pd->n_steps ? 1e3 * pd->exposed_s / pd->n_steps : 0;
    return rc;
}

/* --json: one object on stdout. */
static int train_report_json(const train_run *tr, const train_totals *t) {
    const config *c = tr->c;
    const model *m = &tr->m;
    const prog_dist *pd = &tr->pd;
    util_str out = {0};
    json j;
    json_start(&j, &out);
    json_object(&j, NULL);
    json_str(&j, "command", "train");
    model_json(&j, m, c->batch);
    json_str(&j, "task", task_name(&tr->tk));
    json_str(&j, "strategy", c->strat.name);
    json_int(&j, "threads", tr->threads);
    json_int(&j, "start_step", tr->start);
    json_int(&j, "steps", c->steps);
    char bits[16];
    snprintf(bits, sizeof bits, "0x%08x", float_bits(t->last));
    json_num(&j, "loss", t->last); /* null when no step ran */
    json_str(&j, "loss_bits", tr->n_steps ? bits : NULL);
    json_num(&j, "loss_first", tr->n_steps ? tr->losses[0] : NAN);
    json_array(&j, "losses");
    for (int64_t k = 0; k < tr->n_steps && tr->n_steps <= 100000; k++)
        json_num(&j, NULL, tr->losses[k]);
    json_end(&j);
    json_num(&j, "eval_loss", tr->have_eval ? tr->ev.loss : NAN);
    if (tr->ev.has_accuracy) json_fixed(&j, "accuracy", tr->ev.accuracy, 6);
    if (tr->ev.has_exact) json_fixed(&j, "exact_accuracy", tr->ev.exact, 6);
    if (tr->have_sac) {
        json_str(&j, "sac_policy", c->strat.policy);
        json_int(&j, "sac_ops_forward", tr->sac.ops_forward);
        json_int(&j, "sac_ops_cached", tr->sac.ops_cached);
        json_int(&j, "sac_bytes_cached", tr->sac.bytes_cached);
        json_int(&j, "sac_ops_recomputed", tr->sac.ops_recomputed);
    }
    if (tr->rep.forward) {
        json_totals(&j, "residuals_forward", tr->rep.forward);
        json_totals(&j, "residuals_backward", tr->rep.backward);
    }
    const remat_plan *p = c->strat.plan;
    if (p) {
        json_uint(&j, "budget_bytes", p->budget_bytes);
        json_uint(&j, "plan_peak_bytes", p->peak_bytes);
        json_uint(&j, "plan_min_budget_bytes", p->min_budget_bytes);
        json_uint(&j, "plan_store_all_bytes", p->peak_store_all);
        json_int(&j, "plan_recomputed_blocks", p->n_recomputed);
        json_int(&j, "plan_split", c->strat.split); /* the last blocks run in halves */
        json_bool(&j, "plan_whole_step", p->whole_step);
        /* the options the plan was made with (kept by --resume) and what it chose */
        json_bool(&j, "plan_offload", c->plan_offload);
        json_bool(&j, "plan_lossy", c->plan_lossy);
        json_bool(&j, "plan_keeps_bf16", strategy_plan_lossy(&c->strat));
        json_uint(&j, "step_peak_bytes", tr->step_peak);
    }
    json_int(&j, "world_size", pd->world);
    json_bool(&j, "zero", pd->zero != NULL);
    json_uint(&j, "optim_state_bytes",
              pd->zero ? remat_zero_state_bytes(pd->zero) : remat_optim_state_bytes(tr->o));
    if (pd->ddp) { /* gradient reductions started: one per bucket per step */
        remat_ddp_stats ds;
        remat_ddp_get_stats(pd->ddp, &ds);
        json_int(&j, "buckets", ds.n_buckets);
        json_int(&j, "grad_reductions", ds.n_collectives);
    }
    if (pd->pg && t->hidden >= 0) {
        json_fixed(&j, "comm_ms", t->comm_ms, 4);
        json_fixed(&j, "comm_exposed_ms", t->exposed_ms, 4);
        json_fixed(&j, "comm_hidden_fraction", t->hidden, 4);
        json_fixed(&j, "comm_done_in_backward", pd->done_in_backward / pd->n_steps, 4);
    }
    json_fixed(&j, "step_ms", t->step_ms, 4);
    json_fixed(&j, "tokens_per_s", t->tok_s, 2);
    json_uint(&j, "peak_alloc_bytes", t->peak_alloc);
    json_uint(&j, "peak_rss_bytes", t->peak_rss);
    json_end(&j);
    if (out.oom) {
        util_str_free(&out);
        return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    }
    puts(out.s);
    util_str_free(&out);
    return REMAT_OK;
}

/* The summary table on stdout (rank 0). */
static void train_report_text(const train_run *tr, const train_totals *t) {
    const config *c = tr->c;
    const prog_dist *pd = &tr->pd;
    char a[32], r[32];
    term_printf(stdout, "\n");
    if (tr->n_steps)
        term_printf(stdout, "loss          %.4f (first step %.4f)\n", t->last, tr->losses[0]);
    term_printf(stdout, "%s\n", tr->evbuf);
    term_printf(stdout, "step time     %.1f ms (median of %" PRId64 ")\n", t->step_ms, tr->n_steps);
    term_printf(stdout, "throughput    %.0f %s/s\n", t->tok_s,
                tr->m.kind == MODEL_MLP ? "samples" : "tokens");
    term_printf(stdout, "peak memory   %s allocated by remat, %s RSS\n",
                util_fmt_bytes((double)t->peak_alloc, a, sizeof a),
                util_fmt_bytes((double)t->peak_rss, r, sizeof r));
    if (pd->pg) {
        term_printf(stdout,
                    "ranks         %d (throughput and loss: the global batch; memory: the max "
                    "over ranks)\n",
                    pd->world);
        if (t->hidden >= 0)
            term_printf(stdout,
                        "all-reduce    %.1f ms per step, %.1f ms of it after backward (%.0f%% "
                        "hidden)\n",
                        t->comm_ms, t->exposed_ms, 100 * t->hidden);
        char ob[32];
        if (pd->zero)
            term_printf(stdout, "optimizer     ZeRO-1: %s of AdamW state per rank (1/%d of it)\n",
                        util_fmt_bytes((double)remat_zero_state_bytes(pd->zero), ob, sizeof ob),
                        pd->world);
    }
    const remat_plan *p = c->strat.plan;
    if (p) {
        char bb[32], pk[32], ms[32];
        if (p->whole_step)
            term_printf(stdout,
                        "plan          budget %s for the step: predicted peak %s, measured %s "
                        "(largest step), %" PRId64 " block forwards recomputed per step\n",
                        util_fmt_bytes((double)p->budget_bytes, bb, sizeof bb),
                        util_fmt_bytes((double)p->peak_bytes, pk, sizeof pk),
                        util_fmt_bytes((double)tr->step_peak, ms, sizeof ms), p->n_recomputed);
        else
            term_printf(stdout,
                        "plan          blocks-budget %s: predicted %s for the blocks (step peak "
                        "measured %s), %" PRId64 " block forwards recomputed per step\n",
                        util_fmt_bytes((double)p->budget_bytes, bb, sizeof bb),
                        util_fmt_bytes((double)p->peak_bytes, pk, sizeof pk),
                        util_fmt_bytes((double)tr->step_peak, ms, sizeof ms), p->n_recomputed);
    }
    if (p && c->explain) {
        term_buf tb;
        const int w = p->n_stages - 2 * c->strat.split; /* whole blocks before the halves */
        if (c->strat.split > 0) { /* the stage numbers of a chain with halves */
            char head[64] = "";
            if (w > 0) snprintf(head, sizeof head, "0-%d: blocks 0-%d; ", w - 1, w - 1);
            term_printf(stdout,
                        "plan stages   %s%d-%d: blocks %d-%d in halves (stage %d + 2j: block "
                        "%d + j's attention half, %d + 2j + 1: its MLP half)\n",
                        head, w, p->n_stages - 1, w, w + c->strat.split - 1, w, w, w);
        }
        remat_plan_explain(p, c->strat.ops ? c->strat.ops : tr->ops, tr->step_peak,
                           t->step_ms / 1e3, term_buf_open(&tb, stdout));
        term_buf_close(&tb, stdout);
    }
    if (tr->have_sac) {
        char cb[32];
        term_printf(stdout,
                    "selective     %s: %" PRId64 " of %" PRId64 " ops cached (%s), %" PRId64
                    " recomputed in step %" PRId64 "\n",
                    c->strat.policy, tr->sac.ops_cached, tr->sac.ops_forward,
                    util_fmt_bytes((double)tr->sac.bytes_cached, cb, sizeof cb),
                    tr->sac.ops_recomputed, tr->start + 1);
    }
    if (c->save) term_printf(stdout, "saved         %s (step %ld)\n", c->save, c->steps);
    if (c->trace) term_printf(stdout, "trace         %s\n", c->trace);
    if (c->timeline) term_printf(stdout, "timeline      %s\n", c->timeline);
}

/* --report's residual reports, then the JSON object or the summary table. */
int train_report(train_run *tr) {
    const config *c = tr->c;
    train_totals t;
    int rc = train_totals_get(tr, &t);
    if (rc) return rc;
    FILE *rf = c->json ? stderr : stdout;
    if (c->report && tr->rep.forward &&
        (rc = print_reports(rf, c, &tr->rep, tr->start + 1, tr->have_sac ? &tr->sac : NULL)))
        return rc;
    if (c->report && !tr->rep.forward) term_printf(rf, "\nno residual report: no step ran\n");
    if (c->json) return train_report_json(tr, &t);
    if (tr->pd.rank == 0) train_report_text(tr, &t);
    return REMAT_OK;
}
