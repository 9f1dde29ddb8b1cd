/* src/backends/cpu/reduce_body.h — the sum, mean and max kernels (see reduce.c), written once
 * and compiled once per dtype: reduce.c includes this file with T defined as f32 or
 * f64. Each function is named TFN(name): name_f32 or name_f64 (tmpl.h).
 * No include guard: included once per dtype. */
#include "tmpl.h"

/* Pairwise sum of n contiguous elements: blocks of <= 256 use 32 independent lanes
 * (several vector accumulators, so the adds are not latency-bound) combined pairwise;
 * longer ranges split in half at a multiple of 32. */
static T TFN(sum_contig)(const T *restrict x, int64_t n) {
    if (n <= 256) {
        T acc[32];
        for (int j = 0; j < 32; j++) acc[j] = 0;
        int64_t i = 0;
        for (; i + 32 <= n; i += 32)
            for (int j = 0; j < 32; j++) acc[j] += x[i + j];
        for (int j = 0; i < n; i++, j++) acc[j] += x[i];
        for (int w = 16; w > 0; w /= 2)
            for (int j = 0; j < w; j++) acc[j] += acc[j + w];
        return acc[0];
    }
    int64_t h = (n / 2 + 31) & ~(int64_t)31;
    return TFN(sum_contig)(x, h) + TFN(sum_contig)(x + h, n - h);
}

/* dst[j] = sum_r x[r * stride + j] for j < w (w <= RED_COL_BLOCK), pairwise over r.
 * ws holds one scratch row per recursion level. */
static void TFN(sum_cols)(const T *restrict x, int64_t R, int64_t stride, int w, T *restrict dst,
                          T (*ws)[RED_COL_BLOCK], int depth) {
    if (R <= 16 || depth >= RED_MAX_DEPTH) {
        if (w == RED_COL_BLOCK) {
            /* full block: a fixed-size local accumulator stays in registers */
            T acc[RED_COL_BLOCK];
            for (int j = 0; j < RED_COL_BLOCK; j++) acc[j] = 0;
            for (int64_t r = 0; r < R; r++) {
                const T *row = x + r * stride;
                for (int j = 0; j < RED_COL_BLOCK; j++) acc[j] += row[j];
            }
            for (int j = 0; j < RED_COL_BLOCK; j++) dst[j] = acc[j];
            return;
        }
        for (int j = 0; j < w; j++) dst[j] = 0;
        for (int64_t r = 0; r < R; r++) {
            const T *row = x + r * stride;
            for (int j = 0; j < w; j++) dst[j] += row[j];
        }
        return;
    }
    int64_t h = R / 2;
    TFN(sum_cols)(x, h, stride, w, dst, ws, depth + 1);
    T *tmp = ws[depth];
    TFN(sum_cols)(x + h * stride, R - h, stride, w, tmp, ws, depth + 1);
    for (int j = 0; j < w; j++) dst[j] += tmp[j];
}

/* x (O, R, I) -> y (O, I). Returns false only when scratch could not be allocated. */
static bool TFN(sum_ori)(const T *restrict x, int64_t O, int64_t R, int64_t I, T *restrict y) {
    int64_t total = O * R * I;
    if (I == 1) {
        int64_t nch = (R + RED_ROW_CHUNK - 1) / RED_ROW_CHUNK;
        if (O < 16 && nch > 1) {
            /* few long rows: fixed chunks in parallel, then a pairwise sum of them
             * (one value per 16384 elements: small, malloc's) */
            T *part = malloc((size_t)(O * nch) * sizeof(T));
            if (!part) return false;
#pragma omp parallel for if (total > RM_OMP_MIN)
            for (int64_t t = 0; t < O * nch; t++) {
                int64_t o = t / nch, c = t % nch;
                int64_t lo = c * RED_ROW_CHUNK;
                int64_t n = R - lo < RED_ROW_CHUNK ? R - lo : RED_ROW_CHUNK;
                part[t] = TFN(sum_contig)(x + o * R + lo, n);
            }
            for (int64_t o = 0; o < O; o++) y[o] = TFN(sum_contig)(part + o * nch, nch);
            free(part);
            return true;
        }
#pragma omp parallel for if (total > RM_OMP_MIN)
        for (int64_t o = 0; o < O; o++) y[o] = TFN(sum_contig)(x + o * R, R);
        return true;
    }
    int64_t nb = (I + RED_COL_BLOCK - 1) / RED_COL_BLOCK;
#pragma omp parallel for if (total > RM_OMP_MIN)
    for (int64_t t = 0; t < O * nb; t++) {
        T ws[RED_MAX_DEPTH][RED_COL_BLOCK];
        int64_t o = t / nb, b = t % nb;
        int64_t j0 = b * RED_COL_BLOCK;
        int w = (int)(I - j0 < RED_COL_BLOCK ? I - j0 : RED_COL_BLOCK);
        TFN(sum_cols)(x + o * R * I + j0, R, I, w, y + o * I + j0, ws, 0);
    }
    return true;
}

/* dx (O, R, I) = g (O, I) * scale, broadcast over R. */
static void TFN(bcast_ori)(const T *restrict g, int64_t O, int64_t R, int64_t I, T scale,
                           T *restrict dx) {
    int64_t total = O * R * I;
    if (I == 1) { /* reduced over the last dim: fill each row with one value */
#pragma omp parallel for if (total > RM_OMP_MIN)
        for (int64_t o = 0; o < O; o++) {
            T v = g[o] * scale;
            T *d = dx + o * R;
            for (int64_t r = 0; r < R; r++) d[r] = v;
        }
        return;
    }
#pragma omp parallel for if (total > RM_OMP_MIN)
    for (int64_t orow = 0; orow < O * R; orow++) {
        const T *gi = g + (orow / R) * I;
        T *d = dx + orow * I;
        for (int64_t i = 0; i < I; i++) d[i] = gi[i] * scale;
    }
}

/* x (O, R, I) -> y (O, I) max and idx (O, I) first argmax; NaN counts as the maximum
 * (the first NaN wins), as in PyTorch. */
static void TFN(max_ori)(const T *restrict x, int64_t O, int64_t R, int64_t I, T *restrict y,
                         int64_t *restrict idx) {
    int64_t total = O * R * I;
    if (I == 1) {
        /* rows: a vectorisable integer-key max plus a NaN flag (rm_rowmax_key), then a
         * search for the first position holding the result */
#pragma omp parallel for if (total > RM_OMP_MIN)
        for (int64_t o = 0; o < O; o++) {
            const T *xo = x + o * R;
            T best;
            bool any_nan = TFN(rm_rowmax_key)(xo, R, &best);
            int64_t at = 0;
            if (any_nan) {
                while (xo[at] == xo[at]) at++;
            } else {
                while (xo[at] != best) at++;
            }
            y[o] = xo[at]; /* the element itself: keeps the sign of a zero */
            idx[o] = at;
        }
        return;
    }
#pragma omp parallel for if (total > RM_OMP_MIN)
    for (int64_t o = 0; o < O; o++) {
        const T *xo = x + o * R * I;
        T *yo = y + o * I;
        int64_t *io = idx + o * I;
        for (int64_t i = 0; i < I; i++) {
            yo[i] = xo[i];
            io[i] = 0;
        }
        for (int64_t r = 1; r < R; r++) {
            const T *row = xo + r * I;
            for (int64_t i = 0; i < I; i++) {
                T v = row[i], b = yo[i];
                if (v > b || (v != v && b == b)) {
                    yo[i] = v;
                    io[i] = r;
                }
            }
        }
    }
}

/* dx (O, R, I) = 0 except dx[o, idx[o,i], i] = g[o, i]. */
static void TFN(max_bwd)(const T *restrict g, const int64_t *restrict idx, int64_t O, int64_t R,
                         int64_t I, T *restrict dx) {
    int64_t total = O * R * I;
#pragma omp parallel for if (total > RM_OMP_MIN)
    for (int64_t o = 0; o < O; o++) {
        T *d = dx + o * R * I;
        memset(d, 0, (size_t)(R * I) * sizeof(T));
        for (int64_t i = 0; i < I; i++) {
            int64_t r = idx[o * I + i];
            if (r >= 0 && r < R) d[r * I + i] = g[o * I + i];
        }
    }
}

/* dx (input shape, contiguous) = g * scale broadcast over the reduced dims
 * of mask: one (O, R, I) pass when they form one group, else element by
 * element through g's keepdim strides (0 on the reduced dims). */
static void TFN(sum_bwd_general)(const T *restrict g, int ndim, const int64_t *shape,
                                 const bool *mask, T scale, T *restrict dx) {
    int64_t ks[REMAT_MAX_DIMS], kst[REMAT_MAX_DIMS];
    for (int d = 0; d < ndim; d++) ks[d] = mask[d] ? 1 : shape[d];
    rm_contiguous_strides(ndim, ks, kst);
    rm_iter it;
    rm_iter_init(&it, ndim, shape, 1);
    for (int d = 0; d < ndim; d++) it.strides[0][d] = mask[d] ? 0 : kst[d];
    int64_t n = rm_shape_numel(ndim, shape), i = 0;
    do {
        dx[i++] = g[it.off[0]];
    } while (i < n && rm_iter_next(&it));
    if (scale != (T)1)
        for (i = 0; i < n; i++) dx[i] *= scale;
}

/* ---- the kernels (rm_kernel_fn) ------------------------------------------------------ */
remat_status TFN(rm_cpu_sum)(const rm_kargs *k) {
    const rm_reduce_params *p = k->params;
    const remat_tensor *x = k->in[0];
    remat_tensor *y = k->out[0];
    int rc = sum_contig_any(x->dtype, rm_ptr(x), x->ndim, x->shape, p->mask, rm_ptr(y));
    if (rc || !p->mean) return rc;
    int64_t count = 1;
    for (int d = 0; d < x->ndim; d++)
        if (p->mask[d]) count *= x->shape[d];
    /* divide (not multiply by 1/count) to match PyTorch's mean rounding */
    T *yp = rm_ptr(y);
    int64_t n = remat_numel(y);
    for (int64_t i = 0; i < n; i++) yp[i] = yp[i] / (T)count;
    return REMAT_OK;
}
remat_status TFN(rm_cpu_sum_bwd)(const rm_kargs *k) {
    const rm_reduce_params *p = k->params;
    const remat_tensor *dx = k->out[0];
    const int ndim = dx->ndim;
    const int64_t *shape = dx->shape;
    if (rm_shape_numel(ndim, shape) == 0) return REMAT_OK;
    rm_groups gr;
    rm_groups_make(ndim, shape, p->mask, &gr);
    int n_red = 0, k_red = -1;
    for (int j = 0; j < gr.n; j++)
        if (gr.red[j]) {
            n_red++;
            k_red = j;
        }
    if (n_red > 1) {
        TFN(sum_bwd_general)
        (rm_ptr(k->in[0]), ndim, shape, p->mask, (T)p->scale, rm_ptr(k->out[0]));
        return REMAT_OK;
    }
    int64_t O = 1, R = 1, I = 1;
    for (int j = 0; j < gr.n; j++) {
        if (j < k_red || k_red < 0) O *= gr.size[j];
        else if (j == k_red) R = gr.size[j];
        else I *= gr.size[j];
    }
    TFN(bcast_ori)(rm_ptr(k->in[0]), O, R, I, (T)p->scale, rm_ptr(k->out[0]));
    return REMAT_OK;
}
remat_status TFN(rm_cpu_max)(const rm_kargs *k) {
    const rm_dim_params *p = k->params;
    rm_cpu_ori v = rm_cpu_ori_of(k->in[0], p->dim);
    TFN(max_ori)(rm_ptr(k->in[0]), v.O, v.R, v.I, rm_ptr(k->out[0]), rm_ptr(k->out[1]));
    return REMAT_OK;
}
remat_status TFN(rm_cpu_max_bwd)(const rm_kargs *k) {
    const rm_dim_params *p = k->params;
    rm_cpu_ori v = rm_cpu_ori_of(k->out[0], p->dim);
    TFN(max_bwd)(rm_ptr(k->in[0]), rm_ptr(k->in[1]), v.O, v.R, v.I, rm_ptr(k->out[0]));
    return REMAT_OK;
}

#undef T
