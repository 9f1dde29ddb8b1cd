/* tests/test_tokenizer.c — issue 31 item 4: remat/tokenizer.h gives exactly
 * the ids and text of the `tokenizers` package. tests/fixtures/tokenizer
 * (scripts/gen_tokenizer_fixtures.py) holds tokenizer.json files the
 * package trained (GPT-2 style, Llama-3 style, every Split behavior) and
 * what it returned for hard inputs: Unicode, emoji, CJK, whitespace runs,
 * numbers, contractions, invalid UTF-8, special tokens in the text, long
 * inputs. Unsupported files fail with the key named. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/tokenizer.h"
#include "support/rt.h"
#include "text/tok.h"

#define TOK_DIR REMAT_FIXTURE_DIR "/tokenizer"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    cr_assert(buf && fread(buf, 1, (size_t)len, f) == (size_t)len);
    buf[len] = '\0';
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static size_t unhex(const char *h, size_t hn, unsigned char *out) {
    if (hn == 1 && h[0] == '-') return 0;
    for (size_t i = 0; i < hn / 2; i++) {
        unsigned v;
        cr_assert(sscanf(h + 2 * i, "%2x", &v) == 1);
        out[i] = (unsigned char)v;
    }
    return hn / 2;
}

static size_t parse_ids(char *p, uint32_t *out) {
    size_t n = 0;
    while (*p == ' ') p++;
    while (*p) {
        out[n++] = (uint32_t)strtoul(p, &p, 10);
        while (*p == ' ') p++;
    }
    return n;
}

/* Every line of cases.txt: encode ids and decode text exactly as recorded. */
Test(tokenizer, matches_the_tokenizers_package) {
    size_t n;
    char *cases = slurp(TOK_DIR "/cases.txt", &n);
    unsigned char *in = malloc(n), *want = malloc(n);
    uint32_t *ids_want = malloc(n * sizeof *ids_want), *dec_ids = malloc(n * sizeof *dec_ids);
    size_t in_n = 0, nw = 0;
    remat_tokenizer *tok = NULL;
    char name[256] = "";
    int encodes = 0, decodes = 0, tokenizers = 0;
    for (char *line = strtok(cases, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        if (!strncmp(line, "tokenizer ", 10)) {
            remat_tokenizer_free(tok);
            char path[512];
            snprintf(name, sizeof name, "%s", line + 10);
            snprintf(path, sizeof path, TOK_DIR "/%s", name);
            RT_OK(remat_tokenizer_load(path, &tok));
            tokenizers++;
            continue;
        }
        char *sep = strstr(line, " : ");
        cr_assert(sep, "bad line %.80s", line);
        *sep = '\0';
        char *rhs = sep + 3;
        if (!strncmp(line, "encode ", 7)) {
            bool add = line[7] == '1';
            in_n = unhex(line + 9, strlen(line + 9), in);
            nw = parse_ids(rhs, ids_want);
            uint32_t *ids;
            size_t got;
            RT_OK(remat_tokenizer_encode(tok, in, in_n, add, &ids, &got));
            size_t first = 0;
            while (first < got && first < nw && ids[first] == ids_want[first]) first++;
            cr_assert(got == nw && first == nw,
                      "%s: encode(add_special_tokens=%d) of %.60s...: %zu ids, tokenizers %zu; "
                      "first difference at %zu (%u vs %u)",
                      name, add, line + 9, got, nw, first, first < got ? ids[first] : 0,
                      first < nw ? ids_want[first] : 0);
            free(ids);
            encodes++;
            continue;
        }
        cr_assert(!strncmp(line, "decode ", 7), "bad line %.80s", line);
        bool skip = line[7] == '1';
        const uint32_t *ids = ids_want;
        size_t nids = nw;
        if (strcmp(line + 9, "@")) {
            nids = parse_ids(line + 9, dec_ids);
            ids = dec_ids;
        }
        size_t wn;
        char *fixed = NULL;
        if (!strcmp(rhs, "=")) { /* the encoded input, invalid UTF-8 replaced */
            size_t cap = 0;
            wn = 0;
            cr_assert(rm_utf8_lossy(in, in_n, &fixed, &wn, &cap));
        } else {
            wn = unhex(rhs, strlen(rhs), want);
        }
        char *text;
        size_t len;
        RT_OK(remat_tokenizer_decode(tok, ids, nids, skip, &text, &len));
        const void *w = fixed ? (const void *)fixed : want;
        cr_assert(
            len == wn && !memcmp(text, w, len),
            "%s: decode(skip_special_tokens=%d) of %.60s: %zu bytes \"%.60s\", tokenizers %zu",
            name, skip, line + 9, len, text, wn);
        cr_assert_eq(text[len], '\0');
        free(text);
        free(fixed);
        decodes++;
    }
    remat_tokenizer_free(tok);
    cr_assert_geq(tokenizers, 10);
    cr_assert_geq(encodes, 700);
    cr_assert_geq(decodes, 1000);
    free(cases);
    free(in);
    free(want);
    free(ids_want);
    free(dec_ids);
}

/* A long text (the 60 KB training corpus, many times over) decodes back to itself. */
Test(tokenizer, long_text_round_trips) {
    size_t n;
    char *corpus = slurp(TOK_DIR "/corpus.txt", &n);
    size_t reps = 16, big_n = n * reps;
    char *big = malloc(big_n);
    for (size_t i = 0; i < reps; i++) memcpy(big + i * n, corpus, n);
    const char *names[] = {"gpt2.json", "llama3.json"};
    for (int k = 0; k < 2; k++) {
        char path[512];
        snprintf(path, sizeof path, TOK_DIR "/%s", names[k]);
        remat_tokenizer *tok;
        RT_OK(remat_tokenizer_load(path, &tok));
        uint32_t *ids, *ids1;
        size_t nids, nids1;
        RT_OK(remat_tokenizer_encode(tok, big, big_n, false, &ids, &nids));
        RT_OK(remat_tokenizer_encode(tok, corpus, n, false, &ids1, &nids1));
        cr_assert_gt(nids, big_n / 8, "%s: %zu ids for %zu bytes", names[k], nids, big_n);
        cr_assert_leq(nids, nids1 * reps + reps);
        char *text;
        size_t len;
        RT_OK(remat_tokenizer_decode(tok, ids, nids, true, &text, &len));
        cr_assert(len == big_n && !memcmp(text, big, len), "%s: the text does not round-trip",
                  names[k]);
        for (size_t i = 0; i < nids; i++) cr_assert_lt(ids[i], remat_tokenizer_vocab_size(tok));
        free(text);
        free(ids);
        free(ids1);
        remat_tokenizer_free(tok);
    }
    free(big);
    free(corpus);
}

typedef struct job {
    const remat_tokenizer *tok;
    const char *text;
    size_t n;
    uint32_t *ids;
    size_t nids;
    int rc;
} job;

static void *encode_job(void *p) {
    job *j = p;
    j->rc = remat_tokenizer_encode(j->tok, j->text, j->n, true, &j->ids, &j->nids);
    return NULL;
}

/* One tokenizer, several threads encoding at once: the same ids as one thread. */
Test(tokenizer, threads_share_a_tokenizer) {
    size_t n;
    char *corpus = slurp(TOK_DIR "/corpus.txt", &n);
    remat_tokenizer *tok;
    RT_OK(remat_tokenizer_load(TOK_DIR "/llama3.json", &tok));
    uint32_t *ref;
    size_t nref;
    RT_OK(remat_tokenizer_encode(tok, corpus, n, true, &ref, &nref));
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){tok, corpus, n, NULL, 0, -1};
        cr_assert_eq(pthread_create(&th[i], NULL, encode_job, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(jobs[i].rc, REMAT_OK);
        cr_assert(jobs[i].nids == nref && !memcmp(jobs[i].ids, ref, nref * sizeof *ref));
        free(jobs[i].ids);
    }
    free(ref);
    remat_tokenizer_free(tok);
    free(corpus);
}

Test(tokenizer, token_lookups) {
    remat_tokenizer *tok;
    RT_OK(remat_tokenizer_load(TOK_DIR "/llama3.json", &tok));
    uint32_t bos, id;
    RT_OK(remat_tokenizer_token_to_id(tok, "<|begin_of_text|>", &bos));
    cr_assert(remat_tokenizer_is_special(tok, bos));
    cr_assert_str_eq(remat_tokenizer_id_to_token(tok, bos), "<|begin_of_text|>");
    cr_assert_eq(remat_tokenizer_vocab_size(tok), bos + 43,
                 "the 43 special tokens follow the vocabulary");
    RT_OK(remat_tokenizer_token_to_id(tok, "Ġthe", &id));
    cr_assert(!remat_tokenizer_is_special(tok, id));
    cr_assert_str_eq(remat_tokenizer_id_to_token(tok, id), "Ġthe");
    cr_assert_null(remat_tokenizer_id_to_token(tok, 1u << 30));
    RT_FAILS(remat_tokenizer_token_to_id(tok, "no such token", &id), REMAT_EINVAL, "no such token");
    /* empty text: no ids (add_special_tokens false), only <|begin_of_text|> (true) */
    uint32_t *ids;
    size_t n;
    RT_OK(remat_tokenizer_encode(tok, "", 0, false, &ids, &n));
    cr_assert(n == 0 && ids == NULL);
    RT_OK(remat_tokenizer_encode(tok, NULL, 0, true, &ids, &n));
    cr_assert(n == 1 && ids[0] == bos);
    free(ids);
    RT_FAILS(remat_tokenizer_encode(NULL, "x", 1, true, &ids, &n), REMAT_EINVAL, "tok");
    RT_FAILS(remat_tokenizer_decode(tok, NULL, 3, true, (char **)&ids, NULL), REMAT_EINVAL, "ids");
    remat_tokenizer_free(tok);
    remat_tokenizer_free(NULL);
}

/* gpt2.json with `from` replaced by `to` (once), loaded from memory. */
static int load_edited(const char *from, const char *to, remat_tokenizer **out) {
    size_t n;
    char *json = slurp(TOK_DIR "/gpt2.json", &n);
    char *at = strstr(json, from);
    cr_assert(at, "gpt2.json has no \"%s\"", from);
    size_t fl = strlen(from), tl = strlen(to);
    char *ed = malloc(n + tl + 1);
    memcpy(ed, json, (size_t)(at - json));
    memcpy(ed + (at - json), to, tl);
    memcpy(ed + (at - json) + tl, at + fl, n - (size_t)(at - json) - fl + 1);
    int rc = remat_tokenizer_load_json(ed, strlen(ed), "edited.json", out);
    free(ed);
    free(json);
    return rc;
}

Test(tokenizer, unsupported_files_name_the_key) {
    remat_tokenizer *tok = (remat_tokenizer *)1;
    RT_FAILS(remat_tokenizer_load("/nonexistent/tokenizer.json", &tok), REMAT_EIO,
             "/nonexistent/tokenizer.json");
    cr_assert_null(tok);
    RT_FAILS(remat_tokenizer_load_json("{\"model\": ", 10, "cut.json", &tok), REMAT_EFORMAT,
             "cut.json: not valid JSON");
    RT_FAILS(load_edited("\"type\": \"BPE\"", "\"type\": \"Unigram\"", &tok), REMAT_EUNSUPPORTED,
             "model.type 'Unigram' is not supported");
    cr_assert(strstr(remat_last_error(), "SentencePiece"), "%s", remat_last_error());
    RT_FAILS(load_edited("\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", &tok),
             REMAT_EUNSUPPORTED, "normalizer 'NFC'");
    RT_FAILS(load_edited("\"truncation\": null", "\"truncation\": {\"max_length\": 8}", &tok),
             REMAT_EUNSUPPORTED, "truncation");
    RT_FAILS(load_edited("\"pre_tokenizer\": {",
                         "\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"unused\": {", &tok),
             REMAT_EUNSUPPORTED, "pre_tokenizer 'Metaspace'");
    RT_FAILS(load_edited("\"decoder\": {", "\"decoder\": {\"type\": \"WordPiece\"}, \"unused\": {",
                         &tok),
             REMAT_EUNSUPPORTED, "decoder 'WordPiece'");
    RT_FAILS(load_edited("\"dropout\": null", "\"dropout\": 0.1", &tok), REMAT_EUNSUPPORTED,
             "model.dropout");
    RT_FAILS(load_edited("\"merges\": [", "\"merges\": [\"Ġ nosuchtoken\", ", &tok), REMAT_EFORMAT,
             "model.merges[0]: 'nosuchtoken' is not in model.vocab");
    RT_FAILS(load_edited("\"merges\": [", "\"merges\": [\"a b c\", ", &tok), REMAT_EFORMAT,
             "model.merges");
    RT_FAILS(load_edited("\"post_processor\": {",
                         "\"post_processor\": {\"type\": \"BertProcessing\"}, \"unused\": {", &tok),
             REMAT_EUNSUPPORTED, "post_processor 'BertProcessing'");
    RT_FAILS(load_edited("\"vocab\": {", "\"vocab\": {\"bad\": -1, ", &tok), REMAT_EFORMAT,
             "model.vocab");
    /* a huge id would size the dense id tables in gigabytes (found by fuzz_tokenizer) */
    RT_FAILS(load_edited("\"vocab\": {", "\"vocab\": {\"huge\": 400000000, ", &tok), REMAT_EFORMAT,
             "token id 400000000 is far beyond");
    cr_assert_null(tok);
    /* a Split regex: one that does not compile, one Oniguruma reads differently */
    remat_tokenizer *t2;
    RT_OK(remat_tokenizer_load(TOK_DIR "/split_prev.json", &t2));
    remat_tokenizer_free(t2);
    size_t n;
    char *json = slurp(TOK_DIR "/split_prev.json", &n);
    char *at = strstr(json, "\\\\s+");
    cr_assert(at);
    memcpy(at, "(\\\\s", 4);
    RT_FAILS(remat_tokenizer_load_json(json, n, "re.json", &t2), REMAT_EFORMAT,
             "re.json: pre_tokenizer.pretokenizers[0].pattern");
    memcpy(at, "\\\\h+", 4);
    RT_FAILS(remat_tokenizer_load_json(json, n, "re.json", &t2), REMAT_EUNSUPPORTED, "\\h");
    free(json);
}

/* The UTF-8 replacement encode and decode share: Python's errors="replace". */
Test(tokenizer, utf8_replacement_is_maximal_subparts) {
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"ok", "ok"},
        {"\xC3\xA9", "\xC3\xA9"},
        {"\xC3", "\xEF\xBF\xBD"},
        {"\xE2\x82", "\xEF\xBF\xBD"}, /* one truncated sequence: one U+FFFD */
        {"\xE0\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* overlong: each byte */
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
        {"\xF0\x9F\x98x", "\xEF\xBF\xBDx"},
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xFF\xC3\xA9\xA9", "\xEF\xBF\xBD\xC3\xA9\xEF\xBF\xBD"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out = NULL;
        size_t len = 0, cap = 0;
        cr_assert(rm_utf8_lossy((const unsigned char *)cases[i].in, strlen(cases[i].in), &out, &len,
                                &cap));
        cr_assert(len == strlen(cases[i].out) && !memcmp(out, cases[i].out, len), "case %zu", i);
        free(out);
    }
}
