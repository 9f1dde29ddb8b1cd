/* src/backends/cuda/optim.cu — the optimizer family on the GPU (src/core/kernels/optim.h):
 * AdamW and SGD, one thread per element, and the sum of squares of global norms.
 *
 * The updates are the cpu loops (src/core/optim_loops.h) operation for operation: the
 * same scalar factors (formed on the host, rm_adamw_factors_make), the same order, each
 * operation rounded to nearest through the _rn intrinsics, which nvcc never contracts into
 * fused multiply-adds (the cpu code has none either): a step on cuda gives the cpu's bits.
 * The sum of squares adds in another order than the cpu's chunks (a grid of partial sums,
 * then one block), so a global norm agrees with the cpu's to rounding; for a given size
 * the order is fixed, so it is the same run to run.
 *
 * The gradient is read times the update's grad_scale (RM_KF_GRAD_SCALE: the mean over
 * micro-batches and the clip), g · scale rounded in g's type: the bits of the elementwise
 * SCALE pass over g the optimizer ran first without the flag, one read and write of g
 * fewer. Without a scale g is read as it is (not times 1: under -ftz that would flush a
 * subnormal g the unscaled update keeps). tests/cuda_emu/optim_emu.cc runs these kernels
 * on the CPU (RMK_EMU: without the launchers). */
#include "optim.h"

#include "kcommon.cuh"

#define RMK_THREADS 256
#define RMK_SUMSQ_MAX_BLOCKS 1024

__global__ void adamw_f32(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                          float *__restrict__ v, int64_t n, rm_adamw_factors f) {
    const bool scaled = f.gscale != 1.0;
    RMK_GRID_LOOP(i, n) {
        float gi = scaled ? __fmul_rn(g[i], f.gscalef) : g[i];
        float mi = __fadd_rn(__fmul_rn(f.b1f, m[i]), __fmul_rn(f.one_m_b1f, gi));
        float vi = __fadd_rn(__fmul_rn(f.b2f, v[i]), __fmul_rn(__fmul_rn(f.one_m_b2f, gi), gi));
        m[i] = mi;
        v[i] = vi;
        float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), f.inv_sqrt_bc2f), f.epsf);
        p[i] = __fsub_rn(__fmul_rn(p[i], f.decayf), __fdiv_rn(__fmul_rn(f.stepf, mi), denom));
    }
}

__global__ void adamw_f64(double *__restrict__ p, const double *__restrict__ g,
                          double *__restrict__ m, double *__restrict__ v, int64_t n,
                          rm_adamw_factors f) {
    const double one_m_b1 = 1.0 - f.b1, one_m_b2 = 1.0 - f.b2;
    const bool scaled = f.gscale != 1.0;
    RMK_GRID_LOOP(i, n) {
        double gi = scaled ? __dmul_rn(g[i], f.gscale) : g[i];
        double mi = __dadd_rn(__dmul_rn(f.b1, m[i]), __dmul_rn(one_m_b1, gi));
        double vi = __dadd_rn(__dmul_rn(f.b2, v[i]), __dmul_rn(__dmul_rn(one_m_b2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        double denom = __dadd_rn(__ddiv_rn(__dsqrt_rn(vi), f.sqrt_bc2), f.eps);
        p[i] = __dsub_rn(__dmul_rn(p[i], f.decay), __ddiv_rn(__dmul_rn(f.step_size, mi), denom));
    }
}

/* round-to-nearest arithmetic per type (no contraction) */
__device__ __forceinline__ float rn_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double rn_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float rn_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double rn_sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float rn_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double rn_mul(double a, double b) { return __dmul_rn(a, b); }

/* gs: the gradient's scale in T; scaled: whether there is one */
template <typename T>
__global__ void sgd_kernel(T *__restrict__ p, const T *__restrict__ g, T *__restrict__ buf,
                           int64_t n, T lr, T mom, T wd, T damp, T gs, bool scaled, bool decay,
                           bool use_buf, bool first, bool nesterov) {
    RMK_GRID_LOOP(i, n) {
        T d = scaled ? rn_mul(g[i], gs) : g[i];
        if (decay) d = rn_add(d, rn_mul(wd, p[i]));
        if (use_buf) {
            T b = first ? d : rn_add(rn_mul(mom, buf[i]), rn_mul(damp, d));
            buf[i] = b;
            d = nesterov ? rn_add(d, rn_mul(mom, b)) : b;
        }
        p[i] = rn_sub(p[i], rn_mul(lr, d));
    }
}

/* part[block] = the block's sum of squares over a grid-stride share of x */
template <typename T>
__global__ void sumsq_parts(const T *__restrict__ x, int64_t n, double *__restrict__ part) {
    __shared__ double sh[32];
    double s = 0;
    RMK_GRID_LOOP(i, n) {
        double xi = (double)x[i];
        s += xi * xi;
    }
    s = rmk_block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

/* *out = the sum of part[0 .. nparts) */
__global__ void sumsq_total(const double *__restrict__ part, int64_t nparts, double *out) {
    __shared__ double sh[32];
    double s = 0;
    for (int64_t i = threadIdx.x; i < nparts; i += blockDim.x) s += part[i];
    s = rmk_block_sum(s, sh);
    if (threadIdx.x == 0) *out = s;
}

#ifndef RMK_EMU /* tests/cuda_emu launches the kernels its own way */
static unsigned blocks_for(int64_t n) {
    int64_t b = (n + RMK_THREADS - 1) / RMK_THREADS;
    if (b < 1) b = 1;
    return b > 65535 ? 65535u : (unsigned)b;
}

extern "C" {

cudaError_t rmk_adamw(int dt, void *p, const void *g, void *m, void *v, int64_t n,
                      const rm_adamw_factors *f, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    if (dt == 1)
        adamw_f64<<<blocks_for(n), RMK_THREADS, 0, s>>>((double *)p, (const double *)g, (double *)m,
                                                        (double *)v, n, *f);
    else if (dt == 0)
        adamw_f32<<<blocks_for(n), RMK_THREADS, 0, s>>>((float *)p, (const float *)g, (float *)m,
                                                        (float *)v, n, *f);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

cudaError_t rmk_sgd(int dt, void *p, const void *g, void *buf, int64_t n, const rm_sgd_kparams *h,
                    cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    const bool decay = h->weight_decay != 0, use_buf = h->momentum != 0;
    const double gs = h->grad_scale != 0 ? h->grad_scale : 1.0;
    if (dt == 1)
        sgd_kernel<double><<<blocks_for(n), RMK_THREADS, 0, s>>>(
            (double *)p, (const double *)g, (double *)buf, n, h->lr, h->momentum, h->weight_decay,
            1.0 - h->dampening, gs, gs != 1.0, decay, use_buf, h->first, h->nesterov);
    else if (dt == 0)
        sgd_kernel<float><<<blocks_for(n), RMK_THREADS, 0, s>>>(
            (float *)p, (const float *)g, (float *)buf, n, (float)h->lr, (float)h->momentum,
            (float)h->weight_decay, (float)(1.0 - h->dampening), (float)gs, gs != 1.0, decay,
            use_buf, h->first, h->nesterov);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

int64_t rmk_sum_squares_parts(int64_t n) {
    int64_t b = (n + RMK_THREADS - 1) / RMK_THREADS;
    if (b < 1) b = 1;
    return b > RMK_SUMSQ_MAX_BLOCKS ? RMK_SUMSQ_MAX_BLOCKS : b;
}

cudaError_t rmk_sum_squares(int dt, const void *x, int64_t n, double *part, double *out,
                            cudaStream_t s) {
    const unsigned nb = (unsigned)rmk_sum_squares_parts(n);
    if (dt == 1) sumsq_parts<double><<<nb, RMK_THREADS, 0, s>>>((const double *)x, n, part);
    else if (dt == 0) sumsq_parts<float><<<nb, RMK_THREADS, 0, s>>>((const float *)x, n, part);
    else return cudaErrorInvalidValue;
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    sumsq_total<<<1, RMK_THREADS, 0, s>>>(part, nb, out);
    return cudaGetLastError();
}
}
#endif /* RMK_EMU */
