/* src/backends/cpu/gemm.h — the cpu backend's GEMM layer (row-major BLAS-style sgemm/dgemm).
 *
 *   C (M×N) = alpha · op(A) (M×K) · op(B) (K×N) + beta · C
 *
 * op(X) = X^T when the flag is set. All matrices are row-major; lda, ldb,
 * ldc are the row strides (in elements) of the matrices as stored: A is
 * stored (M, K) — or (K, M) when ta — so lda ≥ its column count, and so on.
 * A leading dimension that does not matter (a stored matrix with one row)
 * may be anything; it is fixed up before the backend sees it.
 * beta == 0 overwrites C (values already there, NaN included, are ignored).
 *
 * The backend is chosen when the library is built (REMAT_GEMM=openblas,
 * onednn or naive; remat_gemm_backend() names it). oneDNN has no dgemm, so
 * f64 then uses the built-in blocked kernel (f64 is for gradient checks).
 * These calls never fail: a backend error or a size beyond the BLAS's
 * 32-bit integers falls back to the built-in kernel.
 *
 * Threads: everything runs on OpenMP's team of omp_get_max_threads()
 * (OpenBLAS single-threaded per panel, see rm_gemm_set_threading); from
 * inside a parallel region a call runs on the calling thread alone. */
#ifndef REMAT_CPU_GEMM_H
#define REMAT_CPU_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void rm_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void rm_dgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A,
              int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc);

/* The bf16 GEMM (gemm_bf16.c): C = op(A)·op(B) + beta·C on bf16 matrices
 * (uint16_t bit patterns), accumulated in f32 and rounded once to bf16;
 * beta is 0 or 1. oneDNN's bf16 matmul where the CPU has AVX512_BF16/AMX,
 * else through f32 (one warning). Never fails. */
void rm_bgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
              const uint16_t *B, int64_t ldb, float beta, uint16_t *C, int64_t ldc);
/* C = op(A)·op(B) + bias, the bias (N values: f32 when bias_f32, else bf16) added
 * to every row inside the GEMM (oneDNN's matmul bias argument: f32 accumulation,
 * the sum rounded once to bf16) — linear under autocast, with no pass writing the
 * bias into C first. Through f32 where rm_bgemm is: the bias is then the f32 C's
 * initial value. Never fails. */
void rm_bgemm_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                   int64_t lda, const uint16_t *B, int64_t ldb, const void *bias, bool bias_f32,
                   uint16_t *C, int64_t ldc);
/* The same as rm_bgemm with an f32 C (not rounded): a bf16 activation's product feeding an f32
 * parameter's gradient (linear's dW under autocast). */
void rm_bgemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                  const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* The bf16 GEMM through f32 (the route rm_bgemm takes where !rm_bgemm_native()),
 * with A and B each bf16 or f32 (a_f32, b_f32: an f32 operand's elements are
 * rounded to bf16 as they are widened, the product that of rounded copies) and C
 * bf16 or f32 (c_f32); bias (N values, f32 when bias_f32; NULL: none) only with
 * beta 0. For callers holding an f32 operand (matmul.c: linear's weight and f32
 * output gradient under autocast): one widening pass over it instead of a
 * rounding into a bf16 copy and a widening of that. ws: rm_bgemm_wide_bytes of
 * scratch for the widened copies, or NULL: the call takes its own from the cpu
 * device's allocator (workspace.h) — a caller running GEMMs on several OpenMP
 * threads at once passes each its slice of one buffer taken on the calling
 * thread, whose allocation meter the planner reads. Never fails (out of memory:
 * element by element). */
void rm_bgemm_wide(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, bool a_f32,
                   int64_t lda, const void *B, bool b_f32, int64_t ldb, const void *bias,
                   bool bias_f32, float beta, void *C, bool c_f32, int64_t ldc, void *ws);
/* Bytes of scratch the route through f32 takes for one GEMM (its widened A, B and,
 * with a bf16 C, C), rounded up to a multiple of 64; 0 when it multiplies nothing. */
size_t rm_bgemm_wide_bytes(int64_t M, int64_t N, int64_t K, bool c_f32);
/* True when rm_bgemm runs oneDNN's bf16 matmul (built with oneDNN, the CPU
 * has AVX512_BF16/AMX and REMAT_NO_BF16 is not set), false when it goes
 * through f32: kernels with a cheaper f32 route of their own take it then
 * (attention.c). */
bool rm_bgemm_native(void);
/* How many GEMMs oneDNN's bf16 matmul has run in this process (tests check
 * that a kernel takes the bf16 path). */
uint64_t rm_bgemm_native_runs(void);
/* How many of those had the bias inside the GEMM (rm_bgemm_bias on oneDNN). */
uint64_t rm_bgemm_bias_runs(void);
/* The most bytes of oneDNN scratchpads the bf16 GEMMs held at once as counted scratch
 * (64 KiB or more each: gemm_bf16.c) since the last reset (reset: start again from what
 * they hold now). Their sizes are oneDNN's; tests of exact peaks on the native route bound
 * what they add with it. 0 without oneDNN. */
size_t rm_bgemm_scratchpad_most(bool reset);

/* How the OpenBLAS backend uses threads (see gemm.c): OMP (default) runs
 * OpenBLAS single-threaded and splits large GEMMs over remat's OpenMP
 * team; NATIVE uses OpenBLAS's own pthread pool sized to
 * omp_get_max_threads(). No effect with the other backends. For
 * benchmarks; not thread-safe against concurrent GEMMs. */
enum { RM_GEMM_THREADS_OMP = 0, RM_GEMM_THREADS_NATIVE = 1 };
void rm_gemm_set_threading(int mode);
int rm_gemm_threading(void);

/* The built-in cache-blocked kernel, whatever the backend (tests compare
 * the backend against it; the benchmark reports it). */
void rm_sgemm_ref(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void rm_dgemm_ref(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A,
                  int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc);

#endif /* REMAT_CPU_GEMM_H */
