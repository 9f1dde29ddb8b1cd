/*
 * tools/optim.h — AdamW and SGD (with momentum) as direct loops over the
 * parameters' data. State buffers are remat tensors, so they show up in the
 * allocator's accounting like PyTorch's optimizer state does.
 */
#ifndef REMAT_TOOLS_OPTIM_H
#define REMAT_TOOLS_OPTIM_H

#include <stdint.h>

#include "args.h"
#include "models.h"

typedef struct optim {
    optim_kind kind;
    double lr, weight_decay, momentum, beta1, beta2, eps;
    int64_t t;            /* number of updates done */
    int n;
    remat_tensor **m, **v; /* per parameter; v unused by SGD, m only with momentum */
} optim;

int optim_init(optim *o, const config *c, const model *mdl);
void optim_free(optim *o);
/* One update from the parameters' .grad (parameters without a grad are
 * skipped, as PyTorch does). */
int optim_step(optim *o, model *mdl);

#endif /* REMAT_TOOLS_OPTIM_H */
