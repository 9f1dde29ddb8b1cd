/* src/text/tok.h — the tokenizer's private parts, shared by the loader
 * (tokenizer_json.c), the BPE model (bpe.c), pre-tokenization (pretok.c),
 * added-token matching (added.c), UTF-8 handling (utf8.c) and the encode /
 * decode driver (tokenizer.c). Not installed. */
#ifndef REMAT_TEXT_TOK_H
#define REMAT_TEXT_TOK_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/utf8.h"
#include "remat/tokenizer.h"

#define TOK_NONE UINT32_MAX

/* ---- byte strings -> uint32 (open addressing; keys live in the table's blob) ---- */
typedef struct tok_strmap {
    uint32_t *slots; /* entry index + 1; 0 = empty */
    size_t mask;     /* slots - 1 (a power of two) */
    struct tok_strent {
        uint32_t off, len, val, hash;
    } * ents;
    size_t n, cap;
    char *blob;
    size_t blob_len, blob_cap;
} tok_strmap;

uint32_t tok_hash(const void *p, size_t n);
/* Sets key -> val (an existing key's value is replaced). false: out of memory. */
bool tok_strmap_put(tok_strmap *m, const char *key, size_t n, uint32_t val);
/* The value of key, or TOK_NONE. */
uint32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t n);
void tok_strmap_free(tok_strmap *m);

/* ---- ids, growing ---- */
typedef struct tok_ids {
    uint32_t *v;
    size_t n, cap;
    bool oom;
} tok_ids;
bool tok_ids_grow(tok_ids *b, size_t need);
static inline void tok_ids_push(tok_ids *b, uint32_t id) {
    if (b->n == b->cap && !tok_ids_grow(b, b->n + 1)) return;
    b->v[b->n++] = id;
}

/* ---- merges: (left id, right id) -> (rank, merged id) ---- */
typedef struct tok_mergemap {
    uint64_t *keys; /* UINT64_MAX = empty */
    uint32_t *rank, *id;
    size_t mask, n;
} tok_mergemap;

bool tok_mergemap_init(tok_mergemap *m, size_t n_expected);
/* Sets the pair (a later merge of the same pair replaces an earlier one, as
 * in `tokenizers`). */
void tok_merge_put(tok_mergemap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id);
/* false when the pair does not merge. */
static inline bool tok_merge_get(const tok_mergemap *m, uint32_t a, uint32_t b, uint32_t *rank,
                                 uint32_t *id) {
    uint64_t k = (uint64_t)a << 32 | b;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 32) & m->mask;
    for (;;) {
        uint64_t s = m->keys[i];
        if (s == k) {
            *rank = m->rank[i];
            *id = m->id[i];
            return true;
        }
        if (s == UINT64_MAX) return false;
        i = (i + 1) & m->mask;
    }
}
void tok_mergemap_free(tok_mergemap *m);

/* ---- pre-tokenizer steps ---- */
typedef enum tok_behavior {
    TOK_REMOVED,
    TOK_ISOLATED,
    TOK_MERGED_PREV,
    TOK_MERGED_NEXT,
    TOK_CONTIGUOUS
} tok_behavior;

typedef struct tok_step {
    bool byte_level;       /* ByteLevel (else Split) */
    bool add_prefix_space; /* ByteLevel */
    pcre2_code *re;        /* Split's pattern; ByteLevel's when use_regex (else NULL) */
    bool jit;              /* re is JIT-compiled */
    tok_behavior behavior; /* Split */
    bool invert;           /* Split */
} tok_step;

/* ---- added tokens ---- */
typedef struct tok_added {
    uint32_t id;
    char *content;
    uint32_t len;
    bool single_word, lstrip, rstrip, normalized, special;
} tok_added;

/* A byte trie over the contents of some added tokens (leftmost-longest). */
typedef struct tok_trie {
    struct tok_tnode {
        uint32_t child, sibling; /* node indexes, 0 = none (node 0 is the root) */
        uint32_t token;          /* index into tok->added, TOK_NONE if none ends here */
        unsigned char byte;
    } * nodes;
    uint32_t n, cap;
    uint8_t first[32]; /* bitset of the bytes a token starts with */
} tok_trie;

struct remat_tokenizer {
    char *name; /* for messages */
    /* model */
    tok_strmap vocab; /* token string (as in the file) -> id */
    uint32_t vocab_count;
    tok_mergemap merges;
    bool ignore_merges, fuse_unk, byte_fallback;
    char *unk_token;       /* NULL: none */
    char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix (NULL: none) */
    size_t prefix_len, suffix_len;
    uint32_t byte_unit[256]; /* ByteLevel: id of the character of each byte, TOK_NONE if absent */
    /* ids -> tokens */
    uint32_t n_ids;    /* largest id + 1 */
    char **id_token;   /* [n_ids]: the token string (added content or vocab key), or NULL */
    uint8_t *id_flags; /* [n_ids]: TOK_ID_SPECIAL | TOK_ID_ADDED */
    uint32_t *dec_off; /* [n_ids + 1]: the bytes a ByteLevel decoder gives each id in dec */
    char *dec;
    /* pre-tokenizer */
    tok_step *steps;
    int n_steps;
    bool byte_level; /* the last step is ByteLevel: the model sees bytes mapped to characters */
    /* added tokens */
    tok_added *added;
    uint32_t n_added;
    tok_trie trie_raw, trie_norm;   /* normalized false / true */
    pcre2_code *re_word, *re_space; /* for single_word, lstrip, rstrip (NULL when unused) */
    /* post-processor (single sequence) and decoder */
    uint32_t *pre_ids, *post_ids;
    uint32_t n_pre, n_post;
    bool byte_level_decoder;
    /* the word cache (BPE::cache in tokenizers): piece bytes -> offset in
     * cache_ids of [count, ids...]; shared by the threads that encode */
    pthread_rwlock_t cache_lock;
    bool cache_lock_ok;
    tok_strmap cache;
    tok_ids cache_ids;
    atomic_bool cache_full;
};

#define TOK_ID_SPECIAL 1u
#define TOK_ID_ADDED 2u

/* GPT-2's byte-level alphabet: the byte a code point stands for, + 1 (0:
 * not in the alphabet). */
int tok_char_byte(uint32_t cp);
/* Builds the table tok_bytes_to_chars reads (once; thread-safe). */
void tok_tables_init(void);
/* Writes the byte-level form of s[0..n) (each byte as its character). */
size_t tok_bytes_to_chars(const unsigned char *s, size_t n, char *out);

/* ---- the pieces of one encode call ---- */
typedef struct tok_piece {
    uint32_t off, len;
    bool match;
} tok_piece;

typedef struct tok_ctx tok_ctx;
/* Pre-tokenizes s[0..n) from step on and runs the model on each piece. */
remat_status tok_pretokenize(tok_ctx *c, int step, const char *s, size_t n);
/* The BPE model on one pre-tokenized piece (its bytes as in the text). */
remat_status tok_bpe(tok_ctx *c, const char *s, size_t n);

#define TOK_MAX_STEPS 8 /* pre-tokenizer steps (a Sequence's, flattened) */
#define TOK_INLINE_SYMS 256
#define TOK_INLINE_WORD 512

struct tok_sym {
    uint32_t id;
    int32_t prev, next;
    uint32_t len; /* 0: merged away */
};
struct tok_heap_ent {
    uint32_t rank, pos, id;
};

/* One encode call's state. Small buffers live inside it (on the caller's
 * stack) and move to the heap only for long pieces. */
struct tok_ctx {
    const remat_tokenizer *t;
    tok_ids out;
    pcre2_match_data *md;
    pcre2_match_context *mctx; /* with a JIT stack, made when the default one is too small */
    pcre2_jit_stack *jit;
    /* per pre-tokenizer step: its pieces and (ByteLevel) the prefixed text */
    tok_piece *pieces[TOK_MAX_STEPS];
    size_t pieces_cap[TOK_MAX_STEPS];
    char *pref[TOK_MAX_STEPS];
    size_t pref_cap[TOK_MAX_STEPS];
    /* BPE scratch */
    struct tok_sym *syms;
    size_t syms_cap;
    struct tok_heap_ent *heap;
    size_t heap_cap;
    char *word;
    size_t word_cap;
    struct tok_sym syms_inline[TOK_INLINE_SYMS];
    char word_inline[TOK_INLINE_WORD];
};

/* Runs re over s[0..n) from offset with the call's match data; the match
 * is [*ms, *me). 0: no match, 1: a match, <0: a PCRE2 error (message set). */
int tok_regex_next(tok_ctx *c, const pcre2_code *re, bool jit, const char *s, size_t n,
                   size_t offset, size_t *ms, size_t *me);

/* ---- the loader's regex compile (Oniguruma's \s and \S as PCRE2 reads them) ---- */
remat_status tok_regex_compile(const char *pattern, size_t n, bool literal, const char *where,
                               const char *file, pcre2_code **re, bool *jit);

/* ---- added tokens ---- */
bool tok_trie_add(tok_trie *tr, const char *s, uint32_t n, uint32_t token);
void tok_trie_free(tok_trie *tr);
/* Splits s[0..n) on the added tokens of trie as `tokenizers` does, calling
 * on_text for the text between them and pushing the tokens' ids. */
remat_status tok_split_added(tok_ctx *c, const tok_trie *tr, const char *s, size_t n,
                             remat_status (*on_text)(tok_ctx *c, const char *s, size_t n));

#endif
