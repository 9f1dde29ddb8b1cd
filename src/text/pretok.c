/* src/text/pretok.c — pre-tokenization: Split (a regex or a string, five
 * ways to keep what it matches) and ByteLevel (GPT-2's regex, an optional
 * leading space), applied in order to each piece of text, as the
 * `tokenizers` package applies its pre-tokenizers (Split::pre_tokenize,
 * NormalizedString::split, ByteLevel::pre_tokenize). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tok.h"

/* Oniguruma (the regex engine of `tokenizers`) reads \s as the Unicode
 * White_Space property; PCRE2's \s also takes U+180E. Escapes Oniguruma
 * reads differently from PCRE2 and that remat does not translate are
 * refused. */
static remat_status translate(const char *p, size_t n, char **out, size_t *out_len,
                              const char *where, const char *file) {
    char *q = malloc(n * 16 + 1);
    if (!q) return rm_err(REMAT_ENOMEM, "%s: out of memory", file);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\\' || i + 1 == n) {
            q[k++] = p[i];
            continue;
        }
        char e = p[i + 1];
        if (e == 'Q') { /* \Q...\E: literal */
            const char *end = NULL;
            for (size_t j = i + 2; j + 1 < n; j++)
                if (p[j] == '\\' && p[j + 1] == 'E') {
                    end = p + j;
                    break;
                }
            size_t stop = end ? (size_t)(end - p) + 2 : n;
            memcpy(q + k, p + i, stop - i);
            k += stop - i;
            i = stop - 1;
            continue;
        }
        if (e == 's' || e == 'S') {
            const char *r = e == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
            memcpy(q + k, r, strlen(r));
            k += strlen(r);
        } else if (e == 'h' || e == 'H' || e == 'R' || e == 'X' || e == 'K' || e == 'N' ||
                   e == 'O' || e == 'y' || e == 'Y') {
            free(q);
            return rm_err(REMAT_EUNSUPPORTED,
                          "%s: %s: the regex escape \\%c means something else to Oniguruma "
                          "(the regex engine of the tokenizers package) than to PCRE2; remat "
                          "does not translate it",
                          file, where, e);
        } else {
            q[k++] = '\\';
            q[k++] = e;
        }
        i++;
    }
    q[k] = '\0';
    *out = q;
    *out_len = k;
    return REMAT_OK;
}

remat_status tok_regex_compile(const char *pattern, size_t n, bool literal, const char *where,
                               const char *file, pcre2_code **re, bool *jit) {
    char *tr = NULL;
    size_t tn = n;
    if (!literal) {
        remat_status st = translate(pattern, n, &tr, &tn, where, file);
        if (st) return st;
    }
    int err;
    PCRE2_SIZE eoff;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    *re = pcre2_compile((PCRE2_SPTR)(literal ? pattern : tr), tn, opts, &err, &eoff, NULL);
    free(tr);
    if (!*re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return rm_err(REMAT_EFORMAT,
                      "%s: %s: the regex does not compile (PCRE2: %s, near offset %zu)", file,
                      where, (const char *)msg, (size_t)eoff);
    }
    *jit = pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE) == 0;
    return REMAT_OK;
}

int tok_regex_next(tok_ctx *c, const pcre2_code *re, bool jit, const char *s, size_t n,
                   size_t offset, size_t *ms, size_t *me) {
    int rc = jit ? pcre2_jit_match(re, (PCRE2_SPTR)s, n, offset, 0, c->md, c->mctx)
                 : pcre2_match(re, (PCRE2_SPTR)s, n, offset, PCRE2_NO_UTF_CHECK, c->md, c->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !c->jit) {
        /* the machine stack's 32 KiB were not enough: a JIT stack of up to 64 MiB */
        c->mctx = pcre2_match_context_create(NULL);
        c->jit = pcre2_jit_stack_create((size_t)64 << 10, (size_t)64 << 20, NULL);
        if (!c->mctx || !c->jit) {
            rm_err(REMAT_ENOMEM, "out of memory");
            return -1;
        }
        pcre2_jit_stack_assign(c->mctx, NULL, c->jit);
        rc = pcre2_jit_match(re, (PCRE2_SPTR)s, n, offset, 0, c->md, c->mctx);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        rm_err(REMAT_EUNSUPPORTED,
               "the pre-tokenizer's regex failed on a piece of %zu bytes (PCRE2: %s)", n,
               (const char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* Onig's find_iter as `tokenizers` uses it: matches left to right; an empty
 * match right where the previous match ended is skipped by one character. */
typedef struct finder {
    size_t last_end, last_match_end;
    bool have_last;
} finder;

static int find_next(tok_ctx *c, const tok_step *st, const char *s, size_t n, finder *f, size_t *ms,
                     size_t *me) {
    for (;;) {
        if (f->last_end > n) return 0;
        int rc = tok_regex_next(c, st->re, st->jit, s, n, f->last_end, ms, me);
        if (rc <= 0) return rc;
        if (*ms == *me && f->have_last && f->last_match_end == *me) {
            if (f->last_end >= n) return 0;
            size_t k = rm_utf8_char((const unsigned char *)s + f->last_end, n - f->last_end);
            f->last_end += k ? k : 1;
            continue;
        }
        f->last_end = *me;
        f->last_match_end = *me;
        f->have_last = true;
        return 1;
    }
}

static bool push_piece(tok_ctx *c, int step, size_t *np, size_t off, size_t len, bool match) {
    if (*np == c->pieces_cap[step]) {
        size_t nc = c->pieces_cap[step] ? c->pieces_cap[step] * 2 : 64;
        tok_piece *p = realloc(c->pieces[step], nc * sizeof *p);
        if (!p) return false;
        c->pieces[step] = p;
        c->pieces_cap[step] = nc;
    }
    c->pieces[step][(*np)++] = (tok_piece){(uint32_t)off, (uint32_t)len, match};
    return true;
}

static remat_status next_step(tok_ctx *c, int step, const char *s, size_t n) {
    if (!n) return REMAT_OK;
    return tok_pretokenize(c, step + 1, s, n);
}

/* Isolated: every piece kept as it is, streamed without a list. */
static remat_status split_isolated(tok_ctx *c, int step, const char *s, size_t n) {
    const tok_step *st = &c->t->steps[step];
    finder f = {0, 0, false};
    size_t ms, me, prev = 0;
    int rc;
    while ((rc = find_next(c, st, s, n, &f, &ms, &me)) > 0) {
        remat_status e;
        if (ms > prev && (e = next_step(c, step, s + prev, ms - prev))) return e;
        if ((e = next_step(c, step, s + ms, me - ms))) return e;
        prev = me;
    }
    if (rc < 0) return rm_last_status();
    return prev < n ? next_step(c, step, s + prev, n - prev) : REMAT_OK;
}

/* The behavior on the list of pieces: which are dropped or joined
 * (NormalizedString::split). Returns the pieces left, at the list's start. */
static size_t apply_behavior(tok_behavior b, tok_piece *p, size_t np) {
    size_t k = 0;
    bool previous = false;
    if (b == TOK_REMOVED) {
        for (size_t i = 0; i < np; i++)
            if (!p[i].match) p[k++] = p[i];
    } else if (b == TOK_CONTIGUOUS || b == TOK_MERGED_PREV) {
        for (size_t i = 0; i < np; i++) {
            bool join = b == TOK_CONTIGUOUS ? p[i].match == previous : p[i].match && !previous;
            if (join && k) p[k - 1].len = p[i].off + p[i].len - p[k - 1].off;
            else p[k++] = p[i];
            previous = p[i].match;
        }
    } else if (b == TOK_MERGED_NEXT) { /* right to left: a match joins the piece after it */
        size_t w = np;
        for (size_t i = np; i-- > 0;) {
            if (p[i].match && !previous && w < np) {
                p[w].len = p[w].off + p[w].len - p[i].off;
                p[w].off = p[i].off;
            } else {
                p[--w] = p[i];
            }
            previous = p[i].match;
        }
        memmove(p, p + w, (np - w) * sizeof *p);
        k = np - w;
    } else {
        k = np;
    }
    return k;
}

/* The other behaviors: the matches and the text between them listed, then joined or dropped. */
static remat_status split_listed(tok_ctx *c, int step, const char *s, size_t n) {
    const tok_step *st = &c->t->steps[step];
    finder f = {0, 0, false};
    size_t ms, me, prev = 0, np = 0;
    int rc;
    bool ok = true;
    while (ok && (rc = find_next(c, st, s, n, &f, &ms, &me)) > 0) {
        if (ms > prev) ok = push_piece(c, step, &np, prev, ms - prev, st->invert);
        ok = ok && push_piece(c, step, &np, ms, me - ms, !st->invert);
        prev = me;
    }
    if (ok && rc < 0) return rm_last_status();
    if (ok && prev < n) ok = push_piece(c, step, &np, prev, n - prev, st->invert);
    if (!ok) return rm_err(REMAT_ENOMEM, "out of memory");
    size_t k = apply_behavior(st->behavior, c->pieces[step], np);
    /* the steps below use their own lists: this one stays valid while they run */
    for (size_t i = 0; i < k; i++) {
        tok_piece q = c->pieces[step][i];
        remat_status e = next_step(c, step, s + q.off, q.len);
        if (e) return e;
    }
    return REMAT_OK;
}

remat_status tok_pretokenize(tok_ctx *c, int step, const char *s, size_t n) {
    const remat_tokenizer *t = c->t;
    if (step == t->n_steps) return tok_bpe(c, s, n);
    const tok_step *st = &t->steps[step];
    if (st->byte_level) {
        if (st->add_prefix_space && (n == 0 || s[0] != ' ')) {
            if (n + 2 > c->pref_cap[step]) {
                size_t nc = (n + 2) * 2;
                char *p = realloc(c->pref[step], nc);
                if (!p) return rm_err(REMAT_ENOMEM, "out of memory");
                c->pref[step] = p;
                c->pref_cap[step] = nc;
            }
            c->pref[step][0] = ' ';
            memcpy(c->pref[step] + 1, s, n);
            s = c->pref[step];
            n++;
        }
        if (!st->re) return next_step(c, step, s, n);
    }
    if (n > UINT32_MAX)
        return rm_err(REMAT_EUNSUPPORTED, "a piece of text of %zu bytes (4 GiB at most)", n);
    return st->behavior == TOK_ISOLATED ? split_isolated(c, step, s, n)
                                        : split_listed(c, step, s, n);
}
