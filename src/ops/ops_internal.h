/* src/ops/ops_internal.h — helpers shared by the op files (ops layer). Not
 * installed. */
#ifndef REMAT_OPS_INTERNAL_H
#define REMAT_OPS_INTERNAL_H

#include "../autograd/graph.h"
#include "../dispatch/intercept.h"
#include "../dispatch/kernels.h"

/* ---- the elementwise engine (RM_K_ELEMENTWISE, src/dispatch/kernels.h) ----------------
 * y = op(a, b, c; p) elementwise over y's shape; a/b/c (as many as the op
 * reads, others NULL) are broadcast to y, y may be a strided view. Runs the
 * kernel of y's device and dtype; nothing when an operand has no data (skip
 * mode). `call` names the op in errors (REMAT_EUNSUPPORTED: no kernel). */
int rm_ew_run(const char *call, int op, remat_tensor *y, remat_tensor *a, remat_tensor *b,
              remat_tensor *c, double p);

/* ---- row kernels (src/ops/nn.c), shared by softmax and cross_entropy ---------------------
 * max of a row; sum of exp(x - sub) written to y; y = exp(x - sub) * scale. */
float rm_row_max_f32(const float *restrict x, int64_t n);
double rm_row_max_f64(const double *restrict x, int64_t n);
float rm_row_expsum_f32(const float *restrict x, float sub, float *restrict y, int64_t n);
double rm_row_expsum_f64(const double *restrict x, double sub, double *restrict y, int64_t n);
void rm_row_exp_scale_f32(const float *restrict x, float sub, float scale, float *restrict y,
                          int64_t n);
void rm_row_exp_scale_f64(const double *restrict x, double sub, double scale,
                          double *restrict y, int64_t n);

#endif /* REMAT_OPS_INTERNAL_H */
