/* src/backends/cpu/bf16.h — bf16 <-> f32 conversion of a run of contiguous
 * elements on the calling thread (no OpenMP): for cpu kernels whose items
 * already run on threads of their own (attention's per-head matrices, the
 * chunked elementwise path of bf16.c). Rounding as rm_f32_to_bf16
 * (src/core/core.h). Vectorised clones (clones.h): the baseline build leaves
 * these loops scalar; rounding uses AVX512_BF16's vcvtne2ps2bf16 where the
 * CPU has it (bitwise the same results). */
#ifndef REMAT_BACKENDS_CPU_BF16_H
#define REMAT_BACKENDS_CPU_BF16_H

#include <stdint.h>

/* y[i] = x[i] widened, i < n. */
void rm_bf16_widen_run(const uint16_t *restrict x, float *restrict y, int64_t n);
/* y[i] = x[i] rounded to nearest even (NaN stays NaN), i < n. */
void rm_bf16_round_run(const float *restrict x, uint16_t *restrict y, int64_t n);

/* y[i] = x[i] rounded to bf16 and widened back (the value a bf16 GEMM
 * multiplies), i < n. */
void rm_bf16_round_f32_run(const float *restrict x, float *restrict y, int64_t n);

/* y[i] += x[i] widened, i < n (f32 sums of bf16 rows). */
void rm_bf16_add_run(const uint16_t *restrict x, float *restrict y, int64_t n);

/* Threads for a conversion pass over n elements: the OpenMP team when the pass
 * is long enough to pay for waking it (RM_OMP_MIN) and the caller is not on one
 * of its threads already, else 1. */
int rm_bf16_pass_threads(int64_t n);

#endif /* REMAT_BACKENDS_CPU_BF16_H */
