/* tests/support/transfer_log.h — transfer ops (rm_transfer_ops, src/core/core.h) for the fenced
 * device (fenced.h), standing in for cuda's pinned memory, side stream and events
 * (src/backends/cuda/transfer.c) so that the offload paths (src/sac/offload.c) and DDP's
 * gradient copies (src/dist/ddp.c) run as on a GPU. Each copy returns an event that records
 * it; the log says in which order things happened: 'D' a copy to the host, 'H' a copy to
 * the device, 'W' the compute stream waiting for one. An event reports itself done after
 * `polls` calls of done() (0: at once), so the paths that find a copy still in flight run
 * too, or at once after the host waited for it or for a copy queued after it (the copies
 * complete in order, as on cuda's one side stream).
 *
 * By default a copy moves its bytes at once (through rm_device_copy). With `deferred` set
 * it moves them only when its event completes (done() returning true, host_wait,
 * stream_wait or event_free), as a copy on a side stream may still be running: a copy to
 * the host first fills its destination with 0xff bytes (a NaN in f32 and f64), so a reader
 * that does not wait for the event reads garbage, and the log gets 'd' / 'h' when a copy
 * to the host / device completes. Criterion-free: tests/dist/dist_check.c links it. */
#ifndef REMAT_TEST_TRANSFER_LOG_H
#define REMAT_TEST_TRANSFER_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum { RT_XFER_LOG_MAX = 512 };

typedef struct rt_transfer_log {
    int n_copies, n_h2d, n_d2h, n_waits, n_events_live, n_host_live;
    int n_host_waits;              /* host_wait calls */
    int n_bad_waits;               /* stream_wait on a copy to the host (an error) */
    int n_freed_early;             /* events freed before they completed (deferred) */
    char log[RT_XFER_LOG_MAX + 1]; /* NUL-terminated */
    int n_log;
    int polls;     /* done() calls before an event is done */
    bool deferred; /* copies move their bytes when their events complete */
    int fail_at;   /* > 0: that copy_async call (counting from 1) fails */
} rt_transfer_log;

/* What the ops did since they were registered. */
extern rt_transfer_log rt_xfer;

/* Sets (on) or removes the ops for the fenced type and clears rt_xfer, with `polls`;
 * returns the status of the registration. */
int rt_transfer_log_install(bool on, int polls);
/* rt_transfer_log_install, asserting success (Criterion; tests/support/rt.c). Without the ops
 * the offload paths use synchronous copies. */
void rt_transfer_log_register(bool on, int polls);
/* How many copies to the host not yet complete write into [p, p + n). */
int rt_transfer_pending_into(const void *p, size_t n);

#endif /* REMAT_TEST_TRANSFER_LOG_H */
