/* src/weights/st_load.c — loading checked safetensors files into a
 * parameter collection, all or nothing (remat_safetensors_load): every
 * tensor is matched to its parameter (name, shape, dtype, data) and every
 * buffer the copies need is allocated before the first parameter is
 * written. The data flows from the mapping into the parameters a window
 * at a time, each window's file pages released after use, so the file
 * never sits in memory beside the model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "weights/st.h"

/* Elements converted between page releases: 16 MiB of the file's bytes. */
#define WINDOW_BYTES ((size_t)16 << 20)

typedef struct plan {
    remat_tensor *param; /* borrowed from the collection */
    const rm_st_source *src;
    remat_tensor *stage; /* a cpu tensor over the shared staging storage, or NULL: direct */
    /* for a strided parameter on a device the host cannot address: a
     * contiguous tensor on its device over that device's staging storage */
    remat_tensor *dev_stage;
} plan;

/* The staging storage of one device (strided parameters there): as large as
 * the largest of them. */
typedef struct dev_staging {
    remat_device device;
    size_t bytes;
    rm_storage *s;
} dev_staging;

static const char *source_name(const void *ctx, int64_t i) {
    const rm_st_source *s = &((const rm_st_source *)ctx)[i];
    return s->f->t[s->i].name;
}

/* Converts the source into dst (contiguous host memory of dtype dd), a
 * window at a time, releasing the file's pages behind it. */
static void convert_windows(const rm_st_source *s, remat_dtype dd, void *dst) {
    const remat_safetensors_tensor *t = &s->f->t[s->i];
    rm_st_dtype sd = s->f->dtype[s->i];
    size_t ss = rm_st_dtype_size(sd), ds = remat_dtype_size(dd);
    int64_t n = (int64_t)((t->end - t->begin) / ss), w = (int64_t)(WINDOW_BYTES / ss);
    const unsigned char *from = t->data;
    rm_st_prefetch(s->f, from, (size_t)(n < w ? n : w) * ss);
    for (int64_t i = 0; i < n; i += w) {
        int64_t k = n - i < w ? n - i : w;
        if (i + k < n) /* the next window */
            rm_st_prefetch(s->f, from + (size_t)(i + k) * ss,
                           (size_t)(n - i - k < w ? n - i - k : w) * ss);
        rm_st_convert(sd, from + (size_t)i * ss, dd, (char *)dst + (size_t)i * ds, k);
        rm_st_release_pages(s->f, from + (size_t)i * ss, (size_t)k * ss);
    }
}

static bool on_host(const remat_tensor *p) {
    return remat_device_host_addressable(remat_tensor_device(p).type);
}

static bool direct(const remat_tensor *p) { return on_host(p) && remat_is_contiguous(p); }

static size_t param_bytes(const remat_tensor *p) {
    return (size_t)remat_numel(p) * remat_dtype_size(remat_tensor_dtype(p));
}

/* A tensor over `storage` shaped as p, contiguous. NULL: out of memory. */
static remat_tensor *contiguous_over(rm_storage *storage, const remat_tensor *p) {
    int64_t strides[REMAT_MAX_DIMS];
    rm_contiguous_strides(remat_ndim(p), remat_shape(p), strides);
    return rm_tensor_alloc(storage, 0, remat_ndim(p), remat_shape(p), strides,
                           remat_tensor_dtype(p));
}

static bool same_device(remat_device a, remat_device b) {
    return a.type == b.type && a.index == b.index;
}

/* The staging buffers on the devices of the strided parameters the host
 * cannot address (devs[]: one per device, *n_devs of them), each as large as
 * its largest such parameter, and each such plan's dev_stage over its
 * device's. */
static remat_status stage_on_devices(const char *call, plan *plans, int64_t np, dev_staging *devs,
                                     int64_t *n_devs) {
    for (int64_t i = 0; i < np; i++) {
        const remat_tensor *p = plans[i].param;
        if (!plans[i].src || on_host(p) || remat_is_contiguous(p)) continue;
        int64_t k = 0;
        while (k < *n_devs && !same_device(devs[k].device, remat_tensor_device(p))) k++;
        if (k == *n_devs) devs[(*n_devs)++] = (dev_staging){remat_tensor_device(p), 0, NULL};
        if (param_bytes(p) > devs[k].bytes) devs[k].bytes = param_bytes(p);
    }
    for (int64_t k = 0; k < *n_devs; k++) {
        remat_status rc = rm_storage_new(&devs[k].s, devs[k].bytes, devs[k].device, false);
        if (rc) return rm_err_prefix(rc, call);
    }
    for (int64_t i = 0; i < np; i++) {
        const remat_tensor *p = plans[i].param;
        if (!plans[i].src || on_host(p) || remat_is_contiguous(p)) continue;
        int64_t k = 0;
        while (!same_device(devs[k].device, remat_tensor_device(p))) k++;
        plans[i].dev_stage = contiguous_over(devs[k].s, p);
        if (!plans[i].dev_stage) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    return REMAT_OK;
}

/* Writes one parameter from its (converted) host staging tensor: a copy
 * for strided host memory, a byte copy to the device for a contiguous
 * parameter the host cannot address, a byte copy to the device's staging
 * and a copy there for a strided one. */
static remat_status write_staged(plan *pl) {
    remat_tensor *p = pl->param;
    if (!on_host(p) && !pl->dev_stage) {
        remat_status rc = rm_device_copy(remat_tensor_device(p), rm_ptr(p), REMAT_DEVICE_CPU,
                                         rm_ptr(pl->stage), param_bytes(p));
        if (!rc) rm_bump_version(p);
        return rc;
    }
    remat_tensor *from = pl->stage;
    if (pl->dev_stage) {
        remat_status rc = rm_device_copy(remat_tensor_device(p), rm_ptr(pl->dev_stage),
                                         REMAT_DEVICE_CPU, rm_ptr(pl->stage), param_bytes(p));
        if (rc) return rc;
        from = pl->dev_stage;
    }
    bool prev = remat_no_grad_begin();
    remat_status rc = remat_copy_(p, from);
    remat_grad_mode_restore(prev);
    return rc;
}

/* The source of parameter `name` under `names`' prefixes (see
 * rm_st_names): the tensor named as it is without, else with, a prefix, if
 * no other parameter took it yet; -1 when there is none. */
static int64_t find_prefixed(const char *name, const rm_st_names *names, const rm_name_table *table,
                             const rm_st_source *src, const bool *used) {
    size_t len = strlen(name);
    char buf[512];
    for (int j = 0; names && j < names->n_prefixes; j++) {
        const char *pre = names->prefixes[j];
        size_t pl = strlen(pre);
        int64_t k = -1;
        if (len > pl && strncmp(name, pre, pl) == 0)
            k = rm_name_table_find(table, name + pl, len - pl, source_name, src);
        else if (snprintf(buf, sizeof buf, "%s%s", pre, name) < (int)sizeof buf)
            k = rm_name_table_find(table, buf, pl + len, source_name, src);
        if (k >= 0 && !used[k]) return k;
    }
    return -1;
}

/* Whether source s fits parameter p: shape, a dtype that converts, data. */
static remat_status check_pair(const char *call, const char *name, const remat_tensor *p,
                               const rm_st_source *s) {
    const remat_safetensors_tensor *t = &s->f->t[s->i];
    char a[160], b[160];
    if (t->ndim != remat_ndim(p) ||
        memcmp(t->shape, remat_shape(p), (size_t)t->ndim * sizeof(int64_t)) != 0)
        return rm_err(REMAT_ESHAPE, "%s: %s: tensor '%s' has shape %s, its parameter %s", call,
                      s->f->name, t->name, rm_shape_str(t->ndim, t->shape, a, sizeof a),
                      rm_shape_str(remat_ndim(p), remat_shape(p), b, sizeof b));
    remat_dtype pd = remat_tensor_dtype(p);
    if (!rm_st_convertible(s->f->dtype[s->i], pd))
        return rm_err(REMAT_EDTYPE,
                      "%s: %s: tensor '%s' is %s, which does not load into its "
                      "%s parameter",
                      call, s->f->name, t->name, t->dtype, remat_dtype_name(pd));
    if (remat_numel(p) && !p->storage->data)
        return rm_err(REMAT_ESTATE, "%s: parameter '%s' has no data to load into", call, name);
    return REMAT_OK;
}

/* Matches the parameters against the sources: fills plans[] (one per
 * parameter; src NULL for a missing one the options allow). Exact names
 * first, then (with `names`) the prefixed ones. */
static remat_status match(const char *call, const char *what, remat_params *params,
                          const rm_st_source *src, int64_t n_src, const rm_name_table *table,
                          const remat_load_options *o, const rm_st_names *names, plan *plans,
                          bool *used) {
    int64_t np = remat_params_count(params), missing = 0, first_missing = -1;
    for (int pass = 0; pass < (names ? 2 : 1); pass++)
        for (int64_t i = 0; i < np; i++) {
            const char *name = remat_params_name(params, i);
            remat_tensor *p = remat_params_tensor(params, i);
            if (pass && plans[i].src) continue;
            int64_t k = pass ? find_prefixed(name, names, table, src, used)
                             : rm_name_table_find(table, name, strlen(name), source_name, src);
            plans[i].param = p;
            if (k < 0) {
                if (pass + 1 == (names ? 2 : 1) && !missing++) first_missing = i;
                continue;
            }
            used[k] = true;
            plans[i].src = &src[k];
            remat_status rc = check_pair(call, name, p, &src[k]);
            if (rc) return rc;
        }
    int64_t unexpected = 0, first_unexpected = -1;
    for (int64_t k = 0; k < n_src; k++)
        if (!used[k] && !(names && names->ignored && names->ignored(source_name(src, k))) &&
            !unexpected++)
            first_unexpected = k;
    bool bad_missing = missing && !o->allow_missing,
         bad_unexpected = unexpected && !o->allow_unexpected;
    if (!bad_missing && !bad_unexpected) return REMAT_OK;
    char m[512] = "", u[512] = "";
    if (bad_missing)
        snprintf(m, sizeof m, "no tensor '%s' for its parameter (%lld missing in all)",
                 remat_params_name(params, first_missing), (long long)missing);
    if (bad_unexpected)
        snprintf(u, sizeof u, "%s: tensor '%s' is no parameter's (%lld unexpected in all)",
                 src[first_unexpected].f->name, source_name(src, first_unexpected),
                 (long long)unexpected);
    return rm_err(REMAT_EINVAL, "%s: %s%s%s%s%s", call, bad_missing ? what : "",
                  bad_missing ? " has " : "", m, bad_missing && bad_unexpected ? "; " : "", u);
}

remat_status rm_st_load_sources(const char *call, const char *what, remat_params *params,
                                const rm_st_source *src, int64_t n_src,
                                const remat_load_options *opts, const rm_st_names *names) {
    static const remat_load_options strict = {0};
    const remat_load_options *o = opts ? opts : &strict;
    int64_t np = remat_params_count(params);
    rm_name_table table = {0};
    plan *plans = calloc((size_t)np + 1, sizeof *plans);
    bool *used = calloc((size_t)n_src + 1, sizeof *used);
    dev_staging *devs = calloc((size_t)np + 1, sizeof *devs);
    int64_t n_devs = 0;
    rm_storage *staging = NULL;
    remat_status rc = REMAT_OK;
    if (!plans || !used || !devs) rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    /* the tensors by name (the sources have unique names: each file's are,
     * and an index maps a name to one file) */
    for (int64_t k = 0; k < n_src && !rc; k++) {
        const char *nm = source_name(src, k);
        if (rm_name_table_insert(&table, k, nm, strlen(nm), source_name, src))
            rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    if (!rc) rc = match(call, what, params, src, n_src, &table, o, names, plans, used);
    /* one staging buffer, as large as the largest parameter that cannot be
     * written directly (on another device, or strided), and one on each
     * device with strided parameters the host cannot address, made now so
     * that writing cannot run out of memory */
    size_t stage_bytes = 0;
    for (int64_t i = 0; i < np && !rc; i++)
        if (plans[i].src && !direct(plans[i].param) && param_bytes(plans[i].param) > stage_bytes)
            stage_bytes = param_bytes(plans[i].param);
    if (!rc && stage_bytes) rc = rm_storage_new(&staging, stage_bytes, REMAT_DEVICE_CPU, false);
    for (int64_t i = 0; i < np && !rc; i++) {
        if (!plans[i].src || direct(plans[i].param)) continue;
        plans[i].stage = contiguous_over(staging, plans[i].param);
        if (!plans[i].stage) rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    if (!rc) rc = stage_on_devices(call, plans, np, devs, &n_devs);
    /* writing: nothing can fail from here but a device copy */
    for (int64_t i = 0; i < np && !rc; i++) {
        plan *pl = &plans[i];
        if (!pl->src) continue;
        remat_dtype pd = remat_tensor_dtype(pl->param);
        if (!pl->stage) {
            convert_windows(pl->src, pd, rm_ptr(pl->param));
            rm_bump_version(pl->param);
            continue;
        }
        convert_windows(pl->src, pd, rm_ptr(pl->stage));
        rc = write_staged(pl);
        if (rc)
            rc = rm_err_prefix(rc, "writing a parameter failed midway; the parameters before it "
                                   "are loaded");
    }
    for (int64_t i = 0; i < np && plans; i++) {
        remat_release(plans[i].stage);
        remat_release(plans[i].dev_stage);
    }
    for (int64_t k = 0; k < n_devs; k++) rm_storage_release(devs[k].s);
    rm_storage_release(staging);
    rm_name_table_free(&table);
    free(plans);
    free(used);
    free(devs);
    return rc;
}

remat_status remat_safetensors_load(remat_params *params, const char *path,
                                    const remat_load_options *opts) {
    static const char *call = "remat_safetensors_load";
    if (!params || !path)
        return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, !params ? "params" : "path");
    rm_st_checkpoint c;
    remat_status rc = rm_st_checkpoint_open(&c, path);
    if (rc) return rm_err_prefix(rc, call);
    rc = rm_st_load_sources(call, path, params, c.src, c.n_src, opts, NULL);
    rm_st_checkpoint_close(&c);
    return rc;
}

/* The remat dtype a tensor of file dtype d reads as in remat_safetensors_read. */
static int read_dtype(rm_st_dtype d, remat_dtype floats) {
    if (rm_st_convertible(d, floats)) return (int)floats;
    if (rm_st_convertible(d, REMAT_U8)) return REMAT_U8;
    if (rm_st_convertible(d, REMAT_I64)) return REMAT_I64;
    return -1;
}

remat_status remat_safetensors_read(remat_params **out, const char *path, remat_dtype floats) {
    static const char *call = "remat_safetensors_read";
    if (!out || !path) return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, !out ? "out" : "path");
    *out = NULL;
    if (floats != REMAT_F32 && floats != REMAT_F64 && floats != REMAT_BF16)
        return rm_err(REMAT_EDTYPE, "%s: floats must be f32, f64 or bf16 (got %s)", call,
                      remat_dtype_name(floats));
    rm_st_checkpoint c;
    remat_status rc = rm_st_checkpoint_open(&c, path);
    if (rc) return rm_err_prefix(rc, call);
    remat_params *p = NULL;
    rc = remat_params_new(&p);
    void *scope = rm_scope_suspend(); /* the collection holds the only references */
    for (int64_t k = 0; k < c.n_src && !rc; k++) {
        const rm_st_source *s = &c.src[k];
        const remat_safetensors_tensor *t = &s->f->t[s->i];
        int dt = read_dtype(s->f->dtype[s->i], floats);
        if (dt < 0) {
            rc = rm_err(REMAT_EDTYPE, "%s: %s: tensor '%s' is %s, which remat does not read", call,
                        s->f->name, t->name, t->dtype);
            break;
        }
        remat_tensor *x = NULL;
        rc = remat_empty(&x, t->ndim, t->shape, (remat_dtype)dt, REMAT_DEVICE_CPU);
        if (!rc) {
            convert_windows(s, (remat_dtype)dt, remat_data(x));
            rc = remat_params_add(p, t->name, x);
        }
        remat_release(x);
        if (rc) rc = rm_err_prefix(rc, call);
    }
    rm_scope_resume(scope);
    rm_st_checkpoint_close(&c);
    if (rc) {
        remat_params_free(p);
        return rc;
    }
    *out = p;
    return REMAT_OK;
}
