/* src/backends/cpu/matmul.c — cpu kernels of matmul and linear
 * (src/ops/matmul.c): the batched GEMM of strided matrices (RM_K_MATMUL)
 * on the GEMM layer of gemm.c, and linear's bias-gradient column sums
 * (RM_K_COLSUM).
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

#include "../mm_view.h"
#include "bf16.h"
#include "cpu.h"
#include "gemm.h"

#ifdef _OPENMP
#include <omp.h>
#endif

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

/* A bias row added inside a bf16 GEMM (rm_bgemm_bias); p NULL: none. */
typedef struct gemm_bias {
    const void *p;
    bool f32;
} gemm_bias;

/* dt: A's and B's dtype; dtc: C's (the same, or f32 for bf16 operands). bias:
 * bf16 A, B and C only, with beta 0. */
static void gemm_dt(remat_dtype dt, remat_dtype dtc, bool ta, bool tb, int64_t m, int64_t n,
                    int64_t k, const char *A, int64_t lda, const char *B, int64_t ldb, double beta,
                    char *C, int64_t ldc, gemm_bias bias) {
    if (bias.p)
        rm_bgemm_bias(ta, tb, m, n, k, (const uint16_t *)A, lda, (const uint16_t *)B, ldb, bias.p,
                      bias.f32, (uint16_t *)C, ldc);
    else if (dt == REMAT_BF16 && dtc == REMAT_F32)
        rm_bgemm_f32(ta, tb, m, n, k, (const uint16_t *)A, lda, (const uint16_t *)B, ldb,
                     (float)beta, (float *)C, ldc);
    else if (dt == REMAT_BF16)
        rm_bgemm(ta, tb, m, n, k, (const uint16_t *)A, lda, (const uint16_t *)B, ldb, (float)beta,
                 (uint16_t *)C, ldc);
    else if (dt == REMAT_F32)
        rm_sgemm(ta, tb, m, n, k, 1.0f, (const float *)A, lda, (const float *)B, ldb, (float)beta,
                 (float *)C, ldc);
    else
        rm_dgemm(ta, tb, m, n, k, 1.0, (const double *)A, lda, (const double *)B, ldb, beta,
                 (double *)C, ldc);
}

/* True when C is one matrix for several batch entries (stride 0 along a batch
 * dim): the GEMMs then accumulate into it. */
static bool c_shared(int nb, const int64_t *bshape, const mview *C) {
    bool acc = false;
    for (int d = 0; d < nb; d++) acc |= bshape[d] != 1 && C->bstr[d] == 0;
    return acc;
}

/* C[b] = A[b] · B[b] for every index b of the batch shape (nb dims), where
 * A is m×k, B k×n and C m×n (row-major, C->cs == 1, made by us). C may be
 * broadcast over batch dims (stride 0): products then accumulate into it.
 * add_to_c: C already holds a term to add (linear's f32/f64 bias). bias: a
 * row every GEMM adds inside itself (bf16 operands and C, C not shared).
 * c_numel: number of elements of the tensor behind C (zeroed before
 * accumulating). All views must pass mv_layout. */
static void mm_exec(remat_dtype dt, remat_dtype dtc, int nb, const int64_t *bshape, const mview *A,
                    const mview *B, const mview *C, int64_t c_numel, bool add_to_c,
                    gemm_bias bias) {
    bool ta, tb, tc;
    int64_t lda, ldb, ldc;
    mv_layout(A, &ta, &lda);
    mv_layout(B, &tb, &ldb);
    mv_layout(C, &tc, &ldc);
    int64_t m = A->rows, k = A->cols, n = B->cols;
    int64_t nbatch = rm_shape_numel(nb, bshape);
    size_t es = remat_dtype_size(dt), esc = remat_dtype_size(dtc);
    double beta = add_to_c ? 1.0 : 0.0;
    if (m == 0 || n == 0) return;

    /* fold-M: one GEMM over batch·m rows */
    if (!ta && !tc && batch_broadcast_all(nb, bshape, B->bstr) &&
        batch_chains(nb, bshape, A->bstr, m * lda) && batch_chains(nb, bshape, C->bstr, m * ldc)) {
        gemm_dt(dt, dtc, ta, tb, nbatch * m, n, k, A->p, lda, B->p, ldb, beta, C->p, ldc, bias);
        return;
    }
    /* fold-K: one GEMM summing over batch·k */
    if (ta && !tb && !tc && batch_broadcast_all(nb, bshape, C->bstr) &&
        batch_chains(nb, bshape, A->bstr, k * lda) && batch_chains(nb, bshape, B->bstr, k * ldb)) {
        gemm_dt(dt, dtc, ta, tb, m, n, nbatch * k, A->p, lda, B->p, ldb, beta, C->p, ldc, bias);
        return;
    }
    /* one GEMM per batch entry; accumulate where C is broadcast */
    bool acc = c_shared(nb, bshape, C);
    if (acc && !add_to_c) {
        memset(C->p, 0, (size_t)c_numel * esc);
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
            gemm_dt(dt, dtc, ta, tb, m, n, k, A->p + (size_t)it.off[0] * es, lda,
                    B->p + (size_t)it.off[1] * es, ldb, beta, C->p + (size_t)it.off[2] * esc, ldc,
                    bias);
        }
    } else {
        rm_iter it = base;
        for (int64_t i = 0; i < nbatch; i++) {
            gemm_dt(dt, dtc, ta, tb, m, n, k, A->p + (size_t)it.off[0] * es, lda,
                    B->p + (size_t)it.off[1] * es, ldb, beta, C->p + (size_t)it.off[2] * esc, ldc,
                    bias);
            rm_iter_next(&it);
        }
    }
}

/* ---- RM_K_MATMUL ---------------------------------------------------------------------------- */

/* y (rows, n) = bias (n) in every row, before the GEMM adds x·W^T (beta = 1):
 * f32 and f64 (bf16 linear passes its bias to the GEMM instead, which saves
 * this pass). A write pass over y: with in_features = 128 it is ~10 % of the
 * GEMM's time on one thread, so it is split over the team like the GEMM after it. */
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
/* elements of scratch colsum needs (0: none) */
static int64_t colsum_scratch(int64_t rows, int64_t n) {
    if (n < 64 || rows == 0) return 0;
    int64_t rb = rm_cpu_chunk_rows(rows, n);
    return (rows + rb - 1) / rb * n;
}
#define COLSUM(T)                                                                                  \
    /* db = the column sums of src (rows, n) in double, by blocks of 64 columns */                 \
    static void colsum_blocks_##T(const T *restrict src, int64_t rows, int64_t n,                  \
                                  T *restrict db) {                                                \
        int64_t nblk = (n + 63) / 64;                                                              \
        _Pragma("omp parallel for if (rows * n > RM_OMP_MIN)") for (int64_t bi = 0; bi < nblk;     \
                                                                    bi++) {                        \
            int64_t j0 = bi * 64, nc = n - j0 < 64 ? n - j0 : 64;                                  \
            double acc[64] = {0};                                                                  \
            for (int64_t r = 0; r < rows; r++) {                                                   \
                const T *restrict sr = src + r * n + j0;                                           \
                for (int64_t j = 0; j < nc; j++) acc[j] += sr[j];                                  \
            }                                                                                      \
            for (int64_t j = 0; j < nc; j++) db[j0 + j] = (T)acc[j];                               \
        }                                                                                          \
    }                                                                                              \
    static void colsum_##T(const T *restrict g, T *restrict db, int64_t rows, int64_t n,           \
                           T *restrict part) {                                                     \
        if (!part) { /* narrow: column blocks down the rows */                                     \
            colsum_blocks_##T(g, rows, n, db);                                                     \
            return;                                                                                \
        }                                                                                          \
        int64_t rb = rm_cpu_chunk_rows(rows, n), nch = (rows + rb - 1) / rb;                       \
        _Pragma("omp parallel for if (rows * n > RM_OMP_MIN)") for (int64_t k = 0; k < nch; k++) { \
            T *restrict p = part + k * n;                                                          \
            int64_t r1 = (k + 1) * rb < rows ? (k + 1) * rb : rows;                                \
            memcpy(p, g + k * rb * n, sizeof(T) * (size_t)n);                                      \
            for (int64_t r = k * rb + 1; r < r1; r++) {                                            \
                const T *restrict gr = g + r * n;                                                  \
                for (int64_t j = 0; j < n; j++) p[j] += gr[j];                                     \
            }                                                                                      \
        }                                                                                          \
        colsum_blocks_##T(part, nch, n, db);                                                       \
    }
COLSUM(float)
COLSUM(double)

/* bf16 g (autocast's bias gradient): colsum_float's sums in its order, each
 * row widened as it streams into the f32 partials, then db rounded once —
 * bitwise the f32 kernel on a widened copy of g, rounded (what
 * rm_cpu_bf16_via_f32 gives), without that copy (an f32 twin of g per
 * linear in the backward). part: the f32 partials, then n more for db. */
static void colsum_bf16(const uint16_t *restrict g, uint16_t *restrict db, int64_t rows, int64_t n,
                        float *restrict part) {
    int64_t rb = rm_cpu_chunk_rows(rows, n), nch = (rows + rb - 1) / rb;
#pragma omp parallel for if (rows * n > RM_OMP_MIN)
    for (int64_t k = 0; k < nch; k++) {
        float *restrict p = part + k * n;
        int64_t r1 = (k + 1) * rb < rows ? (k + 1) * rb : rows;
        rm_bf16_widen_run(g + k * rb * n, p, n);
        for (int64_t r = k * rb + 1; r < r1; r++) rm_bf16_add_run(g + r * n, p, n);
    }
    float *dbf = part + nch * n;
    colsum_blocks_float(part, nch, n, dbf);
    rm_bf16_round_run(dbf, db, n);
}

/* A contiguous bf16 copy of f32 t (rounded to nearest even), from the allocator. */
static int rounded_copy(remat_tensor **out, remat_tensor *t) {
    remat_tensor *c = NULL;
    int rc = rm_contig(&c, t);
    if (!rc) rc = rm_new_output(out, c->ndim, c->shape, REMAT_BF16, c->storage->device);
    if (!rc) rm_cpu_f32_to_bf16(rm_ptr(c), rm_ptr(*out), remat_numel(c));
    remat_release(c);
    return rc;
}

/* Operands run in in[0]'s dtype. Under autocast linear hands over its f32
 * weight uncast (bf16 x, src/ops/matmul.c): it is rounded into a scratch
 * copy for the GEMM; and its gradient (bf16 g, x) is an f32 C. */
remat_status rm_cpu_matmul(const rm_kargs *k) {
    const rm_mm_params *p = k->params;
    remat_tensor *y = k->out[0], *bias = k->in[2];
    remat_tensor *ac = NULL, *bc = NULL, *biasc = NULL, *br = NULL;
    int nb;
    int64_t bshape[REMAT_MAX_DIMS];
    remat_tensor *ops[3] = {k->in[0], k->in[1], y};
    const unsigned char flags[3] = {p->a, p->b, p->c};
    batch_shape(ops, flags, &nb, bshape);
    remat_tensor *b = k->in[1];
    int rc = REMAT_OK;
    if (b->dtype != k->in[0]->dtype) {
        if (k->in[0]->dtype != REMAT_BF16 || b->dtype != REMAT_F32)
            return rm_err(REMAT_EDTYPE, "matmul kernel: operands of dtypes %s and %s",
                          remat_dtype_name(k->in[0]->dtype), remat_dtype_name(b->dtype));
        rc = rounded_copy(&br, b);
        b = br;
    }
    if (!rc) rc = prep_operand(&ac, k->in[0], p->a & RM_MM_ROW, p->a & RM_MM_COL);
    if (!rc) rc = prep_operand(&bc, b, p->b & RM_MM_ROW, p->b & RM_MM_COL);
    if (!rc && bias) rc = rm_contig(&biasc, bias);
    if (rc) goto out;
    mview A = operand_view(ac, p->a, nb), B = operand_view(bc, p->b, nb);
    mview C = operand_view(y, p->c, nb);
    /* bf16 (autocast): the bias goes into the GEMM itself; otherwise it is
     * written into y's rows first and the GEMM adds to it (beta = 1) */
    gemm_bias gb = {NULL, false};
    if (biasc && ac->dtype == REMAT_BF16 && y->dtype == REMAT_BF16 && !c_shared(nb, bshape, &C))
        gb = (gemm_bias){rm_ptr(biasc), biasc->dtype == REMAT_F32};
    else if (biasc) {
        int64_t n = biasc->shape[0];
        fill_rows(rm_ptr(y), rm_ptr(biasc), n ? remat_numel(y) / n : 0, n,
                  remat_dtype_size(y->dtype));
    }
    mm_exec(ac->dtype, y->dtype, nb, bshape, &A, &B, &C, remat_numel(y), biasc && !gb.p, gb);
out:
    remat_release(br);
    remat_release(ac);
    remat_release(bc);
    remat_release(biasc);
    return rc;
}

/* ---- RM_K_COLSUM ----------------------------------------------------------------------------- */

remat_status rm_cpu_colsum(const rm_kargs *k) {
    remat_tensor *g = k->in[0], *db = k->out[0];
    int64_t n = db->shape[0];
    int64_t rows = n ? remat_numel(g) / n : 0;
    int64_t ns = colsum_scratch(rows, n);
    bool bf16 = g->dtype == REMAT_BF16;
    if (bf16 && !ns) return rm_cpu_bf16_via_f32[RM_K_COLSUM](k); /* narrow: rare */
    void *part = ns ? malloc((size_t)(ns + (bf16 ? n : 0)) *
                             (bf16 ? sizeof(float) : remat_dtype_size(g->dtype)))
                    : NULL;
    if (ns && !part) return rm_err(REMAT_ENOMEM, "out of memory");
    if (bf16) colsum_bf16(rm_ptr(g), rm_ptr(db), rows, n, part);
    else if (g->dtype == REMAT_F32) colsum_float(rm_ptr(g), rm_ptr(db), rows, n, part);
    else colsum_double(rm_ptr(g), rm_ptr(db), rows, n, part);
    free(part);
    return REMAT_OK;
}
