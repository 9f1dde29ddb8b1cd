/* src/ops/autocast.c — the driver's autocast step: which inputs of an op
 * are cast, to what, under the thread's autocast state (remat/autocast.h;
 * the categories are the descriptors' `autocast`, docs/autocast.md lists
 * them). A cast is remat_to_dtype, a differentiable op: its backward casts
 * the gradient back, so every input gets its gradient in its own dtype. */
#include "remat/autocast.h"

#include "op.h"

static bool castable(const remat_tensor *t) {
    return t && (t->dtype == REMAT_F32 || t->dtype == REMAT_BF16);
}

/* An input the op's kernel converts itself (rm_op_desc.autocast_keep; the cpu's kernels,
 * another device's that say so: RM_KF_AUTOCAST_KEEP): an f32 one under the
 * lower-precision category, a bf16 one promoted or cast to f32 (remat_add_layer_norm's
 * residual branch). */
static bool kept(const rm_op_desc *op, int i, const remat_tensor *t, int to) {
    const int type = t->storage->device.type;
    if (!(op->autocast_keep >> i & 1u)) return false;
    if (type != REMAT_CPU && !rm_kernel_allows(op->kernel, type, RM_KF_AUTOCAST_KEEP)) return false;
    if (op->autocast == RM_AC_LOWER) return t->dtype == REMAT_F32;
    return (op->autocast == RM_AC_PROMOTE || op->autocast == RM_AC_F32) && t->dtype == REMAT_BF16 &&
           to == REMAT_F32;
}

/* The dtype op's castable inputs are to have, or -1 for "leave them". */
static int target_dtype(const rm_op_desc *op, int n_in, remat_tensor *const *in) {
    const remat_tensor *first = NULL;
    for (int i = 0; i < n_in && !first; i++) first = in[i];
    if (!first) return -1;
    switch ((rm_autocast_kind)op->autocast) {
    case RM_AC_LOWER:
    case RM_AC_F32: {
        int type = first->storage->device.type;
        if (!remat_autocast_enabled(type)) return -1;
        return op->autocast == RM_AC_LOWER ? (int)remat_autocast_dtype(type) : REMAT_F32;
    }
    case RM_AC_PROMOTE: { /* bf16 next to f32 or f64: the widest of them */
        bool bf16 = false;
        int wide = -1;
        for (int i = 0; i < n_in; i++) {
            if (!in[i]) continue;
            if (in[i]->dtype == REMAT_BF16) bf16 = true;
            else if (in[i]->dtype == REMAT_F64) wide = REMAT_F64;
            else if (in[i]->dtype == REMAT_F32 && wide < 0) wide = REMAT_F32;
        }
        return bf16 ? wide : -1;
    }
    case RM_AC_NONE: break;
    }
    return -1;
}

remat_status rm_autocast_inputs(const rm_op_desc *op, int n_in, remat_tensor *const *in,
                                remat_tensor **use, remat_tensor **cast) {
    for (int i = 0; i < n_in; i++) use[i] = in[i], cast[i] = NULL;
    int to = target_dtype(op, n_in, in);
    if (to < 0) return REMAT_OK;
    /* f64 stays f64 under the lower/f32 categories (PyTorch: not eligible) */
    bool promote = op->autocast == RM_AC_PROMOTE;
    for (int i = 0; i < n_in; i++) {
        if (!in[i] || in[i]->dtype == (remat_dtype)to) continue;
        if (!promote && !castable(in[i])) continue;
        if (promote && in[i]->dtype != REMAT_BF16) continue;
        if (kept(op, i, in[i], to)) continue;
        int rc = remat_to_dtype(&cast[i], in[i], (remat_dtype)to);
        if (!rc) {
            use[i] = cast[i];
            /* the cast's reference is ours (released after the op), not the open scope's */
            rm_scope_unhold(cast[i]);
        }
        if (rc) {
            for (int j = 0; j < i; j++) rm_release_p(&cast[j]);
            return rm_err_prefix(rc, op->name);
        }
    }
    return REMAT_OK;
}
