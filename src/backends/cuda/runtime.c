/* src/backends/cuda/runtime.c — the CUDA runtime as the rest of the backend
 * sees it: error conversion, device discovery (once, with the reason kept
 * when there is no GPU), the per-thread device guard, one stream and one
 * cuBLAS handle per device, TF32, synchronisation. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "cublas_api.h"
#include "cuda_backend.h"

/* ---- errors ---------------------------------------------------------------------------- */
static bool no_gpu_error(cudaError_t e) {
    return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
           e == cudaErrorCallRequiresNewerDriver || e == cudaErrorInitializationError ||
           e == cudaErrorDevicesUnavailable || e == cudaErrorStubLibrary ||
           e == cudaErrorSystemDriverMismatch || e == cudaErrorCompatNotSupportedOnDevice;
}

remat_status rm_cuda_check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return REMAT_OK;
    (void)cudaGetLastError(); /* clears a non-sticky error; a sticky one stays */
    int status = e == cudaErrorMemoryAllocation ? REMAT_ENOMEM
                 : no_gpu_error(e)              ? REMAT_EUNSUPPORTED
                                                : REMAT_EDEVICE;
    return rm_err(status, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static const char *cublas_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "cuBLAS error";
    }
}

remat_status rm_cublas_check(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return REMAT_OK;
    int status = s == CUBLAS_STATUS_ALLOC_FAILED ? REMAT_ENOMEM
                 : (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_ARCH_MISMATCH)
                     ? REMAT_EUNSUPPORTED
                     : REMAT_EDEVICE;
    return rm_err(status, "%s: %s (%d)", what, cublas_name(s), (int)s);
}

/* ---- discovery ------------------------------------------------------------------------- */
static pthread_once_t g_probe_once = PTHREAD_ONCE_INIT;
static int g_count;
static char g_reason[256];

static void probe(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        const char *what = e == cudaErrorInsufficientDriver
                               ? "no CUDA driver, or one older than the CUDA runtime remat "
                                 "was built with"
                           : e == cudaErrorNoDevice ? "no CUDA device"
                                                    : "CUDA cannot be initialised";
        snprintf(g_reason, sizeof g_reason, "%s (%s: %s)", what, cudaGetErrorName(e),
                 cudaGetErrorString(e));
        (void)cudaGetLastError();
        n = 0;
    } else if (n == 0) {
        snprintf(g_reason, sizeof g_reason, "no CUDA device");
    }
    g_count = n > REMAT_MAX_DEVICES_PER_TYPE ? REMAT_MAX_DEVICES_PER_TYPE : n;
}

int rm_cuda_device_count(void) {
    pthread_once(&g_probe_once, probe);
    return g_count;
}

const char *rm_cuda_unavailable_reason(void) {
    pthread_once(&g_probe_once, probe);
    return g_count > 0 ? NULL : g_reason;
}

bool remat_cuda_available(const char **reason) {
    const char *r = rm_cuda_unavailable_reason();
    if (reason) *reason = r;
    return r == NULL;
}

remat_status rm_cuda_check_index(const char *call, int index) {
    int n = rm_cuda_device_count();
    if (n == 0) return rm_err(REMAT_EUNSUPPORTED, "%s: %s", call, rm_cuda_unavailable_reason());
    if (index < 0 || index >= n)
        return rm_err(REMAT_EDEVICE, "%s: device cuda:%d does not exist (%d device%s)", call, index,
                      n, n == 1 ? "" : "s");
    return REMAT_OK;
}

/* ---- device guard ------------------------------------------------------------------------ */
static atomic_bool g_initialized;

bool rm_cuda_is_initialized(void) { return atomic_load(&g_initialized); }

remat_status rm_cuda_guard(const char *call, int index, int *prev) {
    int rc = rm_cuda_check_index(call, index);
    if (rc) return rc;
    int cur = 0;
    rc = rm_cuda_check(cudaGetDevice(&cur), call);
    if (!rc && cur != index) rc = rm_cuda_check(cudaSetDevice(index), call);
    if (rc) return rc;
    atomic_store(&g_initialized, true);
    *prev = cur;
    return REMAT_OK;
}

void rm_cuda_unguard(int prev) {
    int cur = prev;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev) (void)cudaSetDevice(prev);
}

/* ---- streams and cuBLAS handles ---------------------------------------------------------- */
typedef struct dev_rt {
    cudaStream_t stream;
    cublasHandle_t blas;
    int blas_tf32; /* the math mode last set on blas: -1 none yet */
} dev_rt;
static pthread_mutex_t g_rt_lock = PTHREAD_MUTEX_INITIALIZER;
static dev_rt g_rt[REMAT_MAX_DEVICES_PER_TYPE];
static atomic_bool g_allow_tf32;

cudaStream_t rm_cuda_stream(int index) {
    if (index < 0 || index >= REMAT_MAX_DEVICES_PER_TYPE) return NULL;
    pthread_mutex_lock(&g_rt_lock);
    cudaStream_t s = g_rt[index].stream;
    if (!s) {
        int prev;
        if (rm_cuda_guard("cuda stream", index, &prev) == REMAT_OK) {
            cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
            if (rm_cuda_check(e, "cudaStreamCreateWithFlags")) s = NULL;
            rm_cuda_unguard(prev);
        }
        g_rt[index].stream = s;
    }
    pthread_mutex_unlock(&g_rt_lock);
    return s;
}

remat_status rm_cuda_stream_sync(int index) {
    cudaStream_t s = rm_cuda_stream(index);
    if (!s) return rm_last_status() ? rm_last_status() : REMAT_EDEVICE;
    return rm_cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

cublasHandle_t rm_cuda_cublas(int index) {
    cudaStream_t s = rm_cuda_stream(index);
    if (!s) return NULL;
    pthread_mutex_lock(&g_rt_lock);
    dev_rt *d = &g_rt[index];
    int rc = REMAT_OK;
    const rm_cublas_api *api = rm_cublas_api_get("cuBLAS");
    if (!api) rc = rm_last_status();
    if (!rc && !d->blas) {
        rc = rm_cublas_check(api->create(&d->blas), "cublasCreate");
        if (!rc) rc = rm_cublas_check(api->set_stream(d->blas, s), "cublasSetStream");
        d->blas_tf32 = -1;
        if (rc && d->blas) {
            api->destroy(d->blas);
            d->blas = NULL;
        }
    }
    int want = atomic_load(&g_allow_tf32) ? 1 : 0;
    if (!rc && d->blas_tf32 != want) {
        /* CUBLAS_DEFAULT_MATH computes f32 GEMMs in f32 (no tensor-core
         * down-conversion); TF32 only when allowed, as PyTorch. bf16 GEMMs
         * sum in f32 and round once (docs/autocast.md): split-K partial
         * sums must not be rounded to bf16 (PyTorch's
         * allow_bf16_reduced_precision_reduction = False). */
        cublasMath_t mode = want ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
        mode = (cublasMath_t)(mode | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
        rc = rm_cublas_check(api->set_math_mode(d->blas, mode), "cublasSetMathMode");
        if (!rc) d->blas_tf32 = want;
    }
    cublasHandle_t h = rc ? NULL : d->blas;
    pthread_mutex_unlock(&g_rt_lock);
    return h;
}

void remat_cuda_set_allow_tf32(bool allow) { atomic_store(&g_allow_tf32, allow); }
bool remat_cuda_get_allow_tf32(void) { return atomic_load(&g_allow_tf32); }

remat_status remat_cuda_synchronize(int index) {
    int prev;
    int rc = rm_cuda_guard("remat_cuda_synchronize", index, &prev);
    if (rc) return rc;
    rc = rm_cuda_stream_sync(index);
    if (!rc) rc = rm_cuda_check(cudaDeviceSynchronize(), "remat_cuda_synchronize");
    rm_cuda_unguard(prev);
    return rc;
}

remat_status rm_cuda_begin(rm_cuda_ctx *c, const char *call, const remat_tensor *t) {
    c->index = rm_cuda_index(t);
    c->prev = -1;
    c->stream = NULL;
    int rc = rm_cuda_guard(call, c->index, &c->prev);
    if (rc) return rc;
    c->stream = rm_cuda_stream(c->index);
    if (!c->stream) return rm_last_status() ? rm_last_status() : REMAT_EDEVICE;
    return REMAT_OK;
}

void rm_cuda_end(rm_cuda_ctx *c) {
    if (c->prev >= 0) rm_cuda_unguard(c->prev);
    c->prev = -1;
}
