/* src/backends/cpu/device.c — the cpu backend's record (backend 0): the "cpu" device type
 * (memory from the user's allocator, remat_set_cpu_allocator, else aligned_alloc behind
 * the buffer cache of cache.c), the cpu kernel rows (table.c) with their bf16 fallback
 * (bf16.c), and the host routines the core's copies go through. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "cpu.h"

static pthread_mutex_t g_alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static remat_allocator g_cpu_alloc;

/* Bytes the default allocator really takes for nbytes (aligned_alloc wants a
 * multiple of the alignment); also the cache's size key. */
static size_t cpu_rounded(size_t nbytes) {
    return nbytes > SIZE_MAX - 63 ? SIZE_MAX : (nbytes + 63) & ~(size_t)63; /* SIZE_MAX: fails */
}

static void *cpu_alloc(void *ud, int index, size_t nbytes) {
    RM_UNUSED(ud);
    RM_UNUSED(index);
    if (g_cpu_alloc.alloc) return g_cpu_alloc.alloc(g_cpu_alloc.user_data, nbytes);
    size_t rounded = cpu_rounded(nbytes);
    void *p = rm_cpu_cache_take(rounded);
    if (p) return p;
    p = aligned_alloc(64, rounded);
    if (!p && remat_cpu_cache_bytes() > 0) { /* what the cache holds may make room */
        remat_cpu_cache_empty();
        p = aligned_alloc(64, rounded);
    }
    return p;
}
static void cpu_free(void *ud, int index, void *ptr, size_t nbytes) {
    RM_UNUSED(ud);
    RM_UNUSED(index);
    if (g_cpu_alloc.free) {
        g_cpu_alloc.free(g_cpu_alloc.user_data, ptr, nbytes);
        return;
    }
    size_t rounded = cpu_rounded(nbytes);
    if (rounded < (size_t)RM_CPU_CACHE_MIN) { /* never cached: no need for the counters */
        free(ptr);
        return;
    }
    /* called after the accounting: in_use no longer counts this buffer */
    remat_alloc_stats s;
    remat_alloc_stats_get(REMAT_DEVICE_CPU, &s);
    if (!rm_cpu_cache_put(ptr, rounded, s.current_bytes, s.peak_bytes)) free(ptr);
}
static remat_status cpu_copy(void *ud, int index, void *dst, const void *src, size_t n,
                             remat_copy_kind k) {
    RM_UNUSED(ud);
    RM_UNUSED(index);
    RM_UNUSED(k);
    memmove(dst, src, n);
    return REMAT_OK;
}
static int cpu_count(void *ud) {
    RM_UNUSED(ud);
    return 1;
}

void remat_set_cpu_allocator(const remat_allocator *allocator) {
    remat_cpu_cache_empty(); /* its buffers came from the allocator being replaced */
    pthread_mutex_lock(&g_alloc_lock);
    if (allocator && allocator->alloc && allocator->free) g_cpu_alloc = *allocator;
    else memset(&g_cpu_alloc, 0, sizeof g_cpu_alloc);
    pthread_mutex_unlock(&g_alloc_lock);
}

static const rm_host_ops k_host = {
    .copy_same_dtype = rm_copy_same_dtype,
    .zero_dim_range = rm_zero_dim_range,
    .f32_to_bf16 = rm_cpu_f32_to_bf16,
    .bf16_to_f32 = rm_cpu_bf16_to_f32,
};

/* Buffer donation's device side (src/autograd/graph.h): the kernels that may write over
 * a dying input (the unary backward's in-place twin runs the same expressions; mse's is
 * elementwise), and the GEMM that rounds an f32 gradient for a bf16 product itself. The
 * optimizer updates that read the gradient scaled (src/core/optim_loops.h). The norms
 * that write a bf16 y (nn_body.h: remat_layer_norm_to; rms_norm_body.h: remat_rms_norm_to). */
static const unsigned char k_flags[RM_K_COUNT] = {
    [RM_K_UNARY_BWD] = RM_KF_IN_PLACE, [RM_K_BIAS_GELU_BWD] = RM_KF_IN_PLACE,
    [RM_K_MSE_BWD] = RM_KF_IN_PLACE,   [RM_K_MATMUL] = RM_KF_WIDE_GRAD,
    [RM_K_ADAMW] = RM_KF_GRAD_SCALE,   [RM_K_SGD] = RM_KF_GRAD_SCALE,
    [RM_K_LAYER_NORM] = RM_KF_BF16_Y,  [RM_K_ADD_LAYER_NORM] = RM_KF_BF16_Y,
    [RM_K_RMS_NORM] = RM_KF_BF16_Y,
};

const rm_backend rm_backend_cpu = {
    .device =
        {
            .name = "cpu",
            .host_addressable = true,
            .alloc = cpu_alloc,
            .free = cpu_free,
            .copy = cpu_copy,
            .device_count = cpu_count,
        },
    .kernels = rm_cpu_kernels,
    .bf16_fallback = rm_cpu_bf16_via_f32,
    .kernel_flags = k_flags,
    .host = &k_host,
};
