/* src/sac/compress.c — saved-tensor hooks that store saved activations
 * compactly: f32 → bf16 (lossy, round to nearest even). The device → host
 * offload hooks are src/sac/offload.c. See remat/compress.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "remat/compress.h"
#include "sac.h"

/* ---- conversions ----------------------------------------------------------------------- */
/* Converts t (dtype `from`, any strides, with data) into a new contiguous tensor of dtype
 * `to` on t's device: the device's converting copy (rm_copy_into: the cpu's vectorised
 * f32 <-> bf16, cuda's packed kernel; to nearest, ties to even, both). Not skip-mode aware
 * on purpose: saved values must be real even while a recomputation runs in skip mode. */
static remat_status convert(remat_tensor **out, remat_tensor *t, remat_dtype from, remat_dtype to,
                            const char *call) {
    *out = NULL;
    int rc = rm_check_tensor(call, "t", t);
    if (rc) return rc;
    char b[200];
    if (t->dtype != from)
        return rm_err(REMAT_EDTYPE, "%s: t must be %s, got %s", call, remat_dtype_name(from),
                      rm_tensor_str(t, b, sizeof b));
    if (!t->storage->data)
        return rm_err(REMAT_ESTATE, "%s: t %s has no data (made in skip mode)", call,
                      rm_tensor_str(t, b, sizeof b));
    bool prev = rm_set_skip_mode(false);
    remat_tensor *y = NULL;
    rc = rm_new_output(&y, t->ndim, t->shape, to, t->storage->device);
    if (!rc) rc = rm_copy_into(y, t);
    rm_set_skip_mode(prev);
    if (rc) {
        rm_release(y);
        return rm_err_prefix(rc, call);
    }
    *out = y;
    return REMAT_OK;
}

/* remat_to_bf16 and remat_bf16_to_f32: convert, then hand the result out
 * (*out NULL on failure). */
static remat_status convert_out(remat_tensor **out, remat_tensor *t, remat_dtype from,
                                remat_dtype to, const char *call) {
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    remat_tensor *y;
    int rc = convert(&y, t, from, to, call);
    if (rc) {
        *out = NULL;
        return rc;
    }
    return rm_hand_out(out, y);
}

remat_status remat_to_bf16(remat_tensor **out, remat_tensor *t) {
    return convert_out(out, t, REMAT_F32, REMAT_BF16, "remat_to_bf16");
}

remat_status remat_bf16_to_f32(remat_tensor **out, remat_tensor *t) {
    return convert_out(out, t, REMAT_BF16, REMAT_F32, "remat_bf16_to_f32");
}

remat_status sac_bf16_convert(remat_tensor **out, remat_tensor *t, bool to_bf16) {
    return sac_bf16_convert_for(out, t, to_bf16, "selective checkpoint (SAVE_BF16)");
}

remat_status sac_bf16_convert_for(remat_tensor **out, remat_tensor *t, bool to_bf16,
                                  const char *call) {
    return to_bf16 ? convert(out, t, REMAT_F32, REMAT_BF16, call)
                   : convert(out, t, REMAT_BF16, REMAT_F32, call);
}

/* ---- the hooks ------------------------------------------------------------------------------ */
/* A handle of the bf16 hooks (these and the planner's stored stages, storebf16.c): the
 * stored tensor, which is the bf16 copy of an f32 save or the save as it is. */
typedef struct packed {
    bool bf16;
    const char *call; /* a literal: errors of the conversions name it */
    remat_tensor *t;
} packed;

void *sac_bf16_pack(remat_tensor *t, bool to_bf16, const char *call) {
    packed *p = calloc(1, sizeof *p);
    if (!p) {
        rm_err(REMAT_ENOMEM, "%s: out of memory", call);
        return NULL;
    }
    p->call = call;
    if (to_bf16) {
        if (convert(&p->t, t, REMAT_F32, REMAT_BF16, call)) {
            free(p);
            return NULL;
        }
        p->bf16 = true;
    } else {
        p->t = rm_retain(t);
    }
    return p;
}

remat_status sac_bf16_unpack(void *ud, void *handle, remat_tensor **out) {
    RM_UNUSED(ud);
    packed *p = handle;
    if (p->bf16) return convert(out, p->t, REMAT_BF16, REMAT_F32, p->call);
    *out = rm_retain(p->t);
    return REMAT_OK;
}

void sac_bf16_free(void *ud, void *handle) {
    RM_UNUSED(ud);
    packed *p = handle;
    if (!p) return;
    rm_release(p->t);
    free(p);
}

static void *bf16_pack(void *ud, remat_tensor *t) {
    int64_t min_numel = (int64_t)(intptr_t)ud;
    return sac_bf16_pack(t,
                         t->dtype == REMAT_F32 && t->storage->data && remat_numel(t) >= min_numel,
                         "bf16 saved-tensor hooks");
}

void remat_bf16_saved_hooks(remat_saved_hooks *out, int64_t min_numel) {
    if (!out) return;
    out->pack = bf16_pack;
    out->unpack = sac_bf16_unpack;
    out->free_handle = sac_bf16_free;
    out->user_data = (void *)(intptr_t)(min_numel > 0 ? min_numel : 0);
}
