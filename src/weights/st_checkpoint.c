/* src/weights/st_checkpoint.c — what a load reads: one safetensors file,
 * or a sharded checkpoint, whose index ("model.safetensors.index.json":
 * {"metadata": {...}, "weight_map": {tensor: shard file}}) and shards are
 * checked against each other (every mapped tensor in its shard, every
 * shard tensor mapped there) before anything is loaded. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "weights/st.h"

#define MAX_INDEX_BYTES ((size_t)64 << 20)

/* A shard's file name: a plain name in the index's directory. */
static bool plain_file_name(const char *s) {
    return *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

void rm_st_checkpoint_close(rm_st_checkpoint *c) {
    for (int64_t s = 0; s < c->n_files; s++) remat_safetensors_close(c->files[s]);
    free(c->files);
    free(c->src);
    memset(c, 0, sizeof *c);
}

/* Opens the shards the weight map names, in the order it first names
 * them (names[s]: shard s's name as the map gives it), refusing entries
 * that are not plain file names and tensors mapped twice. */
static remat_status open_shards(rm_st_checkpoint *c, const char *index_path, const cJSON *wm,
                                const char **names) {
    const char *slash = strrchr(index_path, '/');
    int dir_len = slash ? (int)(slash - index_path) + 1 : 0;
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !plain_file_name(e->valuestring))
            return rm_err(REMAT_EFORMAT,
                          "%s: tensor '%s': its weight_map entry is not a file name in the "
                          "index's directory",
                          index_path, e->string);
        for (const cJSON *d = wm->child; d != e; d = d->next)
            if (strcmp(d->string, e->string) == 0)
                return rm_err(REMAT_EFORMAT, "%s: tensor '%s' appears twice in the weight_map",
                              index_path, e->string);
        int64_t s = 0;
        while (s < c->n_files && strcmp(names[s], e->valuestring) != 0) s++;
        if (s < c->n_files) continue;
        names[c->n_files] = e->valuestring;
        char path[4096];
        if (snprintf(path, sizeof path, "%.*s%s", dir_len, index_path, e->valuestring) >=
            (int)sizeof path)
            return rm_err(REMAT_EINVAL, "%s: the path of shard '%s' is too long", index_path,
                          e->valuestring);
        remat_status rc = rm_st_open(&c->files[c->n_files++], path);
        if (rc) return rm_err_prefix(rc, index_path);
    }
    return REMAT_OK;
}

/* Every mapped tensor is in its shard (c->src gets them in the map's
 * order), and every shard tensor is mapped to its shard. */
static remat_status check_map(rm_st_checkpoint *c, const char *index_path, const cJSON *wm,
                              const char **names) {
    for (const cJSON *e = wm->child; e; e = e->next) {
        int64_t s = 0;
        while (strcmp(names[s], e->valuestring) != 0) s++;
        const remat_safetensors_tensor *t = remat_safetensors_find(c->files[s], e->string);
        if (!t)
            return rm_err(REMAT_EFORMAT, "%s maps tensor '%s' to %s, which has no such tensor",
                          index_path, e->string, c->files[s]->name);
        c->src[c->n_src++] = (rm_st_source){c->files[s], t - c->files[s]->t};
    }
    for (int64_t s = 0; s < c->n_files; s++)
        for (int64_t i = 0; i < c->files[s]->n; i++) {
            const char *name = c->files[s]->t[i].name;
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(wm, name);
            if (!e || strcmp(e->valuestring, names[s]) != 0)
                return rm_err(REMAT_EFORMAT, "%s: tensor '%s' %s%s", c->files[s]->name, name,
                              e ? "is mapped to another shard by " : "is not in the weight_map of ",
                              index_path);
        }
    return REMAT_OK;
}

/* The index and its shards, checked against each other. */
static remat_status open_index(rm_st_checkpoint *c, const char *index_path) {
    char *text = NULL;
    size_t n = 0;
    cJSON *root = NULL;
    const char **names = NULL; /* the shards' file names as the map gives them */
    remat_status rc = rm_read_small_file(index_path, MAX_INDEX_BYTES, &text, &n);
    if (!rc) rc = rm_json_parse(index_path, text, n, &root);
    const cJSON *wm = NULL;
    if (!rc) {
        wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
        if (!cJSON_IsObject(root) || !cJSON_IsObject(wm))
            rc = rm_err(REMAT_EFORMAT, "%s: no \"weight_map\" object", index_path);
    }
    if (!rc) {
        size_t n_map = (size_t)cJSON_GetArraySize(wm) + 1;
        c->files = calloc(n_map, sizeof *c->files);
        c->src = calloc(n_map, sizeof *c->src);
        names = calloc(n_map, sizeof *names);
        if (!c->files || !c->src || !names)
            rc = rm_err(REMAT_ENOMEM, "%s: out of memory", index_path);
    }
    if (!rc) rc = open_shards(c, index_path, wm, names);
    if (!rc) rc = check_map(c, index_path, wm, names);
    free(names);
    cJSON_Delete(root);
    free(text);
    return rc;
}

remat_status rm_st_checkpoint_open(rm_st_checkpoint *c, const char *path) {
    memset(c, 0, sizeof *c);
    size_t len = strlen(path);
    remat_status rc;
    if (len >= 5 && strcmp(path + len - 5, ".json") == 0) {
        rc = open_index(c, path);
    } else {
        c->files = calloc(1, sizeof *c->files);
        rc = c->files ? rm_st_open(&c->files[0], path) : rm_err(REMAT_ENOMEM, "out of memory");
        if (!rc) {
            c->n_files = 1;
            c->src = calloc((size_t)c->files[0]->n + 1, sizeof *c->src);
            if (!c->src) rc = rm_err(REMAT_ENOMEM, "%s: out of memory", path);
            for (int64_t i = 0; !rc && i < c->files[0]->n; i++)
                c->src[c->n_src++] = (rm_st_source){c->files[0], i};
        }
    }
    if (rc) rm_st_checkpoint_close(c);
    return rc;
}
