/* src/backends/cuda/pool.c — the caching allocator's bookkeeping (pool.h
 * says what it does). Free blocks sit in two arrays (small, large) sorted
 * by (stream, size, address), so the best fit is a binary search; blocks
 * handed out sit in an array sorted by address, for the free. A block knows
 * its neighbours in its segment (prev / next), which is how frees coalesce
 * and how a wholly free segment is recognised (no neighbours). */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct blk {
    char *ptr;
    size_t size;             /* rounded */
    size_t requested;        /* what was asked for, while handed out */
    void *stream;            /* the stream it was allocated for (its segment's) */
    bool small;              /* which pool */
    bool allocated;          /* handed out, or waiting for events */
    struct blk *prev, *next; /* neighbours in the segment */
    int n_streams;           /* other streams recorded on it */
    void *streams[RM_POOL_MAX_STREAMS];
    int pending; /* events still to complete before it is free */
} blk;

typedef struct vec {
    blk **v;
    size_t n, cap;
} vec;

typedef struct pend {
    void *event;
    blk *b;
} pend;

struct rm_pool {
    pthread_mutex_t lock;
    rm_pool_provider p;
    vec free_small, free_large; /* sorted by (stream, size, ptr) */
    vec live;                   /* handed out, sorted by ptr */
    pend *pending;
    size_t n_pending, cap_pending;
    rm_pool_stats st;
};

/* ---- sorted vectors ------------------------------------------------------------------------ */
static int cmp_free(const blk *a, const blk *b) {
    if (a->stream != b->stream) return (uintptr_t)a->stream < (uintptr_t)b->stream ? -1 : 1;
    if (a->size != b->size) return a->size < b->size ? -1 : 1;
    if (a->ptr != b->ptr) return (uintptr_t)a->ptr < (uintptr_t)b->ptr ? -1 : 1;
    return 0;
}
static int cmp_live(const blk *a, const blk *b) {
    return a->ptr == b->ptr ? 0 : ((uintptr_t)a->ptr < (uintptr_t)b->ptr ? -1 : 1);
}
/* First index whose entry is not below key. */
static size_t lower_bound(const vec *v, const blk *key, int (*cmp)(const blk *, const blk *)) {
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp(v->v[mid], key) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
static bool vec_insert(vec *v, blk *b, int (*cmp)(const blk *, const blk *)) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        blk **nv = realloc(v->v, cap * sizeof *nv);
        if (!nv) return false;
        v->v = nv;
        v->cap = cap;
    }
    size_t i = lower_bound(v, b, cmp);
    memmove(v->v + i + 1, v->v + i, (v->n - i) * sizeof *v->v);
    v->v[i] = b;
    v->n++;
    return true;
}
static void vec_remove(vec *v, const blk *b, int (*cmp)(const blk *, const blk *)) {
    size_t i = lower_bound(v, b, cmp);
    if (i < v->n && v->v[i] == b) {
        memmove(v->v + i, v->v + i + 1, (v->n - i - 1) * sizeof *v->v);
        v->n--;
    }
}
static blk *live_find(const rm_pool *pool, const void *ptr) {
    blk key = {.ptr = (char *)ptr};
    size_t i = lower_bound(&pool->live, &key, cmp_live);
    return i < pool->live.n && pool->live.v[i]->ptr == ptr ? pool->live.v[i] : NULL;
}
static vec *free_set(rm_pool *pool, const blk *b) {
    return b->small ? &pool->free_small : &pool->free_large;
}

/* ---- sizes ------------------------------------------------------------------------------- */
size_t rm_pool_round(size_t nbytes) {
    if (nbytes < RM_POOL_MIN_BLOCK) return RM_POOL_MIN_BLOCK;
    if (nbytes > SIZE_MAX - RM_POOL_ROUND_LARGE) return SIZE_MAX; /* cannot be had */
    return (nbytes + RM_POOL_MIN_BLOCK - 1) / RM_POOL_MIN_BLOCK * RM_POOL_MIN_BLOCK;
}
size_t rm_pool_segment_size(size_t rounded) {
    if (rounded <= RM_POOL_SMALL_SIZE) return RM_POOL_SMALL_SEGMENT;
    if (rounded < RM_POOL_MIN_LARGE_ALLOC) return RM_POOL_LARGE_SEGMENT;
    if (rounded > SIZE_MAX - RM_POOL_ROUND_LARGE) return SIZE_MAX;
    return (rounded + RM_POOL_ROUND_LARGE - 1) / RM_POOL_ROUND_LARGE * RM_POOL_ROUND_LARGE;
}
/* Whether the rest of b after `size` bytes is worth a block of its own. */
static bool should_split(const blk *b, size_t size) {
    size_t rest = b->size - size;
    return b->small ? rest >= RM_POOL_MIN_BLOCK : rest > RM_POOL_SMALL_SIZE;
}

/* ---- pool ---------------------------------------------------------------------------------- */
rm_pool *rm_pool_new(const rm_pool_provider *provider) {
    rm_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pthread_mutex_init(&pool->lock, NULL);
    pool->p = *provider;
    return pool;
}

/* Makes b free: merges it with free neighbours and files it. Lock held.
 * false: no host memory to file it (it stays out of the free sets, still
 * part of its segment: only leaked until the pool is destroyed). */
static bool free_block(rm_pool *pool, blk *b) {
    b->allocated = false;
    b->n_streams = 0;
    vec *fs = free_set(pool, b);
    blk *pr = b->prev, *nx = b->next;
    if (pr && !pr->allocated) {
        vec_remove(fs, pr, cmp_free);
        pr->size += b->size;
        pr->next = nx;
        if (nx) nx->prev = pr;
        free(b);
        b = pr;
    }
    nx = b->next;
    if (nx && !nx->allocated) {
        vec_remove(fs, nx, cmp_free);
        b->size += nx->size;
        b->next = nx->next;
        if (nx->next) nx->next->prev = b;
        free(nx);
    }
    return vec_insert(fs, b, cmp_free);
}

/* Frees the blocks whose events have all completed (all of them when
 * `all`: the caller has synchronised). Lock held. */
static void process_events(rm_pool *pool, bool all) {
    size_t k = 0;
    for (size_t i = 0; i < pool->n_pending; i++) {
        pend e = pool->pending[i];
        if (all || pool->p.event_done(pool->p.user_data, e.event)) {
            pool->p.event_free(pool->p.user_data, e.event);
            if (--e.b->pending == 0) {
                free_block(pool, e.b);
                pool->st.n_pending--;
            }
        } else {
            pool->pending[k++] = e;
        }
    }
    pool->n_pending = k;
}

/* Returns every wholly free segment of set v to the provider. Lock held. */
static void release_free_segments(rm_pool *pool, vec *v) {
    size_t k = 0;
    for (size_t i = 0; i < v->n; i++) {
        blk *b = v->v[i];
        if (b->prev || b->next) {
            v->v[k++] = b;
            continue;
        }
        pool->p.seg_free(pool->p.user_data, b->ptr, b->size);
        pool->st.reserved_bytes -= b->size;
        pool->st.n_segments--;
        pool->st.n_seg_frees++;
        free(b);
    }
    v->n = k;
}

static void empty_cache_locked(rm_pool *pool) {
    if (pool->p.sync) pool->p.sync(pool->p.user_data);
    process_events(pool, true);
    release_free_segments(pool, &pool->free_small);
    release_free_segments(pool, &pool->free_large);
}

void rm_pool_empty_cache(rm_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    empty_cache_locked(pool);
    pthread_mutex_unlock(&pool->lock);
}

void rm_pool_destroy(rm_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    empty_cache_locked(pool);
    /* what is still handed out: return its segments too */
    for (size_t i = 0; i < pool->live.n; i++) {
        blk *b = pool->live.v[i];
        if (!b) continue;
        while (b->prev) b = b->prev; /* the segment's first block */
        size_t seg = 0;
        char *base = b->ptr;
        for (blk *c = b; c;) {
            blk *nx = c->next;
            seg += c->size;
            /* blocks of this segment in the live set are cleared so the
             * segment is returned once */
            for (size_t j = 0; j < pool->live.n; j++)
                if (pool->live.v[j] == c) pool->live.v[j] = NULL;
            if (!c->allocated) vec_remove(free_set(pool, c), c, cmp_free);
            free(c);
            c = nx;
        }
        pool->p.seg_free(pool->p.user_data, base, seg);
    }
    free(pool->free_small.v);
    free(pool->free_large.v);
    free(pool->live.v);
    free(pool->pending);
    pthread_mutex_unlock(&pool->lock);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

/* A segment of seg bytes as one free-standing block, or NULL. Lock held. */
static blk *new_segment(rm_pool *pool, size_t seg, bool small, void *stream) {
    blk *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->ptr = seg == SIZE_MAX ? NULL : pool->p.seg_alloc(pool->p.user_data, seg);
    if (!b->ptr && seg != SIZE_MAX) {
        /* what the cache holds may make room: return it all and retry */
        pool->st.n_retries++;
        empty_cache_locked(pool);
        b->ptr = pool->p.seg_alloc(pool->p.user_data, seg);
    }
    if (!b->ptr) {
        free(b);
        return NULL;
    }
    b->size = seg;
    b->small = small;
    b->stream = stream;
    pool->st.reserved_bytes += seg;
    if (pool->st.reserved_bytes > pool->st.peak_reserved_bytes)
        pool->st.peak_reserved_bytes = pool->st.reserved_bytes;
    pool->st.n_segments++;
    pool->st.n_seg_allocs++;
    return b;
}

void *rm_pool_alloc(rm_pool *pool, size_t nbytes, void *stream) {
    size_t size = rm_pool_round(nbytes);
    bool small = size <= RM_POOL_SMALL_SIZE;
    pthread_mutex_lock(&pool->lock);
    if (pool->n_pending) process_events(pool, false);
    vec *fs = small ? &pool->free_small : &pool->free_large;
    blk key = {.stream = stream, .size = size, .ptr = NULL};
    size_t i = lower_bound(fs, &key, cmp_free);
    blk *b = NULL;
    if (i < fs->n && fs->v[i]->stream == stream) {
        b = fs->v[i];
        memmove(fs->v + i, fs->v + i + 1, (fs->n - i - 1) * sizeof *fs->v);
        fs->n--;
    } else {
        b = new_segment(pool, rm_pool_segment_size(size), small, stream);
    }
    if (!b) goto fail;
    if (should_split(b, size)) {
        blk *rest = calloc(1, sizeof *rest);
        if (rest) {
            *rest = (blk){.ptr = b->ptr + size,
                          .size = b->size - size,
                          .stream = stream,
                          .small = b->small,
                          .prev = b,
                          .next = b->next};
            if (b->next) b->next->prev = rest;
            b->next = rest;
            b->size = size;
            if (!vec_insert(fs, rest, cmp_free)) { /* undo the split */
                b->next = rest->next;
                if (rest->next) rest->next->prev = b;
                b->size += rest->size;
                free(rest);
            }
        } /* no host memory for the split: hand out the whole block */
    }
    if (!vec_insert(&pool->live, b, cmp_live)) {
        vec_insert(fs, b, cmp_free); /* a sorted insert that had room before */
        goto fail;
    }
    b->allocated = true;
    b->requested = nbytes;
    pool->st.allocated_bytes += b->size;
    if (pool->st.allocated_bytes > pool->st.peak_allocated_bytes)
        pool->st.peak_allocated_bytes = pool->st.allocated_bytes;
    pool->st.requested_bytes += nbytes;
    pool->st.n_allocs++;
    pthread_mutex_unlock(&pool->lock);
    return b->ptr;
fail:
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

bool rm_pool_free(rm_pool *pool, void *ptr) {
    pthread_mutex_lock(&pool->lock);
    blk *b = live_find(pool, ptr);
    if (!b) {
        pthread_mutex_unlock(&pool->lock);
        return false;
    }
    vec_remove(&pool->live, b, cmp_live);
    pool->st.allocated_bytes -= b->size;
    pool->st.requested_bytes -= b->requested;
    pool->st.n_frees++;
    b->requested = 0;
    /* used on other streams: free once an event on each has completed */
    for (int s = 0; s < b->n_streams; s++) {
        void *ev = pool->p.event_record(pool->p.user_data, b->streams[s]);
        if (!ev) { /* cannot tell when that work ends: wait for all of it */
            if (pool->p.sync) pool->p.sync(pool->p.user_data);
            continue;
        }
        if (pool->n_pending == pool->cap_pending) {
            size_t cap = pool->cap_pending ? pool->cap_pending * 2 : 16;
            pend *np = realloc(pool->pending, cap * sizeof *np);
            if (!np) {
                pool->p.event_free(pool->p.user_data, ev);
                if (pool->p.sync) pool->p.sync(pool->p.user_data);
                continue;
            }
            pool->pending = np;
            pool->cap_pending = cap;
        }
        pool->pending[pool->n_pending++] = (pend){ev, b};
        b->pending++;
    }
    if (b->pending) pool->st.n_pending++;
    else free_block(pool, b);
    pthread_mutex_unlock(&pool->lock);
    return true;
}

bool rm_pool_record_stream(rm_pool *pool, void *ptr, void *stream) {
    pthread_mutex_lock(&pool->lock);
    blk *b = live_find(pool, ptr);
    bool ok = b != NULL;
    if (ok && stream != b->stream) {
        bool seen = false;
        for (int s = 0; s < b->n_streams; s++) seen |= b->streams[s] == stream;
        if (!seen) {
            ok = b->n_streams < RM_POOL_MAX_STREAMS && pool->p.event_record;
            if (ok) b->streams[b->n_streams++] = stream;
        }
    }
    pthread_mutex_unlock(&pool->lock);
    return ok;
}

size_t rm_pool_block_size(rm_pool *pool, const void *ptr) {
    pthread_mutex_lock(&pool->lock);
    blk *b = live_find(pool, ptr);
    size_t n = b ? b->size : 0;
    pthread_mutex_unlock(&pool->lock);
    return n;
}

void rm_pool_stats_get(rm_pool *pool, rm_pool_stats *out) {
    pthread_mutex_lock(&pool->lock);
    *out = pool->st;
    pthread_mutex_unlock(&pool->lock);
}

void rm_pool_reset_peak(rm_pool *pool) {
    pthread_mutex_lock(&pool->lock);
    pool->st.peak_allocated_bytes = pool->st.allocated_bytes;
    pool->st.peak_reserved_bytes = pool->st.reserved_bytes;
    pthread_mutex_unlock(&pool->lock);
}
