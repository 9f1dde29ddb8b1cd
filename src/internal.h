/* src/internal.h — the private headers of the core, autograd and ops
 * layers at once, for the layers above them (checkpoint, selective,
 * planner), tests and benches, and for op files not yet on the driver.
 * Each layer has its own:
 *   src/core.h                 core: errors, tensors, allocator, skip mode, checks
 *   src/dispatch/kernels.h     core: the kernel ABI and table
 *   src/dispatch/intercept.h   core: the interception bracket, the op observer
 *   src/autograd/graph.h       autograd: nodes, saved tensors, edges
 *   src/dispatch/dispatch.h    ops: op descriptors and their driver
 *   src/ops/ops_internal.h     ops: helpers shared by the op files
 *   src/checkpoint/recompute.h checkpoint: the running recomputation
 * The symbols a layer uses must come from its own layer or below
 * (scripts/check_layers.sh checks the objects). docs/ops.md explains how an
 * op is written. Not installed. */
#ifndef REMAT_INTERNAL_H
#define REMAT_INTERNAL_H

#include "autograd/graph.h"
#include "core.h"
#include "dispatch/dispatch.h"
#include "dispatch/intercept.h"
#include "dispatch/kernels.h"
#include "ops/ops_internal.h"

#endif /* REMAT_INTERNAL_H */
