/* src/backends/cuda/kwrap.h — what the C wrappers of w17k's kernel families
 * (<family>_kernels.c) share: entering a kernel on the operands' device
 * (rm_cuda_begin), leaving it with the launcher's status, scratch, the
 * dtype code of the launchers, and plans built from tensors.
 *
 * A wrapper is an rm_kernel_fn: it runs only when every operand has data,
 * on the device of its first operand (the driver checked that every operand
 * lives there). It enqueues and returns; errors are statuses with the
 * message set (rm_cuda_check), never aborts. */
#ifndef REMAT_CUDA_KWRAP_H
#define REMAT_CUDA_KWRAP_H

#include "cuda_backend.h"
#include "kplan.h"

/* One kernel call: rm_cuda_begin's context (the device made current, its
 * stream), with the device index and stream at hand and what errors say. */
typedef struct rmk_call {
    rm_cuda_ctx ctx;
    int dev;
    cudaStream_t s;
    const char *what;
} rmk_call;

/* Enters the call on t's device. On failure nothing is left to undo. */
static inline int rmk_enter(rmk_call *c, const remat_tensor *t, const char *what) {
    c->what = what;
    int rc = rm_cuda_begin(&c->ctx, what, t);
    c->dev = c->ctx.index;
    c->s = c->ctx.stream;
    if (rc) rm_cuda_end(&c->ctx);
    return rc;
}

/* Declares `rmk_call c` and enters it on t's device; on failure the wrapper returns the
 * status (nothing is left to undo). */
#define RMK_ENTER(c, t, what)                                                                      \
    rmk_call c;                                                                                    \
    do {                                                                                           \
        int rmk_rc_ = rmk_enter(&c, (t), (what));                                                  \
        if (rmk_rc_) return rmk_rc_;                                                               \
    } while (0)

/* Leaves the call: the launcher's error as a status (REMAT_OK for success). */
static inline int rmk_leave(rmk_call *c, cudaError_t e) {
    int rc = rm_cuda_check(e, c->what);
    rm_cuda_end(&c->ctx);
    return rc;
}

/* Leaves the call with a status already set (rc != 0) or REMAT_OK. */
static inline int rmk_leave_rc(rmk_call *c, int rc) {
    rm_cuda_end(&c->ctx);
    return rc;
}

/* Scratch of n bytes on the call's device (at least 1 byte), NULL with the
 * message set on failure. */
static inline void *rmk_scratch(rmk_call *c, size_t n) {
    return rm_cuda_scratch(c->dev, n ? n : 1);
}
static inline void rmk_scratch_free(rmk_call *c, void *p) {
    if (p) rm_cuda_scratch_free(c->dev, p);
}

/* Reads n bytes of device memory back to the host (synchronises the
 * stream: used only where an error must be reported from the data). */
static inline cudaError_t rmk_read_back(rmk_call *c, void *host, const void *dev, size_t n) {
    cudaError_t e = cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, c->s);
    return e != cudaSuccess ? e : cudaStreamSynchronize(c->s);
}

/* The launchers' dtype code: 0 f32, 1 f64, 4 bf16 (remat's codes; only the families that
 * register bf16 rows of their own take 4, the others get f32 twins: bf16.c). */
static inline int rmk_dt(const remat_tensor *t) {
    return t->dtype == REMAT_F64 ? 1 : t->dtype == REMAT_BF16 ? 4 : 0;
}

/* REMAT_OK when every operand of k has dtype dt, else REMAT_EDTYPE naming `what` (kernels
 * whose launchers take one dtype for all operands). */
static inline remat_status rmk_one_dtype(const rm_kargs *k, remat_dtype dt, const char *what) {
    for (int i = 0; i < RM_KERNEL_MAX_IN + RM_KERNEL_MAX_OUT; i++) {
        const remat_tensor *t = i < RM_KERNEL_MAX_IN ? k->in[i] : k->out[i - RM_KERNEL_MAX_IN];
        if (t && t->dtype != dt)
            return rm_err(REMAT_EDTYPE, "%s: operands of dtypes %s and %s (it takes one dtype)",
                          what, remat_dtype_name(dt), remat_dtype_name(t->dtype));
    }
    return REMAT_OK;
}

/* The plan of y = f(x[0..n_in)) with the inputs broadcast to y's shape and
 * y written through its strides (plan operand 0 is y, k + 1 is x[k]). */
static inline void rmk_plan_ew(rmk_plan *p, const remat_tensor *y, remat_tensor *const *x,
                               int n_in) {
    int64_t st[RMK_MAX_OPS][RMK_MAX_DIMS];
    for (int d = 0; d < y->ndim; d++) st[0][d] = y->strides[d];
    for (int k = 0; k < n_in; k++)
        rmk_bcast_strides(x[k]->ndim, x[k]->shape, x[k]->strides, y->ndim, st[k + 1]);
    rmk_plan_build(p, y->ndim, y->shape, 1 + n_in, (const int64_t(*)[RMK_MAX_DIMS])st);
}

/* The plan of a flat contiguous range of n elements for nops operands. */
static inline void rmk_plan_flat(rmk_plan *p, int64_t n, int nops) {
    int64_t st[RMK_MAX_OPS][RMK_MAX_DIMS] = {{0}};
    for (int k = 0; k < nops; k++) st[k][0] = 1;
    rmk_plan_build(p, 1, &n, nops, (const int64_t(*)[RMK_MAX_DIMS])st);
}

/* A family's kernels, registered for f32 and f64 alike (each wrapper
 * switches on the operands' dtype). */
typedef struct rmk_row {
    rm_kernel_id id;
    rm_kernel_fn fn;
} rmk_row;
static inline void rmk_register_rows(int type, const rmk_row *rows, size_t n) {
    for (size_t i = 0; i < n; i++) {
        rm_kernel_register(rows[i].id, type, REMAT_F32, rows[i].fn);
        rm_kernel_register(rows[i].id, type, REMAT_F64, rows[i].fn);
    }
}
#define RMK_REGISTER_ROWS(type, rows)                                                              \
    rmk_register_rows((type), (rows), sizeof(rows) / sizeof((rows)[0]))

#endif /* REMAT_CUDA_KWRAP_H */
