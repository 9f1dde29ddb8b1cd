/* bench/bench_util.h — what every benchmark program needs: a monotonic
 * clock (and CPU time), medians, and CHECK (print remat's error and exit on failure). */
#ifndef REMAT_BENCH_UTIL_H
#define REMAT_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remat/remat.h"

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                   \
                    remat_last_error());                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Seconds on clock c. */
static inline double clock_seconds(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
/* Seconds on the monotonic clock. */
static inline double now(void) { return clock_seconds(CLOCK_MONOTONIC); }
/* CPU seconds of the whole process (all threads). With one thread it is
 * immune to preemption by other processes, which wall time is not; with
 * more it also counts OpenMP threads spinning at barriers. */
static inline double cpu_now(void) { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

static inline int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts a copy; v is left as it was). */
static inline double median(const double *v, int n) {
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) exit(1);
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_d);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

#endif
