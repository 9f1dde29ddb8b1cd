/* src/core/intercept.c — the interception bracket around every op.
 *
 * The bracket keeps, per thread, the op nesting depth and the name and
 * call site of the running top-level op (the residual report reads them),
 * and hands ops to the thread's interceptor (PyTorch puts selective
 * checkpointing in a TorchDispatchMode below autograd; here the
 * selective-checkpoint region installs itself with rm_interceptor_set when
 * its context is entered). The op observer (checkpoint debug traces) sees
 * every op's name as it starts (rm_op_enter). Without an interceptor the
 * cost is a few thread-local loads and stores per op. */
#include <string.h>

#include "intercept.h"

static RM_TLS rm_icpt_ref tls_icpt;
static RM_TLS rm_saver_fn tls_saver;
static RM_TLS void *tls_saver_self;

static RM_TLS int tls_depth;
static RM_TLS const char *tls_op;
static RM_TLS void *tls_site;

static RM_TLS rm_op_observer_fn tls_op_obs;
static RM_TLS void *tls_op_obs_ud;

rm_icpt_ref rm_interceptor_set(rm_icpt_ref r) {
    rm_icpt_ref prev = tls_icpt;
    tls_icpt = r;
    return prev;
}

void rm_saver_set(rm_saver_fn fn, void *self, rm_saver_fn *prev_fn, void **prev_self) {
    if (prev_fn) *prev_fn = tls_saver;
    if (prev_self) *prev_self = tls_saver_self;
    tls_saver = fn;
    tls_saver_self = self;
}

void rm_set_op_observer(rm_op_observer_fn fn, void *user_data, rm_op_observer_fn *prev_fn,
                        void **prev_ud) {
    if (prev_fn) *prev_fn = tls_op_obs;
    if (prev_ud) *prev_ud = tls_op_obs_ud;
    tls_op_obs = fn;
    tls_op_obs_ud = user_data;
}

void rm_op_enter(const char *op) {
    if (tls_op_obs) tls_op_obs(tls_op_obs_ud, op);
}

remat_status rm_op_begin(rm_op_frame *f, const char *op, int n_in, remat_tensor *const *inputs,
                         void *site, const char *tag) {
    memset(f, 0, sizeof *f);
    f->top = tls_depth == 0;
    if (f->top) {
        f->prev_op = tls_op;
        f->prev_site = tls_site;
        tls_op = op;
        tls_site = site;
    }
    rm_icpt_ref r = tls_icpt;
    /* An op running in skip mode (after an early stop) makes no data: there
     * is nothing to record or serve, and PyTorch never runs it at all. */
    bool intercept = r.vt && !rm_skip_mode() && r.vt->wants(r.self, tls_depth);
    /* Counted before the interceptor runs: anything it calls itself
     * (copies for offloading) is nested and never intercepted. */
    tls_depth++;
    f->counted = true;
    if (intercept) {
        f->vt = r.vt;
        int rc = r.vt->begin(r.self, f, op, n_in, inputs, tag);
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

void rm_op_end(rm_op_frame *f, remat_status status, int n_out, remat_tensor *const *outs) {
    if (!f->counted) return;
    if (f->region) f->vt->end(f->region, f, status, n_out, outs);
    tls_depth--;
    f->counted = false;
    if (f->top) {
        tls_op = f->prev_op;
        tls_site = f->prev_site;
    }
}

rm_saver_fn rm_saver_current(void **self) {
    *self = tls_saver_self;
    return tls_saver;
}

const char *rm_op_current(void **site) {
    if (site) *site = tls_depth > 0 ? tls_site : NULL;
    return tls_depth > 0 ? tls_op : NULL;
}

int rm_op_depth(void) { return tls_depth; }
