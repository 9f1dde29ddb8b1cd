/* src/core/device.c — the registry of backends (src/core/backend.h) and their device
 * types, the accounting allocator, RNG state. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "philox.h"

typedef struct rm_gen {
    uint64_t seed;
    uint64_t offset; /* Philox blocks consumed */
} rm_gen;

typedef struct rm_devtype {
    bool used;
    rm_backend b; /* its record; b.device.name points to name */
    char name[32];
    remat_alloc_stats stats[REMAT_MAX_DEVICES_PER_TYPE];
    rm_gen gen[REMAT_MAX_DEVICES_PER_TYPE];
} rm_devtype;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static rm_devtype g_types[REMAT_MAX_DEVICE_TYPES];
static remat_alloc_observer_fn g_observer;
static void *g_observer_ud;
static remat_alloc_event_fn g_event_observer; /* the same events with their addresses */
static void *g_event_observer_ud;
static const uint64_t k_default_seed = 67280421310721ULL; /* PyTorch's default seed */

const rm_host_ops *rm_host_;

/* ---- the registry ------------------------------------------------------------------ */
static remat_status register_backend(const rm_backend *b, int *type_id);

/* The built-in backends (cpu first: type 0) take their ids before any other type is
 * registered or looked up. */
static pthread_once_t g_builtin_once = PTHREAD_ONCE_INIT;
static void register_builtins(void) {
    for (const rm_backend *const *b = rm_backends_builtin; *b; b++) {
        int id = -1;
        if (register_backend(*b, &id) != REMAT_OK)
            rm_warn("device type '%s' could not be registered: %s", (*b)->device.name,
                    remat_last_error());
    }
}
static void ensure_builtin(void) { pthread_once(&g_builtin_once, register_builtins); }

static rm_devtype *get_type(int id) {
    if (id < 0 || id >= REMAT_MAX_DEVICE_TYPES) return NULL;
    ensure_builtin();
    pthread_mutex_lock(&g_lock);
    rm_devtype *t = g_types[id].used ? &g_types[id] : NULL;
    pthread_mutex_unlock(&g_lock);
    return t;
}

const rm_timer_ops *rm_backend_timer(int type) {
    const rm_devtype *t = get_type(type);
    return t ? t->b.timer : NULL;
}

remat_status rm_backend_register(const rm_backend *b, int *type_id) {
    ensure_builtin();
    return register_backend(b, type_id);
}

remat_status remat_register_device_type(const remat_device_type_def *def, int *type_id) {
    if (!def)
        return rm_err(REMAT_EINVAL, "remat_register_device_type: def and type_id must not be NULL");
    /* a user's device type: its vtable alone (a host-addressable one runs backend 0's
     * kernels; another registers its own) */
    const rm_backend b = {.device = *def};
    return rm_backend_register(&b, type_id);
}

static remat_status register_backend(const rm_backend *b, int *type_id) {
    const remat_device_type_def *def = b ? &b->device : NULL;
    if (!def || !type_id)
        return rm_err(REMAT_EINVAL, "remat_register_device_type: def and type_id must not be NULL");
    if (!def->name || !def->name[0] || strlen(def->name) >= 32)
        return rm_err(REMAT_EINVAL, "remat_register_device_type: name must be 1 to 31 characters");
    if (!def->alloc || !def->free || !def->copy || !def->device_count)
        return rm_err(REMAT_EINVAL,
                      "remat_register_device_type: device type '%s' must supply alloc, free, "
                      "copy and device_count",
                      def->name);
    pthread_mutex_lock(&g_lock);
    int free_slot = -1;
    for (int i = 0; i < REMAT_MAX_DEVICE_TYPES; i++) {
        if (g_types[i].used && strcmp(g_types[i].name, def->name) == 0) {
            pthread_mutex_unlock(&g_lock);
            return rm_err(REMAT_EINVAL,
                          "remat_register_device_type: a device type named '%s' is already "
                          "registered (id %d)",
                          def->name, i);
        }
        if (!g_types[i].used && free_slot < 0) free_slot = i;
    }
    if (free_slot < 0) {
        pthread_mutex_unlock(&g_lock);
        return rm_err(REMAT_ENOMEM, "remat_register_device_type: registry full (%d types)",
                      REMAT_MAX_DEVICE_TYPES);
    }
    rm_devtype *t = &g_types[free_slot];
    memset(t, 0, sizeof *t);
    t->used = true;
    t->b = *b;
    strcpy(t->name, def->name);
    t->b.device.name = t->name;
    for (int i = 0; i < REMAT_MAX_DEVICES_PER_TYPE; i++) t->gen[i].seed = k_default_seed;
    /* its kernel rows; a host-addressable type without rows of its own runs backend 0's */
    if (b->kernels) rm_kernels_set_rows(free_slot, b->kernels, b->bf16_fallback, b->kernel_flags);
    else if (def->host_addressable && free_slot > 0 && g_types[0].used)
        rm_kernels_set_rows(free_slot, g_types[0].b.kernels, g_types[0].b.bf16_fallback,
                            g_types[0].b.kernel_flags);
    else rm_kernels_set_rows(free_slot, NULL, NULL, b->kernel_flags);
    if (free_slot == 0) rm_host_ = b->host;
    *type_id = free_slot;
    pthread_mutex_unlock(&g_lock);
    if (free_slot > 0) rm_transfer_register(free_slot, b->transfer);
    if (b->registered) b->registered(free_slot);
    return REMAT_OK;
}

remat_status remat_unregister_device_type(int type_id) {
    if (type_id <= 0 || type_id >= REMAT_MAX_DEVICE_TYPES)
        return rm_err(REMAT_EINVAL, "remat_unregister_device_type: bad type id %d", type_id);
    pthread_mutex_lock(&g_lock);
    rm_devtype *t = &g_types[type_id];
    if (!t->used) {
        pthread_mutex_unlock(&g_lock);
        return rm_err(REMAT_EINVAL, "remat_unregister_device_type: type %d is not registered",
                      type_id);
    }
    for (int i = 0; i < REMAT_MAX_DEVICES_PER_TYPE; i++) {
        if (t->stats[i].n_live) {
            pthread_mutex_unlock(&g_lock);
            return rm_err(REMAT_ESTATE,
                          "remat_unregister_device_type: '%s' still has %llu live allocations",
                          t->name, (unsigned long long)t->stats[i].n_live);
        }
    }
    memset(t, 0, sizeof *t);
    rm_kernels_set_rows(type_id, NULL, NULL, NULL);
    rm_transfer_register(type_id, NULL);
    pthread_mutex_unlock(&g_lock);
    return REMAT_OK;
}

int remat_device_type_id(const char *name) {
    if (!name) return -1;
    ensure_builtin();
    pthread_mutex_lock(&g_lock);
    int id = -1;
    for (int i = 0; i < REMAT_MAX_DEVICE_TYPES; i++)
        if (g_types[i].used && strcmp(g_types[i].name, name) == 0) id = i;
    pthread_mutex_unlock(&g_lock);
    return id;
}

const char *remat_device_type_name(int type_id) {
    rm_devtype *t = get_type(type_id);
    return t ? t->name : NULL;
}

int remat_device_count(int type_id) {
    rm_devtype *t = get_type(type_id);
    if (!t) return 0;
    int n = t->b.device.device_count(t->b.device.user_data);
    return n > REMAT_MAX_DEVICES_PER_TYPE ? REMAT_MAX_DEVICES_PER_TYPE : n;
}

int remat_current_device(int type_id) {
    rm_devtype *t = get_type(type_id);
    if (!t || !t->b.device.current_device) return 0;
    return t->b.device.current_device(t->b.device.user_data);
}

remat_status remat_set_current_device(int type_id, int index) {
    rm_devtype *t = get_type(type_id);
    if (!t)
        return rm_err(REMAT_EDEVICE, "remat_set_current_device: unknown device type %d", type_id);
    if (index < 0 || index >= remat_device_count(type_id))
        return rm_err(REMAT_EDEVICE, "remat_set_current_device: '%s' has no device %d (count %d)",
                      t->name, index, remat_device_count(type_id));
    if (!t->b.device.set_current_device) {
        if (index == 0) return REMAT_OK;
        return rm_err(REMAT_EUNSUPPORTED,
                      "remat_set_current_device: '%s' cannot change its current device", t->name);
    }
    return t->b.device.set_current_device(t->b.device.user_data, index);
}

bool remat_device_is_initialized(int type_id) {
    rm_devtype *t = get_type(type_id);
    if (!t) return false;
    if (!t->b.device.is_initialized) return true;
    return t->b.device.is_initialized(t->b.device.user_data);
}

bool remat_device_host_addressable(int type_id) {
    rm_devtype *t = get_type(type_id);
    return t && t->b.device.host_addressable;
}

remat_status remat_device_check(remat_device device) {
    rm_devtype *t = get_type(device.type);
    if (!t) return rm_err(REMAT_EDEVICE, "unknown device type %d", device.type);
    int n = remat_device_count(device.type);
    const char *why = n == 0 && t->b.unavailable_reason ? t->b.unavailable_reason() : NULL;
    if (why)
        return rm_err(REMAT_EUNSUPPORTED, "device %s:%d cannot be used: %s", t->name, device.index,
                      why);
    if (device.index < 0 || device.index >= n)
        return rm_err(REMAT_EDEVICE, "device %s:%d does not exist (%d device%s)", t->name,
                      device.index, n, n == 1 ? "" : "s");
    return REMAT_OK;
}

/* ---- allocator ------------------------------------------------------------------- */
static RM_TLS rm_meter tls_meter;

void rm_meter_start(remat_device device, rm_meter *prev) {
    *prev = tls_meter;
    tls_meter = (rm_meter){true, device, 0, 0};
}
void rm_meter_stop(const rm_meter *prev) { tls_meter = *prev; }
void rm_meter_mark_peak(void) { tls_meter.peak = tls_meter.current; }
int64_t rm_meter_current(void) { return tls_meter.current; }
int64_t rm_meter_peak(void) { return tls_meter.peak; }

static void meter_add(remat_device device, int64_t delta) {
    rm_meter *m = &tls_meter;
    if (!m->on || m->device.type != device.type || m->device.index != device.index) return;
    m->current += delta;
    if (m->current > m->peak) m->peak = m->current;
}

/* Counts the allocation (alloc) or free of nbytes at p on device in its
 * stats and this thread's meter, then tells the observers (outside the
 * lock). */
static void account(rm_devtype *t, remat_device device, void *p, size_t nbytes, bool alloc) {
    const int64_t delta = alloc ? (int64_t)nbytes : -(int64_t)nbytes;
    pthread_mutex_lock(&g_lock);
    remat_alloc_stats *s = &t->stats[device.index];
    if (alloc) {
        s->current_bytes += nbytes;
        if (s->current_bytes > s->peak_bytes) s->peak_bytes = s->current_bytes;
        s->n_allocs++;
        s->n_live++;
    } else {
        s->current_bytes -= nbytes;
        s->n_frees++;
        s->n_live--;
    }
    size_t cur = s->current_bytes;
    remat_alloc_observer_fn obs = g_observer;
    void *obs_ud = g_observer_ud;
    remat_alloc_event_fn evo = g_event_observer;
    void *evo_ud = g_event_observer_ud;
    pthread_mutex_unlock(&g_lock);
    meter_add(device, delta);
    if (obs) obs(obs_ud, device, delta, cur);
    if (evo) evo(evo_ud, device, p, delta, cur);
}

void *rm_device_alloc(remat_device device, size_t nbytes) {
    rm_devtype *t = get_type(device.type);
    if (!t || device.index < 0 || device.index >= REMAT_MAX_DEVICES_PER_TYPE) return NULL;
    void *p = t->b.device.alloc(t->b.device.user_data, device.index, nbytes);
    if (!p) return NULL;
    account(t, device, p, nbytes, true);
    return p;
}

void rm_device_free(remat_device device, void *ptr, size_t nbytes) {
    if (!ptr) return;
    rm_devtype *t = get_type(device.type);
    if (!t) return;
    account(t, device, ptr, nbytes, false);
    t->b.device.free(t->b.device.user_data, device.index, ptr, nbytes);
}

void rm_device_count(remat_device device, void *p, size_t nbytes, bool alloc) {
    rm_devtype *t = get_type(device.type);
    if (!t || device.index < 0 || device.index >= REMAT_MAX_DEVICES_PER_TYPE) return;
    account(t, device, p, nbytes, alloc);
}

remat_status rm_device_copy(remat_device dst_dev, void *dst, remat_device src_dev, const void *src,
                            size_t nbytes) {
    if (nbytes == 0) return REMAT_OK;
    if (dst_dev.type == REMAT_CPU && src_dev.type == REMAT_CPU) /* backend 0's copy */
        return g_types[0].b.device.copy(g_types[0].b.device.user_data, 0, dst, src, nbytes,
                                        REMAT_COPY_DEVICE_TO_DEVICE);
    rm_devtype *td = get_type(dst_dev.type), *ts = get_type(src_dev.type);
    if (!td || !ts) return rm_err(REMAT_EDEVICE, "copy between unknown device types");
    int rc;
    if (src_dev.type == REMAT_CPU)
        rc = td->b.device.copy(td->b.device.user_data, dst_dev.index, dst, src, nbytes,
                               REMAT_COPY_HOST_TO_DEVICE);
    else if (dst_dev.type == REMAT_CPU)
        rc = ts->b.device.copy(ts->b.device.user_data, src_dev.index, dst, src, nbytes,
                               REMAT_COPY_DEVICE_TO_HOST);
    else if (dst_dev.type == src_dev.type)
        rc = td->b.device.copy(td->b.device.user_data, dst_dev.index, dst, src, nbytes,
                               REMAT_COPY_DEVICE_TO_DEVICE);
    else
        return rm_err(REMAT_EUNSUPPORTED,
                      "direct copy from %s to %s is not supported; go "
                      "through cpu",
                      ts->name, td->name);
    if (rc != REMAT_OK) return rm_err(rc, "device copy failed (%s -> %s)", ts->name, td->name);
    return REMAT_OK;
}

remat_status remat_alloc_stats_get(remat_device device, remat_alloc_stats *stats) {
    if (!stats) return rm_err(REMAT_EINVAL, "remat_alloc_stats_get: stats must not be NULL");
    rm_devtype *t = get_type(device.type);
    if (!t || device.index < 0 || device.index >= REMAT_MAX_DEVICES_PER_TYPE)
        return rm_err(REMAT_EDEVICE, "remat_alloc_stats_get: unknown device %d:%d", device.type,
                      device.index);
    pthread_mutex_lock(&g_lock);
    *stats = t->stats[device.index];
    pthread_mutex_unlock(&g_lock);
    return REMAT_OK;
}

remat_status remat_alloc_reset_peak(remat_device device) {
    rm_devtype *t = get_type(device.type);
    if (!t || device.index < 0 || device.index >= REMAT_MAX_DEVICES_PER_TYPE)
        return rm_err(REMAT_EDEVICE, "remat_alloc_reset_peak: unknown device %d:%d", device.type,
                      device.index);
    pthread_mutex_lock(&g_lock);
    t->stats[device.index].peak_bytes = t->stats[device.index].current_bytes;
    pthread_mutex_unlock(&g_lock);
    return REMAT_OK;
}

size_t remat_cpu_current_bytes(void) {
    remat_alloc_stats s;
    remat_alloc_stats_get(REMAT_DEVICE_CPU, &s);
    return s.current_bytes;
}

size_t remat_cpu_peak_bytes(void) {
    remat_alloc_stats s;
    remat_alloc_stats_get(REMAT_DEVICE_CPU, &s);
    return s.peak_bytes;
}

void remat_set_alloc_observer(remat_alloc_observer_fn fn, void *user_data) {
    pthread_mutex_lock(&g_lock);
    g_observer = fn;
    g_observer_ud = user_data;
    pthread_mutex_unlock(&g_lock);
}

void remat_set_alloc_event_observer(remat_alloc_event_fn fn, void *user_data) {
    pthread_mutex_lock(&g_lock);
    g_event_observer = fn;
    g_event_observer_ud = user_data;
    pthread_mutex_unlock(&g_lock);
}

/* ---- RNG -------------------------------------------------------------------------- */
void remat_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    rm_philox4x32_hd(counter[0], counter[1], counter[2], counter[3], key[0], key[1], out);
}

void rm_philox_block(const uint32_t key[2], uint64_t counter, uint32_t out[4]) {
    uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    remat_philox4x32_10(c, key, out);
}

/* Blob layout: magic "RMRG" u32, version u32, seed u64, offset u64, 8 zero bytes. */
static void gen_to_blob(const rm_gen *g, uint8_t b[REMAT_RNG_STATE_BYTES]) {
    memset(b, 0, REMAT_RNG_STATE_BYTES);
    static const uint8_t k_magic[4] = {'R', 'M', 'R', 'G'};
    memcpy(b, k_magic, sizeof k_magic);
    uint32_t ver = 1;
    memcpy(b + 4, &ver, 4);
    memcpy(b + 8, &g->seed, 8);
    memcpy(b + 16, &g->offset, 8);
}

static remat_status gen_from_blob(rm_gen *g, const uint8_t b[REMAT_RNG_STATE_BYTES]) {
    uint32_t ver;
    memcpy(&ver, b + 4, 4);
    if (memcmp(b, "RMRG", 4) != 0 || ver != 1)
        return rm_err(REMAT_EFORMAT, "remat_rng_set_state: not an RNG state blob made by "
                                     "remat_rng_get_state");
    memcpy(&g->seed, b + 8, 8);
    memcpy(&g->offset, b + 16, 8);
    return REMAT_OK;
}

static remat_status check_rng_device(const char *call, remat_device d, rm_devtype **out) {
    rm_devtype *t = get_type(d.type);
    if (!t) return rm_err(REMAT_EDEVICE, "%s: unknown device type %d", call, d.type);
    if (d.index < 0 || d.index >= REMAT_MAX_DEVICES_PER_TYPE ||
        d.index >= remat_device_count(d.type))
        return rm_err(REMAT_EDEVICE, "%s: device %s:%d does not exist", call, t->name, d.index);
    *out = t;
    return REMAT_OK;
}

/* check_rng_device, and a state blob to read or write. */
static remat_status check_rng_state(const char *call, remat_device d, const uint8_t *state,
                                    rm_devtype **out) {
    int rc = check_rng_device(call, d, out);
    if (!rc && !state) rc = rm_err(REMAT_EINVAL, "%s: state must not be NULL", call);
    return rc;
}

remat_status remat_rng_get_state(remat_device device, uint8_t state[REMAT_RNG_STATE_BYTES]) {
    rm_devtype *t = NULL;
    int rc = check_rng_state("remat_rng_get_state", device, state, &t);
    if (rc) return rc;
    if (t->b.device.rng_get_state)
        return t->b.device.rng_get_state(t->b.device.user_data, device.index, state);
    pthread_mutex_lock(&g_lock);
    gen_to_blob(&t->gen[device.index], state);
    pthread_mutex_unlock(&g_lock);
    return REMAT_OK;
}

remat_status remat_rng_set_state(remat_device device, const uint8_t state[REMAT_RNG_STATE_BYTES]) {
    rm_devtype *t = NULL;
    int rc = check_rng_state("remat_rng_set_state", device, state, &t);
    if (rc) return rc;
    if (t->b.device.rng_set_state)
        return t->b.device.rng_set_state(t->b.device.user_data, device.index, state);
    rm_gen g = {0, 0};
    rc = gen_from_blob(&g, state);
    if (rc) return rc;
    pthread_mutex_lock(&g_lock);
    t->gen[device.index] = g;
    pthread_mutex_unlock(&g_lock);
    return REMAT_OK;
}

remat_status remat_device_manual_seed(remat_device device, uint64_t seed) {
    rm_devtype *t = NULL;
    int rc = check_rng_device("remat_device_manual_seed", device, &t);
    if (rc) return rc;
    rm_gen g = {seed, 0};
    if (t->b.device.rng_set_state) {
        uint8_t b[REMAT_RNG_STATE_BYTES];
        gen_to_blob(&g, b);
        return t->b.device.rng_set_state(t->b.device.user_data, device.index, b);
    }
    pthread_mutex_lock(&g_lock);
    t->gen[device.index] = g;
    pthread_mutex_unlock(&g_lock);
    return REMAT_OK;
}

void remat_manual_seed(uint64_t seed) {
    for (int ty = 0; ty < REMAT_MAX_DEVICE_TYPES; ty++) {
        if (!get_type(ty)) continue;
        int n = remat_device_count(ty);
        for (int i = 0; i < n; i++) remat_device_manual_seed((remat_device){ty, i}, seed);
    }
}

remat_status rm_rng_reserve(remat_device device, uint64_t n_blocks, uint32_t key[2],
                            uint64_t *counter) {
    rm_devtype *t = NULL;
    int rc = check_rng_device("rng", device, &t);
    if (rc) return rc;
    rm_gen g = {0, 0};
    if (t->b.device.rng_get_state) {
        /* The type keeps the state; it must be in remat's blob format. */
        uint8_t b[REMAT_RNG_STATE_BYTES];
        rc = t->b.device.rng_get_state(t->b.device.user_data, device.index, b);
        if (rc) return rc;
        rc = gen_from_blob(&g, b);
        if (rc) return rc;
        rm_gen next = {g.seed, g.offset + n_blocks};
        gen_to_blob(&next, b);
        rc = t->b.device.rng_set_state(t->b.device.user_data, device.index, b);
        if (rc) return rc;
    } else {
        pthread_mutex_lock(&g_lock);
        g = t->gen[device.index];
        t->gen[device.index].offset += n_blocks;
        pthread_mutex_unlock(&g_lock);
    }
    key[0] = (uint32_t)g.seed;
    key[1] = (uint32_t)(g.seed >> 32);
    *counter = g.offset;
    return REMAT_OK;
}

remat_status remat_rng_fork_begin(remat_rng_fork *fork, int n_devices,
                                  const remat_device *devices) {
    if (!fork) return rm_err(REMAT_EINVAL, "remat_rng_fork_begin: fork must not be NULL");
    if (n_devices < 0 || n_devices > REMAT_MAX_DEVICES_PER_TYPE || (n_devices && !devices))
        return rm_err(REMAT_EINVAL, "remat_rng_fork_begin: bad device list (n=%d)", n_devices);
    fork->n = 0;
    fork->devices[fork->n] = REMAT_DEVICE_CPU;
    int rc = remat_rng_get_state(REMAT_DEVICE_CPU, fork->states[fork->n]);
    if (rc) return rc;
    fork->n++;
    for (int i = 0; i < n_devices; i++) {
        fork->devices[fork->n] = devices[i];
        rc = remat_rng_get_state(devices[i], fork->states[fork->n]);
        if (rc) return rm_err_prefix(rc, "remat_rng_fork_begin");
        fork->n++;
    }
    return REMAT_OK;
}

remat_status remat_rng_fork_end(const remat_rng_fork *fork) {
    if (!fork) return rm_err(REMAT_EINVAL, "remat_rng_fork_end: fork must not be NULL");
    for (int i = 0; i < fork->n; i++) {
        int rc = remat_rng_set_state(fork->devices[i], fork->states[i]);
        if (rc) return rm_err_prefix(rc, "remat_rng_fork_end");
    }
    return REMAT_OK;
}
