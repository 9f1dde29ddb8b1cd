/* tools/train/dist.c — data parallelism in the program (see dist.h). */
#include "dist.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/util.h"
#include "step.h"

bool prog_dist_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

/* `--device cuda` without an index under mpirun: this rank's index among the ranks of its
 * node, modulo the node's GPUs — each rank its own GPU, as PyTorch's
 * torch.cuda.set_device(local_rank). An explicit cuda:N is kept (every rank then uses GPU N:
 * one rank per node). The launchers' variables: Open MPI, MPICH / Intel MPI, Slurm. */
static void pick_local_device(config *c) {
    if (remat_device_host_addressable(c->device.type) || !c->device_text ||
        strchr(c->device_text, ':'))
        return;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!lr) lr = getenv("MPI_LOCALRANKID");
    if (!lr) lr = getenv("SLURM_LOCALID");
    int n = remat_device_count(c->device.type);
    if (lr && n > 0) c->device.index = atoi(lr) % n;
}

int prog_dist_init(prog_dist *d, config *c) {
    *d = (prog_dist){.rank = 0, .world = 1};
    if (!prog_dist_launched()) return REMAT_OK;
    pick_local_device(c);
    remat_dist_options o = {.timeout_s = c->dist_timeout};
    int rc = remat_dist_init(&d->pg, &o);
    if (rc) return rc;
    d->rank = remat_dist_rank(d->pg);
    d->world = remat_dist_world_size(d->pg);
    d->saving = c->save != NULL;
    if (d->rank > 0) {
        /* rank 0 speaks and writes for the job */
        c->quiet = true;
        c->json = c->csv = c->report = false;
        c->save = c->trace = c->timeline = c->svg = c->svg_pareto = c->log = NULL;
        c->out_dir = NULL;
    }
    return REMAT_OK;
}

/* ---- the ranks' configurations agree --------------------------------------------- */

/* A file's identity by content: size and FNV-1a 64 of its bytes (the path may
 * differ from rank to rank; the content may not). */
static void file_identity(util_str *s, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        util_str_printf(s, "unreadable");
        return;
    }
    uint64_t h = 1469598103934665603ULL, n = 0;
    unsigned char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        for (size_t i = 0; i < got; i++) h = (h ^ buf[i]) * 1099511628211ULL;
        n += got;
    }
    fclose(f);
    util_str_printf(s, "a file of %" PRIu64 " bytes, content hash %016" PRIx64, n, h);
}

/* "--flag value\n" for a number: the shortest text that reads back as x (so the
 * lines compare exactly and the message shows 0.001, not 0.0010000000000000000). */
static void num_line(util_str *s, const char *flag, double x) {
    char b[40];
    for (int p = 6; p <= 17; p++) {
        snprintf(b, sizeof b, "%.*g", p, x);
        if (strtod(b, NULL) == x) break;
    }
    util_str_printf(s, "%s %s\n", flag, b);
}

/* `remat bench`'s lines: the model, the strategies in order (each one's
 * steps and plans are collective), batch, autocast, seed, repetitions, the
 * sweep, and what the process group runs with. */
static void agree_text_bench(const config *c, util_str *s) {
    util_str_printf(s, "--strategies ");
    for (int i = 0; i < c->n_strategies; i++)
        util_str_printf(s, "%s%s", i ? "," : "", c->strategies[i].name);
    util_str_printf(s, "\n--reentrant %s\n--batch %d\n--autocast %s\n--seed %" PRIu64 "\n",
                    c->reentrant ? "on" : "off", c->batch, c->autocast ? "bf16" : "off", c->seed);
    util_str_printf(s, "--reps %d\n--sweep-budgets %d\n", c->reps, c->sweep);
    num_line(s, "--bucket-size", c->bucket_mib);
    num_line(s, "--dist-timeout", c->dist_timeout);
    util_str_printf(s, "--device %s\n", c->device_text ? c->device_text : "cpu");
}

/* One "--flag value" line per option that must be the same on every rank, in a
 * fixed order. Output paths are rank 0's alone; whether --save is given is not. */
static void agree_text(const prog_dist *d, const config *c, bool bench, util_str *s) {
    util_str_printf(s, "--model %s\n",
                    c->model == MODEL_GPT     ? "gpt"
                    : c->model == MODEL_MLP   ? "mlp"
                    : c->model == MODEL_LLAMA ? "llama"
                                              : "hf");
    if (c->init_from) { /* the model the ranks start from: its config.json, by content */
        char cfg[4096];
        snprintf(cfg, sizeof cfg, "%s/config.json", c->init_from);
        util_str_printf(s, "--init-from ");
        file_identity(s, cfg);
        util_str_printf(s, "\n");
    }
    util_str_printf(s, "--layers %d\n--width %d\n--heads %d\n--context %d\n", c->layers, c->width,
                    c->heads, c->context);
    util_str_printf(s, "--untied %s\n--attention %s\n", c->untied ? "on" : "off",
                    c->attn_ops ? "ops" : "fused");
    if (bench) {
        agree_text_bench(c, s);
        return;
    }
    util_str_printf(s, "--checkpoint %s\n--reentrant %s\n", c->strat.name,
                    c->reentrant ? "on" : "off");
    util_str_printf(s, "--optim %s\n", c->optim == OPTIM_SGD ? "sgd" : "adamw");
    num_line(s, "--lr", c->lr);
    num_line(s, "--weight-decay", c->weight_decay);
    num_line(s, "--momentum", c->momentum);
    util_str_printf(s, "--lr-schedule %s\n--warmup %ld\n", c->cosine ? "cosine" : "constant",
                    c->warmup);
    num_line(s, "--min-lr", c->min_lr);
    num_line(s, "--clip", c->clip);
    util_str_printf(s, "--batch %d\n--accum %d\n--autocast %s\n--seed %" PRIu64 "\n", c->batch,
                    c->accum, c->autocast ? "bf16" : "off", c->seed);
    util_str_printf(s, "--steps %ld\n--eval-every %ld\n", c->steps, c->eval_every);
    util_str_printf(s, "--save %s\n--save-every %ld\n", d->saving ? "given" : "not given",
                    c->save_every);
    util_str_printf(s, "--data ");
    if (c->data) file_identity(s, c->data);
    else util_str_printf(s, "none (the built-in task)");
    util_str_printf(s, "\n--resume ");
    if (c->resume) file_identity(s, c->resume);
    else util_str_printf(s, "none");
    util_str_printf(s, "\n--zero %s\n", c->zero ? "on" : "off");
    num_line(s, "--bucket-size", c->bucket_mib);
    num_line(s, "--dist-timeout", c->dist_timeout);
    util_str_printf(s, "--device %s\n", c->device_text ? c->device_text : "cpu");
}

/* Line i of text t (lines end in '\n'): its start and length; false past the end. */
static bool line_at(const char *t, int i, const char **at, size_t *len) {
    for (; i > 0 && *t; i--) {
        const char *nl = strchr(t, '\n');
        if (!nl) return false;
        t = nl + 1;
    }
    if (!*t) return false;
    const char *nl = strchr(t, '\n');
    *at = t;
    *len = nl ? (size_t)(nl - t) : strlen(t);
    return true;
}

/* The first line where a and b differ, or -1. */
static int first_difference(const char *a, const char *b) {
    for (int i = 0;; i++) {
        const char *pa = NULL, *pb = NULL;
        size_t la = 0, lb = 0;
        bool ha = line_at(a, i, &pa, &la), hb = line_at(b, i, &pb, &lb);
        if (!ha && !hb) return -1;
        if (ha != hb || la != lb || memcmp(pa, pb, la) != 0) return i;
    }
}

/* Rank `root`'s text (n8 int64 words, NUL-padded) into buf on every rank. */
static int share_text(prog_dist *d, const char *mine, int64_t n8, int root, char *buf) {
    remat_tensor *t = NULL;
    int rc = remat_zeros(&t, 1, &n8, REMAT_I64, REMAT_DEVICE_CPU);
    if (!rc && d->rank == root) memcpy(remat_data(t), mine, strlen(mine) + 1);
    if (!rc) rc = remat_dist_broadcast(d->pg, t, root);
    if (!rc) memcpy(buf, remat_data(t), (size_t)n8 * 8);
    remat_release(t);
    return rc;
}

int prog_dist_agree(prog_dist *d, const config *c, bool bench) {
    if (!d->pg) return REMAT_OK;
    util_str mine = {0};
    agree_text(d, c, bench, &mine);
    if (mine.oom || !mine.s) {
        util_str_free(&mine);
        return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    }
    double most = (double)(mine.len + 1);
    int rc = remat_dist_all_reduce_f64(d->pg, &most, 1, REMAT_REDUCE_MAX);
    int64_t n8 = ((int64_t)most + 7) / 8;
    char *first = rc ? NULL : calloc((size_t)n8, 8), *other = rc ? NULL : calloc((size_t)n8, 8);
    if (!rc && (!first || !other)) rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    if (!rc) rc = share_text(d, mine.s, n8, 0, first);
    /* the lowest differing line over the ranks, and a rank that differs there */
    int line = rc ? -1 : first_difference(mine.s, first);
    double v[2] = {line >= 0 ? 1e6 - line : 0, 0};
    if (!rc) rc = remat_dist_all_reduce_f64(d->pg, v, 1, REMAT_REDUCE_MAX);
    int worst = v[0] > 0 ? (int)(1e6 - v[0]) : -1;
    v[1] = worst >= 0 && line == worst ? d->rank : -1;
    if (!rc && worst >= 0) rc = remat_dist_all_reduce_f64(d->pg, &v[1], 1, REMAT_REDUCE_MAX);
    int who = (int)v[1];
    if (!rc && worst >= 0) rc = share_text(d, mine.s, n8, who, other);
    if (!rc && worst >= 0) {
        const char *pa = "", *pb = "";
        size_t la = 0, lb = 0;
        line_at(first, worst, &pa, &la);
        line_at(other, worst, &pb, &lb);
        const char *sa = memchr(pa, ' ', la), *sb = memchr(pb, ' ', lb);
        int nlen = sa ? (int)(sa - pa) : (int)la;
        int va = sa ? (int)(la - (size_t)(sa + 1 - pa)) : 0;
        int vb = sb ? (int)(lb - (size_t)(sb + 1 - pb)) : 0;
        rc = remat_set_error(REMAT_EINVAL,
                             "the ranks were given different configurations: %.*s is %.*s on "
                             "rank 0 but %.*s on rank %d (every rank of an mpirun job must get "
                             "the same flags and the same --data and --resume files)",
                             nlen, pa, va, sa ? sa + 1 : "", vb, sb ? sb + 1 : "", who);
        d->shared_error = true;
    }
    free(first);
    free(other);
    util_str_free(&mine);
    return rc;
}

/* --accum A: the micro-batches before the last of a step accumulate
 * locally (no_sync); the last one reduces the sum, once per bucket. */
static int ddp_backward(void *ud, remat_tensor *loss) {
    prog_dist *d = ud;
    remat_ddp_set_sync(d->ddp, d->micro + 1 >= d->accum);
    d->micro = d->micro + 1 >= d->accum ? 0 : d->micro + 1;
    return remat_ddp_backward(d->ddp, loss);
}

int prog_dist_attach(prog_dist *d, model *m, double bucket_mib, int accum) {
    if (!d->pg) return REMAT_OK;
    d->accum = accum > 1 ? accum : 1;
    d->micro = 0;
    remat_tensor **p = malloc(sizeof *p * (size_t)m->n_params);
    if (!p) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; i < m->n_params; i++) p[i] = m->params[i].t;
    remat_ddp_options o = {.bucket_bytes = bucket_mib > 0 ? (size_t)(bucket_mib * 1048576.0) : 0};
    int rc = remat_ddp_create(&d->ddp, d->pg, m->n_params, p, &o);
    free(p);
    if (!rc) step_set_backward(ddp_backward, d);
    return rc;
}

static int zero_backward(void *ud, remat_tensor *loss) { return remat_zero_backward(ud, loss); }

/* Whether an executable `name` is on $PATH. */
static bool on_path(const char *name) {
    const char *path = getenv("PATH");
    char buf[4096];
    for (const char *p = path ? path : ""; *p;) {
        size_t len = strcspn(p, ":");
        if (len && len + strlen(name) + 2 <= sizeof buf) {
            snprintf(buf, sizeof buf, "%.*s/%s", (int)len, p, name);
            if (access(buf, X_OK) == 0) return true;
        }
        p += len + (p[len] == ':');
    }
    return false;
}

const char *prog_dist_how_to_launch(const char *cmd, char *buf, size_t n) {
    const bool root = geteuid() == 0;
    const char *why =
        !remat_dist_available() ? " (this remat was built without MPI: apt-get install "
                                  "libopenmpi-dev openmpi-bin, then rebuild it)"
        : !on_path("mpirun")    ? " (mpirun is not installed: apt-get install openmpi-bin)"
        : root ? " (as root, Open MPI refuses to start without --allow-run-as-root)"
               : "";
    snprintf(buf, n, "start it with `mpirun%s -np 2 remat %s ...`%s",
             root ? " --allow-run-as-root" : "", cmd, why);
    return buf;
}

int prog_dist_attach_zero(prog_dist *d, model *m, double bucket_mib, const remat_optim_options *o) {
    char how[256];
    if (!d->pg)
        return remat_set_error(REMAT_EINVAL,
                               "--zero shards AdamW across the ranks of an mpirun job: %s",
                               prog_dist_how_to_launch("train --zero", how, sizeof how));
    remat_tensor **p = malloc(sizeof *p * (size_t)m->n_params);
    double *wd = malloc(sizeof *wd * (size_t)m->n_params);
    int rc = REMAT_OK;
    if (!p || !wd) rc = remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    for (int i = 0; !rc && i < m->n_params; i++) {
        p[i] = m->params[i].t;
        wd[i] = m->params[i].decay ? o->weight_decay : 0.0; /* as make_optimizer's groups */
    }
    remat_ddp_options dopt = {.bucket_bytes =
                                  bucket_mib > 0 ? (size_t)(bucket_mib * 1048576.0) : 0};
    if (!rc) rc = remat_zero_create(&d->zero, d->pg, m->n_params, p, wd, o, &dopt);
    free(p);
    free(wd);
    if (!rc) {
        d->ddp = remat_zero_ddp(d->zero); /* borrowed: for the statistics */
        step_set_backward(zero_backward, d->zero);
    }
    return rc;
}

void prog_dist_after_step(prog_dist *d) {
    if (!d->ddp) return;
    remat_ddp_stats st;
    remat_ddp_get_stats(d->ddp, &st);
    if (st.n_sync_backwards == d->counted) return; /* a no_sync micro-batch */
    d->counted = st.n_sync_backwards;
    if (st.learning) return; /* the first backward starts every bucket at its end */
    d->comm_s += st.comm_s;
    d->done_in_backward += st.n_buckets ? (double)st.n_done_in_backward / st.n_buckets : 0;
    d->exposed_s += st.exposed_s;
    d->backward_s += st.backward_s;
    d->n_steps++;
}

int prog_dist_mean(prog_dist *d, double *v) {
    return d->pg ? remat_dist_all_reduce_f64(d->pg, v, 1, REMAT_REDUCE_MEAN) : REMAT_OK;
}

int prog_dist_max(prog_dist *d, double *v, int n) {
    return d->pg ? remat_dist_all_reduce_f64(d->pg, v, n, REMAT_REDUCE_MAX) : REMAT_OK;
}

double prog_dist_hidden_fraction(const prog_dist *d) {
    if (!d->n_steps || d->comm_s <= 0) return -1;
    double h = 1.0 - d->exposed_s / d->comm_s;
    return h < 0 ? 0 : h > 1 ? 1 : h;
}

int prog_dist_end(prog_dist *d, int rc) {
    step_set_backward(NULL, NULL);
    if (d->zero) remat_zero_free(d->zero); /* with its ddp */
    else remat_ddp_free(d->ddp);
    d->ddp = NULL;
    d->zero = NULL;
    if (d->pg && rc && !d->shared_error) {
        /* every rank of a failed step prints its message (the others name the
         * failed rank); give them that long before MPI_Abort ends the job */
        fflush(stderr);
        usleep(300000);
        remat_dist_abort(d->pg, rc); /* does not return */
    }
    int frc = remat_dist_finalize(d->pg);
    d->pg = NULL;
    return rc ? rc : frc;
}
