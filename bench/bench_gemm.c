/* bench/bench_gemm.c — GFLOP/s of remat_matmul / remat_linear next to the
 * BLAS called directly (the ceiling: cblas_sgemm with OpenBLAS, dnnl_sgemm
 * with oneDNN) and the built-in kernel, with 1 and 2 threads.
 *
 * Each repetition times the ceiling and the remat call back to back, so
 * load from other processes hits both alike; the medians of REPS
 * repetitions are reported. remat's figures include allocating the output
 * (as a user sees it); linear includes the bias pass. With one thread the
 * last two columns divide by the thread's CPU time instead of wall time,
 * which leaves out time the thread was preempted (a shared machine).
 *
 *   bench_gemm [reps]        (default 7; threads 1 and 2, or $BENCH_THREADS;
 *                             BENCH_NATIVE=1 adds OpenBLAS's own thread pool) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/gemm.h"
#include "bench_util.h"
#include "internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(REMAT_GEMM_OPENBLAS)
#include <cblas.h>
#elif defined(REMAT_GEMM_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#endif

#define MAX_REPS 64

/* CPU time of the calling thread: with one thread it leaves out the time the
 * thread was preempted, so it gives the kernel's speed on a shared machine */
static double now_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The BLAS itself, row-major. */
static int g_threads = 1;

static void blas_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                       int64_t ldc) {
#if defined(REMAT_GEMM_OPENBLAS)
    /* OpenBLAS's own pool at the thread count of the run (remat may have
     * left it at one thread) */
    if (openblas_get_num_threads() != g_threads) openblas_set_num_threads(g_threads);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, 1.0f, A, (blasint)lda, B, (blasint)ldb, beta, C,
                (blasint)ldc);
#elif defined(REMAT_GEMM_ONEDNN)
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
#else
    rm_sgemm_ref(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
#endif
}

static const char *blas_name(void) {
#if defined(REMAT_GEMM_OPENBLAS)
    return "cblas_sgemm";
#elif defined(REMAT_GEMM_ONEDNN)
    return "dnnl_sgemm";
#else
    return "builtin";
#endif
}

typedef struct shape {
    const char *name;
    int64_t batch, M, K, N;
} shape;

static const char *g_mode = "";

/* one table row: remat's and the ceiling's median times, wall and (T = 1)
 * thread-CPU */
static void row(const char *what, int threads, const shape *s, double flops, double t_remat,
                double t_ceil, double c_remat, double c_ceil) {
    char label[64], cpu[48] = "      -  |       - ";
    snprintf(label, sizeof label, "%s%s", what, g_mode);
    if (threads == 1)
        snprintf(cpu, sizeof cpu, "%8.1f | %8.1f", flops / c_remat * 1e-9, flops / c_ceil * 1e-9);
    printf("| %-30s | %-15s | %d | %8.1f | %8.1f | %5.1f%% | %s |\n", label, s->name, threads,
           flops / t_remat * 1e-9, flops / t_ceil * 1e-9, 100.0 * t_ceil / t_remat, cpu);
}

enum { K_MM, K_LIN, K_BWD, K_AFTER, K_REF, K_N };

typedef struct timing {
    double w[2][MAX_REPS], c[2][MAX_REPS]; /* [0] remat, [1] ceiling */
} timing;

#define TIMED(tm, who, r, code)                                                                    \
    do {                                                                                           \
        double w0_ = now(), c0_ = now_cpu();                                                       \
        code;                                                                                      \
        double c1_ = now_cpu(), w1_ = now();                                                       \
        if ((r) >= 0) {                                                                            \
            (tm)->w[who][r] = w1_ - w0_;                                                           \
            (tm)->c[who][r] = c1_ - c0_;                                                           \
        }                                                                                          \
    } while (0)

static void bench_shape(const shape *s, int threads, int reps) {
    int64_t B = s->batch, M = s->M, K = s->K, N = s->N;
    int64_t sa[3] = {B, M, K}, sb[3] = {B, K, N}, sc[3] = {B, M, N};
    int nd = B > 1 ? 3 : 2, o = B > 1 ? 0 : 1;
    remat_tensor *a, *b, *w, *bias, *c, *x, *wl, *dx, *dw, *gy, *act;
    CHECK(remat_rand_uniform(&a, nd, sa + o, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&b, nd, sb + o, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&w, 2, (int64_t[]){N, K}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&bias, 1, &N, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_empty(&c, nd, sc + o, REMAT_F32, REMAT_DEVICE_CPU));
    /* linear fwd+bwd on x (B·M, K), W (N, K) */
    CHECK(remat_rand_uniform(&x, 2, (int64_t[]){B * M, K}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&wl, 2, (int64_t[]){N, K}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_empty(&dx, 2, (int64_t[]){B * M, K}, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_empty(&dw, 2, (int64_t[]){N, K}, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_full(&gy, 2, (int64_t[]){B * M, N}, 1.0, REMAT_F32, REMAT_DEVICE_CPU));
    /* an OpenMP elementwise kernel (relu on 2048x1024) right before a GEMM,
     * as in a network: shows what a second thread pool costs */
    CHECK(remat_rand_uniform(&act, 2, (int64_t[]){2048, 1024}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    const float *A = remat_data(a), *Bm = remat_data(b), *W = remat_data(w);
    float *C = remat_data(c);
    double flops = 2.0 * (double)(B * M * K * N);
    bool do_ref = B * M * K * N <= (int64_t)1 << 31;
    timing *t = calloc(K_N, sizeof *t);
    if (!t) exit(1);
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        remat_tensor *y, *ra;
        /* matmul vs the same GEMMs called directly */
        TIMED(&t[K_MM], 1, r,
              for (int64_t i = 0; i < B; i++)
                  blas_sgemm(false, false, M, N, K, A + i * M * K, K, Bm + i * K * N, N, 0.0f,
                             C + i * M * N, N));
        TIMED(&t[K_MM], 0, r, CHECK(remat_matmul(&y, a, b)));
        remat_release(y);
        /* linear (with bias) vs the NT GEMM on the flattened x */
        TIMED(&t[K_LIN], 1, r, blas_sgemm(false, true, B * M, N, K, A, K, W, K, 0.0f, C, N));
        TIMED(&t[K_LIN], 0, r, CHECK(remat_linear(&y, a, w, bias)));
        remat_release(y);
        /* linear forward + backward (3 GEMMs) vs the 3 GEMMs */
        TIMED(&t[K_BWD], 1, r, {
            blas_sgemm(false, true, B * M, N, K, remat_data(x), K, remat_data(wl), K, 0.0f, C, N);
            blas_sgemm(false, false, B * M, K, N, remat_data(gy), N, remat_data(wl), K, 0.0f,
                       remat_data(dx), K);
            blas_sgemm(true, false, N, K, B * M, remat_data(gy), N, remat_data(x), K, 0.0f,
                       remat_data(dw), K);
        });
        CHECK(remat_set_requires_grad(x, true));
        CHECK(remat_set_requires_grad(wl, true));
        remat_tensor *ins[2] = {x, wl}, *gr[2] = {NULL, NULL};
        TIMED(&t[K_BWD], 0, r, {
            CHECK(remat_linear(&y, x, wl, NULL));
            CHECK(remat_grad(1, &y, &gy, 2, ins, false, false, gr));
        });
        remat_release(gr[0]);
        remat_release(gr[1]);
        remat_release(y);
        CHECK(remat_set_requires_grad(x, false));
        CHECK(remat_set_requires_grad(wl, false));
        /* the same after an OpenMP kernel */
        CHECK(remat_relu(&ra, act));
        remat_release(ra);
        TIMED(&t[K_AFTER], 1, r,
              for (int64_t i = 0; i < B; i++)
                  blas_sgemm(false, false, M, N, K, A + i * M * K, K, Bm + i * K * N, N, 0.0f,
                             C + i * M * N, N));
        CHECK(remat_relu(&ra, act));
        remat_release(ra);
        TIMED(&t[K_AFTER], 0, r, CHECK(remat_matmul(&y, a, b)));
        remat_release(y);
        /* the built-in kernel vs the BLAS */
        if (do_ref) {
            TIMED(&t[K_REF], 0, r,
                  for (int64_t i = 0; i < B; i++)
                      rm_sgemm_ref(false, false, M, N, K, 1.0f, A + i * M * K, K, Bm + i * K * N, N,
                                   0.0f, C + i * M * N, N));
            t[K_REF].w[1][r < 0 ? 0 : r] = t[K_MM].w[1][r < 0 ? 0 : r];
            t[K_REF].c[1][r < 0 ? 0 : r] = t[K_MM].c[1][r < 0 ? 0 : r];
        }
    }
    static const char *names[K_N] = {"remat_matmul", "remat_linear (+bias)", "linear fwd+bwd",
                                     "matmul after relu", "built-in kernel"};
    for (int k = 0; k < K_N; k++) {
        if (k == K_REF && !do_ref) continue;
        double mul = k == K_BWD ? 3 : 1;
        row(names[k], threads, s, mul * flops, median(t[k].w[0], reps), median(t[k].w[1], reps),
            median(t[k].c[0], reps), median(t[k].c[1], reps));
    }
    fflush(stdout);
    free(t);
    remat_tensor *rl[] = {a, b, w, bias, c, x, wl, dx, dw, gy, act};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;
    int thr[2] = {1, 2}, nthr = 2;
    const char *env = getenv("BENCH_THREADS");
    if (env) {
        thr[0] = atoi(env);
        nthr = 1;
    }
    static const shape shapes[] = {
        {"2048x1024x1024", 1, 2048, 1024, 1024},
        {"256x1024x1024", 1, 256, 1024, 1024},
        {"8x256x384x384", 8, 256, 384, 384},
        {"64x64x64", 1, 64, 64, 64},
        /* the GPT of `remat train` (width 128, context 128, batch 16, 4
         * heads): the qkv linear, and the attention scores per head */
        {"2048x128x384", 1, 2048, 128, 384},
        {"64x128x32x128", 64, 128, 32, 128},
    };
    remat_manual_seed(1);
    printf("backend: %s, ceiling: %s, median of %d runs; shapes are [batch x] M x K x N\n\n",
           remat_gemm_backend(), blas_name(), reps);
    printf("| %-30s | %-15s | T | remat    | ceiling  | ratio  | remat    | ceiling  |\n", "", "");
    printf("| %-30s | %-15s |   | GFLOP/s  | GFLOP/s  |        | cpu-time | cpu-time |\n", "op",
           "shape");
    printf("|--------------------------------|-----------------|---|----------|----------|--------|"
           "----------|----------|\n");
#if defined(REMAT_GEMM_OPENBLAS)
    /* OpenBLAS: remat's default threading (one OpenMP team, single-threaded
     * OpenBLAS per panel) and OpenBLAS's own pool */
    static const int modes[] = {RM_GEMM_THREADS_OMP, RM_GEMM_THREADS_NATIVE};
    static const char *mode_names[] = {" [omp]", " [native]"};
    int nmodes = getenv("BENCH_NATIVE") ? 2 : 1;
#else
    static const int modes[] = {RM_GEMM_THREADS_OMP};
    static const char *mode_names[] = {""};
    int nmodes = 1;
#endif
    for (int ti = 0; ti < nthr; ti++) {
        g_threads = thr[ti];
#ifdef _OPENMP
        omp_set_num_threads(thr[ti]);
#endif
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int mi = 0; mi < nmodes; mi++) {
                rm_gemm_set_threading(modes[mi]);
                g_mode = mode_names[mi];
                bench_shape(&shapes[si], thr[ti], reps);
            }
    }
    return 0;
}
