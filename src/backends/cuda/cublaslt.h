/* src/backends/cuda/cublaslt.h — bf16 linear's forward on cuBLASLt with the bias in the
 * GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS), the GEMM PyTorch's autocast linears run.
 *
 * Why: gemm.c's other way, the bias broadcast into the output rows and then cublasGemmEx
 * with beta = 1, measured 249 TFLOP/s for GPT-2's forward linears on an H200 (window 6)
 * where the same GEMMs run at ~600 TFLOP/s without a C to read; the epilogue adds the
 * bias in f32 before the one rounding to bf16, the same numbers as bias + beta·C.
 *
 * libcublasLt is opened on first use (dlopen, like cuBLAS: cublas_api.c); where it is
 * missing, has no algorithm for a shape, or REMAT_CUDA_LT=0 is set, the caller keeps its
 * own way. Each device gets a cuBLASLt handle and a 32 MiB workspace (cudaMalloc, held
 * for the process, as cuBLAS holds its own; not in the allocator's counts). Split-K
 * partial sums stay in f32 (no reduction in the output type), as gemm.c's math mode asks
 * of cuBLAS. */
#ifndef REMAT_BACKENDS_CUDA_CUBLASLT_H
#define REMAT_BACKENDS_CUDA_CUBLASLT_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

/* D (n × m, column-major, leading dimension ldc) = op_b(B) · op_a(A) + bias[row], all bf16,
 * f32 compute, on device `index` (current) and stream s: cuBLAS's argument order as gemm.c
 * calls cublasGemmEx (B first: n × k after op_b, ld ldb; A: k × m after op_a, ld lda).
 * true: enqueued. false: not done and nothing written (the caller computes it its own
 * way); no error is set. */
bool rm_cublaslt_bias_gemm(int index, cudaStream_t s, bool tb, bool ta, int64_t n, int64_t m,
                           int64_t k, const void *B, int64_t ldb, const void *A, int64_t lda,
                           void *D, int64_t ldc, const void *bias);

#endif
