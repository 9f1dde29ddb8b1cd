/* tools/train/dist.c — data parallelism in the program (see dist.h). */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "step.h"

bool prog_dist_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

int prog_dist_init(prog_dist *d, config *c) {
    *d = (prog_dist){.rank = 0, .world = 1};
    if (!prog_dist_launched()) return REMAT_OK;
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

int prog_dist_attach_zero(prog_dist *d, model *m, double bucket_mib, const remat_optim_options *o) {
    if (!d->pg) return remat_set_error(REMAT_EINVAL, "--zero: run under mpirun");
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
    if (d->pg && rc) {
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
