/*
 * tools/cli/util.h — small helpers shared by the remat program: clocks, memory
 * probes (RSS), a deterministic host-side RNG for data, number parsing,
 * medians, a growable string and JSON-escaping.
 */
#ifndef REMAT_TOOLS_UTIL_H
#define REMAT_TOOLS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "remat/device.h"

/* Monotonic clock in seconds. */
double util_now(void);
/* CPU seconds of the whole process, every thread (CLOCK_PROCESS_CPUTIME_ID): unlike
 * util_now, other processes' load hardly changes it. */
double util_cpu_now(void);

/* Peak resident set size of the process (getrusage ru_maxrss) in bytes. */
size_t util_peak_rss_bytes(void);
/* Current resident set size (/proc/self/statm) in bytes; 0 if unknown.
 * Cheap (keeps the file open and preads it). */
size_t util_current_rss_bytes(void);
/* The kernel's resident-memory high-water mark (VmHWM): reset sets it to the
 * current RSS (writes 5 to /proc/self/clear_refs, Linux >= 4.0; false where
 * that is not allowed). Read it with util_proc_status_kb("VmHWM"). Unlike
 * sampling, it cannot miss a short peak. */
bool util_reset_rss_hwm(void);
/* The value of a "Key:  123 kB" line of /proc/self/status (VmRSS, VmHWM,
 * ...) in kB; -1 if absent or unreadable. */
long util_proc_status_kb(const char *key);
/* The heap counters of bench/preload/heap_peak.c, when the process runs
 * with it preloaded (LD_PRELOAD=build/libremat_heap_peak.so): every byte
 * malloc hands out, whoever asks (remat, oneDNN, libc). Reset starts a new
 * peak at the bytes live now and stores them in *live; it returns false,
 * changing nothing, when the library is not loaded. util_heap_peak_bytes is
 * the peak since the last reset (-1 without the library). */
bool util_heap_peak_reset(int64_t *live);
int64_t util_heap_peak_bytes(void);

/* splitmix64: the data RNG. Stateless use: util_mix(seed, a, b) hashes a
 * tuple into 64 well-mixed bits, so every batch is a pure function of
 * (seed, step, row) and resuming needs no data-RNG state. */
uint64_t util_splitmix64(uint64_t *state);
uint64_t util_mix(uint64_t seed, uint64_t a, uint64_t b);
/* Uniform double in [0, 1) and a standard normal from a splitmix state. */
double util_uniform(uint64_t *state);
double util_normal(uint64_t *state);

/* Strict parsers: the whole string must be consumed; range-checked.
 * Return false on any problem. */
bool util_parse_long(const char *s, long lo, long hi, long *out);
bool util_parse_double(const char *s, double *out);
/* Sizes: "1048576", "64K", "64KiB", "1.5M", "2GB" (K/M/G/T, powers of 1024). */
bool util_parse_size(const char *s, uint64_t *out);
/* "12.3 MiB" style text into buf. */
const char *util_fmt_bytes(double bytes, char *buf, size_t n);

/* Median of n values (copies and sorts; 0 for n == 0). */
double util_median(const double *v, int n);

/* A growable NUL-terminated string. */
typedef struct util_str {
    char *s;
    size_t len, cap;
    bool oom;
} util_str;
void util_str_printf(util_str *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void util_str_free(util_str *b);

/* Creates directory `path` (and parents); true if it exists afterwards. */
bool util_mkdir_p(const char *path);
/* Opens path read-only if it is a regular file (O_NONBLOCK for the open, so
 * a FIFO cannot block it, then cleared), close-on-exec. -1 otherwise, with
 * remat_set_error(REMAT_EIO, "FLAG PATH: why") (a directory, a FIFO, a
 * device, or the open's own error). */
int util_open_regular(const char *path, const char *flag);

/* Whether stream is a terminal. */
bool util_isatty(FILE *f);

/* ---- SIGINT / SIGTERM ------------------------------------------------------------------
 * The program blocks both in every thread from the start of main, before
 * any thread exists (threads inherit the mask), so no signal handler ever
 * runs on top of a kernel. `train` polls for them at step boundaries;
 * every other command, and train once it has stopped, gives them back to
 * the main thread with their default action (the process ends). */
#include <signal.h>
void stop_signal_set(sigset_t *set);
void stop_signals_block(void);
void stop_signals_default(void);

/* The allocator's peak / current tensor bytes of `device` (remat_alloc_stats_get;
 * 0 for a device that cannot be asked). */
size_t util_peak_bytes(remat_device device);
size_t util_current_bytes(remat_device device);

#endif /* REMAT_TOOLS_UTIL_H */
