/* src/dist/zero.c — ZeRO-1 (remat/dist.h): DDP's buckets reduce-scattered,
 * AdamW on this rank's slice of every bucket, parameters all-gathered.
 *
 * Layout: bucket b is padded to P_b = W * S_b elements; rank r owns bucket
 * elements [r S_b, (r+1) S_b), which map to ranges of the parameters (a
 * slice may cover parts of several). The in-place reduce-scatter leaves the
 * gradient sums of the owned slice in the bucket's first S_b elements;
 * exp_avg and exp_avg_sq hold the owned slices of every bucket back to back
 * (offset shard_off for bucket b). No other buffer: the bucket is then
 * reused for the all-gather of the parameters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"

struct remat_zero {
    remat_ddp *ddp;
    remat_optim_options o;
    double *wd;          /* per parameter */
    int64_t *steps;      /* updates each parameter has had (PyTorch's state['step']) */
    int64_t updates;
    remat_tensor *m, *v; /* exp_avg, exp_avg_sq of the owned slices */
};

remat_ddp *remat_zero_ddp(remat_zero *z) { return z ? z->ddp : NULL; }
int64_t remat_zero_updates(const remat_zero *z) { return z ? z->updates : 0; }

size_t remat_zero_state_bytes(const remat_zero *z) {
    return z ? remat_storage_nbytes(z->m) + remat_storage_nbytes(z->v) : 0;
}

size_t remat_zero_buffer_bytes(const remat_zero *z) {
    if (!z) return 0;
    size_t s = 0;
    for (int k = 0; k < z->ddp->nb; k++) s += remat_storage_nbytes(z->ddp->b[k].buf);
    return s;
}

void remat_zero_free(remat_zero *z) {
    if (!z) return;
    remat_ddp_free(z->ddp);
    remat_release(z->m);
    remat_release(z->v);
    free(z->wd);
    free(z->steps);
    free(z);
}

int remat_zero_create(remat_zero **out, remat_dist *pg, int n, remat_tensor *const *params,
                      const double *weight_decay, const remat_optim_options *opts,
                      const remat_ddp_options *ddp_opts) {
    static const char *call = "remat_zero_create";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    if (!opts) return rm_err(REMAT_EINVAL, "%s: opts is NULL (remat_optim_options_init)", call);
    if (opts->kind != REMAT_OPTIM_ADAMW)
        return rm_err(REMAT_EUNSUPPORTED, "%s: ZeRO-1 shards AdamW only (kind %d)", call, (int)opts->kind);
    if (opts->accum_steps > 1)
        return rm_err(REMAT_EUNSUPPORTED, "%s: accum_steps %d: accumulate with remat_ddp_set_sync"
                      "(remat_zero_ddp(z), false) and a scaled loss instead", call, opts->accum_steps);
    if (!(opts->lr >= 0) || !(opts->eps > 0) || opts->beta1 < 0 || opts->beta1 >= 1 ||
        opts->beta2 < 0 || opts->beta2 >= 1 || opts->weight_decay < 0 || opts->clip_norm < 0)
        return rm_err(REMAT_EINVAL, "%s: bad AdamW options (lr %g, betas %g %g, eps %g, weight "
                      "decay %g, clip_norm %g)", call, opts->lr, opts->beta1, opts->beta2,
                      opts->eps, opts->weight_decay, opts->clip_norm);
    int rc = remat_lr_schedule_check(&opts->schedule);
    if (rc) return rm_err_prefix(rc, call);
    remat_zero *z = calloc(1, sizeof *z);
    if (!z) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    z->o = *opts;
    rc = rmd_ddp_create(&z->ddp, pg, n, params, ddp_opts, true, call);
    if (rc) {
        free(z);
        return rc;
    }
    z->wd = calloc((size_t)n, sizeof *z->wd);
    z->steps = calloc((size_t)n, sizeof *z->steps);
    if (!z->wd || !z->steps) {
        remat_zero_free(z);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    for (int i = 0; i < n; i++) z->wd[i] = weight_decay ? weight_decay[i] : opts->weight_decay;
    /* the state: exactly the shard's elements */
    int64_t len = z->ddp->shard_len;
    rc = remat_zeros(&z->m, 1, &len, REMAT_F32, REMAT_DEVICE_CPU);
    if (!rc) rc = remat_zeros(&z->v, 1, &len, REMAT_F32, REMAT_DEVICE_CPU);
    if (rc) {
        remat_zero_free(z);
        return rm_err_prefix(rc, call);
    }
    *out = z;
    return REMAT_OK;
}

int remat_zero_backward(remat_zero *z, remat_tensor *loss) {
    if (!z) return rm_err(REMAT_EINVAL, "remat_zero_backward: z is NULL");
    return remat_ddp_backward(z->ddp, loss);
}

/* Calls fn on every (parameter, range) piece of this rank's slice of bucket
 * b: elements [e0, e1) of parameter i sit at shard offset s. */
typedef int (*piece_fn)(remat_zero *z, int i, int64_t e0, int64_t e1, int64_t s, void *ud);
static int each_piece(remat_zero *z, int k, piece_fn fn, void *ud) {
    remat_ddp *d = z->ddp;
    const dbucket *b = &d->b[k];
    int64_t lo = (int64_t)d->pg->rank * b->slice, hi = lo + b->slice;
    for (int i = 0; i < d->n; i++) {
        const dparam *p = &d->p[i];
        if (p->bucket != k) continue;
        int64_t a = p->offset > lo ? p->offset : lo;
        int64_t e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= e) continue;
        int rc = fn(z, i, a - p->offset, e - p->offset, b->shard_off + (a - lo), ud);
        if (rc) return rc;
    }
    return REMAT_OK;
}

static int adamw_piece(remat_zero *z, int i, int64_t e0, int64_t e1, int64_t s, void *ud) {
    const double *lr = ud;
    if (!z->ddp->used_any[i]) return REMAT_OK; /* no gradient anywhere: skipped */
    remat_adamw_hparams h = {*lr, z->o.beta1, z->o.beta2, z->o.eps, z->wd[i], z->steps[i] + 1};
    float *p = (float *)rm_ptr(z->ddp->p[i].t) + e0;
    const dbucket *b = &z->ddp->b[z->ddp->p[i].bucket];
    const float *g = (const float *)rm_ptr(b->buf) + (s - b->shard_off);
    float *m = (float *)rm_ptr(z->m) + s, *v = (float *)rm_ptr(z->v) + s;
    return remat_adamw_update_f32(p, g, m, v, e1 - e0, &h);
}

/* Copies pieces between the parameters and bucket buffer (to_buf) or back. */
static void copy_param_range(remat_ddp *d, int i, bool to_buf, int64_t lo, int64_t hi) {
    const dparam *p = &d->p[i];
    int64_t a = p->offset > lo ? p->offset : lo;
    int64_t e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    if (a >= e) return;
    float *buf = (float *)rm_ptr(d->b[p->bucket].buf) + a;
    float *par = (float *)rm_ptr(p->t) + (a - p->offset);
    if (to_buf) memcpy(buf, par, (size_t)(e - a) * sizeof *buf);
    else memcpy(par, buf, (size_t)(e - a) * sizeof *buf);
}

int remat_zero_step(remat_zero *z) {
    static const char *call = "remat_zero_step";
    if (!z) return rm_err(REMAT_EINVAL, "%s: z is NULL", call);
    remat_ddp *d = z->ddp;
    int rc = rmd_check_group(call, d->pg);
    if (rc) return rc;
    /* mean over ranks, as DDP's write-back divides */
    const float w = (float)d->pg->size;
    double ss = 0;
    for (int k = 0; k < d->nb; k++) {
        float *g = rm_ptr(d->b[k].buf);
        for (int64_t e = 0; e < d->b[k].slice; e++) g[e] /= w;
        if (z->o.clip_norm > 0) ss += remat_sum_squares_f32(g, d->b[k].slice);
    }
    if (z->o.clip_norm > 0) {
        /* padding is zero: the slices' sums of squares add up to the norm's square */
        rc = remat_dist_all_reduce_f64(d->pg, &ss, 1, REMAT_REDUCE_SUM);
        if (rc) return rm_err_prefix(rc, call);
        double f = remat_clip_factor(sqrt(ss), z->o.clip_norm);
        const float ff = (float)f; /* scaled as remat_optim_step scales */
        for (int k = 0; f != 1.0 && k < d->nb; k++) {
            float *g = rm_ptr(d->b[k].buf);
            for (int64_t e = 0; e < d->b[k].slice; e++) g[e] *= ff;
        }
    }
    double lr = remat_lr_at(&z->o.schedule, z->o.lr, z->updates);
    for (int k = 0; k < d->nb && !rc; k++) rc = each_piece(z, k, adamw_piece, &lr);
    if (rc) return rm_err_prefix(rc, call);
    /* all-gather: my updated slice into each bucket, every slice back out */
    const int64_t r = d->pg->rank;
    MPI_Request *reqs = calloc((size_t)d->nb, sizeof *reqs);
    if (!reqs) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int k = 0; k < d->nb && !rc; k++) {
        dbucket *b = &d->b[k];
        for (int i = 0; i < d->n; i++)
            if (d->p[i].bucket == k) copy_param_range(d, i, true, r * b->slice, (r + 1) * b->slice);
        int m = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rm_ptr(b->buf), (int)b->slice,
                               MPI_FLOAT, d->pg->comm, &reqs[k]);
        if (m != MPI_SUCCESS) rc = rmd_mpi_err(d->pg, call, "gathering the parameters", m);
    }
    if (!rc) rc = rmd_wait(d->pg, call, "gathering the parameters", d->nb, reqs, NULL);
    free(reqs);
    if (rc) return rc;
    for (int i = 0; i < d->n; i++) {
        copy_param_range(d, i, false, 0, d->b[d->p[i].bucket].numel);
        rm_bump_version(d->p[i].t);
        if (d->used_any[i]) z->steps[i]++;
        remat_set_grad(d->p[i].t, NULL); /* set_to_none, as remat_optim_step */
    }
    z->updates++;
    return REMAT_OK;
}
