/* src/core/core.h — the core layer's private declarations: errors, storage and
 * tensors, the allocator and its buffer cache, skip mode, argument checks,
 * RNG, strided iteration and copies. The layers above (autograd, ops,
 * checkpoint / selective / planner) build on it; it depends on none of
 * them (scripts/check_layers.sh). Not installed.
 * Functions named rm_* are internal; they set the thread-local error
 * message on failure like public calls do. */
#ifndef REMAT_CORE_H
#define REMAT_CORE_H

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
/* rm_err(status, fmt, ...): sets this thread's message and returns status;
 * the library's own errors go through the public remat_set_error. */
#define rm_err remat_set_error
/* Status the current message was set with (rm_err, remat_set_error);
 * REMAT_OK when there is no message. For callbacks that can only signal
 * failure (a pack hook returning NULL): their own status is kept. */
remat_status rm_last_status(void);
/* Prefixes the current message with "call: " (used when an inner call fails). */
remat_status rm_err_prefix(remat_status status, const char *call);
/* Warning that is only printed once per distinct text by the default logger. */
void rm_warn(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* What the core knows of a graph node (struct remat_node, in
 * src/autograd/graph.h, begins with it): a tensor drops its grad_fn through
 * the node's own release function, so the core never calls autograd. */
typedef struct rm_node_head {
    atomic_int refcount;
    void (*release)(remat_node *n); /* rm_node_release */
} rm_node_head;

/* ---- storage and tensors ------------------------------------------------------ */
typedef struct rm_storage {
    atomic_int refcount;
    void *data; /* NULL for a "meta" storage (skip mode) */
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
    /* RM_TENSOR_DEAD once released (src/core/tensor_pool.c): the struct
     * stays readable (shape, dtype, name, origin) for the message that
     * reports a later use; 0 while alive (stack views too) */
    unsigned char dead;
    uint32_t gen;        /* bumped each time the pool reuses the struct */
    rm_storage *storage; /* NULL once released */
    int64_t offset;      /* elements */
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    int64_t strides[REMAT_MAX_DIMS];
    remat_dtype dtype;
    bool requires_grad;
    bool is_view;        /* shares storage with a tensor it was derived from */
    remat_tensor *grad;  /* owned */
    remat_node *grad_fn; /* owned (non-leaves) */
    int output_nr;
    remat_node *grad_accumulator; /* weak: AccumulateGrad node of a leaf */
    rm_hook *hooks;               /* leaf hooks (non-leaf hooks live on grad_fn) */
    char *name;
    /* the call that made it ("remat_linear"; static text), for messages; NULL: unknown */
    const char *origin;
    /* Scopes (src/core/tensor.c): scope_refs references are held by open
     * scopes, the latest at scope_owner's entry scope_index (NULL: none).
     * user_refs: references from remat_retain the user still holds; a
     * remat_release takes one of those first, else the latest a scope holds. */
    void *scope_owner;
    int scope_index;
    int scope_refs;
    atomic_int user_refs;
    remat_tensor *pool_next; /* the pool's queue of released structs */
};

#define RM_TENSOR_DEAD 0xDEu
/* Whether t was released (its struct waits in the pool). */
static inline bool rm_dead(const remat_tensor *t) { return t->dead != 0; }
/* REMAT_ESTATE, "call: 'arg' [2, 3] f32 made by remat_linear was already
 * released ...": a released tensor passed to a call (arg may be NULL). */
remat_status rm_released_err(const char *call, const char *arg, const remat_tensor *t);
/* The same message as a warning (log callback) and the last-error text,
 * for calls that return no status. */
void rm_released_warn(const char *call, const remat_tensor *t);
/* For public calls that return a value, not a status: t itself, or NULL
 * (reported by rm_released_warn) when t was released. */
static inline const remat_tensor *rm_live(const char *call, const remat_tensor *t) {
    if (t && rm_dead(t)) {
        rm_released_warn(call, t);
        return NULL;
    }
    return t;
}
/* References inside the library: rm_retain / rm_release are remat_retain /
 * remat_release without the caller's account (user_refs, scopes); a
 * released t is reported, never freed twice. */
remat_tensor *rm_retain(remat_tensor *t);
void rm_release(remat_tensor *t);
void rm_release_p(remat_tensor **pt);
/* A reference a user callback handed the library (a checkpointed
 * function's output, an unpack hook's result): one of the caller's
 * remat_retain references, if it holds any, becomes the library's. */
void rm_adopt(remat_tensor *t);
/* If an open scope holds a reference to t, it no longer does: the reference
 * is the caller's (the library's own remat_scope_keep). */
void rm_scope_unhold(remat_tensor *t);

/* ---- the tensor pool (src/core/tensor_pool.c) -------------------------------------
 * take: a zeroed struct (its generation bumped), NULL when out of memory;
 * put: marks t dead and queues it. A queued struct is reused only while
 * more than rm_ref_quarantine() others wait (remat_set_ref_checks). */
#define RM_REF_QUARANTINE 8192
remat_tensor *rm_tensor_slot_take(void);
void rm_tensor_slot_put(remat_tensor *t);
size_t rm_ref_quarantine(void);

/* Allocates a tensor struct with refcount 1 over `storage` (retained). */
remat_tensor *rm_tensor_alloc(rm_storage *storage, int64_t offset, int ndim, const int64_t *shape,
                              const int64_t *strides, remat_dtype dtype);
/* Allocates storage on device (accounting). nbytes may be 0. meta → no data. */
remat_status rm_storage_new(rm_storage **out, size_t nbytes, remat_device device, bool meta);
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
remat_status rm_check_size(const char *call, int ndim, const int64_t *shape, remat_dtype dtype,
                           int64_t *numel);
/* Hands a freshly created tensor to the caller: stores it in *out and
 * registers it with the open scope, if any. When the scope cannot grow,
 * releases t, sets *out to NULL and returns REMAT_ENOMEM (so `return
 * rm_hand_out(out, t);` ends an op correctly either way). */
remat_status rm_hand_out(remat_tensor **out, remat_tensor *t);
/* The same for n outputs of one call (NULL entries skipped): all are
 * registered, or, on REMAT_ENOMEM, all released and set to NULL. */
remat_status rm_hand_out_n(remat_tensor **ts, int n);
/* Element pointer of t (storage + offset * elemsize) — may be NULL (meta). */
static inline void *rm_ptr(const remat_tensor *t) {
    if (!t->storage->data) return NULL;
    return (char *)t->storage->data + (size_t)t->offset * remat_dtype_size(t->dtype);
}
static inline void rm_bump_version(remat_tensor *t) { atomic_fetch_add(&t->storage->version, 1); }
/* bf16 <-> f32 (storage-only dtype REMAT_BF16). f32 → bf16 rounds to
 * nearest, ties to even; NaN stays NaN (quiet), infinities stay infinite. */
static inline uint16_t rm_f32_to_bf16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {f};
    if ((v.u & 0x7F800000u) == 0x7F800000u && (v.u & 0x007FFFFFu))
        return (uint16_t)((v.u >> 16) | 0x0040u); /* NaN: keep it a (quiet) NaN */
    uint32_t lsb = (v.u >> 16) & 1u;
    return (uint16_t)((v.u + 0x7FFFu + lsb) >> 16);
}
static inline float rm_bf16_to_f32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
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

/* ---- skip mode (src/core/skip.c) ----------------------------------------------
 * While skip mode is on, ops create outputs with meta storage (no data, no
 * allocation) and run no kernels; shapes are still computed. An
 * early-stopped recomputation turns it on (src/checkpoint/frame.c). */
bool rm_skip_mode(void);
bool rm_set_skip_mode(bool on); /* returns previous */

/* ---- validation helpers (set an error message naming `call`) ------------------- */
remat_status rm_check_tensor(const char *call, const char *arg, const remat_tensor *t);
/* A dtype's bit in a set of dtypes. */
#define RM_DTYPE_BIT(d) (1u << (unsigned)(d))
/* t is a tensor (rm_check_tensor) of a dtype in `dtypes` (RM_DTYPE_BIT set), which the
 * message lists as `names` ("'a' must be <names>, got ..."); REMAT_EDTYPE otherwise. */
remat_status rm_check_dtype_in(const char *call, const char *arg, const remat_tensor *t,
                               unsigned dtypes, const char *names);
/* f32, f64 or bf16 on any device (rm_dispatch: the kernel table decides devices). */
remat_status rm_check_float_dtype(const char *call, const char *arg, const remat_tensor *t);
remat_status rm_check_same_dtype(const char *call, const remat_tensor *a, const remat_tensor *b);
remat_status rm_check_same_device(const char *call, const remat_tensor *a, const remat_tensor *b);
remat_status rm_check_host(const char *call, const remat_tensor *t);
/* Normalises a possibly negative dim against ndim. */
remat_status rm_norm_dim(const char *call, int dim, int ndim, int *out);
/* Broadcast shape of a and b. */
remat_status rm_broadcast_shape(const char *call, int nda, const int64_t *sa, int ndb,
                                const int64_t *sb, int *nd_out, int64_t *shape_out);

/* Creates a new contiguous output tensor (skip-mode aware). */
remat_status rm_new_output(remat_tensor **out, int ndim, const int64_t *shape, remat_dtype dtype,
                           remat_device device);

/* ---- allocator ------------------------------------------------------------------ */
/* Per-thread allocation meter (src/core/device.c): the bytes this thread
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
/* Counts nbytes at p that a backend allocated by its own means (the pinned host buffers of
 * a device type's transfer ops) in device's counters, as an allocation (alloc) or its free,
 * so that they show where rm_device_alloc's would: offloaded bytes in the host's. */
void rm_device_count(remat_device device, void *p, size_t nbytes, bool alloc);
remat_status rm_device_copy(remat_device dst_dev, void *dst, remat_device src_dev, const void *src,
                            size_t nbytes);

/* ---- RNG ------------------------------------------------------------------------ */
/* Reserves n_blocks Philox blocks (4 u32 each) from the device generator:
 * returns key and the starting counter. */
remat_status rm_rng_reserve(remat_device device, uint64_t n_blocks, uint32_t key[2],
                            uint64_t *counter);
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

/* Room for element n of the array arr (capacity *cap elements of elem
 * bytes): arr itself while n < *cap, else arr reallocated to twice *cap
 * (`first` when *cap is 0), *cap updated. NULL when that allocation fails:
 * arr and *cap are then unchanged, and the caller says what failed. */
void *rm_grow(void *arr, int *cap, int n, int first, size_t elem);

/* ---- asynchronous transfers (src/core/transfer.c) ------------------------------------------
 * What a device type may offer the offload of saved tensors (remat_offload_saved_hooks):
 * pinned host memory and copies on a side stream that are ordered after the work already
 * queued on the device's compute stream, each returning an event. Without ops a transfer
 * is rm_device_copy into ordinary host memory, synchronous, with no event. The cuda
 * backend registers its own (src/backends/cuda/transfer.c); tests register fakes. */
typedef struct rm_transfer_ops {
    void *(*host_alloc)(size_t nbytes); /* pinned host memory; NULL on failure */
    void (*host_free)(void *p, size_t nbytes);
    /* Enqueues dst := src (nbytes; kind says which side is the device's) after the work
     * queued so far on device `index`; *event receives an event completed with the copy. */
    remat_status (*copy_async)(int index, void *dst, const void *src, size_t nbytes,
                               remat_copy_kind kind, void **event);
    /* Makes the compute stream of `index` wait for event (the host does not wait). */
    remat_status (*stream_wait)(int index, void *event);
    bool (*done)(void *event);              /* whether the event has completed (never blocks) */
    remat_status (*host_wait)(void *event); /* the host waits for the event */
    void (*event_free)(void *event);
} rm_transfer_ops;
/* Sets (ops NULL: removes) the transfer ops of a device type; ops must outlive the
 * registration. REMAT_EINVAL for the cpu type or one out of range. Register at start-up. */
remat_status rm_transfer_register(int type, const rm_transfer_ops *ops);
/* The ops of a device type, or NULL. */
const rm_transfer_ops *rm_transfer_get(int type);

/* Contiguous copy of t (new reference; t itself retained if already contiguous). */
remat_status rm_contig(remat_tensor **out, remat_tensor *t);
/* A new contiguous tensor holding t's values, always a copy (new reference
 * in *out; NULL on failure). */
remat_status rm_copy_new(remat_tensor **out, remat_tensor *t);
/* Copies src into dst elementwise (same numel view, broadcast src to dst's
 * shape, converting dtype). No autograd. */
remat_status rm_copy_into(remat_tensor *dst, const remat_tensor *src);
/* Copies src into the window of z's memory that starts at element `offset`
 * and has src's shape and the given strides (a view of z made for the
 * copy; scatters into z). REMAT_ENOMEM naming `what` when the view cannot
 * be made. */
remat_status rm_copy_to_window(remat_tensor *z, int64_t offset, const int64_t *strides,
                               const remat_tensor *src, const char *what);
/* t contiguous: zeroes t[..., lo:hi, ...] along dim d on any device (backend 0's zero_dim_range
 * on host memory, else the device's ZERO kernel on that window). Nothing for a meta t. */
remat_status rm_zero_window(remat_tensor *t, int d, int64_t lo, int64_t hi);

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

#endif /* REMAT_CORE_H */
