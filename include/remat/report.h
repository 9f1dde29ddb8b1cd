/*
 * remat/report.h — residual reports: every tensor saved for backward during
 * a region of code (a step, a block), with the op that saved it, its name,
 * shape, dtype, bytes and call site, plus totals per op (PyTorch has none; JAX:
 * jax.ad_checkpoint.print_saved_residuals).
 *
 *   remat_residual_report *rep;
 *   remat_residual_report_begin(&rep);
 *   ... forward pass ...
 *   remat_residual_report_end(rep);
 *   remat_residual_report_print(rep, stderr);
 *   remat_residual_report_free(rep);
 *
 * Bytes: each entry has the bytes of the saved view (numel * element size)
 * and of its storage. Totals count each distinct storage once (views of
 * one activation saved by several ops share a storage), so
 * unique_bytes is what the saved tensors occupy. Storages are told apart
 * by address: a storage freed during the recording whose address is
 * reused by a later saved storage counts once.
 *
 * "Kept" entries were saved with no saved-tensor hooks in force and outside
 * backward: the graph itself holds them until backward. Other entries went
 * through hooks (a checkpoint's placeholders, offload or compression hooks:
 * what stays in memory is up to the hooks) or were saved by a
 * recomputation during backward.
 *
 * Call site: the return address in the code that called the public op
 * (remat_linear, ...) that saved the tensor, symbolised with dladdr as
 * "function+0xoffset (module)" when the symbol is exported (link with
 * -rdynamic) or "module(+0xoffset)" otherwise (addr2line -e module offset
 * gives file:line). Tensors saved outside ops (custom functions, the
 * checkpoint's input saver) have no site.
 *
 * Recording uses the process-wide save observer (remat_set_save_observer):
 * one report records at a time, from every thread, and no other save
 * observer may be installed meanwhile.
 */
#ifndef REMAT_REPORT_H
#define REMAT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

typedef struct remat_residual {
    const char *op;   /* graph node that saved it, e.g. "LinearBackward" */
    const char *call; /* public op running when it was saved ("remat_linear"), or NULL */
    char name[64];    /* the tensor's name (remat_set_name / remat_tag), "" if none */
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    remat_dtype dtype;
    remat_device device;
    size_t bytes;         /* numel * element size of the saved view */
    size_t storage_bytes; /* bytes of the storage behind it */
    bool new_storage;     /* first entry on its storage: counted in the totals */
    bool hooked;          /* saved through saved-tensor hooks */
    bool in_backward;     /* saved during a backward pass (a recomputation) */
    void *site;           /* return address in the caller of `call`; NULL if unknown */
    char site_str[192];   /* site symbolised, "" if unknown */
} remat_residual;

typedef struct remat_residual_totals {
    int count;           /* entries */
    size_t bytes;        /* sum of the entries' view bytes */
    size_t unique_bytes; /* distinct storages, each counted once */
    size_t kept_bytes;   /* distinct storages of the kept entries (no hooks, not in backward) */
} remat_residual_totals;

typedef struct remat_residual_op_total {
    const char *op; /* node name */
    int count;
    size_t bytes;        /* sum of view bytes */
    size_t unique_bytes; /* storages first seen in an entry of this op */
} remat_residual_op_total;

typedef struct remat_residual_report remat_residual_report;

/* Starts recording. REMAT_ESTATE if another report is recording,
 * REMAT_EINVAL for NULL out, REMAT_ENOMEM. */
remat_status remat_residual_report_begin(remat_residual_report **out);
/* Stops recording (the report stays readable). REMAT_ESTATE if r is not
 * the recording report. */
remat_status remat_residual_report_end(remat_residual_report *r);
/* Stops recording if needed and frees. NULL → no-op. */
void remat_residual_report_free(remat_residual_report *r);

int remat_residual_report_count(const remat_residual_report *r);
/* Entry i (borrowed, valid until the report is freed), NULL if out of range. */
const remat_residual *remat_residual_report_entry(const remat_residual_report *r, int i);
/* Totals over all entries. */
remat_status remat_residual_report_totals(const remat_residual_report *r, remat_residual_totals *t);
/* Per-op totals, in order of first appearance. */
int remat_residual_report_n_ops(const remat_residual_report *r);
const remat_residual_op_total *remat_residual_report_op(const remat_residual_report *r, int i);
/* Totals of one op by node name; a zeroed struct if absent. */
remat_residual_op_total remat_residual_report_op_named(const remat_residual_report *r,
                                                       const char *op);

/* Writes the human-readable report (one line per entry, per-op totals,
 * grand totals) to f. REMAT_EIO on a write error. */
remat_status remat_residual_report_print(const remat_residual_report *r, FILE *f);
/* The same text into buf (always NUL-terminated when n > 0); returns the
 * length the full text needs (as snprintf). */
size_t remat_residual_report_format(const remat_residual_report *r, char *buf, size_t n);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_REPORT_H */
