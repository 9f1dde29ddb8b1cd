/* src/backends/cpu/colsum_body.h — the column sums of RM_K_COLSUM (see matmul.c), written
 * once and compiled once per dtype: matmul.c includes this file with T defined as float or
 * double. Every function is named TFN(name): name_float, name_double (tmpl.h). No include
 * guard: included once per dtype. */
#include "tmpl.h"

/* db = the column sums of src (rows, n) in double, by blocks of 64 columns */
static void TFN(colsum_blocks)(const T *restrict src, int64_t rows, int64_t n, T *restrict db) {
    int64_t nblk = (n + 63) / 64;
#pragma omp parallel for if (rows * n > RM_OMP_MIN)
    for (int64_t bi = 0; bi < nblk; bi++) {
        int64_t j0 = bi * 64, nc = n - j0 < 64 ? n - j0 : 64;
        double acc[64] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const T *restrict sr = src + r * n + j0;
            for (int64_t j = 0; j < nc; j++) acc[j] += sr[j];
        }
        for (int64_t j = 0; j < nc; j++) db[j0 + j] = (T)acc[j];
    }
}

/* db = the column sums of g (rows, n): chunks of rows summed into part in T, then the
 * chunks' sums by colsum_blocks (part NULL: narrow g, column blocks down the rows). */
static void TFN(colsum)(const T *restrict g, T *restrict db, int64_t rows, int64_t n,
                        T *restrict part) {
    if (!part) { /* narrow: column blocks down the rows */
        TFN(colsum_blocks)(g, rows, n, db);
        return;
    }
    int64_t rb = rm_cpu_chunk_rows(rows, n), nch = (rows + rb - 1) / rb;
#pragma omp parallel for if (rows * n > RM_OMP_MIN)
    for (int64_t k = 0; k < nch; k++) {
        T *restrict p = part + k * n;
        int64_t r1 = (k + 1) * rb < rows ? (k + 1) * rb : rows;
        memcpy(p, g + k * rb * n, sizeof(T) * (size_t)n);
        for (int64_t r = k * rb + 1; r < r1; r++) {
            const T *restrict gr = g + r * n;
            for (int64_t j = 0; j < n; j++) p[j] += gr[j];
        }
    }
    TFN(colsum_blocks)(part, nch, n, db);
}

#undef T
