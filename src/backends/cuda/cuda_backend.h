/* src/backends/cuda/cuda_backend.h — the cuda backend's private C header:
 * error conversion, the device guard and the current stream, the cuBLAS
 * handle, and how the kernel families register themselves.
 *
 * Built only when CMake found the CUDA toolkit (REMAT_CUDA=auto|on,
 * docs/cuda.md); then REMAT_WITH_CUDA is defined for the library's objects.
 *
 * How a kernel gets to the GPU (the convention every family follows):
 *   - CUDA C lives in src/backends/cuda/<family>.cu. A .cu file never
 *     includes src/core/core.h or anything of the library that is not C++-clean;
 *     it includes "launch.h" (and the family's own launcher header) and
 *     exports extern "C" launchers taking raw device pointers, sizes,
 *     strides, plain parameters and a cudaStream_t. A launcher enqueues its
 *     kernels on that stream and returns cudaGetLastError(): it never
 *     synchronises and never allocates with cudaMalloc (scratch comes from
 *     the caller, who has the caching allocator: rm_cuda_scratch).
 *   - The family's launchers are declared in src/backends/cuda/<family>.h
 *     (extern "C" under C++, plain C otherwise; includes only launch.h).
 *   - A small C wrapper (src/backends/cuda/<family>_kernels.c, say) is the
 *     rm_kernel_fn: it unpacks rm_kargs (tensors, params), sets the device
 *     of the operands (rm_cuda_guard), takes the stream (rm_cuda_stream),
 *     calls the launcher and turns its cudaError_t into a status
 *     (rm_cuda_check). It registers its kernels in rm_cuda_register_<family>
 *     with rm_kernel_register(RM_K_..., type, REMAT_F32/F64, fn).
 *   - rm_cuda_register_kernels (device.c) calls every family's function
 *     once, when the cuda device type is registered; a family declared
 *     below with nothing registered yet leaves its ops failing with
 *     REMAT_EUNSUPPORTED ("no <kernel> kernel for device 'cuda' ...").
 * Where the families are: elementwise, reduce, loss, nn, attention and
 * shape in <family>_kernels.c over <family>.cu (their shared pieces: kwrap.h
 * for the wrappers, kplan.h for the host-side index plans, kcommon.cuh for
 * the device helpers); matmul (cuBLAS GEMM, column sums) and random
 * (Philox, dropout) in gemm.c and rng.c; the optimizers' updates in optim_kernels.c over
 * optim.cu.
 *
 * Streams: every device has one stream of its own (created at first use,
 * non-blocking with respect to the legacy default stream); every kernel,
 * copy and allocation of remat on that device is ordered on it, so a block
 * freed by the caching allocator can be handed to the next allocation at
 * once (stream-ordered reuse, allocator.c). Reads of device memory by the
 * host (device -> host copies) synchronise that stream. */
#ifndef REMAT_CUDA_BACKEND_H
#define REMAT_CUDA_BACKEND_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "core/core.h"
#include "core/kernels.h"
#include "remat/cuda.h"

/* ---- errors ---------------------------------------------------------------------------- */
/* REMAT_OK for cudaSuccess, else an error status with the message
 * "<what>: <cuda error name>: <cuda error text>" (rm_err): REMAT_ENOMEM for
 * cudaErrorMemoryAllocation, REMAT_EUNSUPPORTED when there is no driver or
 * no device, REMAT_EDEVICE otherwise. Clears CUDA's sticky last error for
 * non-sticky errors (cudaGetLastError) so the next call starts clean. */
remat_status rm_cuda_check(cudaError_t e, const char *what);
/* The same for cuBLAS: REMAT_ENOMEM for CUBLAS_STATUS_ALLOC_FAILED,
 * REMAT_EUNSUPPORTED for NOT_SUPPORTED / ARCH_MISMATCH, else REMAT_EDEVICE. */
remat_status rm_cublas_check(cublasStatus_t s, const char *what);

/* ---- the runtime ------------------------------------------------------------------------- */
/* The device type id of "cuda" (> 0) once registered, else -1. */
int rm_cuda_type(void);
/* Devices found at first use (cudaGetDeviceCount, asked once): 0 when there
 * is no driver or no device; then rm_cuda_unavailable_reason says why. */
int rm_cuda_device_count(void);
/* NULL when devices were found; else "no CUDA driver (...)", "no CUDA
 * device" ... (static storage). */
const char *rm_cuda_unavailable_reason(void);
/* REMAT_OK when `index` names a device, else REMAT_EUNSUPPORTED (no
 * devices: the reason) or REMAT_EDEVICE (index out of range), naming call. */
remat_status rm_cuda_check_index(const char *call, int index);

/* Whether remat has made a CUDA context (set a device) yet (PyTorch:
 * torch.cuda.is_initialized). */
bool rm_cuda_is_initialized(void);
/* Makes `index` the calling thread's current CUDA device for a scope:
 * *prev gets the device that was current (restore it with
 * rm_cuda_unguard). Errors name `call`. */
remat_status rm_cuda_guard(const char *call, int index, int *prev);
void rm_cuda_unguard(int prev);
/* The stream remat orders everything on for device `index` (created on
 * first use with that device current). NULL with an error message set when
 * it cannot be created; callers check. */
cudaStream_t rm_cuda_stream(int index);
/* Waits for everything enqueued on device `index`'s stream. */
remat_status rm_cuda_stream_sync(int index);
/* What a kernel wrapper works in: the device of its operands made current
 * and that device's stream. rm_cuda_begin: REMAT_OK or the error (named
 * after call); rm_cuda_end undoes the device switch (after a failed begin
 * too). */
typedef struct rm_cuda_ctx {
    int index, prev;
    cudaStream_t stream;
} rm_cuda_ctx;
remat_status rm_cuda_begin(rm_cuda_ctx *c, const char *call, const remat_tensor *t);
void rm_cuda_end(rm_cuda_ctx *c);
/* The cuBLAS handle of device `index`, bound to rm_cuda_stream(index) and
 * to the TF32 setting (remat_cuda_set_allow_tf32); NULL with an error set
 * when it cannot be made. Call with the device current (rm_cuda_guard). */
cublasHandle_t rm_cuda_cublas(int index);
/* The device of a tensor's storage. */
static inline int rm_cuda_index(const remat_tensor *t) { return t->storage->device.index; }

/* ---- memory ------------------------------------------------------------------------------ */
/* The caching allocator (allocator.c) behind the device type's alloc/free:
 * device memory of device `index`, ordered on its stream. NULL on failure
 * (after emptying the cache and retrying once), with the message set. */
void *rm_cuda_malloc(int index, size_t nbytes);
void rm_cuda_free(int index, void *ptr, size_t nbytes);
/* Scratch for a kernel wrapper (a reduction's partial sums): device memory
 * from the caching allocator, outside the tensor accounting — the counters
 * count tensor storage only, as on cpu. Free with rm_cuda_scratch_free
 * (stream-ordered: the memory may be reused by work enqueued later). */
void *rm_cuda_scratch(int index, size_t nbytes);
void rm_cuda_scratch_free(int index, void *ptr);
/* Frees every cached block of every device (empty_cache) and the pinned
 * staging buffers. */
void rm_cuda_release_all(void);

/* ---- registration -------------------------------------------------------------------------- */
/* Registers every family's kernels for device type `device_type`. */
void rm_cuda_register_kernels(int device_type);
/* One per family (see the top of this file for who owns which). */
void rm_cuda_register_elementwise(int device_type);
void rm_cuda_register_reduce(int device_type);
void rm_cuda_register_nn(int device_type);
void rm_cuda_register_loss(int device_type);
void rm_cuda_register_attention(int device_type);
void rm_cuda_register_shape(int device_type);
void rm_cuda_register_matmul(int device_type); /* gemm.c */
void rm_cuda_register_random(int device_type); /* rng.c: dropout */
void rm_cuda_register_optim(int device_type);  /* optim_kernels.c: AdamW, SGD, norms */
/* bf16.c: a bf16 row for every kernel with an f32 row and no bf16 one (the f32
 * kernel on widened operands, outputs rounded); registered after the families */
void rm_cuda_register_bf16_via_f32(int device_type);
/* bf16.c: kernel id's bf16 call k run that way (for a bf16 row that takes some calls
 * itself and hands the others on: layer_norm's backward). */
remat_status rm_cuda_bf16_via_f32(rm_kernel_id id, const rm_kargs *k);
/* transfer.c: offload's pinned memory, side stream and events (the record's transfer ops) */
extern const rm_transfer_ops rm_cuda_transfer_ops;
/* timer.c: events for the kernel timer (the record's timer ops) */
extern const rm_timer_ops rm_cuda_timer_ops;

#endif /* REMAT_CUDA_BACKEND_H */
