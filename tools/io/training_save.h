/*
 * tools/io/training_save.h — `remat train --save / --resume`: model + optimizer +
 * RNG state + step in one binary file (format: docs/file-format.md).
 *
 * Writing is crash-safe: the bytes go to a temporary file in the same
 * directory, which is fsync'ed and renamed over the target (then the
 * directory is fsync'ed), so the target is either the old file or the
 * complete new one. Reading checks magic, version, size and a CRC-32
 * before anything is used; a truncated or corrupt file is an error that
 * says which check failed.
 */
#ifndef REMAT_TOOLS_SAVEFILE_H
#define REMAT_TOOLS_SAVEFILE_H

#include <stddef.h>
#include <stdint.h>

#include "remat/savefile.h"

#include "cli/args.h"
#include "data.h"
#include "train/models.h"

#define SAVEFILE_MAGIC REMAT_SAVEFILE_MAGIC
#define SAVEFILE_VERSION REMAT_SAVEFILE_VERSION

typedef struct saved_tensor {
    const char *name; /* points into the file image (not NUL-terminated) */
    uint32_t name_len;
    uint32_t dtype, ndim;
    int64_t shape[8];
    uint64_t nbytes;
    const unsigned char *data;
} saved_tensor;

typedef struct saved_state {
    unsigned char *image; /* whole file */
    size_t size;
    /* header */
    uint32_t model, layers, width, heads, context, vocab, untied, optim, batch;
    double lr, weight_decay, momentum, beta1, beta2, eps;
    uint64_t seed;
    int64_t step, optim_t;
    uint8_t rng[32];
    uint32_t task, data_crc; /* task_kind; CRC-32 of the --data file (text task) */
    uint64_t data_bytes;
    /* version 2: the schedule flags (has_schedule false for a version-1 file) */
    bool has_schedule;
    uint32_t schedule, accum;
    uint64_t warmup;
    double min_lr, clip;
    uint32_t n_tensors;
    saved_tensor *tensors;
} saved_state;

/* Writes the state after `step` steps. Sets the remat error on failure. */
int savefile_write(const char *path, const config *c, const task *t, const model *m,
                   const remat_optimizer *o, int64_t step);
/* Reads and validates a file (REMAT_EIO / REMAT_EFORMAT with a message). */
int savefile_read(const char *path, saved_state *s);
void savefile_free(saved_state *s);
/* Puts the file's model settings into c; an explicitly given flag that
 * disagrees with the file is an error. The training settings (--lr,
 * --weight-decay, --momentum, --lr-schedule, --warmup, --min-lr, --clip,
 * --accum) come from the file unless given: a resumed run continues the same
 * schedule. */
int savefile_merge_config(const saved_state *s, const char *path, config *c);
/* The file's model shape (model, layers, width, heads, context, untied;
 * batch and optimizer kind) into c, with no checks against flags. */
void savefile_model_config(const saved_state *s, config *c);
/* Copies the parameters (not the optimizer state) into m, made from the
 * file's model config. */
int savefile_load_params(const saved_state *s, const char *path, model *m);
/* Checks that the run continues on the same data: a run trained on a text
 * file needs --data (error otherwise); a file with other contents gets a
 * warning; a built-in task must stay the same. */
int savefile_check_task(const saved_state *s, const char *path, const task *t);
/* Copies parameters and optimizer state into m and o (made from the merged
 * config over m's parameters), restores the optimizer's update count and
 * the cpu RNG, and returns the step in *step. */
int savefile_restore(const saved_state *s, const char *path, model *m, remat_optimizer *o,
                     int64_t *step);

/* The bytes (*n of them, not NUL-terminated; in the file's image) of the
 * file's text record `name`, or NULL when it has none: "hf.config" (a
 * Hugging Face model's config.json) and "hf.dir" (its directory's path). */
const char *savefile_record(const saved_state *s, const char *name, size_t *n);

/* CRC-32 (IEEE 802.3, as zlib's crc32) of n bytes. */
uint32_t savefile_crc32(const void *data, size_t n);

#endif /* REMAT_TOOLS_SAVEFILE_H */
