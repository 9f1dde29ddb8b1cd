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
/* gelu(x + bias), bias (n) added along x's last dim (..., n): remat_gelu of remat_add(x,
 * bias) as one op, bitwise the same y and x-gradient; bias's gradient is the column sums of
 * x's, summed as remat_linear sums its bias gradient. For an MLP's first layer: the linear
 * without its bias, then this (the GPT-2 block does), so neither the bias nor its gradient
 * costs a pass over the activation of its own. Saves x and bias (references). x f32, f64
 * or bf16; bias x's dtype, or f32 with a bf16 x (autocast's f32 master bias: x + bias is
 * rounded to bf16 before the GELU, as a bf16 add rounds it; the bias's gradient is the
 * f32 sum of the rounded bf16 gradient rows). No autocast category (as gelu).
 * Errors: REMAT_EDTYPE, REMAT_ESHAPE (bias not 1-D of x's last size), REMAT_EINVAL
 * (approximate), REMAT_EUNSUPPORTED (no kernel for the device). */
remat_status remat_bias_gelu(remat_tensor **out, remat_tensor *x, remat_tensor *bias,
                             remat_gelu_approx approximate);
/* SiLU (swish): a · sigmoid(a), as torch.nn.functional.silu; Llama's SwiGLU gate. Saves its
 * input. Runs in its input's dtype (bf16 included; no autocast category, as gelu). */
remat_status remat_silu(remat_tensor **out, remat_tensor *a);

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
/* remat_layer_norm with its output in `dtype`: the values and gradients of
 * remat_to_dtype(remat_layer_norm(...), dtype), bitwise. For a bf16 dtype and an f32 x on
 * the cpu or cuda the norm's kernel rounds each element as it writes it (the cast's
 * rounding), and its backward reads the bf16 gradient, widening each row as it goes: no
 * f32 output is written and read back, no f32 gradient of it is made (the pre-norm block's
 * norm whose only consumer is a linear that autocast would cast to bf16). Another dtype, an x of another
 * dtype, another device: the two ops. The op is still remat_layer_norm (policies,
 * profiles), one node fewer. Autocast: the norm's category (f32), then dtype. *out is a new
 * reference, NULL on failure. Errors: remat_layer_norm's; REMAT_EDTYPE (a dtype that is not
 * f32, f64 or bf16). */
remat_status remat_layer_norm_to(remat_tensor **out, remat_tensor *x, int n_norm,
                                 remat_tensor *weight, remat_tensor *bias, double eps,
                                 remat_dtype dtype);
/* *sum = x + r and *out = remat_layer_norm(*sum, n_norm, weight, bias, eps) as one op: a
 * pre-norm transformer block's residual add and the norm after it (the GPT-2 block's
 * x1 = x + attn, ln_2(x1)). The values of remat_add then remat_layer_norm, and x's and r's
 * gradients the sum's two gradients added, bitwise; the sum is normalised while it is in
 * cache and the norm's backward adds the sum's own gradient as it writes dx, a pass each
 * fewer. Saves sum (the norm's input), weight and the rows' mean and rstd. r has x's shape
 * (no broadcasting) and dtype, or is bf16 with an f32 x (autocast's residual branch, read
 * uncast; its gradient is rounded where it is consumed, as remat_add's). Autocast: the
 * norm's category (f32). Both outputs are new references; on failure both are NULL.
 * Errors: REMAT_EINVAL (sum or out NULL, n_norm, eps), REMAT_EDTYPE, REMAT_ESHAPE. */
remat_status remat_add_layer_norm(remat_tensor **sum, remat_tensor **out, remat_tensor *x,
                                  remat_tensor *r, int n_norm, remat_tensor *weight,
                                  remat_tensor *bias, double eps);
/* remat_add_layer_norm with *out in `dtype`, as remat_layer_norm_to: *sum as
 * remat_add_layer_norm's (x's dtype), *out bitwise remat_to_dtype(out, dtype), gradients
 * bitwise too; rounded in the kernel for a bf16 dtype and an f32 x on the cpu or cuda.
 * Both outputs are new references; on failure both are NULL. Errors: remat_add_layer_norm's,
 * REMAT_EDTYPE as remat_layer_norm_to's. */
remat_status remat_add_layer_norm_to(remat_tensor **sum, remat_tensor **out, remat_tensor *x,
                                     remat_tensor *r, int n_norm, remat_tensor *weight,
                                     remat_tensor *bias, double eps, remat_dtype dtype);
/* Root-mean-square normalisation over the last n_norm dims, as
 * torch.nn.functional.rms_norm and Llama's RMSNorm:
 *   out = x · rsqrt(mean(x²) + eps) · weight
 * weight has the normalised shape (the last n_norm dims of x) or is NULL (no scaling).
 * eps must be finite and >= 0. Saves x, weight and one rstd per row (f32 for a bf16 x).
 * Autocast: the f32 category, as layer_norm (a bf16 x is cast to f32; Hugging Face's
 * LlamaRMSNorm computes in f32 too); a bf16 x outside autocast gives a bf16 out.
 * REMAT_EINVAL: n_norm outside 1..ndim(x), a bad eps; REMAT_ESHAPE: weight's shape;
 * REMAT_EDTYPE / REMAT_EDEVICE: weight's dtype or device differs from x's. */
remat_status remat_rms_norm(remat_tensor **out, remat_tensor *x, int n_norm, remat_tensor *weight,
                            double eps);
/* remat_rms_norm with out in `dtype` (f32, f64 or bf16): bitwise remat_to_dtype of
 * remat_rms_norm's out, and x's and weight's gradients bitwise those of the norm then the
 * cast. For a bf16 dtype and an f32 x on the cpu the norm rounds y as it writes it and its
 * backward widens the bf16 gradient as it reads it (no f32 y, no cast pass either way): a
 * norm whose output feeds one bf16 GEMM under autocast (Llama's final norm before lm_head).
 * Elsewhere it is the norm then the cast. A new reference, NULL on failure. Errors:
 * remat_rms_norm's; REMAT_EDTYPE (a dtype that is not f32, f64 or bf16). */
remat_status remat_rms_norm_to(remat_tensor **out, remat_tensor *x, int n_norm,
                               remat_tensor *weight, double eps, remat_dtype dtype);
/* Scaled dot-product attention, as torch's F.scaled_dot_product_attention
 * without dropout: out = softmax(scale · q·kᵀ) · v over the last two dims.
 * q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) → out (..., Tq, Dv); the
 * leading dims must be equal (no broadcasting), except that k and v may have
 * fewer heads (dim -3) than q: grouped-query and multi-query attention, as
 * SDPA's enable_gqa. With q (B, Hq, T, D) and k, v (B, Hkv, Tk, ·), Hq a
 * multiple of Hkv, query head h uses kv head h / (Hq / Hkv) (PyTorch's
 * repeat_interleave order); the repeat is never materialised, and the
 * gradients of k and v sum over their query group. causal: query i sees
 * keys j ≤ i only (top-left aligned, as is_causal=True; with Tq < Tk that
 * is not what a KV cache needs: see remat_attention_causal). scale 0
 * selects 1/sqrt(D); it must be finite. Fused: the (Tq, Tk) scores are never
 * stored, masked blocks are skipped, and backward recomputes them from a
 * saved per-row log-sum-exp (memory O(Tq), not O(Tq·Tk)). Inputs may be
 * views (read in place when their last dim is contiguous). For 4-D inputs
 * (B, H, T, D) the output is stored as (B, T, H, Dv): transpose(out, 1, 2)
 * is contiguous. Fails on mismatched shapes/dtypes with REMAT_ESHAPE /
 * REMAT_EDTYPE; inputs are never modified. */
remat_status remat_attention(remat_tensor **out, remat_tensor *q, remat_tensor *k, remat_tensor *v,
                             bool causal, double scale);
/* Where the causal mask is anchored when Tq != Tk (torch.nn.attention.bias.CausalVariant). */
typedef enum remat_causal_variant {
    REMAT_CAUSAL_UPPER_LEFT = 0,  /* query i sees keys j ≤ i (is_causal; remat_attention) */
    REMAT_CAUSAL_LOWER_RIGHT = 1, /* query i sees keys j ≤ i + Tk − Tq: the queries are the last
                                   * Tq of Tk positions (decoding with a KV cache). With
                                   * Tq > Tk the first Tq − Tk rows see no key: their output
                                   * and gradients are 0 */
} remat_causal_variant;
/* remat_attention with the causal mask anchored as `variant` says (everything else as
 * remat_attention, grouped-query heads included). REMAT_EINVAL: an unknown variant. */
remat_status remat_attention_causal(remat_tensor **out, remat_tensor *q, remat_tensor *k,
                                    remat_tensor *v, remat_causal_variant variant, double scale);
/* Rotary position embedding as Hugging Face's Llama applies it (rotate_half: the pairs are
 * (i, i + D/2), not interleaved): x (..., T, D) — (B, H, T, D) for attention heads — with D
 * even; positions (T) i64, or NULL for 0..T-1 (a KV cache passes its offset positions).
 * Pair i of position t turns by the angle positions[t] · theta^(-2i/D):
 *   out[.., t, i]       = x[.., t, i] · cos − x[.., t, i + D/2] · sin
 *   out[.., t, i + D/2] = x[.., t, i + D/2] · cos + x[.., t, i] · sin
 * The angles, cosines and sines are computed in double and rounded to x's dtype (f32 for
 * bf16 x, whose rotation runs in f32 and is rounded once; no autocast category). Its
 * gradient is the rotation by the opposite angle; it saves only positions (never x).
 * REMAT_ESHAPE: ndim(x) < 2, D odd, positions not (T); REMAT_EDTYPE: positions not i64;
 * REMAT_EDEVICE: positions on another device; REMAT_EINVAL: theta not finite and > 0. */
remat_status remat_rope(remat_tensor **out, remat_tensor *x, remat_tensor *positions, double theta);
/* Zeroes elements with probability p (drawn from the generator of x's
 * device) and scales the rest by 1/(1-p); identity when !train or p == 0. */
remat_status remat_dropout(remat_tensor **out, remat_tensor *x, double p, bool train);

/* ---- embedding and losses --------------------------------------------------------------- */
/* weight (num, dim), indices i64 of any shape → (*indices.shape, dim). */
remat_status remat_embedding(remat_tensor **out, remat_tensor *weight, remat_tensor *indices);
/* logits (N, C), targets i64 (N) → mean negative log-likelihood (0-dim).
 * Targets equal to ignore_index are skipped (use -100 as PyTorch does). The loss has the
 * logits' dtype; under autocast (the f32 category) bf16 logits give an f32 loss, the values
 * and gradients of the logits cast to f32 first, bitwise (on the cpu and cuda they are read
 * uncast and the node keeps them in bf16). */
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
