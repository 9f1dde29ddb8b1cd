/* src/backends/backends.c — the built-in backends, in the order they take their type ids:
 * the cpu first (backend 0), then cuda where the library is built with it. Each is one
 * record (src/core/backend.h), the one name a backend's folder exports. */
#include "core/backend.h"

extern const rm_backend rm_backend_cpu;
#ifdef REMAT_WITH_CUDA
extern const rm_backend rm_backend_cuda;
#endif

const rm_backend *const rm_backends_builtin[] = {
    &rm_backend_cpu,
#ifdef REMAT_WITH_CUDA
    &rm_backend_cuda,
#endif
    NULL,
};
