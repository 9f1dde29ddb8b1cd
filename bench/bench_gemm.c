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
 * Then the bf16 (autocast) table at the GPT's linear shapes: see bench_bf16.
 *
 *   bench_gemm [reps]        (default 7; threads 1 and 2, or $BENCH_THREADS;
 *                             BENCH_NATIVE=1 adds OpenBLAS's own thread pool;
 *                             BENCH_BF16_ONLY=1: the bf16 table alone) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/gemm.h"
#include "bench_util.h"
#include "core/core.h"
#include "remat/autocast.h"

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

/* ---- bf16 (autocast) ------------------------------------------------------------------------ */
/* The GPT's linears at M = 2048 tokens (L=6 D=384 T=256 B=8: 2048 rows), forward
 * (y = x·Wᵀ + b), and the backward's dx = dy·W and dW = dyᵀ·x, each as f32 sgemm
 * (the same layout), oneDNN's bf16 matmul called directly (the ceiling: a primitive
 * made once), and remat's bf16 path: rm_bgemm_bias / rm_bgemm / rm_bgemm_f32 (dW
 * is f32 under autocast) and, forward, remat_linear under autocast (bf16 x, f32
 * weight and bias: the weight is rounded per call, the bias cast). "fill+beta=1" is
 * the forward as it ran before the bias went into the GEMM (the bias written into
 * every row of y, then rm_bgemm with beta = 1). Medians; one thread: the thread's
 * CPU time (preemption left out), two: wall time. */
#if defined(REMAT_GEMM_ONEDNN)
typedef struct lin_shape {
    const char *name;
    int64_t in, out;
} lin_shape;

enum { P_FWD, P_DX, P_DW, P_N };
static const char *const pass_names[P_N] = {"fwd x.W^T+b", "bwd dx=dy.W", "bwd dW=dy^T.x"};

static dnnl_engine_t g_eng;
static dnnl_stream_t g_strm;

/* A oneDNN matmul on given buffers, made once (library-owned scratchpad). */
typedef struct dmm {
    dnnl_primitive_t prim;
    dnnl_memory_t m[4]; /* src, weights, dst, bias */
    int nargs;
} dmm;

static bool dmm_make(dmm *d, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                     int64_t lda, const void *B, int64_t ldb, const void *bias, void *C,
                     int64_t ldc, bool cf32) {
    memset(d, 0, sizeof *d);
    if (!g_eng && (dnnl_engine_create(&g_eng, dnnl_cpu, 0) ||
                   dnnl_stream_create(&g_strm, g_eng, dnnl_stream_default_flags)))
        return false;
    dnnl_memory_desc_t md[4];
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N}, biasd = {1, N};
    dnnl_dims_t as = {ta ? 1 : lda, ta ? lda : 1}, bs = {tb ? 1 : ldb, tb ? ldb : 1}, cs = {ldc, 1},
                biass = {N, 1};
    if (dnnl_memory_desc_init_by_strides(&md[0], 2, ad, dnnl_bf16, as) ||
        dnnl_memory_desc_init_by_strides(&md[1], 2, bd, dnnl_bf16, bs) ||
        dnnl_memory_desc_init_by_strides(&md[2], 2, cd, cf32 ? dnnl_f32 : dnnl_bf16, cs) ||
        (bias && dnnl_memory_desc_init_by_strides(&md[3], 2, biasd, dnnl_bf16, biass)))
        return false;
    dnnl_matmul_desc_t mmd;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_matmul_desc_init(&mmd, &md[0], &md[1], bias ? &md[3] : NULL, &md[2]) ||
        dnnl_primitive_desc_create(&pd, &mmd, NULL, g_eng, NULL))
        return false;
    bool ok = dnnl_primitive_create(&d->prim, pd) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    const void *ptr[4] = {A, B, C, bias};
    d->nargs = bias ? 4 : 3;
    for (int i = 0; i < d->nargs && ok; i++)
        ok = dnnl_memory_create(&d->m[i], &md[i], g_eng, (void *)ptr[i]) == dnnl_success;
    return ok;
}

static void dmm_run(const dmm *d) {
    static const int which[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    dnnl_exec_arg_t args[4];
    for (int i = 0; i < d->nargs; i++) args[i] = (dnnl_exec_arg_t){which[i], d->m[i]};
    if (dnnl_primitive_execute(d->prim, g_strm, d->nargs, args) ||
        dnnl_stream_wait(g_strm) != dnnl_success) {
        fprintf(stderr, "oneDNN bf16 matmul failed\n");
        exit(1);
    }
}

static void dmm_free(dmm *d) {
    for (int i = 0; i < 4; i++)
        if (d->m[i]) dnnl_memory_destroy(d->m[i]);
    if (d->prim) dnnl_primitive_destroy(d->prim);
}

enum { B_F32, B_CEIL, B_REMAT, B_LINEAR, B_FILL, B_N };

/* y (rows, n) bf16 = the bf16 bias in every row (the pre-fusion forward's first pass) */
static void fill_bias_rows(uint16_t *y, const uint16_t *bias, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) memcpy(y + r * n, bias, sizeof(uint16_t) * (size_t)n);
}

static double bf16_t(int threads) { return threads == 1 ? now_cpu() : now(); }

static void bench_bf16_shape(const lin_shape *ls, int pass, int threads, int reps) {
    const int64_t T = 2048, in = ls->in, out = ls->out;
    /* GEMM dims and layout of the pass */
    int64_t M = pass == P_DW ? out : T, K = pass == P_FWD ? in : pass == P_DX ? out : T;
    int64_t N = pass == P_FWD ? out : in;
    bool ta = pass == P_DW, tb = pass == P_FWD, cf32 = pass == P_DW;
    int64_t lda = pass == P_FWD ? in : out, ldb = in, ldc = N;
    /* operands: x (T, in), W (out, in), dy (T, out), bias (out) */
    remat_tensor *x, *w, *dy, *bias, *xb, *wb, *dyb, *biasb, *ab, *bb;
    CHECK(remat_rand_uniform(&x, 2, (int64_t[]){T, in}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&w, 2, (int64_t[]){out, in}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&dy, 2, (int64_t[]){T, out}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_rand_uniform(&bias, 1, &out, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_to_dtype(&xb, x, REMAT_BF16));
    CHECK(remat_to_dtype(&wb, w, REMAT_BF16));
    CHECK(remat_to_dtype(&dyb, dy, REMAT_BF16));
    CHECK(remat_to_dtype(&biasb, bias, REMAT_BF16));
    ab = pass == P_FWD ? xb : dyb;
    bb = pass == P_FWD ? wb : pass == P_DX ? wb : xb;
    remat_tensor *af = pass == P_FWD ? x : dy, *bf = pass == P_DW ? x : w;
    float *cf = malloc(sizeof(float) * (size_t)(M * N));
    void *c1 = malloc(sizeof(float) * (size_t)(M * N)),
         *c2 = malloc(sizeof(float) * (size_t)(M * N));
    if (!cf || !c1 || !c2) exit(1);
    const uint16_t *A = remat_data(ab), *Bm = remat_data(bb), *bv = remat_data(biasb);
    dmm d;
    if (!dmm_make(&d, ta, tb, M, N, K, A, lda, Bm, ldb, pass == P_FWD ? bv : NULL, c1, ldc, cf32)) {
        fprintf(stderr, "could not make oneDNN's bf16 matmul\n");
        exit(1);
    }
    double t[B_N][MAX_REPS];
    bool have[B_N] = {true, true, true, pass == P_FWD, pass == P_FWD};
    remat_autocast_state prev;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        double t0, *o[B_N], junk[B_N];
        for (int b = 0; b < B_N; b++) o[b] = r >= 0 ? &t[b][r] : &junk[b];
        t0 = bf16_t(threads);
        blas_sgemm(ta, tb, M, N, K, remat_data(af), lda, remat_data(bf), ldb, 0.0f, cf, ldc);
        *o[B_F32] = bf16_t(threads) - t0;
        t0 = bf16_t(threads);
        dmm_run(&d);
        *o[B_CEIL] = bf16_t(threads) - t0;
        t0 = bf16_t(threads);
        if (pass == P_FWD) rm_bgemm_bias(ta, tb, M, N, K, A, lda, Bm, ldb, bv, false, c2, ldc);
        else if (pass == P_DX) rm_bgemm(ta, tb, M, N, K, A, lda, Bm, ldb, 0.0f, c2, ldc);
        else rm_bgemm_f32(ta, tb, M, N, K, A, lda, Bm, ldb, 0.0f, c2, ldc);
        *o[B_REMAT] = bf16_t(threads) - t0;
        if (pass != P_FWD) continue;
        remat_tensor *y;
        t0 = bf16_t(threads);
        CHECK(remat_autocast_begin(&prev, REMAT_CPU, REMAT_BF16, true));
        CHECK(remat_linear(&y, xb, w, bias));
        remat_autocast_end(&prev);
        *o[B_LINEAR] = bf16_t(threads) - t0;
        remat_release(y);
        t0 = bf16_t(threads);
        fill_bias_rows(c1, bv, M, N);
        rm_bgemm(ta, tb, M, N, K, A, lda, Bm, ldb, 1.0f, c1, ldc);
        *o[B_FILL] = bf16_t(threads) - t0;
        if (r == reps - 1 && memcmp(c1, c2, sizeof(uint16_t) * (size_t)(M * N)) != 0)
            printf("  (%s %s: fused bias and fill+beta=1 differ)\n", ls->name, pass_names[pass]);
    }
    double flops = 2.0 * (double)M * (double)N * (double)K;
    char dims[48];
    snprintf(dims, sizeof dims, "%lldx%lldx%lld", (long long)M, (long long)K, (long long)N);
    printf("| %-14s | %-5s | %-15s | %d |", pass_names[pass], ls->name, dims, threads);
    for (int b = 0; b < B_N; b++)
        if (have[b]) printf(" %7.1f |", flops / median(t[b], reps) * 1e-9);
        else printf("       - |");
    printf(" %5.2f |\n", median(t[B_F32], reps) / median(t[B_CEIL], reps));
    fflush(stdout);
    dmm_free(&d);
    free(cf), free(c1), free(c2);
    remat_tensor *rl[] = {x, w, dy, bias, xb, wb, dyb, biasb};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) remat_release(rl[i]);
}
#endif

/* Why the bf16 rows are skipped ("" when they run). */
static const char *bf16_skip_reason(void) {
#if defined(REMAT_GEMM_ONEDNN)
    if (!remat_cpu_has_bf16())
        return "this CPU has neither AVX512_BF16 nor AMX-BF16 (or REMAT_NO_BF16 is set)";
    return "";
#else
    return "remat was built without oneDNN (REMAT_GEMM=onednn, Debian package libdnnl-dev)";
#endif
}

static void bench_bf16(const int *thr, int nthr, int reps) {
    printf("\nbf16 (autocast), the GPT's linears at 2048 tokens; GFLOP/s, median of %d; T = 1: "
           "thread CPU time, T = 2: wall time; shapes M x K x N\n\n",
           reps);
    const char *why = bf16_skip_reason();
    if (*why) {
        printf("bf16 rows skipped: %s\n", why);
        return;
    }
#if defined(REMAT_GEMM_ONEDNN)
    static const lin_shape ls[] = {
        {"qkv", 384, 1152}, {"proj", 384, 384}, {"fc", 384, 1536}, {"fc2", 1536, 384}};
    printf(
        "| %-14s | %-5s | %-15s | T | f32     | bf16    | remat   | remat_  | fill+   | ceil  |\n",
        "pass", "layer", "shape");
    printf(
        "| %-14s | %-5s | %-15s |   | sgemm   | oneDNN  | rm_bgemm| linear  | beta=1  | bf16/ |\n",
        "", "", "");
    printf(
        "| %-14s | %-5s | %-15s |   |         | ceiling |         | autocast| (old)   | f32   |\n",
        "", "", "");
    printf(
        "|----------------|-------|-----------------|---|---------|---------|---------|---------|"
        "---------|-------|\n");
    for (int ti = 0; ti < nthr; ti++) {
        g_threads = thr[ti];
#ifdef _OPENMP
        omp_set_num_threads(thr[ti]);
#endif
        for (int p = 0; p < P_N; p++)
            for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++)
                bench_bf16_shape(&ls[i], p, thr[ti], reps);
    }
#else
    (void)thr, (void)nthr, (void)reps;
#endif
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
    for (int ti = 0; ti < nthr && !getenv("BENCH_BF16_ONLY"); ti++) {
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
    bench_bf16(thr, nthr, reps);
    return 0;
}
