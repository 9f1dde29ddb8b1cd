/* src/backends/cpu/nn.h — the row kernels the cpu kernels of the nn
 * family share with cross_entropy and attention (the kernels themselves
 * are listed in cpu.h). */
#ifndef REMAT_CPU_NN_H
#define REMAT_CPU_NN_H
#include <string.h>

#include "core/kernels.h"

/* ---- row kernels (nn.c), shared by softmax, cross_entropy (loss.c) and attention ----
 * max of a row (NaN if any, -inf if empty); sum of exp(x - sub), the terms
 * written to y unless y is NULL; y = exp(x - sub) * scale. */
float rm_row_max_f32(const float *restrict x, int64_t n);
double rm_row_max_f64(const double *restrict x, int64_t n);
float rm_row_expsum_f32(const float *restrict x, float sub, float *restrict y, int64_t n);
double rm_row_expsum_f64(const double *restrict x, double sub, double *restrict y, int64_t n);
void rm_row_exp_scale_f32(const float *restrict x, float sub, float scale, float *restrict y,
                          int64_t n);
void rm_row_exp_scale_f64(const double *restrict x, double sub, double scale, double *restrict y,
                          int64_t n);

/* ---- column sums over rows (linear's bias gradient, layer_norm's dweight / dbias) ------
 * Rows per chunk of a column sum taken as partial sums per fixed chunk of
 * rows, then over the chunks in order, for rows x n: a function of the
 * shape only (never of the thread count), so the sums are the same bits on
 * any number of threads. At least 1. */
int64_t rm_cpu_chunk_rows(int64_t rows, int64_t n);

/* ---- row max through integer keys (max over dims and rm_row_max) ------------------------
 * GCC does not vectorise a float `v > m ? v : m` reduction without
 * -ffast-math, but does the integer one. Flipping the magnitude bits of
 * negative floats gives an integer key with the same order as the values
 * (-0 sorts just below +0, which compare equal anyway). NaNs are flagged
 * separately. Returns true if x[0..n) holds a NaN; else *best = the max
 * (n >= 1). */
#include "tmpl.h"
#define T f32
#define TI int32_t /* T's bits as a signed integer */
#define TI_MIN INT32_MIN
#define TI_ABS INT32_C(0x7FFFFFFF) /* all bits but the sign */
#define TI_INF INT32_C(0x7F800000) /* +infinity */
#include "rowmax_body.h"
#define T f64
#define TI int64_t
#define TI_MIN INT64_MIN
#define TI_ABS INT64_C(0x7FFFFFFFFFFFFFFF)
#define TI_INF INT64_C(0x7FF0000000000000)
#include "rowmax_body.h"

#endif /* REMAT_CPU_NN_H */
