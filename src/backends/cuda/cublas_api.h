/* src/backends/cuda/cublas_api.h — cuBLAS, loaded when the first GEMM on a
 * cuda device needs it.
 *
 * libcublas and the libcublasLt it pulls in are ~600 MB of shared objects;
 * linked into libremat, the dynamic loader's relocations made every process
 * that loads remat resident in ~154 MiB and ~200 ms before main, a CPU run
 * included. They are opened with dlopen instead (the soname of the toolkit
 * remat was built with, then the toolkit's library directory), and the few
 * functions the backend calls are looked up into one table, once. The CUDA
 * runtime (libcudart, ~0.3 MiB resident) stays linked: the kernels' launch
 * stubs and the fat binaries' registration are its. */
#ifndef REMAT_BACKENDS_CUDA_CUBLAS_API_H
#define REMAT_BACKENDS_CUDA_CUBLAS_API_H

#include <cublas_v2.h>
#include <stdbool.h>

typedef struct rm_cublas_api {
    __typeof__(cublasCreate_v2) *create;
    __typeof__(cublasDestroy_v2) *destroy;
    __typeof__(cublasSetStream_v2) *set_stream;
    __typeof__(cublasSetMathMode) *set_math_mode;
    __typeof__(cublasSgemm_v2_64) *sgemm;
    __typeof__(cublasDgemm_v2_64) *dgemm;
    __typeof__(cublasSgemmStridedBatched_64) *sgemm_strided;
    __typeof__(cublasDgemmStridedBatched_64) *dgemm_strided;
    /* mixed precision (bf16 operands, f32 compute): gemm.c's bf16 GEMMs */
    __typeof__(cublasGemmEx_64) *gemm_ex;
    __typeof__(cublasGemmStridedBatchedEx_64) *gemm_strided_ex;
} rm_cublas_api;

/* The table, libcublas opened on the first call (thread-safe; later calls
 * return it at once). NULL when it cannot be opened or lacks a function,
 * with REMAT_EUNSUPPORTED set naming the library, what the loader said and
 * `call`. */
const rm_cublas_api *rm_cublas_api_get(const char *call);
/* Whether libcublas has been opened in this process (tests: a CPU run never
 * opens it). */
bool rm_cublas_loaded(void);

#endif
