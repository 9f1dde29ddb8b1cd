/* src/sac/sac.h — private declarations shared by the selective-checkpointing
 * sources: the op interception point (intercept.c) hands top-level ops of
 * an active region to the region (selective.c); policies live in policy.c. */
#ifndef REMAT_SAC_H
#define REMAT_SAC_H

#include "../internal.h"
#include "remat/selective.h"

typedef struct sac_region sac_region;

/* The innermost region whose context is entered on this thread (NULL if
 * none) and the region handling the saves of the running top-level op. */
extern RM_TLS sac_region *sac_tls_region;
extern RM_TLS sac_region *sac_tls_saver;

/* Whether region r intercepts an op starting at nesting depth `depth`. */
bool sac_wants(sac_region *r, int depth);
/* Called by rm_op_begin for a top-level op of r (depth already counts the
 * op). Sets f->region when the op is to be handled at rm_op_end. */
int sac_begin(sac_region *r, rm_op_frame *f, const char *op, int n_in,
              remat_tensor *const *inputs, const char *tag);
void sac_end(sac_region *r, rm_op_frame *f, int status, int n_out, remat_tensor *const *outs);
int sac_save(sac_region *r, remat_node *n, int slot, remat_tensor *t);

/* policy values */
static inline bool sac_is_save(int p) {
    return p == REMAT_MUST_SAVE || p == REMAT_PREFER_SAVE || p == REMAT_MUST_CPU_OFFLOAD ||
           p == REMAT_PREFER_CPU_OFFLOAD;
}
static inline bool sac_is_offload(int p) {
    return p == REMAT_MUST_CPU_OFFLOAD || p == REMAT_PREFER_CPU_OFFLOAD;
}
static inline bool sac_valid_policy(int p) {
    return p >= REMAT_MUST_SAVE && p <= REMAT_PREFER_CPU_OFFLOAD;
}

#endif
