/*
 * src/internal.h — library-private structures and helpers shared by the
 * core, the ops and the autograd engine. Not installed.
 *
 * Writing an op (see src/ops/unary.c for a full example):
 *   1. validate inputs (rm_check_* helpers set the error message),
 *   2. create the output with rm_new_output (handles skip mode: when it
 *      returns REMAT_OK with *skip set, leave the data alone),
 *   3. run the kernel,
 *   4. if rm_needs_grad(inputs): rm_node_new + rm_node_save(...) +
 *      rm_node_set_output(...). Backward functions run with grad mode off
 *      and may call the public ops.
 * rm_save_before_kernel: an op whose backward reads only its inputs (linear,
 * matmul, gelu, ...) does step 4's rm_node_new and saves *before* steps 2
 * and 3, and sets the output afterwards. In an early-stopping recomputation
 * the save that fills the last placeholder turns skip mode on, so the
 * output is then made without data and the kernel is not run: the last
 * GEMM of a checkpointed transformer block is never recomputed (PyTorch
 * computes it and then stops). The saved values are the same either way.
 * Functions named rm_* are internal; they set the thread-local error
 * message on failure like public calls do.
 */
#ifndef REMAT_INTERNAL_H
#define REMAT_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/autograd.h"
#include "remat/device.h"
#include "remat/error.h"
#include "remat/ops.h"
#include "remat/tensor.h"

#define RM_UNUSED(x) ((void)(x))
#define RM_TLS _Thread_local

/* ---- errors ------------------------------------------------------------------ */
int rm_err(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Status the current message was set with (rm_err, remat_set_error);
 * REMAT_OK when there is no message. For callbacks that can only signal
 * failure (a pack hook returning NULL): their own status is kept. */
int rm_last_status(void);
/* Prefixes the current message with "call: " (used when an inner call fails). */
int rm_err_prefix(int status, const char *call);
/* Warning that is only printed once per distinct text by the default logger. */
void rm_warn(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* ---- storage and tensors ------------------------------------------------------ */
typedef struct rm_storage {
    atomic_int refcount;
    void *data;           /* NULL for a "meta" storage (skip mode) */
    size_t nbytes;
    remat_device device;
    atomic_uint_fast64_t version;
} rm_storage;

typedef struct rm_hook {
    remat_grad_hook_fn fn;
    void *user_data;
    struct rm_hook *next;
} rm_hook;

struct remat_tensor {
    atomic_int refcount;
    rm_storage *storage;
    int64_t offset; /* elements */
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    int64_t strides[REMAT_MAX_DIMS];
    remat_dtype dtype;
    bool requires_grad;
    bool is_view;          /* shares storage with a tensor it was derived from */
    remat_tensor *grad;    /* owned */
    remat_node *grad_fn;   /* owned (non-leaves) */
    int output_nr;
    remat_node *grad_accumulator; /* weak: AccumulateGrad node of a leaf */
    rm_hook *hooks;        /* leaf hooks (non-leaf hooks live on grad_fn) */
    char *name;
    void *scope_owner;     /* remat_scope holding this tensor's creation ref */
};

/* Allocates a tensor struct with refcount 1 over `storage` (retained). */
remat_tensor *rm_tensor_alloc(rm_storage *storage, int64_t offset, int ndim,
                              const int64_t *shape, const int64_t *strides, remat_dtype dtype);
/* Allocates storage on device (accounting). nbytes may be 0. meta → no data. */
int rm_storage_new(rm_storage **out, size_t nbytes, remat_device device, bool meta);
void rm_storage_retain(rm_storage *s);
void rm_storage_release(rm_storage *s);
void rm_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Element count of a shape already known to be valid (no overflow check:
 * every tensor's shape passed rm_check_size when it was made). */
int64_t rm_shape_numel(int ndim, const int64_t *shape);
/* Checked size of a new tensor or view of (ndim, shape) (sizes >= 0) and
 * dtype: REMAT_EINVAL, naming `call` (if not NULL) and the shape, when the
 * product of the sizes (0 counted as 1: the strides) overflows int64 or the
 * bytes exceed REMAT_MAX_TENSOR_BYTES. *numel (may be
 * NULL) gets the count. Every path that makes a shape larger than its
 * input's (creation, broadcasting outputs, expand, reshape) goes through it. */
int rm_check_size(const char *call, int ndim, const int64_t *shape, remat_dtype dtype,
                  int64_t *numel);
/* Hands a freshly created tensor to the caller: stores it in *out and
 * registers it with the open scope, if any. When the scope cannot grow,
 * releases t, sets *out to NULL and returns REMAT_ENOMEM (so `return
 * rm_hand_out(out, t);` ends an op correctly either way). */
int rm_hand_out(remat_tensor **out, remat_tensor *t);
/* The same for n outputs of one call (NULL entries skipped): all are
 * registered, or, on REMAT_ENOMEM, all released and set to NULL. */
int rm_hand_out_n(remat_tensor **ts, int n);
/* Element pointer of t (storage + offset * elemsize) — may be NULL (meta). */
static inline void *rm_ptr(const remat_tensor *t) {
    if (!t->storage->data) return NULL;
    return (char *)t->storage->data + (size_t)t->offset * remat_dtype_size(t->dtype);
}
static inline void rm_bump_version(remat_tensor *t) {
    atomic_fetch_add(&t->storage->version, 1);
}
/* bf16 <-> f32 (storage-only dtype REMAT_BF16). f32 → bf16 rounds to
 * nearest, ties to even; NaN stays NaN (quiet), infinities stay infinite. */
static inline uint16_t rm_f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7F800000u) == 0x7F800000u && (v.u & 0x007FFFFFu))
        return (uint16_t)((v.u >> 16) | 0x0040u); /* NaN: keep it a (quiet) NaN */
    uint32_t lsb = (v.u >> 16) & 1u;
    return (uint16_t)((v.u + 0x7FFFu + lsb) >> 16);
}
static inline float rm_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
/* double -> i64 as remat converts floats to integers (copies, fills):
 * truncation toward zero; NaN gives 0 and values beyond the i64 range
 * saturate (a plain cast is undefined behaviour there). */
static inline int64_t rm_f64_to_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    if (v < -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}
/* Formats "[2, 3]" into buf. */
const char *rm_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
/* Formats "'name' [2, 3] f32" or "[2, 3] f32". */
const char *rm_tensor_str(const remat_tensor *t, char *buf, size_t n);

/* Scopes are suspended while remat runs user callbacks and backward
 * passes, so that references made there are plain references. */
void *rm_scope_suspend(void);
void rm_scope_resume(void *prev);

/* ---- the default cpu allocator's buffer cache (src/cpu_cache.c) ------------------
 * take: a cached buffer of exactly `size` (64-byte rounded) bytes, or NULL.
 * put: keeps p if it may (size large enough, cache on, and in_use + cached +
 * size <= peak, the device's counters after this free); false: free it. */
#define RM_CPU_CACHE_MIN (64 * 1024) /* smaller buffers go straight to malloc */
void *rm_cpu_cache_take(size_t size);
bool rm_cpu_cache_put(void *p, size_t size, size_t in_use, size_t peak);

/* ---- the running recomputation (src/checkpoint/frame.c) ------------------------
 * How many more tensors the innermost non-reentrant recomputation on this
 * thread must see saved, directly under its own hooks, before it stops
 * early; -1 when none is running, early stop is off, it has stopped, or
 * other hooks (a nested checkpoint's) are in force. Selective regions use
 * it to leave the policy out of an op whose saved inputs end the
 * recomputation (P saves an op's inputs before its policy sees the op). */
int rm_recompute_remaining(void);

/* ---- skip mode (early-stopped recomputation) ----------------------------------
 * While skip mode is on, ops create outputs with meta storage (no data, no
 * allocation) and run no kernels; shapes are still computed. */
bool rm_skip_mode(void);
bool rm_set_skip_mode(bool on); /* returns previous */

/* ---- validation helpers (set an error message naming `call`) ------------------- */
int rm_check_tensor(const char *call, const char *arg, const remat_tensor *t);
/* f32 or f64 and host-addressable (ops that run cpu code directly). */
int rm_check_float(const char *call, const char *arg, const remat_tensor *t);
/* f32 or f64 on any device (rm_dispatch: the kernel table decides devices). */
int rm_check_float_dtype(const char *call, const char *arg, const remat_tensor *t);
int rm_check_same_dtype(const char *call, const remat_tensor *a, const remat_tensor *b);
int rm_check_same_device(const char *call, const remat_tensor *a, const remat_tensor *b);
int rm_check_host(const char *call, const remat_tensor *t);
/* Normalises a possibly negative dim against ndim. */
int rm_norm_dim(const char *call, int dim, int ndim, int *out);
/* Broadcast shape of a and b. */
int rm_broadcast_shape(const char *call, int nda, const int64_t *sa, int ndb, const int64_t *sb,
                       int *nd_out, int64_t *shape_out);

/* Creates a new contiguous output tensor (skip-mode aware). */
int rm_new_output(remat_tensor **out, int ndim, const int64_t *shape, remat_dtype dtype,
                  remat_device device);

/* ---- autograd graph --------------------------------------------------------- */
typedef struct rm_saved {
    bool defined;
    bool was_output;     /* saved tensor is an output of the node (informational) */
    remat_tensor *data;  /* saved directly (no hooks): detached alias */
    void *handle;        /* packed by hooks */
    remat_saved_hooks hooks;
    bool has_hooks;
    bool freed;
    uint64_t saved_version;
    /* metadata kept for error messages */
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    remat_dtype dtype;
    remat_device device;
} rm_saved;

typedef struct rm_edge {
    remat_node *node; /* owned reference (NULL: no grad needed) */
    int input_nr;
} rm_edge;

typedef int (*rm_backward_fn)(remat_node *node, remat_tensor *const *grad_outputs,
                              remat_tensor **grad_inputs);

typedef struct rm_node_hook {
    int output_nr;
    remat_grad_hook_fn fn;
    void *user_data;
    struct rm_node_hook *next;
} rm_node_hook;

typedef struct rm_out_meta {
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    remat_dtype dtype;
    remat_device device;
} rm_out_meta;

struct remat_node {
    atomic_int refcount;
    /* rm_node_release: lets the core drop a tensor's grad_fn without
     * depending on the autograd layer that implements nodes */
    void (*release)(remat_node *n);
    const char *name;      /* static string */
    char *owned_name;      /* for custom functions */
    rm_backward_fn backward;
    uint64_t seq;
    int n_next;            /* one per differentiable input of the op */
    rm_edge *next;
    int n_outputs;
    rm_out_meta *out_meta;
    int n_saved;
    rm_saved *saved;
    void *ctx;                     /* op-specific parameters */
    void (*ctx_free)(void *ctx);
    remat_tensor *leaf;            /* AccumulateGrad: the leaf (owned) */
    rm_node_hook *hooks;
    bool released;                 /* saved tensors freed by a backward pass */
};

/* True if grad mode is on and any of the n inputs (NULL allowed) requires grad. */
bool rm_needs_grad(int n, remat_tensor *const *inputs);
/* Creates a node for an op with n_inputs inputs (NULL or non-grad inputs get
 * empty edges), n_outputs outputs and room for n_saved saved tensors. */
int rm_node_new(remat_node **out, const char *name, rm_backward_fn backward, int n_inputs,
                remat_tensor *const *inputs, int n_outputs, int n_saved);
/* rm_node_new, then a copy of ctx_size bytes of ctx as the node's ctx
 * (freed with the node); ctx_size 0: no ctx. */
int rm_node_new_ctx(remat_node **out, const char *name, rm_backward_fn backward, int n_inputs,
                    remat_tensor *const *inputs, int n_outputs, int n_saved, const void *ctx,
                    size_t ctx_size);
/* Drops a reference to the node. */
void rm_node_release(remat_node *n);
remat_node *rm_node_retain(remat_node *n);
/* Saves t (may be NULL) into slot i, through the saved-tensor hooks. */
int rm_node_save(remat_node *n, int slot, remat_tensor *t);
/* Unpacks saved slot i: a new reference (NULL if the slot was saved NULL). */
int rm_node_unpack(remat_node *n, int slot, remat_tensor **out);
/* Attaches output `t` as output i of the node (sets grad_fn, requires_grad). */
void rm_node_set_output(remat_node *n, int i, remat_tensor *t);
/* Convenience: set ctx (freed with free() unless ctx_free given). */
void rm_node_set_ctx(remat_node *n, void *ctx, void (*ctx_free)(void *));
/* Edge to the gradient sink of t (grad_fn or the leaf accumulator). */
int rm_gradient_edge(remat_tensor *t, rm_edge *edge);
/* In-place ops: fails on a leaf that requires grad while grad mode is on.
 * (The rebase onto the new node happens in rm_node_set_output.) */
int rm_check_inplace(const char *call, remat_tensor *t);
/* Frees saved tensors of a node (graph release). */
void rm_node_release_saved(remat_node *n);
/* Called by a backward function once it has read saved slot `slot` for the
 * last time: frees it now, as the graph release after the node would, if
 * the running backward pass does not retain the graph (otherwise nothing).
 * Lets a backward free a large saved input before it allocates the next
 * gradient (linear: x after dW, before dx), lowering the pass's peak. */
void rm_node_done_with_saved(remat_node *n, int slot);
/* For a backward that can compute a gradient in place over a saved input
 * (elementwise, same shape and dtype): when the pass does not retain the
 * graph and saved slot `slot` (saved without hooks) is the only holder of a
 * contiguous storage it spans exactly, moves it out as a plain new tensor
 * in *out (the slot counts as freed) and returns true. Otherwise *out is
 * NULL, nothing changes, and the backward allocates as usual. */
bool rm_node_take_saved(remat_node *n, int slot, remat_tensor **out);
/* Whether the backward pass running on this thread retains the graph (true
 * outside backward). */
bool rm_backward_retains_graph(void);

/* Sums grad down to shape (undoing broadcasting). New reference in *out. */
int rm_sum_to(remat_tensor **out, remat_tensor *grad, int ndim, const int64_t *shape);

/* Calls the save observer (residual reports) for a tensor being saved. */
void rm_notify_save(const char *op, remat_tensor *t);

/* Op tracing: every public op calls rm_op_enter("remat_xxx") first thing
 * (after argument NULL checks are fine too). A thread-local observer (used
 * by checkpoint's debug traces) sees the op names in execution order. */
typedef void (*rm_op_observer_fn)(void *user_data, const char *op);
/* Installs the observer for this thread; returns the previous one via prev_fn/prev_ud. */
void rm_set_op_observer(rm_op_observer_fn fn, void *user_data, rm_op_observer_fn *prev_fn,
                        void **prev_ud);
void rm_op_enter(const char *op);

/* ---- op interception (src/dispatch/intercept.c) -------------------------------------
 * Every public op is bracketed by rm_op_begin / rm_op_end (rm_dispatch
 * does it; ops not yet on the driver use RM_OP_RUN1 / RM_OP_RUN0 below)
 * and saves its tensors with rm_op_save instead of rm_node_save. The
 * bracket keeps, per thread, the op nesting depth and the name and call
 * site of the running top-level op (the residual report reads them), and
 * hands ops to the thread's interceptor, if one is installed: selective
 * checkpointing installs its region there (src/sac/selective.c). The
 * interceptor may run the op in skip mode and substitute its saved
 * tensors (through the saver it installs for the op) and its outputs. */
typedef struct rm_interceptor rm_interceptor;
typedef struct rm_op_frame {
    void *region;      /* the interceptor's object handling this op, or NULL */
    const rm_interceptor *vt; /* its functions */
    bool counted;      /* depth was incremented (begin succeeded) */
    bool top;          /* a top-level op */
    bool prev_skip;    /* skip mode before this op (restored by rm_op_end) */
    bool set_skip;     /* this frame turned skip mode on */
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
    int (*begin)(void *self, rm_op_frame *f, const char *op, int n_in,
                 remat_tensor *const *inputs, const char *tag);
    void (*end)(void *self, rm_op_frame *f, int status, int n_out, remat_tensor *const *outs);
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
typedef int (*rm_saver_fn)(void *self, remat_node *n, int slot, remat_tensor *t);
void rm_saver_set(rm_saver_fn fn, void *self, rm_saver_fn *prev_fn, void **prev_self);
/* The installed saver (NULL: none) and its object. */
rm_saver_fn rm_saver_current(void **self);
/* Starts a public op. `site` is the caller's return address (RM_OP_SITE()),
 * `tag` the name of a remat_tag op (NULL otherwise). On failure (a policy
 * error, a cache miss) the op must return the status at once, without
 * calling rm_op_end. */
int rm_op_begin(rm_op_frame *f, const char *op, int n_in, remat_tensor *const *inputs, void *site,
                const char *tag);
/* Ends a public op with its status and its tensor outputs (NULL entries
 * allowed). Never fails: problems found here are reported when the
 * checkpoint's context exits. */
void rm_op_end(rm_op_frame *f, int status, int n_out, remat_tensor *const *outs);
/* rm_node_save as seen by the interceptor: ops save through this
 * (src/ops/driver.c). */
int rm_op_save(remat_node *n, int slot, remat_tensor *t);
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

/* Body of a public op with one output `out` (remat_tensor **): runs `expr`
 * (the op's implementation, which sets *out) between begin and end. The
 * _AT forms take the call site from a helper's caller: pass RM_OP_SITE()
 * from the public function. */
#define RM_OP_RUN1_AT(site, name, out, n_in, ins, tag, expr)                                \
    do {                                                                                    \
        rm_op_frame rm_f_;                                                                  \
        int rm_rc_ = rm_op_begin(&rm_f_, (name), (n_in), (ins), (site), (tag));              \
        if (rm_rc_) {                                                                       \
            if (out) *(out) = NULL;                                                         \
            return rm_rc_;                                                                  \
        }                                                                                   \
        rm_rc_ = (expr);                                                                    \
        rm_op_end(&rm_f_, rm_rc_, (out) && !rm_rc_ ? 1 : 0, (out));                          \
        return rm_rc_;                                                                      \
    } while (0)
#define RM_OP_RUN1(name, out, n_in, ins, tag, expr)                                         \
    RM_OP_RUN1_AT(RM_OP_SITE(), name, out, n_in, ins, tag, expr)
/* Body of a public op without tensor outputs (the in-place ops). */
#define RM_OP_RUN0_AT(site, name, n_in, ins, expr)                                          \
    do {                                                                                    \
        rm_op_frame rm_f_;                                                                  \
        int rm_rc_ = rm_op_begin(&rm_f_, (name), (n_in), (ins), (site), NULL);               \
        if (rm_rc_) return rm_rc_;                                                          \
        rm_rc_ = (expr);                                                                    \
        rm_op_end(&rm_f_, rm_rc_, 0, NULL);                                                 \
        return rm_rc_;                                                                      \
    } while (0)

/* ---- allocator ------------------------------------------------------------------ */
/* Per-thread allocation meter (src/device.c): the bytes this thread
 * allocates minus those it frees through the allocator on one device, and
 * the peak of that, ignoring every other thread — for measurements (the
 * planner's profile) that must hold while other threads allocate. Start
 * saves the thread's previous meter in *prev (meters nest); stop restores
 * it. mark_peak sets the peak to the current value. */
typedef struct rm_meter {
    bool on;
    remat_device device;
    int64_t current, peak;
} rm_meter;
void rm_meter_start(remat_device device, rm_meter *prev);
void rm_meter_stop(const rm_meter *prev);
void rm_meter_mark_peak(void);
int64_t rm_meter_current(void);
int64_t rm_meter_peak(void);
void *rm_device_alloc(remat_device device, size_t nbytes);
void rm_device_free(remat_device device, void *ptr, size_t nbytes);
int rm_device_copy(remat_device dst_dev, void *dst, remat_device src_dev, const void *src,
                   size_t nbytes);

/* ---- RNG ------------------------------------------------------------------------ */
/* Reserves n_blocks Philox blocks (4 u32 each) from the device generator:
 * returns key and the starting counter. */
int rm_rng_reserve(remat_device device, uint64_t n_blocks, uint32_t key[2], uint64_t *counter);
/* Fills 4 u32 for block `block` from key and base counter. */
void rm_philox_block(const uint32_t key[2], uint64_t counter_lo, uint32_t out[4]);
static inline double rm_u32_to_unit(uint32_t x) { return (x >> 8) * (1.0 / 16777216.0); }
static inline double rm_u64_to_unit(uint32_t hi, uint32_t lo) {
    return (double)((((uint64_t)hi << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- strided iteration ------------------------------------------------------------ */
/* Iterates a row-major index over `shape`, tracking element offsets of up
 * to 4 operands with their own strides (0 for broadcast dims). */
typedef struct rm_iter {
    int ndim;
    int n_ops;
    int64_t shape[REMAT_MAX_DIMS];
    int64_t strides[4][REMAT_MAX_DIMS];
    int64_t idx[REMAT_MAX_DIMS];
    int64_t off[4];
} rm_iter;
/* Strides of t broadcast to (ndim, shape) (t's dims aligned to the right). */
void rm_broadcast_strides(const remat_tensor *t, int ndim, const int64_t *shape, int64_t *out);
void rm_iter_init(rm_iter *it, int ndim, const int64_t *shape, int n_ops);
/* Advances one element; returns false after the last. */
static inline bool rm_iter_next(rm_iter *it) {
    for (int d = it->ndim - 1; d >= 0; d--) {
        if (++it->idx[d] < it->shape[d]) {
            for (int k = 0; k < it->n_ops; k++) it->off[k] += it->strides[k][d];
            return true;
        }
        it->idx[d] = 0;
        for (int k = 0; k < it->n_ops; k++) it->off[k] -= it->strides[k][d] * (it->shape[d] - 1);
    }
    return false;
}
/* Positions the iterator at flat row-major index `linear`. */
void rm_iter_seek(rm_iter *it, int64_t linear);

/* Contiguous copy of t (new reference; t itself retained if already contiguous). */
int rm_contig(remat_tensor **out, remat_tensor *t);
/* Copies src into dst elementwise (same numel view, broadcast src to dst's
 * shape, converting dtype). No autograd. */
int rm_copy_into(remat_tensor *dst, const remat_tensor *src);
/* (src/backends/cpu/copy.c) rm_copy_into's fast kernel for dst and src of the same
 * dtype: bit-for-bit, row memcpy / tiled transpose / strided rows, OpenMP
 * split. Returns false, doing nothing, when the dtypes differ (meta
 * tensors: true, nothing to do). Cannot fail. */
bool rm_copy_same_dtype(remat_tensor *dst, const remat_tensor *src);
/* (src/backends/cpu/copy.c) t contiguous: zeroes t[..., lo:hi, ...] along dim d
 * (no-op for a meta tensor). */
void rm_zero_dim_range(remat_tensor *t, int d, int64_t lo, int64_t hi);

/* ---- the elementwise engine (RM_K_ELEMENTWISE, src/dispatch/kernels.h) ----------------
 * y = op(a, b, c; p) elementwise over y's shape; a/b/c (as many as the op
 * reads, others NULL) are broadcast to y, y may be a strided view. Runs the
 * kernel of y's device and dtype; nothing when an operand has no data (skip
 * mode). `call` names the op in errors (REMAT_EUNSUPPORTED: no kernel). */
int rm_ew_run(const char *call, int op, remat_tensor *y, remat_tensor *a, remat_tensor *b,
              remat_tensor *c, double p);

/* Views a contiguous shape as (O, R, I) around `dim`: O = product of the dims
 * before it, R = its size, I = product of the dims after it (a 0-dim shape
 * is (1, 1, 1)). Reductions and softmax work on this 3-D view. */
static inline void rm_outer_reduce_inner(int ndim, const int64_t *shape, int dim, int64_t *O,
                                         int64_t *R, int64_t *I) {
    *O = 1;
    *R = ndim ? shape[dim] : 1;
    *I = 1;
    for (int d = 0; d < dim && d < ndim; d++) *O *= shape[d];
    for (int d = dim + 1; d < ndim; d++) *I *= shape[d];
}

/* Number of OpenMP threads to use for n elements of simple work. */
#define RM_OMP_MIN 32768

#endif /* REMAT_INTERNAL_H */
