/* tools/cli/util.c — see util.h. */
#include "util.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "remat/remat.h"

double util_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double util_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

size_t util_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

size_t util_current_rss_bytes(void) {
    /* Kept open: the memory observer calls this on every allocator event. */
    static int fd = -2;
    static long page = 0;
    if (fd == -2) {
        fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
        page = sysconf(_SC_PAGESIZE);
    }
    if (fd < 0) return 0;
    char buf[128];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = '\0';
    unsigned long size = 0, resident = 0;
    if (sscanf(buf, "%lu %lu", &size, &resident) != 2) return 0;
    return (size_t)resident * (size_t)page;
}

bool util_reset_rss_hwm(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

long util_proc_status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            v = atol(line + n + 1);
            break;
        }
    fclose(f);
    return v;
}

/* the preloaded library's entry points, looked up once (NULL without it);
 * dlopen(NULL) searches the global scope, where LD_PRELOAD puts it */
typedef int64_t (*heap_fn)(void);
static heap_fn heap_sym(const char *name) {
    void *self = dlopen(NULL, RTLD_LAZY);
    if (!self) return NULL;
    void *f = dlsym(self, name);
    dlclose(self);
    heap_fn fn;
    memcpy(&fn, &f, sizeof fn); /* ISO C has no object-to-function pointer cast */
    return fn;
}
static heap_fn g_heap_reset, g_heap_peak;
static bool g_heap_looked;
static void heap_lookup(void) {
    if (g_heap_looked) return;
    g_heap_reset = heap_sym("remat_heap_peak_reset");
    g_heap_peak = heap_sym("remat_heap_peak_bytes");
    g_heap_looked = true;
}

bool util_heap_peak_reset(int64_t *live) {
    heap_lookup();
    if (!g_heap_reset || !g_heap_peak) return false;
    *live = g_heap_reset();
    return true;
}

int64_t util_heap_peak_bytes(void) {
    heap_lookup();
    return g_heap_peak ? g_heap_peak() : -1;
}

uint64_t util_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t util_mix(uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t s = seed;
    uint64_t h = util_splitmix64(&s);
    s = h ^ (a * 0xD6E8FEB86659FD93ull);
    h = util_splitmix64(&s);
    s = h ^ (b * 0xA0761D6478BD642Full);
    return util_splitmix64(&s);
}

double util_uniform(uint64_t *state) {
    return (double)(util_splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

double util_normal(uint64_t *state) {
    /* Box-Muller; u1 in (0, 1] keeps log finite. */
    double u1 = 1.0 - util_uniform(state);
    double u2 = util_uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

bool util_parse_long(const char *s, long lo, long hi, long *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return false;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool util_parse_double(const char *s, double *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !end || *end != '\0' || !isfinite(v)) return false;
    *out = v;
    return true;
}

bool util_parse_size(const char *s, uint64_t *out) {
    if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '.')) return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0) return false;
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'B':
        mult = 1;
        end++;
        break;
    case 'K':
        mult = 1024.0;
        end++;
        break;
    case 'M':
        mult = 1024.0 * 1024;
        end++;
        break;
    case 'G':
        mult = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 'T':
        mult = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default: return false;
    }
    if (mult > 1) {
        /* optional "i" then optional "B": K, KB, KiB */
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
    }
    if (*end != '\0') return false;
    double bytes = v * mult;
    if (bytes >= 1.8e19) return false;
    *out = (uint64_t)bytes;
    return true;
}

const char *util_fmt_bytes(double bytes, char *buf, size_t n) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = bytes < 0 ? -bytes : bytes;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (bytes < 0) v = -v;
    if (u == 0) snprintf(buf, n, "%.0f %s", v, units[u]);
    else snprintf(buf, n, "%.1f %s", v, units[u]);
    return buf;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double util_median(const double *v, int n) {
    if (n <= 0) return 0;
    double *c = malloc(sizeof(double) * (size_t)n);
    if (!c) return v[0];
    memcpy(c, v, sizeof(double) * (size_t)n);
    qsort(c, (size_t)n, sizeof(double), cmp_double);
    double m = (n % 2) ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

void util_str_printf(util_str *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        size_t avail = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int k = b->cap ? vsnprintf(b->s + b->len, avail, fmt, ap) : -1;
        va_end(ap);
        if (k >= 0 && (size_t)k < avail) {
            b->len += (size_t)k;
            return;
        }
        size_t need = b->len + (k > 0 ? (size_t)k : 0) + 1;
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < need) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

void util_str_free(util_str *b) {
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}

bool util_mkdir_p(const char *path) {
    char tmp[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp) return false;
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i < n; i++) {
        if (tmp[i] == '/') {
            tmp[i] = '\0';
            mkdir(tmp, 0777);
            tmp[i] = '/';
        }
    }
    mkdir(tmp, 0777);
    struct stat st;
    return stat(tmp, &st) == 0 && S_ISDIR(st.st_mode);
}

bool util_isatty(FILE *f) { return isatty(fileno(f)) == 1; }

int util_open_regular(const char *path, const char *flag) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        remat_set_error(REMAT_EIO, "%s %s: %s", flag, path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        remat_set_error(REMAT_EIO, "%s %s: %s", flag, path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        const char *what = S_ISDIR(st.st_mode)                          ? "a directory"
                           : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                           : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                           : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                        : "not a regular file";
        remat_set_error(REMAT_EIO, "%s %s: is %s; expected a regular file", flag, path, what);
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

void stop_signal_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
}

void stop_signals_block(void) {
    sigset_t set;
    stop_signal_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

void stop_signals_default(void) {
    sigset_t set;
    stop_signal_set(&set);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

size_t util_peak_bytes(remat_device device) {
    remat_alloc_stats st;
    return remat_alloc_stats_get(device, &st) == REMAT_OK ? st.peak_bytes : 0;
}

size_t util_current_bytes(remat_device device) {
    remat_alloc_stats st;
    return remat_alloc_stats_get(device, &st) == REMAT_OK ? st.current_bytes : 0;
}
