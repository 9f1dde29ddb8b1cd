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

#endif /* REMAT_OPS_INTERNAL_H */
