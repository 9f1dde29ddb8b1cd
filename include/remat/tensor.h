/*
 * remat/tensor.h — tensors: creation, ownership, views, data access, scopes.
 *
 * A remat_tensor is a strided view (shape, strides, element offset) onto a
 * refcounted storage. Views (reshape, transpose, slice, expand, detach)
 * share the storage; in-place ops bump the storage's version counter, which
 * autograd uses to detect saved tensors modified after they were saved.
 *
 * Ownership, one rule: every call that hands out a tensor (through a
 * `remat_tensor **out` parameter) gives the caller one reference, and
 * remat_release() drops one. A scope (remat_scope_begin) is a safety net:
 * the references handed out while it is the innermost open scope that the
 * caller has not released by remat_scope_end are released there. So a
 * function that releases its temporaries is right with or without a scope
 * open, called directly or through remat_checkpoint (which runs it with no
 * scope open); one that leaves them to a scope must be called inside one.
 * remat_scope_keep() takes a reference out of the scope's care (it then
 * outlives the scope). remat_retain() adds a reference of the caller's own;
 * remat_release drops those first, then the latest a scope holds.
 * Destructors accept NULL and do nothing.
 *
 * Inputs are borrowed: functions never take over the caller's reference.
 * On error *out is set to NULL and no input is changed.
 *
 * Reference mistakes are reported, never memory corruption: a tensor used
 * after its last reference was released (a second remat_release, a use in
 * any call) fails the call with REMAT_ESTATE, or, for calls that return no
 * status, logs a warning and sets remat_last_error(); both name the call
 * and the tensor ("[2, 3] f32 made by remat_linear"). See
 * remat_set_ref_checks for how long a released tensor stays recognisable.
 */
#ifndef REMAT_TENSOR_H
#define REMAT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/error.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

#define REMAT_MAX_DIMS 8
/* The largest tensor: its elements take at most 2^62 bytes (so every
 * element and byte offset fits in an int64_t). A shape whose element count
 * overflows, or whose bytes exceed this, is refused with REMAT_EINVAL (the
 * shape in the message) by every call that creates or views a tensor; a
 * shape within the limit that the allocator cannot serve is REMAT_ENOMEM. */
#define REMAT_MAX_TENSOR_BYTES (INT64_C(1) << 62)

/* A yes/no option that can also be left unset. REMAT_OPT_DEFAULT is zero,
 * so a zero-initialised options struct leaves every such option at the
 * PyTorch default (for a global override: "no override"). Any other value
 * is REMAT_EINVAL where an option is checked. */
typedef enum remat_tristate {
    REMAT_OPT_FALSE = -1,
    REMAT_OPT_DEFAULT = 0,
    REMAT_OPT_TRUE = 1,
} remat_tristate;

/* REMAT_U8 is a storage-only dtype (1-bit masks packed 8 per byte, see
 * remat/compress.h): u8 tensors can be created, copied and converted
 * (remat_copy_to_buffer), but ops reject them (REMAT_EDTYPE).
 * REMAT_BF16 (bfloat16: f32's exponent, 8 bits of mantissa) is a compute
 * dtype: every float op takes it (computing in f32 inside and rounding its
 * outputs to nearest even; matmul, linear and attention with bf16 GEMMs
 * that accumulate in f32), and autocast (remat/autocast.h) makes it the
 * dtype of matmul, linear and attention. Conversions f32 → bf16 round to
 * nearest even and keep NaN and infinities. */
typedef enum remat_dtype {
    REMAT_F32 = 0,
    REMAT_F64 = 1,
    REMAT_I64 = 2,
    REMAT_U8 = 3,
    REMAT_BF16 = 4
} remat_dtype;

/* Size in bytes of one element of `dtype` (0 for an unknown dtype). */
size_t remat_dtype_size(remat_dtype dtype);
/* "f32", "f64", "i64", "u8", "bf16" or "?". */
const char *remat_dtype_name(remat_dtype dtype);

/* A device: a registered device type (see remat/device.h; REMAT_CPU is 0)
 * and an index within that type. */
typedef struct remat_device {
    int type;
    int index;
} remat_device;

#define REMAT_CPU 0
/* The cpu device, index 0. */
#define REMAT_DEVICE_CPU ((remat_device){REMAT_CPU, 0})

typedef struct remat_tensor remat_tensor;
typedef struct remat_node remat_node; /* autograd graph node, remat/autograd.h */

/* ---- creation ------------------------------------------------------------
 * All return a new contiguous tensor on `device` with requires_grad off.
 * shape may be NULL when ndim == 0 (a scalar). Fail with REMAT_EINVAL on a
 * negative size, ndim > REMAT_MAX_DIMS or a size over REMAT_MAX_TENSOR_BYTES
 * (see above), REMAT_EDEVICE on an unknown
 * device, REMAT_ENOMEM when the allocator fails. */
remat_status remat_empty(remat_tensor **out, int ndim, const int64_t *shape, remat_dtype dtype,
                         remat_device device);
remat_status remat_zeros(remat_tensor **out, int ndim, const int64_t *shape, remat_dtype dtype,
                         remat_device device);
remat_status remat_full(remat_tensor **out, int ndim, const int64_t *shape, double value,
                        remat_dtype dtype, remat_device device);
/* Copies `data` (ndim-dim row-major, of `dtype`) into a new cpu tensor. */
remat_status remat_from_data(remat_tensor **out, int ndim, const int64_t *shape, remat_dtype dtype,
                             const void *data);
/* Uniform in [lo, hi) / normal(mean, std) from the generator of `device`. */
remat_status remat_rand_uniform(remat_tensor **out, int ndim, const int64_t *shape, double lo,
                                double hi, remat_dtype dtype, remat_device device);
remat_status remat_rand_normal(remat_tensor **out, int ndim, const int64_t *shape, double mean,
                               double std, remat_dtype dtype, remat_device device);
/* A 0-dim tensor holding `value`. */
remat_status remat_scalar(remat_tensor **out, double value, remat_dtype dtype);
/* 0, 1, ..., n-1 as i64 on cpu. */
remat_status remat_arange(remat_tensor **out, int64_t n);

/* ---- ownership ----------------------------------------------------------- */
/* Adds a reference of the caller's own (no scope releases it); returns t.
 * NULL → NULL; an already released t → NULL and a warning. */
remat_tensor *remat_retain(remat_tensor *t);
/* Drops a reference (one from remat_retain first, else the latest an open
 * scope holds, which that scope then no longer releases); frees the tensor
 * (and its storage, grad and graph references) when the last one goes.
 * NULL → no-op. An already released t: a warning, nothing else. */
void remat_release(remat_tensor *t);
/* Releases *pt and sets it to NULL. */
void remat_release_p(remat_tensor **pt);
/* Number of live tensor objects in the process (for leak checks in tests). */
int64_t remat_live_tensors(void);

/* ---- reference checks ------------------------------------------------------
 * A released tensor's object is not freed but kept, marked released, so
 * that a later use is recognised without touching freed memory. With
 * REMAT_REF_CHECKS_ON (the default) an object is reused once 8192 other
 * tensors were released after it (about 2 MiB kept); a stale pointer used
 * later than that may name another tensor. REMAT_REF_CHECKS_DEEP (for
 * debugging; or the environment variable REMAT_REF_CHECKS=deep, read at
 * the first tensor) never reuses one, so every use of a released tensor is
 * reported however late, and fills freed host storage with 0xFF bytes (NaN
 * in every float dtype), so a data pointer kept past a release reads NaN;
 * it costs the objects' memory (about 250 bytes per tensor ever made) and
 * that fill. Set it at start-up. */
typedef enum remat_ref_checks {
    REMAT_REF_CHECKS_ON = 1,
    REMAT_REF_CHECKS_DEEP = 2,
} remat_ref_checks;
/* REMAT_EINVAL for another value. */
remat_status remat_set_ref_checks(remat_ref_checks level);
remat_ref_checks remat_get_ref_checks(void);

/* ---- scopes ---------------------------------------------------------------
 * A scope collects the references handed out while it is the innermost
 * open one and drops, at remat_scope_end, those still unreleased. Scopes
 * nest (per thread); release a reference a scope holds on that scope's
 * thread. */
typedef struct remat_scope remat_scope;
/* Opens a scope. Fails only with REMAT_ENOMEM. */
remat_status remat_scope_begin(remat_scope **out);
/* Drops every reference collected by `s` and closes it. `s` must be the
 * innermost open scope (REMAT_ESTATE otherwise; nothing is closed then).
 * NULL → no-op returning REMAT_OK. */
remat_status remat_scope_end(remat_scope *s);
/* Takes the latest reference an open scope holds to t out of its care: the
 * caller releases it (or a later scope does not: it outlives them).
 * Returns t. A t no open scope holds (made with none open, or kept
 * already): a warning, and nothing changes (the reference is the
 * caller's already). NULL → NULL; an already released t → NULL and a
 * warning. */
remat_tensor *remat_scope_keep(remat_tensor *t);

/* ---- metadata ------------------------------------------------------------ */
int remat_ndim(const remat_tensor *t);
/* Size of dim d; negative d counts from the end. -1 for a bad dim. */
int64_t remat_size(const remat_tensor *t, int d);
const int64_t *remat_shape(const remat_tensor *t);
/* Strides in elements. */
const int64_t *remat_strides(const remat_tensor *t);
int64_t remat_numel(const remat_tensor *t);
remat_dtype remat_tensor_dtype(const remat_tensor *t);
remat_device remat_tensor_device(const remat_tensor *t);
bool remat_is_contiguous(const remat_tensor *t);
/* Storage version counter (bumped by every in-place op on any view). */
uint64_t remat_version(const remat_tensor *t);
/* True when a and b share storage. */
bool remat_shares_storage(const remat_tensor *a, const remat_tensor *b);
/* Bytes of the storage behind t. */
size_t remat_storage_nbytes(const remat_tensor *t);
/* Writes "[2, 3] f32" style text into buf (always NUL-terminated). */
const char *remat_describe(const remat_tensor *t, char *buf, size_t n);

/* Optional debug/residual name (copied). NULL clears. */
remat_status remat_set_name(remat_tensor *t, const char *name);
const char *remat_name(const remat_tensor *t); /* NULL if unnamed */

/* ---- data access ----------------------------------------------------------
 * Pointer to element [0,...,0] of t (storage data + offset) on a
 * host-addressable device; NULL otherwise or when t has no data (a tensor
 * made while recomputation is stopping early). Honour remat_strides. */
void *remat_data(const remat_tensor *t);
/* The address of element [0,...,0] of t on its own device, whatever the device: on cuda a
 * device address, for the device's own APIs (cuBLAS, a kernel of yours, an allocator
 * trace) and never for the host to read or write; on cpu the same as remat_data. NULL
 * when t has no data. Valid while t's storage lives; honour remat_strides. */
void *remat_data_ptr(const remat_tensor *t);
/* Reads element at flat row-major index i as double. REMAT_EINVAL if out of
 * range. */
remat_status remat_item_at(const remat_tensor *t, int64_t i, double *value);
/* Value of a one-element tensor. */
remat_status remat_item(const remat_tensor *t, double *value);
/* Copies t (any strides) row-major into dst as `dtype` values; n is the
 * capacity of dst in elements. */
remat_status remat_copy_to_buffer(const remat_tensor *t, remat_dtype dtype, void *dst, int64_t n);

/* ---- autograd attributes --------------------------------------------------- */
bool remat_requires_grad(const remat_tensor *t);
/* Marks a leaf as requiring grad. REMAT_EINVAL on a non-leaf (set it on the
 * leaf instead, or detach) or, when requires_grad is true, on a tensor
 * that is not f32 or f64. */
remat_status remat_set_requires_grad(remat_tensor *t, bool requires_grad);
/* Borrowed pointer to t's accumulated gradient, or NULL. */
remat_tensor *remat_tensor_grad(const remat_tensor *t);
/* Replaces t's gradient (retains g; NULL clears). g must have t's shape
 * (REMAT_ESHAPE), dtype (REMAT_EDTYPE) and device (REMAT_EDEVICE). */
remat_status remat_set_grad(remat_tensor *t, remat_tensor *g);
/* True if t was not produced by a differentiable op (grad_fn is NULL). */
bool remat_is_leaf(const remat_tensor *t);
/* Borrowed pointer to the node that produced t, or NULL for leaves. */
remat_node *remat_grad_fn(const remat_tensor *t);
/* A new tensor sharing t's storage with no grad_fn and requires_grad off. */
remat_status remat_detach(remat_tensor **out, remat_tensor *t);

/* ---- device moves ---------------------------------------------------------- */
/* A copy of t on `device` (contiguous). If t is already there, a new
 * reference to t. Differentiable. */
remat_status remat_to_device(remat_tensor **out, remat_tensor *t, remat_device device);
/* A copy of t converted to dtype (contiguous; to bf16: rounded to nearest
 * even). Differentiable between the float dtypes f32, f64 and bf16: the
 * gradient is converted back to t's dtype. */
remat_status remat_to_dtype(remat_tensor **out, remat_tensor *t, remat_dtype dtype);
/* A new tensor with its own storage, same values (contiguous). Differentiable. */
remat_status remat_clone(remat_tensor **out, remat_tensor *t);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_TENSOR_H */
