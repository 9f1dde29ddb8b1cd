/* src/text/tokenizer_json.c — reading a Hugging Face tokenizer.json into a
 * remat_tokenizer (cJSON). What `tokenizers` would read differently is
 * refused with the key that holds it; ids of added tokens are assigned as
 * `tokenizers` assigns them (AddedVocabulary::add_tokens). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "tok.h"

#define MAX_ID 0x7FFFFFFFu

/* GPT-2's regex, which ByteLevel(use_regex=true) splits with (the
 * tokenizers package builds it in; it is not in the file). */
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct loader {
    remat_tokenizer *t;
    const char *file;
} loader;

static const cJSON *key(const cJSON *o, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(o, k);
}
static bool is_null(const cJSON *v) { return !v || cJSON_IsNull(v); }

static remat_status bad(const loader *L, const char *what, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static remat_status bad(const loader *L, const char *what, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rm_err(REMAT_EFORMAT, "%s: %s: %s", L->file, what, msg);
}
static remat_status unsupported(const loader *L, const char *what, const char *value,
                                const char *why) {
    return rm_err(REMAT_EUNSUPPORTED, "%s: %s '%s' is not supported%s%s", L->file, what, value,
                  why ? ": " : "", why ? why : "");
}

/* An optional boolean: absent or null gives def. */
static remat_status get_bool(const loader *L, const cJSON *o, const char *k, const char *path,
                             bool def, bool *out) {
    const cJSON *v = key(o, k);
    if (is_null(v)) {
        *out = def;
        return REMAT_OK;
    }
    if (!cJSON_IsBool(v)) return bad(L, path, "'%s' is not true or false", k);
    *out = cJSON_IsTrue(v);
    return REMAT_OK;
}

/* An optional string (NULL when absent or null), copied. */
static remat_status get_str(const loader *L, const cJSON *o, const char *k, const char *path,
                            char **out) {
    const cJSON *v = key(o, k);
    *out = NULL;
    if (is_null(v)) return REMAT_OK;
    if (!cJSON_IsString(v)) return bad(L, path, "'%s' is not a string", k);
    *out = strdup(v->valuestring);
    return *out ? REMAT_OK : rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
}

static bool get_id(const cJSON *v, uint32_t *id) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= MAX_ID) || d != floor(d)) return false;
    *id = (uint32_t)d;
    return true;
}

/* ---- model ---------------------------------------------------------------------- */
static remat_status merge_one(loader *L, size_t i, const char *a, size_t an, const char *b,
                              size_t bn, uint32_t rank) {
    remat_tokenizer *t = L->t;
    char path[64];
    snprintf(path, sizeof path, "model.merges[%zu]", i);
    uint32_t ia = tok_strmap_get(&t->vocab, a, an), ib = tok_strmap_get(&t->vocab, b, bn);
    if (ia == TOK_NONE) return bad(L, path, "'%.*s' is not in model.vocab", (int)an, a);
    if (ib == TOK_NONE) return bad(L, path, "'%.*s' is not in model.vocab", (int)bn, b);
    if (bn < t->prefix_len)
        return bad(L, path, "'%.*s' is shorter than the continuing_subword_prefix", (int)bn, b);
    size_t mn = an + bn - t->prefix_len;
    char stack[256], *m = mn <= sizeof stack ? stack : malloc(mn);
    if (!m) return rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
    memcpy(m, a, an);
    memcpy(m + an, b + t->prefix_len, bn - t->prefix_len);
    uint32_t im = tok_strmap_get(&t->vocab, m, mn);
    remat_status st = REMAT_OK;
    if (im == TOK_NONE)
        st = bad(L, path, "the merged token '%.*s' is not in model.vocab", (int)mn, m);
    else tok_merge_put(&t->merges, ia, ib, rank, im);
    if (m != stack) free(m);
    return st;
}

static remat_status read_model(loader *L, const cJSON *model) {
    remat_tokenizer *t = L->t;
    if (!cJSON_IsObject(model)) return bad(L, "model", "missing or not an object");
    const cJSON *type = key(model, "type");
    if (!is_null(type)) {
        if (!cJSON_IsString(type)) return bad(L, "model.type", "not a string");
        if (strcmp(type->valuestring, "BPE") != 0)
            return unsupported(L, "model.type", type->valuestring,
                               "remat reads BPE models (byte-level BPE as GPT-2 and Llama 3 use); "
                               "SentencePiece models (Unigram) and WordPiece may come later");
    } else if (!key(model, "merges")) {
        return unsupported(L, "model", "(no type, no merges)",
                           "remat reads BPE models; SentencePiece models may come later");
    }
    const cJSON *dropout = key(model, "dropout");
    if (!is_null(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return unsupported(L, "model.dropout", cJSON_IsNumber(dropout) ? "non-zero" : "value",
                           "BPE dropout samples merges at random; remat encodes deterministically");
    remat_status st;
    if ((st = get_bool(L, model, "fuse_unk", "model", false, &t->fuse_unk)) ||
        (st = get_bool(L, model, "byte_fallback", "model", false, &t->byte_fallback)) ||
        (st = get_bool(L, model, "ignore_merges", "model", false, &t->ignore_merges)) ||
        (st = get_str(L, model, "unk_token", "model", &t->unk_token)) ||
        (st = get_str(L, model, "continuing_subword_prefix", "model", &t->prefix)) ||
        (st = get_str(L, model, "end_of_word_suffix", "model", &t->suffix)))
        return st;
    t->prefix_len = t->prefix ? strlen(t->prefix) : 0;
    t->suffix_len = t->suffix ? strlen(t->suffix) : 0;

    const cJSON *vocab = key(model, "vocab");
    if (!cJSON_IsObject(vocab)) return bad(L, "model.vocab", "missing or not an object");
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        uint32_t id;
        if (!get_id(e, &id))
            return bad(L, "model.vocab", "the id of '%s' is not an integer in [0, 2^31)",
                       e->string);
        if (!tok_strmap_put(&t->vocab, e->string, strlen(e->string), id))
            return rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
    }
    t->vocab_count = (uint32_t)t->vocab.n; /* distinct tokens: a repeated key counts once */

    const cJSON *merges = key(model, "merges");
    if (!cJSON_IsArray(merges)) return bad(L, "model.merges", "missing or not an array");
    if (!tok_mergemap_init(&t->merges, (size_t)cJSON_GetArraySize(merges)))
        return rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
    size_t i = 0;
    uint32_t rank = 0;
    cJSON_ArrayForEach(e, merges) {
        if (cJSON_IsString(e)) {
            /* "a b" (older files): lines starting with #version are skipped */
            const char *s = e->valuestring;
            if (!strncmp(s, "#version", 8)) {
                i++;
                continue;
            }
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return bad(L, "model.merges",
                           "entry %zu ('%s') is not two tokens separated by one space", i, s);
            st = merge_one(L, i, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), rank++);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring,
                       *b = cJSON_GetArrayItem(e, 1)->valuestring;
            st = merge_one(L, i, a, strlen(a), b, strlen(b), rank++);
        } else {
            return bad(L, "model.merges", "entry %zu is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        if (st) return st;
        i++;
    }
    return REMAT_OK;
}

/* ---- pre-tokenizer --------------------------------------------------------------- */
static remat_status add_step(loader *L, tok_step s) {
    remat_tokenizer *t = L->t;
    if (t->n_steps == TOK_MAX_STEPS) {
        if (s.re) pcre2_code_free(s.re);
        return unsupported(L, "pre_tokenizer", "Sequence", "more than 8 pre-tokenizers");
    }
    tok_step *p = realloc(t->steps, (size_t)(t->n_steps + 1) * sizeof *p);
    if (!p) {
        if (s.re) pcre2_code_free(s.re);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
    }
    t->steps = p;
    t->steps[t->n_steps++] = s;
    return REMAT_OK;
}

static remat_status read_pretok(loader *L, const cJSON *p, const char *path, int depth) {
    if (!cJSON_IsObject(p)) return bad(L, path, "not an object");
    const cJSON *type = key(p, "type");
    if (!cJSON_IsString(type)) return bad(L, path, "'type' is missing or not a string");
    char where[160];
    const char *ty = type->valuestring;
    remat_status st;
    if (!strcmp(ty, "Sequence")) {
        const cJSON *list = key(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return bad(L, path, "'pretokenizers' is not an array");
        if (depth > 8) return bad(L, path, "Sequences nested too deep");
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, list) {
            snprintf(where, sizeof where, "%s.pretokenizers[%d]", path, i++);
            if ((st = read_pretok(L, e, where, depth + 1))) return st;
        }
        return REMAT_OK;
    }
    tok_step s = {0};
    if (!strcmp(ty, "ByteLevel")) {
        bool use_regex = true;
        s.byte_level = true;
        if ((st = get_bool(L, p, "add_prefix_space", path, true, &s.add_prefix_space)) ||
            (st = get_bool(L, p, "use_regex", path, true, &use_regex)))
            return st;
        if (use_regex) {
            snprintf(where, sizeof where, "%s (ByteLevel's GPT-2 regex)", path);
            if ((st = tok_regex_compile(GPT2_REGEX, sizeof GPT2_REGEX - 1, false, where, L->file,
                                        &s.re, &s.jit)))
                return st;
        }
        s.behavior = TOK_ISOLATED;
        return add_step(L, s);
    }
    if (!strcmp(ty, "Split")) {
        const cJSON *pat = key(p, "pattern"), *re = key(pat, "Regex"), *lit = key(pat, "String");
        const cJSON *beh = key(p, "behavior");
        if (!cJSON_IsString(re) && !cJSON_IsString(lit))
            return bad(L, path, "'pattern' is not {\"Regex\": ...} or {\"String\": ...}");
        if (!cJSON_IsString(beh)) return bad(L, path, "'behavior' is missing or not a string");
        static const struct {
            const char *name;
            tok_behavior b;
        } names[] = {{"Removed", TOK_REMOVED},
                     {"Isolated", TOK_ISOLATED},
                     {"MergedWithPrevious", TOK_MERGED_PREV},
                     {"MergedWithNext", TOK_MERGED_NEXT},
                     {"Contiguous", TOK_CONTIGUOUS}};
        size_t k = 0;
        while (k < 5 && strcmp(names[k].name, beh->valuestring) != 0) k++;
        if (k == 5)
            return bad(L, path,
                       "behavior '%s' is not one of Removed, Isolated, "
                       "MergedWithPrevious, MergedWithNext, Contiguous",
                       beh->valuestring);
        s.behavior = names[k].b;
        if ((st = get_bool(L, p, "invert", path, false, &s.invert))) return st;
        const cJSON *src = cJSON_IsString(re) ? re : lit;
        snprintf(where, sizeof where, "%s.pattern", path);
        if ((st = tok_regex_compile(src->valuestring, strlen(src->valuestring), !cJSON_IsString(re),
                                    where, L->file, &s.re, &s.jit)))
            return st;
        return add_step(L, s);
    }
    return unsupported(L, path, ty, "remat reads ByteLevel, Split and Sequence pre-tokenizers");
}

/* ---- added tokens ------------------------------------------------------------------ */
static remat_status read_added(loader *L, const cJSON *list) {
    remat_tokenizer *t = L->t;
    if (is_null(list)) return REMAT_OK;
    if (!cJSON_IsArray(list)) return bad(L, "added_tokens", "not an array");
    int n = cJSON_GetArraySize(list);
    t->added = calloc((size_t)n + 1, sizeof *t->added);
    if (!t->added) return rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
    tok_strmap by_content = {0}; /* content -> index into t->added */
    uint32_t next_id = t->vocab_count;
    remat_status st = REMAT_OK;
    int i = 0;
    const cJSON *e;
    char path[64];
    cJSON_ArrayForEach(e, list) {
        snprintf(path, sizeof path, "added_tokens[%d]", i++);
        const cJSON *content = key(e, "content");
        if (!cJSON_IsObject(e) || !cJSON_IsString(content)) {
            st = bad(L, path, "not an object with a string 'content'");
            break;
        }
        tok_added a = {0};
        if ((st = get_bool(L, e, "single_word", path, false, &a.single_word)) ||
            (st = get_bool(L, e, "lstrip", path, false, &a.lstrip)) ||
            (st = get_bool(L, e, "rstrip", path, false, &a.rstrip)) ||
            (st = get_bool(L, e, "normalized", path, true, &a.normalized)) ||
            (st = get_bool(L, e, "special", path, false, &a.special)))
            break;
        size_t len = strlen(content->valuestring);
        if (!len) continue; /* tokenizers ignores empty tokens */
        uint32_t at = tok_strmap_get(&by_content, content->valuestring, len);
        uint32_t id;
        if (at != TOK_NONE) id = t->added[at].id; /* already added: same id, new properties */
        else if ((id = tok_strmap_get(&t->vocab, content->valuestring, len)) == TOK_NONE)
            id = next_id++;
        if (id > MAX_ID) {
            st = bad(L, path, "more ids than remat handles");
            break;
        }
        a.id = id;
        a.len = (uint32_t)len;
        if (at == TOK_NONE) {
            a.content = strdup(content->valuestring);
            if (!a.content || !tok_strmap_put(&by_content, a.content, len, t->n_added)) {
                free(a.content);
                st = rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
                break;
            }
            t->added[t->n_added++] = a;
        } else {
            bool was_special = t->added[at].special;
            a.content = t->added[at].content;
            t->added[at] = a;
            t->added[at].special |= was_special; /* the special set only grows */
        }
    }
    tok_strmap_free(&by_content);
    return st;
}

/* ---- post-processor ------------------------------------------------------------------ */
static remat_status push_ids(loader *L, uint32_t **v, uint32_t *n, const cJSON *ids,
                             const char *path) {
    int k = cJSON_GetArraySize(ids);
    uint32_t *p = realloc(*v, (*n + (size_t)k + 1) * sizeof *p);
    if (!p) return rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
    *v = p;
    const cJSON *e;
    cJSON_ArrayForEach(e, ids) {
        uint32_t id;
        if (!get_id(e, &id)) return bad(L, path, "an id is not an integer in [0, 2^31)");
        p[(*n)++] = id;
    }
    return REMAT_OK;
}

static remat_status read_post(loader *L, const cJSON *p, const char *path, int depth) {
    remat_tokenizer *t = L->t;
    if (is_null(p)) return REMAT_OK;
    const cJSON *type = key(p, "type");
    if (!cJSON_IsString(type)) return bad(L, path, "'type' is missing or not a string");
    const char *ty = type->valuestring;
    char where[160];
    remat_status st;
    if (!strcmp(ty, "ByteLevel")) return REMAT_OK; /* offsets only */
    if (!strcmp(ty, "Sequence")) {
        const cJSON *list = key(p, "processors"), *e;
        if (!cJSON_IsArray(list)) return bad(L, path, "'processors' is not an array");
        if (depth > 8) return bad(L, path, "Sequences nested too deep");
        int i = 0;
        cJSON_ArrayForEach(e, list) {
            snprintf(where, sizeof where, "%s.processors[%d]", path, i++);
            if ((st = read_post(L, e, where, depth + 1))) return st;
        }
        return REMAT_OK;
    }
    if (strcmp(ty, "TemplateProcessing") != 0)
        return unsupported(
            L, path, ty, "remat reads ByteLevel, TemplateProcessing and Sequence post-processors");
    const cJSON *single = key(p, "single"), *specials = key(p, "special_tokens");
    if (!cJSON_IsArray(single)) return bad(L, path, "'single' is not an array");
    /* this processor wraps what the earlier ones made: its tokens go outside */
    uint32_t *pre = NULL, *post = NULL, npre = 0, npost = 0;
    bool seen_a = false;
    const cJSON *e;
    st = REMAT_OK;
    cJSON_ArrayForEach(e, single) {
        const cJSON *sp = key(e, "SpecialToken"), *sq = key(e, "Sequence");
        if (sq) {
            const cJSON *id = key(sq, "id");
            if (!cJSON_IsString(id) || strcmp(id->valuestring, "A") != 0 || seen_a) {
                st = unsupported(L, "post_processor single template piece",
                                 cJSON_IsString(id) ? id->valuestring : "?",
                                 "a single-sequence template holds sequence A once");
                break;
            }
            seen_a = true;
            continue;
        }
        const cJSON *name = key(sp, "id");
        if (!cJSON_IsString(name)) {
            st = bad(L, path, "a 'single' piece is neither SpecialToken nor Sequence");
            break;
        }
        const cJSON *tokd = key(specials, name->valuestring), *ids = key(tokd, "ids");
        if (!cJSON_IsArray(ids)) {
            st = bad(L, path, "special token '%s' is not in special_tokens with its ids",
                     name->valuestring);
            break;
        }
        if ((st = seen_a ? push_ids(L, &post, &npost, ids, path)
                         : push_ids(L, &pre, &npre, ids, path)))
            break;
    }
    if (!st && !seen_a) st = bad(L, path, "the 'single' template has no sequence A");
    if (!st) {
        uint32_t *np = malloc((npre + t->n_pre + 1) * sizeof *np);
        uint32_t *nq = malloc((t->n_post + npost + 1) * sizeof *nq);
        if (!np || !nq) {
            free(np);
            free(nq);
            st = rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
        } else {
            if (npre) memcpy(np, pre, npre * sizeof *np);
            if (t->n_pre) memcpy(np + npre, t->pre_ids, t->n_pre * sizeof *np);
            if (t->n_post) memcpy(nq, t->post_ids, t->n_post * sizeof *nq);
            if (npost) memcpy(nq + t->n_post, post, npost * sizeof *nq);
            free(t->pre_ids);
            free(t->post_ids);
            t->pre_ids = np;
            t->post_ids = nq;
            t->n_pre += npre;
            t->n_post += npost;
        }
    }
    free(pre);
    free(post);
    return st;
}

/* How sparse ids may be: at most SLACK x the tokens defined + GAP (see build_ids). */
#define MAX_TOKEN_ID_SLACK 16u
#define MAX_TOKEN_ID_GAP 65536u

/* ---- ids -> tokens, the decoder's bytes ------------------------------------------------- */
/* The number of ids (the largest + 1) into *n; an id far past the tokens the
 * file defines is an error: the id tables are dense (17 bytes an id), so one
 * huge id would make us allocate gigabytes for a few tokens, and real
 * tokenizers number their tokens densely (added tokens follow the vocabulary). */
static remat_status id_count(const loader *L, uint32_t *n /* OUT */) {
    const remat_tokenizer *t = L->t;
    uint64_t top = 0; /* counted wide so an id of UINT32_MAX cannot wrap to 0 */
    for (size_t i = 0; i < t->vocab.n; i++)
        if ((uint64_t)t->vocab.ents[i].val + 1 > top) top = (uint64_t)t->vocab.ents[i].val + 1;
    for (uint32_t i = 0; i < t->n_added; i++)
        if ((uint64_t)t->added[i].id + 1 > top) top = (uint64_t)t->added[i].id + 1;
    for (uint32_t i = 0; i < t->n_pre; i++)
        if ((uint64_t)t->pre_ids[i] + 1 > top) top = (uint64_t)t->pre_ids[i] + 1;
    for (uint32_t i = 0; i < t->n_post; i++)
        if ((uint64_t)t->post_ids[i] + 1 > top) top = (uint64_t)t->post_ids[i] + 1;
    uint64_t defined = (uint64_t)t->vocab.n + t->n_added + t->n_pre + t->n_post;
    if (top > MAX_TOKEN_ID_SLACK * defined + MAX_TOKEN_ID_GAP)
        return rm_err(REMAT_EFORMAT,
                      "%s: token id %llu is far beyond the %llu tokens the file defines "
                      "(ids must be numbered densely from 0)",
                      L->file, (unsigned long long)(top - 1), (unsigned long long)defined);
    *n = (uint32_t)top;
    return REMAT_OK;
}

static remat_status build_ids(loader *L) {
    remat_tokenizer *t = L->t;
    uint32_t n = 0;
    remat_status st = id_count(L, &n);
    if (st) return st;
    t->n_ids = n;
    t->id_token = calloc((size_t)n + 1, sizeof *t->id_token);
    t->id_flags = calloc((size_t)n + 1, 1);
    t->dec_off = calloc((size_t)n + 2, sizeof *t->dec_off);
    if (!t->id_token || !t->id_flags || !t->dec_off)
        return rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
    for (size_t i = 0; i < t->vocab.n; i++)
        t->id_token[t->vocab.ents[i].val] = t->vocab.blob + t->vocab.ents[i].off;
    tok_strmap special = {0};
    for (uint32_t i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        t->id_token[a->id] = a->content;
        t->id_flags[a->id] |= TOK_ID_ADDED;
        if (a->special && !tok_strmap_put(&special, a->content, a->len, 1)) {
            tok_strmap_free(&special);
            return rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
        }
    }
    /* decode skips by the token's text (a vocabulary token spelled like a
     * special one too), as tokenizers does */
    size_t total = 0;
    for (uint32_t id = 0; id < n; id++) {
        const char *s = t->id_token[id];
        if (!s) continue;
        size_t len = strlen(s);
        if (special.n && tok_strmap_get(&special, s, len) != TOK_NONE)
            t->id_flags[id] |= TOK_ID_SPECIAL;
        total += len;
    }
    tok_strmap_free(&special);
    t->dec = malloc(total + 1);
    if (!t->dec) return rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
    /* ByteLevel decoding of each token: its characters back to bytes when
     * every one is in the byte alphabet, else the token's own bytes */
    size_t at = 0;
    for (uint32_t id = 0; id < n; id++) {
        t->dec_off[id] = (uint32_t)at;
        const char *s = t->id_token[id];
        if (!s) continue;
        size_t len = strlen(s), k = 0, j = 0;
        bool all = true;
        while (j < len && all) {
            size_t cl = rm_utf8_char((const unsigned char *)s + j, len - j);
            uint32_t cp = 0;
            if (cl == 1) cp = (unsigned char)s[j];
            else if (cl == 2)
                cp = ((unsigned char)s[j] & 0x1Fu) << 6 | ((unsigned char)s[j + 1] & 0x3Fu);
            int b = cl && cl <= 2 ? tok_char_byte(cp) : 0;
            if (!b) all = false;
            else t->dec[at + k++] = (char)(b - 1);
            j += cl ? cl : 1;
        }
        if (!all) {
            memcpy(t->dec + at, s, len);
            k = len;
        }
        at += k;
    }
    t->dec_off[n] = (uint32_t)at;
    if (at > UINT32_MAX) return bad(L, "model.vocab", "the tokens hold more than 4 GiB");
    return REMAT_OK;
}

static remat_status build_rest(loader *L) {
    remat_tokenizer *t = L->t;
    remat_status st;
    for (int i = 0; i < t->n_steps; i++)
        if (t->steps[i].byte_level && i != t->n_steps - 1)
            return unsupported(L, "pre_tokenizer", "ByteLevel before another pre-tokenizer",
                               "remat reads ByteLevel as the last pre-tokenizer");
    t->byte_level = t->n_steps && t->steps[t->n_steps - 1].byte_level;
    for (int b = 0; b < 256; b++) {
        char ch[2];
        unsigned char byte = (unsigned char)b;
        size_t k = tok_bytes_to_chars(&byte, 1, ch);
        t->byte_unit[b] = tok_strmap_get(&t->vocab, ch, k);
    }
    bool need_classes = false;
    for (uint32_t i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        tok_trie *tr = a->normalized ? &t->trie_norm : &t->trie_raw;
        if (!tok_trie_add(tr, a->content, a->len, i))
            return rm_err(REMAT_ENOMEM, "%s: out of memory", L->file);
        need_classes |= a->single_word || a->lstrip || a->rstrip;
    }
    if (need_classes) {
        /* Rust's regex \w and \s, which tokenizers tests these with */
        static const char w[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";
        static const char s[] = "\\p{White_Space}";
        bool jit;
        if ((st = tok_regex_compile(w, sizeof w - 1, false, "added_tokens", L->file, &t->re_word,
                                    &jit)) ||
            (st = tok_regex_compile(s, sizeof s - 1, false, "added_tokens", L->file, &t->re_space,
                                    &jit)))
            return st;
    }
    return build_ids(L);
}

remat_status remat_tokenizer_load_json(const char *json, size_t n, const char *name,
                                       remat_tokenizer **out) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_tokenizer_load_json: out is NULL");
    *out = NULL;
    if (!json) return rm_err(REMAT_EINVAL, "remat_tokenizer_load_json: json is NULL");
    tok_tables_init();
    loader L = {calloc(1, sizeof(remat_tokenizer)), name ? name : "tokenizer.json"};
    if (!L.t) return rm_err(REMAT_ENOMEM, "remat_tokenizer_load_json: out of memory");
    L.t->name = strdup(L.file);
    if (!L.t->name) {
        free(L.t);
        return rm_err(REMAT_ENOMEM, "remat_tokenizer_load_json: out of memory");
    }
    L.file = L.t->name;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, n, &end, false);
    remat_status st = REMAT_OK;
    if (!root) {
        st = rm_err(REMAT_EFORMAT, "%s: not valid JSON (the parser stopped at byte %zu of %zu)",
                    L.file, end && end >= json ? (size_t)(end - json) : (size_t)0, n);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        st = bad(&L, "the file", "not a JSON object");
        goto done;
    }
    const cJSON *v = key(root, "version");
    if (!is_null(v) && !(cJSON_IsString(v) && !strcmp(v->valuestring, "1.0"))) {
        st = unsupported(&L, "version", cJSON_IsString(v) ? v->valuestring : "(not a string)",
                         "tokenizers writes version \"1.0\"");
        goto done;
    }
    if (!is_null(key(root, "truncation"))) {
        st = unsupported(&L, "truncation", "(set)",
                         "encode the whole text and cut the ids where you need");
        goto done;
    }
    if (!is_null(key(root, "padding"))) {
        st = unsupported(&L, "padding", "(set)", "pad the ids where you need");
        goto done;
    }
    const cJSON *norm = key(root, "normalizer");
    if (!is_null(norm)) {
        const cJSON *ty = key(norm, "type");
        st = unsupported(&L, "normalizer", cJSON_IsString(ty) ? ty->valuestring : "(set)",
                         "remat reads tokenizers without a normalizer (byte-level BPE)");
        goto done;
    }
    if ((st = read_model(&L, key(root, "model")))) goto done;
    if (!is_null(key(root, "pre_tokenizer")) &&
        (st = read_pretok(&L, key(root, "pre_tokenizer"), "pre_tokenizer", 0)))
        goto done;
    if ((st = read_added(&L, key(root, "added_tokens")))) goto done;
    if ((st = read_post(&L, key(root, "post_processor"), "post_processor", 0))) goto done;
    const cJSON *dec = key(root, "decoder");
    if (!is_null(dec)) {
        const cJSON *ty = key(dec, "type");
        if (!cJSON_IsString(ty)) {
            st = bad(&L, "decoder", "'type' is missing or not a string");
            goto done;
        }
        if (strcmp(ty->valuestring, "ByteLevel") != 0) {
            st = unsupported(&L, "decoder", ty->valuestring, "remat reads the ByteLevel decoder");
            goto done;
        }
        L.t->byte_level_decoder = true;
    }
    st = build_rest(&L);
    if (!st) L.t->cache_lock_ok = pthread_rwlock_init(&L.t->cache_lock, NULL) == 0;
done:
    cJSON_Delete(root);
    if (st) {
        remat_tokenizer_free(L.t);
        return st;
    }
    *out = L.t;
    return REMAT_OK;
}

remat_status remat_tokenizer_load(const char *path, remat_tokenizer **out) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_tokenizer_load: out is NULL");
    *out = NULL;
    if (!path) return rm_err(REMAT_EINVAL, "remat_tokenizer_load: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f) return rm_err(REMAT_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return rm_err(REMAT_EIO, "%s: not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return rm_err(REMAT_ENOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int err = ferror(f);
    fclose(f);
    if (got != n || err) {
        free(buf);
        return rm_err(REMAT_EIO, "%s: read %zu of %zu bytes", path, got, n);
    }
    buf[n] = '\0';
    remat_status st = remat_tokenizer_load_json(buf, n, path, out);
    free(buf);
    return st;
}
