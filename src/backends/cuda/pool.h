/* src/backends/cuda/pool.h — the caching allocator's bookkeeping, apart from
 * CUDA: size classes, block splitting, coalescing on free, stream-ordered
 * reuse, cross-stream uses through events, empty_cache, and its counters.
 *
 * It is PyTorch's CUDACachingAllocator scheme (facts, not code): requests
 * are rounded up to 512 bytes; those of at most 1 MiB come from the small
 * pool, whose segments are 2 MiB; larger ones from the large pool, whose
 * segments are 20 MiB for requests under 10 MiB and the request rounded up
 * to 2 MiB above. A free block at least as large as the request, of the
 * same pool and stream, is taken (the smallest such, then the lowest
 * address) and split when the rest is worth keeping (small pool: at least
 * 512 bytes; large: more than 1 MiB). A freed block merges with its free
 * neighbours of the same segment. A block freed on the stream it was
 * allocated on may be handed out again at once: work enqueued later on
 * that stream runs after the work that used it. A block also used on other
 * streams (rm_pool_record_stream) waits for an event recorded on each of
 * them at free time. When a segment cannot be had, every wholly free
 * segment is returned (after the provider's sync) and the request retried.
 *
 * The memory itself comes from a segment provider: cudaMalloc / cudaFree
 * in the cuda backend (allocator.c), malloc / free in the unit test
 * (tests/test_cuda_pool.c), which is why this file is plain C and built
 * with or without CUDA. Thread-safe (one mutex per pool). */
#ifndef REMAT_CUDA_POOL_H
#define REMAT_CUDA_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RM_POOL_MIN_BLOCK ((size_t)512)            /* rounding of every request */
#define RM_POOL_SMALL_SIZE ((size_t)1 << 20)       /* largest small-pool request */
#define RM_POOL_SMALL_SEGMENT ((size_t)2 << 20)    /* small-pool segment */
#define RM_POOL_LARGE_SEGMENT ((size_t)20 << 20)   /* segment for a request < 10 MiB */
#define RM_POOL_MIN_LARGE_ALLOC ((size_t)10 << 20) /* from here: the request itself... */
#define RM_POOL_ROUND_LARGE ((size_t)2 << 20)      /* ...rounded up to 2 MiB */
#define RM_POOL_MAX_STREAMS 8                      /* other streams one block may be recorded on */

/* Where segments come from. seg_alloc returns NULL on failure; sync waits
 * until the device has finished every piece of work enqueued so far (before
 * segments go back); the event functions are needed only when
 * rm_pool_record_stream is used (record: an event on `stream` after the
 * work enqueued so far, NULL on failure; done: whether it has completed;
 * free: destroys it). */
typedef struct rm_pool_provider {
    void *user_data;
    void *(*seg_alloc)(void *user_data, size_t size);
    void (*seg_free)(void *user_data, void *ptr, size_t size);
    void (*sync)(void *user_data);
    void *(*event_record)(void *user_data, void *stream);
    bool (*event_done)(void *user_data, void *event);
    void (*event_free)(void *user_data, void *event);
} rm_pool_provider;

typedef struct rm_pool_stats {
    size_t allocated_bytes;      /* blocks handed out (rounded sizes; PyTorch: memory_allocated) */
    size_t peak_allocated_bytes; /* since creation or rm_pool_reset_peak */
    size_t requested_bytes;      /* the sizes asked for, of the blocks handed out */
    size_t reserved_bytes;       /* segments held (PyTorch: memory_reserved) */
    size_t peak_reserved_bytes;
    uint64_t n_segments;   /* segments held */
    uint64_t n_seg_allocs; /* provider seg_alloc calls that succeeded */
    uint64_t n_seg_frees;
    uint64_t n_retries;         /* requests that had to empty the cache first */
    uint64_t n_allocs, n_frees; /* blocks handed out / given back */
    uint64_t n_pending;         /* freed blocks waiting for events of other streams */
} rm_pool_stats;

typedef struct rm_pool rm_pool;

/* A pool over `provider` (copied); NULL when out of host memory. */
rm_pool *rm_pool_new(const rm_pool_provider *provider);
/* Returns every segment to the provider (after its sync) and frees the
 * pool. Blocks still handed out are lost to their holders. NULL: no-op. */
void rm_pool_destroy(rm_pool *pool);
/* A block of at least nbytes (0 counts as 1) for work ordered on `stream`
 * (any key: the device stream's handle); NULL when no segment can be had.
 * The pointer is 512-byte aligned if the provider's segments are. */
void *rm_pool_alloc(rm_pool *pool, size_t nbytes, void *stream);
/* Gives a block back; false (nothing done) when ptr is not a block of the
 * pool handed out. */
bool rm_pool_free(rm_pool *pool, void *ptr);
/* Records that the block at ptr is used by work on `stream` as well (PyTorch:
 * Tensor.record_stream): at free, it is reused only once that work is done.
 * false: ptr is no block handed out, or too many streams. */
bool rm_pool_record_stream(rm_pool *pool, void *ptr, void *stream);
/* The rounded size of the block at ptr (0 when none). */
size_t rm_pool_block_size(rm_pool *pool, const void *ptr);
/* Returns every wholly free segment to the provider (after its sync);
 * blocks waiting on events are waited for first (PyTorch: empty_cache). */
void rm_pool_empty_cache(rm_pool *pool);
void rm_pool_stats_get(rm_pool *pool, rm_pool_stats *out);
/* Peaks := current values. */
void rm_pool_reset_peak(rm_pool *pool);
/* The rounded size of a request and the segment size the pool would ask
 * the provider for (exposed for the tests and docs). */
size_t rm_pool_round(size_t nbytes);
size_t rm_pool_segment_size(size_t rounded);

#endif /* REMAT_CUDA_POOL_H */
