/* tools/report/svg_layout.c — marker and label placement for the plots (see svg_layout.h). */
#include "svg_layout.h"

#include <math.h>
#include <stdlib.h>

void svg_obstacles_add_box(svg_obstacles *o, svg_box b) {
    if (o->nbox == o->capbox) {
        int cap = o->capbox ? 2 * o->capbox : 64;
        svg_box *nb = realloc(o->box, sizeof *nb * (size_t)cap);
        if (!nb) return;
        o->box = nb;
        o->capbox = cap;
    }
    o->box[o->nbox++] = b;
}

void svg_obstacles_add_seg(svg_obstacles *o, double x1, double y1, double x2, double y2) {
    if (o->nseg == o->capseg) {
        int cap = o->capseg ? 2 * o->capseg : 64;
        double(*ns)[4] = realloc(o->seg, sizeof *ns * (size_t)cap);
        if (!ns) return;
        o->seg = ns;
        o->capseg = cap;
    }
    double *e = o->seg[o->nseg++];
    e[0] = x1, e[1] = y1, e[2] = x2, e[3] = y2;
}

void svg_obstacles_free(svg_obstacles *o) {
    if (!o) return;
    free(o->box);
    free(o->seg);
    o->box = NULL;
    o->seg = NULL;
    o->nbox = o->capbox = o->nseg = o->capseg = 0;
}

/* Liang-Barsky: clip the segment's parameter range [0, 1] to each slab. */
bool svg_seg_hits_box(const double seg[4], svg_box b) {
    double x = seg[0], y = seg[1], dx = seg[2] - seg[0], dy = seg[3] - seg[1], t0 = 0, t1 = 1;
    const double p[4] = {-dx, dx, -dy, dy}, q[4] = {x - b.x0, b.x1 - x, y - b.y0, b.y1 - y};
    for (int k = 0; k < 4; k++) {
        if (p[k] == 0) {
            if (q[k] < 0) return false; /* parallel to this slab and outside it */
            continue;
        }
        double t = q[k] / p[k];
        if (p[k] < 0) t0 = fmax(t0, t);
        else t1 = fmin(t1, t);
        if (t0 > t1) return false;
    }
    return true;
}

bool svg_place_free(const svg_obstacles *o, svg_box b, svg_box area) {
    if (b.x0 < area.x0 || b.x1 > area.x1 || b.y0 < area.y0 || b.y1 > area.y1) return false;
    for (int k = 0; k < o->nbox; k++) {
        const svg_box *c = &o->box[k];
        if (b.x0 < c->x1 && c->x0 < b.x1 && b.y0 < c->y1 && c->y0 < b.y1) return false;
    }
    for (int k = 0; k < o->nseg; k++)
        if (svg_seg_hits_box(o->seg[k], b)) return false;
    return true;
}

double svg_dodge_x(const double (*placed)[2], int n, double x, double y, double gap) {
    for (int k = 0; k <= 2 * n; k++) {
        /* x, x + gap, x - gap, x + 2 gap, x - 2 gap, ... */
        int step = (k + 1) / 2;
        double cand = x + gap * step * (k % 2 ? 1 : -1);
        bool free_here = true;
        for (int j = 0; j < n && free_here; j++)
            free_here = hypot(cand - placed[j][0], y - placed[j][1]) >= gap;
        if (free_here) return cand;
    }
    return x; /* not reached: a marker closer than gap blocks at most two of the 2n + 1 places */
}
