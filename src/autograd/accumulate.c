/* src/autograd/accumulate.c — the observer of leaf gradient accumulation
 * installed on this thread (accumulate.h): the engine reports each
 * accumulation into a leaf's .grad, the graph each recorded node (a
 * progress point). It lives below both, so neither calls up into the other. */
#include <stddef.h>

#include "accumulate.h"
#include "core/core.h"

static RM_TLS rm_accumulate_observer_fn tls_acc_fn;
static RM_TLS void *tls_acc_ud;

void rm_set_accumulate_observer(rm_accumulate_observer_fn fn, void *user_data,
                                rm_accumulate_observer_fn *prev_fn, void **prev_ud) {
    if (prev_fn) *prev_fn = tls_acc_fn;
    if (prev_ud) *prev_ud = tls_acc_ud;
    tls_acc_fn = fn;
    tls_acc_ud = user_data;
}

void rm_accumulate_notify(remat_tensor *leaf) {
    if (tls_acc_fn) tls_acc_fn(tls_acc_ud, leaf);
}

void rm_progress_point(void) { rm_accumulate_notify(NULL); }
