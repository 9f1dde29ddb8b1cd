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
static remat_status f32_twin(remat_tensor **out, const remat_tensor *t) {
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

/* Elements per chunk of the chunked path: 256 KiB of f32 per operand (the
 * buffers sit at the peak of a checkpointed block's backward: gelu's three
 * operands at 1 MiB each were 3 MiB of it), still past RM_OMP_MIN twice so
 * the f32 kernel splits each chunk over the threads. */
#define BF16_CHUNK ((int64_t)64 * 1024)

/* Whether the kernel is purely elementwise over operands that all are
 * contiguous with one element count (so any slice of them is a valid call):
 * then it runs chunk by chunk, through small f32 buffers, instead of on
 * whole f32 copies (which at the peak of a backward cost 2x its bf16
 * operands in f32). */
static bool chunkable(rm_kernel_id id, const rm_kargs *k, int64_t *n) {
    if (id != RM_K_UNARY && id != RM_K_UNARY_BWD && id != RM_K_ELEMENTWISE) return false;
    *n = -1;
    for (int i = 0; i < RM_KERNEL_MAX_IN + RM_KERNEL_MAX_OUT; i++) {
        remat_tensor *t = i < RM_KERNEL_MAX_IN ? k->in[i] : k->out[i - RM_KERNEL_MAX_IN];
        if (!t) continue;
        if (!remat_is_contiguous(t) || (t->dtype != REMAT_BF16 && t->dtype != REMAT_F32))
            return false;
        int64_t m = remat_numel(t);
        if (*n >= 0 && m != *n) return false;
        *n = m;
    }
    return *n > BF16_CHUNK;
}

/* 1-D view of len elements of storage s from element off, dtype dt. */
static remat_tensor *flat(rm_storage *s, int64_t off, int64_t len, remat_dtype dt) {
    int64_t one = 1;
    return rm_tensor_alloc(s, off, 1, &len, &one, dt);
}

static remat_status chunked(rm_kernel_fn f32, const rm_kargs *k, int64_t n) {
    enum { NOPS = RM_KERNEL_MAX_IN + RM_KERNEL_MAX_OUT };
    remat_tensor *ops[NOPS];
    rm_storage *buf[NOPS] = {0};
    int rc = REMAT_OK;
    for (int i = 0; i < NOPS && !rc; i++) {
        ops[i] = i < RM_KERNEL_MAX_IN ? k->in[i] : k->out[i - RM_KERNEL_MAX_IN];
        if (ops[i] && ops[i]->dtype == REMAT_BF16)
            rc =
                rm_storage_new(&buf[i], BF16_CHUNK * sizeof(float), ops[i]->storage->device, false);
    }
    for (int64_t off = 0; off < n && !rc; off += BF16_CHUNK) {
        int64_t len = n - off < BF16_CHUNK ? n - off : BF16_CHUNK;
        rm_kargs c = {.params = k->params};
        for (int i = 0; i < NOPS && !rc; i++) {
            if (!ops[i]) continue;
            remat_tensor *v = buf[i] ? flat(buf[i], 0, len, REMAT_F32)
                                     : flat(ops[i]->storage, ops[i]->offset + off, len, REMAT_F32);
            if (!v) rc = rm_err(REMAT_ENOMEM, "out of host memory for a tensor header");
            else if (buf[i] && i < RM_KERNEL_MAX_IN)
                rm_cpu_bf16_to_f32((const uint16_t *)rm_ptr(ops[i]) + off, buf[i]->data, len);
            if (i < RM_KERNEL_MAX_IN) c.in[i] = v;
            else c.out[i - RM_KERNEL_MAX_IN] = v;
        }
        if (!rc) rc = f32(&c);
        for (int i = RM_KERNEL_MAX_IN; i < NOPS && !rc; i++)
            if (buf[i]) rm_cpu_f32_to_bf16(buf[i]->data, (uint16_t *)rm_ptr(ops[i]) + off, len);
        for (int i = 0; i < RM_KERNEL_MAX_IN; i++) remat_release(c.in[i]);
        for (int i = 0; i < RM_KERNEL_MAX_OUT; i++) remat_release(c.out[i]);
    }
    for (int i = 0; i < NOPS; i++) rm_storage_release(buf[i]);
    return rc;
}

/* Runs the f32 kernel of `id` for the bf16 operands of k (see above). */
static remat_status via_f32(rm_kernel_id id, const rm_kargs *k) {
    rm_kernel_fn f32 = rm_cpu_kernels[id][REMAT_F32];
    if (!f32) return rm_err(REMAT_EUNSUPPORTED, "no bf16 or f32 kernel");
    int64_t n;
    if (chunkable(id, k, &n)) return chunked(f32, k, n);
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

#define RM_BF16_VIA_F32_(id, text)                                                                 \
    static remat_status bf16_via_f32_##id(const rm_kargs *k) { return via_f32(RM_K_##id, k); }
RM_KERNEL_LIST(RM_BF16_VIA_F32_)
#undef RM_BF16_VIA_F32_

const rm_kernel_fn rm_cpu_bf16_via_f32[RM_K_COUNT] = {
#define RM_BF16_ROW_(id, text) [RM_K_##id] = bf16_via_f32_##id,
    RM_KERNEL_LIST(RM_BF16_ROW_)
#undef RM_BF16_ROW_
};
