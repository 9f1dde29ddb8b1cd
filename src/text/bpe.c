/* src/text/bpe.c — the BPE model on one pre-tokenized piece, as
 * `tokenizers` runs it (BPE::tokenize_with_cache, merge_word,
 * Word::merge_all): with ignore_merges a piece that is a token is that
 * token; otherwise the piece starts as one symbol per character (per byte
 * under ByteLevel), and the pair of adjacent symbols with the lowest merge
 * rank (the leftmost of equal ones) merges until no pair can. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tok.h"

#define CACHE_MAX_WORD 256
#define CACHE_MAX_ENTRIES 65536 /* words; about 8 MiB at most */

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

/* grow for a buffer that may start inside the call's context (inl) */
static bool grow_from(void **p, size_t *cap, size_t need, size_t elem, void *inl) {
    if (need <= *cap) return true;
    if (*p != inl) return grow(p, cap, need, elem);
    size_t nc = *cap * 2;
    while (nc < need) nc *= 2;
    void *q = malloc(nc * elem);
    if (!q) return false;
    memcpy(q, *p, *cap * elem);
    *p = q;
    *cap = nc;
    return true;
}

bool tok_ids_grow(tok_ids *b, size_t need) {
    if (!grow((void **)&b->v, &b->cap, need, sizeof *b->v)) {
        b->oom = true;
        return false;
    }
    return true;
}

/* Symbols of the general path (merge_word): each character of the
 * model-side word w[0..n), with the continuing-subword prefix and the
 * end-of-word suffix, looked up in the vocabulary; an unknown one becomes
 * its byte-fallback tokens, the unknown token (fused with its neighbours
 * when fuse_unk) or nothing. */
static remat_status word_symbols(tok_ctx *c, const char *w, size_t n, size_t *m_out) {
    const remat_tokenizer *t = c->t;
    size_t m = 0;
    uint32_t unk = TOK_NONE;
    char *key = NULL;
    size_t key_cap = 0;
    remat_status st = REMAT_OK;
    for (size_t i = 0; i < n;) {
        size_t k = rm_utf8_char((const unsigned char *)w + i, n - i);
        if (!k) k = 1;
        bool first = i == 0, last = i + k == n;
        size_t kl = k + (first ? 0 : t->prefix_len) + (last ? t->suffix_len : 0);
        if (!grow((void **)&key, &key_cap, kl + 1, 1)) goto oom;
        size_t kn = 0;
        if (!first && t->prefix) memcpy(key, t->prefix, t->prefix_len), kn = t->prefix_len;
        memcpy(key + kn, w + i, k);
        kn += k;
        if (last && t->suffix) memcpy(key + kn, t->suffix, t->suffix_len), kn += t->suffix_len;
        i += k;
        if (!grow_from((void **)&c->syms, &c->syms_cap, m + kn + 2, sizeof *c->syms,
                       c->syms_inline))
            goto oom;
        uint32_t id = tok_strmap_get(&t->vocab, key, kn);
        if (id != TOK_NONE) {
            if (unk != TOK_NONE) c->syms[m++].id = unk, unk = TOK_NONE;
            c->syms[m++].id = id;
            continue;
        }
        if (t->byte_fallback) {
            size_t m0 = m;
            bool all = true;
            for (size_t j = 0; j < kn && all; j++) {
                char code[8];
                static const char hex[] = "0123456789ABCDEF";
                unsigned char b = (unsigned char)key[j];
                code[0] = '<', code[1] = '0', code[2] = 'x', code[3] = hex[b >> 4];
                code[4] = hex[b & 15], code[5] = '>';
                uint32_t bid = tok_strmap_get(&t->vocab, code, 6);
                if (bid == TOK_NONE) all = false;
                else c->syms[m++].id = bid;
            }
            if (all) continue;
            m = m0;
        }
        if (t->unk_token) {
            uint32_t uid = tok_strmap_get(&t->vocab, t->unk_token, strlen(t->unk_token));
            if (uid == TOK_NONE) {
                st = rm_err(REMAT_EFORMAT, "%s: the unk_token '%s' is not in model.vocab", t->name,
                            t->unk_token);
                goto out;
            }
            if (unk != TOK_NONE && !t->fuse_unk) c->syms[m++].id = unk;
            unk = uid;
        }
    }
    if (unk != TOK_NONE) c->syms[m++].id = unk;
    *m_out = m;
    goto out;
oom:
    st = rm_err(REMAT_ENOMEM, "out of memory");
out:
    free(key);
    return st;
}

/* A min-heap of candidate merges by (rank, position). */
static inline bool heap_less(const struct tok_heap_ent *a, const struct tok_heap_ent *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}
static void heap_push(struct tok_heap_ent *h, size_t *n, struct tok_heap_ent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}
static struct tok_heap_ent heap_pop(struct tok_heap_ent *h, size_t *n) {
    struct tok_heap_ent top = h[0], e = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct tok_heap_ent *best = &e;
        if (l < *n && heap_less(&h[l], best)) m = l, best = &h[l];
        if (r < *n && heap_less(&h[r], best)) m = r;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    h[i] = e;
    return top;
}

/* Word::merge_all for long words: the heap of candidate pairs, stale
 * entries skipped. */
static size_t merge_heap(tok_ctx *c, size_t m) {
    const tok_mergemap *mm = &c->t->merges;
    struct tok_sym *s = c->syms;
    size_t hn = 0;
    struct tok_heap_ent *h = c->heap;
    for (size_t i = 0; i < m; i++) {
        s[i].prev = (int32_t)i - 1;
        s[i].next = i + 1 < m ? (int32_t)i + 1 : -1;
        s[i].len = 1;
    }
    for (size_t i = 0; i + 1 < m; i++) {
        uint32_t r, id;
        if (tok_merge_get(mm, s[i].id, s[i + 1].id, &r, &id))
            heap_push(h, &hn, (struct tok_heap_ent){r, (uint32_t)i, id});
    }
    while (hn) {
        struct tok_heap_ent top = heap_pop(h, &hn);
        struct tok_sym *a = &s[top.pos];
        if (!a->len || a->next < 0) continue;
        struct tok_sym *b = &s[a->next];
        uint32_t r, id;
        if (!tok_merge_get(mm, a->id, b->id, &r, &id) || id != top.id) continue;
        a->id = top.id;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) s[b->next].prev = (int32_t)top.pos;
        if (a->prev >= 0 && tok_merge_get(mm, s[a->prev].id, a->id, &r, &id))
            heap_push(h, &hn, (struct tok_heap_ent){r, (uint32_t)a->prev, id});
        if (a->next >= 0 && tok_merge_get(mm, a->id, s[a->next].id, &r, &id))
            heap_push(h, &hn, (struct tok_heap_ent){r, top.pos, id});
    }
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        if (s[i].len) s[k++].id = s[i].id;
    return k;
}

/* The same for short words: scan the pairs' ranks, merge the lowest. */
static size_t merge_scan(tok_ctx *c, size_t m) {
    const tok_mergemap *mm = &c->t->merges;
    struct tok_sym *s = c->syms;
    uint32_t rank[64], nid[64];
    for (size_t i = 0; i + 1 < m; i++)
        if (!tok_merge_get(mm, s[i].id, s[i + 1].id, &rank[i], &nid[i])) rank[i] = TOK_NONE;
    while (m > 1) {
        uint32_t best = TOK_NONE;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] < best) best = rank[i], bi = i;
        if (best == TOK_NONE) break;
        s[bi].id = nid[bi];
        for (size_t i = bi + 1; i + 1 < m; i++) {
            s[i].id = s[i + 1].id;
            rank[i] = rank[i + 1];
            nid[i] = nid[i + 1];
        }
        m--;
        if (bi > 0 && !tok_merge_get(mm, s[bi - 1].id, s[bi].id, &rank[bi - 1], &nid[bi - 1]))
            rank[bi - 1] = TOK_NONE;
        if (bi + 1 < m && !tok_merge_get(mm, s[bi].id, s[bi + 1].id, &rank[bi], &nid[bi]))
            rank[bi] = TOK_NONE;
    }
    return m;
}

/* The cached ids of piece s, appended to the output: 1 found, 0 not, -1 out of memory. */
static int cache_lookup(tok_ctx *c, remat_tokenizer *mt, const char *s, size_t n) {
    if (pthread_rwlock_rdlock(&mt->cache_lock) != 0) return 0;
    int found = 0;
    uint32_t at = mt->cache.n ? tok_strmap_get(&mt->cache, s, n) : TOK_NONE;
    if (at != TOK_NONE) {
        uint32_t k = mt->cache_ids.v[at];
        found = -1;
        if (c->out.n + k <= c->out.cap || tok_ids_grow(&c->out, c->out.n + k)) {
            memcpy(c->out.v + c->out.n, mt->cache_ids.v + at + 1, k * sizeof(uint32_t));
            c->out.n += k;
            found = 1;
        }
    }
    pthread_rwlock_unlock(&mt->cache_lock);
    return found;
}

/* Into the cache while it has room, unless another thread is writing it. */
static void cache_insert(tok_ctx *c, remat_tokenizer *mt, const char *s, size_t n, size_t m) {
    if (atomic_load_explicit(&mt->cache_full, memory_order_relaxed) ||
        pthread_rwlock_trywrlock(&mt->cache_lock) != 0)
        return;
    bool room =
        mt->cache.n < CACHE_MAX_ENTRIES && tok_ids_grow(&mt->cache_ids, mt->cache_ids.n + m + 1);
    if (!room) mt->cache_full = true;
    if (room && tok_strmap_get(&mt->cache, s, n) == TOK_NONE) {
        uint32_t at = (uint32_t)mt->cache_ids.n;
        mt->cache_ids.v[mt->cache_ids.n++] = (uint32_t)m;
        for (size_t i = 0; i < m; i++) mt->cache_ids.v[mt->cache_ids.n++] = c->syms[i].id;
        if (!tok_strmap_put(&mt->cache, s, n, at)) mt->cache_full = true;
    }
    pthread_rwlock_unlock(&mt->cache_lock);
}

/* The symbols of the model-side word w[0..wn) (the piece s[0..n) itself,
 * or its byte-level form), merged. */
static remat_status bpe_word(tok_ctx *c, const char *s, size_t n, const char *w, size_t wn,
                             size_t *m_out) {
    const remat_tokenizer *t = c->t;
    size_t m = 0;
    uint32_t whole = t->ignore_merges ? tok_strmap_get(&t->vocab, w, wn) : TOK_NONE;
    if (whole != TOK_NONE) {
        c->syms[0].id = whole; /* syms holds TOK_INLINE_SYMS at least */
        *m_out = 1;
        return REMAT_OK;
    }
    bool fast = t->byte_level && !t->prefix && !t->suffix;
    if (fast) {
        if (!grow_from((void **)&c->syms, &c->syms_cap, n, sizeof *c->syms, c->syms_inline))
            return rm_err(REMAT_ENOMEM, "out of memory");
        for (size_t i = 0; i < n && fast; i++) {
            uint32_t id = t->byte_unit[(unsigned char)s[i]];
            fast = id != TOK_NONE;
            c->syms[i].id = id;
        }
        m = n;
    }
    if (!fast) {
        remat_status st = word_symbols(c, w, wn, &m);
        if (st) return st;
    }
    if (m > 64) {
        if (!grow((void **)&c->heap, &c->heap_cap, 3 * m + 8, sizeof *c->heap))
            return rm_err(REMAT_ENOMEM, "out of memory");
        m = merge_heap(c, m);
    } else if (m > 1) {
        m = merge_scan(c, m);
    }
    *m_out = m;
    return REMAT_OK;
}

remat_status tok_bpe(tok_ctx *c, const char *s, size_t n) {
    const remat_tokenizer *t = c->t;
    if (!n) return REMAT_OK;
    remat_tokenizer *mt = (remat_tokenizer *)t; /* the cache is the mutable part, locked */
    bool cacheable = n <= CACHE_MAX_WORD && t->cache_lock_ok;
    if (cacheable) {
        int hit = cache_lookup(c, mt, s, n);
        if (hit) return hit > 0 ? REMAT_OK : rm_err(REMAT_ENOMEM, "out of memory");
    }
    /* the word as the model sees it: under ByteLevel each byte is a character */
    const char *w = s;
    size_t wn = n, m = 0;
    if (t->byte_level) {
        if (!grow_from((void **)&c->word, &c->word_cap, 2 * n + 1, 1, c->word_inline))
            return rm_err(REMAT_ENOMEM, "out of memory");
        wn = tok_bytes_to_chars((const unsigned char *)s, n, c->word);
        w = c->word;
    }
    remat_status st = bpe_word(c, s, n, w, wn, &m);
    if (st) return st;
    if (c->out.n + m > c->out.cap && !tok_ids_grow(&c->out, c->out.n + m))
        return rm_err(REMAT_ENOMEM, "out of memory");
    for (size_t i = 0; i < m; i++) c->out.v[c->out.n++] = c->syms[i].id;
    if (cacheable) cache_insert(c, mt, s, n, m);
    return REMAT_OK;
}
