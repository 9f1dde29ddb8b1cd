/* src/io/utf8.h — UTF-8 as the Unicode Standard defines it (Table 3-7: no
 * overlong forms, no surrogates, nothing past U+10FFFF), for every reader of
 * untrusted text: safetensors headers and names (src/weights), tokenizer.json
 * and the text a tokenizer encodes (src/text). */
#ifndef REMAT_IO_UTF8_H
#define REMAT_IO_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes of the well-formed character at s (1-4), or 0 when s[0..n) (n > 0)
 * does not start with one. */
size_t rm_utf8_char(const void *s, size_t n);
/* The length of the longest well-formed prefix of s[0..n): the offset of the
 * first byte that is not part of well-formed UTF-8, or n when all of it is. */
size_t rm_utf8_valid_prefix(const void *s, size_t n);
/* Appends s[0..n) to the NUL-terminated buffer *out (*len bytes used, *cap
 * allocated; realloc'd as needed) with every maximal ill-formed subsequence
 * replaced by U+FFFD, as Python's errors="replace" and Rust's
 * String::from_utf8_lossy do. false: out of memory (the buffer stays valid). */
bool rm_utf8_lossy(const void *s, size_t n, char **out, size_t *len, size_t *cap);

#endif
