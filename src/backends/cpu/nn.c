/* src/backends/cpu/nn.c — cpu kernels of softmax, log_softmax, layer_norm
 * and dropout (src/ops/nn.c), and the row kernels (rm_row_*) that
 * cross_entropy and attention share.
 *
 * softmax / log_softmax over any dim: the input (contiguous) is seen as
 * (O, R, I) with R the softmax dim. I == 1 (the last dim, the common case)
 * runs row kernels; I > 1 runs the same maths on blocks of columns so the
 * inner loops stay contiguous. Both are numerically stable (the row max is
 * subtracted before exp) and their backward reads only the saved output.
 * f32 uses a branch-free expf (rm_expf_v, ~1 ulp) so the row loops
 * vectorise.
 *
 * layer_norm follows llm.c's layernorm_forward/backward with x seen as
 * (N, C), C the product of the normalised dims, one row at a time so each
 * row comes from memory once. The per-row statistics (mean of the shifted
 * data, then the centred variance: no cancellation) are lane sums in the
 * input's type, written as small tensors the op saves. The backward is one
 * sweep over the rows: dx, plus dweight/dbias as column sums per fixed
 * chunk of rows, the chunks then summed in double in order, so results do
 * not depend on the thread count.
 *
 * dropout's mask comes from Philox with the key and counter the op drew
 * from x's device generator: element i (row-major over x's shape) uses
 * word i % 4 of block counter + i / 4. The mask thus depends only on
 * (seed, offset, i) and never on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "clones.h"
#include "core/philox.h"
#include "cpu.h"
#include "tmpl.h"
#include "vmath.h"
#include "workspace.h"

/* softmax / log_softmax: columns per block when I > 1; independent accumulators of the
 * row reductions (they vectorise without reassociation flags) */
#define NN_COL_BLOCK 64
#define NN_LANES 16

/* columns in the block from column j0 of n */
static inline int nn_block_width(int64_t n, int64_t j0) {
    return (int)(n - j0 < NN_COL_BLOCK ? n - j0 : NN_COL_BLOCK);
}

/* ---- column sums in fixed chunks of rows (nn.h) ----------------------------------------- */
#define CHUNK_ROWS 64      /* rows per chunk, at most... */
#define MIN_CHUNKS 16      /* ...but few rows still make this many chunks (threads) */
#define MAX_CHUNKS 1024    /* more rows per chunk above this many chunks */
#define MAX_PART (1 << 24) /* and above this many partial sums (elements) */
int64_t rm_cpu_chunk_rows(int64_t rows, int64_t n) {
    int64_t r = (rows + MIN_CHUNKS - 1) / MIN_CHUNKS;
    if (r > CHUNK_ROWS) r = CHUNK_ROWS;
    int64_t lo = (rows + MAX_CHUNKS - 1) / MAX_CHUNKS;
    if (r < lo) r = lo;
    if (r < 1) r = 1;
    while (r < rows && (rows + r - 1) / r * n > MAX_PART) r *= 2;
    return r;
}

/* ---- layer_norm ------------------------------------------------------------------------- */
/* Row kernels work on one row at a time, so a row of x (and g) is read from
 * memory once and the later passes over it hit L1. Float reductions use
 * LN_LANES independent accumulators in T (vectorised without reassociation
 * flags) combined pairwise; the row sum is taken of x - x[0] (shifted data:
 * a large common offset then costs no precision). The summation order
 * depends only on C, and dweight / dbias (column sums over the rows) are
 * summed per fixed chunk of rows, then over the chunks in order: results
 * never depend on the thread count. */
#define LN_LANES 16
/* A bf16 y (layer_norm's output rounded as it is written: remat_layer_norm_to) is computed
 * this many columns at a time into a block on the stack, then rounded. */
#define LN_BF16_BLOCK 256

/* ---- dropout ---------------------------------------------------------------------------- */
/* keep iff rm_u32_to_unit(word) >= p, i.e. (word >> 8) >= thr with
 * thr = ceil(p * 2^24): an integer compare, exact for every p. */
static inline uint32_t nn_keep_threshold(double p) {
    double t = ceil(p * 16777216.0);
    return t > 16777216.0 ? 16777217u : (uint32_t)t;
}

#define DROPOUT_CHUNK 4096 /* Philox blocks per parallel task (an even number: see below) */
/* Lean saves: the mask kept for backward is one bit per element (bit i of
 * byte i / 8: element i was kept), plus the scale in the node's context,
 * instead of a tensor of x's size holding 0 or scale. Block j's 4 bits are
 * nibble j % 2 of byte j / 2; chunks start at even blocks, so every thread
 * writes its own bytes. */

/* ---- the kernels' helpers (the kernels, rm_kernel_fn, are at the end of nn_body.h) ---- */
/* x's shape as (N, C): C the product of the last n_norm dims. */
static void ln_rows(const remat_tensor *x, int n_norm, int64_t *N, int64_t *C) {
    int lead = x->ndim - n_norm;
    *N = rm_shape_numel(lead, x->shape);
    *C = rm_shape_numel(n_norm, x->shape + lead);
}

static void *ptr_or_null(const remat_tensor *t) { return t ? rm_ptr(t) : NULL; }

/* *half: y (layer_norm's output, or its gradient) is bf16 next to an f32 x; else y must
 * have x's dtype. */
static remat_status ln_y_bf16(const remat_tensor *x, const remat_tensor *y, bool *half) {
    *half = y->dtype == REMAT_BF16 && x->dtype == REMAT_F32;
    if (*half || y->dtype == x->dtype) return REMAT_OK;
    return rm_err(REMAT_EDTYPE, "layer_norm kernel: a %s y (or gradient) with a %s x",
                  remat_dtype_name(y->dtype), remat_dtype_name(x->dtype));
}

/* NN_ROUND_BF16 of the f64 copy: a bf16 y always has an f32 x (ln_y_bf16), so only for
 * completeness, through f32. */
static void round_f64_bf16(const double *restrict x, uint16_t *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = rm_f32_to_bf16((float)x[i]);
}

/* ---- the kernels, once per dtype: nn_body.h ------------------------------------------ */
#define T f32
#define NN_EXP rm_expf_v /* vectorisable Cephes expf, ~1 ulp (vmath.h) */
#define NN_LOG logf
#define NN_FMA RM_FMAF
#define NN_ROUND_BF16 rm_bf16_round_run /* the cast kernel's rounding, bitwise */
#include "nn_body.h"

#define T f64
#define NN_EXP exp
#define NN_LOG log
#define NN_FMA RM_FMA
#define NN_ROUND_BF16 round_f64_bf16 /* never reached: a bf16 y has an f32 x */
#include "nn_body.h"

/* layer_norm's backward for a bf16 g: an f32 x's (remat_layer_norm_to's bf16 y) read as
 * bf16 by the f32 kernel; a bf16 x's through f32 as every bf16 op without a kernel. */
remat_status rm_cpu_layer_norm_bwd_bf16(const rm_kargs *k) {
    if (k->in[1]->dtype == REMAT_F32) return rm_cpu_layer_norm_bwd_f32(k);
    return rm_cpu_bf16_via_f32[RM_K_LAYER_NORM_BWD](k);
}
