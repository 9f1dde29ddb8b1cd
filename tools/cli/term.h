/*
 * tools/cli/term.h — the program's text lines fit the terminal: a line longer
 * than the terminal less one column is broken at spaces, its continuation
 * indented under the line's value ("label     value ...") or two columns in,
 * so nothing wraps at the terminal's edge (60 columns included). Output to
 * a file or a pipe keeps whole lines unless $COLUMNS says otherwise.
 */
#ifndef REMAT_TOOLS_TERM_H
#define REMAT_TOOLS_TERM_H

#include <stdio.h>

/* $COLUMNS when it is a number >= 10, else 0. */
int term_env_columns(void);
/* The window width of the terminal fd (TIOCGWINSZ), else 0. */
int term_fd_columns(int fd);
/* The width to fit f's lines to: $COLUMNS when it is a number >= 10, else
 * the terminal's width when f is one, else 0 (no limit). */
int term_columns(FILE *f);

/* Writes text (lines separated by '\n'; a last one without '\n' gets one)
 * to f, each line broken to at most cols - 1 columns (cols <= 0: as is).
 * Columns count UTF-8 characters. */
void term_puts(FILE *f, int cols, const char *text);

/* term_puts of the formatted text, at term_columns(f). */
void term_printf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A memory stream for a library printer (remat_plan_print) whose lines
 * should fit too: term_buf_open returns the stream to print into (`out`
 * itself when none can be opened), term_buf_close writes what was printed
 * to `out` with term_puts and frees the buffer. */
typedef struct term_buf {
    FILE *f;
    char *s;
    size_t n;
} term_buf;
FILE *term_buf_open(term_buf *b, FILE *out);
void term_buf_close(term_buf *b, FILE *out);

#endif /* REMAT_TOOLS_TERM_H */
