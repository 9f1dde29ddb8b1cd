/* src/backends/cpu/workspace.h — the cpu kernels' scratch (workspace.c): buffers a kernel
 * holds only while it runs (the bf16 GEMM's widened operands, oneDNN's scratchpad, the
 * attention kernels' per-thread tiles, partial sums) taken through the cpu device's
 * allocator, so that the allocator's counters (current, peak; remat_alloc_stats_get), the
 * allocation meter the planner's profiles read (rm_meter_*, this thread's) and the memory
 * timeline see them as they see tensors, and the buffer cache (cache.c) hands a repeating
 * size back without a malloc and its page faults.
 *
 *   void *w = rm_cpu_ws_take(n);     NULL: out of memory (the kernel reports it or falls back)
 *   ...                               n bytes, aligned as the allocator's buffers (64
 *                                     bytes by default; malloc's below RM_CPU_WS_MIN)
 *   rm_cpu_ws_give(w, n);             the same n; w NULL: nothing
 *
 * Below RM_CPU_WS_MIN bytes a take is a plain malloc, uncounted: such a buffer is at most
 * 64 KiB while one kernel runs, malloc serves it from its per-thread caches, and counting
 * it would cost a lock and an allocator event (a timeline entry) per call — per tile GEMM
 * in the attention kernels. Thread-safe: takes and gives may come from any thread, inside
 * parallel regions too; but a take counts in the meter of the thread that makes it, so a
 * kernel whose OpenMP threads each need scratch takes it for all of them on the calling
 * thread, before the region (matmul.c's batch loop, attention.c), for the planner to see
 * it. */
#ifndef REMAT_BACKENDS_CPU_WORKSPACE_H
#define REMAT_BACKENDS_CPU_WORKSPACE_H

#include <stddef.h>

/* smaller takes: malloc (see above); also the floor of the buffer cache (RM_CPU_CACHE_MIN) */
#define RM_CPU_WS_MIN ((size_t)64 * 1024)

void *rm_cpu_ws_take(size_t nbytes);
void rm_cpu_ws_give(void *p, size_t nbytes);

/* n rounded up to a multiple of 64 (a slice per thread stays aligned) */
static inline size_t rm_cpu_ws_round(size_t n) { return (n + 63) & ~(size_t)63; }

#endif /* REMAT_BACKENDS_CPU_WORKSPACE_H */
