/* src/backends/cpu/gemm.c — the cpu backend's GEMM layer: row-major sgemm/dgemm over the
 * BLAS chosen at build time, plus the built-in cache-blocked kernel that
 * serves as the "naive" backend, as oneDNN's missing dgemm, and as the
 * fallback for anything a backend cannot take (see gemm.h). */
#include "gemm.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(REMAT_GEMM_OPENBLAS)
#include <cblas.h>
#elif defined(REMAT_GEMM_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#endif

const char *remat_gemm_backend(void) {
#if defined(REMAT_GEMM_OPENBLAS)
    return "openblas";
#elif defined(REMAT_GEMM_ONEDNN)
    return "onednn";
#else
    return "naive";
#endif
}

/* ---- the built-in kernel ---------------------------------------------------------------
 * Blocking: B is packed KC×NC at a time into a contiguous row-major panel
 * (transposing it if tb) that stays in L2; each thread takes blocks of MR
 * rows of A, packs them (transposing if ta, alpha folded in) and runs an
 * MR×NR register tile over the panel: per k, one vector load of B feeds MR
 * FMAs. NR is one 64-byte vector of T, so the tile is 4 accumulators with
 * AVX-512 and 8 with AVX2. Plain C: gcc/clang -O3 keep `acc` in registers
 * and vectorise the jj loop. */
#define RM_KC 256
#define RM_NC 256
#define RM_MR 4

static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* gcc in ISO C mode (-std=c11) does not contract a*b+c into an FMA, which
 * halves the kernel's peak; ask for fma() explicitly where the target has
 * the instruction (a libm call otherwise would be far slower than mul+add). */
#if defined(__FMA__)
#define RM_FMA_float(a, b, c) fmaf((a), (b), (c))
#define RM_FMA_double(a, b, c) fma((a), (b), (c))
#else
#define RM_FMA_float(a, b, c) ((a) * (b) + (c))
#define RM_FMA_double(a, b, c) ((a) * (b) + (c))
#endif

/* ---- the reference GEMM, once per dtype: gemm_body.h ----------------------------------- */
#define T float
#define GEMM_NAME rm_sgemm_ref
#define GEMM_NR 16
#define GEMM_FMA RM_FMA_float
#include "gemm_body.h"

#define T double
#define GEMM_NAME rm_dgemm_ref
#define GEMM_NR 8
#define GEMM_FMA RM_FMA_double
#include "gemm_body.h"

/* ---- backend dispatch ------------------------------------------------------------------ */

/* BLAS wants every leading dimension ≥ max(1, columns stored) even where a
 * matrix has a single row and the value is never used; callers of the
 * batched matmul may hand in anything there, so fix it up. */
static int64_t fix_ld(int64_t rows, int64_t cols, int64_t ld) {
    int64_t need = cols > 1 ? cols : 1;
    if (rows <= 1 && ld < need) return need;
    return ld < 1 ? 1 : ld;
}

static _Atomic int g_threading = RM_GEMM_THREADS_OMP;

void rm_gemm_set_threading(int mode) { atomic_store(&g_threading, mode); }
int rm_gemm_threading(void) { return atomic_load(&g_threading); }

#if defined(REMAT_GEMM_OPENBLAS)
/* Threads. Debian's OpenBLAS is the pthread build: a pool of its own next
 * to OpenMP's. Two pools on the same cores get in each other's way:
 * libgomp's workers spin for a while after every parallel region, and
 * OpenBLAS's after every call, so a GEMM right after an elementwise kernel
 * (and the reverse) starts with part of its cores taken. Two modes:
 *  - RM_GEMM_THREADS_OMP (default): OpenBLAS runs single-threaded and a
 *    large GEMM is cut into row (or column) panels over an OpenMP team of
 *    omp_get_max_threads(), one cblas call per panel: one pool for all of
 *    remat. From inside a parallel region the call just runs in the calling
 *    thread (a single-threaded OpenBLAS call is reentrant).
 *  - RM_GEMM_THREADS_NATIVE: OpenBLAS's own pool, kept at
 *    omp_get_max_threads() threads (re-set when that changes); from inside a parallel region the built-in kernel runs
 *    instead, since the pool cannot be entered by several threads at once.
 *
 * openblas_get_num_threads() reads a global, so comparing first costs
 * nothing, and a count someone else set (a benchmark calling OpenBLAS
 * directly) is noticed. */
static void blas_set_threads(int want) {
    if (openblas_get_num_threads() != want) openblas_set_num_threads(want);
}

static inline bool in_parallel(void) {
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return false;
#endif
}

static inline int max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static bool blas_int_ok(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
    return M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
           ldc <= INT_MAX;
}

/* Panel edges: D split in n parts, inner edges on multiples of 16 when the
 * parts are large enough (keeps C's panels on whole cache lines). */
static int64_t panel_edge(int64_t D, int t, int n) {
    if (t <= 0) return 0;
    if (t >= n) return D;
    int64_t e = D * t / n;
    return D >= 64 * (int64_t)n ? e / 16 * 16 : e;
}

/* Below this many multiply-adds (about 100^3, ~20 us on one core) a GEMM
 * runs on one thread: the fork/join and the thinner panels would cost about
 * what the other cores bring. */
#define RM_GEMM_SPLIT_MIN (1 << 20)

static void omp_ids(int *n, int *t) {
#ifdef _OPENMP
    *n = omp_get_num_threads();
    *t = omp_get_thread_num();
#else
    (void)n;
    (void)t;
#endif
}
#endif

/* ---- the entry points, once per dtype: gemm_dispatch_body.h ---------------------------- */
#define T float
#define GEMM_NAME rm_sgemm
#define GEMM_REF rm_sgemm_ref
#define GEMM_CBLAS cblas_sgemm
#if defined(REMAT_GEMM_ONEDNN)
#define GEMM_DNNL 1
#endif
#include "gemm_dispatch_body.h"

#define T double
#define GEMM_NAME rm_dgemm
#define GEMM_REF rm_dgemm_ref
#define GEMM_CBLAS cblas_dgemm /* (no dgemm in oneDNN) */
#include "gemm_dispatch_body.h"
