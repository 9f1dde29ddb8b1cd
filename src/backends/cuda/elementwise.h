/* src/backends/cuda/elementwise.h — launchers of the elementwise family's
 * CUDA kernels (elementwise.cu; the ABI: src/core/kernels/elementwise.h)
 * and of the shape family's strided copy. C and C++ clean.
 *
 * dt is the dtype: 0 f32, 1 f64 (REMAT_F32 / REMAT_F64). Pointers are
 * device pointers already offset to the tensor's first element; counts and
 * strides are in elements. Each launcher enqueues on `s` and returns
 * cudaGetLastError() (cudaErrorInvalidValue for a dtype or op it does not
 * know); nothing is launched for 0 elements. */
#ifndef REMAT_CUDA_ELEMENTWISE_H
#define REMAT_CUDA_ELEMENTWISE_H

#include "kplan.h"
#include "launch.h"

RM_CUDA_BEGIN_DECLS

/* y[i] = f(x[i]; p), op an rm_unary_op. x, y contiguous with n elements. */
cudaError_t rmk_unary(int dt, int op, double p, const void *x, void *y, int64_t n, cudaStream_t s);
/* dx[i] = g[i] * f'(sv[i]) (sv: the saved x or y; NULL when f' reads none). */
cudaError_t rmk_unary_bwd(int dt, int op, double p, const void *g, const void *sv, void *dx,
                          int64_t n, cudaStream_t s);
/* y = gelu(x + b) (op RM_U_GELU_ERF or _TANH), b (n) added to every row of x (rows, n);
 * dx = g * gelu'(x + b) (g and dx may be one buffer). dt: x's (and g's, y's, dx's) dtype,
 * bdt b's: f32, f64, bf16, or an f32 b with bf16 x (x + b then rounded to bf16). */
cudaError_t rmk_bias_gelu(int dt, int bdt, int op, const void *x, const void *b, void *y,
                          int64_t rows, int64_t n, cudaStream_t s);
cudaError_t rmk_bias_gelu_bwd(int dt, int bdt, int op, const void *g, const void *x, const void *b,
                              void *dx, int64_t rows, int64_t n, cudaStream_t s);
/* m (ceil(n / 8) bytes): bit i % 8 of byte i / 8 = y[i] > 0. */
cudaError_t rmk_relu_mask(int dt, const void *y, uint8_t *m, int64_t n, cudaStream_t s);
/* dx[i] = bit i of m ? g[i] : 0. */
cudaError_t rmk_relu_mask_bwd(int dt, const void *g, const uint8_t *m, void *dx, int64_t n,
                              cudaStream_t s);
/* The elementwise engine: y = f(a, b, c; p) (op an rm_ew_op) over the plan's
 * iteration space; plan operand 0 is y, 1..3 are a, b, c (as many as the op
 * reads; the others may be NULL). y may be any strided view that does not
 * partially overlap an input. */
cudaError_t rmk_elementwise(int dt, int op, double p, const rmk_plan *plan, void *y, const void *a,
                            const void *b, const void *c, cudaStream_t s);
/* Same-dtype strided copy of elements of `es` bytes (1, 2, 4 or 8): plan
 * operand 0 is dst, 1 is src; bit for bit. */
cudaError_t rmk_copy_strided(size_t es, const rmk_plan *plan, void *dst, const void *src,
                             cudaStream_t s);

RM_CUDA_END_DECLS

#endif /* REMAT_CUDA_ELEMENTWISE_H */
