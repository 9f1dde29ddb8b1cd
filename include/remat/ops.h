/*
 * remat/ops.h — differentiable tensor operations.
 *
 * Conventions (all ops):
 *  - Output first: `int remat_op(remat_tensor **out, inputs...)`. *out gets a
 *    new reference (also held by the open scope, if any, until released:
 *    remat/tensor.h); on error *out is NULL.
 *  - Inputs are borrowed and never modified, except by the in-place ops
 *    (names ending in `_`), which bump the version counter.
 *  - f32 and f64; inputs of one op share a dtype and a device
 *    (REMAT_EDTYPE / REMAT_EDEVICE otherwise). Strided (non-contiguous)
 *    inputs are accepted everywhere. Binary elementwise ops broadcast as
 *    NumPy/PyTorch do.
 *  - Dims may be negative (counted from the end); out of range → REMAT_EINVAL.
 *  - When grad mode is on and an input requires grad, the output records a
 *    graph node; every tensor needed for backward is saved through the
 *    saved-tensor hooks (remat/autograd.h).
 */
#ifndef REMAT_OPS_H
#define REMAT_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* ---- elementwise binary (broadcasting) ---------------------------------------- */
remat_status remat_add(remat_tensor **out, remat_tensor *a, remat_tensor *b);
remat_status remat_sub(remat_tensor **out, remat_tensor *a, remat_tensor *b);
remat_status remat_mul(remat_tensor **out, remat_tensor *a, remat_tensor *b);
remat_status remat_div(remat_tensor **out, remat_tensor *a, remat_tensor *b);
/* a ^ b elementwise (a > 0 where b is not an integer). */
remat_status remat_pow(remat_tensor **out, remat_tensor *a, remat_tensor *b);

/* ---- scalar variants ------------------------------------------------------------- */
remat_status remat_add_scalar(remat_tensor **out, remat_tensor *a, double s);
remat_status remat_sub_scalar(remat_tensor **out, remat_tensor *a, double s);  /* a - s */
remat_status remat_rsub_scalar(remat_tensor **out, remat_tensor *a, double s); /* s - a */
remat_status remat_mul_scalar(remat_tensor **out, remat_tensor *a, double s);
remat_status remat_div_scalar(remat_tensor **out, remat_tensor *a, double s); /* a / s */
remat_status remat_pow_scalar(remat_tensor **out, remat_tensor *a, double exponent);

/* ---- elementwise unary ----------------------------------------------------------- */
remat_status remat_neg(remat_tensor **out, remat_tensor *a);
remat_status remat_exp(remat_tensor **out, remat_tensor *a);
remat_status remat_log(remat_tensor **out, remat_tensor *a);
remat_status remat_sqrt(remat_tensor **out, remat_tensor *a);
remat_status remat_tanh(remat_tensor **out, remat_tensor *a);
remat_status remat_sigmoid(remat_tensor **out, remat_tensor *a);
remat_status remat_relu(remat_tensor **out, remat_tensor *a);
typedef enum remat_gelu_approx { REMAT_GELU_ERF = 0, REMAT_GELU_TANH = 1 } remat_gelu_approx;
remat_status remat_gelu(remat_tensor **out, remat_tensor *a, remat_gelu_approx approximate);

/* ---- linear algebra ------------------------------------------------------------------
 * matmul: as torch.matmul — 1-D·1-D dot, 2-D·2-D, batched with broadcast
 * batch dims; a 1-D operand is promoted and the added dim removed.
 * linear: x (..., in) · weight (out, in)^T + bias (out) [bias may be NULL]. */
remat_status remat_matmul(remat_tensor **out, remat_tensor *a, remat_tensor *b);
remat_status remat_linear(remat_tensor **out, remat_tensor *x, remat_tensor *weight,
                          remat_tensor *bias);
/* Name of the GEMM backend compiled in ("openblas", "onednn", or "naive"). */
const char *remat_gemm_backend(void);

/* ---- normalisation / activations over a dim ------------------------------------------- */
remat_status remat_softmax(remat_tensor **out, remat_tensor *a, int dim);
remat_status remat_log_softmax(remat_tensor **out, remat_tensor *a, int dim);
/* Normalises over the last n_norm dims (normalized_shape); weight/bias of
 * that shape or NULL. */
remat_status remat_layer_norm(remat_tensor **out, remat_tensor *x, int n_norm, remat_tensor *weight,
                              remat_tensor *bias, double eps);
/* Scaled dot-product attention, as torch's F.scaled_dot_product_attention
 * without dropout: out = softmax(scale · q·kᵀ) · v over the last two dims.
 * q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) → out (..., Tq, Dv); the
 * leading dims must be equal (no broadcasting). causal: query i sees keys
 * j ≤ i only (top-left aligned, as is_causal=True). scale 0 selects
 * 1/sqrt(D); it must be finite. Fused: the (Tq, Tk) scores are never
 * stored, masked blocks are skipped, and backward recomputes them from a
 * saved per-row log-sum-exp (memory O(Tq), not O(Tq·Tk)). Inputs may be
 * views (read in place when their last dim is contiguous). For 4-D inputs
 * (B, H, T, D) the output is stored as (B, T, H, Dv): transpose(out, 1, 2)
 * is contiguous. Fails on mismatched shapes/dtypes with REMAT_ESHAPE /
 * REMAT_EDTYPE; inputs are never modified. */
remat_status remat_attention(remat_tensor **out, remat_tensor *q, remat_tensor *k, remat_tensor *v,
                             bool causal, double scale);
/* Zeroes elements with probability p (drawn from the generator of x's
 * device) and scales the rest by 1/(1-p); identity when !train or p == 0. */
remat_status remat_dropout(remat_tensor **out, remat_tensor *x, double p, bool train);

/* ---- embedding and losses --------------------------------------------------------------- */
/* weight (num, dim), indices i64 of any shape → (*indices.shape, dim). */
remat_status remat_embedding(remat_tensor **out, remat_tensor *weight, remat_tensor *indices);
/* logits (N, C), targets i64 (N) → mean negative log-likelihood (0-dim).
 * Targets equal to ignore_index are skipped (use -100 as PyTorch does). */
remat_status remat_cross_entropy(remat_tensor **out, remat_tensor *logits, remat_tensor *targets,
                                 int64_t ignore_index);
/* mean((a - b)^2) over all elements (0-dim). Shapes must match. */
remat_status remat_mse_loss(remat_tensor **out, remat_tensor *a, remat_tensor *b);

/* ---- reductions -------------------------------------------------------------------------
 * dims: n_dims dims to reduce (n_dims == 0 or dims == NULL: all dims).
 * keepdim keeps reduced dims with size 1. */
remat_status remat_sum(remat_tensor **out, remat_tensor *a, int n_dims, const int *dims,
                       bool keepdim);
remat_status remat_mean(remat_tensor **out, remat_tensor *a, int n_dims, const int *dims,
                        bool keepdim);
/* Max over one dim; indices (i64, may be NULL) receives the argmax.
 * Gradient flows to the first maximal element. */
remat_status remat_max(remat_tensor **out, remat_tensor **indices, remat_tensor *a, int dim,
                       bool keepdim);
/* Sum of all elements (0-dim). */
remat_status remat_sum_all(remat_tensor **out, remat_tensor *a);

/* ---- views and shape ops ------------------------------------------------------------------
 * Views share storage with their input (writes through one are seen in
 * the other). reshape copies only when a view is impossible; view fails
 * with REMAT_ESHAPE then. One dim of shape may be -1. */
remat_status remat_reshape(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape);
remat_status remat_view(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape);
remat_status remat_transpose(remat_tensor **out, remat_tensor *a, int dim0, int dim1);
remat_status remat_permute(remat_tensor **out, remat_tensor *a, int ndim, const int *perm);
/* Elements start, start+step, ... < end of dim (end clamped to the size). */
remat_status remat_slice(remat_tensor **out, remat_tensor *a, int dim, int64_t start, int64_t end,
                         int64_t step);
/* Broadcast view to shape (size-1 dims expand; -1 keeps a size). */
remat_status remat_expand(remat_tensor **out, remat_tensor *a, int ndim, const int64_t *shape);
remat_status remat_contiguous(remat_tensor **out, remat_tensor *a);
remat_status remat_unsqueeze(remat_tensor **out, remat_tensor *a, int dim);
remat_status remat_squeeze(remat_tensor **out, remat_tensor *a, int dim);
/* Concatenates n tensors along dim. */
remat_status remat_cat(remat_tensor **out, int n, remat_tensor *const *tensors, int dim);
/* Splits along dim into pieces of split_size (last may be smaller);
 * writes up to max_out new references to outs and the count to *n_out. */
remat_status remat_split(remat_tensor **outs, int max_out, int *n_out, remat_tensor *a,
                         int64_t split_size, int dim);

/* ---- selection ------------------------------------------------------------------------------ */
/* out = mask ? value : a. mask is i64 (non-zero = true) or float, broadcast
 * to a. */
remat_status remat_masked_fill(remat_tensor **out, remat_tensor *a, remat_tensor *mask,
                               double value);
/* out = cond ? a : b (broadcasting all three). */
remat_status remat_where(remat_tensor **out, remat_tensor *cond, remat_tensor *a, remat_tensor *b);

/* ---- in-place (bump the version counter; not allowed on a leaf that
 * requires grad while grad mode is on — REMAT_ESTATE) ------------------------------------ */
/* a += alpha * b (b broadcast to a). */
remat_status remat_add_(remat_tensor *a, remat_tensor *b, double alpha);
remat_status remat_mul_(remat_tensor *a, remat_tensor *b);
remat_status remat_mul_scalar_(remat_tensor *a, double s);
remat_status remat_relu_(remat_tensor *a);
remat_status remat_zero_(remat_tensor *a);
/* Copies src (broadcast, converted) into a. */
remat_status remat_copy_(remat_tensor *a, remat_tensor *src);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_OPS_H */
