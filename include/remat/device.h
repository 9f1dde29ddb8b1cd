/*
 * remat/device.h — device types, the allocator and its accounting, RNG.
 *
 * Device types. `cpu` (REMAT_CPU, id 0) is built in. Another type is
 * registered with remat_register_device_type; it supplies allocation,
 * copies, device count / current index, whether it is initialised, and
 * (optionally) RNG get/set state. A type whose memory is host-addressable
 * runs the CPU kernels on its memory.
 *
 * Allocator. Every byte of tensor storage goes through remat's allocator,
 * which keeps per-device counters (current, peak, number of allocations).
 * Counters count requested bytes exactly. A user allocator hook can replace
 * the CPU allocation functions (e.g. to inject failures or use an arena).
 *
 * RNG. Each device index owns a Philox4x32-10 generator (seed + 128-bit
 * counter). Random ops draw from the generator of their tensor's device.
 */
#ifndef REMAT_DEVICE_H
#define REMAT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

#define REMAT_MAX_DEVICE_TYPES 8
#define REMAT_MAX_DEVICES_PER_TYPE 16
/* Size in bytes of an RNG state blob (remat_rng_get_state). */
#define REMAT_RNG_STATE_BYTES 32

typedef enum remat_copy_kind {
    REMAT_COPY_HOST_TO_DEVICE = 0,
    REMAT_COPY_DEVICE_TO_HOST = 1,
    REMAT_COPY_DEVICE_TO_DEVICE = 2
} remat_copy_kind;

/* What a device type supplies. Unused callbacks may be NULL where noted. */
typedef struct remat_device_type_def {
    const char *name;      /* e.g. "cuda", "testdev"; copied; unique */
    bool host_addressable; /* memory readable by the CPU: CPU kernels run on it */
    void *user_data;       /* passed to every callback */
    /* Allocate nbytes on device `index`; NULL on failure. Required. */
    void *(*alloc)(void *user_data, int index, size_t nbytes);
    /* Free memory from alloc. Required. */
    void (*free)(void *user_data, int index, void *ptr, size_t nbytes);
    /* Copy nbytes. For HOST_TO_DEVICE dst is on device `index`, etc. Required. */
    remat_status (*copy)(void *user_data, int index, void *dst, const void *src, size_t nbytes,
                         remat_copy_kind kind);
    int (*device_count)(void *user_data);                           /* required */
    int (*current_device)(void *user_data);                         /* NULL → 0 */
    remat_status (*set_current_device)(void *user_data, int index); /* NULL → only 0 accepted */
    /* Whether the runtime has been initialised (PyTorch: torch.cuda.is_initialized).
     * NULL → always initialised. */
    bool (*is_initialized)(void *user_data);
    /* RNG state hooks; NULL → remat's built-in Philox generator per index. */
    remat_status (*rng_get_state)(void *user_data, int index, uint8_t state[REMAT_RNG_STATE_BYTES]);
    remat_status (*rng_set_state)(void *user_data, int index,
                                  const uint8_t state[REMAT_RNG_STATE_BYTES]);
} remat_device_type_def;

/* Registers a device type; *type_id receives its id (> 0). REMAT_EINVAL on
 * a missing required callback or a duplicate name; REMAT_ENOMEM when the
 * registry is full. Not thread-safe: register at start-up. */
remat_status remat_register_device_type(const remat_device_type_def *def, int *type_id);
/* Removes a registered type (not cpu). REMAT_ESTATE while memory allocated
 * on it is still live. */
remat_status remat_unregister_device_type(int type_id);
/* Looks up a type by name; -1 if none. */
int remat_device_type_id(const char *name);
/* Name of a type id, or NULL. */
const char *remat_device_type_name(int type_id);
/* Number of devices of the type (0 for an unknown type). */
int remat_device_count(int type_id);
/* Current device index of the type (0 for an unknown type). */
int remat_current_device(int type_id);
remat_status remat_set_current_device(int type_id, int index);
/* Whether the type's runtime is initialised. */
bool remat_device_is_initialized(int type_id);
/* Whether tensors of this type can be read by the CPU. */
bool remat_device_host_addressable(int type_id);
/* Checks that `device` names a registered type and a valid index. */
remat_status remat_device_check(remat_device device);

/* ---- allocator accounting ------------------------------------------------- */
typedef struct remat_alloc_stats {
    size_t current_bytes; /* bytes of live storage (requested sizes) */
    size_t peak_bytes;    /* max of current_bytes since start or reset_peak */
    uint64_t n_allocs;    /* number of successful allocations ever */
    uint64_t n_frees;
    uint64_t n_live; /* live allocations */
} remat_alloc_stats;

/* Counters of one device; REMAT_EDEVICE for an unknown device. */
remat_status remat_alloc_stats_get(remat_device device, remat_alloc_stats *stats);
/* Sets the device's peak to its current bytes. */
remat_status remat_alloc_reset_peak(remat_device device);
/* Convenience: current / peak bytes of the cpu device. */
size_t remat_cpu_current_bytes(void);
size_t remat_cpu_peak_bytes(void);

/* A user allocator for the cpu device: alloc returns memory aligned to at
 * least 64 bytes, or NULL (remat then fails the call with REMAT_ENOMEM).
 * Pass NULL functions to restore the default (aligned_alloc/free). Must not
 * be changed while cpu tensors are alive. */
typedef struct remat_allocator {
    void *(*alloc)(void *user_data, size_t nbytes);
    void (*free)(void *user_data, void *ptr, size_t nbytes);
    void *user_data;
} remat_allocator;
void remat_set_cpu_allocator(const remat_allocator *allocator);

/* ---- cpu buffer cache ------------------------------------------------------
 * The default cpu allocator keeps freed buffers of 64 KiB and more and hands
 * them to later allocations of the same size: a training loop's steady state
 * then makes no malloc/free calls and takes no page faults for its tensors
 * (left to malloc, freed buffers may go back to the kernel between steps and
 * be faulted in again, ~10 % of a step). The cache never holds more than the
 * cpu device's peak bytes minus the bytes in use, so with it the process
 * holds no more tensor memory than remat's own peak; a failed allocation
 * empties it and retries. Accounting (current/peak bytes, observers) counts
 * live tensors only, cached buffers never. On by default; off when the
 * environment has REMAT_CPU_CACHE=0, under AddressSanitizer (reuse would hide
 * use-after-free), and with a user allocator (remat_set_cpu_allocator, which
 * empties it). */
/* Turns the cache on or off (off empties it); overrides the environment. */
void remat_cpu_cache_enable(bool on);
bool remat_cpu_cache_enabled(void);
/* Frees every cached buffer (e.g. before handing memory to other code). */
void remat_cpu_cache_empty(void);
/* Bytes held by the cache (64-byte rounded buffer sizes). */
size_t remat_cpu_cache_bytes(void);

/* Observer of allocator events (for memory timelines): called after every
 * successful allocation (nbytes > 0) and before every free (nbytes < 0),
 * with the device's current bytes after the event. NULL removes it. */
typedef void (*remat_alloc_observer_fn)(void *user_data, remat_device device, int64_t delta,
                                        size_t current_bytes);
void remat_set_alloc_observer(remat_alloc_observer_fn fn, void *user_data);
/* The same events with the storage's address (ptr: what was allocated, or
 * what is about to be freed), for tools that tell allocations apart (which
 * of them are live at the peak). Independent of the observer above; one
 * of each at a time. NULL removes it. */
typedef void (*remat_alloc_event_fn)(void *user_data, remat_device device, const void *ptr,
                                     int64_t delta, size_t current_bytes);
void remat_set_alloc_event_observer(remat_alloc_event_fn fn, void *user_data);

/* ---- RNG -------------------------------------------------------------------- */
/* Seeds every generator of every device type (PyTorch: torch.manual_seed). */
void remat_manual_seed(uint64_t seed);
/* Seeds the generator of one device. */
remat_status remat_device_manual_seed(remat_device device, uint64_t seed);
/* Copies out / restores the generator state of `device` as an opaque blob
 * of REMAT_RNG_STATE_BYTES bytes. Uses the device type's hooks if it has
 * them. */
remat_status remat_rng_get_state(remat_device device, uint8_t state[REMAT_RNG_STATE_BYTES]);
remat_status remat_rng_set_state(remat_device device, const uint8_t state[REMAT_RNG_STATE_BYTES]);

/* Fork: stashes the cpu generator and those of `devices`, to be put back by
 * remat_rng_fork_end (PyTorch: torch.random.fork_rng). */
typedef struct remat_rng_fork {
    int n;
    remat_device devices[1 + REMAT_MAX_DEVICES_PER_TYPE];
    uint8_t states[1 + REMAT_MAX_DEVICES_PER_TYPE][REMAT_RNG_STATE_BYTES];
} remat_rng_fork;
remat_status remat_rng_fork_begin(remat_rng_fork *fork, int n_devices, const remat_device *devices);
remat_status remat_rng_fork_end(const remat_rng_fork *fork);

/* Philox4x32-10 block function (exposed for known-answer tests): encrypts
 * `counter` with `key`, writes 4 words to out. */
void remat_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_DEVICE_H */
