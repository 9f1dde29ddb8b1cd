/* tools/train/train.h — `remat train`. */
#ifndef REMAT_TOOLS_TRAIN_H
#define REMAT_TOOLS_TRAIN_H

#include "cli/args.h"

/* Runs training as configured; returns the process exit status. */
int cmd_train(config *c);

#endif /* REMAT_TOOLS_TRAIN_H */
