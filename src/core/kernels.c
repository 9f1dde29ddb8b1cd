/* src/core/kernels.c — the (kernel, device type, dtype) table: every backend's rows,
 * filled from its record when it registers (src/core/device.c). */
#include "kernels.h"

#include "timing.h"

rm_kernel_fn rm_kernel_table_[RM_K_COUNT][REMAT_MAX_DEVICE_TYPES][RM_N_DTYPES];
unsigned char rm_kernel_flags_[RM_K_COUNT][REMAT_MAX_DEVICE_TYPES];

static const char *const k_kernel_text[RM_K_COUNT] = {
#define RM_KERNEL_TEXT_(id, text) text,
    RM_KERNEL_LIST(RM_KERNEL_TEXT_)
#undef RM_KERNEL_TEXT_
};

const char *rm_kernel_name(rm_kernel_id id) {
    return (unsigned)id < RM_K_COUNT ? k_kernel_text[id] : "?";
}

remat_status rm_kernel_register(rm_kernel_id id, int device_type, remat_dtype dtype,
                                rm_kernel_fn fn) {
    if ((unsigned)id >= RM_K_COUNT || device_type <= 0 || device_type >= REMAT_MAX_DEVICE_TYPES ||
        (unsigned)dtype >= RM_N_DTYPES)
        return rm_err(REMAT_EINVAL,
                      "kernel registration: kernel %d, device type %d or dtype %d out of range "
                      "(the cpu kernels are fixed)",
                      (int)id, device_type, (int)dtype);
    rm_kernel_table_[id][device_type][dtype] = fn;
    return REMAT_OK;
}

void rm_kernels_set_rows(int type, const rm_kernel_fn (*rows)[RM_N_DTYPES],
                         const rm_kernel_fn *bf16_fallback, const unsigned char *flags) {
    if (type < 0 || type >= REMAT_MAX_DEVICE_TYPES) return;
    for (int id = 0; id < RM_K_COUNT; id++) {
        rm_kernel_flags_[id][type] = flags ? flags[id] : 0;
        for (int dt = 0; dt < RM_N_DTYPES; dt++) {
            rm_kernel_fn f = rows ? rows[id][dt] : NULL;
            if (!f && rows && bf16_fallback && dt == REMAT_BF16) f = bf16_fallback[id];
            rm_kernel_table_[id][type][dt] = f;
        }
    }
}

remat_status rm_kernel_find(rm_kernel_id id, remat_device device, remat_dtype dtype,
                            const char *call, rm_kernel_fn *out) {
    *out = rm_kernel_lookup(id, device.type, dtype);
    if (*out) return REMAT_OK;
    /* naming the type registers the built-in backends if nothing has yet */
    const char *dev = remat_device_type_name(device.type);
    *out = rm_kernel_lookup(id, device.type, dtype);
    if (*out) return REMAT_OK;
    return rm_err(REMAT_EUNSUPPORTED, "%s: no %s kernel for device '%s' and dtype %s", call,
                  k_kernel_text[id], dev ? dev : "?", remat_dtype_name(dtype));
}

bool rm_kargs_have_data(const rm_kargs *k) {
    for (int i = 0; i < RM_KERNEL_MAX_IN; i++)
        if (k->in[i] && !k->in[i]->storage->data) return false;
    for (int i = 0; i < RM_KERNEL_MAX_OUT; i++)
        if (k->out[i] && !k->out[i]->storage->data) return false;
    return true;
}

remat_status rm_kernel_run(rm_kernel_id id, const char *call, rm_kargs *k) {
    const remat_tensor *first = k->in[0] ? k->in[0] : k->out[0];
    rm_kernel_fn fn;
    int rc = rm_kernel_find(id, first->storage->device, first->dtype, call, &fn);
    if (rc) return rc;
    if (!rm_kargs_have_data(k)) return REMAT_OK; /* skip mode */
    /* a kernel's own failure (out of memory for scratch, an index out of
     * range) is named after the call, as rm_dispatch names it */
    rm_timing_span sp;
    if (rm_timing_on() && rm_timing_begin(&sp, id, call, k)) {
        rc = fn(k);
        rm_timing_end(&sp);
    } else {
        rc = fn(k);
    }
    return rc ? rm_err_prefix(rc, call) : REMAT_OK;
}

remat_status rm_kernel_fill(remat_tensor *t, double v, const char *call) {
    const rm_ew_params fill = {RM_EW_FILL, v};
    rm_kargs k = {.in = {v == 0 ? t : NULL}, .out = {t}, .params = v == 0 ? NULL : &fill};
    return rm_kernel_run(v == 0 ? RM_K_ZERO : RM_K_ELEMENTWISE, call, &k);
}
