/* src/dist/ddp.c — DDP-style gradient synchronisation (remat/dist.h).
 *
 * The engine tells us each time it adds into a leaf's .grad
 * (src/autograd/accumulate.h). A parameter is "ready" when its count of
 * accumulations in this backward reaches the expected count — read from
 * the graph before the pass, or, where a custom function (reentrant
 * checkpoint) hides nested passes, learned in the previous backward; then
 * its .grad is copied into its bucket's flat buffer, and a bucket
 * whose parameters are all ready starts its MPI_Iallreduce — in bucket
 * order, since every rank must start MPI collectives in the same order.
 * Counting accumulations instead of trusting one hook call per parameter is
 * what keeps reentrant checkpointing (one nested backward per recomputed
 * region, each accumulating into the parameters it uses) from marking a
 * parameter ready twice, the way PyTorch's DDP does.
 *
 * At the end of the local backward every parameter not yet ready becomes
 * ready (unused ones contribute zeros), the remaining buckets start, and
 * the ranks exchange status point to point while the reductions finish: a
 * failed rank is named to the others, a silent one too (after the timeout).
 * Flags per parameter ride along: used (had a gradient) and late (grew
 * after it was copied); late buckets are reduced again, so .grad is right
 * even when the graph changed. Then .grad = sum / world size.
 *
 * Parameters in device memory: where the device type has transfer ops
 * (rm_transfer_ops, core.h; cuda's side stream and events) a ready
 * parameter's .grad is copied into its slot asynchronously, after the work
 * queued on the compute stream, into pinned host memory; a bucket starts
 * only when all its parameters are ready and all their copies are done
 * (polled at every accumulation and progress point, waited for at the end
 * of the local backward), so backward goes on while the copies run. The
 * 1/world prescale of such a slot is done on the host once its copy is in.
 * The means go back the same way, one host wait for all of them at the end.
 * Without ops each copy is synchronous (rm_device_copy). */
#include <stdlib.h>
#include <string.h>

#include "autograd/accumulate.h"
#include "core/ptrtab.h"
#include "ddp_internal.h"

/* t's index in d->p, -1 when t is not one of the wrapped parameters. */
static int lookup(const remat_ddp *d, const remat_tensor *t) {
    const ddp_slot *s = &d->ht[rm_ptrtab_slot(d->ht, d->hcap, sizeof *d->ht, t)];
    return s->key ? s->index : -1;
}

/* ---- buckets ------------------------------------------------------------------------- */
/* The bucket's flat host buffer: pinned memory, or its tensor's. */
static void *bucket_data(const dbucket *b) { return b->pinned ? b->pinned : rm_ptr(b->buf); }

static void test_pending(remat_ddp *d) {
    for (int k = 0; k < d->next_launch; k++) {
        dbucket *b = &d->b[k];
        if (b->done) continue;
        int flag = 0;
        if (MPI_Test(&b->req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
        if (!flag) return; /* one test drives MPI's progress for all of them */
        b->done = true;
        b->t_done = rmd_now();
    }
}

/* Starts bucket b's reduction: all-reduce in place, or (ZeRO) the
 * reduce-scatter that leaves the sums of this rank's slice in the bucket's
 * first `slice` elements. */
static int start_reduce(remat_ddp *d, dbucket *b) {
    MPI_Datatype t = rmd_mpi_type(b->dtype);
    d->n_collectives++;
    if (!d->zero)
        return MPI_Iallreduce(MPI_IN_PLACE, bucket_data(b), (int)b->numel, t, MPI_SUM, d->pg->comm,
                              &b->req);
    /* in place: the sums of this rank's slice land at the start of the bucket */
    return MPI_Ireduce_scatter_block(MPI_IN_PLACE, rm_ptr(b->buf), (int)b->slice, t, MPI_SUM,
                                     d->pg->comm, &b->req);
}

/* dst[0..n) *= scale, or /= div when div is not 0 (f32 or f64). */
static void scale_slot(void *dst, remat_dtype dt, int64_t n, double scale, double div) {
    if (dt == REMAT_F32) {
        float *x = dst, w = (float)scale, v = (float)div;
        if (div)
            for (int64_t e = 0; e < n; e++) x[e] /= v;
        else
            for (int64_t e = 0; e < n; e++) x[e] *= w;
    } else {
        double *x = dst;
        if (div)
            for (int64_t e = 0; e < n; e++) x[e] /= div;
        else
            for (int64_t e = 0; e < n; e++) x[e] *= scale;
    }
}

/* Notes the first failed gradient copy of this backward (the message is the failure's). */
static void copy_failure(remat_ddp *d, int i, int rc) {
    if (d->copy_failed) return;
    d->copy_failed = rc;
    d->copy_failed_param = i;
    snprintf(d->copy_failed_msg, sizeof d->copy_failed_msg, "%s", remat_last_error());
}

/* Ends parameter i's copy in flight, if any: takes it if done, else waits for it (wait)
 * or leaves it; a D2H copy's slot then gets its prescale, or zeros if the copy failed.
 * Returns whether no copy of i is in flight any more. */
static bool finish_copy(remat_ddp *d, int i, bool wait) {
    dparam *p = &d->p[i];
    if (!p->event) return true;
    int rc = REMAT_OK;
    if (!p->xops->done(p->event)) {
        if (!wait) return false;
        rc = p->xops->host_wait(p->event);
    }
    p->xops->event_free(p->event);
    p->event = NULL;
    if (!p->held) { /* a copy back (write_back): .grad has the mean, or the failure is noted */
        if (rc) copy_failure(d, i, rc);
        return true;
    }
    rm_release_p(&p->held);
    dbucket *b = &d->b[p->bucket];
    b->n_copying--;
    char *dst = (char *)bucket_data(b) + (size_t)p->offset * remat_dtype_size(b->dtype);
    if (rc) {
        copy_failure(d, i, rc);
        memset(dst, 0, (size_t)p->numel * remat_dtype_size(b->dtype));
    } else if (d->prescale) { /* copy, then scale: the bits of the synchronous path */
        scale_slot(dst, b->dtype, p->numel, 1.0 / d->pg->size, 0);
    }
    return true;
}

/* Whether bucket b's slot copies are all in: takes those done (waits for them: wait).
 * The wait is for the copy queued last first: where copies run in order on one stream
 * (cuda's side stream) that one wait finds the others done. */
static bool bucket_copied(remat_ddp *d, dbucket *b, bool wait) {
    if (wait && b->n_copying) finish_copy(d, b->newest, true);
    for (int i = b->first; b->n_copying && i <= b->last; i++) finish_copy(d, i, wait);
    return b->n_copying == 0;
}

/* Starts the buckets that can start, in index order: all their parameters ready and their
 * slots' copies done (waited for: wait). */
static void launch_in_order(remat_ddp *d, bool wait) {
    while (d->next_launch < d->nb && !d->mpi_failed) {
        dbucket *b = &d->b[d->next_launch];
        if (b->n_ready < b->n_params || !bucket_copied(d, b, wait)) break;
        int m = start_reduce(d, b);
        if (m != MPI_SUCCESS) {
            d->mpi_failed = m;
            break;
        }
        b->launched = true;
        b->t_launch = rmd_now();
        d->next_launch++;
    }
}

/* Copies the parameter's gradient (zeros if none) into its bucket slot.
 * With a world size that is a power of two, DDP scales by 1/world as it
 * copies (PyTorch's reducer does too): exact, so the all-reduce's sum is the mean
 * bitwise as if divided afterwards, and nothing is left to do after the
 * wait. Otherwise (and for ZeRO, which keeps the sums) it copies. A
 * gradient in device memory with transfer ops is only queued for copying
 * here (finish_copy scales it once it is in). */
static void fill_slot(remat_ddp *d, int i) {
    dparam *p = &d->p[i];
    dbucket *b = &d->b[p->bucket];
    size_t es = remat_dtype_size(b->dtype);
    char *dst = (char *)bucket_data(b) + (size_t)p->offset * es;
    remat_tensor *g = p->t->grad;
    const double inv = 1.0 / d->pg->size;
    if (d->prescale && g && g->dtype == b->dtype && remat_is_contiguous(g) && rm_ptr(g) &&
        remat_device_host_addressable(g->storage->device.type)) {
        /* the common case in one pass */
        if (b->dtype == REMAT_F32) {
            const float *s = rm_ptr(g);
            float *x = (float *)dst, w = (float)inv;
            for (int64_t e = 0; e < p->numel; e++) x[e] = s[e] * w;
        } else {
            const double *s = rm_ptr(g);
            double *x = (double *)dst;
            for (int64_t e = 0; e < p->numel; e++) x[e] = s[e] * inv;
        }
        return;
    }
    const rm_transfer_ops *ops = g && g->dtype == b->dtype && remat_is_contiguous(g) && rm_ptr(g) &&
                                         !remat_device_host_addressable(g->storage->device.type)
                                     ? rm_transfer_get(g->storage->device.type)
                                     : NULL;
    if (ops) {
        int rc = ops->copy_async(g->storage->device.index, dst, rm_ptr(g), (size_t)p->numel * es,
                                 REMAT_COPY_DEVICE_TO_HOST, &p->event);
        if (rc == REMAT_OK) {
            p->xops = ops;
            p->held = rm_retain(g);
            b->n_copying++;
            b->newest = i;
        } else {
            p->event = NULL;
            copy_failure(d, i, rc);
            memset(dst, 0, (size_t)p->numel * es);
        }
        return;
    }
    if (!g) { /* unused here: zeros */
        memset(dst, 0, (size_t)p->numel * es);
        return;
    }
    int rc = remat_copy_to_buffer(g, b->dtype, dst, p->numel);
    if (rc != REMAT_OK) { /* zeros go out; the step fails on every rank (finish) */
        copy_failure(d, i, rc);
        memset(dst, 0, (size_t)p->numel * es);
    } else if (d->prescale) {
        scale_slot(dst, b->dtype, p->numel, inv, 0);
    }
}

static void mark_ready(remat_ddp *d, int i) {
    dparam *p = &d->p[i];
    p->ready = true;
    fill_slot(d, i);
    d->st.n_ready_events++;
    if (d->o.on_ready) d->o.on_ready(d->o.on_ready_data, i);
    if (++d->b[p->bucket].n_ready == d->b[p->bucket].n_params) launch_in_order(d, false);
}

/* Waits for every copy still in flight (after a failed launch, or before a return), the
 * last copy back queued first: on a device whose copies run in order on one stream (cuda's
 * side stream) that is one host wait, and the others are found done. */
static void settle_copies(remat_ddp *d) {
    if (d->newest_back >= 0) finish_copy(d, d->newest_back, true);
    d->newest_back = -1;
    for (int i = 0; i < d->n; i++) finish_copy(d, i, true);
}

static void on_accumulate(void *ud, remat_tensor *leaf) {
    remat_ddp *d = ud;
    if (!leaf) { /* a progress point (accumulate.h): let copies and MPI move */
        launch_in_order(d, false);
        if (d->next_launch > 0) test_pending(d);
        return;
    }
    int i = lookup(d, leaf);
    if (i < 0) return;
    dparam *p = &d->p[i];
    d->st.n_accumulations++;
    p->count++;
    if (p->ready) p->late = true;
    else if (d->have_counts && p->count == p->expected) mark_ready(d, i);
    else launch_in_order(d, false); /* a bucket whose copies were in flight */
    test_pending(d);
}

static void count_graph_leaf(void *ud, remat_tensor *leaf) {
    remat_ddp *d = ud;
    int i = lookup(d, leaf);
    if (i >= 0) d->p[i].expected++;
}

/* The accumulations each parameter will receive in this backward. Read
 * from the graph behind the loss (every leaf accumulator runs once per
 * pass) when that is exact: when no custom function lies in it — a
 * reentrant checkpoint's backward runs nested passes, which accumulate into
 * parameters the outer graph does not show. Otherwise the counts of the
 * previous backward, if there was one. Returns whether counts are known. */
static bool expected_counts(remat_ddp *d, remat_tensor *loss) {
    int *learned = malloc(sizeof *learned * (size_t)d->n);
    if (!learned) return d->learned;
    for (int i = 0; i < d->n; i++) {
        learned[i] = d->p[i].expected;
        d->p[i].expected = 0;
    }
    bool opaque = true;
    if (rm_graph_leaf_accumulators(loss, count_graph_leaf, d, &opaque) != REMAT_OK) opaque = true;
    d->st.graph_counts = !opaque;
    if (opaque)
        for (int i = 0; i < d->n; i++) d->p[i].expected = learned[i];
    free(learned);
    return !opaque || d->learned;
}

/* ---- set-up ---------------------------------------------------------------------------- */
static remat_status check_params(const char *call, int n, remat_tensor *const *params, bool zero) {
    char b[160];
    if (n <= 0 || !params) return rm_err(REMAT_EINVAL, "%s: no parameters given (n = %d)", call, n);
    for (int i = 0; i < n; i++) {
        remat_tensor *t = params[i];
        if (!t) return rm_err(REMAT_EINVAL, "%s: parameter %d is NULL", call, i);
        if (t->dtype != REMAT_F32 && t->dtype != REMAT_F64)
            return rm_err(REMAT_EDTYPE, "%s: parameter %d is %s; only f32 and f64 are supported",
                          call, i, rm_tensor_str(t, b, sizeof b));
        if (!t->requires_grad || t->grad_fn)
            return rm_err(REMAT_EINVAL, "%s: parameter %d (%s) must be a leaf that requires grad",
                          call, i, rm_tensor_str(t, b, sizeof b));
        if (!remat_is_contiguous(t) || !rm_ptr(t))
            return rm_err(REMAT_EINVAL, "%s: parameter %d (%s) must be contiguous, with data", call,
                          i, rm_tensor_str(t, b, sizeof b));
        /* ZeRO updates its slices with the host's AdamW loops, on the parameters' memory */
        if (zero && !remat_device_host_addressable(t->storage->device.type))
            return rm_err(REMAT_EINVAL,
                          "%s: parameter %d (%s) is in device memory; ZeRO-1 updates "
                          "parameters in host memory only (remat_ddp_create synchronises "
                          "gradients of device parameters)",
                          call, i, rm_tensor_str(t, b, sizeof b));
        for (int k = 0; k < i; k++)
            if (params[k] == t)
                return rm_err(REMAT_EINVAL, "%s: parameter %d is parameter %d again", call, i, k);
    }
    return REMAT_OK;
}

/* Every rank must register the same list: count, then dtype and shape of each. */
static remat_status check_same_everywhere(remat_dist *pg, const char *call, int n,
                                          remat_tensor *const *params) {
    const int W = pg->size;
    int64_t *counts = calloc((size_t)W, sizeof *counts);
    if (!counts) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    int64_t mine = n;
    MPI_Request req;
    int m = MPI_Iallgather(&mine, 1, MPI_INT64_T, counts, 1, MPI_INT64_T, pg->comm, &req);
    int rc = m != MPI_SUCCESS ? rmd_mpi_err(pg, call, "comparing parameter lists", m)
                              : rmd_wait(pg, call, "comparing parameter lists", 1, &req, NULL);
    for (int r = 1; rc == REMAT_OK && r < W; r++)
        if (counts[r] != counts[0])
            rc = rm_err(REMAT_EINVAL,
                        "%s: rank %d registers %lld parameters but rank 0 registers "
                        "%lld: every rank must pass the same parameters in the same order",
                        call, r, (long long)counts[r], (long long)counts[0]);
    free(counts);
    if (rc) return rc;
    enum { SIG = 2 + REMAT_MAX_DIMS };
    int64_t *sig = calloc((size_t)n * SIG, sizeof *sig);
    int64_t *all = calloc((size_t)n * SIG * (size_t)W, sizeof *all);
    if (!sig || !all) {
        free(sig);
        free(all);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    for (int i = 0; i < n; i++) {
        int64_t *row = sig + (size_t)i * SIG;
        row[0] = params[i]->dtype;
        row[1] = params[i]->ndim;
        for (int k = 0; k < params[i]->ndim; k++) row[2 + k] = params[i]->shape[k];
    }
    m = MPI_Iallgather(sig, n * SIG, MPI_INT64_T, all, n * SIG, MPI_INT64_T, pg->comm, &req);
    rc = m != MPI_SUCCESS ? rmd_mpi_err(pg, call, "comparing parameter shapes", m)
                          : rmd_wait(pg, call, "comparing parameter shapes", 1, &req, NULL);
    for (int r = 1; rc == REMAT_OK && r < W; r++) {
        for (int i = 0; i < n; i++) {
            const int64_t *a = all + ((size_t)r * n + i) * SIG, *z = all + (size_t)i * SIG;
            if (!memcmp(a, z, SIG * sizeof *a)) continue;
            char s1[160], s2[160];
            rm_shape_str((int)a[1], a + 2, s1, sizeof s1);
            rm_shape_str((int)z[1], z + 2, s2, sizeof s2);
            rc = rm_err(REMAT_EINVAL,
                        "%s: parameter %d is %s %s on rank %d but %s %s on rank 0: "
                        "every rank must pass the same parameters in the same order",
                        call, i, s1, remat_dtype_name((remat_dtype)a[0]), r, s2,
                        remat_dtype_name((remat_dtype)z[0]));
            break;
        }
    }
    free(sig);
    free(all);
    return rc;
}

/* The transfer ops behind bucket b's parameters when they all live in the memory of one
 * device type that has them (its flat buffer can then be pinned), else NULL. */
static const rm_transfer_ops *bucket_transfer_ops(const remat_ddp *d, const dbucket *b) {
    int type = d->p[b->first].t->storage->device.type;
    if (remat_device_host_addressable(type)) return NULL;
    for (int i = b->first; i <= b->last; i++)
        if (d->p[i].t->storage->device.type != type) return NULL;
    const rm_transfer_ops *ops = rm_transfer_get(type);
    return ops && ops->host_alloc && ops->host_free ? ops : NULL;
}

static remat_status build_buckets(remat_ddp *d, const char *call) {
    size_t cap = d->o.bucket_bytes ? d->o.bucket_bytes : DDP_DEFAULT_BUCKET;
    d->b = calloc((size_t)d->n, sizeof *d->b); /* at most one bucket per parameter */
    if (!d->b) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    int cur = -1;
    size_t bytes = 0;
    for (int i = d->n - 1; i >= 0; i--) { /* reverse registration order */
        dparam *p = &d->p[i];
        size_t pb = (size_t)p->numel * remat_dtype_size(p->t->dtype);
        if (cur < 0 || d->b[cur].dtype != p->t->dtype || (bytes + pb > cap && bytes > 0)) {
            cur = d->nb++;
            d->b[cur].dtype = p->t->dtype;
            d->b[cur].last = i;
            bytes = 0;
        }
        d->b[cur].first = i;
        p->bucket = cur;
        p->offset = d->b[cur].numel;
        d->b[cur].numel += p->numel;
        d->b[cur].n_params++;
        bytes += pb;
    }
    const int64_t W = d->pg->size;
    for (int k = 0; k < d->nb; k++) {
        dbucket *b = &d->b[k];
        b->padded = d->zero ? (b->numel + W - 1) / W * W : b->numel;
        b->slice = b->padded / W;
        int64_t shape = b->padded;
        size_t nbytes = (size_t)shape * remat_dtype_size(b->dtype);
        const rm_transfer_ops *ops = bucket_transfer_ops(d, b);
        b->pinned = ops ? ops->host_alloc(nbytes ? nbytes : 1) : NULL;
        if (b->pinned) { /* counted as host memory, as rm_device_alloc's would be */
            b->pinned_ops = ops;
            memset(b->pinned, 0, nbytes);
            rm_device_count(REMAT_DEVICE_CPU, b->pinned, nbytes ? nbytes : 1, true);
        } else {
            /* zeros: a ZeRO bucket's padding is reduced too and must be finite */
            int rc = remat_zeros(&b->buf, 1, &shape, b->dtype, REMAT_DEVICE_CPU);
            if (rc) return rm_err_prefix(rc, call);
        }
        if (shape > INT32_MAX)
            return rm_err(REMAT_EINVAL,
                          "%s: a bucket of %lld elements is too large for MPI; lower "
                          "bucket_bytes",
                          call, (long long)shape);
    }
    return REMAT_OK;
}

remat_status remat_ddp_create(remat_ddp **out, remat_dist *pg, int n, remat_tensor *const *params,
                              const remat_ddp_options *opts) {
    return rmd_ddp_create(out, pg, n, params, opts, false, "remat_ddp_create");
}

remat_status rmd_ddp_create(remat_ddp **out, remat_dist *pg, int n, remat_tensor *const *params,
                            const remat_ddp_options *opts, bool zero, const char *call) {
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    int rc = rmd_check_group(call, pg);
    if (rc) return rc;
    rc = check_params(call, n, params, zero);
    /* a rank with bad arguments still joins the comparison, so that the
     * others fail with its message instead of waiting for it */
    int rc2 = rmd_exchange_status(pg, call, rc, remat_last_error(), NULL, 0, NULL, 0, NULL);
    if (rc) return rc;
    if (rc2) return rc2;
    rc = check_same_everywhere(pg, call, n, params);
    if (rc) return rc;
    remat_ddp *d = calloc(1, sizeof *d);
    if (!d) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    d->pg = pg;
    d->n = n;
    d->sync = true;
    d->zero = zero;
    d->newest_back = -1;
    d->prescale = !zero && (pg->size & (pg->size - 1)) == 0;
    if (opts) d->o = *opts;
    d->p = calloc((size_t)n, sizeof *d->p);
    d->used_any = calloc((size_t)n, 1);
    d->hcap = 16;
    while (d->hcap < (size_t)n * 2) d->hcap *= 2;
    d->ht = calloc(d->hcap, sizeof *d->ht);
    if (!d->p || !d->ht || !d->used_any) {
        remat_ddp_free(d);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    for (int i = 0; i < n; i++) {
        d->p[i].t = rm_retain(params[i]);
        d->p[i].numel = remat_numel(params[i]);
        ddp_slot *s = &d->ht[rm_ptrtab_slot(d->ht, d->hcap, sizeof *d->ht, params[i])];
        if (!s->key) *s = (ddp_slot){params[i], i}; /* a repeated parameter keeps its first index */
    }
    rc = build_buckets(d, call);
    /* everyone starts from rank 0's values */
    for (int i = 0; rc == REMAT_OK && !d->o.no_broadcast && i < n; i++) {
        rc = remat_dist_broadcast(pg, params[i], 0);
        if (rc == REMAT_OK) rm_bump_version(params[i]);
    }
    if (rc) {
        remat_ddp_free(d);
        return rc == REMAT_ENOMEM ? rc : rm_err_prefix(rc, call);
    }
    d->st.n_params = n;
    d->st.n_buckets = d->nb;
    *out = d;
    return REMAT_OK;
}

void remat_ddp_free(remat_ddp *d) {
    if (!d) return;
    if (d->p && d->b) settle_copies(d);
    for (int i = 0; d->p && i < d->n; i++) rm_release(d->p[i].t);
    for (int k = 0; d->b && k < d->nb; k++) {
        dbucket *b = &d->b[k];
        rm_release(b->buf);
        if (!b->pinned) continue;
        size_t nbytes = (size_t)b->padded * remat_dtype_size(b->dtype);
        rm_device_count(REMAT_DEVICE_CPU, b->pinned, nbytes ? nbytes : 1, false);
        b->pinned_ops->host_free(b->pinned, nbytes ? nbytes : 1);
    }
    free(d->used_any);
    free(d->p);
    free(d->b);
    free(d->ht);
    free(d);
}

void remat_ddp_set_sync(remat_ddp *d, bool sync) {
    if (d) d->sync = sync;
}

void remat_ddp_get_stats(const remat_ddp *d, remat_ddp_stats *st) {
    if (!st) return;
    if (!d) {
        memset(st, 0, sizeof *st);
        return;
    }
    *st = d->st;
    st->n_collectives = d->n_collectives;
}

int remat_ddp_bucket_of(const remat_ddp *d, int param) {
    if (!d || param < 0 || param >= d->n) return -1;
    return d->p[param].bucket;
}

/* ---- backward ------------------------------------------------------------------------- */
/* Reduces bucket k again with the parameters' current local gradients. */
static remat_status rereduce(remat_ddp *d, const char *call, int k) {
    dbucket *b = &d->b[k];
    for (int i = b->first; i <= b->last; i++) fill_slot(d, i);
    bucket_copied(d, b, true);
    int m = start_reduce(d, b);
    if (m != MPI_SUCCESS) return rmd_mpi_err(d->pg, call, "reducing a bucket again", m);
    int rc = rmd_wait(d->pg, call, "reducing a bucket again", 1, &b->req, NULL);
    if (rc == REMAT_OK && d->copy_failed) /* the others got zeros from this rank's slot */
        rc = rm_err(d->copy_failed, "%s: copying the gradient of parameter %d to the host: %s",
                    call, d->copy_failed_param, d->copy_failed_msg);
    return rc;
}

/* .grad of parameter i := its slot of bucket b (the mean), copied. Into device memory
 * with transfer ops the copy is only queued (p->event): write_back waits for them all. */
static remat_status copy_back(remat_ddp *d, const char *call, int i) {
    dparam *p = &d->p[i];
    dbucket *b = &d->b[p->bucket];
    remat_tensor *g = p->t->grad;
    if (!g || !remat_is_contiguous(g) || g->dtype != b->dtype || !rm_ptr(g) ||
        atomic_load(&g->storage->refcount) > 1) {
        remat_tensor *ng;
        int rc = remat_empty(&ng, p->t->ndim, p->t->shape, p->t->dtype, p->t->storage->device);
        if (rc) return rm_err_prefix(rc, call);
        rc = remat_set_grad(p->t, ng);
        rm_release(ng);
        if (rc) return rc;
        g = p->t->grad;
    }
    size_t es = remat_dtype_size(b->dtype);
    const char *src = (const char *)bucket_data(b) + (size_t)p->offset * es;
    const rm_transfer_ops *ops = rm_transfer_get(g->storage->device.type);
    if (remat_device_host_addressable(g->storage->device.type)) {
        memcpy(rm_ptr(g), src, (size_t)p->numel * es);
    } else if (ops) { /* the bucket must not change until the copy is in: write_back waits */
        int rc = ops->copy_async(g->storage->device.index, rm_ptr(g), src, (size_t)p->numel * es,
                                 REMAT_COPY_HOST_TO_DEVICE, &p->event);
        if (rc) {
            p->event = NULL;
            return rm_err_prefix(rc, call);
        }
        p->xops = ops;
        d->newest_back = i;
    } else { /* device memory: the bucket is its host staging buffer */
        int rc = rm_device_copy(g->storage->device, rm_ptr(g), REMAT_DEVICE_CPU, src,
                                (size_t)p->numel * es);
        if (rc) return rm_err_prefix(rc, call);
    }
    rm_bump_version(g);
    return REMAT_OK;
}

/* .grad := the mean (the bucket's sums were scaled before the all-reduce)
 * for parameters some rank used: a view into the bucket's buffer (PyTorch:
 * gradient_as_bucket_view), no copy. The views own that buffer from then
 * on and the bucket takes a fresh one (from the cpu cache in a training
 * loop, which drops .grad each step), so a later reduction never writes
 * into memory the user holds. Where the fresh buffer cannot be had, the
 * bucket keeps its buffer and the values are copied into .grad. A
 * parameter in device memory gets its values copied into a .grad on its
 * device: the bucket is then only the host staging of MPI's reduction. */
static remat_status write_back_buckets(remat_ddp *d, const char *call,
                                       const unsigned char *used_any) {
    for (int k = 0; k < d->nb; k++) {
        dbucket *b = &d->b[k];
        bool used = false;
        for (int i = 0; i < d->n && !used; i++) used = d->p[i].bucket == k && used_any[i];
        if (!used) continue;
        /* sum → mean where fill_slot did not scale (bitwise as ever) */
        if (!d->prescale) scale_slot(bucket_data(b), b->dtype, b->numel, 0, d->pg->size);
        bool views = false; /* a used host parameter in the bucket: its .grad views it */
        for (int i = 0; i < d->n && !views; i++)
            views = d->p[i].bucket == k && used_any[i] &&
                    remat_device_host_addressable(d->p[i].t->storage->device.type);
        remat_tensor *fresh = NULL;
        if (views && remat_empty(&fresh, 1, &b->padded, b->dtype, REMAT_DEVICE_CPU) != REMAT_OK) {
            fresh = NULL;
            remat_clear_error();
        }
        for (int i = 0; i < d->n; i++) {
            dparam *p = &d->p[i];
            if (p->bucket != k || !used_any[i]) continue;
            if (!fresh || !remat_device_host_addressable(p->t->storage->device.type)) {
                int rc = copy_back(d, call, i);
                if (rc) return rc;
                continue;
            }
            int64_t st[REMAT_MAX_DIMS];
            rm_contiguous_strides(p->t->ndim, p->t->shape, st);
            remat_tensor *v = rm_tensor_alloc(b->buf->storage, b->buf->offset + p->offset,
                                              p->t->ndim, p->t->shape, st, b->dtype);
            if (!v) {
                rm_release(fresh);
                return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            }
            v->is_view = true;
            int rc = remat_set_grad(p->t, v);
            rm_release(v);
            if (rc) {
                rm_release(fresh);
                return rc;
            }
            rm_bump_version(p->t->grad);
        }
        if (fresh) {
            rm_release(b->buf); /* the views hold it */
            b->buf = fresh;
        }
    }
    return REMAT_OK;
}

/* write_back_buckets, then one wait for the copies to device memory it queued: when this
 * returns, .grad holds the mean and the buckets are free for the next step. */
static remat_status write_back(remat_ddp *d, const char *call, const unsigned char *used_any) {
    d->copy_failed = 0;
    d->newest_back = -1;
    int rc = write_back_buckets(d, call, used_any);
    settle_copies(d);
    if (rc == REMAT_OK && d->copy_failed)
        rc = rm_err(d->copy_failed,
                    "%s: copying the mean gradient of parameter %d back to its device: %s", call,
                    d->copy_failed_param, d->copy_failed_msg);
    return rc;
}

/* Clears the per-step state of parameters, buckets and statistics, and
 * sets the counts expected in the backward of loss. */
static void reset_step(remat_ddp *d, remat_tensor *loss) {
    for (int i = 0; i < d->n; i++) {
        d->p[i].count = 0;
        d->p[i].ready = d->p[i].late = false;
    }
    for (int k = 0; k < d->nb; k++) {
        d->b[k].n_ready = 0;
        d->b[k].launched = d->b[k].done = false;
        d->b[k].req = MPI_REQUEST_NULL;
    }
    d->next_launch = 0;
    d->mpi_failed = 0;
    d->copy_failed = 0;
    remat_ddp_stats st = {
        .n_buckets = d->nb, .n_params = d->n, .n_sync_backwards = d->st.n_sync_backwards + 1};
    d->st = st;
    d->have_counts = expected_counts(d, loss);
    d->st.learning = !d->have_counts;
}

/* The local backward, with buckets launched as their gradients arrive; then
 * every bucket not yet started is started (the other ranks wait for it,
 * whatever happened here). Returns the local status; its message goes to
 * msg (msg_size bytes). */
static remat_status local_backward(remat_ddp *d, const char *call, remat_tensor *loss, char *msg,
                                   size_t msg_size, double *t_bwd /* OUT: when it ended */) {
    rm_accumulate_observer_fn prev_fn;
    void *prev_ud;
    double t0 = rmd_now();
    rm_set_accumulate_observer(on_accumulate, d, &prev_fn, &prev_ud);
    int local = remat_backward_scalar(loss);
    rm_set_accumulate_observer(prev_fn, prev_ud, NULL, NULL);
    *t_bwd = rmd_now();
    d->st.backward_s = *t_bwd - t0;
    d->st.n_launched_in_backward = d->next_launch;
    for (int k = 0; k < d->next_launch; k++) d->st.n_done_in_backward += d->b[k].done;
    if (local) snprintf(msg, msg_size, "%s", remat_last_error());
    for (int i = d->n - 1; i >= 0; i--)
        if (!d->p[i].ready) mark_ready(d, i);
    /* the buckets still waiting for copies: each waited for and started, in order */
    launch_in_order(d, true);
    settle_copies(d); /* none in flight after a failed launch either */
    if (d->mpi_failed && !local) {
        local = rmd_mpi_err(d->pg, call, "starting a bucket's all-reduce", d->mpi_failed);
        snprintf(msg, msg_size, "%s", remat_last_error());
    }
    if (d->copy_failed && !local) { /* its slot went out as zeros; the step fails everywhere */
        local = rm_err(d->copy_failed, "%s: copying the gradient of parameter %d to the host: %s",
                       call, d->copy_failed_param, d->copy_failed_msg);
        snprintf(msg, msg_size, "%s", remat_last_error());
    }
    return local;
}

/* Reduces again every bucket holding a parameter some rank saw a late
 * gradient for (any: the OR of every rank's flags). */
static remat_status rereduce_late(remat_ddp *d, const char *call, const unsigned char *any) {
    bool *late_bucket = calloc((size_t)d->nb, sizeof *late_bucket);
    if (!late_bucket) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int i = 0; i < d->n; i++)
        if (any[i] & FLAG_LATE) late_bucket[d->p[i].bucket] = true;
    int rc = REMAT_OK;
    for (int k = 0; rc == REMAT_OK && k < d->nb; k++) {
        if (!late_bucket[k]) continue;
        rc = rereduce(d, call, k);
        d->st.n_rereduced++;
    }
    free(late_bucket);
    return rc;
}

/* After a successful step: the communication span and what the next step
 * expects of each parameter. */
static void finish_step(remat_ddp *d) {
    double first = 0, last = 0;
    for (int k = 0; k < d->nb; k++) {
        if (k == 0 || d->b[k].t_launch < first) first = d->b[k].t_launch;
        if (d->b[k].t_done > last) last = d->b[k].t_done;
    }
    d->st.comm_s = last - first;
    for (int i = 0; i < d->n; i++) d->p[i].expected = d->p[i].count;
    d->learned = true;
}

/* Every rank's status and per-parameter flags (used, late), waiting for the
 * buckets in flight; then the late buckets reduced again and the sums
 * written back. `all` holds n flags per rank, `any` n; t_bwd is when the
 * local backward ended. */
static remat_status exchange_and_write_back(remat_ddp *d, const char *call, int local,
                                            const char *local_msg, double t_bwd,
                                            unsigned char *flags, unsigned char *all,
                                            unsigned char *any, MPI_Request *reqs) {
    for (int i = 0; i < d->n; i++)
        flags[i] =
            (unsigned char)((d->p[i].t->grad ? FLAG_USED : 0) | (d->p[i].late ? FLAG_LATE : 0));
    int nr = 0;
    for (int k = 0; k < d->next_launch; k++)
        if (!d->b[k].done) reqs[nr++] = d->b[k].req;
    int rc = rmd_exchange_status(d->pg, call, local, local_msg, flags, (size_t)d->n, all, nr, reqs);
    double t_end = rmd_now();
    for (int k = 0; k < d->nb; k++)
        if (!d->b[k].done) d->b[k].t_done = t_end;
    d->st.exposed_s = t_end - t_bwd;
    if (rc) return rc;
    for (int r = 0; r < d->pg->size; r++)
        for (int i = 0; i < d->n; i++) any[i] |= all[(size_t)r * d->n + i];
    rc = rereduce_late(d, call, any);
    for (int i = 0; i < d->n; i++) any[i] &= FLAG_USED;
    memcpy(d->used_any, any, (size_t)d->n);
    /* ZeRO keeps the sums in the buckets; .grad stays this rank's own */
    if (rc == REMAT_OK && !d->zero) rc = write_back(d, call, any);
    return rc;
}
remat_status remat_ddp_backward(remat_ddp *d, remat_tensor *loss) {
    static const char *call = "remat_ddp_backward";
    if (!d) return rm_err(REMAT_EINVAL, "%s: ddp is NULL", call);
    int rc = rmd_check_group(call, d->pg);
    if (rc) return rc;
    if (!d->sync) return remat_backward_scalar(loss);

    reset_step(d, loss);
    char local_msg[RMD_MSG] = "";
    double t_bwd;
    int local = local_backward(d, call, loss, local_msg, sizeof local_msg, &t_bwd);
    unsigned char *flags = calloc((size_t)d->n, 1);
    unsigned char *all = calloc((size_t)d->n * (size_t)d->pg->size, 1);
    unsigned char *any = calloc((size_t)d->n, 1);
    MPI_Request *reqs = calloc((size_t)d->nb, sizeof *reqs);
    if (!flags || !all || !any || !reqs) {
        /* cannot even take part: stop the others with a timeout, not a hang */
        free(flags);
        free(all);
        free(any);
        free(reqs);
        d->pg->broken = true;
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    rc = exchange_and_write_back(d, call, local, local_msg, t_bwd, flags, all, any, reqs);
    if (rc == REMAT_OK) finish_step(d);
    free(flags);
    free(all);
    free(any);
    free(reqs);
    return rc;
}
