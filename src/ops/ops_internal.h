/* src/ops/ops_internal.h — helpers shared by the op files (ops layer). Not
 * installed. */
#ifndef REMAT_OPS_INTERNAL_H
#define REMAT_OPS_INTERNAL_H

#include "autograd/graph.h"
#include "core/intercept.h"
#include "core/kernels.h"

/* ---- the elementwise engine (RM_K_ELEMENTWISE, src/core/kernels.h) ----------------
 * y = op(a, b, c; p) elementwise over y's shape; a/b/c (as many as the op
 * reads, others NULL) are broadcast to y, y may be a strided view. Runs the
 * kernel of y's device and dtype; nothing when an operand has no data (skip
 * mode). `call` names the op in errors (REMAT_EUNSUPPORTED: no kernel). */
remat_status rm_ew_run(const char *call, int op, remat_tensor *y, remat_tensor *a, remat_tensor *b,
                       remat_tensor *c, double p);

/* ---- norms (src/ops/rms_norm.c) ---------------------------------------------------
 * The checks layer_norm and rms_norm share: n_norm (the trailing dims
 * normalised) within 1..x's ndim, eps finite and >= 0 (REMAT_EINVAL naming
 * `call`). */
remat_status rm_check_norm_params(const char *call, const remat_tensor *x, int n_norm, double eps);
/* ---- norms rebuilt from public ops (create_graph backward) -------------------------
 * *y = x (mean(x²) + eps)^-1/2 · w over the last n_norm dims of x (no
 * multiplication when w is NULL): rms_norm's recomposition, and layer_norm's
 * applied to x - mean(x) (src/ops/rms_norm.c). *y NULL on failure. */
remat_status rm_rms_scale(remat_tensor **y, remat_tensor *x, int n_norm, double eps,
                          remat_tensor *w);
/* The remat_*_norm_to calls (src/ops/nn.c): whether the norm's kernel `kid` writes the
 * dtype itself (1: bf16 for an f32 x on a device whose kernel has RM_KF_BF16_Y) or the
 * call is the norm then remat_to_dtype (0: other dtypes, devices); -1 with REMAT_EDTYPE
 * set when dtype is not f32, f64 or bf16. */
int rm_norm_fused_to(const char *call, rm_kernel_id kid, const remat_tensor *x, remat_dtype dtype);
/* *y = remat_to_dtype(*y, dtype), the composed path's cast (a no-op when y has it); on
 * failure *y is released and NULL. */
remat_status rm_norm_round_output(remat_tensor **y, remat_dtype dtype);
/* A norm's gradient g in x's dtype xdt: a bf16 y's widened (what remat_to_dtype's backward
 * does, on the graph under create_graph), else g itself (a new reference either way). */
remat_status rm_norm_grad_as_x(remat_tensor **out, remat_tensor *g, remat_dtype xdt);

/* ---- gradients laid out as split pieces (src/ops/grad_layout.c) -------------------
 * When like[0..n) are the disjoint pieces of one split (one storage, equal shapes, dtypes and
 * strides, offsets o + i·delta, each dim inside a piece's window or stepping over all n of
 * them), outs[i] become views with like[i]'s strides of ONE new buffer (of dtype on device),
 * at offsets i·delta, and *shared is true; otherwise outs is untouched and *shared false (the
 * caller allocates as usual). REMAT_ENOMEM (outs NULL) when the buffer cannot be made. */
remat_status rm_new_grads_like_pieces(remat_tensor **outs, int n, remat_tensor *const *like,
                                      remat_dtype dtype, remat_device device, bool *shared);
/* *out = the tensor of (ndim, shape), contiguous, whose pieces of split_size along dim are
 * pieces[0..n) — a view of their storage — when they are exactly those pieces of one storage
 * (rm_new_grads_like_pieces made them so); else *out NULL (copy them together). REMAT_ENOMEM
 * only when the view's header cannot be made. */
remat_status rm_pieces_whole(remat_tensor **out, int n, remat_tensor *const *pieces, int ndim,
                             const int64_t *shape, int dim, int64_t split_size);

#endif /* REMAT_OPS_INTERNAL_H */
