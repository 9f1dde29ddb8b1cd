/* src/core/timing.c — the kernel timer (remat/timing.h, src/core/timing.h): rows per
 * (op, kernel, phase, device type, dtype), host clock for a synchronous device, a
 * device's marks (src/core/backend.h: rm_timer_ops) resolved in batches for one that runs
 * behind the host. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "timing.h"

RM_TLS unsigned char rm_phase_;
atomic_bool rm_timing_on_;

const char *remat_phase_name(remat_phase p) {
    switch (p) {
    case REMAT_PHASE_FORWARD: return "forward";
    case REMAT_PHASE_BACKWARD: return "backward";
    case REMAT_PHASE_RECOMPUTE: return "recompute";
    }
    return "?";
}

remat_phase remat_current_phase(void) { return (remat_phase)rm_phase_; }

/* ---- the recording ------------------------------------------------------------------ */
typedef struct row {
    remat_timing_row r; /* r.op: owned copy */
    uint64_t hash;
} row;

/* A device call whose time is not known yet: its two marks. */
typedef struct pending {
    int row;
    const rm_timer_ops *ops;
    void *start, *end;
} pending;

enum { k_max_pending = 1 << 16 }; /* a few steps of a large model; when full: a device sync */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_active;
static uint64_t g_gen; /* recordings so far: a span of an ended one is dropped */
static row *g_rows;
static int g_n, g_cap;
static int *g_slots; /* open addressing: row index + 1, 0 empty */
static int g_nslots;
static pending *g_pend;
static int g_npend;
static int g_err; /* a device's event failure */
static RM_TLS int tls_depth;
static RM_TLS uint64_t tls_gen;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static uint64_t key_hash(const char *op, rm_kernel_id id, int phase, int type, int dtype) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)op; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    h = (h ^ (uint64_t)id) * 1099511628211ULL;
    h = (h ^ (uint64_t)(phase * 64 + type)) * 1099511628211ULL;
    return (h ^ (uint64_t)dtype) * 1099511628211ULL;
}

static bool row_is(const row *w, uint64_t h, const char *op, rm_kernel_id id, int phase, int type,
                   int dtype) {
    return w->hash == h && w->r.kernel == rm_kernel_name(id) && (int)w->r.phase == phase &&
           w->r.device_type == type && (int)w->r.dtype == dtype && strcmp(w->r.op, op) == 0;
}

/* Doubles the slots (and places every row again); false out of memory. */
static bool grow_slots(void) {
    int n = g_nslots ? 2 * g_nslots : 256;
    int *s = calloc((size_t)n, sizeof *s);
    if (!s) return false;
    for (int i = 0; i < g_n; i++) {
        size_t j = (size_t)(g_rows[i].hash & (uint64_t)(n - 1));
        while (s[j]) j = (j + 1) & (size_t)(n - 1);
        s[j] = i + 1;
    }
    free(g_slots);
    g_slots = s;
    g_nslots = n;
    return true;
}

/* The row of the key, made when new; -1 out of memory. Under g_lock. */
static int find_row(const char *op, rm_kernel_id id, int phase, int type, int dtype) {
    uint64_t h = key_hash(op, id, phase, type, dtype);
    if (2 * (g_n + 1) > g_nslots && !grow_slots()) return -1;
    size_t j = (size_t)(h & (uint64_t)(g_nslots - 1));
    for (; g_slots[j]; j = (j + 1) & (size_t)(g_nslots - 1))
        if (row_is(&g_rows[g_slots[j] - 1], h, op, id, phase, type, dtype)) return g_slots[j] - 1;
    if (g_n == g_cap) {
        int cap = g_cap ? 2 * g_cap : 64;
        row *r = realloc(g_rows, (size_t)cap * sizeof *r);
        if (!r) return -1;
        g_rows = r;
        g_cap = cap;
    }
    char *name = strdup(op);
    if (!name) return -1;
    row *w = &g_rows[g_n];
    memset(w, 0, sizeof *w);
    w->hash = h;
    w->r.op = name;
    w->r.kernel = rm_kernel_name(id);
    w->r.phase = (remat_phase)phase;
    w->r.device_type = type;
    w->r.dtype = (remat_dtype)dtype;
    g_slots[j] = ++g_n;
    return g_n - 1;
}

/* Resolves the pending device calls (waits for the device). Under g_lock. */
static void resolve_pending(void) {
    for (int i = 0; i < g_npend; i++) {
        pending *p = &g_pend[i];
        double ms = p->ops->elapsed_ms(p->start, p->end);
        if (ms < 0) g_err = REMAT_EDEVICE;
        else g_rows[p->row].r.ms += ms;
        if (p->ops->release) {
            p->ops->release(p->start);
            p->ops->release(p->end);
        }
    }
    g_npend = 0;
}

static void clear_rows(void) {
    for (int i = 0; i < g_n; i++) free((char *)g_rows[i].r.op);
    free(g_rows);
    free(g_slots);
    free(g_pend);
    g_rows = NULL;
    g_slots = NULL;
    g_pend = NULL;
    g_n = g_cap = g_nslots = g_npend = 0;
}

/* ---- what a call moves and computes --------------------------------------------------- */
static double tensor_bytes(const remat_tensor *t) {
    return t ? (double)remat_numel(t) * (double)remat_dtype_size(t->dtype) : 0;
}

static double operand_bytes(rm_kernel_id id, const rm_kargs *k) {
    double b = 0;
    if (id == RM_K_ADAMW_LIST || id == RM_K_SGD_LIST) { /* the tensors of its list */
        const rm_optim_list *l = k->params;
        for (int i = 0; i < l->n; i++)
            b += tensor_bytes(l->p[i]) + tensor_bytes(l->g[i]) +
                 (l->s0 ? tensor_bytes(l->s0[i]) : 0) + (l->s1 ? tensor_bytes(l->s1[i]) : 0);
        return b;
    }
    for (int i = 0; i < RM_KERNEL_MAX_OUT; i++) b += tensor_bytes(k->out[i]);
    if (id == RM_K_ZERO) return b; /* its in[0] is its out[0]: written only */
    for (int i = 0; i < RM_KERNEL_MAX_IN; i++) b += tensor_bytes(k->in[i]);
    return b;
}

/* The rows and columns of one matmul operand's matrices (RM_MM_*, src/core/kernels/matmul.h)
 * and how many of them it holds. */
static void mm_matrix(const remat_tensor *t, unsigned f, int64_t *rows, int64_t *cols,
                      double *count) {
    int n = t->ndim;
    int64_t r = 1, c = 1;
    if ((f & RM_MM_ROW) && (f & RM_MM_COL) && n >= 2) {
        r = t->shape[n - 2];
        c = t->shape[n - 1];
    } else if ((f & RM_MM_ROW) && n >= 1) r = t->shape[n - 1];
    else if ((f & RM_MM_COL) && n >= 1) c = t->shape[n - 1];
    if (f & RM_MM_T) {
        int64_t x = r;
        r = c;
        c = x;
    }
    *rows = r;
    *cols = c;
    *count = r * c > 0 ? (double)remat_numel(t) / (double)(r * c) : 0;
}

/* Query-key pairs an attention call computes (the causal mask's visible ones). */
static double attention_pairs(const rm_attention_dims *d) {
    if (!d->causal) return (double)d->Tq * (double)d->Tk;
    double p = 0;
    for (int64_t i = 0; i < d->Tq; i++) {
        int64_t v = i + d->off + 1;
        p += (double)(v < 0 ? 0 : v > d->Tk ? d->Tk : v);
    }
    return p;
}

static double kernel_flops(rm_kernel_id id, const rm_kargs *k) {
    if (id == RM_K_MATMUL && k->params && k->in[0] && k->in[1] && k->out[0]) {
        const rm_mm_params *p = k->params;
        int64_t m, kk, k2, n, cm, cn;
        double ca, cb, cc;
        mm_matrix(k->in[0], p->a, &m, &kk, &ca);
        mm_matrix(k->in[1], p->b, &k2, &n, &cb);
        mm_matrix(k->out[0], p->c, &cm, &cn, &cc);
        double batch = ca > cb ? ca : cb;
        if (cc > batch) batch = cc;
        return 2.0 * (double)m * (double)n * (double)kk * batch;
    }
    if ((id == RM_K_ATTENTION || id == RM_K_ATTENTION_BWD) && k->params && k->in[0] && k->in[1] &&
        k->in[2] && k->in[0]->ndim >= 2) {
        const remat_tensor *q = k->in[0];
        rm_attention_dims d =
            rm_attention_dims_of(k->params, q->ndim, q->shape, k->in[1]->shape, k->in[2]->shape);
        double per = id == RM_K_ATTENTION
                         ? 2.0 * (double)(d.D + d.Dv)          /* S, P·V */
                         : 2.0 * (double)(3 * d.D + 2 * d.Dv); /* S, dP, dV, dQ, dK */
        return (double)d.nb * attention_pairs(&d) * per;
    }
    return 0;
}

/* ---- spans -------------------------------------------------------------------------- */
bool rm_timing_begin(rm_timing_span *s, rm_kernel_id id, const char *op, const rm_kargs *k) {
    if (tls_depth > 0) return false; /* inside a timed call (a kernel's own copy): it counts */
    tls_depth++;                     /* undone at `no` or by rm_timing_end */
    const remat_tensor *first = k->in[0] ? k->in[0] : k->out[0];
    if (!first) goto no;
    s->type = first->storage->device.type;
    s->index = first->storage->device.index;
    double bytes = operand_bytes(id, k), flops = kernel_flops(id, k);
    const int phase = rm_phase_;
    pthread_mutex_lock(&g_lock);
    s->row = g_active ? find_row(op ? op : "?", id, phase, s->type, first->dtype) : -1;
    if (s->row >= 0) {
        remat_timing_row *r = &g_rows[s->row].r;
        r->calls++;
        r->bytes += bytes;
        r->flops += flops;
    }
    tls_gen = g_gen;
    pthread_mutex_unlock(&g_lock);
    if (s->row < 0) goto no;
    const rm_timer_ops *ops = rm_backend_timer(s->type);
    s->mark = ops ? ops->mark(s->index) : NULL;
    s->t0 = now_ms();
    return true;
no:
    tls_depth--;
    return false;
}

void rm_timing_end(rm_timing_span *s) {
    tls_depth--;
    const rm_timer_ops *ops = s->mark ? rm_backend_timer(s->type) : NULL;
    void *end = ops ? ops->mark(s->index) : NULL;
    double ms = now_ms() - s->t0;
    pthread_mutex_lock(&g_lock);
    bool live = g_active && tls_gen == g_gen;
    if (live && ops && end) {
        if (g_npend == k_max_pending) resolve_pending();
        g_pend[g_npend++] = (pending){s->row, ops, s->mark, end};
        ops = NULL; /* the marks are the recording's now */
    } else if (live) {
        if (s->mark) g_err = REMAT_EDEVICE; /* the device's end mark failed */
        else g_rows[s->row].r.ms += ms;
    }
    pthread_mutex_unlock(&g_lock);
    if (ops && ops->release) { /* not handed over */
        ops->release(s->mark);
        ops->release(end);
    }
}

/* ---- the public calls ---------------------------------------------------------------- */
struct remat_timing {
    int n;
    remat_timing_row *rows; /* ops owned */
};

remat_status remat_timing_begin(void) {
    pthread_mutex_lock(&g_lock);
    if (g_active) {
        pthread_mutex_unlock(&g_lock);
        return rm_err(REMAT_ESTATE, "remat_timing_begin: a recording runs already");
    }
    clear_rows();
    g_pend = malloc(k_max_pending * sizeof *g_pend);
    if (!g_pend) {
        pthread_mutex_unlock(&g_lock);
        return rm_err(REMAT_ENOMEM, "remat_timing_begin: out of memory");
    }
    g_err = 0;
    g_gen++;
    g_active = true;
    atomic_store(&rm_timing_on_, true);
    pthread_mutex_unlock(&g_lock);
    return REMAT_OK;
}

bool remat_timing_active(void) { return rm_timing_on(); }

static int by_ms_desc(const void *a, const void *b) {
    const remat_timing_row *x = a, *y = b;
    if (x->ms != y->ms) return x->ms < y->ms ? 1 : -1;
    int c = strcmp(x->op, y->op);
    if (c) return c;
    c = strcmp(x->kernel, y->kernel);
    return c ? c : (int)x->phase - (int)y->phase;
}

remat_status remat_timing_end(remat_timing **out) {
    if (out) *out = NULL;
    pthread_mutex_lock(&g_lock);
    if (!g_active) {
        pthread_mutex_unlock(&g_lock);
        return rm_err(REMAT_ESTATE, "remat_timing_end: no recording runs");
    }
    atomic_store(&rm_timing_on_, false);
    g_active = false;
    resolve_pending();
    int rc = g_err ? rm_err(g_err, "remat_timing_end: a device's timing events failed") : 0;
    remat_timing *t = NULL;
    if (!rc && !out) rc = rm_err(REMAT_EINVAL, "remat_timing_end: out must not be NULL");
    if (!rc) {
        t = calloc(1, sizeof *t);
        if (t) t->rows = calloc((size_t)(g_n ? g_n : 1), sizeof *t->rows);
        if (!t || !t->rows) {
            free(t);
            t = NULL;
            rc = rm_err(REMAT_ENOMEM, "remat_timing_end: out of memory");
        }
    }
    if (t) { /* the row names move over */
        for (int i = 0; i < g_n; i++) {
            t->rows[i] = g_rows[i].r;
            g_rows[i].r.op = NULL;
        }
        t->n = g_n;
        qsort(t->rows, (size_t)t->n, sizeof *t->rows, by_ms_desc);
    }
    clear_rows();
    pthread_mutex_unlock(&g_lock);
    if (t) *out = t;
    return rc;
}

int remat_timing_count(const remat_timing *t) { return t ? t->n : 0; }

const remat_timing_row *remat_timing_row_at(const remat_timing *t, int i) {
    return t && i >= 0 && i < t->n ? &t->rows[i] : NULL;
}

void remat_timing_totals(const remat_timing *t, int phase, int64_t *calls, double *ms,
                         double *bytes, double *flops) {
    int64_t c = 0;
    double m = 0, b = 0, f = 0;
    for (int i = 0; t && i < t->n; i++) {
        const remat_timing_row *r = &t->rows[i];
        if (phase >= 0 && (int)r->phase != phase) continue;
        c += r->calls;
        m += r->ms;
        b += r->bytes;
        f += r->flops;
    }
    if (calls) *calls = c;
    if (ms) *ms = m;
    if (bytes) *bytes = b;
    if (flops) *flops = f;
}

void remat_timing_free(remat_timing *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free((char *)t->rows[i].op);
    free(t->rows);
    free(t);
}
