/* src/dist/unavailable.c — remat/dist.h in a build without MPI: every call
 * fails with REMAT_EUNSUPPORTED naming the packages to install. Compiled
 * instead of the other src/dist sources when CMake did not find MPI. */
#include <stdlib.h>

#include "core/core.h"
#include "remat/dist.h"

#define NO_MPI(call)                                                                               \
    rm_err(REMAT_EUNSUPPORTED,                                                                     \
           "%s: remat was built without MPI; install Open MPI "                                    \
           "(apt-get install libopenmpi-dev openmpi-bin) and rebuild remat",                       \
           call)
/* A constructor's stand-in: *out = NULL (out may be NULL), then NO_MPI. */
#define NO_MPI_MAKE(out, call) ((out) ? (void)(*(out) = NULL) : (void)0, NO_MPI(call))

bool remat_dist_available(void) { return false; }

remat_status remat_dist_init(remat_dist **out, const remat_dist_options *opts) {
    RM_UNUSED(opts);
    return NO_MPI_MAKE(out, "remat_dist_init");
}
remat_status remat_dist_finalize(remat_dist *pg) {
    return pg ? NO_MPI("remat_dist_finalize") : REMAT_OK;
}
void remat_dist_abort(remat_dist *pg, int code) {
    RM_UNUSED(pg);
    _Exit(code ? code : 1);
}
int remat_dist_rank(const remat_dist *pg) { return RM_UNUSED(pg), 0; }
int remat_dist_world_size(const remat_dist *pg) { return RM_UNUSED(pg), 1; }
double remat_dist_timeout(const remat_dist *pg) { return RM_UNUSED(pg), 0; }
uint64_t remat_dist_rank_seed(const remat_dist *pg, uint64_t seed) { return RM_UNUSED(pg), seed; }
void remat_dist_shard(const remat_dist *pg, int64_t n, int64_t *begin, int64_t *end) {
    RM_UNUSED(pg);
    if (begin) *begin = 0;
    if (end) *end = n < 0 ? 0 : n;
}
remat_status remat_dist_broadcast(remat_dist *pg, remat_tensor *t, int root) {
    RM_UNUSED(pg), RM_UNUSED(t), RM_UNUSED(root);
    return NO_MPI("remat_dist_broadcast");
}
remat_status remat_dist_all_reduce(remat_dist *pg, remat_tensor *t, remat_reduce_op op) {
    RM_UNUSED(pg), RM_UNUSED(t), RM_UNUSED(op);
    return NO_MPI("remat_dist_all_reduce");
}
remat_status remat_dist_all_reduce_f64(remat_dist *pg, double *values, int n, remat_reduce_op op) {
    RM_UNUSED(pg), RM_UNUSED(values), RM_UNUSED(n), RM_UNUSED(op);
    return NO_MPI("remat_dist_all_reduce_f64");
}
remat_status remat_dist_barrier(remat_dist *pg) {
    RM_UNUSED(pg);
    return NO_MPI("remat_dist_barrier");
}
remat_status remat_dist_check_identical(remat_dist *pg, int n, remat_tensor *const *tensors,
                                        bool *same) {
    RM_UNUSED(pg), RM_UNUSED(n), RM_UNUSED(tensors);
    if (same) *same = false;
    return NO_MPI("remat_dist_check_identical");
}
remat_status remat_ddp_create(remat_ddp **out, remat_dist *pg, int n, remat_tensor *const *params,
                              const remat_ddp_options *opts) {
    RM_UNUSED(pg), RM_UNUSED(n), RM_UNUSED(params), RM_UNUSED(opts);
    return NO_MPI_MAKE(out, "remat_ddp_create");
}
void remat_ddp_free(remat_ddp *ddp) { RM_UNUSED(ddp); }
remat_status remat_ddp_backward(remat_ddp *ddp, remat_tensor *loss) {
    RM_UNUSED(ddp), RM_UNUSED(loss);
    return NO_MPI("remat_ddp_backward");
}
void remat_ddp_set_sync(remat_ddp *ddp, bool sync) { RM_UNUSED(ddp), RM_UNUSED(sync); }
void remat_ddp_get_stats(const remat_ddp *ddp, remat_ddp_stats *stats) {
    RM_UNUSED(ddp);
    if (stats) *stats = (remat_ddp_stats){0};
}
int remat_ddp_bucket_of(const remat_ddp *ddp, int param) {
    return RM_UNUSED(ddp), RM_UNUSED(param), -1;
}

remat_status remat_zero_create(remat_zero **out, remat_dist *pg, int n, remat_tensor *const *params,
                               const double *weight_decay, const remat_optim_options *opts,
                               const remat_ddp_options *ddp_opts) {
    RM_UNUSED(pg), RM_UNUSED(n), RM_UNUSED(params), RM_UNUSED(weight_decay), RM_UNUSED(opts),
        RM_UNUSED(ddp_opts);
    return NO_MPI_MAKE(out, "remat_zero_create");
}
void remat_zero_free(remat_zero *z) { RM_UNUSED(z); }
remat_status remat_zero_backward(remat_zero *z, remat_tensor *loss) {
    RM_UNUSED(z), RM_UNUSED(loss);
    return NO_MPI("remat_zero_backward");
}
remat_status remat_zero_step(remat_zero *z, bool *updated) {
    RM_UNUSED(z);
    if (updated) *updated = false;
    return NO_MPI("remat_zero_step");
}
size_t remat_zero_state_bytes(const remat_zero *z) { return RM_UNUSED(z), 0; }
size_t remat_zero_buffer_bytes(const remat_zero *z) { return RM_UNUSED(z), 0; }
remat_ddp *remat_zero_ddp(remat_zero *z) { return RM_UNUSED(z), NULL; }
int64_t remat_zero_updates(const remat_zero *z) { return RM_UNUSED(z), 0; }
remat_status remat_zero_gather_state(remat_zero *z, int root, remat_optimizer *o) {
    RM_UNUSED(z), RM_UNUSED(root), RM_UNUSED(o);
    return NO_MPI("remat_zero_gather_state");
}
remat_status remat_zero_load_state(remat_zero *z, const remat_optimizer *o) {
    RM_UNUSED(z), RM_UNUSED(o);
    return NO_MPI("remat_zero_load_state");
}
