/* src/backends/cuda/rng.c — the random family on cuda: dropout's kernels
 * (RM_K_DROPOUT, RM_K_DROPOUT_BWD; operands contiguous, rm_dropout_params).
 * The op draws key and counter from the tensor's device generator
 * (rm_rng_reserve: remat's Philox state per cuda index, seeded like cpu's),
 * and the kernel makes the cpu kernel's keep bits from them (src/core/philox.h): the
 * same seed and offset give the same mask on cpu and cuda. */
#include <math.h>

#include "cuda_backend.h"
#include "random.h"

/* keep iff (word >> 8) >= ceil(p · 2^24), as src/backends/cpu/nn.c */
static uint32_t keep_threshold(double p) {
    double t = ceil(p * 16777216.0);
    return t > 16777216.0 ? 16777217u : (uint32_t)t;
}

static void *data_or_null(const remat_tensor *t) { return t ? rm_ptr(t) : NULL; }

/* ST: the storage type (memset sizes), T: the scale's (what the kernel computes in) */
#define DROPOUT_FNS(ST, T, SFX)                                                                    \
    static remat_status cuda_dropout_##SFX(const rm_kargs *k) {                                    \
        const rm_dropout_params *p = k->params;                                                    \
        int64_t n = remat_numel(k->in[0]);                                                         \
        uint8_t *bits = data_or_null(k->out[1]);                                                   \
        rm_cuda_ctx c;                                                                             \
        int rc = rm_cuda_begin(&c, "dropout", k->in[0]);                                           \
        if (!rc && p->p >= 1.0) { /* everything dropped, nothing drawn (as the cpu kernel) */      \
            rc = rm_cuda_check(                                                                    \
                cudaMemsetAsync(rm_ptr(k->out[0]), 0, (size_t)n * sizeof(ST), c.stream),           \
                "dropout");                                                                        \
            if (!rc && bits)                                                                       \
                rc = rm_cuda_check(cudaMemsetAsync(bits, 0, (size_t)(n + 7) / 8, c.stream),        \
                                   "dropout");                                                     \
        } else if (!rc) {                                                                          \
            rc =                                                                                   \
                rm_cuda_check(rm_cuda_dropout_##SFX(rm_ptr(k->in[0]), rm_ptr(k->out[0]), bits, n,  \
                                                    keep_threshold(p->p), (T)(1.0 / (1.0 - p->p)), \
                                                    p->key[0], p->key[1], p->counter, c.stream),   \
                              "dropout");                                                          \
        }                                                                                          \
        rm_cuda_end(&c);                                                                           \
        return rc;                                                                                 \
    }                                                                                              \
    static remat_status cuda_dropout_bwd_##SFX(const rm_kargs *k) {                                \
        const rm_dropout_params *p = k->params;                                                    \
        rm_cuda_ctx c;                                                                             \
        int rc = rm_cuda_begin(&c, "dropout backward", k->in[0]);                                  \
        if (!rc)                                                                                   \
            rc = rm_cuda_check(rm_cuda_dropout_bwd_##SFX(                                          \
                                   rm_ptr(k->in[0]), rm_ptr(k->in[1]), (T)(1.0 / (1.0 - p->p)),    \
                                   rm_ptr(k->out[0]), remat_numel(k->out[0]), c.stream),           \
                               "dropout backward");                                                \
        rm_cuda_end(&c);                                                                           \
        return rc;                                                                                 \
    }
DROPOUT_FNS(float, float, f32)
DROPOUT_FNS(double, double, f64)
DROPOUT_FNS(uint16_t, float, bf16)

void rm_cuda_register_random(int device_type) {
    rm_kernel_register(RM_K_DROPOUT, device_type, REMAT_F32, cuda_dropout_f32);
    rm_kernel_register(RM_K_DROPOUT, device_type, REMAT_F64, cuda_dropout_f64);
    rm_kernel_register(RM_K_DROPOUT_BWD, device_type, REMAT_F32, cuda_dropout_bwd_f32);
    rm_kernel_register(RM_K_DROPOUT_BWD, device_type, REMAT_F64, cuda_dropout_bwd_f64);
    rm_kernel_register(RM_K_DROPOUT, device_type, REMAT_BF16, cuda_dropout_bf16);
    rm_kernel_register(RM_K_DROPOUT_BWD, device_type, REMAT_BF16, cuda_dropout_bwd_bf16);
}
