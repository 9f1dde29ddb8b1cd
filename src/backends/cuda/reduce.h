/* src/backends/cuda/reduce.h — launchers of the reduce family's CUDA
 * kernels (reduce.cu: sum, mean and max over dims; loss.cu: embedding,
 * cross_entropy, mse_loss). The ABI: src/core/kernels/reduce.h. C and
 * C++ clean; conventions as elementwise.h (dt 0 f32, 1 f64; device
 * pointers at the first element; enqueue on s, return cudaGetLastError()).
 *
 * Scratch: a launcher that needs device scratch says how many bytes in its
 * _ws function and takes it as `ws` (the caller's rm_cuda_scratch, at least
 * 16-byte aligned); 0 bytes: ws may be NULL. */
#ifndef REMAT_CUDA_REDUCE_H
#define REMAT_CUDA_REDUCE_H

#include "launch.h"

RM_CUDA_BEGIN_DECLS

/* ---- reduce.cu ------------------------------------------------------------------------------ */
/* One pass of a reduction: x (O, R, I) contiguous -> y (O, I) contiguous,
 * y = (sum over R) / div (div 1: the plain sum; the mean's last pass divides
 * by the count, in the type, as cpu). Sums accumulate in double. */
size_t rmk_sum_ori_ws(int64_t O, int64_t R, int64_t I);
cudaError_t rmk_sum_ori(int dt, const void *x, int64_t O, int64_t R, int64_t I, double div, void *y,
                        void *ws, cudaStream_t s);
/* y, idx (O, I) = max and its first index over R of x (O, R, I); NaN is the
 * maximum (the first NaN wins); R >= 1. */
cudaError_t rmk_max_ori(int dt, const void *x, int64_t O, int64_t R, int64_t I, void *y,
                        int64_t *idx, cudaStream_t s);
/* dx (O, R, I) = 0 except dx[o, idx[o, i], i] = g[o, i]. */
cudaError_t rmk_max_bwd_ori(int dt, const void *g, const int64_t *idx, int64_t O, int64_t R,
                            int64_t I, void *dx, cudaStream_t s);

/* ---- loss.cu ---------------------------------------------------------------------------------- */
/* The first p with idx[p] outside [lo, hi) (and, with has_skip, not equal
 * to skip: cross_entropy's ignore_index) into *first (device, one int64), P
 * when there is none. The caller reads it back (that synchronises). */
cudaError_t rmk_first_bad_index(const int64_t *idx, int64_t P, int64_t lo, int64_t hi,
                                bool has_skip, int64_t skip, int64_t *first, cudaStream_t s);
/* y (P, D) = w[idx[p], :]; indices already checked. */
cudaError_t rmk_embedding(int dt, const void *w, const int64_t *idx, void *y, int64_t P, int64_t D,
                          cudaStream_t s);
/* dw (num, D) = sum over p with idx[p] = r of g[p, :], in increasing p
 * (deterministic: the indices are stably sorted first, no atomics). */
size_t rmk_embedding_bwd_ws(int64_t P, int64_t num);
cudaError_t rmk_embedding_bwd(int dt, const void *g, const int64_t *idx, void *dw, int64_t num,
                              int64_t P, int64_t D, void *ws, size_t ws_bytes, cudaStream_t s);
/* cross_entropy.cu. x (N, C), t (N): lse[n] = logsumexp(x[n, :]); loss (0-dim) = mean over
 * rows with t[n] != ignore of lse[n] - x[n, t[n]] (NaN when there are none);
 * *bad (device, one int64) = the first row whose target is neither ignore
 * nor in [0, C) (N if none: the caller reads it back and fails the call). dt is the
 * dtype of lse and the loss, xdt that of x: dt, or 4 (bf16, widened as it is read) with an
 * f32 dt (autocast's bf16 logits read uncast). */
cudaError_t rmk_cross_entropy(int dt, int xdt, const void *x, const int64_t *t, int64_t ignore,
                              void *lse, void *loss, int64_t *bad, int64_t N, int64_t C,
                              cudaStream_t s);
/* dx (N, C) = g / count * (softmax(x) - onehot(t)), 0 on ignored rows; g a
 * 0-dim device tensor; count (the rows not ignored) is counted into ws. dx has x's dtype
 * xdt (bf16: computed in f32 and rounded as it is stored). */
size_t rmk_cross_entropy_bwd_ws(void);
cudaError_t rmk_cross_entropy_bwd(int dt, int xdt, const void *x, const int64_t *t, int64_t ignore,
                                  const void *lse, const void *g, void *dx, int64_t N, int64_t C,
                                  void *ws, cudaStream_t s);
/* y (0-dim) = mean((a - b)^2) over n elements, differences and sums in
 * double over fixed chunks (NaN for n = 0). */
size_t rmk_mse_ws(int64_t n);
cudaError_t rmk_mse(int dt, const void *a, const void *b, void *y, int64_t n, void *ws,
                    cudaStream_t s);
/* da = 2 g / n * (a - b), db = -da (either NULL; da may be a); g 0-dim. */
cudaError_t rmk_mse_bwd(int dt, const void *a, const void *b, const void *g, void *da, void *db,
                        int64_t n, cudaStream_t s);

RM_CUDA_END_DECLS

#endif /* REMAT_CUDA_REDUCE_H */
