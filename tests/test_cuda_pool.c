/* tests/test_cuda_pool.c — the cuda caching allocator's bookkeeping
 * (src/backends/cuda/pool.c) on the CPU: the pool runs over a segment
 * provider made of malloc / free and fake events, so its rounding, size
 * classes, splitting, coalescing, stream-ordered reuse, cross-stream
 * events, empty_cache, out-of-memory retry and counters are checked without
 * a GPU (the cuda backend runs the same code over cudaMalloc). */
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/pool.h"
#include "support/rt.h"

#define MiB ((size_t)1 << 20)

/* ---- a provider over malloc, with a budget and fake events --------------------------------- */
typedef struct fake {
    size_t budget; /* bytes seg_alloc may hand out in all (0: unlimited) */
    size_t held;   /* bytes handed out now */
    int n_alloc, n_free, n_sync;
    int events_made, events_freed;
    bool events_done; /* what event_done answers */
} fake;

typedef struct fake_event {
    void *stream;
} fake_event;

static void *f_alloc(void *ud, size_t size) {
    fake *f = ud;
    if (f->budget && f->held + size > f->budget) return NULL;
    void *p = aligned_alloc(512, size);
    if (!p) return NULL;
    f->held += size;
    f->n_alloc++;
    return p;
}
static void f_free(void *ud, void *ptr, size_t size) {
    fake *f = ud;
    f->held -= size;
    f->n_free++;
    free(ptr);
}
static void f_sync(void *ud) { ((fake *)ud)->n_sync++; }
static void *f_record(void *ud, void *stream) {
    fake *f = ud;
    fake_event *e = malloc(sizeof *e);
    cr_assert(e);
    e->stream = stream;
    f->events_made++;
    return e;
}
static bool f_done(void *ud, void *ev) {
    (void)ev;
    return ((fake *)ud)->events_done;
}
static void f_evfree(void *ud, void *ev) {
    ((fake *)ud)->events_freed++;
    free(ev);
}

static rm_pool *new_pool(fake *f) {
    rm_pool_provider p = {f, f_alloc, f_free, f_sync, f_record, f_done, f_evfree};
    rm_pool *pool = rm_pool_new(&p);
    cr_assert(pool);
    return pool;
}
static rm_pool_stats stats(rm_pool *pool) {
    rm_pool_stats s;
    rm_pool_stats_get(pool, &s);
    return s;
}
static void *const S1 = (void *)0x1, *const S2 = (void *)0x2;

Test(cuda_pool, rounding_and_segment_sizes) {
    cr_assert_eq(rm_pool_round(0), 512);
    cr_assert_eq(rm_pool_round(1), 512);
    cr_assert_eq(rm_pool_round(512), 512);
    cr_assert_eq(rm_pool_round(513), 1024);
    cr_assert_eq(rm_pool_segment_size(512), 2 * MiB);
    cr_assert_eq(rm_pool_segment_size(MiB), 2 * MiB);
    cr_assert_eq(rm_pool_segment_size(MiB + 512), 20 * MiB);
    cr_assert_eq(rm_pool_segment_size(10 * MiB - 512), 20 * MiB);
    cr_assert_eq(rm_pool_segment_size(10 * MiB), 10 * MiB);
    cr_assert_eq(rm_pool_segment_size(11 * MiB + 1), 12 * MiB);
    cr_assert_eq(rm_pool_round(SIZE_MAX - 3), SIZE_MAX);
}

Test(cuda_pool, small_blocks_share_a_segment_and_split) {
    fake f = {0};
    rm_pool *pool = new_pool(&f);
    char *a = rm_pool_alloc(pool, 100, S1);
    char *b = rm_pool_alloc(pool, 1000, S1);
    cr_assert(a && b);
    cr_assert_eq(f.n_alloc, 1, "one 2 MiB segment serves both");
    cr_assert_eq(b - a, 512, "b is carved right after a's 512-byte block");
    cr_assert_eq(rm_pool_block_size(pool, a), 512);
    cr_assert_eq(rm_pool_block_size(pool, b), 1024);
    rm_pool_stats s = stats(pool);
    cr_assert_eq(s.allocated_bytes, 1536);
    cr_assert_eq(s.requested_bytes, 1100);
    cr_assert_eq(s.reserved_bytes, 2 * MiB);
    cr_assert_eq(s.n_segments, 1);
    rm_pool_destroy(pool);
    cr_assert_eq(f.held, 0);
}

Test(cuda_pool, free_coalesces_and_same_stream_reuses_at_once) {
    fake f = {0};
    rm_pool *pool = new_pool(&f);
    char *a = rm_pool_alloc(pool, 512, S1);
    char *b = rm_pool_alloc(pool, 512, S1);
    char *c = rm_pool_alloc(pool, 512, S1);
    cr_assert(rm_pool_free(pool, a));
    cr_assert(rm_pool_free(pool, b));
    /* a and b merged: a 1024-byte request fits where a was, no new segment */
    char *d = rm_pool_alloc(pool, 1024, S1);
    cr_assert_eq(d, a);
    cr_assert_eq(f.n_alloc, 1);
    cr_assert_eq(f.n_sync, 0, "same-stream reuse never waits");
    cr_assert(rm_pool_free(pool, c));
    cr_assert(rm_pool_free(pool, d));
    /* the whole segment is one free block again: empty_cache returns it */
    rm_pool_empty_cache(pool);
    cr_assert_eq(f.n_free, 1);
    cr_assert_eq(f.held, 0);
    rm_pool_stats s = stats(pool);
    cr_assert_eq(s.reserved_bytes, 0);
    cr_assert_eq(s.allocated_bytes, 0);
    cr_assert_eq(s.peak_reserved_bytes, 2 * MiB);
    cr_assert_eq(s.peak_allocated_bytes, 1536);
    cr_assert_not(rm_pool_free(pool, d), "a block given back twice is refused");
    rm_pool_destroy(pool);
}

Test(cuda_pool, streams_do_not_share_free_blocks) {
    fake f = {0};
    rm_pool *pool = new_pool(&f);
    void *a = rm_pool_alloc(pool, 4096, S1);
    cr_assert(rm_pool_free(pool, a));
    void *b = rm_pool_alloc(pool, 4096, S2);
    cr_assert_neq(a, b);
    cr_assert_eq(f.n_alloc, 2, "stream 2 gets a segment of its own");
    void *c = rm_pool_alloc(pool, 4096, S1);
    cr_assert_eq(c, a, "stream 1 reuses its freed block");
    rm_pool_destroy(pool);
    cr_assert_eq(f.held, 0);
}

Test(cuda_pool, large_requests) {
    fake f = {0};
    rm_pool *pool = new_pool(&f);
    /* 3 MiB: from a 20 MiB segment, split (rest > 1 MiB) */
    char *a = rm_pool_alloc(pool, 3 * MiB, S1);
    char *b = rm_pool_alloc(pool, 5 * MiB, S1);
    cr_assert_eq(f.n_alloc, 1);
    cr_assert_eq(b - a, (ptrdiff_t)(3 * MiB));
    /* 16 MiB: its own segment, rounded to 2 MiB */
    void *c = rm_pool_alloc(pool, 15 * MiB + 1, S1);
    cr_assert_eq(f.n_alloc, 2);
    cr_assert_eq(stats(pool).reserved_bytes, 36 * MiB);
    /* a 1 MiB request is small: the small pool, not the large segment's rest */
    void *d = rm_pool_alloc(pool, MiB, S1);
    cr_assert_eq(f.n_alloc, 3);
    cr_assert_eq(rm_pool_block_size(pool, d), MiB);
    /* a large block whose rest would be <= 1 MiB is handed out whole */
    cr_assert(rm_pool_free(pool, c));
    void *e = rm_pool_alloc(pool, 15 * MiB, S1);
    cr_assert_eq(e, c);
    cr_assert_eq(rm_pool_block_size(pool, e), 16 * MiB);
    rm_pool_destroy(pool);
    cr_assert_eq(f.held, 0);
}

Test(cuda_pool, out_of_memory_empties_the_cache_and_retries) {
    fake f = {.budget = 24 * MiB};
    rm_pool *pool = new_pool(&f);
    void *a = rm_pool_alloc(pool, 100, S1);     /* 2 MiB small segment */
    void *b = rm_pool_alloc(pool, 3 * MiB, S1); /* 20 MiB large segment */
    cr_assert(a && b);
    cr_assert(rm_pool_free(pool, b)); /* cached, not returned */
    /* 12 MiB comes out of the cached 20 MiB segment */
    void *c = rm_pool_alloc(pool, 12 * MiB, S1);
    cr_assert_eq(c, b);
    cr_assert_eq(stats(pool).n_retries, 0);
    cr_assert(rm_pool_free(pool, c));
    /* 21 MiB (a 22 MiB segment) does not fit beside the cached 20 MiB: the
     * cache is emptied first, then it does */
    void *d = rm_pool_alloc(pool, 21 * MiB, S1);
    cr_assert(d);
    rm_pool_stats s = stats(pool);
    cr_assert_eq(s.n_retries, 1);
    cr_assert_eq(s.reserved_bytes, 24 * MiB);
    cr_assert_geq(f.n_sync, 1, "segments go back only after a sync");
    /* beyond the budget even then: NULL, nothing leaked; a 22 MiB segment
     * whose last 1 MiB is not worth a block is handed out whole */
    cr_assert_null(rm_pool_alloc(pool, 20 * MiB, S1));
    cr_assert_eq(stats(pool).n_retries, 2);
    cr_assert_eq(stats(pool).allocated_bytes, 512 + 22 * MiB);
    rm_pool_destroy(pool);
    cr_assert_eq(f.held, 0);
}

Test(cuda_pool, cross_stream_use_waits_for_events) {
    fake f = {0};
    rm_pool *pool = new_pool(&f);
    void *a = rm_pool_alloc(pool, 4096, S1);
    cr_assert(rm_pool_record_stream(pool, a, S2));
    cr_assert(rm_pool_record_stream(pool, a, S2), "recording twice is one use");
    cr_assert(rm_pool_record_stream(pool, a, S1), "its own stream needs no event");
    cr_assert(rm_pool_free(pool, a));
    cr_assert_eq(f.events_made, 1);
    cr_assert_eq(stats(pool).n_pending, 1);
    /* while stream 2's work may still run, the block is not handed out */
    void *b = rm_pool_alloc(pool, 4096, S1);
    cr_assert_neq(b, a);
    f.events_done = true;
    void *c = rm_pool_alloc(pool, 4096, S1);
    cr_assert_eq(c, a, "reused once the event completed");
    cr_assert_eq(f.events_freed, 1);
    cr_assert_eq(stats(pool).n_pending, 0);
    cr_assert_not(rm_pool_record_stream(pool, (char *)c + 512, S2), "not a block");
    rm_pool_destroy(pool);
    cr_assert_eq(f.held, 0);
}

Test(cuda_pool, empty_cache_keeps_blocks_in_use_and_waits_for_pending) {
    fake f = {0};
    rm_pool *pool = new_pool(&f);
    void *a = rm_pool_alloc(pool, 4096, S1);    /* segment 1, stays in use */
    void *b = rm_pool_alloc(pool, 2 * MiB, S1); /* segment 2 (20 MiB) */
    cr_assert(rm_pool_record_stream(pool, b, S2));
    cr_assert(rm_pool_free(pool, b));
    rm_pool_empty_cache(pool); /* syncs: b's event is then done */
    rm_pool_stats s = stats(pool);
    cr_assert_eq(s.n_segments, 1);
    cr_assert_eq(s.reserved_bytes, 2 * MiB);
    cr_assert_eq(s.n_pending, 0);
    cr_assert_eq(f.events_freed, 1);
    rm_pool_reset_peak(pool);
    cr_assert_eq(stats(pool).peak_reserved_bytes, 2 * MiB);
    cr_assert_eq(stats(pool).peak_allocated_bytes, 4096);
    (void)a;
    rm_pool_destroy(pool); /* returns the segment still in use too */
    cr_assert_eq(f.held, 0);
    rm_pool_destroy(NULL);
}

Test(cuda_pool, many_blocks_fill_and_drain) {
    /* a random mix of sizes, freed in a shuffled order: every segment comes
     * back whole (coalescing undid every split) */
    fake f = {0};
    rm_pool *pool = new_pool(&f);
    enum { N = 400 };
    void *p[N];
    unsigned x = 12345;
    size_t want = 0;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        size_t n = (x >> 8) % (i % 7 == 0 ? 6 * MiB : 200000);
        p[i] = rm_pool_alloc(pool, n, S1);
        cr_assert(p[i]);
        memset(p[i], 0xab, n ? 1 : 0);
        want += rm_pool_round(n);
    }
    /* a block may be larger than its rounded request (an unsplit large block) */
    size_t held = 0;
    for (int i = 0; i < N; i++) held += rm_pool_block_size(pool, p[i]);
    cr_assert_eq(stats(pool).allocated_bytes, held);
    cr_assert_geq(held, want);
    for (int i = N - 1; i > 0; i--) {
        x = x * 1103515245u + 12345u;
        int j = (int)((x >> 8) % (unsigned)(i + 1));
        void *t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    for (int i = 0; i < N; i++) cr_assert(rm_pool_free(pool, p[i]));
    rm_pool_stats s = stats(pool);
    cr_assert_eq(s.allocated_bytes, 0);
    cr_assert_eq(s.requested_bytes, 0);
    rm_pool_empty_cache(pool);
    cr_assert_eq(stats(pool).n_segments, 0);
    cr_assert_eq(f.held, 0);
    cr_assert_eq(f.n_alloc, f.n_free);
    rm_pool_destroy(pool);
}
