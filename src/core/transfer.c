/* src/core/transfer.c — the asynchronous host <-> device transfers a device type may offer
 * for offloading (see rm_transfer_ops in core.h). */
#include "core.h"

static const rm_transfer_ops *g_ops[REMAT_MAX_DEVICE_TYPES];

remat_status rm_transfer_register(int type, const rm_transfer_ops *ops) {
    if (type <= 0 || type >= REMAT_MAX_DEVICE_TYPES)
        return rm_err(REMAT_EINVAL, "transfer registration: device type %d out of range", type);
    g_ops[type] = ops;
    return REMAT_OK;
}

const rm_transfer_ops *rm_transfer_get(int type) {
    return type > 0 && type < REMAT_MAX_DEVICE_TYPES ? g_ops[type] : NULL;
}
