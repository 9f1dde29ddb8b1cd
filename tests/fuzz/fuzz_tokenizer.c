/* tests/fuzz/fuzz_tokenizer.c — libFuzzer target for tokenizer.json loading
 * and for encoding and decoding with what loads (remat/tokenizer.h), built
 * by `make fuzz` (clang, -fsanitize=fuzzer,address,undefined).
 *
 * The input is a tokenizer.json, a NUL byte, then a text (no NUL: all of it
 * is the JSON, and a fixed text is encoded). When the JSON loads, the text
 * (at most 4 KiB) is encoded with and without the post-processor's special
 * tokens; every id must be below the vocabulary size; the ids decode, with
 * and without the special tokens, to valid UTF-8; the text's bytes read as
 * ids (some past the vocabulary: decode skips unknown ids) decode too; and
 * every id's token maps back to an id. Any other outcome aborts.
 * Seeds: tests/fuzz/corpus/tokenizer (tests/fuzz/make_tokenizer_seeds.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/utf8.h"
#include "remat/remat.h"
#include "remat/tokenizer.h"

#define MAX_TEXT 4096

static void check_decode(const remat_tokenizer *tok, const uint32_t *ids, size_t n, bool skip) {
    char *text = NULL;
    size_t len = 0;
    if (remat_tokenizer_decode(tok, ids, n, skip, &text, &len) != REMAT_OK) {
        if (text) abort(); /* *text is NULL on failure */
        return;
    }
    if (!text || text[len] != '\0' || rm_utf8_valid_prefix(text, len) != len) abort();
    free(text);
}

static void encode(const remat_tokenizer *tok, const uint8_t *text, size_t n, bool special) {
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    if (remat_tokenizer_encode(tok, text, n, special, &ids, &n_ids) != REMAT_OK) {
        if (ids || n_ids) abort();
        return;
    }
    uint32_t vocab = remat_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= vocab) abort();
    check_decode(tok, ids, n_ids, true);
    check_decode(tok, ids, n_ids, false);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_n = nul ? (size_t)(nul - data) : size;
    static const char fixed[] =
        "Hello world! It's 2026: naïve café, 東京 \xF0\x9F\x98\x80 \xFF\r\n  x";
    const uint8_t *text = nul ? nul + 1 : (const uint8_t *)fixed;
    size_t text_n = nul ? size - json_n - 1 : sizeof fixed - 1;
    if (text_n > MAX_TEXT) text_n = MAX_TEXT;
    remat_tokenizer *tok = NULL;
    if (remat_tokenizer_load_json((const char *)data, json_n, "fuzz", &tok) != REMAT_OK) {
        if (tok) abort(); /* *out is NULL on failure */
        return 0;
    }
    encode(tok, text, text_n, true);
    encode(tok, text, text_n, false);
    /* the text's bytes as ids, past the vocabulary too */
    uint32_t vocab = remat_tokenizer_vocab_size(tok);
    uint32_t ids[256];
    size_t n = text_n < 256 ? text_n : 256;
    for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)text[i] * 7u % (vocab + 8u);
    check_decode(tok, ids, n, true);
    check_decode(tok, ids, n, false);
    /* every id with a token maps back to an id */
    for (uint32_t id = 0; id < vocab && id < 4096; id++) {
        const char *t = remat_tokenizer_id_to_token(tok, id);
        uint32_t back = 0;
        if (t && remat_tokenizer_token_to_id(tok, t, &back) != REMAT_OK) abort();
        (void)remat_tokenizer_is_special(tok, id);
    }
    remat_tokenizer_free(tok);
    return 0;
}
