/* src/weights/st_save.c — writing a parameter collection as a safetensors
 * file (remat_safetensors_save): the header in the collection's order,
 * padded with spaces to 8 bytes as the `safetensors` package pads it, the
 * data largest element first (so each tensor is aligned to its element
 * size), written to a temporary file that is renamed over the path once
 * complete. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "io/text.h"
#include "io/utf8.h"
#include "weights/st.h"

typedef struct item {
    const char *name;
    remat_tensor *t;
    rm_st_dtype dtype;
    uint64_t nbytes, begin;
} item;

static remat_status check(const char *call, const remat_params *params, int n_meta,
                          const char *const *meta, item *items) {
    for (int k = 0; k < 2 * n_meta; k++) {
        if (!meta[k]) return rm_err(REMAT_EINVAL, "%s: metadata string %d is NULL", call, k);
        size_t len = strlen(meta[k]);
        if (rm_utf8_valid_prefix(meta[k], len) < len)
            return rm_err(REMAT_EINVAL, "%s: metadata string %d is not valid UTF-8", call, k);
        if (k % 2 == 0)
            for (int j = 0; j < k; j += 2)
                if (strcmp(meta[j], meta[k]) == 0)
                    return rm_err(REMAT_EINVAL, "%s: metadata key '%s' given twice", call, meta[k]);
    }
    for (int64_t i = 0; i < remat_params_count(params); i++) {
        item *it = &items[i];
        it->name = remat_params_name(params, i);
        it->t = remat_params_tensor(params, i);
        if (strcmp(it->name, "__metadata__") == 0)
            return rm_err(REMAT_EINVAL,
                          "%s: \"__metadata__\" is reserved for the metadata, not a "
                          "tensor name",
                          call);
        int d = rm_st_dtype_from_remat(remat_tensor_dtype(it->t));
        if (d < 0)
            return rm_err(REMAT_EDTYPE, "%s: tensor '%s' has dtype %s, which safetensors lacks",
                          call, it->name, remat_dtype_name(remat_tensor_dtype(it->t)));
        it->dtype = (rm_st_dtype)d;
        it->nbytes = (uint64_t)remat_numel(it->t) * rm_st_dtype_size(it->dtype);
        if (it->nbytes && !it->t->storage->data)
            return rm_err(REMAT_ESTATE, "%s: tensor '%s' has no data", call, it->name);
    }
    return REMAT_OK;
}

static int by_size_desc(const void *a, const void *b) {
    const item *x = *(const item *const *)a, *y = *(const item *const *)b;
    size_t sx = rm_st_dtype_size(x->dtype), sy = rm_st_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return x < y ? -1 : x > y; /* stable: the collection's order */
}

static void header_text(rm_text *h, const item *items, int64_t n, int n_meta,
                        const char *const *meta) {
    rm_text_printf(h, "{");
    if (n_meta) {
        rm_text_printf(h, "\"__metadata__\":{");
        for (size_t k = 0; k < (size_t)n_meta; k++) {
            if (k) rm_text_printf(h, ",");
            rm_json_string(h, meta[2 * k]);
            rm_text_printf(h, ":");
            rm_json_string(h, meta[2 * k + 1]);
        }
        rm_text_printf(h, "}");
    }
    for (int64_t i = 0; i < n; i++) {
        const item *it = &items[i];
        if (i || n_meta) rm_text_printf(h, ",");
        rm_json_string(h, it->name);
        rm_text_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", rm_st_dtype_name(it->dtype));
        for (int d = 0; d < remat_ndim(it->t); d++)
            rm_text_printf(h, "%s%lld", d ? "," : "", (long long)remat_size(it->t, d));
        uint64_t end = it->begin + it->nbytes;
        rm_text_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)it->begin,
                       (unsigned long long)end);
    }
    rm_text_printf(h, "}");
    while ((8 + h->len) % 8) rm_text_printf(h, " ");
}

/* Writes the tensor's bytes: straight from host memory when contiguous,
 * else through a host copy in its own dtype. */
static remat_status write_tensor(const char *call, FILE *fp, const item *it, const char *tmp) {
    if (!it->nbytes) return REMAT_OK;
    const void *p = NULL;
    void *buf = NULL;
    if (remat_device_host_addressable(remat_tensor_device(it->t).type) &&
        remat_is_contiguous(it->t)) {
        p = rm_ptr(it->t);
    } else {
        buf = malloc(it->nbytes);
        if (!buf)
            return rm_err(REMAT_ENOMEM, "%s: out of memory copying tensor '%s'", call, it->name);
        remat_status rc =
            remat_copy_to_buffer(it->t, remat_tensor_dtype(it->t), buf, remat_numel(it->t));
        if (rc) {
            free(buf);
            return rm_err_prefix(rc, call);
        }
        p = buf;
    }
    size_t w = fwrite(p, 1, it->nbytes, fp);
    free(buf);
    if (w != it->nbytes)
        return rm_err(REMAT_EIO, "%s: cannot write '%s': %s", call, tmp, strerror(errno));
    return REMAT_OK;
}

remat_status rm_st_save_file(const char *call, const char *path, const remat_params *params,
                             int n_metadata, const char *const *metadata, char **keep_tmp) {
    int64_t n = remat_params_count(params);
    item *items = calloc((size_t)n + 1, sizeof *items);
    item **order = calloc((size_t)n + 1, sizeof *order);
    rm_text h = {.grow = true};
    char *tmp = NULL;
    FILE *fp = NULL;
    remat_status rc = items && order ? REMAT_OK : rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    if (!rc) rc = check(call, params, n_metadata, metadata, items);
    if (!rc) {
        for (int64_t i = 0; i < n; i++) order[i] = &items[i];
        qsort(order, (size_t)n, sizeof *order, by_size_desc);
        uint64_t pos = 0;
        for (int64_t i = 0; i < n; i++) {
            order[i]->begin = pos;
            pos += order[i]->nbytes;
        }
        header_text(&h, items, n, n_metadata, metadata);
        if (h.oom) rc = rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    if (!rc) rc = rm_temp_create(call, path, &tmp, &fp);
    if (!rc) {
        unsigned char len8[8];
        for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)h.len >> (8 * k));
        if (fwrite(len8, 1, 8, fp) != 8 || fwrite(h.s, 1, h.len, fp) != h.len)
            rc = rm_err(REMAT_EIO, "%s: cannot write '%s': %s", call, tmp, strerror(errno));
    }
    for (int64_t i = 0; i < n && !rc; i++) rc = write_tensor(call, fp, order[i], tmp);
    if (fp && keep_tmp) {
        rc = rm_temp_close(call, rc, fp, tmp);
        if (!rc) *keep_tmp = tmp;
        else free(tmp);
    } else if (fp) {
        rc = rm_temp_finish(call, rc, fp, tmp, path);
    }
    free(h.s);
    free(items);
    free(order);
    return rc;
}

remat_status rm_st_check_save_args(const char *call, const char *dest, const char *dest_name,
                                   const remat_params *params, int n_metadata,
                                   const char *const *metadata) {
    if (!dest) return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, dest_name);
    if (!params) return rm_err(REMAT_EINVAL, "%s: params is NULL", call);
    if (n_metadata < 0 || (n_metadata && !metadata))
        return rm_err(REMAT_EINVAL, "%s: n_metadata must be >= 0, with metadata when > 0", call);
    return REMAT_OK;
}

remat_status remat_safetensors_save(const char *path, const remat_params *params, int n_metadata,
                                    const char *const *metadata) {
    static const char *call = "remat_safetensors_save";
    remat_status rc = rm_st_check_save_args(call, path, "path", params, n_metadata, metadata);
    if (rc) return rc;
    return rm_st_save_file(call, path, params, n_metadata, metadata, NULL);
}
