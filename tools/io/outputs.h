/*
 * tools/io/outputs.h — the files a run writes, checked before its first step,
 * and --save's claim on its path.
 *
 * A run that trains for an hour and then cannot write its --save or --log
 * (a missing directory, a directory where the file should be, no write
 * permission, two flags naming one file) has lost the hour: outputs_check
 * finds these at the start. Two runs saving to one path would each write a
 * temporary file next to it and rename it over the other's file (and each
 * save used to remove the other's temporaries): outputs_claim makes the
 * second one fail at its start with a message naming the first.
 */
#ifndef REMAT_TOOLS_IO_OUTPUTS_H
#define REMAT_TOOLS_IO_OUTPUTS_H

#include "cli/args.h"

/* Every output path of the command (train: --export, --save, --log, --trace,
 * --timeline; bench: --out, --svg, --svg-pareto, --trace) can be written:
 * an existing one is not a directory (--save: a regular file; --export and
 * --out: a directory) and is writable, a new one's directory exists and is
 * writable (--export, --out: the nearest existing ancestor), no two name one
 * file, and none is an input (--data, --init-from, or --resume unless it is
 * --save's own path). 0, or an error
 * naming the flag and the path. Paths other ranks dropped are not checked. */
int outputs_check(const config *c, command cmd);

/* --save's claim: an advisory lock (flock) on PATH.lock, held until
 * outputs_release (or the process ends). */
typedef struct output_claim {
    int fd;     /* -1: none */
    char *lock; /* PATH.lock */
} output_claim;
/* Claims path for this process; REMAT_EIO naming the other process when
 * another run holds it. path NULL: nothing to claim. */
int outputs_claim(output_claim *cl, const char *path);
/* Removes the lock file and releases the claim. NULL or unclaimed: no-op. */
void outputs_release(output_claim *cl);

#endif
