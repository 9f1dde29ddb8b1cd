/* src/dist/zero.c — ZeRO-1 (remat/dist.h): DDP's buckets reduce-scattered,
 * AdamW on this rank's slice of every bucket, parameters all-gathered.
 *
 * Layout: bucket b is padded to P_b = W * S_b elements; rank r owns bucket
 * elements [r S_b, (r+1) S_b), which map to ranges of the parameters (a
 * slice may cover parts of several). The in-place reduce-scatter leaves the
 * gradient sums of the owned slice in the bucket's first S_b elements;
 * exp_avg and exp_avg_sq of bucket b are two tensors of S_b elements in the
 * bucket's dtype (f32 or f64). No other buffer: the bucket is then reused
 * for the all-gather of the parameters, and for gathering the state to one
 * rank when it is saved. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"

struct remat_zero {
    remat_ddp *ddp;
    remat_optim_options o;
    double *wd;     /* per parameter */
    int64_t *steps; /* updates each parameter has had (PyTorch's state['step']) */
    int64_t updates;
    int micro; /* micro-batches since the last update (accum_steps) */
    /* exp_avg, exp_avg_sq of this rank's slice of bucket k: m[k], v[k]
     * (the bucket's dtype, slice elements) */
    remat_tensor **m, **v;
};

remat_ddp *remat_zero_ddp(remat_zero *z) { return z ? z->ddp : NULL; }
int64_t remat_zero_updates(const remat_zero *z) { return z ? z->updates : 0; }

size_t remat_zero_state_bytes(const remat_zero *z) {
    size_t s = 0;
    for (int k = 0; z && z->m && k < z->ddp->nb; k++)
        s += remat_storage_nbytes(z->m[k]) + remat_storage_nbytes(z->v[k]);
    return s;
}

size_t remat_zero_buffer_bytes(const remat_zero *z) {
    if (!z) return 0;
    size_t s = 0;
    for (int k = 0; k < z->ddp->nb; k++) s += remat_storage_nbytes(z->ddp->b[k].buf);
    return s;
}

void remat_zero_free(remat_zero *z) {
    if (!z) return;
    for (int k = 0; z->m && k < z->ddp->nb; k++) {
        rm_release(z->m[k]);
        rm_release(z->v[k]);
    }
    remat_ddp_free(z->ddp);
    free(z->m); /* and v */
    free(z->wd);
    free(z->steps);
    free(z);
}

remat_status remat_zero_create(remat_zero **out, remat_dist *pg, int n, remat_tensor *const *params,
                               const double *weight_decay, const remat_optim_options *opts,
                               const remat_ddp_options *ddp_opts) {
    static const char *call = "remat_zero_create";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    if (!opts) return rm_err(REMAT_EINVAL, "%s: opts is NULL (remat_optim_options_init)", call);
    if (opts->kind != REMAT_OPTIM_ADAMW)
        return rm_err(REMAT_EUNSUPPORTED, "%s: ZeRO-1 shards AdamW only (kind %d)", call,
                      (int)opts->kind);
    if (!(opts->lr >= 0) || !(opts->eps > 0) || opts->beta1 < 0 || opts->beta1 >= 1 ||
        opts->beta2 < 0 || opts->beta2 >= 1 || opts->weight_decay < 0 || opts->clip_norm < 0 ||
        opts->accum_steps < 0)
        return rm_err(REMAT_EINVAL,
                      "%s: bad AdamW options (lr %g, betas %g %g, eps %g, weight "
                      "decay %g, clip_norm %g, accum_steps %d)",
                      call, opts->lr, opts->beta1, opts->beta2, opts->eps, opts->weight_decay,
                      opts->clip_norm, opts->accum_steps);
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
    const int nb = z->ddp->nb;
    z->wd = calloc((size_t)n, sizeof *z->wd);
    z->steps = calloc((size_t)n, sizeof *z->steps);
    z->m = calloc(2 * (size_t)nb, sizeof *z->m); /* m[nb], then v[nb] */
    if (z->m) z->v = z->m + nb;
    if (!z->wd || !z->steps || !z->m) {
        remat_zero_free(z);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    for (int i = 0; i < n; i++) z->wd[i] = weight_decay ? weight_decay[i] : opts->weight_decay;
    /* the state: exactly the owned slices' elements, in each bucket's dtype */
    for (int k = 0; !rc && k < nb; k++) {
        const dbucket *b = &z->ddp->b[k];
        int64_t len = b->slice;
        rc = remat_zeros(&z->m[k], 1, &len, b->dtype, REMAT_DEVICE_CPU);
        if (!rc) rc = remat_zeros(&z->v[k], 1, &len, b->dtype, REMAT_DEVICE_CPU);
    }
    if (rc) {
        remat_zero_free(z);
        return rm_err_prefix(rc, call);
    }
    *out = z;
    return REMAT_OK;
}

remat_status remat_zero_backward(remat_zero *z, remat_tensor *loss) {
    if (!z) return rm_err(REMAT_EINVAL, "remat_zero_backward: z is NULL");
    /* accum_steps A: the first A-1 micro-batches accumulate locally (no_sync),
     * the A-th reduce-scatters the accumulated .grad: one collective per
     * bucket per update */
    const int accum = z->o.accum_steps > 1 ? z->o.accum_steps : 1;
    if (accum > 1) remat_ddp_set_sync(z->ddp, z->micro + 1 == accum);
    return remat_ddp_backward(z->ddp, loss);
}

/* Calls fn on every (parameter, range) piece of this rank's slice of bucket
 * k: elements [e0, e1) of parameter i sit at element s of the slice. */
typedef remat_status (*piece_fn)(remat_zero *z, int k, int i, int64_t e0, int64_t e1, int64_t s,
                                 void *ud);
static remat_status each_piece(remat_zero *z, int k, piece_fn fn, void *ud) {
    remat_ddp *d = z->ddp;
    const dbucket *b = &d->b[k];
    int64_t lo = (int64_t)d->pg->rank * b->slice, hi = lo + b->slice;
    for (int i = 0; i < d->n; i++) {
        const dparam *p = &d->p[i];
        if (p->bucket != k) continue;
        int64_t a = p->offset > lo ? p->offset : lo;
        int64_t e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= e) continue;
        int rc = fn(z, k, i, a - p->offset, e - p->offset, a - lo, ud);
        if (rc) return rc;
    }
    return REMAT_OK;
}

static remat_status adamw_piece(remat_zero *z, int k, int i, int64_t e0, int64_t e1, int64_t s,
                                void *ud) {
    const double *lr = ud;
    if (!z->ddp->used_any[i]) return REMAT_OK; /* no gradient anywhere: skipped */
    remat_adamw_hparams h = {*lr, z->o.beta1, z->o.beta2, z->o.eps, z->wd[i], z->steps[i] + 1};
    const dbucket *b = &z->ddp->b[k];
    if (b->dtype == REMAT_F64)
        return remat_adamw_update_f64(
            (double *)rm_ptr(z->ddp->p[i].t) + e0, (const double *)rm_ptr(b->buf) + s,
            (double *)rm_ptr(z->m[k]) + s, (double *)rm_ptr(z->v[k]) + s, e1 - e0, &h);
    return remat_adamw_update_f32((float *)rm_ptr(z->ddp->p[i].t) + e0,
                                  (const float *)rm_ptr(b->buf) + s, (float *)rm_ptr(z->m[k]) + s,
                                  (float *)rm_ptr(z->v[k]) + s, e1 - e0, &h);
}

/* Copies the part of parameter i inside bucket elements [lo, hi) between
 * the parameter and the bucket buffer (to_buf) or back. */
static void copy_param_range(remat_ddp *d, int i, bool to_buf, int64_t lo, int64_t hi) {
    const dparam *p = &d->p[i];
    int64_t a = p->offset > lo ? p->offset : lo;
    int64_t e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    if (a >= e) return;
    const size_t es = remat_dtype_size(d->b[p->bucket].dtype);
    char *buf = (char *)rm_ptr(d->b[p->bucket].buf) + (size_t)a * es;
    char *par = (char *)rm_ptr(p->t) + (size_t)(a - p->offset) * es;
    if (to_buf) memcpy(buf, par, (size_t)(e - a) * es);
    else memcpy(par, buf, (size_t)(e - a) * es);
}

/* Multiplies bucket k's owned slice of sums by f (f32: by (float)f, as
 * remat_optim scales an f32 gradient) and returns its sum of squares. */
static double scale_slice(const dbucket *b, double f, bool sumsq) {
    if (b->dtype == REMAT_F64) {
        double *g = rm_ptr(b->buf);
        for (int64_t e = 0; f != 1.0 && e < b->slice; e++) g[e] *= f;
        return sumsq ? remat_sum_squares_f64(g, b->slice) : 0;
    }
    float *g = rm_ptr(b->buf);
    const float ff = (float)f;
    for (int64_t e = 0; f != 1.0 && e < b->slice; e++) g[e] *= ff;
    return sumsq ? remat_sum_squares_f32(g, b->slice) : 0;
}

/* Divides the owned slice of sums by the world size, as DDP's write-back
 * divides (f32: by (float)W). */
static void mean_slice(const dbucket *b, int world) {
    if (b->dtype == REMAT_F64) {
        double *g = rm_ptr(b->buf);
        for (int64_t e = 0; e < b->slice; e++) g[e] /= (double)world;
        return;
    }
    float *g = rm_ptr(b->buf);
    const float w = (float)world;
    for (int64_t e = 0; e < b->slice; e++) g[e] /= w;
}

/* All-gather: this rank's updated slice into each bucket, every slice back
 * out into the parameters. */
static remat_status gather_params(remat_zero *z, const char *call) {
    remat_ddp *d = z->ddp;
    const int64_t r = d->pg->rank;
    MPI_Request *reqs = calloc((size_t)d->nb, sizeof *reqs);
    if (!reqs) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    int rc = REMAT_OK, k = 0;
    for (; k < d->nb && !rc; k++) {
        dbucket *b = &d->b[k];
        for (int i = 0; i < d->n; i++)
            if (d->p[i].bucket == k) copy_param_range(d, i, true, r * b->slice, (r + 1) * b->slice);
        int m = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rm_ptr(b->buf), (int)b->slice,
                               rmd_mpi_type(b->dtype), d->pg->comm, &reqs[k]);
        if (m != MPI_SUCCESS) rc = rmd_mpi_err(d->pg, call, "gathering the parameters", m);
    }
    if (!rc) rc = rmd_wait(d->pg, call, "gathering the parameters", d->nb, reqs, NULL);
    free(reqs);
    if (rc) return rc;
    for (int i = 0; i < d->n; i++) {
        copy_param_range(d, i, false, 0, d->b[d->p[i].bucket].numel);
        rm_bump_version(d->p[i].t);
    }
    return REMAT_OK;
}

remat_status remat_zero_step(remat_zero *z, bool *updated) {
    static const char *call = "remat_zero_step";
    if (updated) *updated = false;
    if (!z) return rm_err(REMAT_EINVAL, "%s: z is NULL", call);
    remat_ddp *d = z->ddp;
    int rc = rmd_check_group(call, d->pg);
    if (rc) return rc;
    const int accum = z->o.accum_steps > 1 ? z->o.accum_steps : 1;
    if (z->micro + 1 < accum) {
        z->micro++;
        return REMAT_OK;
    }
    z->micro = 0;
    /* mean over ranks, then (as remat_optim_step) the mean over the
     * micro-batches and the clip in one scaling */
    double ss = 0, scale = 1.0 / (double)accum;
    for (int k = 0; k < d->nb; k++) {
        mean_slice(&d->b[k], d->pg->size);
        if (z->o.clip_norm > 0) ss += scale_slice(&d->b[k], 1.0, true);
    }
    if (z->o.clip_norm > 0) {
        /* padding is zero: the slices' sums of squares add up to the norm's square */
        rc = remat_dist_all_reduce_f64(d->pg, &ss, 1, REMAT_REDUCE_SUM);
        if (rc) return rm_err_prefix(rc, call);
        scale *= remat_clip_factor(sqrt(ss) * scale, z->o.clip_norm); /* the norm of the mean */
    }
    for (int k = 0; scale != 1.0 && k < d->nb; k++) scale_slice(&d->b[k], scale, false);
    double lr = remat_lr_at(&z->o.schedule, z->o.lr, z->updates);
    for (int k = 0; k < d->nb && !rc; k++) rc = each_piece(z, k, adamw_piece, &lr);
    if (rc) return rm_err_prefix(rc, call);
    rc = gather_params(z, call);
    if (rc) return rc;
    for (int i = 0; i < d->n; i++) {
        if (d->used_any[i]) z->steps[i]++;
        remat_set_grad(d->p[i].t, NULL); /* set_to_none, as remat_optim_step */
    }
    z->updates++;
    if (updated) *updated = true;
    return REMAT_OK;
}

/* ---- the state as a whole (saving, resuming) ------------------------------------------- */
/* The optimizer's index of parameter i of z (matched by tensor), or -1. */
static int optim_index(const remat_optimizer *o, const remat_tensor *t) {
    for (int k = 0; k < remat_optim_n_params(o); k++)
        if (remat_optim_param(o, k) == t) return k;
    return -1;
}

/* Checks that o is an AdamW over exactly z's parameters. */
static remat_status check_peer(const remat_zero *z, const remat_optimizer *o, const char *call) {
    const remat_ddp *d = z->ddp;
    const remat_optim_options *oo = remat_optim_get_options(o);
    if (!oo || oo->kind != REMAT_OPTIM_ADAMW)
        return rm_err(REMAT_EINVAL, "%s: the optimizer must be an AdamW", call);
    if (remat_optim_n_params(o) != d->n)
        return rm_err(REMAT_EINVAL, "%s: the optimizer has %d parameters, ZeRO %d", call,
                      remat_optim_n_params(o), d->n);
    for (int i = 0; i < d->n; i++)
        if (optim_index(o, d->p[i].t) < 0)
            return rm_err(REMAT_EINVAL, "%s: parameter %d of ZeRO is not in the optimizer", call,
                          i);
    return REMAT_OK;
}

typedef struct state_io {
    const remat_optimizer *o;
    remat_optim_slot slot;
} state_io;

/* Copies piece [e0, e1) of parameter i between the state slice (element s)
 * and the optimizer's whole state tensor. */
static remat_status load_piece(remat_zero *z, int k, int i, int64_t e0, int64_t e1, int64_t s,
                               void *ud) {
    const state_io *io = ud;
    remat_tensor *whole = remat_optim_state(io->o, optim_index(io->o, z->ddp->p[i].t), io->slot);
    remat_tensor *mine = io->slot == REMAT_OPTIM_EXP_AVG ? z->m[k] : z->v[k];
    const size_t es = remat_dtype_size(z->ddp->b[k].dtype);
    memcpy((char *)rm_ptr(mine) + (size_t)s * es, (const char *)rm_ptr(whole) + (size_t)e0 * es,
           (size_t)(e1 - e0) * es);
    return REMAT_OK;
}

remat_status remat_zero_load_state(remat_zero *z, const remat_optimizer *o) {
    static const char *call = "remat_zero_load_state";
    if (!z || !o) return rm_err(REMAT_EINVAL, "%s: NULL argument", call);
    int rc = check_peer(z, o, call);
    for (int i = 0; !rc && i < z->ddp->n; i++) {
        int k = optim_index(o, z->ddp->p[i].t);
        for (int s = 0; s < 2 && !rc; s++) {
            const remat_tensor *t = remat_optim_state(o, k, (remat_optim_slot)s);
            if (!t || !remat_is_contiguous(t) || t->dtype != z->ddp->p[i].t->dtype)
                rc = rm_err(REMAT_EINVAL,
                            "%s: the optimizer's state of parameter %d is not a "
                            "dense tensor of the parameter's dtype",
                            call, i);
        }
    }
    if (rc) return rc;
    for (int s = 0; s < 2; s++) {
        state_io io = {o, (remat_optim_slot)s};
        for (int k = 0; k < z->ddp->nb; k++) each_piece(z, k, load_piece, &io);
    }
    for (int i = 0; i < z->ddp->n; i++)
        z->steps[i] = remat_optim_param_steps(o, optim_index(o, z->ddp->p[i].t));
    z->updates = remat_optim_updates(o);
    z->micro = 0;
    return REMAT_OK;
}

/* Gathers slot `slot` of bucket k on root into the bucket buffer (padded:
 * rank r's slice at r * slice), then copies it into the optimizer's state
 * tensors. */
static remat_status gather_slot(remat_zero *z, int root, remat_optimizer *o, int k,
                                remat_optim_slot slot, const char *call) {
    remat_ddp *d = z->ddp;
    dbucket *b = &d->b[k];
    remat_tensor *mine = slot == REMAT_OPTIM_EXP_AVG ? z->m[k] : z->v[k];
    const size_t es = remat_dtype_size(b->dtype);
    const bool am_root = d->pg->rank == root;
    if (am_root) /* MPI_IN_PLACE at the root: its slice already in place */
        memcpy((char *)rm_ptr(b->buf) + (size_t)root * (size_t)b->slice * es, rm_ptr(mine),
               (size_t)b->slice * es);
    MPI_Request req;
    int m = MPI_Igather(am_root ? MPI_IN_PLACE : rm_ptr(mine), (int)b->slice,
                        rmd_mpi_type(b->dtype), am_root ? rm_ptr(b->buf) : NULL, (int)b->slice,
                        rmd_mpi_type(b->dtype), root, d->pg->comm, &req);
    if (m != MPI_SUCCESS) return rmd_mpi_err(d->pg, call, "gathering the optimizer state", m);
    int rc = rmd_wait(d->pg, call, "gathering the optimizer state", 1, &req, NULL);
    if (rc || !am_root || !o) return rc;
    for (int i = 0; i < d->n; i++) {
        const dparam *p = &d->p[i];
        if (p->bucket != k) continue;
        remat_tensor *whole = remat_optim_state(o, optim_index(o, p->t), slot);
        memcpy(rm_ptr(whole), (const char *)rm_ptr(b->buf) + (size_t)p->offset * es,
               (size_t)p->numel * es);
        rm_bump_version(whole);
    }
    return REMAT_OK;
}

remat_status remat_zero_gather_state(remat_zero *z, int root, remat_optimizer *o) {
    static const char *call = "remat_zero_gather_state";
    if (!z) return rm_err(REMAT_EINVAL, "%s: z is NULL", call);
    remat_ddp *d = z->ddp;
    int rc = rmd_check_group(call, d->pg);
    if (rc) return rc;
    if (root < 0 || root >= d->pg->size)
        return rm_err(REMAT_EINVAL, "%s: root %d is not a rank of the group (size %d)", call, root,
                      d->pg->size);
    const bool am_root = d->pg->rank == root;
    /* a root that cannot take the state still takes part: the others must
     * not wait for it; it reports the error afterwards */
    int bad = !am_root ? REMAT_OK
              : !o     ? rm_err(REMAT_EINVAL, "%s: o is NULL on the root", call)
                       : check_peer(z, o, call);
    char msg[RMD_MSG] = "";
    if (bad) snprintf(msg, sizeof msg, "%s", remat_last_error());
    remat_optimizer *dst = bad ? NULL : o;
    for (int k = 0; !rc && k < d->nb; k++)
        for (int s = 0; s < 2 && !rc; s++)
            rc = gather_slot(z, root, dst, k, (remat_optim_slot)s, call);
    if (rc) return rc;
    if (bad) return rm_err(bad, "%s", msg);
    if (!am_root) return REMAT_OK;
    /* the counters: one count for every parameter (remat_optim keeps one per
     * parameter, set as a whole) */
    rc = remat_optim_set_updates(o, z->updates);
    if (rc) return rm_err_prefix(rc, call);
    return REMAT_OK;
}
