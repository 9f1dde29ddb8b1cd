/* src/text/added.c — finding the added tokens in a text as `tokenizers`
 * does (AddedVocabulary::find_matches): leftmost-longest matches, taken
 * left to right without overlap; a single_word token only between
 * non-word characters; lstrip / rstrip take the whitespace beside the
 * token with it. */
#include <string.h>

#include "core/core.h"
#include "tok.h"

/* Does re match the character at s[0..n) (anchored, one character)? */
static bool char_is(const tok_ctx *c, const pcre2_code *re, const char *s, size_t n) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, c->md, NULL);
    return rc > 0;
}

static size_t char_before(const char *s, size_t end) {
    size_t i = end;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--;
    return i > 0 ? i - 1 : 0;
}

/* Rust's regex \w$ on s[0..end) and ^\w on s[start..n) */
static bool ends_with_word(const tok_ctx *c, const char *s, size_t end) {
    if (!end) return false;
    size_t i = char_before(s, end);
    return char_is(c, c->t->re_word, s + i, end - i);
}
static bool starts_with_word(const tok_ctx *c, const char *s, size_t start, size_t n) {
    if (start >= n) return false;
    return char_is(c, c->t->re_word, s + start, n - start);
}

/* The longest token starting at s[i] (TOK_NONE if none); *end after it. */
static uint32_t longest_at(const tok_trie *tr, const char *s, size_t i, size_t n, size_t *end) {
    const struct tok_tnode *nodes = tr->nodes;
    uint32_t best = TOK_NONE, cur = 0;
    for (size_t j = i; j < n; j++) {
        uint32_t ch = nodes[cur].child;
        while (ch && nodes[ch].byte != (unsigned char)s[j]) ch = nodes[ch].sibling;
        if (!ch) break;
        cur = ch;
        if (nodes[cur].token != TOK_NONE) {
            best = nodes[cur].token;
            *end = j + 1;
        }
    }
    return best;
}

/* The token's flags on the match [*start, *stop): false when single_word
 * rejects it; lstrip / rstrip widen it over the whitespace beside it (not
 * back over what an earlier token took). */
static bool place(const tok_ctx *c, const tok_added *a, const char *s, size_t n,
                  size_t start_offset, size_t *start, size_t *stop) {
    const remat_tokenizer *t = c->t;
    if (a->single_word) {
        bool start_space = *start == 0 || !ends_with_word(c, s, *start);
        bool stop_space = *stop == n || !starts_with_word(c, s, *stop, n);
        if (!start_space || !stop_space) return false;
    }
    if (a->lstrip) {
        size_t ns = *start;
        while (ns > 0) {
            size_t k = char_before(s, ns);
            if (!char_is(c, t->re_space, s + k, ns - k)) break;
            ns = k;
        }
        *start = ns > start_offset ? ns : start_offset;
    }
    while (a->rstrip && *stop < n) {
        size_t k = rm_utf8_char((const unsigned char *)s + *stop, n - *stop);
        if (!k || !char_is(c, t->re_space, s + *stop, n - *stop)) break;
        *stop += k;
    }
    return true;
}

remat_status tok_split_added(tok_ctx *c, const tok_trie *tr, const char *s, size_t n,
                             remat_status (*on_text)(tok_ctx *c, const char *s, size_t n)) {
    if (!tr->n) return n ? on_text(c, s, n) : REMAT_OK;
    size_t start_offset = 0, i = 0;
    while (i < n) {
        unsigned char b0 = (unsigned char)s[i];
        size_t end = 0;
        uint32_t best =
            tr->first[b0 >> 3] & (1u << (b0 & 7)) ? longest_at(tr, s, i, n, &end) : TOK_NONE;
        if (best == TOK_NONE) {
            i++;
            continue;
        }
        const tok_added *a = &c->t->added[best];
        size_t start = i, stop = end;
        i = end; /* the next search starts after this match, kept or not */
        if (!place(c, a, s, n, start_offset, &start, &stop)) continue;
        if (start_offset < start) {
            remat_status st = on_text(c, s + start_offset, start - start_offset);
            if (st) return st;
        }
        if (stop > start) tok_ids_push(&c->out, a->id);
        start_offset = stop;
    }
    if (start_offset < n) return on_text(c, s + start_offset, n - start_offset);
    return REMAT_OK;
}
