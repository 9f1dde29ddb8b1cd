/* tools/train.c — `remat train`. */
#include "train.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "dist.h"
#include "json.h"
#include "models.h"
#include "progress.h"
#include "savefile.h"
#include "step.h"
#include "svg.h"
#include "term.h"
#include "trace.h"
#include "util.h"

#define N_EVAL_BATCHES 4

typedef struct eval_summary {
    double loss, accuracy, exact;
    bool has_accuracy, has_exact;
} eval_summary;

static int evaluate(model *m, const task *t, eval_summary *out) {
    eval_result r;
    memset(&r, 0, sizeof r);
    bool prev = remat_no_grad_begin();
    int rc = REMAT_OK;
    for (int i = 0; !rc && i < N_EVAL_BATCHES; i++) {
        batch b;
        remat_tensor *o = NULL;
        rc = task_eval_batch(t, i, &b);
        if (rc) break;
        rc = model_outputs(m, &b, &o);
        if (!rc) rc = task_score(t, i, &b, o, &r);
        remat_release(o);
        batch_free(&b);
    }
    remat_grad_mode_restore(prev);
    memset(out, 0, sizeof *out);
    out->loss = r.loss_n ? r.loss_sum / (double)r.loss_n : NAN;
    out->has_accuracy = r.tokens > 0;
    out->accuracy = r.tokens ? (double)r.tokens_ok / (double)r.tokens : 0;
    out->has_exact = r.problems > 0;
    out->exact = r.problems ? (double)r.problems_ok / (double)r.problems : 0;
    return rc;
}

static void eval_text(const eval_summary *e, const task *t, char *buf, size_t n) {
    if (t->kind == TASK_ADDITION)
        snprintf(buf, n, "held-out: loss %.4f, answer bytes %.1f%%, problems %.1f%%", e->loss,
                 100 * e->accuracy, 100 * e->exact);
    else if (t->kind == TASK_TEXT)
        snprintf(buf, n, "held-out: loss %.4f, next byte %.1f%%", e->loss, 100 * e->accuracy);
    else
        snprintf(buf, n, "held-out: mse %.5f", e->loss);
}

/* Short form of an evaluation for the terminal progress bar. */
static void eval_short(const eval_summary *e, const task *t, char *buf, size_t n) {
    if (t->kind == TASK_ADDITION)
        snprintf(buf, n, "acc %.1f%% exact %.1f%%", 100 * e->accuracy, 100 * e->exact);
    else if (t->kind == TASK_TEXT)
        snprintf(buf, n, "acc %.1f%%", 100 * e->accuracy);
    else
        snprintf(buf, n, "mse %.4f", e->loss);
}

static void rate(char *buf, size_t n, double v) {
    if (v >= 1e6)
        snprintf(buf, n, "%.1fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(buf, n, "%.1fk", v / 1e3);
    else
        snprintf(buf, n, "%.0f", v);
}

/* A bar redrawn in place (tools/progress.h: it fits the terminal's width,
 * with an ETA), else a plain line per call. extra: the last evaluation
 * (bar) or this step's. */
static void progress(bool bar, int64_t step, int64_t total, double loss, double tok_s,
                     double eta_s, const char *unit, const char *extra) {
    char r[32];
    rate(r, sizeof r, tok_s);
    if (bar) {
        char line[512];
        progress_line(line, sizeof line, progress_columns(fileno(stderr)), step, total, loss, r,
                      unit, eta_s, extra);
        fprintf(stderr, "\r%s\033[K", line);
    } else {
        term_printf(stderr, "step %" PRId64 "/%" PRId64 "  loss %.4f  %s %s/s%s%s\n", step, total,
                loss, r, unit, extra ? "  " : "", extra ? extra : "");
    }
    fflush(stderr);
}

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
        term_printf(f, "the forward keeps %s for backward (the graph's saves, block inputs included) "
                   "+ %s in the selective cache (%" PRId64 " ops); 'h' entries went to "
                   "checkpoints and are recomputed or served from the cache\n",
                kb, util_fmt_bytes((double)sac->bytes_cached, cb, sizeof cb), sac->ops_cached);
    else
        term_printf(f, "the forward keeps %s for backward (the graph's saves, checkpoint inputs "
                   "included); 'h' entries went to checkpoints and are recomputed\n", kb);
    if (remat_residual_report_count(rep->backward) > 0) {
        term_printf(f, "\nresidual report of step %" PRId64
                   ", backward (saved while recomputing checkpointed blocks):\n", step);
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

/* SIGINT/SIGTERM during training. They are blocked in every thread from
 * the start of main (stop_signals_block in tools/main.c), so neither ever
 * interrupts a kernel: an asynchronous handler running on top of oneDNN's
 * GEMM corrupted the heap about once in 40 interrupted runs. The loop polls
 * for them at each step boundary (the step finishes), saves and exits;
 * after that the main thread takes them again with their default action,
 * so a second signal stops at once (the file is then the last complete
 * one, written crash-safely). */
static int pending_stop_signal(void) {
    sigset_t set;
    stop_signal_set(&set);
    struct timespec now = {0, 0};
    int sig = sigtimedwait(&set, NULL, &now);
    return sig > 0 ? sig : 0;
}

/* --log FILE: one JSON object per line. */
static void log_line(FILE *f, util_str *line) {
    if (line->oom) return;
    fputs(line->s, f);
    fputc('\n', f);
    fflush(f);
}

static void log_step(FILE *f, int64_t step, double loss, double lr, double grad_norm, double ms,
                     size_t peak) {
    util_str line = {0};
    json j;
    json_start(&j, &line);
    json_object(&j, NULL);
    json_int(&j, "step", step);
    json_num(&j, "loss", loss);
    json_num(&j, "lr", lr);
    if (grad_norm >= 0) json_num(&j, "grad_norm", grad_norm); /* with --clip */
    json_fixed(&j, "step_ms", ms, 4);
    json_uint(&j, "peak_bytes", peak);
    json_end(&j);
    log_line(f, &line);
    util_str_free(&line);
}

static void log_eval(FILE *f, int64_t step, const eval_summary *e) {
    util_str line = {0};
    json j;
    json_start(&j, &line);
    json_object(&j, NULL);
    json_int(&j, "step", step);
    json_num(&j, "eval_loss", e->loss);
    if (e->has_accuracy) json_fixed(&j, "accuracy", e->accuracy, 6);
    if (e->has_exact) json_fixed(&j, "exact_accuracy", e->exact, 6);
    json_end(&j);
    log_line(f, &line);
    util_str_free(&line);
}

/* The program's optimizer: AdamW (betas 0.9, 0.95) with weight decay on
 * the matrices only (biases, norms and positions in a no-decay group), or
 * SGD (no weight decay); schedule, clipping and accumulation from the flags. */
static void optimizer_options(const config *c, remat_optim_options *out) {
    remat_optim_options o;
    remat_optim_options_init(&o, c->optim == OPTIM_SGD ? REMAT_OPTIM_SGD : REMAT_OPTIM_ADAMW);
    o.lr = c->lr;
    if (c->optim == OPTIM_SGD) {
        o.momentum = c->momentum;
        o.weight_decay = 0;
    } else {
        o.beta2 = 0.95;
        o.weight_decay = c->weight_decay;
    }
    if (c->cosine && c->steps > 0)
        o.schedule = (remat_lr_schedule){REMAT_LR_WARMUP_COSINE, c->warmup, c->steps, c->min_lr};
    o.clip_norm = c->clip;
    o.accum_steps = c->accum;
    *out = o;
}

static int make_optimizer(const config *c, model *m, remat_optimizer **out) {
    remat_optim_options o;
    optimizer_options(c, &o);
    remat_tensor **decay = malloc(sizeof *decay * (size_t)m->n_params);
    remat_tensor **plain = malloc(sizeof *plain * (size_t)m->n_params);
    int nd = 0, np = 0, rc = REMAT_OK;
    if (!decay || !plain) rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; !rc && i < m->n_params; i++) {
        if (m->params[i].decay || c->optim == OPTIM_SGD)
            decay[nd++] = m->params[i].t;
        else
            plain[np++] = m->params[i].t;
    }
    if (!rc) rc = remat_optim_create(out, &o, decay, nd);
    if (!rc && np) rc = remat_optim_add_group(*out, plain, np, 0.0);
    if (rc) {
        remat_optim_free(*out);
        *out = NULL;
    }
    free(decay);
    free(plain);
    return rc;
}

/* --save: rank 0 writes the file. Under --zero every rank first sends its
 * slices of the AdamW state to rank 0, which writes them as a run without
 * --zero would (so either kind of run resumes the other's file); the whole
 * state exists on rank 0 for the time of the write only and is left out of
 * the run's peak, as the file's image is. */
static int save_state(const config *c, const task *tk, const model *m, remat_optimizer *o,
                      prog_dist *pd, int64_t step, size_t *run_peak) {
    if (!pd->zero) return c->save ? savefile_write(c->save, c, tk, m, o, step) : REMAT_OK;
    if (!pd->saving) return REMAT_OK;
    size_t pk = util_peak_bytes(c->device);
    if (pk > *run_peak) *run_peak = pk;
    remat_optimizer *whole = NULL;
    int rc = pd->rank == 0 ? make_optimizer(c, (model *)m, &whole) : REMAT_OK;
    int rc2 = remat_zero_gather_state(pd->zero, 0, whole); /* every rank takes part */
    if (!rc) rc = rc2;
    if (!rc && pd->rank == 0) rc = savefile_write(c->save, c, tk, m, whole, step);
    remat_optim_free(whole);
    remat_alloc_reset_peak(c->device);
    return rc;
}

/* What the phases of a run share. Setup fills the model, task, optimizer
 * and process group; the loop the per-step figures; the report reads them.
 * train_free releases everything (each pointer NULL or owned). */
typedef struct train_run {
    config *c;
    task tk;
    model m;
    remat_optimizer *o; /* NULL under --zero (pd.zero holds the state) */
    prog_dist pd;
    saved_state saved; /* --resume's file, until its state is restored */
    int threads;
    int64_t start;   /* the first step of this invocation (--resume) */
    int64_t n_steps; /* steps this invocation runs */
    bool tty;        /* the progress bar, else plain lines */
    FILE *logf;      /* --log */
    /* the loop's results */
    double *losses, *times; /* [n_steps] */
    double train_time;      /* seconds inside steps */
    int64_t tokens;         /* tokens (or samples) over all ranks */
    int64_t done_steps;     /* the step count reached */
    int stopped;            /* the signal that ended the run early, else 0 */
    size_t run_peak;        /* the allocator's peak over the run (steps, evaluations) */
    size_t step_peak;       /* the largest step's peak (forward, backward, optimizer) */
    eval_summary ev;        /* the last evaluation */
    bool have_eval;
    char evbuf[160], evshort[64];
    trace tr;               /* --trace/--timeline: the last step */
    bool traced;
    step_report rep;        /* --report: the first step's */
    remat_sac_stats sac;    /* selective: the first step's counters */
    bool have_sac;
} train_run;

/* --resume's file, task, model, optimizer and the process group's parts
 * (DDP or the ZeRO-sharded AdamW), each rank's random stream. */
static int train_setup(train_run *tr) {
    config *c = tr->c;
    int rc;
    if (c->resume) {
        rc = savefile_read(c->resume, &tr->saved);
        if (!rc) rc = savefile_merge_config(&tr->saved, c->resume, c);
        if (rc) return rc;
    }
    if ((rc = task_init(&tr->tk, c))) return rc;
    tr->tk.row0 = (int64_t)tr->pd.rank * c->batch; /* this rank's rows of each global batch */
    if (c->resume && (rc = savefile_check_task(&tr->saved, c->resume, &tr->tk))) return rc;
    if ((rc = model_init(&tr->m, c, c->seed))) return rc;
    if (c->zero && (!tr->pd.pg || c->optim != OPTIM_ADAMW))
        return remat_set_error(REMAT_EINVAL, "--zero shards AdamW across the ranks of an mpirun "
                               "job; it does not take --optim sgd%s",
                               tr->pd.pg ? "" : " (run under mpirun)");
    /* --zero: the sharded AdamW (tools/dist.c) replaces the optimizer; a
     * whole one exists only to take a --resume file's state */
    if ((!c->zero || c->resume) && (rc = make_optimizer(c, &tr->m, &tr->o))) return rc;
    if (c->resume && (rc = savefile_restore(&tr->saved, c->resume, &tr->m, tr->o, &tr->start)))
        return rc;
    savefile_free(&tr->saved);
    if (c->zero) {
        remat_optim_options zo;
        optimizer_options(c, &zo);
        if ((rc = prog_dist_attach_zero(&tr->pd, &tr->m, c->bucket_mib, &zo))) return rc;
        if (tr->o && (rc = remat_zero_load_state(tr->pd.zero, tr->o))) return rc;
        remat_optim_free(tr->o);
        tr->o = NULL;
        remat_alloc_reset_peak(c->device); /* the whole state is not training's */
    } else if ((rc = prog_dist_attach(&tr->pd, &tr->m, c->bucket_mib, c->accum))) {
        return rc;
    }
    /* each rank its own random stream (rank 0 keeps the one it has) */
    if (tr->pd.rank > 0)
        remat_manual_seed(remat_dist_rank_seed(tr->pd.pg, c->seed + (uint64_t)tr->start));
    if (tr->start > c->steps)
        return remat_set_error(REMAT_EINVAL,
                               "--resume %s: the file is at step %" PRId64
                               ", past --steps %ld (--steps counts from the start of the run)",
                               c->resume, tr->start, c->steps);
    tr->n_steps = c->steps - tr->start;
    tr->done_steps = tr->start;
    /* the bar on a terminal (or with --progress), never with --json */
    tr->tty = !c->quiet && !c->json && (c->progress || util_isatty(stderr));
    size_t n = (size_t)(tr->n_steps > 0 ? tr->n_steps : 1);
    tr->losses = malloc(sizeof(double) * n);
    tr->times = malloc(sizeof(double) * n);
    if (!tr->losses || !tr->times) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    return REMAT_OK;
}

/* What is about to run, on stderr (not with --quiet). */
static void train_print_header(const train_run *tr) {
    const config *c = tr->c;
    const model *m = &tr->m;
    if (c->quiet) return;
    char pb[32];
    if (m->kind == MODEL_GPT)
        term_printf(stderr,
                "remat train: GPT, %d layers, width %d, %d heads, context %d, batch %d, "
                "%.2fM parameters (%s)\n",
                m->layers, m->width, m->heads, m->context, c->batch, (double)m->n_weights / 1e6,
                util_fmt_bytes(4.0 * (double)m->n_weights, pb, sizeof pb));
    else
        term_printf(stderr, "remat train: MLP, %d layers, width %d, batch %d, %.2fM parameters\n",
                m->layers, m->width, c->batch, (double)m->n_weights / 1e6);
    term_printf(stderr, "  task %s%s%s, strategy %s, %s lr %g, %d threads%s\n", task_name(&tr->tk),
            c->data ? " " : "", c->data ? c->data : "", c->strat.name,
            c->optim == OPTIM_ADAMW ? "AdamW" : "SGD", c->lr, tr->threads,
            tr->start ? ", resumed" : "");
    if (tr->start) term_printf(stderr, "  resuming at step %" PRId64 " from %s\n", tr->start, c->resume);
    if (tr->pd.pg)
        term_printf(stderr, "  data parallel: %d ranks x batch %d (global batch %d)\n", tr->pd.world,
                c->batch, tr->pd.world * c->batch);
}

/* budget=SIZE: profile the blocks once, on the first batch of this run,
 * and plan; every step then runs the plan. No-op for other strategies. */
static int train_plan(train_run *tr) {
    config *c = tr->c;
    if (c->strat.kind != STRAT_BUDGET) return REMAT_OK;
    int layers = tr->m.layers;
    if (!c->quiet) term_printf(stderr, "  profiling the %d block%s for the planner...\n",
                           layers, layers == 1 ? "" : "s");
    double t0 = util_now();
    batch pb;
    remat_profile *prof = NULL;
    remat_step_profile sp;
    int rc = task_batch(&tr->tk, tr->start, &pb);
    if (!rc) {
        /* the step around the blocks too (budget= bounds the whole step);
         * with --accum > 1 every .grad exists during most micro-batches */
        rc = model_profile_step(&tr->m, &pb, c->accum > 1, &prof, &sp);
        batch_free(&pb);
    }
    if (!rc && c->verbose && !c->quiet) {
        term_printf(stderr, "profile of the %d block%s (%.2f s):\n", layers, layers == 1 ? "" : "s",
                util_now() - t0);
        term_buf tb;
        remat_profile_print(prof, term_buf_open(&tb, stderr));
        term_buf_close(&tb, stderr);
    }
    if (!rc) rc = strategy_plan(&c->strat, prof, &sp);
    remat_profile_free(prof);
    if (rc) {
        char msg[768]; /* remat_set_error must not read the buffer it writes */
        snprintf(msg, sizeof msg, "%s", remat_last_error());
        return remat_set_error(rc, "--checkpoint %s: %s", c->strat.name, msg);
    }
    if (!c->quiet) {
        term_buf tb;
        remat_plan_print(c->strat.plan, term_buf_open(&tb, stderr));
        term_buf_close(&tb, stderr);
    }
    char warn[320];
    if (strategy_budget_warning(&c->strat, warn, sizeof warn)) term_printf(stderr, "%s\n", warn);
    /* the profile's own peak is not training's */
    remat_alloc_reset_peak(c->device);
    return REMAT_OK;
}

/* Evaluates on the held-out batches and keeps the texts for the bar/lines. */
static int train_evaluate(train_run *tr, int64_t step) {
    int rc = evaluate(&tr->m, &tr->tk, &tr->ev);
    if (rc) return rc;
    tr->have_eval = true;
    eval_text(&tr->ev, &tr->tk, tr->evbuf, sizeof tr->evbuf);
    eval_short(&tr->ev, &tr->tk, tr->evshort, sizeof tr->evshort);
    if (tr->logf) log_eval(tr->logf, step, &tr->ev);
    return REMAT_OK;
}

/* One optimizer step (k-th of this invocation): --accum micro-batches,
 * OUT: *loss the global batch's mean loss, *dt its seconds. */
static int train_step(train_run *tr, int64_t k, double *loss, double *dt) {
    config *c = tr->c;
    const int64_t step = tr->start + k;
    bool trace_this = (c->trace || c->timeline) && k == tr->n_steps - 1;
    if (trace_this) {
        trace_begin(&tr->tr, true);
        tr->traced = true;
    }
    double t0 = util_now();
    int rc = REMAT_OK;
    *loss = 0;
    if (k == 0 && c->strat.kind == STRAT_SELECTIVE) c->strat.sac_stats = &tr->sac;
    /* --accum N: micro-batches step*N .. step*N+N-1; the optimizer
     * updates after the last (remat_optim_step counts them) */
    for (int j = 0; !rc && j < c->accum; j++) {
        batch b;
        double l = 0;
        if ((rc = task_batch(&tr->tk, step * c->accum + j, &b))) break;
        rc = step_run(&tr->m, &c->strat, &b, tr->o, trace_this ? &tr->tr : NULL,
                      k == 0 && j == 0 && c->report ? &tr->rep : NULL, &l);
        if (!rc && tr->pd.zero) rc = remat_zero_step(tr->pd.zero, NULL); /* counts micro-batches */
        if (!rc) prog_dist_after_step(&tr->pd);
        *loss += l / c->accum;
        tr->tokens += b.tokens * tr->pd.world;
        batch_free(&b);
        c->strat.sac_stats = NULL;
    }
    if (!rc) rc = prog_dist_mean(&tr->pd, loss); /* the global batch's loss */
    *dt = util_now() - t0;
    if (k == 0 && c->strat.kind == STRAT_SELECTIVE) tr->have_sac = true;
    if (trace_this) trace_end(&tr->tr);
    if (!rc && !isfinite(*loss))
        rc = remat_set_error(REMAT_EINVAL,
                             "the loss became %g at step %" PRId64 " (try a smaller --lr)",
                             *loss, step + 1);
    return rc;
}

/* The training loop: opens --log, then steps, --log lines, evaluations every --eval-every,
 * progress, --save-every and the stop signals (the run then saves and
 * ends with tr->stopped set). */
static int train_loop(train_run *tr) {
    config *c = tr->c;
    const int64_t n_steps = tr->n_steps;
    const int64_t tick = n_steps >= 20 ? n_steps / 20 : 1; /* plain-line progress */
    const char *unit = tr->m.kind == MODEL_GPT ? "tok" : "samples";
    int rc;
    if (c->log && !(tr->logf = fopen(c->log, "w")))
        return remat_set_error(REMAT_EIO, "--log %s: %s", c->log, strerror(errno));
    const double loop_t0 = util_now(); /* the ETA: the loop's time per step so far */
    for (int64_t k = 0; k < n_steps; k++) {
        int64_t step = tr->start + k;
        model_zero_grad(&tr->m);
        size_t pk = util_peak_bytes(c->device);
        if (pk > tr->run_peak) tr->run_peak = pk;
        remat_alloc_reset_peak(c->device);
        const double lr_used = remat_optim_lr(tr->o);
        double loss, dt;
        if ((rc = train_step(tr, k, &loss, &dt))) return rc;
        tr->losses[k] = loss;
        tr->times[k] = dt;
        tr->train_time += dt;
        tr->done_steps = step + 1;
        size_t peak = util_peak_bytes(c->device);
        if (peak > tr->step_peak) tr->step_peak = peak;
        if (tr->logf)
            log_step(tr->logf, step + 1, loss, lr_used,
                     c->clip > 0 ? remat_optim_last_grad_norm(tr->o) : -1, 1e3 * dt, peak);
        bool do_eval = c->eval_every > 0 && (step + 1) % c->eval_every == 0 && k != n_steps - 1;
        if (do_eval && (rc = train_evaluate(tr, step + 1))) return rc;
        if (!c->quiet && (tr->tty || (k + 1) % tick == 0 || k == 0 || do_eval || k == n_steps - 1))
            progress(tr->tty, step + 1, c->steps, loss, (double)tr->tokens / tr->train_time,
                     (util_now() - loop_t0) / (double)(k + 1) * (double)(n_steps - k - 1), unit,
                     tr->tty ? (tr->evshort[0] ? tr->evshort : NULL)
                             : (do_eval ? tr->evbuf : NULL));
        /* --save-every, and the step boundary where a signal stops the run
         * (every rank stops at the same step: the flag is agreed on) */
        if (!tr->stopped) tr->stopped = pending_stop_signal();
        double stop = tr->stopped;
        if ((rc = prog_dist_max(&tr->pd, &stop, 1))) return rc;
        bool periodic = c->save_every > 0 && (step + 1) % c->save_every == 0 && k != n_steps - 1;
        if ((periodic || stop != 0) &&
            (rc = save_state(c, &tr->tk, &tr->m, tr->o, &tr->pd, step + 1, &tr->run_peak)))
            return rc;
        if (stop != 0) {
            if (!tr->stopped) tr->stopped = SIGTERM; /* another rank was stopped */
            stop_signals_default();
            break;
        }
    }
    if (tr->tty) fputc('\n', stderr);
    return REMAT_OK;
}

/* A run a signal stopped: where it stands and how to resume. */
static void train_report_stopped(const train_run *tr) {
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

/* After the last step: the final evaluation, --save, --trace, --timeline. */
static int train_finish(train_run *tr) {
    config *c = tr->c;
    int rc;
    if ((rc = train_evaluate(tr, c->steps))) return rc;
    if ((rc = save_state(c, &tr->tk, &tr->m, tr->o, &tr->pd, c->steps, &tr->run_peak))) return rc;
    const trace *ts[1] = {&tr->tr};
    const char *labels[1] = {c->strat.name};
    if (tr->traced && c->trace && !trace_write_chrome(c->trace, 1, ts, labels))
        return remat_set_error(REMAT_EIO, "--trace %s: cannot write the file", c->trace);
    if (tr->traced && c->timeline) {
        char title[384];
        snprintf(title, sizeof title, "remat: memory during the last training step (%s)",
                 c->strat.name);
        if (!svg_timeline(c->timeline, title, 1, ts, labels))
            return remat_set_error(REMAT_EIO, "--timeline %s: cannot write the file", c->timeline);
    }
    return REMAT_OK;
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
        json_bool(&j, "plan_whole_step", p->whole_step);
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
    if (tr->n_steps) term_printf(stdout, "loss          %.4f (first step %.4f)\n", t->last, tr->losses[0]);
    term_printf(stdout, "%s\n", tr->evbuf);
    term_printf(stdout, "step time     %.1f ms (median of %" PRId64 ")\n", t->step_ms, tr->n_steps);
    term_printf(stdout, "throughput    %.0f %s/s\n", t->tok_s, tr->m.kind == MODEL_GPT ? "tokens" : "samples");
    term_printf(stdout, "peak memory   %s allocated by remat, %s RSS\n",
           util_fmt_bytes((double)t->peak_alloc, a, sizeof a),
           util_fmt_bytes((double)t->peak_rss, r, sizeof r));
    if (pd->pg) {
        term_printf(stdout, "ranks         %d (throughput and loss: the global batch; memory: the max "
               "over ranks)\n", pd->world);
        if (t->hidden >= 0)
            term_printf(stdout, "all-reduce    %.1f ms per step, %.1f ms of it after backward (%.0f%% "
                   "hidden)\n", t->comm_ms, t->exposed_ms, 100 * t->hidden);
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
            term_printf(stdout, "plan          budget %s for the step: predicted peak %s, measured %s "
                   "(largest step), %" PRId64 " block forwards recomputed per step\n",
                   util_fmt_bytes((double)p->budget_bytes, bb, sizeof bb),
                   util_fmt_bytes((double)p->peak_bytes, pk, sizeof pk),
                   util_fmt_bytes((double)tr->step_peak, ms, sizeof ms), p->n_recomputed);
        else
            term_printf(stdout, "plan          blocks-budget %s: predicted %s for the blocks (step peak "
                   "measured %s), %" PRId64 " block forwards recomputed per step\n",
                   util_fmt_bytes((double)p->budget_bytes, bb, sizeof bb),
                   util_fmt_bytes((double)p->peak_bytes, pk, sizeof pk),
                   util_fmt_bytes((double)tr->step_peak, ms, sizeof ms), p->n_recomputed);
    }
    if (tr->have_sac) {
        char cb[32];
        term_printf(stdout, "selective     %s: %" PRId64 " of %" PRId64 " ops cached (%s), %" PRId64
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
static int train_report(train_run *tr) {
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

/* Releases what the run holds; rc != 0 only to choose the --log message. */
static int train_free(train_run *tr, int rc) {
    config *c = tr->c;
    if (tr->logf && fclose(tr->logf) != 0 && !rc)
        rc = remat_set_error(REMAT_EIO, "--log %s: write failed", c->log);
    step_report_free(&tr->rep);
    strategy_free(&c->strat);
    if (tr->traced) trace_free(&tr->tr);
    free(tr->losses);
    free(tr->times);
    remat_optim_free(tr->o);
    model_free(&tr->m);
    task_free(&tr->tk);
    savefile_free(&tr->saved);
    return rc;
}

int cmd_train(config *c) {
    train_run tr;
    memset(&tr, 0, sizeof tr);
    tr.c = c;
    trace_device(c->device);
    tr.threads = step_setup_process(c->threads);
    /* RSS is only sampled in the traced step; speed matters more here */
    step_malloc_mode(false);
    int rc = prog_dist_init(&tr.pd, c);
    if (!rc) rc = train_setup(&tr);
    if (!rc) train_print_header(&tr);
    if (!rc) rc = train_plan(&tr);
    if (!rc) rc = train_loop(&tr);
    if (!rc && tr.stopped) train_report_stopped(&tr);
    if (!rc && !tr.stopped) rc = train_finish(&tr);
    if (!rc && !tr.stopped) rc = train_report(&tr);
    rc = train_free(&tr, rc);
    if (rc) {
        if (tr.pd.pg) term_printf(stderr, "remat train: rank %d: %s\n", tr.pd.rank, remat_last_error());
        else term_printf(stderr, "%sremat train: %s\n", util_isatty(stderr) ? "\n" : "", remat_last_error());
        prog_dist_end(&tr.pd, 1); /* under mpirun: ends every rank */
        return 1;
    }
    if (prog_dist_end(&tr.pd, 0)) {
        term_printf(stderr, "remat train: %s\n", remat_last_error());
        return 1;
    }
    return tr.stopped ? 128 + tr.stopped : 0; /* as a shell reports a process the signal ended */
}
