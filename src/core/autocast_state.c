/* src/core/autocast_state.c — the thread-local autocast state (remat/autocast.h).
 * The ops layer's driver reads the state (src/ops/autocast.c); checkpointing
 * saves and restores it. Whether the CPU's bf16 instructions are used:
 * remat_cpu_has_bf16 in src/backends/cpu/gemm_bf16.c. */
#include "remat/autocast.h"

#include <stdlib.h>
#include <string.h>

#include "core.h"

static RM_TLS remat_autocast_state tls_state;

remat_status remat_autocast_begin(remat_autocast_state *prev, int device_type, remat_dtype dtype,
                                  bool enabled) {
    if (!remat_device_type_name(device_type))
        return rm_err(REMAT_EDEVICE, "remat_autocast_begin: unknown device type %d", device_type);
    if (dtype != REMAT_BF16)
        return rm_err(REMAT_EDTYPE, "remat_autocast_begin: autocast dtype must be bf16, got %s",
                      remat_dtype_name(dtype));
    if (prev) *prev = tls_state;
    uint32_t bit = 1u << device_type;
    tls_state.enabled = enabled ? tls_state.enabled | bit : tls_state.enabled & ~bit;
    tls_state.dtype[device_type] = (unsigned char)dtype;
    return REMAT_OK;
}

void remat_autocast_end(const remat_autocast_state *prev) {
    if (prev) tls_state = *prev;
}

bool remat_autocast_enabled(int device_type) {
    if (device_type < 0 || device_type >= REMAT_MAX_DEVICE_TYPES) return false;
    return tls_state.enabled >> device_type & 1u;
}

remat_dtype remat_autocast_dtype(int device_type) {
    (void)device_type;
    return REMAT_BF16;
}

remat_dtype remat_autocast_lower_dtype(const remat_tensor *x) {
    const remat_dtype dt = remat_tensor_dtype(x);
    const int type = remat_tensor_device(x).type;
    if ((dt == REMAT_F32 || dt == REMAT_BF16) && remat_autocast_enabled(type))
        return remat_autocast_dtype(type);
    return dt;
}

void remat_autocast_get_state(remat_autocast_state *out) {
    if (out) *out = tls_state;
}

void remat_autocast_set_state(const remat_autocast_state *s) {
    if (s) tls_state = *s;
    else memset(&tls_state, 0, sizeof tls_state);
}
