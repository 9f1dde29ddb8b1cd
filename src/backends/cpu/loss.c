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
 * Under autocast, bf16 logits reach cross_entropy uncast (its f32 category keeps them:
 * autocast_keep) and its outputs are f32: the bf16 kernels below widen one row at a time
 * into a per-thread f32 buffer (exact: the values the cast would have written) and run the
 * f32 row code on it, the backward rounding each row of dx as the cast's backward would.
 * The bits of the cast then the f32 kernels, without the (N, C) f32 copy of the logits
 * (forward), the f32 gradient and its cast (backward), or the f32 logits kept for the
 * backward.
 *
 * The index and target range checks read the data, so they are the
 * kernels' (skipped, with the kernels, in skip mode); their messages are
 * named after the call by the driver. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
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

/* ---- cross_entropy of bf16 logits ----------------------------------------------------- */
/* in: x (bf16 N, C), t; out: loss, lse (f32: autocast's; bf16 ones, a bf16 call outside
 * autocast, go through f32 as every bf16 kernel without its own) */
remat_status rm_cpu_cross_entropy_bf16(const rm_kargs *k) {
    if (k->out[0]->dtype != REMAT_F32 || k->out[1]->dtype != REMAT_F32)
        return rm_cpu_bf16_via_f32[RM_K_CROSS_ENTROPY](k);
    const rm_ce_params *p = k->params;
    const remat_tensor *x = k->in[0];
    const int64_t *tp = rm_ptr(k->in[1]);
    const uint16_t *xh = rm_ptr(x);
    float *lse = rm_ptr(k->out[1]);
    const int64_t N = x->shape[0], C = x->shape[1], ignore = p->ignore_index;
    int64_t count = 0;
    int rc = count_targets(x, tp, ignore, true, &count);
    if (rc) return rc;
    double *loss = malloc(sizeof(double) * (size_t)(N ? N : 1));
    if (!loss) return rm_err(REMAT_ENOMEM, "out of memory");
    int fail = 0;
#pragma omp parallel if (N * C > RM_OMP_MIN / 4)
    {
        /* one row of logits a thread, malloc's (not the counted workspace.h): a
         * thousandth of the logits the op reads at GPT-2's batch, and taken inside
         * the region, where the planner's meter would not see it anyway */
        float *row = malloc(sizeof(float) * (size_t)C + 1);
        if (!row) {
#pragma omp atomic write
            fail = 1;
        }
#pragma omp for
        for (int64_t n = 0; n < N; n++) {
            if (!row) continue;
            rm_bf16_widen_run(xh + n * C, row, C);
            ce_row_fwd_f32(row, tp[n], ignore, C, &lse[n], &loss[n]);
        }
        free(row);
    }
    if (fail) {
        free(loss);
        return rm_err(REMAT_ENOMEM, "out of memory for a row of logits");
    }
    double mean = count ? sum_fixed_chunks(loss, N) / (double)count : NAN; /* no targets: NaN */
    *(float *)rm_ptr(k->out[0]) = (float)mean;
    free(loss);
    return REMAT_OK;
}

/* in: x (bf16), t, lse (f32), g (f32 0-dim); out: dx (bf16): each row computed in f32 and
 * rounded (rm_bf16_round_run: the cast's rounding). A bf16 lse (the plain bf16 op) goes
 * through f32. */
remat_status rm_cpu_cross_entropy_bwd_bf16(const rm_kargs *k) {
    if (k->in[2]->dtype != REMAT_F32 || k->out[0]->dtype != REMAT_BF16)
        return rm_cpu_bf16_via_f32[RM_K_CROSS_ENTROPY_BWD](k);
    const rm_ce_params *p = k->params;
    const remat_tensor *x = k->in[0];
    const int64_t *tp = rm_ptr(k->in[1]);
    const uint16_t *xh = rm_ptr(x);
    const float *lse = rm_ptr(k->in[2]);
    uint16_t *dx = rm_ptr(k->out[0]);
    const int64_t N = x->shape[0], C = x->shape[1], ignore = p->ignore_index;
    int64_t count = 0;
    count_targets(x, tp, ignore, false, &count);
    const float scale = (float)(scalar_of(k->in[3]) / (double)count); /* count 0: NaN */
    int fail = 0;
#pragma omp parallel if (N * C > RM_OMP_MIN / 4)
    {
        /* two rows a thread, malloc's: as the forward's */
        float *row = malloc(sizeof(float) * (size_t)(2 * C) + 1);
        if (!row) {
#pragma omp atomic write
            fail = 1;
        }
#pragma omp for
        for (int64_t n = 0; n < N; n++) {
            if (!row) continue;
            if (tp[n] == ignore) {
                memset(dx + n * C, 0, (size_t)C * sizeof(uint16_t)); /* +0 rounds to +0 */
                continue;
            }
            rm_bf16_widen_run(xh + n * C, row, C);
            ce_row_bwd_f32(row, tp[n], lse[n], scale, row + C, C);
            rm_bf16_round_run(row + C, dx + n * C, C);
        }
        free(row);
    }
    return fail ? rm_err(REMAT_ENOMEM, "out of memory for a row of logits") : REMAT_OK;
}
