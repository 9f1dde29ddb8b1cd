/* src/backends/cuda/nn.h — launchers of the nn family's CUDA kernels
 * (nn.cu: softmax / log_softmax; layer_norm.cu, rms_norm.cu: the norms, forward and
 * backward; rope.cu) and
 * of fused causal attention (attention.cu). The ABI:
 * src/core/kernels/nn.h and matmul.h. C and C++ clean; conventions as
 * elementwise.h and reduce.h (dt 0 f32, 1 f64; scratch through _ws). */
#ifndef REMAT_CUDA_NN_H
#define REMAT_CUDA_NN_H

#include "core/kernels/matmul.h"
#include "kplan.h"
#include "launch.h"

RM_CUDA_BEGIN_DECLS

/* ---- nn.cu ------------------------------------------------------------------------------------- */
/* y = softmax (log: log_softmax) of x (O, R, I) over R, contiguous. */
cudaError_t rmk_softmax(int dt, const void *x, void *y, int64_t O, int64_t R, int64_t I, bool log,
                        cudaStream_t s);
/* softmax: dx = y * (g - sum_r g * y); log_softmax: dx = g - exp(y) * sum_r g. */
cudaError_t rmk_softmax_bwd(int dt, const void *g, const void *y, void *dx, int64_t O, int64_t R,
                            int64_t I, bool log, cudaStream_t s);
/* ---- layer_norm.cu ------------------------------------------------------------------------------ */
/* x (N, C) -> y (N, C) = (x - mean) * rstd * w + b; mean, rstd (N). w, b (C)
 * or NULL. y's dtype ydt is dt, or 4 (bf16) for an f32 x (dt 0): computed in f32
 * and rounded as it is stored, the bits of the f32 y then the converting copy. */
cudaError_t rmk_layer_norm(int dt, int ydt, const void *x, const void *w, const void *b, void *y,
                           void *mean, void *rstd, int64_t N, int64_t C, double eps,
                           cudaStream_t s);
/* sum (N, C) = x + r, then rmk_layer_norm of sum, in one kernel (the sum normalised from
 * registers). r's dtype rdt is dt, or 4 (bf16, widened) for an f32 x. */
cudaError_t rmk_add_layer_norm(int dt, int rdt, int ydt, const void *x, const void *r, void *sum,
                               const void *w, const void *b, void *y, void *mean, void *rstd,
                               int64_t N, int64_t C, double eps, cudaStream_t s);
/* dx (N, C), dw, db (C) from g (N, C) (each output may be NULL; w may be
 * NULL). g's dtype gdt is dt, or 4 (bf16, widened as it is read) for an f32 x.
 * Scratch for the column sums of dw / db. */
size_t rmk_layer_norm_bwd_ws(int dt, int64_t N, int64_t C);
cudaError_t rmk_layer_norm_bwd(int dt, int gdt, const void *g, const void *x, const void *w,
                               const void *mean, const void *rstd, void *dx, void *dw, void *db,
                               int64_t N, int64_t C, void *ws, cudaStream_t s);

/* ---- rms_norm.cu ------------------------------------------------------------------------------- */
/* x (N, C) -> y (N, C) = x * rstd * w; rstd (N). w (C) or NULL. */
cudaError_t rmk_rms_norm(int dt, const void *x, const void *w, void *y, void *rstd, int64_t N,
                         int64_t C, double eps, cudaStream_t s);
/* dx (N, C), dw (C) from g (N, C) (either output may be NULL; w may be NULL). Scratch for the
 * column sums of dw. */
size_t rmk_rms_norm_bwd_ws(int dt, int64_t N, int64_t C);
cudaError_t rmk_rms_norm_bwd(int dt, const void *g, const void *x, const void *w, const void *rstd,
                             void *dx, void *dw, int64_t N, int64_t C, void *ws, cudaStream_t s);

/* ---- rope.cu ------------------------------------------------------------------------------------ */
/* x, y (R, Tn, 2h), contiguous; pos (Tn) or NULL (0..Tn-1). Rotates pair (i, i + h) of
 * row t by pos[t] * theta^(-i/h) (the opposite angle when inverse). */
cudaError_t rmk_rope(int dt, const void *x, const int64_t *pos, void *y, int64_t R, int64_t Tn,
                     int64_t h, double theta, bool inverse, cudaStream_t s);

/* ---- attention.cu --------------------------------------------------------------------------------- */
/* The shapes of one attention call (src/core/kernels/matmul.h). */
typedef rm_attention_dims rmk_att_dims;
/* y = softmax(scale q kᵀ, causal) v and lse (nb, Tq contiguous) = the rows'
 * log-sum-exp, tiled (flash-attention): scores never leave the chip.
 * Operands: q, k, v, y as rmk_att_operand views (any strides) over `lead`.
 * dt 0 f32, 1 f64, 4 bf16 (q, k, v, y and the gradients bf16; lse and the
 * backward's delta f32; computed in f32). cudaErrorInvalidValue when
 * max(D, Dv) > 256 (rmk_att_head_class). */
cudaError_t rmk_attention(int dt, const rmk_att_dims *d, const rmk_att_lead *lead,
                          const rmk_att_operand *oq, const void *q, const rmk_att_operand *ok,
                          const void *k, const rmk_att_operand *ov, const void *v,
                          const rmk_att_operand *oy, void *y, void *lse, cudaStream_t s);
/* dq, dk, dv (each NULL when not wanted; views like the inputs) from gy and
 * the saved lse: P is recomputed per tile; no atomics (dq by query tiles,
 * dk and dv by key tiles). Scratch: delta = rowsum(gy ∘ y), nb * Tq. */
size_t rmk_attention_bwd_ws(int dt, const rmk_att_dims *d);
cudaError_t rmk_attention_bwd(int dt, const rmk_att_dims *d, const rmk_att_lead *lead,
                              const rmk_att_operand *ops /* q, k, v, y, gy, dq, dk, dv */,
                              const void *const *ptrs /* the same 8, dq/dk/dv may be NULL */,
                              const void *lse, void *ws, cudaStream_t s);

/* ---- attention_mma.cu: f32 and bf16 on the tensor cores -------------------------------------- */
/* Whether rmk_attention(_bwd) of dtype dt and head class hd can run on the tensor cores of
 * the current device (f32 or bf16, hd <= 128, compute capability 8.0 or later, the kernels'
 * shared memory within what a block may opt in to: not f32 at head size 128 on sm_86 /
 * sm_89). rmk_attention takes that path unless REMAT_CUDA_ATTENTION=simt (attention.cu:
 * use_tc). */
bool rmk_attention_tc_ok(int dt, int hd);
/* rmk_attention / rmk_attention_bwd of dtype dt (0 f32, 4 bf16) and head class hd (32, 64,
 * 128) on the tensor cores: bf16 products with P and dS rounded to bf16 as their operands;
 * f32 products as 3xTF32 (f32 accuracy); the rest in f32. */
cudaError_t rmk_attention_tc(int dt, int hd, const rmk_att_dims *d, const rmk_att_lead *lead,
                             const rmk_att_operand *oq, const void *q, const rmk_att_operand *ok,
                             const void *k, const rmk_att_operand *ov, const void *v,
                             const rmk_att_operand *oy, void *y, void *lse, cudaStream_t s);
/* The scratch bytes rmk_attention_tc_bwd takes as ws: delta (nb · Tq f32), and where the
 * build selects the fused backward (RMK_TC_BWD_FUSED) dq's f32 partial sums (nb · Tq · hd)
 * and a counter per query tile. */
size_t rmk_attention_tc_bwd_ws(int dt, int hd, const rmk_att_dims *d);
cudaError_t rmk_attention_tc_bwd(int dt, int hd, const rmk_att_dims *d, const rmk_att_lead *lead,
                                 const rmk_att_operand *ops, const void *const *ptrs,
                                 const void *lse, void *ws, cudaStream_t s);

RM_CUDA_END_DECLS

#endif /* REMAT_CUDA_NN_H */
