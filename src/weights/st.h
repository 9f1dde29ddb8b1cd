/* src/weights/st.h — the safetensors reader's insides, shared by the
 * parser (st_file.c), the loader (st_load.c), the sharded index
 * (st_index.c), the writer (st_save.c) and the Hugging Face directories
 * (hf_*.c). */
#ifndef REMAT_WEIGHTS_ST_H
#define REMAT_WEIGHTS_ST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "remat/safetensors.h"
#include "weights/names.h"

/* The dtypes of the format (their spelling in headers: rm_st_dtype_name;
 * the table and the conversions are st_convert.c's). */
typedef enum rm_st_dtype {
    RM_ST_BOOL,
    RM_ST_U8,
    RM_ST_I8,
    RM_ST_F8_E4M3,
    RM_ST_F8_E5M2,
    RM_ST_I16,
    RM_ST_U16,
    RM_ST_F16,
    RM_ST_BF16,
    RM_ST_I32,
    RM_ST_U32,
    RM_ST_F32,
    RM_ST_I64,
    RM_ST_U64,
    RM_ST_F64,
    RM_ST_NDTYPES
} rm_st_dtype;

/* -1 for a name the format does not have. */
int rm_st_dtype_of(const char *name);
const char *rm_st_dtype_name(rm_st_dtype d);
size_t rm_st_dtype_size(rm_st_dtype d);
/* The format's dtype of a remat dtype (f32 F32, ...); -1 for none. */
int rm_st_dtype_from_remat(remat_dtype d);

struct remat_safetensors {
    char *name;                /* what messages call it (the path) */
    const unsigned char *base; /* the whole image */
    size_t size;
    void *map;                 /* the mapping when opened from a file (munmap'd at close) */
    const unsigned char *data; /* the data section */
    uint64_t data_size;
    remat_safetensors_tensor *t;
    rm_st_dtype *dtype; /* t[i]'s dtype */
    int64_t n;
    char **meta; /* key, value, key, value, ... */
    int64_t n_meta;
    rm_name_table table; /* tensor index by name */
};

/* Whether a tensor of file dtype `src` loads into a `dst` tensor. */
bool rm_st_convertible(rm_st_dtype src, remat_dtype dst);
/* Converts n elements at src (file dtype `sd`, little-endian, any
 * alignment) to dst (dtype `dd`, aligned): rm_st_convertible must hold. */
void rm_st_convert(rm_st_dtype sd, const void *src, remat_dtype dd, void *dst, int64_t n);
/* Hands the mapped pages of f's [p, p + n) back to the kernel (a file
 * opened from memory: nothing): loading reads a window at a time, so that
 * the file's pages do not stay resident beside the parameters. */
void rm_st_release_pages(const remat_safetensors *f, const void *p, size_t n);
/* Asks the kernel to start reading f's [p, p + n) (readahead of the window
 * after the one being converted: the disk works while the CPU converts). */
void rm_st_prefetch(const remat_safetensors *f, const void *p, size_t n);

/* The arguments of a save: dest (the path or directory, called dest_name
 * in the message) and params not NULL, n_metadata >= 0 with metadata when
 * > 0; REMAT_EINVAL naming call otherwise. */
remat_status rm_st_check_save_args(const char *call, const char *dest, const char *dest_name,
                                   const remat_params *params, int n_metadata,
                                   const char *const *metadata);
/* remat_safetensors_save's work (messages start with `call`; arguments
 * checked). keep_tmp NULL: the file is renamed over `path` once complete.
 * Else it is left complete under a temporary name beside `path`, *keep_tmp
 * (malloc'd), for the caller to rename or remove (the shards of a sharded
 * save are all written before any is renamed). */
remat_status rm_st_save_file(const char *call, const char *path, const remat_params *params,
                             int n_metadata, const char *const *metadata, char **keep_tmp);

/* remat_safetensors_open without the call's name in its messages. */
remat_status rm_st_open(remat_safetensors **out, const char *path);

/* A tensor of an opened file. */
typedef struct rm_st_source {
    const remat_safetensors *f;
    int64_t i;
} rm_st_source;
/* How tensor names meet parameter names beyond equality, as transformers'
 * from_pretrained matches them (remat_hf_load_weights): a parameter that no
 * tensor names exactly takes the tensor named as it is without, else with,
 * one of `prefixes` (the base-model prefixes, "transformer." and "model."),
 * so that a base model's checkpoint (GPT-2's hub files: "h.0.attn.c_attn.weight")
 * loads into a model with a head, and back; and a tensor no parameter takes
 * whose name `ignored` accepts (a buffer such as GPT-2's causal mask
 * "h.0.attn.bias") is not unexpected. */
typedef struct rm_st_names {
    const char *const *prefixes;
    int n_prefixes;
    bool (*ignored)(const char *name); /* may be NULL */
} rm_st_names;
/* Loads n_src tensors of unique names (a file's, or a sharded checkpoint's)
 * into `params`, all or nothing (remat_safetensors_load); messages start
 * with `call` and call the whole `what` (a path). `names` NULL: exact names
 * only. */
remat_status rm_st_load_sources(const char *call, const char *what, remat_params *params,
                                const rm_st_source *src, int64_t n_src,
                                const remat_load_options *opts, const rm_st_names *names);
/* A checkpoint (st_checkpoint.c): a .safetensors file, or a sharded
 * checkpoint's index (a path ending in ".json") and its shards, opened and
 * checked; its tensors in src (the file's header order, the index's map
 * order). Messages name the files, not the call. */
typedef struct rm_st_checkpoint {
    remat_safetensors **files;
    int64_t n_files;
    rm_st_source *src;
    int64_t n_src;
} rm_st_checkpoint;
remat_status rm_st_checkpoint_open(rm_st_checkpoint *c, const char *path);
void rm_st_checkpoint_close(rm_st_checkpoint *c); /* closes the files */
/* The whole of a small file (an index, a config.json: at most max bytes)
 * in *out (malloc'd, NUL-terminated), its length in *n. REMAT_EIO naming
 * the path. */
remat_status rm_read_small_file(const char *path, size_t max, char **out, size_t *n);
/* JSON parsed from text[0..n) that must be UTF-8 without NULs: *out the
 * root (free with cJSON_Delete); REMAT_EFORMAT naming `what` and the byte. */
struct cJSON;
remat_status rm_json_parse(const char *what, const char *text, size_t n, struct cJSON **out);

/* JSON text helpers for the writers: s as a JSON string (quotes added). */
struct rm_text;
void rm_json_string(struct rm_text *t, const char *s);

/* Files written whole or not at all: rm_temp_create opens a new file
 * beside `path` (*tmp its name, malloc'd); rm_temp_finish flushes, syncs
 * and closes it and renames it over `path` when rc (what the writing
 * returned) is REMAT_OK, else removes it; frees tmp; returns the status.
 * Messages start with `call` and name the file and the system's reason. */
remat_status rm_temp_create(const char *call, const char *path, char **tmp, FILE **fp);
/* The first half of rm_temp_finish: flushes, syncs and closes; removes the
 * file when rc (or this) fails; tmp stays the caller's. */
remat_status rm_temp_close(const char *call, remat_status rc, FILE *fp, const char *tmp);
remat_status rm_temp_finish(const char *call, remat_status rc, FILE *fp, char *tmp,
                            const char *path);
remat_status rm_write_file_atomic(const char *call, const char *path, const void *data, size_t n);

#endif
