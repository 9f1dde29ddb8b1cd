/* src/backends/cpu/nn_body.h — the nn kernels' bodies (see nn.c), written once and
 * compiled once per dtype: nn.c includes this file with T defined as f32 or f64 and
 * NN_EXP, NN_LOG, NN_FMA as that dtype's exp, log and fused multiply-add. Every function
 * is named TFN(name), name_f32 or name_f64 (tmpl.h), so gdb, clang-tidy and the
 * profilers see these lines. No include guard: included once per dtype. */
#include "tmpl.h"

/* ---- row max -------------------------------------------------------------------------
 * Through the integer keys of rm_rowmax_key (cpu/nn.h). A NaN anywhere makes
 * the result NaN (exp(x - NaN) then poisons the row, as in PyTorch). */
RM_CPU_CLONES_EXTERN T TFN(rm_row_max)(const T *restrict x, int64_t n) {
    T best;
    if (TFN(rm_rowmax_key)(x, n, &best)) return (T)NAN;
    if (n == 0) return -INFINITY;
    return best;
}
/* Row helpers (also used by cross_entropy in loss.c). Float reductions use NN_LANES
 * independent accumulators so they vectorise without reassociation flags. */
/* sum_i exp(x[i] - sub); also stores the terms in y unless y is NULL */
RM_CPU_CLONES_EXTERN T TFN(rm_row_expsum)(const T *restrict x, T sub, T *restrict y, int64_t n) {
    T acc[NN_LANES];
    for (int j = 0; j < NN_LANES; j++) acc[j] = 0;
    int64_t i = 0;
    if (y) {
        for (; i + NN_LANES <= n; i += NN_LANES)
            for (int j = 0; j < NN_LANES; j++) {
                T e = NN_EXP(x[i + j] - sub);
                y[i + j] = e;
                acc[j] += e;
            }
        for (; i < n; i++) {
            y[i] = NN_EXP(x[i] - sub);
            acc[0] += y[i];
        }
    } else {
        for (; i + NN_LANES <= n; i += NN_LANES)
            for (int j = 0; j < NN_LANES; j++) acc[j] += NN_EXP(x[i + j] - sub);
        for (; i < n; i++) acc[0] += NN_EXP(x[i] - sub);
    }
    for (int w = NN_LANES / 2; w > 0; w /= 2) /* pairwise combine of the lanes */
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* y[i] = exp(x[i] - sub) * scale */
RM_CPU_CLONES_EXTERN void TFN(rm_row_exp_scale)(const T *restrict x, T sub, T scale, T *restrict y,
                                                int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = NN_EXP(x[i] - sub) * scale;
}
/* y = softmax or log_softmax of x (O, R, 1) over R: row kernels. */
RM_CPU_CLONES static void TFN(softmax_fwd_rows)(const T *restrict x, T *restrict y, int64_t O,
                                                int64_t R, bool log_out) {
    int64_t total = O * R;
#pragma omp parallel for if (total > RM_OMP_MIN / 4)
    for (int64_t o = 0; o < O; o++) {
        const T *xo = x + o * R;
        T *yo = y + o * R;
        T mx = TFN(rm_row_max)(xo, R);
        if (mx == -INFINITY) mx = 0; /* all -inf: avoid inf - inf */
        if (log_out) {
            T lse = mx + NN_LOG(TFN(rm_row_expsum)(xo, mx, NULL, R));
            for (int64_t r = 0; r < R; r++) yo[r] = xo[r] - lse;
        } else {
            T inv = (T)1 / TFN(rm_row_expsum)(xo, mx, yo, R);
            for (int64_t r = 0; r < R; r++) yo[r] *= inv;
        }
    }
}

/* The same for I > 1, on blocks of NN_COL_BLOCK columns so the inner loops stay contiguous. */
RM_CPU_CLONES static void TFN(softmax_fwd_cols)(const T *restrict x, T *restrict y, int64_t O,
                                                int64_t R, int64_t I, bool log_out) {
    int64_t nb = (I + NN_COL_BLOCK - 1) / NN_COL_BLOCK;
#pragma omp parallel for if (O * R * I > RM_OMP_MIN / 4)
    for (int64_t t = 0; t < O * nb; t++) {
        int64_t o = t / nb, j0 = (t % nb) * NN_COL_BLOCK;
        int w = nn_block_width(I, j0);
        const T *xo = x + o * R * I + j0;
        T *yo = y + o * R * I + j0;
        T mx[NN_COL_BLOCK], s[NN_COL_BLOCK];
        for (int j = 0; j < w; j++) {
            mx[j] = -INFINITY;
            s[j] = 0;
        }
        for (int64_t r = 0; r < R; r++)
            for (int j = 0; j < w; j++) mx[j] = xo[r * I + j] > mx[j] ? xo[r * I + j] : mx[j];
        for (int j = 0; j < w; j++)
            if (mx[j] == -INFINITY) mx[j] = 0;
        for (int64_t r = 0; r < R; r++)
            for (int j = 0; j < w; j++) {
                T e = NN_EXP(xo[r * I + j] - mx[j]);
                if (!log_out) yo[r * I + j] = e;
                s[j] += e;
            }
        if (log_out) {
            for (int j = 0; j < w; j++) s[j] = mx[j] + NN_LOG(s[j]); /* lse */
            for (int64_t r = 0; r < R; r++)
                for (int j = 0; j < w; j++) yo[r * I + j] = xo[r * I + j] - s[j];
        } else {
            for (int j = 0; j < w; j++) s[j] = (T)1 / s[j];
            for (int64_t r = 0; r < R; r++)
                for (int j = 0; j < w; j++) yo[r * I + j] *= s[j];
        }
    }
}

/* softmax:     dx = y * (g - sum_r(g * y))
 * log_softmax: dx = g - exp(y) * sum_r(g) */
RM_CPU_CLONES static void TFN(softmax_bwd_rows)(const T *restrict g, const T *restrict y,
                                                T *restrict dx, int64_t O, int64_t R,
                                                bool log_out) {
    int64_t total = O * R;
#pragma omp parallel for if (total > RM_OMP_MIN / 4)
    for (int64_t o = 0; o < O; o++) {
        const T *go = g + o * R, *yo = y + o * R;
        T *d = dx + o * R;
        T acc[NN_LANES];
        for (int j = 0; j < NN_LANES; j++) acc[j] = 0;
        int64_t r = 0;
        if (log_out) {
            for (; r + NN_LANES <= R; r += NN_LANES)
                for (int j = 0; j < NN_LANES; j++) acc[j] += go[r + j];
            for (; r < R; r++) acc[0] += go[r];
        } else {
            for (; r + NN_LANES <= R; r += NN_LANES)
                for (int j = 0; j < NN_LANES; j++) acc[j] += go[r + j] * yo[r + j];
            for (; r < R; r++) acc[0] += go[r] * yo[r];
        }
        for (int w = NN_LANES / 2; w > 0; w /= 2)
            for (int j = 0; j < w; j++) acc[j] += acc[j + w];
        T s = acc[0];
        if (log_out)
            for (r = 0; r < R; r++) d[r] = go[r] - NN_EXP(yo[r]) * s;
        else
            for (r = 0; r < R; r++) d[r] = yo[r] * (go[r] - s);
    }
}

RM_CPU_CLONES static void TFN(softmax_bwd_cols)(const T *restrict g, const T *restrict y,
                                                T *restrict dx, int64_t O, int64_t R, int64_t I,
                                                bool log_out) {
    int64_t nb = (I + NN_COL_BLOCK - 1) / NN_COL_BLOCK;
#pragma omp parallel for if (O * R * I > RM_OMP_MIN / 4)
    for (int64_t t = 0; t < O * nb; t++) {
        int64_t o = t / nb, j0 = (t % nb) * NN_COL_BLOCK;
        int w = nn_block_width(I, j0);
        int64_t base = o * R * I + j0;
        const T *go = g + base, *yo = y + base;
        T *d = dx + base;
        T s[NN_COL_BLOCK];
        for (int j = 0; j < w; j++) s[j] = 0;
        for (int64_t r = 0; r < R; r++)
            for (int j = 0; j < w; j++)
                s[j] += log_out ? go[r * I + j] : go[r * I + j] * yo[r * I + j];
        for (int64_t r = 0; r < R; r++)
            for (int j = 0; j < w; j++) {
                int64_t k = r * I + j;
                d[k] = log_out ? go[k] - NN_EXP(yo[k]) * s[j] : yo[k] * (go[k] - s[j]);
            }
    }
}

/* pairwise combine of the lanes into acc[0] */
static inline __attribute__((always_inline)) void TFN(ln_reduce)(T acc[LN_LANES]) {
    for (int w = LN_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
}

/* The backward's first pass over a row's full lane blocks: lane sums of wg = w * g (g
 * unless has_w) and wg * norm into a and bb, and with cols the chunk's column sums pw, pb;
 * returns where the full blocks end. Always inlined with constant has_w and cols, so each
 * of the four cases is its own branch-free loop. Lane loops use a * b + c, not fmaf: GCC
 * 12's SLP vectoriser turns fmaf lanes into element-by-element loads. */
static inline __attribute__((always_inline)) int64_t
TFN(ln_bwd_lanes)(const T *gn, const T *xn, const T *w, bool has_w, T mn, T rs, int64_t C,
                  T a[LN_LANES], T bb[LN_LANES], bool cols, T *pw, T *pb) {
    int64_t c = 0;
    for (; c + LN_LANES <= C; c += LN_LANES)
        for (int j = 0; j < LN_LANES; j++) {
            T gv = gn[c + j], nv = (xn[c + j] - mn) * rs, wg = has_w ? w[c + j] * gv : gv;
            a[j] += wg;
            bb[j] += wg * nv;
            if (cols) {
                pw[c + j] += nv * gv;
                pb[c + j] += gv;
            }
        }
    return c;
}

/* Row mean and rstd = 1 / sqrt(biased variance + eps), the variance two-pass. */
RM_CPU_CLONES static void TFN(ln_stats)(const T *restrict xn, int64_t C, double eps, T *mean,
                                        T *rstd) {
    T sh = C > 0 ? xn[0] : (T)0;
    T a[LN_LANES];
    for (int j = 0; j < LN_LANES; j++) a[j] = 0;
    int64_t c = 0;
    for (; c + LN_LANES <= C; c += LN_LANES)
        for (int j = 0; j < LN_LANES; j++) a[j] += xn[c + j] - sh;
    for (; c < C; c++) a[0] += xn[c] - sh;
    TFN(ln_reduce)(a);
    T m = sh + a[0] / (T)C;
    for (int j = 0; j < LN_LANES; j++) a[j] = 0;
    for (c = 0; c + LN_LANES <= C; c += LN_LANES)
        for (int j = 0; j < LN_LANES; j++) {
            T d = xn[c + j] - m;
            a[j] += d * d;
        }
    for (; c < C; c++) a[0] += (xn[c] - m) * (xn[c] - m);
    TFN(ln_reduce)(a);
    *mean = m;
    *rstd = (T)(1.0 / sqrt((double)(a[0] / (T)C) + eps));
}

/* yn[c] = (xn[c] - m) * s scaled by w[c] and shifted by b[c] (each NULL if absent), c < len:
 * the one expression both of ln_row's outputs (T, or bf16 through ln_row_bf16) are computed
 * with, so a bf16 y is bitwise the T y rounded. */
static inline __attribute__((always_inline)) void TFN(ln_out)(const T *restrict xn,
                                                              const T *restrict w,
                                                              const T *restrict b, T *restrict yn,
                                                              int64_t len, T m, T s) {
    if (w && b)
        for (int64_t c = 0; c < len; c++) yn[c] = NN_FMA((xn[c] - m) * s, w[c], b[c]);
    else if (w)
        for (int64_t c = 0; c < len; c++) yn[c] = (xn[c] - m) * s * w[c];
    else if (b)
        for (int64_t c = 0; c < len; c++) yn[c] = NN_FMA(xn[c] - m, s, b[c]);
    else
        for (int64_t c = 0; c < len; c++) yn[c] = (xn[c] - m) * s;
}

/* One row of layer_norm: xn (C) -> yn, *mean, *rstd. w, b (C) or NULL. */
static inline __attribute__((always_inline)) void
TFN(ln_row)(const T *restrict xn, const T *restrict w, const T *restrict b, T *restrict yn,
            int64_t C, double eps, T *mean, T *rstd) {
    T m, s;
    TFN(ln_stats)(xn, C, eps, &m, &s);
    TFN(ln_out)(xn, w, b, yn, C, m, s);
    *mean = m;
    *rstd = s;
}

/* ln_row with y rounded to bf16 as it is written (yh): LN_BF16_BLOCK columns at a time
 * computed into a stack block in T, then rounded as the cast kernel rounds (NN_ROUND_BF16):
 * no row of y in T is written to memory and read back. */
static inline __attribute__((always_inline)) void
TFN(ln_row_bf16)(const T *restrict xn, const T *restrict w, const T *restrict b,
                 uint16_t *restrict yh, int64_t C, double eps, T *mean, T *rstd) {
    T m, s, blk[LN_BF16_BLOCK];
    TFN(ln_stats)(xn, C, eps, &m, &s);
    for (int64_t c0 = 0; c0 < C; c0 += LN_BF16_BLOCK) {
        const int64_t len = C - c0 < LN_BF16_BLOCK ? C - c0 : LN_BF16_BLOCK;
        TFN(ln_out)(xn + c0, w ? w + c0 : NULL, b ? b + c0 : NULL, blk, len, m, s);
        NN_ROUND_BF16(blk, yh + c0, len);
    }
    *mean = m;
    *rstd = s;
}

/* x (N, C) -> y (N, C), or yh (bf16) when y is NULL; mean, rstd (N). w, b (C) or NULL. */
RM_CPU_CLONES static void TFN(layernorm_fwd)(const T *restrict x, const T *restrict w,
                                             const T *restrict b, T *restrict y,
                                             uint16_t *restrict yh, T *restrict mean,
                                             T *restrict rstd, int64_t N, int64_t C, double eps) {
#pragma omp parallel for if (N * C > RM_OMP_MIN / 4)
    for (int64_t n = 0; n < N; n++)
        if (yh) TFN(ln_row_bf16)(x + n * C, w, b, yh + n * C, C, eps, &mean[n], &rstd[n]);
        else TFN(ln_row)(x + n * C, w, b, y + n * C, C, eps, &mean[n], &rstd[n]);
}

/* The residual add fused in front: sum = x + r row by row (r in T, or rh: bf16 widened, for
 * an f32 x), then the row's layer_norm read back from L1 (into y, or yh as layernorm_fwd).
 * Each sum is the add kernel's x + r, each normalised row layernorm_fwd's. */
RM_CPU_CLONES static void TFN(add_layernorm_fwd)(const T *restrict x, const T *restrict r,
                                                 const uint16_t *restrict rh, const T *restrict w,
                                                 const T *restrict b, T *restrict sum,
                                                 T *restrict y, uint16_t *restrict yh,
                                                 T *restrict mean, T *restrict rstd, int64_t N,
                                                 int64_t C, double eps) {
#pragma omp parallel for if (N * C > RM_OMP_MIN / 4)
    for (int64_t n = 0; n < N; n++) {
        const T *restrict xn = x + n * C;
        T *restrict sn = sum + n * C;
        if (rh)
            for (int64_t c = 0; c < C; c++) sn[c] = xn[c] + (T)rm_bf16_to_f32(rh[n * C + c]);
        else
            for (int64_t c = 0; c < C; c++) sn[c] = xn[c] + r[n * C + c];
        if (yh) TFN(ln_row_bf16)(sn, w, b, yh + n * C, C, eps, &mean[n], &rstd[n]);
        else TFN(ln_row)(sn, w, b, y + n * C, C, eps, &mean[n], &rstd[n]);
    }
}

/* Rows [r0, r1) of the backward (see layernorm_bwd): dx rows (dx may be NULL) and, if
 * pw is not NULL, this chunk's column sums pw[c] = sum_n norm * g, pb[c] = sum_n g.
 * s1 = sum_c w*g and s2 = sum_c w*g*norm are lane sums over the row held in L1. With gh
 * (bf16, g NULL) each row of g is widened into grow (C) first: exact, the values the cast's
 * backward would have written. */
RM_CPU_CLONES static void TFN(ln_bwd_rows)(const T *restrict g, const uint16_t *restrict gh,
                                           T *restrict grow, const T *restrict x,
                                           const T *restrict w, const T *restrict mean,
                                           const T *restrict rstd, const T *restrict gres,
                                           T *restrict dx, T *restrict pw, T *restrict pb,
                                           int64_t r0, int64_t r1, int64_t C) {
    if (pw)
        for (int64_t c = 0; c < C; c++) pw[c] = pb[c] = 0;
    for (int64_t n = r0; n < r1; n++) {
        if (gh)
            for (int64_t c = 0; c < C; c++) grow[c] = (T)rm_bf16_to_f32(gh[n * C + c]);
        const T *restrict gn = gh ? grow : g + n * C, *restrict xn = x + n * C;
        const T mn = mean[n], rs = rstd[n];
        if (!dx) { /* column sums only */
            for (int64_t c = 0; c < C; c++) {
                pw[c] += (xn[c] - mn) * rs * gn[c];
                pb[c] += gn[c];
            }
            continue;
        }
        T a[LN_LANES], bb[LN_LANES];
        for (int j = 0; j < LN_LANES; j++) a[j] = bb[j] = 0;
        int64_t c; /* the four cases each get their own loop (always inlined) */
        if (w)
            c = pw ? TFN(ln_bwd_lanes)(gn, xn, w, true, mn, rs, C, a, bb, true, pw, pb)
                   : TFN(ln_bwd_lanes)(gn, xn, w, true, mn, rs, C, a, bb, false, pw, pb);
        else
            c = pw ? TFN(ln_bwd_lanes)(gn, xn, w, false, mn, rs, C, a, bb, true, pw, pb)
                   : TFN(ln_bwd_lanes)(gn, xn, w, false, mn, rs, C, a, bb, false, pw, pb);
        for (; c < C; c++) {
            T gv = gn[c], nv = (xn[c] - mn) * rs, wg = w ? w[c] * gv : gv;
            a[0] += wg;
            bb[0] += wg * nv;
            if (pw) {
                pw[c] += nv * gv;
                pb[c] += gv;
            }
        }
        TFN(ln_reduce)(a);
        TFN(ln_reduce)(bb);
        const T m1 = a[0] / (T)C, m2 = bb[0] / (T)C;
        T *restrict d = dx + n * C;
        if (w)
            for (c = 0; c < C; c++) d[c] = NN_FMA(-(xn[c] - mn) * rs, m2, w[c] * gn[c] - m1) * rs;
        else
            for (c = 0; c < C; c++) d[c] = NN_FMA(-(xn[c] - mn) * rs, m2, gn[c] - m1) * rs;
        if (gres) /* a loop of its own: dx is rounded to T before the add, as accumulation */
            for (c = 0; c < C; c++) d[c] += gres[n * C + c];
    }
}

/* dx (N, C) from g (N, C) (or gh, bf16, with g NULL: gwide is then scratch of C elements
 * per chunk of rows), plus gres (N, C) when not NULL (the fused residual add's sum
 * gradient); dw, db (C) (each may be NULL; part, scratch of 2 * C *
 * ceil(N / rm_cpu_chunk_rows(N, C)) elements, is needed when either is not). As llm.c:
 *   norm = (x - mean) * rstd
 *   dx = (w*g - mean_c(w*g) - norm * mean_c(w*g*norm)) * rstd
 *   dw = sum_n norm * g,  db = sum_n g (chunk partials in T, summed in double) */
RM_CPU_CLONES static void TFN(layernorm_bwd)(const T *restrict g, const uint16_t *restrict gh,
                                             T *restrict gwide, const T *restrict x,
                                             const T *restrict w, const T *restrict mean,
                                             const T *restrict rstd, const T *restrict gres,
                                             T *restrict dx, T *restrict dw, T *restrict db,
                                             T *restrict part, int64_t N, int64_t C) {
    bool cols = dw || db;
    if (!dx && !cols) return;
    int64_t rb = rm_cpu_chunk_rows(N, C), nch = (N + rb - 1) / rb;
#pragma omp parallel for if (N * C > RM_OMP_MIN / 4)
    for (int64_t k = 0; k < nch; k++) {
        int64_t r0 = k * rb, r1 = r0 + rb < N ? r0 + rb : N;
        T *pw = cols ? part + k * 2 * C : NULL;
        TFN(ln_bwd_rows)
        (g, gh, gh ? gwide + k * C : NULL, x, w, mean, rstd, gres, dx, pw, pw ? pw + C : NULL, r0,
         r1, C);
    }
    if (!cols) return;
    int64_t nb = (C + NN_COL_BLOCK - 1) / NN_COL_BLOCK;
#pragma omp parallel for if (nch * C > RM_OMP_MIN)
    for (int64_t bk = 0; bk < nb; bk++) { /* blocks of columns: rows of part stream */
        int64_t c0 = bk * NN_COL_BLOCK;
        int wd = nn_block_width(C, c0);
        double sw[NN_COL_BLOCK], sb[NN_COL_BLOCK];
        for (int j = 0; j < wd; j++) sw[j] = sb[j] = 0;
        for (int64_t k = 0; k < nch; k++) {
            const T *pw = part + k * 2 * C + c0, *pb = pw + C;
            for (int j = 0; j < wd; j++) {
                sw[j] += (double)pw[j];
                sb[j] += (double)pb[j];
            }
        }
        for (int j = 0; j < wd; j++) {
            if (dw) dw[c0 + j] = (T)sw[j];
            if (db) db[c0 + j] = (T)sb[j];
        }
    }
}

/* Full blocks [j0, j1): element i keeps iff word i%4 of block counter + i/4 passes the
 * threshold; y = x * scale where kept, else 0; bits (may be NULL) get the keep bits. A
 * separate function with restrict pointers (OpenMP outlining drops them), one loop per
 * mask case, so the Philox rounds vectorise across blocks. */
static void TFN(dropout_blocks)(const T *restrict x, T *restrict y, uint8_t *restrict bits,
                                int64_t j0, int64_t j1, uint32_t thr, T scale, uint32_t k0,
                                uint32_t k1, uint64_t counter) {
    if (bits) {
        for (int64_t j = j0; j < j1; j++) {
            uint32_t r[4];
            rm_philox_hd(k0, k1, counter + (uint64_t)j, r);
            unsigned nib = 0;
            for (int k = 0; k < 4; k++) {
                bool keep = (r[k] >> 8) >= thr;
                nib |= (unsigned)keep << k;
                y[4 * j + k] = x[4 * j + k] * (keep ? scale : (T)0);
            }
            if (j & 1) bits[j >> 1] = (uint8_t)(bits[j >> 1] | (nib << 4));
            else bits[j >> 1] = (uint8_t)nib;
        }
    } else {
        for (int64_t j = j0; j < j1; j++) {
            uint32_t r[4];
            rm_philox_hd(k0, k1, counter + (uint64_t)j, r);
            for (int k = 0; k < 4; k++)
                y[4 * j + k] = x[4 * j + k] * ((r[k] >> 8) >= thr ? scale : (T)0);
        }
    }
}
static void TFN(dropout_fwd)(const T *restrict x, T *restrict y, uint8_t *restrict bits, int64_t n,
                             uint32_t thr, T scale, const uint32_t key[2], uint64_t counter) {
    int64_t nfull = n / 4, nch = (nfull + DROPOUT_CHUNK - 1) / DROPOUT_CHUNK;
    uint32_t k0 = key[0], k1 = key[1];
#pragma omp parallel for if (n > RM_OMP_MIN)
    for (int64_t c = 0; c < nch; c++) {
        int64_t j0 = c * DROPOUT_CHUNK;
        int64_t j1 = j0 + DROPOUT_CHUNK < nfull ? j0 + DROPOUT_CHUNK : nfull;
        TFN(dropout_blocks)(x, y, bits, j0, j1, thr, scale, k0, k1, counter);
    }
    if (nfull * 4 < n) { /* the last, partial block */
        uint32_t r[4];
        rm_philox_hd(k0, k1, counter + (uint64_t)nfull, r);
        unsigned nib = 0;
        for (int64_t i = nfull * 4; i < n; i++) {
            bool keep = (r[i - nfull * 4] >> 8) >= thr;
            nib |= (unsigned)keep << (i - nfull * 4);
            y[i] = x[i] * (keep ? scale : (T)0);
        }
        if (bits) {
            if (nfull & 1) bits[nfull >> 1] = (uint8_t)(bits[nfull >> 1] | (nib << 4));
            else bits[nfull >> 1] = (uint8_t)nib;
        }
    }
}
/* dx = g * (kept ? scale : 0): the same products as g * mask with the full mask */
static void TFN(dropout_bwd)(const T *restrict g, const uint8_t *restrict bits, T scale,
                             T *restrict dx, int64_t n) {
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; i++) dx[i] = g[i] * ((bits[i >> 3] >> (i & 7)) & 1u ? scale : (T)0);
}

remat_status TFN(rm_cpu_softmax)(const rm_kargs *k) {
    const rm_softmax_params *p = k->params;
    rm_cpu_ori v = rm_cpu_ori_of(k->in[0], p->dim);
    if (v.I == 1) TFN(softmax_fwd_rows)(rm_ptr(k->in[0]), rm_ptr(k->out[0]), v.O, v.R, p->log);
    else TFN(softmax_fwd_cols)(rm_ptr(k->in[0]), rm_ptr(k->out[0]), v.O, v.R, v.I, p->log);
    return REMAT_OK;
}
remat_status TFN(rm_cpu_softmax_bwd)(const rm_kargs *k) {
    const rm_softmax_params *p = k->params;
    rm_cpu_ori v = rm_cpu_ori_of(k->in[1], p->dim);
    if (v.I == 1) TFN(softmax_bwd_rows)
    (rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->out[0]), v.O, v.R, p->log);
    else TFN(softmax_bwd_cols)(rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->out[0]), v.O, v.R, v.I,
                               p->log);
    return REMAT_OK;
}
/* y in x's dtype, or bf16 for an f32 x (ln_y_bf16) */
remat_status TFN(rm_cpu_layer_norm)(const rm_kargs *k) {
    const rm_layer_norm_params *p = k->params;
    int64_t N, C;
    ln_rows(k->in[0], p->n_norm, &N, &C);
    bool half;
    int rc = ln_y_bf16(k->in[0], k->out[0], &half);
    if (rc) return rc;
    TFN(layernorm_fwd)
    (rm_ptr(k->in[0]), ptr_or_null(k->in[1]), ptr_or_null(k->in[2]),
     half ? NULL : rm_ptr(k->out[0]), half ? rm_ptr(k->out[0]) : NULL, rm_ptr(k->out[1]),
     rm_ptr(k->out[2]), N, C, p->eps);
    return REMAT_OK;
}
/* in: x, r (x's dtype, or bf16 for an f32 x), w, b; out: sum, y (as layer_norm's), mean,
 * rstd */
remat_status TFN(rm_cpu_add_layer_norm)(const rm_kargs *k) {
    const rm_layer_norm_params *p = k->params;
    int64_t N, C;
    ln_rows(k->in[0], p->n_norm, &N, &C);
    const remat_tensor *r = k->in[1];
    const bool half = r->dtype == REMAT_BF16 && k->in[0]->dtype == REMAT_F32;
    if (!half && r->dtype != k->in[0]->dtype)
        return rm_err(REMAT_EDTYPE, "add_layer_norm kernel: x %s with r %s",
                      remat_dtype_name(k->in[0]->dtype), remat_dtype_name(r->dtype));
    bool yhalf;
    int rc = ln_y_bf16(k->in[0], k->out[1], &yhalf);
    if (rc) return rc;
    TFN(add_layernorm_fwd)
    (rm_ptr(k->in[0]), half ? NULL : rm_ptr(r), half ? rm_ptr(r) : NULL, ptr_or_null(k->in[2]),
     ptr_or_null(k->in[3]), rm_ptr(k->out[0]), yhalf ? NULL : rm_ptr(k->out[1]),
     yhalf ? rm_ptr(k->out[1]) : NULL, rm_ptr(k->out[2]), rm_ptr(k->out[3]), N, C, p->eps);
    return REMAT_OK;
}
/* g in x's dtype, or bf16 (widened row by row) for an f32 x: the kernel of both the f32 and
 * the bf16 row (rm_cpu_layer_norm_bwd_bf16, nn.c) */
remat_status TFN(rm_cpu_layer_norm_bwd)(const rm_kargs *k) {
    const rm_layer_norm_params *p = k->params;
    int64_t N, C;
    ln_rows(k->in[1], p->n_norm, &N, &C);
    remat_tensor *dx = k->out[0], *dw = k->out[1], *db = k->out[2];
    bool gh;
    int rc = ln_y_bf16(k->in[1], k->in[0], &gh);
    if (rc) return rc;
    int64_t rb = N > 0 ? rm_cpu_chunk_rows(N, C) : 1, nch = (N + rb - 1) / rb;
    /* per-chunk column sums for dw / db, then a widened row of g per chunk */
    const int64_t n_part = (dw || db) ? 2 * nch * C : 0, n_wide = gh ? nch * C : 0;
    /* up to 3 x 2^24 elements (rm_cpu_chunk_rows): counted scratch (workspace.h) */
    const size_t bytes = (size_t)(n_part + n_wide) * sizeof(T);
    T *part = NULL;
    if (n_part + n_wide > 0) {
        part = rm_cpu_ws_take(bytes);
        if (!part) return rm_err(REMAT_ENOMEM, "out of memory");
    }
    TFN(layernorm_bwd)
    (gh ? NULL : rm_ptr(k->in[0]), gh ? rm_ptr(k->in[0]) : NULL, gh ? part + n_part : NULL,
     rm_ptr(k->in[1]), ptr_or_null(k->in[2]), rm_ptr(k->in[3]), rm_ptr(k->in[4]),
     ptr_or_null(k->in[5]), ptr_or_null(dx), ptr_or_null(dw), ptr_or_null(db), part, N, C);
    rm_cpu_ws_give(part, bytes);
    return REMAT_OK;
}
remat_status TFN(rm_cpu_dropout)(const rm_kargs *k) {
    const rm_dropout_params *p = k->params;
    const remat_tensor *x = k->in[0];
    uint8_t *bits = ptr_or_null(k->out[1]);
    int64_t n = remat_numel(x);
    if (p->p >= 1.0) { /* everything dropped, no draw (as PyTorch) */
        memset(rm_ptr(k->out[0]), 0, (size_t)n * sizeof(T));
        if (bits) memset(bits, 0, (size_t)((n + 7) / 8));
        return REMAT_OK;
    }
    TFN(dropout_fwd)
    (rm_ptr(x), rm_ptr(k->out[0]), bits, n, nn_keep_threshold(p->p), (T)(1.0 / (1.0 - p->p)),
     p->key, p->counter);
    return REMAT_OK;
}
remat_status TFN(rm_cpu_dropout_bwd)(const rm_kargs *k) {
    const rm_dropout_params *p = k->params;
    /* the scale exactly as the forward computed it */
    TFN(dropout_bwd)
    (rm_ptr(k->in[0]), rm_ptr(k->in[1]), (T)(1.0 / (1.0 - p->p)), rm_ptr(k->out[0]),
     remat_numel(k->out[0]));
    return REMAT_OK;
}

#undef T
#undef NN_EXP
#undef NN_LOG
#undef NN_FMA
#undef NN_ROUND_BF16
