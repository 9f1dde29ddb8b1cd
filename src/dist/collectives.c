/* src/dist/collectives.c — blocking collectives of remat/dist.h, each made
 * of MPI's non-blocking one and a bounded wait (rmd_wait).
 *
 * Tensors in device memory (cuda) go through host memory: MPI is given a
 * host copy, and the result is copied back to the device. That is what a
 * CUDA-unaware MPI needs, and it keeps every rank's bytes those of the cpu
 * path (the same MPI reduction over the same values). */
#include <stdlib.h>
#include <string.h>

#include "dist_internal.h"

/* A contiguous f32/f64/i64 tensor with data, in host or device memory. */
static remat_status check_buffer(const char *call, const remat_tensor *t) {
    int rc = rm_check_tensor(call, "t", t);
    if (rc) return rc;
    char b[160];
    if (rmd_mpi_type(t->dtype) == MPI_DATATYPE_NULL)
        return rm_err(REMAT_EDTYPE, "%s: t is %s; only f32, f64 and i64 tensors can be sent", call,
                      rm_tensor_str(t, b, sizeof b));
    if (!remat_is_contiguous(t) || !rm_ptr(t))
        return rm_err(REMAT_EINVAL,
                      "%s: t (%s) must be a contiguous tensor with data (call "
                      "remat_contiguous first)",
                      call, rm_tensor_str(t, b, sizeof b));
    if (remat_numel(t) > INT32_MAX)
        return rm_err(REMAT_EINVAL, "%s: t has %lld elements; at most %d per call", call,
                      (long long)remat_numel(t), INT32_MAX);
    return REMAT_OK;
}

remat_status rmd_host_view(const char *call, const remat_tensor *t, bool read, void **out) {
    *out = NULL;
    if (remat_device_host_addressable(t->storage->device.type)) {
        *out = rm_ptr(t);
        return REMAT_OK;
    }
    size_t nbytes = (size_t)remat_numel(t) * remat_dtype_size(t->dtype);
    void *h = malloc(nbytes ? nbytes : 1);
    if (!h)
        return rm_err(REMAT_ENOMEM, "%s: out of host memory for a copy of %zu bytes", call, nbytes);
    if (read) {
        int rc = remat_copy_to_buffer(t, t->dtype, h, remat_numel(t));
        if (rc) {
            free(h);
            return rm_err_prefix(rc, call);
        }
    }
    *out = h;
    return REMAT_OK;
}

remat_status rmd_host_view_end(const char *call, remat_tensor *t, void *h, bool write) {
    if (!h || h == rm_ptr(t)) return REMAT_OK;
    int rc = REMAT_OK;
    if (write) {
        rc = rm_device_copy(t->storage->device, rm_ptr(t), REMAT_DEVICE_CPU, h,
                            (size_t)remat_numel(t) * remat_dtype_size(t->dtype));
        if (rc) rc = rm_err_prefix(rc, call);
    }
    free(h);
    return rc;
}

remat_status remat_dist_broadcast(remat_dist *pg, remat_tensor *t, int root) {
    static const char *call = "remat_dist_broadcast";
    int rc = rmd_check_group(call, pg);
    if (!rc) rc = check_buffer(call, t);
    if (rc) return rc;
    if (root < 0 || root >= pg->size)
        return rm_err(REMAT_EINVAL, "%s: root %d is not a rank of this group (world size %d)", call,
                      root, pg->size);
    void *h;
    rc = rmd_host_view(call, t, pg->rank == root, &h); /* only the root's bytes are sent */
    if (rc) return rc;
    MPI_Request req;
    int m = MPI_Ibcast(h, (int)remat_numel(t), rmd_mpi_type(t->dtype), root, pg->comm, &req);
    rc = m != MPI_SUCCESS ? rmd_mpi_err(pg, call, "starting the broadcast", m)
                          : rmd_wait(pg, call, "broadcasting", 1, &req, NULL);
    int rc2 = rmd_host_view_end(call, t, h, rc == REMAT_OK && pg->rank != root);
    return rc ? rc : rc2;
}

/* Sum or max of n elements of `type` in place on every rank. */
static remat_status all_reduce_raw(remat_dist *pg, const char *call, void *data, int n,
                                   MPI_Datatype type, remat_reduce_op op) {
    MPI_Request req;
    int m = MPI_Iallreduce(MPI_IN_PLACE, data, n, type, op == REMAT_REDUCE_MAX ? MPI_MAX : MPI_SUM,
                           pg->comm, &req);
    if (m != MPI_SUCCESS) return rmd_mpi_err(pg, call, "starting the all-reduce", m);
    return rmd_wait(pg, call, "all-reducing", 1, &req, NULL);
}

remat_status remat_dist_all_reduce(remat_dist *pg, remat_tensor *t, remat_reduce_op op) {
    static const char *call = "remat_dist_all_reduce";
    int rc = rmd_check_group(call, pg);
    if (!rc) rc = check_buffer(call, t);
    if (rc) return rc;
    if (op != REMAT_REDUCE_SUM && op != REMAT_REDUCE_MEAN && op != REMAT_REDUCE_MAX)
        return rm_err(REMAT_EINVAL, "%s: unknown reduce op %d", call, (int)op);
    if (op == REMAT_REDUCE_MEAN && t->dtype == REMAT_I64)
        return rm_err(REMAT_EDTYPE, "%s: the mean of an i64 tensor is not an i64; use SUM", call);
    int64_t n = remat_numel(t);
    void *h;
    rc = rmd_host_view(call, t, true, &h);
    if (rc) return rc;
    rc = all_reduce_raw(pg, call, h, (int)n, rmd_mpi_type(t->dtype), op);
    if (rc == REMAT_OK && op == REMAT_REDUCE_MEAN) {
        /* every rank divides the same sums the same way: bitwise identical */
        if (t->dtype == REMAT_F32) {
            float *x = h, w = (float)pg->size;
            for (int64_t i = 0; i < n; i++) x[i] /= w;
        } else {
            double *x = h, w = (double)pg->size;
            for (int64_t i = 0; i < n; i++) x[i] /= w;
        }
    }
    int rc2 = rmd_host_view_end(call, t, h, rc == REMAT_OK);
    return rc ? rc : rc2;
}

remat_status remat_dist_all_reduce_f64(remat_dist *pg, double *values, int n, remat_reduce_op op) {
    static const char *call = "remat_dist_all_reduce_f64";
    int rc = rmd_check_group(call, pg);
    if (rc) return rc;
    if (n < 0 || (n > 0 && !values))
        return rm_err(REMAT_EINVAL, "%s: values is NULL or n (%d) < 0", call, n);
    if (op != REMAT_REDUCE_SUM && op != REMAT_REDUCE_MEAN && op != REMAT_REDUCE_MAX)
        return rm_err(REMAT_EINVAL, "%s: unknown reduce op %d", call, (int)op);
    rc = all_reduce_raw(pg, call, values, n, MPI_DOUBLE, op);
    if (!rc && op == REMAT_REDUCE_MEAN)
        for (int i = 0; i < n; i++) values[i] /= (double)pg->size;
    return rc;
}

remat_status remat_dist_barrier(remat_dist *pg) {
    static const char *call = "remat_dist_barrier";
    int rc = rmd_check_group(call, pg);
    if (rc) return rc;
    MPI_Request req;
    int m = MPI_Ibarrier(pg->comm, &req);
    if (m != MPI_SUCCESS) return rmd_mpi_err(pg, call, "starting the barrier", m);
    return rmd_wait(pg, call, "waiting at the barrier", 1, &req, NULL);
}

static uint64_t fnv1a_bytes(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

remat_status remat_dist_check_identical(remat_dist *pg, int n, remat_tensor *const *tensors,
                                        bool *same) {
    static const char *call = "remat_dist_check_identical";
    int rc = rmd_check_group(call, pg);
    if (rc) return rc;
    if (!same || n < 0 || (n > 0 && !tensors))
        return rm_err(REMAT_EINVAL, "%s: same/tensors is NULL or n (%d) < 0", call, n);
    *same = false;
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < n; i++) {
        rc = check_buffer(call, tensors[i]);
        void *bytes = NULL;
        if (!rc) rc = rmd_host_view(call, tensors[i], true, &bytes);
        if (rc) return rc; /* the others time out waiting for this rank, as before */
        h = fnv1a_bytes(h, bytes,
                        (size_t)remat_numel(tensors[i]) * remat_dtype_size(tensors[i]->dtype));
        rmd_host_view_end(call, tensors[i], bytes, false);
    }
    /* max and min of the hash over ranks agree iff every rank has the same */
    uint64_t v[2] = {h, ~h};
    MPI_Request req;
    int m = MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, pg->comm, &req);
    if (m != MPI_SUCCESS) return rmd_mpi_err(pg, call, "starting the all-reduce", m);
    rc = rmd_wait(pg, call, "comparing hashes", 1, &req, NULL);
    if (rc) return rc;
    *same = v[0] == ~v[1];
    return REMAT_OK;
}
