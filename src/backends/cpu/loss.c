/* src/backends/cpu/loss.c — cpu kernels of embedding, cross_entropy and
 * mse_loss (src/ops/loss.c).
 *
 * embedding gathers rows of weight (num, dim); its backward scatter-adds
 * the output gradient back into a (num, dim) gradient. Repeated indices
 * accumulate. The scatter runs in index order within each block of
 * columns and is parallel over column blocks, so it is deterministic.
 *
 * cross_entropy fuses log_softmax and the NLL: per row n,
 *   loss_n = logsumexp(x[n, :]) - x[n, t_n],
 * averaged over rows whose target is not ignore_index. The per-row
 * logsumexp is an output the op saves (N values), so the backward
 *   dx[n, c] = g * (exp(x[n, c] - lse_n) - [c == t_n]) / count
 * needs no second pass for the max and the sum.
 *
 * The scalar losses sum their per-row / per-element terms in double over
 * fixed chunks, so the value does not depend on the thread count.
 *
 * The index and target range checks read the data, so they are the
 * kernels' (skipped, with the kernels, in skip mode); their messages are
 * named after the call by the driver. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "tmpl.h"

#define LOSS_CHUNK 4096 /* elements per partial sum of a scalar loss */
#define EMB_COL_BLOCK 64

/* The value of a 0-dim f32 or f64 tensor (a loss's gradient), as double. */
static double scalar_of(const remat_tensor *g) {
    const void *p = rm_ptr(g);
    return g->dtype == REMAT_F32 ? (double)*(const float *)p : *(const double *)p;
}

/* ---- embedding ------------------------------------------------------------------------- */

/* The first index out of [0, num) as an error (REMAT_OK if none). */
static remat_status check_indices(const remat_tensor *w, const int64_t *ip, int64_t P) {
    const int64_t num = w->shape[0];
    for (int64_t p = 0; p < P; p++) {
        if (ip[p] < 0 || ip[p] >= num) {
            char bw[200];
            return rm_err(REMAT_EINVAL,
                          "index out of range: indices[%lld] (flat) = %lld, weight %s has %lld "
                          "rows (valid: 0 to %lld)",
                          (long long)p, (long long)ip[p], rm_tensor_str(w, bw, sizeof bw),
                          (long long)num, (long long)num - 1);
        }
    }
    return REMAT_OK;
}

/* ---- cross_entropy ------------------------------------------------------------------------ */

/* Sum of n doubles over fixed chunks (thread-count independent). */
static double sum_fixed_chunks(const double *v, int64_t n) {
    int64_t nch = (n + LOSS_CHUNK - 1) / LOSS_CHUNK;
    double total = 0;
    for (int64_t c = 0; c < nch; c++) {
        int64_t lo = c * LOSS_CHUNK, hi = lo + LOSS_CHUNK < n ? lo + LOSS_CHUNK : n;
        double s = 0;
        for (int64_t i = lo; i < hi; i++) s += v[i];
        total += s;
    }
    return total;
}

/* Rows whose target is not ignore_index; with check, the first target out of
 * [0, C) that is not ignore_index as an error (*count then unset). */
static remat_status count_targets(const remat_tensor *x, const int64_t *tp, int64_t ignore_index,
                                  bool check, int64_t *count) {
    const int64_t N = x->shape[0], C = x->shape[1];
    int64_t n_kept = 0;
    for (int64_t n = 0; n < N; n++) {
        if (tp[n] == ignore_index) continue;
        if (check && (tp[n] < 0 || tp[n] >= C)) {
            char bl[200];
            return rm_err(REMAT_EINVAL,
                          "target out of range: targets[%lld] = %lld, logits %s "
                          "has %lld classes (valid: 0 to %lld, or ignore_index %lld)",
                          (long long)n, (long long)tp[n], rm_tensor_str(x, bl, sizeof bl),
                          (long long)C, (long long)C - 1, (long long)ignore_index);
        }
        n_kept++;
    }
    *count = n_kept;
    return REMAT_OK;
}

/* ---- the kernels, once per dtype: loss_body.h ------------------------------------------ */
#define T f32
#define LOSS_LOGF logf
#include "loss_body.h"

#define T f64
#define LOSS_LOGF log
#include "loss_body.h"
