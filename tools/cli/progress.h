/*
 * tools/cli/progress.h — the training progress bar: one line redrawn in place
 * that fits the terminal (never wraps: it stays below the last column).
 *
 *   [########............] 480/3000 loss 1.2345 12.3k tok/s ETA 1m23s | acc 51.2%
 *
 * When the line is narrow the parts go in this order: the evaluation, the
 * rate, the ETA, then the bar shrinks (5 cells at least) and goes; the step
 * and the loss stay (cut at the width if even they do not fit).
 */
#ifndef REMAT_TOOLS_PROGRESS_H
#define REMAT_TOOLS_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

/* The terminal's width: $COLUMNS when it is a number >= 10, else the
 * window size of fd (TIOCGWINSZ), else 80. */
int progress_columns(int fd);

/* "42s", "12m05s", "3h07m" ("?" for a negative or non-finite time). */
void progress_eta(double seconds, char *buf, size_t n);

/* The bar's line, without "\r" and clear-to-end, in at most cols - 1
 * characters. rate: "12.3k" (NULL: none) with unit "tok"; eta_s < 0: no
 * ETA; extra (NULL: none): the last evaluation. */
void progress_line(char *buf, size_t n, int cols, int64_t step, int64_t total, double loss,
                   const char *rate, const char *unit, double eta_s, const char *extra);

#endif /* REMAT_TOOLS_PROGRESS_H */
