/* src/models/blocks.h — what the model blocks of src/models/ share: the
 * goto-on-error macro, releasing a scope-owned temporary early, optional
 * tags and dropout. */
#ifndef REMAT_MODELS_BLOCKS_H
#define REMAT_MODELS_BLOCKS_H

#include <stdbool.h>

#include "remat/error.h"
#include "remat/tensor.h"

#define MB_TRY(expr)                                                                               \
    do {                                                                                           \
        if ((rc = (expr)) != REMAT_OK) goto done;                                                  \
    } while (0)

#define mb_err remat_set_error

/* Releases the open scope's reference to *t now; *t = NULL. */
void mb_drop(remat_tensor **t);
/* When on: replaces the scope-owned *t by a remat_tag view named `name`. */
int mb_maybe_tag(bool on, remat_tensor **t, const char *name);
/* When p > 0: replaces the scope-owned *t by dropout(*t, p) (train mode). */
int mb_dropout(double p, remat_tensor **t);

#endif /* REMAT_MODELS_BLOCKS_H */
