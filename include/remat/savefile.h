/*
 * remat/savefile.h — the save-file format of `remat train --save`
 * (docs/file-format.md), parsed from memory.
 *
 * The parser takes a buffer, never a path: the program reads the file (and
 * decides which files it opens); fuzzers and tests call it directly. It
 * trusts nothing in the buffer: every size and offset is checked against
 * the buffer before use, and a bad file is REMAT_EFORMAT with a message
 * naming the check that failed (callers prefix the file's name).
 *
 * Reading in two steps lets a program refuse a file by its header before
 * reading the rest: remat_savefile_parse_header on the first
 * REMAT_SAVEFILE_PREFIX_BYTES bytes, then remat_savefile_parse on the
 * whole image. Thread-safe (no global state).
 */
#ifndef REMAT_SAVEFILE_H
#define REMAT_SAVEFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

#define REMAT_SAVEFILE_MAGIC "REMATSAV"
#define REMAT_SAVEFILE_VERSION 2u           /* written; versions 1 and 2 are read */
#define REMAT_SAVEFILE_PREAMBLE_BYTES 24u   /* magic, version, header size, file size */
#define REMAT_SAVEFILE_HEADER_BYTES 192u    /* the version-2 fixed header */
#define REMAT_SAVEFILE_HEADER_BYTES_V1 160u /* the version-1 fixed header */
#define REMAT_SAVEFILE_PREFIX_BYTES 216u    /* preamble + the longest header */
#define REMAT_SAVEFILE_MAX_TENSORS 1000000u
#define REMAT_SAVEFILE_MAX_NAME 256u

/* The fixed header (field meanings: docs/file-format.md). */
typedef struct remat_savefile_header {
    uint32_t model, layers, width, heads, context, vocab, untied, optim, batch, n_tensors;
    double lr, weight_decay, momentum, beta1, beta2, eps;
    uint64_t seed;
    int64_t step, optim_t;
    uint8_t rng[32];
    uint32_t task, data_crc;
    uint64_t data_bytes;
    /* version 2: the training schedule (a version-1 file reads as constant
     * lr, no warm-up, no clipping, accum 1, and has_schedule false) */
    uint32_t version;
    bool has_schedule;
    uint32_t schedule; /* 0 constant, 1 linear warm-up + cosine */
    uint32_t accum;    /* micro-batches per optimizer step */
    uint64_t warmup;   /* warm-up steps */
    double min_lr, clip;
} remat_savefile_header;

/* One tensor record; name and data point into the parsed buffer. */
typedef struct remat_saved_record {
    const char *name; /* not NUL-terminated */
    uint32_t name_len;
    uint32_t dtype, ndim;
    int64_t shape[REMAT_MAX_DIMS];
    uint64_t nbytes;
    const unsigned char *data;
} remat_saved_record;

/* CRC-32 (IEEE 802.3) of n bytes: zlib's crc32. */
uint32_t remat_crc32(const void *data, size_t n);

/* Checks the preamble (magic, a version this remat reads, its header size, and that the size it
 * records equals file_size) and decodes the fixed header from `prefix`, the
 * first n bytes of the file (n >= min(file_size, REMAT_SAVEFILE_PREFIX_BYTES)).
 * No CRC check (it needs the whole file). REMAT_EFORMAT on a bad file,
 * REMAT_EINVAL on NULL arguments or n too small. */
remat_status remat_savefile_parse_header(const void *prefix, size_t n, uint64_t file_size,
                                         remat_savefile_header *out);

/* Parses a whole file image of n bytes: what remat_savefile_parse_header
 * checks, then the CRC-32, then every tensor record (inside the file, a
 * dtype remat knows, at most REMAT_MAX_DIMS dims, data size = shape x dtype
 * size, no stray bytes). *records (NULL when there are none) receives a
 * malloc'd array of hdr->n_tensors records pointing into buf; free() it.
 * On failure nothing is allocated and *records is NULL. */
remat_status remat_savefile_parse(const void *buf, size_t n, remat_savefile_header *hdr,
                                  remat_saved_record **records);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_SAVEFILE_H */
