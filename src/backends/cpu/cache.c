/* src/backends/cpu/cache.c — the cpu allocator (device.c)'s cache of freed tensor buffers
 * (remat_cpu_cache_* in remat/device.h).
 *
 * Why: a training step frees almost everything it allocated, and the next
 * step allocates the same sizes again. Left to malloc, whether those buffers
 * go back to the kernel in between depends on glibc's trim heuristics and on
 * the order of unrelated small allocations: when they do, every step
 * page-faults its whole activation footprint again (measured: 91k faults,
 * ~10 % of a GPT step on one thread). Kept here, a steady-state step makes no
 * malloc/free calls for its tensors at all.
 *
 * What: buffers of at least RM_CPU_CACHE_MIN bytes are kept on free, one list per
 * exact (64-byte rounded) size, and handed out again to an allocation of the
 * same size. The cache never holds more than the device's peak bytes minus
 * the bytes in use, so the tensor memory the process holds never exceeds
 * remat's own peak. Small buffers go to malloc directly (it serves them
 * well). The list link lives inside the cached buffer itself. */
#include <pthread.h>
#include <stdlib.h>

#include "cpu.h"

#define RM_CACHE_SIZES 256 /* distinct sizes cached at once (open addressing) */

typedef struct cblock {
    struct cblock *next;
} cblock;

typedef struct cbucket {
    size_t size; /* 0: empty slot */
    cblock *head;
} cbucket;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cbucket g_buckets[RM_CACHE_SIZES];
static size_t g_cached;
static int g_state; /* 0: not read from the environment yet, 1: on, 2: off */

/* On unless REMAT_CPU_CACHE=0, and off under AddressSanitizer (reusing
 * freed buffers would hide use-after-free bugs from it). */
static bool enabled_locked(void) {
    if (g_state == 0) {
        const char *e = getenv("REMAT_CPU_CACHE");
        bool on = !(e && e[0] == '0');
#if defined(__SANITIZE_ADDRESS__)
        on = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
        on = false;
#endif
#endif
        g_state = on ? 1 : 2;
    }
    return g_state == 1;
}

static cbucket *find(size_t size, bool create) {
    size_t h = (size / 64) * 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < RM_CACHE_SIZES; i++) {
        cbucket *b = &g_buckets[(h + i) % RM_CACHE_SIZES];
        if (b->size == size) return b;
        if (b->size == 0) {
            if (!create) return NULL;
            b->size = size;
            return b;
        }
    }
    return NULL;
}

void *rm_cpu_cache_take(size_t size) {
    if (size < (size_t)RM_CPU_CACHE_MIN) return NULL;
    pthread_mutex_lock(&g_lock);
    cblock *c = NULL;
    cbucket *b = enabled_locked() ? find(size, false) : NULL;
    if (b && b->head) {
        c = b->head;
        b->head = c->next;
        g_cached -= size;
    }
    pthread_mutex_unlock(&g_lock);
    return c;
}

bool rm_cpu_cache_put(void *p, size_t size, size_t in_use, size_t peak) {
    if (size < (size_t)RM_CPU_CACHE_MIN || !p) return false;
    pthread_mutex_lock(&g_lock);
    bool kept = false;
    if (enabled_locked() && in_use + g_cached + size <= peak) {
        cbucket *b = find(size, true);
        if (b) {
            cblock *c = p;
            c->next = b->head;
            b->head = c;
            g_cached += size;
            kept = true;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return kept;
}

/* Frees every cached buffer; buckets stay (sizes are few). g_lock held. */
static void empty_locked(void) {
    for (int i = 0; i < RM_CACHE_SIZES; i++) {
        cblock *c = g_buckets[i].head;
        while (c) {
            cblock *next = c->next;
            free(c);
            c = next;
        }
        g_buckets[i].head = NULL;
    }
    g_cached = 0;
}

void remat_cpu_cache_empty(void) {
    pthread_mutex_lock(&g_lock);
    empty_locked();
    pthread_mutex_unlock(&g_lock);
}

void remat_cpu_cache_enable(bool on) {
    pthread_mutex_lock(&g_lock);
    enabled_locked(); /* the environment is read once; this call then wins */
    g_state = on ? 1 : 2;
    if (!on) empty_locked();
    pthread_mutex_unlock(&g_lock);
}

bool remat_cpu_cache_enabled(void) {
    pthread_mutex_lock(&g_lock);
    bool on = enabled_locked();
    pthread_mutex_unlock(&g_lock);
    return on;
}

size_t remat_cpu_cache_bytes(void) {
    pthread_mutex_lock(&g_lock);
    size_t n = g_cached;
    pthread_mutex_unlock(&g_lock);
    return n;
}
