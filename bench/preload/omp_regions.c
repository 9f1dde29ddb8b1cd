/*
 * bench/preload/omp_regions.c — an LD_PRELOAD library that counts the OpenMP
 * parallel regions a program opens (libgomp's GOMP_parallel entry points),
 * by the code that opens them, and writes the counts when the program exits.
 *
 * Why: with OMP_WAIT_POLICY=passive (the remat program's default, see
 * tools/cli/main.c) a thread sleeps as soon as its region ends, and the next
 * region has to wake it: about 45 us per region on the 2-vCPU machines
 * (against 1-3 us when the threads spin), so on a short step the number of
 * regions costs as much as the kernels in them. The count is exact and the
 * same every run, like callgrind's instruction counts: a before/after
 * measure that the noisy wall clock is not. (A region opened inside another
 * is counted too; libgomp runs it on the calling thread alone.)
 *
 * Use:
 *     REMAT_OMP_REGIONS=regions.txt LD_PRELOAD=build/libremat_omp_regions.so \
 *         ./build/remat bench ... --reps 2     (and again with --reps 8)
 * Each line of regions.txt: count, then the opener as file+0xoffset (its
 * address relative to the file's load address; `addr2line -f -e FILE
 * 0xoffset` names it) and, where the file exports it, the function's name.
 * The difference of two runs divided by the difference in reps is the count
 * per step. Without REMAT_OMP_REGIONS the totals go to stderr.
 *
 * glibc and libgomp only (GCC's OpenMP); with another runtime nothing is
 * counted. Thread-safe: openers are found under a mutex, counted atomically.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_OPENERS 4096

static void *g_addr[MAX_OPENERS];
static unsigned long g_count[MAX_OPENERS];
static int g_n;
static unsigned long g_lost; /* regions of openers past MAX_OPENERS */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void count(void *opener) {
    int i;
    pthread_mutex_lock(&g_mu);
    for (i = 0; i < g_n && g_addr[i] != opener; i++) {}
    if (i == g_n && g_n < MAX_OPENERS) g_addr[g_n++] = opener;
    pthread_mutex_unlock(&g_mu);
    if (i < MAX_OPENERS) __atomic_fetch_add(&g_count[i], 1, __ATOMIC_RELAXED);
    else __atomic_fetch_add(&g_lost, 1, __ATOMIC_RELAXED);
}

/* The real entry point, looked up once (dlsym is thread-safe). */
#define REAL(name) ((name##_fn)real_of(#name))
static void *real_of(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "omp_regions: %s not found in the next library\n", name);
        abort(); /* a preload tool, not the library: nothing sensible to return */
    }
    return f;
}

typedef void (*GOMP_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
void GOMP_parallel(void (*fn)(void *), void *data, unsigned nthreads, unsigned flags) {
    static GOMP_parallel_fn real;
    if (!real) real = REAL(GOMP_parallel);
    count(__builtin_return_address(0));
    real(fn, data, nthreads, flags);
}

/* `parallel for` with a dynamic, guided or runtime schedule */
typedef void (*GOMP_parallel_loop_fn)(void (*)(void *), void *, unsigned, long, long, long, long,
                                      unsigned);
#define LOOP_ENTRY(name)                                                                           \
    void name(void (*fn)(void *), void *data, unsigned nthreads, long start, long end, long incr,  \
              long chunk, unsigned flags) {                                                        \
        static GOMP_parallel_loop_fn real;                                                         \
        if (!real) real = (GOMP_parallel_loop_fn)real_of(#name);                                   \
        count(__builtin_return_address(0));                                                        \
        real(fn, data, nthreads, start, end, incr, chunk, flags);                                  \
    }
LOOP_ENTRY(GOMP_parallel_loop_static)
LOOP_ENTRY(GOMP_parallel_loop_dynamic)
LOOP_ENTRY(GOMP_parallel_loop_guided)
LOOP_ENTRY(GOMP_parallel_loop_nonmonotonic_dynamic)
LOOP_ENTRY(GOMP_parallel_loop_nonmonotonic_guided)

typedef void (*GOMP_parallel_loop_runtime_fn)(void (*)(void *), void *, unsigned, long, long, long,
                                              unsigned);
void GOMP_parallel_loop_runtime(void (*fn)(void *), void *data, unsigned nthreads, long start,
                                long end, long incr, unsigned flags) {
    static GOMP_parallel_loop_runtime_fn real;
    if (!real) real = REAL(GOMP_parallel_loop_runtime);
    count(__builtin_return_address(0));
    real(fn, data, nthreads, start, end, incr, flags);
}

typedef void (*GOMP_parallel_sections_fn)(void (*)(void *), void *, unsigned, unsigned, unsigned);
void GOMP_parallel_sections(void (*fn)(void *), void *data, unsigned nthreads, unsigned count_,
                            unsigned flags) {
    static GOMP_parallel_sections_fn real;
    if (!real) real = REAL(GOMP_parallel_sections);
    count(__builtin_return_address(0));
    real(fn, data, nthreads, count_, flags);
}

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("REMAT_OMP_REGIONS");
    FILE *o = path ? fopen(path, "w") : stderr;
    if (!o) return;
    unsigned long total = g_lost;
    for (int i = 0; i < g_n; i++) {
        Dl_info d = {0};
        total += g_count[i];
        if (!dladdr(g_addr[i], &d) || !d.dli_fname) {
            fprintf(o, "%lu ? %p\n", g_count[i], g_addr[i]);
            continue;
        }
        fprintf(o, "%lu %s+0x%lx %s\n", g_count[i], d.dli_fname,
                (unsigned long)((char *)g_addr[i] - (char *)d.dli_fbase),
                d.dli_sname ? d.dli_sname : "-");
    }
    if (g_lost) fprintf(o, "%lu (openers past %d)\n", g_lost, MAX_OPENERS);
    fprintf(o, "%lu total\n", total);
    if (path) fclose(o);
}
