/* tools/cli/term.c — lines that fit the terminal (see term.h). */
#include "term.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

int term_env_columns(void) {
    const char *env = getenv("COLUMNS");
    if (!env || !*env) return 0;
    char *end = NULL;
    long v = strtol(env, &end, 10);
    return *end == '\0' && v >= 10 && v <= 100000 ? (int)v : 0;
}

int term_fd_columns(int fd) {
    struct winsize ws;
    return ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 10 ? ws.ws_col : 0;
}

int term_columns(FILE *f) {
    int c = term_env_columns();
    if (c) return c;
    int fd = fileno(f);
    if (fd < 0 || !isatty(fd)) return 0;
    c = term_fd_columns(fd);
    return c ? c : 80;
}

static bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

/* Columns of s[0, n): UTF-8 characters. */
static int columns(const char *s, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += !is_cont((unsigned char)s[i]);
    return c;
}

/* Bytes of the longest prefix of s[0, n) that is at most w columns. */
static size_t prefix_bytes(const char *s, size_t n, int w) {
    size_t i = 0;
    for (int c = 0; i < n; c++) {
        if (c == w) break;
        i++;
        while (i < n && is_cont((unsigned char)s[i])) i++;
    }
    return i;
}

/* Where continuation lines start: under the value of "label   value"
 * (a run of two or more spaces after the first word, within 24 columns),
 * else two columns past the line's own indent; at most half the width. */
static int hanging_indent(const char *s, size_t n, int w) {
    size_t lead = strspn(s, " ");
    int hang = (int)lead + 2;
    size_t i = lead;
    while (i < n && s[i] != ' ') i++;
    size_t gap = i;
    while (gap < n && s[gap] == ' ') gap++;
    if (gap - i >= 2 && gap < n && columns(s, gap) <= 24) hang = columns(s, gap);
    return hang > w / 2 ? w / 2 : hang;
}

static void put_line(FILE *f, int cols, const char *s, size_t n) {
    const int w = cols - 1; /* the last column stays free: no wrap */
    if (cols <= 0 || columns(s, n) <= w) {
        fwrite(s, 1, n, f);
        fputc('\n', f);
        return;
    }
    const int hang = hanging_indent(s, n, w);
    int room = w;
    bool first = true;
    size_t lead = strspn(s, " "); /* never broken inside the first line's indent */
    while (n > 0) {
        if (!first) {
            fprintf(f, "%*s", hang, "");
            room = w - hang;
        }
        size_t take = n;
        if (columns(s, n) > room) {
            size_t cut = prefix_bytes(s, n, room);
            /* the last space at or before the cut (a space right after it
             * counts: the prefix then ends a word) */
            size_t sp = cut;
            while (sp > 0 && s[sp] != ' ') sp--;
            take = sp > lead && s[sp] == ' ' ? sp : cut;
        }
        size_t end = take;
        while (end > 0 && s[end - 1] == ' ') end--;
        fwrite(s, 1, end, f);
        fputc('\n', f);
        s += take;
        n -= take;
        while (n > 0 && *s == ' ') s++, n--;
        first = false;
        lead = 0;
    }
}

void term_puts(FILE *f, int cols, const char *text) {
    while (*text) {
        size_t n = strcspn(text, "\n");
        put_line(f, cols, text, n);
        text += n;
        if (*text == '\n') text++;
    }
}

void term_printf(FILE *f, const char *fmt, ...) {
    char stack[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(stack, sizeof stack, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    char *s = stack;
    if ((size_t)n >= sizeof stack) {
        s = malloc((size_t)n + 1);
        if (!s) return;
        va_start(ap, fmt);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    term_puts(f, term_columns(f), s);
    if (s != stack) free(s);
}

FILE *term_buf_open(term_buf *b, FILE *out) {
    b->s = NULL;
    b->n = 0;
    b->f = open_memstream(&b->s, &b->n);
    return b->f ? b->f : out;
}

void term_buf_close(term_buf *b, FILE *out) {
    if (!b->f) return;
    fclose(b->f);
    b->f = NULL;
    if (b->s) term_puts(out, term_columns(out), b->s);
    free(b->s);
    b->s = NULL;
}
