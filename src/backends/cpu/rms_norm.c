/* src/backends/cpu/rms_norm.c — cpu kernels of rms_norm (src/ops/rms_norm.c).
 *
 *   y = x · rstd · w,   rstd = 1 / sqrt(mean_c(x²) + eps)   over the last n_norm dims
 *
 * x is seen as (N, C), C the product of the normalised dims, one row at a
 * time as layer_norm's kernels (cpu/nn.c): a row comes from memory once,
 * its sum of squares is RMS_LANES independent accumulators in the input's
 * type combined pairwise (vectorised without reassociation flags; the
 * order depends only on C), and rstd goes through a double sqrt. rstd is
 * the by-product the op saves (f32 for bf16 x: the bf16 path runs this f32
 * kernel on widened rows and rounds y alone).
 *
 * Backward, with x̂ = x · rstd and wg = w · g (g without a weight):
 *   dx = (wg − x̂ · mean_c(wg · x̂)) · rstd
 *   dw = Σ_n g · x̂
 * dx one sweep over the rows; dw as column sums per fixed chunk of rows
 * (rm_cpu_chunk_rows), the chunks then summed in double in order: results
 * never depend on the thread count.
 *
 * A bf16 y for an f32 x (remat_rms_norm_to): each row computed RMS_BF16_BLOCK columns at a
 * time into a block on the stack with y's expression, then rounded as the cast kernel
 * rounds: bitwise the f32 y cast. Its gradient comes back bf16: each row of it widened into
 * scratch before the row's backward, the values the cast's backward would write. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "clones.h"
#include "cpu.h"
#include "tmpl.h"
#include "workspace.h"

#define RMS_LANES 16
#define RMS_COL_BLOCK 64
#define RMS_BF16_BLOCK 256

/* x's shape as (N, C): C the product of the last n_norm dims. */
static void rms_rows(const remat_tensor *x, int n_norm, int64_t *N, int64_t *C) {
    int lead = x->ndim - n_norm;
    *N = rm_shape_numel(lead, x->shape);
    *C = rm_shape_numel(n_norm, x->shape + lead);
}

static void *ptr_or_null(const remat_tensor *t) { return t ? rm_ptr(t) : NULL; }

/* *half: y (the output, or its gradient) is bf16 next to an f32 x; else y must have x's
 * dtype. */
static remat_status rms_half(const remat_tensor *x, const remat_tensor *y, bool *half) {
    *half = y->dtype == REMAT_BF16 && x->dtype == REMAT_F32;
    if (*half || y->dtype == x->dtype) return REMAT_OK;
    return rm_err(REMAT_EDTYPE, "rms_norm kernel: a %s y (or gradient) with a %s x",
                  remat_dtype_name(y->dtype), remat_dtype_name(x->dtype));
}

/* RMS_ROUND_BF16 of the f64 copy: a bf16 y always has an f32 x (rms_half): never reached. */
static void rms_round_f64_bf16(const double *restrict x, uint16_t *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = rm_f32_to_bf16((float)x[i]);
}

/* ---- the kernels, once per dtype: rms_norm_body.h -------------------------------------- */
#define T f32
#define RMS_ROUND_BF16 rm_bf16_round_run /* the cast kernel's rounding, bitwise */
#include "rms_norm_body.h"

#define T f64
#define RMS_ROUND_BF16 rms_round_f64_bf16
#include "rms_norm_body.h"

/* The backward for a bf16 g: an f32 x's (remat_rms_norm_to's bf16 y) read as bf16 by the
 * f32 kernel; a bf16 x's through f32 as every bf16 op without a kernel. */
remat_status rm_cpu_rms_norm_bwd_bf16(const rm_kargs *k) {
    if (k->in[1]->dtype == REMAT_F32) return rm_cpu_rms_norm_bwd_f32(k);
    return rm_cpu_bf16_via_f32[RM_K_RMS_NORM_BWD](k);
}
