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

#endif /* REMAT_OPS_INTERNAL_H */
