/*
 * bench/preload/heap_peak.c — an LD_PRELOAD library that counts the bytes
 * live on the C heap and their peak, so two programs (remat and PyTorch) can
 * be compared by one exact measure instead of by resident memory alone.
 *
 * Why: RSS moves with page faults, not with allocations; a tensor whose
 * pages are not all touched yet, or heap memory reused from an earlier
 * step, hides part of a peak, and the two sides hide different amounts
 * (on the 32-layer MLP, PyTorch's RSS growth read 796-804 MiB across runs
 * while its heap peak was 813 MiB in every run). PyTorch has no allocator
 * counters on the CPU; this library gives it, and remat, the same one.
 *
 * What is counted: every block of malloc, calloc, realloc, reallocarray,
 * posix_memalign, aligned_alloc, memalign, valloc and pvalloc, at its
 * malloc_usable_size (the requested size plus glibc's slack: at most 24
 * bytes on the heap, up to one page for blocks malloc maps on their own).
 * Memory a program maps itself (mmap) is not heap and not counted: OpenBLAS'
 * buffers, Python's small-object arenas, JIT code.
 *
 * Use (compare.py does this when build/libremat_heap_peak.so exists):
 *     LD_PRELOAD=build/libremat_heap_peak.so remat bench --json ...
 * A program finds the counters with dlsym(RTLD_DEFAULT, "remat_heap_peak_reset")
 * (ctypes.CDLL(None) in Python); without the library the symbol is absent.
 *
 * glibc only: it forwards to glibc's exported __libc_* allocator entry
 * points. Thread-safe (atomics); the counters cost two atomic operations per
 * call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* glibc's own allocator entry points, which an LD_PRELOAD interposer must call: the
 * reserved names are the point here. */
/* NOLINTBEGIN(bugprone-reserved-identifier) */
extern void *__libc_malloc(size_t n);
extern void __libc_free(void *p);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void *__libc_valloc(size_t n);
extern void *__libc_pvalloc(size_t n);
/* NOLINTEND(bugprone-reserved-identifier) */

/* live may dip below zero: a block the dynamic loader made before this
 * library was in place can be freed through it */
static _Atomic int64_t g_live, g_peak;

static void *counted(void *p) {
    if (p) {
        int64_t n = (int64_t)malloc_usable_size(p);
        int64_t now = atomic_fetch_add_explicit(&g_live, n, memory_order_relaxed) + n;
        int64_t pk = atomic_load_explicit(&g_peak, memory_order_relaxed);
        while (now > pk && !atomic_compare_exchange_weak_explicit(
                               &g_peak, &pk, now, memory_order_relaxed, memory_order_relaxed)) {}
    }
    return p;
}

static void uncount(void *p) {
    if (p) atomic_fetch_sub_explicit(&g_live, (int64_t)malloc_usable_size(p), memory_order_relaxed);
}

/* ---- the counters (the library's API) ---------------------------------------------------- */

/* Starts a new peak at the bytes live now; returns them. */
int64_t remat_heap_peak_reset(void) {
    int64_t now = atomic_load(&g_live);
    atomic_store(&g_peak, now);
    return now;
}
/* The most bytes live at once since the last reset (or since start). */
int64_t remat_heap_peak_bytes(void) { return atomic_load(&g_peak); }
/* Bytes live now. */
int64_t remat_heap_live_bytes(void) { return atomic_load(&g_live); }

/* ---- the interposed allocator ------------------------------------------------------------ */

/* realloc calls these, not malloc and free: those names resolve to libc's
 * when the library is dlopen'ed rather than preloaded (tests do that) */
static void *heap_malloc(size_t n) { return counted(__libc_malloc(n)); }
static void heap_free(void *p) {
    uncount(p);
    __libc_free(p);
}

void *malloc(size_t n) { return heap_malloc(n); }
void free(void *p) { heap_free(p); }

void *calloc(size_t n, size_t size) { return counted(__libc_calloc(n, size)); }

static void *heap_realloc(void *p, size_t n) {
    if (!p) return heap_malloc(n);
    if (n == 0) { /* glibc frees p and returns NULL */
        heap_free(p);
        return NULL;
    }
    int64_t old = (int64_t)malloc_usable_size(p);
    void *q = __libc_realloc(p, n);
    if (!q) return NULL; /* p is untouched and still counted */
    atomic_fetch_sub_explicit(&g_live, old, memory_order_relaxed);
    return counted(q);
}

void *realloc(void *p, size_t n) { return heap_realloc(p, n); }

void *reallocarray(void *p, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return heap_realloc(p, n * size);
}

int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = __libc_memalign(align, n);
    if (!p) return ENOMEM;
    *out = counted(p);
    return 0;
}

void *aligned_alloc(size_t align, size_t n) { return counted(__libc_memalign(align, n)); }
void *memalign(size_t align, size_t n) { return counted(__libc_memalign(align, n)); }
void *valloc(size_t n) { return counted(__libc_valloc(n)); }
void *pvalloc(size_t n) { return counted(__libc_pvalloc(n)); }
