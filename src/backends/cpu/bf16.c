/* src/backends/cpu/bf16.c — bf16 on the cpu: the conversion kernels
 * (f32 → bf16 rounds to nearest, ties to even; NaN stays NaN, infinities
 * stay infinite) and the bf16 kernel of every op that has no native one:
 * its f32 kernel run on f32 copies of the bf16 operands, the outputs
 * rounded back. That costs conversion passes but no accuracy beyond bf16
 * storage; the kernels where bf16 pays (the GEMMs: matmul.c, gemm.c) are
 * native. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

void rm_cpu_f32_to_bf16(const float *restrict x, uint16_t *restrict y, int64_t n) {
#pragma omp parallel for if (n > RM_OMP_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = rm_f32_to_bf16(x[i]);
}

void rm_cpu_bf16_to_f32(const uint16_t *restrict x, float *restrict y, int64_t n) {
#pragma omp parallel for if (n > RM_OMP_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = rm_bf16_to_f32(x[i]);
}

/* An f32 twin of bf16 tensor t: the same offset, shape and strides over a
 * storage of as many f32 elements as t's has bf16 ones, holding t's whole
 * storage converted (so strided and custom-layout outputs keep their
 * layout, and a kernel that reads what it writes reads the old values). */
static int f32_twin(remat_tensor **out, const remat_tensor *t) {
    *out = NULL;
    int64_t n = (int64_t)(t->storage->nbytes / sizeof(uint16_t));
    rm_storage *s = NULL;
    int rc = rm_storage_new(&s, (size_t)n * sizeof(float), t->storage->device, false);
    if (rc) return rc;
    remat_tensor *f = rm_tensor_alloc(s, t->offset, t->ndim, t->shape, t->strides, REMAT_F32);
    rm_storage_release(s);
    if (!f) return rm_err(REMAT_ENOMEM, "out of host memory for a tensor header");
    rm_cpu_bf16_to_f32(t->storage->data, f->storage->data, n);
    *out = f;
    return REMAT_OK;
}

/* Runs the f32 kernel of `id` for the bf16 operands of k (see above). */
static int via_f32(rm_kernel_id id, const rm_kargs *k) {
    rm_kernel_fn f32 = rm_cpu_kernels[id][REMAT_F32];
    if (!f32) return rm_err(REMAT_EUNSUPPORTED, "no bf16 or f32 kernel");
    rm_kargs k2 = *k;
    int rc = REMAT_OK;
    for (int i = 0; i < RM_KERNEL_MAX_IN && !rc; i++)
        if (k->in[i] && k->in[i]->dtype == REMAT_BF16) {
            k2.in[i] = NULL;
            rc = f32_twin(&k2.in[i], k->in[i]);
        }
    for (int i = 0; i < RM_KERNEL_MAX_OUT && !rc; i++)
        if (k->out[i] && k->out[i]->dtype == REMAT_BF16) {
            k2.out[i] = NULL;
            rc = f32_twin(&k2.out[i], k->out[i]);
        }
    if (!rc) rc = f32(&k2);
    for (int i = 0; i < RM_KERNEL_MAX_OUT; i++) {
        if (!k->out[i] || k2.out[i] == k->out[i]) continue;
        if (!rc && k2.out[i])
            rm_cpu_f32_to_bf16(k2.out[i]->storage->data, k->out[i]->storage->data,
                               (int64_t)(k->out[i]->storage->nbytes / sizeof(uint16_t)));
        remat_release(k2.out[i]);
    }
    for (int i = 0; i < RM_KERNEL_MAX_IN; i++)
        if (k->in[i] && k2.in[i] != k->in[i]) remat_release(k2.in[i]);
    return rc;
}

#define RM_BF16_VIA_F32_(id, text)                                                           \
    static int bf16_via_f32_##id(const rm_kargs *k) { return via_f32(RM_K_##id, k); }
RM_KERNEL_LIST(RM_BF16_VIA_F32_)
#undef RM_BF16_VIA_F32_

const rm_kernel_fn rm_cpu_bf16_via_f32[RM_K_COUNT] = {
#define RM_BF16_ROW_(id, text) [RM_K_##id] = bf16_via_f32_##id,
    RM_KERNEL_LIST(RM_BF16_ROW_)
#undef RM_BF16_ROW_
};
