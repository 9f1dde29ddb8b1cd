/* src/text/maps.c — the tokenizer's hash tables (vocabulary, merges, the
 * per-call word cache) and the added tokens' byte trie (see tok.h). */
#include <stdlib.h>
#include <string.h>

#include "tok.h"

uint32_t tok_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

static bool strmap_rehash(tok_strmap *m, size_t nslots) {
    uint32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots) return false;
    for (size_t e = 0; e < m->n; e++) {
        size_t i = m->ents[e].hash & (nslots - 1);
        while (slots[i]) i = (i + 1) & (nslots - 1);
        slots[i] = (uint32_t)e + 1;
    }
    free(m->slots);
    m->slots = slots;
    m->mask = nslots - 1;
    return true;
}

bool tok_strmap_put(tok_strmap *m, const char *key, size_t n, uint32_t val) {
    if (n > UINT32_MAX / 2) return false;
    uint32_t h = tok_hash(key, n);
    if (m->slots) {
        size_t i = h & m->mask;
        for (uint32_t s; (s = m->slots[i]); i = (i + 1) & m->mask) {
            struct tok_strent *e = &m->ents[s - 1];
            if (e->hash == h && e->len == n && !memcmp(m->blob + e->off, key, n)) {
                e->val = val;
                return true;
            }
        }
    }
    if ((m->n + 1) * 2 > (m->slots ? m->mask + 1 : 0)) {
        size_t ns = m->slots ? (m->mask + 1) * 2 : 64;
        if (!strmap_rehash(m, ns)) return false;
    }
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        struct tok_strent *p = realloc(m->ents, nc * sizeof *p);
        if (!p) return false;
        m->ents = p;
        m->cap = nc;
    }
    if (m->blob_len + n + 1 > m->blob_cap) {
        size_t nc = m->blob_cap ? m->blob_cap * 2 : 1024;
        while (nc < m->blob_len + n + 1) nc *= 2;
        if (nc > UINT32_MAX) return false;
        char *p = realloc(m->blob, nc);
        if (!p) return false;
        m->blob = p;
        m->blob_cap = nc;
    }
    memcpy(m->blob + m->blob_len, key, n);
    m->blob[m->blob_len + n] = '\0';
    m->ents[m->n] = (struct tok_strent){(uint32_t)m->blob_len, (uint32_t)n, val, h};
    m->blob_len += n + 1;
    size_t i = h & m->mask;
    while (m->slots[i]) i = (i + 1) & m->mask;
    m->slots[i] = (uint32_t)++m->n;
    return true;
}

uint32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t n) {
    if (!m->slots) return TOK_NONE;
    uint32_t h = tok_hash(key, n);
    size_t i = h & m->mask;
    for (uint32_t s; (s = m->slots[i]); i = (i + 1) & m->mask) {
        const struct tok_strent *e = &m->ents[s - 1];
        if (e->hash == h && e->len == n && !memcmp(m->blob + e->off, key, n)) return e->val;
    }
    return TOK_NONE;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    free(m->ents);
    free(m->blob);
    memset(m, 0, sizeof *m);
}

bool tok_mergemap_init(tok_mergemap *m, size_t n_expected) {
    size_t ns = 16;
    while (ns < n_expected * 2 + 2) ns *= 2;
    m->keys = malloc(ns * sizeof *m->keys);
    m->rank = malloc(ns * sizeof *m->rank);
    m->id = malloc(ns * sizeof *m->id);
    if (!m->keys || !m->rank || !m->id) {
        tok_mergemap_free(m);
        return false;
    }
    memset(m->keys, 0xFF, ns * sizeof *m->keys);
    m->mask = ns - 1;
    m->n = 0;
    return true;
}

void tok_merge_put(tok_mergemap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id) {
    uint64_t k = (uint64_t)a << 32 | b;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 32) & m->mask;
    while (m->keys[i] != UINT64_MAX && m->keys[i] != k) i = (i + 1) & m->mask;
    if (m->keys[i] == UINT64_MAX) m->n++;
    m->keys[i] = k;
    m->rank[i] = rank;
    m->id[i] = id;
}

void tok_mergemap_free(tok_mergemap *m) {
    free(m->keys);
    free(m->rank);
    free(m->id);
    memset(m, 0, sizeof *m);
}

static uint32_t trie_node(tok_trie *tr, unsigned char byte) {
    if (tr->n == tr->cap) {
        uint32_t nc = tr->cap ? tr->cap * 2 : 64;
        struct tok_tnode *p = realloc(tr->nodes, nc * sizeof *p);
        if (!p) return 0;
        tr->nodes = p;
        tr->cap = nc;
    }
    tr->nodes[tr->n] = (struct tok_tnode){0, 0, TOK_NONE, byte};
    return tr->n++;
}

bool tok_trie_add(tok_trie *tr, const char *s, uint32_t n, uint32_t token) {
    if (!tr->n && trie_node(tr, 0) != 0) return false;
    if (!tr->nodes) return false;
    uint32_t cur = 0;
    for (uint32_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        uint32_t c = tr->nodes[cur].child;
        while (c && tr->nodes[c].byte != b) c = tr->nodes[c].sibling;
        if (!c) {
            c = trie_node(tr, b);
            if (!c) return false;
            tr->nodes[c].sibling = tr->nodes[cur].child;
            tr->nodes[cur].child = c;
        }
        cur = c;
    }
    tr->nodes[cur].token = token; /* a later token of the same content replaces it */
    tr->first[(unsigned char)s[0] >> 3] |= (uint8_t)(1u << ((unsigned char)s[0] & 7));
    return true;
}

void tok_trie_free(tok_trie *tr) {
    free(tr->nodes);
    memset(tr, 0, sizeof *tr);
}
