/* tools/train/train.c — `remat train`. */
#include "train.h"
#include "train_run.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/progress.h"
#include "cli/term.h"
#include "cli/util.h"
#include "dist.h"
#include "hf_run.h"
#include "io/data.h"
#include "io/json.h"
#include "io/training_save.h"
#include "models.h"
#include "report/alloc_trace.h"
#include "report/svg.h"
#include "step.h"

#define N_EVAL_BATCHES 4

static int evaluate(model *m, const task *t, eval_summary *out) {
    eval_result r;
    memset(&r, 0, sizeof r);
    bool prev = remat_no_grad_begin();
    model_set_training(m, false); /* no dropout */
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
    model_set_training(m, true);
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
    else if (t->kind == TASK_TOKENS)
        snprintf(buf, n, "held-out: loss %.4f, next token %.1f%%", e->loss, 100 * e->accuracy);
    else snprintf(buf, n, "held-out: mse %.5f", e->loss);
}

/* Short form of an evaluation for the terminal progress bar. */
static void eval_short(const eval_summary *e, const task *t, char *buf, size_t n) {
    if (t->kind == TASK_ADDITION)
        snprintf(buf, n, "acc %.1f%% exact %.1f%%", 100 * e->accuracy, 100 * e->exact);
    else if (t->kind == TASK_TEXT || t->kind == TASK_TOKENS)
        snprintf(buf, n, "acc %.1f%%", 100 * e->accuracy);
    else snprintf(buf, n, "mse %.4f", e->loss);
}

static void rate(char *buf, size_t n, double v) {
    if (v >= 1e6) snprintf(buf, n, "%.1fM", v / 1e6);
    else if (v >= 1e4) snprintf(buf, n, "%.1fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

/* A bar redrawn in place (tools/cli/progress.h: it fits the terminal's width,
 * with an ETA), else a plain line per call. extra: the last evaluation
 * (bar) or this step's. */
static void progress(bool bar, int64_t step, int64_t total, double loss, double tok_s, double eta_s,
                     const char *unit, const char *extra) {
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

/* SIGINT/SIGTERM during training. They are blocked in every thread from
 * the start of main (stop_signals_block in tools/cli/main.c), so neither ever
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
        if (m->params[i].decay || c->optim == OPTIM_SGD) decay[nd++] = m->params[i].t;
        else plain[np++] = m->params[i].t;
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

/* Whether two configs describe the same model (shape and vocabulary). */
static bool same_model(const remat_model_config *a, const remat_model_config *b) {
    return a->family == b->family && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->hidden == b->hidden &&
           a->intermediate == b->intermediate && a->head_dim == b->head_dim &&
           a->vocab == b->vocab && a->tie_word_embeddings == b->tie_word_embeddings;
}

/* A Hugging Face model's directory (--init-from), or the config a --resume
 * file kept (its tokenizer from --init-from or the directory the run
 * started from); the model's shape into c. */
static int open_hf(train_run *tr) {
    config *c = tr->c;
    int rc;
    if (c->resume) {
        size_t n = 0, dn = 0;
        const char *text = savefile_record(&tr->saved, "hf.config", &n);
        const char *dir = savefile_record(&tr->saved, "hf.dir", &dn);
        char saved_dir[4096] = "";
        if (!text)
            return remat_set_error(REMAT_EFORMAT, "--resume %s: the file has no hf.config record",
                                   c->resume);
        if (dir && dn < sizeof saved_dir)
            snprintf(saved_dir, sizeof saved_dir, "%.*s", (int)dn, dir);
        const char *tok_dir = c->init_from ? c->init_from : saved_dir[0] ? saved_dir : NULL;
        struct stat st;
        if (!c->init_from && tok_dir && (stat(tok_dir, &st) != 0 || !S_ISDIR(st.st_mode)))
            tok_dir = NULL; /* gone: a token file still works */
        char name[4200];
        snprintf(name, sizeof name, "%s (its config.json)", c->resume);
        rc = hf_dir_from_config(&tr->hf, text, n, name, tok_dir, "--init-from");
        remat_model_config given;
        if (!rc && c->init_from && !remat_hf_config_read(&given, NULL, c->init_from) &&
            !same_model(&given, &tr->hf.cfg))
            rc = remat_set_error(REMAT_EINVAL,
                                 "--init-from %s is another model than the one --resume %s "
                                 "trained (its config.json differs): give the directory the run "
                                 "started from, or leave --init-from out",
                                 c->init_from, c->resume);
    } else {
        rc = hf_dir_open(&tr->hf, c->init_from, "--init-from");
    }
    return rc ? rc : hf_apply_config(c, &tr->hf);
}

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
    if (c->model == MODEL_HF && (rc = open_hf(tr))) return rc;
    /* under mpirun: the same configuration on every rank, before anything else is collective */
    if ((rc = prog_dist_agree(&tr->pd, c, false))) return rc;
    if ((rc = task_init(&tr->tk, c))) return rc;
    tr->tk.row0 = (int64_t)tr->pd.rank * c->batch; /* this rank's rows of each global batch */
    tr->tk.world = tr->pd.world > 0 ? tr->pd.world : 1;
    if (c->resume && (rc = savefile_check_task(&tr->saved, c->resume, &tr->tk))) return rc;
    if ((rc = model_init(&tr->m, c, c->seed))) return rc;
    tr->tk.vocab = tr->m.vocab;
    if (c->model == MODEL_HF && (rc = hf_check_flags(c, tr->m.lib, false))) return rc;
    if (c->zero && c->optim != OPTIM_ADAMW)
        return remat_set_error(REMAT_EINVAL, "--zero shards AdamW across the ranks of an mpirun "
                                             "job; it does not take --optim sgd");
    if (c->zero && !remat_device_host_addressable(c->device.type))
        return remat_set_error(REMAT_EINVAL,
                               "--zero updates its AdamW shards in host memory; with --device %s "
                               "leave --zero out (data parallelism alone runs on the device)",
                               c->device_text ? c->device_text : "cuda");
    char how[256];
    if (c->zero && !tr->pd.pg)
        return remat_set_error(REMAT_EINVAL,
                               "--zero shards AdamW across the ranks of an mpirun job: %s",
                               prog_dist_how_to_launch("train --zero", how, sizeof how));
    /* --zero: the sharded AdamW (tools/train/dist.c) replaces the optimizer; a
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
    if (m->kind == MODEL_HF)
        term_printf(stderr,
                    "remat train: %s from %s, %d layers, width %d, %d heads, context %d, batch "
                    "%d, %.2fM parameters (%s)\n",
                    hf_family_name(tr->hf.cfg.family), tr->hf.path ? tr->hf.path : c->resume,
                    m->layers, m->width, m->heads, m->context, c->batch, (double)m->n_weights / 1e6,
                    util_fmt_bytes(4.0 * (double)m->n_weights, pb, sizeof pb));
    else if (m->kind == MODEL_GPT || m->kind == MODEL_LLAMA)
        term_printf(stderr,
                    "remat train: %s, %d layers, width %d, %d heads, context %d, batch %d, "
                    "%.2fM parameters (%s)\n",
                    m->kind == MODEL_GPT ? "GPT" : "Llama", m->layers, m->width, m->heads,
                    m->context, c->batch, (double)m->n_weights / 1e6,
                    util_fmt_bytes(4.0 * (double)m->n_weights, pb, sizeof pb));
    else
        term_printf(stderr, "remat train: MLP, %d layers, width %d, batch %d, %.2fM parameters\n",
                    m->layers, m->width, c->batch, (double)m->n_weights / 1e6);
    term_printf(stderr, "  task %s%s%s, strategy %s, %s lr %g, %d threads%s\n", task_name(&tr->tk),
                c->data ? " " : "", c->data ? c->data : "", c->strat.name,
                c->optim == OPTIM_ADAMW ? "AdamW" : "SGD", c->lr, tr->threads,
                tr->start ? ", resumed" : "");
    if (tr->start)
        term_printf(stderr, "  resuming at step %" PRId64 " from %s\n", tr->start, c->resume);
    if (tr->pd.pg)
        term_printf(stderr, "  data parallel: %d ranks x batch %d (global batch %d)\n",
                    tr->pd.world, c->batch, tr->pd.world * c->batch);
}

/* budget=SIZE: profile the blocks once, on the first batch of this run,
 * and plan; every step then runs the plan. No-op for other strategies. */
static int train_plan(train_run *tr) {
    config *c = tr->c;
    if (c->strat.kind != STRAT_BUDGET) return REMAT_OK;
    int layers = tr->m.layers;
    if (!c->quiet)
        term_printf(stderr, "  profiling the %d block%s for the planner...\n", layers,
                    layers == 1 ? "" : "s");
    double t0 = util_now();
    batch pb;
    remat_profile *prof = NULL, *hprof = NULL;
    remat_op_profile *hops = NULL;
    remat_step_profile sp;
    /* the profile's forwards draw dropout masks (a Hugging Face GPT-2's
     * embd_pdrop runs outside the profiled stages): training starts from the
     * random state it would have had without the planner */
    uint8_t rng[REMAT_RNG_STATE_BYTES], dev_rng[REMAT_RNG_STATE_BYTES];
    const bool on_dev = c->device.type != REMAT_DEVICE_CPU.type;
    int rc = remat_rng_get_state(REMAT_DEVICE_CPU, rng);
    if (!rc && on_dev) rc = remat_rng_get_state(c->device, dev_rng);
    if (!rc) rc = task_batch(&tr->tk, tr->start, &pb);
    if (!rc) {
        /* the step around the blocks too (budget= bounds the whole step);
         * with --accum > 1 every .grad exists during most micro-batches */
        rc = model_profile_step(&tr->m, &pb, c->accum > 1, &prof, &sp);
        /* budget= (op level): every op of the blocks, on the same batch */
        if (!rc && strategy_wants_ops(&c->strat)) {
            if (!c->quiet) term_printf(stderr, "  profiling their ops...\n");
            rc = model_profile_ops(&tr->m, &pb, &tr->ops);
            if (!rc) rc = remat_profile_apply_ops(prof, tr->ops);
            /* per op: the half-block chain too where the budget wants it (below the whole
             * blocks' smallest plan, or :halves): the planner may then run the last blocks
             * in halves */
            if (!rc && model_has_halves(&tr->m) && strategy_wants_halves(&c->strat, prof, &sp))
                rc = model_profile_halves(&tr->m, &pb, c->accum > 1, &hprof, &hops);
            if (hprof) strategy_calibrate_halves(hprof, hops, prof, tr->ops);
        }
        batch_free(&pb);
    }
    if (!rc) rc = remat_rng_set_state(REMAT_DEVICE_CPU, rng);
    if (!rc && on_dev) rc = remat_rng_set_state(c->device, dev_rng);
    if (!rc && c->verbose && !c->quiet) {
        term_printf(stderr, "profile of the %d block%s (%.2f s):\n", layers, layers == 1 ? "" : "s",
                    util_now() - t0);
        term_buf tb;
        remat_profile_print(prof, term_buf_open(&tb, stderr));
        term_buf_close(&tb, stderr);
        if (tr->ops) {
            remat_op_profile_print(tr->ops, term_buf_open(&tb, stderr));
            term_buf_close(&tb, stderr);
        }
    }
    const remat_plan_options po = {.offload = c->plan_offload, .lossy = c->plan_lossy};
    const strategy_halves hv = {hprof, hops};
    if (!rc) rc = strategy_plan(&c->strat, prof, &sp, tr->ops, &po, &hv);
    remat_profile_free(prof);
    remat_profile_free(hprof);
    remat_op_profile_free(hops);
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
                             "the loss became %g at step %" PRId64 " (try a smaller --lr)", *loss,
                             step + 1);
    return rc;
}

/* The training loop: opens --log, then steps, --log lines, evaluations every --eval-every,
 * progress, --save-every and the stop signals (the run then saves and
 * ends with tr->stopped set). */
static int train_loop(train_run *tr) {
    config *c = tr->c;
    const int64_t n_steps = tr->n_steps;
    const int64_t tick = n_steps >= 20 ? n_steps / 20 : 1; /* plain-line progress */
    const char *unit = tr->m.kind == MODEL_MLP ? "samples" : "tok";
    int rc;
    /* a resumed run goes on with its log (its first step is the next line) */
    if (c->log && !(tr->logf = fopen(c->log, c->resume ? "a" : "w")))
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

/* After the last step: the final evaluation, --save, --trace, --timeline. */
static int train_finish(train_run *tr) {
    config *c = tr->c;
    int rc;
    if ((rc = train_evaluate(tr, c->steps))) return rc;
    if ((rc = save_state(c, &tr->tk, &tr->m, tr->o, &tr->pd, c->steps, &tr->run_peak))) return rc;
    if (c->export_dir && tr->pd.rank == 0) {
        if ((rc = hf_export(c->export_dir, &tr->hf, tr->m.lib))) return rc;
        if (!c->quiet)
            term_printf(stderr, "remat train: wrote %s (a Hugging Face model directory)\n",
                        c->export_dir);
    }
    const trace *ts[1] = {&tr->tr};
    const char *labels[1] = {c->strat.name};
    if (tr->traced && c->trace && !trace_write_chrome(c->trace, 1, ts, labels))
        return remat_set_error(REMAT_EIO, "--trace %s: cannot write the file", c->trace);
    if (tr->traced && c->timeline) {
        char title[384];
        snprintf(title, sizeof title, "remat: memory during the last training step (%s%s)",
                 c->strat.name, c->autocast ? ", bf16 autocast" : "");
        if (!svg_timeline(c->timeline, title, 1, ts, labels))
            return remat_set_error(REMAT_EIO, "--timeline %s: cannot write the file", c->timeline);
    }
    return REMAT_OK;
}

/* Releases what the run holds; rc != 0 only to choose the --log message. */
static int train_free(train_run *tr, int rc) {
    config *c = tr->c;
    if (tr->logf && fclose(tr->logf) != 0 && !rc)
        rc = remat_set_error(REMAT_EIO, "--log %s: write failed", c->log);
    outputs_release(&tr->claim);
    step_report_free(&tr->rep);
    strategy_free(&c->strat);
    remat_op_profile_free(tr->ops);
    if (tr->traced) trace_free(&tr->tr);
    free(tr->losses);
    free(tr->times);
    remat_optim_free(tr->o);
    model_free(&tr->m);
    task_free(&tr->tk);
    savefile_free(&tr->saved);
    hf_dir_free(&tr->hf);
    c->hf = NULL;
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
    tr.claim.fd = -1;
    int rc = prog_dist_init(&tr.pd, c);
    /* every file the run will write, before it spends time on steps (rank 0's) */
    if (!rc) rc = outputs_check(c, CMD_TRAIN);
    if (!rc) rc = outputs_claim(&tr.claim, c->save);
    if (!rc) rc = train_setup(&tr);
    if (!rc) train_print_header(&tr);
    if (!rc) rc = train_plan(&tr);
    if (!rc) rc = train_loop(&tr);
    if (!rc && tr.stopped) train_report_stopped(&tr);
    if (!rc && !tr.stopped) rc = train_finish(&tr);
    if (!rc && !tr.stopped) rc = train_report(&tr);
    rc = train_free(&tr, rc);
    if (rc) {
        if (tr.pd.pg && tr.pd.shared_error) { /* every rank's: rank 0 says it once */
            if (tr.pd.rank == 0) term_printf(stderr, "remat train: %s\n", remat_last_error());
        } else if (tr.pd.pg)
            term_printf(stderr, "remat train: rank %d: %s\n", tr.pd.rank, remat_last_error());
        else
            term_printf(stderr, "%sremat train: %s\n", util_isatty(stderr) ? "\n" : "",
                        remat_last_error());
        prog_dist_end(&tr.pd, 1); /* under mpirun: ends every rank */
        return 1;
    }
    if (prog_dist_end(&tr.pd, 0)) {
        term_printf(stderr, "remat train: %s\n", remat_last_error());
        return 1;
    }
    return tr.stopped ? 128 + tr.stopped : 0; /* as a shell reports a process the signal ended */
}
