/* tools/cli/progress.c — the progress bar's line (progress.h). */
#include "progress.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "term.h"

#define BAR_MIN 5
#define BAR_MAX 30

int progress_columns(int fd) {
    int c = term_env_columns();
    if (!c) c = term_fd_columns(fd);
    return c ? c : 80;
}

void progress_eta(double seconds, char *buf, size_t n) {
    if (!(seconds >= 0) || !isfinite(seconds)) {
        snprintf(buf, n, "?");
        return;
    }
    long s = (long)(seconds + 0.5);
    if (s < 60) snprintf(buf, n, "%lds", s);
    else if (s < 3600) snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, n, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
}

void progress_line(char *buf, size_t n, int cols, int64_t step, int64_t total, double loss,
                   const char *rate, const char *unit, double eta_s, const char *extra) {
    char core[96], rate_part[48] = "", eta_part[40] = "", extra_part[128] = "";
    snprintf(core, sizeof core, "%" PRId64 "/%" PRId64 " loss %.4f", step, total, loss);
    if (rate) snprintf(rate_part, sizeof rate_part, " %s %s/s", rate, unit);
    if (eta_s >= 0) {
        char e[24];
        progress_eta(eta_s, e, sizeof e);
        snprintf(eta_part, sizeof eta_part, " ETA %s", e);
    }
    if (extra) snprintf(extra_part, sizeof extra_part, " | %s", extra);
    const int avail = cols - 1; /* the last column would wrap on some terminals */
    int len = (int)strlen(core);
    /* what fits beside a bar of BAR_MIN cells ("[" bar "] "), most wanted first */
    char *parts[3] = {eta_part, rate_part, extra_part};
    for (int i = 0; i < 3; i++) {
        int l = (int)strlen(parts[i]);
        if (len + l + BAR_MIN + 3 <= avail) len += l;
        else parts[i][0] = '\0';
    }
    int bar = avail - len - 3;
    if (bar > BAR_MAX) bar = BAR_MAX;
    char cells[BAR_MAX + 1] = "";
    if (bar >= BAR_MIN) {
        int fill = total > 0 ? (int)((double)bar * (double)step / (double)total) : bar;
        for (int i = 0; i < bar; i++) cells[i] = i < fill ? '#' : '.';
        cells[bar] = '\0';
    }
    char line[512];
    snprintf(line, sizeof line, "%s%s%s%s%s%s%s", bar >= BAR_MIN ? "[" : "", cells,
             bar >= BAR_MIN ? "] " : "", core, rate_part, eta_part, extra_part);
    if (avail >= 0 && (int)strlen(line) > avail) line[avail] = '\0';
    snprintf(buf, n, "%s", line);
}
