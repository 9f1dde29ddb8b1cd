/*
 * tools/report/svg.h — plots as standalone SVG files (no dependencies).
 *
 *  - svg_timeline: allocator memory over one step, one panel per trace on a
 *    shared time and memory scale, with forward / backward / recompute /
 *    optimizer phases shaded.
 *  - svg_tradeoff: peak memory against step time, one point per strategy.
 *  - svg_pareto: step time against peak memory, uniform segments
 *    (sequential=N) and planned budgets (budget=SIZE) drawn apart, with the
 *    Pareto front of all points.
 */
#ifndef REMAT_TOOLS_SVG_H
#define REMAT_TOOLS_SVG_H

#include <stdbool.h>
#include <stddef.h>

#include "alloc_trace.h"

bool svg_timeline(const char *path, const char *title, int n, const trace *const *traces,
                  const char *const *labels);

typedef struct tradeoff_point {
    const char *label;
    double step_ms;
    double peak_bytes;     /* allocator peak during the step */
    double baseline_bytes; /* allocator bytes before the step (parameters, state) */
} tradeoff_point;
bool svg_tradeoff(const char *path, const char *title, int n, const tradeoff_point *pts);

typedef enum pareto_kind {
    PARETO_NONE = 0,    /* no checkpointing */
    PARETO_UNIFORM = 1, /* sequential=N */
    PARETO_PLANNED = 2, /* budget=SIZE */
    PARETO_OTHER = 3,   /* block, ... */
    PARETO_BLOCKS = 4   /* budget=SIZE:blocks-only (whole blocks) */
} pareto_kind;
typedef struct pareto_point {
    const char *label;
    pareto_kind kind;
    int segments;        /* PARETO_UNIFORM: N */
    double budget_bytes; /* PARETO_PLANNED, PARETO_BLOCKS: the budget */
    double step_ms;
    double peak_bytes;     /* allocator peak during the step */
    double baseline_bytes; /* allocator bytes before the step */
} pareto_point;
/* subtitle may be NULL. */
bool svg_pareto(const char *path, const char *title, const char *subtitle, int n,
                const pareto_point *pts);

#endif /* REMAT_TOOLS_SVG_H */
