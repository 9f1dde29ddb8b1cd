/* src/core/tensor.c — storage, tensor objects, scopes, metadata and data access. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "core.h"
#include "kernels.h"

static atomic_int_fast64_t g_live_tensors;
static char g_empty_storage[64]; /* data address for 0-byte storages */

size_t remat_dtype_size(remat_dtype dtype) {
    switch (dtype) {
    case REMAT_F32: return 4;
    case REMAT_F64:
    case REMAT_I64: return 8;
    case REMAT_U8: return 1;
    case REMAT_BF16: return 2;
    }
    return 0;
}

const char *remat_dtype_name(remat_dtype dtype) {
    switch (dtype) {
    case REMAT_F32: return "f32";
    case REMAT_F64: return "f64";
    case REMAT_I64: return "i64";
    case REMAT_U8: return "u8";
    case REMAT_BF16: return "bf16";
    }
    return "?";
}

int64_t remat_live_tensors(void) { return (int64_t)atomic_load(&g_live_tensors); }

/* ---- storage ---------------------------------------------------------------------- */
remat_status rm_storage_new(rm_storage **out, size_t nbytes, remat_device device, bool meta) {
    *out = NULL;
    int rc = remat_device_check(device);
    if (rc) return rc;
    if (nbytes > (size_t)REMAT_MAX_TENSOR_BYTES) /* also keeps allocator rounding exact */
        return rm_err(REMAT_EINVAL,
                      "a storage of %zu bytes is larger than the maximum tensor "
                      "size (2^62 bytes)",
                      nbytes);
    rm_storage *s = calloc(1, sizeof *s);
    if (!s) return rm_err(REMAT_ENOMEM, "out of host memory for a storage header");
    if (meta) {
        s->data = NULL;
    } else if (nbytes == 0) {
        s->data = g_empty_storage;
    } else {
        s->data = rm_device_alloc(device, nbytes);
        if (!s->data) {
            free(s);
            return rm_err(REMAT_ENOMEM, "allocation of %zu bytes on %s:%d failed", nbytes,
                          remat_device_type_name(device.type), device.index);
        }
    }
    s->nbytes = meta ? 0 : nbytes;
    s->device = device;
    atomic_init(&s->refcount, 1);
    atomic_init(&s->version, 0);
    *out = s;
    return REMAT_OK;
}

void rm_storage_retain(rm_storage *s) { atomic_fetch_add(&s->refcount, 1); }

void rm_storage_release(rm_storage *s) {
    if (!s) return;
    if (atomic_fetch_sub(&s->refcount, 1) != 1) return;
    if (s->data && s->data != g_empty_storage) rm_device_free(s->device, s->data, s->nbytes);
    free(s);
}

/* ---- tensors ------------------------------------------------------------------------ */
void rm_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = st;
        st *= shape[d] > 0 ? shape[d] : 1;
    }
}

int64_t rm_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

remat_status rm_check_size(const char *call, int ndim, const int64_t *shape, remat_dtype dtype,
                           int64_t *numel) {
    int64_t es = (int64_t)remat_dtype_size(dtype), span = 1;
    bool over = false, empty = false;
    /* span: the product with 0 counted as 1 — the contiguous strides, which
     * must fit even when the tensor has no elements */
    for (int d = 0; d < ndim && !over; d++) {
        int64_t s = shape[d] > 0 ? shape[d] : 1;
        empty |= shape[d] == 0;
        if (span > INT64_MAX / s) over = true;
        else span *= s;
    }
    if (!over && !empty && es > 0 && span > REMAT_MAX_TENSOR_BYTES / es) over = true;
    if (over) {
        char b[200];
        return rm_err(REMAT_EINVAL,
                      "%s%sshape %s of %s is larger than the maximum tensor size "
                      "(2^62 bytes)",
                      call ? call : "", call ? ": " : "", rm_shape_str(ndim, shape, b, sizeof b),
                      remat_dtype_name(dtype));
    }
    if (numel) *numel = empty ? 0 : span;
    return REMAT_OK;
}

remat_tensor *rm_tensor_alloc(rm_storage *storage, int64_t offset, int ndim, const int64_t *shape,
                              const int64_t *strides, remat_dtype dtype) {
    remat_tensor *t = rm_tensor_slot_take();
    if (!t) return NULL;
    atomic_init(&t->refcount, 1);
    atomic_init(&t->user_refs, 0);
    rm_storage_retain(storage);
    t->storage = storage;
    t->offset = offset;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        t->shape[d] = shape[d];
        t->strides[d] = strides[d];
    }
    t->dtype = dtype;
    atomic_fetch_add(&g_live_tensors, 1);
    return t;
}

/* ---- reference checks ------------------------------------------------------------------- */
static atomic_int g_ref_checks; /* a remat_ref_checks; 0 until first read */

remat_ref_checks remat_get_ref_checks(void) {
    int v = atomic_load_explicit(&g_ref_checks, memory_order_relaxed);
    if (v) return (remat_ref_checks)v;
    const char *e = getenv("REMAT_REF_CHECKS");
    v = REMAT_REF_CHECKS_ON;
    if (e && strcmp(e, "deep") == 0) v = REMAT_REF_CHECKS_DEEP;
    else if (e && *e && strcmp(e, "on") != 0)
        rm_warn("REMAT_REF_CHECKS=%.32s is neither 'on' nor 'deep'; using 'on'", e);
    int unset = 0;
    atomic_compare_exchange_strong(&g_ref_checks, &unset, v);
    return (remat_ref_checks)atomic_load(&g_ref_checks);
}

remat_status remat_set_ref_checks(remat_ref_checks level) {
    if (level != REMAT_REF_CHECKS_ON && level != REMAT_REF_CHECKS_DEEP)
        return rm_err(REMAT_EINVAL,
                      "remat_set_ref_checks: level %d is neither REMAT_REF_CHECKS_ON nor "
                      "REMAT_REF_CHECKS_DEEP",
                      (int)level);
    atomic_store(&g_ref_checks, (int)level);
    return REMAT_OK;
}

size_t rm_ref_quarantine(void) {
    return remat_get_ref_checks() == REMAT_REF_CHECKS_DEEP ? SIZE_MAX : RM_REF_QUARANTINE;
}

/* "[2, 3] f32 made by remat_linear" (the shape and name stay readable after
 * release: the struct is type-stable, tensor_pool.c). */
static const char *ref_str(const remat_tensor *t, char *buf, size_t n) {
    char b[220];
    rm_tensor_str(t, b, sizeof b);
    snprintf(buf, n, "%s%s%s", b, t->origin ? " made by " : "", t->origin ? t->origin : "");
    return buf;
}

remat_status rm_released_err(const char *call, const char *arg, const remat_tensor *t) {
    char b[300];
    return rm_err(REMAT_ESTATE,
                  "%s: %s%s%s%s was already released (its last reference was dropped by "
                  "remat_release or a scope's end); keep a reference while you use a tensor",
                  call, arg ? "'" : "", arg ? arg : "", arg ? "' " : "", ref_str(t, b, sizeof b));
}

void rm_released_warn(const char *call, const remat_tensor *t) {
    rm_released_err(call, NULL, t);
    rm_warn("%s (ignored)", remat_last_error());
}

static void scope_forget(remat_tensor *t);

/* Deep checks: the bytes of a storage about to be freed become 0xFF (NaN in
 * every float dtype), so a data pointer kept past the release reads NaN
 * instead of the old values. */
static void poison_storage(rm_storage *st) {
    if (st && atomic_load(&st->refcount) == 1 && st->data && st->data != g_empty_storage &&
        st->nbytes && remat_device_host_addressable(st->device.type))
        memset(st->data, 0xFF, st->nbytes);
}

/* ---- references --------------------------------------------------------------------------- */
remat_tensor *rm_retain(remat_tensor *t) {
    if (t) atomic_fetch_add(&t->refcount, 1);
    return t;
}

void rm_release(remat_tensor *t) {
    if (!t) return;
    if (rm_dead(t)) {
        rm_released_warn("remat_release", t);
        return;
    }
    if (atomic_fetch_sub(&t->refcount, 1) != 1) return;
    rm_release(t->grad);
    if (t->grad_fn) ((rm_node_head *)(void *)t->grad_fn)->release(t->grad_fn);
    if (remat_get_ref_checks() == REMAT_REF_CHECKS_DEEP) poison_storage(t->storage);
    rm_storage_release(t->storage);
    for (rm_hook *h = t->hooks; h;) {
        rm_hook *n = h->next;
        free(h);
        h = n;
    }
    t->grad = NULL;
    t->grad_fn = NULL;
    t->grad_accumulator = NULL;
    t->hooks = NULL;
    t->storage = NULL;
    atomic_fetch_sub(&g_live_tensors, 1);
    rm_tensor_slot_put(t); /* t->name is kept for messages until the slot is reused */
}

void rm_release_p(remat_tensor **pt) {
    if (!pt) return;
    rm_release(*pt);
    *pt = NULL;
}

remat_tensor *remat_retain(remat_tensor *t) {
    if (!t) return NULL;
    if (rm_dead(t)) {
        rm_released_warn("remat_retain", t);
        return NULL;
    }
    atomic_fetch_add(&t->user_refs, 1);
    return rm_retain(t);
}

/* Takes one reference off the caller's account: one from remat_retain or
 * remat_scope_keep if the caller holds such, else the latest one an open
 * scope holds (the scope then no longer drops it). References handed out
 * with no scope open are on no account. */
static void user_drop(remat_tensor *t) {
    int u = atomic_load_explicit(&t->user_refs, memory_order_relaxed);
    while (u > 0 && !atomic_compare_exchange_weak(&t->user_refs, &u, u - 1)) {}
    if (u <= 0 && t->scope_owner) scope_forget(t);
}

void remat_release(remat_tensor *t) {
    if (!t) return;
    if (rm_dead(t)) {
        rm_released_warn("remat_release", t);
        return;
    }
    user_drop(t);
    rm_release(t);
}

void remat_release_p(remat_tensor **pt) {
    if (!pt) return;
    remat_release(*pt);
    *pt = NULL;
}

/* ---- scopes ---------------------------------------------------------------------------- */
/* A scope's entry: a reference it holds, and the generation of the struct
 * then (a struct reused since — the reference was over-released — is not
 * touched at the scope's end). */
typedef struct scope_item {
    remat_tensor *t;
    uint32_t gen;
} scope_item;

struct remat_scope {
    scope_item *items;
    int n, cap;
    struct remat_scope *parent; /* the scope it suspends (none while suspended) */
    /* the innermost scope open on the thread when it began, suspended or
     * not: where a tensor's other registrations are (scope_find) */
    struct remat_scope *outer;
};

static RM_TLS remat_scope *tls_scope; /* innermost open, NULL while suspended */
static RM_TLS remat_scope *tls_open;  /* innermost open, suspended or not */

remat_status remat_scope_begin(remat_scope **out) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_scope_begin: out must not be NULL");
    remat_scope *s = calloc(1, sizeof *s);
    if (!s) return rm_err(REMAT_ENOMEM, "remat_scope_begin: out of memory");
    s->parent = tls_scope;
    s->outer = tls_open;
    tls_scope = s;
    tls_open = s;
    *out = s;
    return REMAT_OK;
}

/* Points t at its latest registration in s (before index `below`) or in
 * the scopes s is nested in; none: t is held by no scope. */
static void scope_find(remat_tensor *t, remat_scope *s, int below) {
    for (; s; s = s->outer, below = s ? s->n : 0)
        for (int i = below - 1; i >= 0; i--)
            if (s->items[i].t == t && s->items[i].gen == t->gen) {
                t->scope_owner = s;
                t->scope_index = i;
                return;
            }
    t->scope_owner = NULL;
    t->scope_refs = 0;
}

/* Removes t's latest scope entry (not the reference: the caller takes it). */
static void scope_forget(remat_tensor *t) {
    remat_scope *s = t->scope_owner;
    int i = t->scope_index;
    s->items[i].t = NULL;
    if (--t->scope_refs > 0) scope_find(t, s, i);
    else t->scope_owner = NULL;
}

remat_status remat_scope_end(remat_scope *s) {
    if (!s) return REMAT_OK;
    if (s != tls_scope)
        return rm_err(REMAT_ESTATE, "remat_scope_end: scope is not the innermost open scope on "
                                    "this thread (close inner scopes first)");
    tls_scope = s->parent;
    if (tls_open == s) {
        tls_open = s->outer;
    } else { /* a scope begun inside it while it was suspended is still open */
        for (remat_scope *o = tls_open; o; o = o->outer)
            if (o->outer == s) o->outer = s->outer;
    }
    /* first every entry leaves the tensors' accounts, then the references go
     * (a tensor entered twice, or also in an outer scope, stays consistent) */
    for (int i = 0; i < s->n; i++) {
        remat_tensor *t = s->items[i].t;
        if (!t) continue;
        if (t->gen != s->items[i].gen || rm_dead(t)) {
            s->items[i].t = NULL; /* released once too often by its user: reported there */
            continue;
        }
        t->scope_refs--;
        if (t->scope_owner == s) t->scope_owner = NULL;
    }
    for (int i = 0; i < s->n; i++) {
        remat_tensor *t = s->items[i].t;
        if (t && t->scope_refs > 0 && !t->scope_owner)
            scope_find(t, s->outer, s->outer ? s->outer->n : 0);
    }
    for (int i = 0; i < s->n; i++) rm_release(s->items[i].t);
    free(s->items);
    free(s);
    return REMAT_OK;
}

remat_status rm_hand_out_n(remat_tensor **ts, int n) {
    remat_scope *s = tls_scope;
    if (!s) return REMAT_OK;
    int need = 0;
    for (int i = 0; i < n; i++) need += ts[i] != NULL;
    if (s->cap - s->n < need) { /* grow once for all n, so none is handed out on failure */
        int cap = s->cap ? s->cap : 64;
        while (cap - s->n < need && cap <= INT32_MAX / 2) cap *= 2;
        scope_item *items =
            cap - s->n >= need ? realloc(s->items, (size_t)cap * sizeof *items) : NULL;
        if (!items) {
            for (int i = 0; i < n; i++) rm_release_p(&ts[i]);
            return rm_err(REMAT_ENOMEM,
                          "out of memory registering %d output%s with the open "
                          "remat_scope (%d tensors in it)",
                          need, need == 1 ? "" : "s", s->n);
        }
        s->items = items;
        s->cap = cap;
    }
    for (int i = 0; i < n; i++) {
        remat_tensor *t = ts[i];
        if (!t) continue;
        t->scope_owner = s;
        t->scope_index = s->n;
        t->scope_refs++;
        s->items[s->n++] = (scope_item){t, t->gen};
    }
    return REMAT_OK;
}

remat_status rm_hand_out(remat_tensor **out, remat_tensor *t) {
    *out = t;
    return rm_hand_out_n(out, 1);
}

remat_tensor *remat_scope_keep(remat_tensor *t) {
    if (!t) return NULL;
    if (rm_dead(t)) {
        rm_released_warn("remat_scope_keep", t);
        return NULL;
    }
    if (!t->scope_owner) {
        char b[300];
        rm_err(REMAT_ESTATE,
               "remat_scope_keep: %s is held by no open scope (made with none open, or kept "
               "already): the reference is yours already, nothing was added",
               ref_str(t, b, sizeof b));
        rm_warn("%s", remat_last_error());
        return t;
    }
    scope_forget(t);
    atomic_fetch_add(&t->user_refs, 1);
    return t;
}

void rm_adopt(remat_tensor *t) {
    if (!t || rm_dead(t)) return;
    int u = atomic_load_explicit(&t->user_refs, memory_order_relaxed);
    while (u > 0 && !atomic_compare_exchange_weak(&t->user_refs, &u, u - 1)) {}
}

void rm_scope_unhold(remat_tensor *t) {
    if (t && t->scope_owner) scope_forget(t);
}

/* ---- formatting and validation -------------------------------------------------------------- */
const char *rm_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

const char *rm_tensor_str(const remat_tensor *t, char *buf, size_t n) {
    if (!t) {
        snprintf(buf, n, "NULL");
        return buf;
    }
    char sh[160];
    rm_shape_str(t->ndim, t->shape, sh, sizeof sh);
    /* a released tensor has no storage: its device is not said */
    remat_device device = t->storage ? t->storage->device : REMAT_DEVICE_CPU;
    const char *dev = remat_device_type_name(device.type);
    if (device.type == REMAT_CPU) {
        if (t->name) snprintf(buf, n, "'%s' %s %s", t->name, sh, remat_dtype_name(t->dtype));
        else snprintf(buf, n, "%s %s", sh, remat_dtype_name(t->dtype));
    } else {
        snprintf(buf, n, "%s%s%s%s %s on %s:%d", t->name ? "'" : "", t->name ? t->name : "",
                 t->name ? "' " : "", sh, remat_dtype_name(t->dtype), dev ? dev : "?",
                 device.index);
    }
    return buf;
}

const char *remat_describe(const remat_tensor *t, char *buf, size_t n) {
    if (!buf || n == 0) return "";
    rm_tensor_str(t, buf, n);
    if (t && rm_dead(t)) {
        size_t k = strlen(buf);
        snprintf(buf + k, n - k, " (released)");
    }
    return buf;
}

remat_status rm_check_tensor(const char *call, const char *arg, const remat_tensor *t) {
    if (!t) return rm_err(REMAT_EINVAL, "%s: tensor argument '%s' is NULL", call, arg);
    if (rm_dead(t)) return rm_released_err(call, arg, t);
    return REMAT_OK;
}

remat_status rm_check_dtype_in(const char *call, const char *arg, const remat_tensor *t,
                               unsigned dtypes, const char *names) {
    int rc = rm_check_tensor(call, arg, t);
    if (rc) return rc;
    if (!(dtypes & RM_DTYPE_BIT(t->dtype))) {
        char b[200];
        return rm_err(REMAT_EDTYPE, "%s: '%s' must be %s, got %s", call, arg, names,
                      rm_tensor_str(t, b, sizeof b));
    }
    return REMAT_OK;
}

remat_status rm_check_float_dtype(const char *call, const char *arg, const remat_tensor *t) {
    return rm_check_dtype_in(
        call, arg, t, RM_DTYPE_BIT(REMAT_F32) | RM_DTYPE_BIT(REMAT_F64) | RM_DTYPE_BIT(REMAT_BF16),
        "f32, f64 or bf16");
}

remat_status rm_check_same_dtype(const char *call, const remat_tensor *a, const remat_tensor *b) {
    if (a->dtype != b->dtype) {
        char ba[200], bb[200];
        return rm_err(REMAT_EDTYPE, "%s: dtypes differ: %s vs %s", call,
                      rm_tensor_str(a, ba, sizeof ba), rm_tensor_str(b, bb, sizeof bb));
    }
    return REMAT_OK;
}

remat_status rm_check_same_device(const char *call, const remat_tensor *a, const remat_tensor *b) {
    remat_device da = a->storage->device, db = b->storage->device;
    if (da.type != db.type || da.index != db.index) {
        char ba[200], bb[200];
        return rm_err(REMAT_EDEVICE, "%s: tensors are on different devices: %s and %s", call,
                      rm_tensor_str(a, ba, sizeof ba), rm_tensor_str(b, bb, sizeof bb));
    }
    return REMAT_OK;
}

remat_status rm_check_host(const char *call, const remat_tensor *t) {
    if (!remat_device_host_addressable(t->storage->device.type)) {
        char b[200];
        return rm_err(REMAT_EDEVICE,
                      "%s: %s lives on a device that remat has no kernels for; move it to cpu",
                      call, rm_tensor_str(t, b, sizeof b));
    }
    return REMAT_OK;
}

remat_status rm_norm_dim(const char *call, int dim, int ndim, int *out) {
    int n = ndim == 0 ? 1 : ndim; /* a 0-dim tensor accepts dim 0 / -1 */
    if (dim < -n || dim >= n)
        return rm_err(REMAT_EINVAL,
                      "%s: dim %d out of range for a %d-dim tensor (expected %d to %d)", call, dim,
                      ndim, -n, n - 1);
    *out = dim < 0 ? dim + n : dim;
    return REMAT_OK;
}

remat_status rm_broadcast_shape(const char *call, int nda, const int64_t *sa, int ndb,
                                const int64_t *sb, int *nd_out, int64_t *shape_out) {
    int nd = nda > ndb ? nda : ndb;
    for (int i = 0; i < nd; i++) {
        int ia = nda - nd + i, ib = ndb - nd + i;
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char b1[160], b2[160];
            return rm_err(REMAT_ESHAPE,
                          "%s: shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)", call,
                          rm_shape_str(nda, sa, b1, sizeof b1),
                          rm_shape_str(ndb, sb, b2, sizeof b2), i, (long long)da, (long long)db);
        }
        shape_out[i] = da == 1 ? db : da;
    }
    *nd_out = nd;
    return REMAT_OK;
}

/* ---- creation ---------------------------------------------------------------------------------- */
static remat_status check_shape(const char *call, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > REMAT_MAX_DIMS)
        return rm_err(REMAT_EINVAL, "%s: ndim %d out of range (0 to %d)", call, ndim,
                      REMAT_MAX_DIMS);
    if (ndim > 0 && !shape)
        return rm_err(REMAT_EINVAL, "%s: shape is NULL with ndim %d", call, ndim);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return rm_err(REMAT_EINVAL, "%s: negative size %lld in dim %d", call,
                          (long long)shape[d], d);
    return REMAT_OK;
}

static remat_status make_tensor(remat_tensor **out, int ndim, const int64_t *shape,
                                remat_dtype dtype, remat_device device, bool meta) {
    size_t es = remat_dtype_size(dtype);
    if (!es) return rm_err(REMAT_EDTYPE, "unknown dtype %d", (int)dtype);
    int64_t numel = 0;
    int rc = rm_check_size(NULL, ndim, shape, dtype, &numel);
    if (rc) return rc;
    rm_storage *s = NULL;
    rc = rm_storage_new(&s, (size_t)numel * es, device, meta);
    if (rc) return rc;
    int64_t strides[REMAT_MAX_DIMS];
    rm_contiguous_strides(ndim, shape, strides);
    remat_tensor *t = rm_tensor_alloc(s, 0, ndim, shape, strides, dtype);
    rm_storage_release(s);
    if (!t) return rm_err(REMAT_ENOMEM, "out of host memory for a tensor header");
    *out = t;
    return REMAT_OK;
}

remat_status rm_new_output(remat_tensor **out, int ndim, const int64_t *shape, remat_dtype dtype,
                           remat_device device) {
    return make_tensor(out, ndim, shape, dtype, device, rm_skip_mode());
}

remat_status remat_empty(remat_tensor **out, int ndim, const int64_t *shape, remat_dtype dtype,
                         remat_device device) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_empty: out must not be NULL");
    *out = NULL;
    int rc = check_shape("remat_empty", ndim, shape);
    if (rc) return rc;
    remat_tensor *t = NULL;
    rc = make_tensor(&t, ndim, shape, dtype, device, false);
    if (rc) return rm_err_prefix(rc, "remat_empty");
    t->origin = "remat_empty";
    return rm_hand_out(out, t);
}

static void fill_value(remat_tensor *t, double v) {
    int64_t n = rm_shape_numel(t->ndim, t->shape);
    void *p = rm_ptr(t);
    if (!p) return;
    if (t->dtype == REMAT_F32) {
        float *f = p;
        for (int64_t i = 0; i < n; i++) f[i] = (float)v;
    } else if (t->dtype == REMAT_F64) {
        double *f = p;
        for (int64_t i = 0; i < n; i++) f[i] = v;
    } else if (t->dtype == REMAT_I64) {
        int64_t *f = p;
        int64_t iv = rm_f64_to_i64(v);
        for (int64_t i = 0; i < n; i++) f[i] = iv;
    } else if (t->dtype == REMAT_U8) {
        memset(p, (int)(uint8_t)(v > 0 ? (v < 255 ? v : 255) : 0), (size_t)n);
    } else if (t->dtype == REMAT_BF16) {
        uint16_t h = rm_f32_to_bf16((float)v), *f = p;
        for (int64_t i = 0; i < n; i++) f[i] = h;
    }
}

/* Fills a host-addressable t or, for other devices, a constant by the device's kernel
 * (rm_kernel_fill) and anything else on cpu, copied over. */
static remat_status fill_any(remat_tensor *t, double v,
                             void (*fill)(remat_tensor *, double, void *), void *ud) {
    if (remat_device_host_addressable(t->storage->device.type)) {
        if (fill) fill(t, v, ud);
        else fill_value(t, v);
        return REMAT_OK;
    }
    if (!fill && (v == 0 || t->dtype == REMAT_F32 || t->dtype == REMAT_F64))
        return rm_kernel_fill(t, v, "fill");
    remat_tensor *tmp = NULL;
    int rc = make_tensor(&tmp, t->ndim, t->shape, t->dtype, REMAT_DEVICE_CPU, false);
    if (rc) return rc;
    if (fill) fill(tmp, v, ud);
    else fill_value(tmp, v);
    rc = rm_device_copy(t->storage->device, rm_ptr(t), REMAT_DEVICE_CPU, rm_ptr(tmp),
                        tmp->storage->nbytes);
    rm_release(tmp);
    return rc;
}

/* The end of a factory: t, filled with status rc, is handed out (made by
 * `call`), or released when rc is an error. */
static remat_status hand_out_filled(const char *call, remat_tensor **out, remat_tensor *t,
                                    remat_status rc) {
    if (rc) {
        rm_release(t);
        return rm_err_prefix(rc, call);
    }
    t->origin = call;
    return rm_hand_out(out, t);
}

static remat_status full_impl(const char *call, remat_tensor **out, int ndim, const int64_t *shape,
                              double value, remat_dtype dtype, remat_device device) {
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = check_shape(call, ndim, shape);
    if (rc) return rc;
    remat_tensor *t = NULL;
    rc = make_tensor(&t, ndim, shape, dtype, device, false);
    if (rc) return rm_err_prefix(rc, call);
    return hand_out_filled(call, out, t, fill_any(t, value, NULL, NULL));
}

remat_status remat_full(remat_tensor **out, int ndim, const int64_t *shape, double value,
                        remat_dtype dtype, remat_device device) {
    return full_impl("remat_full", out, ndim, shape, value, dtype, device);
}

remat_status remat_zeros(remat_tensor **out, int ndim, const int64_t *shape, remat_dtype dtype,
                         remat_device device) {
    return full_impl("remat_zeros", out, ndim, shape, 0.0, dtype, device);
}

remat_status remat_scalar(remat_tensor **out, double value, remat_dtype dtype) {
    return full_impl("remat_scalar", out, 0, NULL, value, dtype, REMAT_DEVICE_CPU);
}

remat_status remat_from_data(remat_tensor **out, int ndim, const int64_t *shape, remat_dtype dtype,
                             const void *data) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_from_data: out must not be NULL");
    *out = NULL;
    int rc = check_shape("remat_from_data", ndim, shape);
    if (rc) return rc;
    int64_t n = rm_shape_numel(ndim, shape);
    if (!data && n > 0) return rm_err(REMAT_EINVAL, "remat_from_data: data is NULL");
    remat_tensor *t = NULL;
    rc = make_tensor(&t, ndim, shape, dtype, REMAT_DEVICE_CPU, false);
    if (rc) return rm_err_prefix(rc, "remat_from_data");
    if (n) /* through backend 0's copy, as every host copy of the core */
        rc = rm_device_copy(REMAT_DEVICE_CPU, rm_ptr(t), REMAT_DEVICE_CPU, data,
                            (size_t)n * remat_dtype_size(dtype));
    if (rc) {
        rm_release(t);
        return rm_err_prefix(rc, "remat_from_data");
    }
    t->origin = "remat_from_data";
    return rm_hand_out(out, t);
}

remat_status remat_arange(remat_tensor **out, int64_t n) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_arange: out must not be NULL");
    *out = NULL;
    if (n < 0) return rm_err(REMAT_EINVAL, "remat_arange: n must be >= 0, got %lld", (long long)n);
    remat_tensor *t = NULL;
    int rc = make_tensor(&t, 1, &n, REMAT_I64, REMAT_DEVICE_CPU, false);
    if (rc) return rm_err_prefix(rc, "remat_arange");
    int64_t *p = rm_ptr(t);
    for (int64_t i = 0; i < n; i++) p[i] = i;
    t->origin = "remat_arange";
    return rm_hand_out(out, t);
}

typedef struct rand_args {
    bool normal;
    double a, b;
    uint32_t key[2];
    uint64_t counter;
} rand_args;

/* Element i uses block counter + i/2 (normal: Box-Muller over one block per
 * pair) — the values depend only on (seed, offset, i), not on threads. */
static void fill_rand(remat_tensor *t, double unused, void *ud) {
    RM_UNUSED(unused);
    rand_args *ra = ud;
    int64_t n = rm_shape_numel(t->ndim, t->shape);
    void *p = rm_ptr(t);
#pragma omp parallel for if (n > RM_OMP_MIN)
    for (int64_t j = 0; j < (n + 1) / 2; j++) {
        uint32_t r[4];
        rm_philox_block(ra->key, ra->counter + (uint64_t)j, r);
        double v[2];
        if (ra->normal) {
            double u1 = rm_u64_to_unit(r[0], r[1]), u2 = rm_u64_to_unit(r[2], r[3]);
            if (u1 < 1e-300) u1 = 1e-300;
            double rad = sqrt(-2.0 * log(u1));
            v[0] = ra->a + ra->b * rad * cos(2.0 * M_PI * u2);
            v[1] = ra->a + ra->b * rad * sin(2.0 * M_PI * u2);
        } else {
            v[0] = ra->a + (ra->b - ra->a) * rm_u64_to_unit(r[0], r[1]);
            v[1] = ra->a + (ra->b - ra->a) * rm_u64_to_unit(r[2], r[3]);
        }
        for (int k = 0; k < 2; k++) {
            int64_t i = 2 * j + k;
            if (i >= n) break;
            if (t->dtype == REMAT_F32) {
                float f = (float)v[k];
                /* rounding may reach the excluded upper bound */
                if (!ra->normal && f >= (float)ra->b) f = nextafterf((float)ra->b, -INFINITY);
                ((float *)p)[i] = f;
            } else {
                ((double *)p)[i] = v[k];
            }
        }
    }
}

static remat_status make_rand(const char *call, remat_tensor **out, int ndim, const int64_t *shape,
                              double a, double b, bool normal, remat_dtype dtype,
                              remat_device device) {
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = check_shape(call, ndim, shape);
    if (rc) return rc;
    if (dtype != REMAT_F32 && dtype != REMAT_F64)
        return rm_err(REMAT_EDTYPE, "%s: dtype must be f32 or f64", call);
    if (normal ? !(b >= 0) : !(b >= a))
        return rm_err(REMAT_EINVAL,
                      normal ? "%s: std must be >= 0, got %g" : "%s: need lo <= hi, got hi %g",
                      call, b);
    remat_tensor *t = NULL;
    rc = make_tensor(&t, ndim, shape, dtype, device, false);
    if (rc) return rm_err_prefix(rc, call);
    rand_args ra = {normal, a, b, {0, 0}, 0};
    int64_t n = rm_shape_numel(ndim, shape);
    rc = rm_rng_reserve(device, (uint64_t)((n + 1) / 2), ra.key, &ra.counter);
    if (!rc) rc = fill_any(t, 0, fill_rand, &ra);
    return hand_out_filled(call, out, t, rc);
}

remat_status remat_rand_uniform(remat_tensor **out, int ndim, const int64_t *shape, double lo,
                                double hi, remat_dtype dtype, remat_device device) {
    return make_rand("remat_rand_uniform", out, ndim, shape, lo, hi, false, dtype, device);
}

remat_status remat_rand_normal(remat_tensor **out, int ndim, const int64_t *shape, double mean,
                               double std, remat_dtype dtype, remat_device device) {
    return make_rand("remat_rand_normal", out, ndim, shape, mean, std, true, dtype, device);
}

/* ---- metadata ------------------------------------------------------------------------------------ */
/* The calls below return a value, not a status: a released t is reported
 * (a warning and the last-error text) and reads as NULL would (rm_live). */

int remat_ndim(const remat_tensor *t) {
    t = rm_live("remat_ndim", t);
    return t ? t->ndim : -1;
}

int64_t remat_size(const remat_tensor *t, int d) {
    t = rm_live("remat_size", t);
    if (!t) return -1;
    if (d < 0) d += t->ndim;
    if (d < 0 || d >= t->ndim) return -1;
    return t->shape[d];
}

const int64_t *remat_shape(const remat_tensor *t) {
    t = rm_live("remat_shape", t);
    return t ? t->shape : NULL;
}
const int64_t *remat_strides(const remat_tensor *t) {
    t = rm_live("remat_strides", t);
    return t ? t->strides : NULL;
}
int64_t remat_numel(const remat_tensor *t) {
    t = rm_live("remat_numel", t);
    return t ? rm_shape_numel(t->ndim, t->shape) : 0;
}
remat_dtype remat_tensor_dtype(const remat_tensor *t) {
    t = rm_live("remat_tensor_dtype", t);
    return t ? t->dtype : REMAT_F32;
}
remat_device remat_tensor_device(const remat_tensor *t) {
    t = rm_live("remat_tensor_device", t);
    return t ? t->storage->device : REMAT_DEVICE_CPU;
}

bool remat_is_contiguous(const remat_tensor *t) {
    t = rm_live("remat_is_contiguous", t);
    if (!t) return false;
    int64_t st = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != st) return false;
        st *= t->shape[d];
    }
    return true;
}

uint64_t remat_version(const remat_tensor *t) {
    t = rm_live("remat_version", t);
    return t ? (uint64_t)atomic_load(&t->storage->version) : 0;
}
bool remat_shares_storage(const remat_tensor *a, const remat_tensor *b) {
    a = rm_live("remat_shares_storage", a);
    b = rm_live("remat_shares_storage", b);
    return a && b && a->storage == b->storage;
}
size_t remat_storage_nbytes(const remat_tensor *t) {
    t = rm_live("remat_storage_nbytes", t);
    return t ? t->storage->nbytes : 0;
}

remat_status remat_set_name(remat_tensor *t, const char *name) {
    int rc = rm_check_tensor("remat_set_name", "t", t);
    if (rc) return rc;
    char *copy = NULL;
    if (name) {
        copy = strdup(name);
        if (!copy) return rm_err(REMAT_ENOMEM, "remat_set_name: out of memory");
    }
    free(t->name);
    t->name = copy;
    return REMAT_OK;
}

const char *remat_name(const remat_tensor *t) {
    t = rm_live("remat_name", t);
    return t ? t->name : NULL;
}

void *remat_data(const remat_tensor *t) {
    t = rm_live("remat_data", t);
    if (!t || !remat_device_host_addressable(t->storage->device.type)) return NULL;
    return rm_ptr(t);
}

void *remat_data_ptr(const remat_tensor *t) {
    t = rm_live("remat_data_ptr", t);
    return t ? rm_ptr(t) : NULL;
}

static double read_elem(const remat_tensor *t, int64_t off) {
    const char *p = (const char *)t->storage->data + (size_t)off * remat_dtype_size(t->dtype);
    switch (t->dtype) {
    case REMAT_F32: return *(const float *)p;
    case REMAT_F64: return *(const double *)p;
    case REMAT_I64: return (double)*(const int64_t *)p;
    case REMAT_U8: return (double)*(const uint8_t *)p;
    case REMAT_BF16: return (double)rm_bf16_to_f32(*(const uint16_t *)p);
    }
    return 0;
}

remat_status remat_item_at(const remat_tensor *t, int64_t i, double *value) {
    int rc = rm_check_tensor("remat_item_at", "t", t);
    if (rc) return rc;
    if (!value) return rm_err(REMAT_EINVAL, "remat_item_at: value must not be NULL");
    int64_t n = remat_numel(t);
    if (i < 0 || i >= n) {
        char b[200];
        return rm_err(REMAT_EINVAL, "remat_item_at: index %lld out of range for %s (%lld elements)",
                      (long long)i, rm_tensor_str(t, b, sizeof b), (long long)n);
    }
    rc = rm_check_host("remat_item_at", t);
    if (rc) return rc;
    if (!t->storage->data)
        return rm_err(REMAT_ESTATE, "remat_item_at: tensor has no data (made while recomputation "
                                    "was stopping early)");
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->strides[d];
        i /= t->shape[d];
    }
    *value = read_elem(t, off);
    return REMAT_OK;
}

remat_status remat_item(const remat_tensor *t, double *value) {
    int rc = rm_check_tensor("remat_item", "t", t);
    if (rc) return rc;
    if (remat_numel(t) != 1) {
        char b[200];
        return rm_err(REMAT_ESHAPE, "remat_item: tensor %s has %lld elements, expected 1",
                      rm_tensor_str(t, b, sizeof b), (long long)remat_numel(t));
    }
    if (!remat_device_host_addressable(t->storage->device.type)) { /* read through a copy */
        if (!value) return rm_err(REMAT_EINVAL, "remat_item: value must not be NULL");
        rc = remat_copy_to_buffer(t, REMAT_F64, value, 1);
        return rc ? rm_err_prefix(rc, "remat_item") : REMAT_OK;
    }
    return remat_item_at(t, 0, value);
}

/* remat_copy_to_buffer of a tensor the CPU cannot read: made contiguous on
 * its device, brought to host memory, converted from there. */
static remat_status copy_device_to_buffer(const remat_tensor *t, remat_dtype dtype, void *dst,
                                          int64_t n) {
    remat_tensor *c = NULL, *h = NULL;
    rm_storage *st = NULL;
    size_t nbytes = (size_t)remat_numel(t) * remat_dtype_size(t->dtype);
    int rc = rm_contig(&c, (remat_tensor *)t);
    if (!rc) rc = rm_storage_new(&st, nbytes, REMAT_DEVICE_CPU, false);
    if (!rc) {
        h = rm_tensor_alloc(st, 0, t->ndim, t->shape, c->strides, t->dtype);
        rm_storage_release(st); /* h holds its own reference */
        if (!h) rc = rm_err(REMAT_ENOMEM, "out of host memory");
    }
    if (!rc)
        rc = rm_device_copy(REMAT_DEVICE_CPU, rm_ptr(h), c->storage->device, rm_ptr(c), nbytes);
    if (!rc) rc = remat_copy_to_buffer(h, dtype, dst, n);
    rm_release(c);
    rm_release(h);
    return rc ? rm_err_prefix(rc, "remat_copy_to_buffer") : REMAT_OK;
}

remat_status remat_copy_to_buffer(const remat_tensor *t, remat_dtype dtype, void *dst, int64_t n) {
    int rc = rm_check_tensor("remat_copy_to_buffer", "t", t);
    if (rc) return rc;
    int64_t numel = remat_numel(t);
    if (!dst && numel) return rm_err(REMAT_EINVAL, "remat_copy_to_buffer: dst is NULL");
    if (n < numel)
        return rm_err(REMAT_EINVAL,
                      "remat_copy_to_buffer: buffer holds %lld elements, tensor has %lld",
                      (long long)n, (long long)numel);
    if (!remat_dtype_size(dtype)) return rm_err(REMAT_EDTYPE, "remat_copy_to_buffer: bad dtype");
    if (numel && !remat_device_host_addressable(t->storage->device.type))
        return copy_device_to_buffer(t, dtype, dst, n);
    rm_storage st = {0};
    st.data = dst;
    st.device = REMAT_DEVICE_CPU;
    int64_t strides[REMAT_MAX_DIMS];
    rm_contiguous_strides(t->ndim, t->shape, strides);
    remat_tensor view = {0};
    view.storage = &st;
    view.ndim = t->ndim;
    memcpy(view.shape, t->shape, sizeof view.shape);
    memcpy(view.strides, strides, sizeof view.strides);
    view.dtype = dtype;
    rc = rm_copy_into(&view, t);
    if (rc) return rm_err_prefix(rc, "remat_copy_to_buffer");
    return REMAT_OK;
}

/* ---- iteration and copies -------------------------------------------------------------------------- */
void rm_broadcast_strides(const remat_tensor *t, int ndim, const int64_t *shape, int64_t *out) {
    for (int i = 0; i < ndim; i++) {
        int j = t->ndim - ndim + i;
        out[i] = (j >= 0 && t->shape[j] == shape[i] && t->shape[j] != 1) ? t->strides[j] : 0;
    }
}

void rm_iter_init(rm_iter *it, int ndim, const int64_t *shape, int n_ops) {
    memset(it, 0, sizeof *it);
    it->ndim = ndim;
    it->n_ops = n_ops;
    for (int d = 0; d < ndim; d++) it->shape[d] = shape[d];
}

void rm_iter_seek(rm_iter *it, int64_t linear) {
    for (int k = 0; k < it->n_ops; k++) it->off[k] = 0;
    for (int d = it->ndim - 1; d >= 0; d--) {
        int64_t s = it->shape[d] ? it->shape[d] : 1;
        it->idx[d] = linear % s;
        linear /= s;
        for (int k = 0; k < it->n_ops; k++) it->off[k] += it->idx[d] * it->strides[k][d];
    }
}

/* CONV converts one element (a cast, or rm_f64_to_i64 from floats to i64). */
#define RM_CAST(DT, x) ((DT)(x))
#define RM_TO_I64(DT, x) rm_f64_to_i64((double)(x))
#define RM_COPY_CASE(DT, ST, CONV)                                                                 \
    do {                                                                                           \
        DT *d = (DT *)dst->storage->data + dst->offset;                                            \
        const ST *s = (const ST *)src->storage->data + src->offset;                                \
        _Pragma("omp parallel if (n > 32768)") {                                                   \
            int nt = 1, id = 0;                                                                    \
            rm_omp_ids(&nt, &id);                                                                  \
            int64_t lo = n * id / nt, hi = n * (id + 1) / nt;                                      \
            if (lo < hi) {                                                                         \
                rm_iter it = base;                                                                 \
                rm_iter_seek(&it, lo);                                                             \
                for (int64_t i = lo; i < hi; i++) {                                                \
                    d[it.off[0]] = CONV(DT, s[it.off[1]]);                                         \
                    rm_iter_next(&it);                                                             \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#ifdef _OPENMP
#include <omp.h>
static void rm_omp_ids(int *nt, int *id) {
    *nt = omp_get_num_threads();
    *id = omp_get_thread_num();
}
#else
static void rm_omp_ids(int *nt, int *id) {
    *nt = 1;
    *id = 0;
}
#endif

/* rm_copy_into where the CPU cannot read one side, both on one device: its COPY
 * kernel (same dtype, dst contiguous with src's numel: what rm_contig asks for), else
 * its COPY_INTO kernel (strided dst, broadcast src, dtype conversion); across devices
 * REMAT_EUNSUPPORTED. */
static remat_status copy_into_device(remat_tensor *dst, const remat_tensor *src) {
    remat_device dd = dst->storage->device, sd = src->storage->device;
    if (dd.type == sd.type && dd.index == sd.index) {
        if (dst->dtype == src->dtype && remat_is_contiguous(dst) &&
            rm_shape_numel(src->ndim, src->shape) == rm_shape_numel(dst->ndim, dst->shape)) {
            rm_kargs k = {.in = {(remat_tensor *)src}, .out = {dst}};
            return rm_kernel_run(RM_K_COPY, "copy", &k);
        }
        rm_kargs k = {.in = {dst, (remat_tensor *)src}, .out = {dst}};
        return rm_kernel_run(RM_K_COPY_INTO, "copy", &k);
    }
    char bd[200], bs[200];
    return rm_err(REMAT_EUNSUPPORTED,
                  "copy: from %s into %s: copies on a device the CPU "
                  "cannot read need the same device",
                  rm_tensor_str(src, bs, sizeof bs), rm_tensor_str(dst, bd, sizeof bd));
}

remat_status rm_zero_window(remat_tensor *t, int d, int64_t lo, int64_t hi) {
    if (!t->storage->data || lo >= hi) return REMAT_OK;
    if (remat_device_host_addressable(t->storage->device.type)) {
        rm_host()->zero_dim_range(t, d, lo, hi);
        return REMAT_OK;
    }
    int64_t sh[REMAT_MAX_DIMS];
    memcpy(sh, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    sh[d] = hi - lo;
    remat_tensor *w = rm_tensor_alloc(t->storage, t->offset + lo * t->strides[d], t->ndim, sh,
                                      t->strides, t->dtype);
    if (!w) return rm_err(REMAT_ENOMEM, "out of memory creating a view");
    int rc = rm_kernel_fill(w, 0.0, "zero");
    rm_release(w);
    return rc;
}

remat_status rm_copy_into(remat_tensor *dst, const remat_tensor *src) {
    if (!dst->storage->data || !src->storage->data) return REMAT_OK; /* meta */
    int64_t n = rm_shape_numel(dst->ndim, dst->shape);
    if (n == 0) return REMAT_OK;
    if (!remat_device_host_addressable(dst->storage->device.type) ||
        !remat_device_host_addressable(src->storage->device.type))
        return copy_into_device(dst, src);
    /* same dtype: the bit-for-bit strided kernel (row memcpy, tiled transpose) */
    const rm_host_ops *host = rm_host(); /* backend 0's */
    if (host->copy_same_dtype(dst, src)) return REMAT_OK;
    rm_iter base;
    rm_iter_init(&base, dst->ndim, dst->shape, 2);
    memcpy(base.strides[0], dst->strides, sizeof(int64_t) * (size_t)dst->ndim);
    rm_broadcast_strides(src, dst->ndim, dst->shape, base.strides[1]);
    bool f32_bf16 = dst->dtype == REMAT_BF16 && src->dtype == REMAT_F32;
    bool bf16_f32 = dst->dtype == REMAT_F32 && src->dtype == REMAT_BF16;
    if ((f32_bf16 || bf16_f32) && remat_is_contiguous(dst) && remat_is_contiguous(src) &&
        remat_numel(src) == n) { /* the casts autocast makes: vectorised */
        if (f32_bf16) host->f32_to_bf16(rm_ptr(src), rm_ptr(dst), n);
        else host->bf16_to_f32(rm_ptr(src), rm_ptr(dst), n);
        return REMAT_OK;
    }
    if (dst->dtype > REMAT_I64 || src->dtype > REMAT_I64) {
        /* storage-only dtypes (u8, bf16): element by element through double */
        size_t des = remat_dtype_size(dst->dtype), ses = remat_dtype_size(src->dtype);
        if (!des || !ses) return rm_err(REMAT_EDTYPE, "copy: unsupported dtypes");
        char *d = (char *)dst->storage->data + (size_t)dst->offset * des;
        const char *s = (const char *)src->storage->data + (size_t)src->offset * ses;
        rm_iter it = base;
        for (int64_t i = 0; i < n; i++) {
            const char *sp = s + (size_t)it.off[1] * ses;
            char *dp = d + (size_t)it.off[0] * des;
            double v;
            switch (src->dtype) {
            case REMAT_F32: v = *(const float *)sp; break;
            case REMAT_F64: v = *(const double *)sp; break;
            case REMAT_I64: v = (double)*(const int64_t *)sp; break;
            case REMAT_U8: v = *(const uint8_t *)sp; break;
            default: v = rm_bf16_to_f32(*(const uint16_t *)sp); break;
            }
            switch (dst->dtype) {
            case REMAT_F32: *(float *)dp = (float)v; break;
            case REMAT_F64: *(double *)dp = v; break;
            case REMAT_I64: *(int64_t *)dp = rm_f64_to_i64(v); break;
            case REMAT_U8: *(uint8_t *)dp = (uint8_t)(v > 0 ? (v < 255 ? v : 255) : 0); break;
            default: *(uint16_t *)dp = rm_f32_to_bf16((float)v); break;
            }
            rm_iter_next(&it);
        }
        return REMAT_OK;
    }
    switch (dst->dtype * 3 + src->dtype) {
    case REMAT_F32 * 3 + REMAT_F32: RM_COPY_CASE(float, float, RM_CAST); break;
    case REMAT_F32 * 3 + REMAT_F64: RM_COPY_CASE(float, double, RM_CAST); break;
    case REMAT_F32 * 3 + REMAT_I64: RM_COPY_CASE(float, int64_t, RM_CAST); break;
    case REMAT_F64 * 3 + REMAT_F32: RM_COPY_CASE(double, float, RM_CAST); break;
    case REMAT_F64 * 3 + REMAT_F64: RM_COPY_CASE(double, double, RM_CAST); break;
    case REMAT_F64 * 3 + REMAT_I64: RM_COPY_CASE(double, int64_t, RM_CAST); break;
    case REMAT_I64 * 3 + REMAT_F32: RM_COPY_CASE(int64_t, float, RM_TO_I64); break;
    case REMAT_I64 * 3 + REMAT_F64: RM_COPY_CASE(int64_t, double, RM_TO_I64); break;
    case REMAT_I64 * 3 + REMAT_I64: RM_COPY_CASE(int64_t, int64_t, RM_CAST); break;
    default: return rm_err(REMAT_EDTYPE, "copy: unsupported dtypes");
    }
    return REMAT_OK;
}

void *rm_grow(void *arr, int *cap, int n, int first, size_t elem) {
    if (n < *cap) return arr;
    int nc = *cap ? *cap * 2 : first;
    void *na = realloc(arr, (size_t)nc * elem);
    if (na) *cap = nc;
    return na;
}

remat_status rm_copy_to_window(remat_tensor *z, int64_t offset, const int64_t *strides,
                               const remat_tensor *src, const char *what) {
    remat_tensor *v = rm_tensor_alloc(z->storage, offset, src->ndim, src->shape, strides, z->dtype);
    if (!v) return rm_err(REMAT_ENOMEM, "%s: out of memory creating a view", what);
    int rc = rm_copy_into(v, src); /* host or device */
    rm_release(v);
    return rc;
}

remat_status rm_copy_new(remat_tensor **out, remat_tensor *t) {
    int rc = rm_new_output(out, t->ndim, t->shape, t->dtype, t->storage->device);
    if (!rc) rc = rm_copy_into(*out, t);
    if (rc) rm_release_p(out);
    return rc;
}

remat_status rm_contig(remat_tensor **out, remat_tensor *t) {
    if (remat_is_contiguous(t)) {
        *out = rm_retain(t);
        return REMAT_OK;
    }
    return rm_copy_new(out, t);
}

void *rm_scope_suspend(void) {
    void *prev = tls_scope;
    tls_scope = NULL;
    return prev;
}

void rm_scope_resume(void *prev) { tls_scope = prev; }
