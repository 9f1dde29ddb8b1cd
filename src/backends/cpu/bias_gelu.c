/* src/backends/cpu/bias_gelu.c — cpu kernels of the fused bias + GELU
 * (remat_bias_gelu, src/ops/bias_gelu.c): y = gelu(x + b) with b added to
 * every row of x (rows, n), and its backward dx = g * gelu'(x + b) with the
 * bias gradient db = the column sums of dx made in the same sweep.
 *
 * What the fusion saves, against linear(h, W, b) then gelu: the forward's
 * pass that writes the bias into the output rows before the f32 GEMM adds to
 * them (matmul.c's fill_rows), and the backward's pass that reads dx again for
 * the bias gradient (RM_K_COLSUM). The values are those of the unfused ops
 * (gelu of add(x, b); the column sums of its gradient): the same expressions
 * per element, the same summation order for db (the column sum's chunks of
 * rows, then its double sums over the chunks), for any thread count.
 *
 * bf16 (autocast): x + b is rounded to bf16 first, as a bf16 add would round
 * it, so the GELU and its derivative come from the unary kernel's lookup
 * tables (unary.c) or, below their size, from the same f32 expressions; dx is
 * rounded once. db sums the rounded dx in f32 as the bf16 column sum does,
 * and is rounded to bf16 for a bf16 bias; an f32 bias (autocast's f32 master
 * bias, read without a bf16 copy) gets the f32 sums. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "clones.h"
#include "cpu.h"
#include "tmpl.h"
#include "vmath.h"
#include "workspace.h"

#define BG_GELU(v) _Generic((v), float : rm_gelu_erff_v, double : rm_gelu_erf_d)(v)
#define BG_GELU_T(v) _Generic((v), float : rm_gelu_tanhf_v, double : rm_gelu_tanh_d)(v)
#define BG_GELU_GRAD(v) _Generic((v), float : rm_gelu_erff_grad_v, double : rm_gelu_erf_grad_d)(v)
#define BG_GELU_T_GRAD(v)                                                                          \
    _Generic((v), float : rm_gelu_tanhf_grad_v, double : rm_gelu_tanh_grad_d)(v)

#define T f32
#include "bias_gelu_body.h"

#define T f64
#include "bias_gelu_body.h"

/* x's rows (numel / n) and n, the bias length: x is in[ix], the bias in[ix + 1]. */
static void bg_shape(const rm_kargs *k, int ix, int64_t *rows, int64_t *n) {
    *n = remat_numel(k->in[ix + 1]);
    *rows = *n ? remat_numel(k->in[ix]) / *n : 0;
}

static remat_status bg_check_op(const rm_unary_params *p) {
    if (p->op == RM_U_GELU_ERF || p->op == RM_U_GELU_TANH) return REMAT_OK;
    return rm_err(REMAT_EINVAL, "bias gelu kernel: op %d is not a GELU", (int)p->op);
}

/* The forward of f32 (f64 false) or f64 data. */
static remat_status bg_fwd(const rm_kargs *k, bool f64) {
    int64_t rows, n;
    bg_shape(k, 0, &rows, &n);
    int rc = bg_check_op(k->params);
    if (rc) return rc;
    const rm_unary_op op = ((const rm_unary_params *)k->params)->op;
    if (f64) bg_fwd_f64(op, rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->out[0]), rows, n);
    else bg_fwd_f32(op, rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->out[0]), rows, n);
    return REMAT_OK;
}

remat_status rm_cpu_bias_gelu_f32(const rm_kargs *k) { return bg_fwd(k, false); }

remat_status rm_cpu_bias_gelu_f64(const rm_kargs *k) { return bg_fwd(k, true); }

/* Scratch of the backward's partial sums: nch * n elements of es bytes, *bytes of them
 * (a chunk's row each, up to 2^24: counted scratch, workspace.h); NULL and *none when db
 * is not wanted or the rows are narrow: no partials. */
static void *bg_part(const rm_kargs *k, int64_t rows, int64_t n, size_t es, bool *none,
                     size_t *bytes) {
    *none = !k->out[1] || n < 64 || rows == 0;
    *bytes = 0;
    if (*none) return NULL;
    int64_t rb = rm_cpu_chunk_rows(rows, n);
    *bytes = es * (size_t)((rows + rb - 1) / rb * n);
    return rm_cpu_ws_take(*bytes);
}

/* The backward of f32 (f64 false) or f64 data: shapes, the op, the partial sums' scratch. */
static remat_status bg_bwd(const rm_kargs *k, bool f64) {
    const rm_unary_params *p = k->params;
    int64_t rows, n;
    bg_shape(k, 1, &rows, &n);
    bool none;
    int rc = bg_check_op(p);
    if (rc) return rc;
    size_t bytes;
    void *part = bg_part(k, rows, n, f64 ? sizeof(double) : sizeof(float), &none, &bytes);
    if (!none && !part) return rm_err(REMAT_ENOMEM, "out of memory");
    void *db = k->out[1] ? rm_ptr(k->out[1]) : NULL;
    if (f64)
        bg_bwd_f64(p->op, rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->in[2]), rm_ptr(k->out[0]),
                   db, rows, n, part);
    else
        bg_bwd_f32(p->op, rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->in[2]), rm_ptr(k->out[0]),
                   db, rows, n, part);
    rm_cpu_ws_give(part, bytes);
    return REMAT_OK;
}

remat_status rm_cpu_bias_gelu_bwd_f32(const rm_kargs *k) { return bg_bwd(k, false); }

remat_status rm_cpu_bias_gelu_bwd_f64(const rm_kargs *k) { return bg_bwd(k, true); }

/* ---- bf16 ------------------------------------------------------------------------------- */

/* The bias widened to f32 (n floats; bf16 or f32 b), from malloc. */
static float *bg_bias_f32(const remat_tensor *b, int64_t n) {
    float *w = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!w) return NULL;
    if (b->dtype == REMAT_F32) memcpy(w, rm_ptr((remat_tensor *)b), sizeof(float) * (size_t)n);
    else rm_bf16_widen_run(rm_ptr((remat_tensor *)b), w, n);
    return w;
}

/* Columns per step of a bf16 row: the sums x + b go through f32 and bf16 stack buffers so
 * that the widening, the add and the rounding run as vector loops (rm_bf16_round_run rounds
 * as rm_f32_to_bf16, with AVX512_BF16's instruction where the CPU has it), and the table
 * lookups after them are the unary kernel's own gathers. */
#define BG_STEP 256

/* h[j] = x[j] + b[j] rounded to bf16 (as the bf16 add rounds it), j < m <= BG_STEP */
static inline void bg_sums_bf16(const uint16_t *restrict x, const float *restrict b,
                                uint16_t *restrict h, int64_t m) {
    float s[BG_STEP];
    rm_bf16_widen_run(x, s, m);
    for (int64_t j = 0; j < m; j++) s[j] += b[j];
    rm_bf16_round_run(s, h, m);
}

/* one row of y = gelu(x + b): the sums, then the forward table (or the f32 expression the
 * table was filled with). Cloned of its own: GCC keeps it out of line, and its GELUs need
 * the clones' FMA (vmath.h's RM_FMAF_CL) */
RM_CPU_CLONES static void bg_fwd_row_bf16(bool erf, const uint16_t *restrict tab,
                                          const uint16_t *restrict x, const float *restrict b,
                                          uint16_t *restrict y, int64_t n) {
    for (int64_t j0 = 0; j0 < n; j0 += BG_STEP) {
        const int64_t m = n - j0 < BG_STEP ? n - j0 : BG_STEP;
        uint16_t h[BG_STEP];
        bg_sums_bf16(x + j0, b + j0, h, m);
        uint16_t *restrict yj = y + j0;
        if (tab)
            for (int64_t j = 0; j < m; j++) yj[j] = tab[h[j]];
        else if (erf)
            for (int64_t j = 0; j < m; j++)
                yj[j] = rm_f32_to_bf16(rm_gelu_erff_v(rm_bf16_to_f32(h[j])));
        else
            for (int64_t j = 0; j < m; j++)
                yj[j] = rm_f32_to_bf16(rm_gelu_tanhf_v(rm_bf16_to_f32(h[j])));
    }
}

RM_CPU_CLONES static void bg_fwd_bf16(rm_unary_op op, const uint16_t *restrict tab,
                                      const uint16_t *restrict x, const float *restrict b,
                                      uint16_t *restrict y, int64_t rows, int64_t n) {
    const bool erf = op == RM_U_GELU_ERF;
#pragma omp parallel for if (rows * n > RM_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) bg_fwd_row_bf16(erf, tab, x + r * n, b, y + r * n, n);
}

/* one row of dx = g * f'(x + b), rounded: g read whole into f32 products before dx's part
 * of the step is written, so g and dx may be one buffer (cloned as bg_fwd_row_bf16) */
RM_CPU_CLONES static void bg_bwd_row_bf16(bool erf, const float *restrict tab, const uint16_t *g,
                                          const uint16_t *restrict x, const float *restrict b,
                                          uint16_t *dx, int64_t n) {
    for (int64_t j0 = 0; j0 < n; j0 += BG_STEP) {
        const int64_t m = n - j0 < BG_STEP ? n - j0 : BG_STEP;
        uint16_t h[BG_STEP];
        float d[BG_STEP];
        bg_sums_bf16(x + j0, b + j0, h, m);
        rm_bf16_widen_run(g + j0, d, m);
        if (tab)
            for (int64_t j = 0; j < m; j++) d[j] *= tab[h[j]];
        else if (erf)
            for (int64_t j = 0; j < m; j++) d[j] *= rm_gelu_erff_grad_v(rm_bf16_to_f32(h[j]));
        else
            for (int64_t j = 0; j < m; j++) d[j] *= rm_gelu_tanhf_grad_v(rm_bf16_to_f32(h[j]));
        rm_bf16_round_run(d, dx + j0, m);
    }
}

/* dx, and with part the f32 partial sums of its rounded rows by chunk (the bf16 column
 * sum's order: matmul.c's colsum_to_bf16) */
RM_CPU_CLONES static void bg_bwd_bf16(rm_unary_op op, const float *restrict tab, const uint16_t *g,
                                      const uint16_t *restrict x, const float *restrict b,
                                      uint16_t *dx, int64_t rows, int64_t n, float *restrict part) {
    const bool erf = op == RM_U_GELU_ERF;
    if (!part) {
#pragma omp parallel for if (rows * n > RM_OMP_MIN)
        for (int64_t r = 0; r < rows; r++)
            bg_bwd_row_bf16(erf, tab, g + r * n, x + r * n, b, dx + r * n, n);
        return;
    }
    const int64_t rb = rm_cpu_chunk_rows(rows, n), nch = (rows + rb - 1) / rb;
#pragma omp parallel for if (rows * n > RM_OMP_MIN)
    for (int64_t k = 0; k < nch; k++) {
        float *restrict p = part + k * n;
        const int64_t r0 = k * rb, r1 = (k + 1) * rb < rows ? (k + 1) * rb : rows;
        for (int64_t r = r0; r < r1; r++) {
            uint16_t *dr = dx + r * n;
            bg_bwd_row_bf16(erf, tab, g + r * n, x + r * n, b, dr, n);
            if (r == r0) rm_bf16_widen_run(dr, p, n);
            else rm_bf16_add_run(dr, p, n);
        }
    }
}

static remat_status bg_check_bf16(const rm_kargs *k, const char *what) {
    remat_dtype bd = k->in[k->in[2] ? 2 : 1]->dtype;
    if (bd == REMAT_BF16 || bd == REMAT_F32) return REMAT_OK;
    return rm_err(REMAT_EDTYPE, "bias gelu %s: a %s bias for bf16 x", what, remat_dtype_name(bd));
}

remat_status rm_cpu_bias_gelu_bf16(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    int64_t rows, n;
    bg_shape(k, 0, &rows, &n);
    int rc = bg_check_op(p);
    if (!rc) rc = bg_check_bf16(k, "kernel");
    if (rc) return rc;
    float *b = bg_bias_f32(k->in[1], n);
    if (!b) return rm_err(REMAT_ENOMEM, "out of memory");
    bg_fwd_bf16(p->op, rm_cpu_gelu_bf16_fwd_table(p->op, rows * n), rm_ptr(k->in[0]), b,
                rm_ptr(k->out[0]), rows, n);
    free(b);
    return REMAT_OK;
}

/* in: g, x, b; out: dx, db (b's dtype, or NULL) */
remat_status rm_cpu_bias_gelu_bwd_bf16(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    remat_tensor *dbt = k->out[1];
    int64_t rows, n;
    bg_shape(k, 1, &rows, &n);
    int rc = bg_check_op(p);
    if (!rc) rc = bg_check_bf16(k, "backward kernel");
    if (rc) return rc;
    /* the partials (or, narrow, dx widened whole), then n more for db's f32 sums */
    const bool narrow = n < 64 || rows == 0;
    int64_t rb = narrow ? 1 : rm_cpu_chunk_rows(rows, n), nch = narrow ? 0 : (rows + rb - 1) / rb;
    int64_t np = !dbt ? 0 : narrow ? rows * n + n : nch * n + n;
    /* the bias row: n floats, malloc's; the partials, or narrow a whole f32 dx: counted */
    const size_t bytes = sizeof(float) * (size_t)np;
    float *b = bg_bias_f32(k->in[2], n), *part = np ? rm_cpu_ws_take(bytes) : NULL;
    if (!b || (np && !part)) {
        free(b), rm_cpu_ws_give(part, bytes);
        return rm_err(REMAT_ENOMEM, "out of memory");
    }
    uint16_t *dx = rm_ptr(k->out[0]);
    bg_bwd_bf16(p->op, rm_cpu_gelu_bf16_grad_table(p->op, rows * n), rm_ptr(k->in[0]),
                rm_ptr(k->in[1]), b, dx, rows, n, dbt && !narrow ? part : NULL);
    if (dbt) {
        const int64_t nr = narrow ? rows : nch;
        if (narrow) rm_cpu_bf16_to_f32(dx, part, rows * n); /* the column sum's narrow path */
        float *sums = dbt->dtype == REMAT_F32 ? rm_ptr(dbt) : part + nr * n;
        rm_cpu_colsum_blocks_f32(part, nr, n, sums);
        if (dbt->dtype == REMAT_BF16) rm_bf16_round_run(sums, rm_ptr(dbt), n);
    }
    free(b), rm_cpu_ws_give(part, bytes);
    return REMAT_OK;
}
