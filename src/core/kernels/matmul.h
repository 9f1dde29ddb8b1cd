/* src/core/kernels/matmul.h — kernels of the matmul family (src/ops/matmul.c, attention.c;
 * the cpu backend's GEMM layer, src/backends/cpu/gemm.h, is what they run on there):
 * ids (RM_KERNELS_MATMUL, each with its operands in a comment) and their
 * parameter structs. */
#ifndef REMAT_KERNELS_MATMUL_H
#define REMAT_KERNELS_MATMUL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define RM_KERNELS_MATMUL(X)                                                                       \
    /* C = bias + op(A) · op(B) over a batch of matrices (rm_mm_params says how each operand \
     * is one). in: A, B, bias (NULL: none; else (n), added to every row of C); out: C.      \
     * f32 and f64. matmul, linear and every GEMM of their backward. */    \
    X(MATMUL, "matmul")                                                                            \
    /* db (n) = column sums of g (rows, n), contiguous; the order of the sums depends on    \
     * the shape only. in: g; out: db. linear's bias gradient (an f32 g with a bf16 db: the  \
     * sums of g rounded to bf16, on the cpu: autocast's wide output gradient). */      \
    X(COLSUM, "column sum")                                                                        \
    /* y = softmax(scale · q·kᵀ, causal mask) · v over the last two dims, lse = the rows'   \
     * log-sum-exp of the scaled scores. in: q (..., Tq, D), k (..., Tk, D),                 \
     * v (..., Tk, Dv) (k and v may have fewer heads, dim -3: rm_attention_dims);            \
     * out: y (..., Tq, Dv), lse (..., Tq). rm_attention_params */ \
    X(ATTENTION, "attention")                                                                      \
    /* The input gradients from the saved lse (FlashAttention's backward). in: q, k, v, y,   \
     * gy (y's gradient), lse; out: dq, dk, dv (each NULL when not wanted).                  \
     * rm_attention_params */     \
    X(ATTENTION_BWD, "attention backward")

/* How an operand of RM_K_MATMUL is a batch of matrices: its trailing dims
 * are a row dim (RM_MM_ROW; without it the matrix has one row) and a column
 * dim (RM_MM_COL; without it one column), as torch.matmul reads a 1-D
 * operand; its leading dims are batch dims, aligned right against the batch
 * shape (the broadcast of the three operands' batch dims), broadcast where
 * they have size 1 or are missing. RM_MM_T: the operand is the transpose of
 * that matrix. C (out[0]) is never transposed; where it is broadcast over
 * batch dims, the products of those batch entries are summed into it (how
 * a backward reduces a gradient over the dims its input was broadcast along).
 * RM_MM_PANEL (cpu): an f32 operand of a bf16 GEMM (a bf16 operand or C) is
 * rounded to bf16 panel by panel into a small scratch as the GEMM reads it,
 * instead of into a whole rounded copy first (linear's backward under
 * autocast: its kept f32 weight, its f32 output gradient). */
enum { RM_MM_ROW = 1, RM_MM_COL = 2, RM_MM_T = 4, RM_MM_PANEL = 8 };
typedef struct rm_mm_params {
    unsigned char a, b, c; /* RM_MM_* of in[0], in[1], out[0] */
} rm_mm_params;

typedef struct rm_attention_params {
    bool causal; /* row i sees keys 0..i + off: off 0 (top-left aligned, as torch's is_causal) */
    /* causal with off = Tk - Tq: the mask aligned to the bottom-right corner (a KV cache's
     * queries are the last Tq of Tk positions; torch's causal_lower_right) */
    bool lower_right;
    double scale; /* 0: 1 / sqrt(D) */
} rm_attention_params;

/* The scale attention uses for head size D. */
static inline double rm_attention_scale(const rm_attention_params *p, int64_t D) {
    if (p->scale != 0) return p->scale;
    return D > 0 ? 1.0 / sqrt((double)D) : 1.0;
}

/* The shapes of one attention call, as every device's kernel reads them:
 * nb batch entries (q's leading dims), Tq query rows, Tk keys, head sizes D (q, k) and Dv
 * (v, y). Grouped-query heads: k and v have `group` times fewer heads (dim -3) than q, and
 * query entry b reads kv entry b / group (the head dim is the last leading dim, so the
 * query heads of kv head h are h·group .. h·group + group − 1: PyTorch's repeat_interleave,
 * never materialised). C and C++ clean (the cuda launchers take it as rmk_att_dims). */
typedef struct rm_attention_dims {
    int64_t nb, Tq, Tk, D, Dv;
    int64_t group; /* query heads per kv head (1: as many) */
    bool causal;   /* row i sees keys 0..i + off */
    int64_t off;   /* 0, or Tk - Tq for the lower-right mask */
    double scale;
} rm_attention_dims;

/* The dims of q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) of ndim n
 * (n >= 2) under p. */
static inline rm_attention_dims rm_attention_dims_of(const rm_attention_params *p, int n,
                                                     const int64_t *q, const int64_t *k,
                                                     const int64_t *v) {
    rm_attention_dims d;
    d.nb = 1;
    for (int i = 0; i < n - 2; i++) d.nb *= q[i];
    d.Tq = q[n - 2];
    d.Tk = k[n - 2];
    d.D = q[n - 1];
    d.Dv = v[n - 1];
    d.group = n >= 3 && k[n - 3] > 0 ? q[n - 3] / k[n - 3] : 1;
    if (d.group < 1) d.group = 1;
    d.causal = p->causal;
    d.off = p->causal && p->lower_right ? d.Tk - d.Tq : 0;
    d.scale = rm_attention_scale(p, d.D);
    return d;
}

#endif /* REMAT_KERNELS_MATMUL_H */
