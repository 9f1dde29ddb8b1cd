/* src/sac/report.c — residual reports (remat/report.h).
 *
 * Built on the save observer, which rm_node_save calls for every tensor
 * saved for backward (before any hook packs it). The op interception
 * bracket (intercept.c) tells which public op is running and from where it
 * was called. */
#define _GNU_SOURCE /* dladdr, Dl_info */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#include "core/intercept.h"

#include "autograd/graph.h"
#include "io/text.h"
#include "remat/report.h"

struct remat_residual_report {
    remat_residual *e;
    const void **keys; /* storage identity per entry */
    int n, cap;
    remat_residual_op_total *ops;
    int n_ops, cap_ops;
    bool recording;
    bool oom; /* an entry could not be recorded */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static remat_residual_report *g_active;

static void symbolise(void *site, char *buf, size_t n) {
    buf[0] = '\0';
    if (!site) return;
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (!dladdr(site, &info) || !info.dli_fname) {
        snprintf(buf, n, "%p", site);
        return;
    }
    const char *mod = strrchr(info.dli_fname, '/');
    mod = mod ? mod + 1 : info.dli_fname;
    if (info.dli_sname && info.dli_saddr)
        snprintf(buf, n, "%s+0x%lx (%s)", info.dli_sname,
                 (unsigned long)((char *)site - (char *)info.dli_saddr), mod);
    else
        snprintf(buf, n, "%s(+0x%lx)", mod, (unsigned long)((char *)site - (char *)info.dli_fbase));
}

static void observe(void *ud, const char *op, remat_tensor *t) {
    RM_UNUSED(ud);
    if (!t) return;
    if (!op) op = "?";
    pthread_mutex_lock(&g_lock);
    remat_residual_report *r = g_active;
    if (!r || !r->recording) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    if (r->n == r->cap) {
        int nc = r->cap ? r->cap * 2 : 64;
        remat_residual *ne = realloc(r->e, (size_t)nc * sizeof *ne);
        if (ne) r->e = ne;
        const void **nk = ne ? realloc(r->keys, (size_t)nc * sizeof *nk) : NULL;
        if (nk) r->keys = nk;
        if (!ne || !nk) {
            r->oom = true;
            pthread_mutex_unlock(&g_lock);
            return;
        }
        r->cap = nc;
    }
    remat_residual *e = &r->e[r->n];
    memset(e, 0, sizeof *e);
    void *site = NULL;
    e->call = rm_op_current(&site);
    e->site = site;
    if (t->name) snprintf(e->name, sizeof e->name, "%s", t->name);
    e->ndim = t->ndim;
    memcpy(e->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    e->dtype = t->dtype;
    e->device = t->storage->device;
    e->bytes = (size_t)remat_numel(t) * remat_dtype_size(t->dtype);
    e->storage_bytes = t->storage->nbytes;
    e->hooked = remat_saved_hooks_depth() > 0;
    e->in_backward = remat_in_backward();
    const void *key = t->storage;
    e->new_storage = true;
    for (int i = 0; i < r->n && e->new_storage; i++) e->new_storage = r->keys[i] != key;
    r->keys[r->n] = key;
    symbolise(site, e->site_str, sizeof e->site_str);
    /* per-op totals */
    int k = 0;
    while (k < r->n_ops && strcmp(r->ops[k].op, op) != 0) k++;
    if (k == r->n_ops) {
        remat_residual_op_total *no = rm_grow(r->ops, &r->cap_ops, r->n_ops, 16, sizeof *no);
        if (!no) {
            r->oom = true;
            pthread_mutex_unlock(&g_lock);
            return;
        }
        r->ops = no;
        memset(&r->ops[k], 0, sizeof r->ops[k]);
        /* the report owns a copy: node names need not outlive the graph */
        char *copy = strdup(op);
        if (!copy) {
            r->oom = true;
            pthread_mutex_unlock(&g_lock);
            return;
        }
        r->ops[k].op = copy;
        r->n_ops++;
    }
    e->op = r->ops[k].op;
    r->ops[k].count++;
    r->ops[k].bytes += e->bytes;
    if (e->new_storage) r->ops[k].unique_bytes += e->storage_bytes;
    r->n++;
    pthread_mutex_unlock(&g_lock);
}

/* Under the lock: `to` becomes the recording report if `from` is the
 * recording one (NULL: none is), and the save observer is installed or
 * removed to match. false: `from` is not recording; nothing changed. */
static bool switch_recording(remat_residual_report *from, remat_residual_report *to) {
    pthread_mutex_lock(&g_lock);
    bool ok = g_active == from;
    if (ok) {
        if (from) from->recording = false;
        if (to) to->recording = true;
        g_active = to;
    }
    pthread_mutex_unlock(&g_lock);
    if (ok) remat_set_save_observer(to ? observe : NULL, NULL);
    return ok;
}

remat_status remat_residual_report_begin(remat_residual_report **out) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_residual_report_begin: out must not be NULL");
    *out = NULL;
    remat_residual_report *r = calloc(1, sizeof *r);
    if (!r) return rm_err(REMAT_ENOMEM, "remat_residual_report_begin: out of memory");
    if (!switch_recording(NULL, r)) {
        free(r);
        return rm_err(REMAT_ESTATE, "remat_residual_report_begin: another residual report is "
                                    "recording (end it first; one report records at a time)");
    }
    *out = r;
    return REMAT_OK;
}

remat_status remat_residual_report_end(remat_residual_report *r) {
    if (!r) return rm_err(REMAT_EINVAL, "remat_residual_report_end: report is NULL");
    if (!switch_recording(r, NULL))
        return rm_err(REMAT_ESTATE, "remat_residual_report_end: this report is not recording");
    return REMAT_OK;
}

void remat_residual_report_free(remat_residual_report *r) {
    if (!r) return;
    pthread_mutex_lock(&g_lock);
    bool active = g_active == r;
    pthread_mutex_unlock(&g_lock);
    if (active) remat_residual_report_end(r);
    free(r->e);
    free(r->keys);
    for (int i = 0; i < r->n_ops; i++) free((char *)r->ops[i].op);
    free(r->ops);
    free(r);
}

int remat_residual_report_count(const remat_residual_report *r) { return r ? r->n : 0; }

const remat_residual *remat_residual_report_entry(const remat_residual_report *r, int i) {
    if (!r || i < 0 || i >= r->n) return NULL;
    return &r->e[i];
}

remat_status remat_residual_report_totals(const remat_residual_report *r,
                                          remat_residual_totals *t) {
    if (!r || !t)
        return rm_err(REMAT_EINVAL, "remat_residual_report_totals: report and totals must not be "
                                    "NULL");
    memset(t, 0, sizeof *t);
    for (int i = 0; i < r->n; i++) {
        const remat_residual *e = &r->e[i];
        t->count++;
        t->bytes += e->bytes;
        if (e->new_storage) t->unique_bytes += e->storage_bytes;
        if (e->hooked || e->in_backward) continue;
        /* a storage counts as kept once, at its first kept entry */
        bool first = true;
        for (int j = 0; j < i && first; j++)
            first = !(r->keys[j] == r->keys[i] && !r->e[j].hooked && !r->e[j].in_backward);
        if (first) t->kept_bytes += e->storage_bytes;
    }
    return REMAT_OK;
}

int remat_residual_report_n_ops(const remat_residual_report *r) { return r ? r->n_ops : 0; }

const remat_residual_op_total *remat_residual_report_op(const remat_residual_report *r, int i) {
    if (!r || i < 0 || i >= r->n_ops) return NULL;
    return &r->ops[i];
}

remat_residual_op_total remat_residual_report_op_named(const remat_residual_report *r,
                                                       const char *op) {
    remat_residual_op_total z;
    memset(&z, 0, sizeof z);
    if (!r || !op) return z;
    for (int i = 0; i < r->n_ops; i++)
        if (strcmp(r->ops[i].op, op) == 0) return r->ops[i];
    return z;
}

/* ---- the printer ----------------------------------------------------------------------- */
static const char *human(size_t bytes, char *buf, size_t n) {
    if (bytes < 1024) snprintf(buf, n, "%zu B", bytes);
    else if (bytes < (size_t)1024 * 1024) snprintf(buf, n, "%.1f KiB", (double)bytes / 1024.0);
    else if (bytes < (size_t)1024 * 1024 * 1024)
        snprintf(buf, n, "%.2f MiB", (double)bytes / 1048576.0);
    else snprintf(buf, n, "%.2f GiB", (double)bytes / 1073741824.0);
    return buf;
}

size_t remat_residual_report_format(const remat_residual_report *r, char *buf, size_t n) {
    rm_text b = {.s = buf, .cap = n};
    if (buf && n) buf[0] = '\0';
    if (!r) return 0;
    remat_residual_totals t;
    remat_residual_report_totals(r, &t);
    char h1[32], h2[32], h3[32];
    rm_text_printf(&b,
                   "residual report: %d tensors saved for backward, %s as views, %s in distinct "
                   "storages (each storage counted once), %s kept by the graph (no hooks, outside "
                   "backward)%s\n",
                   t.count, human(t.bytes, h1, sizeof h1), human(t.unique_bytes, h2, sizeof h2),
                   human(t.kept_bytes, h3, sizeof h3),
                   r->oom ? " [incomplete: out of memory while recording]" : "");
    rm_text_printf(&b, "%4s  %-22s %-16s %-16s %-20s %-5s %10s  %-5s %s\n", "#", "op", "call",
                   "name", "shape", "dtype", "bytes", "flags", "site");
    for (int i = 0; i < r->n; i++) {
        const remat_residual *e = &r->e[i];
        char sh[96], hb[32], dev[48] = "";
        rm_shape_str(e->ndim, e->shape, sh, sizeof sh);
        if (e->device.type != REMAT_CPU) {
            const char *tn = remat_device_type_name(e->device.type);
            snprintf(dev, sizeof dev, " @%s:%d", tn ? tn : "?", e->device.index);
        }
        char flags[8] = "";
        size_t fl = 0;
        if (!e->new_storage) flags[fl++] = 's'; /* shares a storage listed above */
        if (e->hooked) flags[fl++] = 'h';
        if (e->in_backward) flags[fl++] = 'b';
        flags[fl] = '\0';
        rm_text_printf(&b, "%4d  %-22s %-16s %-16s %-20s %-5s %10s  %-5s %s%s\n", i, e->op,
                       e->call ? e->call : "-", e->name[0] ? e->name : "-", sh,
                       remat_dtype_name(e->dtype), human(e->bytes, hb, sizeof hb), flags,
                       e->site_str[0] ? e->site_str : "-", dev);
    }
    rm_text_printf(&b,
                   "flags: s = shares the storage of an earlier entry (not counted again), h = "
                   "saved through saved-tensor hooks, b = saved during backward (recomputation)\n");
    rm_text_printf(&b, "per op:\n%4s  %-22s %6s %12s %18s\n", "", "op", "count", "bytes",
                   "distinct storage");
    for (int i = 0; i < r->n_ops; i++) {
        const remat_residual_op_total *o = &r->ops[i];
        rm_text_printf(&b, "%4s  %-22s %6d %12s %18s\n", "", o->op, o->count,
                       human(o->bytes, h1, sizeof h1), human(o->unique_bytes, h2, sizeof h2));
    }
    rm_text_printf(&b, "%4s  %-22s %6d %12s %18s\n", "", "total", t.count,
                   human(t.bytes, h1, sizeof h1), human(t.unique_bytes, h2, sizeof h2));
    return b.len;
}

remat_status remat_residual_report_print(const remat_residual_report *r, FILE *f) {
    if (!r || !f)
        return rm_err(REMAT_EINVAL, "remat_residual_report_print: report and file must not be "
                                    "NULL");
    size_t need = remat_residual_report_format(r, NULL, 0);
    char *buf = malloc(need + 1);
    if (!buf) return rm_err(REMAT_ENOMEM, "remat_residual_report_print: out of memory");
    remat_residual_report_format(r, buf, need + 1);
    size_t w = fwrite(buf, 1, need, f);
    free(buf);
    if (w != need) return rm_err(REMAT_EIO, "remat_residual_report_print: write failed");
    return REMAT_OK;
}
