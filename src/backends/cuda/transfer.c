/* src/backends/cuda/transfer.c — the cuda device's rm_transfer_ops (core.h) for the offload
 * of saved tensors (src/sac/offload.c): pinned host memory (cudaHostAlloc), one side stream
 * per GPU for the copies, events. A copy waits for the work already queued on remat's
 * compute stream of that GPU (an event recorded there), runs on the side stream, and
 * returns an event recorded after it; the compute stream waits for that event before it
 * uses data brought back (stream_wait), so copies overlap compute in both directions. */
#include <pthread.h>

#include "cuda_backend.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t g_side[REMAT_MAX_DEVICES_PER_TYPE];

/* The side stream of GPU `index` (that GPU current), created on first use. */
static remat_status side_stream(int index, cudaStream_t *out) {
    pthread_mutex_lock(&g_lock);
    int rc = REMAT_OK;
    if (!g_side[index])
        rc = rm_cuda_check(cudaStreamCreateWithFlags(&g_side[index], cudaStreamNonBlocking),
                           "offload: creating the copy stream");
    *out = g_side[index];
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static void *host_alloc(size_t nbytes) {
    void *p = NULL;
    return cudaHostAlloc(&p, nbytes, cudaHostAllocDefault) == cudaSuccess ? p : NULL;
}

static void host_free(void *p, size_t nbytes) {
    (void)nbytes;
    cudaFreeHost(p);
}

static remat_status copy_async(int index, void *dst, const void *src, size_t nbytes,
                               remat_copy_kind kind, void **event) {
    *event = NULL;
    int prev, rc = rm_cuda_guard("offload", index, &prev);
    if (rc) return rc;
    cudaStream_t compute = rm_cuda_stream(index), side = NULL;
    cudaEvent_t ready = NULL, done = NULL;
    if (!compute) rc = REMAT_EUNSUPPORTED; /* message set by rm_cuda_stream */
    if (!rc) rc = side_stream(index, &side);
    if (!rc)
        rc = rm_cuda_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
                           "offload: event");
    if (!rc)
        rc = rm_cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                           "offload: event");
    if (!rc) rc = rm_cuda_check(cudaEventRecord(ready, compute), "offload: event record");
    if (!rc) rc = rm_cuda_check(cudaStreamWaitEvent(side, ready, 0), "offload: stream wait");
    if (!rc)
        rc = rm_cuda_check(cudaMemcpyAsync(dst, src, nbytes,
                                           kind == REMAT_COPY_DEVICE_TO_HOST
                                               ? cudaMemcpyDeviceToHost
                                               : cudaMemcpyHostToDevice,
                                           side),
                           "offload: copy");
    if (!rc) rc = rm_cuda_check(cudaEventRecord(done, side), "offload: event record");
    if (ready) cudaEventDestroy(ready); /* released once the side stream has passed it */
    if (rc && done) cudaEventDestroy(done);
    else *event = done;
    rm_cuda_unguard(prev);
    return rc;
}

/* Which GPU an event belongs to does not matter to the waits below: CUDA records it. */
static remat_status stream_wait(int index, void *event) {
    int prev, rc = rm_cuda_guard("offload", index, &prev);
    if (rc) return rc;
    cudaStream_t compute = rm_cuda_stream(index);
    rc = compute ? rm_cuda_check(cudaStreamWaitEvent(compute, (cudaEvent_t)event, 0),
                                 "offload: stream wait")
                 : REMAT_EUNSUPPORTED;
    rm_cuda_unguard(prev);
    return rc;
}

static bool done(void *event) { return cudaEventQuery((cudaEvent_t)event) == cudaSuccess; }

static remat_status host_wait(void *event) {
    return rm_cuda_check(cudaEventSynchronize((cudaEvent_t)event), "offload: waiting for a copy");
}

static void event_free(void *event) { cudaEventDestroy((cudaEvent_t)event); }

const rm_transfer_ops rm_cuda_transfer_ops = {
    .host_alloc = host_alloc,
    .host_free = host_free,
    .copy_async = copy_async,
    .stream_wait = stream_wait,
    .done = done,
    .host_wait = host_wait,
    .event_free = event_free,
};
