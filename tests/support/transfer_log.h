/* tests/support/transfer_log.h — transfer ops (rm_transfer_ops, src/core/core.h) for the fenced
 * device (fenced.h), standing in for cuda's pinned memory, side stream and events
 * (src/backends/cuda/transfer.c) so that the offload paths (src/sac/offload.c) run as on a
 * GPU. Each copy is done at once through rm_device_copy and returns an event that records
 * it; the log says in which order things happened: 'D' a copy to the host, 'H' a copy to
 * the device, 'W' the compute stream waiting for one. An event reports itself done after
 * `polls` calls of done() (0: at once), so the paths that find a copy still in flight run
 * too. */
#ifndef REMAT_TEST_TRANSFER_LOG_H
#define REMAT_TEST_TRANSFER_LOG_H

#include <stdbool.h>

enum { RT_XFER_LOG_MAX = 512 };

typedef struct rt_transfer_log {
    int n_copies, n_h2d, n_d2h, n_waits, n_events_live, n_host_live;
    char log[RT_XFER_LOG_MAX + 1]; /* NUL-terminated */
    int n_log;
    int polls; /* done() calls before an event is done */
} rt_transfer_log;

/* What the ops did since they were registered. */
extern rt_transfer_log rt_xfer;

/* Registers the ops for the fenced type and clears rt_xfer (on false: removes them, and
 * the offload paths use synchronous copies). Asserts success. */
void rt_transfer_log_register(bool on, int polls);

#endif /* REMAT_TEST_TRANSFER_LOG_H */
