/* bench/cuda/gemm.c — GEMM efficiency of remat's linears on a GPU against cuBLAS alone.
 *
 * For each GEMM a GPT block's linears run (bench/cuda/run.sh's model: tokens M = B*T,
 * width D; qkv D->3D, proj D->D, fc D->4D, fc2 4D->D, head D->256) and each of their
 * three products (forward y = x w^T, input gradient dx = dy w, weight gradient
 * dw = dy^T x), in f32, f64 and bf16:
 *   - cuBLAS alone: cublas{S,D}gemm (bf16: cublasGemmEx, f32 compute) on plain cudaMalloc
 *     buffers, the same operation and layout (row-major operands through the column-major
 *     API), default math (no TF32 unless --tf32; split-K sums not reduced in bf16, as
 *     remat's handle);
 *   - remat: remat_linear / remat_matmul on cuda tensors (the library's own plans, its
 *     caching allocator, its stream), with remat_cuda_set_allow_tf32 as --tf32 says. The
 *     bf16 forward is the whole linear, bias included ("bias": true; cuBLASLt's bias
 *     epilogue, src/backends/cuda/cublaslt.c), against cuBLAS's GEMM without one.
 * Each is warmed up, then timed over --reps runs between two synchronisations (wall clock,
 * the same method for both); the median of --trials such timings is reported as TFLOP/s
 * (2*M*N*K flops), the ratio remat / cuBLAS, and the fraction of the GPU's peak without
 * tensor cores (SMs x FP32 lanes (128) or FP64 lanes (64) per SM x 2 x the SM clock; f64
 * GEMMs on an H100 use FP64 tensor cores, whose peak is twice that figure; null for bf16).
 *
 * Output: one JSON object on stdout (the GPU, the command, one row per shape and dtype).
 * Build and run: bench/cuda/gpu_session.sh (step "gemm"), or
 *   cc -O2 -Iinclude bench/cuda/gemm.c -Lbuild -lremat -L/usr/local/cuda/lib64 \
 *      -I/usr/local/cuda/include -lcublas -lcudart -o build/bench_cuda_gemm
 *   build/bench_cuda_gemm --tokens 8192 --width 768 [--reps 20] [--trials 5] [--tf32]
 * Needs a GPU: without one it says why and exits with status 2. */
#define _POSIX_C_SOURCE 200809L
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remat/remat.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define CK(expr)                                                                                   \
    do {                                                                                           \
        if (!(expr)) {                                                                             \
            fprintf(stderr, "bench_cuda_gemm: %s failed at line %d (%s)\n", #expr, __LINE__,       \
                    remat_last_error());                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* One product: C[m, n] = op(A) op(B) in row-major terms, as the linear's GEMMs are:
 * FWD  y[M, N]  = x[M, K]  w[N, K]^T
 * DX   dx[M, K] = dy[M, N] w[N, K]
 * DW   dw[N, K] = dy[M, N]^T x[M, K] */
typedef enum { FWD, DX, DW } which;
static const char *const k_which[] = {"forward y = x w^T", "input grad dx = dy w",
                                      "weight grad dw = dy^T x"};

typedef struct shape {
    const char *name;
    long long n_out, n_in; /* the linear's weight is [n_out, n_in] */
} shape;

typedef struct opts {
    long long tokens, width;
    int reps, trials;
    bool tf32;
} opts;

/* Row-major C[r, c] = A B with A, B possibly transposed, through column-major cuBLAS:
 * C^T = B^T A^T, so the column-major call multiplies B by A. */
typedef enum { DT_F32, DT_F64, DT_BF16 } bench_dtype;
static const char *const k_dtype[] = {"f32", "f64", "bf16"};
static const size_t k_dtype_size[] = {4, 8, 2};

static cublasStatus_t cublas_rm(cublasHandle_t h, bench_dtype dt, bool ta, bool tb, long long r,
                                long long c, long long k, const void *A, long long lda,
                                const void *B, long long ldb, void *C, long long ldc) {
    const double one = 1, zero = 0;
    const float onef = 1, zerof = 0;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (dt == DT_BF16)
        return cublasGemmEx(h, ob, oa, (int)c, (int)r, (int)k, &onef, B, CUDA_R_16BF, (int)ldb, A,
                            CUDA_R_16BF, (int)lda, &zerof, C, CUDA_R_16BF, (int)ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (dt == DT_F64)
        return cublasDgemm(h, ob, oa, (int)c, (int)r, (int)k, &one, B, (int)ldb, A, (int)lda, &zero,
                           C, (int)ldc);
    return cublasSgemm(h, ob, oa, (int)c, (int)r, (int)k, &onef, B, (int)ldb, A, (int)lda, &zerof,
                       C, (int)ldc);
}

static double median_of(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Seconds per product by cuBLAS alone (median of trials). */
static double time_cublas(cublasHandle_t h, bench_dtype dt, which wh, long long M, long long N,
                          long long K, const opts *o, double *spread) {
    size_t es = k_dtype_size[dt];
    void *x, *w, *y;
    CK(cudaMalloc(&x, (size_t)(M * K) * es) == cudaSuccess);
    CK(cudaMalloc(&w, (size_t)(N * K) * es) == cudaSuccess);
    CK(cudaMalloc(&y, (size_t)(M * N) * es) == cudaSuccess);
    cudaMemset(x, 0, (size_t)(M * K) * es), cudaMemset(w, 0, (size_t)(N * K) * es);
    cudaMemset(y, 0, (size_t)(M * N) * es);
    double t[64];
    for (int tr = -1; tr < o->trials; tr++) {
        CK(cudaDeviceSynchronize() == cudaSuccess);
        double t0 = now_s();
        for (int r = 0; r < o->reps; r++) {
            cublasStatus_t s;
            if (wh == FWD) s = cublas_rm(h, dt, false, true, M, N, K, x, K, w, K, y, N);
            else if (wh == DX) s = cublas_rm(h, dt, false, false, M, K, N, y, N, w, K, x, K);
            else s = cublas_rm(h, dt, true, false, N, K, M, y, N, x, K, w, K);
            CK(s == CUBLAS_STATUS_SUCCESS);
        }
        CK(cudaDeviceSynchronize() == cudaSuccess);
        if (tr >= 0) t[tr] = (now_s() - t0) / o->reps; /* tr -1: warm-up */
    }
    cudaFree(x), cudaFree(w), cudaFree(y);
    double med = median_of(t, o->trials);
    *spread = (t[o->trials - 1] - t[0]) / med;
    return med;
}

/* Seconds per product through remat's ops on cuda tensors (median of trials). */
static double time_remat(remat_device dev, bench_dtype bd, which wh, long long M, long long N,
                         long long K, const opts *o, double *spread) {
    remat_dtype dt = bd == DT_F64 ? REMAT_F64 : bd == DT_BF16 ? REMAT_BF16 : REMAT_F32;
    remat_tensor *x = NULL, *w = NULL, *b = NULL, *dy = NULL, *dyt = NULL;
    CK(remat_zeros(&x, 2, (int64_t[]){M, K}, dt, dev) == REMAT_OK);
    CK(remat_zeros(&w, 2, (int64_t[]){N, K}, dt, dev) == REMAT_OK);
    if (bd == DT_BF16) CK(remat_zeros(&b, 1, (int64_t[]){N}, dt, dev) == REMAT_OK);
    CK(remat_zeros(&dy, 2, (int64_t[]){M, N}, dt, dev) == REMAT_OK);
    CK(remat_transpose(&dyt, dy, 0, 1) == REMAT_OK);
    bool prev = remat_no_grad_begin();
    double t[64];
    for (int tr = -1; tr < o->trials; tr++) {
        CK(remat_cuda_synchronize(dev.index) == REMAT_OK);
        double t0 = now_s();
        for (int r = 0; r < o->reps; r++) {
            remat_tensor *out = NULL;
            if (wh == FWD) CK(remat_linear(&out, x, w, b) == REMAT_OK);
            else if (wh == DX) CK(remat_matmul(&out, dy, w) == REMAT_OK);
            else CK(remat_matmul(&out, dyt, x) == REMAT_OK);
            remat_release(out); /* back to the caching allocator, stream-ordered */
        }
        CK(remat_cuda_synchronize(dev.index) == REMAT_OK);
        if (tr >= 0) t[tr] = (now_s() - t0) / o->reps;
    }
    remat_grad_mode_restore(prev);
    remat_release(x), remat_release(w), remat_release(b), remat_release(dy), remat_release(dyt);
    double med = median_of(t, o->trials);
    *spread = (t[o->trials - 1] - t[0]) / med;
    return med;
}

int main(int argc, char **argv) {
    opts o = {.tokens = 8192, .width = 768, .reps = 20, .trials = 5, .tf32 = false};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) o.tokens = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--width") && i + 1 < argc) o.width = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) o.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trials") && i + 1 < argc) o.trials = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tf32")) o.tf32 = true;
        else {
            fprintf(stderr,
                    "usage: %s [--tokens M] [--width D] [--reps N] [--trials N] "
                    "[--tf32]\n",
                    argv[0]);
            return 2;
        }
    }
    if (o.trials < 1 || o.trials > 64 || o.reps < 1 || o.tokens < 1 || o.width < 1) {
        fprintf(stderr, "bench_cuda_gemm: trials 1..64, reps, tokens and width >= 1\n");
        return 2;
    }
    const char *why = NULL;
    if (!remat_cuda_available(&why)) {
        fprintf(stderr, "bench_cuda_gemm: no GPU: %s\n", why ? why : "?");
        return 2;
    }
    remat_device dev = {remat_device_type_id("cuda"), 0};
    remat_cuda_set_allow_tf32(o.tf32);
    cublasHandle_t h;
    CK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    cublasMath_t mode = o.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    mode = (cublasMath_t)(mode | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    CK(cublasSetMathMode(h, mode) == CUBLAS_STATUS_SUCCESS);
    struct cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    double peak32 = (double)p.multiProcessorCount * 128 * 2 * clock_khz * 1e3;
    double peak64 = peak32 / 2;
    const long long D = o.width;
    const shape shapes[] = {
        {"qkv", 3 * D, D}, {"proj", D, D}, {"fc", 4 * D, D}, {"fc2", D, 4 * D}, {"head", 256, D}};
    printf("{\"bench\": \"cuda_gemm\", \"gpu\": \"%s\", \"sms\": %d, \"clock_mhz\": %.0f, "
           "\"peak_fp32_tflops\": %.2f, \"peak_fp64_tflops\": %.2f, \"tf32\": %s, "
           "\"tokens\": %lld, \"width\": %lld, \"reps\": %d, \"trials\": %d,\n \"command\": \"",
           p.name, p.multiProcessorCount, clock_khz / 1e3, peak32 / 1e12, peak64 / 1e12,
           o.tf32 ? "true" : "false", o.tokens, o.width, o.reps, o.trials);
    for (int i = 0; i < argc; i++) printf("%s%s", i ? " " : "", argv[i]);
    printf("\",\n \"rows\": [\n");
    int row = 0;
    double worst = 1e9;
    for (int f = DT_F32; f <= DT_BF16; f++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int wh = FWD; wh <= DW; wh++) {
                long long M = o.tokens, N = shapes[s].n_out, K = shapes[s].n_in;
                double sc, sr, tc = time_cublas(h, (bench_dtype)f, (which)wh, M, N, K, &o, &sc);
                double tr = time_remat(dev, (bench_dtype)f, (which)wh, M, N, K, &o, &sr);
                double flops = 2.0 * (double)M * (double)N * (double)K;
                double ratio = tc / tr; /* remat's speed as a fraction of cuBLAS alone */
                if (ratio < worst) worst = ratio;
                char of_peak[32] = "null";
                if (f != DT_BF16)
                    snprintf(of_peak, sizeof of_peak, "%.3f",
                             flops / tc / (f == DT_F64 ? peak64 : peak32));
                printf("%s  {\"linear\": \"%s\", \"gemm\": \"%s\", \"dtype\": \"%s\", "
                       "\"bias\": %s, \"M\": %lld, \"N\": %lld, \"K\": %lld, "
                       "\"cublas_ms\": %.4f, \"cublas_spread\": %.3f, \"cublas_tflops\": %.2f, "
                       "\"remat_ms\": %.4f, \"remat_spread\": %.3f, \"remat_tflops\": %.2f, "
                       "\"remat_over_cublas\": %.3f, \"cublas_of_peak\": %s}",
                       row++ ? ",\n" : "", shapes[s].name, k_which[wh], k_dtype[f],
                       f == DT_BF16 && wh == FWD ? "true" : "false", M, N, K, tc * 1e3, sc,
                       flops / tc / 1e12, tr * 1e3, sr, flops / tr / 1e12, ratio, of_peak);
                fflush(stdout);
            }
    printf("\n ],\n \"worst_remat_over_cublas\": %.3f}\n", worst);
    cublasDestroy(h);
    return 0;
}
