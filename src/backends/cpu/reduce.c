/* src/backends/cpu/reduce.c — cpu kernels of sum, mean and max over dims
 * (src/ops/reduce.c).
 *
 * Every reduction is brought to the canonical form x (O, R, I) -> y (O, I):
 * size-1 dims are dropped and neighbouring dims that are all kept or all
 * reduced are merged. One group of reduced dims is one (O, R, I) pass;
 * several separate groups (e.g. dims 0 and 2 of a 3-dim tensor) are
 * reduced one pass at a time, innermost first.
 *
 * Accuracy: f32 sums accumulate in f32 (as PyTorch does), but never as one
 * long running sum: rows (I == 1) use a pairwise (cascade) sum whose
 * leaves are blocks of <= 256 elements spread over 32 lanes, columns
 * (I > 1) a pairwise sum over blocks of 16 rows, vectorised across the
 * columns. The rounding error then grows like O(log R) instead of O(R)
 * (PyTorch's cascade sum makes the same trade). The summation order depends only on the shape,
 * never on the thread count, so results are bitwise reproducible.
 *
 * Parallelism: over the kept elements (rows of O, or O x column blocks).
 * A row sum with few rows and a long R (sum_all) is split into fixed-size
 * chunks whose partial sums are then summed pairwise — again independent
 * of the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/groups.h"
#include "cpu.h"
#include "tmpl.h"
#include "workspace.h"

#define RED_COL_BLOCK 64    /* columns per task in a column reduction */
#define RED_ROW_CHUNK 16384 /* elements per partial sum when a long row is split */
#define RED_MAX_DEPTH 64    /* recursion levels of the pairwise column sum */

/* sum over the reduced dims of mask, any grouping (below: the kernels call it) */
static remat_status sum_contig_any(remat_dtype dt, const void *x, int ndim, const int64_t *shape,
                                   const bool *mask, void *y);

/* ---- the kernels, once per dtype: reduce_body.h ---------------------------------------- */
#define T f32
#include "reduce_body.h"

#define T f64
#include "reduce_body.h"

/* ---- shape helpers --------------------------------------------------------------------- */
/* Sums contiguous x (shape, mask) into contiguous y. Several reduced groups
 * are reduced innermost first through scratch buffers. */
static remat_status sum_contig_any(remat_dtype dt, const void *x, int ndim, const int64_t *shape,
                                   const bool *mask, void *y) {
    size_t es = remat_dtype_size(dt);
    int64_t n_in = rm_shape_numel(ndim, shape);
    int64_t n_out = 1;
    for (int d = 0; d < ndim; d++)
        if (!mask[d]) n_out *= shape[d];
    if (n_out == 0) return REMAT_OK;
    if (n_in == 0) { /* reducing over an empty dim: 0 */
        memset(y, 0, (size_t)n_out * es);
        return REMAT_OK;
    }
    rm_groups g;
    rm_groups_make(ndim, shape, mask, &g);
    int n_red = rm_groups_nred(&g);
    if (n_red == 0) {
        memcpy(y, x, (size_t)n_out * es);
        return REMAT_OK;
    }
    const void *src = x;
    /* the passes between: up to the input's size over one reduced dim each, counted
     * scratch (workspace.h) */
    void *scratch[2] = {NULL, NULL};
    size_t bytes[2] = {0, 0};
    int which = 0;
    int rc = REMAT_OK;
    int64_t O, R, I;
    while (rm_groups_next_pass(&g, &O, &R, &I)) { /* innermost reduced group first */
        void *dst;
        if (n_red == 1) {
            dst = y;
        } else {
            rm_cpu_ws_give(scratch[which], bytes[which]);
            bytes[which] = (size_t)(O * I) * es;
            scratch[which] = rm_cpu_ws_take(bytes[which]);
            if (!scratch[which]) {
                rc = rm_err(REMAT_ENOMEM, "out of memory for reduction scratch");
                break;
            }
            dst = scratch[which];
        }
        bool ok = dt == REMAT_F32 ? sum_ori_f32(src, O, R, I, dst) : sum_ori_f64(src, O, R, I, dst);
        if (!ok) {
            rc = rm_err(REMAT_ENOMEM, "out of memory for reduction scratch");
            break;
        }
        src = dst;
        which ^= 1;
        n_red--;
    }
    rm_cpu_ws_give(scratch[0], bytes[0]);
    rm_cpu_ws_give(scratch[1], bytes[1]);
    return rc;
}
