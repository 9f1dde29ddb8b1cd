/*
 * remat/compress.h — compact storage of saved activations, as saved-tensor
 * hook pairs (remat_saved_hooks_push, remat/autograd.h).
 *
 *  - bf16: every saved f32 tensor is stored as bf16 (2 bytes per element
 *    instead of 4) and converted back to f32 when backward unpacks it.
 *    LOSSY: the conversion rounds to nearest (ties to even) to 8
 *    significant bits, so each value comes back with a relative error of
 *    at most 2^-8 (normal numbers; subnormals below 2^-126 lose more,
 *    NaN and infinities are kept). Gradients change accordingly. The
 *    conversion runs on the tensor's device (cuda: a kernel). Other dtypes
 *    are saved unchanged, as are tensors without data (skip mode).
 *  - offload: every saved tensor living on a non-cpu device is copied to
 *    host memory and copied back to its device when unpacked (cpu
 *    tensors are saved unchanged). Exact. On cuda (PyTorch: save_on_cpu with
 *    pin_memory=True) the host memory is pinned and the copies run on a
 *    side stream ordered by events, overlapping compute: the device memory
 *    of a saved tensor is released once its copy to the host is done, and
 *    when backward unpacks one, the two saved before it start coming back
 *    (the next block's, as backward goes). Elsewhere the copies are
 *    synchronous.
 *
 * Each pack makes its own copy: a tensor saved by several ops is stored
 * several times (PyTorch's hooks behave the same). The original is freed as soon
 * as nothing else refers to it, which is where the saving comes from.
 *
 * 1-bit masks for relu and dropout need no hooks: those ops always save a
 * bit mask (u8, one bit per element) instead of a full tensor.
 *
 * Example:
 *   remat_saved_hooks h;
 *   remat_bf16_saved_hooks(&h, 0);
 *   remat_saved_hooks_push(&h);
 *   ... forward ...
 *   remat_saved_hooks_pop();
 *   remat_backward_scalar(loss);   // unpacks through the hooks
 */
#ifndef REMAT_COMPRESS_H
#define REMAT_COMPRESS_H

#include <stdint.h>

#include "remat/autograd.h"
#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* Fills *out with the bf16 hook pair. f32 tensors with fewer than
 * min_numel elements are saved unchanged (0: convert every f32 tensor). */
void remat_bf16_saved_hooks(remat_saved_hooks *out, int64_t min_numel);
/* Fills *out with the host-offload hook pair. */
void remat_offload_saved_hooks(remat_saved_hooks *out);
/* Waits until every copy to host memory that the offload hooks or an
 * OFFLOAD policy started is done, and gives those tensors' device memory
 * back (it otherwise goes back at the next offload or restore). Nothing
 * to do without offloaded tensors. remat_plan_run calls it after a stage
 * whose op-level plan offloads, so the next stage runs without them. */
void remat_offload_wait(void);

/* The conversions the bf16 hooks use (no autograd): f32 (any strides) → a
 * new contiguous bf16 tensor on the same device, and back. REMAT_EDTYPE for
 * another input dtype, REMAT_ESTATE for a tensor without data (skip mode). */
remat_status remat_to_bf16(remat_tensor **out, remat_tensor *t);
remat_status remat_bf16_to_f32(remat_tensor **out, remat_tensor *t);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_COMPRESS_H */
