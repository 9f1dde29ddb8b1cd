/* src/backends/cpu/workspace.c — the cpu kernels' scratch through the cpu device's
 * allocator (workspace.h says why and how to use it). */
#include <stdlib.h>

#include "core/core.h"
#include "workspace.h"

void *rm_cpu_ws_take(size_t nbytes) {
    if (nbytes < RM_CPU_WS_MIN) return malloc(nbytes ? nbytes : 1);
    /* rm_device_alloc: the cpu allocator (its cache first), then the counters and the
     * calling thread's meter, as a tensor's storage */
    return rm_device_alloc(REMAT_DEVICE_CPU, nbytes);
}

void rm_cpu_ws_give(void *p, size_t nbytes) {
    if (!p) return;
    if (nbytes < RM_CPU_WS_MIN) free(p);
    else rm_device_free(REMAT_DEVICE_CPU, p, nbytes);
}
