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
 * never depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clones.h"
#include "cpu.h"
#include "tmpl.h"

#define RMS_LANES 16
#define RMS_COL_BLOCK 64

/* x's shape as (N, C): C the product of the last n_norm dims. */
static void rms_rows(const remat_tensor *x, int n_norm, int64_t *N, int64_t *C) {
    int lead = x->ndim - n_norm;
    *N = rm_shape_numel(lead, x->shape);
    *C = rm_shape_numel(n_norm, x->shape + lead);
}

static void *ptr_or_null(const remat_tensor *t) { return t ? rm_ptr(t) : NULL; }

/* ---- the kernels, once per dtype: rms_norm_body.h -------------------------------------- */
#define T f32
#include "rms_norm_body.h"

#define T f64
#include "rms_norm_body.h"
