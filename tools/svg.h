/*
 * tools/svg.h — plots as standalone SVG files (no dependencies).
 *
 *  - svg_timeline: allocator memory over one step, one panel per trace on a
 *    shared time and memory scale, with forward / backward / recompute /
 *    optimizer phases shaded.
 *  - svg_tradeoff: peak memory against step time, one point per strategy.
 */
#ifndef REMAT_TOOLS_SVG_H
#define REMAT_TOOLS_SVG_H

#include <stdbool.h>
#include <stddef.h>

#include "trace.h"

bool svg_timeline(const char *path, const char *title, int n, const trace *const *traces,
                  const char *const *labels);

typedef struct tradeoff_point {
    const char *label;
    double step_ms;
    double peak_bytes;     /* allocator peak during the step */
    double baseline_bytes; /* allocator bytes before the step (parameters, state) */
} tradeoff_point;
bool svg_tradeoff(const char *path, const char *title, int n, const tradeoff_point *pts);

#endif /* REMAT_TOOLS_SVG_H */
