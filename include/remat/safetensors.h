/*
 * remat/safetensors.h — reading and writing weights in the safetensors
 * format (the format of Hugging Face model files and of PyTorch's
 * `safetensors` package), single files and sharded checkpoints.
 *
 * The format: an 8-byte little-endian header length N, N bytes of JSON
 * (UTF-8) mapping each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} plus an optional "__metadata__" object of string values,
 * then the data section: each tensor's elements little-endian, row-major,
 * at [begin, end) of the section. A sharded checkpoint is a JSON index
 * ("model.safetensors.index.json") whose "weight_map" names the file of
 * every tensor.
 *
 * Reading trusts nothing in a file. Every size, offset and string is checked
 * before use, as the `safetensors` package checks them: the header must be
 * valid UTF-8 JSON with no duplicate names; each tensor's shape times its
 * dtype's size must equal its byte range; the ranges must lie in the data
 * section, must not overlap and must cover it without holes. A file that
 * fails a check is REMAT_EFORMAT (a truncated or unreadable one REMAT_EIO,
 * REMAT_EFORMAT when its header length runs past its end), and
 * remat_last_error() names the file, the tensor and the check.
 *
 * Loading is all or nothing (remat_safetensors_load): every file is mapped
 * and checked, and every tensor matched against the parameters (names,
 * shapes, dtypes), before the first parameter is written; on any error no
 * parameter is changed. Files are memory-mapped (mmap), and the data flows
 * from the mapping into the parameters a window at a time, the window's
 * pages released after use: loading needs no second copy of the model
 * (peak resident memory stays within the parameters' bytes plus some
 * 16 MiB; bench/bench_safetensors.c measures it).
 *
 * Dtypes: the file's F64, F32, F16, BF16 load into f64, f32 or bf16
 * parameters (converted as PyTorch's Tensor.to converts: rounded to
 * nearest even); I64, I32, I16, I8, U32, U8, BOOL into i64 parameters
 * (U8 and BOOL also into u8). Other dtypes (U64, U16, F8_*) are understood
 * (their files are checked) but not loaded: REMAT_EDTYPE naming the
 * tensor. Writing stores each tensor in its own dtype (f32 F32, f64 F64,
 * bf16 BF16, i64 I64, u8 U8). remat assumes a little-endian host, like
 * the format.
 *
 * Thread safety: no global state; a remat_safetensors object is read-only
 * after it is opened and may be read from several threads.
 */
#ifndef REMAT_SAFETENSORS_H
#define REMAT_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/error.h"
#include "remat/params.h"
#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* The largest header read (the `safetensors` package's limit). */
#define REMAT_SAFETENSORS_MAX_HEADER 100000000u

/* One tensor of an opened file. Every pointer points into the file object
 * and lives as long as it. */
typedef struct remat_safetensors_tensor {
    const char *name;  /* NUL-terminated UTF-8 */
    const char *dtype; /* the header's dtype: "F32", "BF16", "I64", ... */
    int ndim;          /* 0 (a scalar) to REMAT_MAX_DIMS */
    int64_t shape[REMAT_MAX_DIMS];
    uint64_t begin, end; /* the header's data_offsets: bytes of the data section */
    const void *data;    /* end - begin bytes, little-endian, maybe unaligned */
} remat_safetensors_tensor;

/* An opened, checked safetensors file (or buffer). */
typedef struct remat_safetensors remat_safetensors;

/* Maps the file at `path` read-only and checks it (see above): *out gets
 * the file object, freed with remat_safetensors_close. REMAT_EIO when the
 * file cannot be opened or mapped, REMAT_EFORMAT when it is not a valid
 * safetensors file, REMAT_EUNSUPPORTED for a tensor of more than
 * REMAT_MAX_DIMS dims, REMAT_ENOMEM; *out is NULL then. */
remat_status remat_safetensors_open(remat_safetensors **out, const char *path);

/* The same checks on a file image already in memory: `data` (size bytes)
 * is borrowed and must outlive the object; `name` (may be NULL: "buffer";
 * copied) is what messages call it. */
remat_status remat_safetensors_parse(remat_safetensors **out, const void *data, size_t size,
                                     const char *name);

/* Unmaps and frees. NULL → no-op. */
void remat_safetensors_close(remat_safetensors *f);

/* Number of tensors; tensor i in the header's order (NULL when out of
 * range); the tensor named `name` (NULL when the file has none). */
int64_t remat_safetensors_count(const remat_safetensors *f);
const remat_safetensors_tensor *remat_safetensors_at(const remat_safetensors *f, int64_t i);
const remat_safetensors_tensor *remat_safetensors_find(const remat_safetensors *f,
                                                       const char *name);

/* The "__metadata__" entries: their number, entry i (key and value, both
 * NUL-terminated; REMAT_EINVAL when out of range), the value of `key`
 * (NULL when absent). */
int64_t remat_safetensors_metadata_count(const remat_safetensors *f);
remat_status remat_safetensors_metadata_at(const remat_safetensors *f, int64_t i,
                                           const char **key /* OUT */,
                                           const char **value /* OUT */);
const char *remat_safetensors_metadata(const remat_safetensors *f, const char *key);

/* A new contiguous cpu tensor (requires_grad off) holding tensor `name`
 * converted to `dtype` (the conversions above). REMAT_EINVAL when the file
 * has no such tensor, REMAT_EDTYPE when it cannot be converted,
 * REMAT_ENOMEM. */
remat_status remat_safetensors_get(remat_tensor **out, const remat_safetensors *f, const char *name,
                                   remat_dtype dtype);

/* What remat_safetensors_load accepts besides an exact match. A
 * zero-initialised struct (or NULL) is strict, as PyTorch's
 * load_state_dict(strict=True). */
typedef struct remat_load_options {
    bool allow_missing;    /* parameters the files lack keep their values */
    bool allow_unexpected; /* tensors the files have but `params` lacks are ignored */
} remat_load_options;

/* Loads the tensors of `path` into the parameters of the same names, in
 * place (each converted to its parameter's dtype and copied to its device;
 * the storage's version counter is bumped; autograd does not record it).
 * `path` is a .safetensors file, or a sharded checkpoint's index (a path
 * ending in ".json"), whose shards are read from the index's directory.
 *
 * All or nothing: REMAT_EFORMAT / REMAT_EIO for a bad file or index,
 * REMAT_EINVAL for a tensor of the files that no parameter has or a
 * parameter that no file has (unless `opts` allows it), REMAT_ESHAPE for a
 * shape that differs from its parameter's, REMAT_EDTYPE for a dtype that
 * cannot be converted, REMAT_ESTATE for a parameter without data; the
 * message names the file and the tensor, and no parameter has been
 * written. (Only a device copy failing midway, on a non-cpu device, can
 * leave some parameters loaded and others not.) `opts` may be NULL. */
remat_status remat_safetensors_load(remat_params *params, const char *path,
                                    const remat_load_options *opts);

/* Every tensor of `path` (a .safetensors file or a sharded checkpoint's
 * index, as remat_safetensors_load) as a new contiguous cpu tensor in a new
 * collection (*out; the caller frees it with remat_params_free, which
 * drops the tensors unless the caller retained them), in the file's order
 * (an index's weight_map order): P's safetensors.torch.load_file. Float
 * tensors are converted to `floats` (f32, f64 or bf16), integers to i64,
 * U8 and BOOL to u8. This copies the whole checkpoint into memory; to load
 * a model's parameters in place, use remat_safetensors_load. REMAT_EDTYPE
 * for a tensor of a dtype remat does not read (U64, U16, F8_*), the file
 * errors of remat_safetensors_open, REMAT_ENOMEM; *out is NULL then. */
remat_status remat_safetensors_read(remat_params **out, const char *path, remat_dtype floats);

/* Writes every tensor of `params` (in their order in the header; the data
 * laid out largest element size first, so each tensor is aligned to its
 * element size in the file) with `n_metadata` "__metadata__" entries from
 * `metadata` (key, value, key, value, ...: 2 * n_metadata UTF-8 strings;
 * NULL when n_metadata is 0). Any device, any strides. The file is written
 * under a temporary name beside `path` and renamed over it once complete:
 * a failed save leaves no partial file. REMAT_EINVAL for a name that is
 * "__metadata__" or a bad metadata string, REMAT_EDTYPE, REMAT_ESTATE for a
 * tensor without data, REMAT_EIO (naming the path and the system's
 * reason), REMAT_ENOMEM. */
remat_status remat_safetensors_save(const char *path, const remat_params *params, int n_metadata,
                                    const char *const *metadata);

/* Writes `params` into the directory `dir` (which must exist) as
 * huggingface_hub's save_torch_state_dict and transformers' save_pretrained
 * write a checkpoint: the tensors, in the collection's order, cut into
 * shards of at most `max_shard_bytes` of data (a new shard when the next
 * tensor would carry the current one past it; a tensor larger than that in
 * a shard of its own, numbered where it comes), written as
 * "<stem>-00001-of-0000N.safetensors", ... (each as remat_safetensors_save
 * writes a file, with the metadata) plus "<stem>.safetensors.index.json"
 * (metadata total_parameters and total_size; weight_map, sorted, naming
 * every tensor's shard). When everything fits in one shard: the single
 * file "<stem>.safetensors" and no index. `stem` NULL is "model".
 *
 * The shards are all written under temporary names before any is renamed,
 * then the index is written; a failure up to there leaves `dir` as it was.
 * Then what an earlier save of the same stem left that the new files do not
 * replace is removed: shards of another count, the single file beside new
 * shards (readers take it before an index), the index beside a new single
 * file. Errors: those of remat_safetensors_save; REMAT_EINVAL for
 * max_shard_bytes <= 0 or a stem that is not a plain file name, REMAT_EIO
 * when `dir` is not a directory. remat_safetensors_load reads the index. */
remat_status remat_safetensors_save_sharded(const char *dir, const char *stem,
                                            const remat_params *params, int64_t max_shard_bytes,
                                            int n_metadata, const char *const *metadata);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_SAFETENSORS_H */
