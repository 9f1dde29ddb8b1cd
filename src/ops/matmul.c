/* src/ops/matmul.c — matmul (torch.matmul semantics) and linear, on the
 * GEMM layer of gemm.c.
 *
 * Every operand is seen as a batch of strided matrices (mview): a row dim,
 * a column dim, and batch dims aligned to the broadcast batch shape with
 * stride 0 where the operand is broadcast. A 1-D operand has a missing row
 * (a) or column (b) dim of size 1, which is how torch.matmul's "prepend /
 * append a dim, then remove it" is done without any reshaping.
 *
 * A matrix whose elements are row-major with some row stride, or the
 * transpose of that (a transposed contiguous matrix, or a column slice),
 * goes to the GEMM as it is, with the transpose flag; anything else is
 * copied with rm_contig first. Then one of three plans runs (mm_exec):
 *   - fold-M: when op(B) is the same for every batch and A's and C's rows
 *     run on with one stride across batches, the whole batch is one GEMM
 *     with M = batch·m (x (B, T, C) @ W (C, D), linear on a 3-D x);
 *   - fold-K: when C is one matrix for the whole batch (C broadcast over
 *     every batch dim) and both operands run along k across batches, one
 *     GEMM with K = batch·k (the weight gradient of the above);
 *   - otherwise a loop over the batch, one GEMM per matrix; where C is
 *     broadcast over some batch dims, the GEMMs accumulate into it
 *     (beta = 1). That is how the backward reduces gradients over the
 *     batch dims an input was broadcast along: straight into the input's
 *     shape, without materialising the broadcast gradient and summing it
 *     (which is what rm_sum_to would do, at batch× the memory). */
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "gemm.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- batched strided matrices ------------------------------------------------------------ */

typedef struct mview {
    char *p;                       /* element [0, ..., 0] */
    int64_t rows, cols;
    int64_t rs, cs;                /* row / column strides (elements) */
    int64_t bstr[REMAT_MAX_DIMS];  /* batch strides, aligned to the batch shape */
} mview;

/* v = t as a batch of matrices. The matrix dims are t's trailing dims: a row
 * dim if has_row, a column dim if has_col (a missing one has size 1); the
 * leading dims are batch dims, aligned right against the nb batch dims of
 * the operation (stride 0 where t has size 1 or lacks the dim). */
static void view_of(mview *v, const remat_tensor *t, bool has_row, bool has_col, int nb) {
    int nm = (int)has_row + (int)has_col;
    int tb = t->ndim - nm; /* t's own batch dims */
    v->p = rm_ptr(t);
    v->rows = has_row ? t->shape[tb] : 1;
    v->rs = has_row ? t->strides[tb] : 0;
    v->cols = has_col ? t->shape[t->ndim - 1] : 1;
    v->cs = has_col ? t->strides[t->ndim - 1] : 0;
    for (int d = 0; d < nb; d++) {
        int j = d - (nb - tb);
        v->bstr[d] = (j >= 0 && t->shape[j] != 1) ? t->strides[j] : 0;
    }
}

static mview view_t(const mview *v) {
    mview r = *v;
    r.rows = v->cols;
    r.cols = v->rows;
    r.rs = v->cs;
    r.cs = v->rs;
    return r;
}

/* Whether the matrices of v are row-major with row stride *ld (*t false) or
 * the transpose of such a matrix (*t true, v's column stride is *ld). A
 * size-1 dim may have any stride. Empty matrices always pass (the GEMM
 * never reads them). */
static bool mv_layout(const mview *v, bool *t, int64_t *ld) {
    int64_t R = v->rows, C = v->cols;
    int64_t needc = C > 1 ? C : 1, needr = R > 1 ? R : 1;
    *t = false;
    *ld = needc;
    if (R == 0 || C == 0) return true;
    if (C == 1 || v->cs == 1) {
        int64_t l = R == 1 ? needc : v->rs;
        if (l >= needc) {
            *ld = l;
            return true;
        }
    }
    if (R == 1 || v->rs == 1) {
        int64_t l = C == 1 ? needr : v->cs;
        if (l >= needr) {
            *t = true;
            *ld = l;
            return true;
        }
    }
    return false;
}

/* *owned = t, or a contiguous copy of t when its matrices (as view_of sees
 * them) are not a layout the GEMM can take. New reference. */
static int prep_operand(remat_tensor **owned, remat_tensor *t, bool has_row, bool has_col) {
    mview v;
    bool tr;
    int64_t ld;
    view_of(&v, t, has_row, has_col, 0);
    if (mv_layout(&v, &tr, &ld)) {
        *owned = remat_retain(t);
        return REMAT_OK;
    }
    return rm_contig(owned, t);
}

/* True if, over the batch dims of size > 1 (innermost first), the strides
 * continue the matrix dim that has `inner` = count · stride elements: the
 * batch then is just more rows of that dim. */
static bool batch_chains(int nb, const int64_t *bshape, const int64_t *bstr, int64_t inner) {
    int64_t expect = inner;
    for (int d = nb - 1; d >= 0; d--) {
        if (bshape[d] == 1) continue;
        if (bstr[d] != expect) return false;
        expect *= bshape[d];
    }
    return true;
}

static bool batch_broadcast_all(int nb, const int64_t *bshape, const int64_t *bstr) {
    for (int d = 0; d < nb; d++)
        if (bshape[d] != 1 && bstr[d] != 0) return false;
    return true;
}

/* Batches of GEMMs below this many multiply-adds each run in parallel over
 * the batch (about 128^3: below it a GEMM split over threads stops paying). */
#define RM_BATCH_PAR_MAX ((double)(1 << 21))

static int max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static void gemm_dt(remat_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    const char *A, int64_t lda, const char *B, int64_t ldb, double beta, char *C,
                    int64_t ldc) {
    if (dt == REMAT_F32)
        rm_sgemm(ta, tb, m, n, k, 1.0f, (const float *)A, lda, (const float *)B, ldb,
                 (float)beta, (float *)C, ldc);
    else
        rm_dgemm(ta, tb, m, n, k, 1.0, (const double *)A, lda, (const double *)B, ldb, beta,
                 (double *)C, ldc);
}

/* C[b] = A[b] · B[b] for every index b of the batch shape (nb dims), where
 * A is m×k, B k×n and C m×n (row-major, C->cs == 1, made by us). C may be
 * broadcast over batch dims (stride 0): products then accumulate into it.
 * add_to_c: C already holds a term to add (linear's bias). c_numel: number
 * of elements of the tensor behind C (zeroed before accumulating). All views
 * must pass mv_layout. */
static void mm_exec(remat_dtype dt, int nb, const int64_t *bshape, const mview *A, const mview *B,
                    const mview *C, int64_t c_numel, bool add_to_c) {
    bool ta, tb, tc;
    int64_t lda, ldb, ldc;
    mv_layout(A, &ta, &lda);
    mv_layout(B, &tb, &ldb);
    mv_layout(C, &tc, &ldc);
    int64_t m = A->rows, k = A->cols, n = B->cols;
    int64_t nbatch = rm_shape_numel(nb, bshape);
    size_t es = remat_dtype_size(dt);
    double beta = add_to_c ? 1.0 : 0.0;
    if (m == 0 || n == 0) return;

    /* fold-M: one GEMM over batch·m rows */
    if (!ta && !tc && batch_broadcast_all(nb, bshape, B->bstr) &&
        batch_chains(nb, bshape, A->bstr, m * lda) && batch_chains(nb, bshape, C->bstr, m * ldc)) {
        gemm_dt(dt, ta, tb, nbatch * m, n, k, A->p, lda, B->p, ldb, beta, C->p, ldc);
        return;
    }
    /* fold-K: one GEMM summing over batch·k */
    if (ta && !tb && !tc && batch_broadcast_all(nb, bshape, C->bstr) &&
        batch_chains(nb, bshape, A->bstr, k * lda) && batch_chains(nb, bshape, B->bstr, k * ldb)) {
        gemm_dt(dt, ta, tb, m, n, nbatch * k, A->p, lda, B->p, ldb, beta, C->p, ldc);
        return;
    }
    /* one GEMM per batch entry; accumulate where C is broadcast */
    bool acc = false;
    for (int d = 0; d < nb; d++) acc |= bshape[d] != 1 && C->bstr[d] == 0;
    if (acc && !add_to_c) {
        memset(C->p, 0, (size_t)c_numel * es);
        beta = 1.0;
    }
    rm_iter base;
    rm_iter_init(&base, nb, bshape, 3);
    for (int d = 0; d < nb; d++) {
        base.strides[0][d] = A->bstr[d];
        base.strides[1][d] = B->bstr[d];
        base.strides[2][d] = C->bstr[d];
    }
    /* Whole GEMMs per thread (each single-threaded) rather than every GEMM
     * split over the threads: for small matrices (attention heads), where a
     * split does not pay, and whenever the batch divides evenly among the
     * threads (8 x 256x384x384 on 2 threads: 160 vs 134 GFLOP/s with
     * OpenBLAS). Not when C is shared across the batch (accumulation), nor
     * when the GEMM layer cannot be entered from a parallel region. (Two
     * loops rather than one with an `if (par)` clause: a GEMM that opens its
     * own parallel region from inside an inactive one gets a freshly created
     * nested team from libgomp — about 2 ms per call.) */
    int nt = max_threads();
    bool par = !acc && nbatch > 1 && nt > 1 && rm_gemm_threading() == RM_GEMM_THREADS_OMP &&
               ((double)m * (double)n * (double)k < RM_BATCH_PAR_MAX || nbatch % nt == 0);
    if (par) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nbatch; i++) {
            rm_iter it = base;
            rm_iter_seek(&it, i);
            gemm_dt(dt, ta, tb, m, n, k, A->p + (size_t)it.off[0] * es, lda,
                    B->p + (size_t)it.off[1] * es, ldb, beta, C->p + (size_t)it.off[2] * es, ldc);
        }
    } else {
        rm_iter it = base;
        for (int64_t i = 0; i < nbatch; i++) {
            gemm_dt(dt, ta, tb, m, n, k, A->p + (size_t)it.off[0] * es, lda,
                    B->p + (size_t)it.off[1] * es, ldb, beta, C->p + (size_t)it.off[2] * es, ldc);
            rm_iter_next(&it);
        }
    }
}

/* ---- matmul ---------------------------------------------------------------------------------- */

typedef struct mm_ctx {
    int nda, ndb;
    int64_t sa[REMAT_MAX_DIMS], sb[REMAT_MAX_DIMS];
} mm_ctx;

/* Batch shape (nb dims) and output shape of a @ b; checks the shapes. */
static int mm_shapes(const char *call, int nda, const int64_t *sa, int ndb, const int64_t *sb,
                     int *nb, int64_t *bshape, int *ndo, int64_t *oshape) {
    char b1[200], b2[200];
    if (nda == 0 || ndb == 0)
        return rm_err(REMAT_ESHAPE,
                      "%s: both arguments must be at least 1-D, got a %s and b %s (use remat_mul "
                      "to scale by a 0-dim tensor)",
                      call, rm_shape_str(nda, sa, b1, sizeof b1), rm_shape_str(ndb, sb, b2, sizeof b2));
    int64_t ka = sa[nda - 1];
    int64_t kb = ndb == 1 ? sb[0] : sb[ndb - 2];
    if (ka != kb)
        return rm_err(REMAT_ESHAPE, "%s: cannot multiply a %s by b %s (inner sizes %lld and %lld differ)",
                      call, rm_shape_str(nda, sa, b1, sizeof b1),
                      rm_shape_str(ndb, sb, b2, sizeof b2), (long long)ka, (long long)kb);
    int na = nda > 2 ? nda - 2 : 0, nbb = ndb > 2 ? ndb - 2 : 0;
    int n = na > nbb ? na : nbb;
    for (int d = 0; d < n; d++) {
        int ia = d - (n - na), ib = d - (n - nbb);
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return rm_err(REMAT_ESHAPE,
                          "%s: batch dims of a %s and b %s cannot be broadcast (batch dim %d: %lld "
                          "vs %lld)",
                          call, rm_shape_str(nda, sa, b1, sizeof b1),
                          rm_shape_str(ndb, sb, b2, sizeof b2), d, (long long)da, (long long)db);
        bshape[d] = da == 1 ? db : da;
    }
    *nb = n;
    int k = 0;
    for (int d = 0; d < n; d++) oshape[k++] = bshape[d];
    if (nda > 1) oshape[k++] = sa[nda - 2];
    if (ndb > 1) oshape[k++] = sb[ndb - 1];
    *ndo = k;
    return REMAT_OK;
}

/* Checks that a tensor unpacked for backward still has the shape it was
 * saved with (a saved-tensor hook could hand back something else). */
static int check_saved(const char *node, const char *what, const remat_tensor *t, int nd,
                       const int64_t *shape) {
    if (t->ndim == nd && memcmp(t->shape, shape, sizeof(int64_t) * (size_t)nd) == 0)
        return REMAT_OK;
    char b1[200], b2[200];
    return rm_err(REMAT_ESHAPE, "%s: saved %s came back as %s, expected %s", node, what,
                  rm_shape_str(t->ndim, t->shape, b1, sizeof b1), rm_shape_str(nd, shape, b2, sizeof b2));
}

/* dA = g · B^T and dB = A^T · g (batched), each reduced over the batch dims
 * its input was broadcast along by accumulating GEMMs (see mm_exec). */
static int mm_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    mm_ctx *c = node->ctx;
    bool ga = node->next[0].node != NULL, gb = node->next[1].node != NULL;
    remat_tensor *a = NULL, *b = NULL, *g = NULL, *da = NULL, *db = NULL;
    remat_tensor *ac = NULL, *bc = NULL;
    int nb, ndo;
    int64_t bshape[REMAT_MAX_DIMS], oshape[REMAT_MAX_DIMS];
    int rc = mm_shapes("MmBackward", c->nda, c->sa, c->ndb, c->sb, &nb, bshape, &ndo, oshape);
    if (rc) return rc;
    bool row = c->nda > 1, col = c->ndb > 1;
    remat_dtype dt = gout[0]->dtype;
    remat_device dev = gout[0]->storage->device;
    rc = prep_operand(&g, gout[0], row, col);
    if (rc) goto out;
    if (ga) {
        rc = rm_node_unpack(node, 1, &b);
        if (!rc) rc = check_saved("MmBackward", "b", b, c->ndb, c->sb);
        if (!rc) rc = prep_operand(&bc, b, true, col);
        if (!rc) rc = rm_new_output(&da, c->nda, c->sa, dt, dev);
        if (rc) goto out;
        if (rm_ptr(da) && rm_ptr(g) && rm_ptr(bc)) {
            mview G, Bv, D;
            view_of(&G, g, row, col, nb);
            view_of(&Bv, bc, true, col, nb);
            view_of(&D, da, row, true, nb);
            mview Bt = view_t(&Bv);
            mm_exec(dt, nb, bshape, &G, &Bt, &D, remat_numel(da), false);
        }
    }
    if (gb) {
        rc = rm_node_unpack(node, 0, &a);
        if (!rc) rc = check_saved("MmBackward", "a", a, c->nda, c->sa);
        if (!rc) rc = prep_operand(&ac, a, row, true);
        if (!rc) rc = rm_new_output(&db, c->ndb, c->sb, dt, dev);
        if (rc) goto out;
        if (rm_ptr(db) && rm_ptr(g) && rm_ptr(ac)) {
            mview G, Av, D;
            view_of(&G, g, row, col, nb);
            view_of(&Av, ac, row, true, nb);
            view_of(&D, db, true, col, nb);
            mview At = view_t(&Av);
            mm_exec(dt, nb, bshape, &At, &G, &D, remat_numel(db), false);
        }
    }
    gin[0] = da;
    gin[1] = db;
    da = db = NULL;
out:
    remat_release(a);
    remat_release(b);
    remat_release(ac);
    remat_release(bc);
    remat_release(g);
    remat_release(da);
    remat_release(db);
    return rc;
}

static int matmul_impl(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    static const char *call = "remat_matmul";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_float(call, "a", a);
    if (!rc) rc = rm_check_float(call, "b", b);
    if (!rc) rc = rm_check_same_dtype(call, a, b);
    if (!rc) rc = rm_check_same_device(call, a, b);
    if (rc) return rc;
    int nb, ndo;
    int64_t bshape[REMAT_MAX_DIMS], oshape[REMAT_MAX_DIMS];
    rc = mm_shapes(call, a->ndim, a->shape, b->ndim, b->shape, &nb, bshape, &ndo, oshape);
    if (rc) return rc;
    bool row = a->ndim > 1, col = b->ndim > 1;

    /* The node and its saves come first (rm_save_before_kernel in internal.h). */
    remat_tensor *y = NULL, *ac = NULL, *bc = NULL, *ins[2] = {a, b};
    remat_node *node = NULL;
    if (rm_needs_grad(2, ins)) {
        rc = rm_node_new(&node, "MmBackward", mm_backward, 2, ins, 1, 2);
        if (rc) return rm_err_prefix(rc, call);
        mm_ctx *c = calloc(1, sizeof *c);
        if (!c) {
            rc = rm_err(REMAT_ENOMEM, "out of memory");
            goto fail;
        }
        c->nda = a->ndim;
        c->ndb = b->ndim;
        memcpy(c->sa, a->shape, sizeof c->sa);
        memcpy(c->sb, b->shape, sizeof c->sb);
        rm_node_set_ctx(node, c, NULL);
        /* each input is needed only for the other one's gradient */
        if (node->next[1].node) rc = rm_op_save(node, 0, a);
        if (!rc && node->next[0].node) rc = rm_op_save(node, 1, b);
        if (rc) goto fail;
    }

    rc = rm_new_output(&y, ndo, oshape, a->dtype, a->storage->device);
    if (rc) goto fail;
    if (rm_ptr(y) && rm_ptr(a) && rm_ptr(b)) {
        rc = prep_operand(&ac, a, row, true);
        if (!rc) rc = prep_operand(&bc, b, true, col);
        if (rc) goto fail;
        mview A, B, C;
        view_of(&A, ac, row, true, nb);
        view_of(&B, bc, true, col, nb);
        view_of(&C, y, row, col, nb);
        mm_exec(a->dtype, nb, bshape, &A, &B, &C, remat_numel(y), false);
        remat_release_p(&ac);
        remat_release_p(&bc);
    }
    if (node) {
        rm_node_set_output(node, 0, y);
        rm_node_release(node);
    }
    return rm_hand_out(out, y);
fail:
    rm_node_release(node);
    remat_release(ac);
    remat_release(bc);
    remat_release(y);
    return rm_err_prefix(rc, call);
}

/* ---- linear ------------------------------------------------------------------------------------ */

typedef struct lin_ctx {
    int ndx;
    int64_t sx[REMAT_MAX_DIMS];
    int64_t out_f, in_f;
} lin_ctx;

/* y (rows, n) = bias (n) in every row, before the GEMM adds x·W^T (beta = 1).
 * A write pass over y: with in_features = 128 it is ~10 % of the GEMM's
 * time on one thread, so it is split over the team like the GEMM after it. */
static void fill_rows(void *y, const void *bias, int64_t rows, int64_t n, size_t es) {
    size_t row = (size_t)n * es;
#pragma omp parallel for schedule(static) if (rows * n > RM_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) memcpy((char *)y + (size_t)r * row, bias, row);
}

/* db (n) = sum over rows of g (rows, n), contiguous. The rows are cut into
 * fixed chunks (a function of the shape only); each chunk streams its rows
 * (contiguous, vectorised across the columns) into a partial sum in T held
 * in part (n elements per chunk, L1-sized for the usual widths), and the
 * partials are then summed in double, chunk after chunk, by blocks of 64
 * columns. The summation order never depends on the thread count. Narrow
 * g (n < 64: rows too short to stream) sums each column block down all the
 * rows in double instead; part is then unused. */
#define COLSUM_CHUNK_ROWS 64     /* rows per chunk, at most... */
#define COLSUM_MIN_CHUNKS 16     /* ...but few rows still make this many chunks (threads) */
#define COLSUM_MAX_CHUNKS 1024   /* more rows per chunk above this many chunks */
#define COLSUM_MAX_PART (1 << 24) /* and above this many partial sums (elements) */
static int64_t colsum_chunk_rows(int64_t rows, int64_t n) {
    int64_t r = (rows + COLSUM_MIN_CHUNKS - 1) / COLSUM_MIN_CHUNKS;
    if (r > COLSUM_CHUNK_ROWS) r = COLSUM_CHUNK_ROWS;
    int64_t lo = (rows + COLSUM_MAX_CHUNKS - 1) / COLSUM_MAX_CHUNKS;
    if (r < lo) r = lo;
    if (r < 1) r = 1;
    while (r < rows && (rows + r - 1) / r * n > COLSUM_MAX_PART) r *= 2;
    return r;
}
/* elements of scratch colsum needs (0: none) */
static int64_t colsum_scratch(int64_t rows, int64_t n) {
    if (n < 64 || rows == 0) return 0;
    int64_t rb = colsum_chunk_rows(rows, n);
    return (rows + rb - 1) / rb * n;
}
#define COLSUM(T)                                                                               \
    static void colsum_##T(const T *restrict g, T *restrict db, int64_t rows, int64_t n,        \
                           T *restrict part) {                                                  \
        int64_t nblk = (n + 63) / 64;                                                           \
        if (!part) { /* narrow: column blocks down the rows */                                  \
            _Pragma("omp parallel for if (rows * n > RM_OMP_MIN)")                              \
            for (int64_t bi = 0; bi < nblk; bi++) {                                             \
                int64_t j0 = bi * 64, nc = n - j0 < 64 ? n - j0 : 64;                           \
                double acc[64] = {0};                                                           \
                for (int64_t r = 0; r < rows; r++) {                                            \
                    const T *restrict gr = g + r * n + j0;                                      \
                    for (int64_t j = 0; j < nc; j++) acc[j] += gr[j];                           \
                }                                                                               \
                for (int64_t j = 0; j < nc; j++) db[j0 + j] = (T)acc[j];                        \
            }                                                                                   \
            return;                                                                             \
        }                                                                                       \
        int64_t rb = colsum_chunk_rows(rows, n), nch = (rows + rb - 1) / rb;                    \
        _Pragma("omp parallel for if (rows * n > RM_OMP_MIN)")                                  \
        for (int64_t k = 0; k < nch; k++) {                                                     \
            T *restrict p = part + k * n;                                                       \
            int64_t r1 = (k + 1) * rb < rows ? (k + 1) * rb : rows;                             \
            memcpy(p, g + k * rb * n, sizeof(T) * (size_t)n);                                   \
            for (int64_t r = k * rb + 1; r < r1; r++) {                                         \
                const T *restrict gr = g + r * n;                                               \
                for (int64_t j = 0; j < n; j++) p[j] += gr[j];                                  \
            }                                                                                   \
        }                                                                                       \
        _Pragma("omp parallel for if (nch * n > RM_OMP_MIN)")                                   \
        for (int64_t bi = 0; bi < nblk; bi++) {                                                 \
            int64_t j0 = bi * 64, nc = n - j0 < 64 ? n - j0 : 64;                               \
            double acc[64] = {0};                                                               \
            for (int64_t k = 0; k < nch; k++) {                                                 \
                const T *restrict pk = part + k * n + j0;                                       \
                for (int64_t j = 0; j < nc; j++) acc[j] += pk[j];                               \
            }                                                                                   \
            for (int64_t j = 0; j < nc; j++) db[j0 + j] = (T)acc[j];                            \
        }                                                                                       \
    }
COLSUM(float)
COLSUM(double)

/* dx = g · W, dW = g^T · x (flattened over the leading dims: one GEMM with
 * K = rows when x and g are contiguous), db = column sums of g. */
static int linear_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    lin_ctx *c = node->ctx;
    bool gx = node->next[0].node != NULL, gw = node->next[1].node != NULL;
    bool gbias = node->next[2].node != NULL;
    remat_tensor *x = NULL, *w = NULL, *g = NULL, *xc = NULL, *wc = NULL;
    remat_tensor *dx = NULL, *dw = NULL, *db = NULL;
    remat_dtype dt = gout[0]->dtype;
    remat_device dev = gout[0]->storage->device;
    bool row = c->ndx > 1;
    int nb = c->ndx > 2 ? c->ndx - 2 : 0;
    const int64_t *bshape = c->sx;
    int64_t wshape[2] = {c->out_f, c->in_f};
    int rc = rm_contig(&g, gout[0]);
    if (rc) return rc;
    /* dW first: x (often the largest saved tensor) is then let go before dx
     * is allocated, so the two never coexist when the graph is not kept. */
    if (gw) {
        rc = rm_node_unpack(node, 0, &x);
        if (!rc) rc = check_saved("LinearBackward", "x", x, c->ndx, c->sx);
        if (!rc) rc = prep_operand(&xc, x, row, true);
        if (!rc) rc = rm_new_output(&dw, 2, wshape, dt, dev);
        if (rc) goto out;
        if (rm_ptr(dw) && rm_ptr(g) && rm_ptr(xc)) {
            mview G, X, D;
            view_of(&G, g, row, true, nb);
            view_of(&X, xc, row, true, nb);
            view_of(&D, dw, true, true, nb);
            mview Gt = view_t(&G);
            mm_exec(dt, nb, bshape, &Gt, &X, &D, remat_numel(dw), false);
        }
        remat_release_p(&xc);
        remat_release_p(&x);
        rm_node_done_with_saved(node, 0);
    }
    if (gx) {
        rc = rm_node_unpack(node, 1, &w);
        if (!rc) rc = check_saved("LinearBackward", "weight", w, 2, wshape);
        if (!rc) rc = prep_operand(&wc, w, true, true);
        if (!rc) rc = rm_new_output(&dx, c->ndx, c->sx, dt, dev);
        if (rc) goto out;
        if (rm_ptr(dx) && rm_ptr(g) && rm_ptr(wc)) {
            mview G, W, D;
            view_of(&G, g, row, true, nb);
            view_of(&W, wc, true, true, nb);
            view_of(&D, dx, row, true, nb);
            mm_exec(dt, nb, bshape, &G, &W, &D, remat_numel(dx), false);
        }
    }
    if (gbias) {
        rc = rm_new_output(&db, 1, &c->out_f, dt, dev);
        if (rc) goto out;
        if (rm_ptr(db) && rm_ptr(g)) {
            int64_t rows = c->out_f ? remat_numel(g) / c->out_f : 0;
            int64_t ns = colsum_scratch(rows, c->out_f);
            void *part = ns ? malloc((size_t)ns * remat_dtype_size(dt)) : NULL;
            if (ns && !part) {
                rc = rm_err(REMAT_ENOMEM, "LinearBackward: out of memory");
                goto out;
            }
            if (dt == REMAT_F32) colsum_float(rm_ptr(g), rm_ptr(db), rows, c->out_f, part);
            else colsum_double(rm_ptr(g), rm_ptr(db), rows, c->out_f, part);
            free(part);
        }
    }
    gin[0] = dx;
    gin[1] = dw;
    gin[2] = db;
    dx = dw = db = NULL;
out:
    remat_release(x);
    remat_release(w);
    remat_release(xc);
    remat_release(wc);
    remat_release(g);
    remat_release(dx);
    remat_release(dw);
    remat_release(db);
    return rc;
}

static int linear_impl(remat_tensor **out, remat_tensor *x, remat_tensor *weight,
                       remat_tensor *bias) {
    static const char *call = "remat_linear";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_float(call, "x", x);
    if (!rc) rc = rm_check_float(call, "weight", weight);
    if (!rc && bias) rc = rm_check_float(call, "bias", bias);
    if (!rc) rc = rm_check_same_dtype(call, x, weight);
    if (!rc) rc = rm_check_same_device(call, x, weight);
    if (!rc && bias) rc = rm_check_same_dtype(call, x, bias);
    if (!rc && bias) rc = rm_check_same_device(call, x, bias);
    if (rc) return rc;
    char b1[200], b2[200];
    if (x->ndim == 0)
        return rm_err(REMAT_ESHAPE, "%s: x must have at least 1 dim (..., in_features), got %s",
                      call, rm_tensor_str(x, b1, sizeof b1));
    if (weight->ndim != 2)
        return rm_err(REMAT_ESHAPE, "%s: weight must be 2-D (out_features, in_features), got %s",
                      call, rm_tensor_str(weight, b1, sizeof b1));
    int64_t in_f = weight->shape[1], out_f = weight->shape[0];
    if (x->shape[x->ndim - 1] != in_f)
        return rm_err(REMAT_ESHAPE,
                      "%s: cannot multiply x %s by weight %s transposed (x has %lld features, "
                      "weight expects in_features %lld)",
                      call, rm_shape_str(x->ndim, x->shape, b1, sizeof b1),
                      rm_shape_str(2, weight->shape, b2, sizeof b2),
                      (long long)x->shape[x->ndim - 1], (long long)in_f);
    if (bias && (bias->ndim != 1 || bias->shape[0] != out_f))
        return rm_err(REMAT_ESHAPE, "%s: bias %s does not match weight %s (expected [%lld])", call,
                      rm_shape_str(bias->ndim, bias->shape, b1, sizeof b1),
                      rm_shape_str(2, weight->shape, b2, sizeof b2), (long long)out_f);

    bool row = x->ndim > 1;
    int nb = x->ndim > 2 ? x->ndim - 2 : 0;
    int64_t oshape[REMAT_MAX_DIMS];
    memcpy(oshape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    oshape[x->ndim - 1] = out_f;

    /* The node and its saves come first (rm_save_before_kernel in internal.h). */
    remat_tensor *y = NULL, *xc = NULL, *wc = NULL, *bc = NULL, *ins[3] = {x, weight, bias};
    remat_node *node = NULL;
    if (rm_needs_grad(3, ins)) {
        rc = rm_node_new(&node, "LinearBackward", linear_backward, 3, ins, 1, 2);
        if (rc) return rm_err_prefix(rc, call);
        lin_ctx *c = calloc(1, sizeof *c);
        if (!c) {
            rc = rm_err(REMAT_ENOMEM, "out of memory");
            goto fail;
        }
        c->ndx = x->ndim;
        memcpy(c->sx, x->shape, sizeof c->sx);
        c->out_f = out_f;
        c->in_f = in_f;
        rm_node_set_ctx(node, c, NULL);
        /* x is needed only for dW, weight only for dx; bias for nothing */
        if (node->next[1].node) rc = rm_op_save(node, 0, x);
        if (!rc && node->next[0].node) rc = rm_op_save(node, 1, weight);
        if (rc) goto fail;
    }

    rc = rm_new_output(&y, x->ndim, oshape, x->dtype, x->storage->device);
    if (rc) goto fail;
    if (rm_ptr(y) && rm_ptr(x) && rm_ptr(weight) && (!bias || rm_ptr(bias))) {
        rc = prep_operand(&xc, x, row, true);
        if (!rc) rc = prep_operand(&wc, weight, true, true);
        if (!rc && bias) rc = rm_contig(&bc, bias);
        if (rc) goto fail;
        size_t es = remat_dtype_size(x->dtype);
        if (bc) fill_rows(rm_ptr(y), rm_ptr(bc), out_f ? remat_numel(y) / out_f : 0, out_f, es);
        mview X, W, Y;
        view_of(&X, xc, row, true, nb);
        view_of(&W, wc, true, true, nb);
        view_of(&Y, y, row, true, nb);
        mview Wt = view_t(&W);
        mm_exec(x->dtype, nb, x->shape, &X, &Wt, &Y, remat_numel(y), bc != NULL);
        remat_release_p(&xc);
        remat_release_p(&wc);
        remat_release_p(&bc);
    }
    if (node) {
        rm_node_set_output(node, 0, y);
        rm_node_release(node);
    }
    return rm_hand_out(out, y);
fail:
    rm_node_release(node);
    remat_release(xc);
    remat_release(wc);
    remat_release(bc);
    remat_release(y);
    return rm_err_prefix(rc, call);
}

/* ---- public entries: interception brackets (src/dispatch/intercept.c) ---------------------- */
int remat_matmul(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    remat_tensor *in[2] = {a, b};
    RM_OP_RUN1("remat_matmul", out, 2, in, NULL, matmul_impl(out, a, b));
}

int remat_linear(remat_tensor **out, remat_tensor *x, remat_tensor *weight, remat_tensor *bias) {
    remat_tensor *in[3] = {x, weight, bias};
    RM_OP_RUN1("remat_linear", out, 3, in, NULL, linear_impl(out, x, weight, bias));
}
