/*
 * tests/test_heap_peak.c — the heap counters of bench/preload/heap_peak.c,
 * which compare.py preloads into remat and PyTorch alike.
 *
 * The library is dlopen'ed here rather than preloaded: its allocator entry
 * points are then called through dlsym, and each one's effect on the
 * counters is checked exactly (live bytes move by malloc_usable_size of the
 * block). tests/test_cli.c checks the preloaded use with `remat bench`.
 * Not in sanitizer builds, which do not build the library.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <string.h>

#ifdef REMAT_HEAP_PEAK_LIB
typedef struct heap_api {
    void *lib;
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    int64_t (*reset)(void);
    int64_t (*peak)(void);
    int64_t (*live)(void);
} heap_api;

static heap_api H;

/* object pointer from dlsym into a function pointer, without the ISO C cast */
#define SYM(field, name)                                                                           \
    do {                                                                                           \
        void *p_ = dlsym(H.lib, name);                                                             \
        cr_assert(p_, "%s not exported by %s", name, REMAT_HEAP_PEAK_LIB);                         \
        memcpy(&H.field, &p_, sizeof p_);                                                          \
    } while (0)

static void setup(void) {
    H.lib = dlopen(REMAT_HEAP_PEAK_LIB, RTLD_NOW | RTLD_LOCAL);
    cr_assert(H.lib, "dlopen %s: %s", REMAT_HEAP_PEAK_LIB, dlerror());
    SYM(malloc, "malloc");
    SYM(free, "free");
    SYM(calloc, "calloc");
    SYM(realloc, "realloc");
    SYM(reallocarray, "reallocarray");
    SYM(posix_memalign, "posix_memalign");
    SYM(aligned_alloc, "aligned_alloc");
    SYM(reset, "remat_heap_peak_reset");
    SYM(peak, "remat_heap_peak_bytes");
    SYM(live, "remat_heap_live_bytes");
}
static void teardown(void) { dlclose(H.lib); }

TestSuite(heap_peak, .init = setup, .fini = teardown);

static int64_t usable(void *p) { return (int64_t)malloc_usable_size(p); }

Test(heap_peak, counts_every_allocation_call_exactly) {
    int64_t base = H.live();
    void *a = H.malloc(1000);
    cr_assert(a);
    cr_assert_eq(H.live(), base + usable(a));
    void *b = H.calloc(10, 300);
    cr_assert(b);
    cr_assert_eq(((unsigned char *)b)[2999], 0);
    cr_assert_eq(H.live(), base + usable(a) + usable(b));
    void *c = NULL;
    cr_assert_eq(H.posix_memalign(&c, 4096, 5000), 0);
    cr_assert_eq((uintptr_t)c % 4096, 0);
    void *d = H.aligned_alloc(64, 640);
    cr_assert(d && (uintptr_t)d % 64 == 0);
    cr_assert_eq(H.live(), base + usable(a) + usable(b) + usable(c) + usable(d));
    H.free(a);
    H.free(b);
    H.free(c);
    H.free(d);
    H.free(NULL); /* a no-op, as free(NULL) */
    cr_assert_eq(H.live(), base);
}

Test(heap_peak, realloc_moves_the_count_and_failures_change_nothing) {
    int64_t base = H.live();
    char *p = H.realloc(NULL, 100); /* = malloc */
    cr_assert(p);
    memset(p, 7, 100);
    cr_assert_eq(H.live(), base + usable(p));
    p = H.realloc(p, 1 << 20);
    cr_assert(p);
    cr_assert_eq(p[99], 7, "realloc kept the contents");
    cr_assert_eq(H.live(), base + usable(p));
    /* an impossible size: NULL, errno ENOMEM, the block and its count untouched */
    errno = 0;
    cr_assert_null(H.reallocarray(p, SIZE_MAX / 2, 4));
    cr_assert_eq(errno, ENOMEM);
    cr_assert_eq(H.live(), base + usable(p));
    cr_assert_null(H.realloc(p, 0)); /* glibc: frees */
    cr_assert_eq(H.live(), base);
    void *q = NULL;
    cr_assert_eq(H.posix_memalign(&q, 3, 16), EINVAL, "alignment not a power of two");
    cr_assert_null(q);
    cr_assert_eq(H.live(), base);
}

Test(heap_peak, peak_starts_at_reset_and_holds_the_maximum) {
    int64_t base = H.reset();
    cr_assert_eq(base, H.live());
    cr_assert_eq(H.peak(), base);
    void *big = H.malloc(1 << 20), *small = H.malloc(64);
    cr_assert(big && small);
    int64_t nbig = usable(big), nsmall = usable(small);
    H.free(big);
    cr_assert_eq(H.peak(), base + nbig + nsmall, "the peak stays after frees");
    cr_assert_eq(H.reset(), base + nsmall);
    cr_assert_eq(H.peak(), base + nsmall, "a reset starts the peak at the live bytes");
    H.free(small);
    cr_assert_eq(H.live(), base);
}
#else
Test(heap_peak, not_built) {
    cr_skip_test("built with sanitizers: bench/preload/heap_peak.c is not built");
}
#endif
