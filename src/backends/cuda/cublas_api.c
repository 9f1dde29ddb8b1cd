/* src/backends/cuda/cublas_api.c — cuBLAS opened on first use (see cublas_api.h). */
#include "cublas_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "core/core.h"

#define RM_STR_(x) #x
#define RM_STR(x) RM_STR_(x)
/* The soname of the cuBLAS remat was compiled against (cuBLAS keeps its ABI
 * within a major version). */
#define RM_CUBLAS_SONAME "libcublas.so." RM_STR(CUBLAS_VER_MAJOR)

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static rm_cublas_api g_api;
static atomic_bool g_ok, g_loaded;
static char g_why[512];

/* dlopen by soname (the loader's path: LD_LIBRARY_PATH, ld.so.conf, the
 * library's run path), then in the toolkit directory of the build. */
static void *open_cublas(void) {
    void *h = dlopen(RM_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    char first[256];
    snprintf(first, sizeof first, "%s", dlerror());
#ifdef REMAT_CUDA_LIBDIR
    h = dlopen(REMAT_CUDA_LIBDIR "/" RM_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
#endif
    snprintf(g_why, sizeof g_why, "%s", first);
    return NULL;
}

static void load(void) {
    void *h = open_cublas();
    if (!h) return;
    struct {
        void **slot;
        const char *name;
    } fns[] = {
        {(void **)&g_api.create, "cublasCreate_v2"},
        {(void **)&g_api.destroy, "cublasDestroy_v2"},
        {(void **)&g_api.set_stream, "cublasSetStream_v2"},
        {(void **)&g_api.set_math_mode, "cublasSetMathMode"},
        {(void **)&g_api.sgemm, "cublasSgemm_v2_64"},
        {(void **)&g_api.dgemm, "cublasDgemm_v2_64"},
        {(void **)&g_api.sgemm_strided, "cublasSgemmStridedBatched_64"},
        {(void **)&g_api.dgemm_strided, "cublasDgemmStridedBatched_64"},
        {(void **)&g_api.gemm_ex, "cublasGemmEx_64"},
        {(void **)&g_api.gemm_strided_ex, "cublasGemmStridedBatchedEx_64"},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        *fns[i].slot = dlsym(h, fns[i].name);
        if (!*fns[i].slot) {
            snprintf(g_why, sizeof g_why,
                     "%s has no %s (a cuBLAS older than the one remat was "
                     "built with?)",
                     RM_CUBLAS_SONAME, fns[i].name);
            dlclose(h);
            return;
        }
    }
    /* kept open for the process: the handles made from it live until exit */
    atomic_store(&g_loaded, true);
    atomic_store(&g_ok, true);
}

const rm_cublas_api *rm_cublas_api_get(const char *call) {
    pthread_once(&g_once, load);
    if (atomic_load(&g_ok)) return &g_api;
    rm_err(REMAT_EUNSUPPORTED,
           "%s: cannot load cuBLAS (%s): %s; install the CUDA toolkit's cuBLAS or put its "
           "directory on LD_LIBRARY_PATH",
           call, RM_CUBLAS_SONAME, g_why);
    return NULL;
}

bool rm_cublas_loaded(void) { return atomic_load(&g_loaded); }
