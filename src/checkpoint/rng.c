/* src/checkpoint/rng.c — RNG juggling for checkpoint (PyTorch: _infer_device_type,
 * get_device_states / set_device_states, fork_rng) and the default device
 * type (PyTorch: DefaultDeviceType).
 *
 * The recomputation must draw the same random numbers as the forward, so
 * the forward stashes the cpu generator and the generators of the devices
 * its tensor inputs live on — for ONE device type only, as PyTorch does. A type
 * that is not initialised when the forward starts is not touched (PyTorch does
 * not want to initialise CUDA by accident); if the forward initialises it,
 * its state could not be stashed and the checkpoint fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck.h"

static char g_default_type[32] = "cuda";

remat_status remat_set_default_device_type(const char *name) {
    if (!name) {
        strcpy(g_default_type, "cuda");
        return REMAT_OK;
    }
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof g_default_type)
        return rm_err(REMAT_EINVAL,
                      "remat_set_default_device_type: name must have 1 to %d characters, got "
                      "\"%.40s\"",
                      (int)sizeof g_default_type - 1, name);
    memcpy(g_default_type, name, n + 1);
    return REMAT_OK;
}

const char *remat_get_default_device_type(void) { return g_default_type; }

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* PyTorch: _infer_device_type. Returns the type id (-1 for an unregistered
 * default). */
static int infer_device_type(int n, remat_tensor *const *inputs) {
    int types[REMAT_MAX_DEVICE_TYPES], n_types = 0, first = -1;
    for (int i = 0; i < n; i++) {
        if (!inputs[i]) continue;
        int ty = inputs[i]->storage->device.type;
        if (ty == REMAT_CPU) continue;
        if (first < 0) first = ty;
        bool seen = false;
        for (int k = 0; k < n_types; k++) seen |= types[k] == ty;
        if (!seen && n_types < REMAT_MAX_DEVICE_TYPES) types[n_types++] = ty;
    }
    if (n_types > 1) {
        const char *names[REMAT_MAX_DEVICE_TYPES];
        for (int k = 0; k < n_types; k++) {
            names[k] = remat_device_type_name(types[k]);
            if (!names[k]) names[k] = "?";
        }
        qsort(names, (size_t)n_types, sizeof names[0], cmp_str);
        char list[REMAT_MAX_DEVICE_TYPES * 36] = "";
        for (int k = 0; k < n_types; k++) {
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s'%s'", k ? ", " : "", names[k]);
        }
        const char *fname = remat_device_type_name(first);
        rm_warn("remat_checkpoint: tensor inputs, excluding cpu tensors, are on devices of at "
                "least two device types. RNG state is saved only for the devices of one device "
                "type and the other devices are ignored, so if the checkpointed function uses "
                "randomness on them, gradients may be incorrect. (cuda is chosen if it is among "
                "them; otherwise the first device type seen.)\nDevice types: [%s] first device "
                "type: %s",
                list, fname ? fname : "?");
    }
    if (n_types == 0) return remat_device_type_id(g_default_type);
    int cuda = remat_device_type_id("cuda");
    for (int k = 0; k < n_types; k++)
        if (types[k] == cuda) return cuda;
    return first;
}

remat_status ck_rng_stash(ck_rng *r, bool preserve, int n, remat_tensor *const *inputs) {
    memset(r, 0, sizeof *r);
    r->preserve = preserve;
    remat_autocast_get_state(&r->autocast);
    r->device_type = infer_device_type(n, inputs);
    if (!preserve) return REMAT_OK;
    int rc = remat_rng_get_state(REMAT_DEVICE_CPU, r->cpu_state);
    if (rc) return rm_err_prefix(rc, CK_CALL);
    if (r->device_type < 0 || !remat_device_is_initialized(r->device_type)) return REMAT_OK;
    r->had_device = true;
    if (r->device_type == REMAT_CPU) return REMAT_OK; /* default type "cpu": already stashed */
    for (int i = 0; i < n; i++) {
        if (!inputs[i]) continue;
        remat_device d = inputs[i]->storage->device;
        if (d.type != r->device_type) continue;
        bool seen = false;
        for (int k = 0; k < r->n_devices; k++) seen |= r->devices[k].index == d.index;
        if (seen || r->n_devices == REMAT_MAX_DEVICES_PER_TYPE) continue;
        rc = remat_rng_get_state(d, r->states[r->n_devices]);
        if (rc) return rm_err_prefix(rc, CK_CALL);
        r->devices[r->n_devices++] = d;
    }
    return REMAT_OK;
}

remat_status ck_rng_enter(const ck_rng *r, remat_rng_fork *fork) {
    memset(fork, 0, sizeof *fork);
    if (!r->preserve) return REMAT_OK;
    int nd = r->had_device ? r->n_devices : 0;
    int rc = remat_rng_fork_begin(fork, nd, r->devices);
    if (rc) return rm_err_prefix(rc, CK_CALL);
    rc = remat_rng_set_state(REMAT_DEVICE_CPU, r->cpu_state);
    for (int i = 0; rc == REMAT_OK && i < nd; i++)
        rc = remat_rng_set_state(r->devices[i], r->states[i]);
    if (rc) {
        remat_rng_fork_end(fork);
        return rm_err_prefix(rc, CK_CALL);
    }
    return REMAT_OK;
}

remat_status ck_rng_exit(const ck_rng *r, const remat_rng_fork *fork) {
    if (!r->preserve) return REMAT_OK;
    return remat_rng_fork_end(fork);
}

remat_status ck_rng_check_initialized(const ck_rng *r) {
    if (!r->preserve || r->had_device || r->device_type < 0) return REMAT_OK;
    if (!remat_device_is_initialized(r->device_type)) return REMAT_OK;
    const char *name = remat_device_type_name(r->device_type);
    return rm_err(REMAT_ESTATE,
                  "remat_checkpoint: the device state of '%s' was initialized in the forward pass "
                  "of a checkpoint, which is not allowed (its RNG state could not be stashed "
                  "before the forward ran). Initialize '%s' before calling remat_checkpoint, or "
                  "pass preserve_rng_state = REMAT_OPT_FALSE",
                  name ? name : "?", name ? name : "?");
}
