/*
 * remat/autocast.h — bf16 mixed precision: the autocast scope
 * (PyTorch: torch.autocast(device_type, dtype=torch.bfloat16)).
 *
 * While autocast is on for a device type, ops on tensors of that type cast
 * their floating inputs before they run, by the op's category
 * (docs/autocast.md lists every op):
 *   - lower precision: matmul, linear, attention take bf16 inputs (f32 ones
 *     are cast) and run bf16 kernels with f32 accumulation; outputs bf16;
 *   - f32: layer_norm, softmax, log_softmax, the losses, the reductions and
 *     the numerically sensitive elementwise ops (exp, log, pow, sqrt) take
 *     f32 inputs (bf16 ones are cast up);
 *   - promote: ops of several float inputs (add, sub, mul, div) run in the
 *     widest of their dtypes — this one applies with autocast off too, as
 *     PyTorch's type promotion does;
 *   - the rest (relu, gelu, dropout, views, ...) run in their input's dtype.
 * f64 tensors are never cast (gradient checks stay f64). The casts are
 * differentiable (remat_to_dtype), so each input's gradient comes back in
 * its own dtype: f32 parameters (the master weights) get f32 gradients and
 * the optimizer stays f32. Saved activations of the lower-precision ops are
 * bf16 (half the bytes).
 *
 * The state is thread-local and nests: begin returns the state it replaced,
 * end puts it back. Checkpointing records the forward's state and
 * recomputes under it, whatever is active in backward (remat/checkpoint.h).
 */
#ifndef REMAT_AUTOCAST_H
#define REMAT_AUTOCAST_H

#include <stdbool.h>
#include <stdint.h>

#include "remat/device.h"
#include "remat/error.h"
#include "remat/export.h"
#include "remat/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* The autocast state of a thread: bit t of `enabled` is on when autocast
 * is on for device type t, and dtype[t] is then its lower-precision dtype
 * (REMAT_BF16, the only one). A zeroed struct is "off everywhere". */
typedef struct remat_autocast_state {
    uint32_t enabled;
    unsigned char dtype[REMAT_MAX_DEVICE_TYPES];
} remat_autocast_state;

/* Turns autocast on (enabled true) or off for `device_type` on this thread,
 * with `dtype` as its lower precision; *prev (OUT, may be NULL) receives
 * the state it replaces, for remat_autocast_end. REMAT_EDEVICE for a device
 * type that is not registered, REMAT_EDTYPE for a dtype other than
 * REMAT_BF16; the state is unchanged then. */
remat_status remat_autocast_begin(remat_autocast_state *prev, int device_type, remat_dtype dtype,
                                  bool enabled);
/* Restores the state begin returned (scopes end in reverse order). NULL: no-op. */
void remat_autocast_end(const remat_autocast_state *prev);
/* Whether autocast is on for device_type on this thread (false for a bad type). */
bool remat_autocast_enabled(int device_type);
/* The lower-precision dtype of device_type (REMAT_BF16). */
remat_dtype remat_autocast_dtype(int device_type);
/* The dtype a lower-precision op (matmul, linear, attention) would run x in on this thread:
 * the autocast dtype where autocast is on for x's device and x is f32 or bf16, else x's
 * own. A norm whose only consumer is such an op can write it so (remat_layer_norm_to): the
 * GPT block's norms do. x must not be NULL. */
remat_dtype remat_autocast_lower_dtype(const remat_tensor *x);
/* The whole thread-local state, and setting it back (checkpointing). */
void remat_autocast_get_state(remat_autocast_state *out);
void remat_autocast_set_state(const remat_autocast_state *s);

/* Whether this CPU has bf16 dot-product instructions (AVX512_BF16 or AMX-BF16),
 * detected at run time, and the bf16 GEMMs use them: false too where oneDNN is
 * capped below them (ONEDNN_MAX_CPU_ISA=AVX512_CORE, AVX2, ...) or REMAT_NO_BF16
 * is set. Without them bf16 GEMMs run through f32 (correct, with one warning,
 * and slower than f32 itself). */
bool remat_cpu_has_bf16(void);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif

#endif /* REMAT_AUTOCAST_H */
