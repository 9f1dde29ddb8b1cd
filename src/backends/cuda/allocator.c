/* src/backends/cuda/allocator.c — the cuda device's memory: one caching pool
 * (pool.c) per GPU over cudaMalloc / cudaFree, ordered on the device's
 * stream, or the user's allocator (remat_cuda_set_allocator); kernel
 * scratch from the same pools; empty_cache and the allocator stats. The
 * tensor counters (remat_alloc_stats) are kept by src/core/device.c for every
 * device type alike. */
#include <pthread.h>
#include <string.h>

#include "cuda_backend.h"
#include "pool.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static rm_pool *g_pools[REMAT_MAX_DEVICES_PER_TYPE];
static int g_pool_index[REMAT_MAX_DEVICES_PER_TYPE]; /* provider user_data: the device */
static remat_allocator g_user;

/* ---- the segment provider: the device is current (the caller's guard) ---------------------- */
static void *seg_alloc(void *ud, size_t size) {
    RM_UNUSED(ud);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, size);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is not sticky: clear it */
        return NULL;
    }
    return p;
}
static void seg_free(void *ud, void *ptr, size_t size) {
    RM_UNUSED(ud);
    RM_UNUSED(size);
    (void)cudaFree(ptr); /* synchronises the device */
}
static void seg_sync(void *ud) {
    int index = *(const int *)ud, prev;
    if (rm_cuda_guard("cuda allocator", index, &prev)) return;
    (void)cudaDeviceSynchronize();
    rm_cuda_unguard(prev);
}
static void *ev_record(void *ud, void *stream) {
    RM_UNUSED(ud);
    cudaEvent_t ev;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return NULL;
    if (cudaEventRecord(ev, (cudaStream_t)stream) != cudaSuccess) {
        cudaEventDestroy(ev);
        return NULL;
    }
    return ev;
}
static bool ev_done(void *ud, void *ev) {
    RM_UNUSED(ud);
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) return false;
    (void)cudaGetLastError();
    return true; /* done, or failed: nothing more will come of it */
}
static void ev_free(void *ud, void *ev) {
    RM_UNUSED(ud);
    cudaEventDestroy((cudaEvent_t)ev);
}

static rm_pool *pool_of(int index, bool create) {
    pthread_mutex_lock(&g_lock);
    rm_pool *p = g_pools[index];
    if (!p && create) {
        g_pool_index[index] = index;
        rm_pool_provider prov = {
            &g_pool_index[index], seg_alloc, seg_free, seg_sync, ev_record, ev_done, ev_free};
        p = g_pools[index] = rm_pool_new(&prov);
    }
    pthread_mutex_unlock(&g_lock);
    return p;
}

/* ---- tensor memory and scratch ------------------------------------------------------------- */
static void *pool_alloc(const char *call, int index, size_t nbytes) {
    int prev;
    if (rm_cuda_guard(call, index, &prev)) return NULL;
    void *p = NULL;
    cudaStream_t s = rm_cuda_stream(index);
    rm_pool *pool = s ? pool_of(index, true) : NULL;
    if (pool) p = rm_pool_alloc(pool, nbytes, s);
    if (!p && s && pool) {
        rm_pool_stats st;
        rm_pool_stats_get(pool, &st);
        rm_err(REMAT_ENOMEM,
               "%s: out of memory on cuda:%d: %zu bytes requested, %zu allocated and %zu "
               "reserved by remat (remat_cuda_memory_stats_get)",
               call, index, nbytes, st.allocated_bytes, st.reserved_bytes);
    } else if (!p && s) {
        rm_err(REMAT_ENOMEM, "%s: out of host memory for the allocator of cuda:%d", call, index);
    }
    rm_cuda_unguard(prev);
    return p;
}

void *rm_cuda_malloc(int index, size_t nbytes) {
    pthread_mutex_lock(&g_lock);
    remat_allocator user = g_user;
    pthread_mutex_unlock(&g_lock);
    if (!user.alloc) return pool_alloc("cuda allocation", index, nbytes);
    int prev;
    if (rm_cuda_guard("cuda allocation", index, &prev)) return NULL;
    void *p = user.alloc(user.user_data, nbytes);
    rm_cuda_unguard(prev);
    if (!p) {
        rm_err(REMAT_ENOMEM, "the user's cuda allocator returned NULL for %zu bytes on cuda:%d",
               nbytes, index);
        return NULL;
    }
    return p;
}

void rm_cuda_free(int index, void *ptr, size_t nbytes) {
    if (!ptr) return;
    int prev;
    if (rm_cuda_guard("cuda free", index, &prev)) return;
    rm_pool *pool = pool_of(index, false);
    if (pool && rm_pool_free(pool, ptr)) {
        rm_cuda_unguard(prev);
        return;
    }
    /* not a block of the pool: the user allocator's */
    pthread_mutex_lock(&g_lock);
    remat_allocator user = g_user;
    pthread_mutex_unlock(&g_lock);
    if (user.free) user.free(user.user_data, ptr, nbytes);
    rm_cuda_unguard(prev);
}

void *rm_cuda_scratch(int index, size_t nbytes) {
    return pool_alloc("cuda scratch", index, nbytes);
}

void rm_cuda_scratch_free(int index, void *ptr) {
    rm_pool *pool = ptr ? pool_of(index, false) : NULL;
    if (pool) rm_pool_free(pool, ptr);
}

/* ---- public ------------------------------------------------------------------------------ */
remat_status remat_cuda_set_allocator(const remat_allocator *allocator) {
    int type = rm_cuda_type();
    for (int i = 0; type > 0 && i < REMAT_MAX_DEVICES_PER_TYPE; i++) {
        remat_alloc_stats st;
        if (remat_alloc_stats_get((remat_device){type, i}, &st) == REMAT_OK && st.n_live)
            return rm_err(REMAT_ESTATE,
                          "remat_cuda_set_allocator: cuda:%d still has %llu live allocations", i,
                          (unsigned long long)st.n_live);
    }
    pthread_mutex_lock(&g_lock);
    if (allocator && allocator->alloc && allocator->free) g_user = *allocator;
    else memset(&g_user, 0, sizeof g_user);
    pthread_mutex_unlock(&g_lock);
    return REMAT_OK;
}

remat_status remat_cuda_empty_cache(void) {
    int n = rm_cuda_device_count();
    for (int i = 0; i < n; i++) {
        rm_pool *pool = pool_of(i, false);
        if (!pool) continue;
        int prev;
        int rc = rm_cuda_guard("remat_cuda_empty_cache", i, &prev);
        if (rc) return rc;
        rm_pool_empty_cache(pool);
        rm_cuda_unguard(prev);
    }
    return REMAT_OK;
}

void rm_cuda_release_all(void) { remat_cuda_empty_cache(); }

remat_status remat_cuda_memory_stats_get(int index, remat_cuda_memory_stats *stats) {
    if (!stats) return rm_err(REMAT_EINVAL, "remat_cuda_memory_stats_get: stats must not be NULL");
    int rc = rm_cuda_check_index("remat_cuda_memory_stats_get", index);
    if (rc) return rc;
    memset(stats, 0, sizeof *stats);
    rm_pool *pool = pool_of(index, false);
    if (!pool) return REMAT_OK;
    rm_pool_stats st;
    rm_pool_stats_get(pool, &st);
    stats->allocated_bytes = st.allocated_bytes;
    stats->peak_allocated_bytes = st.peak_allocated_bytes;
    stats->reserved_bytes = st.reserved_bytes;
    stats->peak_reserved_bytes = st.peak_reserved_bytes;
    stats->n_segments = st.n_segments;
    stats->n_device_mallocs = st.n_seg_allocs;
    stats->n_device_frees = st.n_seg_frees;
    stats->n_alloc_retries = st.n_retries;
    return REMAT_OK;
}

size_t remat_cuda_memory_reserved(int index) {
    if (index < 0 || index >= rm_cuda_device_count()) return 0;
    rm_pool *pool = pool_of(index, false);
    if (!pool) return 0;
    rm_pool_stats st;
    rm_pool_stats_get(pool, &st);
    return st.reserved_bytes;
}

remat_status remat_cuda_reset_peak_memory_stats(int index) {
    int rc = rm_cuda_check_index("remat_cuda_reset_peak_memory_stats", index);
    if (rc) return rc;
    rm_pool *pool = pool_of(index, false);
    if (pool) rm_pool_reset_peak(pool);
    return remat_alloc_reset_peak((remat_device){rm_cuda_type(), index});
}
