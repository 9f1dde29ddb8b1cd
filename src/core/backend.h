/* src/core/backend.h — a backend is one record: its device type's vtable, its kernel rows
 * and its transfer ops (and, for backend 0, the host copy routines the core lends).
 *
 * Every backend registers the same way, with rm_backend_register: the cpu (backend 0, the
 * first of the built-in list src/backends/backends.c), cuda where the library is built with
 * it, the test devices (tests/support: fenced, testdev), a user's device type through
 * remat_register_device_type. Nothing outside src/backends/NAME/ names what a backend
 * defines but its record (scripts/check_layers.sh): the core reaches a backend only through
 * what it registered. A new backend is one folder and one record (docs/ops.md). */
#ifndef REMAT_CORE_BACKEND_H
#define REMAT_CORE_BACKEND_H

#include "core.h"
#include "kernels.h"

/* What backend 0 lends the core for tensors in host memory (rm_copy_into, rm_zero_window,
 * contiguous copies): the core itself never loops over tensor data. */
typedef struct rm_host_ops {
    /* dst := src (src broadcast to dst's shape) when they have the same dtype, bit for bit;
     * false, doing nothing, when the dtypes differ. */
    bool (*copy_same_dtype)(remat_tensor *dst, const remat_tensor *src);
    /* t contiguous: zeroes t[..., lo:hi, ...] along dim d. */
    void (*zero_dim_range)(remat_tensor *t, int d, int64_t lo, int64_t hi);
    /* n contiguous elements f32 -> bf16 (rounded as rm_f32_to_bf16) and back. */
    void (*f32_to_bf16)(const float *restrict x, uint16_t *restrict y, int64_t n);
    void (*bf16_to_f32)(const uint16_t *restrict x, float *restrict y, int64_t n);
} rm_host_ops;

/* Device-side timing for the kernel timer (src/core/timing.c, remat/timing.h): a device
 * that runs behind the host marks points in its stream order, and the timer reads the
 * time between two marks once the device has reached them. */
typedef struct rm_timer_ops {
    /* A mark recorded now in device `index`'s stream order; NULL on failure. */
    void *(*mark)(int index);
    /* The ms between two marks of one device, waiting until `end` is reached; negative
     * on failure. */
    double (*elapsed_ms)(void *start, void *end);
    /* Gives a mark back; NULL: nothing. */
    void (*release)(void *mark);
} rm_timer_ops;

typedef struct rm_backend {
    /* The device type: name, memory, copies, device count, RNG hooks (remat/device.h). */
    remat_device_type_def device;
    /* Kernel rows, [kernel][dtype] (NULL entries: none), copied into the kernel table at
     * registration. NULL: none, or, for a host-addressable type, backend 0's rows. */
    const rm_kernel_fn (*kernels)[RM_N_DTYPES];
    /* For a kernel whose bf16 entry is NULL: this row's (the f32 kernel on converted
     * copies). NULL: none. */
    const rm_kernel_fn *bf16_fallback;
    /* [kernel]: what its kernels allow beyond the ABI (RM_KF_IN_PLACE, RM_KF_WIDE_GRAD,
     * src/core/kernels.h): the device side of buffer donation. NULL: nothing. Adopted with
     * backend 0's rows. */
    const unsigned char *kernel_flags;
    /* Asynchronous transfers for offloading (rm_transfer_ops, core.h); NULL: none. */
    const rm_transfer_ops *transfer;
    /* Backend 0's host routines (the cpu's); NULL for every other backend. */
    const rm_host_ops *host;
    /* Called once registered, with its type id: kernel rows that cannot be static
     * (rm_kernel_register), state keyed by the id. NULL: nothing. */
    void (*registered)(int type_id);
    /* Why the type has no device when device_count says 0 ("no CUDA driver (...)"):
     * device checks fail with REMAT_EUNSUPPORTED and it. NULL (or returning NULL): the
     * plain "does not exist". */
    const char *(*unavailable_reason)(void);
    /* Device-side timing (kernels that run behind the host); NULL: the kernel timer
     * reads the host's clock around each call (a synchronous device). */
    const rm_timer_ops *timer;
} rm_backend;

/* Registers backend b: its device type (b->device, copied), its kernel rows, transfer
 * ops and host routines (pointers kept: they must outlive the registration), then calls
 * b->registered. *type_id receives the id: 0 for the first backend registered (the
 * cpu, registered first of the built-in list), then the first free one. Errors as
 * remat_register_device_type's. Not thread-safe: register at start-up. */
remat_status rm_backend_register(const rm_backend *b, int *type_id);

/* The timer ops device type `type` registered (NULL: none, or no such type). */
const rm_timer_ops *rm_backend_timer(int type);

/* (src/backends/backends.c) The built-in backends, NULL-terminated, backend 0 first:
 * registered once, before any device type is used or another one registered. */
extern const rm_backend *const rm_backends_builtin[];

/* Backend 0's host routines (set when it registers, before any tensor exists). */
extern const rm_host_ops *rm_host_;
static inline const rm_host_ops *rm_host(void) { return rm_host_; }

#endif /* REMAT_CORE_BACKEND_H */
