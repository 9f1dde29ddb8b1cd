/* src/backends/cuda/attention_kernels.c — the cuda kernels (rm_kernel_fn)
 * of fused attention (RM_K_ATTENTION, RM_K_ATTENTION_BWD in
 * src/core/kernels/matmul.h), launching attention.cu's tiled kernels.
 * Operands are read and written in place through their strides (no
 * copies); lse is the op's own (nb, Tq) contiguous tensor; grouped-query k and
 * v are read through their own strides (rmk_att_operand's hdiv). Head sizes up
 * to 256 (max of D and Dv); larger ones fail with REMAT_EUNSUPPORTED.
 * REMAT_CUDA_ATTENTION=cudnn: bf16 calls go to cuDNN's SDPA first (attention_cudnn.cu)
 * wherever they map to it (att_cudnn_map.h), remat's kernels take every other call and
 * every call cuDNN fails. */
#include "attention_cudnn.h"
#include "kwrap.h"
#include "nn.h"

/* t (..., R, C) as an attention operand over q's leading dims; hdiv: q's heads per head of t
 * (grouped-query k, v and their gradients), else 1. */
static rmk_att_operand att_operand(const remat_tensor *t, int64_t hdiv) {
    rmk_att_operand o = {{0}, 0, 0, hdiv};
    int n = t->ndim;
    for (int d = 0; d < n - 2; d++) o.bst[d] = t->strides[d];
    o.rs = t->strides[n - 2];
    o.cs = t->strides[n - 1];
    return o;
}

static rmk_att_lead att_lead(const remat_tensor *q) {
    rmk_att_lead l = {q->ndim - 2, {0}};
    for (int d = 0; d < q->ndim - 2; d++) l.shape[d] = q->shape[d];
    return l;
}

static rmk_att_dims att_dims(const rm_attention_params *p, const remat_tensor *q,
                             const remat_tensor *k, const remat_tensor *v) {
    return rm_attention_dims_of(p, q->ndim, q->shape, k->shape, v->shape);
}

/* q, k, v, y, dO and the gradients of q's dtype; the lse f64 for f64, else f32. */
static remat_status dtype_check(const rm_kargs *k, int n_in, int lse_in, const char *what) {
    remat_dtype dt = k->in[0]->dtype, ldt = dt == REMAT_F64 ? REMAT_F64 : REMAT_F32;
    for (int i = 0; i < n_in + RM_KERNEL_MAX_OUT; i++) {
        const remat_tensor *t = i < n_in ? k->in[i] : k->out[i - n_in];
        bool lse = i == lse_in || (lse_in < 0 && i == n_in + 1);
        if (t && t->dtype != (lse ? ldt : dt))
            return rm_err(REMAT_EDTYPE, "%s: operand of dtype %s next to %s q", what,
                          remat_dtype_name(t->dtype), remat_dtype_name(dt));
    }
    return REMAT_OK;
}

static remat_status head_check(const rmk_att_dims *d) {
    if (rmk_att_head_class(d->D, d->Dv) == 0)
        return rm_err(REMAT_EUNSUPPORTED,
                      "attention on cuda supports head sizes up to 256 (q has %lld, v has %lld)",
                      (long long)d->D, (long long)d->Dv);
    return REMAT_OK;
}

/* The call through cuDNN (ops and ptrs in rmk_cudnn_att's order; the backward's NULL
 * gradients get packed scratch, written and dropped): true when it ran, false when remat's
 * kernels must take it (not asked for, not mapped, refused or failed: said on stderr by
 * attention_cudnn.cu). */
static bool att_cudnn(rmk_call *c, bool bwd, int dt, const rmk_att_dims *d,
                      const rmk_att_lead *lead, const rmk_att_operand *ops, void **ptrs,
                      void *lse) {
    if (!rmk_cudnn_att_wanted()) return false;
    rmk_cudnn_att a;
    const char *why =
        rmk_cudnn_att_map(&a, c->dev, bwd, dt, d, lead, ops, (const void *const *)ptrs, lse);
    size_t nws = 0;
    if (why) rmk_cudnn_att_skip(why, d);
    if (why || rmk_cudnn_att_prepare(&a, &nws)) return false;
    void *own[RMK_CA_NOPS] = {NULL}, *p[RMK_CA_NOPS] = {NULL};
    bool ok = true;
    for (int i = 0; i < (bwd ? RMK_CA_NOPS : RMK_CA_DO); i++) {
        p[i] = ptrs[i];
        if (!p[i] && ok) {
            p[i] = own[i] = rmk_scratch(c, rmk_cudnn_att_grad_bytes(&a, i));
            ok = p[i] != NULL;
        }
    }
    void *ws = ok ? rmk_scratch(c, nws) : NULL;
    /* out of scratch: remat's kernels need less (their message, if any, is theirs) */
    ok = ws && rmk_cudnn_att_run(&a, p, lse, ws, c->s) == 0;
    rmk_scratch_free(c, ws);
    for (int i = 0; i < RMK_CA_NOPS; i++) rmk_scratch_free(c, own[i]);
    return ok;
}

static remat_status cuda_attention(const rm_kargs *k) {
    remat_tensor *const *in = k->in, *y = k->out[0];
    const rmk_att_dims d = att_dims(k->params, in[0], in[1], in[2]);
    int rc = dtype_check(k, 3, -1, "cuda attention kernel"); /* out[1]: the lse */
    if (!rc) rc = head_check(&d);
    if (rc) return rc;
    const rmk_att_lead lead = att_lead(in[0]);
    const rmk_att_operand oq = att_operand(in[0], 1), ok = att_operand(in[1], d.group),
                          ov = att_operand(in[2], d.group), oy = att_operand(y, 1);
    RMK_ENTER(c, in[0], "cuda attention kernel");
    {
        const rmk_att_operand ops[4] = {oq, ok, ov, oy};
        void *ptrs[4] = {rm_ptr(in[0]), rm_ptr(in[1]), rm_ptr(in[2]), rm_ptr(y)};
        if (att_cudnn(&c, false, rmk_dt(in[0]), &d, &lead, ops, ptrs, rm_ptr(k->out[1])))
            return rmk_leave(&c, cudaSuccess);
    }
    return rmk_leave(&c,
                     rmk_attention(rmk_dt(in[0]), &d, &lead, &oq, rm_ptr(in[0]), &ok, rm_ptr(in[1]),
                                   &ov, rm_ptr(in[2]), &oy, rm_ptr(y), rm_ptr(k->out[1]), c.s));
}

static remat_status cuda_attention_bwd(const rm_kargs *k) {
    remat_tensor *const *in = k->in, *const *g = k->out;
    const rmk_att_dims d = att_dims(k->params, in[0], in[1], in[2]);
    int rc = dtype_check(k, 6, 5, "cuda attention backward kernel"); /* in[5]: the lse */
    if (rc) return rc;
    RMK_ENTER(c, in[0], "cuda attention backward kernel");
    if (d.nb == 0 || d.Tk == 0) { /* nothing to multiply: zeros, as the cpu */
        cudaError_t e = cudaSuccess;
        for (int i = 0; i < 3 && e == cudaSuccess; i++)
            if (g[i]) e = cudaMemsetAsync(g[i]->storage->data, 0, g[i]->storage->nbytes, c.s);
        return rmk_leave(&c, e);
    }
    rc = head_check(&d);
    if (rc) return rmk_leave_rc(&c, rc);
    const rmk_att_lead lead = att_lead(in[0]);
    rmk_att_operand ops[8] = {{{0}, 0, 0, 1}};
    void *ptrs[8] = {NULL};
    for (int i = 0; i < 5; i++) {
        ops[i] = att_operand(in[i], i == 1 || i == 2 ? d.group : 1);
        ptrs[i] = rm_ptr(in[i]);
    }
    for (int i = 0; i < 3; i++) {
        ops[5 + i].hdiv = 1;
        if (g[i]) {
            ops[5 + i] = att_operand(g[i], i ? d.group : 1);
            ptrs[5 + i] = rm_ptr(g[i]);
        }
    }
    if (att_cudnn(&c, true, rmk_dt(in[0]), &d, &lead, ops, ptrs, rm_ptr(in[5])))
        return rmk_leave(&c, cudaSuccess);
    void *ws = rmk_scratch(&c, rmk_attention_bwd_ws(rmk_dt(in[0]), &d));
    if (!ws) return rmk_leave_rc(&c, rm_last_status());
    cudaError_t e = rmk_attention_bwd(rmk_dt(in[0]), &d, &lead, ops, (const void *const *)ptrs,
                                      rm_ptr(in[5]), ws, c.s);
    rmk_scratch_free(&c, ws);
    return rmk_leave(&c, e);
}

void rm_cuda_register_attention(int type) {
    static const rmk_row rows[] = {
        {RM_K_ATTENTION, cuda_attention},
        {RM_K_ATTENTION_BWD, cuda_attention_bwd},
    };
    RMK_REGISTER_ROWS(type, rows);
    /* bf16 (autocast): bf16 storage, f32 arithmetic (attention.cu) */
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        rm_kernel_register(rows[i].id, type, REMAT_BF16, rows[i].fn);
}
