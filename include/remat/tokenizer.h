/*
 * remat/tokenizer.h — byte-level BPE tokenizers read from a Hugging Face
 * tokenizer.json (GPT-2, Llama 3 and the many models built the same way).
 *
 * Encoding and decoding give exactly the ids and the text of the Python
 * `tokenizers` package (Tokenizer.encode(text).ids and
 * Tokenizer.decode(ids)); tests/test_tokenizer.c checks this against
 * fixtures the package wrote (scripts/gen_tokenizer_fixtures.py).
 *
 *   remat_tokenizer *tok;
 *   if (remat_tokenizer_load("model/tokenizer.json", &tok)) die(remat_last_error());
 *   uint32_t *ids; size_t n;
 *   remat_tokenizer_encode(tok, "Hello world", 11, true, &ids, &n);
 *   char *text; size_t len;
 *   remat_tokenizer_decode(tok, ids, n, true, &text, &len);   // "Hello world"
 *   free(ids); free(text); remat_tokenizer_free(tok);
 *
 * What a tokenizer.json may hold (anything else is refused at load with
 * REMAT_EUNSUPPORTED and a message naming the key and the value):
 *   model           "BPE": vocab, merges ("a b" strings or [a, b] pairs),
 *                   ignore_merges, unk_token, fuse_unk, byte_fallback,
 *                   continuing_subword_prefix, end_of_word_suffix; dropout
 *                   null or 0. SentencePiece models (Unigram) and WordPiece
 *                   may come later.
 *   normalizer      null.
 *   pre_tokenizer   null, ByteLevel (add_prefix_space, use_regex: GPT-2's
 *                   regex), Split (pattern Regex or String, every behavior,
 *                   invert), or a Sequence of these with ByteLevel last
 *                   (Llama 3: Split(Regex, Isolated) + ByteLevel(use_regex
 *                   false)).
 *   added_tokens    special and added tokens, matched in the text before
 *                   pre-tokenization as `tokenizers` matches them (leftmost
 *                   longest; single_word, lstrip, rstrip; the tokens with
 *                   normalized false first); ids assigned as `tokenizers`
 *                   assigns them when it loads the file.
 *   post_processor  null, ByteLevel, TemplateProcessing (its "single"
 *                   template), or a Sequence of these.
 *   decoder         null or ByteLevel.
 *   truncation, padding   null.
 *
 * Regexes: the pattern a Split carries (and GPT-2's for ByteLevel) runs on
 * PCRE2 with UTF-8 and Unicode properties. `tokenizers` runs them on
 * Oniguruma; remat reads \s and \S as Oniguruma does (Unicode White_Space,
 * which PCRE2's \s is not for U+180E). The Unicode tables are PCRE2's: with
 * PCRE2 10.42 (Debian 12) that is Unicode 14, so characters assigned in
 * Unicode 15 and 16 (9,392 code points, e.g. CJK Extensions H and I) are
 * not letters to the regex and may split differently; every character of
 * Unicode 14 pre-tokenizes as `tokenizers` does (checked one by one).
 *
 * Text in: any bytes. Invalid UTF-8 is read as Python's
 * bytes.decode("utf-8", errors="replace") reads it (each maximal invalid
 * subsequence becomes U+FFFD), so remat's ids are those of
 * tokenizer.encode(data.decode("utf-8", "replace")).
 * Text out: decode returns valid UTF-8; byte sequences the tokens spell
 * that are not UTF-8 become U+FFFD as in `tokenizers` (Rust's
 * String::from_utf8_lossy). Unknown ids are skipped, as `tokenizers` does.
 *
 * A tokenizer is immutable once loaded: any number of threads may encode
 * and decode with it at once.
 */
#ifndef REMAT_TOKENIZER_H
#define REMAT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/error.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

typedef struct remat_tokenizer remat_tokenizer;

/* Reads the tokenizer.json at path. On failure *out is NULL and the message
 * names the file and the key: REMAT_EIO (cannot read), REMAT_EFORMAT (not
 * JSON, a missing or mistyped key, a merge naming a token that is not in the
 * vocabulary, a regex that does not compile), REMAT_EUNSUPPORTED (a
 * feature listed as unsupported above), REMAT_ENOMEM.
 * OUT: *out, free with remat_tokenizer_free. */
remat_status remat_tokenizer_load(const char *path, remat_tokenizer **out);

/* The same from the n bytes of a tokenizer.json already in memory; name
 * (may be NULL) is what messages call it. */
remat_status remat_tokenizer_load_json(const char *json, size_t n, const char *name,
                                       remat_tokenizer **out);

/* Frees a tokenizer; NULL is a no-op. */
void remat_tokenizer_free(remat_tokenizer *tok);

/* Encodes the n bytes at text (not NUL-terminated; see "Text in" above).
 * add_special_tokens: the post-processor's tokens (Llama 3's
 * <|begin_of_text|>) are added, as tokenizer.encode(text) does by default;
 * false gives encode(text, add_special_tokens=False). Special tokens written
 * in the text are always recognized.
 * OUT: *ids (malloc'd, free() it; NULL when *n_ids is 0) and *n_ids. On
 * failure *ids is NULL and *n_ids 0. */
remat_status remat_tokenizer_encode(const remat_tokenizer *tok, const void *text, size_t n,
                                    bool add_special_tokens, uint32_t **ids, size_t *n_ids);

/* Decodes n ids to text. skip_special_tokens leaves out the special tokens
 * (Python's decode default, true).
 * OUT: *text (malloc'd, NUL-terminated, valid UTF-8; free() it) and *len
 * (bytes before the NUL; may be NULL). On failure *text is NULL. */
remat_status remat_tokenizer_decode(const remat_tokenizer *tok, const uint32_t *ids, size_t n,
                                    bool skip_special_tokens, char **text, size_t *len);

/* One more than the largest id encode can return or decode knows (model
 * vocabulary and added tokens): the rows a model's embedding needs. */
uint32_t remat_tokenizer_vocab_size(const remat_tokenizer *tok);

/* The id of a token written as in tokenizer.json (byte-level form, e.g.
 * "Ġthe", or an added token's content). REMAT_EINVAL when there is none.
 * OUT: *id. */
remat_status remat_tokenizer_token_to_id(const remat_tokenizer *tok, const char *token,
                                         uint32_t *id);

/* The token of an id as tokenizer.json writes it (NUL-terminated, owned by
 * the tokenizer), or NULL when the id has none. */
const char *remat_tokenizer_id_to_token(const remat_tokenizer *tok, uint32_t id);

/* Whether id is a special token (one decode skips when asked to). */
bool remat_tokenizer_is_special(const remat_tokenizer *tok, uint32_t id);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_TOKENIZER_H */
