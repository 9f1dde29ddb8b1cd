/* src/core/intercept.h — the interception bracket every op runs in and
 * the op observer (core: selective checkpointing, traces and reports
 * register here; no op calls them). Not installed. */
#ifndef REMAT_DISPATCH_INTERCEPT_H
#define REMAT_DISPATCH_INTERCEPT_H

#include "core.h"

/* Op tracing: the driver calls rm_op_enter("remat_xxx") first thing for
 * every public op. A thread-local observer (used
 * by checkpoint's debug traces) sees the op names in execution order. */
typedef void (*rm_op_observer_fn)(void *user_data, const char *op);
/* Installs the observer for this thread; returns the previous one via prev_fn/prev_ud. */
void rm_set_op_observer(rm_op_observer_fn fn, void *user_data, rm_op_observer_fn *prev_fn,
                        void **prev_ud);
void rm_op_enter(const char *op);

/* ---- op interception (src/core/intercept.c) -------------------------------------
 * Every public op is bracketed by rm_op_begin / rm_op_end (rm_dispatch
 * does it)
 * and saves its tensors with rm_op_save instead of rm_node_save. The
 * bracket keeps, per thread, the op nesting depth and the name and call
 * site of the running top-level op (the residual report reads them), and
 * hands ops to the thread's interceptor, if one is installed and skip
 * mode is off: selective checkpointing installs its region there
 * (src/sac/selective.c). The
 * interceptor may run the op in skip mode and substitute its saved
 * tensors (through the saver it installs for the op) and its outputs. */
typedef struct rm_interceptor rm_interceptor;
typedef struct rm_op_frame {
    void *region;             /* the interceptor's object handling this op, or NULL */
    const rm_interceptor *vt; /* its functions */
    bool counted;             /* depth was incremented (begin succeeded) */
    bool top;                 /* a top-level op */
    bool prev_skip;           /* skip mode before this op (the interceptor restores it) */
    bool set_skip;            /* the interceptor turned skip mode on for this op */
    const char *prev_op;
    void *prev_site;
} rm_op_frame;
/* What an interceptor supplies; `self` is the object installed with it. */
struct rm_interceptor {
    /* Whether it takes the op starting at nesting depth `depth` (the ops
     * already running on the thread). */
    bool (*wants)(void *self, int depth);
    /* The op starts (depth already counts it). Sets f->region to self when
     * it is to see the op's end. A failure is the op's status. */
    remat_status (*begin)(void *self, rm_op_frame *f, const char *op, int n_in,
                          remat_tensor *const *inputs, const char *tag);
    void (*end)(void *self, rm_op_frame *f, remat_status status, int n_out,
                remat_tensor *const *outs);
};
/* An installed object and its functions (both NULL: none). */
typedef struct rm_icpt_ref {
    const rm_interceptor *vt;
    void *self;
} rm_icpt_ref;
/* Installs r as this thread's op interceptor; returns the one it replaces. */
rm_icpt_ref rm_interceptor_set(rm_icpt_ref r);
/* The saver receives the running op's saves (rm_op_save) instead of
 * rm_node_save; installs fn/self on this thread and returns the previous
 * through prev_fn/prev_self. */
typedef remat_status (*rm_saver_fn)(void *self, remat_node *n, int slot, remat_tensor *t);
void rm_saver_set(rm_saver_fn fn, void *self, rm_saver_fn *prev_fn, void **prev_self);
/* The installed saver (NULL: none) and its object. */
rm_saver_fn rm_saver_current(void **self);
/* Starts a public op. `site` is the caller's return address (RM_OP_SITE()),
 * `tag` the name of a remat_tag op (NULL otherwise). On failure (a policy
 * error, a cache miss) the op must return the status at once, without
 * calling rm_op_end. */
remat_status rm_op_begin(rm_op_frame *f, const char *op, int n_in, remat_tensor *const *inputs,
                         void *site, const char *tag);
/* Ends a public op with its status and its tensor outputs (NULL entries
 * allowed). Never fails: problems found here are reported when the
 * checkpoint's context exits. */
void rm_op_end(rm_op_frame *f, remat_status status, int n_out, remat_tensor *const *outs);
/* rm_node_save as seen by the interceptor: ops save through this
 * (src/ops/driver.c). */
remat_status rm_op_save(remat_node *n, int slot, remat_tensor *t);
/* Name and call site of the top-level op running on this thread (NULL, and
 * *site NULL, outside ops). site may be NULL. */
const char *rm_op_current(void **site);
/* Nesting depth of public ops on this thread (0 outside ops). */
int rm_op_depth(void);

#if defined(__GNUC__)
#define RM_OP_SITE() __builtin_return_address(0)
#else
#define RM_OP_SITE() NULL
#endif

#endif /* REMAT_DISPATCH_INTERCEPT_H */
