/* src/backends/cuda/optim.h — launchers of the optimizer family's CUDA kernels (optim.cu;
 * the ABI: src/core/kernels/optim.h). C and C++ clean.
 *
 * dt is the dtype: 0 f32, 1 f64. Pointers are device pointers to n contiguous elements.
 * Each launcher enqueues on `s` and returns cudaGetLastError(); nothing is launched for 0
 * elements. */
#ifndef REMAT_CUDA_OPTIM_H
#define REMAT_CUDA_OPTIM_H

#include "core/kernels/optim.h"
#include "launch.h"

RM_CUDA_BEGIN_DECLS

/* AdamW on p, m, v with gradient g read times f->gscale (when not 1): the cpu loop's
 * operations in its order per element (src/core/optim_loops.h), each rounded to nearest
 * (no contraction into FMAs). */
cudaError_t rmk_adamw(int dt, void *p, const void *g, void *m, void *v, int64_t n,
                      const rm_adamw_factors *f, cudaStream_t s);
/* SGD on p (and buf, NULL without momentum) with gradient g read times h->grad_scale (when
 * neither 0 nor 1), as the cpu loop. */
cudaError_t rmk_sgd(int dt, void *p, const void *g, void *buf, int64_t n, const rm_sgd_kparams *h,
                    cudaStream_t s);
/* One tensor of a list: p, g and the state s0 (AdamW's m, SGD's momentum buffer; NULL
 * without momentum), s1 (AdamW's v; NULL for SGD), n contiguous elements each. */
typedef struct rmk_optim_tensor {
    void *p;
    const void *g;
    void *s0, *s1;
    int64_t n;
} rmk_optim_tensor;
/* AdamW on the tensors t[0..n), tensor i with the factors f[i] formed from h[i]
 * (rm_adamw_factors_make; tensors whose h[] are the same bytes share them): every element
 * as rmk_adamw updates it, in launches of up to 96 tensors (a tensor past 2^30 elements
 * counts as several) and 4 distinct h[] (optim.cu, the list kernels). Empty tensors are
 * left out (their pointers are not read). */
cudaError_t rmk_adamw_list(int dt, const rmk_optim_tensor *t, int n, const rm_adamw_kparams *h,
                           const rm_adamw_factors *f, cudaStream_t s);
/* SGD on the tensors t[0..n), tensor i with h[i]: every element as rmk_sgd updates it, in
 * launches as rmk_adamw_list's. */
cudaError_t rmk_sgd_list(int dt, const rmk_optim_tensor *t, int n, const rm_sgd_kparams *h,
                         cudaStream_t s);
/* The number of partial sums rmk_sum_squares needs scratch for (doubles). */
int64_t rmk_sum_squares_parts(int64_t n);
/* *out = sum of x[i]^2 in double: per-block partial sums into part (rmk_sum_squares_parts
 * doubles), then one block adds them in order (the same bits for the same n). */
cudaError_t rmk_sum_squares(int dt, const void *x, int64_t n, double *part, double *out,
                            cudaStream_t s);

RM_CUDA_END_DECLS

#endif /* REMAT_CUDA_OPTIM_H */
