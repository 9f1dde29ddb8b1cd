/* src/backends/cuda/optim.cu — the optimizer family on the GPU (src/core/kernels/optim.h):
 * AdamW and SGD, one thread per element, per tensor and over lists of tensors (a step's
 * parameters in a few launches: the list kernels below), and the sum of squares of global
 * norms.
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
 * and the list launches' packing on the CPU (RMK_EMU: without the launchers). */
#include "optim.h"

#include <string.h>

#include "kcommon.cuh"

#define RMK_THREADS 256
#define RMK_SUMSQ_MAX_BLOCKS 1024

/* One element of AdamW, i of p, g, m, v: the cpu loop's operations in its order, each
 * rounded to nearest. The per-tensor kernels and the list kernels both run it, so an
 * element's bits do not depend on which launched it. scaled: f.gscale != 1. */
__device__ __forceinline__ void adamw_at(float *__restrict__ p, const float *__restrict__ g,
                                         float *__restrict__ m, float *__restrict__ v, int64_t i,
                                         const rm_adamw_factors &f, bool scaled) {
    float gi = scaled ? __fmul_rn(g[i], f.gscalef) : g[i];
    float mi = __fadd_rn(__fmul_rn(f.b1f, m[i]), __fmul_rn(f.one_m_b1f, gi));
    float vi = __fadd_rn(__fmul_rn(f.b2f, v[i]), __fmul_rn(__fmul_rn(f.one_m_b2f, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), f.inv_sqrt_bc2f), f.epsf);
    p[i] = __fsub_rn(__fmul_rn(p[i], f.decayf), __fdiv_rn(__fmul_rn(f.stepf, mi), denom));
}
__device__ __forceinline__ void adamw_at(double *__restrict__ p, const double *__restrict__ g,
                                         double *__restrict__ m, double *__restrict__ v, int64_t i,
                                         const rm_adamw_factors &f, bool scaled) {
    const double one_m_b1 = __dsub_rn(1.0, f.b1), one_m_b2 = __dsub_rn(1.0, f.b2);
    double gi = scaled ? __dmul_rn(g[i], f.gscale) : g[i];
    double mi = __dadd_rn(__dmul_rn(f.b1, m[i]), __dmul_rn(one_m_b1, gi));
    double vi = __dadd_rn(__dmul_rn(f.b2, v[i]), __dmul_rn(__dmul_rn(one_m_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    double denom = __dadd_rn(__ddiv_rn(__dsqrt_rn(vi), f.sqrt_bc2), f.eps);
    p[i] = __dsub_rn(__dmul_rn(p[i], f.decay), __ddiv_rn(__dmul_rn(f.step_size, mi), denom));
}

__global__ void adamw_f32(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                          float *__restrict__ v, int64_t n, rm_adamw_factors f) {
    const bool scaled = f.gscale != 1.0;
    RMK_GRID_LOOP(i, n) adamw_at(p, g, m, v, i, f, scaled);
}

__global__ void adamw_f64(double *__restrict__ p, const double *__restrict__ g,
                          double *__restrict__ m, double *__restrict__ v, int64_t n,
                          rm_adamw_factors f) {
    const bool scaled = f.gscale != 1.0;
    RMK_GRID_LOOP(i, n) adamw_at(p, g, m, v, i, f, scaled);
}

/* round-to-nearest arithmetic per type (no contraction) */
__device__ __forceinline__ float rn_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double rn_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float rn_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double rn_sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float rn_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double rn_mul(double a, double b) { return __dmul_rn(a, b); }

/* SGD's scalars in T as an update uses them (rm_sgd_kparams rounded to T once, on the
 * host, by sgd_make for the per-tensor and the list kernels alike): gs the gradient's
 * scale, scaled whether there is one (neither 0 nor 1), decay whether wd != 0, use_buf
 * whether there is momentum, damp 1 - dampening. */
template <typename T> struct sgd_consts {
    T lr, mom, wd, damp, gs;
    bool scaled, decay, use_buf, first, nesterov;
};
template <typename T> static inline sgd_consts<T> sgd_make(const rm_sgd_kparams *h) {
    const double gs = h->grad_scale != 0 ? h->grad_scale : 1.0;
    sgd_consts<T> c;
    c.lr = (T)h->lr, c.mom = (T)h->momentum, c.wd = (T)h->weight_decay;
    c.damp = (T)(1.0 - h->dampening), c.gs = (T)gs;
    c.scaled = gs != 1.0, c.decay = h->weight_decay != 0, c.use_buf = h->momentum != 0;
    c.first = h->first, c.nesterov = h->nesterov;
    return c;
}

/* One element of SGD, i of p, g (and buf with momentum), as the cpu loop. */
template <typename T>
__device__ __forceinline__ void sgd_at(T *__restrict__ p, const T *__restrict__ g,
                                       T *__restrict__ buf, int64_t i, const sgd_consts<T> &c) {
    T d = c.scaled ? rn_mul(g[i], c.gs) : g[i];
    if (c.decay) d = rn_add(d, rn_mul(c.wd, p[i]));
    if (c.use_buf) {
        T b = c.first ? d : rn_add(rn_mul(c.mom, buf[i]), rn_mul(c.damp, d));
        buf[i] = b;
        d = c.nesterov ? rn_add(d, rn_mul(c.mom, b)) : b;
    }
    p[i] = rn_sub(p[i], rn_mul(c.lr, d));
}

template <typename T>
__global__ void sgd_kernel(T *__restrict__ p, const T *__restrict__ g, T *__restrict__ buf,
                           int64_t n, sgd_consts<T> c) {
    RMK_GRID_LOOP(i, n) sgd_at(p, g, buf, i, c);
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

/* ---- the list kernels: many tensors a launch (multi-tensor apply) -------------------------
 * The optimizer's step over all parameters of a device and dtype (RM_K_ADAMW_LIST,
 * RM_K_SGD_LIST) in a few launches instead of one a parameter (GPT-2 124M has ~150, most of
 * them biases and norms too small to fill the GPU). A launch takes up to RMK_LIST_MAX
 * entries, each a tensor (or a piece of a huge one) with its pointers, its size and the
 * index of its scalars in a table of up to RMK_LIST_SETS distinct ones (the weight-decay
 * groups: tensors with the same hyperparameters share one): all of it one kernel argument
 * of at most 4 KiB (the limit of every CUDA version and GPU), so nothing is uploaded or
 * allocated and the host's table may be gone once the launch returns. The entries' elements
 * are cut into chunks of RMK_LIST_CHUNK, one block a chunk (a grid smaller than the chunks
 * strides over them); each element is updated by the per-tensor kernels' own element
 * function (adamw_at, sgd_at) with its tensor's scalars, so the bits are theirs. */
#ifndef RMK_LIST_CHUNK
#define RMK_LIST_CHUNK 65536 /* elements a block takes at a time */
#endif
#ifndef RMK_LIST_ENTRY_MAX /* an entry's elements: a multiple of the chunk, below 2^32 */
#define RMK_LIST_ENTRY_MAX ((int64_t)RMK_LIST_CHUNK << 14)
#endif
#define RMK_LIST_MAX 96 /* entries a launch */
#define RMK_LIST_SETS 4 /* distinct scalar sets a launch */
#define RMK_LIST_MAX_BLOCKS 65535u

/* A launch's table. S: the scalars of a set (rm_adamw_factors, sgd_consts<T>). */
template <typename S> struct rmk_list_args {
    void *t[4][RMK_LIST_MAX]; /* p, g, s0 (m, buf; NULL without momentum), s1 (v) */
    S sets[RMK_LIST_SETS];
    uint32_t n[RMK_LIST_MAX];  /* the entry's elements */
    uint8_t set[RMK_LIST_MAX]; /* its scalars: sets[set[e]] */
    int entries;
};
static_assert(sizeof(rmk_list_args<rm_adamw_factors>) <= 4096, "a kernel argument of 4 KiB");
static_assert(sizeof(rmk_list_args<sgd_consts<double>>) <= 4096, "a kernel argument of 4 KiB");
static_assert(RMK_LIST_ENTRY_MAX % RMK_LIST_CHUNK == 0 && RMK_LIST_ENTRY_MAX < ((int64_t)1 << 32),
              "entries of whole chunks, sizes in 32 bits");

/* Chunk c of a launch: its entry e and its range [lo, hi) there. A block takes chunks
 * blockIdx.x, + gridDim.x, ... in order, so e and first (entry e's first chunk) only grow:
 * one walk over the entries a block. false past the last chunk. */
template <typename S>
__device__ __forceinline__ bool list_chunk(const rmk_list_args<S> &a, int64_t c, int &e,
                                           int64_t &first, int64_t &lo, int64_t &hi) {
    for (; e < a.entries; e++) {
        const int64_t n = a.n[e], nc = (n + RMK_LIST_CHUNK - 1) / RMK_LIST_CHUNK;
        if (c < first + nc) {
            lo = (c - first) * RMK_LIST_CHUNK;
            hi = n - lo < RMK_LIST_CHUNK ? n : lo + RMK_LIST_CHUNK;
            return true;
        }
        first += nc;
    }
    return false;
}

template <typename T> __global__ void adamw_list(rmk_list_args<rm_adamw_factors> a) {
    int e = 0;
    int64_t first = 0, lo = 0, hi = 0;
    for (int64_t c = blockIdx.x; list_chunk(a, c, e, first, lo, hi); c += gridDim.x) {
        T *p = (T *)a.t[0][e], *m = (T *)a.t[2][e], *v = (T *)a.t[3][e];
        const T *g = (const T *)a.t[1][e];
        const rm_adamw_factors &f = a.sets[a.set[e]];
        const bool scaled = f.gscale != 1.0;
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
            adamw_at(p, g, m, v, i, f, scaled);
    }
}

template <typename T> __global__ void sgd_list(rmk_list_args<sgd_consts<T>> a) {
    int e = 0;
    int64_t first = 0, lo = 0, hi = 0;
    for (int64_t c = blockIdx.x; list_chunk(a, c, e, first, lo, hi); c += gridDim.x) {
        T *p = (T *)a.t[0][e], *buf = (T *)a.t[2][e];
        const T *g = (const T *)a.t[1][e];
        const sgd_consts<T> &k = a.sets[a.set[e]];
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) sgd_at(p, g, buf, i, k);
    }
}

/* Whether two tensors' SGD scalars are the same bits (one set for both). */
template <typename T> static bool same_consts(const sgd_consts<T> &a, const sgd_consts<T> &b) {
    return !memcmp(&a.lr, &b.lr, sizeof(T)) && !memcmp(&a.mom, &b.mom, sizeof(T)) &&
           !memcmp(&a.wd, &b.wd, sizeof(T)) && !memcmp(&a.damp, &b.damp, sizeof(T)) &&
           !memcmp(&a.gs, &b.gs, sizeof(T)) && a.scaled == b.scaled && a.decay == b.decay &&
           a.use_buf == b.use_buf && a.first == b.first && a.nesterov == b.nesterov;
}

/* Host: the launches of the list t[0..n) (es: bytes an element): entries in t's order,
 * a tensor past RMK_LIST_ENTRY_MAX elements cut into several, empty ones left out; a
 * launch when the table is full (RMK_LIST_MAX entries, or a tensor whose scalars are not
 * among RMK_LIST_SETS already there) and one at the end. make(i): tensor i's scalars;
 * same(i, j): whether tensors i and j have the same ones; launch(args, grid) enqueues the
 * kernel on the table and returns its error. Stops at the first error. */
template <typename S, typename Make, typename Same, typename Launch>
static cudaError_t list_run(const rmk_optim_tensor *t, int n, size_t es, Make make, Same same,
                            Launch launch) {
    rmk_list_args<S> a;
    memset(&a, 0, sizeof a);
    int rep[RMK_LIST_SETS]; /* a tensor of each set */
    int nsets = 0;
    int64_t chunks = 0;
    cudaError_t err = cudaSuccess;
    auto flush = [&]() {
        if (a.entries > 0 && err == cudaSuccess)
            err = launch(a, chunks < RMK_LIST_MAX_BLOCKS ? (unsigned)chunks : RMK_LIST_MAX_BLOCKS);
        a.entries = 0, nsets = 0, chunks = 0;
    };
    for (int i = 0; i < n && err == cudaSuccess; i++)
        for (int64_t off = 0; off < t[i].n && err == cudaSuccess; off += RMK_LIST_ENTRY_MAX) {
            if (a.entries == RMK_LIST_MAX) flush();
            int k = 0;
            while (k < nsets && !same(rep[k], i)) k++;
            if (k == RMK_LIST_SETS) flush(), k = 0;
            if (k == nsets) a.sets[k] = make(i), rep[k] = i, nsets++;
            const int64_t len =
                t[i].n - off < RMK_LIST_ENTRY_MAX ? t[i].n - off : RMK_LIST_ENTRY_MAX;
            const size_t at = (size_t)off * es;
            const int e = a.entries++;
            a.t[0][e] = (char *)t[i].p + at;
            a.t[1][e] = (void *)((const char *)t[i].g + at);
            a.t[2][e] = t[i].s0 ? (char *)t[i].s0 + at : NULL;
            a.t[3][e] = t[i].s1 ? (char *)t[i].s1 + at : NULL;
            a.n[e] = (uint32_t)len;
            a.set[e] = (uint8_t)k;
            chunks += (len + RMK_LIST_CHUNK - 1) / RMK_LIST_CHUNK;
        }
    flush();
    return err;
}

/* The AdamW and SGD lists: list_run with the scalars of either (f[i] formed from h[i], so
 * tensors whose h are the same bytes have the same factors). */
static_assert(sizeof(rm_adamw_kparams) == 7 * 8, "no padding: compared as bytes");
template <typename T, typename Launch>
static cudaError_t adamw_list_run(const rmk_optim_tensor *t, int n, const rm_adamw_kparams *h,
                                  const rm_adamw_factors *f, Launch launch) {
    return list_run<rm_adamw_factors>(
        t, n, sizeof(T), [f](int i) { return f[i]; },
        [h](int i, int j) { return !memcmp(&h[i], &h[j], sizeof *h); }, launch);
}
template <typename T, typename Launch>
static cudaError_t sgd_list_run(const rmk_optim_tensor *t, int n, const rm_sgd_kparams *h,
                                Launch launch) {
    return list_run<sgd_consts<T>>(
        t, n, sizeof(T), [h](int i) { return sgd_make<T>(&h[i]); },
        [h](int i, int j) { return same_consts(sgd_make<T>(&h[i]), sgd_make<T>(&h[j])); }, launch);
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
    if (dt == 1)
        sgd_kernel<double><<<blocks_for(n), RMK_THREADS, 0, s>>>(
            (double *)p, (const double *)g, (double *)buf, n, sgd_make<double>(h));
    else if (dt == 0)
        sgd_kernel<float><<<blocks_for(n), RMK_THREADS, 0, s>>>(
            (float *)p, (const float *)g, (float *)buf, n, sgd_make<float>(h));
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

cudaError_t rmk_adamw_list(int dt, const rmk_optim_tensor *t, int n, const rm_adamw_kparams *h,
                           const rm_adamw_factors *f, cudaStream_t s) {
    typedef rmk_list_args<rm_adamw_factors> A;
    if (dt == 1)
        return adamw_list_run<double>(t, n, h, f, [s](const A &a, unsigned grid) {
            adamw_list<double><<<grid, RMK_THREADS, 0, s>>>(a);
            return cudaGetLastError();
        });
    if (dt == 0)
        return adamw_list_run<float>(t, n, h, f, [s](const A &a, unsigned grid) {
            adamw_list<float><<<grid, RMK_THREADS, 0, s>>>(a);
            return cudaGetLastError();
        });
    return cudaErrorInvalidValue;
}

cudaError_t rmk_sgd_list(int dt, const rmk_optim_tensor *t, int n, const rm_sgd_kparams *h,
                         cudaStream_t s) {
    if (dt == 1)
        return sgd_list_run<double>(t, n, h,
                                    [s](const rmk_list_args<sgd_consts<double>> &a, unsigned grid) {
                                        sgd_list<double><<<grid, RMK_THREADS, 0, s>>>(a);
                                        return cudaGetLastError();
                                    });
    if (dt == 0)
        return sgd_list_run<float>(t, n, h,
                                   [s](const rmk_list_args<sgd_consts<float>> &a, unsigned grid) {
                                       sgd_list<float><<<grid, RMK_THREADS, 0, s>>>(a);
                                       return cudaGetLastError();
                                   });
    return cudaErrorInvalidValue;
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
