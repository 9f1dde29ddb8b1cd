/* src/weights/st_shards.c — a parameter collection written as a sharded
 * checkpoint (remat_safetensors_save_sharded), cut into shards as
 * huggingface_hub's split_torch_state_dict_into_shards cuts a state dict
 * (what transformers' save_pretrained calls): the tensors in order, a new
 * shard when the next would carry the current one past the limit, a tensor
 * larger than the limit alone in a shard of its own. The shards are all
 * written under temporary names before any is renamed, then the index;
 * only then are the files of an earlier checkpoint of the same stem
 * removed. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "io/text.h"
#include "weights/st.h"

#define MAX_PATH 4096

typedef struct shards {
    int64_t *shard_of; /* tensor i's shard, 0-based */
    int64_t n;         /* shards */
    uint64_t total_bytes, total_params;
} shards;

static uint64_t tensor_bytes(const remat_tensor *t) {
    return (uint64_t)remat_numel(t) * remat_dtype_size(remat_tensor_dtype(t));
}

/* The cut: shard_of[] for every tensor. Shards are numbered in the order
 * they are closed, so a tensor alone in its shard (larger than the limit)
 * comes before the shard being filled when it was met; the tensors of the
 * open shard wait (-1) for its number. */
static void cut(const remat_params *p, uint64_t max, shards *s) {
    int64_t n = remat_params_count(p), first = 0;
    uint64_t open_bytes = 0;
    bool open = false;
    for (int64_t i = 0; i <= n; i++) {
        const remat_tensor *t = i < n ? remat_params_tensor(p, i) : NULL;
        uint64_t b = t ? tensor_bytes(t) : 0;
        if (t && b > max) {
            s->shard_of[i] = s->n++;
        } else if (open && (!t || open_bytes + b > max)) { /* close the open shard */
            for (int64_t j = first; j < i; j++)
                if (s->shard_of[j] == -1) s->shard_of[j] = s->n;
            s->n++;
            open = false;
        }
        if (!t || b > max) continue;
        if (!open) open = true, first = i, open_bytes = 0;
        s->shard_of[i] = -1;
        open_bytes += b;
    }
    for (int64_t i = 0; i < n; i++) {
        const remat_tensor *t = remat_params_tensor(p, i);
        s->total_bytes += tensor_bytes(t);
        s->total_params += (uint64_t)remat_numel(t);
    }
}

/* Shard k's file name, under `dir` when not NULL (the caller checked the
 * lengths). */
static void shard_name(char *buf, size_t cap, const char *dir, const char *stem, int64_t k,
                       int64_t n) {
    snprintf(buf, cap, "%s%s%s-%05lld-of-%05lld.safetensors", dir ? dir : "", dir ? "/" : "", stem,
             (long long)k + 1, (long long)n);
}

/* Whether `name` is a shard file of `stem` ("<stem>-DDDDD-of-DDDDD.safetensors"),
 * with its number and count. */
static bool parse_shard_name(const char *name, const char *stem, long *k, long *n) {
    size_t sl = strlen(stem);
    if (strncmp(name, stem, sl) != 0) return false;
    const char *p = name + sl;
    static const char form[] = "-#####-of-#####.safetensors"; /* # a digit */
    long v[2] = {0, 0};
    for (size_t i = 0, d = 0; i < sizeof form - 1; i++) {
        if (form[i] != '#') {
            if (p[i] != form[i]) return false;
            d += form[i] == 'o'; /* the second number starts after "-of-" */
            continue;
        }
        if (p[i] < '0' || p[i] > '9') return false;
        v[d] = v[d] * 10 + (p[i] - '0');
    }
    *k = v[0];
    *n = v[1];
    return p[sizeof form - 1] == '\0';
}

typedef struct named {
    const char *name;
    int64_t i;
} named;

static int by_name(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* The index as json.dumps(index, indent=2, sort_keys=True) writes it. */
static remat_status index_text(const char *call, rm_text *t, const char *stem,
                               const remat_params *p, const shards *s) {
    int64_t n = remat_params_count(p);
    named *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!order) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int64_t i = 0; i < n; i++) order[i] = (named){remat_params_name(p, i), i};
    qsort(order, (size_t)n, sizeof *order, by_name);
    rm_text_printf(t, "{\n  \"metadata\": {\n    \"total_parameters\": %llu,\n",
                   (unsigned long long)s->total_params);
    rm_text_printf(t, "    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
                   (unsigned long long)s->total_bytes);
    char file[MAX_PATH];
    for (int64_t i = 0; i < n; i++) {
        rm_text_printf(t, "    ");
        rm_json_string(t, order[i].name);
        shard_name(file, sizeof file, NULL, stem, s->shard_of[order[i].i], s->n);
        rm_text_printf(t, ": ");
        rm_json_string(t, file);
        rm_text_printf(t, "%s\n", i + 1 < n ? "," : "");
    }
    rm_text_printf(t, "  }\n}\n");
    free(order);
    return t->oom ? rm_err(REMAT_ENOMEM, "%s: out of memory", call) : REMAT_OK;
}

/* Writes every shard under a temporary name (tmp[k]); on failure removes
 * those written. */
static remat_status write_shards(const char *call, const char *dir, const char *stem,
                                 const remat_params *p, const shards *s, int n_meta,
                                 const char *const *meta, char **tmp) {
    remat_status rc = REMAT_OK;
    for (int64_t k = 0; k < s->n && !rc; k++) {
        remat_params *part = NULL;
        rc = remat_params_new(&part);
        for (int64_t i = 0; i < remat_params_count(p) && !rc; i++)
            if (s->shard_of[i] == k)
                rc = remat_params_add(part, remat_params_name(p, i), remat_params_tensor(p, i));
        char path[MAX_PATH];
        shard_name(path, sizeof path, dir, stem, k, s->n);
        if (!rc) rc = rm_st_save_file(call, path, part, n_meta, meta, &tmp[k]);
        else rc = rm_err_prefix(rc, call);
        remat_params_free(part);
    }
    if (rc)
        for (int64_t k = 0; k < s->n; k++)
            if (tmp[k]) unlink(tmp[k]);
    return rc;
}

/* Removes what an earlier save of `stem` left in dir that the new files do
 * not replace: shards of another count, the single file beside shards, the
 * index beside a single file. A file that cannot be removed is an error
 * (it would be read instead of, or beside, the new checkpoint). */
static remat_status remove_stale(const char *call, const char *dir, const char *stem,
                                 int64_t n_new) {
    char path[MAX_PATH];
    remat_status rc = REMAT_OK;
    snprintf(path, sizeof path, "%s/%s%s", dir, stem,
             n_new > 1 ? ".safetensors" : ".safetensors.index.json");
    if (unlink(path) != 0 && errno != ENOENT)
        rc = rm_err(REMAT_EIO, "%s: cannot remove the earlier '%s': %s", call, path,
                    strerror(errno));
    DIR *d = rc ? NULL : opendir(dir);
    if (!rc && !d) return rm_err(REMAT_EIO, "%s: cannot list '%s': %s", call, dir, strerror(errno));
    for (struct dirent *e; !rc && (e = readdir(d)) != NULL;) {
        long k = 0, n = 0;
        if (!parse_shard_name(e->d_name, stem, &k, &n) ||
            (n_new > 1 && n == n_new && k >= 1 && k <= n))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && unlink(path) != 0)
            rc = rm_err(REMAT_EIO, "%s: cannot remove the earlier shard '%s': %s", call, path,
                        strerror(errno));
    }
    if (d) closedir(d);
    return rc;
}

static bool plain_stem(const char *s) {
    return *s && !strchr(s, '/') && strlen(s) < 200 && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

remat_status remat_safetensors_save_sharded(const char *dir, const char *stem,
                                            const remat_params *params, int64_t max_shard_bytes,
                                            int n_metadata, const char *const *metadata) {
    static const char *call = "remat_safetensors_save_sharded";
    remat_status rc = rm_st_check_save_args(call, dir, "dir", params, n_metadata, metadata);
    if (rc) return rc;
    if (!stem) stem = "model";
    if (!plain_stem(stem))
        return rm_err(REMAT_EINVAL, "%s: the stem '%s' must be a plain file name", call, stem);
    if (max_shard_bytes <= 0)
        return rm_err(REMAT_EINVAL, "%s: max_shard_bytes must be positive (got %lld)", call,
                      (long long)max_shard_bytes);
    if (strlen(dir) + strlen(stem) + 64 > MAX_PATH)
        return rm_err(REMAT_EINVAL, "%s: the directory's path is too long", call);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return rm_err(REMAT_EIO, "%s: '%s' is not a directory", call, dir);
    int64_t n = remat_params_count(params);
    shards s = {calloc((size_t)n + 1, sizeof(int64_t)), 0, 0, 0};
    if (!s.shard_of) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    cut(params, (uint64_t)max_shard_bytes, &s);
    char path[MAX_PATH];
    rc = REMAT_OK;
    if (s.n <= 1) { /* one file, no index, as huggingface_hub writes it */
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, stem);
        rc = rm_st_save_file(call, path, params, n_metadata, metadata, NULL);
        if (!rc) rc = remove_stale(call, dir, stem, 1);
        free(s.shard_of);
        return rc;
    }
    char **tmp = calloc((size_t)s.n, sizeof *tmp);
    rm_text index = {.grow = true};
    rc = tmp ? index_text(call, &index, stem, params, &s)
             : rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    if (!rc) rc = write_shards(call, dir, stem, params, &s, n_metadata, metadata, tmp);
    for (int64_t k = 0; k < s.n && !rc; k++) {
        shard_name(path, sizeof path, dir, stem, k, s.n);
        if (rename(tmp[k], path) != 0) {
            rc = rm_err(REMAT_EIO, "%s: cannot rename '%s' to '%s': %s", call, tmp[k], path,
                        strerror(errno));
            for (int64_t j = k; j < s.n; j++) unlink(tmp[j]);
        }
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/%s.safetensors.index.json", dir, stem);
        rc = rm_write_file_atomic(call, path, index.s, index.len);
    }
    if (!rc) rc = remove_stale(call, dir, stem, s.n);
    for (int64_t k = 0; tmp && k < s.n; k++) free(tmp[k]);
    free(tmp);
    free(index.s);
    free(s.shard_of);
    return rc;
}
