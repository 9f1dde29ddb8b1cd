/* tests/support/transfer_log.c — see transfer_log.h. */
#include "transfer_log.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "fenced.h"

rt_transfer_log rt_xfer;

typedef struct fake_event fake_event;
struct fake_event {
    bool h2d;
    bool complete; /* the bytes have moved */
    bool waited;   /* the host waited for it or for a copy queued after it */
    int polls;     /* done() calls so far */
    int index;
    void *dst;
    const void *src;
    size_t n;
    fake_event *prev, *next; /* the live events, the newest first */
};
static fake_event *g_live;

static void log_c(char c) {
    if (rt_xfer.n_log < RT_XFER_LOG_MAX) rt_xfer.log[rt_xfer.n_log++] = c;
    rt_xfer.log[rt_xfer.n_log] = 0;
}

/* Moves e's bytes (once). */
static remat_status complete(fake_event *e) {
    if (e->complete) return REMAT_OK;
    e->complete = true;
    remat_device d = {rt_fenced_type(), e->index};
    int rc = e->h2d ? rm_device_copy(d, e->dst, REMAT_DEVICE_CPU, e->src, e->n)
                    : rm_device_copy(REMAT_DEVICE_CPU, e->dst, d, e->src, e->n);
    if (rt_xfer.deferred) log_c(e->h2d ? 'h' : 'd');
    return rc;
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
    *event = NULL;
    if (rt_xfer.fail_at > 0 && rt_xfer.n_copies + 1 == rt_xfer.fail_at) {
        rt_xfer.n_copies++;
        return rm_err(REMAT_EDEVICE, "fake transfer: copy %d failed (as asked)", rt_xfer.fail_at);
    }
    fake_event *e = calloc(1, sizeof *e);
    if (!e) return rm_err(REMAT_ENOMEM, "fake transfer: out of memory");
    *e = (fake_event){
        .h2d = kind == REMAT_COPY_HOST_TO_DEVICE, .index = index, .dst = dst, .src = src, .n = n};
    if (rt_xfer.deferred && !e->h2d) memset(dst, 0xff, n);
    int rc = rt_xfer.deferred ? REMAT_OK : complete(e);
    if (rc) {
        free(e);
        return rc;
    }
    e->next = g_live;
    if (g_live) g_live->prev = e;
    g_live = e;
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
    if (!e->h2d) {
        rt_xfer.n_bad_waits++;
        return rm_err(REMAT_EINVAL, "fake transfer: the compute stream waits only for copies "
                                    "back to the device");
    }
    rt_xfer.n_waits++;
    log_c('W');
    return complete(e); /* the compute stream's later work sees the bytes */
}
static bool done(void *event) {
    fake_event *e = event;
    if (!e->waited && e->polls++ < rt_xfer.polls) return false;
    return complete(e) == REMAT_OK;
}
/* The copies run in order on one side stream, as cuda's do: waiting for one is waiting for
 * those queued before it too. */
static remat_status host_wait(void *event) {
    fake_event *e = event;
    rt_xfer.n_host_waits++;
    int rc = REMAT_OK;
    for (fake_event *o = e->next; o; o = o->next) {
        o->waited = true;
        int r = complete(o);
        if (!rc) rc = r;
    }
    e->waited = true;
    int r = complete(e);
    return rc ? rc : r;
}
static void event_free(void *event) {
    fake_event *e = event;
    if (!e->complete) { /* a real copy goes on without its event */
        rt_xfer.n_freed_early++;
        (void)complete(e);
    }
    if (e->prev) e->prev->next = e->next;
    else g_live = e->next;
    if (e->next) e->next->prev = e->prev;
    rt_xfer.n_events_live--;
    free(e);
}

static const rm_transfer_ops k_ops = {host_alloc, host_free, copy_async, stream_wait,
                                      done,       host_wait, event_free}; /* core.h's order */

int rt_transfer_log_install(bool on, int polls) {
    int type = rt_fenced_type();
    if (type <= 0) return REMAT_EUNSUPPORTED;
    int rc = rm_transfer_register(type, on ? &k_ops : NULL);
    memset(&rt_xfer, 0, sizeof rt_xfer);
    rt_xfer.polls = polls;
    return rc;
}

int rt_transfer_pending_into(const void *p, size_t n) {
    const char *a = p;
    int k = 0;
    for (const fake_event *e = g_live; e; e = e->next) {
        const char *b = e->dst;
        k += !e->h2d && !e->complete && b < a + n && a < b + e->n;
    }
    return k;
}
