/* src/ops/reduce.c — sum, mean, sum_all and max over dims.
 *
 * Every reduction is brought to the canonical form x (O, R, I) -> y (O, I):
 * the input is made contiguous, size-1 dims are dropped and neighbouring
 * dims that are all kept or all reduced are merged. One group of reduced
 * dims is one (O, R, I) pass; several separate groups (e.g. dims 0 and 2 of
 * a 3-dim tensor) are reduced one pass at a time, innermost first.
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

#include "../internal.h"

#define RED_COL_BLOCK 64    /* columns per task in a column reduction */
#define RED_ROW_CHUNK 16384 /* elements per partial sum when a long row is split */
#define RED_MAX_DEPTH 64    /* recursion levels of the pairwise column sum */

typedef float f32;
typedef double f64;

/* ---- max through integer keys ----------------------------------------------------------
 * GCC does not vectorise a float `v > m ? v : m` reduction without
 * -ffast-math, but does the integer one. Flipping the magnitude bits of
 * negative floats gives an integer key with the same order as the values
 * (-0 sorts just below +0, which compare equal anyway: the caller searches
 * for the first element == the max). NaNs are flagged separately. */
#define MAXKEY(T, IT, MINV, SH, ABS, INF)                                                     \
    /* Returns true if x holds a NaN; else *best = max(x). n >= 1. */                         \
    static bool rowmax_key_##T(const T *restrict x, int64_t n, T *best) {                     \
        IT m = MINV, nan = 0;                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                     \
            IT b;                                                                             \
            memcpy(&b, x + i, sizeof b);                                                      \
            IT k = b ^ ((b >> SH) & ABS);                                                     \
            m = k > m ? k : m;                                                                \
            nan |= (b & ABS) > INF;                                                           \
        }                                                                                     \
        IT b = m ^ ((m >> SH) & ABS);                                                         \
        memcpy(best, &b, sizeof b);                                                           \
        return nan != 0;                                                                      \
    }

MAXKEY(f32, int32_t, INT32_MIN, 31, INT32_C(0x7FFFFFFF), INT32_C(0x7F800000))
MAXKEY(f64, int64_t, INT64_MIN, 63, INT64_C(0x7FFFFFFFFFFFFFFF), INT64_C(0x7FF0000000000000))

/* ---- kernels ------------------------------------------------------------------------- */
#define REDUCE_KERNELS(T)                                                                     \
    /* Pairwise sum of n contiguous elements: blocks of <= 256 use 32 independent lanes       \
     * (several vector accumulators, so the adds are not latency-bound) combined pairwise;    \
     * longer ranges split in half at a multiple of 32. */                                    \
    static T sum_contig_##T(const T *restrict x, int64_t n) {                                 \
        if (n <= 256) {                                                                       \
            T acc[32];                                                                        \
            for (int j = 0; j < 32; j++) acc[j] = 0;                                          \
            int64_t i = 0;                                                                    \
            for (; i + 32 <= n; i += 32)                                                      \
                for (int j = 0; j < 32; j++) acc[j] += x[i + j];                              \
            for (int j = 0; i < n; i++, j++) acc[j] += x[i];                                  \
            for (int w = 16; w > 0; w /= 2)                                                   \
                for (int j = 0; j < w; j++) acc[j] += acc[j + w];                             \
            return acc[0];                                                                    \
        }                                                                                     \
        int64_t h = (n / 2 + 31) & ~(int64_t)31;                                              \
        return sum_contig_##T(x, h) + sum_contig_##T(x + h, n - h);                           \
    }                                                                                         \
                                                                                              \
    /* dst[j] = sum_r x[r * stride + j] for j < w (w <= RED_COL_BLOCK), pairwise over r.      \
     * ws holds one scratch row per recursion level. */                                       \
    static void sum_cols_##T(const T *restrict x, int64_t R, int64_t stride, int w,           \
                             T *restrict dst, T (*ws)[RED_COL_BLOCK], int depth) {            \
        if (R <= 16 || depth >= RED_MAX_DEPTH) {                                              \
            if (w == RED_COL_BLOCK) {                                                         \
                /* full block: a fixed-size local accumulator stays in registers */           \
                T acc[RED_COL_BLOCK];                                                         \
                for (int j = 0; j < RED_COL_BLOCK; j++) acc[j] = 0;                           \
                for (int64_t r = 0; r < R; r++) {                                             \
                    const T *row = x + r * stride;                                            \
                    for (int j = 0; j < RED_COL_BLOCK; j++) acc[j] += row[j];                 \
                }                                                                             \
                for (int j = 0; j < RED_COL_BLOCK; j++) dst[j] = acc[j];                      \
                return;                                                                       \
            }                                                                                 \
            for (int j = 0; j < w; j++) dst[j] = 0;                                           \
            for (int64_t r = 0; r < R; r++) {                                                 \
                const T *row = x + r * stride;                                                \
                for (int j = 0; j < w; j++) dst[j] += row[j];                                 \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        int64_t h = R / 2;                                                                    \
        sum_cols_##T(x, h, stride, w, dst, ws, depth + 1);                                    \
        T *tmp = ws[depth];                                                                   \
        sum_cols_##T(x + h * stride, R - h, stride, w, tmp, ws, depth + 1);                   \
        for (int j = 0; j < w; j++) dst[j] += tmp[j];                                         \
    }                                                                                         \
                                                                                              \
    /* x (O, R, I) -> y (O, I). Returns false only when scratch could not be allocated. */    \
    static bool sum_ori_##T(const T *restrict x, int64_t O, int64_t R, int64_t I,             \
                            T *restrict y) {                                                  \
        int64_t total = O * R * I;                                                            \
        if (I == 1) {                                                                         \
            int64_t nch = (R + RED_ROW_CHUNK - 1) / RED_ROW_CHUNK;                            \
            if (O < 16 && nch > 1) {                                                          \
                /* few long rows: fixed chunks in parallel, then a pairwise sum of them */    \
                T *part = malloc((size_t)(O * nch) * sizeof(T));                              \
                if (!part) return false;                                                      \
                _Pragma("omp parallel for if (total > RM_OMP_MIN)")                           \
                for (int64_t t = 0; t < O * nch; t++) {                                       \
                    int64_t o = t / nch, c = t % nch;                                         \
                    int64_t lo = c * RED_ROW_CHUNK;                                           \
                    int64_t n = R - lo < RED_ROW_CHUNK ? R - lo : RED_ROW_CHUNK;              \
                    part[t] = sum_contig_##T(x + o * R + lo, n);                              \
                }                                                                             \
                for (int64_t o = 0; o < O; o++) y[o] = sum_contig_##T(part + o * nch, nch);   \
                free(part);                                                                   \
                return true;                                                                  \
            }                                                                                 \
            _Pragma("omp parallel for if (total > RM_OMP_MIN)")                               \
            for (int64_t o = 0; o < O; o++) y[o] = sum_contig_##T(x + o * R, R);              \
            return true;                                                                      \
        }                                                                                     \
        int64_t nb = (I + RED_COL_BLOCK - 1) / RED_COL_BLOCK;                                 \
        _Pragma("omp parallel for if (total > RM_OMP_MIN)")                                   \
        for (int64_t t = 0; t < O * nb; t++) {                                                \
            T ws[RED_MAX_DEPTH][RED_COL_BLOCK];                                               \
            int64_t o = t / nb, b = t % nb;                                                   \
            int64_t j0 = b * RED_COL_BLOCK;                                                   \
            int w = (int)(I - j0 < RED_COL_BLOCK ? I - j0 : RED_COL_BLOCK);                   \
            sum_cols_##T(x + o * R * I + j0, R, I, w, y + o * I + j0, ws, 0);                 \
        }                                                                                     \
        return true;                                                                          \
    }                                                                                         \
                                                                                              \
    /* dx (O, R, I) = g (O, I) * scale, broadcast over R. */                                  \
    static void bcast_ori_##T(const T *restrict g, int64_t O, int64_t R, int64_t I, T scale,  \
                              T *restrict dx) {                                               \
        int64_t total = O * R * I;                                                            \
        if (I == 1) { /* reduced over the last dim: fill each row with one value */          \
            _Pragma("omp parallel for if (total > RM_OMP_MIN)")                               \
            for (int64_t o = 0; o < O; o++) {                                                 \
                T v = g[o] * scale;                                                           \
                T *d = dx + o * R;                                                            \
                for (int64_t r = 0; r < R; r++) d[r] = v;                                     \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        _Pragma("omp parallel for if (total > RM_OMP_MIN)")                                   \
        for (int64_t orow = 0; orow < O * R; orow++) {                                        \
            const T *gi = g + (orow / R) * I;                                                 \
            T *d = dx + orow * I;                                                             \
            for (int64_t i = 0; i < I; i++) d[i] = gi[i] * scale;                             \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    /* x (O, R, I) -> y (O, I) max and idx (O, I) first argmax; NaN counts as the maximum     \
     * (the first NaN wins), as in PyTorch. */                                                \
    static void max_ori_##T(const T *restrict x, int64_t O, int64_t R, int64_t I,             \
                            T *restrict y, int64_t *restrict idx) {                           \
        int64_t total = O * R * I;                                                            \
        if (I == 1) {                                                                         \
            /* rows: a vectorisable integer-key max plus a NaN flag (see MAXKEY), then a      \
             * search for the first position holding the result */                          \
            _Pragma("omp parallel for if (total > RM_OMP_MIN)")                               \
            for (int64_t o = 0; o < O; o++) {                                                 \
                const T *xo = x + o * R;                                                      \
                T best;                                                                       \
                bool any_nan = rowmax_key_##T(xo, R, &best);                                  \
                int64_t at = 0;                                                               \
                if (any_nan) {                                                                \
                    while (xo[at] == xo[at]) at++;                                            \
                } else {                                                                      \
                    while (xo[at] != best) at++;                                              \
                }                                                                             \
                y[o] = xo[at]; /* the element itself: keeps the sign of a zero */             \
                idx[o] = at;                                                                  \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        _Pragma("omp parallel for if (total > RM_OMP_MIN)")                                   \
        for (int64_t o = 0; o < O; o++) {                                                     \
            const T *xo = x + o * R * I;                                                      \
            T *yo = y + o * I;                                                                \
            int64_t *io = idx + o * I;                                                        \
            for (int64_t i = 0; i < I; i++) {                                                 \
                yo[i] = xo[i];                                                                \
                io[i] = 0;                                                                    \
            }                                                                                 \
            for (int64_t r = 1; r < R; r++) {                                                 \
                const T *row = xo + r * I;                                                    \
                for (int64_t i = 0; i < I; i++) {                                             \
                    T v = row[i], b = yo[i];                                                  \
                    if (v > b || (v != v && b == b)) {                                        \
                        yo[i] = v;                                                            \
                        io[i] = r;                                                            \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    /* dx (O, R, I) = 0 except dx[o, idx[o,i], i] = g[o, i]. */                               \
    static void max_bwd_##T(const T *restrict g, const int64_t *restrict idx, int64_t O,      \
                            int64_t R, int64_t I, T *restrict dx) {                           \
        int64_t total = O * R * I;                                                            \
        _Pragma("omp parallel for if (total > RM_OMP_MIN)")                                   \
        for (int64_t o = 0; o < O; o++) {                                                     \
            T *d = dx + o * R * I;                                                            \
            memset(d, 0, (size_t)(R * I) * sizeof(T));                                        \
            for (int64_t i = 0; i < I; i++) {                                                 \
                int64_t r = idx[o * I + i];                                                   \
                if (r >= 0 && r < R) d[r * I + i] = g[o * I + i];                             \
            }                                                                                 \
        }                                                                                     \
    }

REDUCE_KERNELS(f32)
REDUCE_KERNELS(f64)

/* ---- shape helpers --------------------------------------------------------------------- */
/* A coalesced view of a contiguous shape: alternating groups of kept and
 * reduced dims, size-1 dims dropped. */
typedef struct groups {
    int n;
    int64_t size[REMAT_MAX_DIMS];
    bool red[REMAT_MAX_DIMS];
} groups;

static void make_groups(int ndim, const int64_t *shape, const bool *mask, groups *g) {
    g->n = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (g->n > 0 && g->red[g->n - 1] == mask[d]) {
            g->size[g->n - 1] *= shape[d];
        } else {
            g->size[g->n] = shape[d];
            g->red[g->n] = mask[d];
            g->n++;
        }
    }
}

/* Parses (n_dims, dims) into mask[] over a's dims. */
static int parse_dims(const char *call, const remat_tensor *a, int n_dims, const int *dims,
                      bool *mask) {
    for (int d = 0; d < REMAT_MAX_DIMS; d++) mask[d] = false;
    if (n_dims < 0)
        return rm_err(REMAT_EINVAL, "%s: n_dims must be >= 0, got %d", call, n_dims);
    if (n_dims == 0 || !dims) {
        for (int d = 0; d < a->ndim; d++) mask[d] = true;
        return REMAT_OK;
    }
    if (n_dims > REMAT_MAX_DIMS)
        return rm_err(REMAT_EINVAL, "%s: n_dims %d exceeds the maximum of %d dims", call, n_dims,
                      REMAT_MAX_DIMS);
    bool seen[REMAT_MAX_DIMS + 1] = {false};
    for (int k = 0; k < n_dims; k++) {
        int d;
        int rc = rm_norm_dim(call, dims[k], a->ndim, &d);
        if (rc) return rc;
        if (seen[d]) {
            char b[200];
            return rm_err(REMAT_EINVAL, "%s: dim %d appears more than once in dims (input %s)",
                          call, dims[k], rm_tensor_str(a, b, sizeof b));
        }
        seen[d] = true;
        if (d < a->ndim) mask[d] = true; /* a 0-dim tensor has nothing to reduce */
    }
    return REMAT_OK;
}

static void out_shape(const remat_tensor *a, const bool *mask, bool keepdim, int *ndim,
                      int64_t *shape) {
    int n = 0;
    for (int d = 0; d < a->ndim; d++) {
        if (!mask[d]) shape[n++] = a->shape[d];
        else if (keepdim) shape[n++] = 1;
    }
    *ndim = n;
}

/* Sums contiguous x (shape, mask) into contiguous y. Several reduced groups
 * are reduced innermost first through scratch buffers. */
static int sum_contig_any(const char *call, remat_dtype dt, const void *x, int ndim,
                          const int64_t *shape, const bool *mask, void *y) {
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
    groups g;
    make_groups(ndim, shape, mask, &g);
    int n_red = 0;
    for (int k = 0; k < g.n; k++) n_red += g.red[k];
    if (n_red == 0) {
        memcpy(y, x, (size_t)n_out * es);
        return REMAT_OK;
    }
    const void *src = x;
    void *scratch[2] = {NULL, NULL};
    int which = 0;
    int rc = REMAT_OK;
    while (n_red > 0) {
        int k = g.n - 1;
        while (!g.red[k]) k--;
        int64_t O = 1, I = 1, R = g.size[k];
        for (int j = 0; j < k; j++) O *= g.size[j];
        for (int j = k + 1; j < g.n; j++) I *= g.size[j];
        void *dst;
        if (n_red == 1) {
            dst = y;
        } else {
            free(scratch[which]);
            scratch[which] = malloc((size_t)(O * I) * es);
            if (!scratch[which]) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory for reduction scratch", call);
                break;
            }
            dst = scratch[which];
        }
        bool ok = dt == REMAT_F32 ? sum_ori_f32(src, O, R, I, dst) : sum_ori_f64(src, O, R, I, dst);
        if (!ok) {
            rc = rm_err(REMAT_ENOMEM, "%s: out of memory for reduction scratch", call);
            break;
        }
        src = dst;
        which ^= 1;
        /* remove group k, merging its kept neighbours */
        if (k > 0 && k + 1 < g.n) {
            g.size[k - 1] *= g.size[k + 1];
            for (int j = k; j + 2 < g.n; j++) {
                g.size[j] = g.size[j + 2];
                g.red[j] = g.red[j + 2];
            }
            g.n -= 2;
        } else {
            for (int j = k; j + 1 < g.n; j++) {
                g.size[j] = g.size[j + 1];
                g.red[j] = g.red[j + 1];
            }
            g.n -= 1;
        }
        n_red--;
    }
    free(scratch[0]);
    free(scratch[1]);
    return rc;
}

/* ---- sum / mean ------------------------------------------------------------------------------ */
typedef struct sum_ctx {
    int ndim;
    int64_t shape[REMAT_MAX_DIMS]; /* input shape */
    bool mask[REMAT_MAX_DIMS];
    double scale;                  /* 1 for sum, 1/count for mean */
} sum_ctx;

/* grad (reduced shape) -> dx (input shape): broadcast back and scale. */
static int sum_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    sum_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *g = NULL, *dx = NULL;
    int rc = rm_contig(&g, gout[0]);
    if (rc) return rc;
    remat_device dev = g->storage->device;
    rc = rm_new_output(&dx, c->ndim, c->shape, g->dtype, dev);
    if (rc) goto out;
    int64_t n = rm_shape_numel(c->ndim, c->shape);
    if (rm_ptr(dx) && rm_ptr(g) && n > 0) {
        groups gr;
        make_groups(c->ndim, c->shape, c->mask, &gr);
        int n_red = 0, k_red = -1;
        for (int k = 0; k < gr.n; k++)
            if (gr.red[k]) {
                n_red++;
                k_red = k;
            }
        if (n_red <= 1) {
            int64_t O = 1, R = 1, I = 1;
            for (int k = 0; k < gr.n; k++) {
                if (k < k_red || k_red < 0) O *= gr.size[k];
                else if (k == k_red) R = gr.size[k];
                else I *= gr.size[k];
            }
            if (g->dtype == REMAT_F32)
                bcast_ori_f32(rm_ptr(g), O, R, I, (f32)c->scale, rm_ptr(dx));
            else
                bcast_ori_f64(rm_ptr(g), O, R, I, c->scale, rm_ptr(dx));
        } else {
            /* general case: view g with the keepdim shape and let the copy broadcast */
            int64_t ks[REMAT_MAX_DIMS], kst[REMAT_MAX_DIMS];
            for (int d = 0; d < c->ndim; d++) ks[d] = c->mask[d] ? 1 : c->shape[d];
            rm_contiguous_strides(c->ndim, ks, kst);
            remat_tensor *gv = rm_tensor_alloc(g->storage, g->offset, c->ndim, ks, kst, g->dtype);
            if (!gv) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory", node->name);
                goto out;
            }
            rc = rm_copy_into(dx, gv);
            remat_release(gv);
            if (rc) goto out;
            if (c->scale != 1.0) {
                if (g->dtype == REMAT_F32) {
                    f32 *p = rm_ptr(dx), s = (f32)c->scale;
                    for (int64_t i = 0; i < n; i++) p[i] *= s;
                } else {
                    f64 *p = rm_ptr(dx);
                    for (int64_t i = 0; i < n; i++) p[i] *= c->scale;
                }
            }
        }
    }
    gin[0] = dx;
    dx = NULL;
out:
    remat_release(g);
    remat_release(dx);
    return rc;
}

static int sum_impl(const char *call, bool mean, remat_tensor **out, remat_tensor *a, int n_dims,
                    const int *dims, bool keepdim) {
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_float(call, "a", a);
    if (rc) return rc;
    bool mask[REMAT_MAX_DIMS];
    rc = parse_dims(call, a, n_dims, dims, mask);
    if (rc) return rc;
    int ond;
    int64_t oshape[REMAT_MAX_DIMS];
    out_shape(a, mask, keepdim, &ond, oshape);
    int64_t count = 1;
    for (int d = 0; d < a->ndim; d++)
        if (mask[d]) count *= a->shape[d];
    double scale = mean ? 1.0 / (double)count : 1.0; /* count 0: inf, the mean is NaN */

    remat_tensor *x = NULL, *y = NULL;
    rc = rm_contig(&x, a);
    if (rc) return rm_err_prefix(rc, call);
    rc = rm_new_output(&y, ond, oshape, a->dtype, a->storage->device);
    if (rc) {
        remat_release(x);
        return rm_err_prefix(rc, call);
    }
    if (rm_ptr(y) && rm_ptr(x)) {
        rc = sum_contig_any(call, a->dtype, rm_ptr(x), a->ndim, a->shape, mask, rm_ptr(y));
        if (rc == REMAT_OK && mean) {
            /* divide (not multiply by 1/count) to match PyTorch's mean rounding */
            int64_t n = remat_numel(y);
            if (a->dtype == REMAT_F32) {
                f32 *p = rm_ptr(y);
                for (int64_t i = 0; i < n; i++) p[i] = p[i] / (f32)count;
            } else {
                f64 *p = rm_ptr(y);
                for (int64_t i = 0; i < n; i++) p[i] = p[i] / (f64)count;
            }
        }
    }
    remat_release(x);
    if (rc == REMAT_OK && rm_needs_grad(1, &a)) {
        remat_node *node;
        rc = rm_node_new(&node, mean ? "MeanBackward" : "SumBackward", sum_backward, 1, &a, 1, 0);
        if (rc == REMAT_OK) {
            sum_ctx *c = malloc(sizeof *c);
            if (!c) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            } else {
                c->ndim = a->ndim;
                memcpy(c->shape, a->shape, sizeof c->shape);
                memcpy(c->mask, mask, sizeof c->mask);
                c->scale = scale;
                rm_node_set_ctx(node, c, NULL);
                rm_node_set_output(node, 0, y);
            }
            rm_node_release(node);
        }
    }
    if (rc) {
        remat_release(y);
        return rm_err_prefix(rc, call);
    }
    return rm_hand_out(out, y);
}

int remat_sum(remat_tensor **out, remat_tensor *a, int n_dims, const int *dims, bool keepdim) {
    remat_tensor *in[1] = {a};
    RM_OP_RUN1("remat_sum", out, 1, in, NULL,
               sum_impl("remat_sum", false, out, a, n_dims, dims, keepdim));
}

int remat_mean(remat_tensor **out, remat_tensor *a, int n_dims, const int *dims, bool keepdim) {
    remat_tensor *in[1] = {a};
    RM_OP_RUN1("remat_mean", out, 1, in, NULL,
               sum_impl("remat_mean", true, out, a, n_dims, dims, keepdim));
}

int remat_sum_all(remat_tensor **out, remat_tensor *a) {
    remat_tensor *in[1] = {a};
    RM_OP_RUN1("remat_sum_all", out, 1, in, NULL,
               sum_impl("remat_sum_all", false, out, a, 0, NULL, false));
}

/* ---- max ------------------------------------------------------------------------------------- */
typedef struct max_ctx {
    int ndim;
    int64_t shape[REMAT_MAX_DIMS]; /* input shape */
    int dim;
} max_ctx;

/* saved: 0 = argmax indices (i64, output shape) */
static int max_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    max_ctx *c = node->ctx;
    if (!node->next[0].node) return REMAT_OK;
    remat_tensor *idx = NULL, *idxc = NULL, *g = NULL, *dx = NULL;
    int rc = rm_node_unpack(node, 0, &idx);
    if (rc) return rc;
    if (!idx) {
        rc = rm_err(REMAT_ESTATE, "%s: argmax indices were not saved", node->name);
        goto out;
    }
    rc = rm_contig(&idxc, idx);
    if (rc) goto out;
    rc = rm_contig(&g, gout[0]);
    if (rc) goto out;
    rc = rm_new_output(&dx, c->ndim, c->shape, g->dtype, g->storage->device);
    if (rc) goto out;
    if (rm_ptr(dx) && rm_ptr(g) && rm_ptr(idxc)) {
        int64_t O, R, I;
        rm_outer_reduce_inner(c->ndim, c->shape, c->dim, &O, &R, &I);
        if (g->dtype == REMAT_F32) max_bwd_f32(rm_ptr(g), rm_ptr(idxc), O, R, I, rm_ptr(dx));
        else max_bwd_f64(rm_ptr(g), rm_ptr(idxc), O, R, I, rm_ptr(dx));
    }
    gin[0] = dx;
    dx = NULL;
out:
    remat_release(idx);
    remat_release(idxc);
    remat_release(g);
    remat_release(dx);
    return rc;
}

static int max_impl(remat_tensor **out, remat_tensor **indices, remat_tensor *a, int dim,
                    bool keepdim) {
    const char *call = "remat_max";
    rm_op_enter(call);
    if (indices) *indices = NULL;
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_float(call, "a", a);
    if (rc) return rc;
    int d;
    rc = rm_norm_dim(call, dim, a->ndim, &d);
    if (rc) return rc;
    if (a->ndim > 0 && a->shape[d] == 0) {
        char b[200];
        return rm_err(REMAT_ESHAPE, "%s: cannot take the max over dim %d of size 0 (a is %s)",
                      call, dim, rm_tensor_str(a, b, sizeof b));
    }
    bool mask[REMAT_MAX_DIMS] = {false};
    if (a->ndim > 0) mask[d] = true;
    int ond;
    int64_t oshape[REMAT_MAX_DIMS];
    out_shape(a, mask, keepdim, &ond, oshape);

    remat_tensor *x = NULL, *y = NULL, *ix = NULL;
    rc = rm_contig(&x, a);
    if (rc == REMAT_OK) rc = rm_new_output(&y, ond, oshape, a->dtype, a->storage->device);
    if (rc == REMAT_OK) rc = rm_new_output(&ix, ond, oshape, REMAT_I64, a->storage->device);
    if (rc) {
        remat_release(x);
        remat_release(y);
        return rm_err_prefix(rc, call);
    }
    if (rm_ptr(x) && rm_ptr(y) && rm_ptr(ix)) {
        int64_t O, R, I;
        rm_outer_reduce_inner(a->ndim, a->shape, d, &O, &R, &I);
        if (a->dtype == REMAT_F32) max_ori_f32(rm_ptr(x), O, R, I, rm_ptr(y), rm_ptr(ix));
        else max_ori_f64(rm_ptr(x), O, R, I, rm_ptr(y), rm_ptr(ix));
    }
    remat_release(x);
    if (rm_needs_grad(1, &a)) {
        remat_node *node;
        rc = rm_node_new(&node, "MaxBackward", max_backward, 1, &a, 1, 1);
        if (rc == REMAT_OK) {
            max_ctx *c = malloc(sizeof *c);
            if (!c) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
            } else {
                c->ndim = a->ndim;
                memcpy(c->shape, a->shape, sizeof c->shape);
                c->dim = d;
                rm_node_set_ctx(node, c, NULL);
                rm_node_set_output(node, 0, y);
                rc = rm_op_save(node, 0, ix);
            }
            rm_node_release(node);
        }
        if (rc) {
            remat_release(y);
            remat_release(ix);
            return rm_err_prefix(rc, call);
        }
    }
    if (!indices) {
        remat_release(ix);
        return rm_hand_out(out, y);
    }
    remat_tensor *both[2] = {y, ix};
    int hrc = rm_hand_out_n(both, 2);
    *out = both[0];
    *indices = both[1];
    return hrc;
}

/* The public entry: interception bracket with both outputs. */
int remat_max(remat_tensor **out, remat_tensor **indices, remat_tensor *a, int dim, bool keepdim) {
    remat_tensor *in[1] = {a};
    rm_op_frame f;
    int rc = rm_op_begin(&f, "remat_max", 1, in, RM_OP_SITE(), NULL);
    if (rc) {
        if (out) *out = NULL;
        if (indices) *indices = NULL;
        return rc;
    }
    rc = max_impl(out, indices, a, dim, keepdim);
    remat_tensor *outs[2] = {rc == REMAT_OK && out ? *out : NULL,
                             rc == REMAT_OK && indices ? *indices : NULL};
    rm_op_end(&f, rc, 2, outs);
    return rc;
}
