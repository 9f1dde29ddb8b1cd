/* src/backends/cuda/bf16.c — the bf16 kernel of every cuda kernel that has
 * an f32 one and no bf16 one of its own: the f32 kernel run on f32 twins of
 * the bf16 operands, the bf16 outputs rounded back (to nearest, ties to
 * even; select.cu's converting copy), as the cpu's rm_cpu_bf16_via_f32
 * does (src/backends/cpu/bf16.c). So a bf16 op on cuda is the f32 op on the
 * widened values, rounded once: what the cpu gives for the ops it runs that
 * way (rms_norm, rope, dropout, the elementwise engine, ...) and, for its
 * native bf16 kernels (unary, column sums, attention), the same numbers up
 * to f32 summation order.
 *
 * The kernels autocast hands bf16 tensors most have bf16 rows of their own,
 * registered before this file fills the rest: the GEMMs (gemm.c: cuBLAS),
 * column sums (gemm.cu), the elementwise family (gelu, silu, the engine:
 * elementwise.cu), the fused attention (attention.cu) and rope (rope.cu),
 * each computing in f32 on loaded bf16 and rounding once as it stores.
 * What comes here: dropout, rms_norm, layer_norm, softmax, the selects,
 * the reductions and losses called on bf16 directly (autocast casts the
 * inputs of the f32-category ops to f32).
 *
 * A twin covers the elements the tensor can reach in its storage (offset to
 * the last element its strides address), holds their widened values (an
 * output's too: a kernel that accumulates, or writes some elements only,
 * finds the old ones) and keeps the tensor's strides, so strided, broadcast
 * and in-place calls keep their meaning (an in-place call becomes an
 * out-of-place one over two twins, the same result). Twins are tensor
 * storage from the caching allocator (counted, as the cpu's are), freed
 * stream-ordered when the call has been enqueued. */
#include "cuda_backend.h"
#include "kwrap.h"
#include "select.h"

/* Elements of t's storage from its offset to the last one its strides reach
 * (1 for an empty tensor, so that a twin always has memory). */
static int64_t span_of(const remat_tensor *t) {
    int64_t last = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0) return 1;
        last += (t->shape[d] - 1) * (t->strides[d] > 0 ? t->strides[d] : 0);
    }
    return last + 1;
}

/* Converts n contiguous elements between bf16 and f32 on c's stream. */
static remat_status convert_run(rmk_call *c, remat_dtype to, void *y, remat_dtype from,
                                const void *x, int64_t n) {
    rmk_plan pl;
    rmk_plan_flat(&pl, n, 2);
    return rm_cuda_check(rmk_convert((int)to, (int)from, &pl, y, x, c->s), c->what);
}

/* *out: the f32 twin of bf16 t (see the top), holding t's values widened. */
static remat_status f32_twin(rmk_call *c, remat_tensor **out, const remat_tensor *t) {
    *out = NULL;
    int64_t n = span_of(t);
    rm_storage *s = NULL;
    int rc = rm_storage_new(&s, (size_t)n * sizeof(float), t->storage->device, false);
    if (rc) return rc;
    remat_tensor *f = rm_tensor_alloc(s, 0, t->ndim, t->shape, t->strides, REMAT_F32);
    rm_storage_release(s);
    if (!f) return rm_err(REMAT_ENOMEM, "out of host memory for a tensor header");
    rc = remat_numel(t) ? convert_run(c, REMAT_F32, rm_ptr(f), REMAT_BF16, rm_ptr(t), n) : REMAT_OK;
    if (rc) {
        rm_release(f);
        return rc;
    }
    *out = f;
    return REMAT_OK;
}

/* Runs device type `type`'s f32 kernel of `id` for the bf16 operands of k. */
remat_status rm_cuda_bf16_via_f32(rm_kernel_id id, const rm_kargs *k) {
    const remat_tensor *first = k->in[0] ? k->in[0] : k->out[0];
    rm_kernel_fn f32 = rm_kernel_lookup(id, first->storage->device.type, REMAT_F32);
    if (!f32) return rm_err(REMAT_EUNSUPPORTED, "no bf16 or f32 cuda kernel");
    RMK_ENTER(c, first, "cuda bf16 kernel (through f32)");
    rm_kargs k2 = *k;
    int rc = REMAT_OK;
    for (int i = 0; i < RM_KERNEL_MAX_IN && !rc; i++)
        if (k->in[i] && k->in[i]->dtype == REMAT_BF16) {
            k2.in[i] = NULL;
            rc = f32_twin(&c, &k2.in[i], k->in[i]);
        }
    for (int i = 0; i < RM_KERNEL_MAX_OUT && !rc; i++)
        if (k->out[i] && k->out[i]->dtype == REMAT_BF16) {
            k2.out[i] = NULL;
            rc = f32_twin(&c, &k2.out[i], k->out[i]);
        }
    if (!rc) rc = f32(&k2);
    for (int i = 0; i < RM_KERNEL_MAX_OUT; i++) {
        if (!k->out[i] || k2.out[i] == k->out[i]) continue;
        if (!rc && k2.out[i] && remat_numel(k->out[i]))
            rc = convert_run(&c, REMAT_BF16, rm_ptr(k->out[i]), REMAT_F32, rm_ptr(k2.out[i]),
                             span_of(k->out[i]));
        rm_release(k2.out[i]);
    }
    for (int i = 0; i < RM_KERNEL_MAX_IN; i++)
        if (k->in[i] && k2.in[i] != k->in[i]) rm_release(k2.in[i]);
    return rmk_leave_rc(&c, rc);
}

#define RM_CUDA_BF16_VIA_F32_(id, text)                                                            \
    static remat_status cuda_bf16_via_f32_##id(const rm_kargs *k) {                                \
        return rm_cuda_bf16_via_f32(RM_K_##id, k);                                                 \
    }
RM_KERNEL_LIST(RM_CUDA_BF16_VIA_F32_)
#undef RM_CUDA_BF16_VIA_F32_

static const rm_kernel_fn k_via_f32[RM_K_COUNT] = {
#define RM_CUDA_BF16_ROW_(id, text) [RM_K_##id] = cuda_bf16_via_f32_##id,
    RM_KERNEL_LIST(RM_CUDA_BF16_ROW_)
#undef RM_CUDA_BF16_ROW_
};

/* Not the list kernels (ADAMW_LIST, SGD_LIST): they read their tensors from their params,
 * which twins of in[] and out[] cannot stand in for (and parameters are f32 or f64). */
void rm_cuda_register_bf16_via_f32(int type) {
    for (int id = 0; id < RM_K_COUNT; id++)
        if (id != RM_K_ADAMW_LIST && id != RM_K_SGD_LIST &&
            rm_kernel_lookup((rm_kernel_id)id, type, REMAT_F32) &&
            !rm_kernel_lookup((rm_kernel_id)id, type, REMAT_BF16))
            rm_kernel_register((rm_kernel_id)id, type, REMAT_BF16, k_via_f32[id]);
}
