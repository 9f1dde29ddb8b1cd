/* src/backends/cuda/gemm.c — the matmul family on the GPU: RM_K_MATMUL on
 * cuBLAS, RM_K_COLSUM on gemm.cu's deterministic column sums.
 *
 * The operands are batches of strided matrices as on cpu (src/backends/
 * mm_view.h: the same views, layouts and copies of operands no GEMM can
 * take). cuBLAS is column-major and remat row-major: a row-major matrix
 * with row stride ld is the column-major transpose with leading dimension
 * ld, so C = op(A)·op(B) (row-major, m×n) is computed as the column-major
 * Cᵀ = op(B)ᵀ·op(A)ᵀ (n×m): B first, A second, each transposed for cuBLAS
 * exactly when it is not transposed in remat's view. The plans, in order:
 *   - fold-M / fold-K as on cpu (one GEMM over batch·m rows, or summing
 *     over batch·k);
 *   - one strided-batched GEMM when every operand's batch entries lie one
 *     fixed stride apart (0 for a broadcast operand) and C is not broadcast;
 *   - otherwise one GEMM per batch entry on the device's stream, where C is
 *     broadcast accumulating into it (beta = 1) after zeroing it.
 * f32 GEMMs use TF32 tensor cores only when remat_cuda_set_allow_tf32 says
 * so (the handle's math mode, runtime.c). bf16 GEMMs (autocast: every
 * operand bf16 on cuda, the driver casts linear's weight and bias) run
 * cublasGemmEx on bf16 A, B, C with f32 compute, one rounding of the
 * result, split-K sums kept in f32 (the math mode); a bf16 linear's bias goes into
 * cuBLASLt's epilogue where the product is one GEMM (cublaslt.h), else it is broadcast into
 * C first and the GEMM adds to it (beta = 1). The 64-bit cuBLAS API takes every size
 * without narrowing. */
#include "gemm.h"
#include "backends/mm_view.h"
#include "cublas_api.h"
#include "cublaslt.h"
#include "cuda_backend.h"

typedef struct gemm_call {
    cublasHandle_t h;
    remat_dtype dt;
    bool ta, tb;
    int64_t m, n, k;
    int64_t lda, ldb, ldc;
    int64_t sa, sb, sc; /* batch strides (elements) for a strided-batched call */
    int64_t batch;
    double beta;
} gemm_call;

/* cuBLAS's GEMM of precision x (s: f32, d: f64; cublas_api.h's table) for g: one, or `batch` strided; `one`
 * and `beta` are the scalars of that precision. */
#define RM_CUBLAS_GEMM(x, one, beta)                                                               \
    (g->batch == 1                                                                                 \
         ? api->x##gemm(g->h, ob, oa, g->n, g->m, g->k, &(one), B, g->ldb, A, g->lda, &(beta), C,  \
                        g->ldc)                                                                    \
         : api->x##gemm_strided(g->h, ob, oa, g->n, g->m, g->k, &(one), B, g->ldb, g->sb, A,       \
                                g->lda, g->sa, &(beta), C, g->ldc, g->sc, g->batch))

/* C = op(A)·op(B) + beta·C, `batch` times (strides sa, sb, sc). */
static remat_status gemm_run(const gemm_call *g, const void *A, const void *B, void *C) {
    /* B's cuBLAS op: transposed unless B is stored transposed (see the top) */
    cublasOperation_t ob = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t oa = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st;
    const rm_cublas_api *api = rm_cublas_api_get("matmul"); /* opened with the handle */
    if (!api) return rm_last_status();
    if (g->dt == REMAT_F32) {
        const float one = 1.0f, beta = (float)g->beta;
        st = RM_CUBLAS_GEMM(s, one, beta);
    } else if (g->dt == REMAT_BF16) {
        /* bf16 A, B, C; f32 scalars, products summed in f32 and the result
         * (with beta·C, the bias or the accumulated batch entries, read as
         * f32) rounded once to bf16, as the cpu's bf16 GEMM */
        const float one = 1.0f, beta = (float)g->beta;
        const cudaDataType bf = CUDA_R_16BF;
        st = g->batch == 1
                 ? api->gemm_ex(g->h, ob, oa, g->n, g->m, g->k, &one, B, bf, g->ldb, A, bf, g->lda,
                                &beta, C, bf, g->ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
                 : api->gemm_strided_ex(g->h, ob, oa, g->n, g->m, g->k, &one, B, bf, g->ldb, g->sb,
                                        A, bf, g->lda, g->sa, &beta, C, bf, g->ldc, g->sc, g->batch,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    } else {
        const double one = 1.0, beta = g->beta;
        st = RM_CUBLAS_GEMM(d, one, beta);
    }
    return rm_cublas_check(st, "matmul (cuBLAS GEMM)");
}
#undef RM_CUBLAS_GEMM

/* The one stride s (elements) between consecutive batch entries of an
 * operand whose entries lie evenly spaced in row-major batch order (0 when
 * it is broadcast over the whole batch); false when there is none. */
static bool uniform_stride(int nb, const int64_t *bshape, const int64_t *bstr, int64_t *s) {
    if (batch_broadcast_all(nb, bshape, bstr)) {
        *s = 0;
        return true;
    }
    for (int d = nb - 1; d >= 0; d--) {
        if (bshape[d] == 1) continue;
        *s = bstr[d];
        return *s > 0 && batch_chains(nb, bshape, bstr, *s);
    }
    *s = 0;
    return true;
}

static size_t es_of(remat_dtype dt) { return remat_dtype_size(dt); }

/* The bias of a linear: bias[j] added to every row of C (contiguous, n columns). */
typedef struct mm_bias {
    const void *p; /* NULL: none */
    int64_t n;
    int index; /* the device (current) */
} mm_bias;

/* C[b] = A[b]·B[b] (+ the bias) for the batch (mm_exec of the cpu kernel, on cuBLAS). */
static remat_status mm_exec(cublasHandle_t h, cudaStream_t s, remat_dtype dt, int nb,
                            const int64_t *bshape, const mview *A, const mview *B, const mview *C,
                            int64_t c_numel, const mm_bias *bias) {
    bool add_to_c = false;
    gemm_call g = {.h = h, .dt = dt, .batch = 1, .beta = 0.0};
    bool tc;
    mv_layout(A, &g.ta, &g.lda);
    mv_layout(B, &g.tb, &g.ldb);
    mv_layout(C, &tc, &g.ldc);
    g.m = A->rows;
    g.k = A->cols;
    g.n = B->cols;
    int64_t nbatch = rm_shape_numel(nb, bshape);
    size_t es = es_of(dt);
    if (g.m == 0 || g.n == 0) return REMAT_OK;
    const bool fold_m = !g.ta && !tc && batch_broadcast_all(nb, bshape, B->bstr) &&
                        batch_chains(nb, bshape, A->bstr, g.m * g.lda) &&
                        batch_chains(nb, bshape, C->bstr, g.m * g.ldc);
    if (bias->p) {
        /* bf16: the bias in cuBLASLt's epilogue (cublaslt.h) when the product is one GEMM;
         * else (f32, f64, or where cuBLASLt declines) broadcast into C first, the GEMM adding
         * to it */
        if (dt == REMAT_BF16 && fold_m && g.k > 0 && g.ldc == g.n &&
            rm_cublaslt_bias_gemm(bias->index, s, g.tb, g.ta, g.n, g.m * nbatch, g.k, B->p, g.ldb,
                                  A->p, g.lda, C->p, g.ldc, bias->p))
            return REMAT_OK;
        int rc = rm_cuda_check(
            rm_cuda_fill_rows(C->p, bias->p, bias->n ? c_numel / bias->n : 0, bias->n, (int)es, s),
            "linear (bias)");
        if (rc) return rc;
        add_to_c = true;
        g.beta = 1.0;
    }
    bool acc = false;
    for (int d = 0; d < nb; d++) acc |= bshape[d] != 1 && C->bstr[d] == 0;
    if ((g.k == 0 || acc) && !add_to_c) { /* the sum starts from zero */
        int rc = rm_cuda_check(cudaMemsetAsync(C->p, 0, (size_t)c_numel * es, s), "matmul");
        if (rc) return rc;
        g.beta = 1.0;
    }
    if (g.k == 0) return REMAT_OK;
    /* fold-M: one GEMM over batch·m rows */
    if (fold_m) {
        g.m *= nbatch;
        return gemm_run(&g, A->p, B->p, C->p);
    }
    /* fold-K: one GEMM summing over batch·k */
    if (g.ta && !g.tb && !tc && batch_broadcast_all(nb, bshape, C->bstr) &&
        batch_chains(nb, bshape, A->bstr, g.k * g.lda) &&
        batch_chains(nb, bshape, B->bstr, g.k * g.ldb)) {
        g.k *= nbatch;
        return gemm_run(&g, A->p, B->p, C->p);
    }
    /* strided batched */
    if (!acc && uniform_stride(nb, bshape, A->bstr, &g.sa) &&
        uniform_stride(nb, bshape, B->bstr, &g.sb) && uniform_stride(nb, bshape, C->bstr, &g.sc)) {
        g.batch = nbatch;
        return gemm_run(&g, A->p, B->p, C->p);
    }
    /* one GEMM per batch entry, in order on the stream */
    rm_iter it;
    rm_iter_init(&it, nb, bshape, 3);
    for (int d = 0; d < nb; d++) {
        it.strides[0][d] = A->bstr[d];
        it.strides[1][d] = B->bstr[d];
        it.strides[2][d] = C->bstr[d];
    }
    for (int64_t i = 0; i < nbatch; i++) {
        int rc = gemm_run(&g, A->p + (size_t)it.off[0] * es, B->p + (size_t)it.off[1] * es,
                          C->p + (size_t)it.off[2] * es);
        if (rc) return rc;
        rm_iter_next(&it);
    }
    return REMAT_OK;
}

static remat_status cuda_matmul(const rm_kargs *k) {
    const rm_mm_params *p = k->params;
    remat_tensor *y = k->out[0], *bias = k->in[2];
    remat_tensor *ac = NULL, *bc = NULL, *biasc = NULL;
    int nb;
    int64_t bshape[REMAT_MAX_DIMS];
    remat_tensor *ops[3] = {k->in[0], k->in[1], y};
    const unsigned char flags[3] = {p->a, p->b, p->c};
    batch_shape(ops, flags, &nb, bshape);
    for (int i = 0; i < 3; i++) /* the op checks dtypes; a bf16 GEMM takes bf16 only */
        if (k->in[i] && k->in[i]->dtype != y->dtype)
            return rm_err(REMAT_EDTYPE,
                          "cuda matmul: operand %d is %s, the product %s (the cuda GEMMs take "
                          "one dtype)",
                          i, remat_dtype_name(k->in[i]->dtype), remat_dtype_name(y->dtype));
    rm_cuda_ctx c;
    int rc = rm_cuda_begin(&c, "matmul", y);
    if (!rc) rc = prep_operand(&ac, k->in[0], p->a & RM_MM_ROW, p->a & RM_MM_COL);
    if (!rc) rc = prep_operand(&bc, k->in[1], p->b & RM_MM_ROW, p->b & RM_MM_COL);
    if (!rc && bias) rc = rm_contig(&biasc, bias);
    cublasHandle_t h = rc ? NULL : rm_cuda_cublas(c.index);
    if (!rc && !h) rc = rm_last_status() ? rm_last_status() : REMAT_EDEVICE;
    mm_bias mb = {
        .p = biasc ? rm_ptr(biasc) : NULL, .n = biasc ? biasc->shape[0] : 0, .index = c.index};
    if (!rc) {
        mview A = operand_view(ac, p->a, nb), B = operand_view(bc, p->b, nb);
        mview C = operand_view(y, p->c, nb);
        rc = mm_exec(h, c.stream, y->dtype, nb, bshape, &A, &B, &C, remat_numel(y), &mb);
    }
    rm_cuda_end(&c);
    rm_release(ac);
    rm_release(bc);
    rm_release(biasc);
    return rc;
}

static remat_status cuda_colsum(const rm_kargs *k) {
    remat_tensor *g = k->in[0], *db = k->out[0];
    int64_t n = db->shape[0];
    int64_t rows = n ? remat_numel(g) / n : 0;
    int64_t chunk = rm_cuda_colsum_chunk(rows), nch = (rows + chunk - 1) / chunk;
    rm_cuda_ctx c;
    int rc = rm_cuda_begin(&c, "column sum", g);
    double *part = NULL;
    if (!rc && nch * n > 0) {
        part = rm_cuda_scratch(c.index, (size_t)(nch * n) * sizeof(double));
        if (!part) rc = rm_last_status() ? rm_last_status() : REMAT_ENOMEM;
    }
    if (!rc && db->dtype != g->dtype)
        rc = rm_err(REMAT_EDTYPE, "cuda column sum: a %s sum of %s rows",
                    remat_dtype_name(db->dtype), remat_dtype_name(g->dtype));
    if (!rc) {
        cudaError_t e = g->dtype == REMAT_F32
                            ? rm_cuda_colsum_f32(rm_ptr(g), rm_ptr(db), rows, n, part, c.stream)
                        : g->dtype == REMAT_BF16
                            ? rm_cuda_colsum_bf16(rm_ptr(g), rm_ptr(db), rows, n, part, c.stream)
                            : rm_cuda_colsum_f64(rm_ptr(g), rm_ptr(db), rows, n, part, c.stream);
        rc = rm_cuda_check(e, "column sum");
    }
    rm_cuda_scratch_free(c.index, part); /* stream-ordered: reusable by later work */
    rm_cuda_end(&c);
    return rc;
}

void rm_cuda_register_matmul(int device_type) {
    rm_kernel_register(RM_K_MATMUL, device_type, REMAT_F32, cuda_matmul);
    rm_kernel_register(RM_K_MATMUL, device_type, REMAT_F64, cuda_matmul);
    rm_kernel_register(RM_K_MATMUL, device_type, REMAT_BF16, cuda_matmul);
    rm_kernel_register(RM_K_COLSUM, device_type, REMAT_F32, cuda_colsum);
    rm_kernel_register(RM_K_COLSUM, device_type, REMAT_F64, cuda_colsum);
    rm_kernel_register(RM_K_COLSUM, device_type, REMAT_BF16, cuda_colsum);
}
