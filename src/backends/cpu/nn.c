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

#include "clones.h"
#include "core/philox.h"
#include "cpu.h"
#include "vmath.h"

#define NN_COL_BLOCK 64

typedef float f32;
typedef double f64;

/* f32 exp: rm_expf_v in vmath.h (vectorisable Cephes expf, ~1 ulp). */

/* ---- row max -------------------------------------------------------------------------
 * Through the integer keys of rm_rowmax_key (cpu/nn.h). A NaN anywhere makes
 * the result NaN (exp(x - NaN) then poisons the row, as in PyTorch). */
#define ROWMAX_KERNEL(T)                                                                           \
    RM_CPU_CLONES_EXTERN T rm_row_max_##T(const T *restrict x, int64_t n) {                        \
        T best;                                                                                    \
        if (rm_rowmax_key_##T(x, n, &best)) return (T)NAN;                                         \
        if (n == 0) return -INFINITY;                                                              \
        return best;                                                                               \
    }
ROWMAX_KERNEL(f32)
ROWMAX_KERNEL(f64)

/* ---- softmax / log_softmax kernels ----------------------------------------------------- */
#define NN_LANES 16
#define SOFTMAX_KERNELS(T, EXPF, LOGF)                                                             \
    /* Row helpers (also used by cross_entropy in loss.c). Float reductions use NN_LANES      \
     * independent accumulators so they vectorise without reassociation flags. */    \
    /* sum_i exp(x[i] - sub); also stores the terms in y unless y is NULL */                       \
    RM_CPU_CLONES_EXTERN T rm_row_expsum_##T(const T *restrict x, T sub, T *restrict y,            \
                                             int64_t n) {                                          \
        T acc[NN_LANES];                                                                           \
        for (int j = 0; j < NN_LANES; j++) acc[j] = 0;                                             \
        int64_t i = 0;                                                                             \
        if (y) {                                                                                   \
            for (; i + NN_LANES <= n; i += NN_LANES)                                               \
                for (int j = 0; j < NN_LANES; j++) {                                               \
                    T e = EXPF(x[i + j] - sub);                                                    \
                    y[i + j] = e;                                                                  \
                    acc[j] += e;                                                                   \
                }                                                                                  \
            for (; i < n; i++) {                                                                   \
                y[i] = EXPF(x[i] - sub);                                                           \
                acc[0] += y[i];                                                                    \
            }                                                                                      \
        } else {                                                                                   \
            for (; i + NN_LANES <= n; i += NN_LANES)                                               \
                for (int j = 0; j < NN_LANES; j++) acc[j] += EXPF(x[i + j] - sub);                 \
            for (; i < n; i++) acc[0] += EXPF(x[i] - sub);                                         \
        }                                                                                          \
        for (int w = NN_LANES / 2; w > 0; w /= 2) /* pairwise combine of the lanes */              \
            for (int j = 0; j < w; j++) acc[j] += acc[j + w];                                      \
        return acc[0];                                                                             \
    }                                                                                              \
                                                                                                   \
    /* y[i] = exp(x[i] - sub) * scale */                                                           \
    RM_CPU_CLONES_EXTERN void rm_row_exp_scale_##T(const T *restrict x, T sub, T scale,            \
                                                   T *restrict y, int64_t n) {                     \
        for (int64_t i = 0; i < n; i++) y[i] = EXPF(x[i] - sub) * scale;                           \
    }                                                                                              \
    /* y = softmax or log_softmax of x (O, R, I) over R. */                                        \
    RM_CPU_CLONES static void softmax_fwd_##T(const T *restrict x, T *restrict y, int64_t O,       \
                                              int64_t R, int64_t I, bool log_out) {                \
        int64_t total = O * R * I;                                                                 \
        if (I == 1) {                                                                              \
            _Pragma("omp parallel for if (total > RM_OMP_MIN / 4)") for (int64_t o = 0; o < O;     \
                                                                         o++) {                    \
                const T *xo = x + o * R;                                                           \
                T *yo = y + o * R;                                                                 \
                T mx = rm_row_max_##T(xo, R);                                                      \
                if (mx == -INFINITY) mx = 0; /* all -inf: avoid inf - inf */                       \
                if (log_out) {                                                                     \
                    T lse = mx + LOGF(rm_row_expsum_##T(xo, mx, NULL, R));                         \
                    for (int64_t r = 0; r < R; r++) yo[r] = xo[r] - lse;                           \
                } else {                                                                           \
                    T inv = (T)1 / rm_row_expsum_##T(xo, mx, yo, R);                               \
                    for (int64_t r = 0; r < R; r++) yo[r] *= inv;                                  \
                }                                                                                  \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        int64_t nb = (I + NN_COL_BLOCK - 1) / NN_COL_BLOCK;                                        \
        _Pragma("omp parallel for if (total > RM_OMP_MIN / 4)") for (int64_t t = 0; t < O * nb;    \
                                                                     t++) {                        \
            int64_t o = t / nb, j0 = (t % nb) * NN_COL_BLOCK;                                      \
            int w = (int)(I - j0 < NN_COL_BLOCK ? I - j0 : NN_COL_BLOCK);                          \
            const T *xo = x + o * R * I + j0;                                                      \
            T *yo = y + o * R * I + j0;                                                            \
            T mx[NN_COL_BLOCK], s[NN_COL_BLOCK];                                                   \
            for (int j = 0; j < w; j++) {                                                          \
                mx[j] = -INFINITY;                                                                 \
                s[j] = 0;                                                                          \
            }                                                                                      \
            for (int64_t r = 0; r < R; r++)                                                        \
                for (int j = 0; j < w; j++) mx[j] = xo[r * I + j] > mx[j] ? xo[r * I + j] : mx[j]; \
            for (int j = 0; j < w; j++)                                                            \
                if (mx[j] == -INFINITY) mx[j] = 0;                                                 \
            for (int64_t r = 0; r < R; r++)                                                        \
                for (int j = 0; j < w; j++) {                                                      \
                    T e = EXPF(xo[r * I + j] - mx[j]);                                             \
                    if (!log_out) yo[r * I + j] = e;                                               \
                    s[j] += e;                                                                     \
                }                                                                                  \
            if (log_out) {                                                                         \
                for (int j = 0; j < w; j++) s[j] = mx[j] + LOGF(s[j]); /* lse */                   \
                for (int64_t r = 0; r < R; r++)                                                    \
                    for (int j = 0; j < w; j++) yo[r * I + j] = xo[r * I + j] - s[j];              \
            } else {                                                                               \
                for (int j = 0; j < w; j++) s[j] = (T)1 / s[j];                                    \
                for (int64_t r = 0; r < R; r++)                                                    \
                    for (int j = 0; j < w; j++) yo[r * I + j] *= s[j];                             \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* softmax:     dx = y * (g - sum_r(g * y))                                               \
     * log_softmax: dx = g - exp(y) * sum_r(g) */    \
    RM_CPU_CLONES static void softmax_bwd_##T(const T *restrict g, const T *restrict y,            \
                                              T *restrict dx, int64_t O, int64_t R, int64_t I,     \
                                              bool log_out) {                                      \
        int64_t total = O * R * I;                                                                 \
        if (I == 1) {                                                                              \
            _Pragma("omp parallel for if (total > RM_OMP_MIN / 4)") for (int64_t o = 0; o < O;     \
                                                                         o++) {                    \
                const T *go = g + o * R, *yo = y + o * R;                                          \
                T *d = dx + o * R;                                                                 \
                T acc[NN_LANES];                                                                   \
                for (int j = 0; j < NN_LANES; j++) acc[j] = 0;                                     \
                int64_t r = 0;                                                                     \
                if (log_out) {                                                                     \
                    for (; r + NN_LANES <= R; r += NN_LANES)                                       \
                        for (int j = 0; j < NN_LANES; j++) acc[j] += go[r + j];                    \
                    for (; r < R; r++) acc[0] += go[r];                                            \
                } else {                                                                           \
                    for (; r + NN_LANES <= R; r += NN_LANES)                                       \
                        for (int j = 0; j < NN_LANES; j++) acc[j] += go[r + j] * yo[r + j];        \
                    for (; r < R; r++) acc[0] += go[r] * yo[r];                                    \
                }                                                                                  \
                for (int w = NN_LANES / 2; w > 0; w /= 2)                                          \
                    for (int j = 0; j < w; j++) acc[j] += acc[j + w];                              \
                T s = acc[0];                                                                      \
                if (log_out)                                                                       \
                    for (r = 0; r < R; r++) d[r] = go[r] - EXPF(yo[r]) * s;                        \
                else                                                                               \
                    for (r = 0; r < R; r++) d[r] = yo[r] * (go[r] - s);                            \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        int64_t nb = (I + NN_COL_BLOCK - 1) / NN_COL_BLOCK;                                        \
        _Pragma("omp parallel for if (total > RM_OMP_MIN / 4)") for (int64_t t = 0; t < O * nb;    \
                                                                     t++) {                        \
            int64_t o = t / nb, j0 = (t % nb) * NN_COL_BLOCK;                                      \
            int w = (int)(I - j0 < NN_COL_BLOCK ? I - j0 : NN_COL_BLOCK);                          \
            int64_t base = o * R * I + j0;                                                         \
            const T *go = g + base, *yo = y + base;                                                \
            T *d = dx + base;                                                                      \
            T s[NN_COL_BLOCK];                                                                     \
            for (int j = 0; j < w; j++) s[j] = 0;                                                  \
            for (int64_t r = 0; r < R; r++)                                                        \
                for (int j = 0; j < w; j++)                                                        \
                    s[j] += log_out ? go[r * I + j] : go[r * I + j] * yo[r * I + j];               \
            for (int64_t r = 0; r < R; r++)                                                        \
                for (int j = 0; j < w; j++) {                                                      \
                    int64_t k = r * I + j;                                                         \
                    d[k] = log_out ? go[k] - EXPF(yo[k]) * s[j] : yo[k] * (go[k] - s[j]);          \
                }                                                                                  \
        }                                                                                          \
    }

SOFTMAX_KERNELS(f32, rm_expf_v, logf)
SOFTMAX_KERNELS(f64, exp, log)

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

#define LN_REDUCE(acc) /* pairwise combine of the lanes into acc[0] */                             \
    for (int w_ = LN_LANES / 2; w_ > 0; w_ /= 2)                                                   \
        for (int j_ = 0; j_ < w_; j_++) acc[j_] += acc[j_ + w_]

/* The backward's first pass over a row's full lane blocks: lane sums of wg = w * g and
 * wg * norm, and with COLS the chunk's column sums. Needs gn, xn, mn, rs, c, C, a, bb,
 * pw and pb in scope. Lane loops use a * b + c, not fmaf: GCC 12's SLP vectoriser
 * turns fmaf lanes into element-by-element loads. */
#define LN_BWD_LANES(T, WG, COLS)                                                                  \
    do {                                                                                           \
        for (; c + LN_LANES <= C; c += LN_LANES)                                                   \
            for (int j = 0; j < LN_LANES; j++) {                                                   \
                T gv = gn[c + j], nv = (xn[c + j] - mn) * rs, wg = WG;                             \
                a[j] += wg;                                                                        \
                bb[j] += wg * nv;                                                                  \
                if (COLS) {                                                                        \
                    pw[c + j] += nv * gv;                                                          \
                    pb[c + j] += gv;                                                               \
                }                                                                                  \
            }                                                                                      \
    } while (0)

#define LAYERNORM_KERNELS(T, FMA)                                                                  \
    /* Row mean and rstd = 1 / sqrt(biased variance + eps), the variance two-pass. */              \
    RM_CPU_CLONES static void ln_stats_##T(const T *restrict xn, int64_t C, double eps, T *mean,   \
                                           T *rstd) {                                              \
        T sh = C > 0 ? xn[0] : (T)0;                                                               \
        T a[LN_LANES];                                                                             \
        for (int j = 0; j < LN_LANES; j++) a[j] = 0;                                               \
        int64_t c = 0;                                                                             \
        for (; c + LN_LANES <= C; c += LN_LANES)                                                   \
            for (int j = 0; j < LN_LANES; j++) a[j] += xn[c + j] - sh;                             \
        for (; c < C; c++) a[0] += xn[c] - sh;                                                     \
        LN_REDUCE(a);                                                                              \
        T m = sh + a[0] / (T)C;                                                                    \
        for (int j = 0; j < LN_LANES; j++) a[j] = 0;                                               \
        for (c = 0; c + LN_LANES <= C; c += LN_LANES)                                              \
            for (int j = 0; j < LN_LANES; j++) {                                                   \
                T d = xn[c + j] - m;                                                               \
                a[j] += d * d;                                                                     \
            }                                                                                      \
        for (; c < C; c++) a[0] += (xn[c] - m) * (xn[c] - m);                                      \
        LN_REDUCE(a);                                                                              \
        *mean = m;                                                                                 \
        *rstd = (T)(1.0 / sqrt((double)(a[0] / (T)C) + eps));                                      \
    }                                                                                              \
                                                                                                   \
    /* x (N, C) -> y (N, C); mean, rstd (N). w, b (C) or NULL. */                                  \
    RM_CPU_CLONES static void layernorm_fwd_##T(                                                   \
        const T *restrict x, const T *restrict w, const T *restrict b, T *restrict y,              \
        T *restrict mean, T *restrict rstd, int64_t N, int64_t C, double eps) {                    \
        _Pragma("omp parallel for if (N * C > RM_OMP_MIN / 4)") for (int64_t n = 0; n < N; n++) {  \
            const T *restrict xn = x + n * C;                                                      \
            T *restrict yn = y + n * C;                                                            \
            T m, s;                                                                                \
            ln_stats_##T(xn, C, eps, &m, &s);                                                      \
            if (w && b)                                                                            \
                for (int64_t c = 0; c < C; c++) yn[c] = FMA((xn[c] - m) * s, w[c], b[c]);          \
            else if (w)                                                                            \
                for (int64_t c = 0; c < C; c++) yn[c] = (xn[c] - m) * s * w[c];                    \
            else if (b)                                                                            \
                for (int64_t c = 0; c < C; c++) yn[c] = FMA(xn[c] - m, s, b[c]);                   \
            else                                                                                   \
                for (int64_t c = 0; c < C; c++) yn[c] = (xn[c] - m) * s;                           \
            mean[n] = m;                                                                           \
            rstd[n] = s;                                                                           \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* Rows [r0, r1) of the backward (see layernorm_bwd): dx rows (dx may be NULL) and, if    \
     * pw is not NULL, this chunk's column sums pw[c] = sum_n norm * g, pb[c] = sum_n g.      \
     * s1 = sum_c w*g and s2 = sum_c w*g*norm are lane sums over the row held in L1. */    \
    RM_CPU_CLONES static void ln_bwd_rows_##T(                                                     \
        const T *restrict g, const T *restrict x, const T *restrict w, const T *restrict mean,     \
        const T *restrict rstd, T *restrict dx, T *restrict pw, T *restrict pb, int64_t r0,        \
        int64_t r1, int64_t C) {                                                                   \
        if (pw)                                                                                    \
            for (int64_t c = 0; c < C; c++) pw[c] = pb[c] = 0;                                     \
        for (int64_t n = r0; n < r1; n++) {                                                        \
            const T *restrict gn = g + n * C, *restrict xn = x + n * C;                            \
            const T mn = mean[n], rs = rstd[n];                                                    \
            if (!dx) { /* column sums only */                                                      \
                for (int64_t c = 0; c < C; c++) {                                                  \
                    pw[c] += (xn[c] - mn) * rs * gn[c];                                            \
                    pb[c] += gn[c];                                                                \
                }                                                                                  \
                continue;                                                                          \
            }                                                                                      \
            T a[LN_LANES], bb[LN_LANES];                                                           \
            for (int j = 0; j < LN_LANES; j++) a[j] = bb[j] = 0;                                   \
            int64_t c = 0;                                                                         \
            if (w) {                                                                               \
                if (pw) LN_BWD_LANES(T, w[c + j] * gv, 1);                                         \
                else LN_BWD_LANES(T, w[c + j] * gv, 0);                                            \
            } else {                                                                               \
                if (pw) LN_BWD_LANES(T, gv, 1);                                                    \
                else LN_BWD_LANES(T, gv, 0);                                                       \
            }                                                                                      \
            for (; c < C; c++) {                                                                   \
                T gv = gn[c], nv = (xn[c] - mn) * rs, wg = w ? w[c] * gv : gv;                     \
                a[0] += wg;                                                                        \
                bb[0] += wg * nv;                                                                  \
                if (pw) {                                                                          \
                    pw[c] += nv * gv;                                                              \
                    pb[c] += gv;                                                                   \
                }                                                                                  \
            }                                                                                      \
            LN_REDUCE(a);                                                                          \
            LN_REDUCE(bb);                                                                         \
            const T m1 = a[0] / (T)C, m2 = bb[0] / (T)C;                                           \
            T *restrict d = dx + n * C;                                                            \
            if (w)                                                                                 \
                for (c = 0; c < C; c++)                                                            \
                    d[c] = FMA(-(xn[c] - mn) * rs, m2, w[c] * gn[c] - m1) * rs;                    \
            else                                                                                   \
                for (c = 0; c < C; c++) d[c] = FMA(-(xn[c] - mn) * rs, m2, gn[c] - m1) * rs;       \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* dx (N, C) from g (N, C); dw, db (C) (each may be NULL; part, scratch of 2 * C *        \
     * ceil(N / rm_cpu_chunk_rows(N, C)) elements, is needed when either is not). As llm.c:       \
     *   norm = (x - mean) * rstd                                                             \
     *   dx = (w*g - mean_c(w*g) - norm * mean_c(w*g*norm)) * rstd                            \
     *   dw = sum_n norm * g,  db = sum_n g (chunk partials in T, summed in double) */    \
    RM_CPU_CLONES static void layernorm_bwd_##T(                                                   \
        const T *restrict g, const T *restrict x, const T *restrict w, const T *restrict mean,     \
        const T *restrict rstd, T *restrict dx, T *restrict dw, T *restrict db, T *restrict part,  \
        int64_t N, int64_t C) {                                                                    \
        bool cols = dw || db;                                                                      \
        if (!dx && !cols) return;                                                                  \
        int64_t rb = rm_cpu_chunk_rows(N, C), nch = (N + rb - 1) / rb;                             \
        _Pragma("omp parallel for if (N * C > RM_OMP_MIN / 4)") for (int64_t k = 0; k < nch;       \
                                                                     k++) {                        \
            int64_t r0 = k * rb, r1 = r0 + rb < N ? r0 + rb : N;                                   \
            T *pw = cols ? part + k * 2 * C : NULL;                                                \
            ln_bwd_rows_##T(g, x, w, mean, rstd, dx, pw, pw ? pw + C : NULL, r0, r1, C);           \
        }                                                                                          \
        if (!cols) return;                                                                         \
        int64_t nb = (C + NN_COL_BLOCK - 1) / NN_COL_BLOCK;                                        \
        _Pragma("omp parallel for if (nch * C > RM_OMP_MIN)") for (                                \
            int64_t bk = 0; bk < nb; bk++) { /* blocks of columns: rows of part stream */          \
            int64_t c0 = bk * NN_COL_BLOCK;                                                        \
            int wd = (int)(C - c0 < NN_COL_BLOCK ? C - c0 : NN_COL_BLOCK);                         \
            double sw[NN_COL_BLOCK], sb[NN_COL_BLOCK];                                             \
            for (int j = 0; j < wd; j++) sw[j] = sb[j] = 0;                                        \
            for (int64_t k = 0; k < nch; k++) {                                                    \
                const T *pw = part + k * 2 * C + c0, *pb = pw + C;                                 \
                for (int j = 0; j < wd; j++) {                                                     \
                    sw[j] += (double)pw[j];                                                        \
                    sb[j] += (double)pb[j];                                                        \
                }                                                                                  \
            }                                                                                      \
            for (int j = 0; j < wd; j++) {                                                         \
                if (dw) dw[c0 + j] = (T)sw[j];                                                     \
                if (db) db[c0 + j] = (T)sb[j];                                                     \
            }                                                                                      \
        }                                                                                          \
    }

LAYERNORM_KERNELS(f32, RM_FMAF)
LAYERNORM_KERNELS(f64, RM_FMA)

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
#define DROPOUT_KERNELS(T)                                                                         \
    /* Full blocks [j0, j1): element i keeps iff word i%4 of block counter + i/4 passes the  \
     * threshold; y = x * scale where kept, else 0; bits (may be NULL) get the keep bits. A  \
     * separate function with restrict pointers (OpenMP outlining drops them), one loop per  \
     * mask case, so the Philox rounds vectorise across blocks. */     \
    static void dropout_blocks_##T(const T *restrict x, T *restrict y, uint8_t *restrict bits,     \
                                   int64_t j0, int64_t j1, uint32_t thr, T scale, uint32_t k0,     \
                                   uint32_t k1, uint64_t counter) {                                \
        if (bits) {                                                                                \
            for (int64_t j = j0; j < j1; j++) {                                                    \
                uint32_t r[4];                                                                     \
                rm_philox_hd(k0, k1, counter + (uint64_t)j, r);                                    \
                unsigned nib = 0;                                                                  \
                for (int k = 0; k < 4; k++) {                                                      \
                    bool keep = (r[k] >> 8) >= thr;                                                \
                    nib |= (unsigned)keep << k;                                                    \
                    y[4 * j + k] = x[4 * j + k] * (keep ? scale : (T)0);                           \
                }                                                                                  \
                if (j & 1) bits[j >> 1] = (uint8_t)(bits[j >> 1] | (nib << 4));                    \
                else bits[j >> 1] = (uint8_t)nib;                                                  \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t j = j0; j < j1; j++) {                                                    \
                uint32_t r[4];                                                                     \
                rm_philox_hd(k0, k1, counter + (uint64_t)j, r);                                    \
                for (int k = 0; k < 4; k++)                                                        \
                    y[4 * j + k] = x[4 * j + k] * ((r[k] >> 8) >= thr ? scale : (T)0);             \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void dropout_fwd_##T(const T *restrict x, T *restrict y, uint8_t *restrict bits,        \
                                int64_t n, uint32_t thr, T scale, const uint32_t key[2],           \
                                uint64_t counter) {                                                \
        int64_t nfull = n / 4, nch = (nfull + DROPOUT_CHUNK - 1) / DROPOUT_CHUNK;                  \
        uint32_t k0 = key[0], k1 = key[1];                                                         \
        _Pragma("omp parallel for if (n > RM_OMP_MIN)") for (int64_t c = 0; c < nch; c++) {        \
            int64_t j0 = c * DROPOUT_CHUNK;                                                        \
            int64_t j1 = j0 + DROPOUT_CHUNK < nfull ? j0 + DROPOUT_CHUNK : nfull;                  \
            dropout_blocks_##T(x, y, bits, j0, j1, thr, scale, k0, k1, counter);                   \
        }                                                                                          \
        if (nfull * 4 < n) { /* the last, partial block */                                         \
            uint32_t r[4];                                                                         \
            rm_philox_hd(k0, k1, counter + (uint64_t)nfull, r);                                    \
            unsigned nib = 0;                                                                      \
            for (int64_t i = nfull * 4; i < n; i++) {                                              \
                bool keep = (r[i - nfull * 4] >> 8) >= thr;                                        \
                nib |= (unsigned)keep << (i - nfull * 4);                                          \
                y[i] = x[i] * (keep ? scale : (T)0);                                               \
            }                                                                                      \
            if (bits) {                                                                            \
                if (nfull & 1) bits[nfull >> 1] = (uint8_t)(bits[nfull >> 1] | (nib << 4));        \
                else bits[nfull >> 1] = (uint8_t)nib;                                              \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* dx = g * (kept ? scale : 0): the same products as g * mask with the full mask */            \
    static void dropout_bwd_##T(const T *restrict g, const uint8_t *restrict bits, T scale,        \
                                T *restrict dx, int64_t n) {                                       \
        _Pragma("omp parallel for if (n > 65536)") for (int64_t i = 0; i < n; i++) dx[i] =         \
            g[i] * ((bits[i >> 3] >> (i & 7)) & 1u ? scale : (T)0);                                \
    }

DROPOUT_KERNELS(f32)
DROPOUT_KERNELS(f64)

/* ---- the kernels (rm_kernel_fn) ------------------------------------------------------ */
/* x's shape as (N, C): C the product of the last n_norm dims. */
static void ln_rows(const remat_tensor *x, int n_norm, int64_t *N, int64_t *C) {
    int lead = x->ndim - n_norm;
    *N = rm_shape_numel(lead, x->shape);
    *C = rm_shape_numel(n_norm, x->shape + lead);
}

static void *ptr_or_null(const remat_tensor *t) { return t ? rm_ptr(t) : NULL; }

#define NN_KERNEL_FNS(T)                                                                           \
    remat_status rm_cpu_softmax_##T(const rm_kargs *k) {                                           \
        const rm_softmax_params *p = k->params;                                                    \
        rm_cpu_ori v = rm_cpu_ori_of(k->in[0], p->dim);                                            \
        softmax_fwd_##T(rm_ptr(k->in[0]), rm_ptr(k->out[0]), v.O, v.R, v.I, p->log);               \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_softmax_bwd_##T(const rm_kargs *k) {                                       \
        const rm_softmax_params *p = k->params;                                                    \
        rm_cpu_ori v = rm_cpu_ori_of(k->in[1], p->dim);                                            \
        softmax_bwd_##T(rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->out[0]), v.O, v.R, v.I,      \
                        p->log);                                                                   \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_layer_norm_##T(const rm_kargs *k) {                                        \
        const rm_layer_norm_params *p = k->params;                                                 \
        int64_t N, C;                                                                              \
        ln_rows(k->in[0], p->n_norm, &N, &C);                                                      \
        layernorm_fwd_##T(rm_ptr(k->in[0]), ptr_or_null(k->in[1]), ptr_or_null(k->in[2]),          \
                          rm_ptr(k->out[0]), rm_ptr(k->out[1]), rm_ptr(k->out[2]), N, C, p->eps);  \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_layer_norm_bwd_##T(const rm_kargs *k) {                                    \
        const rm_layer_norm_params *p = k->params;                                                 \
        int64_t N, C;                                                                              \
        ln_rows(k->in[1], p->n_norm, &N, &C);                                                      \
        remat_tensor *dx = k->out[0], *dw = k->out[1], *db = k->out[2];                            \
        void *part = NULL; /* per-chunk column sums for dw / db */                                 \
        if ((dw || db) && N > 0) {                                                                 \
            int64_t rb = rm_cpu_chunk_rows(N, C), nch = (N + rb - 1) / rb;                         \
            part = malloc((size_t)(2 * nch * C) * sizeof(T) + 1);                                  \
            if (!part) return rm_err(REMAT_ENOMEM, "out of memory");                               \
        }                                                                                          \
        layernorm_bwd_##T(rm_ptr(k->in[0]), rm_ptr(k->in[1]), ptr_or_null(k->in[2]),               \
                          rm_ptr(k->in[3]), rm_ptr(k->in[4]), ptr_or_null(dx), ptr_or_null(dw),    \
                          ptr_or_null(db), part, N, C);                                            \
        free(part);                                                                                \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_dropout_##T(const rm_kargs *k) {                                           \
        const rm_dropout_params *p = k->params;                                                    \
        const remat_tensor *x = k->in[0];                                                          \
        uint8_t *bits = ptr_or_null(k->out[1]);                                                    \
        int64_t n = remat_numel(x);                                                                \
        if (p->p >= 1.0) { /* everything dropped, no draw (as PyTorch) */                          \
            memset(rm_ptr(k->out[0]), 0, (size_t)n * sizeof(T));                                   \
            if (bits) memset(bits, 0, (size_t)((n + 7) / 8));                                      \
            return REMAT_OK;                                                                       \
        }                                                                                          \
        dropout_fwd_##T(rm_ptr(x), rm_ptr(k->out[0]), bits, n, nn_keep_threshold(p->p),            \
                        (T)(1.0 / (1.0 - p->p)), p->key, p->counter);                              \
        return REMAT_OK;                                                                           \
    }                                                                                              \
    remat_status rm_cpu_dropout_bwd_##T(const rm_kargs *k) {                                       \
        const rm_dropout_params *p = k->params;                                                    \
        /* the scale exactly as the forward computed it */                                         \
        dropout_bwd_##T(rm_ptr(k->in[0]), rm_ptr(k->in[1]), (T)(1.0 / (1.0 - p->p)),               \
                        rm_ptr(k->out[0]), remat_numel(k->out[0]));                                \
        return REMAT_OK;                                                                           \
    }
NN_KERNEL_FNS(f32)
NN_KERNEL_FNS(f64)
