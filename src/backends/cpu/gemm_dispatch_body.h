/* src/backends/cpu/gemm_dispatch_body.h — the GEMM entry points (see gemm.c), written once
 * and compiled once per dtype: gemm.c includes this file with T defined as float or double,
 * GEMM_NAME as the entry point (rm_sgemm, rm_dgemm), GEMM_REF as the built-in kernel
 * (rm_sgemm_ref, rm_dgemm_ref), GEMM_CBLAS as OpenBLAS's routine of T (read in an OpenBLAS
 * build only) and GEMM_DNNL defined where oneDNN has T's GEMM (float). Helpers are named
 * GEMM_FN(name): rm_sgemm_name. No include guard: included once per dtype. */
#include "tmpl.h"

#define GEMM_FN(name) RM_TCAT(GEMM_NAME, name)

#if defined(REMAT_GEMM_OPENBLAS)
/* True if OpenBLAS took the call (threads as described above blas_set_threads). */
static bool GEMM_FN(blas)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T *A,
                          int64_t lda, const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {
    if (!blas_int_ok(M, N, K, lda, ldb, ldc)) return false;
    enum CBLAS_TRANSPOSE Ta = ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE Tb = tb ? CblasTrans : CblasNoTrans;
    bool nested = in_parallel();
    if (atomic_load_explicit(&g_threading, memory_order_relaxed) == RM_GEMM_THREADS_NATIVE) {
        if (nested) return false;
        blas_set_threads(max_threads());
        GEMM_CBLAS(CblasRowMajor, Ta, Tb, (blasint)M, (blasint)N, (blasint)K, alpha, A,
                   (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
        return true;
    }
    blas_set_threads(1);
    int nt = nested ? 1 : max_threads();
    bool by_rows = M >= N;
    int64_t D = by_rows ? M : N;
    if (nt > D) nt = (int)D;
    if (nt <= 1 || (double)M * (double)N * (double)K < RM_GEMM_SPLIT_MIN) {
        GEMM_CBLAS(CblasRowMajor, Ta, Tb, (blasint)M, (blasint)N, (blasint)K, alpha, A,
                   (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
        return true;
    }
#pragma omp parallel num_threads(nt)
    {
        int n = 1, t = 0;
        omp_ids(&n, &t);
        int64_t lo = panel_edge(D, t, n), hi = panel_edge(D, t + 1, n);
        if (hi > lo && by_rows)
            GEMM_CBLAS(CblasRowMajor, Ta, Tb, (blasint)(hi - lo), (blasint)N, (blasint)K, alpha,
                       ta ? A + lo : A + lo * lda, (blasint)lda, B, (blasint)ldb, beta,
                       C + lo * ldc, (blasint)ldc);
        else if (hi > lo)
            GEMM_CBLAS(CblasRowMajor, Ta, Tb, (blasint)M, (blasint)(hi - lo), (blasint)K, alpha, A,
                       (blasint)lda, tb ? B + lo * ldb : B + lo, (blasint)ldb, beta, C + lo,
                       (blasint)ldc);
    }
    return true;
}
#endif

void GEMM_NAME(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda,
               const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == (T)0) { /* no product: leave the backends out */
        GEMM_REF(ta, tb, M, N, 0, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    lda = fix_ld(ta ? K : M, ta ? M : K, lda);
    ldb = fix_ld(tb ? N : K, tb ? K : N, ldb);
    ldc = fix_ld(M, N, ldc);
#if defined(REMAT_GEMM_OPENBLAS)
    if (GEMM_FN(blas)(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
#endif
#if defined(GEMM_DNNL)
    /* dnnl_sgemm runs on OpenMP (the same pool as remat's kernels); it only
     * fails on bad arguments or out of memory — then use the built-in kernel. */
    if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) ==
        dnnl_success)
        return;
#endif
    GEMM_REF(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#undef T
#undef GEMM_NAME
#undef GEMM_REF
#undef GEMM_CBLAS
#undef GEMM_DNNL
#undef GEMM_FN
