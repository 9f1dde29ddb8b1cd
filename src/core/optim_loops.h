/* src/core/optim_loops.h — the host loops of the optimizer kernels (src/core/kernels/optim.h),
 * one copy: the public flat-buffer functions (remat_adamw_update_f32 and friends,
 * src/optim/update.c) and the cpu kernels of the table (src/backends/cpu/optim.c) both run
 * them, so an optimizer step through the table gives the bits the flat functions give. The
 * cuda kernels (src/backends/cuda/optim.cu) do the same operations in the same order per
 * element, rounded alike (no fused multiply-adds).
 *
 * f32: the recurrences run in float as PyTorch's f32 kernels do, with the scalar factors
 * formed in double and rounded once (rm_adamw_factors_make). Every element's result depends
 * only on its own inputs, so a buffer may be split anywhere (threads, ZeRO shards) without
 * changing a bit. The gradient is read as g · gscale, rounded (the scale of the mean over
 * micro-batches and of the clip, folded in: the bits of a SCALE pass over g before the
 * update; times 1 it is g exactly). Arguments are not checked here: the callers have. */
#ifndef REMAT_CORE_OPTIM_LOOPS_H
#define REMAT_CORE_OPTIM_LOOPS_H

#include <stdlib.h>

#include "core/kernels/optim.h"

#define RM_OPTIM_OMP_MIN 65536 /* below this, a parallel region costs more than it saves */
#define RM_OPTIM_BLOCK 16384   /* the flat loops' unit of work per thread */

/* The per-element work, on elements [0, n) of the buffers and the calling thread: the one
 * copy that the flat loops (below: blocks of one buffer over the threads) and the cpu's
 * list kernels (src/backends/cpu/optim.c: pieces of many buffers) run. */
static inline void rm_adamw_span_f32(float *p, const float *g, float *m, float *v, int64_t n,
                                     const rm_adamw_factors *f) {
    const float b1 = f->b1f, b2 = f->b2f, eps = f->epsf, decay = f->decayf;
    const float step_size = f->stepf, inv_sqrt_bc2 = f->inv_sqrt_bc2f;
    const float one_m_b1 = f->one_m_b1f, one_m_b2 = f->one_m_b2f, gs = f->gscalef;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + one_m_b1 * gi;
        float vi = b2 * v[i] + one_m_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * inv_sqrt_bc2 + eps;
        p[i] = p[i] * decay - step_size * mi / denom;
    }
}

static inline void rm_adamw_span_f64(double *p, const double *g, double *m, double *v, int64_t n,
                                     const rm_adamw_factors *f) {
    const double b1 = f->b1, b2 = f->b2, eps = f->eps, decay = f->decay;
    const double step_size = f->step_size, sqrt_bc2 = f->sqrt_bc2, gs = f->gscale;
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i] * gs;
        double mi = b1 * m[i] + (1.0 - b1) * gi;
        double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrt(vi) / sqrt_bc2 + eps);
    }
}

/* As torch.optim.SGD's single-tensor loop, in T (float: f32, double: f64). It keeps
 * PyTorch's order of operations; every scalar is rounded to T once. buf may be NULL
 * without momentum. */
#define RM_SGD_SPAN(T, sfx)                                                                        \
    static inline void rm_sgd_span_##sfx(T *p, const T *g, T *buf, int64_t n,                      \
                                         const rm_sgd_kparams *h) {                                \
        const T lr = (T)h->lr, mom = (T)h->momentum, wd = (T)h->weight_decay;                      \
        const T damp = (T)(1.0 - h->dampening);                                                    \
        const T gs = (T)(h->grad_scale != 0 ? h->grad_scale : 1.0);                                \
        const bool use_buf = h->momentum != 0, first = h->first, nesterov = h->nesterov;           \
        const bool decay = h->weight_decay != 0;                                                   \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T d = g[i] * gs;                                                                       \
            if (decay) d = d + wd * p[i];                                                          \
            if (use_buf) {                                                                         \
                T b = first ? d : mom * buf[i] + damp * d;                                         \
                buf[i] = b;                                                                        \
                d = nesterov ? d + mom * b : b;                                                    \
            }                                                                                      \
            p[i] -= lr * d;                                                                        \
        }                                                                                          \
    }
RM_SGD_SPAN(float, f32)
RM_SGD_SPAN(double, f64)
#undef RM_SGD_SPAN

/* The flat loops (remat_adamw_update_f32 and friends): one buffer's blocks spread over
 * the threads above RM_OPTIM_OMP_MIN elements. */
static inline int64_t rm_optim_block_len(int64_t n, int64_t b) {
    const int64_t lo = b * RM_OPTIM_BLOCK;
    return n - lo < RM_OPTIM_BLOCK ? n - lo : RM_OPTIM_BLOCK;
}
#define RM_ADAMW_LOOP(T, sfx)                                                                      \
    static inline void rm_adamw_loop_##sfx(T *p, const T *g, T *m, T *v, int64_t n,                \
                                           const rm_adamw_factors *f) {                            \
        const int64_t nb = (n + RM_OPTIM_BLOCK - 1) / RM_OPTIM_BLOCK;                              \
        _Pragma("omp parallel for if (n > RM_OPTIM_OMP_MIN)") for (int64_t b = 0; b < nb; b++) {   \
            const int64_t o = b * RM_OPTIM_BLOCK;                                                  \
            rm_adamw_span_##sfx(p + o, g + o, m + o, v + o, rm_optim_block_len(n, b), f);          \
        }                                                                                          \
    }
RM_ADAMW_LOOP(float, f32)
RM_ADAMW_LOOP(double, f64)
#undef RM_ADAMW_LOOP
#define RM_SGD_LOOP(T, sfx)                                                                        \
    static inline void rm_sgd_loop_##sfx(T *p, const T *g, T *buf, int64_t n,                      \
                                         const rm_sgd_kparams *h) {                                \
        const int64_t nb = (n + RM_OPTIM_BLOCK - 1) / RM_OPTIM_BLOCK;                              \
        _Pragma("omp parallel for if (n > RM_OPTIM_OMP_MIN)") for (int64_t b = 0; b < nb; b++) {   \
            const int64_t o = b * RM_OPTIM_BLOCK;                                                  \
            rm_sgd_span_##sfx(p + o, g + o, buf ? buf + o : NULL, rm_optim_block_len(n, b), h);    \
        }                                                                                          \
    }
RM_SGD_LOOP(float, f32)
RM_SGD_LOOP(double, f64)
#undef RM_SGD_LOOP

/* Sums of squares in fixed chunks whose partial sums are added in order: the result is
 * the same bits for any number of threads (a clipped run resumes bitwise whatever
 * OMP_NUM_THREADS says). */
#define RM_SUMSQ_CHUNK 16384

static inline double rm_sumsq_chunk(const void *x, bool f64, int64_t lo, int64_t hi) {
    double s = 0;
    if (f64)
        for (int64_t i = lo; i < hi; i++) s += ((const double *)x)[i] * ((const double *)x)[i];
    else
        for (int64_t i = lo; i < hi; i++)
            s += (double)((const float *)x)[i] * (double)((const float *)x)[i];
    return s;
}

static inline double rm_sum_squares_loop(const void *x, bool f64, int64_t n) {
    if (!x || n <= 0) return 0;
    const int64_t nc = (n + RM_SUMSQ_CHUNK - 1) / RM_SUMSQ_CHUNK;
    double small[64], *part = nc <= 64 ? small : malloc(sizeof(double) * (size_t)nc);
    double s = 0;
    if (!part) { /* no room for the partial sums: the same chunks, one thread */
        for (int64_t c = 0; c < nc; c++)
            s += rm_sumsq_chunk(x, f64, c * RM_SUMSQ_CHUNK,
                                c + 1 < nc ? (c + 1) * RM_SUMSQ_CHUNK : n);
        return s;
    }
#pragma omp parallel for if (nc > 4)
    for (int64_t c = 0; c < nc; c++)
        part[c] =
            rm_sumsq_chunk(x, f64, c * RM_SUMSQ_CHUNK, c + 1 < nc ? (c + 1) * RM_SUMSQ_CHUNK : n);
    for (int64_t c = 0; c < nc; c++) s += part[c];
    if (part != small) free(part);
    return s;
}

/* sums[i] = rm_sum_squares_loop(x[i], f64[i], n[i]) for every i < count, bit for bit (the
 * same chunks from each buffer's start, each buffer's partial sums added in order), with
 * every buffer's chunks in one parallel region: the global norm of many small gradients
 * without a region (or a serial pass) each. false, nothing written, when there is no
 * memory for the chunk list. */
static inline bool rm_sum_squares_list(int count, const void *const *x, const bool *f64,
                                       const int64_t *n, double *sums) {
    int64_t nc = 0, total = 0;
    for (int i = 0; i < count; i++)
        if (x[i] && n[i] > 0) nc += (n[i] + RM_SUMSQ_CHUNK - 1) / RM_SUMSQ_CHUNK, total += n[i];
    int *who = malloc(sizeof *who * (size_t)(nc ? nc : 1));
    int64_t *lo = malloc(sizeof *lo * (size_t)(nc ? nc : 1));
    double *part = malloc(sizeof *part * (size_t)(nc ? nc : 1));
    if (!who || !lo || !part) {
        free(who), free(lo), free(part);
        return false;
    }
    int64_t k = 0;
    for (int i = 0; i < count; i++)
        for (int64_t a = 0; x[i] && a < n[i]; a += RM_SUMSQ_CHUNK) who[k] = i, lo[k++] = a;
#pragma omp parallel for schedule(dynamic, 4) if (total > RM_OPTIM_OMP_MIN)
    for (int64_t c = 0; c < nc; c++) {
        const int i = who[c];
        const int64_t hi = n[i] - lo[c] < RM_SUMSQ_CHUNK ? n[i] : lo[c] + RM_SUMSQ_CHUNK;
        part[c] = rm_sumsq_chunk(x[i], f64[i], lo[c], hi);
    }
    k = 0;
    for (int i = 0; i < count; i++) {
        double s = 0;
        for (int64_t a = 0; x[i] && a < n[i]; a += RM_SUMSQ_CHUNK) s += part[k++];
        sums[i] = s;
    }
    free(who), free(lo), free(part);
    return true;
}

#endif /* REMAT_CORE_OPTIM_LOOPS_H */
