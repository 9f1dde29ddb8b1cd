/* src/sac/intercept.c — the interception point around every public op.
 *
 * Ops are plain C functions, so there is no dispatcher to hook into (P
 * puts selective checkpointing in a TorchDispatchMode below autograd).
 * Instead every public op brackets its body with rm_op_begin/rm_op_end
 * (RM_OP_RUN1/RM_OP_RUN0 in internal.h) and saves through rm_op_save. The
 * bracket keeps, per thread, the op nesting depth and the name and call
 * site of the running top-level op (the residual report reads them), and
 * hands top-level ops to the innermost selective-checkpoint region whose
 * context is entered. Without a region the cost is a few thread-local
 * loads and stores per op. */
#include <string.h>

#include "sac.h"

RM_TLS sac_region *sac_tls_region;
RM_TLS sac_region *sac_tls_saver;

static RM_TLS int tls_depth;
static RM_TLS const char *tls_op;
static RM_TLS void *tls_site;

int rm_op_begin(rm_op_frame *f, const char *op, int n_in, remat_tensor *const *inputs, void *site,
                const char *tag) {
    memset(f, 0, sizeof *f);
    f->top = tls_depth == 0;
    if (f->top) {
        f->prev_op = tls_op;
        f->prev_site = tls_site;
        tls_op = op;
        tls_site = site;
    }
    sac_region *r = sac_tls_region;
    bool intercept = r && sac_wants(r, tls_depth);
    /* Counted before the region runs: anything the region itself calls
     * (copies for offloading) is nested and never intercepted. */
    tls_depth++;
    f->counted = true;
    if (intercept) {
        int rc = sac_begin(r, f, op, n_in, inputs, tag);
        if (rc) {
            f->counted = false;
            f->region = NULL;
            tls_depth--;
            if (f->top) {
                tls_op = f->prev_op;
                tls_site = f->prev_site;
            }
            return rc;
        }
    }
    return REMAT_OK;
}

void rm_op_end(rm_op_frame *f, int status, int n_out, remat_tensor *const *outs) {
    if (!f->counted) return;
    if (f->region) sac_end(f->region, f, status, n_out, outs);
    tls_depth--;
    f->counted = false;
    if (f->top) {
        tls_op = f->prev_op;
        tls_site = f->prev_site;
    }
}

int rm_op_save(remat_node *n, int slot, remat_tensor *t) {
    sac_region *r = sac_tls_saver;
    if (r) return sac_save(r, n, slot, t);
    return rm_node_save(n, slot, t);
}

const char *rm_op_current(void **site) {
    if (site) *site = tls_depth > 0 ? tls_site : NULL;
    return tls_depth > 0 ? tls_op : NULL;
}

int rm_op_depth(void) { return tls_depth; }
