/* tests/support/transfer_log.c — see transfer_log.h. */
#include "transfer_log.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "fenced.h"
#include "rt.h"

rt_transfer_log rt_xfer;

typedef struct fake_event {
    bool h2d;
    int polls; /* done() calls so far */
} fake_event;

static void log_c(char c) {
    if (rt_xfer.n_log < RT_XFER_LOG_MAX) rt_xfer.log[rt_xfer.n_log++] = c;
    rt_xfer.log[rt_xfer.n_log] = 0;
}

static void *host_alloc(size_t n) {
    void *p = malloc(n);
    if (p) rt_xfer.n_host_live++;
    return p;
}
static void host_free(void *p, size_t n) {
    (void)n;
    if (p) rt_xfer.n_host_live--;
    free(p);
}
static remat_status copy_async(int index, void *dst, const void *src, size_t n,
                               remat_copy_kind kind, void **event) {
    remat_device d = {rt_fenced_type(), index};
    int rc = kind == REMAT_COPY_DEVICE_TO_HOST ? rm_device_copy(REMAT_DEVICE_CPU, dst, d, src, n)
                                               : rm_device_copy(d, dst, REMAT_DEVICE_CPU, src, n);
    if (rc) return rc;
    fake_event *e = calloc(1, sizeof *e);
    cr_assert(e);
    e->h2d = kind == REMAT_COPY_HOST_TO_DEVICE;
    rt_xfer.n_copies++;
    if (e->h2d) rt_xfer.n_h2d++;
    else rt_xfer.n_d2h++;
    rt_xfer.n_events_live++;
    log_c(e->h2d ? 'H' : 'D');
    *event = e;
    return REMAT_OK;
}
static remat_status stream_wait(int index, void *event) {
    (void)index;
    fake_event *e = event;
    cr_assert(e->h2d, "the compute stream waits only for copies back to the device");
    rt_xfer.n_waits++;
    log_c('W');
    return REMAT_OK;
}
static bool done(void *event) {
    fake_event *e = event;
    return e->polls++ >= rt_xfer.polls;
}
static remat_status host_wait(void *event) {
    fake_event *e = event;
    e->polls = rt_xfer.polls;
    return REMAT_OK;
}
static void event_free(void *event) {
    rt_xfer.n_events_live--;
    free(event);
}

static const rm_transfer_ops k_ops = {host_alloc, host_free, copy_async, stream_wait,
                                      done,       host_wait, event_free}; /* core.h's order */

void rt_transfer_log_register(bool on, int polls) {
    int type = rt_fenced_type();
    cr_assert_gt(type, 0, "fenced device: %s", remat_last_error());
    RT_OK(rm_transfer_register(type, on ? &k_ops : NULL));
    memset(&rt_xfer, 0, sizeof rt_xfer);
    rt_xfer.polls = polls;
}
