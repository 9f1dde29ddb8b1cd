/* tools/train/bench.h — `remat bench`. */
#ifndef REMAT_TOOLS_BENCH_H
#define REMAT_TOOLS_BENCH_H

#include "cli/args.h"

/* Runs the strategies of c side by side; returns the process exit status.
 * is_default: run as `remat` with no command (prints a short explanation). */
int cmd_bench(config *c, bool is_default);

#endif /* REMAT_TOOLS_BENCH_H */
