/*
 * remat/cuda.h — the `cuda` device: availability, its caching allocator,
 * TF32, synchronisation (docs/cuda.md).
 *
 * When remat is built with the CUDA toolkit (CMake option REMAT_CUDA, on
 * by default when nvcc is found), the device type "cuda" is registered at
 * start-up: remat_device_type_id("cuda") finds it and
 * remat_device_count(that id) is the number of GPUs — 0 on a machine
 * without a GPU or without the CUDA driver, and then every call that needs
 * a GPU fails with REMAT_EUNSUPPORTED saying why (remat_cuda_available).
 * Tensors are made on a GPU like on any device (remat_device{cuda id, N})
 * and moved with remat_to_device; the CPU never reads their memory.
 *
 * Memory. Tensor storage on a GPU comes from a caching allocator (PyTorch:
 * CUDACachingAllocator): requests are rounded to 512 bytes, small ones
 * (<= 1 MiB) carved out of 2 MiB segments, large ones out of 20 MiB
 * segments or their own (>= 10 MiB, rounded to 2 MiB); blocks are split
 * and coalesced, and a freed block is reused by the next request on the
 * device's stream without waiting. Memory returns to the driver only on
 * remat_cuda_empty_cache (or when a cudaMalloc fails, before retrying).
 * remat_alloc_stats_get counts tensor bytes exactly as on cpu (requested
 * sizes: current, peak, reset, allocations); remat_cuda_memory_stats adds
 * the allocator's own view (PyTorch: memory_allocated's rounded blocks,
 * memory_reserved). The allocation observer (remat_set_alloc_observer) sees
 * cuda allocations like cpu ones.
 *
 * Without CUDA in the build these functions exist and fail with
 * REMAT_EUNSUPPORTED ("remat was built without CUDA").
 */
#ifndef REMAT_CUDA_H
#define REMAT_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/device.h"
#include "remat/error.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* Whether at least one GPU can be used. When not, *reason (if reason is
 * not NULL) gets why, e.g. "remat was built without CUDA", "no CUDA driver
 * (cudaErrorInsufficientDriver: ...)", "no CUDA device"; static storage.
 * When it can, *reason is NULL. Does not create a CUDA context. */
bool remat_cuda_available(const char **reason);

/* Waits for every kernel and copy remat enqueued on GPU `index` (PyTorch:
 * torch.cuda.synchronize). REMAT_EUNSUPPORTED without GPUs, REMAT_EDEVICE
 * for an index out of range, REMAT_EDEVICE for a CUDA error (named). */
remat_status remat_cuda_synchronize(int index);

/* Returns the cached, unused memory of every GPU to the driver (PyTorch:
 * torch.cuda.empty_cache). Memory in use by tensors stays. Synchronises
 * each device first. REMAT_EUNSUPPORTED without CUDA in the build; with no
 * GPU there is nothing to return (REMAT_OK). */
remat_status remat_cuda_empty_cache(void);

/* The caching allocator of one GPU (PyTorch: torch.cuda.memory_stats). */
typedef struct remat_cuda_memory_stats {
    size_t allocated_bytes; /* blocks held by tensors, 512-rounded (PyTorch: memory_allocated) */
    size_t peak_allocated_bytes; /* (PyTorch: max_memory_allocated) */
    size_t reserved_bytes; /* cudaMalloc'd segments, used or cached (PyTorch: memory_reserved) */
    size_t peak_reserved_bytes; /* (PyTorch: max_memory_reserved) */
    uint64_t n_segments;        /* segments held now */
    uint64_t n_device_mallocs;  /* cudaMalloc calls made */
    uint64_t n_device_frees;    /* cudaFree calls made */
    uint64_t n_alloc_retries;   /* requests that emptied the cache and tried again */
} remat_cuda_memory_stats;
/* Copies out GPU `index`'s stats; REMAT_EUNSUPPORTED / REMAT_EDEVICE as
 * remat_cuda_synchronize; stats must not be NULL (REMAT_EINVAL). A GPU that
 * never allocated reports zeros. */
remat_status remat_cuda_memory_stats_get(int index, remat_cuda_memory_stats *stats);
/* Reserved bytes of GPU `index` (0 for an index without a GPU). */
size_t remat_cuda_memory_reserved(int index);
/* Sets the peaks of GPU `index` to the current values (allocator stats and
 * the remat_alloc_stats counters alike; PyTorch: reset_peak_memory_stats). */
remat_status remat_cuda_reset_peak_memory_stats(int index);

/* A user allocator for cuda memory (PyTorch: CUDAPluggableAllocator): alloc gets
 * the calling thread's current GPU (remat_current_device) set to the
 * tensor's device and returns device memory or NULL (remat then fails the
 * call with REMAT_ENOMEM); free gets it back with the size asked for. The
 * caching allocator is bypassed (its stats stay at zero). NULL or NULL
 * functions restore the caching allocator. REMAT_ESTATE while cuda tensors
 * are alive; REMAT_EUNSUPPORTED without CUDA in the build. */
remat_status remat_cuda_set_allocator(const remat_allocator *allocator);

/* Whether float32 GEMMs may use TF32 tensor cores (PyTorch:
 * torch.backends.cuda.matmul.allow_tf32). Off by default: f32 matmuls
 * are then computed in f32, as on cpu. Takes effect for GEMMs enqueued
 * after the call. Harmless without CUDA. */
void remat_cuda_set_allow_tf32(bool allow);
bool remat_cuda_get_allow_tf32(void);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_CUDA_H */
