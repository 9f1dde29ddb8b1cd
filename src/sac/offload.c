/* src/sac/offload.c — remat_offload_saved_hooks: every saved tensor of a non-cpu device is
 * copied to host memory when it is saved and brought back for backward, the next ones
 * prefetched (PyTorch: torch.autograd.graph.save_on_cpu(pin_memory=True)); and the same entries
 * for selective checkpointing's OFFLOAD policies (offload.h, selective.c).
 *
 * One entry per saved tensor, in a process-wide list in the order they were packed. Backward
 * unpacks saved tensors in the reverse order; the entries of a group (a selective region's
 * cache) are unpacked in pack order, as the recomputation replays the forward, the groups
 * in the reverse order (backward_next). With the device type's transfer ops
 * (rm_transfer_ops: cuda's pinned memory, side stream and events):
 *   pack     pinned host buffer; D2H enqueued after the compute stream's work; the device
 *            tensor is held until that copy is done (polled at every pack and unpack) —
 *            then its memory goes back to the device;
 *   unpack   the entry's device copy (prefetched: the compute stream waits for its event;
 *            else fetched now), then the REMAT_OFFLOAD_PREFETCH entries packed before it
 *            that are on the host start their H2D — the next block's saved tensors, while
 *            this block's backward runs; the device copy is handed to the caller and the
 *            entry keeps only its host copy (a second backward fetches again).
 * Without ops (cpu-side tests, a device type that offers none) the same steps run with
 * synchronous copies through rm_device_copy into ordinary host memory. Either way the host
 * copies count in the cpu's allocator counters (pinned buffers through rm_device_count).
 * With asynchronous copies a device tensor's memory goes back when its copy is done, seen
 * at the next pack or unpack: right after a forward the last ones may still hold theirs
 * (rm_offload_settle waits for them). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "offload.h"
#include "remat/compress.h"

/* Entries fetched ahead of the one being unpacked (2: a checkpointed block's input and
 * the one before it). */
#define REMAT_OFFLOAD_PREFETCH 2

typedef enum {
    OE_ASIS,     /* a cpu tensor (or one without data): kept as it is, in t */
    OE_TO_HOST,  /* D2H in flight; t is the device tensor, held until done */
    OE_ON_HOST,  /* only the host copy */
    OE_FETCHING, /* H2D in flight into t (device); the compute stream must wait for it */
    OE_FETCHED   /* t (device) holds the data */
} oe_state;

typedef struct rm_offload_entry off_entry;
struct rm_offload_entry {
    oe_state state;
    const void *group; /* NULL: a saved tensor */
    remat_tensor *t;
    void *host;    /* the host copy of the whole storage */
    size_t nbytes; /* the storage's bytes */
    remat_device dev;
    int64_t offset;
    int ndim;
    int64_t shape[REMAT_MAX_DIMS], strides[REMAT_MAX_DIMS];
    remat_dtype dtype;
    void *event; /* the copy in flight (ops only) */
    const rm_transfer_ops *ops;
    off_entry *prev, *next; /* pack order */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static off_entry *g_head, *g_tail;

static void drop_event(off_entry *e) {
    if (e->event) e->ops->event_free(e->event);
    e->event = NULL;
}

/* D2H copies that have completed: their device tensors go back to the device. */
static void reap(void) {
    for (off_entry *e = g_head; e; e = e->next)
        if (e->state == OE_TO_HOST && e->ops->done(e->event)) {
            drop_event(e);
            rm_release_p(&e->t);
            e->state = OE_ON_HOST;
        }
}

/* Starts bringing e (ON_HOST) back to its device: a new device storage, the H2D copy. */
static int fetch(off_entry *e) {
    rm_storage *s = NULL;
    int rc = rm_storage_new(&s, e->nbytes, e->dev, false);
    if (rc) return rc;
    if (e->ops)
        rc = e->ops->copy_async(e->dev.index, s->data, e->host, e->nbytes,
                                REMAT_COPY_HOST_TO_DEVICE, &e->event);
    else rc = rm_device_copy(e->dev, s->data, REMAT_DEVICE_CPU, e->host, e->nbytes);
    if (!rc) {
        e->t = rm_tensor_alloc(s, e->offset, e->ndim, e->shape, e->strides, e->dtype);
        if (!e->t) rc = rm_err(REMAT_ENOMEM, "offload saved-tensor hooks: out of memory");
    }
    rm_storage_release(s); /* the view holds its own reference */
    if (rc) {
        drop_event(e);
        return rc;
    }
    e->state = e->ops ? OE_FETCHING : OE_FETCHED;
    return REMAT_OK;
}

void rm_offload_free(rm_offload_entry *e) {
    if (!e) return;
    pthread_mutex_lock(&g_lock);
    if (e->prev || g_head == e) { /* linked (a failed pack's entry never was) */
        if (e->prev) e->prev->next = e->next;
        else g_head = e->next;
        if (e->next) e->next->prev = e->prev;
        else g_tail = e->prev;
    }
    pthread_mutex_unlock(&g_lock);
    /* a copy still in flight reads or writes the host buffer: wait for it */
    if (e->event) e->ops->host_wait(e->event);
    drop_event(e);
    rm_release(e->t);
    if (e->host) {
        const size_t hb = e->nbytes ? e->nbytes : 1;
        if (e->ops) {
            rm_device_count(REMAT_DEVICE_CPU, e->host, hb, false);
            e->ops->host_free(e->host, hb);
        } else {
            rm_device_free(REMAT_DEVICE_CPU, e->host, hb);
        }
    }
    free(e);
}

remat_status rm_offload_pack(remat_tensor *t, const void *group, rm_offload_entry **out) {
    *out = NULL;
    off_entry *e = calloc(1, sizeof *e);
    if (!e) return rm_err(REMAT_ENOMEM, "offload saved-tensor hooks: out of memory");
    e->group = group;
    int rc = REMAT_OK;
    pthread_mutex_lock(&g_lock);
    reap();
    if (t->storage->device.type == REMAT_CPU || !t->storage->data) {
        e->state = OE_ASIS;
        e->t = rm_retain(t);
    } else {
        e->dev = t->storage->device;
        e->ops = rm_transfer_get(e->dev.type);
        e->nbytes = t->storage->nbytes;
        e->offset = t->offset;
        e->ndim = t->ndim;
        memcpy(e->shape, t->shape, sizeof e->shape);
        memcpy(e->strides, t->strides, sizeof e->strides);
        e->dtype = t->dtype;
        const size_t hb = e->nbytes ? e->nbytes : 1;
        e->host = e->ops ? e->ops->host_alloc(hb) : rm_device_alloc(REMAT_DEVICE_CPU, hb);
        /* pinned memory counts as host memory too, as rm_device_alloc's does */
        if (e->host && e->ops) rm_device_count(REMAT_DEVICE_CPU, e->host, hb, true);
        if (!e->host) {
            rc = rm_err(REMAT_ENOMEM,
                        "offload saved-tensor hooks: out of host memory for "
                        "%zu bytes",
                        e->nbytes);
        } else if (e->ops) {
            rc = e->ops->copy_async(e->dev.index, e->host, t->storage->data, e->nbytes,
                                    REMAT_COPY_DEVICE_TO_HOST, &e->event);
            e->t = rm_retain(t);
            e->state = OE_TO_HOST;
        } else {
            rc = rm_device_copy(REMAT_DEVICE_CPU, e->host, e->dev, t->storage->data, e->nbytes);
            e->state = OE_ON_HOST;
        }
    }
    if (!rc) {
        e->prev = g_tail;
        if (g_tail) g_tail->next = e;
        else g_head = e;
        g_tail = e;
        reap();
    }
    pthread_mutex_unlock(&g_lock);
    if (rc) {
        e->prev = e->next = NULL; /* never linked */
        rm_offload_free(e);
        return rc;
    }
    *out = e;
    return REMAT_OK;
}

void rm_offload_settle(void) {
    pthread_mutex_lock(&g_lock);
    for (off_entry *e = g_head; e; e = e->next)
        if (e->state == OE_TO_HOST) (void)e->ops->host_wait(e->event);
    reap();
    pthread_mutex_unlock(&g_lock);
}

/* The first entry of e's group. */
static off_entry *group_first(off_entry *e) {
    off_entry *f = e;
    for (off_entry *p = e->prev; p; p = p->prev)
        if (p->group == e->group) f = p;
    return f;
}

/* The entry backward unpacks after e, or NULL: for a saved tensor the one packed before it;
 * in a group the group's next one, after its last the first of the group packed before
 * (or the saved tensor packed before the group). Terminates: each jump lands before the
 * first entry of the group it leaves. */
static off_entry *backward_next(off_entry *e) {
    if (e->group) {
        for (off_entry *p = e->next; p; p = p->next)
            if (p->group == e->group) return p;
        e = group_first(e);
    }
    off_entry *p = e->prev;
    return p && p->group ? group_first(p) : p;
}

remat_status rm_offload_unpack(rm_offload_entry *e, remat_tensor **out) {
    *out = NULL;
    int rc = REMAT_OK;
    pthread_mutex_lock(&g_lock);
    reap();
    switch (e->state) {
    case OE_ASIS:
    case OE_TO_HOST: /* kept as is, or still on the device: the tensor itself */
        *out = rm_retain(e->t);
        break;
    case OE_ON_HOST:
        rc = fetch(e);
        if (rc) break;
        /* fall through */
    case OE_FETCHING:
        if (e->state == OE_FETCHING) {
            rc = e->ops->stream_wait(e->dev.index, e->event);
            drop_event(e);
            if (rc) break;
        }
        /* fall through */
    case OE_FETCHED:
        *out = e->t; /* the caller's now: the entry keeps its host copy */
        e->t = NULL;
        e->state = OE_ON_HOST;
        break;
    }
    /* the next entries backward will want: start bringing them back now */
    int n = 0;
    for (off_entry *p = backward_next(e); !rc && p && n < REMAT_OFFLOAD_PREFETCH;
         p = backward_next(p)) {
        if (p->state == OE_ASIS) continue;
        n++;
        if (p->state == OE_ON_HOST) rc = fetch(p);
    }
    pthread_mutex_unlock(&g_lock);
    if (rc && *out) rm_release_p(out);
    return rc;
}

/* ---- the saved-tensor hooks ------------------------------------------------------------ */
static void *offload_pack(void *ud, remat_tensor *t) {
    RM_UNUSED(ud);
    rm_offload_entry *e = NULL;
    return rm_offload_pack(t, NULL, &e) ? NULL : e;
}

static remat_status offload_unpack(void *ud, void *handle, remat_tensor **out) {
    RM_UNUSED(ud);
    return rm_offload_unpack(handle, out);
}

static void offload_free(void *ud, void *handle) {
    RM_UNUSED(ud);
    rm_offload_free(handle);
}

void remat_offload_saved_hooks(remat_saved_hooks *out) {
    if (!out) return;
    out->pack = offload_pack;
    out->unpack = offload_unpack;
    out->free_handle = offload_free;
    out->user_data = NULL;
}
