/* src/ops/registry.h — the op registry: every public op's descriptor, by
 * the name policies, traces and reports see (the name rm_op_begin is
 * given). */
#ifndef REMAT_OPS_REGISTRY_H
#define REMAT_OPS_REGISTRY_H

#include <stddef.h>

#include "op.h"

/* Number of registered ops; names are unique. */
int rm_op_count(void);
/* Name of op i (0 <= i < rm_op_count()), e.g. "remat_linear". */
const char *rm_op_name(int i);
/* Descriptor of op i (NULL for i out of range). */
const rm_op_desc *rm_op_desc_at(int i);
/* Index of the op named `name`, or -1. */
int rm_op_find(const char *name);
/* Writes the up to `k` registered names closest to `name` (edit distance),
 * comma-separated, into buf (always terminated). */
void rm_op_closest(const char *name, int k, char *buf, size_t n);

#endif /* REMAT_OPS_REGISTRY_H */
