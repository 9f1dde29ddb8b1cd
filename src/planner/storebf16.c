/*
 * src/planner/storebf16.c — a stored stage kept as bf16 (remat_plan_options.lossy): the
 * saved-tensor hooks remat_plan_run puts around the forward of a stage its plan stores as
 * bf16 (remat_plan_stage.store_bf16), and that remat_profile_ops measures the stage under.
 *
 * pack: a saved tensor that the graph made (it has a grad_fn: not a parameter, the chain's
 * input or a constant, whose f32 stays alive whatever the hook stores), f32 with data,
 * contiguous and alone on its whole storage (the rule of the selective checkpoint's
 * SAVE_BF16: converting it frees the f32 storage once the forward drops it, and the copy
 * back has the original's layout), and not sharing the stage input's storage (those bytes
 * belong to the stage before, which keeps them), is stored as a bf16 copy made at once (the
 * conversion of remat_bf16_saved_hooks and SAVE_BF16: to nearest, ties to even); every other
 * saved tensor is kept as it is. unpack: a new f32 copy of the bf16 one. Each save is stored
 * on its own (a tensor two ops save makes two copies, as remat_bf16_saved_hooks and
 * PyTorch's hooks do): the profile measures what the stage then holds, so the planner
 * offers the variant only where it holds less.
 */
#include <stdlib.h>

#include "autograd/graph.h"
#include "core/core.h"
#include "planner_internal.h"
#include "sac/sac.h"

typedef struct sb_handle {
    bool bf16;       /* t is the bf16 copy of an f32 save */
    remat_tensor *t; /* the stored tensor */
} sb_handle;

static bool convertible(const pl_store_bf16 *c, const remat_tensor *alias) {
    const remat_tensor *orig = rm_node_saving();
    const remat_tensor *t = alias;
    return orig && remat_grad_fn(orig) && t->dtype == REMAT_F32 && t->storage && t->storage->data &&
           (const void *)t->storage != c->skip && t->offset == 0 && remat_is_contiguous(t) &&
           (size_t)remat_numel(t) * sizeof(float) == t->storage->nbytes;
}

static void *sb_pack(void *ud, remat_tensor *t) {
    pl_store_bf16 *c = ud;
    sb_handle *h = calloc(1, sizeof *h);
    if (!h) {
        rm_err(REMAT_ENOMEM, "bf16 hooks of a stored stage: out of memory");
        return NULL;
    }
    if (convertible(c, t)) {
        if (sac_bf16_convert(&h->t, t, true)) {
            free(h);
            return NULL;
        }
        h->bf16 = true;
        size_t b = t->storage->nbytes;
        c->bytes += b;
        if (b > c->largest) c->largest = b;
    } else {
        h->t = rm_retain(t);
    }
    return h;
}

/* No use of the hooks' user data here: unpack and free run in the backward, long after the
 * forward's pl_store_bf16 is gone. */
static remat_status sb_unpack(void *ud, void *handle, remat_tensor **out) {
    (void)ud;
    sb_handle *h = handle;
    if (h->bf16) return sac_bf16_convert(out, h->t, false);
    *out = rm_retain(h->t);
    return REMAT_OK;
}

static void sb_free(void *ud, void *handle) {
    (void)ud;
    sb_handle *h = handle;
    if (!h) return;
    rm_release(h->t);
    free(h);
}

remat_saved_hooks pl_store_bf16_hooks(pl_store_bf16 *c, const remat_tensor *input) {
    *c = (pl_store_bf16){.skip = input && input->storage ? (const void *)input->storage : NULL};
    return (remat_saved_hooks){
        .pack = sb_pack, .unpack = sb_unpack, .free_handle = sb_free, .user_data = c};
}
