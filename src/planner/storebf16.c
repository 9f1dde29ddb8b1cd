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
#include "autograd/graph.h"
#include "core/core.h"
#include "planner_internal.h"
#include "sac/sac.h"

static bool convertible(const pl_store_bf16 *c, const remat_tensor *alias) {
    const remat_tensor *orig = rm_node_saving();
    const remat_tensor *t = alias;
    return orig && remat_grad_fn(orig) && t->dtype == REMAT_F32 && t->storage && t->storage->data &&
           (const void *)t->storage != c->skip && t->offset == 0 && remat_is_contiguous(t) &&
           (size_t)remat_numel(t) * sizeof(float) == t->storage->nbytes;
}

/* The handle, its unpack and free are the bf16 hooks' (sac_bf16_*); the pack chooses what
 * is converted and counts it. */
static void *sb_pack(void *ud, remat_tensor *t) {
    pl_store_bf16 *c = ud;
    bool conv = convertible(c, t);
    void *h = sac_bf16_pack(t, conv, "bf16 hooks of a stored stage");
    if (h && conv) {
        size_t b = t->storage->nbytes;
        c->bytes += b;
        if (b > c->largest) c->largest = b;
    }
    return h;
}

remat_saved_hooks pl_store_bf16_hooks(pl_store_bf16 *c, const remat_tensor *input) {
    *c = (pl_store_bf16){.skip = input && input->storage ? (const void *)input->storage : NULL};
    return (remat_saved_hooks){
        .pack = sb_pack, .unpack = sac_bf16_unpack, .free_handle = sac_bf16_free, .user_data = c};
}
