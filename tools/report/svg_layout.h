/*
 * tools/report/svg_layout.h — where the plots' markers and labels go: geometry
 * only (no SVG text), so that it can be tested on its own.
 *
 *   - a marker that would cover one already drawn moves sideways
 *     (svg_dodge_x): tradeoff.svg, where two strategies of about the same
 *     time and memory used to print one numbered circle over the other;
 *   - a label goes where it meets no obstacle (svg_place_free): markers,
 *     labels already placed and line segments (the Pareto front and the
 *     planner's curve in pareto.svg, which used to strike labels through).
 */
#ifndef REMAT_TOOLS_SVG_LAYOUT_H
#define REMAT_TOOLS_SVG_LAYOUT_H

#include <stdbool.h>

typedef struct svg_box {
    double x0, y0, x1, y1; /* x0 <= x1, y0 <= y1 (SVG pixels) */
} svg_box;

/* Boxes and segments a label must not meet. Grows as needed; a failed
 * allocation drops the obstacle (the worst outcome is an overlap). */
typedef struct svg_obstacles {
    svg_box *box;
    int nbox, capbox;
    double (*seg)[4]; /* x1, y1, x2, y2 */
    int nseg, capseg;
} svg_obstacles;

void svg_obstacles_add_box(svg_obstacles *o, svg_box b);
void svg_obstacles_add_seg(svg_obstacles *o, double x1, double y1, double x2, double y2);
/* Frees the arrays (o itself is the caller's); NULL-safe. */
void svg_obstacles_free(svg_obstacles *o);

/* Whether the segment seg (x1, y1, x2, y2) meets box b (edges included). */
bool svg_seg_hits_box(const double seg[4], svg_box b);
/* Whether b lies inside area and meets none of o's boxes and segments. */
bool svg_place_free(const svg_obstacles *o, svg_box b, svg_box area);

/* The x at which a marker for the point (x, y) goes: x itself when no
 * marker in placed[0..n) (centres) is closer than gap, else the nearest of
 * x ± gap, x ± 2 gap, ... that is free. */
double svg_dodge_x(const double (*placed)[2], int n, double x, double y, double gap);

#endif /* REMAT_TOOLS_SVG_LAYOUT_H */
