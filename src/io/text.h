/* src/io/text.h — text built up with printf, for the reports that print
 * into a string: the checkpoint debug trace (src/checkpoint/debug_trace.c) and
 * the residual report (src/sac/report.c). */
#ifndef REMAT_IO_TEXT_H
#define REMAT_IO_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Either a growing buffer (grow: s is malloc'd and enlarged as needed; the
 * caller frees s, even after oom) or the caller's fixed one (s, cap: what
 * does not fit is cut off, as snprintf). Start with {0} plus .grow = true,
 * or {.s = buf, .cap = n}. */
typedef struct rm_text {
    char *s;    /* NUL-terminated while there is room (NULL: nothing yet, growing) */
    size_t cap; /* bytes at s */
    size_t len; /* bytes of the whole text: more than fits when a fixed s cut it off */
    bool grow;
    bool oom; /* a growth failed: later printfs are dropped, the text is incomplete */
} rm_text;

/* Appends printf(fmt, ...) to the text. Never fails: see oom. */
void rm_text_printf(rm_text *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
