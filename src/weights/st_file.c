/* src/weights/st_file.c — opening and checking a safetensors file
 * (remat/safetensors.h): the header length, the JSON header (UTF-8,
 * duplicates, each entry's dtype, shape and offsets), and the data section
 * covered by the tensors' byte ranges without overlaps or holes, as the
 * `safetensors` package requires. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "weights/st.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "remat reads and writes safetensors data as the host's bytes: a little-endian host only"
#endif

void remat_safetensors_close(remat_safetensors *f) {
    if (!f) return;
    for (int64_t i = 0; i < f->n; i++) free((char *)f->t[i].name);
    for (int64_t i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->t);
    free(f->dtype);
    free(f->meta);
    rm_name_table_free(&f->table);
    if (f->map) munmap(f->map, f->size);
    free(f->name);
    free(f);
}

static const char *tensor_name(const void *ctx, int64_t i) {
    return ((const remat_safetensors *)ctx)->t[i].name;
}

/* A JSON number that is an integer in [0, 2^53] (exact in a double, as
 * cJSON keeps numbers). */
static bool json_u53(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

typedef struct span {
    uint64_t begin, end;
    int64_t i;
} span;

static int by_range(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static remat_status parse_metadata(remat_safetensors *f, const cJSON *m) {
    if (!cJSON_IsObject(m))
        return rm_err(REMAT_EFORMAT, "%s: \"__metadata__\" is not an object of strings", f->name);
    int64_t n = cJSON_GetArraySize(m);
    f->meta = calloc((size_t)(2 * n + 1), sizeof *f->meta);
    if (!f->meta) return rm_err(REMAT_ENOMEM, "%s: out of memory", f->name);
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return rm_err(REMAT_EFORMAT, "%s: \"__metadata__\" entry '%s' is not a string", f->name,
                          c->string);
        for (int64_t k = 0; k < f->n_meta; k++)
            if (strcmp(f->meta[2 * k], c->string) == 0)
                return rm_err(REMAT_EFORMAT, "%s: \"__metadata__\" has '%s' twice", f->name,
                              c->string);
        f->meta[2 * f->n_meta] = strdup(c->string);
        f->meta[2 * f->n_meta + 1] = strdup(c->valuestring);
        f->n_meta++;
        if (!f->meta[2 * f->n_meta - 2] || !f->meta[2 * f->n_meta - 1])
            return rm_err(REMAT_ENOMEM, "%s: out of memory", f->name);
    }
    return REMAT_OK;
}

/* The entry of tensor `name`: its dtype, shape and offsets, each field once. */
static remat_status parse_tensor(remat_safetensors *f, const cJSON *e, const char *name) {
    remat_safetensors_tensor *t = &f->t[f->n];
    if (!cJSON_IsObject(e))
        return rm_err(REMAT_EFORMAT, "%s: tensor '%s': its entry is not an object", f->name, name);
    const cJSON *dt = NULL, *sh = NULL, *off = NULL;
    for (const cJSON *c = e->child; c; c = c->next) {
        const cJSON **slot = strcmp(c->string, "dtype") == 0          ? &dt
                             : strcmp(c->string, "shape") == 0        ? &sh
                             : strcmp(c->string, "data_offsets") == 0 ? &off
                                                                      : NULL;
        if (!slot) continue; /* other fields are ignored, as by the safetensors package */
        if (*slot)
            return rm_err(REMAT_EFORMAT, "%s: tensor '%s': \"%s\" given twice", f->name, name,
                          c->string);
        *slot = c;
    }
    if (!dt || !sh || !off)
        return rm_err(REMAT_EFORMAT, "%s: tensor '%s': no \"%s\"", f->name, name,
                      !dt   ? "dtype"
                      : !sh ? "shape"
                            : "data_offsets");
    int d = cJSON_IsString(dt) ? rm_st_dtype_of(dt->valuestring) : -1;
    if (d < 0)
        return rm_err(REMAT_EFORMAT, "%s: tensor '%s': unknown dtype %s%.32s%s", f->name, name,
                      cJSON_IsString(dt) ? "\"" : "(not a string)",
                      cJSON_IsString(dt) ? dt->valuestring : "", cJSON_IsString(dt) ? "\"" : "");
    f->dtype[f->n] = (rm_st_dtype)d;
    t->dtype = rm_st_dtype_name((rm_st_dtype)d);
    if (!cJSON_IsArray(sh))
        return rm_err(REMAT_EFORMAT, "%s: tensor '%s': \"shape\" is not a list", f->name, name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > REMAT_MAX_DIMS)
        return rm_err(REMAT_EUNSUPPORTED,
                      "%s: tensor '%s' has %d dims; remat tensors have at most %d", f->name, name,
                      nd, REMAT_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    bool overflow = false;
    int k = 0;
    for (const cJSON *c = sh->child; c; c = c->next, k++) {
        uint64_t v;
        if (!json_u53(c, &v))
            return rm_err(REMAT_EFORMAT, "%s: tensor '%s': \"shape\" entry %d is not a size",
                          f->name, name, k);
        t->shape[k] = (int64_t)v;
        if (!overflow && __builtin_mul_overflow(numel, v, &numel)) overflow = true;
    }
    uint64_t nbytes = 0;
    if (!overflow &&
        __builtin_mul_overflow(numel, (uint64_t)rm_st_dtype_size((rm_st_dtype)d), &nbytes))
        overflow = true;
    char sbuf[160];
    rm_shape_str(t->ndim, t->shape, sbuf, sizeof sbuf);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_u53(off->child, &t->begin) ||
        !json_u53(off->child->next, &t->end) || t->end < t->begin)
        return rm_err(REMAT_EFORMAT,
                      "%s: tensor '%s': \"data_offsets\" is not [begin, end] with begin <= end",
                      f->name, name);
    if (overflow || nbytes != t->end - t->begin)
        return rm_err(REMAT_EFORMAT,
                      "%s: tensor '%s': shape %s of %s is %s%llu bytes, but data_offsets [%llu, "
                      "%llu] hold %llu",
                      f->name, name, sbuf, t->dtype, overflow ? "more than " : "",
                      overflow ? (unsigned long long)UINT64_MAX : (unsigned long long)nbytes,
                      (unsigned long long)t->begin, (unsigned long long)t->end,
                      (unsigned long long)(t->end - t->begin));
    if (t->end > f->data_size)
        return rm_err(REMAT_EFORMAT,
                      "%s: tensor '%s': data_offsets [%llu, %llu] run past the data section (%llu "
                      "bytes)",
                      f->name, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                      (unsigned long long)f->data_size);
    t->data = f->data + t->begin;
    return REMAT_OK;
}

/* The tensors' byte ranges tile the data section: sorted by offset, each
 * starts where the one before ends, and the last ends at the section's end. */
static remat_status check_tiling(remat_safetensors *f) {
    span *s = malloc((size_t)(f->n ? f->n : 1) * sizeof *s);
    if (!s) return rm_err(REMAT_ENOMEM, "%s: out of memory", f->name);
    for (int64_t i = 0; i < f->n; i++) s[i] = (span){f->t[i].begin, f->t[i].end, i};
    qsort(s, (size_t)f->n, sizeof *s, by_range);
    uint64_t pos = 0;
    remat_status rc = REMAT_OK;
    for (int64_t k = 0; k < f->n && !rc; k++) {
        if (s[k].begin < pos)
            rc = rm_err(REMAT_EFORMAT,
                        "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, "
                        "%llu]",
                        f->name, f->t[s[k].i].name, (unsigned long long)s[k].begin,
                        (unsigned long long)s[k].end, f->t[s[k - 1].i].name,
                        (unsigned long long)s[k - 1].begin, (unsigned long long)s[k - 1].end);
        else if (s[k].begin > pos)
            rc = rm_err(REMAT_EFORMAT,
                        "%s: bytes [%llu, %llu) of the data section belong to no tensor (a hole "
                        "before tensor '%s')",
                        f->name, (unsigned long long)pos, (unsigned long long)s[k].begin,
                        f->t[s[k].i].name);
        pos = s[k].end;
    }
    if (!rc && pos != f->data_size)
        rc = rm_err(REMAT_EFORMAT,
                    "%s: the data section has %llu bytes, but its tensors end at byte %llu",
                    f->name, (unsigned long long)f->data_size, (unsigned long long)pos);
    free(s);
    return rc;
}

static remat_status parse_header(remat_safetensors *f) {
    if (f->size < 8)
        return rm_err(REMAT_EFORMAT,
                      "%s: truncated: %zu bytes, fewer than the 8 of the header length", f->name,
                      f->size);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = (hlen << 8) | f->base[k];
    if (hlen > f->size - 8)
        return rm_err(REMAT_EFORMAT,
                      "%s: the header length (%llu bytes) runs past the end of the file (%zu "
                      "bytes): truncated or not a safetensors file",
                      f->name, (unsigned long long)hlen, f->size);
    if (hlen > REMAT_SAFETENSORS_MAX_HEADER)
        return rm_err(REMAT_EFORMAT, "%s: the header length (%llu bytes) exceeds the limit of %u",
                      f->name, (unsigned long long)hlen, REMAT_SAFETENSORS_MAX_HEADER);
    const unsigned char *h = f->base + 8;
    f->data = h + hlen;
    f->data_size = f->size - 8 - hlen;
    if (hlen == 0 || h[0] != '{')
        return rm_err(REMAT_EFORMAT, "%s: the header does not start with '{'", f->name);
    char what[512];
    snprintf(what, sizeof what, "%s: the header", f->name);
    cJSON *root = NULL;
    remat_status rc = rm_json_parse(what, (const char *)h, (size_t)hlen, &root);
    if (rc) return rc;
    int64_t n = cJSON_GetArraySize(root);
    f->t = calloc((size_t)(n + 1), sizeof *f->t);
    f->dtype = calloc((size_t)(n + 1), sizeof *f->dtype);
    if (!f->t || !f->dtype) rc = rm_err(REMAT_ENOMEM, "%s: out of memory", f->name);
    bool have_meta = false;
    for (const cJSON *c = root->child; c && !rc; c = c->next) {
        size_t len = strlen(c->string);
        if (strcmp(c->string, "__metadata__") == 0) {
            if (have_meta)
                rc = rm_err(REMAT_EFORMAT, "%s: the header has \"__metadata__\" twice", f->name);
            else rc = parse_metadata(f, c);
            have_meta = true;
            continue;
        }
        if (rm_name_table_find(&f->table, c->string, len, tensor_name, f) >= 0) {
            rc = rm_err(REMAT_EFORMAT, "%s: tensor '%s' appears twice in the header", f->name,
                        c->string);
            break;
        }
        char *name = strdup(c->string);
        if (!name) {
            rc = rm_err(REMAT_ENOMEM, "%s: out of memory", f->name);
            break;
        }
        f->t[f->n].name = name;
        rc = parse_tensor(f, c, name);
        f->n++; /* the name is freed with the file either way */
        if (!rc && rm_name_table_insert(&f->table, f->n - 1, name, len, tensor_name, f))
            rc = rm_err(REMAT_ENOMEM, "%s: out of memory", f->name);
    }
    cJSON_Delete(root);
    if (!rc) rc = check_tiling(f);
    return rc;
}

static remat_status new_file(remat_safetensors **out, const char *name) {
    remat_safetensors *f = calloc(1, sizeof *f);
    if (f) f->name = strdup(name);
    if (!f || !f->name) {
        free(f);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", name);
    }
    *out = f;
    return REMAT_OK;
}

remat_status remat_safetensors_parse(remat_safetensors **out, const void *data, size_t size,
                                     const char *name) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_safetensors_parse: out is NULL");
    *out = NULL;
    if (!data && size) return rm_err(REMAT_EINVAL, "remat_safetensors_parse: data is NULL");
    remat_safetensors *f = NULL;
    remat_status rc = new_file(&f, name ? name : "buffer");
    if (rc) return rm_err_prefix(rc, "remat_safetensors_parse");
    f->base = data;
    f->size = size;
    rc = parse_header(f);
    if (rc) {
        remat_safetensors_close(f);
        return rm_err_prefix(rc, "remat_safetensors_parse");
    }
    *out = f;
    return REMAT_OK;
}

remat_status rm_st_open(remat_safetensors **out, const char *path) {
    *out = NULL;
    remat_safetensors *f = NULL;
    remat_status rc = new_file(&f, path);
    if (rc) return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        rc = rm_err(REMAT_EIO, "cannot open '%s': %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = rm_err(REMAT_EIO, "'%s' is not a regular file", path);
    } else {
        f->size = (size_t)st.st_size;
        if (f->size) {
            void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m == MAP_FAILED)
                rc = rm_err(REMAT_EIO, "cannot map '%s': %s", path, strerror(errno));
            else f->map = m;
        }
        f->base = f->map ? f->map : (const unsigned char *)"";
    }
    if (fd >= 0) close(fd);
    if (!rc) rc = parse_header(f);
    if (rc) {
        remat_safetensors_close(f);
        return rc;
    }
    *out = f;
    return REMAT_OK;
}

remat_status remat_safetensors_open(remat_safetensors **out, const char *path) {
    if (!out || !path)
        return rm_err(REMAT_EINVAL, "remat_safetensors_open: %s is NULL", !out ? "out" : "path");
    remat_status rc = rm_st_open(out, path);
    return rc ? rm_err_prefix(rc, "remat_safetensors_open") : REMAT_OK;
}

/* madvise on the pages of f's mapping that [p, p + n) touches. */
static void advise(const remat_safetensors *f, const void *p, size_t n, int advice) {
    if (!f->map || !n) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1), hi = ((uintptr_t)p + n + page - 1) & ~(page - 1);
    uintptr_t mlo = (uintptr_t)f->map, mhi = (mlo + f->size + page - 1) & ~(page - 1);
    if (lo < mlo) lo = mlo;
    if (hi > mhi) hi = mhi;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, advice);
}

void rm_st_release_pages(const remat_safetensors *f, const void *p, size_t n) {
    advise(f, p, n, MADV_DONTNEED);
}

void rm_st_prefetch(const remat_safetensors *f, const void *p, size_t n) {
    advise(f, p, n, MADV_WILLNEED);
}

int64_t remat_safetensors_count(const remat_safetensors *f) { return f ? f->n : 0; }

const remat_safetensors_tensor *remat_safetensors_at(const remat_safetensors *f, int64_t i) {
    return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}

const remat_safetensors_tensor *remat_safetensors_find(const remat_safetensors *f,
                                                       const char *name) {
    if (!f || !name) return NULL;
    int64_t i = rm_name_table_find(&f->table, name, strlen(name), tensor_name, f);
    return i >= 0 ? &f->t[i] : NULL;
}

int64_t remat_safetensors_metadata_count(const remat_safetensors *f) { return f ? f->n_meta : 0; }

remat_status remat_safetensors_metadata_at(const remat_safetensors *f, int64_t i, const char **key,
                                           const char **value) {
    if (!f || !key || !value || i < 0 || i >= f->n_meta)
        return rm_err(REMAT_EINVAL, "remat_safetensors_metadata_at: no entry %lld", (long long)i);
    *key = f->meta[2 * i];
    *value = f->meta[2 * i + 1];
    return REMAT_OK;
}

const char *remat_safetensors_metadata(const remat_safetensors *f, const char *key) {
    for (int64_t i = 0; f && key && i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

remat_status remat_safetensors_get(remat_tensor **out, const remat_safetensors *f, const char *name,
                                   remat_dtype dtype) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_safetensors_get: out is NULL");
    *out = NULL;
    if (!f || !name)
        return rm_err(REMAT_EINVAL, "remat_safetensors_get: %s is NULL", !f ? "f" : "name");
    const remat_safetensors_tensor *t = remat_safetensors_find(f, name);
    if (!t)
        return rm_err(REMAT_EINVAL, "remat_safetensors_get: %s has no tensor '%s'", f->name, name);
    rm_st_dtype sd = f->dtype[t - f->t];
    if (!rm_st_convertible(sd, dtype))
        return rm_err(REMAT_EDTYPE,
                      "remat_safetensors_get: %s: tensor '%s' is %s, which remat "
                      "cannot convert to %s",
                      f->name, name, t->dtype, remat_dtype_name(dtype));
    remat_tensor *x = NULL;
    remat_status rc = remat_empty(&x, t->ndim, t->shape, dtype, REMAT_DEVICE_CPU);
    if (rc) return rm_err_prefix(rc, "remat_safetensors_get");
    rm_st_convert(sd, t->data, dtype, remat_data(x), remat_numel(x));
    *out = x; /* remat_empty registered it with the open scope, if any */
    return REMAT_OK;
}
