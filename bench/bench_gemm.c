/* bench/bench_gemm.c — GFLOP/s of remat_matmul / remat_linear next to the
 * BLAS called directly (the ceiling: cblas_sgemm with OpenBLAS, dnnl_sgemm
 * with oneDNN) and the built-in kernel, with 1 and 2 threads.
 *
 * Each repetition times the ceiling and the remat call back to back, so
 * load from other processes hits both alike; the medians of REPS
 * repetitions are reported. remat's figures include allocating the output
 * (as a user sees it); linear includes the bias pass.
 *
 *   bench_gemm [reps]        (default 7; threads 1 and 2, or $BENCH_THREADS;
 *                             BENCH_NATIVE=1 adds OpenBLAS's own thread pool) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "ops/gemm.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(REMAT_GEMM_OPENBLAS)
#include <cblas.h>
#elif defined(REMAT_GEMM_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#endif

#define MAX_REPS 64

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define CHECK(expr)                                                                        \
    do {                                                                                   \
        int rc_ = (expr);                                                                  \
        if (rc_) {                                                                         \
            fprintf(stderr, "%s failed: %s\n", #expr, remat_last_error());                 \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

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
                (blasint)M, (blasint)N, (blasint)K, 1.0f, A, (blasint)lda, B, (blasint)ldb, beta,
                C, (blasint)ldc);
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

static void row(const char *what, int threads, const shape *s, double flops, double t_remat,
                double t_ceil) {
    char label[64];
    snprintf(label, sizeof label, "%s%s", what, g_mode);
    printf("| %-30s | %-15s | %d | %8.1f | %8.1f | %5.1f%% |\n", label, s->name, threads,
           flops / t_remat * 1e-9, flops / t_ceil * 1e-9, 100.0 * t_ceil / t_remat);
}

static void bench_shape(const shape *s, int threads, int reps) {
    int64_t B = s->batch, M = s->M, K = s->K, N = s->N;
    int64_t sa[3] = {B, M, K}, sb[3] = {B, K, N};
    int nd = B > 1 ? 3 : 2;
    const int64_t *pa = B > 1 ? sa : sa + 1, *pb = B > 1 ? sb : sb + 1;
    remat_tensor *a, *b, *w, *bias, *c;
    CHECK(remat_rand_uniform(&a, nd, pa, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&b, nd, pb, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&w, 2, (int64_t[]){N, K}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&bias, 1, &N, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_empty(&c, nd, (int64_t[]){B, M, N} + (B > 1 ? 0 : 1), REMAT_F32,
                      REMAT_DEVICE_CPU));
    const float *A = remat_data(a), *Bm = remat_data(b), *W = remat_data(w);
    float *C = remat_data(c);
    double flops = 2.0 * (double)(B * M * K * N);
    double tc[MAX_REPS], tm[MAX_REPS], tcl[MAX_REPS], tl[MAX_REPS], tr[MAX_REPS];
    double tcb[MAX_REPS], tlb[MAX_REPS], tca[MAX_REPS], tma[MAX_REPS];
    /* an OpenMP elementwise kernel (relu on a 2048x1024 tensor) right before
     * the GEMM, as in a network: shows what the other thread pool costs */
    remat_tensor *act;
    CHECK(remat_rand_uniform(&act, 2, (int64_t[]){2048, 1024}, -1, 1, REMAT_F32,
                             REMAT_DEVICE_CPU));
    bool do_ref = threads <= 2 && B * M * K * N <= (int64_t)1 << 31;
    /* linear fwd+bwd: x (B·M, K), W (N, K); needs grads of x and W */
    remat_tensor *x, *wl;
    CHECK(remat_rand_uniform(&x, 2, (int64_t[]){B * M, K}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&wl, 2, (int64_t[]){N, K}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    remat_tensor *dx, *dw;
    CHECK(remat_empty(&dx, 2, (int64_t[]){B * M, K}, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_empty(&dw, 2, (int64_t[]){N, K}, REMAT_F32, REMAT_DEVICE_CPU));
    remat_tensor *gy;
    CHECK(remat_full(&gy, 2, (int64_t[]){B * M, N}, 1.0, REMAT_F32, REMAT_DEVICE_CPU));
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        double t0 = now();
        for (int64_t i = 0; i < B; i++)
            blas_sgemm(false, false, M, N, K, A + i * M * K, K, Bm + i * K * N, N, 0.0f,
                       C + i * M * N, N);
        double t1 = now();
        remat_tensor *y;
        CHECK(remat_matmul(&y, a, b));
        double t2 = now();
        remat_release(y);
        /* linear: the ceiling is the NT GEMM on the flattened x */
        double t3 = now();
        blas_sgemm(false, true, B * M, N, K, A, K, W, K, 0.0f, C, N);
        double t4 = now();
        CHECK(remat_linear(&y, a, w, bias));
        double t5 = now();
        remat_release(y);
        double t6 = now(), t7 = t6;
        if (do_ref) {
            for (int64_t i = 0; i < B; i++)
                rm_sgemm_ref(false, false, M, N, K, 1.0f, A + i * M * K, K, Bm + i * K * N, N,
                             0.0f, C + i * M * N, N);
            t7 = now();
        }
        /* linear forward + backward (3 GEMMs) vs the 3 GEMMs called directly */
        double t8 = now();
        blas_sgemm(false, true, B * M, N, K, remat_data(x), K, remat_data(wl), K, 0.0f, C, N);
        blas_sgemm(false, false, B * M, K, N, remat_data(gy), N, remat_data(wl), K, 0.0f,
                   remat_data(dx), K);
        blas_sgemm(true, false, N, K, B * M, remat_data(gy), N, remat_data(x), K, 0.0f,
                   remat_data(dw), K);
        double t9 = now();
        remat_set_requires_grad(x, true);
        remat_set_requires_grad(wl, true);
        CHECK(remat_linear(&y, x, wl, NULL));
        remat_tensor *xg = NULL, *wg = NULL;
        remat_tensor *ins[2] = {x, wl}, *gr[2];
        CHECK(remat_grad(1, &y, &gy, 2, ins, false, false, gr));
        double t10 = now();
        xg = gr[0];
        wg = gr[1];
        remat_release(xg);
        remat_release(wg);
        remat_release(y);
        remat_set_requires_grad(x, false);
        remat_set_requires_grad(wl, false);
        remat_tensor *ra;
        CHECK(remat_relu(&ra, act));
        remat_release(ra);
        double t11 = now();
        for (int64_t i = 0; i < B; i++)
            blas_sgemm(false, false, M, N, K, A + i * M * K, K, Bm + i * K * N, N, 0.0f,
                       C + i * M * N, N);
        double t12 = now();
        CHECK(remat_relu(&ra, act));
        remat_release(ra);
        double t13 = now();
        CHECK(remat_matmul(&y, a, b));
        double t14 = now();
        remat_release(y);
        if (r >= 0) {
            tca[r] = t12 - t11;
            tma[r] = t14 - t13;
            tc[r] = t1 - t0;
            tm[r] = t2 - t1;
            tcl[r] = t4 - t3;
            tl[r] = t5 - t4;
            tr[r] = t7 - t6;
            tcb[r] = t9 - t8;
            tlb[r] = t10 - t9;
        }
    }
    double mc = median(tc, reps), mm = median(tm, reps), mcl = median(tcl, reps);
    double ml = median(tl, reps), mcb = median(tcb, reps), mlb = median(tlb, reps);
    row("remat_matmul", threads, s, flops, mm, mc);
    row("remat_linear (+bias)", threads, s, flops, ml, mcl);
    row("linear fwd+bwd", threads, s, 3 * flops, mlb, mcb);
    row("matmul after relu", threads, s, flops, median(tma, reps), median(tca, reps));
    if (do_ref) {
        double mr = median(tr, reps);
        printf("| %-30s | %-15s | %d | %8.1f | %8.1f | %5.1f%% |\n", "built-in kernel", s->name,
               threads, flops / mr * 1e-9, flops / mc * 1e-9, 100.0 * mc / mr);
    }
    fflush(stdout);
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
    };
    remat_manual_seed(1);
    printf("backend: %s, ceiling: %s, median of %d runs; shapes are [batch x] M x K x N\n\n",
           remat_gemm_backend(), blas_name(), reps);
    printf("| %-30s | %-15s | T | GFLOP/s  | ceiling  | remat/ceiling |\n", "op", "shape");
    printf("|--------------------------------|-----------------|---|----------|----------|--------|\n");
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
