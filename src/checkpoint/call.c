/* src/checkpoint/call.c — running the checkpointed function (ck_call_fn,
 * src/checkpoint/ck.h): shared by the non-reentrant frame (frame.c) and the
 * reentrant function (reentrant.c), for the forward and every
 * recomputation. */
#include "ck.h"

/* An output must be a new reference, as from any remat call: an input
 * handed back without remat_retain (its reference count not up by one per
 * time it is returned), or a tensor the function released, is refused —
 * the caller would release the input's reference twice. Those outputs
 * become NULL without a release; returns REMAT_ECALLBACK. Beyond 64
 * inputs the counts are not kept and only released outputs are checked. */
static remat_status check_outputs(int n_inputs, remat_tensor *const *inputs, const int *refs,
                                  int n_outputs, remat_tensor **outputs) {
    for (int i = 0; i < n_outputs; i++) {
        remat_tensor *o = outputs[i];
        if (!o) continue;
        char b[300];
        if (rm_dead(o)) {
            outputs[i] = NULL;
            return rm_err(REMAT_ECALLBACK,
                          "remat_checkpoint: the checkpointed function's output %d (%s) was "
                          "released before it returned",
                          i, rm_tensor_str(o, b, sizeof b));
        }
        for (int j = 0; refs && j < n_inputs; j++) {
            if (inputs[j] != o) continue;
            int times = 0;
            for (int k = 0; k < n_outputs; k++) times += outputs[k] == o;
            if (atomic_load(&o->refcount) - refs[j] >= times) break;
            for (int k = 0; k < n_outputs; k++)
                if (outputs[k] == o) outputs[k] = NULL;
            rm_tensor_str(o, b, sizeof b);
            return rm_err(REMAT_ECALLBACK,
                          "remat_checkpoint: the checkpointed function returned its input %d "
                          "(%s%s%s) as output %d without a new reference: write "
                          "remat_retain(inputs[%d]) (an output is a new reference, as from "
                          "every remat call)",
                          j, b, o->origin ? " made by " : "", o->origin ? o->origin : "", i, j);
        }
    }
    return REMAT_OK;
}

remat_status ck_call_fn(remat_checkpoint_fn fn, void *user_data, int n_inputs,
                        remat_tensor *const *inputs, int n_outputs, remat_tensor **outputs) {
    for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
    int refs_buf[64], *refs = n_inputs <= 64 ? refs_buf : NULL;
    for (int j = 0; refs && j < n_inputs; j++)
        refs[j] = inputs[j] ? atomic_load(&inputs[j]->refcount) : 0;
    void *scope = rm_scope_suspend();
    remat_clear_error();
    int rc = fn(user_data, inputs, n_inputs, outputs, n_outputs);
    rm_scope_resume(scope);
    if (!rc) rc = check_outputs(n_inputs, inputs, refs, n_outputs, outputs);
    if (rc) {
        for (int i = 0; i < n_outputs; i++) rm_release_p(&outputs[i]);
        if (!remat_last_error()[0])
            rm_err(rc, "remat_checkpoint: the checkpointed function failed (%s)",
                   remat_err_name(rc));
        return rc;
    }
    for (int i = 0; i < n_outputs; i++) rm_adopt(outputs[i]);
    return rc;
}
