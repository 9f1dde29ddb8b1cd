/* src/backends/cpu/gemm_body.h — the reference GEMM (see gemm.c), written once and
 * compiled once per dtype: gemm.c includes this file with T defined as float or double,
 * GEMM_NAME as the entry point's name (rm_sgemm_ref, rm_dgemm_ref), GEMM_NR as the tile's
 * width (one 64-byte vector of T) and GEMM_FMA as T's multiply-add. Helpers are named
 * GEMM_FN(name): rm_sgemm_ref_name. No include guard: included once per dtype. */
#include "tmpl.h"

#define GEMM_FN(name) RM_TCAT(GEMM_NAME, name)

/* C rows [0, mr) += ap (kc×MR, packed A) · bp (kc×nc, packed B) */
static void GEMM_FN(tile)(int64_t kc, const T *restrict ap, const T *restrict bp, int64_t nc,
                          T *restrict C, int64_t ldc, int64_t mr) {
    int64_t j = 0;
    if (mr == RM_MR) {
        for (; j + GEMM_NR <= nc; j += GEMM_NR) {
            T *restrict d0 = C + j, *restrict d1 = d0 + ldc;
            T *restrict d2 = d1 + ldc, *restrict d3 = d2 + ldc;
            T c0[GEMM_NR], c1[GEMM_NR], c2[GEMM_NR], c3[GEMM_NR];
            for (int jj = 0; jj < GEMM_NR; jj++) {
                c0[jj] = d0[jj];
                c1[jj] = d1[jj];
                c2[jj] = d2[jj];
                c3[jj] = d3[jj];
            }
            for (int64_t k = 0; k < kc; k++) {
                const T *restrict b = bp + k * nc + j;
                T a0 = ap[k * RM_MR], a1 = ap[k * RM_MR + 1];
                T a2 = ap[k * RM_MR + 2], a3 = ap[k * RM_MR + 3];
                for (int jj = 0; jj < GEMM_NR; jj++) {
                    c0[jj] = TFN(RM_FMA)(a0, b[jj], c0[jj]);
                    c1[jj] = TFN(RM_FMA)(a1, b[jj], c1[jj]);
                    c2[jj] = TFN(RM_FMA)(a2, b[jj], c2[jj]);
                    c3[jj] = TFN(RM_FMA)(a3, b[jj], c3[jj]);
                }
            }
            for (int jj = 0; jj < GEMM_NR; jj++) {
                d0[jj] = c0[jj];
                d1[jj] = c1[jj];
                d2[jj] = c2[jj];
                d3[jj] = c3[jj];
            }
        }
    }
    /* edges: the last < GEMM_NR columns, or a block of fewer than MR rows */
    for (int64_t r = 0; r < mr; r++) {
        T *restrict c = C + r * ldc;
        for (int64_t k = 0; k < kc; k++) {
            T a = ap[k * RM_MR + r];
            const T *restrict b = bp + k * nc;
            for (int64_t jj = j; jj < nc; jj++) c[jj] = TFN(RM_FMA)(a, b[jj], c[jj]);
        }
    }
}

/* C = beta·C, with beta == 0 overwriting (BLAS semantics) */
static void GEMM_FN(scale)(int64_t M, int64_t N, T beta, T *C, int64_t ldc) {
    if (beta == (T)1) return;
#pragma omp parallel for if (M * N > RM_OMP_MIN)
    for (int64_t i = 0; i < M; i++) {
        T *c = C + i * ldc;
        if (beta == (T)0)
            for (int64_t j = 0; j < N; j++) c[j] = 0;
        else
            for (int64_t j = 0; j < N; j++) c[j] *= beta;
    }
}

/* C += alpha·op(A)·op(B) without packing: when the panel cannot be allocated */
static void GEMM_FN(unblocked)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                               const T *A, int64_t lda, const T *B, int64_t ldb, T *C,
                               int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) {
            T a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] += a * (tb ? B[j * ldb + k] : B[k * ldb + j]);
        }
}

void GEMM_NAME(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda,
               const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    GEMM_FN(scale)(M, N, beta, C, ldc);
    if (K <= 0 || alpha == (T)0) return;
    T *bp = malloc(sizeof(T) * RM_KC * RM_NC);
    if (!bp) { /* no memory for the panel: unblocked loops (slow, but never fails) */
        GEMM_FN(unblocked)(ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc);
        return;
    }
    int64_t nblk = (M + RM_MR - 1) / RM_MR;
    for (int64_t k0 = 0; k0 < K; k0 += RM_KC) {
        int64_t kc = imin(RM_KC, K - k0);
        for (int64_t j0 = 0; j0 < N; j0 += RM_NC) {
            int64_t nc = imin(RM_NC, N - j0);
            /* pack B[k0:k0+kc, j0:j0+nc] (kc × nc, row-major) */
            for (int64_t k = 0; k < kc; k++) {
                T *dst = bp + k * nc;
                if (tb)
                    for (int64_t j = 0; j < nc; j++) dst[j] = B[(j0 + j) * ldb + k0 + k];
                else memcpy(dst, B + (k0 + k) * ldb + j0, sizeof(T) * (size_t)nc);
            }
#pragma omp parallel for schedule(static) if (M * nc * kc >= (1 << 20))
            for (int64_t ib = 0; ib < nblk; ib++) {
                int64_t i0 = ib * RM_MR, mr = imin(RM_MR, M - i0);
                T ap[RM_KC * RM_MR];
                for (int64_t k = 0; k < kc; k++)
                    for (int64_t r = 0; r < RM_MR; r++) {
                        int64_t i = i0 + (r < mr ? r : 0);
                        T a = ta ? A[(k0 + k) * lda + i] : A[i * lda + k0 + k];
                        ap[k * RM_MR + r] = alpha * a;
                    }
                GEMM_FN(tile)(kc, ap, bp, nc, C + i0 * ldc + j0, ldc, mr);
            }
        }
    }
    free(bp);
}

#undef T
#undef GEMM_NAME
#undef GEMM_NR
#undef GEMM_FMA
#undef GEMM_FN
