/* src/backends/cuda/unavailable.c — remat/cuda.h in a build without the
 * CUDA toolkit (CMake: REMAT_CUDA=off, or auto without nvcc): no cuda
 * backend is registered (src/backends/backends.c) and every call that needs a GPU fails with
 * REMAT_EUNSUPPORTED. */
#include <string.h>

#include "core/core.h"
#include "remat/cuda.h"

#define RM_NO_CUDA                                                                                 \
    "remat was built without CUDA (configure with the CUDA toolkit installed: "                    \
    "docs/cuda.md)"

bool remat_cuda_available(const char **reason) {
    if (reason) *reason = RM_NO_CUDA;
    return false;
}
remat_status remat_cuda_synchronize(int index) {
    RM_UNUSED(index);
    return rm_err(REMAT_EUNSUPPORTED, "remat_cuda_synchronize: " RM_NO_CUDA);
}
remat_status remat_cuda_empty_cache(void) {
    return rm_err(REMAT_EUNSUPPORTED, "remat_cuda_empty_cache: " RM_NO_CUDA);
}
remat_status remat_cuda_memory_stats_get(int index, remat_cuda_memory_stats *stats) {
    RM_UNUSED(index);
    if (stats) memset(stats, 0, sizeof *stats);
    return rm_err(REMAT_EUNSUPPORTED, "remat_cuda_memory_stats_get: " RM_NO_CUDA);
}
size_t remat_cuda_memory_reserved(int index) {
    RM_UNUSED(index);
    return 0;
}
remat_status remat_cuda_reset_peak_memory_stats(int index) {
    RM_UNUSED(index);
    return rm_err(REMAT_EUNSUPPORTED, "remat_cuda_reset_peak_memory_stats: " RM_NO_CUDA);
}
remat_status remat_cuda_set_allocator(const remat_allocator *allocator) {
    RM_UNUSED(allocator);
    return rm_err(REMAT_EUNSUPPORTED, "remat_cuda_set_allocator: " RM_NO_CUDA);
}
static bool g_allow_tf32;
void remat_cuda_set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool remat_cuda_get_allow_tf32(void) { return g_allow_tf32; }
