/* src/text/tokenizer.c — encode and decode (remat/tokenizer.h): the
 * pipeline of `tokenizers`' Tokenizer::encode — added tokens split out
 * (those matched on the raw text, then the normalized ones), each piece
 * pre-tokenized, the model on each pre-token, the post-processor's tokens
 * around — and of Tokenizer::decode. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tok.h"

/* remat_tokenizer_free by the parts of the struct (tok.h). */
static void model_free(remat_tokenizer *t) {
    tok_strmap_free(&t->vocab);
    tok_mergemap_free(&t->merges);
    free(t->unk_token);
    free(t->prefix);
    free(t->suffix);
}
static void ids_free(remat_tokenizer *t) {
    free(t->id_token);
    free(t->id_flags);
    free(t->dec_off);
    free(t->dec);
}
static void added_free(remat_tokenizer *t) {
    for (uint32_t i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    tok_trie_free(&t->trie_raw);
    tok_trie_free(&t->trie_norm);
    pcre2_code_free(t->re_word);
    pcre2_code_free(t->re_space);
}

void remat_tokenizer_free(remat_tokenizer *t) {
    if (!t) return;
    model_free(t);
    ids_free(t);
    for (int i = 0; i < t->n_steps; i++) pcre2_code_free(t->steps[i].re);
    free(t->steps);
    added_free(t);
    free(t->pre_ids);
    free(t->post_ids);
    free(t->name);
    if (t->cache_lock_ok) pthread_rwlock_destroy(&t->cache_lock);
    tok_strmap_free(&t->cache);
    free(t->cache_ids.v);
    free(t);
}

static void ctx_free(tok_ctx *c) {
    pcre2_match_data_free(c->md);
    pcre2_match_context_free(c->mctx);
    pcre2_jit_stack_free(c->jit);
    for (int i = 0; i < TOK_MAX_STEPS; i++) {
        free(c->pieces[i]);
        free(c->pref[i]);
    }
    if (c->syms != c->syms_inline) free(c->syms);
    if (c->word != c->word_inline) free(c->word);
    free(c->heap);
    free(c->out.v);
}

static remat_status ctx_init(tok_ctx *c, const remat_tokenizer *t) {
    memset(c, 0, offsetof(tok_ctx, syms_inline));
    c->t = t;
    c->syms = c->syms_inline;
    c->syms_cap = TOK_INLINE_SYMS;
    c->word = c->word_inline;
    c->word_cap = TOK_INLINE_WORD;
    c->md = pcre2_match_data_create(4, NULL);
    return c->md ? REMAT_OK : REMAT_ENOMEM;
}

/* the text between added tokens of the normalized kind: pre-tokenized */
static remat_status on_norm_text(tok_ctx *c, const char *s, size_t n) {
    return tok_pretokenize(c, 0, s, n);
}

/* the text between added tokens matched on the raw text: searched for the
 * normalized ones (there is no normalizer, so the text is as it was) */
static remat_status on_raw_text(tok_ctx *c, const char *s, size_t n) {
    return tok_split_added(c, &c->t->trie_norm, s, n, on_norm_text);
}

remat_status remat_tokenizer_encode(const remat_tokenizer *t, const void *text, size_t n,
                                    bool add_special_tokens, uint32_t **ids, size_t *n_ids) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!t || !ids || !n_ids || (!text && n))
        return rm_err(REMAT_EINVAL, "remat_tokenizer_encode: %s is NULL",
                      !t       ? "tok"
                      : !ids   ? "ids"
                      : !n_ids ? "n_ids"
                               : "text");
    /* invalid UTF-8 as Python's errors="replace" reads it */
    const char *s = text;
    char *fixed = NULL;
    size_t valid = n ? rm_utf8_valid_prefix(text, n) : 0;
    if (valid < n) {
        size_t len = 0, cap = 0;
        if (!rm_utf8_lossy(text, n, &fixed, &len, &cap))
            return rm_err(REMAT_ENOMEM, "remat_tokenizer_encode: out of memory");
        s = fixed;
        n = len;
    }
    tok_ctx c;
    remat_status st = ctx_init(&c, t);
    if (st) {
        st = rm_err(REMAT_ENOMEM, "remat_tokenizer_encode: out of memory");
        goto out;
    }
    if (n / 3 + 16 > c.out.cap) tok_ids_grow(&c.out, n / 3 + 16);
    if (add_special_tokens)
        for (uint32_t i = 0; i < t->n_pre; i++) tok_ids_push(&c.out, t->pre_ids[i]);
    st = tok_split_added(&c, &t->trie_raw, s, n, on_raw_text);
    if (add_special_tokens)
        for (uint32_t i = 0; i < t->n_post; i++) tok_ids_push(&c.out, t->post_ids[i]);
    if (!st && c.out.oom) st = rm_err(REMAT_ENOMEM, "out of memory");
    if (st) {
        rm_err_prefix(st, "remat_tokenizer_encode");
        goto out;
    }
    if (c.out.n) {
        *ids = c.out.v;
        *n_ids = c.out.n;
        c.out.v = NULL;
    }
out:
    ctx_free(&c);
    free(fixed);
    return st;
}

remat_status remat_tokenizer_decode(const remat_tokenizer *t, const uint32_t *ids, size_t n,
                                    bool skip_special_tokens, char **text, size_t *len) {
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!t || !text || (!ids && n))
        return rm_err(REMAT_EINVAL, "remat_tokenizer_decode: %s is NULL",
                      !t      ? "tok"
                      : !text ? "text"
                              : "ids");
    /* the tokens' bytes, then U+FFFD for what is not UTF-8 */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->n_ids || !t->id_token[id]) continue;
        total += t->byte_level_decoder ? t->dec_off[id + 1] - t->dec_off[id]
                                       : strlen(t->id_token[id]) + 1;
    }
    char *raw = malloc(total + 1);
    if (!raw) return rm_err(REMAT_ENOMEM, "remat_tokenizer_decode: out of memory");
    size_t k = 0;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->n_ids || !t->id_token[id]) continue; /* unknown ids are skipped */
        if (skip_special_tokens && (t->id_flags[id] & TOK_ID_SPECIAL)) continue;
        if (t->byte_level_decoder) {
            size_t m = t->dec_off[id + 1] - t->dec_off[id];
            memcpy(raw + k, t->dec + t->dec_off[id], m);
            k += m;
        } else { /* no decoder: the tokens joined by spaces */
            if (!first) raw[k++] = ' ';
            size_t m = strlen(t->id_token[id]);
            memcpy(raw + k, t->id_token[id], m);
            k += m;
        }
        first = false;
    }
    char *out = NULL;
    size_t olen = 0, cap = 0;
    bool ok = rm_utf8_lossy((const unsigned char *)raw, k, &out, &olen, &cap);
    free(raw);
    if (!ok) {
        free(out);
        return rm_err(REMAT_ENOMEM, "remat_tokenizer_decode: out of memory");
    }
    *text = out;
    if (len) *len = olen;
    return REMAT_OK;
}

uint32_t remat_tokenizer_vocab_size(const remat_tokenizer *t) { return t ? t->n_ids : 0; }

remat_status remat_tokenizer_token_to_id(const remat_tokenizer *t, const char *token,
                                         uint32_t *id) {
    if (!t || !token || !id)
        return rm_err(REMAT_EINVAL, "remat_tokenizer_token_to_id: %s is NULL",
                      !t       ? "tok"
                      : !token ? "token"
                               : "id");
    size_t n = strlen(token);
    for (uint32_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->added[i].content, token, n)) {
            *id = t->added[i].id;
            return REMAT_OK;
        }
    uint32_t v = tok_strmap_get(&t->vocab, token, n);
    if (v == TOK_NONE)
        return rm_err(REMAT_EINVAL, "remat_tokenizer_token_to_id: '%s' is not a token of %s", token,
                      t->name);
    *id = v;
    return REMAT_OK;
}

const char *remat_tokenizer_id_to_token(const remat_tokenizer *t, uint32_t id) {
    return t && id < t->n_ids ? t->id_token[id] : NULL;
}

bool remat_tokenizer_is_special(const remat_tokenizer *t, uint32_t id) {
    return t && id < t->n_ids && (t->id_flags[id] & TOK_ID_SPECIAL);
}
