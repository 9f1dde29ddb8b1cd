/* src/io/text.c — text built up with printf (see text.h). */
#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void rm_text_printf(rm_text *t, const char *fmt, ...) {
    if (t->oom) return;
    for (;;) {
        size_t room = t->cap > t->len ? t->cap - t->len : 0;
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(room ? t->s + t->len : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (!t->grow || (size_t)k < room) {
            t->len += (size_t)k;
            return;
        }
        size_t nc = t->cap ? t->cap * 2 : 4096;
        while (nc < t->len + (size_t)k + 1) nc *= 2;
        char *ns = realloc(t->s, nc);
        if (!ns) {
            t->oom = true;
            return;
        }
        t->s = ns;
        t->cap = nc;
    }
}
