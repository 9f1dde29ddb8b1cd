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
 *
 * The caller's hooks. Storing a stage as bf16 is the plan's choice, not the caller's: a
 * caller who runs the step under saved-tensor hooks of their own (offload, compression, a
 * checkpoint around remat_plan_run) sees every save of a stored stage pass through them, and
 * must go on seeing them when the plan stores that stage as bf16. Hooks pushed over theirs
 * would hide those saves (only the innermost pair runs, as with PyTorch's
 * saved_tensors_hooks), so these hooks compose instead: when a pair is in force below them
 * (not a disabled entry), what they store — the bf16 copy, or the save as it is — is handed
 * to that pair's pack, and the unpack asks that pair for it back before converting it to
 * f32. The caller's hooks thus see each save once, as the plan stores it (bf16 where it
 * converts), and the stage's gradients are those of the plan without them whenever their
 * unpack returns what their pack got. A handle keeps its own copy of that pair: backward
 * runs after remat_plan_run has returned and the hooks are popped.
 */
#include <stdlib.h>

#include "autograd/graph.h"
#include "core/core.h"
#include "planner_internal.h"
#include "sac/sac.h"

static const char *const k_call = "bf16 hooks of a stored stage";

static bool convertible(const pl_store_bf16 *c, const remat_tensor *alias) {
    const remat_tensor *orig = rm_node_saving();
    const remat_tensor *t = alias;
    return orig && remat_grad_fn(orig) && t->dtype == REMAT_F32 && t->storage && t->storage->data &&
           (const void *)t->storage != c->skip && t->offset == 0 && remat_is_contiguous(t) &&
           (size_t)remat_numel(t) * sizeof(float) == t->storage->nbytes;
}

/* Counts f32 save t, stored as bf16, in c (its bytes, the largest). */
static void count_stored(pl_store_bf16 *c, const remat_tensor *t) {
    size_t b = t->storage->nbytes;
    c->bytes += b;
    if (b > c->largest) c->largest = b;
}

/* The handle, its unpack and free are the bf16 hooks' (sac_bf16_*); the pack chooses what
 * is converted and counts it. */
static void *sb_pack(void *ud, remat_tensor *t) {
    pl_store_bf16 *c = ud;
    bool conv = convertible(c, t);
    void *h = sac_bf16_pack(t, conv, k_call);
    if (h && conv) count_stored(c, t);
    return h;
}

/* ---- composed with the caller's hooks -------------------------------------------------- */
typedef struct sb_composed {
    remat_saved_hooks outer; /* the pair in force below ours when the tensor was saved */
    void *handle;            /* its handle of what we stored */
    bool bf16;               /* what it got is our bf16 copy: unpack converts back */
} sb_composed;

static void *sb_pack_composed(void *ud, remat_tensor *t) {
    pl_store_bf16 *c = ud;
    sb_composed *h = calloc(1, sizeof *h);
    if (!h) {
        rm_err(REMAT_ENOMEM, "%s: out of memory", k_call);
        return NULL;
    }
    h->outer = c->outer;
    h->bf16 = convertible(c, t);
    remat_tensor *b = NULL;
    if (h->bf16 && sac_bf16_convert_for(&b, t, true, k_call)) {
        free(h);
        return NULL;
    }
    /* the caller's pack sets its own error when it fails; rm_node_save names the op */
    h->handle = h->outer.pack(h->outer.user_data, h->bf16 ? b : t);
    rm_release(b);
    if (!h->handle) {
        free(h);
        return NULL;
    }
    if (h->bf16) count_stored(c, t);
    return h;
}

static remat_status sb_unpack_composed(void *ud, void *handle, remat_tensor **out) {
    RM_UNUSED(ud);
    sb_composed *h = handle;
    *out = NULL;
    remat_tensor *t = NULL;
    int rc = h->outer.unpack(h->outer.user_data, h->handle, &t);
    if (rc) return rc;
    if (!h->bf16) {
        *out = t; /* the graph checks it as any unpacked tensor */
        return REMAT_OK;
    }
    if (!t)
        return rm_err(REMAT_ECALLBACK,
                      "%s: the saved-tensor unpack hook in force around the stage returned no "
                      "tensor",
                      k_call);
    if (rm_dead(t)) return rm_released_err(k_call, "tensor from the unpack hook", t);
    rc = sac_bf16_convert_for(out, t, false, k_call);
    rm_release(t);
    return rc;
}

static void sb_free_composed(void *ud, void *handle) {
    RM_UNUSED(ud);
    sb_composed *h = handle;
    if (!h) return;
    if (h->outer.free_handle) h->outer.free_handle(h->outer.user_data, h->handle);
    free(h);
}

remat_saved_hooks pl_store_bf16_hooks(pl_store_bf16 *c, const remat_tensor *input) {
    *c = (pl_store_bf16){.skip = input && input->storage ? (const void *)input->storage : NULL};
    if (rm_saved_hooks_top(&c->outer))
        return (remat_saved_hooks){.pack = sb_pack_composed,
                                   .unpack = sb_unpack_composed,
                                   .free_handle = sb_free_composed,
                                   .user_data = c};
    return (remat_saved_hooks){
        .pack = sb_pack, .unpack = sac_bf16_unpack, .free_handle = sac_bf16_free, .user_data = c};
}
