/* src/models/blocks.c — helpers the model blocks share (blocks.h). */
#include "blocks.h"

#include "remat/ops.h"
#include "remat/selective.h"

void mb_drop(remat_tensor **t) {
    if (*t) remat_release(remat_scope_keep(*t));
    *t = NULL;
}

int mb_maybe_tag(bool on, remat_tensor **t, const char *name) {
    if (!on) return REMAT_OK;
    remat_tensor *v = NULL;
    int rc = remat_tag(&v, *t, name);
    if (rc) return rc;
    mb_drop(t);
    *t = v;
    return REMAT_OK;
}

int mb_dropout(double p, remat_tensor **t) {
    if (p <= 0) return REMAT_OK;
    remat_tensor *d = NULL;
    int rc = remat_dropout(&d, *t, p, true);
    if (rc) return rc;
    mb_drop(t);
    *t = d;
    return REMAT_OK;
}
