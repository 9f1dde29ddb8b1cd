/* src/backends/cuda/device.c — the cuda backend's record (rm_backend_cuda: the "cuda"
 * device type, its kernel rows, its transfer ops; src/core/device.c registers it at
 * start-up): device count, current device, copies, and the registration of every
 * kernel family.
 *
 * Copies between host and GPU go through pinned staging buffers (two per
 * device, RM_STAGE_BYTES each, allocated at the first copy that needs them):
 * host -> device copies the host data into one buffer while the previous
 * buffer's transfer runs, and returns once the last chunk is enqueued
 * (events guard each buffer's reuse; the device stream orders the kernels
 * after it); device -> host enqueues chunk i + 1 while copying chunk i out,
 * and returns when the data is in the caller's memory. Copies of at most
 * RM_STAGE_DIRECT bytes go straight from pageable memory (the driver stages
 * those itself). Device -> device copies are enqueued on the destination's
 * stream (cudaMemcpyDefault: a peer copy when the source is another GPU). */
#include <pthread.h>
#include <string.h>

#include "cuda_backend.h"

#define RM_STAGE_BYTES ((size_t)4 << 20)
#define RM_STAGE_DIRECT ((size_t)64 << 10)

static int g_type = -1;

int rm_cuda_type(void) { return g_type; }

/* ---- pinned staging ------------------------------------------------------------------------ */
typedef struct stage {
    pthread_mutex_t lock; /* one staged copy at a time per device */
    void *buf[2];
    cudaEvent_t done[2]; /* the buffer's last transfer has completed */
} stage;
static stage g_stage[REMAT_MAX_DEVICES_PER_TYPE];
static pthread_once_t g_stage_once = PTHREAD_ONCE_INIT;
static void stage_init(void) {
    for (int i = 0; i < REMAT_MAX_DEVICES_PER_TYPE; i++) pthread_mutex_init(&g_stage[i].lock, NULL);
}

/* The staging buffers of device `index` (its lock held, the device current). */
static remat_status stage_get(int index, stage **out) {
    stage *st = &g_stage[index];
    for (int b = 0; b < 2; b++) {
        if (st->buf[b]) continue;
        int rc = rm_cuda_check(cudaHostAlloc(&st->buf[b], RM_STAGE_BYTES, cudaHostAllocDefault),
                               "cudaHostAlloc (pinned staging)");
        if (!rc)
            rc = rm_cuda_check(cudaEventCreateWithFlags(&st->done[b], cudaEventDisableTiming),
                               "cudaEventCreate");
        if (rc) {
            if (st->buf[b]) cudaFreeHost(st->buf[b]);
            st->buf[b] = NULL;
            return rc;
        }
    }
    *out = st;
    return REMAT_OK;
}

static remat_status copy_h2d(int index, cudaStream_t s, char *dst, const char *src, size_t n) {
    if (n <= RM_STAGE_DIRECT)
        return rm_cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s),
                             "host to cuda copy");
    stage *st;
    int rc = stage_get(index, &st);
    for (size_t off = 0, k = 0; !rc && off < n; off += RM_STAGE_BYTES, k ^= 1) {
        size_t c = n - off < RM_STAGE_BYTES ? n - off : RM_STAGE_BYTES;
        rc = rm_cuda_check(cudaEventSynchronize(st->done[k]), "host to cuda copy");
        if (rc) break;
        memcpy(st->buf[k], src + off, c);
        rc = rm_cuda_check(cudaMemcpyAsync(dst + off, st->buf[k], c, cudaMemcpyHostToDevice, s),
                           "host to cuda copy");
        if (!rc) rc = rm_cuda_check(cudaEventRecord(st->done[k], s), "host to cuda copy");
    }
    return rc;
}

static remat_status copy_d2h(int index, cudaStream_t s, char *dst, const char *src, size_t n) {
    if (n <= RM_STAGE_DIRECT) {
        int rc = rm_cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s),
                               "cuda to host copy");
        return rc ? rc : rm_cuda_check(cudaStreamSynchronize(s), "cuda to host copy");
    }
    stage *st;
    int rc = stage_get(index, &st);
    size_t nchunks = (n + RM_STAGE_BYTES - 1) / RM_STAGE_BYTES;
    /* chunk i goes to buffer i % 2; chunk i + 1 is enqueued before chunk i is read */
    for (size_t i = 0; !rc && i <= nchunks; i++) {
        if (i < nchunks) {
            size_t off = i * RM_STAGE_BYTES;
            size_t c = n - off < RM_STAGE_BYTES ? n - off : RM_STAGE_BYTES;
            rc = rm_cuda_check(
                cudaMemcpyAsync(st->buf[i & 1], src + off, c, cudaMemcpyDeviceToHost, s),
                "cuda to host copy");
            if (!rc) rc = rm_cuda_check(cudaEventRecord(st->done[i & 1], s), "cuda to host copy");
        }
        if (!rc && i > 0) {
            size_t j = i - 1, off = j * RM_STAGE_BYTES;
            size_t c = n - off < RM_STAGE_BYTES ? n - off : RM_STAGE_BYTES;
            rc = rm_cuda_check(cudaEventSynchronize(st->done[j & 1]), "cuda to host copy");
            if (!rc) memcpy(dst + off, st->buf[j & 1], c);
        }
    }
    if (rc) (void)cudaStreamSynchronize(s); /* leave no transfer into the buffers running */
    return rc;
}

/* ---- the device type ------------------------------------------------------------------------ */
static void *cu_alloc(void *ud, int index, size_t nbytes) {
    RM_UNUSED(ud);
    return rm_cuda_malloc(index, nbytes);
}
static void cu_free(void *ud, int index, void *ptr, size_t nbytes) {
    RM_UNUSED(ud);
    rm_cuda_free(index, ptr, nbytes);
}
static remat_status cu_copy(void *ud, int index, void *dst, const void *src, size_t n,
                            remat_copy_kind k) {
    RM_UNUSED(ud);
    int prev;
    int rc = rm_cuda_guard("cuda copy", index, &prev);
    if (rc) return rc;
    cudaStream_t s = rm_cuda_stream(index);
    if (!s) rc = rm_last_status() ? rm_last_status() : REMAT_EDEVICE;
    if (!rc && k == REMAT_COPY_DEVICE_TO_DEVICE) {
        rc = rm_cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s), "cuda to cuda copy");
    } else if (!rc) {
        pthread_once(&g_stage_once, stage_init);
        pthread_mutex_lock(&g_stage[index].lock);
        rc = k == REMAT_COPY_HOST_TO_DEVICE ? copy_h2d(index, s, dst, src, n)
                                            : copy_d2h(index, s, dst, src, n);
        pthread_mutex_unlock(&g_stage[index].lock);
    }
    rm_cuda_unguard(prev);
    return rc;
}
static int cu_count(void *ud) {
    RM_UNUSED(ud);
    return rm_cuda_device_count();
}
static int cu_current(void *ud) {
    RM_UNUSED(ud);
    int d = 0;
    if (rm_cuda_device_count() == 0 || cudaGetDevice(&d) != cudaSuccess) return 0;
    return d;
}
static remat_status cu_set_current(void *ud, int index) {
    RM_UNUSED(ud);
    int rc = rm_cuda_check_index("remat_set_current_device", index);
    return rc ? rc : rm_cuda_check(cudaSetDevice(index), "remat_set_current_device");
}
static bool cu_initialized(void *ud) {
    RM_UNUSED(ud);
    return rm_cuda_is_initialized();
}

static void cu_registered(int type_id) {
    g_type = type_id;
    rm_cuda_register_kernels(type_id);
}

void rm_cuda_register_kernels(int device_type) {
    rm_cuda_register_elementwise(device_type);
    rm_cuda_register_reduce(device_type);
    rm_cuda_register_nn(device_type);
    rm_cuda_register_loss(device_type);
    rm_cuda_register_attention(device_type);
    rm_cuda_register_shape(device_type);
    rm_cuda_register_matmul(device_type);
    rm_cuda_register_random(device_type);
    rm_cuda_register_optim(device_type);
    rm_cuda_register_bf16_via_f32(device_type); /* last: fills the bf16 rows left empty */
}

/* Buffer donation's device side (src/autograd/graph.h): mse's backward kernel may write
 * over its saved prediction (elementwise). The optimizer updates read the gradient scaled
 * (optim.cu); the norms write a bf16 y (layer_norm.cu: remat_layer_norm_to), and the add
 * + norm reads a bf16 r next to an f32 x uncast (autocast's residual branch), the loss
 * autocast's bf16 logits (cross_entropy.cu). */
static const unsigned char k_flags[RM_K_COUNT] = {
    [RM_K_MSE_BWD] = RM_KF_IN_PLACE,
    [RM_K_BIAS_GELU_BWD] = RM_KF_IN_PLACE,
    [RM_K_ADAMW] = RM_KF_GRAD_SCALE,
    [RM_K_SGD] = RM_KF_GRAD_SCALE,
    [RM_K_LAYER_NORM] = RM_KF_BF16_Y,
    [RM_K_ADD_LAYER_NORM] = RM_KF_BF16_Y | RM_KF_AUTOCAST_KEEP,
    [RM_K_CROSS_ENTROPY] = RM_KF_AUTOCAST_KEEP,
};

/* The cuda backend's record (src/core/backend.h), registered with the built-in ones
 * (src/backends/backends.c). */
const rm_backend rm_backend_cuda = {
    .device =
        {
            .name = "cuda",
            .host_addressable = false,
            .alloc = cu_alloc,
            .free = cu_free,
            .copy = cu_copy,
            .device_count = cu_count,
            .current_device = cu_current,
            .set_current_device = cu_set_current,
            .is_initialized = cu_initialized,
            /* RNG: remat's own Philox state per index (src/core/device.c), which the
             * kernels read through rm_rng_reserve like the cpu ones */
        },
    /* kernel rows: rm_cuda_register_kernels, once the type id is known */
    .kernel_flags = k_flags,
    .transfer = &rm_cuda_transfer_ops,
    .registered = cu_registered,
    .unavailable_reason = rm_cuda_unavailable_reason,
    .timer = &rm_cuda_timer_ops,
};
