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

#include "backends/mm_view.h"
#include "bf16.h"
#include "cpu.h"
#include "gemm.h"
#include "workspace.h"

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
static int thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
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

/* ---- bf16 GEMMs of f32 operands rounded panel by panel ------------------------------------ */

/* The bf16 scratch one RM_K_MATMUL call may hold for the panels of its f32
 * operands that RM_MM_PANEL marks (split evenly when both are): linear's
 * backward under autocast, whose kept f32 weight (and f32 output gradient)
 * would otherwise be rounded into whole copies at the backward's peak. */
#define RM_PANEL_BYTES ((int64_t)512 * 1024)
/* B (the weight) is split into column panels only up to this K: oneDNN's
 * bf16 matmul sums an element's K products in an order that does not depend
 * on N there (test_ops_matmul's linear_bf16_panels_match_whole_rounded_weight),
 * so the panels give the whole copy's bits; at K 448-768 and 1152-1536 its K
 * blocking depends on N and a few elements in 10^4 move by the last bit. Above
 * it the weight is rounded whole (K 1152, 1536: GPT's qkv and fc, whose
 * panels would also re-read their large A once per panel, +10-15 % CPU). */
#define RM_PANEL_MAX_K 384

/* How one call's GEMMs run: in dt (bf16 when any operand or C is bf16),
 * A's and B's own dtypes da, db (an f32 one in a bf16 GEMM is rounded panel
 * by panel into scratch: cap_a elements per thread for A's panels, cap_b for
 * B's one panel at a time, which the threads share), C's dtype dc. nt: the
 * threads the panels are spread over (gemm_panels_team), 1: none. */
typedef struct mm_kind {
    remat_dtype dt, da, db, dc;
    uint16_t *scratch;
    int64_t cap_a, cap_b;
    int nt;
    bool wide; /* a bf16 GEMM through f32 (!rm_bgemm_native()): rm_bgemm_wide takes
                * A and B in their own dtypes, no rounded copies nor panels */
} mm_kind;

/* Rows or columns per panel: `all` cut into as few panels as `cap`
 * elements hold with `k` each, of equal widths rounded up to a multiple of
 * 32 (no narrow last panel: a GEMM a few columns wide is slow). */
static int64_t panel_width(int64_t cap, int64_t k, int64_t all) {
    int64_t most = k > 0 ? cap / k : all;
    most = most >= 32 ? most / 32 * 32 : 32;
    if (most >= all) return all;
    int64_t np = (all + most - 1) / most, w = (all + np - 1) / np;
    w = (w + 31) / 32 * 32;
    return w < most ? w : most;
}

/* A panel of an f32 operand as stored: rows of cols floats, row stride ld;
 * rounded, it is `rows` rows of `cols` bf16 (row stride cols) and keeps the
 * operand's transpose flag. */
typedef struct f32_panel {
    const float *src;
    int64_t rows, cols, ld;
} f32_panel;

/* op(A)'s rows i0..i0+mm (A f32, stored (m, k), or (k, m) when ta). */
static f32_panel a_panel(bool ta, const char *A, int64_t lda, int64_t i0, int64_t mm, int64_t k) {
    const float *a = (const float *)A;
    return ta ? (f32_panel){a + i0, k, mm, lda} : (f32_panel){a + i0 * lda, mm, k, lda};
}

/* op(B)'s columns j0..j0+nn (B f32, stored (k, n), or (n, k) when tb). */
static f32_panel b_panel(bool tb, const char *B, int64_t ldb, int64_t j0, int64_t nn, int64_t k) {
    const float *b = (const float *)B;
    return tb ? (f32_panel){b + j0 * ldb, nn, k, ldb} : (f32_panel){b + j0, k, nn, ldb};
}

/* Row r of p rounded into s: rm_cpu_f32_to_bf16's rounding. */
static void round_panel_row(f32_panel p, int64_t r, uint16_t *s) {
    rm_bf16_round_run(p.src + r * p.ld, s + r * p.cols, p.cols);
}

/* p rounded into s over the threads (a region of its own); *ld: the
 * rounded panel's row stride. */
static const char *round_panel(f32_panel p, uint16_t *s, int64_t *ld) {
#pragma omp parallel for schedule(static) if (p.rows * p.cols > RM_OMP_MIN)
    for (int64_t r = 0; r < p.rows; r++) round_panel_row(p, r, s);
    *ld = p.cols;
    return (const char *)s;
}

/* C = op(A) · op(B) (+ bias or beta·C) as gemm_dt, with an f32 A or B (or
 * both) rounded to bf16 panel by panel: A over its rows (M), B over its
 * columns (N), so every element of C still gets its whole K sum from one
 * bf16 GEMM of the same rounded operands. B's panels are the outer loop
 * (each rounded once); A is rounded once when it fits its scratch whole,
 * else again for every B panel. oneDNN's result for an element does not
 * depend on M, nor on N up to K = RM_PANEL_MAX_K: the same bits as the GEMM
 * of whole rounded copies. */
static void gemm_panels(const mm_kind *kd, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        const char *A, int64_t lda, const char *B, int64_t ldb, double beta,
                        char *C, int64_t ldc, gemm_bias bias) {
    bool ra = kd->da == REMAT_F32, rb = kd->db == REMAT_F32;
    int64_t pm = ra ? panel_width(kd->cap_a, k, m) : m, pn = rb ? panel_width(kd->cap_b, k, n) : n;
    size_t esa = remat_dtype_size(kd->da), esb = remat_dtype_size(kd->db);
    size_t esc = remat_dtype_size(kd->dc), esbias = bias.f32 ? sizeof(float) : sizeof(uint16_t);
    uint16_t *sa = kd->scratch, *sb = kd->scratch + kd->cap_a;
    const char *Aw = A; /* A whole, rounded once when it fits */
    int64_t ldaw = lda;
    if (ra && pm == m) Aw = round_panel(a_panel(ta, A, lda, 0, m, k), sa, &ldaw);
    for (int64_t j0 = 0; j0 < n; j0 += pn) {
        int64_t nn = n - j0 < pn ? n - j0 : pn, ldbp = ldb;
        const char *Bp = rb ? round_panel(b_panel(tb, B, ldb, j0, nn, k), sb, &ldbp)
                            : B + (size_t)(tb ? j0 * ldb : j0) * esb;
        gemm_bias bp = bias;
        if (bias.p) bp.p = (const char *)bias.p + (size_t)j0 * esbias;
        for (int64_t i0 = 0; i0 < m; i0 += pm) {
            int64_t mm = m - i0 < pm ? m - i0 : pm, ldap = ldaw;
            const char *Ap = Aw != A || !ra
                                 ? Aw + (size_t)(ta ? i0 : i0 * ldaw) * (ra ? 2 : esa)
                                 : round_panel(a_panel(ta, A, lda, i0, mm, k), sa, &ldap);
            gemm_dt(REMAT_BF16, kd->dc, ta, tb, mm, nn, k, Ap, ldap, Bp, ldbp, beta,
                    C + ((size_t)i0 * (size_t)ldc + (size_t)j0) * esc, ldc, bp);
        }
    }
}

#ifdef _OPENMP
/* gemm_panels with the panels spread over kd->nt threads in one parallel
 * region, each GEMM single-threaded (oneDNN makes a one-thread primitive
 * inside a region): the threads round each panel of B together into the
 * shared B scratch, then take A's panels (rows; each thread rounds its own
 * into its slice of the scratch) by a static split, and meet before the
 * next panel of B is rounded over this one. A region per call rather than
 * two per panel (a rounding and the GEMM's own): with OMP_WAIT_POLICY=passive
 * (the remat program's default) every region start wakes a sleeping thread,
 * about 45 us on the 2-vCPU machines, and linear's backward under autocast
 * ran some 60 panels per layer. The same bits as gemm_panels: a C element
 * still gets its whole K sum from one GEMM of the same rounded operands,
 * and oneDNN's result does not depend on M, nor on N up to RM_PANEL_MAX_K. */
static void gemm_panels_team(const mm_kind *kd, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                             const char *A, int64_t lda, const char *B, int64_t ldb, double beta,
                             char *C, int64_t ldc, gemm_bias bias) {
    bool ra = kd->da == REMAT_F32, rb = kd->db == REMAT_F32;
    int nt = kd->nt;
    /* A not rounded: its rows split evenly over the threads */
    int64_t pm = ra ? panel_width(kd->cap_a, k, m) : (m + nt - 1) / nt;
    int64_t pn = rb ? panel_width(kd->cap_b, k, n) : n, na = (m + pm - 1) / pm;
    size_t esa = remat_dtype_size(kd->da), esb = remat_dtype_size(kd->db);
    size_t esc = remat_dtype_size(kd->dc), esbias = bias.f32 ? sizeof(float) : sizeof(uint16_t);
    uint16_t *sb = kd->scratch + (int64_t)nt * kd->cap_a;
#pragma omp parallel num_threads(nt)
    {
        uint16_t *sa = kd->scratch + (int64_t)omp_get_thread_num() * kd->cap_a;
        for (int64_t j0 = 0; j0 < n; j0 += pn) {
            int64_t nn = n - j0 < pn ? n - j0 : pn, ldbp = ldb;
            const char *Bp = B + (size_t)(tb ? j0 * ldb : j0) * esb;
            if (rb) { /* rounded by all the threads together */
                f32_panel pb = b_panel(tb, B, ldb, j0, nn, k);
#pragma omp for schedule(static)
                for (int64_t r = 0; r < pb.rows; r++) round_panel_row(pb, r, sb);
                Bp = (const char *)sb, ldbp = pb.cols;
            }
            gemm_bias bp = bias;
            if (bias.p) bp.p = (const char *)bias.p + (size_t)j0 * esbias;
#pragma omp for schedule(static)
            for (int64_t ia = 0; ia < na; ia++) {
                int64_t i0 = ia * pm, mm = m - i0 < pm ? m - i0 : pm, ldap = lda;
                const char *Ap = A + (size_t)(ta ? i0 : i0 * lda) * esa;
                if (ra) { /* rounded by this thread alone, into its slice */
                    f32_panel pa = a_panel(ta, A, lda, i0, mm, k);
                    for (int64_t r = 0; r < pa.rows; r++) round_panel_row(pa, r, sa);
                    Ap = (const char *)sa, ldap = pa.cols;
                }
                gemm_dt(REMAT_BF16, kd->dc, ta, tb, mm, nn, k, Ap, ldap, Bp, ldbp, beta,
                        C + ((size_t)i0 * (size_t)ldc + (size_t)j0) * esc, ldc, bp);
            } /* the barrier: sb is rounded over next */
        }
    }
}
#endif

/* One GEMM of the call: gemm_dt, or gemm_panels when an operand is rounded here,
 * or rm_bgemm_wide (with ws, its scratch, or NULL: its own). */
static void gemm_kind(const mm_kind *kd, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      const char *A, int64_t lda, const char *B, int64_t ldb, double beta, char *C,
                      int64_t ldc, gemm_bias bias, void *ws) {
    if (kd->wide) {
        rm_bgemm_wide(ta, tb, m, n, k, A, kd->da == REMAT_F32, lda, B, kd->db == REMAT_F32, ldb,
                      bias.p, bias.f32, (float)beta, C, kd->dc == REMAT_F32, ldc, ws);
        return;
    }
#ifdef _OPENMP
    if ((kd->da != kd->dt || kd->db != kd->dt) && kd->nt > 1)
        gemm_panels_team(kd, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc, bias);
    else
#endif
        if (kd->da != kd->dt || kd->db != kd->dt)
        gemm_panels(kd, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc, bias);
    else gemm_dt(kd->dt, kd->dc, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc, bias);
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
static void mm_exec(const mm_kind *kd, int nb, const int64_t *bshape, const mview *A,
                    const mview *B, const mview *C, int64_t c_numel, bool add_to_c,
                    gemm_bias bias) {
    bool ta, tb, tc;
    int64_t lda, ldb, ldc;
    mv_layout(A, &ta, &lda);
    mv_layout(B, &tb, &ldb);
    mv_layout(C, &tc, &ldc);
    int64_t m = A->rows, k = A->cols, n = B->cols;
    int64_t nbatch = rm_shape_numel(nb, bshape);
    size_t esa = remat_dtype_size(kd->da), esb = remat_dtype_size(kd->db);
    size_t esc = remat_dtype_size(kd->dc);
    double beta = add_to_c ? 1.0 : 0.0;
    if (m == 0 || n == 0) return;

    /* fold-M: one GEMM over batch·m rows */
    if (!ta && !tc && batch_broadcast_all(nb, bshape, B->bstr) &&
        batch_chains(nb, bshape, A->bstr, m * lda) && batch_chains(nb, bshape, C->bstr, m * ldc)) {
        gemm_kind(kd, ta, tb, nbatch * m, n, k, A->p, lda, B->p, ldb, beta, C->p, ldc, bias, NULL);
        return;
    }
    /* fold-K: one GEMM summing over batch·k */
    if (ta && !tb && !tc && batch_broadcast_all(nb, bshape, C->bstr) &&
        batch_chains(nb, bshape, A->bstr, k * lda) && batch_chains(nb, bshape, B->bstr, k * ldb)) {
        gemm_kind(kd, ta, tb, m, n, nbatch * k, A->p, lda, B->p, ldb, beta, C->p, ldc, bias, NULL);
        return;
    }
    /* one GEMM per batch entry; accumulate where C is broadcast */
    bool acc = c_shared(nb, bshape, C);
    if (acc && !add_to_c) {
        memset(C->p, 0, (size_t)c_numel * esc);
        beta = 1.0;
    }
    rm_iter base;
    mv_batch_iter(&base, nb, bshape, A, B, C);
    /* Whole GEMMs per thread (each single-threaded) rather than every GEMM
     * split over the threads: for small matrices (attention heads), where a
     * split does not pay, and whenever the batch divides evenly among the
     * threads (8 x 256x384x384 on 2 threads: 160 vs 134 GFLOP/s with
     * OpenBLAS). Not when C is shared across the batch (accumulation), nor
     * when the GEMM layer cannot be entered from a parallel region, nor
     * when operands are rounded into the call's one scratch. (Two
     * loops rather than one with an `if (par)` clause: a GEMM that opens its
     * own parallel region from inside an inactive one gets a freshly created
     * nested team from libgomp — about 2 ms per call.) */
    int nt = max_threads();
    bool par = !acc && nbatch > 1 && nt > 1 && rm_gemm_threading() == RM_GEMM_THREADS_OMP &&
               !kd->scratch &&
               ((double)m * (double)n * (double)k < RM_BATCH_PAR_MAX || nbatch % nt == 0);
    /* The GEMMs through f32 (kd->wide) get their scratch here, one slice per thread
     * of one buffer taken on this thread: taken by each GEMM on the team's threads,
     * it would count in the allocator but not in this thread's meter, which the
     * planner's profile reads; and a loop takes it once, not once per GEMM. Out of
     * memory: the GEMMs one after another, each trying for its own. */
    size_t per = kd->wide ? rm_bgemm_wide_bytes(m, n, k, kd->dc == REMAT_F32) : 0;
    size_t ws_bytes = per * (size_t)(par ? nt : 1);
    char *ws = per ? rm_cpu_ws_take(ws_bytes) : NULL;
    if (per && !ws && par) par = false;
    if (par) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nbatch; i++) {
            rm_iter it = base;
            rm_iter_seek(&it, i);
            gemm_kind(kd, ta, tb, m, n, k, A->p + (size_t)it.off[0] * esa, lda,
                      B->p + (size_t)it.off[1] * esb, ldb, beta, C->p + (size_t)it.off[2] * esc,
                      ldc, bias, ws ? ws + per * (size_t)thread_num() : NULL);
        }
    } else {
        rm_iter it = base;
        for (int64_t i = 0; i < nbatch; i++) {
            gemm_kind(kd, ta, tb, m, n, k, A->p + (size_t)it.off[0] * esa, lda,
                      B->p + (size_t)it.off[1] * esb, ldb, beta, C->p + (size_t)it.off[2] * esc,
                      ldc, bias, ws);
            rm_iter_next(&it);
        }
    }
    rm_cpu_ws_give(ws, ws_bytes);
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
/* colsum_blocks and colsum, once per dtype: colsum_body.h */
#define T float
#include "colsum_body.h"

#define T double
#include "colsum_body.h"

/* colsum_blocks for the fused kernels that sum their own rows (bias_gelu.c) */
void rm_cpu_colsum_blocks_f32(const float *src, int64_t rows, int64_t n, float *db) {
    colsum_blocks_float(src, rows, n, db);
}
void rm_cpu_colsum_blocks_f64(const double *src, int64_t rows, int64_t n, double *db) {
    colsum_blocks_double(src, rows, n, db);
}

/* A bf16 db (autocast's bias gradient) from bf16 g, or from an f32 g kept
 * wide (`wide`: linear's output gradient, src/ops/matmul.c) whose rows are
 * rounded to bf16 as they stream, a stack segment at a time: colsum_float's
 * sums in its order, each bf16 row widened as it streams into the f32
 * partials, then db rounded once. Bitwise the f32 kernel on a widened copy of
 * (the rounded) g, rounded (what rm_cpu_bf16_via_f32 gives), without either
 * copy (an f32 twin of g per linear in the backward). part: the f32
 * partials, then n more for db. */
static void colsum_to_bf16(const void *restrict g, bool wide, uint16_t *restrict db, int64_t rows,
                           int64_t n, float *restrict part) {
    int64_t rb = rm_cpu_chunk_rows(rows, n), nch = (rows + rb - 1) / rb;
    int64_t step = wide ? 256 : n; /* columns per run: a segment of seg, or the row */
#pragma omp parallel for if (rows * n > RM_OMP_MIN)
    for (int64_t k = 0; k < nch; k++) {
        float *restrict p = part + k * n;
        int64_t r0 = k * rb, r1 = (k + 1) * rb < rows ? (k + 1) * rb : rows;
        uint16_t seg[256];
        for (int64_t r = r0; r < r1; r++)
            for (int64_t j = 0; j < n; j += step) {
                int64_t m = n - j < step ? n - j : step;
                const uint16_t *run = (const uint16_t *)g + r * n + j;
                if (wide) rm_bf16_round_run((const float *)g + r * n + j, seg, m), run = seg;
                if (r == r0) rm_bf16_widen_run(run, p + j, m);
                else rm_bf16_add_run(run, p + j, m);
            }
    }
    float *dbf = part + nch * n;
    colsum_blocks_float(part, nch, n, dbf);
    rm_bf16_round_run(dbf, db, n);
}

/* Narrow g (no partials): g rounded and widened into an f32 copy, summed as
 * the f32 kernel sums narrow g, db rounded: what the bf16 path gives (through
 * rm_cpu_bf16_via_f32) on a rounded copy of g. */
static remat_status colsum_rounded_narrow(const float *g, uint16_t *db, int64_t rows, int64_t n) {
    size_t bytes = sizeof(float) * (size_t)(rows * n + n); /* a copy of g: counted scratch */
    float *w = rm_cpu_ws_take(bytes);
    if (!w) return rm_err(REMAT_ENOMEM, "out of memory");
    for (int64_t i = 0; i < rows * n; i++) w[i] = rm_bf16_to_f32(rm_f32_to_bf16(g[i]));
    colsum_blocks_float(w, rows, n, w + rows * n);
    rm_bf16_round_run(w + rows * n, db, n);
    rm_cpu_ws_give(w, bytes);
    return REMAT_OK;
}

/* A contiguous bf16 copy of f32 t (rounded to nearest even), from the allocator. */
static int rounded_copy(remat_tensor **out, remat_tensor *t) {
    remat_tensor *c = NULL;
    int rc = rm_contig(&c, t);
    if (!rc) rc = rm_new_output(out, c->ndim, c->shape, REMAT_BF16, c->storage->device);
    if (!rc) rm_cpu_f32_to_bf16(rm_ptr(c), rm_ptr(*out), remat_numel(c));
    rm_release(c);
    return rc;
}

/* The threads gemm_panels_team spreads a call's panels over: all of them,
 * where the GEMMs may run inside a parallel region (oneDNN, or an sgemm that
 * takes OpenMP's threads) and this is not one already; else 1 (gemm_panels). */
static int panel_team(void) {
#ifdef _OPENMP
    if (omp_in_parallel() || rm_gemm_threading() != RM_GEMM_THREADS_OMP) return 1;
    return max_threads();
#else
    return 1;
#endif
}

/* The GEMMs run in bf16 when an operand or C is bf16 (autocast: linear's
 * kept f32 weight, its f32 output gradient; bf16 g, x with linear's f32 dW
 * as C), otherwise in the operands' dtype (which must then agree). An f32
 * operand of a bf16 GEMM is rounded as the GEMMs read it, panel by panel
 * into one scratch of at most RM_PANEL_BYTES, when its flags have
 * RM_MM_PANEL; otherwise into a whole rounded copy first. */
static remat_status mm_kind_of(mm_kind *kd, remat_tensor **ar, remat_tensor **br,
                               remat_tensor **scratch, const rm_mm_params *p, remat_tensor *a,
                               remat_tensor *b, remat_tensor *y, int64_t mmax, int64_t nmax,
                               int64_t kmax) {
    remat_dtype da = a->dtype, db = b->dtype;
    bool low = da == REMAT_BF16 || db == REMAT_BF16 || y->dtype == REMAT_BF16;
    *kd = (mm_kind){da, da, db, y->dtype, NULL, 0, 0, 1, false};
    if (!low) {
        if (da == db) return REMAT_OK;
        return rm_err(REMAT_EDTYPE, "matmul kernel: operands of dtypes %s and %s",
                      remat_dtype_name(da), remat_dtype_name(db));
    }
    if ((da != REMAT_BF16 && da != REMAT_F32) || (db != REMAT_BF16 && db != REMAT_F32))
        return rm_err(REMAT_EDTYPE, "matmul kernel: operands of dtypes %s and %s for a bf16 GEMM",
                      remat_dtype_name(da), remat_dtype_name(db));
    kd->dt = REMAT_BF16;
    /* Where the bf16 GEMMs run through f32 anyway, an f32 operand is rounded as it
     * is widened there: rounding it into a bf16 copy (or panels) first was a pass
     * more over it, and a panel's GEMM widened the other operand again per panel
     * (linear's backward under autocast: 1401 -> 1175 ms a GPT step, 1 thread,
     * docs/benchmarks.md). The whole GEMM is one f32 sgemm over the team, as
     * without autocast: deterministic per shape and thread count, but where the
     * panels' one-thread GEMMs gave the same bits at any thread count, the sgemm's
     * K split may not (as f32's does not). */
    if (!rm_bgemm_native()) {
        kd->wide = true;
        return REMAT_OK;
    }
    bool pa = da == REMAT_F32 && (p->a & RM_MM_PANEL);
    bool pb = db == REMAT_F32 && (p->b & RM_MM_PANEL) && kmax <= RM_PANEL_MAX_K;
    int rc = REMAT_OK;
    if (da == REMAT_F32 && !pa) rc = rounded_copy(ar, a), kd->da = REMAT_BF16;
    if (!rc && db == REMAT_F32 && !pb) rc = rounded_copy(br, b), kd->db = REMAT_BF16;
    if (rc || (!pa && !pb)) return rc;
    /* The budget (or one 32-wide panel each, if more), as many elements as
     * the panels use at the largest M, N, K, whatever the thread count: each
     * of the nt threads gets its own slice for A's panels, B's one panel is
     * shared. With both rounded, B's panels (the outer loop) get all but 128
     * rows of A's per thread: every B panel rounds A again, so the fewer B
     * panels the better (one, when B fits: A is then rounded once). */
    kd->nt = panel_team();
    int nt = kd->nt;
    int64_t budget = RM_PANEL_BYTES / (int64_t)sizeof(uint16_t);
    int64_t least = 32 * kmax * ((pa ? nt : 0) + (pb ? 1 : 0));
    budget = budget > least ? budget : least;
    if (pb)
        kd->cap_b = panel_width(pa ? budget - (int64_t)128 * nt * kmax : budget, kmax, nmax) * kmax;
    if (pa) kd->cap_a = panel_width((budget - kd->cap_b) / nt, kmax, mmax) * kmax;
    int64_t n = nt * kd->cap_a + kd->cap_b;
    /* from the allocator: the scratch is part of what the step holds */
    rc = rm_new_output(scratch, 1, &n, REMAT_BF16, y->storage->device);
    if (!rc) kd->scratch = rm_ptr(*scratch);
    return rc;
}

remat_status rm_cpu_matmul(const rm_kargs *k) {
    const rm_mm_params *p = k->params;
    remat_tensor *y = k->out[0], *bias = k->in[2];
    remat_tensor *ac = NULL, *bc = NULL, *biasc = NULL, *ar = NULL, *br = NULL, *scratch = NULL;
    int nb;
    int64_t bshape[REMAT_MAX_DIMS];
    remat_tensor *ops[3] = {k->in[0], k->in[1], y};
    const unsigned char flags[3] = {p->a, p->b, p->c};
    batch_shape(ops, flags, &nb, bshape);
    /* the GEMMs' largest M, N, K: fold-M runs M over the batch, fold-K K */
    mview Av = operand_view(k->in[0], p->a, nb), Bv = operand_view(k->in[1], p->b, nb);
    int64_t nbatch = rm_shape_numel(nb, bshape), tr = (p->a & RM_MM_T) != 0;
    mm_kind kd;
    int rc = mm_kind_of(&kd, &ar, &br, &scratch, p, k->in[0], k->in[1], y,
                        Av.rows * (tr ? 1 : nbatch), Bv.cols, Av.cols * (tr ? nbatch : 1));
    remat_tensor *a = ar ? ar : k->in[0], *b = br ? br : k->in[1];
    if (!rc) rc = prep_operand(&ac, a, p->a & RM_MM_ROW, p->a & RM_MM_COL);
    if (!rc) rc = prep_operand(&bc, b, p->b & RM_MM_ROW, p->b & RM_MM_COL);
    if (!rc && bias) rc = rm_contig(&biasc, bias);
    if (rc) goto out;
    mview A = operand_view(ac, p->a, nb), B = operand_view(bc, p->b, nb);
    mview C = operand_view(y, p->c, nb);
    /* bf16 (autocast): the bias goes into the GEMM itself; otherwise it is
     * written into y's rows first and the GEMM adds to it (beta = 1) */
    gemm_bias gb = {NULL, false};
    if (biasc && kd.dt == REMAT_BF16 && y->dtype == REMAT_BF16 && !c_shared(nb, bshape, &C))
        gb = (gemm_bias){rm_ptr(biasc), biasc->dtype == REMAT_F32};
    else if (biasc) {
        int64_t n = biasc->shape[0];
        fill_rows(rm_ptr(y), rm_ptr(biasc), n ? remat_numel(y) / n : 0, n,
                  remat_dtype_size(y->dtype));
    }
    mm_exec(&kd, nb, bshape, &A, &B, &C, remat_numel(y), biasc && !gb.p, gb);
out:
    rm_release(ar);
    rm_release(br);
    rm_release(scratch);
    rm_release(ac);
    rm_release(bc);
    rm_release(biasc);
    return rc;
}

/* ---- RM_K_COLSUM ----------------------------------------------------------------------------- */

remat_status rm_cpu_colsum(const rm_kargs *k) {
    remat_tensor *g = k->in[0], *db = k->out[0];
    int64_t n = db->shape[0];
    int64_t rows = n ? remat_numel(g) / n : 0;
    int64_t ns = colsum_scratch(rows, n);
    bool bf16 = g->dtype == REMAT_BF16;
    bool rounded = g->dtype == REMAT_F32 && db->dtype == REMAT_BF16; /* f32 g kept wide */
    if (bf16 && !ns) return rm_cpu_bf16_via_f32[RM_K_COLSUM](k);     /* narrow: rare */
    if (rounded && !ns) return colsum_rounded_narrow(rm_ptr(g), rm_ptr(db), rows, n);
    bool fparts = bf16 || rounded; /* f32 partials, then n more for db */
    /* the partials: a chunk's row each, up to 2^24 of them (nn.c's rm_cpu_chunk_rows) */
    size_t bytes =
        (size_t)(ns + (fparts ? n : 0)) * (fparts ? sizeof(float) : remat_dtype_size(g->dtype));
    void *part = ns ? rm_cpu_ws_take(bytes) : NULL;
    if (ns && !part) return rm_err(REMAT_ENOMEM, "out of memory");
    if (fparts) colsum_to_bf16(rm_ptr(g), rounded, rm_ptr(db), rows, n, part);
    else if (g->dtype == REMAT_F32) colsum_float(rm_ptr(g), rm_ptr(db), rows, n, part);
    else colsum_double(rm_ptr(g), rm_ptr(db), rows, n, part);
    rm_cpu_ws_give(part, bytes);
    return REMAT_OK;
}
