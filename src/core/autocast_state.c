/* src/core/autocast_state.c — the thread-local autocast state (remat/autocast.h) and
 * run-time detection of the CPU's bf16 instructions. The ops layer's driver
 * reads the state (src/ops/autocast.c); checkpointing saves and restores it. */
#include "remat/autocast.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

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

void remat_autocast_get_state(remat_autocast_state *out) {
    if (out) *out = tls_state;
}

void remat_autocast_set_state(const remat_autocast_state *s) {
    if (s) tls_state = *s;
    else memset(&tls_state, 0, sizeof tls_state);
}

/* CPUID leaf 7: subleaf 1 EAX bit 5 is AVX512_BF16; subleaf 0 EDX bit 22
 * is AMX-BF16 (usable only once the OS grants the tile state, which oneDNN
 * asks for itself). REMAT_NO_BF16 in the environment pretends neither is
 * there (tests of the fallback). */
bool remat_cpu_has_bf16(void) {
#if defined(__x86_64__) || defined(__i386__)
    static atomic_int cached = -1;
    int has = atomic_load(&cached);
    if (has < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        has = 0;
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) has |= (int)((a >> 5) & 1u);
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) has |= (int)((d >> 22) & 1u);
        atomic_store(&cached, has);
    }
    const char *env = getenv("REMAT_NO_BF16");
    return has && !(env && *env && *env != '0');
#else
    return false;
#endif
}
